/* The queue against a real redis-server: prompts -> rollouts -> scored round trip through consumer groups,
 * dead letters (malformed, unknown schema, other run), duplicate drop, the hashes, and the private server's
 * socket permissions and AOF. */
#include <sys/stat.h>

#include "tests/check.h"
#include "tests/integration/redis_helper.h"
#include "tests/unit/test_schema_samples.h"

#define N 20

static void round_trip(cpt_queue *q) {
    cpt_err err = {{0}};
    CHECK_EQ_INT(cpt_queue_create_group(q, CPT_STREAM_PROMPTS, "rollout", &err), 0);
    CHECK_EQ_INT(cpt_queue_create_group(q, CPT_STREAM_PROMPTS, "rollout", &err), 0); /* BUSYGROUP tolerated */
    CHECK_EQ_INT(cpt_queue_create_group(q, CPT_STREAM_ROLLOUTS, "reward", &err), 0);
    CHECK_EQ_INT(cpt_queue_create_group(q, CPT_STREAM_SCORED, "trainer", &err), 0);

    for (int i = 0; i < N; i++) {
        sample_prompt s;
        sample_prompt_init(&s, "runA", 0, (uint64_t)i, 8 + (uint32_t)i);
        cpt_buf b;
        CHECK_EQ_INT(cpt_prompt_group_encode(&s.m, &b, &err), 0);
        char id[CPT_STREAM_ID_MAX] = "";
        CHECK_MSG(cpt_queue_add(q, CPT_STREAM_PROMPTS, b.data, b.len, id, &err) == 0, "%s", err.msg);
        CHECK(strchr(id, '-') != NULL);
        cpt_buf_free(&b);
    }
    CHECK_EQ_INT(test_xlen(q, CPT_STREAM_PROMPTS), N);

    /* rollout stage: prompt -> rollout group, forwarded and acked atomically */
    int got = 0, order_ok = 1;
    cpt_queue_item it;
    while (cpt_queue_next(q, CPT_STREAM_PROMPTS, "rollout", "r0", &it, &err) == 1) {
        if (it.prompt.id.index != (uint64_t)got) order_ok = 0;
        CHECK_EQ_INT(it.prompt.n_prompt, 8 + got);
        cpt_rollout_group g = sample_group("runA", 0, it.prompt.id.index, it.prompt.n_samples, 16, 0);
        g.weight_version = 3 + it.prompt.id.index % 2;
        cpt_buf b;
        CHECK_EQ_INT(cpt_rollout_group_encode(&g, &b, &err), 0);
        CHECK_MSG(cpt_queue_forward(q, &it, CPT_STREAM_ROLLOUTS, b.data, b.len, NULL, &err) == 0, "%s", err.msg);
        cpt_buf_free(&b);
        sample_group_free(&g);
        cpt_queue_item_free(&it);
        got++;
    }
    CHECK_EQ_INT(got, N);
    CHECK(order_ok);
    CHECK_EQ_INT(test_pending(q, CPT_STREAM_PROMPTS, "rollout"), 0);

    /* reward stage */
    got = 0;
    while (cpt_queue_next(q, CPT_STREAM_ROLLOUTS, "reward", "w0", &it, &err) == 1) {
        cpt_rollout_group g = it.rollout;
        CHECK_EQ_INT(g.n_completions, 4);
        CHECK_EQ_INT(g.completions[3].n_tokens, 19);
        memset(&it.rollout, 0, sizeof it.rollout); /* take ownership */
        g.has_rewards = 1;
        g.rewards = calloc(g.n_completions, sizeof(double));
        for (uint32_t c = 0; c < g.n_completions; c++) g.rewards[c] = (double)(g.id.index * 10 + c);
        cpt_buf b;
        CHECK_EQ_INT(cpt_rollout_group_encode(&g, &b, &err), 0);
        CHECK_MSG(cpt_queue_forward(q, &it, CPT_STREAM_SCORED, b.data, b.len, NULL, &err) == 0, "%s", err.msg);
        cpt_buf_free(&b);
        cpt_rollout_group_free(&g);
        cpt_queue_item_free(&it);
        got++;
    }
    CHECK_EQ_INT(got, N);

    /* trainer stage: every group once, with its rewards */
    int seen[N] = {0};
    got = 0;
    while (cpt_queue_next(q, CPT_STREAM_SCORED, "trainer", "t0", &it, &err) == 1) {
        uint64_t i = it.rollout.id.index;
        CHECK(i < N);
        if (i < N) seen[i]++;
        CHECK_NEAR(it.rollout.rewards[2], (double)(i * 10 + 2), 0);
        CHECK_EQ_INT(it.rollout.weight_version, 3 + i % 2);
        CHECK_EQ_INT(cpt_queue_done(q, &it, &err), 0);
        cpt_queue_item_free(&it);
        got++;
    }
    CHECK_EQ_INT(got, N);
    int once = 1;
    for (int i = 0; i < N; i++) once &= seen[i] == 1;
    CHECK(once);
    CHECK_EQ_INT(test_pending(q, CPT_STREAM_SCORED, "trainer"), 0);
    /* everything is acked, so a trim empties the streams */
    CHECK_EQ_INT(cpt_queue_trim_consumed(q, CPT_STREAM_PROMPTS, &err), N);
    CHECK_EQ_INT(test_xlen(q, CPT_STREAM_PROMPTS), 0);
}

static void dead_letters_and_duplicates(cpt_queue *q) {
    cpt_err err = {{0}};
    long dead0 = q->stats.dead;
    /* 1 valid, malformed bytes, unknown schema, another run's group, valid, duplicate of the first valid */
    sample_prompt s;
    sample_prompt_init(&s, "runA", 1, 500, 4);
    cpt_buf good;
    CHECK_EQ_INT(cpt_prompt_group_encode(&s.m, &good, &err), 0);
    CHECK_EQ_INT(cpt_queue_add(q, CPT_STREAM_PROMPTS, good.data, good.len, NULL, &err), 0);
    const char junk[] = "\x93\x01\x02";
    CHECK_EQ_INT(cpt_queue_add(q, CPT_STREAM_PROMPTS, junk, 3, NULL, &err), 0);
    /* schema 2: patch the version byte ("schema" is the first key, the value follows it) */
    char *v2 = malloc(good.len);
    memcpy(v2, good.data, good.len);
    char *p = memmem(v2, good.len, "\xa6schema\x01", 8);
    CHECK(p != NULL);
    if (p) p[7] = 2;
    CHECK_EQ_INT(cpt_queue_add(q, CPT_STREAM_PROMPTS, v2, good.len, NULL, &err), 0);
    sample_prompt other;
    sample_prompt_init(&other, "runB", 1, 501, 4);
    cpt_buf ob;
    CHECK_EQ_INT(cpt_prompt_group_encode(&other.m, &ob, &err), 0);
    CHECK_EQ_INT(cpt_queue_add(q, CPT_STREAM_PROMPTS, ob.data, ob.len, NULL, &err), 0);
    sample_prompt s2;
    sample_prompt_init(&s2, "runA", 1, 502, 4);
    cpt_buf good2;
    CHECK_EQ_INT(cpt_prompt_group_encode(&s2.m, &good2, &err), 0);
    CHECK_EQ_INT(cpt_queue_add(q, CPT_STREAM_PROMPTS, good2.data, good2.len, NULL, &err), 0);
    CHECK_EQ_INT(cpt_queue_add(q, CPT_STREAM_PROMPTS, good.data, good.len, NULL, &err), 0);

    cpt_queue_item it;
    uint64_t got[8];
    int n = 0;
    while (n < 8 && cpt_queue_next(q, CPT_STREAM_PROMPTS, "rollout", "r0", &it, &err) == 1) {
        got[n++] = it.prompt.id.index;
        CHECK_EQ_INT(cpt_queue_done(q, &it, &err), 0);
        cpt_queue_item_free(&it);
    }
    CHECK_EQ_INT(n, 2);
    CHECK(n == 2 && got[0] == 500 && got[1] == 502);
    CHECK_EQ_INT(q->stats.dead - dead0, 3);
    CHECK_EQ_INT(q->stats.duplicates, 1);
    CHECK_EQ_INT(test_pending(q, CPT_STREAM_PROMPTS, "rollout"), 0);

    /* the dead stream keeps the reason and the original bytes */
    const char *argv[] = {"XRANGE", cpt_queue_key(q, CPT_STREAM_DEAD), "-", "+"};
    redisReply *r = cpt_redis_command(q->redis, 4, argv, NULL, argv[1], 0, &err);
    CHECK(r && r->type == REDIS_REPLY_ARRAY && r->elements == 3);
    const char *want[3] = {"malformed msgpack", "unknown schema version 2", "run \"runB\" is not this run (\"runA\")"};
    for (size_t i = 0; r && i < r->elements && i < 3; i++) {
        redisReply *f = r->element[i]->element[1];
        const char *reason = NULL, *from = NULL;
        redisReply *m = NULL;
        for (size_t k = 0; k + 1 < f->elements; k += 2) {
            if (!strcmp(f->element[k]->str, "reason")) reason = f->element[k + 1]->str;
            if (!strcmp(f->element[k]->str, "from")) from = f->element[k + 1]->str;
            if (!strcmp(f->element[k]->str, "m")) m = f->element[k + 1];
        }
        CHECK_MSG(reason && strstr(reason, want[i]), "dead[%zu] reason: %s", i, reason ? reason : "(none)");
        CHECK_EQ_STR(from, "prompts");
        if (i == 0) CHECK(m && m->len == 3 && !memcmp(m->str, junk, 3));
        if (i == 2) CHECK(m && m->len == ob.len && !memcmp(m->str, ob.data, ob.len));
    }
    if (r) freeReplyObject(r);
    free(v2);
    cpt_buf_free(&good);
    cpt_buf_free(&good2);
    cpt_buf_free(&ob);
}

static void hashes(cpt_queue *q) {
    cpt_err err = {{0}};
    cpt_weights_msg w;
    CHECK_EQ_INT(cpt_queue_get_weights(q, &w, &err), 0); /* none yet */
    memset(&w, 0, sizeof w);
    snprintf(w.run, sizeof w.run, "runA");
    w.version = 42;
    snprintf(w.transport, sizeof w.transport, "file");
    snprintf(w.location, sizeof w.location, "/tmp/runA/weights/v42.safetensors");
    w.bytes = 1 << 20;
    snprintf(w.checksum, sizeof w.checksum, "xxh64:00ff");
    w.membership_epoch = 3;
    CHECK_EQ_INT(cpt_queue_publish_weights(q, &w, &err), 0);
    cpt_weights_msg w2;
    CHECK_EQ_INT(cpt_queue_get_weights(q, &w2, &err), 1);
    CHECK_EQ_INT(w2.version, 42);
    CHECK_EQ_INT(w2.membership_epoch, 3);
    CHECK_EQ_STR(w2.location, w.location);
    const char *hv[] = {"HGET", cpt_queue_key(q, CPT_HASH_WEIGHTS), "version"};
    redisReply *r = cpt_redis_command(q->redis, 3, hv, NULL, hv[1], 0, &err);
    CHECK(r && r->type == REDIS_REPLY_STRING && !strcmp(r->str, "42"));
    if (r) freeReplyObject(r);

    cpt_control_msg c = {.n_roles = 1};
    snprintf(c.run, sizeof c.run, "runA");
    snprintf(c.state, sizeof c.state, "draining");
    snprintf(c.roles[0].role, sizeof c.roles[0].role, "rollout");
    c.roles[0].count = 5;
    CHECK_EQ_INT(cpt_queue_set_control(q, &c, &err), 0);
    cpt_control_msg c2;
    CHECK_EQ_INT(cpt_queue_get_control(q, &c2, &err), 1);
    CHECK_EQ_STR(c2.state, "draining");
    CHECK_EQ_INT(c2.roles[0].count, 5);

    cpt_heartbeat_msg h = {.version = 41, .tokens_per_s = 900, .occupancy = 0.5, .time = 1764670000};
    snprintf(h.run, sizeof h.run, "runA");
    snprintf(h.worker, sizeof h.worker, "rollout-1");
    snprintf(h.role, sizeof h.role, "rollout");
    snprintf(h.host, sizeof h.host, "localhost");
    CHECK_EQ_INT(cpt_queue_heartbeat(q, &h, &err), 0);
    const char *hl[] = {"HLEN", cpt_queue_key(q, CPT_HASH_WORKERS)};
    CHECK_EQ_INT(test_int(q, 2, hl), 1);
}

int main(void) {
    test_redis t;
    test_redis_start(&t, "everysec");
    struct stat st;
    CHECK_EQ_INT(stat(t.srv.sock, &st), 0);
    CHECK(S_ISSOCK(st.st_mode));
    CHECK_MSG((st.st_mode & 0777) == 0700, "socket mode %o", st.st_mode & 0777);
    char conf[600];
    snprintf(conf, sizeof conf, "%s/redis.conf", t.dir);
    CHECK_EQ_INT(stat(conf, &st), 0);
    CHECK_EQ_INT(st.st_mode & 0777, 0600);

    /* a second server on the same folder is refused */
    cpt_redis_server other;
    cpt_redis_server_opts o = {.dir = t.dir};
    cpt_err err;
    CHECK_EQ_INT(cpt_redis_server_start(&o, &other, &err), -1);
    CHECK_MSG(strstr(err.msg, "already answers") != NULL, "%s", err.msg);
    o.appendfsync = "sometimes";
    CHECK_EQ_INT(cpt_redis_server_start(&o, &other, &err), -1);
    CHECK_MSG(strstr(err.msg, "queue.appendfsync = \"sometimes\"") != NULL, "%s", err.msg);

    /* a missing binary and a run directory too deep for a socket path are reported, not crashed on */
    cpt_redis_server_opts nob = {.dir = t.dir, .exe = "/nonexistent/redis-server"};
    char sub[600];
    snprintf(sub, sizeof sub, "%s/other", t.dir);
    nob.dir = sub;
    CHECK_EQ_INT(cpt_redis_server_start(&nob, &other, &err), -1);
    CHECK_MSG(strstr(err.msg, "redis-server /nonexistent/redis-server: No such file") != NULL, "%s", err.msg);
    char deep[400];
    snprintf(deep, sizeof deep, "%s/%0100d/%050d", t.dir, 0, 0);
    cpt_redis_server_opts longdir = {.dir = deep};
    CHECK_EQ_INT(cpt_redis_server_start(&longdir, &other, &err), -1);
    CHECK_MSG(strstr(err.msg, "too long for a unix socket path") != NULL, "%s", err.msg);

    cpt_queue *q = test_queue_open(&t, "runA", 1000, 60000);
    round_trip(q);
    dead_letters_and_duplicates(q);
    hashes(q);

    /* errors name the command and the key */
    const char *bad[] = {"XADD", cpt_queue_key(q, CPT_HASH_WEIGHTS), "*", "f", "v"};
    CHECK(cpt_redis_command(q->redis, 5, bad, NULL, bad[1], 0, &err) == NULL);
    CHECK_MSG(strstr(err.msg, "XADD cpt:runA:weights: WRONGTYPE") != NULL, "%s", err.msg);

    /* a pipeline: one round trip, replies in order; an error reply names its command */
    const char *c1[] = {"HSET", "cpt:runA:scratch", "a", "1"};
    const char *c2[] = {"HINCRBY", "cpt:runA:scratch", "a", "41"};
    const char *c3[] = {"HGET", "cpt:runA:scratch", "a"};
    cpt_redis_cmd cmds[3] = {{4, c1, NULL, c1[1]}, {4, c2, NULL, c2[1]}, {3, c3, NULL, c3[1]}};
    redisReply *reps[3];
    CHECK_EQ_INT(cpt_redis_pipeline(q->redis, 3, cmds, reps, &err), 0);
    CHECK(reps[1]->type == REDIS_REPLY_INTEGER && reps[1]->integer == 42);
    CHECK(reps[2]->type == REDIS_REPLY_STRING && !strcmp(reps[2]->str, "42"));
    for (int i = 0; i < 3; i++) freeReplyObject(reps[i]);
    const char *c4[] = {"LPUSH", "cpt:runA:scratch", "x"};
    cpt_redis_cmd bad2[2] = {{3, c3, NULL, c3[1]}, {3, c4, NULL, c4[1]}};
    CHECK_EQ_INT(cpt_redis_pipeline(q->redis, 2, bad2, reps, &err), -1);
    CHECK_MSG(strstr(err.msg, "LPUSH cpt:runA:scratch: WRONGTYPE") != NULL, "%s", err.msg);
    cpt_queue_close(q);

    /* the AOF lives in the run folder */
    char aof[600];
    snprintf(aof, sizeof aof, "%s/appendonlydir", t.dir);
    CHECK(cpt_path_exists(aof));
    test_redis_stop(&t);
    return check_summary("test_queue_basic");
}
