/* A launch into a run directory that already holds a run (`cpt run CONFIG`, `sbatch` of a script again): a finished
 * run is refused before anything starts, run.fresh=true sets the old contents aside and starts over, and anything
 * else resumes from checkpoints/latest. A requeued Slurm job (SLURM_RESTART_COUNT > 0) always resumes: run.fresh does
 * not apply to it, and a run that finished while the job was being requeued (the trainer's last step completed during
 * the drain) is nothing to do, not an error. */
#ifndef CPT_SCHEDULER_RUN_HISTORY_H
#define CPT_SCHEDULER_RUN_HISTORY_H

#include <stdint.h>

#include "core/error.h"

typedef enum {
    CPT_RUN_NEW = 0,         /* no committed checkpoint: training starts at step 0 */
    CPT_RUN_RESUME,          /* checkpoints/latest names step `step` < total: the trainer resumes from it */
    CPT_RUN_DONE_ON_REQUEUE  /* a requeue found the run finished: start nothing, exit 0 */
} cpt_run_history;

/* The state of run_dir (an existing folder, its lock held) for a run of total_steps. requeue: a Slurm restart.
 * fresh: run.fresh. Finished and neither: -1 with the message. fresh (not a requeue) and anything in the folder: it
 * moves into run_dir/previous-<UTC time>/ (named in moved_to, else moved_to is "") and the run is new. step: the
 * checkpoint's step (RESUME, DONE), else 0. */
int cpt_run_history_check(const char *run_dir, int64_t total_steps, int requeue, int fresh, int64_t *step,
                          char *moved_to, size_t cap, cpt_err *err);

/* Moves every entry of run_dir but its .lock and earlier previous-* folders into run_dir/previous-<UTC time>/.
 * Returns 1 when something moved (the folder in out), 0 when the folder held nothing, -1 on error. */
int cpt_run_dir_set_aside(const char *run_dir, char *out, size_t cap, cpt_err *err);

#endif
