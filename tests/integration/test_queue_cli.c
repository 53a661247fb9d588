/* cpt-queue stats / peek / dead against a real server seeded through the library: the numbers it prints are the
 * ones the test put there. Runs the cpt-queue binary of $CPT_BUILD. */
#include <jansson.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "queue/conn.h"
#include "tests/check.h"
#include "tests/integration/redis_helper.h"
#include "tests/unit/test_schema_samples.h"

static char bin[1024];

/* Runs cpt-queue with args (stderr folded into the output); returns the exit status and the output. */
static int run_cli(const char *args, char *out, size_t cap) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s %s 2>&1", bin, args);
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    size_t n = fread(out, 1, cap - 1, p);
    out[n] = '\0';
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void seed(cpt_queue *q) {
    cpt_err err = {{0}};
    CHECK_EQ_INT(cpt_queue_create_group(q, CPT_STREAM_PROMPTS, "rollout", &err), 0);
    CHECK_EQ_INT(cpt_queue_create_group(q, CPT_STREAM_ROLLOUTS, "reward", &err), 0);
    for (int i = 0; i < 6; i++) {
        sample_prompt s;
        sample_prompt_init(&s, "cli", 0, (uint64_t)i, 5);
        s.m.min_version = (uint64_t)i; /* current version 5: 5..0 behind */
        cpt_buf b;
        CHECK_EQ_INT(cpt_prompt_group_encode(&s.m, &b, &err), 0);
        CHECK_EQ_INT(cpt_queue_add(q, CPT_STREAM_PROMPTS, b.data, b.len, NULL, &err), 0);
        cpt_buf_free(&b);
    }
    /* a rollout worker takes 2 and holds them */
    cpt_queue_msg m[2];
    CHECK_EQ_INT(cpt_queue_read(q, CPT_STREAM_PROMPTS, "rollout", "worker-a", 2, 100, m, &err), 2);
    cpt_queue_msg_free(&m[0]);
    cpt_queue_msg_free(&m[1]);
    for (int i = 0; i < 3; i++) {
        cpt_rollout_group g = sample_group("cli", 0, (uint64_t)i, 2, 10, 0);
        g.weight_version = 3;
        cpt_buf b;
        CHECK_EQ_INT(cpt_rollout_group_encode(&g, &b, &err), 0);
        CHECK_EQ_INT(cpt_queue_add(q, CPT_STREAM_ROLLOUTS, b.data, b.len, NULL, &err), 0);
        cpt_buf_free(&b);
        sample_group_free(&g);
    }
    CHECK_EQ_INT(cpt_queue_add(q, CPT_STREAM_ROLLOUTS, "\xc1junk", 5, NULL, &err), 0);
    cpt_queue_item it;
    /* reward consumer: dead-letters the junk on its way, takes group 0 */
    int taken = 0;
    while (cpt_queue_next(q, CPT_STREAM_ROLLOUTS, "reward", "scorer", &it, &err) == 1) {
        CHECK_EQ_INT(cpt_queue_done(q, &it, &err), 0);
        cpt_queue_item_free(&it);
        taken++;
    }
    CHECK_EQ_INT(taken, 3);
    CHECK_EQ_INT(q->stats.dead, 1);
    cpt_weights_msg w = {.version = 5, .bytes = 1000, .membership_epoch = 1};
    snprintf(w.run, sizeof w.run, "cli");
    snprintf(w.transport, sizeof w.transport, "file");
    snprintf(w.location, sizeof w.location, "/x/v5.safetensors");
    snprintf(w.checksum, sizeof w.checksum, "xxh64:1");
    CHECK_EQ_INT(cpt_queue_publish_weights(q, &w, &err), 0);
    /* the time a worker puts in is replaced by the queue's wall clock (workers once wrote their monotonic clock) */
    cpt_heartbeat_msg h = {.version = 5, .tokens_per_s = 321, .occupancy = 0.25, .time = 12345.0};
    snprintf(h.run, sizeof h.run, "cli");
    snprintf(h.worker, sizeof h.worker, "worker-a");
    snprintf(h.role, sizeof h.role, "rollout");
    snprintf(h.host, sizeof h.host, "box");
    CHECK_EQ_INT(cpt_queue_heartbeat(q, &h, &err), 0);
}

static json_t *stream_json(json_t *root, const char *name) {
    size_t i;
    json_t *s;
    json_array_foreach(json_object_get(root, "streams"), i, s) if (!strcmp(json_string_value(json_object_get(s, "name")), name)) return s;
    return NULL;
}

/* A worker that stopped heartbeating long ago is marked gone and pruned on request; a clean exit deletes its own
 * entry. */
static void workers_gone(cpt_queue *q, const test_redis *t, char *out, size_t cap) {
    cpt_err err;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    cpt_heartbeat_msg h = {.version = 1, .time = (double)now.tv_sec + now.tv_nsec / 1e9 - 1000};
    snprintf(h.run, sizeof h.run, "cli");
    snprintf(h.worker, sizeof h.worker, "crashed-b");
    snprintf(h.role, sizeof h.role, "reward");
    snprintf(h.host, sizeof h.host, "box");
    cpt_buf b;
    CHECK_EQ_INT(cpt_heartbeat_encode(&h, &b, &err), 0);
    const char *argv[] = {"HSET", cpt_queue_key(q, CPT_HASH_WORKERS), "crashed-b", b.data};
    size_t lens[] = {4, strlen(argv[1]), 9, b.len};
    redisReply *r = cpt_redis_command(q->redis, 4, argv, lens, argv[1], 0, &err);
    if (r) freeReplyObject(r);
    cpt_buf_free(&b);
    char args[1024];
    snprintf(args, sizeof args, "stats --url %s --name cli --window 0", t->srv.url);
    CHECK_EQ_INT(run_cli(args, out, cap), 0);
    CHECK_MSG(strstr(out, "gone (no heartbeat for over 60 s") && strstr(out, "crashed-b (1000 s)"), "%s", out);
    CHECK_MSG(strstr(out, "worker-a ") && strstr(out, "seen ") && !strstr(out, "e+09 s ago"), "%s", out);
    snprintf(args, sizeof args, "stats --url %s --name cli --window 0 --gone-after 2000", t->srv.url);
    CHECK_EQ_INT(run_cli(args, out, cap), 0);
    CHECK_MSG(strstr(out, "crashed-b ") && !strstr(out, "gone ("), "%s", out);
    snprintf(args, sizeof args, "stats --url %s --name cli --window 0 --prune-gone", t->srv.url);
    CHECK_EQ_INT(run_cli(args, out, cap), 0);
    CHECK_MSG(strstr(out, "removed 1 gone worker") && !strstr(out, "crashed-b") && strstr(out, "worker-a"), "%s", out);
    const char *hl[] = {"HLEN", cpt_queue_key(q, CPT_HASH_WORKERS)};
    CHECK_EQ_INT(test_int(q, 2, hl), 1);
    CHECK_EQ_INT(cpt_queue_worker_gone(q, "worker-a", &err), 0);
    CHECK_EQ_INT(test_int(q, 2, hl), 0);
    /* back for the checks below */
    cpt_heartbeat_msg a = {.version = 5, .tokens_per_s = 321, .occupancy = 0.25};
    snprintf(a.run, sizeof a.run, "cli");
    snprintf(a.worker, sizeof a.worker, "worker-a");
    snprintf(a.role, sizeof a.role, "rollout");
    snprintf(a.host, sizeof a.host, "box");
    CHECK_EQ_INT(cpt_queue_heartbeat(q, &a, &err), 0);
}

int main(void) {
    const char *build = getenv("CPT_BUILD");
    snprintf(bin, sizeof bin, "%s/cpt-queue", build ? build : "build");
    if (access(bin, X_OK)) {
        fprintf(stderr, "%s not found (set CPT_BUILD)\n", bin);
        return 1;
    }
    test_redis t;
    test_redis_start(&t, "everysec");
    cpt_queue *q = test_queue_open(&t, "cli", 1000, 60000);
    seed(q);
    static char out[1 << 16];
    char args[2048];

    /* --run with only redis.sock: the run name is discovered */
    snprintf(args, sizeof args, "stats --run %s --json --window 0", t.dir);
    CHECK_EQ_INT(run_cli(args, out, sizeof out), 0);
    json_error_t je;
    json_t *root = json_loads(out, 0, &je);
    CHECK_MSG(root != NULL, "stats --json printed: %s", out);
    if (root) {
        CHECK_EQ_STR(json_string_value(json_object_get(root, "run")), "cli");
        CHECK_EQ_INT(json_integer_value(json_object_get(root, "weight_version")), 5);
        CHECK_EQ_INT(json_integer_value(json_object_get(root, "dead")), 1);
        json_t *p = stream_json(root, "prompts"), *r = stream_json(root, "rollouts");
        CHECK(p && r);
        if (p && r) {
            CHECK_EQ_INT(json_integer_value(json_object_get(p, "length")), 6);
            json_t *g = json_array_get(json_object_get(p, "groups"), 0);
            CHECK_EQ_STR(json_string_value(json_object_get(g, "name")), "rollout");
            CHECK_EQ_INT(json_integer_value(json_object_get(g, "pending")), 2);
            CHECK_EQ_INT(json_integer_value(json_object_get(g, "lag")), 4);
            json_t *c = json_array_get(json_object_get(g, "consumers"), 0);
            CHECK_EQ_STR(json_string_value(json_object_get(c, "name")), "worker-a");
            CHECK_EQ_INT(json_integer_value(json_object_get(c, "pending")), 2);
            /* queued (undelivered) prompts are groups 2..5 with min_version 2..5: 3..0 behind */
            json_t *st = json_object_get(p, "staleness");
            CHECK_EQ_INT(json_integer_value(json_object_get(st, "sampled")), 4);
            CHECK_EQ_INT(json_integer_value(json_object_get(st, "max")), 3);
            CHECK_NEAR(json_real_value(json_object_get(st, "mean")), 1.5, 1e-9);
            json_t *rg = json_array_get(json_object_get(r, "groups"), 0);
            CHECK_EQ_INT(json_integer_value(json_object_get(rg, "pending")), 0);
            CHECK_EQ_INT(json_integer_value(json_object_get(r, "length")), 4);
        }
        json_t *w = json_array_get(json_object_get(root, "workers"), 0);
        CHECK_EQ_STR(json_string_value(json_object_get(w, "worker")), "worker-a");
        CHECK_NEAR(json_real_value(json_object_get(w, "tokens_per_s")), 321, 1e-9);
        double age = json_real_value(json_object_get(w, "age_s"));
        CHECK_MSG(age >= -1 && age < 30, "worker age %g s", age);
        CHECK(json_is_false(json_object_get(w, "gone")));
        json_decref(root);
    }
    workers_gone(q, &t, out, sizeof out);

    /* the table, through queue.json */
    cpt_queue_conn conn;
    memset(&conn, 0, sizeof conn);
    snprintf(conn.url, sizeof conn.url, "%s", t.srv.url);
    snprintf(conn.run, sizeof conn.run, "cli");
    cpt_err err;
    CHECK_EQ_INT(cpt_queue_conn_write(t.dir, &conn, &err), 0);
    snprintf(args, sizeof args, "stats --run %s --window 0", t.dir);
    CHECK_EQ_INT(run_cli(args, out, sizeof out), 0);
    CHECK_MSG(strstr(out, "weight version 5") && strstr(out, "dead letters 1") && strstr(out, "worker-a"), "%s", out);
    CHECK_MSG(strstr(out, "3 / 1.50 over 4") != NULL, "%s", out);

    /* --watch with a count: one JSON line per refresh; rates over the interval */
    setenv("CPT_RUN", t.dir, 1);
    snprintf(args, sizeof args, "stats --watch 0.2 --count 3 --json");
    CHECK_EQ_INT(run_cli(args, out, sizeof out), 0);
    int lines = 0;
    for (char *s = out; (s = strchr(s, '\n')); s++) lines++;
    CHECK_EQ_INT(lines, 3);
    root = json_loads(strchr(out, '\n') + 1, JSON_DISABLE_EOF_CHECK, &je);
    CHECK(root != NULL);
    if (root) {
        json_t *p = stream_json(root, "prompts");
        CHECK(json_is_real(json_object_get(p, "in_per_s")));
        CHECK_NEAR(json_real_value(json_object_get(p, "in_per_s")), 0, 1e-9); /* nothing added meanwhile */
        json_decref(root);
    }

    /* peek */
    CHECK_EQ_INT(run_cli("peek prompts 2", out, sizeof out), 0);
    CHECK_MSG(strstr(out, "cpt:cli:prompts: 6 entries, the first 2") && strstr(out, "group (0, 1)") &&
                  strstr(out, "temperature 0.75") && strstr(out, "min_version 1") && !strstr(out, "group (0, 2)"),
              "%s", out);
    CHECK_EQ_INT(run_cli("peek rollouts", out, sizeof out), 0);
    CHECK_MSG(strstr(out, "weight version 3") && strstr(out, "worker rollout-0@node1") &&
                  strstr(out, "undecodable (5 bytes): rollout_group: malformed msgpack"),
              "%s", out);
    CHECK_EQ_INT(run_cli("peek weights", out, sizeof out), 0);
    CHECK_MSG(strstr(out, "version 5") && strstr(out, "/x/v5.safetensors"), "%s", out);
    CHECK_EQ_INT(run_cli("peek workers", out, sizeof out), 0);
    CHECK_MSG(strstr(out, "321.0 tok/s"), "%s", out);
    CHECK_EQ_INT(run_cli("peek nonsense", out, sizeof out), 1);
    CHECK_MSG(strstr(out, "unknown stream \"nonsense\""), "%s", out);

    /* dead: list, requeue, drop */
    CHECK_EQ_INT(run_cli("dead", out, sizeof out), 0);
    CHECK_MSG(strstr(out, "from rollouts") && strstr(out, "reason: rollout_group: malformed msgpack: reserved byte 0xc1"),
              "%s", out);
    const char *xr[] = {"XRANGE", cpt_queue_key(q, CPT_STREAM_DEAD), "-", "+"};
    redisReply *r = cpt_redis_command(q->redis, 4, xr, NULL, xr[1], 0, &err);
    CHECK(r && r->elements == 1);
    char dead_id[64] = "";
    if (r && r->elements == 1) snprintf(dead_id, sizeof dead_id, "%s", r->element[0]->element[0]->str);
    if (r) freeReplyObject(r);
    snprintf(args, sizeof args, "dead --requeue %s", dead_id);
    CHECK_EQ_INT(run_cli(args, out, sizeof out), 0);
    CHECK_MSG(strstr(out, "requeued") && strstr(out, "to cpt:cli:rollouts"), "%s", out);
    CHECK_EQ_INT(test_xlen(q, CPT_STREAM_DEAD), 0);
    CHECK_EQ_INT(test_xlen(q, CPT_STREAM_ROLLOUTS), 5);
    CHECK_EQ_INT(run_cli(args, out, sizeof out), 1); /* gone now */
    CHECK_MSG(strstr(out, "has no entry"), "%s", out);
    CHECK_EQ_INT(run_cli("dead --drop 1-1", out, sizeof out), 1);

    /* a password on the command line is refused without echoing it */
    CHECK_EQ_INT(run_cli("stats --url redis://:sekrit@127.0.0.1:1", out, sizeof out), 1);
    CHECK_MSG(strstr(out, "--password-file") && !strstr(out, "sekrit"), "%s", out);
    /* several runs in one Redis: --name picks */
    unsetenv("CPT_RUN");
    char qjson[600];
    snprintf(qjson, sizeof qjson, "%s/queue.json", t.dir);
    unlink(qjson);
    cpt_queue *q2 = test_queue_open(&t, "other", 1000, 60000);
    CHECK_EQ_INT(cpt_queue_add(q2, CPT_STREAM_PROMPTS, "x", 1, NULL, &err), 0);
    snprintf(args, sizeof args, "stats --url %s --window 0", t.srv.url);
    CHECK_EQ_INT(run_cli(args, out, sizeof out), 1);
    CHECK_MSG(strstr(out, "several runs") && strstr(out, "cli") && strstr(out, "other"), "%s", out);
    snprintf(args, sizeof args, "stats --url %s --name other --json --window 0", t.srv.url);
    CHECK_EQ_INT(run_cli(args, out, sizeof out), 0);
    CHECK_MSG(strstr(out, "\"run\":\"other\""), "%s", out);
    CHECK_EQ_INT(run_cli("stats", out, sizeof out), 1);
    CHECK_MSG(strstr(out, "no live cpt run found") && strstr(out, "pass --url") && strstr(out, "pass --run RUN_DIR"), "%s",
              out);
    cpt_queue_close(q2);

    cpt_queue_close(q);
    test_redis_stop(&t);
    return check_summary("test_queue_cli");
}
