/* Where rollout and `cpt generate` get a model from: a Hugging Face folder (config.json + safetensors) or a
 * checkpoint (a step-N folder, a run's checkpoints/ folder or a run folder: the newest good checkpoint, whose
 * model/ subfolder is an HF folder with the tokenizer files beside it). */
#ifndef CPT_ROLLOUT_MODEL_SOURCE_H
#define CPT_ROLLOUT_MODEL_SOURCE_H

#include <stddef.h>

#include "core/tokenizer.h"
#include "model/model.h"

/* Loads the model; hf_dir_out (may be NULL) gets the HF folder it was read from. */
cpt_model *cpt_rollout_load_model(const char *arg, char *hf_dir_out, size_t cap, cpt_err *err);

/* A tokenizer from path (tokenizer.json or a folder holding it). With required = 0 a missing tokenizer.json is
 * not an error: returns NULL with err->msg empty. */
cpt_tokenizer *cpt_rollout_load_tokenizer(const char *path, int required, cpt_err *err);

/* Stop ids implied by the model and tokenizer: the model's eos_token_id and the tokenizer's EOS, distinct.
 * Returns how many were written to out (capacity 2). */
int cpt_rollout_eos_ids(const cpt_model *m, const cpt_tokenizer *tok, int32_t out[2]);

#endif
