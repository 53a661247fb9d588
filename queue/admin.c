/* Operator actions on a run's queue (queue/admin.h). */
#include "queue/admin.h"

#include <stdio.h>
#include <string.h>

/* Moves one dead entry back to its stream atomically (false when it is gone). */
static const char REQUEUE_SCRIPT[] =
    "if #redis.call('XRANGE', KEYS[1], ARGV[1], ARGV[1]) == 0 then return false end\n"
    "local id = redis.call('XADD', KEYS[2], '*', 'm', ARGV[2])\n"
    "redis.call('XDEL', KEYS[1], ARGV[1])\n"
    "return id\n";

static redisReply *entry_field(redisReply *fields, const char *name) {
    for (size_t i = 0; fields && fields->type == REDIS_REPLY_ARRAY && i + 1 < fields->elements; i += 2)
        if (!strcmp(fields->element[i]->str, name)) return fields->element[i + 1];
    return NULL;
}

int cpt_queue_discover_runs(cpt_redis *r, char names[][CPT_RUN_ID_MAX], int max, cpt_err *err) {
    int n = 0;
    char cursor[32] = "0";
    do {
        const char *argv[] = {"SCAN", cursor, "MATCH", "cpt:*:*", "COUNT", "1000"};
        redisReply *rep = cpt_redis_command(r, 6, argv, NULL, "cpt:*:*", 0, err);
        if (!rep) return -1;
        if (rep->type != REDIS_REPLY_ARRAY || rep->elements != 2) { freeReplyObject(rep); return cpt_errf(err, "SCAN: unexpected reply"); }
        snprintf(cursor, sizeof cursor, "%s", rep->element[0]->str);
        redisReply *keys = rep->element[1];
        for (size_t i = 0; i < keys->elements; i++) {
            const char *k = keys->element[i]->str + 4;
            const char *colon = strrchr(k, ':');
            if (!colon || colon == k || (size_t)(colon - k) >= CPT_RUN_ID_MAX) continue;
            char run[CPT_RUN_ID_MAX];
            memcpy(run, k, (size_t)(colon - k));
            run[colon - k] = '\0';
            if (!cpt_run_id_valid(run)) continue;
            int dup = 0;
            for (int j = 0; j < n; j++) dup |= !strcmp(names[j], run);
            if (!dup && n < max) snprintf(names[n++], CPT_RUN_ID_MAX, "%s", run);
        }
        freeReplyObject(rep);
    } while (strcmp(cursor, "0"));
    return n;
}

int cpt_queue_dead_drop(cpt_queue *q, const char *id, cpt_err *err) {
    const char *dead = cpt_queue_key(q, CPT_STREAM_DEAD);
    const char *argv[] = {"XDEL", dead, id};
    long long n = 0;
    if (cpt_redis_integer(q->redis, 3, argv, dead, &n, err)) return -1;
    if (!n) return cpt_errf(err, "%s has no entry %s", dead, id);
    return 0;
}

int cpt_queue_dead_requeue(cpt_queue *q, const char *id, char *key_out, size_t key_cap, char *new_id, size_t id_cap,
                           cpt_err *err) {
    const char *dead = cpt_queue_key(q, CPT_STREAM_DEAD);
    const char *argv[] = {"XRANGE", dead, id, id};
    redisReply *r = cpt_redis_command(q->redis, 4, argv, NULL, dead, 0, err);
    if (!r) return -1;
    if (r->elements != 1) { freeReplyObject(r); return cpt_errf(err, "%s has no entry %s", dead, id); }
    redisReply *from = entry_field(r->element[0]->element[1], "from"), *m = entry_field(r->element[0]->element[1], "m");
    int s = from ? cpt_stream_from_name(from->str) : -1;
    if (s < 0 || s > CPT_STREAM_SCORED || !m) {
        freeReplyObject(r);
        return cpt_errf(err, "%s %s: no stream to requeue to (from field missing or unknown)", dead, id);
    }
    const char *key = cpt_queue_key(q, (cpt_stream)s);
    const char *ev[] = {"EVAL", REQUEUE_SCRIPT, "2", dead, key, id, m->str};
    size_t lens[] = {4, sizeof REQUEUE_SCRIPT - 1, 1, strlen(dead), strlen(key), strlen(id), m->len};
    redisReply *x = cpt_redis_command(q->redis, 7, ev, lens, key, 0, err);
    freeReplyObject(r);
    if (!x) return -1;
    int ok = x->type == REDIS_REPLY_STRING;
    if (ok) {
        snprintf(key_out, key_cap, "%s", key);
        snprintf(new_id, id_cap, "%s", x->str);
    }
    freeReplyObject(x);
    return ok ? 0 : cpt_errf(err, "%s %s vanished while requeueing", dead, id);
}
