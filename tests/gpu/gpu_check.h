/* Scaffolding shared by the GPU tests (tests/gpu/test_*.c), header-only like tests/check.h: fatal calls, host and
 * device buffers, random inputs already representable in bf16 (so the CPU reference sees the GPU's values),
 * poisoning (0xFF bytes: NaN in bf16 and fp32; NaN on the host), the relative L2 error, the seed line and the
 * summary table printed last. A setup failure is not a check: it prints what failed and exits 1. The context and
 * the rng are passed explicitly; `err` is the one error the helpers and OK() report. */
#ifndef CPT_TESTS_GPU_GPU_CHECK_H
#define CPT_TESTS_GPU_GPU_CHECK_H

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/rng.h"
#include "core/safetensors.h"
#include "kernels/cuda/cuda_ops.h"

static cpt_err err;

/* A call that returns non-zero on failure (or a failed-allocation test like `OK(!p)`): report err and exit. */
#define OK(call)                                                                    \
    do {                                                                            \
        if ((call) != 0) {                                                          \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, err.msg); \
            exit(1);                                                                \
        }                                                                           \
    } while (0)

/* The context on device 0, or exit 1 saying why not. */
static inline cpt_cuda_ctx *ctx_or_exit(const char *test) {
    cpt_cuda_ctx *ctx = cpt_cuda_ctx_new(0, &err);
    if (!ctx) {
        fprintf(stderr, "%s: no CUDA context: %s\n", test, err.msg);
        exit(1);
    }
    return ctx;
}

/* ---- host buffers ---- */

/* zeroed */
static inline void *xmalloc(size_t bytes) {
    void *p = calloc(1, bytes ? bytes : 1);
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    return p;
}

static inline float *hbuf(size_t n) { return (float *)xmalloc(n * sizeof(float)); }

/* NaN everywhere: what a GPU call should have written and did not shows */
static inline float *poisoned(size_t n) {
    float *p = hbuf(n);
    for (size_t i = 0; i < n; i++) p[i] = NAN;
    return p;
}

static inline void round_bf16(float *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = cpt_bf16_to_f32(cpt_f32_to_bf16(x[i]));
}

/* normal(0, std) values already representable in bf16 */
static inline float *rand_bf16(cpt_rng *rng, size_t n, float std) {
    float *p = hbuf(n);
    cpt_rng_fill_normal(rng, p, n, 0.0f, std);
    round_bf16(p, n);
    return p;
}

/* ---- device buffers ---- */

static inline void *dev(size_t bytes, const char *what) {
    void *p = cpt_cuda_malloc(bytes, what, &err);
    if (!p) {
        fprintf(stderr, "%s\n", err.msg);
        exit(1);
    }
    return p;
}

static inline void *dev_bf16(cpt_cuda_ctx *ctx, const float *x, size_t n, const char *what) {
    void *p = dev(n * 2, what);
    OK(cpt_cuda_upload_bf16(ctx, p, x, n, &err));
    return p;
}

static inline void *dev_raw(cpt_cuda_ctx *ctx, const void *x, size_t bytes, const char *what) {
    void *p = dev(bytes, what);
    OK(cpt_cuda_memcpy_h2d(ctx, p, x, bytes, &err));
    return p;
}

static inline void *dev_f32(cpt_cuda_ctx *ctx, const float *x, size_t n, const char *what) {
    return dev_raw(ctx, x, n * 4, what);
}

/* all bytes 0xFF: NaN in bf16 and fp32 */
static inline void *dev_poison(cpt_cuda_ctx *ctx, size_t bytes, const char *what) {
    void *p = dev(bytes, what);
    OK(cpt_cuda_memset(ctx, p, 0xFF, bytes, &err));
    return p;
}

/* Read back after the stream's work (a fault of an earlier op shows here). */
static inline void *get_raw(cpt_cuda_ctx *ctx, const void *d, size_t bytes) {
    void *h = xmalloc(bytes);
    OK(cpt_cuda_sync(ctx, &err));
    OK(cpt_cuda_memcpy_d2h(ctx, h, d, bytes, &err));
    return h;
}

static inline float *get_f32(cpt_cuda_ctx *ctx, const void *d, size_t n) {
    return (float *)get_raw(ctx, d, n * 4);
}

static inline float *get_bf16(cpt_cuda_ctx *ctx, const void *d, size_t n) {
    float *h = hbuf(n);
    OK(cpt_cuda_sync(ctx, &err));
    OK(cpt_cuda_download_bf16(ctx, h, d, n, &err));
    return h;
}

static inline cpt_tensor D2(void *p, cpt_dtype dt, int64_t a, int64_t b) { return cpt_cuda_tensor(p, dt, 2, a, b); }
static inline cpt_tensor D1(void *p, cpt_dtype dt, int64_t a) { return cpt_cuda_tensor(p, dt, 1, a, 0); }

/* ---- comparison ---- */

/* Sums for the relative L2 error of got against ref; a NaN or inf in got is counted, not summed. */
typedef struct l2_acc {
    double num, den, maxabs;
    size_t nans;
} l2_acc;

static inline void l2_add(l2_acc *a, double got, double ref) {
    if (isnan(got) || isinf(got)) {
        a->nans++;
        return;
    }
    a->num += (got - ref) * (got - ref);
    a->den += ref * ref;
    if (fabs(got - ref) > a->maxabs) a->maxabs = fabs(got - ref);
}

/* ---- the run ---- */

/* CPT_TEST_SEED, else the clock; printed so a failure can be repeated. */
static inline void seed_rng(cpt_rng *rng) {
    const char *seed_env = getenv("CPT_TEST_SEED");
    uint64_t seed = seed_env ? strtoull(seed_env, NULL, 10) : (uint64_t)time(NULL);
    printf("seed %llu (set CPT_TEST_SEED to repeat)\n", (unsigned long long)seed);
    cpt_rng_seed(rng, seed, 0);
}

static inline double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The summary printed last. With echo each row is printed when added too, so an abort later still leaves the
 * rows so far; rows past GPU_TABLE_ROWS are dropped. */
#define GPU_TABLE_ROWS 192
typedef struct gpu_table {
    int echo, n;
    char rows[GPU_TABLE_ROWS][200];
} gpu_table;

static inline void table_add(gpu_table *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static inline void table_add(gpu_table *t, const char *fmt, ...) {
    if (t->n >= GPU_TABLE_ROWS) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->rows[t->n], sizeof t->rows[0], fmt, ap);
    va_end(ap);
    if (t->echo) {
        printf("%s\n", t->rows[t->n]);
        fflush(stdout);
    }
    t->n++;
}

static inline void table_print(const gpu_table *t) {
    for (int i = 0; i < t->n; i++) printf("%s\n", t->rows[i]);
}

#endif
