/* Fuzzes what a run directory and a config feed the queue client: queue.json and Redis URLs. Beyond not
 * crashing: a URL that parsed with a password is only shown redacted, and a parsed URL's fields respect their
 * bounds. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "queue/conn.h"
#include "queue/redis.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    cpt_err err;
    cpt_queue_conn c;
    (void)cpt_queue_conn_parse((const char *)data, size, "queue.json", &c, &err);

    char url[CPT_REDIS_URL_MAX + 8];
    size_t n = size < sizeof url - 1 ? size : sizeof url - 1;
    memcpy(url, data, n);
    url[n] = '\0';
    cpt_redis_url u;
    char shown[CPT_REDIS_URL_MAX + 8];
    cpt_redis_url_redacted(url, shown, sizeof shown);
    if (cpt_redis_parse_url(url, &u, &err) == 0) {
        if (!u.is_unix && (u.port < 1 || u.port > 65535 || !u.host[0])) abort();
        if (u.is_unix && u.path[0] != '/') abort();
        /* A URL that carried a password is only ever shown redacted. */
        if (u.password[0] && !strstr(shown, ":***@")) abort();
    }
    return 0;
}
