/* A process supervisor for the local launcher (`cpt run`) and cpt-sched: starts role processes, restarts the ones
 * that fail with exponential backoff, and stops them with SIGTERM, then SIGKILL after a grace period.
 *
 * Children die with the process that started them (PR_SET_PDEATHSIG, SIGKILL), so the owner must fork from the one
 * thread that lives as long as it does. One supervisor owns its children; nothing is global. The caller drives it with cpt_sup_poll() from its own
 * loop, so signals (Ctrl-C, USR1) stay in the caller's hands. */
#ifndef CPT_SCHEDULER_SUPERVISOR_H
#define CPT_SCHEDULER_SUPERVISOR_H

#include <sys/types.h>

#include "core/error.h"

typedef enum {
    CPT_RESTART_NEVER = 0,   /* a finished process stays finished */
    CPT_RESTART_ON_FAILURE,  /* restart after a non-zero exit or a signal */
} cpt_restart_policy;

typedef enum { CPT_PROC_IDLE = 0, CPT_PROC_RUNNING, CPT_PROC_BACKOFF, CPT_PROC_EXITED, CPT_PROC_FAILED } cpt_proc_state;

typedef struct cpt_proc {
    char name[64];
    char **argv;          /* owned copies */
    char **env;           /* extra NAME=VALUE entries, owned copies */
    char log_path[4096];  /* stdout and stderr are appended here; empty: inherit */
    cpt_restart_policy policy;
    cpt_proc_state state;
    pid_t pid;
    int exit_status;      /* last exit code, or 128 + signal */
    int restarts;
    int quick_fails;      /* consecutive exits with a status (not a signal) soon after starting */
    double started_at, next_start_at, backoff;
    int stop_requested;
    double stop_at;       /* when the stop was asked */
    double stop_deadline; /* a stopping process still running then is escalated (see cpt_sup_request_stop) */
    int stop_stage;       /* 0 asked with stop_signal, 1 SIGTERM sent, 2 SIGKILL sent */
    int stop_signal;      /* this process's polite stop when not 0 (a local mpirun forwards SIGUSR1 to its ranks and
                             waits for them, but kills them 2 s after a SIGTERM); else the supervisor's */
} cpt_proc;

typedef struct cpt_supervisor {
    cpt_proc *procs;
    int n, cap;
    double backoff_min, backoff_max; /* seconds; doubled after each quick failure */
    double healthy_after;            /* a process that ran this long gets its backoff reset */
    int max_restarts;                /* per process; beyond it the process is FAILED for good */
    double quick_fail_s;             /* an exit with a status this soon after starting is a start failure */
    int stop_signal;                 /* what cpt_sup_stop sends first: SIGTERM (default); SIGUSR1 for srun steps,
                                        which forward it to their tasks (a SIGTERM makes srun end the step) */
    int max_quick_fails;             /* that many start failures in a row: FAILED (a bad config never heals) */
    int no_restart_status;           /* non-zero: a process exiting with this status is FAILED at once */
} cpt_supervisor;

void cpt_sup_init(cpt_supervisor *s);
void cpt_sup_free(cpt_supervisor *s); /* does not stop children: call cpt_sup_stop_all first */

/* Adds a process (not started). argv and env are NULL-terminated and copied. Returns its index or -1. */
int cpt_sup_add(cpt_supervisor *s, const char *name, char *const argv[], char *const env[], const char *log_path,
                cpt_restart_policy policy, cpt_err *err);
int cpt_sup_find(const cpt_supervisor *s, const char *name);

int cpt_sup_start(cpt_supervisor *s, int i, cpt_err *err);

/* Reaps exited children and (re)starts those due; waits up to timeout seconds for a child to change.
 * Returns the number of state changes seen. */
int cpt_sup_poll(cpt_supervisor *s, double timeout);

/* Sends stop_signal and returns at once; the process is not restarted. cpt_sup_poll reaps it when it exits and,
 * if it still runs grace seconds later, escalates: SIGTERM (when stop_signal is another signal: srun then ends its
 * step), then SIGKILL 5 s later. Until it exits it is RUNNING and cpt_sup_draining says so. */
void cpt_sup_request_stop(cpt_supervisor *s, int i, double grace);
int cpt_sup_draining(const cpt_proc *p);

/* cpt_sup_request_stop, then waits until the process is gone. */
void cpt_sup_stop(cpt_supervisor *s, int i, double grace);
void cpt_sup_stop_all(cpt_supervisor *s, double grace);

/* Sends a signal without changing the restart policy (e.g. SIGKILL in chaos tests). */
int cpt_sup_signal(cpt_supervisor *s, int i, int sig);

int cpt_sup_running(const cpt_supervisor *s); /* how many are RUNNING */

#endif
