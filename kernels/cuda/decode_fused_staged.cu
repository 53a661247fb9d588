/* The fused decode products with their weights staged through shared memory by asynchronous copies
 * (cpt_cuda_fused_gemv with stage_kb > 0).
 *
 * Why: at batch 1 the register kernels (decode_fused.cu) reach 1.1-2.6 TB/s of the H200's 4.8: a lane holds at
 * most 8 weight vectors, a block one or two groups of outputs, so few bytes are in flight, and a kernel waits for
 * its predecessor before it asks for more than its first group. Here a block keeps `stages` chunks of consecutive
 * output rows in flight in shared memory (cp.async, 16 bytes a thread at a time: no registers held), and asks for
 * the first ones before waiting for the previous kernel: with programmatic dependent launch the next product's
 * weights stream in while this one computes. At most FS_SM_KB of blocks a multiprocessor, so the next kernel's
 * block fits beside them. (Bulk copies by the tensor memory accelerator, one per chunk, measured 2.0 TB/s where
 * the register kernel made 3.6: per-multiprocessor copy throughput, not bytes in flight, bound them.)
 *
 * Layout and sums: a chunk is a group of the register kernel with the deep layout (RPB = 8 / WPR outputs, WPR warps
 * an output, lanes over the row's 16-byte vectors in the same order, the same warp reduction and epilogue), so the
 * results are bitwise those of the deep kernel (cpt_cuda_fused_gemv.deep = 1). */
#include "kernels/cuda/attention_internal.h"
#include "kernels/cuda/decode_fused_internal.h"

#define FS_MAX_STAGES 8
#define FS_SM_KB 112 /* shared memory of this kernel's blocks a multiprocessor */

/* waits until at most n of this thread's cp.async groups are pending (n < FS_MAX_STAGES) */
static __device__ __forceinline__ void cp_async_wait_pending(int n) {
    switch (n) {
    case 0: cp_async_wait_group<0>(); break;
    case 1: cp_async_wait_group<1>(); break;
    case 2: cp_async_wait_group<2>(); break;
    case 3: cp_async_wait_group<3>(); break;
    case 4: cp_async_wait_group<4>(); break;
    case 5: cp_async_wait_group<5>(); break;
    case 6: cp_async_wait_group<6>(); break;
    default: cp_async_wait_group<7>(); break;
    }
}

template <int MAXN, int WPR, int MODE, bool NORM>
static __global__ void __launch_bounds__(FG_THREADS, 2) fused_gemv_staged_kernel(cpt_cuda_fused_gemv a, int stages) {
    constexpr int R = FG_WARPS / WPR;                    /* outputs a chunk */
    constexpr int NW = MODE == CPT_FUSED_SWIGLU ? 2 : 1; /* weight rows an output: gate and up */
    extern __shared__ __align__(128) unsigned char fs_smem[];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, ks = warp % WPR, rib = warp / WPR;
    const int64_t nvec = a.K / 8, stride = WPR * 32, first = ks * 32 + lane;
    const int64_t nchunks = (a.OC + R - 1) / R, nk = (nchunks - blockIdx.x + gridDim.x - 1) / gridDim.x;
    const size_t stage_vecs = fg_align((size_t)NW * R * a.K * 2) / 16;
    uint4 *xs = (uint4 *)fs_smem; /* [n][K / 8]: the (normalised) input rows */
    uint4 *stage0 = xs + fg_align((size_t)a.n * a.K * 2) / 16;
    /* every thread: its share of this block's k-th chunk into stage k % stages (gate rows, then up rows R rows
     * further), as one cp.async group (empty past the last chunk, so the group count stays k + 1) */
    auto issue = [&](int64_t k) {
        if (k < nk) {
            uint4 *st = stage0 + (size_t)(k % stages) * stage_vecs;
            const int64_t oc0 = (blockIdx.x + k * gridDim.x) * R, rows = a.OC - oc0 < R ? a.OC - oc0 : R;
#pragma unroll
            for (int r = 0; r < NW; r++) {
                const uint4 *src = (const uint4 *)a.w + ((r ? a.OC : 0) + oc0) * nvec;
                for (int64_t f = threadIdx.x; f < rows * nvec; f += FG_THREADS)
                    cp_async16(st + (size_t)r * R * nvec + f, src + f, true);
            }
        }
        cp_async_commit();
    };
    pdl_trigger();
    /* the weights never depend on the previous kernel: the first stages are asked for before waiting for it */
    for (int k = 0; k < stages - 1; k++) issue(k);
    uint4 gpre[FG_NORM_PF];
    fg_norm_prefetch<NORM>(a, gpre);
    pdl_wait();
    fg_stage_inputs<MAXN, NORM>(a, xs, gpre);
    for (int64_t k = 0; k < nk; k++) {
        const int64_t grp = blockIdx.x + k * gridDim.x, oc = grp * R + rib;
        const bool live = oc < a.OC;
        cp_async_wait_pending(stages - 2); /* this thread's part of chunk k has landed */
        __syncthreads();                   /* everyone's has; and everyone is done with chunk k - 1's stage */
        issue(k + stages - 1);             /* into that stage */
        float acc[NW][MAXN];
#pragma unroll
        for (int r = 0; r < NW; r++)
#pragma unroll
            for (int n = 0; n < MAXN; n++) acc[r][n] = 0.0f;
        const uint4 *cw = stage0 + (size_t)(k % stages) * stage_vecs;
        if (live)
#pragma unroll 4
            for (int64_t v = first; v < nvec; v += stride) {
                uint4 w[NW];
#pragma unroll
                for (int r = 0; r < NW; r++) w[r] = cw[(r * R + rib) * nvec + v];
                fg_dot<MAXN, NW>(a, xs, nvec, v, w, acc);
            }
        fg_finish<MAXN, WPR, MODE, NW>(a, acc, grp, oc, live);
    }
    cp_async_wait_pending(0);
}

/* Shared memory of the launch, or 0 when two stages do not fit beside the input rows. */
static size_t fs_smem_bytes(const cpt_cuda_fused_gemv &a, int wpr, int *stages) {
    const int nw = a.mode == CPT_FUSED_SWIGLU ? 2 : 1, R = FG_WARPS / wpr;
    const size_t xs = fg_align((size_t)a.n * a.K * 2), st = fg_align((size_t)nw * R * a.K * 2);
    const size_t budget = (size_t)a.stage_kb * 1024;
    int s = budget > xs ? (int)((budget - xs) / st) : 0;
    s = s < 2 ? 2 : s > FS_MAX_STAGES ? FS_MAX_STAGES : s;
    *stages = s;
    return xs + s * st <= 227 * 1024 ? xs + s * st : 0;
}

template <int MAXN, int WPR, int MODE, bool NORM> struct launch_fs {
    static void run(cpt_cuda_ctx *ctx, const cpt_cuda_fused_gemv &a, int stages, size_t smem) {
        auto k = fused_gemv_staged_kernel<MAXN, WPR, MODE, NORM>;
        CUDA_OK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        /* blocks a multiprocessor: as many as fit in FS_SM_KB, the rest of its shared memory left to the next kernel */
        const int64_t chunks = (a.OC + FG_WARPS / WPR - 1) / (FG_WARPS / WPR);
        const int64_t per_sm = a.stage_kb < FS_SM_KB ? FS_SM_KB / a.stage_kb : 1, most = per_sm * ctx->num_sms;
        launch_k(ctx, k, dim3((unsigned)(chunks < most ? chunks : most)), dim3(FG_THREADS), smem, a, stages);
    }
};

int fused_gemv_staged_launch(cpt_cuda_ctx *ctx, const cpt_cuda_fused_gemv &a) {
    const int wpr = pick_wpr(a.K, a.mode == CPT_FUSED_SWIGLU ? 2 : 1, FG_PF_DEEP); /* the deep kernel's layout */
    int stages;
    const size_t smem = fs_smem_bytes(a, wpr, &stages);
    if (!smem) return 0;
    fg_dispatch<launch_fs>(ctx, a, wpr, stages, smem);
    return 1;
}
