/* Objectives: configuration, input checks, dispatch, and the losses themselves (see objective.h for the maths). */
#include "trainer/objective.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/config.h"

/* ---- names ---- */

static const char *const type_names[] = {"sft", "dpo", "grpo", "ppo", "opd"};
static const char *const agg_names[] = {"token-mean", "seq-mean-token-mean", "seq-mean-token-sum",
                                        "seq-mean-token-sum-norm"};
static const char *const kl_names[] = {"k1", "k2", "k3"};
static const char *const variant_names[] = {"grpo", "dr_grpo", "gspo"};

static int parse_name(const char *s, const char *const *names, int n, const char *what, int *out, cpt_err *err) {
    for (int i = 0; i < n; i++)
        if (s && strcmp(s, names[i]) == 0) { *out = i; return 0; }
    char choices[256] = "";
    for (int i = 0; i < n; i++) {
        strncat(choices, names[i], sizeof choices - strlen(choices) - 1);
        if (i + 1 < n) strncat(choices, "|", sizeof choices - strlen(choices) - 1);
    }
    return cpt_errf(err, "%s: unknown value '%s' (choices: %s)", what, s ? s : "(null)", choices);
}

int cpt_obj_type_parse(const char *s, cpt_obj_type *out, cpt_err *err) {
    int v = 0;
    if (parse_name(s, type_names, 5, "algo.type", &v, err)) return -1;
    *out = (cpt_obj_type)v;
    return 0;
}
int cpt_loss_agg_parse(const char *s, cpt_loss_agg *out, cpt_err *err) {
    int v = 0;
    if (parse_name(s, agg_names, 4, "algo.loss_agg", &v, err)) return -1;
    *out = (cpt_loss_agg)v;
    return 0;
}
int cpt_kl_estimator_parse(const char *s, cpt_kl_estimator *out, cpt_err *err) {
    int v = 0;
    if (parse_name(s, kl_names, 3, "algo.kl_estimator", &v, err)) return -1;
    *out = (cpt_kl_estimator)v;
    return 0;
}
int cpt_grpo_variant_parse(const char *s, cpt_grpo_variant *out, cpt_err *err) {
    int v = 0;
    if (parse_name(s, variant_names, 3, "algo.variant", &v, err)) return -1;
    *out = (cpt_grpo_variant)v;
    return 0;
}
const char *cpt_obj_type_name(cpt_obj_type t) { return (unsigned)t < 5 ? type_names[t] : "?"; }
const char *cpt_loss_agg_name(cpt_loss_agg a) { return (unsigned)a < 4 ? agg_names[a] : "?"; }

/* ---- configuration ---- */

void cpt_objective_defaults(cpt_objective_config *oc, cpt_obj_type type) {
    memset(oc, 0, sizeof *oc);
    oc->type = type;
    oc->dpo_beta = 0.1;
    oc->variant = CPT_GRPO_PLAIN;
    oc->clip_eps_low = 0.2;
    oc->clip_eps_high = 0.2;
    oc->gspo_eps_low = 3e-4;
    oc->gspo_eps_high = 4e-4;
    oc->kl_estimator = CPT_KL_K3;
    oc->loss_agg = CPT_AGG_TOKEN_MEAN;
    oc->loss_agg_norm = 1024;
    oc->tis = 1;
    oc->tis_cap = 2.0;
    oc->adv_std_norm = 1;
    oc->adv_eps = 1e-6;
    oc->gamma = 1.0;
    oc->gae_lambda = 0.95;
    oc->value_clip = 0.2;
    oc->value_coef = 0.5;
    oc->ppo_norm_adv = 1;
    oc->overlong_penalty_factor = 1.0;
}

int cpt_objective_from_config(const cpt_config *cfg, cpt_objective_config *oc, cpt_err *err) {
    cpt_obj_type type;
    if (cpt_obj_type_parse(cpt_cfg_str(cfg, "algo.type"), &type, err)) return -1;
    cpt_objective_defaults(oc, type);
    oc->dpo_beta = cpt_cfg_float(cfg, "algo.dpo_beta");
    oc->dpo_label_smoothing = cpt_cfg_float(cfg, "algo.dpo_label_smoothing");
    oc->dpo_ipo = strcmp(cpt_cfg_str(cfg, "algo.dpo_loss"), "ipo") == 0;
    if (cpt_grpo_variant_parse(cpt_cfg_str(cfg, "algo.variant"), &oc->variant, err)) return -1;
    oc->clip_eps_low = cpt_cfg_float(cfg, "algo.clip_eps_low");
    oc->clip_eps_high = cpt_cfg_float(cfg, "algo.clip_eps_high");
    oc->dual_clip_c = cpt_cfg_float(cfg, "algo.dual_clip_c");
    oc->gspo_eps_low = cpt_cfg_float(cfg, "algo.gspo_eps_low");
    oc->gspo_eps_high = cpt_cfg_float(cfg, "algo.gspo_eps_high");
    oc->kl_beta = cpt_cfg_float(cfg, "algo.kl_beta");
    if (oc->kl_beta < 0) oc->kl_beta = 0; /* -1: the online trainer picks the method's (trainer/online_defaults.h) */
    if (cpt_kl_estimator_parse(cpt_cfg_str(cfg, "algo.kl_estimator"), &oc->kl_estimator, err)) return -1;
    if (cpt_loss_agg_parse(cpt_cfg_str(cfg, "algo.loss_agg"), &oc->loss_agg, err)) return -1;
    oc->loss_agg_norm = cpt_cfg_float(cfg, "algo.loss_agg_norm");
    oc->entropy_coef = cpt_cfg_float(cfg, "algo.entropy_coef");
    oc->tis = cpt_cfg_bool(cfg, "algo.tis");
    oc->tis_cap = cpt_cfg_float(cfg, "algo.tis_cap");
    oc->adv_std_norm = cpt_cfg_bool(cfg, "algo.adv_std_norm");
    oc->adv_eps = cpt_cfg_float(cfg, "algo.adv_eps");
    oc->gamma = cpt_cfg_float(cfg, "algo.gamma");
    oc->gae_lambda = cpt_cfg_float(cfg, "algo.gae_lambda");
    oc->value_clip = cpt_cfg_float(cfg, "algo.value_clip");
    oc->value_coef = cpt_cfg_float(cfg, "algo.value_coef");
    oc->ppo_norm_adv = cpt_cfg_bool(cfg, "algo.ppo_norm_adv");
    oc->opd_task_weight = cpt_cfg_float(cfg, "algo.opd_task_weight");
    oc->dynamic_sampling = cpt_cfg_bool(cfg, "algo.dynamic_sampling");
    oc->overlong_max_len = (int)cpt_cfg_int(cfg, "algo.overlong_max_len");
    oc->overlong_buffer_len = (int)cpt_cfg_int(cfg, "algo.overlong_buffer_len");
    oc->overlong_penalty_factor = cpt_cfg_float(cfg, "algo.overlong_penalty_factor");
    if (oc->variant == CPT_GRPO_DR) {
        oc->adv_std_norm = 0;
        oc->loss_agg = CPT_AGG_SEQ_MEAN_TOKEN_SUM_NORM;
    }
    if (oc->dual_clip_c != 0 && oc->dual_clip_c <= 1)
        return cpt_errf(err, "algo.dual_clip_c = %g: must be > 1 (or 0 for off)", oc->dual_clip_c);
    if (oc->overlong_buffer_len > 0 && oc->overlong_buffer_len > oc->overlong_max_len)
        return cpt_errf(err, "algo.overlong_buffer_len = %d must not exceed algo.overlong_max_len = %d",
                        oc->overlong_buffer_len, oc->overlong_max_len);
    if (type == CPT_OBJ_DPO && !oc->dpo_ipo && oc->dpo_beta <= 0)
        return cpt_errf(err, "algo.dpo_beta must be > 0");
    if (type == CPT_OBJ_DPO && oc->dpo_ipo && oc->dpo_beta <= 0)
        return cpt_errf(err, "algo.dpo_beta must be > 0 for ipo (1/(2 beta))");
    return 0;
}

int cpt_objective_needs_ref(const cpt_objective_config *oc) {
    return oc->type == CPT_OBJ_DPO || (oc->type != CPT_OBJ_SFT && oc->kl_beta > 0);
}

/* ---- checks ---- */

static int check_array(const float *a, const cpt_obj_inputs *in, const char *name, int masked_only, cpt_err *err) {
    if (!a) return cpt_errf(err, "objective: input '%s' is required", name);
    for (int t = 0; t < in->n_tokens; t++) {
        if (masked_only && in->mask[t] == 0) continue;
        if (!isfinite(a[t])) return cpt_errf(err, "objective: %s[%d] = %g is not finite", name, t, (double)a[t]);
    }
    return 0;
}

static int check_layout(const cpt_obj_inputs *in, cpt_err *err) {
    if (in->n_tokens < 0 || in->n_seqs < 0) return cpt_errf(err, "objective: negative n_tokens or n_seqs");
    if (!in->seq_start) return cpt_errf(err, "objective: input 'seq_start' is required");
    if (!in->mask) return cpt_errf(err, "objective: input 'mask' is required");
    if (in->seq_start[0] != 0) return cpt_errf(err, "objective: seq_start[0] = %d, want 0", in->seq_start[0]);
    for (int s = 0; s < in->n_seqs; s++)
        if (in->seq_start[s + 1] < in->seq_start[s])
            return cpt_errf(err, "objective: seq_start[%d] = %d < seq_start[%d] = %d", s + 1, in->seq_start[s + 1], s,
                            in->seq_start[s]);
    if (in->seq_start[in->n_seqs] != in->n_tokens)
        return cpt_errf(err, "objective: seq_start[%d] = %d, want n_tokens = %d", in->n_seqs,
                        in->seq_start[in->n_seqs], in->n_tokens);
    for (int t = 0; t < in->n_tokens; t++)
        if (!(in->mask[t] >= 0 && in->mask[t] <= 1))
            return cpt_errf(err, "objective: mask[%d] = %g is outside [0, 1]", t, (double)in->mask[t]);
    return 0;
}

/* ---- aggregation: loss = sum_t c[t] * l[t] ---- */

static void agg_weights(const cpt_obj_inputs *in, cpt_loss_agg agg, double norm, double *c) {
    int n_live = 0;
    double total = 0;
    for (int s = 0; s < in->n_seqs; s++) {
        double n = 0;
        for (int t = in->seq_start[s]; t < in->seq_start[s + 1]; t++) n += in->mask[t];
        if (n > 0) n_live++;
        total += n;
    }
    for (int s = 0; s < in->n_seqs; s++) {
        double n = 0;
        for (int t = in->seq_start[s]; t < in->seq_start[s + 1]; t++) n += in->mask[t];
        double f = 0;
        if (n > 0) {
            switch (agg) {
            case CPT_AGG_TOKEN_MEAN: f = 1.0 / total; break;
            case CPT_AGG_SEQ_MEAN_TOKEN_MEAN: f = 1.0 / (n * n_live); break;
            case CPT_AGG_SEQ_MEAN_TOKEN_SUM: f = 1.0 / n_live; break;
            case CPT_AGG_SEQ_MEAN_TOKEN_SUM_NORM: f = 1.0 / (n_live * norm); break;
            }
        }
        for (int t = in->seq_start[s]; t < in->seq_start[s + 1]; t++) c[t] = in->mask[t] * f;
    }
}

static void zero_grads(const cpt_obj_inputs *in, const cpt_obj_grads *g) {
    memset(g->d_logprobs, 0, sizeof(float) * (size_t)in->n_tokens);
    if (g->d_entropy) memset(g->d_entropy, 0, sizeof(float) * (size_t)in->n_tokens);
    if (g->d_values) memset(g->d_values, 0, sizeof(float) * (size_t)in->n_tokens);
}

/* Token-mean metrics shared by all objectives. */
static void base_metrics(const cpt_obj_inputs *in, cpt_obj_metrics *m) {
    double n = 0, ent = 0;
    for (int t = 0; t < in->n_tokens; t++) {
        if (in->mask[t] == 0) continue; /* skipped, not multiplied: what is there may be anything, NaN included */
        n += in->mask[t];
        if (in->entropy) ent += in->mask[t] * in->entropy[t];
    }
    m->n_tokens = n;
    m->entropy = n > 0 ? ent / n : 0;
}

/* Entropy bonus: adds -coef * sum c_t H_t to the loss and its gradient. */
static void entropy_bonus(const cpt_objective_config *oc, const cpt_obj_inputs *in, const double *c,
                          const cpt_obj_grads *g, cpt_obj_metrics *m) {
    if (oc->entropy_coef == 0 || !in->entropy) return;
    double l = 0;
    for (int t = 0; t < in->n_tokens; t++) {
        if (in->mask[t] == 0) continue;
        l -= oc->entropy_coef * c[t] * in->entropy[t];
        if (g->d_entropy) g->d_entropy[t] = (float)(-oc->entropy_coef * c[t]);
    }
    m->entropy_loss = l;
    m->loss += l;
}

/* ---- sft ---- */

static int sft_loss(const cpt_objective_config *oc, const cpt_obj_inputs *in, const cpt_obj_grads *g, double *c,
                    cpt_obj_metrics *m, cpt_err *err) {
    if (check_array(in->logprobs, in, "logprobs", 1, err)) return -1;
    agg_weights(in, oc->loss_agg, oc->loss_agg_norm, c);
    double l = 0;
    for (int t = 0; t < in->n_tokens; t++) {
        if (in->mask[t] == 0) continue;
        l -= c[t] * in->logprobs[t];
        g->d_logprobs[t] = (float)(-c[t]);
    }
    m->policy_loss = l;
    m->loss = l;
    return 0;
}

/* ---- dpo / ipo ---- */

static double log_sigmoid(double x) { return x >= 0 ? -log1p(exp(-x)) : x - log1p(exp(x)); }
static double sigmoid(double x) { return x >= 0 ? 1 / (1 + exp(-x)) : exp(x) / (1 + exp(x)); }

static int dpo_loss(const cpt_objective_config *oc, const cpt_obj_inputs *in, const cpt_obj_grads *g,
                    cpt_obj_metrics *m, cpt_err *err) {
    if (in->n_seqs % 2 != 0)
        return cpt_errf(err, "dpo: %d sequences, want pairs (chosen 2k, rejected 2k+1)", in->n_seqs);
    if (in->n_seqs == 0) return cpt_errf(err, "dpo: empty batch");
    if (check_array(in->logprobs, in, "logprobs", 1, err)) return -1;
    if (check_array(in->ref_logprobs, in, "ref_logprobs", 1, err)) return -1;
    int n_pairs = in->n_seqs / 2;
    double beta = oc->dpo_beta, ls = oc->dpo_label_smoothing;
    double loss = 0, rc_sum = 0, rr_sum = 0, acc = 0;
    for (int k = 0; k < n_pairs; k++) {
        double lp[2] = {0, 0}, ref[2] = {0, 0};
        for (int j = 0; j < 2; j++) {
            int s = 2 * k + j;
            for (int t = in->seq_start[s]; t < in->seq_start[s + 1]; t++) {
                if (in->mask[t] == 0) continue;
                lp[j] += in->mask[t] * in->logprobs[t];
                ref[j] += in->mask[t] * in->ref_logprobs[t];
            }
        }
        double logits = (lp[0] - ref[0]) - (lp[1] - ref[1]);
        double l, dl_dlogits;
        if (oc->dpo_ipo) {
            double d = logits - 1.0 / (2.0 * beta);
            l = d * d;
            dl_dlogits = 2 * d;
        } else {
            double h = beta * logits;
            l = -(1 - ls) * log_sigmoid(h) - ls * log_sigmoid(-h);
            /* d/dh of -log s(h) is -(1 - s(h)) = -s(-h); of -log s(-h) is s(h). */
            dl_dlogits = beta * (-(1 - ls) * sigmoid(-h) + ls * sigmoid(h));
        }
        loss += l / n_pairs;
        double rc = beta * (lp[0] - ref[0]), rr = beta * (lp[1] - ref[1]);
        rc_sum += rc;
        rr_sum += rr;
        acc += rc > rr ? 1 : 0;
        for (int j = 0; j < 2; j++) {
            int s = 2 * k + j;
            double sign = j == 0 ? 1 : -1;
            for (int t = in->seq_start[s]; t < in->seq_start[s + 1]; t++)
                g->d_logprobs[t] = (float)(sign * dl_dlogits / n_pairs * in->mask[t]);
        }
    }
    m->policy_loss = loss;
    m->loss = loss;
    m->reward_chosen = rc_sum / n_pairs;
    m->reward_rejected = rr_sum / n_pairs;
    m->reward_margin = (rc_sum - rr_sum) / n_pairs;
    m->reward_accuracy = acc / n_pairs;
    return 0;
}

/* ---- policy gradient family: grpo, ppo, opd ---- */

/* KL estimate and its derivative wrt logp, d = logp - ref. */
static double kl_term(cpt_kl_estimator e, double d, double *dk) {
    switch (e) {
    case CPT_KL_K1: *dk = 1; return d;
    case CPT_KL_K2: *dk = d; return 0.5 * d * d;
    case CPT_KL_K3: default: {
        double r = exp(-d);
        *dk = 1 - r;
        return r - 1 + d;
    }
    }
}

static int pg_loss(const cpt_objective_config *oc, const cpt_obj_inputs *in, const cpt_obj_grads *g, double *c,
                   cpt_obj_metrics *m, cpt_err *err) {
    if (check_array(in->logprobs, in, "logprobs", 1, err)) return -1;
    if (check_array(in->advantages, in, "advantages", 1, err)) return -1;
    if (in->old_logprobs && check_array(in->old_logprobs, in, "old_logprobs", 1, err)) return -1;
    if (in->behav_logprobs && check_array(in->behav_logprobs, in, "behav_logprobs", 1, err)) return -1;
    if (oc->kl_beta > 0 && check_array(in->ref_logprobs, in, "ref_logprobs", 1, err)) return -1;
    if (oc->entropy_coef != 0 && check_array(in->entropy, in, "entropy", 1, err)) return -1;
    int gspo = oc->type == CPT_OBJ_GRPO && oc->variant == CPT_GRPO_GSPO;
    cpt_loss_agg agg = oc->loss_agg;
    if (oc->type == CPT_OBJ_GRPO && oc->variant == CPT_GRPO_DR) agg = CPT_AGG_SEQ_MEAN_TOKEN_SUM_NORM;
    if (gspo) agg = CPT_AGG_SEQ_MEAN_TOKEN_MEAN;
    agg_weights(in, agg, oc->loss_agg_norm, c);
    double lo = 1 - (gspo ? oc->gspo_eps_low : oc->clip_eps_low);
    double hi = 1 + (gspo ? oc->gspo_eps_high : oc->clip_eps_high);

    double pol = 0, kll = 0, n = 0, klsum = 0, clipped = 0, dual = 0, rsum = 0, rmax = -INFINITY, wsum = 0;
    double asum = 0, asq = 0;
    for (int s = 0; s < in->n_seqs; s++) {
        int t0 = in->seq_start[s], t1 = in->seq_start[s + 1];
        double seq_ratio = 1;
        if (gspo) {
            double lr = 0, ns = 0;
            for (int t = t0; t < t1; t++) {
                if (in->mask[t] == 0) continue;
                ns += in->mask[t];
                if (in->old_logprobs) lr += in->mask[t] * ((double)in->logprobs[t] - in->old_logprobs[t]);
            }
            seq_ratio = ns > 0 ? exp(lr / ns) : 1;
        }
        for (int t = t0; t < t1; t++) {
            if (in->mask[t] == 0) { g->d_logprobs[t] = 0; continue; }
            double mk = in->mask[t];
            double lp = in->logprobs[t];
            double old = in->old_logprobs ? in->old_logprobs[t] : lp;
            double A = in->advantages[t];
            /* ratio and d ratio / d logp (exp's own derivative; gspo: through the detached sequence ratio) */
            double r = gspo ? seq_ratio : exp(lp - old);
            double rc = r < lo ? lo : (r > hi ? hi : r);
            double pg1 = -A * r, pg2 = -A * rc;
            double l, dl_dr;
            int is_clipped = pg2 > pg1;
            if (is_clipped) {
                l = pg2;
                dl_dr = (r >= lo && r <= hi) ? -A : 0;
            } else {
                l = pg1;
                dl_dr = -A;
            }
            if (oc->dual_clip_c > 0 && A < 0) {
                double pg3 = -A * oc->dual_clip_c;
                if (pg3 < l) {
                    l = pg3;
                    dl_dr = 0;
                    dual += mk;
                }
            }
            double w = 1;
            if (oc->tis && in->behav_logprobs) {
                w = exp(old - in->behav_logprobs[t]);
                if (oc->tis_cap > 0 && w > oc->tis_cap) w = oc->tis_cap;
            }
            double dl = w * dl_dr * r; /* d ratio / d logp = r (gspo-token: s_i) */
            pol += c[t] * w * l;
            if (oc->kl_beta > 0) {
                double dk, k = kl_term(oc->kl_estimator, lp - in->ref_logprobs[t], &dk);
                kll += c[t] * oc->kl_beta * k;
                dl += oc->kl_beta * dk;
                klsum += mk * k;
            }
            g->d_logprobs[t] = (float)(c[t] * dl);
            n += mk;
            clipped += is_clipped ? mk : 0;
            rsum += mk * r;
            if (r > rmax) rmax = r;
            wsum += mk * w;
            asum += mk * A;
            asq += mk * A * A;
        }
    }
    m->policy_loss = pol;
    m->kl_loss = kll;
    m->loss = pol + kll;
    if (n > 0) {
        m->kl = klsum / n;
        m->clip_frac = clipped / n;
        m->clip_frac_dual = dual / n;
        m->ratio_mean = rsum / n;
        m->ratio_max = rmax;
        m->tis_weight_mean = wsum / n;
        m->adv_mean = asum / n;
        double var = asq / n - m->adv_mean * m->adv_mean;
        m->adv_std = var > 0 ? sqrt(var) : 0;
    }
    entropy_bonus(oc, in, c, g, m);

    if (oc->type == CPT_OBJ_PPO && g->d_values) {
        if (check_array(in->values, in, "values", 1, err)) return -1;
        if (check_array(in->returns, in, "returns", 1, err)) return -1;
        if (in->old_values && check_array(in->old_values, in, "old_values", 1, err)) return -1;
        double vl = 0, vclipped = 0;
        for (int t = 0; t < in->n_tokens; t++) {
            if (in->mask[t] == 0) continue;
            double v = in->values[t], R = in->returns[t];
            double e1 = v - R, l1 = e1 * e1, l = l1, dv = 2 * e1;
            if (oc->value_clip > 0) {
                double ov = in->old_values ? in->old_values[t] : v;
                double d = v - ov, dc = d < -oc->value_clip ? -oc->value_clip : (d > oc->value_clip ? oc->value_clip : d);
                double e2 = ov + dc - R, l2 = e2 * e2;
                if (l2 > l1) {
                    l = l2;
                    dv = (d >= -oc->value_clip && d <= oc->value_clip) ? 2 * e2 : 0;
                    vclipped += in->mask[t];
                }
            }
            vl += c[t] * 0.5 * l;
            g->d_values[t] = (float)(oc->value_coef * c[t] * 0.5 * dv);
        }
        m->value_loss = oc->value_coef * vl;
        m->loss += m->value_loss;
        m->value_clip_frac = n > 0 ? vclipped / n : 0;
    }
    return 0;
}

int cpt_objective_compute(const cpt_objective_config *oc, const cpt_obj_inputs *in, const cpt_obj_grads *g,
                          cpt_obj_metrics *m, cpt_err *err) {
    memset(m, 0, sizeof *m);
    if (!g || !g->d_logprobs) return cpt_errf(err, "objective: output d_logprobs is required");
    if (check_layout(in, err)) return -1;
    if (oc->type == CPT_OBJ_PPO && !g->d_values) return cpt_errf(err, "ppo: output d_values is required");
    zero_grads(in, g);
    base_metrics(in, m);
    if (m->n_tokens <= 0) return cpt_errf(err, "objective: no masked tokens in the batch (%d tokens)", in->n_tokens);
    double *c = malloc(sizeof(double) * (size_t)(in->n_tokens ? in->n_tokens : 1));
    if (!c) return cpt_errf(err, "objective: out of memory for %d tokens", in->n_tokens);
    int rc;
    switch (oc->type) {
    case CPT_OBJ_SFT: rc = sft_loss(oc, in, g, c, m, err); break;
    case CPT_OBJ_DPO: rc = dpo_loss(oc, in, g, m, err); break;
    case CPT_OBJ_GRPO:
    case CPT_OBJ_PPO:
    case CPT_OBJ_OPD: rc = pg_loss(oc, in, g, c, m, err); break;
    default: rc = cpt_errf(err, "objective: unknown type %d", (int)oc->type);
    }
    free(c);
    if (rc == 0 && !isfinite(m->loss)) return cpt_errf(err, "%s: loss is not finite (%g)", cpt_obj_type_name(oc->type), m->loss);
    return rc;
}

/* ---- metrics view ---- */

int cpt_obj_metrics_list(const cpt_objective_config *oc, const cpt_obj_metrics *m, const char **names,
                         double *values, int max) {
    int n = 0;
#define PUT(nm, v)                       \
    do {                                 \
        if (n < max) {                   \
            names[n] = nm;               \
            values[n] = v;               \
        }                                \
        n++;                             \
    } while (0)
    PUT("loss", m->loss);
    PUT("loss/policy", m->policy_loss);
    PUT("n_tokens", m->n_tokens);
    if (m->entropy != 0) PUT("entropy", m->entropy);
    if (oc->type == CPT_OBJ_DPO) {
        PUT("dpo/reward_chosen", m->reward_chosen);
        PUT("dpo/reward_rejected", m->reward_rejected);
        PUT("dpo/reward_margin", m->reward_margin);
        PUT("dpo/reward_accuracy", m->reward_accuracy);
    } else if (oc->type != CPT_OBJ_SFT) {
        PUT("loss/kl", m->kl_loss);
        PUT("loss/entropy", m->entropy_loss);
        PUT("kl", m->kl);
        PUT("clip_frac", m->clip_frac);
        PUT("clip_frac_dual", m->clip_frac_dual);
        PUT("ratio/mean", m->ratio_mean);
        PUT("ratio/max", m->ratio_max);
        PUT("tis_weight/mean", m->tis_weight_mean);
        PUT("adv/mean", m->adv_mean);
        PUT("adv/std", m->adv_std);
        if (oc->type == CPT_OBJ_PPO) {
            PUT("loss/value", m->value_loss);
            PUT("value_clip_frac", m->value_clip_frac);
        }
    }
#undef PUT
    return n < max ? n : max;
}
