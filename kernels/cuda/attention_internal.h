/* Shared between attention.cu (entry points, checks, simple kernels) and attention_mma.cu (tensor-core kernels
 * for head_dim 64 and 128). Operands are already checked; pointers are device pointers. */
#ifndef CPT_KERNELS_CUDA_ATTENTION_INTERNAL_H
#define CPT_KERNELS_CUDA_ATTENTION_INTERNAL_H

#include "kernels/cuda/cuda_internal.h"

/* out [N, H*D], lse [N, H] from qkv [N, (H+2KV)*D]; D is 64 or 128 */
void cpt_attn_fwd_mma(cpt_cuda_ctx *ctx, __nv_bfloat16 *out, float *lse, const __nv_bfloat16 *qkv, const int32_t *cu,
                      int n_seqs, int max_seqlen, int64_t N, int H, int KV, int D);
/* dqkv [N, (H+2KV)*D] overwritten; delta [N, H] = rowsum(dO * O) already computed */
void cpt_attn_bwd_mma(cpt_cuda_ctx *ctx, __nv_bfloat16 *dqkv, const __nv_bfloat16 *dout, const float *lse,
                      const float *delta, const __nv_bfloat16 *qkv, const int32_t *cu, int n_seqs, int max_seqlen,
                      int64_t N, int H, int KV, int D);

#endif
