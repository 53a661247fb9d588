/* `cpt export CHECKPOINT OUT_DIR`: a checkpoint as a Hugging Face folder (config.json, model.safetensors, tokenizer
 * files) that transformers loads with AutoModelForCausalLM / AutoTokenizer. */
#ifndef CPT_TRAINER_EXPORT_H
#define CPT_TRAINER_EXPORT_H

#include "core/error.h"

/* checkpoint: a step folder, a run's checkpoints/ folder or a run folder (its newest good checkpoint). The
 * checkpoint's manifest is verified and the model loaded (so a broken one is refused before anything is written).
 * out_dir must not exist or be empty; the folder is built as OUT_DIR.tmp-PID and renamed into place, so a failed
 * export leaves nothing behind. bf16: write BF16 weights instead of F32. */
int cpt_export_hf(const char *checkpoint, const char *out_dir, int bf16, cpt_err *err);

#endif
