#include "queue/release.h"

#include <stdio.h>
#include <string.h>

/* Up to this many entries per call: a worker holds a handful of groups; anything beyond is claimed after
 * claim_idle_ms as before. */
#define RELEASE_MAX 128

long cpt_queue_release_consumer(cpt_redis *r, const char *key, const char *group, const char *consumer,
                                long long claim_idle_ms, cpt_err *err) {
    char idle[24], count[16];
    snprintf(idle, sizeof idle, "%lld", claim_idle_ms + 1000);
    snprintf(count, sizeof count, "%d", RELEASE_MAX);
    const char *pv[] = {"XPENDING", key, group, "-", "+", count, consumer};
    redisReply *p = cpt_redis_command(r, 7, pv, NULL, key, 0, err);
    if (!p) {
        if (strstr(err->msg, "NOGROUP")) return 0; /* nothing was ever read from the stream: nothing is held */
        return -1;
    }
    if (p->type != REDIS_REPLY_ARRAY) {
        freeReplyObject(p);
        return cpt_errf(err, "XPENDING %s %s - + %s %s: unexpected reply", key, group, count, consumer);
    }
    const char *argv[8 + RELEASE_MAX];
    int k = 0;
    argv[k++] = "XCLAIM";
    argv[k++] = key;
    argv[k++] = group;
    argv[k++] = consumer;
    argv[k++] = "0";
    for (size_t i = 0; i < p->elements && i < RELEASE_MAX; i++) {
        /* [id, consumer, idle ms, deliveries]; one already idle past claim_idle_ms (the worker handed it back) is
         * up for claiming as it is */
        redisReply *e = p->element[i];
        if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 || e->element[0]->type != REDIS_REPLY_STRING) continue;
        if (e->element[2]->type == REDIS_REPLY_INTEGER && e->element[2]->integer >= claim_idle_ms) continue;
        argv[k++] = e->element[0]->str;
    }
    long ids = k - 5;
    argv[k++] = "IDLE";
    argv[k++] = idle;
    argv[k++] = "JUSTID";
    if (ids > 0) {
        redisReply *c = cpt_redis_command(r, k, argv, NULL, key, 0, err);
        if (!c) {
            freeReplyObject(p);
            return -1;
        }
        freeReplyObject(c);
    }
    freeReplyObject(p);
    return ids;
}
