/* The device pieces of the tensor-core paged decode attention (paged_attention_mma.cu describes it), shared by its
 * kernel and the few-rows kernel (paged_attention_few.cu). .cu files only. */
#ifndef CPT_KERNELS_CUDA_PAGED_ATTENTION_MMA_INTERNAL_H
#define CPT_KERNELS_CUDA_PAGED_ATTENTION_MMA_INTERNAL_H

#include "kernels/cuda/attention_internal.h"
#include "kernels/cuda/paged_attention_internal.h"

/* Warps of a (row, kv head, split) item: head_dim 128 2 (tiles of 32 positions), head_dim 64 4 (64); both 39 KB of
 * shared memory, so 5 blocks fit a multiprocessor. */
template <int D> struct pam_warps {
    static constexpr int NW = D == 128 ? 2 : 4;
};

template <int D, int NW> struct pam_cfg {
    static constexpr int BN = 16 * NW; /* positions a tile */
    static constexpr int SD = attn_pad<D>::SD;
    static constexpr int NT = NW * 32;
    /* Q (16 rows) and two stages of K and V tiles; under the 48 KB of static launch */
    static constexpr size_t smem = (size_t)(16 + 4 * BN) * SD * sizeof(__nv_bfloat16);
    static_assert(smem <= 48 * 1024, "paged mma attention: shared memory over 48 KB");
    /* the warps' fp32 o [NW][16][D] reuse the K and V stages at the end */
    static_assert((size_t)NW * 16 * D * sizeof(float) <= (size_t)4 * BN * SD * sizeof(__nv_bfloat16),
                  "paged mma attention: the merge does not fit in the tiles' memory");
};

/* Positions p0 .. p0 + valid - 1 (valid may exceed BN: BN rows are loaded) of table t into the K and V tiles, 16
 * bytes per cp.async; rows past valid are zero-filled (their scores are masked, and 0 * garbage would be NaN). */
template <int D, int NW>
static __device__ __forceinline__ void load_kv_tile(__nv_bfloat16 *sK, __nv_bfloat16 *sV, const cpt_cuda_paged_kv &kv,
                                                    int layer, int t, int kvh, int p0, int valid, int64_t vshift,
                                                    int tid) {
    constexpr int CH = D / 8, BN = pam_cfg<D, NW>::BN, SD = pam_cfg<D, NW>::SD, NT = pam_cfg<D, NW>::NT;
    static_assert(NT % CH == 0, "a thread keeps one 16-byte column of the rows it loads");
    const __nv_bfloat16 *pool = (const __nv_bfloat16 *)kv.pool;
    const int k = (tid % CH) * 8;
    for (int r = tid / CH; r < BN; r += NT / CH) {
        bool v = r < valid;
        const __nv_bfloat16 *src = v ? pool + kv_row(kv, layer, 0, t, p0 + r) + (int64_t)kvh * D + k : pool;
        cp_async16(sK + r * SD + k, src, v);
        cp_async16(sV + r * SD + k, v ? src + vshift : pool, v);
    }
}

/* One warp's 16 positions of a tile (rows r0 .. r0+15 of the tiles cK, cV; positions w0 .. w0+15, those >= end
 * masked): S = Q K^T, the online softmax of the two heads this thread holds (g and g + 8, log2 units), O += P V.
 * The tensor-core decode kernels' inner step (paged_attention_mma.cu, paged_attention_few.cu). */
template <int D>
static __device__ __forceinline__ void pam_warp_tile(const __nv_bfloat16 *cK, const __nv_bfloat16 *cV, int r0, int w0,
                                                     int end, const uint32_t (&qf)[D / 16][4], float scale_log2,
                                                     float (&m)[2], float (&l)[2], float (&o)[D / 8][4], int lane) {
    const int tq = lane & 3;
    /* S = Q K^T over the warp's 16 positions: s[nt] holds positions w0 + 8 nt + 2 tq (+1), heads g, g + 8 */
    float s[2][4];
#pragma unroll
    for (int nt = 0; nt < 2; nt++) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++) {
        uint32_t b[4];
        lds_bt<D>(b, cK, r0, kk * 16, lane);
        mma16816(s[0], qf[kk], b[0], b[1]);
        mma16816(s[1], qf[kk], b[2], b[3]);
    }
    if (w0 + 16 > end) {
#pragma unroll
        for (int nt = 0; nt < 2; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                if (w0 + nt * 8 + 2 * tq + (e & 1) >= end) s[nt][e] = -INFINITY;
    }
    /* online softmax, base 0 while a head has seen no position (max -inf), so masked scores give 0 and not NaN */
#pragma unroll
    for (int r = 0; r < 2; r++) {
        float mx = fmaxf(fmaxf(s[0][2 * r], s[0][2 * r + 1]), fmaxf(s[1][2 * r], s[1][2 * r + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        float mn = fmaxf(m[r], mx * scale_log2), base = mn == -INFINITY ? 0.0f : mn;
        float corr = exp2f(m[r] - base), sum = 0.0f;
        m[r] = mn;
#pragma unroll
        for (int nt = 0; nt < 2; nt++) {
            s[nt][2 * r] = exp2f(s[nt][2 * r] * scale_log2 - base);
            s[nt][2 * r + 1] = exp2f(s[nt][2 * r + 1] * scale_log2 - base);
            sum += s[nt][2 * r] + s[nt][2 * r + 1];
        }
        l[r] = l[r] * corr + sum;
#pragma unroll
        for (int dt = 0; dt < D / 8; dt++) {
            o[dt][2 * r] *= corr;
            o[dt][2 * r + 1] *= corr;
        }
    }
    /* O += P V: the scores' accumulators are the A fragment of the product (k = the warp's 16 positions) */
    uint32_t a[4];
    acc_to_a(a, s[0], s[1]);
#pragma unroll
    for (int dp = 0; dp < D / 16; dp++) {
        uint32_t b[4];
        lds_b<D>(b, cV, r0, dp * 16, lane);
        mma16816(o[2 * dp], a, b[0], b[1]);
        mma16816(o[2 * dp + 1], a, b[2], b[3]);
    }
}

/* The NW warps' (o, m, l) merged through shared memory o_s ([NW][16][D] fp32, free tile memory) and m_w, l_w, in
 * warp order; emit(g, d, o, M, l) for each element of the G heads: unnormalised o, the max M (log2 units; -inf and l
 * = 0 when no warp saw a position) and the sum. Called by the first 32 NW threads (SUB: as block_sync). */
template <int D, int NW, int SUB, typename Emit>
static __device__ __forceinline__ void pam_merge_warps(float *o_s, float (&m_w)[NW][16], float (&l_w)[NW][16],
                                                       float (&m)[2], float (&l)[2], const float (&o)[D / 8][4], int G,
                                                       Emit emit) {
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, tq = lane & 3;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
    }
    block_sync<SUB>();
#pragma unroll
    for (int r = 0; r < 2; r++) {
        int row = g + 8 * r;
        float *dst = o_s + (warp * 16 + row) * D + 2 * tq;
#pragma unroll
        for (int dt = 0; dt < D / 8; dt++) {
            dst[dt * 8] = o[dt][2 * r];
            dst[dt * 8 + 1] = o[dt][2 * r + 1];
        }
        if (tq == 0) {
            m_w[warp][row] = m[r];
            l_w[warp][row] = l[r];
        }
    }
    block_sync<SUB>();
    for (int x = tid; x < G * D; x += NW * 32) {
        int gg = x / D, d = x % D;
        float M = -INFINITY;
#pragma unroll
        for (int w = 0; w < NW; w++)
            if (l_w[w][gg] > 0.0f) M = fmaxf(M, m_w[w][gg]);
        float oo = 0.0f, ll = 0.0f;
#pragma unroll
        for (int w = 0; w < NW; w++) {
            if (l_w[w][gg] <= 0.0f) continue;
            float c = exp2f(m_w[w][gg] - M);
            oo += c * o_s[(w * 16 + gg) * D + d];
            ll += c * l_w[w][gg];
        }
        emit(gg, d, oo, M, ll);
    }
}

/* Rows 0..G-1 of sQ: the G query heads through norm_rope_from (head r starts at head(r); element d: ld(src, d);
 * angles: trig), rounded to bf16 as kv_append stores them; rows G..15 zero. Warps take rows in turn (NW warps). */
template <int D, int NW, typename Head, typename Load, typename Trig>
static __device__ __forceinline__ void pam_rope_rows(__nv_bfloat16 *sQ, int G, Head head, Load ld, Trig trig,
                                                     const attn_append &ap, int warp, int lane) {
    constexpr int SD = attn_pad<D>::SD, half = D / 2;
    for (int r = warp; r < 16; r += NW) {
        if (r < G) {
            const __nv_bfloat16 *src = head(r);
            norm_rope_from([&](int d) { return ld(src, d); }, trig, ap.q_norm, ap.eps, D, lane,
                           [&](int k, float x0, float x1) {
                               sQ[r * SD + k] = __float2bfloat16(x0);
                               sQ[r * SD + k + half] = __float2bfloat16(x1);
                           });
        } else {
            for (int d = lane; d < D; d += 32) sQ[r * SD + d] = __float2bfloat16(0.0f);
        }
    }
}

/* pam_rope_rows with the G query heads of kv head kvh read from qrow through L2 and the angles at position p. */
template <int D, int NW>
static __device__ __forceinline__ void pam_rope_queries(__nv_bfloat16 *sQ, const __nv_bfloat16 *qrow, int kvh, int G,
                                                        const attn_append &ap, int p, int warp, int lane) {
    pam_rope_rows<D, NW>(
        sQ, G, [&](int r) { return qrow + (int64_t)(kvh * G + r) * D; },
        [](const __nv_bfloat16 *src, int d) { return __bfloat162float(__ldcg(src + d)); },
        [&](int k, float &sn, float &cs) { rope_angle(p, ap.inv_freq, k, sn, cs); }, ap, warp, lane);
}

/* Positions [start, end) of row i's table t for kv head kvh; p = the row's own position (appended first when the
 * append is fused in and this split holds it). Run by threads 0 .. 32 NW - 1; SUB = 0: they are the whole block,
 * else SUB = 32 NW and they synchronise by a named barrier (for a kernel whose block's other warps do something
 * else and run several items: the first barrier keeps the last item's readers of shared memory ahead of this
 * one's writers). */
template <int D, int NW, int SUB>
static __device__ __forceinline__ void attend_mma(__nv_bfloat16 *out, float *partial, const __nv_bfloat16 *qkv,
                                                  const cpt_cuda_paged_kv &kv, int layer, int t, int start, int end,
                                                  int64_t i, int kvh, int sp, int n_splits, int H, int KV,
                                                  const attn_append &ap, int p, unsigned char *smem) {
    constexpr int BN = pam_cfg<D, NW>::BN, SD = pam_cfg<D, NW>::SD, NT = pam_cfg<D, NW>::NT, CH = D / 8;
    __shared__ float m_w[NW][16], l_w[NW][16];
    __nv_bfloat16 *sQ = (__nv_bfloat16 *)smem, *sK = sQ + 16 * SD, *sV = sK + 2 * BN * SD;
    const int G = H / KV, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int QKV = (H + 2 * KV) * D;
    const __nv_bfloat16 *qrow = qkv + i * QKV;
    const int64_t vshift = (int64_t)kv.n_blocks * kv.block_size * kv.n_kv_heads * D; /* K -> V of one layer */
    static_assert(SUB == 0 || SUB == NT, "the named barrier counts the attention's threads");
    if constexpr (SUB != 0) block_sync<SUB>();

    /* the queries: rows g < G the group's heads as bf16 (rotated here when the append is fused in, rounded as
     * kv_append stores them), rows G..15 zero */
    if (!ap.inv_freq) {
        for (int c = tid; c < 16 * CH; c += NT) {
            int r = c / CH, k = (c % CH) * 8;
            uint4 v = make_uint4(0, 0, 0, 0);
            if (r < G) v = __ldcg((const uint4 *)(qrow + (int64_t)(kvh * G + r) * D + k));
            *(uint4 *)(sQ + r * SD + k) = v;
        }
    } else {
        pam_rope_queries<D, NW>(sQ, qrow, kvh, G, ap, p, warp, lane);
        /* the split holding position p writes its key (rotated) and value into the pages before any tile load */
        if (start <= p && p < end) {
            __nv_bfloat16 *pool = (__nv_bfloat16 *)kv.pool;
            const int half = D / 2;
            int64_t kr = kv_row(kv, layer, 0, t, p) + (int64_t)kvh * D, vr = kr + vshift;
            if (warp == 0)
                norm_rope_head(qrow + (int64_t)(H + kvh) * D, ap.k_norm, ap.eps, p, ap.inv_freq, D, lane,
                               [&](int k, float x0, float x1) {
                                   pool[kr + k] = __float2bfloat16(x0);
                                   pool[kr + k + half] = __float2bfloat16(x1);
                               });
            else if (warp == 1)
                for (int d = lane; d < D; d += 32) pool[vr + d] = __ldcg(qrow + (int64_t)(H + KV + kvh) * D + d);
            __threadfence(); /* the cp.async reads below go through L2 */
        }
    }
    block_sync<SUB>();

    const int ntiles = (end - start + BN - 1) / BN;
    load_kv_tile<D, NW>(sK, sV, kv, layer, t, kvh, start, end - start, vshift, tid);
    cp_async_commit();
    const float scale_log2 = rsqrtf((float)D) * ATTN_LOG2E;
    uint32_t qf[D / 16][4];
    float o[D / 8][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
#pragma unroll
    for (int x = 0; x < D / 8; x++) o[x][0] = o[x][1] = o[x][2] = o[x][3] = 0.0f;

    for (int tt = 0; tt < ntiles; tt++) {
        cp_async_wait_all();
        block_sync<SUB>(); /* tile tt visible to all; every warp is done with tile tt-1, so its stage may refill */
        if (tt == 0) {
#pragma unroll
            for (int kk = 0; kk < D / 16; kk++) lds_a<D>(qf[kk], sQ, 0, kk * 16, lane);
        }
        if (tt + 1 < ntiles) {
            int nb = (tt + 1) & 1, p1 = start + (tt + 1) * BN;
            load_kv_tile<D, NW>(sK + nb * BN * SD, sV + nb * BN * SD, kv, layer, t, kvh, p1, end - p1, vshift, tid);
            cp_async_commit();
        }
        const int w0 = start + tt * BN + warp * 16; /* this warp's first position */
        if (w0 >= end) continue;
        const __nv_bfloat16 *cK = sK + (tt & 1) * BN * SD, *cV = sV + (tt & 1) * BN * SD;
        pam_warp_tile<D>(cK, cV, warp * 16, w0, end, qf, scale_log2, m, l, o, lane);
    }

    /* the warps' (o, m, l) through shared memory (the tiles' memory: every warp is past its last tile) */
    pam_merge_warps<D, NW, SUB>((float *)sK, m_w, l_w, m, l, o, G,
                                [&](int gg, int d, float oo, float M, float ll) {
                                    float m_nat = M * ATTN_LN2; /* the partials' max in natural units (the merge
                                                                 * takes e^(m - M)) */
                                    store_head(out, partial, i, H, kvh * G + gg, n_splits, sp, D, d, oo, &m_nat, &ll);
                                });
}

#endif
