/* Operator actions on a run's queue, for cpt-queue (cli/cmd_queue.c): find the runs a Redis holds, drop a dead
 * letter, or requeue one to the stream it came from. */
#ifndef CPT_QUEUE_ADMIN_H
#define CPT_QUEUE_ADMIN_H

#include <stddef.h>

#include "core/error.h"
#include "queue/redis.h"
#include "queue/schema.h"
#include "queue/stream.h"

/* The run ids that have keys in this Redis (SCAN cpt:*:*), at most max of them. Returns how many, or -1. */
int cpt_queue_discover_runs(cpt_redis *r, char names[][CPT_RUN_ID_MAX], int max, cpt_err *err);

/* Deletes entry id of the dead stream; an id it does not hold is an error. */
int cpt_queue_dead_drop(cpt_queue *q, const char *id, cpt_err *err);

/* Moves entry id of the dead stream back to the stream named by its `from` field (a new entry there, the dead one
 * deleted, in one step). key_out gets that stream's key, new_id the new entry's id. */
int cpt_queue_dead_requeue(cpt_queue *q, const char *id, char *key_out, size_t key_cap, char *new_id, size_t id_cap,
                           cpt_err *err);

#endif
