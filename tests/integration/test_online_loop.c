/* The online trainer against a real redis-server, with this test playing rollout and reward: it takes the prompt
 * groups the trainer issues, loads the announced weight version from its file, answers G completions (a "good"
 * one rewarded 1, a "bad" one rewarded 0) with their true behaviour logprobs, and forwards them as scored groups.
 *
 *   1. sync run, 6 steps: every prompt asks for the current version; a duplicated scored group is trained once;
 *      versions 1..6 are published, older files pruned; the good completion's logprob rises, the bad one's falls.
 *   2. the same run resumed to 10 steps and stopped with SIGTERM while a step's prompts are unanswered: exit 3 with
 *      a checkpoint; restarted, it issues exactly those ids again (a new attempt) and finishes.
 *   3. an async run (max_staleness 1) where one answer claims an old version: dropped as stale, issued again.
 *   4. a run whose checkpoint falls exactly at the end of an epoch (4 records, 2 steps of 2 groups): the cursor is
 *      saved as (1, 0) and the resumed run goes on with epoch 1's ids.
 *   5. forged scored groups (a token outside the vocabulary, a weight_version never issued, too few completions, a
 *      group id never issued, a reward of 1e39, bytes that are not msgpack) among the real answers: each lands in
 *      dead with its reason, the trainer lives, and the run trains exactly its 12 groups, none skipped.
 *   6. a group lost on the way (acked, never answered) is issued again after queue.group_timeout_s. */
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/config_keys.h"
#include "core/checksum.h"
#include "core/metrics.h"
#include "core/tokenizer.h"
#include "queue/lease.h"
#include "redis_helper.h"
#include "tests/check.h"
#include "trainer/checkpoint.h"
#include "trainer/online.h"
#include "trainer/online_book.h"
#include "weights/model_init.h"

static volatile sig_atomic_t child_stop;
static void on_term(int sig) { child_stop = sig; }

typedef struct player {
    cpt_queue *q;
    cpt_config *cfg;
    cpt_tokenizer *tok;
    cpt_model *m;
    uint64_t version;
    int have_version;
    int32_t good[4], bad[4];
    /* what was seen */
    cpt_group_id seen[256];
    int n_seen, attempts_gt0, wrong_min_version, n_prompts;
    int32_t first_prompt[256];
    int n_first_prompt;
} player;

/* The trainer in a child process; log: a file for its stderr (unbuffered, read while it runs), or NULL. */
static pid_t start_trainer_logged(const char *cfg_path, int n_ov, char **ov, const char *log) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        if (log) {
            if (!freopen(log, "w", stderr)) _exit(1);
            setvbuf(stderr, NULL, _IONBF, 0); /* a reopened stderr is a buffered file */
        }
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_term;
        sigaction(SIGTERM, &sa, NULL);
        cpt_err err;
        cpt_config *cfg = cpt_config_load(cfg_path, n_ov, ov, &err);
        if (!cfg) {
            fprintf(stderr, "trainer config: %s\n", err.msg);
            _exit(1);
        }
        int rc = cpt_online_train(cfg, cfg_path, &child_stop, &err);
        if (rc == 1) fprintf(stderr, "trainer: %s\n", err.msg);
        cpt_config_free(cfg);
        _exit(rc);
    }
    return pid;
}

static pid_t start_trainer(const char *cfg_path, int n_ov, char **ov) {
    return start_trainer_logged(cfg_path, n_ov, ov, NULL);
}

/* Loads the announced version if it changed (checking size and checksum). */
static int sync_weights(player *p) {
    cpt_err err;
    cpt_weights_msg w;
    int rc = cpt_queue_get_weights(p->q, &w, &err);
    if (rc != 1) return -1;
    if (p->have_version && w.version == p->version) return 0;
    uint64_t h, bytes;
    CHECK_EQ_INT(cpt_checksum_file(w.location, &h, &bytes, &err), 0);
    char want[200], hex[CPT_CHECKSUM_HEX_LEN + 1];
    snprintf(want, sizeof want, "xxh64:%s", cpt_checksum_hex(h, hex));
    CHECK_EQ_STR(w.checksum, want);
    CHECK_EQ_INT(bytes, w.bytes);
    CHECK_EQ_STR(w.transport, "file");
    if (cpt_model_load_weights(p->m, w.location, &err)) {
        fprintf(stderr, "load weights: %s\n", err.msg);
        return -1;
    }
    p->version = w.version;
    p->have_version = 1;
    return 0;
}

/* Mean logprob of completion c after prompt under p->m. */
static double completion_logprob(player *p, const int32_t *prompt, int np, const int32_t *c, int nc, float *lp_out) {
    int n = np + nc;
    int32_t *tok = malloc((size_t)n * sizeof *tok), *tgt = malloc((size_t)n * sizeof *tgt), ss[2] = {0, n};
    float *lp = malloc((size_t)n * sizeof *lp);
    memcpy(tok, prompt, (size_t)np * sizeof *tok);
    memcpy(tok + np, c, (size_t)nc * sizeof *tok);
    for (int i = 0; i < n; i++) tgt[i] = i + 1 < n ? tok[i + 1] : -1;
    cpt_batch b = {.n_tokens = n, .n_seqs = 1, .tokens = tok, .seq_start = ss, .targets = tgt};
    cpt_forward_out fo = {.logprobs = lp};
    cpt_err err;
    double s = NAN;
    if (!cpt_model_forward(p->m, &b, &fo, 0, &err)) {
        s = 0;
        for (int j = 0; j < nc; j++) {
            s += lp[np - 1 + j];
            if (lp_out) lp_out[j] = lp[np - 1 + j];
        }
        s /= nc;
    }
    free(tok);
    free(tgt);
    free(lp);
    return s;
}

/* Answers one prompt group: even samples good (reward 1), odd bad (0). claim_version >= 0 lies about the version. */
static void answer(player *p, cpt_queue_item *it, int64_t claim_version, int duplicate) {
    cpt_err err;
    CHECK_EQ_INT(sync_weights(p), 0);
    cpt_prompt_group *pg = &it->prompt;
    uint32_t G = pg->n_samples;
    cpt_completion comp[16];
    double rewards[16];
    float lps[16][4];
    memset(comp, 0, sizeof comp);
    for (uint32_t k = 0; k < G && k < 16; k++) {
        const int32_t *c = k % 2 ? p->bad : p->good;
        completion_logprob(p, pg->prompt, (int)pg->n_prompt, c, 4, lps[k]);
        comp[k].n_tokens = 4;
        comp[k].tokens = (int32_t *)c;
        comp[k].logprobs = lps[k];
        comp[k].finish = CPT_FINISH_STOP;
        rewards[k] = k % 2 ? 0 : 1;
    }
    cpt_rollout_group g;
    memset(&g, 0, sizeof g);
    snprintf(g.run, sizeof g.run, "%s", pg->run);
    g.id = pg->id;
    g.n_prompt = pg->n_prompt;
    g.prompt = pg->prompt;
    g.n_completions = G;
    g.completions = comp;
    g.weight_version = claim_version >= 0 ? (uint64_t)claim_version : p->version;
    snprintf(g.worker, sizeof g.worker, "test-player");
    g.extra = pg->extra;
    g.has_rewards = 1;
    g.rewards = rewards;
    cpt_buf buf;
    CHECK_EQ_INT(cpt_rollout_group_encode(&g, &buf, &err), 0);
    CHECK_EQ_INT(cpt_queue_forward(p->q, it, CPT_STREAM_SCORED, buf.data, buf.len, NULL, &err), 0);
    if (duplicate) CHECK_EQ_INT(cpt_queue_add(p->q, CPT_STREAM_SCORED, buf.data, buf.len, NULL, &err), 0);
    cpt_buf_free(&buf);
}

/* Forged scored groups about the prompt it: kinds 0..4 a valid group but for one field; the wire id carries an
 * attempt the trainer never issued, so the dead entries do not count as failures of the real attempt (the reasons
 * are about the content, checked first). Then bytes that are not msgpack. */
static void forge(player *p, const cpt_queue_item *it) {
    cpt_err err;
    const cpt_prompt_group *pg = &it->prompt;
    for (int kind = 0; kind < 5; kind++) {
        cpt_completion comp[4];
        double rewards[4];
        float lps[4][4] = {{-1, -1, -1, -1}, {-1, -1, -1, -1}, {-1, -1, -1, -1}, {-1, -1, -1, -1}};
        int32_t toks[4][4];
        memset(comp, 0, sizeof comp);
        for (int k = 0; k < 4; k++) {
            memcpy(toks[k], k % 2 ? p->bad : p->good, sizeof toks[k]);
            comp[k] = (cpt_completion){.n_tokens = 4, .tokens = toks[k], .logprobs = lps[k], .finish = CPT_FINISH_STOP};
            rewards[k] = k % 2;
        }
        cpt_rollout_group g;
        memset(&g, 0, sizeof g);
        snprintf(g.run, sizeof g.run, "%s", pg->run);
        g.id = cpt_online_wire_id(cpt_online_base_id(pg->id), 0x7fff);
        g.n_prompt = pg->n_prompt;
        g.prompt = pg->prompt;
        g.n_completions = 4;
        g.completions = comp;
        g.weight_version = p->version;
        snprintf(g.worker, sizeof g.worker, "forger");
        g.has_rewards = 1;
        g.rewards = rewards;
        if (kind == 0) toks[2][1] = 100000;
        if (kind == 1) g.weight_version = 1000000000000ull;
        if (kind == 2) g.n_completions = 3;
        if (kind == 3) g.id = (cpt_group_id){0, 999999};
        if (kind == 4) rewards[0] = 1e39;
        cpt_buf buf;
        CHECK_EQ_INT(cpt_rollout_group_encode(&g, &buf, &err), 0);
        CHECK_EQ_INT(cpt_queue_add(p->q, CPT_STREAM_SCORED, buf.data, buf.len, NULL, &err), 0);
        cpt_buf_free(&buf);
    }
    CHECK_EQ_INT(cpt_queue_add(p->q, CPT_STREAM_SCORED, "\xc1 not msgpack", 14, NULL, &err), 0);
}

static void note_prompt(player *p, const cpt_queue_item *it) {
    p->n_prompts++;
    if (p->n_seen < 256) p->seen[p->n_seen++] = it->prompt.id;
    if (cpt_online_attempt(it->prompt.id)) p->attempts_gt0++;
    if (!p->n_first_prompt) {
        p->n_first_prompt = (int)it->prompt.n_prompt;
        memcpy(p->first_prompt, it->prompt.prompt, it->prompt.n_prompt * sizeof(int32_t));
    }
}

/* Plays until the trainer exits; returns its exit status. stop_after: SIGTERM once this many prompts were taken
 * (those after the first `answer_limit` are left unanswered); stale_at: answer prompt number stale_at with version 0. */
static int play(player *p, pid_t pid, int sync, int answer_limit, int stale_at, int dup_at, int forge_at,
                int lose_at) {
    int status = -1;
    int taken = 0, termed = 0;
    double t0 = cpt_now();
    for (;;) {
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid) break;
        if (cpt_now() - t0 > 120) {
            fprintf(stderr, "trainer did not finish in 120 s\n");
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            return -1;
        }
        cpt_queue_item it;
        cpt_err err;
        int rc = cpt_queue_next(p->q, CPT_STREAM_PROMPTS, "rollout", "player", &it, &err);
        if (rc < 0) {
            fprintf(stderr, "player: %s\n", err.msg);
            continue;
        }
        if (rc == 0) continue;
        note_prompt(p, &it);
        taken++;
        if (answer_limit > 0 && taken > answer_limit) {
            if (!termed) kill(pid, SIGTERM);
            termed = 1;
            cpt_queue_item_free(&it);
            continue;
        }
        CHECK_EQ_INT(sync_weights(p), 0);
        if (sync && it.prompt.min_version != p->version) p->wrong_min_version++;
        if (taken == lose_at) { /* acked, never answered: a group lost on the way */
            CHECK_EQ_INT(cpt_queue_done(p->q, &it, &err), 0);
            cpt_queue_item_free(&it);
            continue;
        }
        if (taken == forge_at) forge(p, &it);
        answer(p, &it, taken == stale_at ? 0 : -1, taken == dup_at);
        cpt_queue_item_free(&it);
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static double last_metric(const char *run_dir, const char *key) {
    char path[512];
    snprintf(path, sizeof path, "%s/metrics.jsonl", run_dir);
    cpt_metrics_series s;
    cpt_err err;
    if (cpt_metrics_read_series(path, key, &s, &err)) return NAN;
    double v = s.n ? s.values[s.n - 1] : NAN;
    cpt_metrics_series_free(&s);
    return v;
}

/* How many metrics lines of a step carry "version" (one per trained step). */
static int version_lines(const char *run_dir, int step) {
    char path[512], want[64];
    snprintf(path, sizeof path, "%s/metrics.jsonl", run_dir);
    snprintf(want, sizeof want, "\"step\":%d,", step);
    char *text = cpt_read_file(path, NULL, NULL);
    int n = 0;
    for (char *l = text; l && *l;) {
        char *nl = strchr(l, '\n');
        if (nl) *nl = '\0';
        if (!strncmp(l + 1, want, strlen(want)) && strstr(l, "\"version\":")) n++;
        l = nl ? nl + 1 : l + strlen(l);
    }
    free(text);
    return n;
}

static void write_config(const char *path, const char *run, const char *run_dir, const char *url, const char *mode) {
    const char *src = getenv("CPT_SRC");
    char text[4096];
    snprintf(text, sizeof text,
             "[run]\nname = \"%s\"\ndir = \"%s\"\nseed = 3\n"
             "[algo]\ntype = \"grpo\"\nkl_beta = 0.0\n"
             "[model]\ninit = \"random\"\nhidden_size = 32\nintermediate_size = 64\nnum_layers = 1\nnum_heads = 2\n"
             "num_kv_heads = 1\nmax_position_embeddings = 128\n"
             "[tokenizer]\npath = \"%s/examples/tiny-tokenizer\"\n"
             "[data]\ntrain = \"%s/examples/data/arithmetic_rl_train.jsonl\"\nchat_template = \"chatml\"\n"
             "[async]\nmode = \"%s\"\nmax_staleness = 1\n"
             "[rollout]\ngroup_size = 4\n"
             "[train]\ngroups_per_step = 2\nsteps = 6\nmax_seq_len = 64\nthreads = 1\n"
             "[optim]\nlr = 0.01\nschedule = \"constant\"\n"
             "[checkpoint]\nevery = 2\nkeep_last = 2\n"
             "[online]\nkeep_weight_versions = 2\nidle_warn_s = 30\n"
             "[queue]\nurl = \"%s\"\nblock_ms = 100\n",
             run, run_dir, src ? src : ".", src ? src : ".", mode, url);
    cpt_err err;
    if (cpt_write_file_atomic(path, text, strlen(text), &err)) {
        fprintf(stderr, "%s\n", err.msg);
        exit(1);
    }
}

static void player_init(player *p, test_redis *R, const char *cfg_path, const char *run) {
    cpt_err err;
    memset(p, 0, sizeof *p);
    p->cfg = cpt_config_load(cfg_path, 0, NULL, &err);
    if (!p->cfg) { fprintf(stderr, "%s\n", err.msg); exit(1); }
    p->tok = cpt_tokenizer_load(cpt_cfg_str(p->cfg, "tokenizer.path"), &err);
    if (!p->tok) { fprintf(stderr, "%s\n", err.msg); exit(1); }
    p->m = cpt_model_from_config(p->cfg, cpt_tokenizer_vocab_size(p->tok), -1, -1, &err);
    if (!p->m) { fprintf(stderr, "%s\n", err.msg); exit(1); }
    p->q = test_queue_open(R, run, 1024, 60000);
    CHECK_EQ_INT(cpt_queue_create_group(p->q, CPT_STREAM_PROMPTS, "rollout", &err), 0);
    int32_t end = cpt_tokenizer_token_id(p->tok, "<|im_end|>");
    int32_t a = cpt_tokenizer_token_id(p->tok, "7"), b = cpt_tokenizer_token_id(p->tok, "3");
    CHECK(end >= 0 && a >= 0 && b >= 0);
    int32_t good[4] = {a, a, a, end}, bad[4] = {b, b, b, end};
    memcpy(p->good, good, sizeof good);
    memcpy(p->bad, bad, sizeof bad);
}

/* R->dir/run-NAME made, with its config.toml (run "olNAME", async.mode MODE) at cfg_path. */
static void make_run(test_redis *R, const char *name, const char *mode, char *run_dir, size_t run_cap, char *cfg_path,
                     size_t cfg_cap) {
    snprintf(run_dir, run_cap, "%s/run-%s", R->dir, name);
    cpt_err err;
    CHECK_MSG(cpt_mkdir_p(run_dir, 0755, &err) == 0, "%s", err.msg);
    snprintf(cfg_path, cfg_cap, "%s/config.toml", run_dir);
    char run[64];
    snprintf(run, sizeof run, "ol%s", name);
    write_config(cfg_path, run, run_dir, R->srv.url, mode);
}

static void player_free(player *p) {
    cpt_queue_close(p->q);
    cpt_model_free(p->m);
    cpt_tokenizer_free(p->tok);
    cpt_config_free(p->cfg);
}

static void test_sync_and_resume(test_redis *R) {
    char run_dir[256], cfg_path[300], path[400];
    cpt_err err;
    make_run(R, "sync", "sync", run_dir, sizeof run_dir, cfg_path, sizeof cfg_path);
    player p;
    player_init(&p, R, cfg_path, "olsync");

    /* 1. six steps, one duplicated scored group */
    pid_t pid = start_trainer(cfg_path, 0, NULL);
    int rc = play(&p, pid, 1, 0, 0, 1, 0, 0);
    CHECK_EQ_INT(rc, 0);
    CHECK_EQ_INT(p.n_prompts, 12);
    CHECK_EQ_INT(p.attempts_gt0, 0);
    CHECK_EQ_INT(p.wrong_min_version, 0);
    for (int i = 0; i < p.n_seen; i++)
        for (int j = 0; j < i; j++) CHECK(!(p.seen[i].epoch == p.seen[j].epoch && p.seen[i].index == p.seen[j].index));
    CHECK_EQ_INT(last_metric(run_dir, "groups/trained"), 12);
    CHECK_EQ_INT(last_metric(run_dir, "groups/duplicates"), 1);
    CHECK_EQ_INT(last_metric(run_dir, "version"), 6);
    CHECK(isfinite(last_metric(run_dir, "reward/mean")));
    CHECK(isfinite(last_metric(run_dir, "perf/train_tok_s")));
    CHECK(isfinite(last_metric(run_dir, "time/weight_sync")));
    CHECK_EQ_INT(sync_weights(&p), 0);
    CHECK_EQ_INT(p.version, 6);
    snprintf(path, sizeof path, "%s/weights/v6.safetensors", run_dir);
    CHECK(cpt_path_exists(path));
    snprintf(path, sizeof path, "%s/weights/v5.safetensors", run_dir);
    CHECK(cpt_path_exists(path));
    snprintf(path, sizeof path, "%s/weights/v4.safetensors", run_dir);
    CHECK(!cpt_path_exists(path));
    snprintf(path, sizeof path, "%s/checkpoints/step-6/trainer_state.json", run_dir);
    CHECK(cpt_path_exists(path));

    /* the rewarded completion became likelier than under the initial weights (v0 = the same random init) */
    double good6 = completion_logprob(&p, p.first_prompt, p.n_first_prompt, p.good, 4, NULL);
    double bad6 = completion_logprob(&p, p.first_prompt, p.n_first_prompt, p.bad, 4, NULL);
    cpt_model *m0 = cpt_model_from_config(p.cfg, cpt_tokenizer_vocab_size(p.tok), -1, -1, &err);
    cpt_model *keep = p.m;
    p.m = m0;
    double good0 = completion_logprob(&p, p.first_prompt, p.n_first_prompt, p.good, 4, NULL);
    double bad0 = completion_logprob(&p, p.first_prompt, p.n_first_prompt, p.bad, 4, NULL);
    p.m = keep;
    cpt_model_free(m0);
    printf("sync: logp(good) %.3f -> %.3f, logp(bad) %.3f -> %.3f over 6 steps\n", good0, good6, bad0, bad6);
    CHECK_MSG(good6 > good0 + 0.5, "good %.3f -> %.3f", good0, good6);
    CHECK_MSG(bad6 < bad0 - 0.5, "bad %.3f -> %.3f", bad0, bad6);

    /* 2. resume to 10 steps; answer one step (2 groups), then SIGTERM with the next step's 2 prompts unanswered */
    char *ov[] = {"train.steps=10"};
    p.n_seen = 0;
    p.n_prompts = 0;
    pid = start_trainer(cfg_path, 1, ov);
    rc = play(&p, pid, 1, 2, 0, 0, 0, 0);
    CHECK_EQ_INT(rc, 3);
    CHECK(p.n_prompts >= 3); /* the 4th may or may not be read before the trainer exits */
    /* step 8's ids: consecutive positions of the data order */
    cpt_group_id s2 = cpt_online_base_id(p.seen[2]);
    cpt_group_id pending[2] = {s2, {s2.epoch, s2.index + 1}};
    snprintf(path, sizeof path, "%s/checkpoints/step-7/trainer_state.json", run_dir);
    CHECK(cpt_path_exists(path));
    /* the unanswered prompts stay pending for the player (as for a dead worker); this is the third trainer start
     * on this queue, so its attempts start at 2 * CPT_ONLINE_ATTEMPTS_PER_START: the 4 new ids carry that attempt
     * and the 2 restored ones the next */
    p.n_seen = 0;
    p.n_prompts = 0;
    p.attempts_gt0 = 0;
    /* lines of a lost attempt past the checkpoint (steps 8, 9): the restart removes them, so each step is once */
    snprintf(path, sizeof path, "%s/metrics.jsonl", run_dir);
    FILE *mf = fopen(path, "a");
    if (mf) fprintf(mf, "{\"step\":8,\"version\":8}\n{\"step\":9,\"version\":9}\n");
    if (mf) fclose(mf);
    pid = start_trainer(cfg_path, 1, ov);
    rc = play(&p, pid, 1, 0, 0, 0, 0, 0);
    CHECK_EQ_INT(rc, 0);
    CHECK_EQ_INT(p.n_prompts, 6);       /* 2 issued again + 4 new */
    CHECK_EQ_INT(p.attempts_gt0, 6);
    for (int k = 0; k < 2; k++) {
        CHECK_EQ_INT(cpt_online_attempt(p.seen[k]), 2 * CPT_ONLINE_ATTEMPTS_PER_START + 1);
        CHECK_EQ_INT(cpt_online_base_id(p.seen[k]).index, pending[k].index);
        CHECK_EQ_INT(cpt_online_base_id(p.seen[k]).epoch, pending[k].epoch);
    }
    CHECK_EQ_INT(last_metric(run_dir, "version"), 10);
    CHECK_EQ_INT(last_metric(run_dir, "groups/trained"), 20); /* the whole run: 10 steps of 2, over 3 starts */
    CHECK_EQ_INT(last_metric(run_dir, "groups/duplicates"), 1);
    for (int step = 1; step <= 10; step++)
        CHECK_MSG(version_lines(run_dir, step) == 1, "step %d has %d version lines", step, version_lines(run_dir, step));
    snprintf(path, sizeof path, "%s/checkpoints/step-10/trainer_state.json", run_dir);
    cpt_train_state st;
    CHECK_EQ_INT(cpt_train_state_read(path, &st, &err), 0);
    CHECK_EQ_INT(cpt_train_state_total(&st, "groups/trained"), 20);
    CHECK_EQ_INT(st.lease_token, 3); /* the third trainer start on this queue */
    cpt_train_state_free(&st);

    /* 3. a second trainer while another holds the lease: it waits online.lease_wait_s, exits 1, writes nothing */
    int64_t tok = 0;
    CHECK_EQ_INT(cpt_lease_try(p.q->redis, "olsync", "intruder:1", 60000, &tok, NULL, 0, NULL, &err), 1);
    long long prompts = test_xlen(p.q, CPT_STREAM_PROMPTS);
    snprintf(path, sizeof path, "%s/metrics.jsonl", run_dir);
    char *before = cpt_read_file(path, NULL, &err);
    char *ov2[] = {"train.steps=12", "online.lease_wait_s=1"};
    pid = start_trainer(cfg_path, 2, ov2);
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 1);
    CHECK_EQ_INT(test_xlen(p.q, CPT_STREAM_PROMPTS), prompts);
    char *after = cpt_read_file(path, NULL, &err);
    CHECK(before && after && !strcmp(before, after));
    free(before);
    free(after);
    cpt_weights_msg w;
    CHECK_EQ_INT(cpt_queue_get_weights(p.q, &w, &err), 1);
    CHECK_EQ_INT(w.version, 10);
    CHECK_EQ_INT(cpt_lease_give_back(p.q->redis, "olsync", tok, &err), 1);

    /* 4. a trainer paused past its lease while another took over: when it wakes it is fenced off and exits 1
     *    without another prompt, weights announcement, metrics line or checkpoint */
    char *ov3[] = {"train.steps=14", "online.lease_ttl_s=1"};
    long long issued = test_xlen(p.q, CPT_STREAM_PROMPTS);
    pid = start_trainer(cfg_path, 2, ov3);
    double t0 = cpt_now();
    while (test_xlen(p.q, CPT_STREAM_PROMPTS) < issued + 2 && cpt_now() - t0 < 30) usleep(20000);
    CHECK_EQ_INT(test_xlen(p.q, CPT_STREAM_PROMPTS), issued + 2);
    kill(pid, SIGSTOP);
    int64_t newer = 0;
    t0 = cpt_now();
    while (cpt_lease_try(p.q->redis, "olsync", "successor:1", 60000, &newer, NULL, 0, NULL, &err) == 0 &&
           cpt_now() - t0 < 10)
        usleep(100000);
    CHECK(newer > tok);
    before = cpt_read_file(path, NULL, &err);
    snprintf(path, sizeof path, "%s/checkpoints/latest", run_dir);
    char *latest_before = cpt_read_file(path, NULL, &err);
    kill(pid, SIGCONT);
    rc = play(&p, pid, 1, 0, 0, 0, 0, 0); /* answers the two prompts it issued: it may train, but not publish */
    CHECK_EQ_INT(rc, 1);
    CHECK_EQ_INT(test_xlen(p.q, CPT_STREAM_PROMPTS), issued + 2);
    CHECK_EQ_INT(cpt_queue_get_weights(p.q, &w, &err), 1);
    CHECK_EQ_INT(w.version, 10);
    snprintf(path, sizeof path, "%s/weights/v11.safetensors", run_dir);
    CHECK(!cpt_path_exists(path));
    snprintf(path, sizeof path, "%s/checkpoints/latest", run_dir);
    char *latest_after = cpt_read_file(path, NULL, &err);
    CHECK(latest_before && latest_after && !strcmp(latest_before, latest_after));
    snprintf(path, sizeof path, "%s/metrics.jsonl", run_dir);
    after = cpt_read_file(path, NULL, &err);
    CHECK(before && after && !strcmp(before, after));
    free(before);
    free(after);
    free(latest_before);
    free(latest_after);
    CHECK_EQ_INT(cpt_lease_give_back(p.q->redis, "olsync", newer, &err), 1);
    player_free(&p);
}

static void test_async_stale(test_redis *R) {
    char run_dir[256], cfg_path[300];
    make_run(R, "async", "async", run_dir, sizeof run_dir, cfg_path, sizeof cfg_path);
    player p;
    player_init(&p, R, cfg_path, "olasync");
    pid_t pid = start_trainer(cfg_path, 0, NULL);
    /* the 9th prompt is answered claiming version 0: by then the trainer is at version >= 2 (async issues 4 ahead) */
    int rc = play(&p, pid, 0, 0, 9, 0, 0, 0);
    CHECK_EQ_INT(rc, 0);
    CHECK(last_metric(run_dir, "groups/dropped_stale") >= 1);
    CHECK(p.attempts_gt0 >= 1);
    CHECK_EQ_INT(last_metric(run_dir, "groups/trained"), 12);
    CHECK_EQ_INT(last_metric(run_dir, "version"), 6);
    CHECK(last_metric(run_dir, "staleness/mean") <= 1);
    printf("async: %d prompts for 12 groups, %g dropped stale, %d re-issued\n", p.n_prompts,
           last_metric(run_dir, "groups/dropped_stale"), p.attempts_gt0);
    player_free(&p);
}

static void test_epoch_end_resume(test_redis *R) {
    char run_dir[256], cfg_path[300], data[300], path[400], ov_data[400];
    cpt_err err;
    make_run(R, "epoch", "sync", run_dir, sizeof run_dir, cfg_path, sizeof cfg_path);
    snprintf(data, sizeof data, "%s/four.jsonl", run_dir);
    const char *four = "{\"prompt\":\"What is 5 * 5?\",\"answer\":\"25\"}\n"
                       "{\"prompt\":\"What is 41 + 62?\",\"answer\":\"103\"}\n"
                       "{\"prompt\":\"What is 8 + 12?\",\"answer\":\"20\"}\n"
                       "{\"prompt\":\"What is 75 + 15?\",\"answer\":\"90\"}\n";
    CHECK_EQ_INT(cpt_write_file_atomic(data, four, strlen(four), &err), 0);
    snprintf(ov_data, sizeof ov_data, "data.train=%s", data);
    player p;
    player_init(&p, R, cfg_path, "olepoch");

    char *ov2[] = {ov_data, "train.steps=2"};
    pid_t pid = start_trainer(cfg_path, 2, ov2);
    CHECK_EQ_INT(play(&p, pid, 1, 0, 0, 0, 0, 0), 0);
    CHECK_EQ_INT(p.n_prompts, 4);
    cpt_train_state st;
    memset(&st, 0, sizeof st);
    snprintf(path, sizeof path, "%s/checkpoints/step-2/trainer_state.json", run_dir);
    CHECK_EQ_INT(cpt_train_state_read(path, &st, &err), 0);
    CHECK_EQ_INT(st.data_epoch, 1);
    CHECK_EQ_INT(st.data_index, 0);
    cpt_train_state_free(&st);

    char *ov4[] = {ov_data, "train.steps=4"};
    p.n_seen = 0;
    p.n_prompts = 0;
    pid = start_trainer(cfg_path, 2, ov4);
    CHECK_EQ_INT(play(&p, pid, 1, 0, 0, 0, 0, 0), 0);
    CHECK_EQ_INT(p.n_prompts, 4);
    int epoch1 = 1;
    for (int i = 0; i < p.n_seen; i++)
        if (cpt_online_base_id(p.seen[i]).epoch != 1) epoch1 = 0;
    CHECK(epoch1);
    CHECK_EQ_INT(last_metric(run_dir, "version"), 4);
    player_free(&p);
}

static void test_forged_scored(test_redis *R) {
    char run_dir[256], cfg_path[300];
    make_run(R, "forged", "sync", run_dir, sizeof run_dir, cfg_path, sizeof cfg_path);
    player p;
    player_init(&p, R, cfg_path, "olforged");
    pid_t pid = start_trainer(cfg_path, 0, NULL);
    CHECK_EQ_INT(play(&p, pid, 1, 0, 0, 0, 3, 0), 0);
    CHECK_EQ_INT(p.n_prompts, 12);
    CHECK_EQ_INT(p.attempts_gt0, 0);
    CHECK_EQ_INT(last_metric(run_dir, "groups/trained"), 12);
    CHECK_EQ_INT(last_metric(run_dir, "groups/skipped"), 0);
    CHECK_EQ_INT(last_metric(run_dir, "groups/failed"), 0);
    CHECK_EQ_INT(last_metric(run_dir, "version"), 6);
    CHECK_EQ_INT((int)test_xlen(p.q, CPT_STREAM_DEAD), 6);
    CHECK_EQ_INT(test_dead_count(p.q, "token 100000 outside the vocabulary"), 1);
    CHECK_EQ_INT(test_dead_count(p.q, "weight_version 1000000000000 was never issued"), 1);
    CHECK_EQ_INT(test_dead_count(p.q, "3 completions, the run asks 4"), 1);
    CHECK_EQ_INT(test_dead_count(p.q, "group id never issued by this run"), 1);
    CHECK_EQ_INT(test_dead_count(p.q, "exceeds reward.max_abs"), 1);
    CHECK_EQ_INT(test_dead_count(p.q, "msgpack"), 1);
    player_free(&p);
}

/* A group lost on the way (the player acks its prompt and never answers) is issued again once
 * queue.group_timeout_s has passed, and the run trains its 12 groups: 1 failed attempt, nothing skipped. */
static void test_group_timeout(test_redis *R) {
    char run_dir[256], cfg_path[300];
    make_run(R, "timeout", "sync", run_dir, sizeof run_dir, cfg_path, sizeof cfg_path);
    player p;
    player_init(&p, R, cfg_path, "oltimeout");
    char *ov[] = {"queue.group_timeout_s=1"};
    pid_t pid = start_trainer(cfg_path, 1, ov);
    CHECK_EQ_INT(play(&p, pid, 1, 0, 0, 0, 0, 3), 0);
    CHECK_EQ_INT(p.n_prompts, 13);
    CHECK_EQ_INT(p.attempts_gt0, 1);
    CHECK_EQ_INT(last_metric(run_dir, "groups/trained"), 12);
    CHECK_EQ_INT(last_metric(run_dir, "groups/failed"), 1);
    CHECK_EQ_INT(last_metric(run_dir, "groups/skipped"), 0);
    CHECK_EQ_INT(last_metric(run_dir, "groups/reissued"), 1);
    player_free(&p);
}

/* Polls path (up to secs) for a line holding every one of the texts; 1 when found. */
static int log_line_has(const char *path, double secs, const char *a, const char *b) {
    for (double t = 0; t < secs; t += 0.1) {
        cpt_err err;
        char *text = cpt_read_file(path, NULL, &err);
        for (char *l = text; l && *l;) {
            char *nl = strchr(l, '\n');
            if (nl) *nl = '\0';
            if (strstr(l, a) && (!b || strstr(l, b))) {
                free(text);
                return 1;
            }
            l = nl ? nl + 1 : l + strlen(l);
        }
        free(text);
        usleep(100000);
    }
    return 0;
}

/* A trainer that gets no scored group says what the workers' heartbeats show: none at all; then a rollout worker on
 * another weight version than the one announced (as one that cannot load it is), and a reward worker. */
static void test_idle_report(test_redis *R) {
    char run_dir[256], cfg_path[300], log[320];
    cpt_err err;
    make_run(R, "idle", "sync", run_dir, sizeof run_dir, cfg_path, sizeof cfg_path);
    snprintf(log, sizeof log, "%s/trainer.log", run_dir);
    char *ov[] = {"online.idle_warn_s=1"};
    pid_t pid = start_trainer_logged(cfg_path, 1, ov, log);
    if (!log_line_has(log, 20, "no scored group for", "no worker has sent a heartbeat")) {
        char *text = cpt_read_file(log, NULL, &err);
        CHECK_MSG(0, "no idle warning without workers; the trainer's log:\n%s", text ? text : "(none)");
        free(text);
    }
    cpt_queue *q = test_queue_open(R, "olidle", 1024, 60000);
    struct timeval tv;
    gettimeofday(&tv, NULL);
    cpt_heartbeat_msg h;
    memset(&h, 0, sizeof h);
    snprintf(h.run, sizeof h.run, "olidle");
    snprintf(h.worker, sizeof h.worker, "rollout-z");
    snprintf(h.role, sizeof h.role, "rollout");
    snprintf(h.host, sizeof h.host, "here");
    h.version = 7, h.time = tv.tv_sec + tv.tv_usec / 1e6;
    CHECK_EQ_INT(cpt_queue_heartbeat(q, &h, &err), 0);
    snprintf(h.worker, sizeof h.worker, "reward-z");
    snprintf(h.role, sizeof h.role, "reward");
    h.version = 0;
    CHECK_EQ_INT(cpt_queue_heartbeat(q, &h, &err), 0);
    CHECK(log_line_has(log, 20, "weights v0 announced); workers:", "rollout-z holds weights v7 (heartbeat"));
    CHECK(log_line_has(log, 1, "reward-z (reward, heartbeat", "1 rollout worker not on v0: see its log"));
    kill(pid, SIGTERM);
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status));
    cpt_queue_close(q);
}

int main(void) {
    test_redis R;
    test_redis_start(&R, "everysec");
    test_sync_and_resume(&R);
    test_async_stale(&R);
    test_epoch_end_resume(&R);
    test_forged_scored(&R);
    test_group_timeout(&R);
    test_idle_report(&R);
    test_redis_stop(&R);
    return check_summary("test_online_loop");
}
