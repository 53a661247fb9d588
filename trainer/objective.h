/* Training objectives on per-token logprobs: sft, dpo (and ipo), grpo (dr_grpo, gspo, dapo knobs), ppo, opd.
 *
 * The model meets every objective at per-token logprobs (model/model.h): its forward gives log p(target) of each
 * token (and the entropy, and value-head values), its backward takes d(loss)/d(logprob) (and d/d(entropy),
 * d/d(values)). So an objective is a pure function of per-token arrays: inputs -> loss, gradients, metrics. It
 * holds no state and allocates nothing that outlives a call; all arithmetic is in double.
 *
 * Layout: a batch of n_seqs packed sequences, sequence s owning tokens [seq_start[s], seq_start[s+1]). mask[t] is 1
 * for the tokens the loss counts (completion tokens with a target) and 0 elsewhere (prompt, padding). For dpo the
 * sequences come in pairs: 2k is chosen, 2k+1 rejected.
 *
 * Conventions fixed here (docs/algorithms.md explains each; tests/fixtures/make_objective_fixture.py is the PyTorch
 * reference that tests/unit/test_objective.c checks against at relative error 1e-5):
 * - group std is torch's default: unbiased (divides by G - 1); a group of one has std 0 and advantage 0.
 * - ratio = exp(logp - logp_old) per token; logp_old NULL means on-policy (ratio 1, gradient still flows).
 * - per-token policy loss = max(-A r, -A clip(r, 1 - eps_low, 1 + eps_high)); with dual clip c > 1 and A < 0 it
 *   is min(that, -A c).
 * - off-policy correction (tis): each token's loss is scaled by w = min(exp(logp_old - logp_behav), cap), a
 *   constant (decoupled PPO: logp_old is the proximal policy, logp_behav the rollout's behaviour policy).
 * - kl (added to each token's loss times beta), with d = logp - logp_ref: k1 = d, k2 = d^2 / 2, k3 = exp(-d) - 1 + d.
 * - loss_agg: token-mean = sum(l m) / sum(m); seq-mean-token-mean = mean over sequences of sum_t(l m) / sum_t(m);
 *   seq-mean-token-sum = mean over sequences of sum_t(l m); seq-mean-token-sum-norm = sum(l m) / (S * norm), norm a
 *   constant (the max response length), S the number of sequences. Sequences without a masked token are skipped.
 * - dr_grpo: advantages without std division and loss_agg forced to seq-mean-token-sum-norm.
 * - gspo: ratio of every token of sequence i is s_i = exp(mean over its masked tokens of (logp - logp_old)),
 *   clipped with gspo_eps_low/high; the gradient reaches each token through s_i (GSPO-token form: token t gets
 *   d/dlogp_t = d(loss_t)/d(s_i) * s_i); loss_agg forced to seq-mean-token-mean, which makes it the paper's
 *   sequence objective when the advantage is constant over a sequence. */
#ifndef CPT_TRAINER_OBJECTIVE_H
#define CPT_TRAINER_OBJECTIVE_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"

typedef struct cpt_config cpt_config;

typedef enum { CPT_OBJ_SFT = 0, CPT_OBJ_DPO, CPT_OBJ_GRPO, CPT_OBJ_PPO, CPT_OBJ_OPD } cpt_obj_type;
typedef enum { CPT_GRPO_PLAIN = 0, CPT_GRPO_DR, CPT_GRPO_GSPO } cpt_grpo_variant;
typedef enum { CPT_KL_K1 = 0, CPT_KL_K2, CPT_KL_K3 } cpt_kl_estimator;
typedef enum {
    CPT_AGG_TOKEN_MEAN = 0,
    CPT_AGG_SEQ_MEAN_TOKEN_MEAN,
    CPT_AGG_SEQ_MEAN_TOKEN_SUM,
    CPT_AGG_SEQ_MEAN_TOKEN_SUM_NORM
} cpt_loss_agg;

typedef struct cpt_objective_config {
    cpt_obj_type type;
    /* dpo */
    double dpo_beta;
    double dpo_label_smoothing; /* conservative DPO: -(1-ls) log s(h) - ls log s(-h) */
    int dpo_ipo;                /* ipo: (margin - 1/(2 beta))^2, margin without beta */
    /* policy-gradient family (grpo, ppo, opd) */
    cpt_grpo_variant variant;
    double clip_eps_low, clip_eps_high;
    double dual_clip_c;         /* 0: off; else > 1 */
    double gspo_eps_low, gspo_eps_high;
    double kl_beta;             /* 0: no kl term, no reference needed */
    cpt_kl_estimator kl_estimator;
    cpt_loss_agg loss_agg;
    double loss_agg_norm;       /* constant normaliser of seq-mean-token-sum-norm (max response length) */
    double entropy_coef;        /* loss -= coef * entropy (needs entropy; gives d_entropy) */
    int tis;                    /* scale by min(exp(logp_old - logp_behav), tis_cap) when behaviour logprobs given */
    double tis_cap;             /* 0: no truncation */
    /* advantages (helpers below) */
    int adv_std_norm;           /* grpo: divide by group std (dr_grpo: off) */
    double adv_eps;
    /* ppo */
    double gamma, gae_lambda;
    double value_clip;          /* 0: unclipped value loss */
    double value_coef;
    int ppo_norm_adv;           /* whiten advantages over the batch */
    /* opd */
    double opd_task_weight;     /* advantage = -(logp_student - logp_teacher) + weight * task advantage */
    /* dapo */
    int dynamic_sampling;       /* drop groups whose rewards all tie */
    int overlong_max_len, overlong_buffer_len; /* soft overlong punishment; buffer 0: off */
    double overlong_penalty_factor;
} cpt_objective_config;

/* Defaults of every knob (the values of trainer/objective_keys.def) for an objective type. */
void cpt_objective_defaults(cpt_objective_config *oc, cpt_obj_type type);
/* Reads algo.* keys; checks combinations (e.g. dual_clip_c must be > 1, gspo needs no ppo knobs). */
int cpt_objective_from_config(const cpt_config *cfg, cpt_objective_config *oc, cpt_err *err);
/* Parses names used in config ("grpo", "token-mean", "k3", ...); -1 with an error listing the choices. */
int cpt_obj_type_parse(const char *s, cpt_obj_type *out, cpt_err *err);
int cpt_loss_agg_parse(const char *s, cpt_loss_agg *out, cpt_err *err);
int cpt_kl_estimator_parse(const char *s, cpt_kl_estimator *out, cpt_err *err);
int cpt_grpo_variant_parse(const char *s, cpt_grpo_variant *out, cpt_err *err);
const char *cpt_obj_type_name(cpt_obj_type t);
const char *cpt_loss_agg_name(cpt_loss_agg a);

/* Does this objective need reference logprobs (dpo always; others when kl_beta > 0)? Lets the trainer skip loading
 * a reference model. */
int cpt_objective_needs_ref(const cpt_objective_config *oc);

/* Inputs; arrays are [n_tokens] unless noted. NULL = not given. */
typedef struct cpt_obj_inputs {
    int n_tokens, n_seqs;
    const int32_t *seq_start;       /* [n_seqs + 1] */
    const float *mask;              /* 1: counted by the loss */
    const float *logprobs;          /* current policy (the model forward) */
    const float *old_logprobs;      /* proximal policy; NULL: on-policy */
    const float *behav_logprobs;    /* rollout behaviour policy, for tis; NULL: same as old */
    const float *ref_logprobs;      /* reference (dpo; kl_beta > 0) */
    const float *entropy;           /* metric, and the entropy bonus when entropy_coef != 0 */
    const float *advantages;        /* grpo / ppo / opd (see helpers) */
    const float *values;            /* ppo: critic values (current) */
    const float *old_values;        /* ppo: values at rollout time, for the value clip; NULL: values */
    const float *returns;           /* ppo: GAE returns */
} cpt_obj_inputs;

/* Outputs, caller-owned, overwritten (not accumulated). d_logprobs is required; d_entropy is written when non-NULL
 * (zeros when entropy_coef is 0); d_values (ppo) when non-NULL. */
typedef struct cpt_obj_grads {
    float *d_logprobs;
    float *d_entropy;
    float *d_values;
} cpt_obj_grads;

/* Metrics of one call. Fields that do not apply stay 0; docs/algorithms.md lists them by objective. */
typedef struct cpt_obj_metrics {
    double loss;             /* total */
    double policy_loss;      /* pg part (sft: ce; dpo: dpo/ipo loss) */
    double kl_loss;          /* beta * aggregated kl */
    double entropy_loss;     /* -coef * aggregated entropy */
    double value_loss;       /* value_coef * aggregated value loss */
    double kl;               /* token-mean kl estimate (to reference; opd: to teacher via the advantage) */
    double entropy;          /* token-mean entropy when given */
    double clip_frac;        /* share of tokens where the clipped branch is taken */
    double clip_frac_dual;   /* share where the dual clip is taken */
    double value_clip_frac;
    double ratio_mean, ratio_max;
    double tis_weight_mean;  /* mean importance weight (1 when off) */
    double adv_mean, adv_std; /* over masked tokens, population std */
    double n_tokens;         /* masked tokens */
    /* dpo */
    double reward_chosen, reward_rejected, reward_margin, reward_accuracy;
} cpt_obj_metrics;

/* A (name, value) view for logging: fills up to max entries of the metrics that apply to oc's type; returns the count.
 * Names follow docs/algorithms.md "Metrics" (loss/policy, kl, clip_frac, ...). */
int cpt_obj_metrics_list(const cpt_objective_config *oc, const cpt_obj_metrics *m, const char **names,
                         double *values, int max);

/* The loss and gradients of one batch. Errors (missing inputs for the objective, bad seq_start, non-finite
 * inputs, dpo with an odd sequence count) name the field. */
int cpt_objective_compute(const cpt_objective_config *oc, const cpt_obj_inputs *in, const cpt_obj_grads *g,
                          cpt_obj_metrics *m, cpt_err *err);

/* ---- advantage and reward helpers ---- */

/* GRPO group advantages: rewards [n_groups * group_size], groups contiguous. adv = (r - mean) / (std + eps) with
 * std unbiased (torch default), or r - mean when std_norm is 0 (dr_grpo). */
int cpt_grpo_advantages(const double *rewards, int n_groups, int group_size, int std_norm, double eps, float *adv,
                        cpt_err *err);

/* Dynamic sampling (DAPO): keep[g] = 0 for groups whose rewards all tie exactly; returns the number dropped. */
int cpt_dynamic_sampling_filter(const double *rewards, int n_groups, int group_size, uint8_t *keep);

/* DAPO soft overlong punishment for a response of len tokens: 0 up to max_len - buffer_len, then linear down to
 * -factor at max_len, -factor beyond. buffer_len 0: always 0. */
double cpt_overlong_penalty(int len, int max_len, int buffer_len, double factor);

/* Copies a per-sequence value to each masked token of that sequence (0 elsewhere). */
void cpt_seq_to_tokens(const float *per_seq, int n_seqs, const int32_t *seq_start, const float *mask, float *out);

/* PPO GAE over the masked tokens of each sequence (they are the steps; unmasked positions get 0): delta_t =
 * r_t + gamma V_next - V_t with V after the last step 0, adv_t = delta_t + gamma lambda adv_next; returns = adv + V.
 * Then, when whiten, advantages become (adv - mean) / (std + eps) over all masked tokens (unbiased std). */
int cpt_gae(const float *token_rewards, const float *values, const float *mask, int n_seqs, const int32_t *seq_start,
            double gamma, double lambda, int whiten, double eps, float *adv, float *returns, cpt_err *err);

/* OPD advantages: adv_t = -(logp_student_t - logp_teacher_t) + task_weight * task_adv_t (task_adv may be NULL),
 * 0 where mask is 0. logp_student are the sampling (old) logprobs: a constant signal. */
void cpt_opd_advantages(const float *logp_student, const float *logp_teacher, const float *task_adv,
                        double task_weight, const float *mask, int n_tokens, float *adv);

#endif
