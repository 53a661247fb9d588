/* The env worker (see env_worker.h). The env streams are not among the queue's fixed streams (queue/stream.h), so
 * this file speaks to them with plain Redis commands over the queue's connection, in the same manner: a consumer
 * group, XAUTOCLAIM for abandoned entries, dead-lettering with the reason, and the result added and the input acked
 * in one transaction. */
#include "reward/env_worker.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/fs.h"
#include "queue/conn.h"
#include "queue/env_msg.h"
#include "queue/stream.h"
#include "reward/env.h"

typedef struct {
    cpt_queue *q;
    const char *me;
    char run[CPT_RUN_ID_MAX];
    char key[CPT_ENV_KEY_MAX]; /* cpt:RUN:env */
    char cursor[CPT_STREAM_ID_MAX];
    double last_claim;
    cpt_env_worker_stats *stats;
    char *obs; /* CPT_ENV_MAX_TEXT + 1 bytes: the observation in hand */
} env_loop;

static int create_group(env_loop *L, cpt_err *err) {
    const char *argv[] = {"XGROUP", "CREATE", L->key, CPT_ENV_GROUP, "0", "MKSTREAM"};
    cpt_err e2;
    redisReply *rep = cpt_redis_command(L->q->redis, 6, argv, NULL, L->key, 0, &e2);
    if (rep) {
        freeReplyObject(rep);
        return 0;
    }
    if (strstr(e2.msg, "BUSYGROUP")) return 0; /* another env worker made it first */
    *err = e2;
    return -1;
}

/* Moves m to the dead stream with the reason, acks it and deletes it from the env stream, atomically (the queue's
 * dead-letter format). */
static int dead_letter(env_loop *L, const cpt_queue_msg *m, const char *reason, cpt_err *err) {
    static const char script[] =
        "redis.call('XADD', KEYS[1], '*', 'from', ARGV[1], 'id', ARGV[2], 'group', ARGV[3], 'reason', ARGV[4],"
        " 'm', ARGV[5])\n"
        "redis.call('XACK', KEYS[2], ARGV[3], ARGV[2])\n"
        "return redis.call('XDEL', KEYS[2], ARGV[2])\n";
    const char *dead = cpt_queue_key(L->q, CPT_STREAM_DEAD);
    const char *argv[] = {"EVAL", script, "2", dead, L->key, "env", m->id, CPT_ENV_GROUP, reason,
                          m->data ? m->data : ""};
    size_t lens[10];
    for (int i = 0; i < 9; i++) lens[i] = strlen(argv[i]);
    lens[9] = m->data ? m->len : 0;
    redisReply *rep = cpt_redis_command(L->q->redis, 10, argv, lens, dead, 0, err);
    if (!rep) return cpt_err_prefix(err, "dead-lettering %s %s", L->key, m->id);
    freeReplyObject(rep);
    L->stats->dead++;
    cpt_warn("cpt-env %s: request %s -> dead: %s", L->me, m->id, reason);
    return 0;
}

static long deliveries_of(env_loop *L, const char *id, cpt_err *err) {
    const char *argv[] = {"XPENDING", L->key, CPT_ENV_GROUP, id, id, "1"};
    redisReply *rep = cpt_redis_command(L->q->redis, 6, argv, NULL, L->key, 0, err);
    if (!rep) return -1;
    long n = 0;
    if (rep->type == REDIS_REPLY_ARRAY && rep->elements == 1 && rep->element[0]->type == REDIS_REPLY_ARRAY &&
        rep->element[0]->elements == 4 && rep->element[0]->element[3]->type == REDIS_REPLY_INTEGER)
        n = (long)rep->element[0]->element[3]->integer;
    freeReplyObject(rep);
    return n;
}

/* The idle time past which another consumer's pending request is ours to take: claim_idle_ms, or less early in an
 * attempt that follows another (see queue/stream.c: entries delivered before this attempt began have no owner). */
static long claim_min_idle_ms(const cpt_queue *q) {
    if (q->orphan_before <= 0) return q->claim_idle_ms;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    double since_ms = ((double)now.tv_sec + now.tv_nsec / 1e9 - q->orphan_before) * 1000.0 + 500.0;
    if (since_ms < 0) since_ms = 0;
    return since_ms < q->claim_idle_ms ? (long)since_ms : q->claim_idle_ms;
}

/* One abandoned request (XAUTOCLAIM), if any: 1 with *m, 0 none, -1 error. */
static int claim_one(env_loop *L, cpt_queue_msg *m, cpt_err *err) {
    char idle[24];
    snprintf(idle, sizeof idle, "%ld", claim_min_idle_ms(L->q));
    if (!L->cursor[0]) snprintf(L->cursor, sizeof L->cursor, "0-0");
    const char *argv[] = {"XAUTOCLAIM", L->key, CPT_ENV_GROUP, L->me, idle, L->cursor, "COUNT", "1"};
    redisReply *rep = cpt_redis_command(L->q->redis, 8, argv, NULL, L->key, 0, err);
    if (!rep) return -1;
    int got = 0;
    if (rep->type == REDIS_REPLY_ARRAY && rep->elements >= 2 && rep->element[0]->type == REDIS_REPLY_STRING &&
        rep->element[1]->type == REDIS_REPLY_ARRAY) {
        snprintf(L->cursor, sizeof L->cursor, "%s", rep->element[0]->str);
        redisReply *entries = rep->element[1];
        for (size_t i = 0; i < entries->elements && !got; i++) {
            if (entries->element[i]->type == REDIS_REPLY_NIL) continue;
            if (cpt_queue_msg_from_entry(entries->element[i], m) == 0) {
                m->claimed = 1;
                got = 1;
            } else {
                cpt_queue_msg_free(m);
            }
        }
    }
    freeReplyObject(rep);
    return got;
}

/* The next request: an abandoned one first (looked for every claim_idle_ms / 4, 50 ms .. 1 s), else a new one
 * (blocking up to block_ms). 1 with *m, 0 none, -1 error. */
static int next_request(env_loop *L, cpt_queue_msg *m, cpt_err *err) {
    double every = L->q->claim_idle_ms / 4000.0;
    if (every < 0.05) every = 0.05;
    if (every > 1) every = 1;
    double now = cpt_now();
    if (now - L->last_claim >= every) {
        L->last_claim = now;
        int got = claim_one(L, m, err);
        if (got) {
            if (got > 0) L->stats->claimed++;
            return got;
        }
    }
    char blk[16];
    snprintf(blk, sizeof blk, "%d", L->q->block_ms);
    const char *argv[] = {"XREADGROUP", "GROUP", CPT_ENV_GROUP, L->me, "COUNT", "1", "BLOCK", blk,
                          "STREAMS", L->key, ">"};
    redisReply *rep = cpt_redis_command(L->q->redis, 11, argv, NULL, L->key, L->q->block_ms, err);
    if (!rep) return -1;
    int got = 0;
    if (rep->type == REDIS_REPLY_ARRAY && rep->elements == 1 && rep->element[0]->type == REDIS_REPLY_ARRAY &&
        rep->element[0]->elements == 2 && rep->element[0]->element[1]->type == REDIS_REPLY_ARRAY &&
        rep->element[0]->element[1]->elements >= 1) {
        if (cpt_queue_msg_from_entry(rep->element[0]->element[1]->element[0], m) == 0)
            got = 1;
        else
            cpt_queue_msg_free(m);
    }
    freeReplyObject(rep);
    return got;
}

/* XADD the reply to the rollout worker's stream, XACK the request and XDEL it, in one transaction: the env group is
 * the stream's only reader, so an answered request is never needed again and the stream stays as long as the
 * requests in flight. */
static int send_reply(env_loop *L, const cpt_queue_msg *m, const cpt_env_request *req, const cpt_buf *reply,
                      cpt_err *err) {
    char rkey[CPT_ENV_KEY_MAX], maxlen[24];
    if (!cpt_env_reply_stream(L->run, req->worker, rkey))
        return cpt_errf(err, "request %s: worker \"%s\" is not a valid name", m->id, req->worker);
    snprintf(maxlen, sizeof maxlen, "%d", CPT_ENV_REPLY_MAXLEN);
    const char *multi[] = {"MULTI"}, *exec[] = {"EXEC"};
    const char *xadd[] = {"XADD", rkey, "MAXLEN", "~", maxlen, "*", "m", reply->data};
    size_t xadd_lens[8];
    for (int i = 0; i < 7; i++) xadd_lens[i] = strlen(xadd[i]);
    xadd_lens[7] = reply->len;
    const char *xack[] = {"XACK", L->key, CPT_ENV_GROUP, m->id};
    const char *xdel[] = {"XDEL", L->key, m->id};
    cpt_redis_cmd cmds[5] = {{1, multi, NULL, NULL}, {8, xadd, xadd_lens, rkey}, {4, xack, NULL, L->key},
                             {3, xdel, NULL, L->key}, {1, exec, NULL, NULL}};
    redisReply *reps[5] = {0};
    if (cpt_redis_pipeline(L->q->redis, 5, cmds, reps, err)) return cpt_err_prefix(err, "replying to %s", rkey);
    int ok = reps[4] && reps[4]->type == REDIS_REPLY_ARRAY;
    for (int i = 0; i < 5; i++)
        if (reps[i]) freeReplyObject(reps[i]);
    return ok ? 0 : cpt_errf(err, "replying to %s: the transaction did not run", rkey);
}

static void heartbeat(env_loop *L, double calls_per_s, double busy) {
    cpt_heartbeat_msg h;
    memset(&h, 0, sizeof h);
    snprintf(h.run, sizeof h.run, "%s", L->run);
    snprintf(h.worker, sizeof h.worker, "%s", L->me);
    snprintf(h.role, sizeof h.role, "env");
    if (gethostname(h.host, sizeof h.host - 1)) snprintf(h.host, sizeof h.host, "unknown");
    h.tokens_per_s = calls_per_s >= 0 && isfinite(calls_per_s) ? calls_per_s : 0;
    h.occupancy = busy < 0 ? 0 : busy > 1 ? 1 : busy;
    cpt_err err;
    if (cpt_queue_heartbeat(L->q, &h, &err)) cpt_warn("cpt-env %s: heartbeat: %s", L->me, err.msg);
}

/* Answers one request; a request that cannot be answered goes to dead. */
static void handle(env_loop *L, cpt_env *env, const cpt_queue_msg *m) {
    cpt_err err;
    char reason[CPT_ERR_MAX + 64];
    if (m->claimed) {
        long d = deliveries_of(L, m->id, &err);
        if (d > L->q->max_deliveries) {
            snprintf(reason, sizeof reason, "delivered %ld times without an ack (max %d)", d, L->q->max_deliveries);
            if (dead_letter(L, m, reason, &err)) cpt_warn("cpt-env %s: %s", L->me, err.msg);
            return;
        }
    }
    cpt_env_request req;
    memset(&req, 0, sizeof req);
    if (!m->data || cpt_env_request_decode(m->data, m->len, &req, &err)) {
        snprintf(reason, sizeof reason, "cpt-env %s: malformed env request: %s", L->me,
                 m->data ? err.msg : "no \"m\" field");
        if (dead_letter(L, m, reason, &err)) cpt_warn("cpt-env %s: %s", L->me, err.msg);
        cpt_env_request_free(&req);
        return;
    }
    if (strcmp(req.run, L->run)) {
        snprintf(reason, sizeof reason, "cpt-env %s: env request of run \"%s\" in the stream of run \"%s\"", L->me,
                 req.run, L->run);
        if (dead_letter(L, m, reason, &err)) cpt_warn("cpt-env %s: %s", L->me, err.msg);
        cpt_env_request_free(&req);
        return;
    }
    char *obs = L->obs;
    int ok = 0;
    if (cpt_env_answer(env, req.call, req.extra, obs, CPT_ENV_MAX_TEXT + 1, &ok, &err)) {
        /* no sandbox could start (fork or pipe failed): the request stays pending and is delivered again */
        cpt_warn("cpt-env %s: request %s: %s (left pending)", L->me, m->id, err.msg);
        cpt_env_request_free(&req);
        sleep(1);
        return;
    }
    cpt_env_reply rep;
    memset(&rep, 0, sizeof rep);
    snprintf(rep.run, sizeof rep.run, "%s", L->run);
    rep.id = req.id;
    rep.sample = req.sample;
    rep.turn = req.turn;
    rep.ok = ok;
    rep.observation = obs;
    snprintf(rep.env, sizeof rep.env, "%s", L->me);
    cpt_buf buf = {0};
    if (cpt_env_reply_encode(&rep, &buf, &err)) {
        snprintf(reason, sizeof reason, "cpt-env %s: encoding the reply: %s", L->me, err.msg);
        if (dead_letter(L, m, reason, &err)) cpt_warn("cpt-env %s: %s", L->me, err.msg);
    } else if (send_reply(L, m, &req, &buf, &err)) {
        cpt_warn("cpt-env %s: %s (left pending: delivered again)", L->me, err.msg);
    } else {
        L->stats->answered++;
        if (!ok) L->stats->failed++;
        cpt_debug("cpt-env %s: (%llu, %llu) sample %u turn %u -> %s: %.80s", L->me, (unsigned long long)req.id.epoch,
                  (unsigned long long)req.id.index, req.sample, req.turn, req.worker, obs);
    }
    cpt_buf_free(&buf);
    cpt_env_request_free(&req);
}

int cpt_env_worker_run(const cpt_config *cfg, const char *worker_id, volatile sig_atomic_t *stop,
                       cpt_env_worker_stats *stats, cpt_err *err) {
    cpt_env_worker_stats local;
    if (!stats) stats = &local;
    memset(stats, 0, sizeof *stats);
    cpt_queue_conn conn;
    env_loop L = {.me = worker_id, .stats = stats};
    int rc = -1;
    cpt_env *env = cpt_env_open(cfg, err);
    if (!env) return -1;
    if (!(L.obs = malloc(CPT_ENV_MAX_TEXT + 1))) {
        cpt_errf(err, "out of memory");
        goto done;
    }
    if (!(L.q = cpt_queue_open_for_worker(cfg, stop, &conn, err))) goto done;
    snprintf(L.run, sizeof L.run, "%s", conn.run);
    if (!cpt_env_stream(L.run, L.key)) {
        cpt_errf(err, "run id \"%s\" makes no env stream name", L.run);
        goto done;
    }
    if (create_group(&L, err)) goto done;
    cpt_info("cpt-env %s: run %s, environment %s, reading %s", worker_id, L.run, cpt_env_name(env), L.key);
    const double hb_every = cpt_cfg_float(cfg, "env.heartbeat_s");
    double t_hb = 0, t_win = cpt_now(), busy_s = 0;
    long win_calls = 0;
    while (!*stop) {
        double now = cpt_now();
        if (now - t_hb >= hb_every) {
            double dt = now - t_win > 1e-9 ? now - t_win : 1e-9;
            heartbeat(&L, win_calls / dt, busy_s / dt);
            t_hb = t_win = now;
            win_calls = 0;
            busy_s = 0;
        }
        cpt_queue_msg m;
        memset(&m, 0, sizeof m);
        cpt_err rerr;
        int got = next_request(&L, &m, &rerr);
        if (got < 0) {
            if (*stop) break;
            cpt_warn("cpt-env %s: reading %s: %s (retrying)", worker_id, L.key, rerr.msg);
            sleep(1);
            continue;
        }
        if (got == 0) continue;
        double t0 = cpt_now();
        handle(&L, env, &m);
        cpt_queue_msg_free(&m);
        busy_s += cpt_now() - t0;
        win_calls++;
    }
    cpt_info("cpt-env %s: stopping: %ld calls answered (%ld failed), %ld dead, %ld claimed", worker_id,
             stats->answered, stats->failed, stats->dead, stats->claimed);
    cpt_err gerr;
    if (cpt_queue_worker_gone(L.q, worker_id, &gerr))
        cpt_warn("cpt-env %s: removing its heartbeat: %s", worker_id, gerr.msg);
    rc = 0;
done:
    cpt_queue_close(L.q);
    cpt_env_close(env);
    free(L.obs);
    return rc;
}
