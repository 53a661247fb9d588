/* Checkpoints: RUN_DIR/checkpoints/step-N/, written so that a crash at any moment leaves either the previous
 * checkpoint or the new one, never something half-written that resume would pick.
 *
 *   step-N/model/config.json, model.safetensors (fp32; past max_shard_bytes model-0000K-of-0000N.safetensors +
 *                model.safetensors.index.json) + tokenizer files: an HF folder (model.path may name it)
 *   step-N/optimizer.safetensors   AdamW moments and step (see trainer/optim.h)
 *   step-N/optimizer-rank-R-of-W.safetensors  instead, with train.zero = 1: each rank's slice (trainer/zero.h)
 *   step-N/trainer_state.json      step, weight version, data cursor, outstanding group ids, RNG states, config hash
 *   step-N/config.toml             the resolved config of the run (for reading, not checked)
 *   step-N/manifest.json           every other file -> bytes and XXH64 (core/checksum.h); written last
 *
 * Saving writes everything into step-N.tmp-PID/, fsyncs each file and the folder, renames it to step-N/, fsyncs
 * checkpoints/, then replaces checkpoints/latest (a one-line file naming "step-N") atomically, and finally removes
 * all but the newest keep_last step folders. Loading verifies the manifest (sizes and checksums of every file); a
 * corrupt or partial checkpoint is refused with an error naming the file, and the next older good one is used.
 * Reading the folders (verify, find the newest, resolve an argument) is weights/checkpoint_dir.h. */
#ifndef CPT_TRAINER_CHECKPOINT_H
#define CPT_TRAINER_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "core/config.h"
#include "core/error.h"
#include "core/rng.h"
#include "model/model.h"
#include "queue/schema.h"
#include "trainer/optim.h"
#include "weights/checkpoint_dir.h" /* verify, find, resolve: the folder format */

#define CPT_CKPT_MAX_RNGS 8
#define CPT_CKPT_MAX_TOTALS 16

/* Group ids are the queue's: (epoch, index), see queue/schema.h. */

typedef struct cpt_train_state {
    int64_t step;           /* optimizer steps done */
    int64_t weight_version; /* version of the weights (online methods publish it; SFT: = step) */
    int64_t data_epoch, data_index; /* data cursor: the next example is index `data_index` of epoch `data_epoch` */
    size_t n_outstanding;   /* group ids issued but not yet trained (empty for SFT) */
    cpt_group_id *outstanding; /* malloc'd */
    int n_rngs;
    char rng_names[CPT_CKPT_MAX_RNGS][32];
    uint64_t rng[CPT_CKPT_MAX_RNGS][CPT_RNG_STATE_WORDS];
    uint64_t config_hash;
    /* Whole-run counters ("groups/trained", ...): a restart adds to them instead of counting from zero. A state
     * written before they existed reads as none (every total 0). */
    int n_totals;
    char total_names[CPT_CKPT_MAX_TOTALS][32];
    int64_t totals[CPT_CKPT_MAX_TOTALS];
    int64_t lease_token; /* the trainer lease token (queue/lease.h) of the trainer that wrote it; 0: none */
    int64_t world_size;  /* the data-parallel ranks of the trainer that wrote it; 0: not recorded (older states) */
} cpt_train_state;

void cpt_train_state_free(cpt_train_state *st); /* frees outstanding; the struct itself is the caller's */
/* Adds or replaces a named RNG state. */
int cpt_train_state_set_rng(cpt_train_state *st, const char *name, const cpt_rng *rng, cpt_err *err);
/* Restores a named RNG state; -1 if absent. */
int cpt_train_state_get_rng(const cpt_train_state *st, const char *name, cpt_rng *rng, cpt_err *err);

/* A named whole-run total: 0 when absent. set adds or replaces it. */
int64_t cpt_train_state_total(const cpt_train_state *st, const char *name);
int cpt_train_state_set_total(cpt_train_state *st, const char *name, int64_t value, cpt_err *err);

/* trainer_state.json <-> struct. */
int cpt_train_state_write(const cpt_train_state *st, const char *path, cpt_err *err);
int cpt_train_state_read(const char *path, cpt_train_state *st, cpt_err *err);
/* The same over bytes in memory (name used in messages): the fuzzed entry point. */
int cpt_train_state_parse(const char *text, size_t len, const char *name, cpt_train_state *st, cpt_err *err);

#define CPT_CKPT_STAGING_PREFIX ".zero-step-"
/* RUN_DIR/checkpoints/CPT_CKPT_STAGING_PREFIX<step>: where ranks put files of step `step` for rank 0's save to move
 * into the step folder (cpt_ckpt_save_args.extra_dir). */
void cpt_ckpt_staging_dir(const char *run_dir, int64_t step, char *out, size_t cap);

typedef struct cpt_ckpt_save_args {
    const char *run_dir;
    const cpt_model *model;
    const cpt_adamw *opt;         /* NULL: no optimizer state */
    const cpt_train_state *state;
    const char *tokenizer_path;   /* tokenizer.json or its folder; its tokenizer files are copied; NULL: none */
    const char *config_text;      /* resolved config (TOML), NULL: none */
    int keep_last;                /* >= 1 */
    /* NULL, or a folder whose files are moved into the step folder (and covered by its manifest), the folder then
     * removed: files other processes wrote (the optimizer shards of ZeRO ranks, trainer/zero.h), in
     * RUN_DIR/checkpoints/CPT_CKPT_STAGING_PREFIX<step>. A save that succeeds removes any other folder of that
     * prefix: the leftover of a save that was interrupted. */
    const char *extra_dir;
    uint64_t max_shard_bytes;     /* model weights past it are sharded (export.max_shard_size); 0: one file */
    /* Optional: called right before the step folder is put in place and again right before `latest` switches;
     * a failure (a trainer fenced off by a newer one) stops the save there. */
    int (*before_commit)(void *arg, cpt_err *err);
    void *commit_arg;
} cpt_ckpt_save_args;

/* A trainer whose checkpoints cannot be written exits CPT_EXIT_NO_RESTART (core/exit_status.h): a restart would
 * only train again from the last good one, so the launcher's supervisor gives up on it at once. */
#include "core/exit_status.h"

/* Creates RUN_DIR/checkpoints if needed and writes (then removes) a probe file in it: a trainer checks this at start
 * instead of finding out at its first checkpoint. */
int cpt_ckpt_check_writable(const char *run_dir, cpt_err *err);

/* export.max_shard_size in bytes, the error naming the key: checked at the trainer's start, not its first save. */
int cpt_ckpt_max_shard_bytes(const cpt_config *cfg, uint64_t *out, cpt_err *err);

/* Writes RUN_DIR/checkpoints/step-<state->step>/ as described above. out_dir (may be NULL) gets its path. */
int cpt_ckpt_save(const cpt_ckpt_save_args *a, char *out_dir, size_t out_cap, cpt_err *err);

/* Loads a verified checkpoint into an existing model (same shapes), optimizer (may be NULL) and state. */
int cpt_ckpt_load(const char *ckpt_dir, cpt_model *model, cpt_adamw *opt, cpt_train_state *state, cpt_err *err);
/* The same where each trainer step is opt_steps_per_step optimizer updates (PPO's train.ppo_epochs): the optimizer's
 * step count must be state->step x that. */
int cpt_ckpt_load_steps(const char *ckpt_dir, cpt_model *model, cpt_adamw *opt, int64_t opt_steps_per_step,
                        cpt_train_state *state, cpt_err *err);

/* One writer per run directory: an exclusive flock on RUN_DIR/checkpoints/lock (created with the folders), held
 * until cpt_ckpt_unlock or the process ends (kill -9 included). A second trainer is refused with a message naming
 * the holder's pid. Returns the descriptor, or -1. */
int cpt_ckpt_lock(const char *run_dir, cpt_err *err);
void cpt_ckpt_unlock(int fd); /* -1 is fine */

/* Copies tokenizer files (tokenizer.json, tokenizer_config.json, special_tokens_map.json, vocab.json, merges.txt,
 * chat_template.jinja, generation_config.json) found next to tokenizer_path (a file or folder) into dir. */
int cpt_copy_tokenizer_files(const char *tokenizer_path, const char *dir, cpt_err *err);

#endif
