/* One optimizer step of the online trainer on a batch of scored groups (trainer/rl_data.h): advantages (group
 * normalised for grpo, reverse KL to the teacher for opd, GAE over the critic's values for ppo), the objective
 * (trainer/objective.h), backward, gradient clip and AdamW, for the policy and (ppo) the critic.
 *
 * The objective is computed once over the whole batch, so every aggregation (token mean, sequence mean, batch
 * whitening) is the batch's. When the batch exceeds the micro-batch token budget, the forward runs micro-batch by
 * micro-batch to get the logprobs, and then each micro-batch runs forward again with activations kept and backward
 * with its slice of d(loss)/d(logprob): the gradient is exactly the whole batch's.
 *
 * Ranks (trainer/dp.h, L->dp with more than one rank): every rank holds the whole batch and forwards only its
 * contiguous range of sequences (cpt_online_shard: balanced by tokens), for the policy, the reference and the critic
 * alike. The per-token logprobs / entropy / values are gathered to every rank (each writes its range into a
 * zero-filled full-length buffer, then one in-place sum), so every rank computes the same objective over the whole
 * batch. The backward then runs over the rank's range only, with its slice of d(loss)/d(logprob) scaled by the
 * world size, and the gradients are averaged over the ranks before clipping and AdamW: the update is the whole
 * batch's, identical on every rank.
 *
 * Mini-batches (train.mini_batches = M): the batch's groups are split into M runs of whole groups, one optimizer
 * update each, train.epochs_per_batch times over. The objective and its aggregation are then each mini-batch's; the
 * advantages are still the whole batch's (computed once).
 *
 * Proximal policy: the logprobs (detached) of the weights before the step's first update are logp_old. With one
 * mini-batch and one epoch the ratio is 1 and only the rollout's behaviour logprobs (truncated importance weights,
 * algo.tis) correct for staleness; every later update is clipped against them. With one mini-batch the first
 * update's forward gives them; with several, one more forward over the whole batch does, before the first. */
#ifndef CPT_TRAINER_ONLINE_STEP_H
#define CPT_TRAINER_ONLINE_STEP_H

#include <stdint.h>

#include "core/config.h"
#include "core/error.h"
#include "model/model.h"
#include "trainer/objective.h"
#include "trainer/optim.h"
#include "trainer/rl_data.h"

typedef struct cpt_online_learner {
    cpt_objective_config oc;
    cpt_model *policy; /* not owned */
    cpt_param **params;
    size_t n_params;
    cpt_adamw *opt;         /* NULL with train.zero = 1 (zero below) */
    cpt_adamw_hparams hp;   /* optim.* */
    cpt_lr_schedule sched;
    cpt_model *ref;    /* not owned; kl_beta > 0 */
    cpt_model *critic; /* not owned; ppo */
    cpt_param **cparams;
    size_t n_cparams;
    cpt_adamw *copt;
    cpt_lr_schedule csched;
    double grad_clip;
    int ppo_epochs;      /* passes over each batch (train.epochs_per_batch) */
    int mini_batches;    /* optimizer updates per pass (train.mini_batches) */
    int updates_per_step; /* ppo_epochs x mini_batches: the optimizer's steps per trainer step */
    int shuffle;          /* train.mini_batch_shuffle: mini-batches of completions across the step (online_shuffle.h) */
    uint64_t seed;        /* run.seed: the shuffle's order */
    int micro_tokens;
    struct cpt_dp *dp; /* not owned; NULL or one rank: the whole batch here */
    /* train.zero = 1 (cpt_online_learner_shard): the optimizers are ZeRO-1 slices over dp's ranks (trainer/zero.h)
     * and opt / copt are NULL; each update reduce-scatters the gradients instead of all-reducing them */
    struct cpt_zero *zero, *czero;
    /* scratch, grown to the batch; after a step, old_logp holds the proximal logprobs of the whole batch (every
     * rank's range, gathered), which trainer/online_agree.h compares with the rollout's */
    int cap;
    float *logp, *old_logp, *ref_logp, *ent, *adv, *task_adv, *values, *old_values, *returns, *tok_rewards;
    float *d_logp, *d_ent, *d_val, *zeros;
    int32_t *ss;           /* local seq_start of a micro-batch */
    int cap_seqs;
    float *seq_adv;
    double *seq_rew; /* rewards stay double until the advantages normalise them */
} cpt_online_learner;

/* Sets up optimizers and schedules from cfg (optim.*, critic.lr, train.*) for the given models; ref and critic may
 * be NULL when the objective does not need them (-1 with an error when it does). */
int cpt_online_learner_init(cpt_online_learner *L, const cpt_config *cfg, const cpt_objective_config *oc,
                            cpt_model *policy, cpt_model *ref, cpt_model *critic, cpt_err *err);
void cpt_online_learner_free(cpt_online_learner *L);
/* train.zero = 1: the policy's (and the critic's) optimizer as ZeRO-1 slices over dp's ranks (cpt_online_learner_init
 * makes no whole AdamW then: its moments would take the memory ZeRO saves). Before any step, with the models in
 * place (on their device); every rank. */
int cpt_online_learner_shard(cpt_online_learner *L, struct cpt_dp *dp, cpt_err *err);
/* The policy optimizer's updates so far, whichever optimizer holds them. */
int64_t cpt_online_learner_updates(const cpt_online_learner *L);

typedef struct cpt_online_step_stats {
    cpt_obj_metrics m;  /* of the step's last update */
    double grad_norm, critic_grad_norm, lr, critic_lr;
    double reward_mean, reward_std, resp_len_mean;
    long tokens, loss_tokens; /* the whole batch's */
    long shard_tokens;        /* the tokens this rank forwarded (its shard; the batch's with one rank) */
    int n_micro;
    /* where time/train goes, seconds summed over the step's updates (every model: policy, reference, critic):
     * forwards that only give logprobs or values (the training pass itself when the batch is one micro-batch),
     * backward (its recomputing forwards included) with the gradient clip, and AdamW waited for (the GPU runs it
     * asynchronously) */
    double t_logprob, t_backward, t_optimizer;
    int64_t optimizer_steps; /* the policy optimizer's updates so far (updates_per_step per trainer step) */
} cpt_online_step_stats;

/* One step (train.epochs_per_batch passes of train.mini_batches optimizer updates) on b; `step` is the 0-based optimizer step for the LR schedule.
 * Rewards get the overlong penalty here when algo.overlong_buffer_len > 0. */
int cpt_online_learner_step(cpt_online_learner *L, const cpt_rl_batch *b, int64_t step, cpt_online_step_stats *st,
                            cpt_err *err);

/* Mini-batch k of n of b: groups [n_groups * k / n, n_groups * (k + 1) / n), as a view *v into b's arrays (its
 * seq_start written to seq_start[n_seqs + 1], rebased to 0; seq_group and group_seq0 NULL). Returns the view's
 * first token in b. Needs n <= b->n_groups. */
int cpt_online_mini_batch(const cpt_rl_batch *b, int k, int n, int32_t *seq_start, cpt_rl_batch *v);

/* The contiguous sequences [*s0, *s1) of rank `rank` of `world`: boundaries at the sequence starts nearest to
 * rank * n_tokens / world, so every rank forwards about the same number of tokens (a rank may get none when there
 * are fewer sequences than ranks). */
void cpt_online_shard(const cpt_rl_batch *b, int rank, int world, int *s0, int *s1);

/* Advantages of b per token into adv (task rewards and teacher as the objective type asks); values needed for ppo
 * (returns filled then). Exposed for tests. */
int cpt_online_advantages(const cpt_objective_config *oc, const cpt_rl_batch *b, const double *rewards,
                          const float *values, float *adv, float *returns, float *scratch_seq, float *scratch_tok,
                          cpt_err *err);

#endif
