/* cpt-rollout against a real redis-server:
 *  - prompt groups in, rollout groups out, tagged with the weight version announced (v1, then v2); the recorded
 *    logprobs equal a forward pass of that version's weights (so the tag is the truth); a group whose min_version
 *    is above the weights held waits until a new enough version is published;
 *  - heartbeats land in the workers hash; SIGTERM drains and exits 0;
 *  - a worker killed with -9 mid-group: the group is reclaimed after claim_idle_ms and completed by another;
 *  - a weights announcement naming a file outside RUN_DIR/weights (directly or through a symlink) is refused and
 *    logged, and the worker lives on to load the next good version;
 *  - one that fails to load is read again only after growing pauses, whatever the form of its path. */
#include <math.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <sys/inotify.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/fs.h"
#include "model/model.h"
#include "tests/check.h"
#include "tests/integration/redis_helper.h"
#include "weights/weights_pub.h"

#define RUN "rt"
static test_redis T;
static char CONFIG[256];

static cpt_model_config tiny_cfg(void) {
    cpt_model_config c = {0};
    c.arch = CPT_ARCH_QWEN2;
    c.vocab_size = 64, c.hidden_size = 32, c.intermediate_size = 64, c.num_layers = 2;
    c.num_heads = 2, c.num_kv_heads = 1, c.head_dim = 16;
    c.rms_norm_eps = 1e-6f, c.rope_theta = 10000.0f, c.tie_word_embeddings = 1, c.qkv_bias = 1;
    c.max_position_embeddings = 8192, c.bos_token_id = -1, c.eos_token_id = -1;
    return c;
}

static pid_t start_worker(const char *id, const char *const *extra) {
    char log[300];
    snprintf(log, sizeof log, "%s/%s.log", T.dir, id);
    pid_t pid = fork();
    if (pid == 0) {
        FILE *f = freopen(log, "w", stderr);
        (void)f;
        setenv("CPT_RUN", T.dir, 1);
        char exe[512];
        snprintf(exe, sizeof exe, "%s/cpt-rollout", getenv("CPT_BUILD") ? getenv("CPT_BUILD") : "build");
        const char *argv[32] = {"cpt-rollout", CONFIG, "--worker-id", id};
        int n = 4;
        for (int i = 0; extra && extra[i] && n < 31; i++) argv[n++] = extra[i];
        argv[n] = NULL;
        execv(exe, (char *const *)argv);
        perror("exec cpt-rollout");
        _exit(127);
    }
    return pid;
}

static void add_group(cpt_queue *q, uint64_t index, uint64_t min_version, int G, int max_new, int n_prompt) {
    int32_t prompt[64];
    for (int i = 0; i < n_prompt; i++) prompt[i] = (int32_t)((index * 7 + (uint64_t)i * 3) % 64);
    cpt_prompt_group g;
    memset(&g, 0, sizeof g);
    snprintf(g.run, sizeof g.run, RUN);
    g.id = (cpt_group_id){0, index};
    g.n_prompt = (uint32_t)n_prompt;
    g.prompt = prompt;
    g.n_samples = (uint32_t)G;
    g.sampling = (cpt_sampling){.temperature = 1.0f, .top_p = 1.0f, .max_new_tokens = (uint32_t)max_new, .seed = index};
    g.min_version = min_version;
    cpt_buf b;
    cpt_err err;
    CHECK_MSG(cpt_prompt_group_encode(&g, &b, &err) == 0, "%s", err.msg);
    CHECK_MSG(cpt_queue_add(q, CPT_STREAM_PROMPTS, b.data, b.len, NULL, &err) == 0, "%s", err.msg);
    cpt_buf_free(&b);
}

static void publish(cpt_queue *q, uint64_t version, cpt_model **keep) {
    cpt_model_config c = tiny_cfg();
    cpt_err err;
    cpt_model *m = cpt_model_new_random(&c, 100 + version, &err);
    cpt_weights_msg w;
    CHECK_MSG(cpt_weights_write(m, T.dir, RUN, version, &w, &err) == 0, "%s", err.msg);
    CHECK_MSG(cpt_queue_publish_weights(q, &w, &err) == 0, "%s", err.msg);
    *keep = m;
}

/* Worst gap between the group's behaviour logprobs and a forward pass of m. */
static double logprob_gap(cpt_model *m, const cpt_rollout_group *g) {
    double worst = 0;
    for (uint32_t k = 0; k < g->n_completions; k++) {
        const cpt_completion *c = &g->completions[k];
        int n = (int)(g->n_prompt + c->n_tokens);
        int32_t *tok = malloc(sizeof(int32_t) * n), *tgt = malloc(sizeof(int32_t) * n), st[2] = {0, n};
        float *lp = malloc(sizeof(float) * n);
        memcpy(tok, g->prompt, sizeof(int32_t) * g->n_prompt);
        memcpy(tok + g->n_prompt, c->tokens, sizeof(int32_t) * c->n_tokens);
        for (int i = 0; i < n; i++) tgt[i] = i + 1 < n ? tok[i + 1] : -1;
        cpt_batch b = {n, 1, tok, st, tgt};
        cpt_forward_out out = {.logprobs = lp};
        cpt_err err;
        if (cpt_model_forward(m, &b, &out, 0, &err)) worst = 1e9;
        for (uint32_t i = 0; i < c->n_tokens; i++)
            worst = fmax(worst, fabs((double)c->logprobs[i] - lp[g->n_prompt - 1 + i]));
        free(tok), free(tgt), free(lp);
    }
    return worst;
}

/* Reads one rollout group within timeout_s; 1 if found. */
static int next_rollout(cpt_queue *q, cpt_queue_item *it, double timeout_s) {
    double t0 = cpt_now();
    cpt_err err;
    while (cpt_now() - t0 < timeout_s) {
        int got = cpt_queue_next(q, CPT_STREAM_ROLLOUTS, "check", "checker", it, &err);
        if (got == 1) {
            cpt_queue_done(q, it, &err);
            return 1;
        }
        if (got < 0) fprintf(stderr, "reading rollouts: %s\n", err.msg);
    }
    return 0;
}

static int wait_exit(pid_t pid, double timeout_s, int *status) {
    double t0 = cpt_now();
    while (cpt_now() - t0 < timeout_s) {
        if (waitpid(pid, status, WNOHANG) == pid) return 1;
        usleep(20000);
    }
    return 0;
}

static void random_init(cpt_queue *q, cpt_model *v3);

static void versions_and_drain(cpt_queue *q) {
    cpt_model *v1 = NULL, *v2 = NULL, *v3 = NULL;
    publish(q, 1, &v1);
    for (uint64_t i = 0; i < 3; i++) add_group(q, i, 1, 3, 8, 5 + (int)i);
    pid_t w = start_worker("w1", NULL);
    cpt_queue_item it;
    int got = 0;
    for (int k = 0; k < 3 && next_rollout(q, &it, 30); k++, got++) {
        CHECK_EQ_INT(it.rollout.weight_version, 1);
        CHECK_EQ_INT(it.rollout.n_completions, 3);
        CHECK_EQ_STR(it.rollout.worker, "w1");
        CHECK_EQ_INT(it.rollout.n_prompt, 5 + it.rollout.id.index);
        for (uint32_t c = 0; c < it.rollout.n_completions; c++) {
            CHECK_EQ_INT(it.rollout.completions[c].n_tokens, 8);
            CHECK_EQ_INT(it.rollout.completions[c].finish, CPT_FINISH_LENGTH);
        }
        double gap = logprob_gap(v1, &it.rollout);
        CHECK_MSG(gap < 1e-4, "v1 group %llu: logprob gap %g", (unsigned long long)it.rollout.id.index, gap);
        cpt_queue_item_free(&it);
    }
    CHECK_EQ_INT(got, 3);

    /* v2: groups that need it are answered by it */
    publish(q, 2, &v2);
    add_group(q, 10, 2, 2, 6, 4);
    add_group(q, 11, 2, 2, 6, 4);
    for (got = 0; got < 2 && next_rollout(q, &it, 30); got++) {
        CHECK_EQ_INT(it.rollout.weight_version, 2);
        double gap = logprob_gap(v2, &it.rollout);
        CHECK_MSG(gap < 1e-4, "v2 group: logprob gap %g (v1 would give %g)", gap, logprob_gap(v1, &it.rollout));
        cpt_queue_item_free(&it);
    }
    CHECK_EQ_INT(got, 2);

    /* Forged prompts go to dead with the reason, and the worker keeps taking work: a min_version never announced
     * (the trainer announces a version before it issues prompts for it; the worker would hold the group, and take
     * nothing else, waiting for it), more samples than rollout.group_size (8). */
    add_group(q, 20, 3, 2, 6, 4);
    add_group(q, 21, 1000000000000ull, 2, 6, 4);
    add_group(q, 22, 2, 4096, 6, 4);
    CHECK(!next_rollout(q, &it, 1.5));
    CHECK_EQ_INT(test_dead_count(q, "min_version: 3 was never announced (newest 2)"), 1);
    CHECK_EQ_INT(test_dead_count(q, "min_version: 1000000000000 was never announced"), 1);
    CHECK_EQ_INT(test_dead_count(q, "n_samples: 4096, the run samples at most 8"), 1);
    CHECK_EQ_INT(test_pending(q, CPT_STREAM_PROMPTS, "rollout"), 0);
    /* min_version 3 once v3 is announced: answered by v3 */
    publish(q, 3, &v3);
    add_group(q, 23, 3, 2, 6, 4);
    CHECK(next_rollout(q, &it, 30));
    CHECK_EQ_INT(it.rollout.id.index, 23);
    CHECK_EQ_INT(it.rollout.weight_version, 3);
    CHECK(logprob_gap(v3, &it.rollout) < 1e-4);
    cpt_queue_item_free(&it);

    /* heartbeat in the workers hash */
    const char *hget[] = {"HEXISTS", cpt_queue_key(q, CPT_HASH_WORKERS), "w1"};
    CHECK_EQ_INT(test_int(q, 3, hget), 1);

    /* SIGTERM while a long group is in flight: it is finished and forwarded, then exit 0 */
    add_group(q, 30, 3, 2, 400, 4);
    while (test_pending(q, CPT_STREAM_PROMPTS, "rollout") < 1) usleep(2000);
    kill(w, SIGTERM);
    int status = 0;
    CHECK(wait_exit(w, 30, &status));
    CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status %d", status);
    CHECK(next_rollout(q, &it, 5));
    CHECK_EQ_INT(it.rollout.id.index, 30);
    CHECK_EQ_INT(it.rollout.completions[0].n_tokens, 400);
    cpt_queue_item_free(&it);
    CHECK_EQ_INT(test_pending(q, CPT_STREAM_PROMPTS, "rollout"), 0);
    CHECK_EQ_INT(test_int(q, 3, hget), 0); /* a drained worker takes itself off the list */
    random_init(q, v3);
    cpt_model_free(v1), cpt_model_free(v2), cpt_model_free(v3);
}

static void killed_mid_group(cpt_queue *q) {
    /* 4 samples x 400 tokens: the worker is frozen (SIGSTOP) the moment it holds the group, long before it could
     * finish it, then killed */
    long long before = test_xlen(q, CPT_STREAM_ROLLOUTS);
    add_group(q, 40, 0, 4, 400, 8);
    pid_t a = start_worker("w2", NULL);
    double t0 = cpt_now();
    while (test_pending(q, CPT_STREAM_PROMPTS, "rollout") < 1 && cpt_now() - t0 < 30) usleep(1000);
    kill(a, SIGSTOP);
    kill(a, SIGKILL);
    int status;
    waitpid(a, &status, 0);
    CHECK_MSG(test_xlen(q, CPT_STREAM_ROLLOUTS) == before, "the group finished before the kill: no test");
    CHECK_EQ_INT(test_pending(q, CPT_STREAM_PROMPTS, "rollout"), 1);
    pid_t b = start_worker("w3", NULL);
    cpt_queue_item it;
    int got = next_rollout(q, &it, 120); /* 1600 tokens on one thread: generous for the sanitizers on a busy machine */
    CHECK_MSG(got, "w3 did not finish the claimed group within 120 s");
    if (!got) { /* no group to look into; a worker still generating would outlive the test and hold ctest's pipe */
        kill(b, SIGKILL);
        waitpid(b, &status, 0);
        return;
    }
    CHECK_EQ_INT(it.rollout.id.index, 40);
    CHECK_EQ_STR(it.rollout.worker, "w3");
    CHECK_EQ_INT(it.rollout.n_completions, 4);
    CHECK(it.rollout.n_completions == 4 && it.rollout.completions[3].n_tokens == 400);
    CHECK_EQ_INT(it.rollout.weight_version, 3);
    cpt_queue_item_free(&it);
    CHECK_EQ_INT(test_pending(q, CPT_STREAM_PROMPTS, "rollout"), 0);
    kill(b, SIGTERM);
    CHECK(wait_exit(b, 30, &status) && WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* model.init = random: the worker waits for a weight announcement and builds the model from the model.* keys. */
static void random_init(cpt_queue *q, cpt_model *v3) {
    static const char *const ov[] = {"model.init=random", "model.path=", "model.vocab_size=64", "model.hidden_size=32",
                                     "model.intermediate_size=64", "model.num_layers=2", "model.num_heads=2",
                                     "model.num_kv_heads=1", "model.max_position_embeddings=8192", NULL};
    add_group(q, 50, 3, 2, 6, 5);
    pid_t w = start_worker("w4", ov);
    cpt_queue_item it;
    CHECK(next_rollout(q, &it, 30));
    CHECK_EQ_INT(it.rollout.id.index, 50);
    CHECK_EQ_STR(it.rollout.worker, "w4");
    CHECK_EQ_INT(it.rollout.weight_version, 3);
    double gap = logprob_gap(v3, &it.rollout);
    CHECK_MSG(gap < 1e-4, "random-init worker: logprob gap %g against v3", gap);
    cpt_queue_item_free(&it);
    kill(w, SIGTERM);
    int status;
    CHECK(wait_exit(w, 30, &status) && WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* 1 when the worker's log holds text. */
static int log_has(const char *id, const char *text) {
    char path[300];
    snprintf(path, sizeof path, "%s/%s.log", T.dir, id);
    cpt_err err;
    char *log = cpt_read_file(path, NULL, &err);
    int has = log && strstr(log, text);
    free(log);
    return has;
}

/* Lines of a worker's log holding text. */
static int log_count(const char *id, const char *text) {
    char path[300];
    snprintf(path, sizeof path, "%s/%s.log", T.dir, id);
    cpt_err err;
    char *log = cpt_read_file(path, NULL, &err);
    int n = 0;
    for (const char *p = log; p && (p = strstr(p, text)); p += strlen(text)) n++;
    free(log);
    return n;
}

/* Announcements naming a file outside RUN_DIR/weights (a path elsewhere, a symlink out of the folder) are refused:
 * logged, the worker keeps its weights and lives on, and the next good version loads. */
static void foreign_weights(cpt_queue *q) {
    cpt_model_config c = tiny_cfg();
    cpt_err err;
    char outside[300];
    snprintf(outside, sizeof outside, "%s/elsewhere", T.dir);
    cpt_model *m4 = cpt_model_new_random(&c, 104, &err), *m6 = NULL;
    cpt_weights_msg w;
    CHECK_MSG(cpt_weights_write(m4, outside, RUN, 4, &w, &err) == 0, "%s", err.msg); /* a valid file, checksum too */
    CHECK(strstr(w.location, "/elsewhere/weights/v4.safetensors") != NULL);
    CHECK_MSG(cpt_queue_publish_weights(q, &w, &err) == 0, "%s", err.msg);
    pid_t pid = start_worker("w5", NULL);
    add_group(q, 60, 4, 2, 6, 4);
    cpt_queue_item it;
    CHECK(!next_rollout(q, &it, 2.0)); /* v4 never loads */
    CHECK(log_has("w5", "is not inside the run's weights folder"));
    /* a symlink in the weights folder pointing out of it */
    char link[400];
    snprintf(link, sizeof link, "%s/weights/v5.safetensors", T.dir);
    unlink(link);
    CHECK(symlink(w.location, link) == 0);
    w.version = 5;
    snprintf(w.location, sizeof w.location, "%s", link);
    CHECK_MSG(cpt_queue_publish_weights(q, &w, &err) == 0, "%s", err.msg);
    add_group(q, 61, 5, 2, 6, 4);
    CHECK(!next_rollout(q, &it, 2.0));
    CHECK(log_has("w5", "weights v5 not loaded"));
    CHECK_EQ_INT(waitpid(pid, NULL, WNOHANG), 0); /* alive */
    publish(q, 6, &m6);
    int got = 0;
    for (int k = 0; k < 2 && next_rollout(q, &it, 30); k++, got++) {
        CHECK_EQ_INT(it.rollout.weight_version, 6);
        CHECK(logprob_gap(m6, &it.rollout) < 1e-4);
        cpt_queue_item_free(&it);
    }
    CHECK_EQ_INT(got, 2);
    kill(pid, SIGTERM);
    int status;
    CHECK(wait_exit(pid, 30, &status) && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    cpt_model_free(m4), cpt_model_free(m6);
}

/* A trainer that resumes from an older checkpoint announces an older version: a prompt the worker holds for a
 * newer version of the trainer before it (that version may never come again) goes to dead as obsolete, and the
 * worker takes the resumed trainer's groups instead of waiting for it. */
static void resumed_trainer(cpt_queue *q) {
    cpt_model_config c = tiny_cfg();
    cpt_err err;
    char outside[300];
    snprintf(outside, sizeof outside, "%s/elsewhere", T.dir);
    cpt_model *m8 = cpt_model_new_random(&c, 108, &err), *m7 = NULL;
    cpt_weights_msg w;
    /* v8 is announced but never loads here (outside the weights folder), so the worker holds group 80 for it */
    CHECK_MSG(cpt_weights_write(m8, outside, RUN, 8, &w, &err) == 0, "%s", err.msg);
    CHECK_MSG(cpt_queue_publish_weights(q, &w, &err) == 0, "%s", err.msg);
    pid_t pid = start_worker("w6", NULL);
    add_group(q, 80, 8, 2, 6, 4);
    cpt_queue_item it;
    CHECK(!next_rollout(q, &it, 1.5));
    CHECK_EQ_INT(test_dead_count(q, "obsolete: min_version 8"), 0);
    /* the resumed trainer announces v7 and issues its groups for it */
    publish(q, 7, &m7);
    add_group(q, 81, 7, 2, 6, 4);
    CHECK(next_rollout(q, &it, 30));
    CHECK_EQ_INT(it.rollout.id.index, 81);
    CHECK_EQ_INT(it.rollout.weight_version, 7);
    CHECK(logprob_gap(m7, &it.rollout) < 1e-4);
    cpt_queue_item_free(&it);
    CHECK_EQ_INT(test_dead_count(q, "obsolete: min_version 8 is above the announced version 7"), 1);
    CHECK_EQ_INT(test_pending(q, CPT_STREAM_PROMPTS, "rollout"), 0);
    kill(pid, SIGTERM);
    int status;
    CHECK(wait_exit(pid, 30, &status) && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    cpt_model_free(m7), cpt_model_free(m8);
}

/* A trainer restarted by a requeue resumes at the version its predecessor announced last and announces it again.
 * The worker, started in between, found the predecessor's announcement and could not load it (its cuda_ipc handle
 * died with that process; here: a checksum that does not match). The new announcement of the same version loads.
 * And an announcement that failed because its file was not there yet loads once it is, without another one. */
static void restarted_trainer(cpt_queue *q) {
    cpt_model_config c = tiny_cfg();
    cpt_err err;
    cpt_model *m9 = cpt_model_new_random(&c, 109, &err), *m10 = cpt_model_new_random(&c, 110, &err);
    cpt_weights_msg w;
    CHECK_MSG(cpt_weights_write(m9, T.dir, RUN, 9, &w, &err) == 0, "%s", err.msg);
    cpt_weights_msg stale = w;
    snprintf(stale.checksum, sizeof stale.checksum, "xxh64:0123456789abcdef");
    CHECK_MSG(cpt_queue_publish_weights(q, &stale, &err) == 0, "%s", err.msg);
    pid_t pid = start_worker("w7", NULL);
    add_group(q, 90, 9, 2, 6, 4);
    cpt_queue_item it;
    CHECK(!next_rollout(q, &it, 1.5));
    CHECK(log_has("w7", "weights v9 not loaded"));
    CHECK_MSG(cpt_queue_publish_weights(q, &w, &err) == 0, "%s", err.msg); /* the restarted trainer: v9 again */
    CHECK(next_rollout(q, &it, 30));
    CHECK_EQ_INT(it.rollout.id.index, 90);
    CHECK_EQ_INT(it.rollout.weight_version, 9);
    CHECK(logprob_gap(m9, &it.rollout) < 1e-4);
    cpt_queue_item_free(&it);
    /* v10 announced before its file is in place: it fails, then loads on a later try of the same announcement */
    CHECK_MSG(cpt_weights_write(m10, T.dir, RUN, 10, &w, &err) == 0, "%s", err.msg);
    char away[400];
    snprintf(away, sizeof away, "%s.away", w.location);
    CHECK(rename(w.location, away) == 0);
    CHECK_MSG(cpt_queue_publish_weights(q, &w, &err) == 0, "%s", err.msg);
    add_group(q, 91, 10, 2, 6, 4);
    CHECK(!next_rollout(q, &it, 1.0));
    CHECK(log_has("w7", "weights v10 not loaded"));
    CHECK(rename(away, w.location) == 0);
    CHECK(next_rollout(q, &it, 30));
    CHECK_EQ_INT(it.rollout.id.index, 91);
    CHECK_EQ_INT(it.rollout.weight_version, 10);
    CHECK(logprob_gap(m10, &it.rollout) < 1e-4);
    cpt_queue_item_free(&it);
    /* a trainer resumed from an older checkpoint trains to step 10 again and announces v10 with other weights (its
     * checksum differs): the worker loads them, not keeping the lost attempt's v10 under the same number */
    cpt_model *m10b = cpt_model_new_random(&c, 210, &err);
    CHECK_MSG(cpt_weights_write(m10b, T.dir, RUN, 10, &w, &err) == 0, "%s", err.msg);
    CHECK_MSG(cpt_queue_publish_weights(q, &w, &err) == 0, "%s", err.msg);
    for (double t0 = cpt_now(); log_count("w7", "weights v10 loaded") < 2 && cpt_now() - t0 < 30;) usleep(20000);
    CHECK_EQ_INT(log_count("w7", "weights v10 loaded"), 2);
    add_group(q, 92, 10, 2, 6, 4);
    CHECK(next_rollout(q, &it, 30));
    CHECK_EQ_INT(it.rollout.id.index, 92);
    CHECK(logprob_gap(m10b, &it.rollout) < 1e-4);
    CHECK(logprob_gap(m10, &it.rollout) > 1e-3);
    cpt_queue_item_free(&it);
    kill(pid, SIGTERM);
    int status;
    CHECK(wait_exit(pid, 30, &status) && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    cpt_model_free(m9), cpt_model_free(m10), cpt_model_free(m10b);
}


/* Opens of file (inotify IN_OPEN) over `seconds`. */
static int count_opens(const char *file, double seconds) {
    int fd = inotify_init1(IN_NONBLOCK);
    CHECK(fd >= 0);
    if (fd < 0) return -1;
    CHECK(inotify_add_watch(fd, file, IN_OPEN) >= 0);
    int n = 0;
    double t0 = cpt_now();
    char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
    while (cpt_now() - t0 < seconds) {
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, 100) <= 0) continue;
        ssize_t k = read(fd, buf, sizeof buf);
        for (char *e = buf; k > 0 && e < buf + k; e += sizeof(struct inotify_event) + ((struct inotify_event *)e)->len)
            n++;
    }
    close(fd);
    return n;
}

/* An announcement that fails to load (a checksum that never matches) is read again only after growing pauses (2 s,
 * then 4, ...), also when its location is not in canonical form (the worker resolves it before reading): in the
 * 3.5 s after the first failure at most two reads (one retry, plus one an open checksum read may straddle), where a
 * worker without the pause reads it at every poll (some 17 times). */
static void failed_load_backoff(cpt_queue *q) {
    cpt_model_config c = tiny_cfg();
    cpt_err err;
    for (int k = 0; k < 2; k++) {
        const uint64_t version = 20 + (uint64_t)k;
        cpt_model *m = cpt_model_new_random(&c, 300 + version, &err);
        cpt_weights_msg w;
        CHECK_MSG(cpt_weights_write(m, T.dir, RUN, version, &w, &err) == 0, "%s", err.msg);
        char file[sizeof w.location];
        snprintf(file, sizeof file, "%s", w.location);
        if (k == 1) /* the same file through "/./": what realpath turns into the canonical path */
            snprintf(w.location, sizeof w.location, "%s/weights/./v%llu.safetensors", T.dir,
                     (unsigned long long)version);
        snprintf(w.checksum, sizeof w.checksum, "xxh64:0123456789abcdef");
        CHECK_MSG(cpt_queue_publish_weights(q, &w, &err) == 0, "%s", err.msg);
        const char *id = k ? "w9b" : "w9a";
        pid_t pid = start_worker(id, NULL);
        /* from the first failure on (the worker's start may take seconds on a loaded machine) */
        for (double t0 = cpt_now(); !log_has(id, "not loaded") && cpt_now() - t0 < 60;) usleep(20000);
        CHECK(log_has(id, "not loaded"));
        int n = count_opens(file, 3.5);
        printf("a failing announcement (%s location): the file read %d times in the 3.5 s after its first failure\n",
               k ? "non-canonical" : "canonical", n);
        CHECK_MSG(n <= 2, "%s location: the weights file was read %d times in the 3.5 s after the first failure "
                  "(a retry after 2 s, the next 4 s later)", k ? "non-canonical" : "canonical", n);
        CHECK_EQ_INT(waitpid(pid, NULL, WNOHANG), 0); /* alive */
        kill(pid, SIGTERM);
        int status;
        CHECK(wait_exit(pid, 30, &status) && WIFEXITED(status) && WEXITSTATUS(status) == 0);
        cpt_model_free(m);
    }
}

int main(void) {
    test_redis_start(&T, "no");
    cpt_err err;
    cpt_model_config c = tiny_cfg();
    cpt_model *base = cpt_model_new_random(&c, 1, &err);
    char base_dir[300];
    snprintf(base_dir, sizeof base_dir, "%s/base", T.dir);
    CHECK_MSG(cpt_model_save_hf(base, base_dir, 0, &err) == 0, "%s", err.msg);
    cpt_model_free(base);
    snprintf(CONFIG, sizeof CONFIG, "%s/config.toml", T.dir);
    FILE *f = fopen(CONFIG, "w");
    fprintf(f,
            "[run]\nname = \"%s\"\ndir = \"%s\"\n[model]\npath = \"%s\"\n"
            "[queue]\nurl = \"%s\"\nclaim_idle_ms = 1000\nblock_ms = 100\n"
            "[rollout]\nslots = 4\nweight_poll_ms = 50\nheartbeat_s = 0.2\nstop_on_eos = false\nthreads = 1\n",
            RUN, T.dir, base_dir, T.srv.url);
    fclose(f);
    cpt_queue *q = test_queue_open(&T, RUN, 1000, 1000);
    CHECK_EQ_INT(cpt_queue_create_group(q, CPT_STREAM_ROLLOUTS, "check", &err), 0);
    CHECK_EQ_INT(cpt_queue_create_group(q, CPT_STREAM_PROMPTS, "rollout", &err), 0);
    versions_and_drain(q);
    killed_mid_group(q);
    foreign_weights(q);
    resumed_trainer(q);
    restarted_trainer(q);
    failed_load_backoff(q);
    cpt_queue_close(q);
    int rc = check_summary("test_rollout_worker");
    if (!rc) test_redis_stop(&T);
    else fprintf(stderr, "logs kept in %s\n", T.dir);
    return rc;
}
