/* cpt-reward against a real redis-server: rollout groups encoded here go in, scored groups with the math
 * reward's values come out; a plugin that crashes sends its groups to the dead stream while the worker lives;
 * SIGTERM drains and exits 0; an OPD teacher or reward model asked on a GPU that is not there stops the worker at
 * start. Runs the cpt-reward binary of $CPT_BUILD. */
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/fs.h"
#include "core/tokenizer.h"
#include "model/model.h"
#include "reward/reward_model.h"
#include "reward/teacher.h"
#include "tests/check.h"
#include "tests/integration/redis_helper.h"
#include "tests/tiny_model.h"
#include "weights/devices.h"

static const char *build_dir(void) { return getenv("CPT_BUILD") ? getenv("CPT_BUILD") : "build"; }

static pid_t start_worker(const char *config, const char *id) {
    char exe[1024];
    snprintf(exe, sizeof exe, "%s/cpt-reward", build_dir());
    pid_t pid = fork();
    if (pid == 0) {
        execl(exe, exe, config, "--worker-id", id, (char *)NULL);
        perror("exec cpt-reward");
        _exit(127);
    }
    return pid;
}

static void write_config(const char *path, const char *url, const char *run, const char *reward_lines) {
    FILE *f = fopen(path, "w");
    if (!f) { perror(path); exit(1); }
    fprintf(f, "[run]\nname = \"%s\"\n[queue]\nurl = \"%s\"\nblock_ms = 200\n[tokenizer]\npath = \"examples/tiny-tokenizer\"\n"
               "[reward]\nheartbeat_s = 0.2\n%s\n", run, url, reward_lines);
    fclose(f);
}

static int32_t *encode(const cpt_tokenizer *tok, const char *s, uint32_t *n) {
    cpt_err err;
    int32_t *ids = NULL;
    long k = cpt_tokenizer_encode(tok, s, strlen(s), &ids, &err);
    if (k < 0) { fprintf(stderr, "%s\n", err.msg); exit(1); }
    *n = (uint32_t)k;
    return ids;
}

/* What add_group puts in the next group it writes (tests of forged messages), then resets. */
static uint64_t next_version = 7;
static int32_t next_bad_token = -1;
static int next_mask = 0; /* completion 1's first token is not the model's (a tool's observation) */

/* One rollout group: prompt text, completions texts, extra. */
static void add_group(cpt_queue *q, const cpt_tokenizer *tok, const char *run, uint64_t index, const char *prompt,
                      int n, const char *const *completions, const char *extra) {
    cpt_rollout_group g;
    memset(&g, 0, sizeof g);
    snprintf(g.run, sizeof g.run, "%s", run);
    g.id.epoch = 0;
    g.id.index = index;
    g.prompt = encode(tok, prompt, &g.n_prompt);
    g.n_completions = (uint32_t)n;
    g.completions = calloc((size_t)n, sizeof *g.completions);
    for (int c = 0; c < n; c++) {
        cpt_completion *k = &g.completions[c];
        k->tokens = encode(tok, completions[c], &k->n_tokens);
        k->logprobs = malloc(k->n_tokens * sizeof(float));
        for (uint32_t t = 0; t < k->n_tokens; t++) k->logprobs[t] = -0.5f;
        k->finish = CPT_FINISH_STOP;
    }
    g.weight_version = next_version;
    if (next_bad_token >= 0 && n > 0 && g.completions[0].n_tokens > 0) g.completions[0].tokens[0] = next_bad_token;
    if (next_mask && n > 1 && g.completions[1].n_tokens > 1) {
        cpt_completion *k = &g.completions[1];
        k->mask = malloc(k->n_tokens);
        memset(k->mask, 1, k->n_tokens);
        k->mask[0] = 0;
        k->logprobs[0] = 0;
    }
    next_version = 7;
    next_bad_token = -1;
    next_mask = 0;
    snprintf(g.worker, sizeof g.worker, "rollout-0");
    g.extra = extra ? strdup(extra) : NULL;
    cpt_buf b;
    cpt_err err;
    CHECK_EQ_INT(cpt_rollout_group_encode(&g, &b, &err), 0);
    CHECK_EQ_INT(cpt_queue_add(q, CPT_STREAM_ROLLOUTS, b.data, b.len, NULL, &err), 0);
    cpt_buf_free(&b);
    cpt_rollout_group_free(&g);
}

/* Waits up to secs for the next scored group. */
static int next_scored(cpt_queue *q, cpt_queue_item *it, double secs) {
    cpt_err err;
    double t0 = cpt_now();
    while (cpt_now() - t0 < secs) {
        int r = cpt_queue_next(q, CPT_STREAM_SCORED, "trainer", "t0", it, &err);
        if (r == 1) return 1;
        if (r < 0) { fprintf(stderr, "%s\n", err.msg); return 0; }
    }
    return 0;
}

static int wait_exit(pid_t pid, double secs, int *status) {
    double t0 = cpt_now();
    while (cpt_now() - t0 < secs) {
        if (waitpid(pid, status, WNOHANG) == pid) return 1;
        usleep(20000);
    }
    return 0;
}

static int part_value(const cpt_rollout_group *g, const char *name, uint32_t c, double *v) {
    for (uint32_t p = 0; p < g->n_parts; p++)
        if (!strcmp(g->part_names[p], name)) {
            *v = g->part_values[(size_t)p * g->n_completions + c];
            return 1;
        }
    return 0;
}

static void test_scores(test_redis *t, const cpt_tokenizer *tok, const char *dir) {
    char cfgp[256];
    snprintf(cfgp, sizeof cfgp, "%s/math.toml", dir);
    write_config(cfgp, t->srv.url, "rwm", "type = \"combined\"\ncombine = [\"math:1\", \"length:1\"]\nlength_unit = \"tokens\"\nlength_target = 4\nlength_penalty = 0.01");
    cpt_queue *q = test_queue_open(t, "rwm", 64, 60000);
    cpt_err err;
    CHECK_EQ_INT(cpt_queue_create_group(q, CPT_STREAM_SCORED, "trainer", &err), 0);
    const char *c0[] = {"2 + 3 = 5\n#### 5", "#### 6", "the answer is \\boxed{5}"};
    add_group(q, tok, "rwm", 0, "What is 2 + 3?", 3, c0, "{\"answer\": \"5\"}");
    const char *c1[] = {"#### 1,000", "#### 999"};
    add_group(q, tok, "rwm", 1, "What is 10 * 100?", 2, c1, "{\"answer\": 1000}");
    pid_t pid = start_worker(cfgp, "reward-1");
    for (uint64_t want = 0; want < 2; want++) {
        cpt_queue_item it;
        CHECK(next_scored(q, &it, 30));
        if (it.type != CPT_MSG_SCORED_GROUP) break;
        const cpt_rollout_group *g = &it.rollout;
        CHECK_EQ_INT((int)g->id.index, (int)want);
        CHECK(g->has_rewards);
        CHECK_EQ_INT((int)g->weight_version, 7);
        for (uint32_t c = 0; c < g->n_completions; c++) {
            /* math part: the right answer scores 1, a wrong one 0; length part: -0.01 per token beyond 4 */
            double math = -1, len = 1;
            CHECK(part_value(g, "math", c, &math));
            CHECK(part_value(g, "length", c, &len));
            double want_math = want == 0 ? (c == 1 ? 0 : 1) : (c == 0 ? 1 : 0);
            double n = g->completions[c].n_tokens;
            double want_len = n > 4 ? -0.01 * (n - 4) : 0;
            CHECK_NEAR(math, want_math, 1e-12);
            CHECK_NEAR(len, want_len, 1e-12);
            CHECK_NEAR(g->rewards[c], want_math + want_len, 1e-12);
            CHECK(g->completions[c].teacher_logprobs == NULL);
        }
        CHECK_EQ_INT(cpt_queue_done(q, &it, &err), 0);
        cpt_queue_item_free(&it);
    }
    /* the rollouts were acked: nothing pending for the reward group */
    CHECK_EQ_INT((int)test_pending(q, CPT_STREAM_ROLLOUTS, "reward"), 0);
    /* heartbeats reach the workers hash */
    usleep(500000);
    const char *hx[] = {"HEXISTS", cpt_queue_key(q, CPT_HASH_WORKERS), "reward-1"};
    CHECK_EQ_INT((int)test_int(q, 3, hx), 1);
    /* SIGTERM: drains and exits 0 */
    kill(pid, SIGTERM);
    int st = 0;
    CHECK(wait_exit(pid, 15, &st));
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    CHECK_EQ_INT((int)test_int(q, 3, hx), 0); /* a drained worker takes itself off the list */
    cpt_queue_close(q);
}

static void test_crash(test_redis *t, const cpt_tokenizer *tok, const char *dir) {
    char cfgp[256], lines[1400];
    snprintf(cfgp, sizeof cfgp, "%s/crash.toml", dir);
    snprintf(lines, sizeof lines, "type = \"plugin\"\nplugin_path = \"%s/plugins/libreward_crash_test.so\"\nplugin_config = \"crash\"\nplugin_timeout_ms = 5000",
             build_dir());
    write_config(cfgp, t->srv.url, "rwc", lines);
    cpt_queue *q = test_queue_open(t, "rwc", 64, 60000);
    const char *c0[] = {"#### 5", "#### 6"};
    add_group(q, tok, "rwc", 0, "What is 2 + 3?", 2, c0, "{\"answer\": \"5\"}");
    add_group(q, tok, "rwc", 1, "What is 2 + 4?", 2, c0, "{\"answer\": \"6\"}");
    pid_t pid = start_worker(cfgp, "reward-c");
    double t0 = cpt_now();
    while (test_xlen(q, CPT_STREAM_DEAD) < 2 && cpt_now() - t0 < 30) usleep(50000);
    CHECK_EQ_INT((int)test_xlen(q, CPT_STREAM_DEAD), 2);
    CHECK_EQ_INT((int)test_xlen(q, CPT_STREAM_SCORED), 0);
    /* the reason names the failure */
    const char *xr[] = {"XRANGE", cpt_queue_key(q, CPT_STREAM_DEAD), "-", "+"};
    cpt_err err;
    redisReply *r = cpt_redis_command(q->redis, 4, xr, NULL, xr[1], 0, &err);
    int found = 0;
    if (r && r->type == REDIS_REPLY_ARRAY)
        for (size_t i = 0; i < r->elements; i++) {
            redisReply *e = r->element[i];
            if (e->elements < 2) continue;
            redisReply *f = e->element[1];
            for (size_t j = 0; j + 1 < f->elements; j += 2)
                if (f->element[j + 1]->str && strstr(f->element[j + 1]->str, "scoring failed")) found++;
        }
    if (r) freeReplyObject(r);
    CHECK_EQ_INT(found, 2);
    /* the worker lives */
    int st = 0;
    CHECK_EQ_INT((int)waitpid(pid, &st, WNOHANG), 0);
    kill(pid, SIGTERM);
    CHECK(wait_exit(pid, 15, &st));
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    cpt_queue_close(q);
}

/* Forged or corrupt rollout groups go to dead with the reason and the worker lives on: a weight_version never
 * announced, more completions than rollout.group_size, a token outside the vocabulary, and a score beyond
 * reward.max_abs (length penalty 1000 per byte beyond 0 against a bound of 10). A good group is still scored. */
static void test_forged(test_redis *t, const cpt_tokenizer *tok, const char *dir) {
    char cfgp[256];
    snprintf(cfgp, sizeof cfgp, "%s/forged.toml", dir);
    write_config(cfgp, t->srv.url, "rwf",
                 "type = \"combined\"\ncombine = [\"math:1\", \"length:1\"]\nlength_penalty = 1000\n"
                 "length_max_penalty = 1000000\nlength_target = 20\nmax_abs = 10\n[rollout]\ngroup_size = 4");
    cpt_queue *q = test_queue_open(t, "rwf", 64, 60000);
    cpt_err err;
    CHECK_EQ_INT(cpt_queue_create_group(q, CPT_STREAM_SCORED, "trainer", &err), 0);
    cpt_weights_msg w;
    memset(&w, 0, sizeof w);
    snprintf(w.run, sizeof w.run, "rwf");
    w.version = 7;
    snprintf(w.transport, sizeof w.transport, "file");
    snprintf(w.location, sizeof w.location, "/nonexistent/v7.safetensors");
    snprintf(w.checksum, sizeof w.checksum, "xxh64:0000000000000000");
    CHECK_EQ_INT(cpt_queue_publish_weights(q, &w, &err), 0);
    const char *c2[] = {"#### 5", "#### 6"};
    const char *c5[] = {"#### 5", "#### 6", "#### 7", "#### 8", "#### 9"};
    const char *clong[] = {"#### 5 and a completion well beyond twenty bytes", "#### 6"};
    next_version = 1000000000000ull;
    add_group(q, tok, "rwf", 0, "What is 2 + 3?", 2, c2, "{\"answer\": \"5\"}");
    add_group(q, tok, "rwf", 1, "What is 2 + 3?", 5, c5, "{\"answer\": \"5\"}");
    next_bad_token = 1000000;
    add_group(q, tok, "rwf", 2, "What is 2 + 3?", 2, c2, "{\"answer\": \"5\"}");
    add_group(q, tok, "rwf", 3, "What is 2 + 3?", 2, clong, "{\"answer\": \"5\"}");
    add_group(q, tok, "rwf", 4, "What is 2 + 3?", 2, c2, "{\"answer\": \"5\"}");
    pid_t pid = start_worker(cfgp, "reward-f");
    cpt_queue_item it;
    CHECK(next_scored(q, &it, 30));
    CHECK_EQ_INT((int)it.rollout.id.index, 4);
    cpt_queue_item_free(&it);
    CHECK_EQ_INT((int)test_xlen(q, CPT_STREAM_DEAD), 4);
    CHECK_EQ_INT(test_dead_count(q, "weight_version: 1000000000000 was never announced (newest 7)"), 1);
    CHECK_EQ_INT(test_dead_count(q, "completions: 5, the run samples at most 4"), 1);
    CHECK_EQ_INT(test_dead_count(q, "id 1000000 at position 0 is not in the vocabulary"), 1);
    CHECK_EQ_INT(test_dead_count(q, "exceeds reward.max_abs = 10"), 1);
    int st = 0;
    CHECK_EQ_INT((int)waitpid(pid, &st, WNOHANG), 0);
    kill(pid, SIGTERM);
    CHECK(wait_exit(pid, 15, &st));
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    cpt_queue_close(q);
}

static cpt_model *tiny_model(int vocab, uint64_t seed, int value_head) {
    cpt_model *m = tiny_model_new(vocab, 1, seed);
    if (value_head) tiny_model_add_value_head(m, seed + 1);
    return m;
}

/* algo.type = opd with teacher.path, and a reward model added to the math reward (reward.model_path): the scored
 * group carries the teacher's logprobs and math + 0.5 * model score, equal to what the library computes here. */
static void test_opd_and_reward_model(test_redis *t, const cpt_tokenizer *tok, const char *dir) {
    cpt_err err;
    int vocab = cpt_tokenizer_vocab_size(tok);
    char tdir[256], rdir[256], cfgp[256], lines[1400];
    snprintf(tdir, sizeof tdir, "%s/teacher", dir);
    snprintf(rdir, sizeof rdir, "%s/rm", dir);
    cpt_model *teacher = tiny_model(vocab, 11, 0), *rm = tiny_model(vocab, 21, 1);
    CHECK_EQ_INT(cpt_model_save_hf(teacher, tdir, 0, &err), 0);
    CHECK_EQ_INT(cpt_model_save_hf(rm, rdir, 0, &err), 0);
    snprintf(cfgp, sizeof cfgp, "%s/opd.toml", dir);
    snprintf(lines, sizeof lines, "type = \"math\"\nmodel_path = \"%s\"\nmodel_only = false\nmodel_weight = 0.5\n"
             "[algo]\ntype = \"opd\"\n[teacher]\npath = \"%s\"", rdir, tdir);
    write_config(cfgp, t->srv.url, "rwo", lines);
    cpt_queue *q = test_queue_open(t, "rwo", 64, 60000);
    CHECK_EQ_INT(cpt_queue_create_group(q, CPT_STREAM_SCORED, "trainer", &err), 0);
    const char *prompt = "What is 2 + 3?";
    const char *comps[] = {"2 + 3 = 5\n#### 5", "#### 7"};
    next_mask = 1;
    add_group(q, tok, "rwo", 0, prompt, 2, comps, "{\"answer\": \"5\"}");
    pid_t pid = start_worker(cfgp, "reward-o");
    cpt_queue_item it;
    CHECK(next_scored(q, &it, 30));
    if (it.type == CPT_MSG_SCORED_GROUP) {
        const cpt_rollout_group *g = &it.rollout;
        CHECK_EQ_INT((int)g->n_completions, 2);
        for (uint32_t c = 0; c < g->n_completions; c++) {
            const cpt_completion *k = &g->completions[c];
            CHECK(k->teacher_logprobs != NULL);
            /* the completion mask passes through the reward worker */
            if (c == 0) CHECK(k->mask == NULL);
            else CHECK(k->mask && k->mask[0] == 0 && k->n_tokens > 1 && k->mask[1] == 1);
            float *want = malloc(k->n_tokens * sizeof *want);
            const int32_t *toks[1] = {k->tokens};
            int nt[1] = {(int)k->n_tokens};
            float *outs[1] = {want};
            CHECK_EQ_INT(cpt_teacher_logprobs(teacher, g->prompt, (int)g->n_prompt, 1, toks, nt, outs, &err), 0);
            for (uint32_t j = 0; j < k->n_tokens && k->teacher_logprobs; j++)
                CHECK_NEAR(k->teacher_logprobs[j], want[j], 1e-6);
            free(want);
            /* reward: math (1, 0) + 0.5 * the model's score of prompt text + completion text */
            double mv = -1, model_part = 0;
            CHECK(part_value(g, "math", c, &mv));
            CHECK(part_value(g, "model", c, &model_part));
            CHECK_NEAR(mv, c == 0 ? 1 : 0, 0);
            size_t len;
            char *ptext = cpt_tokenizer_decode(tok, g->prompt, g->n_prompt, 0, &len, &err);
            int32_t *pi = NULL, *ci = NULL;
            long np = cpt_tokenizer_encode(tok, ptext, strlen(ptext), &pi, &err);
            long nc = cpt_tokenizer_encode(tok, comps[c], strlen(comps[c]), &ci, &err);
            const int32_t *cc[1] = {ci};
            int ncc[1] = {(int)nc};
            double score = 0;
            CHECK_EQ_INT(cpt_reward_model_score_ids(rm, pi, (int)np, 1, cc, ncc, &score, &err), 0);
            CHECK_NEAR(model_part, score, 1e-6);
            CHECK_NEAR(g->rewards[c], mv + 0.5 * score, 1e-6);
            free(ptext);
            free(pi);
            free(ci);
        }
        CHECK_EQ_INT(cpt_queue_done(q, &it, &err), 0);
        cpt_queue_item_free(&it);
    }
    kill(pid, SIGTERM);
    int st = 0;
    CHECK(wait_exit(pid, 15, &st));
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    cpt_queue_close(q);
    cpt_model_free(teacher);
    cpt_model_free(rm);
}

/* teacher.device or reward.model_device = "cuda" where no GPU is seen: the worker exits non-zero at start, naming
 * the key; the default (auto) is the CPU models test_opd_and_reward_model scores with. */
static void test_model_devices(test_redis *t, const cpt_tokenizer *tok, const char *dir) {
    if (cpt_gpus_visible() > 0) return; /* the GPU placement itself: tests/gpu (test_cuda_model, stage learn) */
    cpt_err err;
    char tdir[256], rdir[256];
    snprintf(tdir, sizeof tdir, "%s/teacher", dir);
    snprintf(rdir, sizeof rdir, "%s/rm", dir);
    int vocab = cpt_tokenizer_vocab_size(tok);
    cpt_model *teacher = tiny_model(vocab, 11, 0), *rm = tiny_model(vocab, 21, 1);
    CHECK_EQ_INT(cpt_model_save_hf(teacher, tdir, 0, &err), 0);
    CHECK_EQ_INT(cpt_model_save_hf(rm, rdir, 0, &err), 0);
    for (int k = 0; k < 2; k++) {
        char cfgp[256], lines[600], logp[256];
        snprintf(cfgp, sizeof cfgp, "%s/dev_cuda%d.toml", dir, k);
        snprintf(logp, sizeof logp, "%s/dev_cuda%d.log", dir, k);
        if (k == 0)
            snprintf(lines, sizeof lines, "[algo]\ntype = \"opd\"\n[teacher]\npath = \"%s\"\ndevice = \"cuda\"", tdir);
        else
            snprintf(lines, sizeof lines, "type = \"math\"\nmodel_path = \"%s\"\nmodel_device = \"cuda\"", rdir);
        write_config(cfgp, t->srv.url, "rwc", lines);
        char exe[1024];
        snprintf(exe, sizeof exe, "%s/cpt-reward", build_dir());
        pid_t pid = fork();
        if (pid == 0) {
            if (!freopen(logp, "w", stderr)) _exit(126);
            execl(exe, exe, cfgp, "--worker-id", "reward-c", (char *)NULL);
            _exit(127);
        }
        int st = 0;
        CHECK(wait_exit(pid, 15, &st));
        CHECK(WIFEXITED(st) && WEXITSTATUS(st) != 0 && WEXITSTATUS(st) < 126);
        const char *want = k == 0 ? "teacher.device = \"cuda\"" : "reward.model_device = \"cuda\"";
        char *log = cpt_read_file(logp, NULL, &err);
        CHECK_MSG(log && strstr(log, want), "want %s; log: %s", want, log ? log : err.msg);
        free(log);
    }
    cpt_model_free(teacher);
    cpt_model_free(rm);
}

int main(void) {
    test_redis t;
    test_redis_start(&t, "everysec");
    cpt_err err;
    cpt_tokenizer *tok = cpt_tokenizer_load("examples/tiny-tokenizer", &err);
    if (!tok) { fprintf(stderr, "%s\n", err.msg); return 1; }
    test_scores(&t, tok, t.dir);
    test_crash(&t, tok, t.dir);
    test_forged(&t, tok, t.dir);
    test_opd_and_reward_model(&t, tok, t.dir);
    test_model_devices(&t, tok, t.dir);
    cpt_tokenizer_free(tok);
    test_redis_stop(&t);
    return check_summary("reward_worker");
}
