/* Causal grouped-query attention over packed variable-length sequences: the entry points, operand checks and
 * the simple path (every head_dim of cpt_cuda_head_dim_ok; used for head_dim < 64).
 *
 * Simple forward: one warp per (query row, head), keys in chunks of 32 (one key per lane), online softmax in fp32.
 * Simple backward: delta = rowsum(dO * O); dK/dV with one warp per (key row, kv head) walking the group's query
 * heads, then the query rows after the key, in a fixed order; dQ with one warp per (query row, head). Every output
 * element is written by one thread from a fixed summation order, so results are bitwise reproducible.
 * head_dim 64, 80, 96, 128 and 256 go to the tensor-core kernels of attention_fwd.cu and attention_bwd.cu
 * (CPT_ATTN_SIMPLE=1 in the environment sends them here too: the test compares both paths). */
#include <math.h>

#include "kernels/cuda/attention_internal.h"

#define WARPS 4 /* warps per block of the simple kernels */

/* the sequence holding packed row n: the last s with cu[s] <= n (cu non-decreasing, cu[0] = 0) */
__device__ inline int seq_of_row(const int32_t *cu, int n_seqs, int64_t n) {
    int lo = 0, hi = n_seqs - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) >> 1;
        if (cu[mid] <= n) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

/* dims owned by a lane: d = lane + 32 * i for i < DPL, valid while d < D */
template <int D> struct lanes {
    static constexpr int DPL = (D + 31) / 32;
};

template <int D>
__device__ inline float dot_row(const float *q, const __nv_bfloat16 *k) {
    float s = 0.0f;
#pragma unroll
    for (int d = 0; d < D; d += 2) {
        float2 kv = __bfloat1622float2(*(const __nv_bfloat162 *)(k + d));
        s += q[d] * kv.x + q[d + 1] * kv.y;
    }
    return s;
}

template <int D>
__device__ inline void load_row(float *dst, const __nv_bfloat16 *src) {
#pragma unroll
    for (int d = 0; d < D; d += 2) {
        float2 v = __bfloat1622float2(*(const __nv_bfloat162 *)(src + d));
        dst[d] = v.x;
        dst[d + 1] = v.y;
    }
}

/* ---- simple forward ---- */

template <int D>
__global__ void __launch_bounds__(WARPS * 32) attn_fwd_simple_kernel(__nv_bfloat16 *out, float *lse,
                                                                     const __nv_bfloat16 *qkv, const int32_t *cu,
                                                                     int n_seqs, int64_t N, int H, int KV) {
    const int lane = threadIdx.x & 31;
    int64_t task = (int64_t)blockIdx.x * WARPS + (threadIdx.x >> 5);
    if (task >= N * H) return;
    int64_t n = task / H;
    int h = (int)(task % H), kh = h / (H / KV);
    int64_t row = (int64_t)(H + 2 * KV) * D, j0 = cu[seq_of_row(cu, n_seqs, n)];
    const float scale = rsqrtf((float)D);
    float q[D];
    load_row<D>(q, qkv + n * row + (int64_t)h * D);
#pragma unroll
    for (int d = 0; d < D; d++) q[d] *= scale;
    const __nv_bfloat16 *K = qkv + (int64_t)(H + kh) * D, *V = qkv + (int64_t)(H + KV + kh) * D;
    constexpr int DPL = lanes<D>::DPL;
    float m = -INFINITY, l = 0.0f, o[DPL];
#pragma unroll
    for (int i = 0; i < DPL; i++) o[i] = 0.0f;
    for (int64_t k0 = j0; k0 <= n; k0 += 32) {
        int64_t j = k0 + lane;
        float s = j <= n ? dot_row<D>(q, K + j * row) : -INFINITY;
        float cm = s;
        for (int o2 = 16; o2 > 0; o2 >>= 1) cm = fmaxf(cm, __shfl_xor_sync(0xffffffffu, cm, o2));
        float mn = fmaxf(m, cm), corr = __expf(m - mn), p = j <= n ? __expf(s - mn) : 0.0f;
        float ps = p;
        for (int o2 = 16; o2 > 0; o2 >>= 1) ps += __shfl_xor_sync(0xffffffffu, ps, o2);
        l = l * corr + ps;
        m = mn;
#pragma unroll
        for (int i = 0; i < DPL; i++) o[i] *= corr;
        int cnt = n - k0 + 1 < 32 ? (int)(n - k0 + 1) : 32;
        for (int jj = 0; jj < cnt; jj++) {
            float pj = __shfl_sync(0xffffffffu, p, jj);
            const __nv_bfloat16 *v = V + (k0 + jj) * row;
#pragma unroll
            for (int i = 0; i < DPL; i++) {
                int d = lane + 32 * i;
                if (d < D) o[i] += pj * __bfloat162float(v[d]);
            }
        }
    }
    float inv = 1.0f / l;
#pragma unroll
    for (int i = 0; i < DPL; i++) {
        int d = lane + 32 * i;
        if (d < D) out[n * (int64_t)H * D + (int64_t)h * D + d] = __float2bfloat16(o[i] * inv);
    }
    if (lane == 0) lse[n * H + h] = m + logf(l);
}

/* ---- simple backward ---- */

/* delta [N, H] = rowsum(dO * O) per head: one warp per (row, head) */
__global__ void attn_delta_kernel(float *delta, const __nv_bfloat16 *dout, const __nv_bfloat16 *out, int64_t N, int H,
                                  int D) {
    const int lane = threadIdx.x & 31;
    int64_t task = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (task >= N * H) return;
    const __nv_bfloat16 *a = dout + task * D, *b = out + task * D; /* [N, H*D] row n head h = offset (n*H+h)*D */
    float s = 0.0f;
    for (int d = lane; d < D; d += 32) s += __bfloat162float(a[d]) * __bfloat162float(b[d]);
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (lane == 0) delta[task] = s;
}

/* one warp per (key row j, kv head): dV_j = sum_h sum_{i >= j} P_ij dO_i; dK_j = scale sum dS_ij Q_i */
template <int D>
__global__ void __launch_bounds__(WARPS * 32) attn_dkv_simple_kernel(__nv_bfloat16 *dqkv, const __nv_bfloat16 *dout,
                                                                     const float *lse, const float *delta,
                                                                     const __nv_bfloat16 *qkv, const int32_t *cu,
                                                                     int n_seqs, int64_t N, int H, int KV) {
    const int lane = threadIdx.x & 31;
    int64_t task = (int64_t)blockIdx.x * WARPS + (threadIdx.x >> 5);
    if (task >= N * KV) return;
    int64_t j = task / KV;
    int kh = (int)(task % KV), group = H / KV;
    int64_t row = (int64_t)(H + 2 * KV) * D, HD = (int64_t)H * D, j1 = cu[seq_of_row(cu, n_seqs, j) + 1];
    const float scale = rsqrtf((float)D);
    float k[D], v[D];
    load_row<D>(k, qkv + j * row + (int64_t)(H + kh) * D);
    load_row<D>(v, qkv + j * row + (int64_t)(H + KV + kh) * D);
    constexpr int DPL = lanes<D>::DPL;
    float dk[DPL], dv[DPL];
#pragma unroll
    for (int i = 0; i < DPL; i++) dk[i] = dv[i] = 0.0f;
    for (int h = kh * group; h < (kh + 1) * group; h++) {
        for (int64_t i0 = j; i0 < j1; i0 += 32) {
            int64_t i = i0 + lane;
            float p = 0.0f, ds = 0.0f;
            if (i < j1) {
                const __nv_bfloat16 *q = qkv + i * row + (int64_t)h * D, *go = dout + i * HD + (int64_t)h * D;
                p = __expf(dot_row<D>(k, q) * scale - lse[i * H + h]);
                ds = p * (dot_row<D>(v, go) - delta[i * H + h]);
            }
            int cnt = j1 - i0 < 32 ? (int)(j1 - i0) : 32;
            for (int ii = 0; ii < cnt; ii++) {
                float pi = __shfl_sync(0xffffffffu, p, ii), dsi = __shfl_sync(0xffffffffu, ds, ii);
                const __nv_bfloat16 *q = qkv + (i0 + ii) * row + (int64_t)h * D,
                                    *go = dout + (i0 + ii) * HD + (int64_t)h * D;
#pragma unroll
                for (int c = 0; c < DPL; c++) {
                    int d = lane + 32 * c;
                    if (d < D) {
                        dv[c] += pi * __bfloat162float(go[d]);
                        dk[c] += dsi * __bfloat162float(q[d]);
                    }
                }
            }
        }
    }
#pragma unroll
    for (int c = 0; c < DPL; c++) {
        int d = lane + 32 * c;
        if (d < D) {
            dqkv[j * row + (int64_t)(H + kh) * D + d] = __float2bfloat16(dk[c] * scale);
            dqkv[j * row + (int64_t)(H + KV + kh) * D + d] = __float2bfloat16(dv[c]);
        }
    }
}

/* one warp per (query row i, head): dQ_i = scale sum_{j <= i} dS_ij K_j */
template <int D>
__global__ void __launch_bounds__(WARPS * 32) attn_dq_simple_kernel(__nv_bfloat16 *dqkv, const __nv_bfloat16 *dout,
                                                                    const float *lse, const float *delta,
                                                                    const __nv_bfloat16 *qkv, const int32_t *cu,
                                                                    int n_seqs, int64_t N, int H, int KV) {
    const int lane = threadIdx.x & 31;
    int64_t task = (int64_t)blockIdx.x * WARPS + (threadIdx.x >> 5);
    if (task >= N * H) return;
    int64_t n = task / H;
    int h = (int)(task % H), kh = h / (H / KV);
    int64_t row = (int64_t)(H + 2 * KV) * D, HD = (int64_t)H * D, j0 = cu[seq_of_row(cu, n_seqs, n)];
    const float scale = rsqrtf((float)D);
    float q[D], go[D];
    load_row<D>(q, qkv + n * row + (int64_t)h * D);
    load_row<D>(go, dout + n * HD + (int64_t)h * D);
    const float L = lse[n * H + h], Dl = delta[n * H + h];
    const __nv_bfloat16 *K = qkv + (int64_t)(H + kh) * D, *V = qkv + (int64_t)(H + KV + kh) * D;
    constexpr int DPL = lanes<D>::DPL;
    float dq[DPL];
#pragma unroll
    for (int i = 0; i < DPL; i++) dq[i] = 0.0f;
    for (int64_t k0 = j0; k0 <= n; k0 += 32) {
        int64_t j = k0 + lane;
        float ds = 0.0f;
        if (j <= n) {
            float p = __expf(dot_row<D>(q, K + j * row) * scale - L);
            ds = p * (dot_row<D>(go, V + j * row) - Dl);
        }
        int cnt = n - k0 + 1 < 32 ? (int)(n - k0 + 1) : 32;
        for (int jj = 0; jj < cnt; jj++) {
            float dsj = __shfl_sync(0xffffffffu, ds, jj);
            const __nv_bfloat16 *k = K + (k0 + jj) * row;
#pragma unroll
            for (int c = 0; c < DPL; c++) {
                int d = lane + 32 * c;
                if (d < D) dq[c] += dsj * __bfloat162float(k[d]);
            }
        }
    }
#pragma unroll
    for (int c = 0; c < DPL; c++) {
        int d = lane + 32 * c;
        if (d < D) dqkv[n * row + (int64_t)h * D + d] = __float2bfloat16(dq[c] * scale);
    }
}

/* ---- entry points ---- */

static void check_common(const char *op, cpt_tensor qkv, cpt_tensor cu, int n_seqs, int max_seqlen, cpt_attn_shape s) {
    cpt_cuda_check(op, "qkv", qkv, CPT_DT_BF16, 2);
    cpt_cuda_check(op, "cu_seqlens", cu, CPT_DT_I32, 1);
    CKCHECK(s.n_heads > 0 && s.n_kv_heads > 0 && s.n_heads % s.n_kv_heads == 0, op,
            "bad head counts: %d query heads, %d kv heads", s.n_heads, s.n_kv_heads);
    CKCHECK(cpt_cuda_head_dim_ok(s.head_dim), op, "head_dim %d is not one of " CPT_CUDA_HEAD_DIMS_TEXT, s.head_dim);
    CKCHECK(qkv.shape[1] == (int64_t)(s.n_heads + 2 * s.n_kv_heads) * s.head_dim, op, "qkv has %lld columns, want %lld",
            (long long)qkv.shape[1], (long long)(s.n_heads + 2 * s.n_kv_heads) * s.head_dim);
    CKCHECK(n_seqs >= 1 && cu.shape[0] == n_seqs + 1, op, "cu_seqlens has %lld entries for %d sequences",
            (long long)cu.shape[0], n_seqs);
    CKCHECK(max_seqlen >= 0 && max_seqlen <= qkv.shape[0], op, "max_seqlen %d with %lld rows", max_seqlen,
            (long long)qkv.shape[0]);
}

/* runs the statement with HD_ the compile-time head_dim */
#define DISPATCH_D(D, ...)                                                                                     \
    switch (D) {                                                                                               \
    case 8: { constexpr int HD_ = 8; __VA_ARGS__; } break;                                                     \
    case 16: { constexpr int HD_ = 16; __VA_ARGS__; } break;                                                   \
    case 32: { constexpr int HD_ = 32; __VA_ARGS__; } break;                                                   \
    case 64: { constexpr int HD_ = 64; __VA_ARGS__; } break;                                                   \
    case 80: { constexpr int HD_ = 80; __VA_ARGS__; } break;                                                   \
    case 96: { constexpr int HD_ = 96; __VA_ARGS__; } break;                                                   \
    case 128: { constexpr int HD_ = 128; __VA_ARGS__; } break;                                                 \
    default: { constexpr int HD_ = 256; __VA_ARGS__; } break;                                                  \
    }

static int use_mma(int D) {
    const char *e = getenv("CPT_ATTN_SIMPLE"); /* forces the simple path (tests compare the two) */
    return D >= 64 && D % 16 == 0 && !(e && *e == '1');
}

void cpt_cuda_attention_fwd(cpt_cuda_ctx *ctx, cpt_tensor out, cpt_tensor lse, cpt_tensor qkv, cpt_tensor cu_seqlens,
                            int n_seqs, int max_seqlen, cpt_attn_shape s) {
    const char *op = "attention_fwd";
    check_common(op, qkv, cu_seqlens, n_seqs, max_seqlen, s);
    cpt_cuda_check(op, "out", out, CPT_DT_BF16, 2);
    cpt_cuda_check(op, "lse", lse, CPT_DT_F32, 2);
    int64_t N = qkv.shape[0];
    int H = s.n_heads, KV = s.n_kv_heads, D = s.head_dim;
    CKCHECK(out.shape[0] == N && out.shape[1] == (int64_t)H * D && lse.shape[0] == N && lse.shape[1] == H, op,
            "out [%lld, %lld] or lse [%lld, %lld] does not match %lld rows of %d heads of %d", (long long)out.shape[0],
            (long long)out.shape[1], (long long)lse.shape[0], (long long)lse.shape[1], (long long)N, H, D);
    if (N == 0) return;
    if (use_mma(D)) {
        cpt_attn_fwd_mma(ctx, BF(out), FP(lse), BF(qkv), IP(cu_seqlens), n_seqs, max_seqlen, N, H, KV, D);
        return;
    }
    unsigned grid = cdiv(N * H, WARPS);
    DISPATCH_D(D, attn_fwd_simple_kernel<HD_><<<grid, WARPS * 32, 0, ctx->stream>>>(
                      BF(out), FP(lse), BF(qkv), IP(cu_seqlens), n_seqs, N, H, KV));
    LAUNCH_OK("attn_fwd_simple_kernel");
}

void cpt_cuda_attention_bwd(cpt_cuda_ctx *ctx, cpt_tensor dqkv, cpt_tensor dout, cpt_tensor out, cpt_tensor lse,
                            cpt_tensor qkv, cpt_tensor cu_seqlens, int n_seqs, int max_seqlen, cpt_attn_shape s) {
    const char *op = "attention_bwd";
    check_common(op, qkv, cu_seqlens, n_seqs, max_seqlen, s);
    cpt_cuda_check(op, "dqkv", dqkv, CPT_DT_BF16, 2);
    cpt_cuda_check(op, "dout", dout, CPT_DT_BF16, 2);
    cpt_cuda_check(op, "out", out, CPT_DT_BF16, 2);
    cpt_cuda_check(op, "lse", lse, CPT_DT_F32, 2);
    int64_t N = qkv.shape[0];
    int H = s.n_heads, KV = s.n_kv_heads, D = s.head_dim;
    CKCHECK(dqkv.shape[0] == N && dqkv.shape[1] == qkv.shape[1] && dout.shape[0] == N &&
                dout.shape[1] == (int64_t)H * D && out.shape[0] == N && out.shape[1] == (int64_t)H * D &&
                lse.shape[0] == N && lse.shape[1] == H,
            op, "dqkv, dout, out or lse does not match qkv [%lld, %lld] with %d heads of %d", (long long)N,
            (long long)qkv.shape[1], H, D);
    if (N == 0) return;
    int mma = use_mma(D), nsplit = mma ? cpt_attn_bwd_mma_splits(ctx, n_seqs, max_seqlen, KV, D) : 1;
    size_t delta_bytes = ((size_t)(N * H) * sizeof(float) + 255) & ~(size_t)255;
    size_t part_bytes = nsplit > 1 ? (size_t)nsplit * (size_t)(N * KV) * 2 * (size_t)D * sizeof(float) : 0;
    char *scratch = (char *)cpt_cuda_scratch(ctx, delta_bytes + part_bytes);
    float *delta = (float *)scratch;
    attn_delta_kernel<<<cdiv(N * H, 8), 256, 0, ctx->stream>>>(delta, BF(dout), BF(out), N, H, D);
    LAUNCH_OK("attn_delta_kernel");
    if (mma) {
        cpt_attn_bwd_mma(ctx, BF(dqkv), (float *)(scratch + delta_bytes), nsplit, BF(dout), FP(lse), delta, BF(qkv),
                         IP(cu_seqlens), n_seqs, max_seqlen, N, H, KV, D);
        return;
    }
    DISPATCH_D(D, attn_dkv_simple_kernel<HD_><<<cdiv(N * KV, WARPS), WARPS * 32, 0, ctx->stream>>>(
                      BF(dqkv), BF(dout), FP(lse), delta, BF(qkv), IP(cu_seqlens), n_seqs, N, H, KV));
    LAUNCH_OK("attn_dkv_simple_kernel");
    DISPATCH_D(D, attn_dq_simple_kernel<HD_><<<cdiv(N * H, WARPS), WARPS * 32, 0, ctx->stream>>>(
                      BF(dqkv), BF(dout), FP(lse), delta, BF(qkv), IP(cu_seqlens), n_seqs, N, H, KV));
    LAUNCH_OK("attn_dq_simple_kernel");
}
