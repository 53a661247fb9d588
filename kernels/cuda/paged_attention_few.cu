/* Paged decode attention for steps of a few rows (cpt_cuda_paged_attention_v2 with CPT_ATTN_FEW): the tensor-core
 * products of paged_attention_mma.cu, arranged for latency instead of throughput.
 *
 * Why: at batch 1 the attention is a chain of latencies, not bytes (the 1.5B shape reads ~0.8 MB of keys and
 * values a layer). Timed in the decode step by leaving it out, the tensor-core kernel cost ~40% of the step at
 * batch 1 (docs/performance.md). Its chain: wait for the qkv
 * product, rotate the queries, append, fence, load the first tile, compute, load the next, write partials, fence,
 * count, and the last block reads every partial back from L2 to merge them.
 *
 * Here:
 * - Keys and values of the earlier positions were written by earlier steps, so each block issues the loads of its
 *   whole split (up to 128 positions in shared memory) before it waits for the previous kernel
 *   (griddepcontrol.wait): the HBM latency overlaps the qkv product's tail.
 * - After the wait, one 16-byte load a thread brings the row's queries, key and value from L2 (one round trip; the
 *   RoPE angles were computed before the wait), rotated from shared memory (a little faster at batch 1 than a round
 *   trip per head and pair); the new position's key and value go from there into the tile (and to
 *   the pages for later steps), not through a fence and a reload.
 * - The splits of a (row, kv head) are one thread block cluster: their partials stay in shared memory and are
 *   merged through distributed shared memory after a cluster barrier (no partials in HBM, no counters).
 *
 * Block (row i, kv head, split), PAF_WARPS (8) warps, clusters of n_splits (<= 8) blocks along the splits. Warp w
 * owns positions 16w .. 16w+15 of every 16 PAF_WARPS-position tile. Splits longer than 128 positions (rows longer
 * than 1,024 at 8 splits) load their further positions after the first 128 are done.
 *
 * The sums: within a split as attend_mma (tiles in order, per-warp online softmax in log2 units, warps merged in
 * order); splits merged in split order with weights 2^(m_s - M). The result depends on the row's own split length
 * only (decoder: the row's own context), so a row decodes alike whatever shares its step. */
#include <cooperative_groups.h>

#include "kernels/cuda/paged_attention_mma_internal.h"

namespace cg = cooperative_groups;

#ifndef PAF_WARPS
/* warps a block: a tile is 16 positions a warp. 8, with the decoder's 128-position splits (half as many blocks to a
 * cluster as 4 warps on 64 positions): measured faster at batch 1 (docs/performance.md) */
#define PAF_WARPS 8
#endif

template <int D> struct paf_cfg {
    static constexpr int NW = PAF_WARPS, NT = NW * 32, BN = 16 * NW; /* positions a tile */
    static constexpr int ROWS = 128;                                  /* positions in shared memory at once */
    static constexpr int SD = attn_pad<D>::SD;
    /* sQ, then the K/V tiles, which after the products hold the warps' o [NW][16][D] and the block's partial [16][D]
     * (fp32) */
    static constexpr size_t tiles = (size_t)2 * ROWS * SD * sizeof(__nv_bfloat16),
                            merge = (size_t)(NW + 1) * 16 * D * sizeof(float);
    static constexpr size_t smem = (size_t)16 * SD * sizeof(__nv_bfloat16) + (tiles > merge ? tiles : merge);
    static_assert(ROWS % BN == 0, "paged few attention: ROWS must be whole tiles");
};

/* Positions p0 .. p0 + n - 1 of table t (kv head kvh) into rows 0 .. n - 1 of sK / sV; row skip (the position this
 * block appends, written from registers) is not touched; rows n .. ROWS - 1 are zero-filled. */
template <int D>
static __device__ __forceinline__ void paf_load(__nv_bfloat16 *sK, __nv_bfloat16 *sV, const cpt_cuda_paged_kv &kv,
                                                int layer, int t, int kvh, int p0, int n, int skip, int64_t vshift) {
    constexpr int CH = D / 8, SD = paf_cfg<D>::SD, NT = paf_cfg<D>::NT, ROWS = paf_cfg<D>::ROWS;
    const __nv_bfloat16 *pool = (const __nv_bfloat16 *)kv.pool;
    const int k = (threadIdx.x % CH) * 8;
    for (int r = threadIdx.x / CH; r < ROWS; r += NT / CH) {
        if (r == skip) continue;
        const bool v = r < n;
        const __nv_bfloat16 *src = v ? pool + kv_row(kv, layer, 0, t, p0 + r) + (int64_t)kvh * D + k : pool;
        cp_async16(sK + r * SD + k, src, v);
        cp_async16(sV + r * SD + k, v ? src + vshift : pool, v);
    }
    cp_async_commit();
}

template <int D>
static __global__ void __launch_bounds__(paf_cfg<D>::NT) paged_attention_few_kernel(
    __nv_bfloat16 *out, const __nv_bfloat16 *qkv, cpt_cuda_paged_kv kv, int layer, const int32_t *pos,
    const int32_t *tab, const int32_t *split_len_p, int n_splits, int H, int KV, attn_append ap) {
    constexpr int NW = paf_cfg<D>::NW, NT = paf_cfg<D>::NT, BN = paf_cfg<D>::BN, ROWS = paf_cfg<D>::ROWS,
                  SD = paf_cfg<D>::SD;
    extern __shared__ __align__(16) unsigned char paf_smem[];
    __shared__ float m_w[NW][16], l_w[NW][16], pm_s[16], pl_s[16], sn_s[D / 2], cs_s[D / 2];
    __shared__ __align__(16) __nv_bfloat16 raw_s[18 * D]; /* the G <= 16 query heads, the key, the value */
    __nv_bfloat16 *sQ = (__nv_bfloat16 *)paf_smem, *sK = sQ + 16 * SD, *sV = sK + ROWS * SD;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int64_t i = blockIdx.x;
    const int kvh = blockIdx.y, sp = blockIdx.z, G = H / KV, QKV = (H + 2 * KV) * D, half = D / 2;
    const int len = pos[i] + 1, t = tab[i], p = len - 1;
    const int split_len = n_splits == 1 ? len : split_len_p[i];
    const int start = sp * split_len, end = min(len, start + split_len);
    const int64_t vshift = (int64_t)kv.n_blocks * kv.block_size * kv.n_kv_heads * D; /* K -> V of one layer */
    const bool has_p = start <= p && p < end, p_first = has_p && p - start < ROWS;
    pdl_trigger();

    /* 1. before the wait: the split's first ROWS positions, which earlier steps wrote (all but p), and the RoPE
     * angles at p */
    if (start < end)
        paf_load<D>(sK, sV, kv, layer, t, kvh, start, min(end - start, ROWS), p_first ? p - start : -1, vshift);
    for (int k = tid; k < half; k += NT) rope_angle(p, ap.inv_freq, k, sn_s[k], cs_s[k]);
    pdl_wait();

    /* 2. the row's G query heads and kv head kvh's key and value, one 16-byte load through L2 a thread (one round
     * trip, not one per head and pair), then from shared memory: the queries rotated (rounded as kv_append stores
     * them; rows G..15 zero) and, in the split that holds it, the new position's key and value: to the pages, and
     * into the tile when it is in the first ROWS */
    const __nv_bfloat16 *qrow = qkv + i * QKV;
    {
        const int nq = G * D / 8, nk = D / 8;
        for (int c = tid; c < nq + 2 * nk; c += NT) {
            const int64_t at = c < nq ? (int64_t)kvh * G * D + c * 8
                                      : (int64_t)(c < nq + nk ? H + kvh : H + KV + kvh) * D + (c - nq) % nk * 8;
            ((uint4 *)raw_s)[c] = __ldcg((const uint4 *)(qrow + at));
        }
    }
    __syncthreads();
    auto trig = [&](int k, float &sn, float &cs) { sn = sn_s[k], cs = cs_s[k]; };
    pam_rope_rows<D, NW>(
        sQ, G, [&](int r) { return (const __nv_bfloat16 *)raw_s + r * D; },
        [](const __nv_bfloat16 *src, int d) { return __bfloat162float(src[d]); }, trig, ap, warp, lane);
    if (has_p) {
        __nv_bfloat16 *pool = (__nv_bfloat16 *)kv.pool;
        const int64_t kr = kv_row(kv, layer, 0, t, p) + (int64_t)kvh * D, vr = kr + vshift;
        const int rp = p - start;
        const __nv_bfloat16 *kraw = raw_s + G * D, *vraw = kraw + D;
        if (warp == 0)
            norm_rope_from([&](int d) { return __bfloat162float(kraw[d]); }, trig, ap.k_norm, ap.eps, D, lane,
                           [&](int k, float x0, float x1) {
                               __nv_bfloat16 a = __float2bfloat16(x0), b = __float2bfloat16(x1);
                               pool[kr + k] = a;
                               pool[kr + k + half] = b;
                               if (p_first) sK[rp * SD + k] = a, sK[rp * SD + k + half] = b;
                           });
        else if (warp == 1)
            for (int d = lane; d < D; d += 32) {
                __nv_bfloat16 v = vraw[d];
                pool[vr + d] = v;
                if (p_first) sV[rp * SD + d] = v;
            }
        if (!p_first) __threadfence(); /* a later chunk's cp.async reads it through L2 */
    }
    cp_async_wait_all();
    __syncthreads();

    /* 3. the products over the split, ROWS positions at a time */
    const float scale_log2 = rsqrtf((float)D) * ATTN_LOG2E;
    uint32_t qf[D / 16][4];
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++) lds_a<D>(qf[kk], sQ, 0, kk * 16, lane);
    float o[D / 8][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
#pragma unroll
    for (int x = 0; x < D / 8; x++) o[x][0] = o[x][1] = o[x][2] = o[x][3] = 0.0f;
    for (int c0 = start; c0 < end; c0 += ROWS) {
        if (c0 > start) { /* a split longer than ROWS: the next positions, after every warp is done with these */
            __syncthreads();
            paf_load<D>(sK, sV, kv, layer, t, kvh, c0, min(end - c0, ROWS), -1, vshift);
            cp_async_wait_all();
            __syncthreads();
        }
        for (int tt = 0; tt < ROWS / BN; tt++) {
            const int r0 = tt * BN + warp * 16, w0 = c0 + r0; /* this warp's first row and position */
            if (w0 >= end) break;
            pam_warp_tile<D>(sK, sV, r0, w0, end, qf, scale_log2, m, l, o, lane);
        }
    }

    /* 4. the warps' (o, m, l) merged into the block's partial (unnormalised o, max in log2 units, sum: an empty
     * split has max -inf and sum 0), in the tiles' memory after the warps' o */
    float *part = (float *)sK + NW * 16 * D; /* [16][D] */
    pam_merge_warps<D, NW, 0>((float *)sK, m_w, l_w, m, l, o, G, [&](int gg, int d, float oo, float M, float ll) {
        if (n_splits == 1) {
            out[i * (int64_t)H * D + (int64_t)(kvh * G + gg) * D + d] = __float2bfloat16(oo / ll);
        } else {
            part[gg * D + d] = oo;
            if (d == 0) pm_s[gg] = M, pl_s[gg] = ll;
        }
    });
    if (n_splits == 1) return;

    /* 5. the splits merged in split order through distributed shared memory; the second barrier keeps every
     * block's partial alive until its peers have read it */
    cg::cluster_group cl = cg::this_cluster();
    cl.sync();
    for (int x = sp * NT + tid; x < G * D; x += n_splits * NT) {
        const int gg = x / D, d = x % D;
        float ms[8], ls[8], M = -INFINITY;
#pragma unroll
        for (int s = 0; s < 8; s++) {
            if (s >= n_splits) break;
            ms[s] = *cl.map_shared_rank(&pm_s[gg], s);
            ls[s] = *cl.map_shared_rank(&pl_s[gg], s);
            if (ls[s] > 0.0f) M = fmaxf(M, ms[s]);
        }
        float num = 0.0f, den = 0.0f;
#pragma unroll
        for (int s = 0; s < 8; s++) {
            if (s >= n_splits) break;
            if (ls[s] <= 0.0f) continue;
            const float c = exp2f(ms[s] - M);
            num += c * *cl.map_shared_rank(&part[gg * D + d], s);
            den += c * ls[s];
        }
        out[i * (int64_t)H * D + (int64_t)(kvh * G + gg) * D + d] = __float2bfloat16(num / den);
    }
    cl.sync();
}

int cpt_cuda_paged_attention_few_ok(cpt_attn_shape s, int n_splits) {
    return (s.head_dim == 64 || s.head_dim == 128) && s.n_kv_heads > 0 && s.n_heads % s.n_kv_heads == 0 &&
           s.n_heads / s.n_kv_heads <= 16 && n_splits >= 1 && n_splits <= CPT_PAGED_FEW_MAX_SPLITS;
}

template <int D>
static void launch_few(cpt_cuda_ctx *ctx, __nv_bfloat16 *out, const __nv_bfloat16 *qkv, const cpt_cuda_paged_kv *kv,
                       int layer, const int32_t *pos, const int32_t *tab, int n_rows, int n_splits,
                       const int32_t *split_len, int H, int KV, attn_append ap) {
    auto kern = paged_attention_few_kernel<D>;
    constexpr size_t smem = paf_cfg<D>::smem;
    if (smem > 48 * 1024) CUDA_OK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)n_rows, (unsigned)KV, (unsigned)n_splits);
    cfg.blockDim = dim3(paf_cfg<D>::NT);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = ctx->stream;
    cudaLaunchAttribute at[2];
    at[0].id = cudaLaunchAttributeClusterDimension;
    at[0].val.clusterDim.x = 1, at[0].val.clusterDim.y = 1, at[0].val.clusterDim.z = (unsigned)n_splits;
    at[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[1].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = at;
    cfg.numAttrs = ctx->pdl ? 2 : 1;
    CUDA_OK(cudaLaunchKernelEx(&cfg, kern, out, qkv, *kv, layer, pos, tab, split_len, n_splits, H, KV, ap));
}

void cpt_paged_attention_few_launch(cpt_cuda_ctx *ctx, __nv_bfloat16 *out, const __nv_bfloat16 *qkv,
                                    const cpt_cuda_paged_kv *kv, int layer, const int32_t *pos, const int32_t *tab,
                                    int n_rows, int n_splits, const int32_t *split_len, int H, int KV, int D,
                                    attn_append ap) {
    if (D == 128)
        launch_few<128>(ctx, out, qkv, kv, layer, pos, tab, n_rows, n_splits, split_len, H, KV, ap);
    else
        launch_few<64>(ctx, out, qkv, kv, layer, pos, tab, n_rows, n_splits, split_len, H, KV, ap);
    LAUNCH_OK("paged_attention_few_kernel");
}
