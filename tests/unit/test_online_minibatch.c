/* Mini-batches of the online learner (trainer/online_step.h, train.mini_batches and train.epochs_per_batch): the
 * view of mini-batch k, the number of optimizer updates per step, that the updates after the first see ratios off 1
 * and clip (the proximal logprobs are the weights before the step's first update), that with lr 0 the ratio stays 1
 * (the proximal pass and the mini-batch forwards agree), that one mini-batch is exactly the step as it was, and the
 * config checks (the two names of the epochs; more mini-batches than groups); shuffled mini-batches
 * (train.mini_batch_shuffle, trainer/online_shuffle.h), and that a shuffled step is the step on the permuted batch. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/config_keys.h"
#include "core/config.h"
#include "tests/check.h"
#include "tests/unit/online_groups_fixture.h"
#include "trainer/dp.h"
#include "trainer/online_shuffle.h"
#include "trainer/online_step.h"
#include "trainer/rl_data.h"

/* Mini-batch k of n: whole groups, its own seq_start from 0, its arrays where its tokens and sequences are in b. */
static void test_view(void) {
    cpt_model *m = tiny_model();
    groups f;
    cpt_rl_batch b, v;
    make_batch(&f, m, &b);
    int32_t ss[17];
    /* groups of 4 sequences of 4, 5, 6, 7 tokens: [0, 16), [16, 36), [36, 60), [60, 88) */
    CHECK_EQ_INT(b.n_tokens, 88);
    int t0 = cpt_online_mini_batch(&b, 0, 2, ss, &v);
    CHECK_EQ_INT(t0, 0);
    CHECK(v.n_groups == 2 && v.n_seqs == 8 && v.n_tokens == 36);
    t0 = cpt_online_mini_batch(&b, 1, 2, ss, &v);
    CHECK_EQ_INT(t0, 36);
    CHECK(v.n_groups == 2 && v.n_seqs == 8 && v.n_tokens == 52);
    CHECK(v.seq_start == ss && ss[0] == 0 && ss[1] == 6 && ss[8] == 52);
    CHECK(v.tokens == b.tokens + 36 && v.mask == b.mask + 36 && v.behav_logprobs == b.behav_logprobs + 36);
    CHECK(v.seq_reward == b.seq_reward + 8 && v.group_size == b.group_size + 2);
    CHECK(v.group_seq0 == NULL && v.seq_group == NULL && v.cap_tokens == 0);
    /* three of four groups: 1, 1, 2 */
    int want[3] = {1, 1, 2};
    for (int k = 0; k < 3; k++) {
        cpt_online_mini_batch(&b, k, 3, ss, &v);
        CHECK_MSG(v.n_groups == want[k], "mini-batch %d of 3: %d groups", k, v.n_groups);
    }
    cpt_rl_batch_free(&b);
    cpt_model_free(m);
}

typedef struct outcome {
    cpt_online_step_stats st[2]; /* of two steps */
    float *weights;
    size_t n;
    float old0[128]; /* the learner's proximal logprobs after the first step (the batch has 88 tokens) */
} outcome;

/* Two learner steps of grpo on the batch with the given overrides; 0, or -1 with err when init fails. */
static int two_steps(const char *const *extra, int n_extra, outcome *out, cpt_err *err) {
    char *ov[16] = {"algo.type=grpo", "optim.lr=0.05", "optim.schedule=constant", "train.steps=10",
                    "algo.clip_eps_low=0.05", "algo.clip_eps_high=0.05", "train.mini_batches=1"};
    int n = 7; /* one update a step unless an extra says otherwise (later overrides win) */
    for (int i = 0; i < n_extra; i++) ov[n++] = (char *)extra[i];
    cpt_config *cfg = cpt_config_load(NULL, n, ov, err);
    CHECK_MSG(cfg != NULL, "%s", err->msg);
    if (!cfg) return -1;
    cpt_objective_config oc;
    oc.type = CPT_OBJ_GRPO;
    CHECK_EQ_INT(cpt_objective_from_config(cfg, &oc, err), 0);
    cpt_model *pol = tiny_model();
    cpt_online_learner L;
    cpt_dp *dp = NULL;
    int rc = cpt_online_learner_init(&L, cfg, &oc, pol, NULL, NULL, err);
    if (!rc) {
        groups f;
        cpt_rl_batch b;
        make_batch(&f, pol, &b);
        if (cpt_cfg_int(cfg, "train.zero")) {
            /* no whole AdamW is made, and a step needs the slices first; then one rank's slices */
            CHECK(L.opt == NULL);
            cpt_err e2;
            CHECK_EQ_INT(cpt_online_learner_step(&L, &b, 0, &out->st[0], &e2), -1);
            CHECK(strstr(e2.msg, "optimizer was not sharded") != NULL);
            cpt_dp_opts o = {0};
            dp = cpt_dp_new(&o, &e2);
            CHECK_MSG(dp != NULL, "%s", e2.msg);
            rc = dp ? cpt_online_learner_shard(&L, dp, err) : -1;
        }
        for (int s = 0; s < 2 && !rc; s++) {
            cpt_err e2;
            rc = cpt_online_learner_step(&L, &b, s, &out->st[s], &e2);
            CHECK_MSG(rc == 0, "step %d: %s", s, e2.msg);
            if (s == 0 && !rc && b.n_tokens <= 128) memcpy(out->old0, L.old_logp, (size_t)b.n_tokens * sizeof(float));
        }
        out->n = cpt_model_numel(pol);
        out->weights = malloc(out->n * sizeof(float));
        memcpy(out->weights, cpt_model_data(pol), out->n * sizeof(float));
        cpt_rl_batch_free(&b);
    }
    cpt_online_learner_free(&L);
    cpt_model_free(pol);
    cpt_dp_free(dp);
    cpt_config_free(cfg);
    return rc;
}

static double max_diff(const outcome *a, const outcome *b) {
    double m = 0;
    for (size_t i = 0; i < a->n; i++) m = fmax(m, fabs((double)a->weights[i] - b->weights[i]));
    return m;
}

static void test_updates(void) {
    cpt_err err;
    outcome one, two, two_lr0, e2, p2;
    memset(&one, 0, sizeof one), memset(&two, 0, sizeof two), memset(&two_lr0, 0, sizeof two_lr0);
    memset(&e2, 0, sizeof e2), memset(&p2, 0, sizeof p2);
    const char *mb2[] = {"train.mini_batches=2"}, *mb2lr0[] = {"train.mini_batches=2", "optim.lr=0"};
    const char *ep2[] = {"train.epochs_per_batch=2"}, *pp2[] = {"train.ppo_epochs=2"};
    CHECK_EQ_INT(two_steps(NULL, 0, &one, &err), 0);
    CHECK_EQ_INT(two_steps(mb2, 1, &two, &err), 0);
    CHECK_EQ_INT(two_steps(mb2lr0, 2, &two_lr0, &err), 0);
    CHECK_EQ_INT(two_steps(ep2, 1, &e2, &err), 0);
    CHECK_EQ_INT(two_steps(pp2, 1, &p2, &err), 0);
    /* ZeRO-1 on one rank: the slice is the whole, the same updates bit for bit */
    outcome z2;
    memset(&z2, 0, sizeof z2);
    const char *mb2z[] = {"train.mini_batches=2", "train.zero=1"};
    CHECK_EQ_INT(two_steps(mb2z, 2, &z2, &err), 0);
    if (!one.weights || !two.weights || !two_lr0.weights || !e2.weights || !p2.weights || !z2.weights) goto out;
    CHECK_EQ_INT(z2.st[1].optimizer_steps, 4);
    CHECK_MSG(max_diff(&two, &z2) == 0, "ZeRO-1 on one rank differs by %g", max_diff(&two, &z2));
    /* the norm's sum of squares runs in another order (the flat slice, not per parameter) */
    CHECK_MSG(fabs(z2.st[1].grad_norm - two.st[1].grad_norm) <= 1e-12 * two.st[1].grad_norm && two.st[1].grad_norm > 0,
              "ZeRO-1 grad norm %.17g, AdamW %.17g", z2.st[1].grad_norm, two.st[1].grad_norm);
    printf("one mini-batch: ratio %.6f clip %.4f | two, the second: ratio mean %.6f max %.6f clip %.4f | lr 0: "
           "ratio max %.8f\n",
           one.st[0].m.ratio_mean, one.st[0].m.clip_frac, two.st[0].m.ratio_mean, two.st[0].m.ratio_max,
           two.st[0].m.clip_frac, two_lr0.st[0].m.ratio_max);
    /* one update a step, on-policy: ratio 1, nothing clipped (the step as it always was) */
    CHECK_EQ_INT(one.st[0].optimizer_steps, 1);
    CHECK_EQ_INT(one.st[1].optimizer_steps, 2);
    CHECK_NEAR(one.st[0].m.ratio_max, 1.0, 1e-6);
    CHECK_NEAR(one.st[0].m.clip_frac, 0.0, 0.0);
    /* two mini-batches: two updates a step; the second is measured against the weights before the first */
    CHECK_EQ_INT(two.st[0].optimizer_steps, 2);
    CHECK_EQ_INT(two.st[1].optimizer_steps, 4);
    CHECK_MSG(fabs(two.st[0].m.ratio_mean - 1) > 1e-3, "second mini-batch ratio mean %.6f", two.st[0].m.ratio_mean);
    CHECK_MSG(two.st[0].m.clip_frac > 0, "second mini-batch clip fraction %g", two.st[0].m.clip_frac);
    CHECK_NEAR(two.st[0].m.n_tokens, 4 * 4 + 4 * 5, 0); /* groups 3 and 4 (4 and 5 completion tokens): the last mini-batch's */
    CHECK_MSG(max_diff(&one, &two) > 1e-4, "two mini-batches moved the weights as one did (%g)", max_diff(&one, &two));
    /* lr 0: the proximal pass and each mini-batch's forward see the same weights */
    CHECK_NEAR(two_lr0.st[0].m.ratio_max, 1.0, 1e-6);
    CHECK_NEAR(two_lr0.st[1].m.ratio_mean, 1.0, 1e-6);
    CHECK_NEAR(two_lr0.st[0].m.clip_frac, 0.0, 0.0);
    CHECK_EQ_INT(two_lr0.st[0].optimizer_steps, 2);
    /* train.ppo_epochs is the older name of train.epochs_per_batch: the same updates */
    CHECK_EQ_INT(e2.st[1].optimizer_steps, 4);
    CHECK_MSG(max_diff(&e2, &p2) == 0, "epochs_per_batch=2 and ppo_epochs=2 differ by %g", max_diff(&e2, &p2));
out:
    free(one.weights), free(two.weights), free(two_lr0.weights), free(e2.weights), free(p2.weights);
    free(z2.weights);
}

/* optim.warmup_steps (SFT's key) ramps the online learning rate by trainer step; every update of a step shares it */
static void test_warmup(void) {
    cpt_err err;
    outcome o;
    memset(&o, 0, sizeof o);
    const char *w[] = {"optim.warmup_steps=10", "train.mini_batches=2"};
    CHECK_EQ_INT(two_steps(w, 2, &o, &err), 0);
    CHECK_NEAR(o.st[0].lr, 0.05 * 1 / 10, 1e-12);
    CHECK_NEAR(o.st[1].lr, 0.05 * 2 / 10, 1e-12);
    free(o.weights);
}

static void test_config_errors(void) {
    cpt_err err;
    outcome o;
    memset(&o, 0, sizeof o);
    const char *both[] = {"train.epochs_per_batch=2", "train.ppo_epochs=3"};
    CHECK_EQ_INT(two_steps(both, 2, &o, &err), -1);
    CHECK_MSG(strstr(err.msg, "train.epochs_per_batch") && strstr(err.msg, "train.ppo_epochs"), "%s", err.msg);
    const char *same[] = {"train.epochs_per_batch=2", "train.ppo_epochs=2"}; /* a dumped config sets both */
    CHECK_EQ_INT(two_steps(same, 2, &o, &err), 0);
    free(o.weights);
    memset(&o, 0, sizeof o);
    /* more mini-batches than groups a step: one group each (4 updates a step here) */
    memset(&o, 0, sizeof o);
    const char *many[] = {"train.mini_batches=5", "train.groups_per_step=4"};
    CHECK_EQ_INT(two_steps(many, 2, &o, &err), 0);
    CHECK_EQ_INT(o.st[1].optimizer_steps, 8);
    free(o.weights);
    /* the default (train.mini_batches = 0): 4 updates a step, one group each when a step has fewer groups */
    static const struct {
        const char *gps;
        int want;
    } dflt[] = {{"train.groups_per_step=4", 8}, {"train.groups_per_step=2", 4}, {"train.groups_per_step=1", 2}};
    for (size_t i = 0; i < sizeof dflt / sizeof dflt[0]; i++) {
        memset(&o, 0, sizeof o);
        const char *d[] = {"train.mini_batches=0", dflt[i].gps};
        CHECK_EQ_INT(two_steps(d, 2, &o, &err), 0);
        CHECK_MSG(o.st[1].optimizer_steps == dflt[i].want, "default mini-batches, %s: %d optimizer steps after two "
                  "steps, expected %d", dflt[i].gps, (int)o.st[1].optimizer_steps, dflt[i].want);
        free(o.weights);
    }
}

/* train.mini_batch_shuffle: the order, the permuted batch and its per-token arrays, and the learner with it. */
static void test_shuffle(void) {
    cpt_model *m = tiny_model();
    groups f;
    cpt_rl_batch b, pb;
    make_batch(&f, m, &b);
    int n = b.n_seqs;
    uint64_t o1[16], o2[16], o3[16];
    CHECK_EQ_INT(n, 16);
    cpt_online_shuffle_order(7, 3, n, o1);
    cpt_online_shuffle_order(7, 3, n, o2);
    cpt_online_shuffle_order(7, 4, n, o3);
    int seen[16] = {0}, same = 1, other = 1, moved = 0;
    for (int i = 0; i < n; i++) {
        if (o1[i] < (uint64_t)n) seen[o1[i]]++;
        same &= o1[i] == o2[i];
        other &= o1[i] == o3[i];
        moved += o1[i] != (uint64_t)i;
    }
    for (int i = 0; i < n; i++) CHECK_MSG(seen[i] == 1, "sequence %d placed %d times", i, seen[i]);
    CHECK(same && !other && moved > 0);
    cpt_err err;
    CHECK_EQ_INT(cpt_online_batch_permuted(&b, o1, &pb, &err), 0);
    CHECK(pb.n_seqs == n && pb.n_groups == n && pb.n_tokens == b.n_tokens && pb.seq_start[n] == b.n_tokens);
    for (int i = 0; i < n; i++) {
        int s = (int)o1[i], len = b.seq_start[s + 1] - b.seq_start[s];
        CHECK_EQ_INT(pb.seq_start[i + 1] - pb.seq_start[i], len);
        CHECK(!memcmp(pb.tokens + pb.seq_start[i], b.tokens + b.seq_start[s], (size_t)len * sizeof(int32_t)));
        CHECK(!memcmp(pb.mask + pb.seq_start[i], b.mask + b.seq_start[s], (size_t)len * sizeof(float)));
        CHECK(pb.seq_reward[i] == b.seq_reward[s] && pb.group_size[i] == 1 && pb.group_seq0[i] == i);
        CHECK(pb.group_version[i] == b.group_version[b.seq_group[s]]);
    }
    /* per-token values there and back */
    float a[88], there[88], back[88];
    for (int t = 0; t < b.n_tokens; t++) a[t] = (float)t;
    cpt_online_permute_tokens(&b, &pb, o1, a, there, 0);
    cpt_online_permute_tokens(&b, &pb, o1, there, back, 1);
    CHECK(!memcmp(a, back, sizeof a) && memcmp(a, there, sizeof a));
    CHECK_EQ_INT((int)there[pb.seq_start[1] - 1], b.seq_start[o1[0] + 1] - 1);
    cpt_rl_batch_free(&pb);
    cpt_rl_batch_free(&b);
    cpt_model_free(m);

    /* the learner: at lr 0 every update's ratio is exactly 1 (the shuffled proximal logprobs line up with the
     * shuffled tokens); moving, the updates differ from whole groups', the same twice, another with another seed;
     * the proximal logprobs are back in the batch's order after the step; one mini-batch is not shuffled */
    outcome two, sh, sh2, sh_seed, sh_lr0, one, sh_one;
    memset(&two, 0, sizeof two), memset(&sh, 0, sizeof sh), memset(&sh2, 0, sizeof sh2);
    memset(&sh_seed, 0, sizeof sh_seed), memset(&sh_lr0, 0, sizeof sh_lr0), memset(&one, 0, sizeof one);
    memset(&sh_one, 0, sizeof sh_one);
    const char *mb2[] = {"train.mini_batches=2"}, *s2[] = {"train.mini_batches=2", "train.mini_batch_shuffle=true"};
    const char *s2seed[] = {"train.mini_batches=2", "train.mini_batch_shuffle=true", "run.seed=99"};
    const char *s2lr0[] = {"train.mini_batches=2", "train.mini_batch_shuffle=true", "optim.lr=0"};
    const char *s1[] = {"train.mini_batch_shuffle=true"};
    CHECK_EQ_INT(two_steps(mb2, 1, &two, &err), 0);
    CHECK_EQ_INT(two_steps(s2, 2, &sh, &err), 0);
    CHECK_EQ_INT(two_steps(s2, 2, &sh2, &err), 0);
    CHECK_EQ_INT(two_steps(s2seed, 3, &sh_seed, &err), 0);
    CHECK_EQ_INT(two_steps(s2lr0, 3, &sh_lr0, &err), 0);
    CHECK_EQ_INT(two_steps(NULL, 0, &one, &err), 0);
    CHECK_EQ_INT(two_steps(s1, 1, &sh_one, &err), 0);
    if (two.weights && sh.weights && sh2.weights && sh_seed.weights && sh_lr0.weights && one.weights &&
        sh_one.weights) {
        for (int s = 0; s < 2; s++) {
            CHECK_NEAR(sh_lr0.st[s].m.ratio_max, 1.0, 1e-6);
            CHECK_NEAR(sh_lr0.st[s].m.ratio_mean, 1.0, 1e-6);
            CHECK_NEAR(sh_lr0.st[s].m.clip_frac, 0.0, 0.0);
        }
        CHECK_EQ_INT(sh.st[1].optimizer_steps, 4);
        CHECK(sh.st[0].m.ratio_max != 1.0);
        printf("shuffled mini-batches: against whole groups %.3g, another seed %.3g, twice %.3g\n",
               max_diff(&sh, &two), max_diff(&sh, &sh_seed), max_diff(&sh, &sh2));
        CHECK(max_diff(&sh, &two) > 0 && max_diff(&sh, &sh_seed) > 0 && max_diff(&sh, &sh2) == 0);
        CHECK(!memcmp(sh.old0, two.old0, sizeof sh.old0));
        CHECK(max_diff(&sh_one, &one) == 0);
    }
    free(two.weights), free(sh.weights), free(sh2.weights), free(sh_seed.weights), free(sh_lr0.weights);
    free(one.weights), free(sh_one.weights);
}

/* A shuffled step on b is exactly an unshuffled step on b permuted by the same order, for the methods whose
 * advantages do not depend on the grouping (PPO without whitening, with a critic and a KL to a reference; OPD
 * without its task part): so the advantages, reference logprobs, returns and old values go with their tokens (an
 * array left in the batch's order would give other weights; the lr-0 check above sees only the logprobs). */
typedef struct equiv_run {
    float *w, *cw; /* the policy's and the critic's weights after the step */
    size_t n, cn;
} equiv_run;

static int equiv_step(const char *algo, int shuffle, int permute, equiv_run *out) {
    char a[64], sh[64];
    snprintf(a, sizeof a, "algo.type=%s", algo);
    snprintf(sh, sizeof sh, "train.mini_batch_shuffle=%s", shuffle ? "true" : "false");
    char *ov[] = {a, sh, "optim.lr=0.05", "optim.schedule=constant", "train.steps=10", "critic.lr=0.05",
                  "algo.kl_beta=0.02", "algo.ppo_norm_adv=false", "train.tokens_per_micro_batch=100000",
                  "train.mini_batches=2", "run.seed=5", "algo.opd_task_weight=0"};
    cpt_err err;
    cpt_config *cfg = cpt_config_load(NULL, sizeof ov / sizeof ov[0], ov, &err);
    CHECK_MSG(cfg != NULL, "%s", err.msg);
    if (!cfg) return -1;
    cpt_objective_config oc;
    int rc = -1, ppo = !strcmp(algo, "ppo");
    cpt_model *pol = tiny_model(), *ref = tiny_model(), *critic = ppo ? tiny_model() : NULL;
    if (critic && cpt_model_add_value_head(critic, 5, &err)) goto out;
    /* a reference other than the policy, so the KL term moves the weights too */
    float *rd = cpt_model_data(ref);
    for (size_t i = 0; i < cpt_model_numel(ref); i++) rd[i] *= 1.1f;
    if (cpt_obj_type_parse(algo, &oc.type, &err) || cpt_objective_from_config(cfg, &oc, &err)) goto out;
    cpt_online_learner L;
    if (cpt_online_learner_init(&L, cfg, &oc, pol, ref, critic, &err)) goto out;
    groups f;
    cpt_rl_batch b, pb;
    make_batch(&f, pol, &b);
    memset(&pb, 0, sizeof pb);
    /* token-dependent teacher logprobs (OPD; the batch holds the array) and rewards that differ by sequence (PPO's
     * returns) */
    for (int t = 0; b.teacher_logprobs && t < b.n_tokens; t++)
        b.teacher_logprobs[t] = b.mask[t] != 0 ? -0.1f * (float)(t % 7) - 0.5f : 0;
    b.has_teacher = 1;
    for (int s = 0; s < b.n_seqs; s++) b.seq_reward[s] = (double)((s * 7) % 5) / 4.0;
    uint64_t order[16];
    const cpt_rl_batch *use = &b;
    if (permute) {
        cpt_online_shuffle_order(5, 0, b.n_seqs, order); /* the learner's order at run.seed 5, step 0 */
        if (cpt_online_batch_permuted(&b, order, &pb, &err)) goto free_batch;
        use = &pb;
    }
    cpt_online_step_stats st;
    if (cpt_online_learner_step(&L, use, 0, &st, &err)) goto free_batch;
    out->n = cpt_model_numel(pol);
    out->w = malloc(out->n * sizeof(float));
    if (out->w) memcpy(out->w, cpt_model_data(pol), out->n * sizeof(float));
    if (critic) {
        out->cn = cpt_model_numel(critic);
        out->cw = malloc(out->cn * sizeof(float));
        if (out->cw) memcpy(out->cw, cpt_model_data(critic), out->cn * sizeof(float));
    }
    rc = 0;
free_batch:
    cpt_rl_batch_free(&pb);
    cpt_rl_batch_free(&b);
    cpt_online_learner_free(&L);
out:
    CHECK_MSG(rc == 0, "%s%s%s: %s", algo, shuffle ? ", shuffled" : "", permute ? ", permuted" : "", err.msg);
    cpt_model_free(pol);
    cpt_model_free(ref);
    cpt_model_free(critic);
    cpt_config_free(cfg);
    return rc;
}

static double diff_floats(const float *a, const float *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs((double)a[i] - b[i]));
    return m;
}

static void test_shuffle_equivalence(void) {
    const char *algos[] = {"ppo", "opd"};
    for (int k = 0; k < 2; k++) {
        equiv_run sh = {0}, perm = {0}, whole = {0};
        if (!equiv_step(algos[k], 1, 0, &sh) && !equiv_step(algos[k], 0, 1, &perm) &&
            !equiv_step(algos[k], 0, 0, &whole) && sh.w && perm.w && whole.w) {
            double d_perm = diff_floats(sh.w, perm.w, sh.n), d_whole = diff_floats(sh.w, whole.w, sh.n);
            printf("%s, shuffled: against the same step on the permuted batch %.3g, against whole groups %.3g\n",
                   algos[k], d_perm, d_whole);
            CHECK_MSG(d_perm == 0, "%s: a shuffled step differs from the step on the permuted batch by %.3g",
                      algos[k], d_perm);
            CHECK(d_whole > 1e-6);
            if (sh.cw && perm.cw && whole.cw) {
                CHECK_MSG(diff_floats(sh.cw, perm.cw, sh.cn) == 0, "%s: the critic differs", algos[k]);
                CHECK(diff_floats(sh.cw, whole.cw, sh.cn) > 1e-6);
            } else {
                CHECK(k != 0); /* PPO has a critic */
            }
        }
        free(sh.w), free(sh.cw), free(perm.w), free(perm.cw), free(whole.w), free(whole.cw);
    }
}

int main(void) {
    test_view();
    test_shuffle();
    test_shuffle_equivalence();
    test_updates();
    test_warmup();
    test_config_errors();
    return check_summary("test_online_minibatch");
}
