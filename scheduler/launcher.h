/* The launcher behind `cpt run` (local processes) and cpt-sched (Slurm steps inside an allocation).
 *
 * It prepares the run directory (RUN_DIR/config.toml is the resolved config every role reads), starts a private
 * redis-server for online methods unless queue.url names one, starts the trainer and the worker roles, restarts
 * failed processes with backoff (a restarted trainer resumes from checkpoints/latest by itself), follows scale
 * requests written by cpt-scale into cpt:{run}:control, prints a progress line, and on a stop request (Ctrl-C,
 * SIGTERM, SIGHUP, Slurm's USR1) stops the trainer first (it checkpoints at its step boundary), then drains the
 * workers. It holds RUN_DIR/.lock while it lives (run_lock.h), and everything it starts dies with it
 * (supervisor.h, redis_server.c), so a killed launcher leaves nothing running.
 *
 * Devices: train.device, rollout.device and weights.transport = auto are resolved once here (weights/devices.h: under
 * Slurm from slurm.*_gpus, locally from the GPUs this process sees), written into RUN_DIR/config.toml and printed in
 * one line ("cpt: devices: ..."). Under Slurm a step that asks no GPU runs with --gres=none (else Slurm would give it
 * every GPU of the job and it would wait for the others' steps to end), and a rollout step on the trainer's GPU
 * (rollout.device = cuda, slurm.rollout_gpus = 0) runs with --overlap --gpus-per-task=1, which gives it the job's
 * first GPU whatever other steps hold: in a one-GPU job, the trainer's (tests/slurm/test_sbatch_gpu_steps.sh).
 *
 * Role processes: `cpt-train RUN_DIR/config.toml`, `cpt-rollout RUN_DIR/config.toml --worker-id rollout-K`,
 * `cpt-reward RUN_DIR/config.toml --worker-id reward-K`, `cpt-env RUN_DIR/config.toml --worker-id env-K` (roles.env,
 * the tools of multi-turn rollouts); environment CPT_RUN=RUN_DIR and CPT_ROLE=<name>; logs in
 * RUN_DIR/logs/<name>.log.
 *
 * Trainer ranks (slurm.trainer_tasks = N > 1): under Slurm one step `srun --mpi=pmix --ntasks=N`; locally, CPU ranks
 * under `mpirun -n N --oversubscribe --bind-to none` (stopped with SIGUSR1, which mpirun forwards), GPU ranks
 * (train.device = cuda) under `cpt local-ranks N` (local_ranks.h). Either way the supervisor sees one "trainer";
 * rank 0 logs to RUN_DIR/logs/trainer.log, rank K to trainer.rankK.log (cli/trainer_rank.h).
 *
 * Under Slurm, scale-out goes inside the allocation while it has room for one more step of the role (placement.h)
 * and to satellite jobs beyond it (satellite.h); scale-down drains satellites first. A drain never blocks the loop:
 * the stop signal is sent, the process is reaped when it exits, and it is killed past roles.drain_grace_s. */
#ifndef CPT_SCHEDULER_LAUNCHER_H
#define CPT_SCHEDULER_LAUNCHER_H

#include <signal.h>

#include "core/config.h"
#include "core/error.h"
#include "queue/redis_server.h"
#include "scheduler/autoscale.h"
#include "scheduler/placement.h"
#include "scheduler/roles.h"
#include "scheduler/satellite.h"
#include "scheduler/supervisor.h"
#include "weights/devices.h"

typedef enum { CPT_EXEC_LOCAL = 0, CPT_EXEC_SLURM } cpt_executor;

/* A role that stopped on request after saving its state exits CPT_EXIT_STOPPED (core/exit_status.h). */
#include "core/exit_status.h"

#define CPT_LAUNCHER_MAX_EXTRA 10 /* run.dir, queue.*, run.fresh's, and the resolved devices and transport */

typedef struct cpt_launcher {
    cpt_executor exec;
    const cpt_key_table *keys; /* the declared config keys (cli/config_keys.h) */
    cpt_config *cfg;
    char src_path[4200];    /* the config file loaded: CONFIG, or RUN_DIR/config.toml on --resume */
    char *const *user_overrides;
    int n_user;
    char extra[CPT_LAUNCHER_MAX_EXTRA][4400]; /* the launcher's own overrides (run.dir, ...), applied last */
    int n_extra;
    int resuming;
    int64_t resume_step;    /* the checkpoint step a resume starts from (0: none) */
    int done_on_requeue;    /* a requeue found the run finished: cpt_launcher_run is not to be called */
    int control_seen;       /* cpt:{run}:control held desired counts (cpt-scale in an earlier attempt) */
    int relocated;          /* resuming a folder that config.toml places elsewhere (a copy or a move) */
    int lock_fd;            /* RUN_DIR/.lock, held while the launcher lives (run_lock.h) */
    char registry_entry[2400]; /* this launcher's entry among the live runs (run_registry.h), removed at the end */
    char run_dir[2048];
    char config_path[2100]; /* RUN_DIR/config.toml */
    char bin_dir[2048];     /* folder of the cpt programs */
    int online;             /* grpo, ppo, opd: queue and workers */
    cpt_redis_server redis;
    int redis_owned;
    int redis_restarts;       /* times the private redis-server was restarted after dying */
    double redis_next_start;  /* when a failed restart is tried again */
    cpt_supervisor sup;
    int want[CPT_N_WORKER_ROLES]; /* desired workers per role (scheduler/roles.h) */
    cpt_autoscaler autoscale; /* rollout=auto: want[rollout] follows its decisions (autoscale.h) */
    int limited;            /* Slurm with a known allocation: steps are counted against alloc */
    cpt_alloc alloc;        /* what Slurm granted (placement.h) */
    cpt_devices dev;        /* where the roles run and how weights travel, every auto resolved (weights/devices.h) */
    int satellites_on;      /* workers beyond the allocation go to satellite jobs; the queue listens on TCP */
    cpt_satellites sats;
    int tcp_port;           /* the private redis-server's TCP port when satellites are on */
    int unplaced[CPT_N_WORKER_ROLES]; /* last reported count of workers with no place, said once per change */
    char bad_control[CPT_N_WORKER_ROLES][48]; /* the last invalid control value reported per role (reported once) */
    volatile sig_atomic_t *stop_flag; /* set by the caller's signal handler */
    double last_progress, last_control;
} cpt_launcher;

/* Loads the config (config_path + overrides, against keys), or RUN_DIR/config.toml when resume_dir is given, takes the run
 * directory's lock (run_lock.h) before writing anything into it, and prepares it. A run directory that holds a run is
 * checked first (run_history.h): finished -> an error, run.fresh -> set aside; a requeue that finds the run finished
 * returns 0 with done_on_requeue set. run.dir is the folder's real path
 * whatever config.toml recorded (a copied run directory resumes as itself). A resume refuses a folder with no valid
 * checkpoint unless from_scratch. */
int cpt_launcher_prepare(cpt_launcher *L, cpt_executor exec, const cpt_key_table *keys, const char *config_path,
                         int n_overrides, char *const *overrides, const char *resume_dir, int from_scratch, cpt_err *err);

/* Starts everything and supervises until the trainer finishes, fails for good, or a stop is requested.
 * Returns the exit status for the command: 0 finished, CPT_EXIT_STOPPED stopped after a checkpoint, 1 failed. */
int cpt_launcher_run(cpt_launcher *L, cpt_err *err);

void cpt_launcher_free(cpt_launcher *L);

#endif
