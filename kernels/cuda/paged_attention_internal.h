/* Device pieces shared by the paged decode attention kernels (paged_attention.cu: v1, v2 and the append;
 * paged_attention_mma.cu: the tensor-core version): page addressing, the q/k norm + RoPE of one head, the split
 * partials and their merge. .cu files only. */
#ifndef CPT_KERNELS_CUDA_PAGED_ATTENTION_INTERNAL_H
#define CPT_KERNELS_CUDA_PAGED_ATTENTION_INTERNAL_H

#include <math.h>

#include "kernels/cuda/cuda_internal.h"

/* A barrier over the threads that run the attention: SUB = 0 the whole block (__syncthreads), else the first SUB
 * threads (named barrier 1), when the rest of the block does something else. */
template <int SUB> static __device__ __forceinline__ void block_sync() {
    if constexpr (SUB == 0) __syncthreads();
    else asm volatile("bar.sync 1, %0;" ::"n"(SUB) : "memory");
}
template <int SUB> static __device__ __forceinline__ int sub_threads() { return SUB ? SUB : (int)blockDim.x; }

/* Offset (bf16 values) of position p's row in table tab, layer `layer`, which = 0 keys / 1 values. */
static __device__ inline int64_t kv_row(const cpt_cuda_paged_kv &kv, int layer, int which, int tab, int p) {
    int32_t blk = kv.block_tables[(int64_t)tab * kv.max_blocks + p / kv.block_size];
    return ((((int64_t)layer * 2 + which) * kv.n_blocks + blk) * kv.block_size + p % kv.block_size) *
           (int64_t)kv.n_kv_heads * kv.head_dim;
}

/* One warp: a head vector [D] (element d: ld(d), fp32 of the bf16 value) through the optional rmsnorm (weight w) and
 * RoPE (trig(k, sn, cs): sin and cos of p inv_freq[k]); store(k, x_k, x_(k + D/2)) for each rotated pair, fp32 (the
 * caller rounds). The one computation behind kv_append and the attentions that append (bitwise the same results
 * whichever memory the vector and the angles come from). */
template <typename Load, typename Trig, typename Store>
static __device__ __forceinline__ void norm_rope_from(Load ld, Trig trig, const __nv_bfloat16 *w, float eps, int D,
                                                      int lane, Store store) {
    int half = D / 2;
    float rstd = 1.0f;
    if (w) {
        float ss = 0.0f;
        for (int d = lane; d < D; d += 32) {
            float f = ld(d);
            ss += f * f;
        }
        for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
        rstd = rsqrtf(ss / (float)D + eps);
    }
    __syncwarp();
    for (int k = lane; k < half; k += 32) {
        float a = ld(k) * rstd, b = ld(k + half) * rstd;
        if (w) {
            a *= __bfloat162float(w[k]);
            b *= __bfloat162float(w[k + half]);
        }
        float sn, cs;
        trig(k, sn, cs);
        store(k, a * cs - b * sn, b * cs + a * sn);
    }
}

/* The angle of RoPE pair k at position p (norm_rope_from's trig). */
static __device__ __forceinline__ void rope_angle(int p, const float *inv_freq, int k, float &sn, float &cs) {
    sincosf((float)p * inv_freq[k], &sn, &cs);
}

/* norm_rope_from with the head vector src read through L2 (another kernel, or another block, wrote it) and the
 * angles computed here. */
template <typename Store>
static __device__ __forceinline__ void norm_rope_head(const __nv_bfloat16 *src, const __nv_bfloat16 *w, float eps,
                                                      int p, const float *inv_freq, int D, int lane, Store store) {
    norm_rope_from([&](int d) { return __bfloat162float(__ldcg(src + d)); },
                   [&](int k, float &sn, float &cs) { rope_angle(p, inv_freq, k, sn, cs); }, w, eps, D, lane, store);
}

/* The (unnormalised o, m, l) partial of an empty split: m = -inf, l = 0, which the combine skips. */
static __device__ __forceinline__ void empty_split_partials(float *partial, int64_t i, int H, int kvh, int G,
                                                            int n_splits, int sp, int D, int tid, int nt) {
    for (int g = tid; g < G; g += nt) {
        float *pp = partial + (((i * H) + kvh * G + g) * n_splits + sp) * (int64_t)(D + 2);
        pp[D] = -INFINITY;
        pp[D + 1] = 0.0f;
    }
}

/* Element d of head h's result o (running max m, sum l): with one split the normalised bf16 output, else the
 * split's partial (o, and m, l once per head). */
static __device__ __forceinline__ void store_head(__nv_bfloat16 *out, float *partial, int64_t i, int H, int h,
                                                  int n_splits, int sp, int D, int d, float o, const float *m,
                                                  const float *l) {
    if (n_splits == 1) {
        out[i * (int64_t)H * D + (int64_t)h * D + d] = __float2bfloat16(o / *l);
    } else {
        float *pp = partial + ((i * H + h) * n_splits + sp) * (int64_t)(D + 2);
        pp[d] = o;
        if (d == 0) {
            pp[D] = *m;
            pp[D + 1] = *l;
        }
    }
}

/* The append fused into the attention (cpt_cuda_paged_attention_v2_append); inv_freq NULL: none. */
struct attn_append {
    const __nv_bfloat16 *q_norm, *k_norm;
    float eps;
    const float *inv_freq;
};

#define MERGE_MAX_HEADS 16
#define MERGE_MAX_SPLITS 16

/* Merges the splits of heads h0 .. h0 + nh of row i in split order: out = sum_s e^(m_s - M) o_s / sum_s e^(m_s - M)
 * l_s over the splits with l_s > 0, by the whole block. Every (m, l) is loaded at once, the weights computed once per
 * head, and each output element issues its split loads together: the merge is a few dependent L2 round trips, not
 * one per split. Loads bypass L1 (__ldcg): the merging block may read partials other blocks just wrote. */
template <int SUB>
static __device__ void merge_heads(__nv_bfloat16 *out, const float *partial, int64_t i, int H, int h0, int nh,
                                   int n_splits, int D) {
    __shared__ float w_s[MERGE_MAX_HEADS][MERGE_MAX_SPLITS], l_s[MERGE_MAX_HEADS][MERGE_MAX_SPLITS],
        den_s[MERGE_MAX_HEADS];
    const int tid = threadIdx.x, nt = sub_threads<SUB>();
    for (int x = tid; x < nh * n_splits; x += nt) { /* m into w_s for now */
        const float *pp = partial + ((i * H + h0 + x / n_splits) * n_splits + x % n_splits) * (int64_t)(D + 2);
        w_s[x / n_splits][x % n_splits] = __ldcg(pp + D);
        l_s[x / n_splits][x % n_splits] = __ldcg(pp + D + 1);
    }
    block_sync<SUB>();
    for (int g = tid; g < nh; g += nt) { /* the weights e^(m_s - M) of the non-empty splits, the denominator */
        float M = -INFINITY, den = 0.0f;
        for (int s = 0; s < n_splits; s++)
            if (l_s[g][s] > 0.0f) M = fmaxf(M, w_s[g][s]);
        for (int s = 0; s < n_splits; s++) {
            if (l_s[g][s] <= 0.0f) continue;
            w_s[g][s] = expf(w_s[g][s] - M);
            den += w_s[g][s] * l_s[g][s];
        }
        den_s[g] = den;
    }
    block_sync<SUB>();
    /* unrolled: a few elements' split loads in flight at once (the merging block may have only 64 threads for
     * G x D elements) */
#pragma unroll 4
    for (int x = tid; x < nh * D; x += nt) {
        int g = x / D, d = x % D;
        const float *pp = partial + ((i * H + h0 + g) * n_splits) * (int64_t)(D + 2) + d;
        float o[MERGE_MAX_SPLITS];
#pragma unroll
        for (int s = 0; s < MERGE_MAX_SPLITS; s++) o[s] = s < n_splits ? __ldcg(pp + s * (D + 2)) : 0.0f;
        float num = 0.0f;
#pragma unroll
        for (int s = 0; s < MERGE_MAX_SPLITS; s++)
            if (s < n_splits && l_s[g][s] > 0.0f) num += w_s[g][s] * o[s];
        out[i * (int64_t)H * D + (int64_t)(h0 + g) * D + d] = __float2bfloat16(num / den_s[g]);
    }
}

/* The tensor-core kernel of cpt_cuda_paged_attention_v2 (paged_attention_mma.cu); operands already checked,
 * cpt_cuda_paged_attention_mma_ok holds. */
void cpt_paged_attention_mma_launch(cpt_cuda_ctx *ctx, __nv_bfloat16 *out, float *partial, const __nv_bfloat16 *qkv,
                                    const cpt_cuda_paged_kv *kv, int layer, const int32_t *pos, const int32_t *tab,
                                    int n_rows, int n_splits, const int32_t *split_len, int H, int KV, int D,
                                    int *counters, attn_append ap);

/* The few-rows kernel of cpt_cuda_paged_attention_v2_append (paged_attention_few.cu); operands already checked,
 * cpt_cuda_paged_attention_few_ok holds, ap.inv_freq set. */
void cpt_paged_attention_few_launch(cpt_cuda_ctx *ctx, __nv_bfloat16 *out, const __nv_bfloat16 *qkv,
                                    const cpt_cuda_paged_kv *kv, int layer, const int32_t *pos, const int32_t *tab,
                                    int n_rows, int n_splits, const int32_t *split_len, int H, int KV, int D,
                                    attn_append ap);

/* The last of the (row i, kv head)'s split blocks to finish merges them (the threadfence-reduction pattern: the
 * order of the merge is the split order whichever block runs it) and leaves the counter at zero again. Called by
 * every thread of the block (SUB: of the first SUB threads); nothing to do with one split or without counters (the
 * combine kernel merges). */
template <int SUB>
static __device__ __forceinline__ void merge_if_last(__nv_bfloat16 *out, const float *partial, int *counters,
                                                     int64_t i, int H, int KV, int kvh, int n_splits, int D) {
    __shared__ int last_s;
    if (n_splits == 1 || !counters) return;
    __threadfence();
    block_sync<SUB>();
    if (threadIdx.x == 0) last_s = atomicAdd(&counters[i * KV + kvh], 1) == n_splits - 1;
    block_sync<SUB>();
    if (!last_s) return;
    __threadfence();
    const int G = H / KV;
    merge_heads<SUB>(out, partial, i, H, kvh * G, G, n_splits, D);
    if (threadIdx.x == 0) counters[i * KV + kvh] = 0;
}

#endif
