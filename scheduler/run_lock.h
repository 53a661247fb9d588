/* The run directory's owner: one launcher (cpt run, cpt run --resume, cpt-sched) at a time holds an exclusive
 * flock on RUN_DIR/.lock for its whole life. It is taken before anything is written into the folder, so a refused
 * second launch leaves a live run untouched. The descriptor is O_CLOEXEC: no role or redis-server inherits it, and
 * the lock goes away with the launcher however it ends (even kill -9). The holder's pid is written into the file
 * for the refusal message. */
#ifndef CPT_SCHEDULER_RUN_LOCK_H
#define CPT_SCHEDULER_RUN_LOCK_H

#include "core/error.h"

/* Takes the lock of run_dir (an existing folder). Returns the descriptor to keep open, or -1 with err naming the
 * pid that holds it. */
int cpt_run_lock_take(const char *run_dir, cpt_err *err);

/* Releases a lock taken by cpt_run_lock_take (fd < 0: nothing). */
void cpt_run_lock_release(int fd);

#endif
