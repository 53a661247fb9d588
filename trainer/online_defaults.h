/* Defaults of the online trainer that depend on the method or the batch (docs/online.md "Defaults").
 *
 * algo.kl_beta = -1 (its default, "the method's"): 0.001 (with algo.kl_estimator's default k3, the estimator of DeepSeekMath's GRPO and
 * verl's low_var_kl) for GRPO proper, that is algo.type = grpo, algo.variant = grpo and none of DAPO's techniques
 * (algo.dynamic_sampling, clip-higher: algo.clip_eps_high > algo.clip_eps_low, algo.overlong_buffer_len > 0); 0 for
 * everything else: Dr. GRPO, DAPO and GSPO have no KL term in their papers' objectives, PPO's critic and opd's
 * teacher are their own anchors. A value of 0 or more is kept. (A sentinel rather than "unset": `cpt run` hands
 * the trainer the resolved config, where every key is set.) With a weight above 0 the trainer loads
 * the reference model (a second copy of the initial policy) and forwards it once per step. */
#ifndef CPT_TRAINER_ONLINE_DEFAULTS_H
#define CPT_TRAINER_ONLINE_DEFAULTS_H

#include "core/config.h"

#define CPT_ONLINE_GRPO_KL_BETA 0.001
/* train.mini_batches = 0 (its default): optimizer updates a step, as verl's GRPO examples (train_batch_size 1024
 * prompts in ppo_mini_batch_size 256); a step of fewer groups takes one update per group. */
#define CPT_ONLINE_MINI_BATCHES 4

/* The KL weight the online run of cfg uses. */
double cpt_online_kl_beta(const cpt_config *cfg);

#endif
