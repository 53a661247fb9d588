/* Queue throughput: groups/s and MB/s through cpt's client (encode + bounded XADD script; XREADGROUP + strict
 * decode + XACK) for rollout groups of about 1 KB, 64 KB and 1 MB, beside redis-benchmark's XADD rate with the
 * same payload size on the same private redis-server (unix socket, AOF everysec), one client, no pipelining;
 * medians of 3 alternating rounds.
 * Usage: queue_bench [--n-scale F]   (run through bench/queue_bench.sh) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/fs.h"
#include "queue/redis_server.h"
#include "queue/stream.h"

#define REPS 3

/* A rollout group of one completion whose encoding is about `bytes` long. */
static cpt_rollout_group make_group(uint64_t index, size_t bytes) {
    cpt_rollout_group g;
    memset(&g, 0, sizeof g);
    snprintf(g.run, sizeof g.run, "bench");
    g.id.index = index;
    static int32_t prompt[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
    g.prompt = prompt;
    g.n_prompt = 16;
    g.n_completions = 1;
    static cpt_completion c;
    size_t tokens = bytes > 400 ? (bytes - 330) / 8 : 8;
    c.n_tokens = (uint32_t)tokens;
    c.tokens = malloc(tokens * sizeof(int32_t));
    c.logprobs = malloc(tokens * sizeof(float));
    for (size_t i = 0; i < tokens; i++) {
        c.tokens[i] = (int32_t)((i * 2654435761u) % 151000);
        c.logprobs[i] = -(float)(i % 1000) / 1000.0f;
    }
    g.completions = &c;
    g.weight_version = 1;
    snprintf(g.worker, sizeof g.worker, "bench");
    return g;
}

static void free_group(cpt_rollout_group *g) {
    free(g->completions[0].tokens);
    free(g->completions[0].logprobs);
}

/* redis-benchmark's XADD requests/s with a size-byte payload, or -1. The payload comes through -x (stdin), which
 * stops at a newline, so it is printable text without one. */
static double redis_benchmark_xadd(const char *sock, const char *dir, size_t size, int n) {
    char path[256], cmd[1024];
    snprintf(path, sizeof path, "%s/payload", dir);
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    for (size_t i = 0; i < size; i++) fputc("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"[(i * 2654435761u >> 7) & 63], f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "redis-benchmark -s %s -c 1 -n %d --csv -x XADD cpt:bench:rb '*' m < %s 2>&1", sock, n,
             path);
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    char line[4096];
    double rps = -1;
    while (fgets(line, sizeof line, p))
        if (!strncmp(line, "\"XADD", 5)) {
            char *q = strstr(line, "\",\"");
            if (q) rps = atof(q + 3);
        }
    pclose(p);
    unlink(path);
    return rps;
}

/* The same bytes with a bare XADD through the same client: no bound, no decode; separates the cost of the
 * hiredis client from that of the bounded-add script. */
static double raw_xadd(cpt_queue *q, const char *data, size_t len, int n) {
    const char *key = "cpt:bench:raw";
    const char *argv[] = {"XADD", key, "*", "m", data};
    size_t lens[] = {4, strlen(key), 1, 1, len};
    cpt_err err;
    double t0 = cpt_now();
    for (int i = 0; i < n; i++) {
        redisReply *r = cpt_redis_command(q->redis, 5, argv, lens, key, 0, &err);
        if (!r) { fprintf(stderr, "%s\n", err.msg); return -1; }
        freeReplyObject(r);
    }
    double rate = n / (cpt_now() - t0);
    const char *del[] = {"DEL", key};
    cpt_redis_integer(q->redis, 2, del, key, NULL, &err);
    return rate;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int del_key(cpt_queue *q, const char *key) {
    const char *argv[] = {"DEL", key};
    cpt_err err;
    return cpt_redis_integer(q->redis, 2, argv, key, NULL, &err);
}

int main(int argc, char **argv) {
    double scale = 1;
    if (argc == 3 && !strcmp(argv[1], "--n-scale")) scale = atof(argv[2]);
    if (scale <= 0) scale = 1;
    char dir[] = "/tmp/cpt-qb-XXXXXX";
    if (!mkdtemp(dir)) { perror("mkdtemp"); return 1; }
    cpt_redis_server srv;
    cpt_redis_server_opts so = {.dir = dir, .appendfsync = "everysec"};
    cpt_err err;
    if (cpt_redis_server_start(&so, &srv, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }

    const size_t sizes[] = {1 << 10, 64 << 10, 1 << 20};
    const int counts[] = {20000, 2000, 200};
    printf("%-6s %6s %8s | %10s %7s | %10s %7s | %10s %7s | %14s %7s\n", "size", "n", "bytes", "cpt add/s", "MB/s",
           "cpt take/s", "MB/s", "bare XADD/s", "MB/s", "redis-bench/s", "MB/s");
    int rc = 0;
    for (int k = 0; k < 3 && rc == 0; k++) {
        int n = (int)(counts[k] * scale);
        if (n < 10) n = 10;
        cpt_queue_opts o = {.url = srv.url, .run = "bench", .max_len = n + 1, .block_ms = 100};
        cpt_queue *q = cpt_queue_open(&o, &err);
        if (!q) { fprintf(stderr, "%s\n", err.msg); rc = 1; break; }
        cpt_queue_create_group(q, CPT_STREAM_ROLLOUTS, "reward", &err);
        cpt_rollout_group g = make_group(0, sizes[k]);
        size_t msg_bytes = 0;
        /* The box is shared and noisy: alternate ours and redis-benchmark REPS times, report medians. */
        double add[REPS], take[REPS], rb[REPS], raw[REPS];
        cpt_buf sample;
        if (cpt_rollout_group_encode(&g, &sample, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
        for (int rep = 0; rep < REPS && rc == 0; rep++) {
            if (rep % 2) { /* who goes first alternates too: fresh memory costs the first one more */
                rb[rep] = redis_benchmark_xadd(srv.sock, dir, msg_bytes ? msg_bytes : sizes[k], n);
                del_key(q, "cpt:bench:rb");
            }
            double t0 = cpt_now();
            for (int i = 0; i < n; i++) {
                g.id.index = (uint64_t)i;
                cpt_buf b;
                if (cpt_rollout_group_encode(&g, &b, &err) ||
                    cpt_queue_add(q, CPT_STREAM_ROLLOUTS, b.data, b.len, NULL, &err)) {
                    fprintf(stderr, "%s\n", err.msg);
                    return 1;
                }
                msg_bytes = b.len;
                cpt_buf_free(&b);
            }
            add[rep] = n / (cpt_now() - t0);
            t0 = cpt_now();
            int got = 0;
            cpt_queue_item it;
            while (got < n && cpt_queue_next(q, CPT_STREAM_ROLLOUTS, "reward", "b", &it, &err) == 1) {
                if (cpt_queue_done(q, &it, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
                cpt_queue_item_free(&it);
                got++;
            }
            take[rep] = got / (cpt_now() - t0);
            if (got != n) { fprintf(stderr, "consumed %d of %d: %s\n", got, n, err.msg); rc = 1; }
            /* a fresh stream for the next round, same as redis-benchmark's */
            del_key(q, cpt_queue_key(q, CPT_STREAM_ROLLOUTS));
            cpt_queue_create_group(q, CPT_STREAM_ROLLOUTS, "reward", &err);
            cpt_seen_free(&q->seen[CPT_STREAM_ROLLOUTS]);
            if (rep % 2 == 0) {
                rb[rep] = redis_benchmark_xadd(srv.sock, dir, msg_bytes, n);
                del_key(q, "cpt:bench:rb");
            }
            raw[rep] = raw_xadd(q, sample.data, sample.len, n);
        }
        qsort(add, REPS, sizeof *add, cmp_double);
        qsort(take, REPS, sizeof *take, cmp_double);
        qsort(rb, REPS, sizeof *rb, cmp_double);
        qsort(raw, REPS, sizeof *raw, cmp_double);
        double a = add[REPS / 2], t = take[REPS / 2], r = rb[REPS / 2], x = raw[REPS / 2];
        cpt_buf_free(&sample);
        const char *label = k == 0 ? "1 KB" : k == 1 ? "64 KB" : "1 MB";
        printf("%-6s %6d %8zu | %10.0f %7.1f | %10.0f %7.1f | %10.0f %7.1f | %14.0f %7.1f\n", label, n, msg_bytes, a,
               a * msg_bytes / 1e6, t, t * msg_bytes / 1e6, x, x * msg_bytes / 1e6, r, r * msg_bytes / 1e6);
        fflush(stdout);
        free_group(&g);
        cpt_queue_close(q);
    }
    cpt_redis_server_stop(&srv, &err);
    cpt_remove_tree(dir, &err);
    return rc;
}
