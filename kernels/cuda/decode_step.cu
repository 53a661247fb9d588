/* A decode step of a few rows in one persistent kernel (cpt_cuda_decode_step in cuda_ops.h).
 *
 * Why: at batch 1 the step streams the weights once (0.99 GB at 0.5B), but as ~5 kernels a layer each pays its
 * launch, ramp-up and tail; the step ran at 20-30% of the HBM roofline. Here one cooperative grid runs every
 * phase of every layer, with a grid barrier where a kernel boundary was:
 *
 *   qkv = norm(x) Wqkv + b | attention with the append | x += att Wo + bo | a = swiglu(norm(x) Wgu) | x += a Wdown
 *   ... then logits = norm(x[last]) lm^T
 *
 * The products are the fused kernels' body (decode_fused_internal.h), whose wait() point comes after a block
 * has issued its first weight loads: here wait() is the grid barrier, so each phase's weights are already in flight
 * while the grid waits for the previous phase. The attention is the tensor-core kernel's body
 * (paged_attention_mma_internal.h) on the first 2 or 4 warps of a block with a named barrier, items (row, kv head, split)
 * spread over the grid, the splits merged by their last block as in that kernel; the other warps go on to the
 * next phase's weight loads. Every value is computed by the same code in the same order as those kernels launched one
 * by one, so the logits are bitwise the same.
 *
 * Memory ordering: a barrier is __syncthreads, a device-scope fence and an arrival on a counter by thread 0, a spin
 * until every block arrived (acquire loads), __syncthreads. Activations are read through L2 (__ldcg) by both
 * bodies, since this SM's L1 may hold what another block overwrote since. */
#include "kernels/cuda/decode_fused_internal.h"
#include "kernels/cuda/paged_attention_mma_internal.h"

static __device__ __forceinline__ unsigned ld_acquire_gpu(const unsigned *p) {
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

/* The k-th barrier of the step (k counts from 1): every block has arrived k times. A wait of seconds means a block
 * is gone (a bug, not load): trap, so the step fails with an error instead of hanging the stream. */
static __device__ __forceinline__ void grid_barrier(unsigned *count, unsigned k) {
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        atomicAdd(count, 1u);
        const unsigned target = k * gridDim.x;
        for (unsigned spins = 0; ld_acquire_gpu(count) < target; spins++) {
            if (spins == (1u << 26)) __trap();
            __nanosleep(32);
        }
        __threadfence();
    }
    __syncthreads();
}

/* Layer l's attention: items (row i, kv head, split) over the grid, each by the first warps of a block, as many as
 * the attention kernel has (pam_warps: the same tiles, the same order of sums). */
template <int D>
static __device__ __forceinline__ void attention_phase(const cpt_cuda_decode_step &s, int l,
                                                       const cpt_cuda_decode_layer &w, unsigned char *smem) {
    constexpr int NW = pam_warps<D>::NW, NT = NW * 32;
    if (threadIdx.x >= NT) return; /* to the next phase's first loads, then its barrier */
    const attn_append ap = {(const __nv_bfloat16 *)w.q_norm, (const __nv_bfloat16 *)w.k_norm, s.eps, s.inv_freq};
    const int per_row = s.KV * s.n_splits, items = s.n * per_row, G = s.H / s.KV;
    for (int it = blockIdx.x; it < items; it += gridDim.x) {
        const int i = it / per_row, kvh = (it % per_row) / s.n_splits, sp = it % s.n_splits;
        const int len = s.pos[i] + 1, t = s.tab[i];
        const int split_len = s.n_splits == 1 ? len : s.split_len[i];
        const int start = sp * split_len, end = min(len, start + split_len);
        if (start >= end)
            empty_split_partials(s.partial, i, s.H, kvh, G, s.n_splits, sp, D, threadIdx.x, NT);
        else
            attend_mma<D, NW, NT>((__nv_bfloat16 *)s.att, s.partial, (const __nv_bfloat16 *)s.qkv, s.kv, l, t,
                                            start, end, i, kvh, sp, s.n_splits, s.H, s.KV, ap, len - 1, smem);
        merge_if_last<NT>((__nv_bfloat16 *)s.att, s.partial, s.counters, i, s.H, s.KV, kvh, s.n_splits, D);
    }
}

/* MAXN: rows bound; D: head_dim; WC, WGU, WI: warps per output of the products over the hidden size (qkv, o, LM
 * head), of gate/up, and over the intermediate size (down), as the fused kernels pick them (pick_wpr); MINB:
 * blocks a multiprocessor must hold (2: at most 128 registers a thread, which spills some of the attention's
 * accumulators at head_dim 128; 1: no spills, 8 warps a multiprocessor for the products' loads). */
template <int MAXN, int D, int WC, int WGU, int WI, int MINB>
static __global__ void __launch_bounds__(FG_THREADS, MINB) decode_step_kernel(cpt_cuda_decode_step s) {
    extern __shared__ __align__(16) unsigned char ds_smem[];
    uint4 *xs = (uint4 *)ds_smem;
    unsigned k = 0;
    auto barrier = [&] { grid_barrier(s.barrier, ++k); };
    const int64_t QKV = (int64_t)(s.H + 2 * s.KV) * D, HD = (int64_t)s.H * D;
    const int64_t b0 = blockIdx.x, nb = gridDim.x;
    for (int l = 0; l < s.n_layers; l++) {
        const cpt_cuda_decode_layer w = s.layers[l];
        const cpt_cuda_fused_gemv qkv = {CPT_FUSED_BF16, s.qkv, s.x, NULL, w.ln1, s.eps, w.wqkv, w.bqkv, s.n, s.C, QKV};
        if (l == 0) /* x comes from the embedding kernel, complete before this one started */
            fused_gemv_block<MAXN, WC, CPT_FUSED_BF16, true>(qkv, b0, nb, xs, [] {});
        else
            fused_gemv_block<MAXN, WC, CPT_FUSED_BF16, true>(qkv, b0, nb, xs, barrier);
        barrier();
        attention_phase<D>(s, l, w, ds_smem);
        const cpt_cuda_fused_gemv o = {CPT_FUSED_RESID, s.x, s.att, NULL, NULL, s.eps, w.wo, w.bo, s.n, HD, s.C};
        fused_gemv_block<MAXN, WC, CPT_FUSED_RESID, false>(o, b0, nb, xs, barrier);
        const cpt_cuda_fused_gemv gu = {CPT_FUSED_SWIGLU, s.a, s.x, NULL, w.ln2, s.eps, w.wgu, NULL, s.n, s.C, s.I};
        fused_gemv_block<MAXN, WGU, CPT_FUSED_SWIGLU, true>(gu, b0, nb, xs, barrier);
        const cpt_cuda_fused_gemv down = {CPT_FUSED_RESID, s.x, s.a, NULL, NULL, s.eps, w.wdown, NULL, s.n, s.I, s.C};
        fused_gemv_block<MAXN, WI, CPT_FUSED_RESID, false>(down, b0, nb, xs, barrier);
    }
    const cpt_cuda_fused_gemv lm = {CPT_FUSED_F32, s.logits, s.x, s.last, s.norm, s.eps, s.lm, NULL, s.n, s.C, s.V};
    fused_gemv_block<MAXN, WC, CPT_FUSED_F32, true>(lm, b0, nb, xs, barrier);
}

/* The compiled (head_dim, WC, WGU, WI) sets: the tests' model (hidden 448, intermediate 1024), Qwen2.5-0.5B (896,
 * 4864) and 1.5B (1536, 8960). Each set is one kernel per rows bound (1, 4) and blocks a multiprocessor (1, 2). */
struct ds_set {
    int D, wc, wgu, wi;
};
static const ds_set DS_SETS[] = {{64, 1, 1, 1}, {64, 1, 2, 8}, {128, 2, 4, 8}};

static int ds_set_of(const cpt_cuda_decode_step *s) {
    int wc = pick_wpr(s->C, 1), wgu = pick_wpr(s->C, 2), wi = pick_wpr(s->I, 1);
    for (int k = 0; k < (int)(sizeof DS_SETS / sizeof DS_SETS[0]); k++)
        if (DS_SETS[k].D == s->D && DS_SETS[k].wc == wc && DS_SETS[k].wgu == wgu && DS_SETS[k].wi == wi) return k;
    return -1;
}

int cpt_cuda_decode_step_ok(const cpt_cuda_decode_step *s) {
    cpt_attn_shape a = {s->H, s->KV, s->D};
    return s->n >= 1 && s->n <= CPT_CUDA_FUSED_MAX_ROWS && cpt_cuda_paged_attention_mma_ok(a) &&
           s->C == (int64_t)s->H * s->D && cpt_cuda_fused_gemv_ok(s->C) && cpt_cuda_fused_gemv_ok(s->I) &&
           s->n_splits >= 1 && s->n_splits <= MERGE_MAX_SPLITS && ds_set_of(s) >= 0;
}

template <int MAXN, int D, int WC, int WGU, int WI, int MINB>
static void launch_step(cpt_cuda_ctx *ctx, const cpt_cuda_decode_step &s) {
    auto kern = decode_step_kernel<MAXN, D, WC, WGU, WI, MINB>;
    size_t rows = (size_t)s.n * (size_t)(s.I > s.C ? s.I : s.C) * 2, att = pam_cfg<D, pam_warps<D>::NW>::smem;
    size_t smem = rows > att ? rows : att;
    if (smem > 48 * 1024)
        CUDA_OK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    int per_sm = 0;
    CUDA_OK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kern, FG_THREADS, smem));
    CKCHECK(per_sm >= 1, "decode_step", "no block of %zu bytes of shared memory fits a multiprocessor", smem);
    if (per_sm > MINB) per_sm = MINB;
    CUDA_OK(cudaMemsetAsync(s.barrier, 0, sizeof(unsigned), ctx->stream));
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)(per_sm * ctx->num_sms));
    cfg.blockDim = dim3(FG_THREADS);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = ctx->stream;
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeCooperative; /* all blocks resident, or the launch fails: the barriers need it */
    at[0].val.cooperative = 1;
    cfg.attrs = at;
    cfg.numAttrs = 1;
    CUDA_OK(cudaLaunchKernelEx(&cfg, kern, s));
}

template <int D, int WC, int WGU, int WI>
static void launch_rows(cpt_cuda_ctx *ctx, const cpt_cuda_decode_step &s) {
    if (s.blocks_per_sm == 1) {
        if (s.n == 1) launch_step<1, D, WC, WGU, WI, 1>(ctx, s);
        else launch_step<4, D, WC, WGU, WI, 1>(ctx, s);
    } else {
        if (s.n == 1) launch_step<1, D, WC, WGU, WI, 2>(ctx, s);
        else launch_step<4, D, WC, WGU, WI, 2>(ctx, s);
    }
}

void cpt_cuda_decode_step_run(cpt_cuda_ctx *ctx, const cpt_cuda_decode_step *s) {
    CKCHECK(s && cpt_cuda_decode_step_ok(s), "decode_step",
            "no step kernel for n %d, heads %d/%d of %d, hidden %lld, intermediate %lld, %d splits", s ? s->n : -1,
            s ? s->H : -1, s ? s->KV : -1, s ? s->D : -1, s ? (long long)s->C : -1, s ? (long long)s->I : -1,
            s ? s->n_splits : -1);
    CKCHECK(s->layers && s->x && s->qkv && s->att && s->a && s->logits && s->last && s->pos && s->tab &&
                s->inv_freq && s->barrier && (s->n_splits == 1 || (s->partial && s->split_len && s->counters)),
            "decode_step", "missing operand");
    switch (ds_set_of(s)) {
    case 0: launch_rows<64, 1, 1, 1>(ctx, *s); break;
    case 1: launch_rows<64, 1, 2, 8>(ctx, *s); break;
    default: launch_rows<128, 2, 4, 8>(ctx, *s); break;
    }
    LAUNCH_OK("decode_step_kernel");
}
