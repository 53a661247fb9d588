/* The ops of the transformer on the host (kernels/cpu/); the GPU's live in kernels/cuda/cuda_ops.h.
 *
 * A cpt_tensor is a view: data pointer, device, dtype and shape (row-major, contiguous). Ops take views by value
 * and refuse operands on another device. The CPU kernels are fp32 with OpenMP; which backend runs a model is the
 * model's choice (model/backend.h), not the kernels'.
 *
 * Conventions (llm.c style):
 * - N is a number of tokens (rows); shapes are written in comments as [N, C].
 * - Every backward op ACCUMULATES (+=) into its gradient outputs, so residual branches and tied weights need no
 *   extra adds; the caller zeroes gradient buffers when needed. A gradient output may be an empty tensor
 *   (cpt_tensor_none()) when it is not wanted.
 * - Determinism: every output element is computed by one thread with a fixed summation order (no float atomics,
 *   reductions over fixed partitions), so results are bitwise identical from run to run and do not depend on
 *   the number of threads. Exact resume relies on this.
 * - Misuse (mismatched shapes, wrong dtype, unsupported device) is a programming error: the op prints what
 *   mismatched and aborts. Callers validate outside input before it reaches an op. */
#ifndef CPT_KERNELS_KERNELS_H
#define CPT_KERNELS_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "core/safetensors.h" /* cpt_dtype */

typedef enum { CPT_DEVICE_CPU = 0, CPT_DEVICE_CUDA = 1 } cpt_device;

#define CPT_TENSOR_MAX_DIMS 4

typedef struct cpt_tensor {
    void *data; /* NULL: an absent (empty) tensor */
    cpt_dtype dtype;
    cpt_device device;
    int ndim;
    int64_t shape[CPT_TENSOR_MAX_DIMS];
} cpt_tensor;

/* Views on host memory. */
cpt_tensor cpt_tensor_none(void);
cpt_tensor cpt_tensor_f32_1d(float *p, int64_t a);
cpt_tensor cpt_tensor_f32_2d(float *p, int64_t a, int64_t b);
cpt_tensor cpt_tensor_i32_1d(int32_t *p, int64_t a);
int64_t cpt_tensor_numel(cpt_tensor t);
static inline int cpt_tensor_present(cpt_tensor t) { return t.data != NULL; }

/* ---- matmul ---------------------------------------------------------------------------------------------- */

/* General matrix product on 2-d tensors: c = op(a) @ op(b) (+ c when accumulate), op = transpose when the flag is
 * set. Shapes: op(a) [M, K], op(b) [K, N], c [M, N]. The workhorse every linear layer goes through. */
void cpt_k_gemm(cpt_tensor c, cpt_tensor a, int trans_a, cpt_tensor b, int trans_b, int accumulate);

/* A linear layer with HF weight layout.
 * out [N, OC] = inp [N, C] @ w[OC, C]^T + bias [OC] (bias optional). */
void cpt_k_matmul_fwd(cpt_tensor out, cpt_tensor inp, cpt_tensor w, cpt_tensor bias);
/* dinp [N, C] += dout [N, OC] @ w [OC, C];  dw [OC, C] += dout^T @ inp;  dbias [OC] += sum_n dout[n]. */
void cpt_k_matmul_bwd(cpt_tensor dinp, cpt_tensor dw, cpt_tensor dbias, cpt_tensor dout, cpt_tensor inp,
                      cpt_tensor w);

/* ---- embedding ------------------------------------------------------------------------------------------- */

/* out [N, C] = wte [V, C] [tokens [N]]; tokens must lie in [0, V). */
void cpt_k_embedding_fwd(cpt_tensor out, cpt_tensor tokens, cpt_tensor wte);
/* dwte [V, C] [tokens[n]] += dout [N, C] [n], summed in token order. */
void cpt_k_embedding_bwd(cpt_tensor dwte, cpt_tensor dout, cpt_tensor tokens);

/* ---- rmsnorm --------------------------------------------------------------------------------------------- */

/* Over the last dim, HF style: out [R, C] = inp * rsqrt(mean(inp^2) + eps) * w [C]; rstd [R] kept for backward.
 * R may be tokens (layer norms) or tokens x heads (qwen3 q_norm / k_norm with C = head_dim). */
void cpt_k_rmsnorm_fwd(cpt_tensor out, cpt_tensor rstd, cpt_tensor inp, cpt_tensor w, float eps);
/* dinp [R, C] += d/dinp, dw [C] += d/dw, from dout [R, C], the forward's inp, w and rstd. */
void cpt_k_rmsnorm_bwd(cpt_tensor dinp, cpt_tensor dw, cpt_tensor dout, cpt_tensor inp, cpt_tensor w,
                       cpt_tensor rstd);

/* ---- rope ------------------------------------------------------------------------------------------------ */

/* Rotary frequencies: inv_freq [head_dim / 2] = theta^(-2i/head_dim), with optional llama3 scaling (factor,
 * low/high frequency factors, original context length), computed as transformers does in fp32. */
typedef struct cpt_rope_cfg {
    int head_dim;
    float theta;
    int llama3;
    float factor, low_freq_factor, high_freq_factor;
    int original_max_pos;
} cpt_rope_cfg;
void cpt_rope_inv_freq(const cpt_rope_cfg *cfg, float *inv_freq);

/* In place on the first n_heads heads of each row of x [N, row_stride] (head h at columns h*D .. h*D+D), with the
 * rotate-half convention of HF: angle = positions[n] * inv_freq[i], pairs (i, i + D/2).
 * positions [N] are explicit so a decode step can rotate tokens at any offset. */
void cpt_k_rope_fwd(cpt_tensor x, int n_heads, int head_dim, cpt_tensor positions, cpt_tensor inv_freq);
/* The transpose rotation, in place on the gradient dx (same layout). */
void cpt_k_rope_bwd(cpt_tensor dx, int n_heads, int head_dim, cpt_tensor positions, cpt_tensor inv_freq);

/* ---- swiglu ---------------------------------------------------------------------------------------------- */

/* gu [N, 2I] holds gate (columns 0..I) then up (I..2I); out [N, I] = silu(gate) * up. */
void cpt_k_swiglu_fwd(cpt_tensor out, cpt_tensor gu);
/* dgu [N, 2I] += from dout [N, I] and the forward's gu. */
void cpt_k_swiglu_bwd(cpt_tensor dgu, cpt_tensor dout, cpt_tensor gu);

/* ---- attention ------------------------------------------------------------------------------------------- */

/* Causal self-attention with grouped-query heads over packed variable-length sequences.
 * qkv [N, (H + 2*KV) * D]: per row, H query heads, then KV key heads, then KV value heads (after rope).
 * cu_seqlens [S + 1] (int32): sequence s is rows cu_seqlens[s] .. cu_seqlens[s+1]; no attention crosses a
 * boundary. Query head h reads kv head h / (H / KV). Scale 1/sqrt(D).
 * out [N, H * D]; lse [N, H] (logsumexp of the scaled scores, kept for backward instead of the probabilities, so
 * memory stays linear in sequence length). */
typedef struct cpt_attn_shape {
    int n_heads, n_kv_heads, head_dim;
} cpt_attn_shape;
void cpt_k_attention_fwd(cpt_tensor out, cpt_tensor lse, cpt_tensor qkv, cpt_tensor cu_seqlens, cpt_attn_shape s);
/* dqkv [N, (H + 2KV) * D] += from dout [N, H * D] and the forward's out, lse and qkv (probabilities recomputed). */
void cpt_k_attention_bwd(cpt_tensor dqkv, cpt_tensor dout, cpt_tensor out, cpt_tensor lse, cpt_tensor qkv,
                         cpt_tensor cu_seqlens, cpt_attn_shape s);

/* ---- token statistics from logits ------------------------------------------------------------------------ */

/* For a chunk of rows of logits [n, V] (the caller computes logits a chunk of tokens at a time, so B x T x V
 * never exists): lse [n] = logsumexp, logprob [n] = logits[target] - lse (0 where target < 0),
 * entropy [n] = -sum p log p. Any output but lse may be empty. targets [n] int32, -1 = none. */
void cpt_k_token_stats_fwd(cpt_tensor logprob, cpt_tensor entropy, cpt_tensor lse, cpt_tensor logits,
                           cpt_tensor targets);
/* Overwrites logits [n, V] with d(loss)/d(logits) given d_logprob [n] and optionally d_entropy [n]:
 *   d_logprob * (onehot(target) - p) - d_entropy * p * (log p + H). Needs the forward's lse (and entropy when
 *   d_entropy is given). */
void cpt_k_token_stats_bwd(cpt_tensor logits, cpt_tensor lse, cpt_tensor entropy, cpt_tensor targets,
                           cpt_tensor d_logprob, cpt_tensor d_entropy);

/* ---- elementwise ----------------------------------------------------------------------------------------- */

/* out = a + b (out may alias a or b): the residual add. */
void cpt_k_add(cpt_tensor out, cpt_tensor a, cpt_tensor b);
/* dst [N, *] columns dst_col .. dst_col + width = src [N, *] columns src_col .. src_col + width: moves head
 * blocks between a fused qkv row and a contiguous per-head buffer. */
void cpt_k_copy_cols(cpt_tensor dst, int64_t dst_col, cpt_tensor src, int64_t src_col, int64_t width);
/* Fills with zeros. */
void cpt_k_zero(cpt_tensor t);

/* ---- next-token sampling (kernels/cpu/sampling.c; the GPU's is kernels/cuda/sampling.cu) ------------------- */

/* The distribution sampled from (and whose logprob is recorded) is
 *     p = softmax(logits / temperature), restricted to the kept set, renormalised,
 * where the kept set applies, in order: top-k (the k most likely; ties by lower id), top-p (the shortest prefix of
 * that order whose mass, in fixed point of 2^-40, reaches top_p of the kept mass), min-p (p >= min_p * max p). With
 * the defaults (top_k 0, top_p 1, min_p 0) nothing is truncated and the logprob is log_softmax(logits / T)[token]:
 * what the trainer recomputes at the same temperature. temperature 0 is greedy: the first argmax, recorded with
 * log_softmax(logits)[token] at temperature 1.
 * The draw is the Gumbel-max trick over the kept set with u from cpt_philox4x32(seed, sample, step, token / 4) (word
 * token % 4, 24 bits): it depends on (seed, sample, step) alone, and the GPU sampler draws the same u. */
typedef struct cpt_sample_params {
    float temperature; /* 0: greedy */
    int top_k;         /* 0: off */
    float top_p;       /* 1: off */
    float min_p;       /* 0: off */
} cpt_sample_params;

/* Scratch for one row of a vocabulary: caller-owned so sampling allocates nothing per token. */
typedef struct cpt_sampler_work {
    int vocab;
    float *prob;  /* [vocab] */
    int32_t *idx; /* [vocab] */
} cpt_sampler_work;

int cpt_sampler_work_init(cpt_sampler_work *w, int vocab); /* 0, or -1 out of memory */
void cpt_sampler_work_free(cpt_sampler_work *w);

/* Draws one token from logits[w->vocab] for draw (seed, sample, step); *logprob (may be NULL) gets its
 * log-probability under the distribution above. */
int32_t cpt_k_sample(const float *logits, const cpt_sample_params *sp, uint64_t seed, uint32_t sample, uint32_t step,
                     cpt_sampler_work *w, float *logprob);

#endif
