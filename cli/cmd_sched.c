/* cpt-sched CONFIG [k=v ...]: the batch step of a Slurm job (sbatch/ scripts `exec` it). It runs the launcher
 * with every role as a concurrent step of the allocation (srun --exact; the trainer with --mpi=pmix).
 *
 * Preemption and time limits: the job is submitted with --requeue --signal=B:USR1@GRACE, so USR1 (or SIGTERM)
 * reaches this process; it stops the trainer, which checkpoints at its step boundary, drains the workers, and
 * requeues the job (`scontrol requeue`). When the job starts again the trainer resumes from checkpoints/latest and
 * the queue from its AOF in the run directory: no user action. Before requeueing it asks Slurm why the job stops
 * (scheduler/slurm_job.h): a scancel ends the job for good, and a requeue Slurm already does is only logged. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/commands.h"
#include "cli/stop_signals.h"
#include "cli/config_keys.h"
#include "scheduler/launcher.h"
#include "scheduler/slurm_job.h"

static volatile sig_atomic_t stop_requested = 0, warned = 0;

static void on_stop(int sig) {
    stop_requested = 1;
    if (sig == SIGUSR1) warned = 1; /* Slurm's warning before the time limit or a preemption */
}

static void requeue_self(void) {
    const char *job = getenv("SLURM_JOB_ID");
    if (!job) return;
    /* Run without a shell, and only with an id of the form Slurm gives: the variable is the environment's. */
    if (!cpt_slurm_job_id_valid(job)) {
        fprintf(stderr, "cpt-sched: SLURM_JOB_ID \"%.64s\" is not a job id; not requeueing; resubmit the job to "
                        "continue\n", job);
        return;
    }
    char *argv[] = {"scontrol", "requeue", (char *)job, NULL};
    fprintf(stderr, "cpt-sched: scontrol requeue %s\n", job);
    fflush(stderr);
    if (cpt_sat_run_program(argv, NULL, NULL, 0) != 0)
        fprintf(stderr, "cpt-sched: scontrol requeue failed; resubmit the job to continue\n");
}

/* After a stop: requeue the job unless Slurm says it was cancelled or is requeued already. */
static void after_stop(const char *run_dir) {
    const char *job = getenv("SLURM_JOB_ID");
    if (!job) return;
    if (!cpt_slurm_job_id_valid(job)) {
        requeue_self(); /* says why it does not */
        return;
    }
    const char *rc_env = getenv("SLURM_RESTART_COUNT");
    long restart = rc_env ? strtol(rc_env, NULL, 10) : 0;
    cpt_slurm_job j;
    cpt_err e;
    cpt_err_clear(&e);
    if (cpt_slurm_job_query(job, &j, &e) != 0) {
        fprintf(stderr, "cpt-sched: cannot ask Slurm why job %s stops (%s); requeueing it as after a time-limit "
                        "warning (scancel it again to end it)\n", job, e.msg);
        requeue_self();
        return;
    }
    switch (cpt_slurm_stop_kind(&j, restart)) {
    case CPT_SLURM_STOP_CANCELLED:
        fprintf(stderr, "cpt-sched: job %s cancelled (scancel; JobState %s): not requeued. The run stays in %s; "
                        "submit it again to continue from checkpoints/latest\n", job, j.state, run_dir);
        break;
    case CPT_SLURM_STOP_REQUEUED:
        fprintf(stderr, "cpt-sched: job %s requeued by Slurm (%s); it will resume from checkpoints/latest\n", job,
                warned ? "a preemption, or scontrol requeue" : "scontrol requeue");
        break;
    case CPT_SLURM_STOP_REQUEUE:
        requeue_self();
        break;
    }
}

int cmd_sched(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        fprintf(argc < 2 ? stderr : stdout, "usage: cpt-sched CONFIG [section.key=value ...]  (inside sbatch)\n");
        return argc < 2 ? 2 : 0;
    }
    cpt_cli_catch_stop_signals(on_stop, 1);
    umask(077); /* see cmd_run.c */
    const char *restarts = getenv("SLURM_RESTART_COUNT");
    fprintf(stderr, "cpt-sched: job %s, restart %s\n", getenv("SLURM_JOB_ID") ? getenv("SLURM_JOB_ID") : "(none)",
            restarts ? restarts : "0");
    cpt_executor exec = getenv("SLURM_JOB_ID") ? CPT_EXEC_SLURM : CPT_EXEC_LOCAL;
    cpt_launcher L;
    cpt_err err;
    cpt_err_clear(&err);
    if (cpt_launcher_prepare(&L, exec, &cpt_config_table, argv[1], argc - 2, argv + 2, NULL, 0, &err) != 0) {
        cpt_launcher_free(&L);
        cpt_die(&err);
    }
    if (L.done_on_requeue) { /* the run finished while the job was being requeued */
        cpt_launcher_free(&L);
        return 0;
    }
    L.stop_flag = &stop_requested;
    int status = cpt_launcher_run(&L, &err);
    if (status == 1) fprintf(stderr, "cpt-sched: %s\n", err.msg);
    if (status == CPT_EXIT_STOPPED && stop_requested) after_stop(L.run_dir);
    if (status == 0) fprintf(stderr, "cpt-sched: run finished: %s\n", L.run_dir);
    cpt_launcher_free(&L);
    return status == CPT_EXIT_STOPPED ? 0 : status;
}
