/* Shared helpers of the CPU backend: operand checks and OpenMP-friendly sizes. Not part of the public interface. */
#ifndef CPT_KERNELS_CPU_INTERNAL_H
#define CPT_KERNELS_CPU_INTERNAL_H

#include <stdio.h>
#include <stdlib.h>

#include "kernels/kernels.h"

/* A misused op is a programming error: say which op and what mismatched, then abort. */
#define KCHECK(cond, op, ...)                                                             \
    do {                                                                                  \
        if (!(cond)) {                                                                    \
            fprintf(stderr, "cpt kernels: %s: ", op);                                     \
            fprintf(stderr, __VA_ARGS__);                                                 \
            fprintf(stderr, " (%s, %s:%d)\n", #cond, __FILE__, __LINE__);                 \
            abort();                                                                      \
        }                                                                                 \
    } while (0)

/* The tensor must be a host fp32 (or int32) tensor of ndim dims. */
void cpt_kcheck_f32(const char *op, const char *what, cpt_tensor t, int ndim);
void cpt_kcheck_i32(const char *op, const char *what, cpt_tensor t, int ndim);

/* Below this many elements an op runs on one thread: forking costs more than the work. */
#define PAR_MIN 16384

static inline float *F(cpt_tensor t) { return (float *)t.data; }
static inline int32_t *I(cpt_tensor t) { return (int32_t *)t.data; }

/* GEMM on raw row-major blocks with leading dimensions (sub-matrices of wider rows, e.g. one head inside a fused
 * qkv row): c [M, N] (+)= op(a) [M, K] @ op(b) [K, N]. Inside another parallel region it runs on the calling
 * thread. */
void cpt_cpu_gemm_strided(float *c, int64_t ldc, int64_t M, int64_t N, int64_t K, const float *a, int64_t lda,
                          int trans_a, const float *b, int64_t ldb, int trans_b, int accumulate);

static inline size_t cpt_dtype_size_local(cpt_dtype dt) {
    switch (dt) {
    case CPT_DT_F32: case CPT_DT_I32: return 4;
    case CPT_DT_BF16: case CPT_DT_F16: return 2;
    case CPT_DT_I64: case CPT_DT_F64: return 8;
    case CPT_DT_U8: return 1;
    }
    return 1;
}

#endif
