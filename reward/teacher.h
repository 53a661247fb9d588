/* Frozen models scored on token ids: the OPD teacher (per-token logprobs of a student's completion) and the
 * loader shared with the reward model.
 *
 * A completion is scored as one packed sequence prompt + completion: the logprob of completion token j is taken at
 * position n_prompt - 1 + j, i.e. log p(token j | prompt, tokens < j) under the frozen model at temperature 1. The
 * completions of a group are packed into batches of at most CPT_FROZEN_BATCH_TOKENS tokens (one sequence may be
 * longer; it then runs alone). */
#ifndef CPT_REWARD_TEACHER_H
#define CPT_REWARD_TEACHER_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "model/model.h"

#define CPT_FROZEN_BATCH_TOKENS 8192

/* path: an HF folder (config.json + safetensors) or a checkpoint (a step folder, a run's checkpoints/ folder or a
 * run folder: its newest good checkpoint's model/). */
cpt_model *cpt_frozen_model_load(const char *path, cpt_err *err);
/* The HF folder such a path names (path itself, or CHECKPOINT/model): for its tokenizer files. */
int cpt_model_dir_resolve(const char *path, char *out, size_t cap, cpt_err *err);

/* Where a frozen model runs (key: the config key that chose `device`, teacher.device or reward.model_device, named in
 * messages): "cpu" leaves it on the host; "cuda" places it on CUDA device gpu,
 * where its forwards run in bf16 with the fp32 weights kept in pinned host memory (the GPU holds the bf16 copy and
 * the placement's gradient buffer: 6 bytes a parameter); "auto" is cuda when this process sees a GPU, else cpu,
 * and a placement that fails (no memory left beside the trainer) leaves the model on the host with a warning,
 * where "cuda" fails naming the key. *where: "cuda" or "cpu", what was done. */
int cpt_frozen_model_place(cpt_model *m, const char *key, const char *device, int gpu, const char **where,
                           cpt_err *err);

/* Checks that every id is inside the model's vocabulary; the error names what (e.g. "completions[2].tokens[5]"). */
int cpt_check_ids(const cpt_model *m, const int32_t *ids, int n, const char *what, cpt_err *err);

/* out[c][0..n_tokens[c]) = teacher logprob of each token of completion c (caller-allocated arrays). */
int cpt_teacher_logprobs(cpt_model *m, const int32_t *prompt, int n_prompt, int n_completions,
                         const int32_t *const *tokens, const int *n_tokens, float *const *out, cpt_err *err);

#endif
