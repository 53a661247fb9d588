/* Every objective and knob against the PyTorch float64 autograd reference in tests/fixtures/objectives/objectives.json
 * (made by tests/fixtures/make_objective_fixture.py): loss, d/d(logprobs), d/d(entropy), d/d(values), the advantage
 * helpers and the metrics, at relative error <= 1e-5. Failures name the case, the array and the index. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "tests/check.h"
#include "trainer/objective.h"

#define TOL 1e-5

static float *farr(json_t *a, int n, const char *what, const char *cname) {
    if (!json_is_array(a)) return NULL;
    if ((int)json_array_size(a) != n) {
        fprintf(stderr, "%s: %s has %zu values, want %d\n", cname, what, json_array_size(a), n);
        check_failures++;
        return NULL;
    }
    float *x = malloc(sizeof(float) * (size_t)(n ? n : 1));
    for (int i = 0; i < n; i++) x[i] = (float)json_number_value(json_array_get(a, (size_t)i));
    return x;
}

/* |a - b| <= TOL * max(|b|, 1e-3 * max|b|): relative, with a floor for entries that are small next to the rest. */
static void check_array(const char *cname, const char *what, const float *got, json_t *want, int n) {
    check_count++;
    if (!json_is_array(want) || (int)json_array_size(want) != n) {
        check_failures++;
        fprintf(stderr, "%s: expected array %s missing or wrong size\n", cname, what);
        return;
    }
    double scale = 0;
    for (int i = 0; i < n; i++) {
        double b = fabs(json_number_value(json_array_get(want, (size_t)i)));
        if (b > scale) scale = b;
    }
    double worst = 0;
    int worst_i = -1;
    for (int i = 0; i < n; i++) {
        double b = json_number_value(json_array_get(want, (size_t)i));
        double den = fmax(fmax(fabs(b), 1e-3 * scale), 1e-300);
        double e = fabs(got[i] - b) / den;
        if (e > worst) { worst = e; worst_i = i; }
    }
    if (worst > TOL) {
        check_failures++;
        fprintf(stderr, "%s: %s[%d] = %.10g, reference %.10g (relative error %.3g > %g)\n", cname, what, worst_i,
                (double)got[worst_i], json_number_value(json_array_get(want, (size_t)worst_i)), worst, TOL);
    }
}

static void check_scalar(const char *cname, const char *what, double got, json_t *expect) {
    json_t *w = json_object_get(expect, what);
    if (!w) return;
    double b = json_number_value(w);
    check_count++;
    double e = fabs(got - b) / fmax(fabs(b), 1e-9);
    if (!(e <= TOL)) {
        check_failures++;
        fprintf(stderr, "%s: %s = %.12g, reference %.12g (relative error %.3g)\n", cname, what, got, b, e);
    }
}

static void apply_config(cpt_objective_config *oc, json_t *cfg, const char *cname) {
    const char *k;
    json_t *v;
    cpt_err err;
    json_object_foreach(cfg, k, v) {
        double d = json_is_boolean(v) ? (json_is_true(v) ? 1 : 0) : json_number_value(v);
        const char *s = json_string_value(v);
        if (!strcmp(k, "loss_agg")) CHECK(cpt_loss_agg_parse(s, &oc->loss_agg, &err) == 0);
        else if (!strcmp(k, "kl_estimator")) CHECK(cpt_kl_estimator_parse(s, &oc->kl_estimator, &err) == 0);
        else if (!strcmp(k, "variant")) CHECK(cpt_grpo_variant_parse(s, &oc->variant, &err) == 0);
        else if (!strcmp(k, "dpo_loss")) oc->dpo_ipo = !strcmp(s, "ipo");
        else if (!strcmp(k, "loss_agg_norm")) oc->loss_agg_norm = d;
        else if (!strcmp(k, "dpo_beta")) oc->dpo_beta = d;
        else if (!strcmp(k, "dpo_label_smoothing")) oc->dpo_label_smoothing = d;
        else if (!strcmp(k, "clip_eps_low")) oc->clip_eps_low = d;
        else if (!strcmp(k, "clip_eps_high")) oc->clip_eps_high = d;
        else if (!strcmp(k, "dual_clip_c")) oc->dual_clip_c = d;
        else if (!strcmp(k, "gspo_eps_low")) oc->gspo_eps_low = d;
        else if (!strcmp(k, "gspo_eps_high")) oc->gspo_eps_high = d;
        else if (!strcmp(k, "kl_beta")) oc->kl_beta = d;
        else if (!strcmp(k, "entropy_coef")) oc->entropy_coef = d;
        else if (!strcmp(k, "tis")) oc->tis = (int)d;
        else if (!strcmp(k, "tis_cap")) oc->tis_cap = d;
        else if (!strcmp(k, "adv_std_norm")) oc->adv_std_norm = (int)d;
        else if (!strcmp(k, "adv_eps")) oc->adv_eps = d;
        else if (!strcmp(k, "gamma")) oc->gamma = d;
        else if (!strcmp(k, "gae_lambda")) oc->gae_lambda = d;
        else if (!strcmp(k, "value_clip")) oc->value_clip = d;
        else if (!strcmp(k, "value_coef")) oc->value_coef = d;
        else if (!strcmp(k, "ppo_norm_adv")) oc->ppo_norm_adv = (int)d;
        else if (!strcmp(k, "opd_task_weight")) oc->opd_task_weight = d;
        else {
            check_failures++;
            fprintf(stderr, "%s: fixture knob '%s' is unknown to the test\n", cname, k);
        }
    }
    if (oc->variant == CPT_GRPO_DR) oc->adv_std_norm = 0;
}

static int run_case(json_t *c) {
    const char *cname = json_string_value(json_object_get(c, "name"));
    const char *tname = json_string_value(json_object_get(c, "type"));
    cpt_err err;
    cpt_obj_type type;
    if (cpt_obj_type_parse(tname, &type, &err)) {
        fprintf(stderr, "%s: %s\n", cname, err.msg);
        check_failures++;
        return 0;
    }
    cpt_objective_config oc;
    cpt_objective_defaults(&oc, type);
    apply_config(&oc, json_object_get(c, "config"), cname);

    json_t *ss = json_object_get(c, "seq_start");
    int n_seqs = (int)json_array_size(ss) - 1;
    int32_t *seq_start = malloc(sizeof(int32_t) * (size_t)(n_seqs + 1));
    for (int s = 0; s <= n_seqs; s++) seq_start[s] = (int32_t)json_integer_value(json_array_get(ss, (size_t)s));
    int n = seq_start[n_seqs];
    json_t *inp = json_object_get(c, "inputs"), *expect = json_object_get(c, "expect");
    float *mask = farr(json_object_get(c, "mask"), n, "mask", cname);
    float *lp = farr(json_object_get(inp, "logprobs"), n, "logprobs", cname);
    float *old = farr(json_object_get(inp, "old_logprobs"), n, "old_logprobs", cname);
    float *behav = farr(json_object_get(inp, "behav_logprobs"), n, "behav_logprobs", cname);
    float *ref = farr(json_object_get(inp, "ref_logprobs"), n, "ref_logprobs", cname);
    float *ent = farr(json_object_get(inp, "entropy"), n, "entropy", cname);
    float *values = farr(json_object_get(inp, "values"), n, "values", cname);
    float *old_values = farr(json_object_get(inp, "old_values"), n, "old_values", cname);
    float *adv = calloc((size_t)n, sizeof(float)), *returns = calloc((size_t)n, sizeof(float));
    float *d_lp = calloc((size_t)n, sizeof(float)), *d_ent = calloc((size_t)n, sizeof(float));
    float *d_v = calloc((size_t)n, sizeof(float));

    /* advantages from the helpers, checked against the reference before they feed the loss */
    if (type == CPT_OBJ_GRPO) {
        json_t *rw = json_object_get(c, "rewards");
        int G = (int)json_integer_value(json_object_get(c, "group_size"));
        float *rewards_f = farr(rw, n_seqs, "rewards", cname);
        double *rewards = calloc((size_t)n_seqs, sizeof(double));
        for (int i = 0; i < n_seqs; i++) rewards[i] = rewards_f[i];
        free(rewards_f);
        float *seq_adv = calloc((size_t)n_seqs, sizeof(float));
        CHECK(cpt_grpo_advantages(rewards, n_seqs / G, G, oc.adv_std_norm, oc.adv_eps, seq_adv, &err) == 0);
        check_array(cname, "seq_advantages", seq_adv, json_object_get(expect, "seq_advantages"), n_seqs);
        cpt_seq_to_tokens(seq_adv, n_seqs, seq_start, mask, adv);
        free(rewards);
        free(seq_adv);
    } else if (type == CPT_OBJ_PPO) {
        float *tr = farr(json_object_get(c, "token_rewards"), n, "token_rewards", cname);
        CHECK(cpt_gae(tr, old_values, mask, n_seqs, seq_start, oc.gamma, oc.gae_lambda, oc.ppo_norm_adv, oc.adv_eps,
                      adv, returns, &err) == 0);
        check_array(cname, "returns", returns, json_object_get(expect, "returns"), n);
        free(tr);
    } else if (type == CPT_OBJ_OPD) {
        float *teacher = farr(json_object_get(c, "teacher_logprobs"), n, "teacher_logprobs", cname);
        float *task = farr(json_object_get(c, "task_adv"), n, "task_adv", cname);
        cpt_opd_advantages(old, teacher, task, oc.opd_task_weight, mask, n, adv);
        free(teacher);
        free(task);
    }
    if (type == CPT_OBJ_GRPO || type == CPT_OBJ_PPO || type == CPT_OBJ_OPD)
        check_array(cname, "advantages", adv, json_object_get(expect, "advantages"), n);

    cpt_obj_inputs in = {.n_tokens = n, .n_seqs = n_seqs, .seq_start = seq_start, .mask = mask, .logprobs = lp,
                         .old_logprobs = old, .behav_logprobs = behav, .ref_logprobs = ref, .entropy = ent,
                         .advantages = adv, .values = values, .old_values = old_values, .returns = returns};
    cpt_obj_grads g = {.d_logprobs = d_lp, .d_entropy = ent ? d_ent : NULL, .d_values = values ? d_v : NULL};
    cpt_obj_metrics m;
    int rc = cpt_objective_compute(&oc, &in, &g, &m, &err);
    CHECK_MSG(rc == 0, "%s: %s", cname, err.msg);
    if (rc == 0) {
        check_scalar(cname, "loss", m.loss, expect);
        check_array(cname, "d_logprobs", d_lp, json_object_get(expect, "d_logprobs"), n);
        if (json_object_get(expect, "d_entropy")) check_array(cname, "d_entropy", d_ent, json_object_get(expect, "d_entropy"), n);
        if (json_object_get(expect, "d_values")) check_array(cname, "d_values", d_v, json_object_get(expect, "d_values"), n);
        check_scalar(cname, "value_loss", m.value_loss, expect);
        check_scalar(cname, "clip_frac", m.clip_frac, expect);
        check_scalar(cname, "ratio_max", m.ratio_max, expect);
        check_scalar(cname, "ratio_mean", m.ratio_mean, expect);
        check_scalar(cname, "kl", m.kl, expect);
        check_scalar(cname, "reward_margin", m.reward_margin, expect);
        check_scalar(cname, "reward_accuracy", m.reward_accuracy, expect);
        check_scalar(cname, "reward_chosen", m.reward_chosen, expect);
        /* the parts add up to the total */
        CHECK_NEAR(m.policy_loss + m.kl_loss + m.entropy_loss + m.value_loss, m.loss, 1e-12);
    }
    free(seq_start); free(mask); free(lp); free(old); free(behav); free(ref); free(ent); free(values);
    free(old_values); free(adv); free(returns); free(d_lp); free(d_ent); free(d_v);
    return 1;
}

/* Hand-made checks of the pieces that have no gradient. */
static void test_helpers(void) {
    /* DAPO overlong: max 20, buffer 5 -> free up to 15, then -(len-15)/5 * factor, -factor beyond 20 */
    CHECK_NEAR(cpt_overlong_penalty(10, 20, 5, 1.0), 0.0, 1e-15);
    CHECK_NEAR(cpt_overlong_penalty(15, 20, 5, 1.0), 0.0, 1e-15);
    CHECK_NEAR(cpt_overlong_penalty(16, 20, 5, 1.0), -0.2, 1e-15);
    CHECK_NEAR(cpt_overlong_penalty(18, 20, 5, 0.5), -0.3, 1e-15);
    CHECK_NEAR(cpt_overlong_penalty(20, 20, 5, 1.0), -1.0, 1e-15);
    CHECK_NEAR(cpt_overlong_penalty(400, 20, 5, 2.0), -2.0, 1e-15);
    CHECK_NEAR(cpt_overlong_penalty(400, 20, 0, 2.0), 0.0, 1e-15);

    /* dynamic sampling: groups 0 and 2 tie */
    double r[12] = {1, 1, 1, 1, 0, 1, 0, 0, 0.5, 0.5, 0.5, 0.5};
    uint8_t keep[3];
    CHECK_EQ_INT(cpt_dynamic_sampling_filter(r, 3, 4, keep), 2);
    CHECK_EQ_INT(keep[0], 0);
    CHECK_EQ_INT(keep[1], 1);
    CHECK_EQ_INT(keep[2], 0);

    /* group advantages by hand: rewards 0,1,0,1 -> mean .5, unbiased std sqrt(1/3) */
    double r2[4] = {0, 1, 0, 1};
    float a[4];
    cpt_err err;
    CHECK(cpt_grpo_advantages(r2, 1, 4, 1, 0.0, a, &err) == 0);
    CHECK_NEAR(a[1], 0.5 / sqrt(1.0 / 3.0), 1e-6);
    CHECK_NEAR(a[0], -0.5 / sqrt(1.0 / 3.0), 1e-6);
    CHECK(cpt_grpo_advantages(r2, 1, 4, 0, 0.0, a, &err) == 0);
    CHECK_NEAR(a[1], 0.5, 1e-7);
    double one = 3;
    float a1;
    CHECK(cpt_grpo_advantages(&one, 1, 1, 1, 1e-6, &a1, &err) == 0);
    CHECK_NEAR(a1, 0.0, 1e-15);
    double bad[2] = {1, NAN};
    CHECK(cpt_grpo_advantages(bad, 1, 2, 1, 1e-6, a, &err) == -1);
    CHECK(strstr(err.msg, "not finite") != NULL);
    /* rewards beyond float range stay doubles: 1e39 and 3e39 normalise to -1/sqrt(2), +1/sqrt(2) */
    double huge[2] = {1e39, 3e39};
    CHECK(cpt_grpo_advantages(huge, 1, 2, 1, 1e-6, a, &err) == 0);
    CHECK_NEAR(a[0], -1.0 / sqrt(2.0), 1e-6);
    CHECK_NEAR(a[1], 1.0 / sqrt(2.0), 1e-6);

    /* GAE by hand: one sequence, mask 0 1 1 1, gamma 1, lambda 1: advantages are reward-to-go minus value */
    float rw[4] = {9, 0, 0, 1}, v[4] = {9, 0.5f, 0.25f, 0.75f}, mk[4] = {0, 1, 1, 1}, adv[4], ret[4];
    int32_t ss[2] = {0, 4};
    CHECK(cpt_gae(rw, v, mk, 1, ss, 1.0, 1.0, 0, 0, adv, ret, &err) == 0);
    CHECK_NEAR(adv[0], 0.0, 1e-15);
    CHECK_NEAR(adv[1], 0.5, 1e-7);
    CHECK_NEAR(adv[3], 0.25, 1e-7);
    CHECK_NEAR(ret[1], 1.0, 1e-7);

    /* bad input is an error naming the field, not a crash */
    float lp[3] = {-1, NAN, -1}, mask3[3] = {1, 1, 1}, d[3];
    int32_t s3[2] = {0, 3};
    cpt_objective_config oc;
    cpt_objective_defaults(&oc, CPT_OBJ_SFT);
    cpt_obj_inputs in = {.n_tokens = 3, .n_seqs = 1, .seq_start = s3, .mask = mask3, .logprobs = lp};
    cpt_obj_grads g = {.d_logprobs = d};
    cpt_obj_metrics m;
    CHECK(cpt_objective_compute(&oc, &in, &g, &m, &err) == -1);
    CHECK(strstr(err.msg, "logprobs[1]") != NULL);
    cpt_objective_defaults(&oc, CPT_OBJ_GRPO);
    lp[1] = -2;
    CHECK(cpt_objective_compute(&oc, &in, &g, &m, &err) == -1);
    CHECK(strstr(err.msg, "advantages") != NULL);
    cpt_objective_defaults(&oc, CPT_OBJ_DPO);
    CHECK(cpt_objective_compute(&oc, &in, &g, &m, &err) == -1);
    CHECK(strstr(err.msg, "pairs") != NULL);
    int32_t s_bad[2] = {0, 2};
    in.seq_start = s_bad;
    cpt_objective_defaults(&oc, CPT_OBJ_SFT);
    CHECK(cpt_objective_compute(&oc, &in, &g, &m, &err) == -1);
    CHECK(strstr(err.msg, "seq_start") != NULL);
    CHECK(cpt_loss_agg_parse("token_mean", &oc.loss_agg, &err) == -1);
    CHECK(strstr(err.msg, "seq-mean-token-sum-norm") != NULL);

    /* needs_ref lets the trainer skip the reference model */
    cpt_objective_defaults(&oc, CPT_OBJ_GRPO);
    CHECK(!cpt_objective_needs_ref(&oc));
    oc.kl_beta = 0.01;
    CHECK(cpt_objective_needs_ref(&oc));
    cpt_objective_defaults(&oc, CPT_OBJ_DPO);
    CHECK(cpt_objective_needs_ref(&oc));
}

int main(void) {
    const char *src = getenv("CPT_SRC");
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/fixtures/objectives/objectives.json", src ? src : ".");
    json_error_t jerr;
    json_t *root = json_load_file(path, 0, &jerr);
    CHECK_MSG(root != NULL, "%s:%d: %s", path, jerr.line, jerr.text);
    int cases = 0;
    if (root) {
        json_t *arr = json_object_get(root, "cases");
        size_t i;
        json_t *c;
        json_array_foreach(arr, i, c) cases += run_case(c);
        json_decref(root);
    }
    CHECK(cases >= 30);
    printf("test_objective: %d reference cases\n", cases);
    test_helpers();
    return check_summary("test_objective");
}
