/* Shared between attention.cu (entry points, checks, simple kernels) and the tensor-core kernels for head_dim 64,
 * 80, 96, 128 and 256 (attention_fwd.cu, attention_bwd.cu): their launchers and the warp-level building blocks
 * (cp.async, ldmatrix, mma.sync m16n8k16 bf16 -> fp32) as inline PTX. Operands are already checked; pointers are
 * device pointers.
 *
 * Fragment layouts (PTX ISA, mma.m16n8k16, g = lane / 4, t = lane % 4): A 16x16 row-major in 4 registers of 2 bf16,
 * rows g / g+8, columns 2t..2t+1 / 2t+8..2t+9; B 16x8 as B[k][n] with k 2t..2t+1 / 2t+8..2t+9, n = g; C 16x8 fp32,
 * rows g / g+8, columns 2t..2t+1. So an accumulator pair of adjacent n-tiles is, converted to bf16, exactly the A
 * fragment of the next product (P = softmax(S) feeds P V without going through shared memory). Tiles live in
 * shared memory with rows padded by 16 bytes, so the 8 rows an ldmatrix reads fall in 8 different bank groups. */
#ifndef CPT_KERNELS_CUDA_ATTENTION_INTERNAL_H
#define CPT_KERNELS_CUDA_ATTENTION_INTERNAL_H

#include "kernels/cuda/cuda_internal.h"

/* out [N, H*D], lse [N, H] from qkv [N, (H+2KV)*D]; D is 64, 80, 96, 128 or 256 */
void cpt_attn_fwd_mma(cpt_cuda_ctx *ctx, __nv_bfloat16 *out, float *lse, const __nv_bfloat16 *qkv, const int32_t *cu,
                      int n_seqs, int max_seqlen, int64_t N, int H, int KV, int D);
/* How many parts the dK/dV work of a key tile is split into (1: none) so that enough blocks fill the GPU. */
int cpt_attn_bwd_mma_splits(cpt_cuda_ctx *ctx, int n_seqs, int max_seqlen, int KV, int D);
/* dqkv [N, (H+2KV)*D] overwritten; delta [N, H] = rowsum(dO * O) already computed; partial: fp32 scratch of
 * nsplit * N * KV * 2 * D when nsplit > 1 */
void cpt_attn_bwd_mma(cpt_cuda_ctx *ctx, __nv_bfloat16 *dqkv, float *partial, int nsplit, const __nv_bfloat16 *dout,
                      const float *lse, const float *delta, const __nv_bfloat16 *qkv, const int32_t *cu, int n_seqs,
                      int max_seqlen, int64_t N, int H, int KV, int D);

/* tiles in shared memory: rows of D bf16 padded by 8 */
template <int D> struct attn_pad {
    static constexpr int SD = D + 8;
};

__device__ inline uint32_t smem_u32(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

/* 16 bytes global -> shared, asynchronous; zero-filled when !valid (src is then not read) */
__device__ inline void cp_async16(void *dst, const void *src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(dst)), "l"(src), "r"(valid ? 16 : 0));
}
__device__ inline void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ inline void cp_async_wait_all() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }
/* waits until at most N of this thread's cp.async groups are pending */
template <int N> __device__ inline void cp_async_wait_group() {
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

__device__ inline void ldsm_x4(uint32_t r[4], const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_u32(p)));
}
__device__ inline void ldsm_x4_t(uint32_t r[4], const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_u32(p)));
}

/* c += a b, m16n8k16, bf16 in, fp32 accumulate */
__device__ inline void mma16816(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ inline uint32_t pack_bf16(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *(uint32_t *)&v;
}

/* The A fragment (16 x 16, bf16) of the next product from the fp32 accumulators of two adjacent n-tiles c0, c1
 * (see the layouts above: P = softmax(S) feeds P V without going through shared memory) */
__device__ inline void acc_to_a(uint32_t a[4], const float c0[4], const float c1[4]) {
    a[0] = pack_bf16(c0[0], c0[1]);
    a[1] = pack_bf16(c0[2], c0[3]);
    a[2] = pack_bf16(c1[0], c1[1]);
    a[3] = pack_bf16(c1[2], c1[3]);
}

/* A fragment (16 rows x 16 columns at column c0) of a row-major tile in shared memory, rows r0 .. r0+15 */
template <int D>
__device__ inline void lds_a(uint32_t a[4], const __nv_bfloat16 *tile, int r0, int c0, int lane) {
    ldsm_x4(a, tile + (r0 + ((lane >> 3) & 1) * 8 + (lane & 7)) * attn_pad<D>::SD + c0 + (lane >> 4) * 8);
}
/* B fragments of two n-tiles (rows n0 .. n0+15 of the tile are the n index, columns c0 .. c0+15 the k index): the
 * tile is used as B^T (S = Q K^T reads K this way). b[0], b[1] for rows n0..n0+7, b[2], b[3] for n0+8..n0+15. */
template <int D>
__device__ inline void lds_bt(uint32_t b[4], const __nv_bfloat16 *tile, int n0, int c0, int lane) {
    ldsm_x4(b, tile + (n0 + (lane >> 4) * 8 + (lane & 7)) * attn_pad<D>::SD + c0 + ((lane >> 3) & 1) * 8);
}
/* B fragments of two n-tiles where the tile's rows k0 .. k0+15 are the k index and columns c0 .. c0+15 the n index
 * (O = P V reads V this way): b[0], b[1] for columns c0..c0+7, b[2], b[3] for c0+8..c0+15. */
template <int D>
__device__ inline void lds_b(uint32_t b[4], const __nv_bfloat16 *tile, int k0, int c0, int lane) {
    ldsm_x4_t(b, tile + (k0 + ((lane >> 3) & 1) * 8 + (lane & 7)) * attn_pad<D>::SD + c0 + (lane >> 4) * 8);
}

/* rows 0 .. ROWS-1 of a [*, ld] bf16 matrix (D columns from g) into a padded tile; rows >= valid are zeros */
template <int ROWS, int D, int NT>
__device__ inline void load_tile_async(__nv_bfloat16 *tile, const __nv_bfloat16 *g, int64_t ld, int valid, int tid) {
    constexpr int CH = D / 8;
    for (int c = tid; c < ROWS * CH; c += NT) {
        int r = c / CH, k = (c % CH) * 8;
        bool v = r < valid;
        cp_async16(tile + r * attn_pad<D>::SD + k, v ? g + r * ld + k : g, v);
    }
}

#define ATTN_LOG2E 1.4426950408889634f
#define ATTN_LN2 0.6931471805599453f

#endif
