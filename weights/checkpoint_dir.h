/* Checkpoint folders on disk, for everyone who reads them (trainer resume, rollout and reward model sources, the
 * launcher): RUN_DIR/checkpoints/step-N/ with its manifest.json, and checkpoints/latest naming the committed one.
 * Writing a checkpoint (trainer/checkpoint.h) uses the manifest and step-folder helpers here. */
#ifndef CPT_WEIGHTS_CHECKPOINT_DIR_H
#define CPT_WEIGHTS_CHECKPOINT_DIR_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"

#define CPT_CKPT_PATH_MAX 4096

/* Writes dir/manifest.json: every regular file of dir and dir/model -> bytes and XXH64 (core/checksum.h). */
int cpt_ckpt_write_manifest(const char *dir, int64_t step, cpt_err *err);

/* Checks manifest.json of a step folder: every file listed exists with its size and checksum, and the required
 * files are listed. The error names the file and what is wrong. */
int cpt_ckpt_verify(const char *ckpt_dir, cpt_err *err);

/* "step-N" -> N; -1 for anything else (temporary folders included). */
int64_t cpt_ckpt_step_of(const char *name);
/* Steps of the step-N folders under dir, newest first (malloc'd); stale temporary folders are removed when
 * remove_tmp is set. */
int cpt_ckpt_list_steps(const char *dir, int64_t **steps, size_t *n, int remove_tmp, cpt_err *err);
/* The step named by CKDIR/latest, or -1 when there is no usable latest file. */
int64_t cpt_ckpt_read_latest(const char *ckdir);

/* The newest good checkpoint of a run: the one `latest` names if it verifies, else the newest older step folder
 * that verifies (each refusal is logged as a warning with its reason). Returns 1 and the path in out, 0 when the
 * run has no checkpoint at all, -1 when checkpoints exist but none verifies (err says why). */
int cpt_ckpt_find_latest(const char *run_dir, char *out, size_t out_cap, cpt_err *err);

/* train.resume = false on a folder that holds a committed checkpoint: a run from step 0 would reach that step and be
 * refused at the save (after all its training), or replace newer checkpoints with older steps. -1 with the error
 * (naming the latest step and the ways out) when RUN_DIR/checkpoints/latest names a step, else 0. */
int cpt_ckpt_refuse_restart(const char *run_dir, cpt_err *err);

/* Resolves a CHECKPOINT argument: a step folder, a run's checkpoints/ folder or a run folder (-> newest good). */
int cpt_ckpt_resolve(const char *arg, char *out, size_t out_cap, cpt_err *err);

#endif
