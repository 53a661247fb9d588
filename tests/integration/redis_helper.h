/* Integration-test helper: a private redis-server in a fresh temp folder (unix socket, AOF), and a queue on it.
 * The folder is short (/tmp/cpt-q-XXXXXX) because unix socket paths are limited to 107 bytes. */
#ifndef CPT_TESTS_REDIS_HELPER_H
#define CPT_TESTS_REDIS_HELPER_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fs.h"
#include "queue/redis_server.h"
#include "queue/stream.h"

typedef struct test_redis {
    char dir[64];
    cpt_redis_server srv;
} test_redis;

/* Starts a server in a new temp folder; exits the test on failure (nothing else can run without it). */
static inline void test_redis_start(test_redis *t, const char *appendfsync) {
    snprintf(t->dir, sizeof t->dir, "/tmp/cpt-q-XXXXXX");
    if (!mkdtemp(t->dir)) { perror("mkdtemp"); exit(1); }
    cpt_redis_server_opts o = {.dir = t->dir, .appendfsync = appendfsync};
    cpt_err err;
    if (cpt_redis_server_start(&o, &t->srv, &err)) {
        fprintf(stderr, "starting redis-server: %s\n", err.msg);
        exit(1);
    }
}

/* Restarts on the same folder (after a kill): the AOF is replayed. */
static inline void test_redis_restart(test_redis *t, const char *appendfsync) {
    cpt_redis_server_opts o = {.dir = t->dir, .appendfsync = appendfsync};
    cpt_err err;
    if (cpt_redis_server_start(&o, &t->srv, &err)) {
        fprintf(stderr, "restarting redis-server: %s\n", err.msg);
        exit(1);
    }
}

static inline void test_redis_stop(test_redis *t) {
    cpt_err err;
    if (cpt_redis_server_stop(&t->srv, &err)) fprintf(stderr, "%s\n", err.msg);
    cpt_remove_tree(t->dir, &err);
}

static inline cpt_queue *test_queue_open(const test_redis *t, const char *run, int64_t max_len, int claim_idle_ms) {
    cpt_queue_opts o = {.url = t->srv.url, .run = run, .max_len = max_len, .claim_idle_ms = claim_idle_ms,
                        .block_ms = 200, .add_timeout_s = 60};
    cpt_err err;
    cpt_queue *q = cpt_queue_open(&o, &err);
    if (!q) {
        fprintf(stderr, "opening queue: %s\n", err.msg);
        exit(1);
    }
    return q;
}

/* A raw command for assertions: the integer reply, or -1. */
static inline long long test_int(cpt_queue *q, int argc, const char **argv) {
    long long v = -1;
    cpt_err err;
    if (cpt_redis_integer(q->redis, argc, argv, argv[1], &v, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return -1;
    }
    return v;
}

static inline long long test_xlen(cpt_queue *q, cpt_stream s) {
    const char *argv[] = {"XLEN", cpt_queue_key(q, s)};
    return test_int(q, 2, argv);
}

/* Number of pending (delivered, unacked) entries of a group. */
static inline long long test_pending(cpt_queue *q, cpt_stream s, const char *group) {
    const char *argv[] = {"XPENDING", cpt_queue_key(q, s), group};
    cpt_err err;
    redisReply *r = cpt_redis_command(q->redis, 3, argv, NULL, argv[1], 0, &err);
    if (!r) { fprintf(stderr, "%s\n", err.msg); return -1; }
    long long n = r->type == REDIS_REPLY_ARRAY && r->elements >= 1 ? r->element[0]->integer : -1;
    freeReplyObject(r);
    return n;
}

/* Number of dead entries whose reason contains text. */
static inline int test_dead_count(cpt_queue *q, const char *text) {
    const char *argv[] = {"XRANGE", cpt_queue_key(q, CPT_STREAM_DEAD), "-", "+"};
    cpt_err err;
    redisReply *r = cpt_redis_command(q->redis, 4, argv, NULL, argv[1], 0, &err);
    if (!r) { fprintf(stderr, "%s\n", err.msg); return -1; }
    int n = 0;
    for (size_t i = 0; r->type == REDIS_REPLY_ARRAY && i < r->elements; i++) {
        redisReply *f = r->element[i]->element[1];
        for (size_t k = 0; k + 1 < f->elements; k += 2)
            if (!strcmp(f->element[k]->str, "reason") && strstr(f->element[k + 1]->str, text)) n++;
    }
    freeReplyObject(r);
    return n;
}

#endif
