/* URL redaction (core/redact.h) for every URL shape, and the config dump / hash, which must never carry a queue
 * password. */
#include <stdlib.h>
#include <string.h>

#include "cli/config_keys.h"
#include "core/config.h"
#include "core/redact.h"
#include "queue/redis.h"
#include "tests/check.h"

static void shown(const char *url, const char *want) {
    char out[512];
    cpt_redact_url(url, out, sizeof out);
    CHECK_EQ_STR(out, want);
    CHECK_EQ_INT(cpt_url_has_secret(url), strcmp(url, want) != 0);
    char q[512];
    cpt_redis_url_redacted(url, q, sizeof q); /* the queue's form is the same */
    CHECK_EQ_STR(q, want);
}

static void test_shapes(void) {
    shown("redis://:pw@host:6379/0", "redis://:***@host:6379/0");
    shown("redis://alice:pw@host", "redis://alice:***@host");
    shown("rediss://alice:pw@host:6380/2", "rediss://alice:***@host:6380/2");
    shown("redis://:s3cr%40t@[::1]:7001", "redis://:***@[::1]:7001");
    shown("redis://:p@ss@host:1/0", "redis://:***@host:1/0");          /* an unescaped '@' in the password */
    shown("redis://:pa/ss@host:1/0", "redis://:***@host:1/0");         /* an unescaped '/' in the password */
    shown("redis://:pa?db=1@host", "redis://:***@host");               /* a '?' in the password */
    shown("redis://:@host", "redis://:***@host");                      /* an empty password */
    shown("redis://host:6379/0?password=pw", "redis://host:6379/0?password=***");
    shown("redis://host?db=1&Token=t0k&x=1", "redis://host?db=1&Token=***&x=1");
    shown("redis://:pw@host?auth=a2", "redis://:***@host?auth=***");
    /* no secret: unchanged */
    shown("redis://alice@host:6379", "redis://alice@host:6379");
    shown("redis://host:6379/3", "redis://host:6379/3");
    shown("unix:///run/x/redis.sock?db=2", "unix:///run/x/redis.sock?db=2");
    shown("", "");
    shown("a:b@c is not a url", "a:b@c is not a url");
    shown("(?password=x)", "(?password=x)"); /* a regex, not a URL */
    char out[16];
    cpt_redact_url("redis://:a-very-long-password@host", out, sizeof out); /* truncation keeps it hidden */
    CHECK(!strstr(out, "very"));
    CHECK_EQ_STR(out, "redis://:***@ho");
    cpt_redact_url(NULL, out, sizeof out);
    CHECK_EQ_STR(out, "(none)");
}

static void test_config_dump(void) {
    char *ov1[] = {"queue.url=redis://alice:s3cret@node-1:6400/0", "reward.plugin_config=https://u:k3y@api.example"};
    cpt_err err = {{0}};
    cpt_config *a = cpt_config_load(NULL, 2, ov1, &err);
    CHECK_MSG(a != NULL, "%s", err.msg);
    char *ov2[] = {"queue.url=redis://alice:other@node-1:6400/0", "reward.plugin_config=https://u:k3y@api.example"};
    cpt_config *b = cpt_config_load(NULL, 2, ov2, &err);
    CHECK_MSG(b != NULL, "%s", err.msg);
    if (!a || !b) return;
    char *text = cpt_config_dump(a);
    CHECK(text != NULL);
    CHECK(text && !strstr(text, "s3cret"));
    CHECK(text && strstr(text, "url = \"redis://alice:***@node-1:6400/0\""));
    /* a plugin's config is not a connection URL: written as it is, since the roles read it back from the dump
     * (`cpt config show` hides it when printing) */
    CHECK(text && strstr(text, "plugin_config = \"https://u:k3y@api.example\""));
    /* the hash does not depend on the password either (it is printed in the dump and in checkpoints) */
    CHECK(cpt_config_hash(a) == cpt_config_hash(b));
    /* the loaded value itself keeps the password: only what is printed or written hides it */
    CHECK_EQ_STR(cpt_cfg_str(a, "queue.url"), "redis://alice:s3cret@node-1:6400/0");
    free(text);
    cpt_config_free(a);
    cpt_config_free(b);
}

int main(void) {
    test_shapes();
    test_config_dump();
    return check_summary("test_redact");
}
