/* Generation on a placed model: a paged KV cache and the forward over "rows" (token, position, block table) with
 * sampling fused in. The model's backend (CPU or CUDA, chosen when the model is placed) implements it; the caller
 * (rollout/engine.c) owns the scheduling: which rows run, which blocks each table holds, block reference counts,
 * prefix sharing and copy-on-write. Which kernels run is the backend's private choice.
 *
 * A call's inputs are host arrays in cpt_decoder_io, owned by the decoder (pinned memory on the GPU) and sized at
 * creation: the caller fills them, then calls prefill / sample_saved / step, which read them and fill out_tok /
 * out_lp (on the host when the call returns).
 *
 * Block ids are 0 .. cpt_decoder_blocks() - 1. Table t (0 <= t < n_tables) is tables[t * max_blocks ...]: the
 * blocks holding positions [i * block_size, (i + 1) * block_size) of the sequence in that table. The decoder keeps
 * one more table and block of its own for the padding rows it may add (CUDA graphs run fixed row counts).
 *
 * Sampling: a row draws its token from softmax(logits / temperature) restricted by top-k, top-p, min-p (see
 * kernels/kernels.h for the distribution), with randomness keyed by (seed, sample, step) alone: the same row gives
 * the same draw whatever else is in the call. temperature 0 is greedy. out_lp is the behaviour logprob. */
#ifndef CPT_MODEL_DECODER_H
#define CPT_MODEL_DECODER_H

#include <stdint.h>

#include "core/error.h"
#include "model/model.h"

/* One output row's draw. */
typedef struct cpt_sample_row {
    uint64_t seed;
    int32_t logits_row; /* step: the call's row; sample_saved: the saved logits row */
    int32_t top_k;      /* 0: off */
    float temperature, top_p, min_p;
    uint32_t sample, step; /* which sample of its request, which of its tokens */
    uint32_t pad_;
} cpt_sample_row;

typedef struct cpt_decoder_opts {
    int n_tables;    /* block tables (the engine's slots) */
    int max_len;     /* positions a table can hold (the context) */
    int block_size;  /* positions per block; 0: 16 */
    int n_blocks;    /* blocks in the pool; 0: every table full and one context more (a request holding its prompt
                      * blocks while its samples wait); CUDA caps either by mem_fraction (cpt_kv_pool_blocks) */
    int max_rows;    /* most rows of one call (>= n_tables) */
    int saved_rows;  /* logits rows kept between calls (the prompts' last logits) */
    float mem_fraction; /* CUDA: share of the device's total memory that the model, workspace and pool may fill;
                         * 0: 0.9. The CPU ignores it. */
} cpt_decoder_opts;

/* Bytes of one KV block of block_size positions: K and V of every layer, elem_bytes per value (2: bf16). */
size_t cpt_kv_block_bytes(const cpt_model_config *c, int block_size, int elem_bytes);
/* The GPU pool's size: the blocks of block_bytes that fit in fraction * total_bytes minus what is in use now
 * (total_bytes - free_bytes: the model, the decoder's workspace, other processes), at most cap; 0 when nothing
 * fits. A pure function of cudaMemGetInfo's figures, so the arithmetic is tested on the CPU. */
long cpt_kv_pool_blocks(size_t block_bytes, double fraction, size_t free_bytes, size_t total_bytes, long cap);

/* Private tuning for tests and benches; zeroed = the product's choice. */
typedef struct cpt_decoder_tuning {
    int no_graphs; /* CUDA: run decode steps eagerly */
} cpt_decoder_tuning;

typedef struct cpt_decoder_io {
    int32_t *tok, *pos, *tab; /* [max_rows] each row's token, position, table */
    int32_t *out;             /* [max_rows] prefill: the rows whose logits are saved */
    int32_t *save_to;         /* [max_rows] prefill: the saved row each of those goes to */
    int32_t *tables;          /* [n_tables * max_blocks] */
    cpt_sample_row *rows;     /* [max_rows] draws of sample_saved / step */
    int32_t *out_tok;         /* [max_rows] drawn tokens */
    float *out_lp;            /* [max_rows] their behaviour logprobs */
} cpt_decoder_io;

typedef struct cpt_decoder cpt_decoder;

/* On the model's placement (CPU, or CUDA after cpt_model_use_cuda_infer); tuning may be NULL. */
cpt_decoder *cpt_decoder_new(cpt_model *m, const cpt_decoder_opts *o, const cpt_decoder_tuning *tuning,
                             cpt_err *err);
void cpt_decoder_free(cpt_decoder *d);
cpt_decoder_io *cpt_decoder_io_of(cpt_decoder *d);
int cpt_decoder_blocks(const cpt_decoder *d);     /* usable blocks in the pool */
int cpt_decoder_block_size(const cpt_decoder *d);
int cpt_decoder_max_blocks(const cpt_decoder *d); /* entries per table */

/* io->tables changed: the next call uses the new tables. */
void cpt_decoder_tables_changed(cpt_decoder *d);
/* Queues a copy of block src into block dst (copy-on-write of a shared, partly filled block): it runs before the
 * next call's forward. */
int cpt_decoder_copy_block(cpt_decoder *d, int src, int dst, cpt_err *err);

/* Rows [0, n) (tok, pos, tab) are written into their tables' blocks and run causally (a row attends to its
 * table's positions up to its own); the logits of rows out[0 .. n_out) are saved to saved rows save_to[..]. */
int cpt_decoder_prefill(cpt_decoder *d, int n, int n_out, cpt_err *err);
/* Draws rows[0 .. n) from saved logits rows (rows[k].logits_row): out_tok, out_lp. */
int cpt_decoder_sample_saved(cpt_decoder *d, int n, cpt_err *err);
/* A decode step: rows [0, n), one per table (tables distinct), each row's token written at its position, and a
 * draw for each (rows[k].logits_row = k): out_tok, out_lp. */
int cpt_decoder_step(cpt_decoder *d, int n, cpt_err *err);

/* Benches and tests (CUDA; the CPU backend returns 0 / -1): graphs captured so far; the seconds per replay of the
 * latest step's graph (call right after a step: the replay repeats it exactly). */
int cpt_decoder_graphs(const cpt_decoder *d);
double cpt_decoder_replay_s(cpt_decoder *d, int reps, cpt_err *err);

#endif
