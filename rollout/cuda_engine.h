/* The generation engine on the GPU: the interface and semantics of rollout/engine.h (requests with n samples,
 * slots refilled at once from the waiting samples, stop ids and strings, behaviour logprobs) with the model in
 * bf16 on one CUDA device.
 *
 * - Weights: a bf16 copy of a host cpt_model (fp32 -> bf16, round to nearest even) made at creation and by
 *   cpt_cuda_engine_load_weights (after a weight update); or random weights drawn on the device (benches).
 * - KV cache: paged. Blocks of block_size positions from one pool, a block table per slot, a free list,
 *   reference counts: the samples of one prompt share its prompt blocks (the prompt runs once); a sample appending
 *   to a shared, partly filled last block copies it first (copy-on-write). A sample is admitted only when the
 *   pool can hold its whole completion (prompt + max_new_tokens, counted without sharing), so no step can run out.
 * - A step: prefill of newly admitted prompts (chunks of at most prefill_chunk tokens, causal attention over the
 *   pages), the first token of each new sample from its prompt's last logits, then one decode row per active slot;
 *   sampling on the GPU (kernels/cuda/sampling.cu); one small copy of tokens and logprobs back per step; stops are
 *   checked on the host. Decode steps replay CUDA graphs captured per (batch bucket, attention splits).
 * - Randomness: sample j of a request draws token t with Philox keyed by (seed, j, t): the same request and seed give
 *   the same draws whatever the batch. Decode steps of <= CPT_CUDA_FUSED_MAX_ROWS rows compute each row on its own
 *   (per-row fused products, attention splits from the row's own length), so there a sequence decodes bitwise
 *   alike whatever shares its steps (the n greedy samples of a prompt, admitted at different steps, stay equal).
 *   Larger steps and prefill chunks run bf16 products whose kernel cuBLASLt may choose by batch size, so bitwise
 *   batch independence is not promised there (tests report the match rate).
 *
 * Built without CUDA, cpt_cuda_engine_new fails with a clear error. */
#ifndef CPT_ROLLOUT_CUDA_ENGINE_H
#define CPT_ROLLOUT_CUDA_ENGINE_H

#include "rollout/engine.h"

typedef struct cpt_cuda_engine_opts {
    cpt_engine_opts base; /* slots, max_len, tok, prefill_chunk as rollout/engine.h */
    int device;           /* CUDA device index */
    int block_size;       /* positions per KV block; 0: 16 */
    int kv_blocks;        /* blocks in the pool; 0: every slot's full context, capped at half the free memory */
    int no_graphs;        /* 1: run decode steps eagerly (debugging, timing the difference) */
    int attn_v2;          /* 0: the first attention kernel (head sizes not dividing 128 run the second); 1, 2, 3:
                           * cpt_cuda_paged_attention_v2 with the kernel
                           * CPT_ATTN_V2, CPT_ATTN_V2_DEEP, CPT_ATTN_MMA (kernels/cuda/cuda_ops.h); 4: CPT_ATTN_FEW
                           * in decode steps of <= CPT_CUDA_FUSED_MAX_ROWS rows, CPT_ATTN_MMA elsewhere */
    int gemv_rows;        /* products of at most this many rows (<= 8) use cpt_cuda_matmul_skinny instead of
                           * cuBLASLt; 0: off */
    int fused;            /* 1: forwards of at most CPT_CUDA_FUSED_MAX_ROWS rows (decode steps of small batches,
                           * short prefill chunks) run the fused products (rmsnorm, bias, residual add, swiglu folded
                           * in, kernels/cuda/decode_fused.cu) with programmatic dependent launch; needs hidden,
                           * heads x head_dim and intermediate sizes that are multiples of 8 (else unfused); 2: the
                           * same with the deep products (cpt_cuda_fused_gemv deep); 3: the same with the weights
                           * staged through shared memory (cpt_cuda_fused_gemv stage_kb; bitwise as 2); 4: the
                           * same with each thread's weights streamed through its own shared-memory slots
                           * (cpt_cuda_fused_gemv ring; bitwise as 2) */
    int stage_kb;         /* fused = 3: shared memory a product's block fills (KB); 0: CPT_CUDA_FUSED_STAGE_KB */
    int ring_blocks;      /* fused = 4: the products' blocks a multiprocessor (1..8, at most as many as fit); 0:
                           * CPT_CUDA_FUSED_RING_BLOCKS */
    int no_pdl;           /* 1: the fused path without programmatic dependent launch (timing its effect) */
    int persistent;       /* 1: decode steps of at most CPT_CUDA_FUSED_MAX_ROWS rows as one persistent kernel
                           * (cpt_cuda_decode_step: the fused products and the tensor-core attention between grid
                           * barriers; bitwise the same as fused = 1 with attn_v2 = 3) where one is compiled for
                           * the shapes, else as fused; 2: the same with the kernel built for 1 block a
                           * multiprocessor. Needs fused = 1. */
    int split_few;        /* positions an attention split starts with in decode steps of <= CPT_CUDA_FUSED_MAX_ROWS
                           * rows (doubled while a row would need more splits than the attention kernel takes: 8
                           * with the few-rows kernel, else 16); 0: 128 */
    int bench_skip;       /* timing only, the outputs are wrong: parts of the fused forward left out, a bit mask
                           * of CPT_SKIP_* (a step's time without a part, against with it, is that part's cost in
                           * the stream, overlaps included) */
} cpt_cuda_engine_opts;
enum { CPT_SKIP_QKV = 1, CPT_SKIP_ATTN = 2, CPT_SKIP_O = 4, CPT_SKIP_GATEUP = 8, CPT_SKIP_DOWN = 16, CPT_SKIP_LM = 32 };

/* What the rollout worker and `cpt generate` use: the tensor-core attention (CPT_ATTN_MMA where head_dim is 64 or
 * 128, else the second kernel; 1.35-2.1x the second kernel's decode tok/s at batches 64 and 256 on the H200,
 * 2026-12-03) with the few-rows kernel in decode steps of <= 4 rows (1.2-1.3x at batch 1), the fused products up
 * to 4 rows streamed through per-thread shared-memory rings (fused = 4, 4 blocks a multiprocessor: bitwise the deep
 * products, 1.14x / 1.28x their decode tok/s at 0.5B / 1.5B batch 1, 1.14x / 1.10x at batch 4) and the skinny
 * products where those do not apply (faster than cuBLASLt at 1-4 rows, slower at 8). A zeroed struct keeps the
 * first kernel and cuBLASLt everywhere (the tests compare them). */
#define CPT_CUDA_ENGINE_GEMV_ROWS 4
static inline cpt_cuda_engine_opts cpt_cuda_engine_defaults(cpt_engine_opts base) {
    cpt_cuda_engine_opts o = {.base = base, .attn_v2 = 4, .gemv_rows = CPT_CUDA_ENGINE_GEMV_ROWS, .fused = 4};
    return o;
}

typedef struct cpt_cuda_engine cpt_cuda_engine;

cpt_cuda_engine *cpt_cuda_engine_new(cpt_model *m, const cpt_cuda_engine_opts *o, cpt_err *err);
/* Random N(0, std) weights drawn on the device (norm weights 1, biases 0) for a config: benches of model shapes
 * without a host copy. */
cpt_cuda_engine *cpt_cuda_engine_new_random(const cpt_model_config *cfg, uint64_t seed, float std,
                                            const cpt_cuda_engine_opts *o, cpt_err *err);
/* Uploads m's weights again (same shapes); call between steps, e.g. after a weight-version change. */
int cpt_cuda_engine_load_weights(cpt_cuda_engine *e, cpt_model *m, cpt_err *err);
/* The same from bf16 weights already on the engine's device (a cuda_ipc or nccl weight version): dev_bf16 holds
 * m's parameters in cpt_model_param order, back to back (m gives names, sizes and offsets; its host values are not
 * read); device-to-device copies, then a sync. */
int cpt_cuda_engine_load_weights_bf16(cpt_cuda_engine *e, cpt_model *m, const void *dev_bf16, cpt_err *err);
/* The engine's cpt_cuda_ctx * (kernels/cuda/cuda_ops.h), for the weight receiver; NULL without CUDA. */
void *cpt_cuda_engine_cuda_ctx(cpt_cuda_engine *e);
void cpt_cuda_engine_free(cpt_cuda_engine *e);

int64_t cpt_cuda_engine_submit(cpt_cuda_engine *e, const cpt_gen_request *r, cpt_err *err);
int cpt_cuda_engine_step(cpt_cuda_engine *e, cpt_err *err);
int cpt_cuda_engine_take(cpt_cuda_engine *e, cpt_gen_result *out);
int cpt_cuda_engine_idle(const cpt_cuda_engine *e);
int cpt_cuda_engine_active(const cpt_cuda_engine *e);
int cpt_cuda_engine_pending(const cpt_cuda_engine *e);
int cpt_cuda_engine_waiting(const cpt_cuda_engine *e);
int cpt_cuda_engine_slots(const cpt_cuda_engine *e);
const cpt_engine_stats *cpt_cuda_engine_get_stats(const cpt_cuda_engine *e);
void cpt_cuda_engine_clear(cpt_cuda_engine *e);
int cpt_cuda_engine_generate(cpt_cuda_engine *e, const cpt_gen_request *reqs, int n, cpt_gen_result *results,
                             cpt_err *err);

/* The KV pool: blocks in it, blocks free now (equal when idle: nothing leaks), graphs captured so far. */
int cpt_cuda_engine_kv_blocks(const cpt_cuda_engine *e);
int cpt_cuda_engine_kv_free_blocks(const cpt_cuda_engine *e);
int cpt_cuda_engine_graphs(const cpt_cuda_engine *e);
/* Decode forwards that ran as the persistent step kernel (opts.persistent); a captured graph counts once. */
int cpt_cuda_engine_step_forwards(const cpt_cuda_engine *e);
/* Benches: replays the latest decode step's graph reps times back to back and returns the seconds per replay: the
 * device time of a step without the host's share. Call it right after a step, before the next step or submit: the
 * replays repeat that step exactly (the same KV rows written with the same values, into blocks that step's slots
 * held, the same draws), so nothing another request uses changes. -1 (err set) without a graph. */
double cpt_cuda_engine_replay_s(cpt_cuda_engine *e, int reps, cpt_err *err);

#endif
