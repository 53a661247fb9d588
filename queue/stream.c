#include "queue/stream.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/fs.h"
#include "queue/lease.h"

static const char *stream_names[CPT_QUEUE_N_KEYS] = {"prompts", "rollouts", "scored", "dead",
                                                     "weights", "control", "workers"};

const char *cpt_stream_name(cpt_stream s) { return (unsigned)s < CPT_QUEUE_N_KEYS ? stream_names[s] : "?"; }

int cpt_stream_from_name(const char *name) {
    for (int i = 0; i < CPT_QUEUE_N_KEYS; i++)
        if (!strcmp(name, stream_names[i])) return i;
    return -1;
}

cpt_msg_type cpt_stream_msg_type(cpt_stream s) {
    switch (s) {
        case CPT_STREAM_PROMPTS: return CPT_MSG_PROMPT_GROUP;
        case CPT_STREAM_ROLLOUTS: return CPT_MSG_ROLLOUT_GROUP;
        case CPT_STREAM_SCORED: return CPT_MSG_SCORED_GROUP;
        default: return CPT_MSG_NONE;
    }
}

int cpt_stream_id_parse(const char *id, uint64_t *ms, uint64_t *seq) {
    char *end;
    errno = 0;
    unsigned long long a = strtoull(id, &end, 10);
    if (end == id || *end != '-' || errno) return -1;
    const char *s = end + 1;
    unsigned long long b = strtoull(s, &end, 10);
    if (end == s || *end || errno) return -1;
    *ms = a;
    *seq = b;
    return 0;
}

int cpt_stream_id_cmp(const char *a, const char *b) {
    uint64_t am = 0, as = 0, bm = 0, bs = 0;
    cpt_stream_id_parse(a, &am, &as);
    cpt_stream_id_parse(b, &bm, &bs);
    if (am != bm) return am < bm ? -1 : 1;
    if (as != bs) return as < bs ? -1 : 1;
    return 0;
}

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
}

cpt_queue *cpt_queue_open(const cpt_queue_opts *o, cpt_err *err) {
    if (!o->run || !cpt_run_id_valid(o->run)) {
        cpt_errf(err, "run id \"%s\" is not valid ([A-Za-z0-9._-]{1,127})", o->run ? o->run : "(null)");
        return NULL;
    }
    cpt_queue *q = calloc(1, sizeof *q);
    if (!q) { cpt_errf(err, "out of memory"); return NULL; }
    snprintf(q->run, sizeof q->run, "%s", o->run);
    for (int i = 0; i < CPT_QUEUE_N_KEYS; i++) {
        snprintf(q->keys[i], sizeof q->keys[i], "cpt:%s:%s", q->run, stream_names[i]);
        snprintf(q->claim_cursor[i], sizeof q->claim_cursor[i], "0-0");
    }
    q->max_len = o->max_len > 0 ? o->max_len : 1024;
    q->claim_idle_ms = o->claim_idle_ms > 0 ? o->claim_idle_ms : 60000;
    q->block_ms = o->block_ms > 0 ? o->block_ms : 2000;
    q->max_deliveries = o->max_deliveries > 0 ? o->max_deliveries : 10;
    q->add_timeout_s = o->add_timeout_s;
    q->read_count = o->read_count > 0 ? (o->read_count > CPT_QUEUE_READ_MAX ? CPT_QUEUE_READ_MAX : o->read_count) : 1;
    q->stop = o->stop;
    q->orphan_before = o->orphan_before;
    if (q->orphan_before <= 0 && getenv("CPT_QUEUE_ORPHAN_BEFORE"))
        q->orphan_before = strtod(getenv("CPT_QUEUE_ORPHAN_BEFORE"), NULL);
    for (int i = 0; i < 3; i++) cpt_seen_init(&q->seen[i]);
    cpt_redis_opts ro = {.url = o->url, .password_file = o->password_file, .tls_ca = o->tls_ca,
                         .reconnect_ms = o->reconnect_ms};
    q->redis = cpt_redis_open(&ro, err);
    if (!q->redis) { cpt_queue_close(q); return NULL; }
    return q;
}

void cpt_queue_close(cpt_queue *q) {
    if (!q) return;
    for (int s = 0; s < 3; s++)
        for (int i = q->bufs[s].pos; i < q->bufs[s].n; i++) cpt_queue_msg_free(&q->bufs[s].msgs[i]);
    for (int i = 0; i < 3; i++) cpt_seen_free(&q->seen[i]);
    cpt_redis_close(q->redis);
    free(q);
}

const char *cpt_queue_key(const cpt_queue *q, cpt_stream s) { return q->keys[s]; }

int cpt_queue_create_group(cpt_queue *q, cpt_stream s, const char *group, cpt_err *err) {
    const char *argv[] = {"XGROUP", "CREATE", q->keys[s], group, "0", "MKSTREAM"};
    redisReply *rep = cpt_redis_command(q->redis, 6, argv, NULL, q->keys[s], 0, err);
    if (rep) { freeReplyObject(rep); return 0; }
    if (!strncmp(q->redis->server_error, "BUSYGROUP", 9)) { cpt_err_clear(err); return 0; }
    return cpt_err_prefix(err, "creating consumer group %s", group);
}

/* ---- adding ---- */

static const char ADD_SCRIPT[] =
    "if redis.call('XLEN', KEYS[1]) >= tonumber(ARGV[1]) then return false end\n"
    "return redis.call('XADD', KEYS[1], '*', 'm', ARGV[2])\n";

/* The head of a fenced script (a queue with cpt_queue_set_fence): KEYS[1] is the trainer lease's fence counter,
 * ARGV[1] the writer's token; a newer token refuses the write before anything is done. */
#define FENCE_LUA                                                                                                    \
    "local f = redis.call('GET', KEYS[1])\n"                                                                         \
    "if f ~= ARGV[1] then return redis.error_reply('FENCED trainer lease token ' .. ARGV[1] .. ' was superseded by '" \
    " .. tostring(f) .. ': another trainer runs on this queue') end\n"

static const char FENCED_ADD_SCRIPT[] = FENCE_LUA
    "if redis.call('XLEN', KEYS[2]) >= tonumber(ARGV[2]) then return false end\n"
    "return redis.call('XADD', KEYS[2], '*', 'm', ARGV[3])\n";

static const char FENCED_ACK_SCRIPT[] = FENCE_LUA "return redis.call('XACK', KEYS[2], ARGV[2], ARGV[3])\n";

static const char FORWARD_SCRIPT[] =
    "if redis.call('XLEN', KEYS[1]) >= tonumber(ARGV[1]) then return false end\n"
    "local id = redis.call('XADD', KEYS[1], '*', 'm', ARGV[2])\n"
    "redis.call('XACK', KEYS[2], ARGV[3], ARGV[4])\n"
    "return id\n";

/* Dead-letters an entry only if this call acks it: one the owner forwarded and acked meanwhile (after the caller
 * looked at its deliveries) was answered, and a dead entry for it would count a failed attempt that was not. */
static const char DEAD_SCRIPT[] =
    "local n = redis.call('XACK', KEYS[2], ARGV[3], ARGV[2])\n"
    "if n == 1 then redis.call('XADD', KEYS[1], '*', 'from', ARGV[1], 'id', ARGV[2], 'group', ARGV[3], 'reason',"
    " ARGV[4], 'm', ARGV[5]) end\n"
    "return n\n";

/* The same for a fenced queue (the trainer's): KEYS[2] dead, KEYS[3] the stream; ARGV shifted by the token. A
 * fenced-off trainer must not ack, nor dead-letter, groups the one that took over has yet to train. */
static const char FENCED_DEAD_SCRIPT[] = FENCE_LUA
    "local n = redis.call('XACK', KEYS[3], ARGV[4], ARGV[3])\n"
    "if n == 1 then redis.call('XADD', KEYS[2], '*', 'from', ARGV[2], 'id', ARGV[3], 'group', ARGV[4], 'reason',"
    " ARGV[5], 'm', ARGV[6]) end\n"
    "return n\n";

/* Runs a bounded-add script until it finds room: a nil reply means the destination is full, so acked entries
 * are trimmed and, if that frees nothing, the producer waits (5 ms doubling to 200 ms). A worker forwarding a
 * result (hold != NULL) keeps its input's claim fresh meanwhile, so a long wait does not hand it to another. */
static int add_with_room(cpt_queue *q, cpt_stream to, int argc, const char **argv, const size_t *lens, char *id_out,
                         const cpt_queue_item *hold, cpt_err *err) {
    double start = cpt_now(), waited_from = 0, touched = start;
    int delay = 5;
    for (;;) {
        redisReply *rep = cpt_redis_command(q->redis, argc, argv, lens, q->keys[to], 0, err);
        if (!rep) return cpt_err_prefix(err, "adding to %s", q->keys[to]);
        if (rep->type == REDIS_REPLY_STRING) {
            if (id_out) snprintf(id_out, CPT_STREAM_ID_MAX, "%s", rep->str);
            freeReplyObject(rep);
            if (waited_from > 0) q->stats.wait_s += cpt_now() - waited_from;
            q->stats.added++;
            return 0;
        }
        int t = rep->type;
        freeReplyObject(rep);
        if (t != REDIS_REPLY_NIL) return cpt_errf(err, "XADD %s: unexpected reply type %d", q->keys[to], t);
        if (cpt_queue_trim_consumed(q, to, err) < 0) return -1;
        long long len = 0;
        const char *xl[] = {"XLEN", q->keys[to]};
        if (cpt_redis_integer(q->redis, 2, xl, q->keys[to], &len, err)) return -1;
        if (len < q->max_len) continue;
        if (waited_from == 0) { waited_from = cpt_now(); q->stats.waits++; }
        if (q->stop && *q->stop) return cpt_errf(err, "XADD %s: interrupted while waiting for room", q->keys[to]);
        if (q->add_timeout_s > 0 && cpt_now() - start > q->add_timeout_s)
            return cpt_errf(err, "XADD %s: stream full (queue.max_len = %lld unacked entries) for %.1f s; are the "
                            "consumers running?", q->keys[to], (long long)q->max_len, cpt_now() - start);
        if (hold && (cpt_now() - touched) * 1000.0 > q->claim_idle_ms / 4.0) {
            if (cpt_queue_touch(q, hold, err)) return -1;
            touched = cpt_now();
        }
        sleep_ms(delay);
        delay = delay * 2 > 200 ? 200 : delay * 2;
    }
}

int cpt_queue_touch(cpt_queue *q, const cpt_queue_item *it, cpt_err *err) {
    /* XCLAIM to ourselves with min-idle 0 resets the entry's idle time; JUSTID leaves the delivery count alone. */
    const char *argv[] = {"XCLAIM", q->keys[it->stream], it->group, it->consumer, "0", it->msg.id, "JUSTID"};
    redisReply *rep = cpt_redis_command(q->redis, 7, argv, NULL, q->keys[it->stream], 0, err);
    if (!rep) return -1;
    freeReplyObject(rep);
    return 0;
}

int cpt_queue_release(cpt_queue *q, const cpt_queue_item *it, cpt_err *err) {
    /* XCLAIM to ourselves with IDLE past claim_idle_ms: the entry looks abandoned, so the next XAUTOCLAIM of any
     * consumer takes it; JUSTID leaves the delivery count alone. */
    char idle[24];
    snprintf(idle, sizeof idle, "%lld", (long long)q->claim_idle_ms + 1000);
    const char *argv[] = {"XCLAIM", q->keys[it->stream], it->group, it->consumer, "0", it->msg.id, "IDLE", idle,
                          "JUSTID"};
    redisReply *rep = cpt_redis_command(q->redis, 9, argv, NULL, q->keys[it->stream], 0, err);
    if (!rep) return -1;
    freeReplyObject(rep);
    return 0;
}

void cpt_queue_set_fence(cpt_queue *q, int64_t token) {
    char lease_key[CPT_LEASE_KEY_MAX];
    cpt_lease_keys(q->run, lease_key, q->fence_key);
    q->fence_token = token;
}

int cpt_queue_add(cpt_queue *q, cpt_stream s, const void *data, size_t len, char *id_out, cpt_err *err) {
    char max[32];
    snprintf(max, sizeof max, "%lld", (long long)q->max_len);
    if (q->fence_token > 0) {
        char tok[24];
        snprintf(tok, sizeof tok, "%" PRId64, q->fence_token);
        const char *argv[] = {"EVAL", FENCED_ADD_SCRIPT, "2", q->fence_key, q->keys[s], tok, max, data};
        size_t lens[] = {4, sizeof FENCED_ADD_SCRIPT - 1, 1, strlen(q->fence_key), strlen(q->keys[s]), strlen(tok),
                         strlen(max), len};
        return add_with_room(q, s, 8, argv, lens, id_out, NULL, err);
    }
    const char *argv[] = {"EVAL", ADD_SCRIPT, "1", q->keys[s], max, data};
    size_t lens[] = {4, sizeof ADD_SCRIPT - 1, 1, strlen(q->keys[s]), strlen(max), len};
    return add_with_room(q, s, 6, argv, lens, id_out, NULL, err);
}

/* ---- trimming what every group has acked ---- */

/* Value of field name in a flat [k, v, k, v, ...] reply. */
static redisReply *field(redisReply *flat, const char *name) {
    if (!flat || flat->type != REDIS_REPLY_ARRAY) return NULL;
    for (size_t i = 0; i + 1 < flat->elements; i += 2)
        if (flat->element[i]->type == REDIS_REPLY_STRING && !strcmp(flat->element[i]->str, name))
            return flat->element[i + 1];
    return NULL;
}

long cpt_queue_trim_consumed(cpt_queue *q, cpt_stream s, cpt_err *err) {
    const char *key = q->keys[s];
    const char *argv[] = {"XINFO", "GROUPS", key};
    redisReply *groups = cpt_redis_command(q->redis, 3, argv, NULL, key, 0, err);
    if (!groups) return -1;
    if (groups->type != REDIS_REPLY_ARRAY || groups->elements == 0) { freeReplyObject(groups); return 0; }
    char bound[CPT_STREAM_ID_MAX] = "";
    for (size_t g = 0; g < groups->elements; g++) {
        redisReply *name = field(groups->element[g], "name");
        redisReply *pending = field(groups->element[g], "pending");
        redisReply *last = field(groups->element[g], "last-delivered-id");
        if (!name || !pending || !last || name->type != REDIS_REPLY_STRING || last->type != REDIS_REPLY_STRING) {
            freeReplyObject(groups);
            return cpt_errf(err, "XINFO GROUPS %s: unexpected reply", key);
        }
        char lower[CPT_STREAM_ID_MAX] = "";
        if (pending->type == REDIS_REPLY_INTEGER && pending->integer > 0) {
            const char *pv[] = {"XPENDING", key, name->str};
            redisReply *p = cpt_redis_command(q->redis, 3, pv, NULL, key, 0, err);
            if (!p) { freeReplyObject(groups); return -1; }
            if (p->type != REDIS_REPLY_ARRAY || p->elements < 2) {
                freeReplyObject(p);
                cpt_errf(err, "XPENDING %s %s: unexpected reply", key, name->str);
                freeReplyObject(groups);
                return -1;
            }
            /* The oldest pending entry stays. If the consumers acked everything since XINFO, the reply has no
             * oldest entry and the last-delivered rule below applies (still safe: it is an older snapshot). */
            if (p->element[1]->type == REDIS_REPLY_STRING) snprintf(lower, sizeof lower, "%s", p->element[1]->str);
            freeReplyObject(p);
        }
        if (!lower[0]) {
            uint64_t ms, seq;
            if (cpt_stream_id_parse(last->str, &ms, &seq)) {
                cpt_errf(err, "XINFO GROUPS %s: bad last-delivered-id %s", key, last->str);
                freeReplyObject(groups);
                return -1;
            }
            snprintf(lower, sizeof lower, "%" PRIu64 "-%" PRIu64, ms, seq + 1); /* everything delivered is acked */
        }
        if (!bound[0] || cpt_stream_id_cmp(lower, bound) < 0) snprintf(bound, sizeof bound, "%s", lower);
    }
    freeReplyObject(groups);
    long long removed = 0;
    const char *tv[] = {"XTRIM", key, "MINID", bound};
    if (cpt_redis_integer(q->redis, 4, tv, key, &removed, err)) return -1;
    return (long)removed;
}

/* ---- reading ---- */

void cpt_queue_msg_free(cpt_queue_msg *m) {
    free(m->data);
    memset(m, 0, sizeof *m);
}

/* One entry [id, [field, value, ...]] into m; fields may be nil for an entry deleted while pending. */
int cpt_queue_msg_from_entry(redisReply *e, cpt_queue_msg *m) {
    memset(m, 0, sizeof *m);
    if (e->type != REDIS_REPLY_ARRAY || e->elements != 2 || e->element[0]->type != REDIS_REPLY_STRING) return -1;
    snprintf(m->id, sizeof m->id, "%s", e->element[0]->str);
    redisReply *f = e->element[1];
    if (f->type != REDIS_REPLY_ARRAY) return 0;
    for (size_t i = 0; i + 1 < f->elements; i += 2)
        if (f->element[i]->type == REDIS_REPLY_STRING && !strcmp(f->element[i]->str, "m") &&
            f->element[i + 1]->type == REDIS_REPLY_STRING) {
            /* steal the bytes: hiredis allocated them with malloc */
            m->len = f->element[i + 1]->len;
            m->data = malloc(m->len ? m->len : 1);
            if (!m->data) return -1;
            memcpy(m->data, f->element[i + 1]->str, m->len);
        }
    return 0;
}

static long deliveries_of(cpt_queue *q, cpt_stream s, const char *group, const char *id, cpt_err *err) {
    const char *argv[] = {"XPENDING", q->keys[s], group, id, id, "1"};
    redisReply *rep = cpt_redis_command(q->redis, 6, argv, NULL, q->keys[s], 0, err);
    if (!rep) return -1;
    long n = 0;
    if (rep->type == REDIS_REPLY_ARRAY && rep->elements == 1 && rep->element[0]->type == REDIS_REPLY_ARRAY &&
        rep->element[0]->elements == 4 && rep->element[0]->element[3]->type == REDIS_REPLY_INTEGER)
        n = (long)rep->element[0]->element[3]->integer;
    freeReplyObject(rep);
    return n;
}

static void free_msgs(cpt_queue_msg *m, int from, int to) {
    for (int i = from; i < to; i++) cpt_queue_msg_free(&m[i]);
}

/* The idle time past which a pending entry is claimable. Normally claim_idle_ms. Early in an attempt that follows
 * another (orphan_before set), an entry idle for longer than the time since the attempt started was delivered
 * before it, to a consumer that no longer exists, so it is claimable at once; entries this attempt's consumers hold
 * are younger than that and stay theirs. The margin covers clock skew between the launcher's host and ours (a
 * misjudged entry is at worst delivered twice, and consumers drop duplicates by id). */
static long claim_min_idle_ms(const cpt_queue *q) {
    if (q->orphan_before <= 0) return q->claim_idle_ms;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    double since_ms = ((double)now.tv_sec + now.tv_nsec / 1e9 - q->orphan_before) * 1000.0 + 500.0;
    if (since_ms < 0) since_ms = 0;
    return since_ms < q->claim_idle_ms ? (long)since_ms : q->claim_idle_ms;
}

/* XAUTOCLAIM of entries idle past claim_min_idle_ms, walking the pending list with a cursor across calls. */
static int claim(cpt_queue *q, cpt_stream s, const char *group, const char *consumer, int count, cpt_queue_msg *out,
                 cpt_err *err) {
    char idle[24], cnt[16];
    snprintf(idle, sizeof idle, "%ld", claim_min_idle_ms(q));
    snprintf(cnt, sizeof cnt, "%d", count);
    const char *argv[] = {"XAUTOCLAIM", q->keys[s], group, consumer, idle, q->claim_cursor[s], "COUNT", cnt};
    redisReply *rep = cpt_redis_command(q->redis, 8, argv, NULL, q->keys[s], 0, err);
    if (!rep) return -1;
    if (rep->type != REDIS_REPLY_ARRAY || rep->elements < 2 || rep->element[0]->type != REDIS_REPLY_STRING ||
        rep->element[1]->type != REDIS_REPLY_ARRAY) {
        freeReplyObject(rep);
        return cpt_errf(err, "XAUTOCLAIM %s: unexpected reply", q->keys[s]);
    }
    snprintf(q->claim_cursor[s], sizeof q->claim_cursor[s], "%s", rep->element[0]->str);
    int n = 0;
    redisReply *entries = rep->element[1];
    for (size_t i = 0; i < entries->elements && n < count; i++) {
        if (entries->element[i]->type == REDIS_REPLY_NIL) continue; /* deleted (Redis 6.2 reports them so) */
        if (cpt_queue_msg_from_entry(entries->element[i], &out[n])) { cpt_queue_msg_free(&out[n]); continue; }
        out[n].claimed = 1;
        n++;
    }
    freeReplyObject(rep);
    /* A message that keeps failing (crashing its consumers) is parked in dead after max_deliveries. */
    int kept = 0;
    for (int i = 0; i < n; i++) {
        long d = deliveries_of(q, s, group, out[i].id, err);
        if (d < 0) {
            free_msgs(out, 0, kept);
            free_msgs(out, i, n);
            return -1;
        }
        if (d > q->max_deliveries) {
            char reason[128];
            snprintf(reason, sizeof reason, "delivered %ld times without an ack (max %d)", d, q->max_deliveries);
            cpt_warn("%s %s: %s; moving it to %s", q->keys[s], out[i].id, reason, q->keys[CPT_STREAM_DEAD]);
            int rc = cpt_queue_dead_letter(q, s, group, &out[i], reason, err);
            cpt_queue_msg_free(&out[i]);
            if (rc) {
                free_msgs(out, 0, kept);
                free_msgs(out, i + 1, n);
                return -1;
            }
            continue;
        }
        if (kept != i) { out[kept] = out[i]; memset(&out[i], 0, sizeof out[i]); }
        kept++;
    }
    q->stats.claimed += kept;
    return kept;
}

int cpt_queue_read(cpt_queue *q, cpt_stream s, const char *group, const char *consumer, int count, int block_ms,
                   cpt_queue_msg *out, cpt_err *err) {
    if (count < 1) count = 1;
    if (count > CPT_QUEUE_READ_MAX) count = CPT_QUEUE_READ_MAX;
    /* Look for abandoned work at most every claim_idle/4 (bounded to 50 ms .. 1 s): it is a round trip, and what a
     * draining or preempted worker hands back (cpt_queue_release) waits for the next look. */
    double every = q->claim_idle_ms / 4000.0;
    if (every < 0.05) every = 0.05;
    if (every > 1) every = 1;
    double now = cpt_now();
    if (now - q->last_claim[s] >= every) {
        q->last_claim[s] = now;
        int n = claim(q, s, group, consumer, count, out, err);
        if (n != 0) {
            if (n > 0) q->stats.read += n;
            return n;
        }
    }
    char cnt[16], blk[16];
    snprintf(cnt, sizeof cnt, "%d", count);
    snprintf(blk, sizeof blk, "%d", block_ms);
    const char *argv[11] = {"XREADGROUP", "GROUP", group, consumer, "COUNT", cnt};
    int argc = 6;
    if (block_ms > 0) { /* no BLOCK: answer at once */
        argv[argc++] = "BLOCK";
        argv[argc++] = blk;
    }
    argv[argc++] = "STREAMS";
    argv[argc++] = q->keys[s];
    argv[argc++] = ">";
    redisReply *rep = cpt_redis_command(q->redis, argc, argv, NULL, q->keys[s], block_ms > 0 ? block_ms : 0, err);
    if (!rep) return -1;
    int n = 0;
    if (rep->type == REDIS_REPLY_ARRAY && rep->elements == 1 && rep->element[0]->type == REDIS_REPLY_ARRAY &&
        rep->element[0]->elements == 2 && rep->element[0]->element[1]->type == REDIS_REPLY_ARRAY) {
        redisReply *entries = rep->element[0]->element[1];
        for (size_t i = 0; i < entries->elements && n < count; i++) {
            if (cpt_queue_msg_from_entry(entries->element[i], &out[n]) == 0) n++;
            else cpt_queue_msg_free(&out[n]);
        }
    }
    freeReplyObject(rep);
    q->stats.read += n;
    return n;
}

int cpt_queue_ack(cpt_queue *q, cpt_stream s, const char *group, const char *id, cpt_err *err) {
    if (q->fence_token > 0) {
        /* a fenced-off trainer must not ack groups the one that took over has yet to train */
        char tok[24];
        snprintf(tok, sizeof tok, "%" PRId64, q->fence_token);
        const char *argv[] = {"EVAL", FENCED_ACK_SCRIPT, "2", q->fence_key, q->keys[s], tok, group, id};
        if (cpt_redis_integer(q->redis, 8, argv, q->keys[s], NULL, err)) return -1;
        q->stats.acked++;
        return 0;
    }
    const char *argv[] = {"XACK", q->keys[s], group, id};
    if (cpt_redis_integer(q->redis, 4, argv, q->keys[s], NULL, err)) return -1;
    q->stats.acked++;
    return 0;
}

int cpt_queue_dead_letter(cpt_queue *q, cpt_stream s, const char *group, const cpt_queue_msg *m, const char *reason,
                          cpt_err *err) {
    char tok[24];
    snprintf(tok, sizeof tok, "%" PRId64, q->fence_token);
    const int fenced = q->fence_token > 0;
    const char *argv[12];
    int n = 0;
    argv[n++] = "EVAL";
    argv[n++] = fenced ? FENCED_DEAD_SCRIPT : DEAD_SCRIPT;
    argv[n++] = fenced ? "3" : "2";
    if (fenced) argv[n++] = q->fence_key;
    argv[n++] = q->keys[CPT_STREAM_DEAD];
    argv[n++] = q->keys[s];
    if (fenced) argv[n++] = tok;
    argv[n++] = stream_names[s];
    argv[n++] = m->id;
    argv[n++] = group;
    argv[n++] = reason;
    argv[n++] = m->data ? m->data : "";
    size_t lens[12];
    for (int i = 0; i < n - 1; i++) lens[i] = strlen(argv[i]);
    lens[n - 1] = m->data ? m->len : 0;
    redisReply *rep = cpt_redis_command(q->redis, n, argv, lens, q->keys[CPT_STREAM_DEAD], 0, err);
    if (!rep) return cpt_err_prefix(err, "dead-lettering %s %s", q->keys[s], m->id);
    if (rep->type == REDIS_REPLY_INTEGER && rep->integer == 1) q->stats.dead++;
    freeReplyObject(rep);
    return 0;
}

/* ---- decoded consumption ---- */

void cpt_queue_item_free(cpt_queue_item *it) {
    cpt_queue_msg_free(&it->msg);
    cpt_prompt_group_free(&it->prompt);
    cpt_rollout_group_free(&it->rollout);
    it->type = CPT_MSG_NONE;
}

/* Decodes it->msg; on failure fills reason. */
static int decode_item(cpt_queue *q, cpt_queue_item *it, char *reason, size_t cap) {
    cpt_err e;
    const char *run;
    cpt_group_id id;
    it->type = cpt_stream_msg_type(it->stream);
    if (!it->msg.data) { snprintf(reason, cap, "entry has no \"m\" field"); return -1; }
    if (it->type == CPT_MSG_PROMPT_GROUP) {
        if (cpt_prompt_group_decode(it->msg.data, it->msg.len, &it->prompt, &e)) { snprintf(reason, cap, "%s", e.msg); return -1; }
        run = it->prompt.run;
        id = it->prompt.id;
    } else {
        if (cpt_rollout_group_decode(it->msg.data, it->msg.len, it->type, &it->rollout, &e)) { snprintf(reason, cap, "%s", e.msg); return -1; }
        run = it->rollout.run;
        id = it->rollout.id;
    }
    if (strcmp(run, q->run)) {
        snprintf(reason, cap, "run \"%s\" is not this run (\"%s\")", run, q->run);
        return -1;
    }
    if (cpt_seen_has(&q->seen[it->stream], id)) {
        snprintf(reason, cap, "duplicate");
        return 1;
    }
    return 0;
}

int cpt_queue_next(cpt_queue *q, cpt_stream s, const char *group, const char *consumer, cpt_queue_item *it,
                   cpt_err *err) {
    memset(it, 0, sizeof *it);
    if (s > CPT_STREAM_SCORED) return cpt_errf(err, "cpt_queue_next: %s is not a stream of groups", cpt_stream_name(s));
    struct cpt_queue_buf *b = &q->bufs[s];
    for (;;) {
        if (q->stop && *q->stop) return 0;
        if (b->pos >= b->n) {
            b->pos = b->n = 0;
            int n = cpt_queue_read(q, s, group, consumer, q->read_count, q->block_ms, b->msgs, err);
            if (n <= 0) return n;
            b->n = n;
        }
        it->msg = b->msgs[b->pos];
        memset(&b->msgs[b->pos], 0, sizeof b->msgs[b->pos]);
        b->pos++;
        it->stream = s;
        snprintf(it->group, sizeof it->group, "%s", group);
        snprintf(it->consumer, sizeof it->consumer, "%s", consumer);
        char reason[CPT_ERR_MAX];
        int rc = decode_item(q, it, reason, sizeof reason);
        if (rc == 0) return 1;
        if (rc > 0) {
            q->stats.duplicates++;
            cpt_debug("%s %s: duplicate group, dropped", q->keys[s], it->msg.id);
            if (cpt_queue_ack(q, s, group, it->msg.id, err)) { cpt_queue_item_free(it); return -1; }
        } else {
            cpt_warn("%s %s -> %s: %s", q->keys[s], it->msg.id, q->keys[CPT_STREAM_DEAD], reason);
            if (cpt_queue_dead_letter(q, s, group, &it->msg, reason, err)) { cpt_queue_item_free(it); return -1; }
        }
        cpt_queue_item_free(it);
    }
}

static cpt_group_id item_id(const cpt_queue_item *it) {
    return it->type == CPT_MSG_PROMPT_GROUP ? it->prompt.id : it->rollout.id;
}

int cpt_queue_forward(cpt_queue *q, const cpt_queue_item *it, cpt_stream to, const void *data, size_t len,
                      char *id_out, cpt_err *err) {
    char max[32];
    snprintf(max, sizeof max, "%lld", (long long)q->max_len);
    const char *argv[] = {"EVAL", FORWARD_SCRIPT, "2", q->keys[to], q->keys[it->stream], max, data, it->group,
                          it->msg.id};
    size_t lens[9];
    for (int i = 0; i < 9; i++) lens[i] = i == 6 ? len : strlen(argv[i]);
    if (add_with_room(q, to, 9, argv, lens, id_out, it, err)) return -1;
    q->stats.acked++;
    if (cpt_seen_add(&q->seen[it->stream], item_id(it)) < 0) return cpt_errf(err, "out of memory");
    return 0;
}

int cpt_queue_done(cpt_queue *q, const cpt_queue_item *it, cpt_err *err) {
    if (cpt_queue_ack(q, it->stream, it->group, it->msg.id, err)) return -1;
    if (cpt_seen_add(&q->seen[it->stream], item_id(it)) < 0) return cpt_errf(err, "out of memory");
    return 0;
}

/* ---- hashes ---- */

static const char FENCED_WEIGHTS_SCRIPT[] =
    FENCE_LUA "return redis.call('HSET', KEYS[2], 'version', ARGV[2], 'msg', ARGV[3])\n";

int cpt_queue_publish_weights(cpt_queue *q, const cpt_weights_msg *w, cpt_err *err) {
    cpt_buf b;
    if (cpt_weights_encode(w, &b, err)) return -1;
    char v[32], tok[24];
    snprintf(v, sizeof v, "%" PRIu64, w->version);
    snprintf(tok, sizeof tok, "%" PRId64, q->fence_token);
    const char *key = q->keys[CPT_HASH_WEIGHTS];
    const char *argv[] = {"HSET", key, "version", v, "msg", b.data};
    size_t lens[] = {4, strlen(key), 7, strlen(v), 3, b.len};
    const char *fargv[] = {"EVAL", FENCED_WEIGHTS_SCRIPT, "2", q->fence_key, key, tok, v, b.data};
    size_t flens[] = {4, sizeof FENCED_WEIGHTS_SCRIPT - 1, 1, strlen(q->fence_key), strlen(key), strlen(tok),
                      strlen(v), b.len};
    redisReply *rep = q->fence_token > 0 ? cpt_redis_command(q->redis, 8, fargv, flens, key, 0, err)
                                         : cpt_redis_command(q->redis, 6, argv, lens, key, 0, err);
    cpt_buf_free(&b);
    if (!rep) return -1;
    freeReplyObject(rep);
    return 0;
}

/* HGET key field into a malloc'd buffer; 0 if absent. */
static int hget(cpt_queue *q, cpt_stream k, const char *fieldname, char **out, size_t *len, cpt_err *err) {
    const char *argv[] = {"HGET", q->keys[k], fieldname};
    redisReply *rep = cpt_redis_command(q->redis, 3, argv, NULL, q->keys[k], 0, err);
    if (!rep) return -1;
    if (rep->type == REDIS_REPLY_NIL) { freeReplyObject(rep); return 0; }
    if (rep->type != REDIS_REPLY_STRING) { freeReplyObject(rep); return cpt_errf(err, "HGET %s %s: not a string", q->keys[k], fieldname); }
    *out = malloc(rep->len ? rep->len : 1);
    if (!*out) { freeReplyObject(rep); return cpt_errf(err, "out of memory"); }
    memcpy(*out, rep->str, rep->len);
    *len = rep->len;
    freeReplyObject(rep);
    return 1;
}

int cpt_queue_get_weights(cpt_queue *q, cpt_weights_msg *w, cpt_err *err) {
    char *d = NULL;
    size_t n = 0;
    int rc = hget(q, CPT_HASH_WEIGHTS, "msg", &d, &n, err);
    if (rc <= 0) return rc;
    rc = cpt_weights_decode(d, n, w, err);
    free(d);
    if (rc) return cpt_err_prefix(err, "HGET %s msg", q->keys[CPT_HASH_WEIGHTS]);
    return 1;
}

int cpt_queue_set_control(cpt_queue *q, const cpt_control_msg *c, cpt_err *err) {
    cpt_buf b;
    if (cpt_control_encode(c, &b, err)) return -1;
    const char *key = q->keys[CPT_HASH_CONTROL];
    const char *argv[] = {"HSET", key, "state", c->state, "msg", b.data};
    size_t lens[] = {4, strlen(key), 5, strlen(c->state), 3, b.len};
    redisReply *rep = cpt_redis_command(q->redis, 6, argv, lens, key, 0, err);
    cpt_buf_free(&b);
    if (!rep) return -1;
    freeReplyObject(rep);
    return 0;
}

int cpt_queue_get_control(cpt_queue *q, cpt_control_msg *c, cpt_err *err) {
    char *d = NULL;
    size_t n = 0;
    int rc = hget(q, CPT_HASH_CONTROL, "msg", &d, &n, err);
    if (rc <= 0) return rc;
    rc = cpt_control_decode(d, n, c, err);
    free(d);
    if (rc) return cpt_err_prefix(err, "HGET %s msg", q->keys[CPT_HASH_CONTROL]);
    return 1;
}

int cpt_queue_worker_gone(cpt_queue *q, const char *worker, cpt_err *err) {
    const char *key = q->keys[CPT_HASH_WORKERS];
    const char *argv[] = {"HDEL", key, worker};
    return cpt_redis_integer(q->redis, 3, argv, key, NULL, err);
}

int cpt_queue_heartbeat(cpt_queue *q, const cpt_heartbeat_msg *h, cpt_err *err) {
    /* Stamped here with the wall clock, the one cpt-queue stats on another host can compare with its own. */
    cpt_heartbeat_msg m = *h;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    m.time = (double)now.tv_sec + now.tv_nsec / 1e9;
    cpt_buf b;
    if (cpt_heartbeat_encode(&m, &b, err)) return -1;
    const char *key = q->keys[CPT_HASH_WORKERS];
    const char *argv[] = {"HSET", key, m.worker, b.data};
    size_t lens[] = {4, strlen(key), strlen(m.worker), b.len};
    redisReply *rep = cpt_redis_command(q->redis, 4, argv, lens, key, 0, err);
    cpt_buf_free(&b);
    if (!rep) return -1;
    freeReplyObject(rep);
    return 0;
}
