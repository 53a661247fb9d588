#include "trainer/online_step.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/fs.h"
#include "trainer/dp.h"
#include "trainer/online_defaults.h"
#include "trainer/online_shuffle.h"
#include "trainer/zero.h"

static int sched_from_config(const cpt_config *cfg, double lr, cpt_lr_schedule *s, cpt_err *err) {
    if (cpt_lr_kind_parse(cpt_cfg_str(cfg, "optim.schedule"), &s->kind, err)) return -1;
    s->base_lr = lr;
    s->warmup_steps = cpt_cfg_int(cfg, "optim.warmup_steps");
    s->total_steps = cpt_cfg_int(cfg, "train.steps");
    s->min_lr_ratio = cpt_cfg_float(cfg, "optim.min_lr_ratio");
    return 0;
}

/* train.epochs_per_batch, or (0, its default) its older name train.ppo_epochs; both above 1 and different is an
 * error. */
static int epochs_from_config(const cpt_config *cfg, int *epochs, cpt_err *err) {
    int64_t e = cpt_cfg_int(cfg, "train.epochs_per_batch"), p = cpt_cfg_int(cfg, "train.ppo_epochs");
    if (e > 0 && p > 1 && e != p)
        return cpt_errf(err, "train.epochs_per_batch = %" PRId64 " and train.ppo_epochs = %" PRId64
                        " disagree (train.ppo_epochs is the older name of the same key: set one)", e, p);
    *epochs = (int)(e > 0 ? e : p);
    return 0;
}

int cpt_online_learner_init(cpt_online_learner *L, const cpt_config *cfg, const cpt_objective_config *oc,
                            cpt_model *policy, cpt_model *ref, cpt_model *critic, cpt_err *err) {
    memset(L, 0, sizeof *L);
    L->oc = *oc;
    L->policy = policy;
    L->ref = ref;
    L->critic = critic;
    if (cpt_objective_needs_ref(oc) && !ref) return cpt_errf(err, "algo.kl_beta > 0 needs a reference model");
    if (oc->type == CPT_OBJ_PPO && (!critic || !cpt_model_has_value_head(critic)))
        return cpt_errf(err, "ppo needs a critic with a value head");
    L->hp = (cpt_adamw_hparams){
        .beta1 = cpt_cfg_float(cfg, "optim.beta1"),
        .beta2 = cpt_cfg_float(cfg, "optim.beta2"),
        .eps = cpt_cfg_float(cfg, "optim.eps"),
        .weight_decay = cpt_cfg_float(cfg, "optim.weight_decay"),
    };
    int whole = !cpt_cfg_int(cfg, "train.zero"); /* else the ZeRO slices, cpt_online_learner_shard */
    L->params = cpt_model_param_list(policy, &L->n_params, err);
    if (!L->params) return -1;
    if (whole && !(L->opt = cpt_adamw_new(L->params, L->n_params, &L->hp, err))) return -1;
    if (sched_from_config(cfg, cpt_cfg_float(cfg, "optim.lr"), &L->sched, err)) return -1;
    if (oc->type == CPT_OBJ_PPO) {
        L->cparams = cpt_model_param_list(critic, &L->n_cparams, err);
        if (!L->cparams) return -1;
        if (whole && !(L->copt = cpt_adamw_new(L->cparams, L->n_cparams, &L->hp, err))) return -1;
        if (sched_from_config(cfg, cpt_cfg_float(cfg, "critic.lr"), &L->csched, err)) return -1;
    }
    L->grad_clip = cpt_cfg_float(cfg, "optim.grad_clip");
    if (epochs_from_config(cfg, &L->ppo_epochs, err)) return -1;
    /* A mini-batch is whole groups: with fewer groups a step than mini-batches (an example's mini_batches under a
     * smaller groups_per_step), one group each. */
    L->mini_batches = (int)cpt_cfg_int(cfg, "train.mini_batches");
    int64_t groups = cpt_cfg_int(cfg, "train.groups_per_step");
    if (L->mini_batches == 0) /* the default: CPT_ONLINE_MINI_BATCHES, or one group each */
        L->mini_batches = groups < CPT_ONLINE_MINI_BATCHES ? (int)groups : CPT_ONLINE_MINI_BATCHES;
    if (L->mini_batches > groups) {
        cpt_warn("train.mini_batches = %d is more than train.groups_per_step = %" PRId64 ": %" PRId64
                 " mini-batches of one group", L->mini_batches, groups, groups);
        L->mini_batches = (int)groups;
    }
    L->updates_per_step = L->ppo_epochs * L->mini_batches;
    L->shuffle = cpt_cfg_bool(cfg, "train.mini_batch_shuffle");
    L->seed = (uint64_t)cpt_cfg_int(cfg, "run.seed");
    L->micro_tokens = (int)cpt_cfg_int(cfg, "train.tokens_per_micro_batch");
    return 0;
}

int cpt_online_learner_shard(cpt_online_learner *L, cpt_dp *dp, cpt_err *err) {
    if (L->opt) return cpt_errf(err, "online learner: train.zero = 0 made a whole optimizer; nothing to shard");
    if (!(L->zero = cpt_zero_new(L->policy, dp, &L->hp, err))) return cpt_err_prefix(err, "train.zero = 1, policy");
    if (L->cparams && !(L->czero = cpt_zero_new(L->critic, dp, &L->hp, err)))
        return cpt_err_prefix(err, "train.zero = 1, critic");
    return 0;
}

int64_t cpt_online_learner_updates(const cpt_online_learner *L) { return L->zero ? L->zero->step : L->opt->step; }

void cpt_online_learner_free(cpt_online_learner *L) {
    cpt_adamw_free(L->opt);
    cpt_adamw_free(L->copt);
    cpt_zero_free(L->zero);
    cpt_zero_free(L->czero);
    free(L->params);
    free(L->cparams);
    float **bufs[] = {&L->logp, &L->old_logp, &L->ref_logp, &L->ent, &L->adv, &L->task_adv, &L->values,
                      &L->old_values, &L->returns, &L->tok_rewards, &L->d_logp, &L->d_ent, &L->d_val, &L->zeros,
                      &L->seq_adv};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(*bufs[i]);
    free(L->seq_rew);
    free(L->ss);
    memset(L, 0, sizeof *L);
}

static int grow(cpt_online_learner *L, int n_tokens, int n_seqs, cpt_err *err) {
    if (n_tokens > L->cap) {
        float **bufs[] = {&L->logp, &L->old_logp, &L->ref_logp, &L->ent, &L->adv, &L->task_adv, &L->values,
                          &L->old_values, &L->returns, &L->tok_rewards, &L->d_logp, &L->d_ent, &L->d_val, &L->zeros};
        for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) {
            float *p = realloc(*bufs[i], (size_t)n_tokens * sizeof(float));
            if (!p) return cpt_errf(err, "out of memory for a batch of %d tokens", n_tokens);
            *bufs[i] = p;
        }
        memset(L->zeros, 0, (size_t)n_tokens * sizeof(float));
        L->cap = n_tokens;
    }
    if (n_seqs > L->cap_seqs) {
        float *a = realloc(L->seq_adv, (size_t)n_seqs * sizeof(float));
        if (a) L->seq_adv = a;
        double *r = realloc(L->seq_rew, (size_t)n_seqs * sizeof(double));
        if (r) L->seq_rew = r;
        int32_t *s = realloc(L->ss, (size_t)(n_seqs + 1) * sizeof(int32_t));
        if (s) L->ss = s;
        if (!a || !r || !s) return cpt_errf(err, "out of memory for %d sequences", n_seqs);
        L->cap_seqs = n_seqs;
    }
    return 0;
}

int cpt_online_advantages(const cpt_objective_config *oc, const cpt_rl_batch *b, const double *rewards,
                          const float *values, float *adv, float *returns, float *scratch_seq, float *scratch_tok,
                          cpt_err *err) {
    if (oc->type == CPT_OBJ_PPO) {
        if (!values || !returns) return cpt_errf(err, "ppo advantages need values and returns");
        /* The task reward arrives at the last generated token of each sequence. */
        memset(scratch_tok, 0, (size_t)b->n_tokens * sizeof(float));
        for (int s = 0; s < b->n_seqs; s++)
            for (int t = b->seq_start[s + 1] - 1; t >= b->seq_start[s]; t--)
                if (b->mask[t] != 0) {
                    scratch_tok[t] = (float)rewards[s]; /* |r| <= reward.max_abs, within float range */
                    break;
                }
        return cpt_gae(scratch_tok, values, b->mask, b->n_seqs, b->seq_start, oc->gamma, oc->gae_lambda,
                       oc->ppo_norm_adv, oc->adv_eps, adv, returns, err);
    }
    /* Group advantages (grpo, and opd's optional task part). */
    for (int g = 0; g < b->n_groups; g++)
        if (cpt_grpo_advantages(rewards + b->group_seq0[g], 1, b->group_size[g], oc->adv_std_norm, oc->adv_eps,
                                scratch_seq + b->group_seq0[g], err))
            return -1;
    if (oc->type == CPT_OBJ_OPD) {
        if (!b->has_teacher)
            return cpt_errf(err, "opd: a scored group has no teacher_logprobs (the reward side must run the teacher)");
        cpt_seq_to_tokens(scratch_seq, b->n_seqs, b->seq_start, b->mask, scratch_tok);
        cpt_opd_advantages(b->behav_logprobs, b->teacher_logprobs, oc->opd_task_weight > 0 ? scratch_tok : NULL,
                           oc->opd_task_weight, b->mask, b->n_tokens, adv);
        return 0;
    }
    cpt_seq_to_tokens(scratch_seq, b->n_seqs, b->seq_start, b->mask, adv);
    return 0;
}

/* Micro-batches: consecutive sequences [s0, s1), s1 <= end, with at most budget tokens (a longer sequence alone). */
static int next_micro(const cpt_rl_batch *b, int s0, int end, int budget) {
    int s1 = s0 + 1;
    while (s1 < end && b->seq_start[s1 + 1] - b->seq_start[s0] <= budget) s1++;
    return s1;
}

static cpt_batch micro(cpt_online_learner *L, const cpt_rl_batch *b, int s0, int s1) {
    int base = b->seq_start[s0];
    for (int s = s0; s <= s1; s++) L->ss[s - s0] = b->seq_start[s] - base;
    cpt_batch mb = {.n_tokens = b->seq_start[s1] - base, .n_seqs = s1 - s0, .tokens = b->tokens + base,
                    .seq_start = L->ss, .targets = b->targets + base};
    return mb;
}

void cpt_online_shard(const cpt_rl_batch *b, int rank, int world, int *s0, int *s1) {
    if (world <= 1) {
        *s0 = 0, *s1 = b->n_seqs;
        return;
    }
    /* boundary r: the sequence start nearest to r * n_tokens / world (monotonic in r, 0 and n_seqs at the ends) */
    int bound[2];
    for (int k = 0; k < 2; k++) {
        int r = rank + k;
        if (r <= 0) bound[k] = 0;
        else if (r >= world) bound[k] = b->n_seqs;
        else {
            double target = (double)r * b->n_tokens / world;
            int s = 0;
            while (s < b->n_seqs && b->seq_start[s + 1] <= target) s++;
            /* s: the first sequence ending after target; its start or its end, whichever is nearer */
            if (s < b->n_seqs && b->seq_start[s + 1] - target < target - b->seq_start[s]) s++;
            bound[k] = s;
        }
    }
    *s0 = bound[0], *s1 = bound[1];
}

int cpt_online_mini_batch(const cpt_rl_batch *b, int k, int n, int32_t *seq_start, cpt_rl_batch *v) {
    int g0 = (int)((int64_t)b->n_groups * k / n), g1 = (int)((int64_t)b->n_groups * (k + 1) / n);
    int s0 = b->group_seq0[g0], s1 = g1 < b->n_groups ? b->group_seq0[g1] : b->n_seqs;
    int t0 = b->seq_start[s0];
    *v = *b;
    v->cap_tokens = v->cap_seqs = v->cap_groups = 0; /* a view: owns nothing */
    v->n_groups = g1 - g0;
    v->n_seqs = s1 - s0;
    v->n_tokens = b->seq_start[s1] - t0;
    for (int s = s0; s <= s1; s++) seq_start[s - s0] = b->seq_start[s] - t0;
    v->seq_start = seq_start;
    v->tokens += t0;
    v->targets += t0;
    v->mask += t0;
    v->behav_logprobs += t0;
    if (v->teacher_logprobs) v->teacher_logprobs += t0;
    v->seq_reward += s0;
    v->seq_resp_len += s0;
    v->group_size += g0;
    v->group_version += g0;
    v->seq_group = v->group_seq0 = NULL; /* indices into b: not the view's */
    return t0;
}

/* The rank's part of a step: its sequences [s0, s1) and their tokens [t0, t1). */
typedef struct shard {
    int rank, world, s0, s1, t0, t1;
} shard;

static shard shard_of(const cpt_online_learner *L, const cpt_rl_batch *b) {
    shard r = {0, 1, 0, b->n_seqs, 0, b->n_tokens};
    if (L->dp) {
        r.rank = cpt_dp_rank(L->dp);
        r.world = cpt_dp_size(L->dp);
    }
    cpt_online_shard(b, r.rank, r.world, &r.s0, &r.s1);
    r.t0 = b->seq_start[r.s0];
    r.t1 = b->seq_start[r.s1];
    return r;
}

/* Every rank's range of a per-token buffer to every rank: zeros outside the own range, then a sum. */
static int gather(cpt_online_learner *L, const shard *sh, float *buf, int n_tokens, cpt_err *err) {
    if (sh->world <= 1 || !buf) return 0;
    memset(buf, 0, (size_t)sh->t0 * sizeof(float));
    memset(buf + sh->t1, 0, (size_t)(n_tokens - sh->t1) * sizeof(float));
    if (cpt_dp_sum_floats(L->dp, buf, (size_t)n_tokens, err))
        return cpt_err_prefix(err, "gathering a step's per-token values over %d ranks", sh->world);
    return 0;
}

/* Forward of m over the rank's sequences into logp / ent / values (any may be NULL), gathered to every rank; keep =
 * activations for a backward right after (only meaningful when the range is one micro-batch). */
static int forward_all(cpt_online_learner *L, cpt_model *m, const cpt_rl_batch *b, const shard *sh, float *logp,
                       float *ent, float *values, int keep, int *n_micro, cpt_err *err) {
    int k = 0;
    for (int s0 = sh->s0; s0 < sh->s1;) {
        int s1 = next_micro(b, s0, sh->s1, L->micro_tokens);
        cpt_batch mb = micro(L, b, s0, s1);
        int off = b->seq_start[s0];
        cpt_forward_out fo = {.logprobs = logp ? logp + off : NULL, .entropy = ent ? ent + off : NULL,
                              .values = values ? values + off : NULL};
        if (cpt_model_forward(m, &mb, &fo, keep, err)) return -1;
        s0 = s1;
        k++;
    }
    if (n_micro) *n_micro = k;
    if (gather(L, sh, logp, b->n_tokens, err) || gather(L, sh, ent, b->n_tokens, err) ||
        gather(L, sh, values, b->n_tokens, err))
        return -1;
    return 0;
}

/* Accumulates the gradient of m over the rank's sequences for the given per-token gradients (scaled by the world
 * size here: the ranks' gradients are then averaged); kept: the single micro-batch's activations are still there
 * from forward_all. */
static int backward_all(cpt_online_learner *L, cpt_model *m, const cpt_rl_batch *b, const shard *sh, float *d_logp,
                        float *d_ent, float *d_val, int kept, cpt_err *err) {
    cpt_model_zero_grad(m);
    if (sh->world > 1) {
        float w = (float)sh->world;
        for (int t = sh->t0; t < sh->t1; t++) {
            if (d_logp != L->zeros) d_logp[t] *= w;
            if (d_ent) d_ent[t] *= w;
            if (d_val) d_val[t] *= w;
        }
    }
    for (int s0 = sh->s0; s0 < sh->s1;) {
        int s1 = next_micro(b, s0, sh->s1, L->micro_tokens);
        cpt_batch mb = micro(L, b, s0, s1);
        int off = b->seq_start[s0];
        if (!kept) {
            cpt_forward_out fo = {0};
            if (cpt_model_forward(m, &mb, &fo, 1, err)) return -1;
        }
        if (cpt_model_backward(m, &mb, d_logp + off, d_ent ? d_ent + off : NULL, d_val ? d_val + off : NULL, err))
            return -1;
        s0 = s1;
    }
    /* ZeRO-1 reduce-scatters the gradients in its own step instead */
    const int sharded = (m == L->critic ? L->czero : L->zero) != NULL;
    if (L->dp && !sharded && cpt_dp_allreduce_model_grads(L->dp, m, err))
        return cpt_err_prefix(err, "averaging gradients over %d ranks", sh->world);
    return 0;
}

/* One optimizer update on v, the mini-batch of b whose tokens start at t0 (b itself with one mini-batch). With
 * first (one mini-batch, first epoch) this forward's logprobs (and values) are the proximal ones as well, and the
 * advantages come from them: one forward less than with mini-batches. */
static int update(cpt_online_learner *L, const cpt_rl_batch *b, const cpt_rl_batch *v, int t0, int first,
                  int64_t step, cpt_online_step_stats *st, cpt_err *err) {
    const cpt_objective_config *oc = &L->oc;
    int ppo = oc->type == CPT_OBJ_PPO;
    shard sh = shard_of(L, v);
    float *logp = L->logp + t0, *ent = L->ent + t0, *values = L->values + t0;
    int n_micro = 0;
    double t = cpt_now();
    if (forward_all(L, L->policy, v, &sh, logp, ent, NULL, 1, &n_micro, err)) return cpt_err_prefix(err, "policy forward");
    int single = n_micro == 1, csingle = 0;
    if (ppo) {
        if (forward_all(L, L->critic, v, &sh, NULL, NULL, values, 1, &n_micro, err)) return cpt_err_prefix(err, "critic forward");
        csingle = n_micro == 1;
    }
    st->n_micro = n_micro;
    st->t_logprob += cpt_now() - t; /* the logprobs are on the host: the forwards are done */
    if (first) {
        memcpy(L->old_logp, L->logp, (size_t)b->n_tokens * sizeof(float));
        if (ppo) memcpy(L->old_values, L->values, (size_t)b->n_tokens * sizeof(float));
        if (cpt_online_advantages(oc, b, L->seq_rew, ppo ? L->old_values : NULL, L->adv, L->returns, L->seq_adv,
                                  L->task_adv, err))
            return -1;
    }
    cpt_obj_inputs in = {
        .n_tokens = v->n_tokens,
        .n_seqs = v->n_seqs,
        .seq_start = v->seq_start,
        .mask = v->mask,
        .logprobs = logp,
        .old_logprobs = L->old_logp + t0,
        .behav_logprobs = oc->tis ? v->behav_logprobs : NULL,
        .ref_logprobs = oc->kl_beta > 0 ? L->ref_logp + t0 : NULL,
        .entropy = ent,
        .advantages = L->adv + t0,
        .values = ppo ? values : NULL,
        .old_values = ppo ? L->old_values + t0 : NULL,
        .returns = ppo ? L->returns + t0 : NULL,
    };
    cpt_obj_grads g = {.d_logprobs = L->d_logp + t0, .d_entropy = L->d_ent + t0, .d_values = ppo ? L->d_val + t0 : NULL};
    if (cpt_objective_compute(oc, &in, &g, &st->m, err)) return cpt_err_prefix(err, "step %" PRId64, step);
    /* The critic first: the policy's kept activations would not survive a forward of the same model, and the
     * critic is another model, so its order does not matter for correctness; it keeps both single-pass. */
    if (ppo) {
        t = cpt_now();
        if (backward_all(L, L->critic, v, &sh, L->zeros, NULL, g.d_values, csingle, err))
            return cpt_err_prefix(err, "critic backward");
        if (!L->czero) /* the norm is on the host */
            st->critic_grad_norm = cpt_clip_grad_norm(L->cparams, L->n_cparams, L->grad_clip);
        st->t_backward += cpt_now() - t;
        t = cpt_now();
        st->critic_lr = cpt_lr_at(&L->csched, step);
        if (L->czero) {
            if (cpt_zero_step(L->czero, st->critic_lr, L->grad_clip, &st->critic_grad_norm, err))
                return cpt_err_prefix(err, "critic optimizer");
        } else {
            cpt_adamw_step(L->copt, st->critic_lr);
        }
        if (cpt_model_wait(L->critic, err)) return cpt_err_prefix(err, "critic optimizer");
        st->t_optimizer += cpt_now() - t;
    }
    t = cpt_now();
    if (backward_all(L, L->policy, v, &sh, g.d_logprobs, oc->entropy_coef != 0 ? g.d_entropy : NULL, NULL, single, err))
        return cpt_err_prefix(err, "policy backward");
    if (!L->zero) st->grad_norm = cpt_clip_grad_norm(L->params, L->n_params, L->grad_clip);
    st->t_backward += cpt_now() - t;
    if (!L->zero && !isfinite(st->grad_norm))
        return cpt_errf(err, "step %" PRId64 ": the gradient norm is not finite; lower optim.lr?", step);
    t = cpt_now();
    st->lr = cpt_lr_at(&L->sched, step);
    if (L->zero) {
        /* the norm comes from the reduce-scattered slices: a non-finite one fails the run after the update */
        if (cpt_zero_step(L->zero, st->lr, L->grad_clip, &st->grad_norm, err))
            return cpt_err_prefix(err, "policy optimizer");
        if (!isfinite(st->grad_norm))
            return cpt_errf(err, "step %" PRId64 ": the gradient norm is not finite; lower optim.lr?", step);
    } else {
        cpt_adamw_step(L->opt, st->lr);
    }
    if (cpt_model_wait(L->policy, err)) return cpt_err_prefix(err, "policy optimizer");
    st->t_optimizer += cpt_now() - t;
    return 0;
}

/* The per-token arrays the updates read, in b's order (the proximal logprobs, advantages, reference logprobs,
 * returns and old values): permuted into the shuffled batch's order, or back (inverse). */
static int permute_step_arrays(cpt_online_learner *L, const cpt_rl_batch *b, const cpt_rl_batch *pb,
                               const uint64_t *order, int inverse, cpt_err *err) {
    int ppo = L->oc.type == CPT_OBJ_PPO;
    float *arrays[5] = {L->old_logp, L->adv, L->ref && L->oc.kl_beta > 0 ? L->ref_logp : NULL,
                        ppo ? L->returns : NULL, ppo ? L->old_values : NULL};
    float *tmp = malloc((size_t)b->n_tokens * sizeof *tmp);
    if (!tmp) return cpt_errf(err, "out of memory shuffling %d tokens", b->n_tokens);
    for (int i = 0; i < 5; i++) {
        if (!arrays[i]) continue;
        cpt_online_permute_tokens(b, pb, order, arrays[i], tmp, inverse);
        memcpy(arrays[i], tmp, (size_t)b->n_tokens * sizeof *tmp);
    }
    free(tmp);
    return 0;
}

int cpt_online_learner_step(cpt_online_learner *L, const cpt_rl_batch *b, int64_t step, cpt_online_step_stats *st,
                            cpt_err *err) {
    memset(st, 0, sizeof *st);
    const cpt_objective_config *oc = &L->oc;
    if (b->n_seqs == 0) return cpt_errf(err, "online step: empty batch");
    if (!L->opt && !L->zero) return cpt_errf(err, "online step: train.zero = 1 but the optimizer was not sharded");
    if (grow(L, b->n_tokens, b->n_seqs, err)) return -1;
    int ppo = oc->type == CPT_OBJ_PPO;

    /* Rewards (with the overlong penalty) and their stats. */
    double rs = 0, rq = 0, len = 0;
    for (int s = 0; s < b->n_seqs; s++) {
        double r = b->seq_reward[s];
        if (oc->overlong_buffer_len > 0)
            r += cpt_overlong_penalty(b->seq_resp_len[s], oc->overlong_max_len, oc->overlong_buffer_len,
                                      oc->overlong_penalty_factor);
        L->seq_rew[s] = r;
        rs += b->seq_reward[s];
        rq += b->seq_reward[s] * b->seq_reward[s];
        /* the model's tokens: a tool's observation tokens (mask 0) are not generated ones */
        for (int t = b->seq_start[s]; t < b->seq_start[s + 1]; t++) len += b->mask[t] != 0;
    }
    st->reward_mean = rs / b->n_seqs;
    double var = rq / b->n_seqs - st->reward_mean * st->reward_mean;
    st->reward_std = var > 0 ? sqrt(var) : 0;
    st->resp_len_mean = len / b->n_seqs;
    st->tokens = b->n_tokens;
    for (int t = 0; t < b->n_tokens; t++) st->loss_tokens += b->mask[t] != 0;
    if (st->loss_tokens == 0) return cpt_errf(err, "online step: no completion tokens in the batch");

    shard sh = shard_of(L, b);
    st->shard_tokens = sh.t1 - sh.t0;
    double t = cpt_now();
    if (L->ref && oc->kl_beta > 0 && forward_all(L, L->ref, b, &sh, L->ref_logp, NULL, NULL, 0, NULL, err))
        return cpt_err_prefix(err, "reference forward");

    int mbs = L->mini_batches;
    if (b->n_groups < mbs)
        return cpt_errf(err, "step %" PRId64 ": %d groups cannot make train.mini_batches = %d mini-batches", step,
                        b->n_groups, mbs);
    if (mbs > 1) {
        /* The proximal policy is the weights before the step's first update: one pass over the whole batch, since
         * every mini-batch after the first sees weights already moved. */
        if (forward_all(L, L->policy, b, &sh, L->old_logp, NULL, NULL, 0, NULL, err))
            return cpt_err_prefix(err, "policy forward (proximal logprobs)");
        if (ppo && forward_all(L, L->critic, b, &sh, NULL, NULL, L->old_values, 0, NULL, err))
            return cpt_err_prefix(err, "critic forward (old values)");
        if (cpt_online_advantages(oc, b, L->seq_rew, ppo ? L->old_values : NULL, L->adv, L->returns, L->seq_adv,
                                  L->task_adv, err))
            return -1;
    }
    st->t_logprob = cpt_now() - t;
    int32_t *mb_ss = NULL;
    if (mbs > 1 && !(mb_ss = malloc((size_t)(b->n_seqs + 1) * sizeof *mb_ss)))
        return cpt_errf(err, "out of memory for %d sequences", b->n_seqs);
    /* train.mini_batch_shuffle: the updates take b's sequences in a random order, split by sequences */
    const cpt_rl_batch *ub = b;
    cpt_rl_batch pb;
    uint64_t *order = NULL;
    memset(&pb, 0, sizeof pb);
    int rc = 0;
    if (mbs > 1 && L->shuffle) {
        if (!(order = malloc((size_t)b->n_seqs * sizeof *order))) rc = cpt_errf(err, "out of memory");
        if (!rc) {
            cpt_online_shuffle_order(L->seed, step, b->n_seqs, order);
            rc = cpt_online_batch_permuted(b, order, &pb, err);
        }
        if (!rc && !(rc = permute_step_arrays(L, b, &pb, order, 0, err))) ub = &pb;
    }
    for (int epoch = 0; epoch < L->ppo_epochs && !rc; epoch++)
        for (int k = 0; k < mbs && !rc; k++) {
            cpt_rl_batch v = *ub;
            int t0 = 0;
            if (mbs > 1) t0 = cpt_online_mini_batch(ub, k, mbs, mb_ss, &v);
            rc = update(L, ub, &v, t0, epoch == 0 && mbs == 1, step, st, err);
        }
    /* b's order again: the trainer measures train-inference agreement on the proximal logprobs after the step */
    if (ub == &pb && permute_step_arrays(L, b, &pb, order, 1, rc ? NULL : err)) rc = -1;
    cpt_rl_batch_free(&pb);
    free(order);
    free(mb_ss);
    if (!rc) st->optimizer_steps = cpt_online_learner_updates(L);
    return rc;
}
