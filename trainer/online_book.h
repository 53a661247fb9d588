/* Bookkeeping of the prompt groups the online trainer issues: exactly-once training by group id, the staleness
 * bound, re-issue, and what a checkpoint keeps.
 *
 * Ids. A group's id is (epoch, index): its position in the shuffled rl dataset's order (core/dataset.h), which the
 * data cursor walks. On the wire the epoch's top 16 bits carry the attempt number (0 the first time, +1 for every
 * re-issue), so a re-issued prompt is a new message that the workers' duplicate filters (queue/seen.h) let through,
 * while the trainer matches every attempt to the same base id. Training is exactly once per base id.
 *
 * Every base id issued and not yet trained is outstanding (in the checkpoint). Any id below the cursor that is not
 * outstanding has been trained, so a copy of it that still arrives (a retried add, an attempt that lost the race,
 * anything after a resume) is a duplicate: dropped and counted. Nothing else needs remembering.
 *
 * A group that fails (its latest attempt dead-lettered by a role, or not answered in time) is issued again up to
 * a bounded number of times and then skipped: no longer outstanding, never trained, and, being behind the cursor,
 * never issued again (a late answer is a duplicate). */
#ifndef CPT_TRAINER_ONLINE_BOOK_H
#define CPT_TRAINER_ONLINE_BOOK_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "queue/schema.h"

#define CPT_ONLINE_ATTEMPT_SHIFT 48
#define CPT_ONLINE_EPOCH_MASK ((1ULL << CPT_ONLINE_ATTEMPT_SHIFT) - 1)

cpt_group_id cpt_online_base_id(cpt_group_id wire);
uint32_t cpt_online_attempt(cpt_group_id wire);
cpt_group_id cpt_online_wire_id(cpt_group_id base, uint32_t attempt);

typedef enum {
    CPT_BOOK_TO_ISSUE = 0, /* must be (re)issued */
    CPT_BOOK_IN_FLIGHT,    /* issued, no usable answer yet */
    CPT_BOOK_RECEIVED      /* a usable scored group is held, waiting to be trained on */
} cpt_book_state;

typedef struct cpt_book_entry {
    cpt_group_id id;        /* base id */
    uint32_t attempt;       /* of the latest issue */
    cpt_book_state state;
    int64_t issued_version; /* trainer version when last issued */
    uint32_t failures;      /* failed attempts so far (dead-lettered, timed out) */
    double issued_at;       /* when the latest attempt was issued (the caller's clock; 0: not set) */
} cpt_book_entry;

typedef struct cpt_online_book {
    uint64_t next_epoch, next_index; /* the data cursor: the next new id */
    cpt_book_entry *e;
    size_t n, cap;
    long trained, duplicates, stale, unknown, reissued, failed, skipped;
    /* The first attempt number of this trainer start. A trainer that restarts from an older checkpoint (a kill -9
     * between checkpoints) issues again ids the workers have already seen; a fresh attempt range per start keeps
     * their duplicate filter from dropping the new issue. */
    uint32_t attempt_base;
} cpt_online_book;

/* Attempts per trainer start before the ranges of two starts overlap. */
#define CPT_ONLINE_ATTEMPTS_PER_START 64u

void cpt_book_init(cpt_online_book *b, uint64_t cursor_epoch, uint64_t cursor_index);
void cpt_book_free(cpt_online_book *b);

/* A new id at the cursor (the caller advances its data order the same way) -> outstanding, TO_ISSUE. */
int cpt_book_add_new(cpt_online_book *b, cpt_group_id base, cpt_err *err);
/* Restores the outstanding wire ids of a checkpoint: each becomes TO_ISSUE with the next attempt number. */
int cpt_book_restore(cpt_online_book *b, const cpt_group_id *wire, size_t n, cpt_err *err);
/* The outstanding ids as wire ids of their latest attempt (for the checkpoint); *out malloc'd (NULL when n = 0). */
int cpt_book_outstanding(const cpt_online_book *b, cpt_group_id **out, size_t *n, cpt_err *err);

/* The next entry to issue (first TO_ISSUE), or NULL. cpt_book_mark_issued gives it a new attempt when it had been
 * issued before, marks it IN_FLIGHT and returns its wire id. */
cpt_book_entry *cpt_book_next_to_issue(cpt_online_book *b);
cpt_group_id cpt_book_mark_issued(cpt_online_book *b, cpt_book_entry *e, int64_t version);
/* Before issuing e: when its next attempt would leave this start's range of attempt numbers (issued
 * CPT_ONLINE_ATTEMPTS_PER_START times since the start, its groups stale or failed each time), it would reach
 * numbers the next start hands out and that workers may already have seen, whose duplicate filter would then drop
 * that issue: the entry is no longer outstanding, counted in skipped; returns 1 (e is gone). Else 0. */
int cpt_book_skip_if_exhausted(cpt_online_book *b, cpt_book_entry *e);

size_t cpt_book_count(const cpt_online_book *b, cpt_book_state s);
cpt_book_entry *cpt_book_find(cpt_online_book *b, cpt_group_id base);

typedef enum {
    CPT_BOOK_ACCEPT = 0, /* use it: the entry is now RECEIVED */
    CPT_BOOK_DUPLICATE,  /* already trained, or a copy of one already held */
    CPT_BOOK_STALE,      /* too old: the entry goes back to TO_ISSUE */
    CPT_BOOK_UNKNOWN     /* never issued by this run (at or beyond the cursor) */
} cpt_book_verdict;

/* What to do with a scored group of wire id `wire` made by weight_version when the trainer is at version:
 * stale when weight_version + max_staleness < version. Counts every verdict but ACCEPT. */
cpt_book_verdict cpt_book_receive(cpt_online_book *b, cpt_group_id wire, uint64_t weight_version, int64_t version,
                                  int64_t max_staleness);
/* A RECEIVED group found stale at training time: back to TO_ISSUE, counted. */
void cpt_book_drop_stale(cpt_online_book *b, cpt_group_id base);
typedef enum {
    CPT_BOOK_FAIL_IGNORED = 0, /* not the latest attempt of an id in flight: nothing to do */
    CPT_BOOK_FAIL_RETRY,       /* back to TO_ISSUE: the next issue is a new attempt */
    CPT_BOOK_FAIL_SKIP         /* failed max_retries + 1 times: no longer outstanding, counted in skipped */
} cpt_book_fail_verdict;

/* The attempt `wire` failed. Only the latest attempt of an entry in flight counts, so a copy of an older attempt,
 * one from an earlier trainer start or a forged id changes nothing. */
cpt_book_fail_verdict cpt_book_failed(cpt_online_book *b, cpt_group_id wire, uint32_t max_retries);

/* Trained: no longer outstanding. -1 if it was not outstanding (a bug in the caller). */
int cpt_book_trained(cpt_online_book *b, cpt_group_id base, cpt_err *err);

#endif
