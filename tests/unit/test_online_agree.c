/* Train-inference agreement (trainer/online_agree.h): on a hand-made batch with known deltas, the agree figures
 * count the model's tokens (mask 1) of the current version's groups only (prompt positions, a tool's observation
 * tokens and a stale group's tokens carry large deltas that must not show); and after a real learner step (one
 * mini-batch, and two: the proximal pass), the learner's old_logp against the model's own behaviour logprobs gives
 * a zero gap, though the step moved the weights (the gap is of the weights before the step's first update). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli/config_keys.h"
#include "core/config.h"
#include "tests/check.h"
#include "tests/unit/online_groups_fixture.h"
#include "trainer/online_agree.h"
#include "trainer/online_step.h"
#include "trainer/rl_data.h"

static double metric(const cpt_agree_stats *a, const char *name) {
    const char *names[8];
    double vals[8];
    int k = cpt_agree_metrics_list(a, names, vals, 8);
    for (int i = 0; i < k; i++)
        if (!strcmp(names[i], name)) return vals[i];
    return NAN;
}

static void test_hand_made(void) {
    /* group 0 (version 5): sequences [0, 4) and [4, 8); group 1 (version 4, stale): [8, 11); group 2 (version 5):
     * [11, 16) with a tool observation at 13. Position 0, 4, 8, 11 are prompt positions (mask 0). */
    int32_t seq_start[] = {0, 4, 8, 11, 16};
    int32_t group_seq0[] = {0, 2, 3}, group_size[] = {2, 1, 1};
    uint64_t group_version[] = {5, 4, 5};
    float mask[16] = {0, 1, 1, 1, 0, 1, 1, 1, 0, 1, 1, 0, 1, 0, 1, 1};
    /* trainer - behaviour at the compared tokens: 1, 2, 3 | 5, 6, 7 | 12, 14, 15 */
    double delta[16] = {0};
    delta[0] = delta[4] = delta[8] = delta[11] = 3.0; /* prompts */
    delta[9] = delta[10] = -2.0;                      /* the stale group */
    delta[13] = 1.5;                                  /* the observation */
    delta[1] = 0.01, delta[2] = -0.02, delta[3] = 0.2;  /* exp(0.2) - 1 = 0.221: far */
    delta[5] = -0.05, delta[6] = -0.12, delta[7] = 0.09; /* exp(-0.12) - 1 = -0.113: far; 0.094 and -0.049 not */
    delta[12] = 0.0, delta[14] = -0.1, delta[15] = 0.1; /* -0.095 not far; 0.105 far */
    float behav[16], trainer[16];
    for (int t = 0; t < 16; t++) {
        behav[t] = -1.0f - 0.1f * (float)t;
        trainer[t] = (float)(behav[t] + delta[t]);
    }
    cpt_rl_batch b;
    memset(&b, 0, sizeof b);
    b.n_tokens = 16, b.n_seqs = 4, b.n_groups = 3;
    b.seq_start = seq_start, b.group_seq0 = group_seq0, b.group_size = group_size, b.group_version = group_version;
    b.mask = mask, b.behav_logprobs = behav;

    cpt_agree_stats a;
    cpt_agree_measure(&b, trainer, 5, &a);
    CHECK_EQ_INT(a.tokens, 9);
    CHECK_EQ_INT(a.far, 3);
    double sum = 0.01 + 0.02 + 0.2 + 0.05 + 0.12 + 0.09 + 0.0 + 0.1 + 0.1;
    CHECK_NEAR(metric(&a, "agree/logprob_delta_mean"), sum / 9, 1e-6);
    CHECK_NEAR(metric(&a, "agree/logprob_delta_max"), 0.2, 1e-6);
    CHECK_NEAR(metric(&a, "agree/prob_delta_frac10"), 3.0 / 9, 1e-12);

    /* the stale group alone: its two tokens */
    cpt_agree_measure(&b, trainer, 4, &a);
    CHECK_EQ_INT(a.tokens, 2);
    CHECK_NEAR(metric(&a, "agree/logprob_delta_max"), 2.0, 1e-6);

    /* no group of the version: no token, and no mean, max or fraction to report */
    cpt_agree_measure(&b, trainer, 6, &a);
    CHECK_EQ_INT(a.tokens, 0);
    const char *names[8];
    double vals[8];
    CHECK_EQ_INT(cpt_agree_metrics_list(&a, names, vals, 8), 0);
}

/* A learner step with a large learning rate: afterwards old_logp is still the weights before it, so the gap to the
 * model's own behaviour logprobs is zero; the model's logprobs now are far from them. */
static void learner_step(const char *mini_batches) {
    cpt_err err;
    char *ov[] = {"algo.type=grpo", "optim.lr=0.05", "optim.schedule=constant", "train.steps=10",
                  (char *)mini_batches};
    cpt_config *cfg = cpt_config_load(NULL, 5, ov, &err);
    CHECK_MSG(cfg != NULL, "%s", err.msg);
    if (!cfg) return;
    cpt_objective_config oc;
    oc.type = CPT_OBJ_GRPO;
    CHECK_EQ_INT(cpt_objective_from_config(cfg, &oc, &err), 0);
    cpt_model *pol = tiny_model();
    cpt_online_learner L;
    CHECK_EQ_INT(cpt_online_learner_init(&L, cfg, &oc, pol, NULL, NULL, &err), 0);
    groups f;
    cpt_rl_batch b;
    make_batch(&f, pol, &b);
    cpt_online_step_stats st;
    CHECK_MSG(cpt_online_learner_step(&L, &b, 0, &st, &err) == 0, "%s", err.msg);
    cpt_agree_stats a;
    cpt_agree_measure(&b, L.old_logp, 0, &a);
    /* the weights after the step, against the same behaviour logprobs */
    float *now = calloc((size_t)b.n_tokens, sizeof *now);
    cpt_batch mb = {.n_tokens = b.n_tokens, .n_seqs = b.n_seqs, .tokens = b.tokens, .seq_start = b.seq_start,
                    .targets = b.targets};
    cpt_forward_out fo = {.logprobs = now};
    CHECK_EQ_INT(cpt_model_forward(pol, &mb, &fo, 0, &err), 0);
    cpt_agree_stats moved;
    cpt_agree_measure(&b, now, 0, &moved);
    printf("%s: %ld tokens, |delta| max %.3g (after the step: %.3g)\n", mini_batches, a.tokens, a.abs_max,
           moved.abs_max);
    CHECK_EQ_INT(a.tokens, 4 * (2 + 3 + 4 + 5));
    CHECK_MSG(a.abs_max < 1e-6, "%s: proximal logprobs %g away from the model's own", mini_batches, a.abs_max);
    CHECK_MSG(moved.abs_max > 1e-3, "%s: the step did not move the logprobs (%g)", mini_batches, moved.abs_max);
    free(now);
    cpt_rl_batch_free(&b);
    cpt_online_learner_free(&L);
    cpt_model_free(pol);
    cpt_config_free(cfg);
}

int main(void) {
    test_hand_made();
    learner_step("train.mini_batches=1");
    learner_step("train.mini_batches=2");
    return check_summary("test_online_agree");
}
