/* Shared pieces of the CUDA backend (.cu files only): the context, operand checks, launch checks, bf16 helpers. */
#ifndef CPT_KERNELS_CUDA_CUDA_INTERNAL_H
#define CPT_KERNELS_CUDA_CUDA_INTERNAL_H

#include <initializer_list>

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/cuda/cuda_ops.h"

/* cuBLASLt entry points, resolved with dlopen so the build needs no link flag for it. */
struct cpt_cublaslt_api {
    void *lib;
    decltype(&cublasLtCreate) create;
    decltype(&cublasLtDestroy) destroy;
    decltype(&cublasLtMatmul) matmul;
    decltype(&cublasLtMatmulDescCreate) desc_create;
    decltype(&cublasLtMatmulDescDestroy) desc_destroy;
    decltype(&cublasLtMatmulDescSetAttribute) desc_set;
    decltype(&cublasLtMatrixLayoutCreate) layout_create;
    decltype(&cublasLtMatrixLayoutDestroy) layout_destroy;
    decltype(&cublasLtMatmulPreferenceCreate) pref_create;
    decltype(&cublasLtMatmulPreferenceDestroy) pref_destroy;
    decltype(&cublasLtMatmulPreferenceSetAttribute) pref_set;
    decltype(&cublasLtMatmulAlgoGetHeuristic) heuristic;
};

struct cpt_cuda_ctx {
    int device;
    cudaStream_t stream;
    cpt_cublaslt_api lt;
    cublasLtHandle_t lt_handle;
    void *lt_workspace;
    size_t lt_workspace_bytes;
    void *scratch; /* fp32 partial sums of deterministic reductions; grows on demand */
    size_t scratch_bytes;
    int num_sms;
    int pdl; /* launch_k launches with programmatic dependent launch (cpt_cuda_set_pdl) */
};

/* A misused op is a programming error: name the op and the mismatch, abort (as kernels/cpu). */
#define CKCHECK(cond, op, ...)                                                            \
    do {                                                                                  \
        if (!(cond)) {                                                                    \
            fprintf(stderr, "cpt cuda: %s: ", op);                                        \
            fprintf(stderr, __VA_ARGS__);                                                 \
            fprintf(stderr, " (%s, %s:%d)\n", #cond, __FILE__, __LINE__);                 \
            abort();                                                                      \
        }                                                                                 \
    } while (0)

/* A CUDA call inside an op failing means the device is unusable; name the call and abort. */
#define CUDA_OK(call)                                                                                         \
    do {                                                                                                      \
        cudaError_t e_ = (call);                                                                              \
        if (e_ != cudaSuccess) {                                                                              \
            fprintf(stderr, "cpt cuda: %s failed: %s (%s:%d)\n", #call, cudaGetErrorString(e_), __FILE__, __LINE__); \
            abort();                                                                                          \
        }                                                                                                     \
    } while (0)

/* After every launch: a bad configuration shows up here, named by the kernel. */
#define LAUNCH_OK(name)                                                                                       \
    do {                                                                                                      \
        cudaError_t e_ = cudaGetLastError();                                                                  \
        if (e_ != cudaSuccess) {                                                                              \
            fprintf(stderr, "cpt cuda: launch of %s failed: %s (%s:%d)\n", name, cudaGetErrorString(e_), __FILE__, \
                    __LINE__);                                                                                \
            abort();                                                                                          \
        }                                                                                                     \
    } while (0)

/* Fill err (when given) and return -1, so `return cpt_cuda_err(err, ...)` reads naturally. The backend's own,
 * so it does not depend on core/error.c being linked after it. */
static inline int cpt_cuda_err(cpt_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static inline int cpt_cuda_err(cpt_err *err, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return -1;
}

/* A CUDA call in a function that reports through `cpt_err *err`: on failure fill err (the call, what it was for,
 * the error's text and name) and return -1. */
#define CUDA_OR_ERR(call, what)                                                                                \
    do {                                                                                                       \
        cudaError_t e_ = (call);                                                                               \
        if (e_ != cudaSuccess)                                                                                 \
            return cpt_cuda_err(err, "%s failed for %s: %s (%s)", #call, what, cudaGetErrorString(e_),        \
                                cudaGetErrorName(e_));                                                         \
    } while (0)

/* The operand must be a present CUDA tensor of dtype dt and ndim dims. */
void cpt_cuda_check(const char *op, const char *what, cpt_tensor t, cpt_dtype dt, int ndim);
/* Programmatic dependent launch (sm_90). A kernel launched by launch_k while ctx->pdl is set may start while the
 * previous kernel of the stream still runs: every block must call pdl_wait() before it reads or writes anything
 * that kernel (or an earlier one) writes or reads, and before it returns (a grid whose blocks all returned early
 * would complete before its predecessor, and the next kernel's wait would not cover it). pdl_trigger() lets the
 * next kernel's blocks be scheduled once every block of this one has started; its pdl_wait() still waits for this
 * grid to complete. Both are no-ops in a plain launch. */
static __device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
static __device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
/* kernel<<<grid, block, smem, ctx->stream>>>(args), with programmatic dependent launch when ctx->pdl. */
template <typename... P, typename... A>
static inline void launch_k(const cpt_cuda_ctx *ctx, void (*kernel)(P...), dim3 grid, dim3 block, size_t smem,
                            A &&...args) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = ctx->stream;
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = at;
    cfg.numAttrs = ctx->pdl ? 1 : 0;
    CUDA_OK(cudaLaunchKernelEx(&cfg, kernel, static_cast<P>(args)...));
}

/* Scratch of at least bytes (synchronises the stream when it has to grow). */
void *cpt_cuda_scratch(cpt_cuda_ctx *ctx, size_t bytes);

static inline __nv_bfloat16 *BF(cpt_tensor t) { return (__nv_bfloat16 *)t.data; }
static inline float *FP(cpt_tensor t) { return (float *)t.data; }
static inline int32_t *IP(cpt_tensor t) { return (int32_t *)t.data; }

static inline unsigned cdiv(int64_t a, int64_t b) { return (unsigned)((a + b - 1) / b); }

/* Whether 16-byte (8 x bf16) accesses fit: rows of width a multiple of 8, and every buffer (NULL: absent) 16-byte
 * aligned. The 8-wide kernels fall back to scalar ones otherwise. */
static inline int vec8_ok(int64_t width, std::initializer_list<const void *> bufs) {
    if (width % 8) return 0;
    for (const void *p : bufs)
        if ((uintptr_t)p & 15) return 0;
    return 1;
}

/* 8 bf16 in 16 bytes <-> 8 fp32 (the vectorised element-wise kernels; rounding to nearest even as
 * __float2bfloat16). */
static __device__ __forceinline__ void bf16x8_to_f32(const uint4 &raw, float f[8]) {
    const __nv_bfloat162 *k2 = (const __nv_bfloat162 *)&raw;
#pragma unroll
    for (int u = 0; u < 4; u++) {
        float2 v = __bfloat1622float2(k2[u]);
        f[2 * u] = v.x;
        f[2 * u + 1] = v.y;
    }
}
static __device__ __forceinline__ uint4 f32_to_bf16x8(const float f[8]) {
    uint4 raw;
    __nv_bfloat162 *k2 = (__nv_bfloat162 *)&raw;
#pragma unroll
    for (int u = 0; u < 4; u++) k2[u] = __floats2bfloat162_rn(f[2 * u], f[2 * u + 1]);
    return raw;
}

/* v rounded to bf16 and back: where a kernel reproduces a value another kernel would have stored as bf16. */
static __device__ __forceinline__ float bf16_round(float v) { return __bfloat162float(__float2bfloat16(v)); }
static __device__ __forceinline__ float silu_f(float g) { return g / (1.0f + expf(-g)); }

/* W consecutive bf16 at p <-> fp32: W = 8 is one 16-byte access (vec8_ok), W = 1 one element. The kernels with an
 * 8-wide and a scalar form are one template over W. */
template <int W>
static __device__ __forceinline__ void load_bf16(const __nv_bfloat16 *p, float *f) {
    static_assert(W == 1 || W == 8, "W is 1 or 8");
    if constexpr (W == 8) bf16x8_to_f32(*(const uint4 *)p, f);
    else f[0] = __bfloat162float(*p);
}
template <int W>
static __device__ __forceinline__ void store_bf16(__nv_bfloat16 *p, const float *f) {
    static_assert(W == 1 || W == 8, "W is 1 or 8");
    if constexpr (W == 8) *(uint4 *)p = f32_to_bf16x8(f);
    else *p = __float2bfloat16(f[0]);
}

/* Sum over a block (blockDim.x a multiple of 32, at most 1024), result valid in every thread. */
__device__ inline float block_sum(float v, float *shared32) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    __syncthreads(); /* shared32 may still be read from a previous call */
    if (lane == 0) shared32[wid] = v;
    __syncthreads();
    v = lane < nw ? shared32[lane] : 0.0f;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

#endif
