/* The run's queue: Redis streams cpt:{run}:prompts|rollouts|scored|dead and hashes weights|control|workers.
 *
 * Delivery is at-least-once with duplicates dropped by group id:
 *   - producers add with backpressure: an add waits while the stream holds max_len entries not yet acked by every
 *     consumer group (acked entries are trimmed first; unread or pending entries never are);
 *   - consumers read through a consumer group (XREADGROUP, blocking), and acknowledge only together with the
 *     result: cpt_queue_forward adds the result downstream and acks the input in one atomic script, so a crash
 *     leaves either both or neither;
 *   - messages left pending by a dead consumer for claim_idle_ms are taken over (XAUTOCLAIM) by the next read;
 *   - a malformed message, an unknown schema, a message of another run or one delivered max_deliveries times
 *     without an ack goes to the dead stream with the reason and its original bytes, and is acked;
 *   - a group id this consumer already finished is acked and dropped.
 * Typical worker loop:
 *     cpt_queue_item it;
 *     while (cpt_queue_next(q, CPT_STREAM_PROMPTS, "rollout", me, &it, &err) == 1) {
 *         ... generate, encode the rollout group into buf ...
 *         cpt_queue_forward(q, &it, CPT_STREAM_ROLLOUTS, buf.data, buf.len, NULL, &err);
 *         cpt_queue_item_free(&it);
 *     } */
#ifndef CPT_QUEUE_STREAM_H
#define CPT_QUEUE_STREAM_H

#include <signal.h>
#include <stdint.h>

#include "queue/lease.h"
#include "queue/redis.h"
#include "queue/schema.h"
#include "queue/seen.h"

typedef enum {
    CPT_STREAM_PROMPTS = 0,
    CPT_STREAM_ROLLOUTS,
    CPT_STREAM_SCORED,
    CPT_STREAM_DEAD,
    CPT_HASH_WEIGHTS,
    CPT_HASH_CONTROL,
    CPT_HASH_WORKERS,
    CPT_QUEUE_N_KEYS
} cpt_stream;

const char *cpt_stream_name(cpt_stream s); /* "prompts", ... */
int cpt_stream_from_name(const char *name); /* -1 if unknown */
/* The message type a stream carries (CPT_MSG_NONE for dead and the hashes). */
cpt_msg_type cpt_stream_msg_type(cpt_stream s);

#define CPT_STREAM_ID_MAX 48
#define CPT_QUEUE_READ_MAX 64

typedef struct cpt_queue_opts {
    const char *url;           /* redis://... or unix:///... */
    const char *password_file; /* NULL: none */
    const char *tls_ca;        /* rediss://: the CA of the server's certificate (queue/tls.h); NULL: the system's */
    const char *run;           /* run id: keys live under cpt:{run}: */
    int64_t max_len;           /* backpressure bound per stream; 0: 1024 */
    int claim_idle_ms;         /* pending this long -> claimable; 0: 60000 */
    int block_ms;              /* XREADGROUP BLOCK; 0: 2000 */
    int reconnect_ms;          /* see cpt_redis_opts; 0: 30000 */
    int max_deliveries;        /* deliveries without an ack before a message is dead-lettered; 0: 10 */
    double add_timeout_s;      /* how long an add waits for room; 0: forever */
    int read_count;            /* messages cpt_queue_next takes per read (1..CPT_QUEUE_READ_MAX); 0: 1. A rollout
                                  worker keeps 1 so idle workers are not starved by one that hoards groups. */
    volatile sig_atomic_t *stop; /* optional: set (e.g. by a signal handler) to end waits with an error */
    double orphan_before;      /* Unix time (s) this launch attempt started: entries delivered before it belong to
                                  consumers of an earlier attempt, all gone (a requeue, cpt run --resume), and are
                                  claimed at once instead of after claim_idle_ms. 0: from CPT_QUEUE_ORPHAN_BEFORE,
                                  which the launchers set for the roles they start; unset: none. */
} cpt_queue_opts;

typedef struct cpt_queue_stats_local {
    long added, read, acked, claimed, dead, duplicates, waits;
    double wait_s; /* time producers spent blocked by backpressure */
} cpt_queue_stats_local;

typedef struct cpt_queue_msg {
    char id[CPT_STREAM_ID_MAX];
    char *data; /* malloc'd; NULL if the entry had no "m" field */
    size_t len;
    int claimed; /* taken over from another consumer */
} cpt_queue_msg;

typedef struct cpt_queue {
    cpt_redis *redis;
    char run[CPT_RUN_ID_MAX];
    char keys[CPT_QUEUE_N_KEYS][CPT_RUN_ID_MAX + 32];
    int64_t max_len;
    int claim_idle_ms, block_ms, max_deliveries;
    double add_timeout_s;
    volatile sig_atomic_t *stop;
    double orphan_before;
    cpt_seen seen[3]; /* per stream of groups: ids this consumer finished */
    cpt_queue_stats_local stats;
    int read_count;
    /* messages of prompts, rollouts, scored read in one batch and not yet handed out */
    struct cpt_queue_buf {
        cpt_queue_msg msgs[CPT_QUEUE_READ_MAX];
        int n, pos;
    } bufs[3];
    char claim_cursor[CPT_QUEUE_N_KEYS][CPT_STREAM_ID_MAX];
    double last_claim[CPT_QUEUE_N_KEYS];
    int64_t fence_token; /* > 0: adds and weight announcements carry this trainer lease token (queue/lease.h) */
    char fence_key[CPT_LEASE_KEY_MAX];
} cpt_queue;

cpt_queue *cpt_queue_open(const cpt_queue_opts *opts, cpt_err *err);
void cpt_queue_close(cpt_queue *q);
const char *cpt_queue_key(const cpt_queue *q, cpt_stream s);

/* XGROUP CREATE key group 0 MKSTREAM; an existing group is fine. */
int cpt_queue_create_group(cpt_queue *q, cpt_stream s, const char *group, cpt_err *err);

/* Adds one message (field "m") with backpressure; id_out (may be NULL) gets the entry id. */
int cpt_queue_add(cpt_queue *q, cpt_stream s, const void *data, size_t len, char *id_out, cpt_err *err);

/* Raw read: up to count (<= CPT_QUEUE_READ_MAX) messages into out[0..count) for consumer (claimed idle ones first, then new ones, blocking up to block_ms).
 * Returns the number read (0 on timeout) or -1. Free each with cpt_queue_msg_free. */
int cpt_queue_read(cpt_queue *q, cpt_stream s, const char *group, const char *consumer, int count, int block_ms,
                   cpt_queue_msg *out, cpt_err *err);
void cpt_queue_msg_free(cpt_queue_msg *m);
/* One stream entry [id, [field, value, ...]] of an XREAD/XREADGROUP/XAUTOCLAIM reply into m (its "m" field copied;
 * no field for an entry deleted while pending). 0, or -1 for a malformed entry. */
int cpt_queue_msg_from_entry(redisReply *e, cpt_queue_msg *m);

int cpt_queue_ack(cpt_queue *q, cpt_stream s, const char *group, const char *id, cpt_err *err);

/* Moves a message to the dead stream with the reason and its original bytes, and acks it. */
int cpt_queue_dead_letter(cpt_queue *q, cpt_stream s, const char *group, const cpt_queue_msg *m, const char *reason,
                          cpt_err *err);

/* A decoded message handed to a consumer. */
typedef struct cpt_queue_item {
    cpt_queue_msg msg;
    cpt_stream stream;
    char group[CPT_NAME_MAX];
    char consumer[CPT_NAME_MAX];
    cpt_msg_type type;
    cpt_prompt_group prompt;  /* type == CPT_MSG_PROMPT_GROUP */
    cpt_rollout_group rollout; /* type == CPT_MSG_ROLLOUT_GROUP or CPT_MSG_SCORED_GROUP */
} cpt_queue_item;

/* The next valid message of stream s (prompts, rollouts or scored): dead-letters what does not decode or belongs
 * to another run, drops duplicates. Returns 1 with *it filled, 0 if nothing arrived within block_ms, -1 on error.
 * An item held unfinished for longer than claim_idle_ms can be claimed again (by another consumer or by this
 * one, which then sees it twice): touch it meanwhile (cpt_queue_touch). */
int cpt_queue_next(cpt_queue *q, cpt_stream s, const char *group, const char *consumer, cpt_queue_item *it,
                   cpt_err *err);

/* Adds the result to stream `to` (with backpressure) and acks the item, atomically; marks its group id done. */
int cpt_queue_forward(cpt_queue *q, const cpt_queue_item *it, cpt_stream to, const void *data, size_t len,
                      char *id_out, cpt_err *err);
/* Resets the idle time of the item's pending entry, so it is not claimed by another consumer: call it every
 * claim_idle_ms / 2 or so while working on one item for longer than claim_idle_ms. (forward does it itself
 * while it waits for room downstream.) */
int cpt_queue_touch(cpt_queue *q, const cpt_queue_item *it, cpt_err *err);
/* Gives the item back unfinished (a draining worker): its pending entry is made to look idle past claim_idle_ms,
 * so the next consumer that looks for abandoned work (every claim_idle_ms / 4, at most 1 s) takes it, instead of
 * only after claim_idle_ms. */
int cpt_queue_release(cpt_queue *q, const cpt_queue_item *it, cpt_err *err);
/* Acks the item without a downstream result (the last stage: the trainer, after the group is trained on). */
int cpt_queue_done(cpt_queue *q, const cpt_queue_item *it, cpt_err *err);
/* Frees the decoded message; the item can be reused. */
void cpt_queue_item_free(cpt_queue_item *it);

/* From now on every add, ack and weights announcement of q is refused by Redis ("FENCED ...", nothing written)
 * once a trainer lease token newer than token was issued (queue/lease.h). */
void cpt_queue_set_fence(cpt_queue *q, int64_t token);

/* Hashes. */
int cpt_queue_publish_weights(cpt_queue *q, const cpt_weights_msg *w, cpt_err *err);
/* 1: found, 0: none published yet, -1: error (including a malformed announcement). */
int cpt_queue_get_weights(cpt_queue *q, cpt_weights_msg *w, cpt_err *err);
int cpt_queue_set_control(cpt_queue *q, const cpt_control_msg *c, cpt_err *err);
int cpt_queue_get_control(cpt_queue *q, cpt_control_msg *c, cpt_err *err);
/* Writes h into the workers hash under h->worker, with h->time set to the wall clock (Unix seconds) now. */
int cpt_queue_heartbeat(cpt_queue *q, const cpt_heartbeat_msg *h, cpt_err *err);
/* Removes a worker's entry from the workers hash (a worker that exits cleanly). */
int cpt_queue_worker_gone(cpt_queue *q, const char *worker, cpt_err *err);

/* Trims entries every consumer group has acked (XTRIM MINID); returns how many were removed, or -1. */
long cpt_queue_trim_consumed(cpt_queue *q, cpt_stream s, cpt_err *err);

/* Entry id helpers: "ms-seq". */
int cpt_stream_id_parse(const char *id, uint64_t *ms, uint64_t *seq);
int cpt_stream_id_cmp(const char *a, const char *b);

#endif
