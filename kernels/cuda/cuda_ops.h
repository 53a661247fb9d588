/* The CUDA backend: bf16 activations and weights, fp32 accumulation, fp32 master weights and optimizer state.
 *
 * Entry points are C functions over the cpt_tensor views of kernels/kernels.h with device CPT_DEVICE_CUDA. Every
 * op runs on the stream of an explicit context (cpt_cuda_ctx: stream, cuBLASLt handle and workspace, a scratch
 * buffer for deterministic reductions); ops are asynchronous, cpt_cuda_sync waits and reports device faults.
 *
 * Conventions follow kernels.h: backward ops ACCUMULATE into their gradient outputs; reductions use fixed
 * partitions and fixed summation orders (no float atomics), so results are bitwise reproducible; a misused op
 * (wrong device, dtype or shape) prints what mismatched and aborts, as the CPU ops do. Functions that can fail for
 * reasons outside the program (no device, out of memory, a failed copy) return -1 / NULL with a message naming the
 * CUDA call in a cpt_err.
 *
 * dtypes: activations, weights and activation gradients are BF16; per-row statistics (rstd, lse, logprob,
 * entropy), weight gradients, master weights and AdamW moments are F32; positions, targets are I32. */
#ifndef CPT_KERNELS_CUDA_CUDA_OPS_H
#define CPT_KERNELS_CUDA_CUDA_OPS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "core/error.h"
#include "kernels/kernels.h"

/* ---- context and memory ---------------------------------------------------------------------------------- */

typedef struct cpt_cuda_ctx cpt_cuda_ctx;

/* Selects device `device`, creates a stream and loads cuBLASLt (libcublasLt.so.13, or the path in
 * CPT_CUBLASLT_LIB). NULL with err set when there is no usable device or library. */
cpt_cuda_ctx *cpt_cuda_ctx_new(int device, cpt_err *err);
void cpt_cuda_ctx_free(cpt_cuda_ctx *ctx);
/* GPUs this process sees (0 when none or no driver). */
int cpt_cuda_device_count(void);
/* Waits for every op queued on the context's stream; -1 with the device error (a kernel fault) named. */
int cpt_cuda_sync(cpt_cuda_ctx *ctx, cpt_err *err);

/* Device memory. `what` names the buffer in error messages. */
void *cpt_cuda_malloc(size_t bytes, const char *what, cpt_err *err);
void cpt_cuda_free(void *p);
int cpt_cuda_memcpy_h2d(cpt_cuda_ctx *ctx, void *dst, const void *src, size_t bytes, cpt_err *err);
int cpt_cuda_memcpy_d2h(cpt_cuda_ctx *ctx, void *dst, const void *src, size_t bytes, cpt_err *err);
int cpt_cuda_memcpy_d2d(cpt_cuda_ctx *ctx, void *dst, const void *src, size_t bytes, cpt_err *err);
/* Fills n bytes with the byte value (0xFF poisons bf16 and fp32 buffers with NaN). */
int cpt_cuda_memset(cpt_cuda_ctx *ctx, void *dst, int byte, size_t bytes, cpt_err *err);
/* fp32 host <-> bf16 device, converted on the host with round-to-nearest-even (NaN stays NaN), the rounding of
 * cpt_f32_to_bf16 in core/safetensors.h, so tests can feed the CPU reference the values the GPU sees. Synchronous. */
int cpt_cuda_upload_bf16(cpt_cuda_ctx *ctx, void *dst, const float *src, size_t n, cpt_err *err);
int cpt_cuda_download_bf16(cpt_cuda_ctx *ctx, float *dst, const void *src, size_t n, cpt_err *err);

/* A device view: dims given by ndim and the shape values. */
cpt_tensor cpt_cuda_tensor(void *p, cpt_dtype dt, int ndim, int64_t d0, int64_t d1);

/* ---- ops (all asynchronous on ctx's stream) -------------------------------------------------------------- */

/* out [N, OC] bf16 = inp [N, C] bf16 @ w [OC, C]^T bf16 (+ bias [OC] bf16, optional); fp32 accumulation. */
void cpt_cuda_matmul_fwd(cpt_cuda_ctx *ctx, cpt_tensor out, cpt_tensor inp, cpt_tensor w, cpt_tensor bias);
/* dinp [N, C] bf16 += dout [N, OC] @ w [OC, C];  dw [OC, C] f32 += dout^T @ inp. Either may be absent.
 * _ex with CPT_MM_DINP_SET / CPT_MM_DW_SET: that output is overwritten instead (= not +=): no zeroed buffer needed,
 * and the product does not read it. */
void cpt_cuda_matmul_bwd(cpt_cuda_ctx *ctx, cpt_tensor dinp, cpt_tensor dw, cpt_tensor dout, cpt_tensor inp,
                         cpt_tensor w);
enum { CPT_MM_DINP_SET = 1, CPT_MM_DW_SET = 2 };
void cpt_cuda_matmul_bwd_ex(cpt_cuda_ctx *ctx, cpt_tensor dinp, cpt_tensor dw, cpt_tensor dout, cpt_tensor inp,
                            cpt_tensor w, int flags);

/* Fused residual add + RMSNorm over the last dim: when resid is present, x = inp + resid is written to
 * resid_out (bf16; may alias inp or resid) and normalised, else x = inp. out [R, C] bf16 = x * rstd * w,
 * rstd [R] f32 kept for backward (optional). */
void cpt_cuda_rmsnorm_fwd(cpt_cuda_ctx *ctx, cpt_tensor out, cpt_tensor rstd, cpt_tensor resid_out, cpt_tensor inp,
                          cpt_tensor resid, cpt_tensor w, float eps);
/* dinp [R, C] bf16 += d/dx; dw [C] f32 += d/dw (fixed-order reduction over chunks of rows); inp is the forward's
 * normalised input x. */
void cpt_cuda_rmsnorm_bwd(cpt_cuda_ctx *ctx, cpt_tensor dinp, cpt_tensor dw, cpt_tensor dout, cpt_tensor inp,
                          cpt_tensor w, cpt_tensor rstd);

/* In place on bf16 x [N, row_stride], as cpt_k_rope_fwd/bwd; inv_freq [head_dim / 2] f32 on the device (from
 * cpt_rope_inv_freq, so llama3 scaling is the CPU's), positions [N] i32 on the device. */
void cpt_cuda_rope_fwd(cpt_cuda_ctx *ctx, cpt_tensor x, int n_heads, int head_dim, cpt_tensor positions,
                       cpt_tensor inv_freq);
void cpt_cuda_rope_bwd(cpt_cuda_ctx *ctx, cpt_tensor dx, int n_heads, int head_dim, cpt_tensor positions,
                       cpt_tensor inv_freq);

/* out [N, I] = silu(gate) * up from gu [N, 2I] (gate then up); dgu = its gradient from dout (overwritten, not
 * added: the caller needs no zeroed buffer). All bf16. */
void cpt_cuda_swiglu_fwd(cpt_cuda_ctx *ctx, cpt_tensor out, cpt_tensor gu);
void cpt_cuda_swiglu_bwd(cpt_cuda_ctx *ctx, cpt_tensor dgu, cpt_tensor dout, cpt_tensor gu);

/* From bf16 logits [n, V] in one streaming pass per row (online max / sum; no fp32 copy of the logits):
 * lse [n], logprob [n] (0 where target < 0), entropy [n], all f32; logprob and entropy optional; targets [n] i32
 * (needed for logprob). */
void cpt_cuda_token_stats_fwd(cpt_cuda_ctx *ctx, cpt_tensor logprob, cpt_tensor entropy, cpt_tensor lse,
                              cpt_tensor logits, cpt_tensor targets);
/* Overwrites the bf16 logits with d(loss)/d(logits), as cpt_k_token_stats_bwd. */
void cpt_cuda_token_stats_bwd(cpt_cuda_ctx *ctx, cpt_tensor logits, cpt_tensor lse, cpt_tensor entropy,
                              cpt_tensor targets, cpt_tensor d_logprob, cpt_tensor d_entropy);

/* One fused AdamW update of one parameter, torch.optim.AdamW semantics as trainer/optim.c: param, m, v f32
 * (fp32 master and moments), grad f32, param_bf16 (optional) receives the bf16 copy the forward uses. step is the
 * 1-based count of updates including this one. */
typedef struct cpt_cuda_adamw_args {
    double lr, beta1, beta2, eps, weight_decay;
    int64_t step;
    int no_decay;
} cpt_cuda_adamw_args;
void cpt_cuda_adamw(cpt_cuda_ctx *ctx, cpt_tensor param, cpt_tensor param_bf16, cpt_tensor grad, cpt_tensor m,
                    cpt_tensor v, const cpt_cuda_adamw_args *a);

/* AdamW with the state in pinned host memory (kernels/cuda/adamw_offload.cu): each segment's fp32 master weights
 * and moments stream through two device staging buffers of chunk_floats floats per array (uploads, updates and
 * downloads of successive chunks overlap), are updated with cpt_cuda_adamw's arithmetic (bitwise the same) and
 * written back; the bf16 copy is written on the device. The update runs on ctx's stream after the work queued
 * there (the backward); the call returns once the host state is written. a->no_decay is taken from each segment. */
typedef struct cpt_cuda_offload_seg {
    float *w, *m, *v;  /* host (pinned for the copies to overlap), n floats each, updated in place */
    const float *grad; /* device fp32 */
    void *w_bf16;      /* device bf16 receiving the updated weights, or NULL */
    size_t n;
    int no_decay;
} cpt_cuda_offload_seg;
typedef struct cpt_cuda_offload cpt_cuda_offload;
cpt_cuda_offload *cpt_cuda_offload_new(cpt_cuda_ctx *ctx, size_t chunk_floats, cpt_err *err);
void cpt_cuda_offload_free(cpt_cuda_offload *o);
int cpt_cuda_adamw_offload(cpt_cuda_offload *o, const cpt_cuda_offload_seg *segs, size_t n_segs,
                           const cpt_cuda_adamw_args *a, cpt_err *err);

/* ---- attention (kernels/cuda/attention.cu) ---------------------------------------------------------------- */

/* The head sizes every attention kernel here takes (training forward and backward, paged decode v1 falls back to
 * v2): the sizes of real models. Plain C, so builds without CUDA refuse the same shapes (cpt_model_cuda_shape_check
 * in model/model.h). */
#define CPT_CUDA_HEAD_DIMS_TEXT "8, 16, 32, 64, 80, 96, 128, 256"
static inline int cpt_cuda_head_dim_ok(int d) {
    return d == 8 || d == 16 || d == 32 || d == 64 || d == 80 || d == 96 || d == 128 || d == 256;
}

/* Causal self-attention with grouped-query heads over packed variable-length sequences, flash-style: the T x T
 * scores never exist in memory. Same layout and meaning as cpt_k_attention_fwd in kernels/kernels.h:
 * qkv [N, (H + 2KV) * D] bf16 (per row H query heads, then KV key heads, then KV value heads, after rope);
 * cu_seqlens [S + 1] i32 on the device; max_seqlen = the longest sequence (host value, sizes the grid).
 * out [N, H * D] bf16; lse [N, H] f32 (logsumexp of the scaled scores, kept for backward). Scale 1/sqrt(D).
 * head_dim: cpt_cuda_head_dim_ok (the multiples of 16 from 64 up run on the tensor cores). */
void cpt_cuda_attention_fwd(cpt_cuda_ctx *ctx, cpt_tensor out, cpt_tensor lse, cpt_tensor qkv, cpt_tensor cu_seqlens,
                            int n_seqs, int max_seqlen, cpt_attn_shape s);
/* dqkv [N, (H + 2KV) * D] bf16 is OVERWRITTEN (every element set; the one exception to the += convention, because
 * the qkv gradient has no other contributor), from dout [N, H * D] bf16 and the forward's out, lse and qkv.
 * Deterministic: no float atomics (dk/dv per kv block summed over the group's query heads in a fixed order, dq in
 * its own pass). */
void cpt_cuda_attention_bwd(cpt_cuda_ctx *ctx, cpt_tensor dqkv, cpt_tensor dout, cpt_tensor out, cpt_tensor lse,
                            cpt_tensor qkv, cpt_tensor cu_seqlens, int n_seqs, int max_seqlen, cpt_attn_shape s);

/* ---- model glue (kernels/cuda/embedding.cu, kernels/cuda/reduce.cu) -------------------------------------- */

/* out [N, C] bf16 = rows tokens [N] (i32, device, each in [0, V)) of wte [V, C] bf16. */
void cpt_cuda_embedding_fwd(cpt_cuda_ctx *ctx, cpt_tensor out, cpt_tensor tokens, cpt_tensor wte);
/* Host side of the deterministic embedding backward: groups the n positions by token id. ids [U] (ascending)
 * get the distinct ids, starts [U + 1] where each id's positions begin in order [n] (positions ascending within an
 * id). ids and starts need room for n (+1) entries. Returns U, or -1 when out of memory. */
int cpt_cuda_embedding_plan(const int32_t *tokens, int n, int32_t *ids, int32_t *starts, int32_t *order);
/* dwte [V, C] f32 row ids[u] += sum over j in starts[u] .. starts[u+1] of dout [N, C] bf16 row order[j], in that
 * order (one block per id: no atomics, the CPU's summation order). ids, starts, order: i32 on the device. */
void cpt_cuda_embedding_bwd(cpt_cuda_ctx *ctx, cpt_tensor dwte, cpt_tensor dout, cpt_tensor ids, cpt_tensor starts,
                            cpt_tensor order);
/* bf16 dst [N, *] columns dst_col .. dst_col + width = src [N, *] columns src_col .. (as cpt_k_copy_cols). */
void cpt_cuda_copy_cols(cpt_cuda_ctx *ctx, cpt_tensor dst, int64_t dst_col, cpt_tensor src, int64_t src_col,
                        int64_t width);
/* Elementwise casts over equal element counts: f32 -> bf16 (round to nearest even) and bf16 -> f32. */
void cpt_cuda_cast_bf16(cpt_cuda_ctx *ctx, cpt_tensor dst, cpt_tensor src);
void cpt_cuda_cast_f32(cpt_cuda_ctx *ctx, cpt_tensor dst, cpt_tensor src);
/* dbias [OC] f32 += column sums of dout [N, OC] bf16 (fixed 128-row chunks, then chunks in order). */
void cpt_cuda_bias_grad(cpt_cuda_ctx *ctx, cpt_tensor dbias, cpt_tensor dout);
/* A scalar head: out [N] f32 = x [N, C] bf16 . w [C] bf16 (fp32 sums). Backward: dx [N, C] bf16 += dout[n] * w,
 * dw [C] f32 += sum_n dout[n] * x[n] (deterministic chunks); dx or dw may be absent. */
void cpt_cuda_rowdot_fwd(cpt_cuda_ctx *ctx, cpt_tensor out, cpt_tensor x, cpt_tensor w);
void cpt_cuda_rowdot_bwd(cpt_cuda_ctx *ctx, cpt_tensor dx, cpt_tensor dw, cpt_tensor dout, cpt_tensor x,
                         cpt_tensor w);
/* *out (one fp64 on the device) = sum of x^2 over the f32 tensor x: fp64 partials over a grid fixed by the size,
 * then a fixed tree, so the value is bitwise reproducible. */
void cpt_cuda_sumsq(cpt_cuda_ctx *ctx, double *out, cpt_tensor x);
/* x *= c in place (f32): gradient clipping. */
void cpt_cuda_scale(cpt_cuda_ctx *ctx, cpt_tensor x, float c);

/* ---- GPU decode (kernels/cuda/paged_attention.cu, sampling.cu, decode_ops.cu; used by model/cuda_decoder.c) -- */

/* The paged bf16 KV cache: pool [layers][2 (K, V)][n_blocks][block_size][n_kv_heads][head_dim]. Position p of
 * block table t lives in block block_tables[t * max_blocks + p / block_size] at row p % block_size. Passed by
 * value to kernels, so a captured graph keeps the pointers (the tables' contents may change between replays). */
typedef struct cpt_cuda_paged_kv {
    void *pool;
    int n_layers, n_blocks, block_size, n_kv_heads, head_dim;
    int max_blocks;
    const int32_t *block_tables; /* device [tables, max_blocks] */
} cpt_cuda_paged_kv;

/* Rows of a decode call: row i is the token at position pos[i] of table tab[i] (i32 device arrays). In place on
 * qkv [n_rows, (H + 2KV) * D] bf16: the optional per-head RMSNorm of q and k (q_norm, k_norm [D] bf16, qwen3),
 * RoPE at pos[i] (inv_freq [D / 2] f32 on the device) on q (left in qkv) and k; then K and V go to the pages. */
void cpt_cuda_kv_append(cpt_cuda_ctx *ctx, const cpt_cuda_paged_kv *kv, int layer, void *qkv, const int32_t *pos,
                        const int32_t *tab, int n_rows, const void *q_norm, const void *k_norm, float eps,
                        const float *inv_freq, cpt_attn_shape s);
/* out [n_rows, H * D] bf16 = attention of each row's queries (in qkv, after kv_append) over positions 0 .. pos[i]
 * of its table, scale 1/sqrt(D), GQA, by the kernel `kind`. n_splits > 1 splits row i's positions into chunks of
 * split_len[i] (device i32 [n_rows], so a graph replays with new lengths; ceil((pos[i] + 1) / split_len[i]) <=
 * n_splits, the rest of the grid's splits are empty) processed by separate blocks and merged in split order
 * (deterministic). A row's result depends only on its own positions and split_len[i], so a split length chosen
 * from the row's own length makes it independent of the other rows of the call (a row with one non-empty split is
 * bitwise the n_splits == 1 result). partial needs cpt_cuda_paged_attention_partial_floats floats. head_dim: every
 * cpt_cuda_head_dim_ok size. The kernels:
 * - CPT_ATTN_V2: fp32 products arranged for memory-level parallelism (row offsets in shared memory, 8-byte V loads
 *   over many positions at once); every head_dim.
 * - CPT_ATTN_MMA: the products on the tensor cores (mma.sync, P rounded to bf16 as in the training forward; within
 *   bf16 tolerance of V2, not bitwise); where cpt_cuda_paged_attention_mma_ok (head_dim 64 or 128, at most 16 query
 *   heads per kv head), else CPT_ATTN_V2 runs.
 * - CPT_ATTN_FEW: the tensor-core products arranged for latency (decode steps of a few rows,
 *   kernels/cuda/paged_attention_few.cu): each split's keys and values loaded before the wait for the previous
 *   kernel, the splits of a (row, kv head) one thread block cluster merged in distributed shared memory (partial and
 *   counters unused). Only through cpt_cuda_paged_attention_v2_append, where cpt_cuda_paged_attention_few_ok
 *   (head_dim 64 or 128, at most 16 query heads per kv head, at most CPT_PAGED_FEW_MAX_SPLITS splits), else
 *   CPT_ATTN_MMA runs. */
size_t cpt_cuda_paged_attention_partial_floats(int n_rows, int n_heads, int head_dim, int n_splits);
typedef enum cpt_attn_kind { CPT_ATTN_V2 = 0, CPT_ATTN_MMA = 1, CPT_ATTN_FEW = 2 } cpt_attn_kind;
int cpt_cuda_paged_attention_mma_ok(cpt_attn_shape s);
#define CPT_PAGED_FEW_MAX_SPLITS 8 /* a portable thread block cluster */
int cpt_cuda_paged_attention_few_ok(cpt_attn_shape s, int n_splits);
/* The attention above. counters (device, n_rows x n_kv_heads i32,
 * zeroed once; may be NULL): the last split block of each (row, kv head) merges the splits itself (same order and
 * values as the merge kernel, one launch fewer) and leaves its counter at zero again. */
void cpt_cuda_paged_attention_v2(cpt_cuda_ctx *ctx, void *out, float *partial, const void *qkv,
                                 const cpt_cuda_paged_kv *kv, int layer, const int32_t *pos, const int32_t *tab,
                                 int n_rows, int n_splits, const int32_t *split_len, cpt_attn_shape s, int *counters,
                                 cpt_attn_kind kind);
/* cpt_cuda_kv_append and cpt_cuda_paged_attention_v2 in one launch, for rows whose tables differ (decode steps: no
 * row reads a position another row of the call appends): each block rotates its own queries (qkv is left as it
 * is) and the block whose split holds the row's position writes that key and value first. Bitwise the same
 * outputs and pages as the two calls with the same kind. */
void cpt_cuda_paged_attention_v2_append(cpt_cuda_ctx *ctx, void *out, float *partial, const void *qkv,
                                        const cpt_cuda_paged_kv *kv, int layer, const int32_t *pos,
                                        const int32_t *tab, int n_rows, int n_splits, const int32_t *split_len,
                                        cpt_attn_shape s, int *counters, const void *q_norm, const void *k_norm,
                                        float eps, const float *inv_freq, cpt_attn_kind kind);
/* Copies whole blocks (every layer, K and V): pairs [n_pairs][2] = (src, dst) i32 on the device. */
void cpt_cuda_kv_copy_blocks(cpt_cuda_ctx *ctx, const cpt_cuda_paged_kv *kv, const int32_t *pairs, int n_pairs);

/* out [n_rows, C] = wte [V, C] rows tokens (bf16, C a multiple of 8). */
void cpt_cuda_embed(cpt_cuda_ctx *ctx, void *out, const int32_t *tokens, const void *wte, int n_rows, int64_t C);
/* out [n_out, C] = bf16(a[idx[s]] + b[idx[s]]) (b may be NULL). */
void cpt_cuda_gather_add(cpt_cuda_ctx *ctx, void *out, const void *a, const void *b, const int32_t *idx, int n_out,
                         int64_t C);
/* out [N, OC] f32 = inp [N, C] bf16 @ w [OC, C]^T bf16 (cuBLASLt, fp32 accumulate): fp32 logits. */
void cpt_cuda_matmul_f32out(cpt_cuda_ctx *ctx, float *out, const void *inp, const void *w, int64_t N, int64_t C,
                            int64_t OC);
/* out [N, OC] bf16 = inp [N, C] @ w [OC, C]^T (+ bias [OC]), all bf16, fp32 accumulation, for decode steps of
 * 1..CPT_CUDA_SKINNY_MAX_ROWS rows: every multiprocessor streams weight rows (cuBLASLt's tiles leave most of them
 * idle at this shape). K is split over blocks when OC is small; scratch (f32, cpt_cuda_matmul_skinny_scratch_floats,
 * may be NULL: no split) holds the partial sums, added in split order. C a multiple of 8. */
#define CPT_CUDA_SKINNY_MAX_ROWS 8
size_t cpt_cuda_matmul_skinny_scratch_floats(int n_rows, int64_t OC);
void cpt_cuda_matmul_skinny(cpt_cuda_ctx *ctx, void *out, const void *inp, const void *w, const void *bias, int N,
                            int64_t C, int64_t OC, float *scratch);
/* Fused products of decode steps of 1..CPT_CUDA_FUSED_MAX_ROWS rows (kernels/cuda/decode_fused.cu): out = f(
 * norm(inp[rows[i]]) @ w^T + bias) with the input's rmsnorm (norm_w, eps; as cpt_cuda_rmsnorm_fwd) folded in and
 * one of these epilogues, bf16 rounding where the unfused kernels store bf16:
 *   CPT_FUSED_BF16   out bf16 [n, OC] = the product (+ bias)
 *   CPT_FUSED_RESID  out bf16 [n, OC] is the residual stream: out += bf16(product + bias); norm_w and rows NULL
 *   CPT_FUSED_SWIGLU out bf16 [n, OC] = silu(g) * u, g and u the products with w's rows 0..OC and OC..2 OC (w is
 *                    [2 OC, K], cpt_cuda_swiglu_fwd's gate/up layout); norm_w set
 *   CPT_FUSED_F32    out fp32 [n, OC] (logits); norm_w set
 * rows (device, may be NULL: row i) picks the input row of output row i. K a multiple of 8 (cpt_cuda_fused_gemv_ok),
 * inp, w, norm_w 16-byte aligned. With cpt_cuda_set_pdl on, the launch overlaps the previous kernel's tail. Every
 * thread streams its weight vectors through its own shared-memory slots across outputs, the first ones asked for
 * before the wait; where the slots do not fit, the register kernel with 8 weight vectors a lane runs (bitwise the
 * same results). */
#define CPT_CUDA_FUSED_MAX_ROWS 4
typedef enum { CPT_FUSED_BF16, CPT_FUSED_RESID, CPT_FUSED_SWIGLU, CPT_FUSED_F32 } cpt_cuda_fused_out;
typedef struct cpt_cuda_fused_gemv {
    cpt_cuda_fused_out mode;
    void *out;
    const void *inp;
    const int32_t *rows;
    const void *norm_w;
    float eps;
    const void *w, *bias;
    int n;
    int64_t K, OC;
} cpt_cuda_fused_gemv;
int cpt_cuda_fused_gemv_ok(int64_t K);
void cpt_cuda_fused_gemv_run(cpt_cuda_ctx *ctx, const cpt_cuda_fused_gemv *g);
/* Programmatic dependent launch for the kernels that support it (the fused products, kv append, paged attention
 * v2 and its combine, sampling): each may start while the previous kernel finishes. Off by default. */
void cpt_cuda_set_pdl(cpt_cuda_ctx *ctx, int on);

/* n bf16 values = mean + std * normal, from a hash of (seed, index): random weights without a host model. */
void cpt_cuda_fill_normal_bf16(cpt_cuda_ctx *ctx, void *p, size_t n, float mean, float std, uint64_t seed);

/* One sample row: which logits row to draw from, the sampling parameters of rollout/sampling.h (temperature 0:
 * greedy), and the counter of its random stream: (seed, sample, step). */
typedef struct cpt_cuda_sample_row {
    uint64_t seed;
    int32_t logits_row;
    int32_t top_k;
    float temperature, top_p, min_p;
    uint32_t sample, step;
    uint32_t pad_;
} cpt_cuda_sample_row;
/* tokens [n_rows] i32, logprobs [n_rows] f32 (the behaviour logprob) from logits [*, V] f32 rows; rows on the
 * device. Deterministic; a row's draw depends only on its logits and (seed, sample, step). */
void cpt_cuda_sample(cpt_cuda_ctx *ctx, int32_t *tokens, float *logprobs, const float *logits, int64_t V,
                     const cpt_cuda_sample_row *rows, int n_rows);
/* The same with the first pass (max, first argmax, greedy log-sum-exp) split over SAMPLE_CHUNKS blocks a row:
 * partials (device, cpt_cuda_sample_partials_bytes(n_rows), 16-byte aligned) hold them. Same tokens; greedy
 * logprobs equal up to fp32 summation order. Much faster at a few rows; NULL partials is cpt_cuda_sample. */
size_t cpt_cuda_sample_partials_bytes(int n_rows);
void cpt_cuda_sample_ex(cpt_cuda_ctx *ctx, int32_t *tokens, float *logprobs, const float *logits, int64_t V,
                        const cpt_cuda_sample_row *rows, int n_rows, void *partials);
/* The generator behind it (host side, for tests): Philox4x32-10, key = seed, counter (quad, step, sample). The
 * draw of token i uses word i % 4 of quad i / 4, as u = ((w >> 8) + 0.5) / 2^24. */
void cpt_cuda_philox4x32(uint32_t out[4], uint64_t seed, uint32_t sample, uint32_t step, uint64_t quad);

/* Pinned host memory, asynchronous copies, free device memory, multiprocessors. */
void *cpt_cuda_host_alloc(size_t bytes, const char *what, cpt_err *err);
void cpt_cuda_host_free(void *p);
int cpt_cuda_memcpy_h2d_async(cpt_cuda_ctx *ctx, void *dst, const void *src, size_t bytes, cpt_err *err);
int cpt_cuda_memcpy_d2h_async(cpt_cuda_ctx *ctx, void *dst, const void *src, size_t bytes, cpt_err *err);
int cpt_cuda_mem_info(size_t *free_bytes, size_t *total_bytes, cpt_err *err);
int cpt_cuda_num_sms(const cpt_cuda_ctx *ctx);

/* CUDA graphs: ops queued on ctx between begin and end are captured (not run); launch replays them. */
typedef struct cpt_cuda_graph cpt_cuda_graph;
int cpt_cuda_graph_begin(cpt_cuda_ctx *ctx, cpt_err *err);
cpt_cuda_graph *cpt_cuda_graph_end(cpt_cuda_ctx *ctx, cpt_err *err);
int cpt_cuda_graph_launch(cpt_cuda_ctx *ctx, cpt_cuda_graph *g, cpt_err *err);
void cpt_cuda_graph_free(cpt_cuda_graph *g);

#ifdef __cplusplus
}
#endif

#endif
