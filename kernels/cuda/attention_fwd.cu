/* Tensor-core forward for head_dim 64, 80, 96, 128 and 256 (D a multiple of 16), FlashAttention-2 structure: a
 * block owns 16 * NW query rows of one head of one sequence (each warp 16 rows), walks the key tiles up to its last
 * row with K and V staged in shared memory by cp.async (the next tile loads while this one computes), and keeps S,
 * the running max / sum and O in registers. Key tiles past a warp's last row are skipped (causal), the diagonal
 * tiles masked. The grid is (head, sequence, query tile), the tile in z (walked last by the hardware) counted from
 * the end, so the longest tiles of every sequence and head are issued first; tiles past a sequence's end exit at
 * once. */
#include <math.h>

#include "kernels/cuda/attention_internal.h"

#define FWD_BN 64 /* keys per tile */

template <int D, int NW>
__global__ void __launch_bounds__(NW * 32, D == 64 ? 2 : 1) attn_fwd_mma_kernel(__nv_bfloat16 *out, float *lse,
                                                               const __nv_bfloat16 *qkv, const int32_t *cu, int H,
                                                               int KV, float scale_log2) {
    constexpr int BM = 16 * NW, BN = FWD_BN, SD = attn_pad<D>::SD, NT = NW * 32;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, tq = lane & 3;
    const int h = blockIdx.x, sq = blockIdx.y, kh = h / (H / KV);
    const int j0 = cu[sq], len = cu[sq + 1] - j0;
    const int q0 = (gridDim.z - 1 - blockIdx.z) * BM; /* longest (last) tiles first: z is walked last */
    if (q0 >= len) return;
    const int64_t row = (int64_t)(H + 2 * KV) * D;
    const __nv_bfloat16 *Qg = qkv + (int64_t)(j0 + q0) * row + (int64_t)h * D;
    const __nv_bfloat16 *Kg = qkv + (int64_t)j0 * row + (int64_t)(H + kh) * D;
    const __nv_bfloat16 *Vg = qkv + (int64_t)j0 * row + (int64_t)(H + KV + kh) * D;

    extern __shared__ __align__(16) unsigned char attn_smem[];
    __nv_bfloat16 *sQ = (__nv_bfloat16 *)attn_smem, *sK = sQ + BM * SD, *sV = sK + 2 * BN * SD;

    const int kend = min(q0 + BM, len), ntiles = (kend + BN - 1) / BN;
    load_tile_async<BM, D, NT>(sQ, Qg, row, len - q0, tid);
    load_tile_async<BN, D, NT>(sK, Kg, row, len, tid);
    load_tile_async<BN, D, NT>(sV, Vg, row, len, tid);
    cp_async_commit();

    const int wr0 = q0 + warp * 16; /* this warp's first query row (sequence-relative) */
    /* Q's fragments stay in registers up to head_dim 128; beyond, O alone fills them and Q is read from shared
     * memory for every tile */
    constexpr bool QREG = D <= 128;
    uint32_t qf[QREG ? D / 16 : 1][4];
    (void)qf;
    float o[D / 8][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
#pragma unroll
    for (int i = 0; i < D / 8; i++) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;

    for (int t = 0; t < ntiles; t++) {
        cp_async_wait_all();
        __syncthreads(); /* tile t visible to all; every warp done with tile t-1, so its buffer may be refilled */
        if constexpr (QREG) {
            if (t == 0) {
#pragma unroll
                for (int kk = 0; kk < D / 16; kk++) lds_a<D>(qf[kk], sQ, warp * 16, kk * 16, lane);
            }
        }
        if (t + 1 < ntiles) {
            int nb = (t + 1) & 1, k1 = (t + 1) * BN;
            load_tile_async<BN, D, NT>(sK + nb * BN * SD, Kg + (int64_t)k1 * row, row, len - k1, tid);
            load_tile_async<BN, D, NT>(sV + nb * BN * SD, Vg + (int64_t)k1 * row, row, len - k1, tid);
            cp_async_commit();
        }
        const int kt0 = t * BN;
        if (kt0 > wr0 + 15) continue; /* every key of this tile is after every row of this warp */
        const __nv_bfloat16 *cK = sK + (t & 1) * BN * SD, *cV = sV + (t & 1) * BN * SD;

        float s[BN / 8][4];
#pragma unroll
        for (int i = 0; i < BN / 8; i++) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < D / 16; kk++) {
            uint32_t qa[4];
            if constexpr (QREG) {
#pragma unroll
                for (int e = 0; e < 4; e++) qa[e] = qf[kk][e];
            } else {
                lds_a<D>(qa, sQ, warp * 16, kk * 16, lane);
            }
#pragma unroll
            for (int np = 0; np < BN / 16; np++) {
                uint32_t b[4];
                lds_bt<D>(b, cK, np * 16, kk * 16, lane);
                mma16816(s[2 * np], qa, b[0], b[1]);
                mma16816(s[2 * np + 1], qa, b[2], b[3]);
            }
        }
        if (kt0 + BN - 1 > wr0) { /* the diagonal: key > row is masked */
#pragma unroll
            for (int nt = 0; nt < BN / 8; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    int key = kt0 + nt * 8 + 2 * tq + (e & 1), r = wr0 + g + (e >> 1) * 8;
                    if (key > r) s[nt][e] = -INFINITY;
                }
        }
        /* online softmax over the two rows this thread holds (g and g + 8), in log2 units */
#pragma unroll
        for (int i = 0; i < 2; i++) {
            float mx = -INFINITY;
#pragma unroll
            for (int nt = 0; nt < BN / 8; nt++) mx = fmaxf(mx, fmaxf(s[nt][2 * i], s[nt][2 * i + 1]));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            float mn = fmaxf(m[i], mx * scale_log2); /* finite: tile 0 has key 0 <= every row */
            float corr = exp2f(m[i] - mn), sum = 0.0f;
            m[i] = mn;
#pragma unroll
            for (int nt = 0; nt < BN / 8; nt++) {
                s[nt][2 * i] = exp2f(s[nt][2 * i] * scale_log2 - mn);
                s[nt][2 * i + 1] = exp2f(s[nt][2 * i + 1] * scale_log2 - mn);
                sum += s[nt][2 * i] + s[nt][2 * i + 1];
            }
            l[i] = l[i] * corr + sum;
#pragma unroll
            for (int dt = 0; dt < D / 8; dt++) {
                o[dt][2 * i] *= corr;
                o[dt][2 * i + 1] *= corr;
            }
        }
        /* O += P V */
#pragma unroll
        for (int kc = 0; kc < BN / 16; kc++) {
            uint32_t a[4];
            acc_to_a(a, s[2 * kc], s[2 * kc + 1]);
#pragma unroll
            for (int dp = 0; dp < D / 16; dp++) {
                uint32_t b[4];
                lds_b<D>(b, cV, kc * 16, dp * 16, lane);
                mma16816(o[2 * dp], a, b[0], b[1]);
                mma16816(o[2 * dp + 1], a, b[2], b[3]);
            }
        }
    }
    /* the row sums are spread over the quad's 4 threads */
#pragma unroll
    for (int i = 0; i < 2; i++) {
        l[i] += __shfl_xor_sync(0xffffffffu, l[i], 1);
        l[i] += __shfl_xor_sync(0xffffffffu, l[i], 2);
        int r = wr0 + g + i * 8;
        if (r >= len) continue;
        float inv = 1.0f / l[i];
        __nv_bfloat16 *orow = out + (int64_t)(j0 + r) * H * D + (int64_t)h * D;
#pragma unroll
        for (int dt = 0; dt < D / 8; dt++)
            *(__nv_bfloat162 *)(orow + dt * 8 + 2 * tq) = __floats2bfloat162_rn(o[dt][2 * i] * inv, o[dt][2 * i + 1] * inv);
        if (tq == 0) lse[(int64_t)(j0 + r) * H + h] = (m[i] + log2f(l[i])) * ATTN_LN2;
    }
}

template <int D, int NW>
static void launch_fwd(cpt_cuda_ctx *ctx, __nv_bfloat16 *out, float *lse, const __nv_bfloat16 *qkv, const int32_t *cu,
                       int n_seqs, int max_seqlen, int H, int KV) {
    constexpr int BM = 16 * NW;
    size_t smem = (size_t)(BM + 4 * FWD_BN) * attn_pad<D>::SD * sizeof(__nv_bfloat16);
    CUDA_OK(cudaFuncSetAttribute(attn_fwd_mma_kernel<D, NW>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    dim3 grid((unsigned)H, (unsigned)n_seqs, cdiv(max_seqlen, BM));
    attn_fwd_mma_kernel<D, NW><<<grid, NW * 32, smem, ctx->stream>>>(out, lse, qkv, cu, H, KV,
                                                                     ATTN_LOG2E / sqrtf((float)D));
    LAUNCH_OK("attn_fwd_mma_kernel");
}

void cpt_attn_fwd_mma(cpt_cuda_ctx *ctx, __nv_bfloat16 *out, float *lse, const __nv_bfloat16 *qkv, const int32_t *cu,
                      int n_seqs, int max_seqlen, int64_t N, int H, int KV, int D) {
    (void)N;
    CKCHECK(n_seqs <= 65535 && cdiv(max_seqlen, 64) <= 65535, "attention_fwd",
            "%d sequences or a longest sequence of %d is more than the grid takes", n_seqs, max_seqlen);
    if (max_seqlen == 0) return;
    switch (D) {
    case 64: launch_fwd<64, 8>(ctx, out, lse, qkv, cu, n_seqs, max_seqlen, H, KV); break;
    case 80: launch_fwd<80, 8>(ctx, out, lse, qkv, cu, n_seqs, max_seqlen, H, KV); break;
    case 96: launch_fwd<96, 8>(ctx, out, lse, qkv, cu, n_seqs, max_seqlen, H, KV); break;
    case 128: launch_fwd<128, 8>(ctx, out, lse, qkv, cu, n_seqs, max_seqlen, H, KV); break;
    default: launch_fwd<256, 8>(ctx, out, lse, qkv, cu, n_seqs, max_seqlen, H, KV); break;
    }
}
