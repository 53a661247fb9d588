/* Tensor-core backward for head_dim 64, 80, 96, 128 and 256, FlashAttention-2 structure without atomics: two
 * kernels that each recompute P = exp(S - lse) from the forward's logsumexp.
 *
 * dK/dV: a block owns 64 keys (16 per warp) of one kv head of one sequence, keeps K and V in shared memory and
 * dK, dV in registers, and walks the group's query heads in order, and for each the query tiles from the diagonal
 * to the sequence's end (Q, dO, lse, delta double-buffered by cp.async): S^T = K Q^T, P^T, dV += P^T dO,
 * dP^T = V dO^T, dS^T = P^T (dP^T - delta), dK += dS^T Q. One block owns each dK/dV element: no cross-block sum.
 * When there are too few key tiles to fill the GPU (the first tiles, with the most queries, would run alone at the
 * end), each tile's (head, query tile) iterations are split into nsplit fixed contiguous parts whose fp32 partial
 * dK / dV go to scratch and are summed in part order by a small kernel.
 * dQ: a block owns 64 query rows of one head, walks the key tiles up to its last row: S = Q K^T, P, dP = dO V^T,
 * dS = P (dP - delta), dQ += dS K. All orders are fixed, so dqkv is bitwise reproducible (on one GPU model: nsplit
 * follows the number of multiprocessors). Grids put the tile index in z, the last dimension the hardware walks, so
 * the longest tiles of every sequence and head start first. */
#include <math.h>

#include "kernels/cuda/attention_internal.h"

#define BWD_NW 4          /* warps per block */
#define BWD_BK (16 * BWD_NW) /* keys per dK/dV block, query rows per dQ block */
#define DQ_BN 64          /* keys per tile of the dQ kernel */

/* query rows per tile of the dK/dV kernel: registers hold 16 x D of dK and of dV, and 16 x BQ of P and of dP */
template <int D> struct dkv_bq {
    static constexpr int BQ = D >= 128 ? 32 : 64;
};

template <int D>
__global__ void __launch_bounds__(BWD_NW * 32, D == 64 ? 3 : 2) attn_dkv_mma_kernel(__nv_bfloat16 *dqkv, float *partial,
                                                                   const __nv_bfloat16 *dout, const float *lse,
                                                                   const float *delta, const __nv_bfloat16 *qkv,
                                                                   const int32_t *cu, int64_t N, int H, int KV,
                                                                   int nsplit, float scale_log2, float scale) {
    constexpr int BK = BWD_BK, BQ = dkv_bq<D>::BQ, SD = attn_pad<D>::SD, NT = BWD_NW * 32;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, tq = lane & 3;
    const int kh = blockIdx.x / nsplit, part = blockIdx.x % nsplit, sq = blockIdx.y, group = H / KV;
    const int j0 = cu[sq], len = cu[sq + 1] - j0;
    const int k0 = blockIdx.z * BK; /* the first tiles have the most queries: they start first */
    if (k0 >= len) return;
    const int64_t row = (int64_t)(H + 2 * KV) * D, HD = (int64_t)H * D;

    extern __shared__ __align__(16) unsigned char attn_smem[];
    __nv_bfloat16 *sK = (__nv_bfloat16 *)attn_smem, *sV = sK + BK * SD, *sQ = sV + BK * SD, *sO = sQ + 2 * BQ * SD;
    float *sL = (float *)(sO + 2 * BQ * SD), *sDl = sL + 2 * BQ;

    load_tile_async<BK, D, NT>(sK, qkv + (int64_t)(j0 + k0) * row + (int64_t)(H + kh) * D, row, len - k0, tid);
    load_tile_async<BK, D, NT>(sV, qkv + (int64_t)(j0 + k0) * row + (int64_t)(H + KV + kh) * D, row, len - k0, tid);

    const int qfirst = k0 / BQ, nq = (len + BQ - 1) / BQ - qfirst, niter = nq * group;
    const int it0 = (int)((int64_t)niter * part / nsplit), it1 = (int)((int64_t)niter * (part + 1) / nsplit);
    /* iteration it: head kh * group + it / nq, query tile qfirst + it % nq, buffer (it - it0) & 1 */
    auto issue = [&](int it) {
        int h = kh * group + it / nq, qs = (qfirst + it % nq) * BQ, b = (it - it0) & 1;
        load_tile_async<BQ, D, NT>(sQ + b * BQ * SD, qkv + (int64_t)(j0 + qs) * row + (int64_t)h * D, row, len - qs,
                                   tid);
        load_tile_async<BQ, D, NT>(sO + b * BQ * SD, dout + (int64_t)(j0 + qs) * HD + (int64_t)h * D, HD, len - qs,
                                   tid);
        if (tid < BQ) { /* rows past the end: lse +inf makes P 0 */
            bool v = qs + tid < len;
            sL[b * BQ + tid] = v ? lse[(int64_t)(j0 + qs + tid) * H + h] * ATTN_LOG2E : INFINITY;
            sDl[b * BQ + tid] = v ? delta[(int64_t)(j0 + qs + tid) * H + h] : 0.0f;
        }
    };
    if (it0 < it1) issue(it0);
    cp_async_commit();

    const int kw = warp * 16, wk0 = k0 + kw; /* this warp's keys: wk0 .. wk0 + 15 */
    float dk[D / 8][4], dv[D / 8][4];
#pragma unroll
    for (int i = 0; i < D / 8; i++)
#pragma unroll
        for (int e = 0; e < 4; e++) dk[i][e] = dv[i][e] = 0.0f;

    for (int it = it0; it < it1; it++) {
        cp_async_wait_all();
        __syncthreads();
        if (it + 1 < it1) {
            issue(it + 1);
            cp_async_commit();
        }
        const int qs = (qfirst + it % nq) * BQ, b = (it - it0) & 1;
        if (qs + BQ - 1 < wk0) continue; /* every query of this tile is before every key of this warp */
        const __nv_bfloat16 *cQ = sQ + b * BQ * SD, *cO = sO + b * BQ * SD;
        const float *cL = sL + b * BQ, *cD = sDl + b * BQ;

        /* S^T = K Q^T (16 keys x BQ queries) and dP^T = V dO^T */
        float p[BQ / 8][4], dp[BQ / 8][4];
#pragma unroll
        for (int i = 0; i < BQ / 8; i++)
#pragma unroll
            for (int e = 0; e < 4; e++) p[i][e] = dp[i][e] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < D / 16; kk++) {
            uint32_t ak[4], av[4];
            lds_a<D>(ak, sK, kw, kk * 16, lane);
            lds_a<D>(av, sV, kw, kk * 16, lane);
#pragma unroll
            for (int np = 0; np < BQ / 16; np++) {
                uint32_t bq[4], bo[4];
                lds_bt<D>(bq, cQ, np * 16, kk * 16, lane);
                lds_bt<D>(bo, cO, np * 16, kk * 16, lane);
                mma16816(p[2 * np], ak, bq[0], bq[1]);
                mma16816(p[2 * np + 1], ak, bq[2], bq[3]);
                mma16816(dp[2 * np], av, bo[0], bo[1]);
                mma16816(dp[2 * np + 1], av, bo[2], bo[3]);
            }
        }
        /* P^T and dS^T; element e: key wk0 + g + (e >> 1) * 8, query qs + nt * 8 + 2 tq + (e & 1) */
        const bool diag = qs < wk0 + 15;
#pragma unroll
        for (int nt = 0; nt < BQ / 8; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int qc = nt * 8 + 2 * tq + (e & 1);
                float pe = exp2f(p[nt][e] * scale_log2 - cL[qc]);
                if (diag && wk0 + g + (e >> 1) * 8 > qs + qc) pe = 0.0f;
                p[nt][e] = pe;
                dp[nt][e] = pe * (dp[nt][e] - cD[qc]);
            }
        /* dV += P^T dO, dK += dS^T Q (k index = queries) */
#pragma unroll
        for (int kc = 0; kc < BQ / 16; kc++) {
            uint32_t ap[4];
            acc_to_a(ap, p[2 * kc], p[2 * kc + 1]);
            uint32_t as[4];
            acc_to_a(as, dp[2 * kc], dp[2 * kc + 1]);
#pragma unroll
            for (int dd = 0; dd < D / 16; dd++) {
                uint32_t bo[4], bq[4];
                lds_b<D>(bo, cO, kc * 16, dd * 16, lane);
                lds_b<D>(bq, cQ, kc * 16, dd * 16, lane);
                mma16816(dv[2 * dd], ap, bo[0], bo[1]);
                mma16816(dv[2 * dd + 1], ap, bo[2], bo[3]);
                mma16816(dk[2 * dd], as, bq[0], bq[1]);
                mma16816(dk[2 * dd + 1], as, bq[2], bq[3]);
            }
        }
    }
    cp_async_wait_all(); /* a part with no iterations still has K and V in flight */
#pragma unroll
    for (int i = 0; i < 2; i++) {
        int r = wk0 + g + i * 8;
        if (r >= len) continue;
        if (partial) { /* [nsplit][N][KV][dk D, dv D] fp32, dk not yet scaled */
            float *pr = partial + (((int64_t)part * N + j0 + r) * KV + kh) * 2 * D;
#pragma unroll
            for (int dt = 0; dt < D / 8; dt++) {
                *(float2 *)(pr + dt * 8 + 2 * tq) = make_float2(dk[dt][2 * i], dk[dt][2 * i + 1]);
                *(float2 *)(pr + D + dt * 8 + 2 * tq) = make_float2(dv[dt][2 * i], dv[dt][2 * i + 1]);
            }
            continue;
        }
        __nv_bfloat16 *dkr = dqkv + (int64_t)(j0 + r) * row + (int64_t)(H + kh) * D;
        __nv_bfloat16 *dvr = dqkv + (int64_t)(j0 + r) * row + (int64_t)(H + KV + kh) * D;
#pragma unroll
        for (int dt = 0; dt < D / 8; dt++) {
            *(__nv_bfloat162 *)(dkr + dt * 8 + 2 * tq) =
                __floats2bfloat162_rn(dk[dt][2 * i] * scale, dk[dt][2 * i + 1] * scale);
            *(__nv_bfloat162 *)(dvr + dt * 8 + 2 * tq) = __floats2bfloat162_rn(dv[dt][2 * i], dv[dt][2 * i + 1]);
        }
    }
}

/* dK, dV = the nsplit partials summed in part order; one thread per pair of adjacent elements */
__global__ void attn_dkv_sum_kernel(__nv_bfloat16 *dqkv, const float *partial, int64_t N, int H, int KV, int D,
                                    int nsplit, float scale) {
    int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; /* over N * KV * D pairs */
    if (idx >= N * KV * D) return;
    int64_t n = idx / ((int64_t)KV * D);
    int rem = (int)(idx % ((int64_t)KV * D)), kh = rem / D, c = 2 * (rem % D); /* c over the 2 D of dk then dv */
    const float *src = partial + (n * KV + kh) * 2 * D + c;
    float2 acc = *(const float2 *)src;
    for (int p = 1; p < nsplit; p++) {
        float2 v = *(const float2 *)(src + (int64_t)p * N * KV * 2 * D);
        acc.x += v.x;
        acc.y += v.y;
    }
    int which = c / D, d = c % D;
    float f = which == 0 ? scale : 1.0f;
    *(__nv_bfloat162 *)(dqkv + n * (int64_t)(H + 2 * KV) * D + (int64_t)(H + which * KV + kh) * D + d) =
        __floats2bfloat162_rn(acc.x * f, acc.y * f);
}

template <int D>
__global__ void __launch_bounds__(BWD_NW * 32) attn_dq_mma_kernel(__nv_bfloat16 *dqkv, const __nv_bfloat16 *dout,
                                                                  const float *lse, const float *delta,
                                                                  const __nv_bfloat16 *qkv, const int32_t *cu, int H,
                                                                  int KV, float scale_log2, float scale) {
    constexpr int BM = BWD_BK, BN = DQ_BN, SD = attn_pad<D>::SD, NT = BWD_NW * 32;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, tq = lane & 3;
    const int h = blockIdx.x, sq = blockIdx.y, kh = h / (H / KV);
    const int j0 = cu[sq], len = cu[sq + 1] - j0;
    const int q0 = (gridDim.z - 1 - blockIdx.z) * BM; /* longest tiles first */
    if (q0 >= len) return;
    const int64_t row = (int64_t)(H + 2 * KV) * D, HD = (int64_t)H * D;
    const __nv_bfloat16 *Kg = qkv + (int64_t)j0 * row + (int64_t)(H + kh) * D;
    const __nv_bfloat16 *Vg = qkv + (int64_t)j0 * row + (int64_t)(H + KV + kh) * D;

    extern __shared__ __align__(16) unsigned char attn_smem[];
    __nv_bfloat16 *sQ = (__nv_bfloat16 *)attn_smem, *sO = sQ + BM * SD, *sK = sO + BM * SD, *sV = sK + 2 * BN * SD;

    const int kend = min(q0 + BM, len), ntiles = (kend + BN - 1) / BN;
    load_tile_async<BM, D, NT>(sQ, qkv + (int64_t)(j0 + q0) * row + (int64_t)h * D, row, len - q0, tid);
    load_tile_async<BM, D, NT>(sO, dout + (int64_t)(j0 + q0) * HD + (int64_t)h * D, HD, len - q0, tid);
    load_tile_async<BN, D, NT>(sK, Kg, row, len, tid);
    load_tile_async<BN, D, NT>(sV, Vg, row, len, tid);
    cp_async_commit();

    const int wr0 = q0 + warp * 16;
    float L2[2], Dl[2]; /* rows g and g + 8 */
#pragma unroll
    for (int i = 0; i < 2; i++) {
        int r = wr0 + g + i * 8;
        L2[i] = r < len ? lse[(int64_t)(j0 + r) * H + h] * ATTN_LOG2E : INFINITY;
        Dl[i] = r < len ? delta[(int64_t)(j0 + r) * H + h] : 0.0f;
    }
    float dq[D / 8][4];
#pragma unroll
    for (int i = 0; i < D / 8; i++) dq[i][0] = dq[i][1] = dq[i][2] = dq[i][3] = 0.0f;

    for (int t = 0; t < ntiles; t++) {
        cp_async_wait_all();
        __syncthreads();
        if (t + 1 < ntiles) {
            int nb = (t + 1) & 1, k1 = (t + 1) * BN;
            load_tile_async<BN, D, NT>(sK + nb * BN * SD, Kg + (int64_t)k1 * row, row, len - k1, tid);
            load_tile_async<BN, D, NT>(sV + nb * BN * SD, Vg + (int64_t)k1 * row, row, len - k1, tid);
            cp_async_commit();
        }
        const int kt0 = t * BN;
        if (kt0 > wr0 + 15) continue;
        const __nv_bfloat16 *cK = sK + (t & 1) * BN * SD, *cV = sV + (t & 1) * BN * SD;
        float s[BN / 8][4], dp[BN / 8][4];
#pragma unroll
        for (int i = 0; i < BN / 8; i++)
#pragma unroll
            for (int e = 0; e < 4; e++) s[i][e] = dp[i][e] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < D / 16; kk++) {
            uint32_t aq[4], ao[4];
            lds_a<D>(aq, sQ, warp * 16, kk * 16, lane);
            lds_a<D>(ao, sO, warp * 16, kk * 16, lane);
#pragma unroll
            for (int np = 0; np < BN / 16; np++) {
                uint32_t bk[4], bv[4];
                lds_bt<D>(bk, cK, np * 16, kk * 16, lane);
                lds_bt<D>(bv, cV, np * 16, kk * 16, lane);
                mma16816(s[2 * np], aq, bk[0], bk[1]);
                mma16816(s[2 * np + 1], aq, bk[2], bk[3]);
                mma16816(dp[2 * np], ao, bv[0], bv[1]);
                mma16816(dp[2 * np + 1], ao, bv[2], bv[3]);
            }
        }
        const bool diag = kt0 + BN - 1 > wr0;
#pragma unroll
        for (int nt = 0; nt < BN / 8; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int i = e >> 1;
                float pe = exp2f(s[nt][e] * scale_log2 - L2[i]);
                if (diag && kt0 + nt * 8 + 2 * tq + (e & 1) > wr0 + g + i * 8) pe = 0.0f;
                s[nt][e] = pe * (dp[nt][e] - Dl[i]); /* dS */
            }
        /* dQ += dS K (k index = keys) */
#pragma unroll
        for (int kc = 0; kc < BN / 16; kc++) {
            uint32_t a[4];
            acc_to_a(a, s[2 * kc], s[2 * kc + 1]);
#pragma unroll
            for (int dd = 0; dd < D / 16; dd++) {
                uint32_t bk[4];
                lds_b<D>(bk, cK, kc * 16, dd * 16, lane);
                mma16816(dq[2 * dd], a, bk[0], bk[1]);
                mma16816(dq[2 * dd + 1], a, bk[2], bk[3]);
            }
        }
    }
#pragma unroll
    for (int i = 0; i < 2; i++) {
        int r = wr0 + g + i * 8;
        if (r >= len) continue;
        __nv_bfloat16 *dqr = dqkv + (int64_t)(j0 + r) * row + (int64_t)h * D;
#pragma unroll
        for (int dt = 0; dt < D / 8; dt++)
            *(__nv_bfloat162 *)(dqr + dt * 8 + 2 * tq) =
                __floats2bfloat162_rn(dq[dt][2 * i] * scale, dq[dt][2 * i + 1] * scale);
    }
}

template <int D> static size_t dkv_smem() {
    constexpr int BQ = dkv_bq<D>::BQ;
    return (size_t)(2 * BWD_BK + 4 * BQ) * attn_pad<D>::SD * sizeof(__nv_bfloat16) + 4 * BQ * sizeof(float);
}

template <int D> static int dkv_splits(cpt_cuda_ctx *ctx, int n_seqs, int max_seqlen, int KV) {
    int per_sm = 0;
    CUDA_OK(cudaFuncSetAttribute(attn_dkv_mma_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)dkv_smem<D>()));
    CUDA_OK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, attn_dkv_mma_kernel<D>, BWD_NW * 32, dkv_smem<D>()));
    int64_t blocks = (int64_t)cdiv(max_seqlen, BWD_BK) * n_seqs * KV, want = 2 * (int64_t)ctx->num_sms * per_sm;
    if (blocks <= 0 || blocks >= want) return 1;
    int64_t ns = (want + blocks - 1) / blocks;
    return ns > 4 ? 4 : (int)ns;
}

int cpt_attn_bwd_mma_splits(cpt_cuda_ctx *ctx, int n_seqs, int max_seqlen, int KV, int D) {
    switch (D) {
    case 64: return dkv_splits<64>(ctx, n_seqs, max_seqlen, KV);
    case 80: return dkv_splits<80>(ctx, n_seqs, max_seqlen, KV);
    case 96: return dkv_splits<96>(ctx, n_seqs, max_seqlen, KV);
    case 128: return dkv_splits<128>(ctx, n_seqs, max_seqlen, KV);
    default: return dkv_splits<256>(ctx, n_seqs, max_seqlen, KV);
    }
}

template <int D>
static void launch_bwd(cpt_cuda_ctx *ctx, __nv_bfloat16 *dqkv, float *partial, int nsplit, const __nv_bfloat16 *dout,
                       const float *lse, const float *delta, const __nv_bfloat16 *qkv, const int32_t *cu, int n_seqs,
                       int max_seqlen, int64_t N, int H, int KV) {
    constexpr int SD = attn_pad<D>::SD;
    const float scale = 1.0f / sqrtf((float)D), scale_log2 = ATTN_LOG2E * scale;
    CUDA_OK(cudaFuncSetAttribute(attn_dkv_mma_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)dkv_smem<D>()));
    dim3 gkv((unsigned)(KV * nsplit), (unsigned)n_seqs, cdiv(max_seqlen, BWD_BK));
    attn_dkv_mma_kernel<D><<<gkv, BWD_NW * 32, dkv_smem<D>(), ctx->stream>>>(
        dqkv, nsplit > 1 ? partial : nullptr, dout, lse, delta, qkv, cu, N, H, KV, nsplit, scale_log2, scale);
    LAUNCH_OK("attn_dkv_mma_kernel");
    if (nsplit > 1) {
        attn_dkv_sum_kernel<<<cdiv(N * KV * D, 256), 256, 0, ctx->stream>>>(dqkv, partial, N, H, KV, D, nsplit, scale);
        LAUNCH_OK("attn_dkv_sum_kernel");
    }
    size_t smem_q = (size_t)(2 * BWD_BK + 4 * DQ_BN) * SD * sizeof(__nv_bfloat16);
    CUDA_OK(cudaFuncSetAttribute(attn_dq_mma_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem_q));
    dim3 gq((unsigned)H, (unsigned)n_seqs, cdiv(max_seqlen, BWD_BK));
    attn_dq_mma_kernel<D><<<gq, BWD_NW * 32, smem_q, ctx->stream>>>(dqkv, dout, lse, delta, qkv, cu, H, KV, scale_log2,
                                                                    scale);
    LAUNCH_OK("attn_dq_mma_kernel");
}

void cpt_attn_bwd_mma(cpt_cuda_ctx *ctx, __nv_bfloat16 *dqkv, float *partial, int nsplit, const __nv_bfloat16 *dout,
                      const float *lse, const float *delta, const __nv_bfloat16 *qkv, const int32_t *cu, int n_seqs,
                      int max_seqlen, int64_t N, int H, int KV, int D) {
    CKCHECK(n_seqs <= 65535 && cdiv(max_seqlen, BWD_BK) <= 65535, "attention_bwd",
            "%d sequences or a longest sequence of %d is more than the grid takes", n_seqs, max_seqlen);
    if (max_seqlen == 0) return;
#define BWD(D_) launch_bwd<D_>(ctx, dqkv, partial, nsplit, dout, lse, delta, qkv, cu, n_seqs, max_seqlen, N, H, KV)
    switch (D) {
    case 64: BWD(64); break;
    case 80: BWD(80); break;
    case 96: BWD(96); break;
    case 128: BWD(128); break;
    default: BWD(256); break;
    }
#undef BWD
}
