/* Forged and corrupt messages in every stream of a live `cpt run` (sync GRPO on a tiny random model, one trainer,
 * one rollout and one reward worker, the private redis-server): prompts with a min_version never announced, 4096
 * samples, a token outside the vocabulary; rollout groups with a weight_version never announced and too many
 * completions; scored groups with a token outside the vocabulary, a weight_version never issued, a reward of 1e39;
 * bytes that are not msgpack in each of the three; and a well-formed prompt of a group id the trainer never issued
 * (the workers answer it, the trainer refuses it). Each lands in dead with its reason, no role dies or restarts, and
 * the run finishes with exactly steps x groups_per_step groups trained, none skipped, none failed.
 * Runs the cpt binary of $CPT_BUILD. */
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/metrics.h"
#include "queue/conn.h"
#include "redis_helper.h"
#include "tests/check.h"

#define RUN "forged"
#define STEPS 100
#define GPS 2

static const char *build_dir(void) { return getenv("CPT_BUILD") ? getenv("CPT_BUILD") : "build"; }

static void write_config(const char *path, const char *run_dir) {
    const char *src = getenv("CPT_SRC") ? getenv("CPT_SRC") : ".";
    FILE *f = fopen(path, "w");
    if (!f) { perror(path); exit(1); }
    fprintf(f,
            "[run]\nname = \"%s\"\ndir = \"%s\"\nseed = 3\n"
            "[algo]\ntype = \"grpo\"\nkl_beta = 0.0\n"
            "[model]\ninit = \"random\"\nhidden_size = 32\nintermediate_size = 64\nnum_layers = 1\nnum_heads = 2\n"
            "num_kv_heads = 1\nmax_position_embeddings = 128\n"
            "[tokenizer]\npath = \"%s/examples/tiny-tokenizer\"\n"
            "[data]\ntrain = \"%s/examples/data/arithmetic_rl_train.jsonl\"\nchat_template = \"none\"\n"
            "[async]\nmode = \"sync\"\n"
            "[rollout]\ngroup_size = 4\nslots = 4\nthreads = 1\nweight_poll_ms = 50\n"
            "[sampling]\nmax_new_tokens = 6\n"
            "[train]\ngroups_per_step = %d\nsteps = %d\nmax_seq_len = 64\nthreads = 1\nlog_every = 10\n"
            "[optim]\nlr = 0.001\nschedule = \"constant\"\n"
            "[checkpoint]\nevery = 0\nkeep_last = 1\n"
            "[reward]\ntype = \"format\"\nformat_regex = \"[0-9]\"\n"
            "[roles]\nrollout = 1\nreward = 1\n"
            "[queue]\nblock_ms = 100\n",
            RUN, run_dir, src, src, GPS, STEPS);
    fclose(f);
}

static void add(cpt_queue *q, cpt_stream s, const cpt_buf *b) {
    cpt_err err;
    CHECK_MSG(cpt_queue_add(q, s, b->data, b->len, NULL, &err) == 0, "%s", err.msg);
}

static void forge_prompt(cpt_queue *q, uint64_t index, uint64_t min_version, uint32_t n_samples, int32_t bad_token) {
    int32_t prompt[3] = {5, 6, bad_token >= 0 ? bad_token : 7};
    cpt_prompt_group g;
    memset(&g, 0, sizeof g);
    snprintf(g.run, sizeof g.run, RUN);
    g.id = (cpt_group_id){0, index};
    g.n_prompt = 3;
    g.prompt = prompt;
    g.n_samples = n_samples;
    g.sampling = (cpt_sampling){.temperature = 1.0f, .top_p = 1.0f, .max_new_tokens = 4, .seed = index};
    g.min_version = min_version;
    cpt_buf b;
    cpt_err err;
    CHECK_MSG(cpt_prompt_group_encode(&g, &b, &err) == 0, "%s", err.msg);
    add(q, CPT_STREAM_PROMPTS, &b);
    cpt_buf_free(&b);
}

/* scored: has_rewards; n completions of 3 tokens; one field made wrong by the caller's arguments */
static void forge_group(cpt_queue *q, cpt_stream s, uint64_t index, uint64_t weight_version, uint32_t n,
                        int32_t bad_token, double reward) {
    int32_t prompt[3] = {5, 6, 7};
    cpt_completion comp[64];
    int32_t toks[64][3];
    float lps[64][3];
    double rewards[64];
    memset(comp, 0, sizeof comp);
    for (uint32_t k = 0; k < n; k++) {
        for (int t = 0; t < 3; t++) toks[k][t] = 10 + t, lps[k][t] = -1.0f;
        comp[k] = (cpt_completion){.n_tokens = 3, .tokens = toks[k], .logprobs = lps[k], .finish = CPT_FINISH_STOP};
        rewards[k] = k == 0 ? reward : 0;
    }
    if (bad_token >= 0) toks[0][1] = bad_token;
    cpt_rollout_group g;
    memset(&g, 0, sizeof g);
    snprintf(g.run, sizeof g.run, RUN);
    g.id = (cpt_group_id){0, index};
    g.n_prompt = 3;
    g.prompt = prompt;
    g.n_completions = n;
    g.completions = comp;
    g.weight_version = weight_version;
    snprintf(g.worker, sizeof g.worker, "forger");
    g.has_rewards = s == CPT_STREAM_SCORED;
    g.rewards = g.has_rewards ? rewards : NULL;
    cpt_buf b;
    cpt_err err;
    CHECK_MSG(cpt_rollout_group_encode(&g, &b, &err) == 0, "%s", err.msg);
    add(q, s, &b);
    cpt_buf_free(&b);
}

static int step_of(const char *run_dir) {
    char path[512];
    snprintf(path, sizeof path, "%s/metrics.jsonl", run_dir);
    cpt_metrics_series s;
    cpt_err err;
    if (cpt_metrics_read_series(path, "version", &s, &err)) return 0;
    int v = s.n ? (int)s.values[s.n - 1] : 0;
    cpt_metrics_series_free(&s);
    return v;
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

static const char *const want_dead[] = {
    "min_version: 1000000000000 was never announced",     /* prompts */
    "n_samples: 4096, the run samples at most 4",
    "prompt token 100000 at 2 is outside the vocabulary",
    "weight_version: 1000000000000 was never announced", /* rollouts */
    "completions: 64, the run samples at most 4",
    "token 100000 outside the vocabulary",               /* scored */
    "weight_version 1000000000000 was never issued",
    "exceeds reward.max_abs",
    "group id never issued by this run",                 /* the well-formed prompt, through both workers */
};
#define N_WANT (sizeof want_dead / sizeof want_dead[0])

int main(void) {
    char dir[] = "/tmp/cpt-run-forged-XXXXXX";
    if (!mkdtemp(dir)) { perror("mkdtemp"); return 1; }
    char run_dir[256], cfg_path[300], log_path[300], exe[1024];
    snprintf(run_dir, sizeof run_dir, "%s/run", dir);
    snprintf(cfg_path, sizeof cfg_path, "%s/config.toml", dir);
    snprintf(log_path, sizeof log_path, "%s/run.log", dir);
    snprintf(exe, sizeof exe, "%s/cpt", build_dir());
    write_config(cfg_path, run_dir);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        if (!freopen(log_path, "w", stderr)) _exit(126);
        execl(exe, exe, "run", cfg_path, (char *)NULL);
        perror("exec cpt");
        _exit(127);
    }
    double t0 = cpt_now();
    while (step_of(run_dir) < 1 && cpt_now() - t0 < 120 && waitpid(pid, NULL, WNOHANG) == 0) usleep(50000);
    CHECK_MSG(step_of(run_dir) >= 1, "the run never reached step 1 (%s)", log_path);
    cpt_queue_conn conn;
    cpt_err err;
    CHECK_MSG(cpt_queue_conn_from_run_dir(run_dir, &conn, &err) == 0, "%s", err.msg);
    if (!conn.run[0]) snprintf(conn.run, sizeof conn.run, RUN);
    cpt_queue_opts o = {.url = conn.url, .password_file = conn.password_file, .run = conn.run};
    cpt_queue *q = cpt_queue_open(&o, &err);
    CHECK_MSG(q != NULL, "%s", err.msg);
    int all = 0;
    if (q) {
        forge_prompt(q, 999990, 1000000000000ull, 4, -1);
        forge_prompt(q, 999991, 0, 4096, -1);
        forge_prompt(q, 999992, 0, 4, 100000);
        forge_prompt(q, 999993, 0, 4, -1); /* well-formed: answered, then refused by the trainer */
        forge_group(q, CPT_STREAM_ROLLOUTS, 999994, 1000000000000ull, 4, -1, 0);
        forge_group(q, CPT_STREAM_ROLLOUTS, 999995, 0, 64, -1, 0);
        forge_group(q, CPT_STREAM_SCORED, 999996, 0, 4, 100000, 0);
        forge_group(q, CPT_STREAM_SCORED, 999997, 1000000000000ull, 4, -1, 0);
        forge_group(q, CPT_STREAM_SCORED, 999998, 0, 4, -1, 1e39);
        cpt_buf junk = {"\xc1 not msgpack", 14};
        add(q, CPT_STREAM_PROMPTS, &junk);
        add(q, CPT_STREAM_ROLLOUTS, &junk);
        add(q, CPT_STREAM_SCORED, &junk);
        /* while the run lives: every forged message in dead with its reason */
        while (!all && cpt_now() - t0 < 180 && waitpid(pid, NULL, WNOHANG) == 0) {
            all = 1;
            for (size_t i = 0; i < N_WANT; i++) all &= test_dead_count(q, want_dead[i]) == 1;
            all &= test_xlen(q, CPT_STREAM_DEAD) == (long long)N_WANT + 3;
            if (!all) usleep(100000);
        }
        for (size_t i = 0; i < N_WANT && !all; i++)
            CHECK_MSG(test_dead_count(q, want_dead[i]) == 1, "no dead entry \"%s\"", want_dead[i]);
        CHECK_MSG(all, "dead holds %lld entries, expected %zu", test_xlen(q, CPT_STREAM_DEAD), N_WANT + 3);
        cpt_queue_close(q);
    }
    int st = 0;
    while (cpt_now() - t0 < 300 && waitpid(pid, &st, WNOHANG) == 0) usleep(100000);
    if (cpt_now() - t0 >= 300) {
        kill(pid, SIGINT);
        waitpid(pid, &st, 0);
        CHECK_MSG(0, "the run did not finish in 300 s");
    }
    CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 0, "cpt run ended with status %d (%s)", st, log_path);
    CHECK_EQ_INT(last_metric(run_dir, "groups/trained"), STEPS * GPS);
    CHECK_EQ_INT(last_metric(run_dir, "groups/skipped"), 0);
    CHECK_EQ_INT(last_metric(run_dir, "groups/failed"), 0);
    CHECK_EQ_INT(last_metric(run_dir, "version"), STEPS);
    /* no role died on the way: the launcher restarted nothing */
    char cmd[600];
    snprintf(cmd, sizeof cmd, "grep -q 'exited with status' %s", log_path);
    CHECK_MSG(system(cmd) != 0, "a role exited and was restarted (%s)", log_path);
    if (check_summary("run_forged") == 0) {
        snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
        if (system(cmd)) return 1;
        return 0;
    }
    return 1;
}
