/* The online learner step over two trainer ranks (trainer/online_step.h with L->dp): one step on a fixed batch at
 * 2 ranks gives the gradients and weights of the same step at 1 rank, for grpo (with the reference model and an
 * entropy bonus), ppo (the critic too, two epochs) and opd (teacher logprobs), with micro-batches inside each rank's
 * shard. Run alone, the program starts itself again under `mpirun -n 2` (CPU ranks through Open MPI, trainer/dp.h's
 * MPI backend); every rank computes the 1-rank step locally and the 2-rank step together, and compares. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/config_keys.h"
#include "core/config.h"
#include "core/exit_status.h"
#include "tests/check.h"
#include "trainer/dp.h"
#include "trainer/online_ranks.h"
#include "trainer/online_step.h"
#include "trainer/optim.h"
#include "trainer/rl_data.h"

static cpt_model *tiny_model(int value_head) {
    cpt_model_config mc = {.arch = CPT_ARCH_QWEN2, .vocab_size = 24, .hidden_size = 16, .intermediate_size = 32,
                           .num_layers = 1, .num_heads = 2, .num_kv_heads = 1, .head_dim = 8, .rms_norm_eps = 1e-6f,
                           .rope_theta = 10000, .tie_word_embeddings = 1, .qkv_bias = 1,
                           .max_position_embeddings = 64, .bos_token_id = -1, .eos_token_id = -1};
    cpt_err err;
    cpt_model *m = cpt_model_new_random(&mc, 7, &err);
    if (m && value_head && cpt_model_add_value_head(m, 8, &err)) {
        cpt_model_free(m);
        return NULL;
    }
    return m;
}

/* Three groups of four completions of uneven lengths (so the two shards differ in size), rewards with a signal,
 * behaviour logprobs a little off the model's, teacher logprobs for opd. */
typedef struct fixed_batch {
    cpt_rollout_group g[3];
    cpt_completion comp[3][4];
    double rewards[3][4];
    int32_t tok[3][4][8];
    float lp[3][4][8], tl[3][4][8];
    int32_t prompt[3];
} fixed_batch;

static void make_batch(fixed_batch *f, cpt_rl_batch *b) {
    memset(f, 0, sizeof *f);
    f->prompt[0] = 1, f->prompt[1] = 2, f->prompt[2] = 5;
    cpt_err err;
    cpt_rl_batch_reset(b);
    for (int g = 0; g < 3; g++) {
        cpt_rollout_group *rg = &f->g[g];
        rg->id.index = (uint64_t)g;
        rg->n_prompt = 2 + (g == 2);
        rg->prompt = f->prompt;
        rg->n_completions = 4;
        rg->completions = f->comp[g];
        rg->has_rewards = 1;
        rg->rewards = f->rewards[g];
        for (int k = 0; k < 4; k++) {
            int n = 2 + (g + 2 * k) % 6;
            f->comp[g][k].n_tokens = (uint32_t)n;
            f->comp[g][k].tokens = f->tok[g][k];
            f->comp[g][k].logprobs = f->lp[g][k];
            f->comp[g][k].teacher_logprobs = f->tl[g][k];
            for (int j = 0; j < n; j++) {
                f->tok[g][k][j] = 3 + (g * 5 + k * 3 + j * 7) % 19;
                f->lp[g][k][j] = -2.5f - 0.1f * (float)((j + k) % 3);
                f->tl[g][k][j] = -2.0f - 0.2f * (float)((j * k + g) % 4);
            }
            f->rewards[g][k] = (double)((g + k) % 3) * 0.5;
        }
        CHECK_EQ_INT(cpt_rl_batch_add_group(b, rg, 32, 24, &err), 0);
    }
}

typedef struct result {
    float *grads, *weights, *cweights;
    size_t n, cn;
    double grad_norm, loss;
    long tokens, shard_tokens;
} result;

static void result_free(result *r) {
    free(r->grads);
    free(r->weights);
    free(r->cweights);
    memset(r, 0, sizeof *r);
}

static float *copy(const float *x, size_t n) {
    float *y = malloc(n * sizeof *y);
    memcpy(y, x, n * sizeof *y);
    return y;
}

/* One learner step of algo on the fixed batch, over dp's ranks (NULL: this process alone), with extra, one more
 * override (may be NULL). */
static int one_step(const char *algo, const char *extra, cpt_dp *dp, result *out) {
    cpt_err err;
    char o1[64];
    snprintf(o1, sizeof o1, "algo.type=%s", algo);
    /* optim.eps large: AdamW's first update is then smooth in the gradient, not its sign, so weights compare */
    /* extra: one override, or two separated by a space */
    char ex[128] = "", *ex2 = NULL;
    if (extra) {
        snprintf(ex, sizeof ex, "%s", extra);
        if ((ex2 = strchr(ex, ' '))) *ex2++ = 0;
    }
    char *ov[] = {o1, "train.tokens_per_micro_batch=16", "optim.lr=0.01", "optim.eps=0.1", "critic.lr=0.01",
                  "algo.kl_beta=0.05", "algo.entropy_coef=0.01", "train.ppo_epochs=2", "optim.grad_clip=1000",
                  "train.mini_batches=1", ex, ex2};
    int n_ov = sizeof ov / sizeof ov[0] - (extra == NULL) - (ex2 == NULL);
    cpt_config *cfg = cpt_config_load(NULL, n_ov, ov, &err);
    CHECK_MSG(cfg != NULL, "%s", err.msg);
    if (!cfg) return -1;
    cpt_objective_config oc;
    CHECK_EQ_INT(cpt_obj_type_parse(algo, &oc.type, &err), 0);
    CHECK_EQ_INT(cpt_objective_from_config(cfg, &oc, &err), 0);
    int ppo = !strcmp(algo, "ppo");
    cpt_model *pol = tiny_model(0), *ref = tiny_model(0), *critic = ppo ? tiny_model(1) : NULL;
    cpt_online_learner L;
    int rc = cpt_online_learner_init(&L, cfg, &oc, pol, ref, critic, &err);
    CHECK_MSG(rc == 0, "%s", err.msg);
    L.dp = dp;
    fixed_batch f;
    cpt_rl_batch b;
    memset(&b, 0, sizeof b);
    make_batch(&f, &b);
    cpt_online_step_stats st;
    if (!rc) {
        rc = cpt_online_learner_step(&L, &b, 0, &st, &err);
        CHECK_MSG(rc == 0, "%s step: %s", algo, err.msg);
    }
    if (!rc) {
        out->n = cpt_model_numel(pol);
        out->grads = copy(cpt_model_grads(pol), out->n);
        out->weights = copy(cpt_model_data(pol), out->n);
        if (critic) {
            out->cn = cpt_model_numel(critic);
            out->cweights = copy(cpt_model_data(critic), out->cn);
        }
        out->grad_norm = st.grad_norm;
        out->loss = st.m.loss;
        out->tokens = st.tokens;
        out->shard_tokens = st.shard_tokens;
    }
    cpt_rl_batch_free(&b);
    cpt_online_learner_free(&L);
    cpt_model_free(pol);
    cpt_model_free(ref);
    cpt_model_free(critic);
    cpt_config_free(cfg);
    return rc;
}

static double max_abs(const float *x, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs((double)x[i]));
    return m;
}

static double max_diff(const float *x, const float *y, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs((double)x[i] - y[i]));
    return m;
}

static void compare(const char *algo, const char *extra, cpt_dp *dp) {
    result one, two;
    memset(&one, 0, sizeof one);
    memset(&two, 0, sizeof two);
    if (one_step(algo, extra, NULL, &one) || one_step(algo, extra, dp, &two)) {
        result_free(&one);
        result_free(&two);
        return;
    }
    double gscale = max_abs(one.grads, one.n), gd = max_diff(one.grads, two.grads, one.n);
    double wd = max_diff(one.weights, two.weights, one.n);
    /* the work is split: each rank forwarded a part, and the parts make the batch */
    float parts[1] = {(float)two.shard_tokens};
    cpt_err err;
    CHECK_EQ_INT(cpt_dp_sum_floats(dp, parts, 1, &err), 0);
    printf("rank %d, %s %s: forwarded %ld of %ld tokens\n", cpt_dp_rank(dp), algo, extra ? extra : "", two.shard_tokens,
           two.tokens);
    CHECK_MSG(two.shard_tokens > 0 && two.shard_tokens < two.tokens, "%s: rank %d forwarded %ld of %ld tokens", algo,
              cpt_dp_rank(dp), two.shard_tokens, two.tokens);
    CHECK_MSG((long)parts[0] == two.tokens, "%s: the ranks forwarded %ld tokens, the batch has %ld", algo,
              (long)parts[0], two.tokens);
    CHECK_EQ_INT(one.shard_tokens, one.tokens);
    printf("rank %d, %s: loss %.6f / %.6f, grad_norm %.6f / %.6f, grads max |diff| %.3g (max |g| %.3g), weights max "
           "|diff| %.3g",
           cpt_dp_rank(dp), algo, one.loss, two.loss, one.grad_norm, two.grad_norm, gd, gscale, wd);
    CHECK_MSG(gscale > 1e-4, "%s: the gradient is all but zero (%g): the comparison would be vacuous", algo, gscale);
    CHECK_MSG(gd <= 1e-5 * gscale, "%s: 2-rank gradients differ from 1-rank by %g (max |g| %g)", algo, gd, gscale);
    CHECK_MSG(wd <= 1e-6, "%s: 2-rank weights differ from 1-rank by %g", algo, wd);
    CHECK_MSG(fabs(one.grad_norm - two.grad_norm) <= 1e-5 * one.grad_norm, "%s: grad_norm %g vs %g", algo,
              one.grad_norm, two.grad_norm);
    CHECK_MSG(fabs(one.loss - two.loss) <= 1e-5 * fmax(1, fabs(one.loss)), "%s: loss %g vs %g", algo, one.loss,
              two.loss);
    if (one.cweights) {
        double cd = max_diff(one.cweights, two.cweights, one.cn);
        printf(", critic weights max |diff| %.3g", cd);
        CHECK_MSG(cd <= 1e-6, "%s: 2-rank critic weights differ from 1-rank by %g", algo, cd);
    }
    printf("\n");
    result_free(&one);
    result_free(&two);
}

/* The exchange of trainer/online_ranks.h: rank 0's groups reach rank 1 and make the same batch; a stop seen by one
 * rank is seen by both; a replica whose weights differ fails the check on every rank. */
static void test_exchange(cpt_dp *dp) {
    cpt_err err;
    int rank = cpt_dp_rank(dp);
    fixed_batch f;
    cpt_rl_batch want, got;
    memset(&want, 0, sizeof want);
    memset(&got, 0, sizeof got);
    make_batch(&f, &want);
    f.g[1].weight_version = 7;
    f.g[2].extra = "{\"answer\":\"4\"}";
    for (int g = 0; g < 3; g++) {
        snprintf(f.g[g].run, sizeof f.g[g].run, "r");
        snprintf(f.g[g].worker, sizeof f.g[g].worker, "w");
    }
    cpt_ranks_groups gs;
    memset(&gs, 0, sizeof gs);
    if (rank == 0) {
        const cpt_rollout_group *in[3] = {&f.g[0], &f.g[1], &f.g[2]};
        if (cpt_ranks_send_step(dp, 5, in, 3, &gs, &err)) {
            /* the other rank waits in a collective: end the job (mpirun ends it) rather than hang */
            fprintf(stderr, "FAIL: rank 0 could not send the step: %s\n", err.msg);
            exit(1);
        }
    } else {
        cpt_ranks_header h;
        CHECK_MSG(cpt_ranks_recv(dp, &h, &gs, &err) == 0, "%s", err.msg);
        CHECK_EQ_INT(h.command, CPT_RANKS_TRAIN);
        CHECK_EQ_INT(h.step, 5);
        CHECK_EQ_INT(h.n_groups, 3);
    }
    CHECK_EQ_INT(gs.n, 3);
    cpt_rl_batch_reset(&got);
    for (size_t i = 0; i < gs.n; i++) CHECK_EQ_INT(cpt_rl_batch_add_group(&got, &gs.g[i], 32, 24, &err), 0);
    if (gs.n == 3) {
        CHECK_EQ_INT(gs.g[1].weight_version, 7);
        CHECK_EQ_STR(gs.g[2].extra, "{\"answer\":\"4\"}");
    }
    CHECK_EQ_INT(got.n_tokens, want.n_tokens);
    CHECK_EQ_INT(got.n_seqs, want.n_seqs);
    int same = got.n_tokens == want.n_tokens && got.n_seqs == want.n_seqs;
    for (int t = 0; same && t < want.n_tokens; t++)
        same = got.tokens[t] == want.tokens[t] && got.mask[t] == want.mask[t] &&
               got.behav_logprobs[t] == want.behav_logprobs[t] && got.teacher_logprobs[t] == want.teacher_logprobs[t];
    for (int q = 0; same && q < want.n_seqs; q++) same = got.seq_reward[q] == want.seq_reward[q];
    CHECK_MSG(same, "rank %d: the batch built from rank 0's groups differs from the original", rank);
    cpt_ranks_groups_free(&gs);
    cpt_rl_batch_free(&want);
    cpt_rl_batch_free(&got);

    /* the end of a run: rank 0's EXIT status reaches rank 1 */
    if (rank == 0) CHECK_EQ_INT(cpt_ranks_send(dp, CPT_RANKS_EXIT, 9, 3, &err), 0);
    else {
        cpt_ranks_header h;
        CHECK_EQ_INT(cpt_ranks_recv(dp, &h, &gs, &err), 0);
        CHECK(h.command == CPT_RANKS_EXIT && h.step == 9 && h.status == 3);
    }

    int any = -1;
    CHECK_EQ_INT(cpt_ranks_agree_stop(dp, 0, &any, &err), 0);
    CHECK_EQ_INT(any, 0);
    CHECK_EQ_INT(cpt_ranks_agree_stop(dp, rank == 1, &any, &err), 0);
    CHECK_EQ_INT(any, 1);

    cpt_model *m = tiny_model(0);
    CHECK_MSG(cpt_ranks_check_replicas(dp, &m, 1, 4, &err) == 0, "%s", err.msg);
    if (rank == 1) cpt_model_data(m)[3] += 1e-6f;
    CHECK_EQ_INT(cpt_ranks_check_replicas(dp, &m, 1, 6, &err), -1);
    CHECK_MSG(strstr(err.msg, "step 6") && strstr(err.msg, "replicas diverged"), "rank %d: %s", rank, err.msg);
    cpt_model_free(m);
}

/* Not under a launcher: run this program again as two ranks. */
static int relaunch(const char *self) {
    const char *path = getenv("PATH");
    char probe[4096];
    int found = 0;
    for (const char *p = path ? path : ""; *p && !found;) {
        const char *e = strchr(p, ':');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        snprintf(probe, sizeof probe, "%.*s/mpirun", (int)len, p);
        found = access(probe, X_OK) == 0;
        p += len + (e != NULL);
    }
    if (!found) {
        printf("SKIP: mpirun not found (apt-get install openmpi-bin)\n");
        return CPT_EXIT_SKIP;
    }
    /* root in CI containers; two ranks on however few cores; one thread each */
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
    setenv("OMP_NUM_THREADS", "1", 1);
    /* Sanitizer builds: Open MPI's own never-freed state is suppressed, cpt's is still checked (as in
     * test_dp_collective_mpi.sh: the suppressions, the slow unwinder, components kept loaded to be named). */
    const char *src = getenv("CPT_SRC");
    const char *lsan = getenv("LSAN_OPTIONS"), *asan = getenv("ASAN_OPTIONS");
    char opts[8192];
    snprintf(opts, sizeof opts, "suppressions=%s/tests/unit/openmpi.lsan.supp%s%s", src ? src : ".", lsan ? ":" : "",
             lsan ? lsan : "");
    setenv("LSAN_OPTIONS", opts, 1);
    snprintf(opts, sizeof opts, "%s%sfast_unwind_on_malloc=0", asan ? asan : "", asan ? ":" : "");
    setenv("ASAN_OPTIONS", opts, 1);
    setenv("OMPI_MCA_mca_base_component_disable_dlclose", "1", 1);
    setenv("PMIX_MCA_mca_base_component_disable_dlclose", "1", 1);
    /* the MPI plugin is beside the programs: the build folder, this program's parent folder */
    char dir[4096];
    const char *build = getenv("CPT_BUILD");
    snprintf(dir, sizeof dir, "%s", build ? build : self);
    if (!build) {
        char *slash = strrchr(dir, '/');
        if (slash) *slash = 0, snprintf(slash, sizeof dir - (size_t)(slash - dir), "/..");
        else snprintf(dir, sizeof dir, "..");
    }
    if (!getenv("CPT_BIN")) setenv("CPT_BIN", dir, 1);
    fflush(stdout);
    execlp("mpirun", "mpirun", "-n", "2", "--oversubscribe", self, (char *)NULL);
    perror("mpirun");
    return 1;
}

int main(int argc, char **argv) {
    (void)argc;
    if (!getenv("OMPI_COMM_WORLD_SIZE")) return relaunch(argv[0]);
    cpt_err err;
    cpt_dp_opts o = {.backend = "mpi"};
    cpt_dp *dp = cpt_dp_new(&o, &err);
    CHECK_MSG(dp != NULL, "%s", err.msg);
    if (!dp) return check_summary("test_online_dp");
    CHECK_EQ_INT(cpt_dp_size(dp), 2);
    test_exchange(dp);
    compare("grpo", NULL, dp);
    compare("ppo", NULL, dp);
    compare("opd", NULL, dp);
    /* three mini-batches of one group, two passes: six updates, each split over the ranks */
    compare("grpo", "train.mini_batches=3", dp);
    compare("ppo", "train.mini_batches=3", dp);
    /* shuffled mini-batches: the same order on both ranks, so the same updates as one rank */
    compare("grpo", "train.mini_batches=3 train.mini_batch_shuffle=true", dp);
    compare("ppo", "train.mini_batches=3 train.mini_batch_shuffle=true", dp);
    cpt_dp_free(dp);
    return check_summary("test_online_dp");
}
