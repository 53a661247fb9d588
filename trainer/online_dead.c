#include "trainer/online_dead.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#define DEAD_READ_COUNT 64

int cpt_dead_reader_init(cpt_dead_reader *r, cpt_queue *q, uint32_t max_retries, double timeout_s, cpt_err *err) {
    memset(r, 0, sizeof *r);
    r->max_retries = max_retries;
    r->timeout_s = timeout_s;
    snprintf(r->cursor, sizeof r->cursor, "0-0");
    const char *key = cpt_queue_key(q, CPT_STREAM_DEAD);
    const char *argv[] = {"XREVRANGE", key, "+", "-", "COUNT", "1"};
    redisReply *rep = cpt_redis_command(q->redis, 6, argv, NULL, key, 0, err);
    if (!rep) return cpt_err_prefix(err, "reading the dead stream");
    if (rep->type == REDIS_REPLY_ARRAY && rep->elements == 1 && rep->element[0]->type == REDIS_REPLY_ARRAY &&
        rep->element[0]->elements >= 1 && rep->element[0]->element[0]->type == REDIS_REPLY_STRING)
        snprintf(r->cursor, sizeof r->cursor, "%s", rep->element[0]->element[0]->str);
    freeReplyObject(rep);
    return 0;
}

static const redisReply *field(const redisReply *f, const char *name) {
    for (size_t i = 0; i + 1 < f->elements; i += 2)
        if (f->element[i]->type == REDIS_REPLY_STRING && !strcmp(f->element[i]->str, name) &&
            f->element[i + 1]->type == REDIS_REPLY_STRING)
            return f->element[i + 1];
    return NULL;
}

static int apply(cpt_dead_reader *r, cpt_online_book *b, cpt_group_id wire, const char *why) {
    cpt_group_id base = cpt_online_base_id(wire);
    cpt_book_entry *e = cpt_book_find(b, base);
    uint32_t failures = e ? e->failures + 1 : 0;
    cpt_book_fail_verdict v = cpt_book_failed(b, wire, r->max_retries);
    if (v == CPT_BOOK_FAIL_RETRY)
        cpt_warn("online: group (%" PRIu64 ", %" PRIu64 ") attempt %u failed (%u of %u retries used): %s; "
                 "issuing it again",
                 base.epoch, base.index, cpt_online_attempt(wire), failures, r->max_retries, why);
    else if (v == CPT_BOOK_FAIL_SKIP)
        cpt_warn("online: group (%" PRIu64 ", %" PRIu64 ") skipped after %u failed attempts "
                 "(queue.group_retries = %u): %s",
                 base.epoch, base.index, failures, r->max_retries, why);
    return v != CPT_BOOK_FAIL_IGNORED;
}

static int poll_stream(cpt_dead_reader *r, cpt_queue *q, cpt_online_book *b, cpt_err *err) {
    const char *key = cpt_queue_key(q, CPT_STREAM_DEAD);
    int changed = 0;
    for (;;) {
        char cnt[16];
        snprintf(cnt, sizeof cnt, "%d", DEAD_READ_COUNT);
        const char *argv[] = {"XREAD", "COUNT", cnt, "STREAMS", key, r->cursor};
        redisReply *rep = cpt_redis_command(q->redis, 6, argv, NULL, key, 0, err);
        if (!rep) return cpt_err_prefix(err, "reading the dead stream");
        const redisReply *entries = NULL;
        if (rep->type == REDIS_REPLY_ARRAY && rep->elements == 1 && rep->element[0]->type == REDIS_REPLY_ARRAY &&
            rep->element[0]->elements == 2 && rep->element[0]->element[1]->type == REDIS_REPLY_ARRAY)
            entries = rep->element[0]->element[1];
        size_t n = entries ? entries->elements : 0;
        for (size_t i = 0; i < n; i++) {
            const redisReply *e = entries->element[i];
            if (e->type != REDIS_REPLY_ARRAY || e->elements != 2 || e->element[0]->type != REDIS_REPLY_STRING) continue;
            snprintf(r->cursor, sizeof r->cursor, "%s", e->element[0]->str);
            const redisReply *f = e->element[1];
            if (f->type != REDIS_REPLY_ARRAY) continue;
            const redisReply *m = field(f, "m"), *reason = field(f, "reason"), *from = field(f, "from");
            cpt_msg_header h;
            cpt_err perr;
            /* a message whose envelope does not even name a group (a poison message) belongs to no group */
            if (!m || cpt_msg_peek_header(m->str, m->len, &h, &perr) || !h.has_id || strcmp(h.run, q->run)) continue;
            char why[CPT_ERR_MAX + 64];
            snprintf(why, sizeof why, "dead-lettered from %s: %s", from ? from->str : "?", reason ? reason->str : "?");
            changed += apply(r, b, h.id, why);
        }
        freeReplyObject(rep);
        if (n < DEAD_READ_COUNT) return changed;
    }
}

int cpt_dead_reader_poll(cpt_dead_reader *r, cpt_queue *q, cpt_online_book *b, double now, cpt_err *err) {
    int changed = poll_stream(r, q, b, err);
    if (changed < 0) return -1;
    if (r->timeout_s <= 0) return changed;
    for (size_t i = 0; i < b->n; i++) {
        cpt_book_entry *e = &b->e[i];
        if (e->state != CPT_BOOK_IN_FLIGHT || e->issued_at <= 0 || now - e->issued_at <= r->timeout_s) continue;
        char why[128];
        snprintf(why, sizeof why, "no answer within queue.group_timeout_s = %g s", r->timeout_s);
        size_t before = b->n;
        changed += apply(r, b, cpt_online_wire_id(e->id, e->attempt), why);
        if (b->n < before) i--; /* skipped: the next entry moved into slot i */
    }
    return changed;
}
