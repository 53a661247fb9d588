/* The body of the fused decode products (cpt_cuda_fused_gemv in cuda_ops.h), shared by the register kernels
 * (decode_fused.cu) and the ring kernel (decode_fused_ring.cu). .cu files only.
 *
 * A block walks the groups grp, grp + n_grid, ... of outputs. It loads its first weights, which never depend on
 * earlier work, then calls wait() (pdl_wait), then stages the input rows (in xs_raw, n x K bf16 of dynamic shared
 * memory) and computes. */
#ifndef CPT_KERNELS_CUDA_DECODE_FUSED_INTERNAL_H
#define CPT_KERNELS_CUDA_DECODE_FUSED_INTERNAL_H

#include "kernels/cuda/cuda_internal.h"

#define FG_THREADS 256
#define FG_WARPS (FG_THREADS / 32)
#define FG_PF 4 /* 16-byte weight vectors a lane holds per register set (per weight row: PFV / rows per output); the
                 * deep kernels hold FG_PF_DEEP */
#define FG_PF_DEEP 8
#define FG_MAX_SMEM (200 * 1024) /* the staged input rows */
#define FG_RING_BLOCKS 4 /* the ring kernel's blocks a multiprocessor (at most as many as fit) */
#define FG_NORM_PF 2              /* norm weight vectors a thread loads before waiting (K <= 4096 needs no more) */

/* The first norm weight vectors a thread takes (NORM): they never depend on the previous kernel, so they are
 * loaded before waiting for it. */
template <bool NORM>
static __device__ __forceinline__ void fg_norm_prefetch(const cpt_cuda_fused_gemv &a, uint4 (&gpre)[FG_NORM_PF]) {
    const int64_t nvec = a.K / 8;
#pragma unroll
    for (int k = 0; k < FG_NORM_PF; k++) {
        int64_t v = threadIdx.x + (int64_t)k * FG_THREADS;
        gpre[k] = NORM && v < nvec ? __ldg((const uint4 *)a.norm_w + v) : make_uint4(0, 0, 0, 0);
    }
}

/* Stages the input rows into xs_raw: raw, then (NORM) each scaled by its rstd and the norm weight, rounded to bf16;
 * ends with a block barrier. */
template <int MAXN, bool NORM>
static __device__ __forceinline__ void fg_stage_inputs(const cpt_cuda_fused_gemv &a, uint4 *xs_raw,
                                                       const uint4 (&gpre)[FG_NORM_PF]) {
    __shared__ float ss_s[FG_WARPS][MAXN];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int64_t nvec = a.K / 8;
    float ss[MAXN];
#pragma unroll
    for (int n = 0; n < MAXN; n++) ss[n] = 0.0f;
#pragma unroll
    for (int n = 0; n < MAXN; n++) {
        if (n >= a.n) break;
        const uint4 *src = (const uint4 *)((const __nv_bfloat16 *)a.inp + (int64_t)(a.rows ? a.rows[n] : n) * a.K);
        for (int64_t v = threadIdx.x; v < nvec; v += FG_THREADS) {
            uint4 raw = __ldcg(src + v); /* through L2: written by the previous kernel */
            xs_raw[n * nvec + v] = raw;
            if constexpr (NORM) {
                float f[8];
                bf16x8_to_f32(raw, f);
#pragma unroll
                for (int k = 0; k < 8; k++) ss[n] += f[k] * f[k];
            }
        }
    }
    if constexpr (NORM) {
#pragma unroll
        for (int n = 0; n < MAXN; n++) {
            for (int o = 16; o > 0; o >>= 1) ss[n] += __shfl_xor_sync(0xffffffffu, ss[n], o);
            if (lane == 0) ss_s[warp][n] = ss[n];
        }
        __syncthreads();
#pragma unroll
        for (int n = 0; n < MAXN; n++) {
            if (n >= a.n) break;
            float t = 0.0f;
            for (int w = 0; w < FG_WARPS; w++) t += ss_s[w][n];
            float s = rsqrtf(t / (float)a.K + a.eps);
            for (int64_t v = threadIdx.x, j = 0; v < nvec; v += FG_THREADS, j++) {
                float f[8], g[8];
                bf16x8_to_f32(xs_raw[n * nvec + v], f);
                uint4 gv = gpre[0]; /* the j-th vector this thread takes: prefetched for j < FG_NORM_PF */
#pragma unroll
                for (int q = 1; q < FG_NORM_PF; q++)
                    if (j == q) gv = gpre[q];
                bf16x8_to_f32(j < FG_NORM_PF ? gv : __ldg((const uint4 *)a.norm_w + v), g);
#pragma unroll
                for (int k = 0; k < 8; k++) f[k] = g[k] * (f[k] * s); /* as cpt_cuda_rmsnorm_fwd */
                xs_raw[n * nvec + v] = f32_to_bf16x8(f);
            }
        }
    }
    __syncthreads();
}

/* acc[r][n] += weight vector w[r] . input vector v of row n (xs_raw), for the NW weight rows of one output */
template <int MAXN, int NW>
static __device__ __forceinline__ void fg_dot(const cpt_cuda_fused_gemv &a, const uint4 *xs_raw, int64_t nvec,
                                              int64_t v, const uint4 (&w)[NW], float (&acc)[NW][MAXN]) {
    float wf[NW][8];
#pragma unroll
    for (int r = 0; r < NW; r++) bf16x8_to_f32(w[r], wf[r]);
#pragma unroll
    for (int n = 0; n < MAXN; n++) {
        if (n >= a.n) break;
        float x[8];
        bf16x8_to_f32(xs_raw[n * nvec + v], x);
#pragma unroll
        for (int r = 0; r < NW; r++)
#pragma unroll
            for (int k = 0; k < 8; k++) acc[r][n] += wf[r][k] * x[k];
    }
}

/* The lanes' sums of group grp (output oc = grp * RPB + this warp's rib) summed over lanes, then over the WPR warps
 * of an output in warp order (shared memory, two block barriers), and stored with the epilogue. Every thread of
 * the block calls it. */
template <int MAXN, int WPR, int MODE, int NW>
static __device__ __forceinline__ void fg_finish(const cpt_cuda_fused_gemv &a, float (&acc)[NW][MAXN], int64_t grp,
                                                 int64_t oc, bool live) {
    constexpr int RPB = FG_WARPS / WPR;
    __shared__ float red_s[FG_WARPS][NW][MAXN];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
#pragma unroll
    for (int r = 0; r < NW; r++)
#pragma unroll
        for (int n = 0; n < MAXN; n++)
            for (int o = 16; o > 0; o >>= 1) acc[r][n] += __shfl_xor_sync(0xffffffffu, acc[r][n], o);
    int n_fin; /* which (output, row) this thread finishes, if any */
    int64_t oc_fin;
    bool fin;
    float res[NW];
    if constexpr (WPR == 1) {
        n_fin = lane, oc_fin = oc;
        fin = lane < MAXN && lane < a.n && live;
#pragma unroll
        for (int r = 0; r < NW; r++) {
            res[r] = acc[r][0];
#pragma unroll
            for (int n = 1; n < MAXN; n++)
                if (n == lane) res[r] = acc[r][n];
        }
    } else {
        if (lane == 0)
#pragma unroll
            for (int r = 0; r < NW; r++)
#pragma unroll
                for (int n = 0; n < MAXN; n++) red_s[warp][r][n] = acc[r][n];
        __syncthreads();
        int t = threadIdx.x;
        n_fin = t % MAXN, oc_fin = grp * RPB + t / MAXN;
        fin = t < RPB * MAXN && n_fin < a.n && oc_fin < a.OC;
        if (fin)
#pragma unroll
            for (int r = 0; r < NW; r++) {
                float s = 0.0f;
#pragma unroll
                for (int k = 0; k < WPR; k++) s += red_s[(t / MAXN) * WPR + k][r][n_fin];
                res[r] = s;
            }
        __syncthreads(); /* red_s is rewritten by the next group */
    }
    if (!fin) return;
    int64_t at = (int64_t)n_fin * a.OC + oc_fin;
    float b = a.bias ? __bfloat162float(((const __nv_bfloat16 *)a.bias)[oc_fin]) : 0.0f;
    if constexpr (MODE == CPT_FUSED_BF16) {
        ((__nv_bfloat16 *)a.out)[at] = __float2bfloat16(res[0] + b);
    } else if constexpr (MODE == CPT_FUSED_RESID) {
        __nv_bfloat16 *x = (__nv_bfloat16 *)a.out;
        x[at] = __float2bfloat16(__bfloat162float(__ldcg(x + at)) + bf16_round(res[0] + b));
    } else if constexpr (MODE == CPT_FUSED_SWIGLU) {
        float g = bf16_round(res[0]), u = bf16_round(res[NW - 1]);
        ((__nv_bfloat16 *)a.out)[at] = __float2bfloat16(silu_f(g) * u); /* as swiglu_fwd_kernel */
    } else {
        ((float *)a.out)[at] = res[0] + b;
    }
}

/* MAXN: rows bound; WPR: warps per output; MODE: cpt_cuda_fused_out; NORM: rmsnorm the input first.
 * Shared memory holds the n (normalised) input rows, bf16, staged once per block. The grid walks the groups of RPB
 * outputs (grid-stride: no block launch per few outputs); while a group is computed, the next group's weights are
 * already loading into a second set of registers (rows of at most PF vectors a lane; longer rows loop). */
template <int MAXN, int WPR, int MODE, bool NORM, int PFV = FG_PF, typename Wait>
static __device__ __forceinline__ void fused_gemv_block(const cpt_cuda_fused_gemv &a, int64_t grp, int64_t n_grid,
                                                        uint4 *xs_raw, Wait wait) {
    constexpr int RPB = FG_WARPS / WPR;                  /* outputs per group */
    constexpr int NW = MODE == CPT_FUSED_SWIGLU ? 2 : 1; /* weight rows per output: gate and up */
    constexpr int PF = PFV / NW;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, ks = warp % WPR, rib = warp / WPR;
    const int64_t nvec = a.K / 8, stride = WPR * 32, first = ks * 32 + lane;
    const int64_t ngroups = (a.OC + RPB - 1) / RPB;
    const bool one_batch = nvec <= PF * stride; /* whole rows fit one register set (the same in every lane) */
    uint4 wv[NW][PF], wn[NW][PF];
    /* the first PF vectors a lane takes of output oc's weight row(s), into w */
    auto load = [&](uint4 (&w)[NW][PF], int64_t oc, int64_t j0) {
        bool live = oc < a.OC;
#pragma unroll
        for (int r = 0; r < NW; r++) {
            const uint4 *wr = (const uint4 *)((const __nv_bfloat16 *)a.w + ((r ? a.OC : 0) + (live ? oc : 0)) * a.K);
#pragma unroll
            for (int u = 0; u < PF; u++) {
                int64_t v = first + (j0 + u) * stride;
                w[r][u] = live && v < nvec ? __ldg(wr + v) : make_uint4(0, 0, 0, 0);
            }
        }
    };
    /* the weights never depend on the previous kernel: the first group's, and the norm weight's first vectors, are
     * loaded before waiting for it */
    load(wv, grp * RPB + rib, 0);
    uint4 gpre[FG_NORM_PF];
    fg_norm_prefetch<NORM>(a, gpre);
    wait();
    fg_stage_inputs<MAXN, NORM>(a, xs_raw, gpre);
    for (; grp < ngroups; grp += n_grid) {
        const int64_t oc = grp * RPB + rib, next = grp + n_grid;
        const bool live = oc < a.OC;
        /* whole rows in registers: the next group's weights load now, while this group is computed */
        if (one_batch && next < ngroups) load(wn, next * RPB + rib, 0);
        float acc[NW][MAXN];
#pragma unroll
        for (int r = 0; r < NW; r++)
#pragma unroll
            for (int n = 0; n < MAXN; n++) acc[r][n] = 0.0f;
        for (int64_t j0 = 0;; j0 += PF) {
#pragma unroll
            for (int u = 0; u < PF; u++) {
                int64_t v = first + (j0 + u) * stride;
                if (!live || v >= nvec) break;
                uint4 w[NW];
#pragma unroll
                for (int r = 0; r < NW; r++) w[r] = wv[r][u];
                fg_dot<MAXN, NW>(a, xs_raw, nvec, v, w, acc);
            }
            if (first + (j0 + PF) * stride >= nvec) break;
            load(wv, oc, j0 + PF); /* rows longer than PF vectors a lane: the next batch */
        }
        if (!one_batch && next < ngroups) load(wv, next * RPB + rib, 0);
        fg_finish<MAXN, WPR, MODE, NW>(a, acc, grp, oc, live);
        if (one_batch)
#pragma unroll
            for (int r = 0; r < NW; r++)
#pragma unroll
                for (int u = 0; u < PF; u++) wv[r][u] = wn[r][u];
    }
}

/* Calls L<MAXN, WPR, MODE, NORM>::run(ctx, a, args...) with a's row bound (1, 2 or 4), wpr (1, 2, 4 or 8), mode and
 * whether it normalises its input: the one place that maps a call to a compiled kernel variant. */
template <template <int, int, int, bool> class L, int MAXN, int MODE, bool NORM, typename... A>
static void fg_dispatch_wpr(cpt_cuda_ctx *ctx, const cpt_cuda_fused_gemv &a, int wpr, A... args) {
    switch (wpr) {
    case 1: L<MAXN, 1, MODE, NORM>::run(ctx, a, args...); break;
    case 2: L<MAXN, 2, MODE, NORM>::run(ctx, a, args...); break;
    case 4: L<MAXN, 4, MODE, NORM>::run(ctx, a, args...); break;
    default: L<MAXN, 8, MODE, NORM>::run(ctx, a, args...); break;
    }
}
template <template <int, int, int, bool> class L, int MAXN, typename... A>
static void fg_dispatch_mode(cpt_cuda_ctx *ctx, const cpt_cuda_fused_gemv &a, int wpr, A... args) {
    switch (a.mode) {
    case CPT_FUSED_BF16:
        if (a.norm_w) fg_dispatch_wpr<L, MAXN, CPT_FUSED_BF16, true>(ctx, a, wpr, args...);
        else fg_dispatch_wpr<L, MAXN, CPT_FUSED_BF16, false>(ctx, a, wpr, args...);
        break;
    case CPT_FUSED_RESID: fg_dispatch_wpr<L, MAXN, CPT_FUSED_RESID, false>(ctx, a, wpr, args...); break;
    case CPT_FUSED_SWIGLU: fg_dispatch_wpr<L, MAXN, CPT_FUSED_SWIGLU, true>(ctx, a, wpr, args...); break;
    case CPT_FUSED_F32: fg_dispatch_wpr<L, MAXN, CPT_FUSED_F32, true>(ctx, a, wpr, args...); break;
    }
}
template <template <int, int, int, bool> class L, typename... A>
static void fg_dispatch(cpt_cuda_ctx *ctx, const cpt_cuda_fused_gemv &a, int wpr, A... args) {
    if (a.n == 1) fg_dispatch_mode<L, 1>(ctx, a, wpr, args...);
    else if (a.n == 2) fg_dispatch_mode<L, 2>(ctx, a, wpr, args...);
    else fg_dispatch_mode<L, 4>(ctx, a, wpr, args...);
}

/* The grid of a products kernel k: as many blocks as can be resident (at most `cap` a multiprocessor when cap > 0),
 * at most one per group of outputs (each block walks groups grid-stride). */
template <typename Kern>
static dim3 fg_grid(const cpt_cuda_ctx *ctx, Kern k, size_t smem, int64_t groups, int cap) {
    int per_sm = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k, FG_THREADS, smem) != cudaSuccess || per_sm < 1)
        per_sm = 1;
    if (cap > 0 && per_sm > cap) per_sm = cap;
    const int64_t most = (int64_t)per_sm * ctx->num_sms;
    return dim3((unsigned)(groups < most ? groups : most));
}

/* b rounded up to 128 bytes: where the weight buffers start after the input rows in shared memory */
static __host__ __device__ __forceinline__ size_t fg_align(size_t b) { return (b + 127) & ~(size_t)127; }

/* The products with each thread's weights streamed through its own shared-memory slots (decode_fused_ring.cu): 0
 * when they do not fit (the caller runs the deep kernel, whose results they equal bitwise). */
int fused_gemv_ring_launch(cpt_cuda_ctx *ctx, const cpt_cuda_fused_gemv &a);

/* The smallest WPR whose lanes hold a whole row in one register set of pfv vectors (else 8, and the kernel
 * loops). */
static inline int pick_wpr(int64_t K, int nw, int pfv = FG_PF) {
    int64_t nvec = K / 8, pf = pfv / nw;
    for (int wpr = 1; wpr < 8; wpr *= 2)
        if ((nvec + 32 * wpr - 1) / (32 * wpr) <= pf) return wpr;
    return 8;
}

#endif
