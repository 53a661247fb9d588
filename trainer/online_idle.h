/* What the online trainer says when no scored group has come for online.idle_warn_s: the run's workers as their
 * heartbeats last left them (queue/stats.h), so a stall names its likely cause: no workers at all, a worker gone
 * silent, or a rollout worker that holds an older weight version than the one announced (it cannot load the new
 * one: its own log says why). */
#ifndef CPT_TRAINER_ONLINE_IDLE_H
#define CPT_TRAINER_ONLINE_IDLE_H

#include <stdint.h>

#include "queue/stream.h"

/* The workers' part of the warning, malloc'd (a queue error is said in it; NULL only when out of memory). version:
 * the weight version the trainer announced last. */
char *cpt_online_idle_workers(cpt_queue *q, uint64_t version);

#endif
