/* cpt-env against a real redis-server: env requests encoded here go into cpt:RUN:env, replies come out on
 * cpt:RUN:env:WORKER with the calculator's observations; a request that does not decode, and one of another run,
 * go to the dead stream with their reasons; every request is acked and deleted, so the env stream holds only the
 * requests in flight (a burst of 50 leaves it empty); heartbeats reach the workers hash; SIGTERM drains and exits 0.
 * Then a worker killed while it holds a request: a second worker claims it and replies. Runs the cpt-env binary of
 * $CPT_BUILD. */
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "queue/env_msg.h"
#include "tests/check.h"
#include "tests/integration/redis_helper.h"

static const char *build_dir(void) { return getenv("CPT_BUILD") ? getenv("CPT_BUILD") : "build"; }

static pid_t start_worker(const char *config, const char *id) {
    char exe[1024];
    snprintf(exe, sizeof exe, "%s/cpt-env", build_dir());
    pid_t pid = fork();
    if (pid == 0) {
        execl(exe, exe, config, "--worker-id", id, (char *)NULL);
        perror("exec cpt-env");
        _exit(127);
    }
    return pid;
}

static int wait_exit(pid_t pid, double timeout_s, int *st) {
    double t0 = cpt_now();
    while (cpt_now() - t0 < timeout_s) {
        if (waitpid(pid, st, WNOHANG) == pid) return 1;
        usleep(20000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, st, 0);
    return 0;
}

static void write_config(const char *path, const char *url, const char *run, const char *env_lines) {
    FILE *f = fopen(path, "w");
    if (!f) {
        perror(path);
        exit(1);
    }
    fprintf(f, "[run]\nname = \"%s\"\n[queue]\nurl = \"%s\"\nblock_ms = 200\nclaim_idle_ms = 1000\n"
               "[env]\nheartbeat_s = 0.2\n%s\n", run, url, env_lines);
    fclose(f);
}

static void raw_add(cpt_queue *q, const char *key, const char *data, size_t len) {
    const char *argv[] = {"XADD", key, "*", "m", data};
    size_t lens[5] = {4, strlen(key), 1, 1, len};
    cpt_err err;
    redisReply *r = cpt_redis_command(q->redis, 5, argv, lens, key, 0, &err);
    CHECK_MSG(r != NULL, "%s", err.msg);
    if (r) freeReplyObject(r);
}

static void add_request(cpt_queue *q, const char *run, const char *worker, uint64_t index, uint32_t sample,
                        uint32_t turn, const char *call, const char *extra) {
    cpt_env_request m;
    memset(&m, 0, sizeof m);
    snprintf(m.run, sizeof m.run, "%s", run);
    snprintf(m.worker, sizeof m.worker, "%s", worker);
    m.id.epoch = 1;
    m.id.index = index;
    m.sample = sample;
    m.turn = turn;
    m.call = (char *)call;
    m.extra = (char *)extra;
    cpt_buf b = {0};
    cpt_err err;
    CHECK_MSG(cpt_env_request_encode(&m, &b, &err) == 0, "%s", err.msg);
    char key[CPT_ENV_KEY_MAX];
    /* the stream of the queue's run, whatever run the request names */
    raw_add(q, cpt_env_stream(q->run, key), b.data, b.len);
    cpt_buf_free(&b);
}

/* The replies on run's stream for worker, decoded into out[0..max); returns how many there are. */
static int read_replies(cpt_queue *q, const char *worker, cpt_env_reply *out, int max) {
    char key[CPT_ENV_KEY_MAX];
    cpt_env_reply_stream(q->run, worker, key);
    const char *argv[] = {"XRANGE", key, "-", "+"};
    cpt_err err;
    redisReply *r = cpt_redis_command(q->redis, 4, argv, NULL, key, 0, &err);
    int n = 0;
    if (r && r->type == REDIS_REPLY_ARRAY)
        for (size_t i = 0; i < r->elements && n < max; i++) {
            redisReply *f = r->element[i]->element[1];
            for (size_t j = 0; j + 1 < f->elements; j += 2)
                if (!strcmp(f->element[j]->str, "m")) {
                    memset(&out[n], 0, sizeof out[n]);
                    CHECK_MSG(cpt_env_reply_decode(f->element[j + 1]->str, f->element[j + 1]->len, &out[n], &err) == 0,
                              "%s", err.msg);
                    n++;
                }
        }
    if (r) freeReplyObject(r);
    return n;
}

static long long pending_env(cpt_queue *q) {
    char key[CPT_ENV_KEY_MAX];
    cpt_env_stream(q->run, key);
    const char *argv[] = {"XPENDING", key, CPT_ENV_GROUP};
    cpt_err err;
    redisReply *r = cpt_redis_command(q->redis, 3, argv, NULL, key, 0, &err);
    long long n = -1;
    if (r && r->type == REDIS_REPLY_ARRAY && r->elements >= 1 && r->element[0]->type == REDIS_REPLY_INTEGER)
        n = r->element[0]->integer;
    if (r) freeReplyObject(r);
    return n;
}

static long long env_len(cpt_queue *q) {
    char key[CPT_ENV_KEY_MAX];
    const char *argv[] = {"XLEN", cpt_env_stream(q->run, key)};
    return test_int(q, 2, argv);
}

/* The dead stream's reasons, concatenated. */
static void dead_reasons(cpt_queue *q, char *out, size_t cap) {
    const char *argv[] = {"XRANGE", cpt_queue_key(q, CPT_STREAM_DEAD), "-", "+"};
    cpt_err err;
    redisReply *r = cpt_redis_command(q->redis, 4, argv, NULL, argv[1], 0, &err);
    out[0] = 0;
    if (r && r->type == REDIS_REPLY_ARRAY)
        for (size_t i = 0; i < r->elements; i++) {
            redisReply *f = r->element[i]->element[1];
            for (size_t j = 0; j + 1 < f->elements; j += 2)
                if (!strcmp(f->element[j]->str, "reason") || !strcmp(f->element[j]->str, "from"))
                    snprintf(out + strlen(out), cap - strlen(out), "%s|", f->element[j + 1]->str);
        }
    if (r) freeReplyObject(r);
}

static void test_answers(test_redis *t, const char *dir) {
    char cfgp[256];
    snprintf(cfgp, sizeof cfgp, "%s/calc.toml", dir);
    write_config(cfgp, t->srv.url, "envt", "type = \"calculator\"");
    cpt_queue *q = test_queue_open(t, "envt", 64, 1000);
    add_request(q, "envt", "rollout-7", 3, 0, 1,
                "<tool_call>\n{\"name\": \"calculator\", \"arguments\": {\"expression\": \"12*34\"}}\n</tool_call>",
                NULL);
    add_request(q, "envt", "rollout-7", 3, 1, 2, "<tool_call>1/0</tool_call>", "{\"answer\": 1}");
    char key[CPT_ENV_KEY_MAX];
    raw_add(q, cpt_env_stream("envt", key), "garbage", 7);
    add_request(q, "other", "rollout-7", 4, 0, 1, "<tool_call>1+1</tool_call>", NULL);
    pid_t pid = start_worker(cfgp, "env-1");
    cpt_env_reply rep[4];
    int n = 0;
    double t0 = cpt_now();
    while ((n = read_replies(q, "rollout-7", rep, 4)) < 2 && cpt_now() - t0 < 30) {
        for (int i = 0; i < n; i++) cpt_env_reply_free(&rep[i]);
        usleep(50000);
    }
    CHECK_EQ_INT(n, 2);
    if (n == 2) {
        CHECK_EQ_STR(rep[0].run, "envt");
        CHECK_EQ_INT((int)rep[0].id.epoch, 1);
        CHECK_EQ_INT((int)rep[0].id.index, 3);
        CHECK_EQ_INT((int)rep[0].sample, 0);
        CHECK_EQ_INT((int)rep[0].turn, 1);
        CHECK_EQ_INT(rep[0].ok, 1);
        CHECK_EQ_STR(rep[0].observation, "408");
        CHECK_EQ_STR(rep[0].env, "env-1");
        CHECK_EQ_INT((int)rep[1].sample, 1);
        CHECK_EQ_INT((int)rep[1].turn, 2);
        CHECK_EQ_INT(rep[1].ok, 0);
        CHECK_MSG(!strncmp(rep[1].observation, "error: division by zero", 23), "%s", rep[1].observation);
    }
    for (int i = 0; i < n; i++) cpt_env_reply_free(&rep[i]);
    t0 = cpt_now();
    while (test_xlen(q, CPT_STREAM_DEAD) < 2 && cpt_now() - t0 < 10) usleep(50000);
    CHECK_EQ_INT((int)test_xlen(q, CPT_STREAM_DEAD), 2);
    char reasons[4096];
    dead_reasons(q, reasons, sizeof reasons);
    CHECK_MSG(strstr(reasons, "env|") && strstr(reasons, "malformed env request") &&
              strstr(reasons, "env request of run \"other\" in the stream of run \"envt\""), "%s", reasons);
    CHECK_EQ_INT((int)pending_env(q), 0); /* everything acked */
    /* and deleted, answered or dead-lettered: the env stream holds only the requests in flight */
    CHECK_EQ_INT((int)env_len(q), 0);
    /* a burst of requests leaves it empty again once answered */
    for (int i = 0; i < 50; i++) add_request(q, "envt", "rollout-8", 10 + (uint64_t)i, 0, 1, "6*7", NULL);
    t0 = cpt_now();
    while ((env_len(q) > 0 || pending_env(q) > 0) && cpt_now() - t0 < 30) usleep(50000);
    CHECK_EQ_INT((int)env_len(q), 0);
    CHECK_EQ_INT((int)pending_env(q), 0);
    cpt_env_reply burst[50];
    n = read_replies(q, "rollout-8", burst, 50);
    CHECK_EQ_INT(n, 50);
    for (int i = 0; i < n; i++) {
        CHECK_EQ_STR(burst[i].observation, "42");
        cpt_env_reply_free(&burst[i]);
    }
    usleep(400000);
    const char *hx[] = {"HEXISTS", cpt_queue_key(q, CPT_HASH_WORKERS), "env-1"};
    CHECK_EQ_INT((int)test_int(q, 3, hx), 1);
    kill(pid, SIGTERM);
    int st = 0;
    CHECK(wait_exit(pid, 15, &st));
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    CHECK_EQ_INT((int)test_int(q, 3, hx), 0);
    cpt_queue_close(q);
}

/* A worker killed (SIGKILL) while its tool runs: the request stays pending on it; a second worker claims it after
 * queue.claim_idle_ms and replies. The tool loops, so both answers are the timeout's. */
static void test_claim(test_redis *t, const char *dir) {
    char cfgp[256], lines[1024];
    snprintf(cfgp, sizeof cfgp, "%s/loop.toml", dir);
    snprintf(lines, sizeof lines, "type = \"plugin\"\nplugin = \"%s/plugins/libenv_strict_test.so\"\ntimeout_ms = 1500",
             build_dir());
    write_config(cfgp, t->srv.url, "envk", lines);
    cpt_queue *q = test_queue_open(t, "envk", 64, 1000);
    pid_t a = start_worker(cfgp, "env-a");
    usleep(300000);
    add_request(q, "envk", "rollout-1", 9, 2, 1, "<tool_call>loop</tool_call>", NULL);
    double t0 = cpt_now();
    while (pending_env(q) < 1 && cpt_now() - t0 < 20) usleep(10000);
    CHECK_EQ_INT((int)pending_env(q), 1);
    kill(a, SIGKILL);
    int st;
    waitpid(a, &st, 0);
    pid_t b = start_worker(cfgp, "env-b");
    cpt_env_reply rep[2];
    int n = 0;
    t0 = cpt_now();
    while ((n = read_replies(q, "rollout-1", rep, 2)) < 1 && cpt_now() - t0 < 30) usleep(50000);
    CHECK_EQ_INT(n, 1);
    if (n >= 1) {
        CHECK_EQ_STR(rep[0].env, "env-b");
        CHECK_EQ_INT((int)rep[0].id.index, 9);
        CHECK_EQ_INT((int)rep[0].sample, 2);
        CHECK_EQ_INT(rep[0].ok, 0);
        CHECK_MSG(strstr(rep[0].observation, "did not finish within 1500 ms") != NULL, "%s", rep[0].observation);
    }
    for (int i = 0; i < n; i++) cpt_env_reply_free(&rep[i]);
    CHECK_EQ_INT((int)pending_env(q), 0);
    CHECK_EQ_INT((int)env_len(q), 0); /* claimed, answered, deleted */
    kill(b, SIGTERM);
    CHECK(wait_exit(b, 15, &st));
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    cpt_queue_close(q);
}

int main(void) {
    char dir[] = "/tmp/cpt-envw-XXXXXX";
    if (!mkdtemp(dir)) return 1;
    test_redis t;
    test_redis_start(&t, "no");
    test_answers(&t, dir);
    test_claim(&t, dir);
    test_redis_stop(&t);
    cpt_err err;
    cpt_remove_tree(dir, &err);
    return check_summary("test_env_worker");
}
