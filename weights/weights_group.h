/* The nccl weight group's membership and epochs, as plain Redis state (no GPU; docs/weights.md):
 *
 *   cpt:{run}:wg:members   hash  worker id -> last seen (unix ms). A worker registers on start and refreshes it
 *                                while it polls for weights; it deletes its field when it drains (leave).
 *   cpt:{run}:wg:current   string: the current epoch number E (absent: none yet)
 *   cpt:{run}:wg:epoch:E   hash  members (comma-separated worker ids in rank order), uid (NCCL unique id, hex),
 *                                version (the first weight version sent in it)
 *
 * The trainer, before each version it sends, reads the live members (a field older than ttl_ms is a crashed
 * worker: removed), sorted by worker id (so ranks are deterministic: trainer 0, then 1..N in that order). When they
 * differ from the current epoch's members it opens epoch E+1 with a fresh unique id (MULTI: new epoch hash, current
 * = E+1, old epoch hash deleted) and announces E+1; the old communicator is dropped. A worker holding epoch E sees
 * current != E (its epoch hash gone): it drops its communicator and joins the new epoch if it is a member, else it
 * waits (still registered) for the next one. Scale up, scale down and crashes all reduce to "the member set
 * changed". */
#ifndef CPT_WEIGHTS_WEIGHTS_GROUP_H
#define CPT_WEIGHTS_WEIGHTS_GROUP_H

#include <stdint.h>

#include "core/error.h"
#include "queue/redis.h"
#include "queue/schema.h"
#include "weights/weights_ann.h"

#define CPT_WG_MAX_MEMBERS 1024

typedef struct cpt_wg_epoch {
    uint64_t epoch;     /* 0: none */
    int n;              /* workers (ranks 1..n) */
    char (*members)[CPT_NAME_MAX];
    unsigned char uid[CPT_WG_UID_BYTES];
    uint64_t version;
} cpt_wg_epoch;

void cpt_wg_epoch_free(cpt_wg_epoch *e);

/* Now in the clock of the Redis times here and in weights/weights_ipc_book.h: Unix ms (CLOCK_REALTIME). Workers on
 * other hosts write it and the trainer compares it with its own, which a monotonic clock (time since each host's
 * boot) cannot do. */
int64_t cpt_wg_now_ms(void);

/* Worker side. */
int cpt_wg_register(cpt_redis *r, const char *run, const char *worker, int64_t now_ms, cpt_err *err);
int cpt_wg_leave(cpt_redis *r, const char *run, const char *worker, cpt_err *err);

/* Live members, sorted by id; fields last seen before now_ms - ttl_ms are deleted (crashed workers). *names is
 * malloc'd (free it), *n set. */
int cpt_wg_live(cpt_redis *r, const char *run, int64_t now_ms, int64_t ttl_ms, char (**names)[CPT_NAME_MAX], int *n,
                cpt_err *err);

/* The current epoch: 1 found, 0 none, -1 error. */
int cpt_wg_current(cpt_redis *r, const char *run, cpt_wg_epoch *e, cpt_err *err);
/* Epoch number only (cheap, for a worker's staleness check): 0 when none. */
int cpt_wg_current_number(cpt_redis *r, const char *run, uint64_t *epoch, cpt_err *err);

/* 1 when names[0..n) (sorted) equal e's members. */
int cpt_wg_same_members(const cpt_wg_epoch *e, char (*names)[CPT_NAME_MAX], int n);

/* Opens the next epoch (current + 1, or 1) with these members, uid and first version; fills out. Atomic (MULTI):
 * a reader sees the old epoch or the new one, never half. */
int cpt_wg_open_epoch(cpt_redis *r, const char *run, char (*names)[CPT_NAME_MAX], int n,
                      const unsigned char uid[CPT_WG_UID_BYTES], uint64_t version, cpt_wg_epoch *out, cpt_err *err);

/* The rank of worker in e (1..n), or -1 when it is not a member. */
int cpt_wg_rank(const cpt_wg_epoch *e, const char *worker);

#endif
