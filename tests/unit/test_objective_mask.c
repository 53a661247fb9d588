/* The completion mask in the trainer (issue 25: multi-turn rollouts): tokens a tool wrote into a completion (mask 0)
 * carry no weight. A scored group whose observation tokens carry absurd values (NaN, inf, +-1e30 logprobs, values
 * and entropies; -1e30 behaviour and teacher logprobs) must give exactly the loss, metrics and gradients of the same
 * group with those tokens removed, for grpo, dr_grpo, dapo, gspo, ppo with a critic and opd (advantages through
 * trainer/online_step.h included), with the masked tokens' gradients 0. And a group without a mask packs exactly as
 * one whose mask is all ones. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/check.h"
#include "trainer/objective.h"
#include "trainer/online_step.h"
#include "trainer/rl_data.h"

#define G 4
#define NP 3

/* Completion k of the full group: model tokens, then an observation of 3 + k tokens, then model tokens. */
static int n_model(int k) { return 5 + 2 * k; }
static int obs_at(int k) { return 2 + k % 2; } /* the observation follows this many model tokens */
static int n_obs(int k) { return 3 + k; }

static const float absurd[] = {NAN, INFINITY, -INFINITY, 1e30f, -1e30f};

static void make_groups(cpt_rollout_group *full, cpt_rollout_group *cut) {
    static int32_t prompt[NP] = {11, 12, 13};
    static const double rewards[G] = {1.0, 0.0, 0.5, -1.0};
    cpt_rollout_group *gs[2] = {full, cut};
    for (int w = 0; w < 2; w++) {
        cpt_rollout_group *g = gs[w];
        memset(g, 0, sizeof *g);
        snprintf(g->run, sizeof g->run, "r");
        snprintf(g->worker, sizeof g->worker, "w");
        g->n_prompt = NP;
        g->prompt = prompt;
        g->n_completions = G;
        g->completions = calloc(G, sizeof *g->completions);
        g->has_rewards = 1;
        g->rewards = (double *)rewards;
        for (int k = 0; k < G; k++) {
            cpt_completion *c = &g->completions[k];
            int n = n_model(k) + (w == 0 ? n_obs(k) : 0);
            c->n_tokens = (uint32_t)n;
            c->tokens = malloc(sizeof(int32_t) * (size_t)n);
            c->logprobs = malloc(sizeof(float) * (size_t)n);
            c->teacher_logprobs = malloc(sizeof(float) * (size_t)n);
            if (w == 0) c->mask = malloc((size_t)n);
            int j = 0; /* model token index */
            for (int i = 0; i < n; i++) {
                int obs = w == 0 && i >= obs_at(k) && i < obs_at(k) + n_obs(k);
                if (w == 0) c->mask[i] = !obs;
                if (obs) {
                    c->tokens[i] = 90 + i;
                    c->logprobs[i] = -1e30f;
                    c->teacher_logprobs[i] = -1e30f;
                    continue;
                }
                c->tokens[i] = 20 + (7 * j + 3 * k) % 50;
                c->logprobs[i] = -0.2f - 0.05f * (float)((j + k) % 7);
                c->teacher_logprobs[i] = -0.1f - 0.07f * (float)((2 * j + k) % 5);
                j++;
            }
        }
    }
}

static void free_group(cpt_rollout_group *g) {
    for (int k = 0; k < G; k++) {
        free(g->completions[k].tokens);
        free(g->completions[k].logprobs);
        free(g->completions[k].teacher_logprobs);
        free(g->completions[k].mask);
    }
    free(g->completions);
}

/* Per-token inputs of one batch; a[t] for the cut batch, and the full batch takes the same values at the matching
 * masked positions and absurd ones elsewhere. */
typedef struct arrays {
    float *logp, *old, *ref, *ent, *values, *adv, *ret, *d_logp, *d_ent, *d_val, *scr_tok, *scr_seq;
    double *rew;
} arrays;

static void arrays_alloc(arrays *a, int n, int s) {
    float **f[] = {&a->logp, &a->old, &a->ref, &a->ent, &a->values, &a->adv, &a->ret, &a->d_logp, &a->d_ent, &a->d_val,
                   &a->scr_tok};
    for (size_t i = 0; i < sizeof f / sizeof *f; i++) *f[i] = calloc((size_t)n, sizeof(float));
    a->scr_seq = calloc((size_t)s, sizeof(float));
    a->rew = calloc((size_t)s, sizeof(double));
}

static void arrays_free(arrays *a) {
    float *f[] = {a->logp, a->old, a->ref, a->ent, a->values, a->adv, a->ret, a->d_logp, a->d_ent, a->d_val,
                  a->scr_tok, a->scr_seq};
    for (size_t i = 0; i < sizeof f / sizeof *f; i++) free(f[i]);
    free(a->rew);
}

/* map[t] of the full batch: the index of the same token in the cut batch (a masked position), or -1. */
static int *match_positions(const cpt_rl_batch *full, const cpt_rl_batch *cut) {
    int *map = malloc(sizeof(int) * (size_t)full->n_tokens);
    for (int s = 0; s < full->n_seqs; s++) {
        int u = cut->seq_start[s];
        for (int t = full->seq_start[s]; t < full->seq_start[s + 1]; t++) {
            map[t] = -1;
            if (full->mask[t] == 0) continue;
            while (cut->mask[u] == 0) u++;
            map[t] = u++;
        }
    }
    return map;
}

static void fill(arrays *fa, arrays *ca, const cpt_rl_batch *full, const cpt_rl_batch *cut, const int *map) {
    for (int u = 0; u < cut->n_tokens; u++) {
        ca->logp[u] = -0.3f - 0.04f * (float)(u % 9);
        ca->old[u] = ca->logp[u] + 0.15f * (float)((u % 5) - 2); /* ratios on both sides of the clip range */
        ca->ref[u] = ca->logp[u] - 0.1f * (float)(u % 3);
        ca->ent[u] = 1.0f + 0.1f * (float)(u % 4);
        ca->values[u] = 0.2f * (float)((u % 6) - 3);
    }
    for (int t = 0; t < full->n_tokens; t++) {
        if (map[t] < 0) {
            float x = absurd[t % 5];
            fa->logp[t] = fa->old[t] = fa->ref[t] = fa->ent[t] = fa->values[t] = x;
            continue;
        }
        int u = map[t];
        fa->logp[t] = ca->logp[u];
        fa->old[t] = ca->old[u];
        fa->ref[t] = ca->ref[u];
        fa->ent[t] = ca->ent[u];
        fa->values[t] = ca->values[u];
    }
}

static int run(const cpt_objective_config *oc, const cpt_rl_batch *b, arrays *a, cpt_obj_metrics *m) {
    cpt_err err;
    for (int s = 0; s < b->n_seqs; s++) a->rew[s] = b->seq_reward[s];
    int ppo = oc->type == CPT_OBJ_PPO;
    if (cpt_online_advantages(oc, b, a->rew, ppo ? a->values : NULL, a->adv, a->ret, a->scr_seq, a->scr_tok, &err)) {
        fprintf(stderr, "advantages: %s\n", err.msg);
        return -1;
    }
    cpt_obj_inputs in = {.n_tokens = b->n_tokens, .n_seqs = b->n_seqs, .seq_start = b->seq_start, .mask = b->mask,
                         .logprobs = a->logp, .old_logprobs = a->old, .behav_logprobs = b->behav_logprobs,
                         .ref_logprobs = a->ref, .entropy = a->ent, .advantages = a->adv,
                         .values = ppo ? a->values : NULL, .old_values = ppo ? a->values : NULL,
                         .returns = ppo ? a->ret : NULL};
    cpt_obj_grads g = {.d_logprobs = a->d_logp, .d_entropy = a->d_ent, .d_values = ppo ? a->d_val : NULL};
    if (cpt_objective_compute(oc, &in, &g, m, &err)) {
        fprintf(stderr, "objective: %s\n", err.msg);
        return -1;
    }
    return 0;
}

static void check_same(const char *name, const cpt_rl_batch *full, const cpt_rl_batch *cut, const int *map,
                       const cpt_objective_config *oc) {
    arrays fa, ca;
    arrays_alloc(&fa, full->n_tokens, full->n_seqs);
    arrays_alloc(&ca, cut->n_tokens, cut->n_seqs);
    fill(&fa, &ca, full, cut, map);
    cpt_obj_metrics mf, mc;
    int rf = run(oc, full, &fa, &mf), rc = run(oc, cut, &ca, &mc);
    CHECK_MSG(rf == 0 && rc == 0, "%s: the full batch %d, the cut one %d", name, rf, rc);
    if (rf || rc) goto out;
    const double *vf = &mf.loss, *vc = &mc.loss;
    int nv = (int)(sizeof mf / sizeof(double));
    for (int i = 0; i < nv; i++)
        CHECK_MSG(fabs(vf[i] - vc[i]) <= 1e-9 * (fabs(vc[i]) > 1 ? fabs(vc[i]) : 1), "%s: metric %d: %.17g vs %.17g",
                  name, i, vf[i], vc[i]);
    CHECK_MSG(mf.n_tokens == mc.n_tokens && mc.n_tokens > 0, "%s: n_tokens %g vs %g", name, mf.n_tokens, mc.n_tokens);
    CHECK_MSG(isfinite(mf.loss), "%s: loss %g", name, mf.loss);
    int ppo = oc->type == CPT_OBJ_PPO;
    for (int t = 0; t < full->n_tokens; t++) {
        int u = map[t];
        if (u < 0) {
            CHECK_MSG(fa.d_logp[t] == 0 && fa.d_ent[t] == 0 && (!ppo || fa.d_val[t] == 0),
                      "%s: masked token %d has gradient %g / %g / %g", name, t, fa.d_logp[t], fa.d_ent[t], fa.d_val[t]);
            continue;
        }
        CHECK_MSG(fa.d_logp[t] == ca.d_logp[u], "%s: d_logprobs[%d] %g vs %g", name, t, fa.d_logp[t], ca.d_logp[u]);
        CHECK_MSG(fa.d_ent[t] == ca.d_ent[u], "%s: d_entropy[%d] %g vs %g", name, t, fa.d_ent[t], ca.d_ent[u]);
        if (ppo) CHECK_MSG(fa.d_val[t] == ca.d_val[u], "%s: d_values[%d] %g vs %g", name, t, fa.d_val[t], ca.d_val[u]);
        CHECK_MSG(fa.adv[t] == ca.adv[u], "%s: advantage[%d] %g vs %g", name, t, fa.adv[t], ca.adv[u]);
    }
out:
    arrays_free(&fa);
    arrays_free(&ca);
}

static void test_objectives(void) {
    cpt_rollout_group full, cut;
    make_groups(&full, &cut);
    cpt_rl_batch bf = {0}, bc = {0};
    cpt_err err;
    CHECK_MSG(cpt_rl_batch_add_group(&bf, &full, 4096, 100, &err) == 0, "%s", err.msg);
    CHECK_MSG(cpt_rl_batch_add_group(&bc, &cut, 4096, 100, &err) == 0, "%s", err.msg);
    /* the packing: observation positions are unmasked, with behaviour and teacher logprobs 0 */
    int masked_f = 0, masked_c = 0, obs = 0;
    for (int t = 0; t < bf.n_tokens; t++) {
        masked_f += bf.mask[t] != 0;
        if (bf.mask[t] == 0 && (bf.behav_logprobs[t] != 0 || bf.teacher_logprobs[t] != 0)) obs = -1000;
    }
    for (int t = 0; t < bc.n_tokens; t++) masked_c += bc.mask[t] != 0;
    for (int k = 0; k < G; k++) obs += n_obs(k);
    CHECK_EQ_INT(masked_f, masked_c);
    CHECK_EQ_INT(bf.n_tokens - bc.n_tokens, obs);
    CHECK_EQ_INT(bf.seq_resp_len[1], n_model(1) + n_obs(1)); /* the length budget counts observations */
    CHECK(bf.has_teacher && bc.has_teacher);
    int *map = match_positions(&bf, &bc);

    struct {
        const char *name;
        cpt_obj_type type;
        cpt_grpo_variant variant;
        cpt_loss_agg agg;
        double eps_high;
    } cases[] = {
        {"grpo", CPT_OBJ_GRPO, CPT_GRPO_PLAIN, CPT_AGG_SEQ_MEAN_TOKEN_MEAN, 0.2},
        {"dr_grpo", CPT_OBJ_GRPO, CPT_GRPO_DR, CPT_AGG_TOKEN_MEAN, 0.2},
        {"dapo", CPT_OBJ_GRPO, CPT_GRPO_PLAIN, CPT_AGG_TOKEN_MEAN, 0.28},
        {"gspo", CPT_OBJ_GRPO, CPT_GRPO_GSPO, CPT_AGG_TOKEN_MEAN, 0.2},
        {"ppo", CPT_OBJ_PPO, CPT_GRPO_PLAIN, CPT_AGG_TOKEN_MEAN, 0.2},
        {"opd", CPT_OBJ_OPD, CPT_GRPO_PLAIN, CPT_AGG_TOKEN_MEAN, 0.2},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        cpt_objective_config oc;
        cpt_objective_defaults(&oc, cases[i].type);
        oc.variant = cases[i].variant;
        oc.loss_agg = cases[i].agg;
        oc.loss_agg_norm = 64;
        oc.clip_eps_high = cases[i].eps_high;
        oc.dual_clip_c = 3;
        oc.kl_beta = 0.05;
        oc.entropy_coef = 0.01;
        oc.tis = 1;
        oc.tis_cap = 2;
        if (cases[i].type == CPT_OBJ_PPO) oc.value_clip = 0.2;
        if (cases[i].type == CPT_OBJ_OPD) oc.opd_task_weight = 0.5;
        check_same(cases[i].name, &bf, &bc, map, &oc);
    }
    free(map);
    cpt_rl_batch_free(&bf);
    cpt_rl_batch_free(&bc);
    free_group(&full);
    free_group(&cut);
}

/* No mask and an all-ones mask pack to the same batch, so runs without tools train exactly as before. */
static void test_no_mask_unchanged(void) {
    cpt_rollout_group full, cut;
    make_groups(&full, &cut);
    cpt_rl_batch a = {0}, b = {0};
    cpt_err err;
    CHECK_EQ_INT(cpt_rl_batch_add_group(&a, &cut, 4096, 100, &err), 0);
    for (int k = 0; k < G; k++) {
        cut.completions[k].mask = malloc(cut.completions[k].n_tokens);
        memset(cut.completions[k].mask, 1, cut.completions[k].n_tokens);
    }
    CHECK_EQ_INT(cpt_rl_batch_add_group(&b, &cut, 4096, 100, &err), 0);
    CHECK_EQ_INT(a.n_tokens, b.n_tokens);
    CHECK(!memcmp(a.mask, b.mask, sizeof(float) * (size_t)a.n_tokens));
    CHECK(!memcmp(a.behav_logprobs, b.behav_logprobs, sizeof(float) * (size_t)a.n_tokens));
    CHECK(!memcmp(a.teacher_logprobs, b.teacher_logprobs, sizeof(float) * (size_t)a.n_tokens));
    int nm = 0;
    for (int t = 0; t < a.n_tokens; t++) nm += a.mask[t] != 0;
    int want = 0;
    for (int k = 0; k < G; k++) want += n_model(k);
    CHECK_EQ_INT(nm, want);
    cpt_rl_batch_free(&a);
    cpt_rl_batch_free(&b);
    free_group(&full);
    free_group(&cut);
}

int main(void) {
    test_objectives();
    test_no_mask_unchanged();
    return check_summary("test_objective_mask");
}
