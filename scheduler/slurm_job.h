/* What Slurm says about a job, asked when cpt-sched is told to stop: the same SIGTERM comes from `scancel` (end for
 * good), from `scontrol requeue` or a preemption (Slurm requeues the job itself) and, after the USR1 warning, from the
 * time limit. `scontrol show job -o JOBID` tells them apart (seen on Slurm 22.05):
 *   - scancel: JobState COMPLETING (CANCELLED once every process is gone), Restarts unchanged, run time under the
 *     limit;
 *   - scontrol requeue / preemption's requeue: JobState COMPLETING, then PENDING, with Restarts one more than the
 *     SLURM_RESTART_COUNT this attempt started with;
 *   - time limit warning (--signal=B:USR1@GRACE) and preemption warning (preempt_send_user_signal): RUNNING. */
#ifndef CPT_SCHEDULER_SLURM_JOB_H
#define CPT_SCHEDULER_SLURM_JOB_H

#include "core/error.h"

typedef struct cpt_slurm_job {
    char state[32];  /* JobState, e.g. RUNNING, COMPLETING, CANCELLED, PENDING */
    long restarts;   /* Restarts */
    long run_s;      /* RunTime in seconds */
    long limit_s;    /* TimeLimit in seconds; -1 when unlimited or not a duration */
} cpt_slurm_job;

typedef enum {
    CPT_SLURM_STOP_REQUEUE = 0, /* a warning before the time limit or a preemption: requeue the job ourselves */
    CPT_SLURM_STOP_REQUEUED,    /* Slurm already requeues it (scontrol requeue, preemption past its grace) */
    CPT_SLURM_STOP_CANCELLED    /* scancel (or an end Slurm will not undo): stop for good */
} cpt_slurm_stop;

/* Parses one line of `scontrol show job -o` for job id `job`. Strict: JobId must be `job`, and JobState, Restarts,
 * RunTime and TimeLimit must each appear exactly once as a space-separated KEY=VALUE (a job name holding one of
 * them is refused, not trusted). */
int cpt_slurm_job_parse(const char *text, const char *job, cpt_slurm_job *out, cpt_err *err);

/* Runs `scontrol show job -o JOB` (no shell) and parses it. */
int cpt_slurm_job_query(const char *job, cpt_slurm_job *out, cpt_err *err);

/* What a stop means for a job that started as restart number `restart_count` (SLURM_RESTART_COUNT, 0 first). */
cpt_slurm_stop cpt_slurm_stop_kind(const cpt_slurm_job *j, long restart_count);

/* Slurm's [D-]HH:MM:SS, MM:SS or MM as seconds; -1 for anything else (UNLIMITED, Partition_Limit, garbage). */
long cpt_slurm_duration_s(const char *s);

#endif
