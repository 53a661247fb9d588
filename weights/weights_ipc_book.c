/* cuda_ipc slot bookkeeping (weights/weights_ipc_book.h). */
#include "weights/weights_ipc_book.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void slot_keys(const char *run, int slot, char *k, char *kr, size_t cap) {
    snprintf(k, cap, "cpt:%s:ipc:slot:%d", run, slot);
    snprintf(kr, cap, "cpt:%s:ipc:slot:%d:readers", run, slot);
}

/* KEYS[1] slot hash, KEYS[2] readers; ARGV[1] now */
static const char CLAIM[] =
    "redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', '(' .. ARGV[1]) "
    "local n = redis.call('ZCARD', KEYS[2]) "
    "if n > 0 then return -n end "
    "redis.call('HSET', KEYS[1], 'state', 'writing') "
    "return 1";

/* KEYS[1] slot hash, KEYS[2] readers; ARGV[1] version, ARGV[2] worker, ARGV[3] deadline */
static const char ENTER[] =
    "local s = redis.call('HMGET', KEYS[1], 'state', 'version') "
    "if s[1] ~= 'ready' or s[2] ~= ARGV[1] then return 0 end "
    "redis.call('ZADD', KEYS[2], ARGV[3], ARGV[2]) "
    "return 1";

static int eval_int(cpt_redis *r, const char *script, int nkeys, const char **keys, int nargs, const char **args,
                    long long *out, cpt_err *err) {
    const char *argv[12];
    char nk[8];
    snprintf(nk, sizeof nk, "%d", nkeys);
    int argc = 0;
    argv[argc++] = "EVAL";
    argv[argc++] = script;
    argv[argc++] = nk;
    for (int i = 0; i < nkeys; i++) argv[argc++] = keys[i];
    for (int i = 0; i < nargs; i++) argv[argc++] = args[i];
    return cpt_redis_integer(r, argc, argv, keys[0], out, err);
}

int cpt_ipc_book_claim(cpt_redis *r, const char *run, int slot, int64_t now_ms, long *readers, cpt_err *err) {
    char k[256], kr[256], now[32];
    slot_keys(run, slot, k, kr, sizeof k);
    snprintf(now, sizeof now, "%" PRId64, now_ms);
    const char *keys[] = {k, kr}, *args[] = {now};
    long long v;
    if (eval_int(r, CLAIM, 2, keys, 1, args, &v, err)) return cpt_err_prefix(err, "cuda_ipc slot %d claim", slot);
    if (readers) *readers = v < 0 ? (long)-v : 0;
    return v > 0;
}

int cpt_ipc_book_publish(cpt_redis *r, const char *run, int slot, uint64_t version, cpt_err *err) {
    char k[256], kr[256], v[32];
    slot_keys(run, slot, k, kr, sizeof k);
    snprintf(v, sizeof v, "%" PRIu64, version);
    const char *argv[] = {"HSET", k, "state", "ready", "version", v};
    long long n;
    return cpt_redis_integer(r, 6, argv, k, &n, err);
}

int cpt_ipc_book_enter(cpt_redis *r, const char *run, int slot, uint64_t version, const char *worker,
                       int64_t now_ms, int64_t lease_ms, cpt_err *err) {
    char k[256], kr[256], v[32], dl[32];
    slot_keys(run, slot, k, kr, sizeof k);
    snprintf(v, sizeof v, "%" PRIu64, version);
    snprintf(dl, sizeof dl, "%" PRId64, now_ms + lease_ms);
    const char *keys[] = {k, kr}, *args[] = {v, worker, dl};
    long long got;
    if (eval_int(r, ENTER, 2, keys, 3, args, &got, err)) return cpt_err_prefix(err, "cuda_ipc slot %d enter", slot);
    return got == 1;
}

int cpt_ipc_book_leave(cpt_redis *r, const char *run, int slot, const char *worker, uint64_t version, cpt_err *err) {
    char k[256], kr[256], ka[256], v[32];
    slot_keys(run, slot, k, kr, sizeof k);
    snprintf(ka, sizeof ka, "cpt:%s:ipc:acks", run);
    snprintf(v, sizeof v, "%" PRIu64, version);
    const char *a1[] = {"ZREM", kr, worker};
    const char *a2[] = {"HSET", ka, worker, v};
    cpt_redis_cmd cmds[] = {{3, a1, NULL, kr}, {4, a2, NULL, ka}};
    redisReply *reps[2];
    if (cpt_redis_pipeline(r, 2, cmds, reps, err)) return -1;
    freeReplyObject(reps[0]);
    freeReplyObject(reps[1]);
    return 0;
}

int cpt_ipc_book_acked(cpt_redis *r, const char *run, const char *worker, uint64_t *version, cpt_err *err) {
    char ka[256];
    snprintf(ka, sizeof ka, "cpt:%s:ipc:acks", run);
    const char *argv[] = {"HGET", ka, worker};
    redisReply *rep = cpt_redis_command(r, 3, argv, NULL, ka, 0, err);
    if (!rep) return -1;
    int found = rep->type == REDIS_REPLY_STRING;
    if (found) *version = strtoull(rep->str, NULL, 10);
    freeReplyObject(rep);
    return found;
}
