/* Paged decode attention on the tensor cores (cpt_cuda_paged_attention_v2 with CPT_ATTN_MMA): the contract of the
 * second version (rows, splits, partials, in-kernel merge, the append fused in) with the products as mma.sync.
 *
 * Why: at large batches the second version spends its time on fp32 FMAs and shared-memory traffic (each thread
 * scores a whole key row against every query head of the group), not on HBM: the 1.5B shape at batch 256 reads
 * ~200 MB of keys and values a layer at a context of 768, 42 us at the H200's bandwidth, and took ~160 us.
 *
 * Block (row i, kv head, split), NW warps. The group's G <= 16 query heads are the 16 rows of the A operand (rows
 * G..15 zero); each tile of BN = 16 NW positions is loaded into shared memory by cp.async through the block table
 * (the next tile while this one computes), and warp w owns positions 16w .. 16w+15 of every tile: S = Q K^T (2
 * n-tiles of 8 positions), its own running max and sum, P V into its own fp32 accumulators (the building blocks of
 * the training forward, attention_internal.h). At the end the warps' (o, m, l) are merged through shared memory
 * and written as the second version writes them (normalised bf16 with one split, else partials). */
#include "kernels/cuda/paged_attention_mma_internal.h"

template <int D, int NW>
static __global__ void __launch_bounds__(NW * 32) paged_attention_mma_kernel(
    __nv_bfloat16 *out, float *partial, const __nv_bfloat16 *qkv, cpt_cuda_paged_kv kv, int layer,
    const int32_t *pos, const int32_t *tab, const int32_t *split_len_p, int n_splits, int H, int KV, int *counters,
    attn_append ap) {
    extern __shared__ __align__(16) unsigned char pam_smem[];
    pdl_trigger();
    pdl_wait();
    const int64_t i = blockIdx.x;
    const int kvh = blockIdx.y, sp = blockIdx.z;
    const int len = pos[i] + 1, t = tab[i];
    const int split_len = n_splits == 1 ? len : split_len_p[i];
    const int start = sp * split_len, end = min(len, start + split_len);
    if (start >= end)
        empty_split_partials(partial, i, H, kvh, H / KV, n_splits, sp, D, threadIdx.x, NW * 32);
    else
        attend_mma<D, NW, 0>(out, partial, qkv, kv, layer, t, start, end, i, kvh, sp, n_splits, H, KV, ap, len - 1,
                             pam_smem);
    merge_if_last<0>(out, partial, counters, i, H, KV, kvh, n_splits, D);
}

int cpt_cuda_paged_attention_mma_ok(cpt_attn_shape s) {
    return (s.head_dim == 64 || s.head_dim == 128) && s.n_kv_heads > 0 && s.n_heads % s.n_kv_heads == 0 &&
           s.n_heads / s.n_kv_heads <= 16;
}

void cpt_paged_attention_mma_launch(cpt_cuda_ctx *ctx, __nv_bfloat16 *out, float *partial, const __nv_bfloat16 *qkv,
                                    const cpt_cuda_paged_kv *kv, int layer, const int32_t *pos, const int32_t *tab,
                                    int n_rows, int n_splits, const int32_t *split_len, int H, int KV, int D,
                                    int *counters, attn_append ap) {
    dim3 grid((unsigned)n_rows, (unsigned)KV, (unsigned)n_splits);
    constexpr int W128 = pam_warps<128>::NW, W64 = pam_warps<64>::NW;
    if (D == 128)
        launch_k(ctx, paged_attention_mma_kernel<128, W128>, grid, dim3(pam_cfg<128, W128>::NT),
                 pam_cfg<128, W128>::smem, out, partial, qkv, *kv, layer, pos, tab, split_len, n_splits, H, KV, counters,
                 ap);
    else
        launch_k(ctx, paged_attention_mma_kernel<64, W64>, grid, dim3(pam_cfg<64, W64>::NT), pam_cfg<64, W64>::smem,
                 out, partial, qkv, *kv, layer, pos, tab, split_len, n_splits, H, KV, counters, ap);
    LAUNCH_OK("paged_attention_mma_kernel");
}
