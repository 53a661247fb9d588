/* The synthetic step of the train benches (bench/cpu_train_bench.c, bench/cuda_train_bench.c): B packed sequences
 * of T token ids from a fixed LCG, each position's target the next id of its sequence (-1 at its end), and the
 * mean next-token cross-entropy gradient d_logprob = -1 / targets. Header-only. */
#ifndef CPT_BENCH_TRAIN_BATCH_H
#define CPT_BENCH_TRAIN_BATCH_H

#include <stdint.h>
#include <stdlib.h>

#include "model/model.h"

typedef struct train_batch {
    int32_t *tok, *tgt, *ss;
    float *lp; /* the forward's logprobs */
    float *d;  /* the gradient of the mean CE per logprob */
    int count; /* targets: B (T - 1) */
    cpt_batch batch;
} train_batch;

static inline void train_batch_free(train_batch *tb) {
    free(tb->tok), free(tb->tgt), free(tb->ss), free(tb->lp), free(tb->d);
}

/* 0, or -1 when out of memory. */
static inline int train_batch_init(train_batch *tb, int B, int T, int vocab) {
    int N = B * T;
    tb->tok = malloc(sizeof(int32_t) * N), tb->tgt = malloc(sizeof(int32_t) * N);
    tb->ss = malloc(sizeof(int32_t) * (B + 1));
    tb->lp = malloc(sizeof(float) * N), tb->d = malloc(sizeof(float) * N);
    if (!tb->tok || !tb->tgt || !tb->ss || !tb->lp || !tb->d) {
        train_batch_free(tb);
        return -1;
    }
    uint64_t x = 12345;
    for (int i = 0; i < N; i++) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        tb->tok[i] = (int32_t)((x >> 33) % (uint64_t)vocab);
    }
    for (int b = 0; b <= B; b++) tb->ss[b] = b * T;
    for (int i = 0; i < N; i++) tb->tgt[i] = (i % T) + 1 < T ? tb->tok[i + 1] : -1;
    tb->count = B * (T - 1);
    for (int i = 0; i < N; i++) tb->d[i] = tb->tgt[i] >= 0 ? -1.0f / (float)tb->count : 0.0f;
    tb->batch = (cpt_batch){N, B, tb->tok, tb->ss, tb->tgt};
    return 0;
}

/* The summed negative logprob of the targets after a forward (divide by count for the mean loss). */
static inline double train_batch_nll(const train_batch *tb) {
    double nll = 0;
    for (int i = 0; i < tb->batch.n_tokens; i++) nll -= tb->tgt[i] >= 0 ? tb->lp[i] : 0;
    return nll;
}

#endif
