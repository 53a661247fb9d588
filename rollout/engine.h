/* The generation engine: requests, slots, a paged KV cache's blocks and continuous batching, over the decoder of
 * the model's placement (model/decoder.h: the CPU's fp32 or the GPU's bf16). The engine schedules; the decoder
 * runs the model and draws the tokens.
 *
 * A request is a prompt with n samples. Each sample occupies one slot from its first generated token to its last;
 * when a sample finishes, its slot is refilled at once from the waiting samples (FIFO). The KV cache is a pool of
 * blocks of block_size positions with a block table per slot and reference counts: the prompt of a request runs
 * through the model once (in chunks of at most prefill_chunk rows), its blocks are shared by all its samples, and
 * the request holds them until its last sample is admitted; a sample appending to a shared, partly filled block
 * copies it first (copy-on-write). Each sample's first token is drawn from the saved logits of its prompt's last
 * position.
 *
 * Admission (kv_admission): optimistic (the default) admits a sample when the free blocks hold its prompt (none when
 * shared) and kv_reserve_blocks more; when a decode step needs a block and the pool is empty, the most recently
 * admitted samples are preempted (never the last one running): their blocks are freed (shared ones stay while
 * others hold them) and they go back to the front of the waiting samples with their tokens so far; on re-admission
 * their prompt and tokens run again as a chunked prefill (recompute; only the tokens while the request still holds
 * its prompt's blocks) and they continue. reserve_full admits a sample
 * only when the pool can hold its whole completion (prompt + max_new_tokens, counted without sharing): it never
 * preempts, and leaves most of the pool idle when completions stop early. Either way a request that could not fit
 * alone is refused at submit.
 *
 * Determinism: token t of sample j of a request is drawn with the randomness of (seed, j, t) (kernels/kernels.h),
 * and the CPU decoder computes a row alike whatever else is in its call, so on the CPU the same request and seed
 * give the same tokens whatever the batch, slot count, block size, arrival order or preemptions. (On the GPU, see
 * the CUDA decoder for what is bitwise; a recompute runs prefill products, not decode steps.)
 *
 * Stops: a token in stop_ids (callers put EOS there), or the completion's bytes ending with a stop string (the
 * raw token bytes of the tokenizer; the tokens that complete it are kept), finish = stop; max_new_tokens
 * generated (or the context full), finish = length. Every generated token has its behaviour logprob (see
 * kernels/kernels.h for the distribution). */
#ifndef CPT_ROLLOUT_ENGINE_H
#define CPT_ROLLOUT_ENGINE_H

#include <stdint.h>

#include "core/tokenizer.h"
#include "model/decoder.h"
#include "rollout/gen_request.h"

/* What a user tunes. */
typedef struct cpt_engine_opts {
    int slots;   /* concurrent sequences; 0: 8 */
    int max_len; /* context per slot; 0: the model's max_position_embeddings */
    const cpt_tokenizer *tok; /* needed only for stop strings */
    int prefill_chunk; /* most prompt rows per forward call (bounds activation memory); 0: 2048 */
    int block_size;    /* positions per KV block; 0: 16 */
    int kv_blocks;     /* blocks in the pool; 0: every slot's full context (the GPU caps it by
                        * gpu_memory_fraction; the CPU allocates a block's memory when it is first written) */
    int kv_admission;      /* CPT_KV_ADMIT_*; 0: optimistic */
    int kv_reserve_blocks; /* optimistic: free blocks an admitted sample needs beyond its prompt; 0: 1 */
    float gpu_memory_fraction; /* CUDA: the share of the GPU's memory the model, workspace and pool may take; 0: 0.9 */
} cpt_engine_opts;

enum {
    CPT_KV_ADMIT_OPTIMISTIC = 0, /* admit on the prompt and a reserve; a full pool preempts (recompute later) */
    CPT_KV_ADMIT_RESERVE_FULL = 1 /* admit only when the pool holds the whole completion: never preempts */
};

typedef struct cpt_engine_stats {
    long generated_tokens, prefill_tokens, decode_steps, prefills, shared_prefills;
    long preemptions, recomputed_tokens; /* samples preempted; positions prefilled again on their re-admission */
    long slot_steps; /* sum over decode steps of occupied slots (occupancy = slot_steps / (steps * slots)) */
} cpt_engine_stats;

typedef struct cpt_engine cpt_engine;

/* On the model's placement: the CPU, or the GPU after cpt_model_use_cuda_infer. */
cpt_engine *cpt_engine_new(cpt_model *m, const cpt_engine_opts *o, cpt_err *err);
/* The same with the decoder's private tuning (tests and benches; NULL: the product's choice). */
cpt_engine *cpt_engine_new_tuned(cpt_model *m, const cpt_engine_opts *o, const cpt_decoder_tuning *tuning,
                                 cpt_err *err);
void cpt_engine_free(cpt_engine *e);
/* Copies the request (prompt, stop lists) and queues its samples. Returns its id (>= 0) or -1 on bad input
 * (empty prompt, token outside the vocabulary, prompt longer than the context, bad sampling parameters, more KV
 * blocks than the pool has). */
int64_t cpt_engine_submit(cpt_engine *e, const cpt_gen_request *r, cpt_err *err);
/* Admits waiting samples into free slots (prefill as needed), then decodes one token for every active slot.
 * Returns the number of active slots after the step, or -1 on error. */
int cpt_engine_step(cpt_engine *e, cpt_err *err);
/* Moves one finished request into *out (returns 1), or returns 0 when none is finished. */
int cpt_engine_take(cpt_engine *e, cpt_gen_result *out);
/* 1 when nothing is waiting or running. */
int cpt_engine_idle(const cpt_engine *e);
int cpt_engine_active(const cpt_engine *e);  /* occupied slots */
int cpt_engine_pending(const cpt_engine *e); /* submitted requests not yet taken */
int cpt_engine_waiting(const cpt_engine *e); /* samples submitted but not yet in a slot */
int cpt_engine_slots(const cpt_engine *e);
const cpt_engine_stats *cpt_engine_get_stats(const cpt_engine *e);
/* Drops every request (waiting, running, finished but not taken) and empties the slots: after a weight change. */
void cpt_engine_clear(cpt_engine *e);
/* The KV pool: blocks in it, blocks free now (equal when idle: nothing leaks). */
int cpt_engine_kv_blocks(const cpt_engine *e);
int cpt_engine_kv_free_blocks(const cpt_engine *e);
/* The decoder underneath (benches: cpt_decoder_graphs, cpt_decoder_replay_s). */
cpt_decoder *cpt_engine_decoder(cpt_engine *e);

/* Convenience: submits reqs[0..n), steps until all are done, and fills results[i] for reqs[i]; results of
 * requests submitted before this call are freed, not returned. */
int cpt_engine_generate(cpt_engine *e, const cpt_gen_request *reqs, int n, cpt_gen_result *results, cpt_err *err);

#endif
