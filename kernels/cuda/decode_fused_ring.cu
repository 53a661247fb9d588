/* The fused decode products with each thread's weights streamed through its own ring of shared memory slots
 * (cpt_cuda_fused_gemv; the register kernels of decode_fused.cu run where the slots do not fit).
 *
 * Why: per kernel, the register products stream at full bandwidth once running but pay several microseconds of ramp
 * and tail, and a lane holds at most 8 weight vectors in registers and asks for the next ones only when its output
 * ends. Here a thread keeps FR_VECS 16-byte weight vectors in flight (cp.async into its own slots: no registers
 * held, no barrier between threads, since every thread reads only the slots it filled), across outputs and groups;
 * the first FR_VECS are asked for before the wait for the previous kernel. FG_RING_BLOCKS blocks a multiprocessor of
 * 8 slots each (64 registers, no spills) measured best: the warps in flight, not only the bytes, set the pace
 * (docs/performance.md, "GPU decode").
 *
 * Layout and sums: those of the deep register kernel: WPR warps an output, a lane walks the row's 16-byte vectors
 * first, first + 32 WPR, ..., the same dot, warp reduction and epilogue, so the results are bitwise the deep
 * kernel's. */
#include "kernels/cuda/attention_internal.h"
#include "kernels/cuda/decode_fused_internal.h"

#ifndef FR_VECS
#define FR_VECS 8 /* 16-byte weight vectors a thread has in flight (even): 32 KB a block */
#endif
#ifndef FR_MINB
#define FR_MINB 4 /* blocks a multiprocessor the registers are budgeted for (64 registers, no spills) */
#endif

/* a 16-byte weight vector into a slot, marked first to leave L2 (pol: evict_first): the weights are read once a
 * step, the activations and the KV cache again (a few percent of decode tok/s at batches 1 and 4). */
static __device__ __forceinline__ void fr_copy16(void *dst, const void *src, uint64_t pol) {
    asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2;\n" ::"r"(smem_u32(dst)), "l"(src),
                 "l"(pol));
}

template <int MAXN, int WPR, int MODE, bool NORM>
static __global__ void __launch_bounds__(FG_THREADS, FR_MINB) fused_gemv_ring_kernel(cpt_cuda_fused_gemv a) {
    constexpr int RPB = FG_WARPS / WPR;                  /* outputs a group */
    constexpr int NW = MODE == CPT_FUSED_SWIGLU ? 2 : 1; /* weight rows an output: gate and up */
    constexpr int D = FR_VECS / NW;                      /* elements (an output's NW vectors) in flight */
    static_assert(D >= 1 && D * NW == FR_VECS, "FR_VECS must be even");
    extern __shared__ __align__(128) unsigned char fr_smem[];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, ks = warp % WPR, rib = warp / WPR;
    const int64_t nvec = a.K / 8, stride = WPR * 32, first = ks * 32 + lane;
    const int64_t ngroups = (a.OC + RPB - 1) / RPB;
    uint4 *xs = (uint4 *)fr_smem;                                  /* [n][K / 8]: the (normalised) input rows */
    uint4 *ring = xs + fg_align((size_t)a.n * a.K * 2) / 16;       /* [D][NW][FG_THREADS] */
    /* this thread's elements: for each of its groups with a live output (oc < OC; only the last group of the grid
     * can have dead ones), its cnt vectors of that output's row(s) */
    const int64_t cnt = first < nvec ? (nvec - first + stride - 1) / stride : 0;
    const int64_t last_live = rib < a.OC ? (a.OC - 1 - rib) / RPB : -1; /* the last group whose output is live */
    const int64_t n_live = last_live >= blockIdx.x ? (last_live - blockIdx.x) / gridDim.x + 1 : 0;
    const int64_t n_el = n_live * cnt;
    const uint4 *w0 = (const uint4 *)a.w;
    int64_t pe = 0, pj = 0, poc = (int64_t)blockIdx.x * RPB + rib; /* the next element to ask for */
    int ps = 0, cs = 0; /* the slots of the next element asked for and consumed */
    uint64_t pol;
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
    /* one cp.async group per element (empty past the last), so element e has landed once at most D - 1 of this
     * thread's groups are pending after D + e commits */
    auto issue = [&]() {
        if (pe < n_el) {
            uint4 *slot = ring + (size_t)ps * NW * FG_THREADS + threadIdx.x;
            if (++ps == D) ps = 0;
            const int64_t v = first + pj * stride;
#pragma unroll
            for (int r = 0; r < NW; r++)
                fr_copy16(slot + r * FG_THREADS, w0 + ((r ? a.OC : 0) + poc) * nvec + v, pol);
            if (++pj == cnt) pj = 0, poc += (int64_t)gridDim.x * RPB;
            pe++;
        }
        cp_async_commit();
    };
    pdl_trigger();
    /* the weights never depend on the previous kernel: the first D elements are asked for before waiting for it */
#pragma unroll
    for (int i = 0; i < D; i++) issue();
    uint4 gpre[FG_NORM_PF];
    fg_norm_prefetch<NORM>(a, gpre);
    pdl_wait();
    fg_stage_inputs<MAXN, NORM>(a, xs, gpre);
    for (int64_t grp = blockIdx.x; grp < ngroups; grp += gridDim.x) {
        const int64_t oc = grp * RPB + rib;
        const bool live = oc < a.OC;
        float acc[NW][MAXN];
#pragma unroll
        for (int r = 0; r < NW; r++)
#pragma unroll
            for (int n = 0; n < MAXN; n++) acc[r][n] = 0.0f;
        if (live)
            for (int64_t j = 0; j < cnt; j++) {
                cp_async_wait_group<D - 1>();
                const uint4 *slot = ring + (size_t)cs * NW * FG_THREADS + threadIdx.x;
                if (++cs == D) cs = 0;
                uint4 w[NW];
#pragma unroll
                for (int r = 0; r < NW; r++) w[r] = slot[r * FG_THREADS];
                fg_dot<MAXN, NW>(a, xs, nvec, first + j * stride, w, acc);
                asm volatile("" ::: "memory"); /* the slot is read before it is asked to be refilled */
                issue();
            }
        fg_finish<MAXN, WPR, MODE, NW>(a, acc, grp, oc, live);
    }
    cp_async_wait_all();
}

static size_t fr_smem_bytes(const cpt_cuda_fused_gemv &a) {
    return fg_align((size_t)a.n * a.K * 2) + (size_t)FR_VECS * FG_THREADS * 16;
}

template <int MAXN, int WPR, int MODE, bool NORM> struct launch_fr {
    static void run(cpt_cuda_ctx *ctx, const cpt_cuda_fused_gemv &a, size_t smem) {
        auto k = fused_gemv_ring_kernel<MAXN, WPR, MODE, NORM>;
        CUDA_OK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        /* FG_RING_BLOCKS blocks a multiprocessor, at most as many as can be resident (no second wave) */
        launch_k(ctx, k, fg_grid(ctx, k, smem, (a.OC + FG_WARPS / WPR - 1) / (FG_WARPS / WPR), FG_RING_BLOCKS),
                 dim3(FG_THREADS), smem, a);
    }
};

int fused_gemv_ring_launch(cpt_cuda_ctx *ctx, const cpt_cuda_fused_gemv &a) {
    const size_t smem = fr_smem_bytes(a);
    if (smem > 227 * 1024) return 0;
    fg_dispatch<launch_fr>(ctx, a, pick_wpr(a.K, a.mode == CPT_FUSED_SWIGLU ? 2 : 1, FG_PF_DEEP), smem);
    return 1;
}
