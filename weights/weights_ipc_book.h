/* cuda_ipc double buffer bookkeeping, as Redis state (no GPU; docs/weights.md).
 *
 * The trainer exports two device buffers (slots 0 and 1) and writes version v into slot v % 2, so the version
 * announced last (in the other slot) stays readable while the next one is written. Per slot:
 *
 *   cpt:{run}:ipc:slot:S           hash  state ("ready" | "writing"), version
 *   cpt:{run}:ipc:slot:S:readers   zset  worker id -> lease deadline (unix ms)
 *
 * Never torn, by two atomic steps (Lua scripts, so each check-and-set is one Redis operation):
 *   reader enter  only if the slot is "ready" and holds the version the worker wants: add the worker with a lease;
 *                 otherwise the version is gone (superseded twice) and the worker waits for the next announcement.
 *   writer claim  drop expired leases (a crashed worker); only if no reader remains: mark the slot "writing" (from
 *                 then on no reader can enter) and return 1; else 0 (the trainer waits and retries).
 * The worker copies only between enter and leave; the trainer writes only between claim and publish. A worker
 * whose copy outlives its lease (lease_ms) could be overwritten: the lease is set far above a copy's time (GB at
 * hundreds of GB/s: milliseconds) and the worker verifies the announced sum64 after copying, so such a copy is
 * refused rather than used. Leave also records the worker's ack (cpt:{run}:ipc:acks, worker -> version). */
#ifndef CPT_WEIGHTS_WEIGHTS_IPC_BOOK_H
#define CPT_WEIGHTS_WEIGHTS_IPC_BOOK_H

#include <stdint.h>

#include "core/error.h"
#include "queue/redis.h"

/* 1 claimed (the slot is now "writing"), 0 busy (*readers set to the live readers), -1 error. */
int cpt_ipc_book_claim(cpt_redis *r, const char *run, int slot, int64_t now_ms, long *readers, cpt_err *err);
/* The slot holds version now: state "ready". */
int cpt_ipc_book_publish(cpt_redis *r, const char *run, int slot, uint64_t version, cpt_err *err);
/* 1 entered, 0 the slot no longer holds that version (or is being written), -1 error. */
int cpt_ipc_book_enter(cpt_redis *r, const char *run, int slot, uint64_t version, const char *worker,
                       int64_t now_ms, int64_t lease_ms, cpt_err *err);
/* Leaves the slot's readers and records the ack of version. */
int cpt_ipc_book_leave(cpt_redis *r, const char *run, int slot, const char *worker, uint64_t version, cpt_err *err);
/* The version a worker acked last: 1 found, 0 none. */
int cpt_ipc_book_acked(cpt_redis *r, const char *run, const char *worker, uint64_t *version, cpt_err *err);

#endif
