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

#include "kernels/cuda/decode_fused_internal.h"

template <int MAXN, int WPR, int MODE, bool NORM>
static __global__ void __launch_bounds__(FG_THREADS) fused_gemv_kernel(cpt_cuda_fused_gemv a) {
    extern __shared__ uint4 xs_raw[]; /* [n][K / 8]: the input rows, 8 bf16 a vector */
    pdl_trigger();
    fused_gemv_block<MAXN, WPR, MODE, NORM>(a, blockIdx.x, gridDim.x, xs_raw, [] { pdl_wait(); });
}

template <int MAXN, int WPR, int MODE, bool NORM>
static __global__ void __launch_bounds__(FG_THREADS) fused_gemv_deep_kernel(cpt_cuda_fused_gemv a) {
    extern __shared__ uint4 xs_raw[];
    pdl_trigger();
    fused_gemv_block<MAXN, WPR, MODE, NORM, FG_PF_DEEP>(a, blockIdx.x, gridDim.x, xs_raw, [] { pdl_wait(); });
}

int cpt_cuda_fused_gemv_ok(int64_t K) {
    return K > 0 && K % 8 == 0 && (size_t)K * 2 * CPT_CUDA_FUSED_MAX_ROWS <= FG_MAX_SMEM;
}

/* As many blocks as can be resident (each walks several groups), at most one per group. Capping them at 2 a
 * multiprocessor, to leave room for the next kernel's blocks to start early, made the products slower at 1.5B (the
 * loads in flight are what the bandwidth needs). */
template <int MAXN, int WPR, int MODE, bool NORM> struct launch_fg {
    static void run(cpt_cuda_ctx *ctx, const cpt_cuda_fused_gemv &a, bool deep) {
        auto k = deep ? fused_gemv_deep_kernel<MAXN, WPR, MODE, NORM> : fused_gemv_kernel<MAXN, WPR, MODE, NORM>;
        size_t smem = (size_t)a.n * (size_t)a.K * 2;
        if (smem > 48 * 1024) CUDA_OK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        launch_k(ctx, k, fg_grid(ctx, k, smem, (a.OC + FG_WARPS / WPR - 1) / (FG_WARPS / WPR), 0), dim3(FG_THREADS),
                 smem, a);
    }
};

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
    if (fused_gemv_ring_launch(ctx, *g)) {
        LAUNCH_OK("fused_gemv_ring_kernel");
        return;
    }
    /* Where the ring does not fit: the deep kernel's warps per output. Where the 4-vector kernel has the same, its
     * lanes walk the same vectors in the same order (bitwise the same results) with fewer registers and twice the
     * blocks a multiprocessor; it runs for one row, and for rows longer than a register set (WPR 8) at any n (it
     * measured faster there; at n = 4 and K = 896 the deep kernel was). */
    const int nw = g->mode == CPT_FUSED_SWIGLU ? 2 : 1, wpr = pick_wpr(g->K, nw, FG_PF_DEEP);
    const bool deep = wpr != pick_wpr(g->K, nw, FG_PF) || (g->n > 1 && wpr < 8);
    fg_dispatch<launch_fg>(ctx, *g, wpr, deep);
    LAUNCH_OK("fused_gemv_kernel");
}

void cpt_cuda_set_pdl(cpt_cuda_ctx *ctx, int on) { ctx->pdl = on; }
