/* `cpt local-ranks N [--clear DIR] -- PROGRAM ARGS...`: the local launch of GPU trainer ranks (NCCL), which need no
 * MPI: N children with CPT_RANK = k, CPT_WORLD_SIZE = N and CPT_LOCAL_RANK = k (the file bootstrap and the device
 * choice of trainer/dp.h), seen by cpt run's supervisor as one process:
 *  - SIGTERM, SIGUSR1, SIGINT and SIGHUP are forwarded to every rank (each stops at the same step on its own);
 *  - a rank that fails (a status other than 0 and the stop's, or a signal) gets the others SIGTERM, then SIGKILL
 *    after kill_after_s: a group that lost a rank cannot finish a collective;
 *  - every rank dies with this process (PR_SET_PDEATHSIG), which dies with the launcher;
 *  - the exit status is 0 when every rank exited 0, else the first other status (128 + signal for a signal).
 * --clear DIR empties the file bootstrap's folder first, so no rank reads a blob of an earlier launch. */
#ifndef CPT_SCHEDULER_LOCAL_RANKS_H
#define CPT_SCHEDULER_LOCAL_RANKS_H

#include "core/error.h"

typedef struct cpt_local_ranks_opts {
    int n;
    char *const *argv;     /* PROGRAM ARGS..., NULL-terminated */
    const char *clear_dir; /* NULL: none */
    double kill_after_s;   /* 0: 10 */
} cpt_local_ranks_opts;

/* Returns the group's exit status (see above), or -1 with err when a rank could not be started. */
int cpt_local_ranks_run(const cpt_local_ranks_opts *o, cpt_err *err);

#endif
