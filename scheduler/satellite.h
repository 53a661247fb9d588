/* Satellite jobs: workers of a cpt-sched run that live in their own Slurm jobs, for scale-out beyond the
 * allocation. One job per worker (one task), so scale-down drains exactly the workers it removes.
 *
 * A satellite is `sbatch BIN_DIR/cpt-satellite.sh MAIN_JOB CHECK_S PROGRAM CONFIG --worker-id ID queue.url=...`, the
 * script (scheduler/cpt-satellite.sh) installed beside the cpt programs:
 *   - job name cpt-sat-<run>-<role>, comment cpt-main:<main job id>, output RUN_DIR/logs/<worker>.log;
 *   - the script runs the worker in the job's batch step, forwards TERM/USR1/INT to it as TERM (the worker drains:
 *     it finishes or returns what it holds, nothing is lost), and drains it by itself when the main job is no
 *     longer RUNNING (finished, cancelled, requeued), checking every CHECK_S seconds, and ends as soon as the
 *     worker exits;
 *   - --no-requeue: a requeued main job resubmits what its desired counts need, a requeued satellite would not know;
 *   - --signal=B:USR2@slurm.satellite_warn_s: Slurm sends USR2 to the script that long before the time limit, and at
 *     once when the job is preempted (SlurmctldParameters=preempt_send_user_signal); the script passes it on and
 *     the worker hands back what it holds at once and exits (cli/worker_args.h), so the job ends cleanly, and the
 *     launcher submits a new one while the desired count says so (backfill: slurm.satellite_partition on a
 *     preemptible partition, a short slurm.satellite_time that renews).
 * The worker reaches the queue over TCP (queue.url = redis://HOST:PORT, queue.password_file) because it may run on
 * another node; the run directory must be on a filesystem both nodes see (checkpoints and weights are there too).
 *
 * cpt-sched drives it from its loop: submit, drain (scancel --batch --signal=TERM, then scancel past the grace),
 * refresh (one squeue per tick), release what ended satellites held, and cancel everything at its exit. A satellite
 * that ended preempted, at its time limit, or with its worker stopped cleanly (COMPLETED: a worker exits 0 only when
 * told to stop) is replaced at once; any other end (failed, cancelled by someone) backs off. Nothing here blocks for
 * long. */
#ifndef CPT_SCHEDULER_SATELLITE_H
#define CPT_SCHEDULER_SATELLITE_H

#include "core/config.h"
#include "core/error.h"
#include "queue/redis.h"
#include "scheduler/roles.h"

/* The satellite batch script's file name, in the folder of the cpt programs. */
#define CPT_SAT_SCRIPT "cpt-satellite.sh"

typedef struct cpt_satellite {
    char job[32];        /* Slurm job id */
    char worker[64];     /* worker id: rollout-sat0 (rollout-sat0-r2 after the main job's second requeue) */
    int role;            /* CPT_ROLE_ROLLOUT, _REWARD, _ENV (scheduler/roles.h) */
    char state[24];      /* squeue's %T; "" until the first refresh */
    double submitted_at, started_at;
    int draining;        /* the drain signal was sent (or the pending job cancelled) */
    double drain_deadline;
    int cancelled_hard;  /* plain scancel sent past the deadline */
} cpt_satellite;

typedef struct cpt_satellites {
    cpt_satellite *v;
    int n, cap;
    int max;                     /* slurm.max_satellites */
    char run_name[128], run_dir[2048], main_job[32];
    char script[2100];           /* BIN_DIR/cpt-satellite.sh */
    char program[CPT_N_WORKER_ROLES][2300]; /* cpt-rollout, cpt-reward, cpt-env */
    char config_path[2100];
    char queue_url[700];         /* empty: the config's queue.url is used as is */
    char password_file[2100];
    char partition[128], account[128], time_limit[64];
    char extra[1024];            /* slurm.satellite_args */
    int cpus[CPT_N_WORKER_ROLES], gpus[CPT_N_WORKER_ROLES];
    double check_s;
    int warn_s;                  /* --signal=B:USR2@warn_s: the satellite hands back and ends before its time limit */
    /* Workers whose satellite job ended since the launcher last looked: their pending entries are handed to the
     * others at once (cpt_sat_release_ended). */
    char ended[16][64];
    int ended_role[16], n_ended;
    int next_index[CPT_N_WORKER_ROLES]; /* worker names are never reused within a run: rollout-sat0, rollout-sat1, ... */
    int restart;                 /* SLURM_RESTART_COUNT: a requeued job's satellites are rollout-sat0-r1, ... */
    double next_submit_at[CPT_N_WORKER_ROLES], backoff[CPT_N_WORKER_ROLES]; /* after a satellite ended on its own */
} cpt_satellites;

/* Reads slurm.* from cfg and finds the satellite script in bin_dir (the folder of the cpt programs; an error names
 * the path when it is missing). queue_url: the TCP URL satellites use (NULL or "": the
 * config's queue.url). Leaves nothing submitted. */
int cpt_sat_init(cpt_satellites *S, const cpt_config *cfg, const char *run_dir, const char *bin_dir,
                 const char *config_path, const char *queue_url, const char *password_file, cpt_err *err);
void cpt_sat_free(cpt_satellites *S);

/* Cancels satellites of this run left from an earlier attempt of the same main job (a requeue after cpt-sched was
 * killed before it could cancel them). */
void cpt_sat_cancel_stale(cpt_satellites *S);

/* Submits one satellite worker of role. Returns 0, or -1 with err (the submit is retried later with backoff). */
int cpt_sat_submit(cpt_satellites *S, int role, cpt_err *err);

/* Whether a submission for role is allowed now (not backing off after a satellite failed). */
int cpt_sat_may_submit(const cpt_satellites *S, int role);

/* Drains the newest live satellite of role: a running one gets TERM in its batch step, a pending one is
 * cancelled. Returns 0, or -1 when the role has none. */
int cpt_sat_drain_one(cpt_satellites *S, int role, double grace);

/* One squeue for all of them: updates states, forgets the ones that ended (saying so when one ended on its own),
 * cancels draining ones past their deadline. */
void cpt_sat_refresh(cpt_satellites *S);

/* Live (submitted, not draining, not ended) satellites of role; running: of those, the ones Slurm runs. */
int cpt_sat_live(const cpt_satellites *S, int role);
int cpt_sat_running(const cpt_satellites *S, int role);

/* "123:RUNNING,124:PENDING,125:DRAINING" for role ("" when none). */
void cpt_sat_describe(const cpt_satellites *S, int role, char *out, size_t cap);

/* A Slurm time limit (sbatch --time: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S) in seconds; -1 when it is none of those
 * ("", "UNLIMITED", ...). */
long cpt_slurm_time_seconds(const char *s);

/* A Slurm job id as Slurm writes it: digits, or digits_digits for an array task. */
int cpt_slurm_job_id_valid(const char *id);

/* Runs argv without a shell (PATH lookup; envp NULL: ours); stdout into out (may be NULL), stderr to ours. Returns
 * the exit status, or -1 when it could not run. */
int cpt_sat_run_program(char *const argv[], char *const envp[], char *out, size_t cap);

/* The same with its stderr discarded (a probe whose failure the caller handles: squeue where Slurm may be absent). */
int cpt_run_program_quiet(char *const argv[], char *out, size_t cap);

/* Hands every pending entry of each satellite worker that ended since the last call (preempted, past its time
 * limit, killed, drained) to the other workers at once (queue/release.h) and removes its heartbeat, logging what was
 * released. run: run.name; claim_idle_ms: queue.claim_idle_ms. */
void cpt_sat_release_ended(cpt_satellites *S, cpt_redis *r, const char *run, long long claim_idle_ms);

/* Plain scancel of every satellite still listed (after the drain had its time). */
void cpt_sat_cancel_rest(cpt_satellites *S);

#endif
