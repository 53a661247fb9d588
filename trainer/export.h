/* `cpt export CHECKPOINT OUT_DIR`: a checkpoint as a Hugging Face folder (config.json, model.safetensors, tokenizer
 * files) that transformers loads with AutoModelForCausalLM / AutoTokenizer. */
#ifndef CPT_TRAINER_EXPORT_H
#define CPT_TRAINER_EXPORT_H

#include <stdint.h>

#include "core/error.h"

/* checkpoint: a step folder, a run's checkpoints/ folder or a run folder (its newest good checkpoint). The
 * checkpoint's manifest is verified and the model loaded (so a broken one is refused before anything is written).
 * out_dir must not exist or be empty; the folder is built as OUT_DIR.tmp-PID and renamed into place, so a failed
 * export leaves nothing behind. bf16: write BF16 weights instead of F32. Weights past max_shard_bytes are cut into
 * model-0000K-of-0000N.safetensors shards with model.safetensors.index.json, as save_pretrained does; 0: one file. */
int cpt_export_hf(const char *checkpoint, const char *out_dir, int bf16, uint64_t max_shard_bytes, cpt_err *err);
/* The default of max_shard_size, as transformers' save_pretrained has it. */
#define CPT_EXPORT_MAX_SHARD_DEFAULT "5GB"

#endif
