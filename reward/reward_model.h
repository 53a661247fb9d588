/* The reward model: a transformer with a scalar value head ("score.weight", model/model.h) whose value at the
 * last token of prompt + completion is the score (as Hugging Face's sequence-classification reward models with one
 * label, on unpadded input).
 *
 * Selected by reward.model_path (an HF folder or a checkpoint, reward/teacher.h's loader); the tokenizer is the
 * model folder's own when it has a tokenizer.json, else tokenizer.path. As a cpt_reward provider it scores text: prompt and completion are
 * encoded separately and concatenated, so the worker passes the prompt text exactly as rendered (special tokens
 * kept). The result has one part, "model". */
#ifndef CPT_REWARD_REWARD_MODEL_H
#define CPT_REWARD_REWARD_MODEL_H

#include <stdint.h>

#include "core/error.h"
#include "core/tokenizer.h"
#include "model/model.h"
#include "reward/reward.h"

/* scores[c] = value at the last token of prompt + completion c (a completion may be empty: then the prompt's
 * last token). The model must have a value head. */
int cpt_reward_model_score_ids(cpt_model *m, const int32_t *prompt, int n_prompt, int n_completions,
                               const int32_t *const *tokens, const int *n_tokens, double *scores, cpt_err *err);

/* A provider named "model" owning m and tok (both freed with it, even when this fails). */
cpt_reward *cpt_reward_model_new(cpt_model *m, cpt_tokenizer *tok, cpt_err *err);

/* Loads model_path (must hold score.weight) and the tokenizer (tokenizer_path, or model_path when empty), the model
 * on the CPU. */
cpt_reward *cpt_reward_model_load(const char *model_path, const char *tokenizer_path, cpt_err *err);
/* The same with the model where device says (auto, cpu, cuda: reward/teacher.h's cpt_frozen_model_place, under
 * the key reward.model_device), on CUDA device gpu. */
cpt_reward *cpt_reward_model_load_on(const char *model_path, const char *tokenizer_path, const char *device, int gpu,
                                     cpt_err *err);

/* The worker's reward from config: reward.model_path unset -> cpt_reward_from_config; set with reward.model_only
 * -> the reward model alone; else the combination rule (weight 1) + model (reward.model_weight). The reward model
 * runs where reward.model_device says (on train.cuda_device). */
cpt_reward *cpt_reward_with_model_from_config(const cpt_config *cfg, cpt_err *err);

#endif
