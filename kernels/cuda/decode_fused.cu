/* Fused products of decode steps of a few rows (cpt_cuda_fused_gemv in cuda_ops.h).
 *
 * At batch 1 a decode step is bound by streaming the weights once, and the unfused layer (rmsnorm, product,
 * split-K sum, rope/append, attention, product, residual + rmsnorm, product, swiglu, product) spends more time in
 * ~12 short kernels' launch and ramp than in the bytes. Here a product carries its neighbours: the rmsnorm of its
 * input (every block stages the few input rows in shared memory and normalises them there), the bias, and one of
 * three epilogues (residual add, swiglu of the gate/up pair, fp32 logits). The kernels are launched with
 * programmatic dependent launch when ctx->pdl is set: a block loads its first weight vectors, which never depend on
 * the previous kernel, before waiting for that kernel, so the next layer's weights stream while this one finishes.
 *
 * Layout: one output element per WPR warps (8 warps a block, 8 / WPR outputs at a time); those warps' lanes
 * take the row's 16-byte vectors in turn; WPR > 1 sums the warps' parts in warp order in shared memory, so the
 * result is deterministic. Rounding matches the unfused path: the normalised input, the product (+ bias), the
 * residual sum, and gate and up are each rounded to bf16 where the unfused kernels store bf16. */
#include <math.h>

#include "kernels/cuda/cuda_internal.h"

#define FG_THREADS 256
#define FG_WARPS (FG_THREADS / 32)
#define FG_PF 4 /* 16-byte weight vectors a lane holds per register set (per weight row: FG_PF / rows per output) */
#define FG_MAX_SMEM (200 * 1024) /* the staged input rows */
#define FG_NORM_PF 2              /* norm weight vectors a thread loads before waiting (K <= 4096 needs no more) */

/* MAXN: rows bound; WPR: warps per output; MODE: cpt_cuda_fused_out; NORM: rmsnorm the input first.
 * Shared memory holds the n (normalised) input rows, bf16, staged once per block. The grid walks the groups of RPB
 * outputs (grid-stride: no block launch per few outputs); while a group is computed, the next group's weights are
 * already loading into a second set of registers (rows of at most PF vectors a lane; longer rows loop). */
template <int MAXN, int WPR, int MODE, bool NORM>
static __global__ void __launch_bounds__(FG_THREADS) fused_gemv_kernel(cpt_cuda_fused_gemv a) {
    constexpr int RPB = FG_WARPS / WPR;                  /* outputs per group */
    constexpr int NW = MODE == CPT_FUSED_SWIGLU ? 2 : 1; /* weight rows per output: gate and up */
    constexpr int PF = FG_PF / NW;
    extern __shared__ uint4 xs_raw[]; /* [n][K / 8]: the input rows, 8 bf16 a vector */
    __shared__ float ss_s[FG_WARPS][MAXN];
    __shared__ float red_s[FG_WARPS][NW][MAXN];
    pdl_trigger();
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
    int64_t grp = blockIdx.x;
    /* the weights never depend on the previous kernel: the first group's, and the norm weight's first vectors, are
     * loaded before waiting for it */
    load(wv, grp * RPB + rib, 0);
    uint4 gpre[FG_NORM_PF];
#pragma unroll
    for (int k = 0; k < FG_NORM_PF; k++) {
        int64_t v = threadIdx.x + (int64_t)k * FG_THREADS;
        gpre[k] = NORM && v < nvec ? __ldg((const uint4 *)a.norm_w + v) : make_uint4(0, 0, 0, 0);
    }
    pdl_wait();
    /* stage the input rows: raw, then (NORM) each scaled by its rstd and the norm weight, rounded to bf16 */
    {
        float ss[MAXN];
#pragma unroll
        for (int n = 0; n < MAXN; n++) ss[n] = 0.0f;
#pragma unroll
        for (int n = 0; n < MAXN; n++) {
            if (n >= a.n) break;
            const uint4 *src = (const uint4 *)((const __nv_bfloat16 *)a.inp + (int64_t)(a.rows ? a.rows[n] : n) * a.K);
            for (int64_t v = threadIdx.x; v < nvec; v += FG_THREADS) {
                uint4 raw = src[v];
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
    for (; grp < ngroups; grp += gridDim.x) {
        const int64_t oc = grp * RPB + rib, next = grp + gridDim.x;
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
                float wf[NW][8];
#pragma unroll
                for (int r = 0; r < NW; r++) bf16x8_to_f32(wv[r][u], wf[r]);
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
            if (first + (j0 + PF) * stride >= nvec) break;
            load(wv, oc, j0 + PF); /* rows longer than PF vectors a lane: the next batch */
        }
        if (!one_batch && next < ngroups) load(wv, next * RPB + rib, 0);
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
        if (one_batch)
#pragma unroll
            for (int r = 0; r < NW; r++)
#pragma unroll
                for (int u = 0; u < PF; u++) wv[r][u] = wn[r][u];
        if (!fin) continue;
        int64_t at = (int64_t)n_fin * a.OC + oc_fin;
        float b = a.bias ? __bfloat162float(((const __nv_bfloat16 *)a.bias)[oc_fin]) : 0.0f;
        if constexpr (MODE == CPT_FUSED_BF16) {
            ((__nv_bfloat16 *)a.out)[at] = __float2bfloat16(res[0] + b);
        } else if constexpr (MODE == CPT_FUSED_RESID) {
            __nv_bfloat16 *x = (__nv_bfloat16 *)a.out;
            x[at] = __float2bfloat16(__bfloat162float(x[at]) + bf16_round(res[0] + b));
        } else if constexpr (MODE == CPT_FUSED_SWIGLU) {
            float g = bf16_round(res[0]), u = bf16_round(res[NW - 1]);
            ((__nv_bfloat16 *)a.out)[at] = __float2bfloat16(silu_f(g) * u); /* as swiglu_fwd_kernel */
        } else {
            ((float *)a.out)[at] = res[0] + b;
        }
    }
}

int cpt_cuda_fused_gemv_ok(int64_t K) {
    return K > 0 && K % 8 == 0 && (size_t)K * 2 * CPT_CUDA_FUSED_MAX_ROWS <= FG_MAX_SMEM;
}

/* The smallest WPR whose lanes hold a whole row in one register set (else 8, and the kernel loops). */
static int pick_wpr(int64_t K, int nw) {
    int64_t nvec = K / 8, pf = FG_PF / nw;
    for (int wpr = 1; wpr < 8; wpr *= 2)
        if ((nvec + 32 * wpr - 1) / (32 * wpr) <= pf) return wpr;
    return 8;
}

/* As many blocks as can be resident (each walks several groups), at most one per group. Capping them at 2 a
 * multiprocessor, to leave room for the next kernel's blocks to start early, made the products slower at 1.5B (the
 * loads in flight are what the bandwidth needs). */
template <int MAXN, int WPR, int MODE, bool NORM>
static void launch_fg_w(cpt_cuda_ctx *ctx, const cpt_cuda_fused_gemv &a) {
    auto k = fused_gemv_kernel<MAXN, WPR, MODE, NORM>;
    size_t smem = (size_t)a.n * (size_t)a.K * 2;
    if (smem > 48 * 1024) CUDA_OK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    int per_sm = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k, FG_THREADS, smem) != cudaSuccess || per_sm < 1)
        per_sm = 1;
    int64_t groups = (a.OC + FG_WARPS / WPR - 1) / (FG_WARPS / WPR), most = (int64_t)per_sm * ctx->num_sms;
    launch_k(ctx, k, dim3((unsigned)(groups < most ? groups : most)), dim3(FG_THREADS), smem, a);
}

template <int MAXN, int MODE, bool NORM>
static void launch_fg(cpt_cuda_ctx *ctx, int wpr, const cpt_cuda_fused_gemv &a) {
    switch (wpr) {
    case 1: launch_fg_w<MAXN, 1, MODE, NORM>(ctx, a); break;
    case 2: launch_fg_w<MAXN, 2, MODE, NORM>(ctx, a); break;
    case 4: launch_fg_w<MAXN, 4, MODE, NORM>(ctx, a); break;
    default: launch_fg_w<MAXN, 8, MODE, NORM>(ctx, a); break;
    }
}

template <int MAXN>
static void launch_mode(cpt_cuda_ctx *ctx, const cpt_cuda_fused_gemv &a) {
    int wpr = pick_wpr(a.K, a.mode == CPT_FUSED_SWIGLU ? 2 : 1);
    switch (a.mode) {
    case CPT_FUSED_BF16:
        if (a.norm_w) launch_fg<MAXN, CPT_FUSED_BF16, true>(ctx, wpr, a);
        else launch_fg<MAXN, CPT_FUSED_BF16, false>(ctx, wpr, a);
        break;
    case CPT_FUSED_RESID: launch_fg<MAXN, CPT_FUSED_RESID, false>(ctx, wpr, a); break;
    case CPT_FUSED_SWIGLU: launch_fg<MAXN, CPT_FUSED_SWIGLU, true>(ctx, wpr, a); break;
    case CPT_FUSED_F32: launch_fg<MAXN, CPT_FUSED_F32, true>(ctx, wpr, a); break;
    }
}

void cpt_cuda_fused_gemv_run(cpt_cuda_ctx *ctx, const cpt_cuda_fused_gemv *g) {
    const char *op = "fused_gemv";
    CKCHECK(g && g->out && g->inp && g->w && g->n >= 1 && g->n <= CPT_CUDA_FUSED_MAX_ROWS &&
                cpt_cuda_fused_gemv_ok(g->K) && g->OC > 0,
            op, "n %d (1..%d), K %lld (a multiple of 8, at most %d), OC %lld", g ? g->n : -1, CPT_CUDA_FUSED_MAX_ROWS,
            g ? (long long)g->K : -1, FG_MAX_SMEM / 2 / CPT_CUDA_FUSED_MAX_ROWS, g ? (long long)g->OC : -1);
    CKCHECK(((uintptr_t)g->inp & 15) == 0 && ((uintptr_t)g->w & 15) == 0 && ((uintptr_t)g->norm_w & 15) == 0, op,
            "inp, w and norm_w must be 16-byte aligned");
    /* the residual epilogue has no normalised input (its input is the attention or swiglu output), swiglu and
     * the logits always one */
    CKCHECK(g->mode == CPT_FUSED_BF16 || (g->mode == CPT_FUSED_RESID) == (g->norm_w == NULL), op,
            "mode %d %s a norm weight", (int)g->mode, g->norm_w ? "with" : "without");
    CKCHECK(!g->rows || g->mode != CPT_FUSED_RESID, op, "a row index with the residual epilogue");
    if (g->n == 1) launch_mode<1>(ctx, *g);
    else if (g->n == 2) launch_mode<2>(ctx, *g);
    else launch_mode<4>(ctx, *g);
    LAUNCH_OK("fused_gemv_kernel");
}

void cpt_cuda_set_pdl(cpt_cuda_ctx *ctx, int on) { ctx->pdl = on; }
