/* Finding the user's live run from any directory (cpt-scale, cpt-queue without --run):
 *   - a registry of live launchers per user: $XDG_STATE_HOME/cpt/runs/ (absolute), else ~/.local/state/cpt/runs/;
 *     every launcher (cpt run, cpt-sched) writes HOST-PID.json there atomically when it starts ({"run_dir", "pid",
 *     "pid_start", "host", "job", "started"}) and removes it when it ends. An entry whose pid is gone on this host
 *     (or is another process: its start time differs), or whose Slurm job is no longer running, is stale: ignored
 *     and removed by whoever reads it;
 *   - under Slurm, the job's comment: cpt-sched sets `Comment=cpt-run:RUN_DIR`, and `squeue --me -t RUNNING` lists
 *     it, so a login node that does not share the batch host's registry finds it too.
 * Candidates from both are merged by run directory. */
#ifndef CPT_SCHEDULER_RUN_REGISTRY_H
#define CPT_SCHEDULER_RUN_REGISTRY_H

#include <stddef.h>

#include "core/error.h"

#define CPT_RUN_COMMENT_PREFIX "cpt-run:"

typedef struct cpt_live_run {
    char run_dir[2048];
    char job[32];     /* Slurm job id, "" for a local run */
    char host[256];   /* "" when only the job's comment named it */
    char started[40]; /* UTC, as shown */
    long pid;         /* 0 when unknown */
} cpt_live_run;

/* The registry folder (created mode 0700 when create is set). */
int cpt_run_registry_dir(char *out, size_t cap, int create, cpt_err *err);

/* Registers this process as the launcher of run_dir (job: SLURM_JOB_ID or NULL); entry receives the file's path for
 * cpt_run_registry_remove. A registry that cannot be written is not an error for the run: the caller warns. */
int cpt_run_registry_add(const char *run_dir, const char *job, char *entry, size_t cap, cpt_err *err);
void cpt_run_registry_remove(const char *entry);

/* Sets the Slurm job's comment to cpt-run:RUN_DIR (scontrol update, no shell). */
int cpt_run_registry_tag_job(const char *job, const char *run_dir, cpt_err *err);

/* Every live run the registry and squeue know of (at most cap), stale registry entries removed. job: only that Slurm
 * job (NULL: all). Returns the count, or -1. */
int cpt_live_runs(const char *job, cpt_live_run *out, int cap, cpt_err *err);

/* The run a tool should use when the user named none: run_dir given -> it; else job -> the live run of that job; else
 * $CPT_RUN; else the one live run (its choice said on stderr, prefixed by prog). Several or none: -1 with a message
 * that lists them and asks for --run RUN_DIR or --job JOBID. */
int cpt_run_choose(const char *prog, const char *run_dir, const char *job, char *out, size_t cap, cpt_err *err);

/* Parses a registry entry's JSON text into r (pid_start too). 0, or -1 with err naming path. */
int cpt_run_registry_parse(const char *text, const char *path, cpt_live_run *r, unsigned long long *pid_start,
                           cpt_err *err);

#endif
