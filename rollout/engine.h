/* The generation engine: prefill + KV-cache decode over a fixed number of slots with continuous batching.
 *
 * A request is a prompt with n samples. Each sample occupies one slot from its first generated token to its last;
 * when a sample finishes, its slot is refilled at once from the waiting samples (FIFO). The samples of one prompt
 * share its prefill: the prompt runs through the model once, and each sample's slot gets a copy of the prompt's
 * K/V (from any slot of the same request still holding it; only if none is left is the prompt run again) and
 * draws its first token from the saved logits of the prompt's last position.
 *
 * Determinism: sample j of a request draws from its own rng seeded (seed, j), and the per-token computation does
 * not depend on what else is in the batch, so the same request and seed give the same tokens whatever the batch
 * composition, slot count or arrival order.
 *
 * Stops: a token in stop_ids (callers put EOS there), or the completion's bytes ending with a stop string (the
 * raw token bytes of the tokenizer; the tokens that complete it are kept), finish = stop; max_new_tokens
 * generated (or the context full), finish = length. Every generated token has its behaviour logprob (see
 * rollout/sampling.h for the distribution). */
#ifndef CPT_ROLLOUT_ENGINE_H
#define CPT_ROLLOUT_ENGINE_H

#include <stdint.h>

#include "core/tokenizer.h"
#include "model/kv_cache.h"
#include "queue/schema.h"
#include "rollout/sampling.h"

typedef struct cpt_gen_request {
    const int32_t *prompt;
    int n_prompt;
    int n_samples;
    cpt_sample_params sp;
    uint64_t seed;
    int max_new_tokens;
    const int32_t *stop_ids;
    int n_stop_ids;
    const char *const *stop_strs;
    int n_stop_strs;
    uint64_t tag; /* the caller's, returned with the result (e.g. a weight version or an index) */
} cpt_gen_request;

typedef struct cpt_gen_sample {
    int n_tokens;
    int32_t *tokens;
    float *logprobs;
    cpt_finish finish;
} cpt_gen_sample;

/* A finished request: all its samples. Free with cpt_gen_result_free. */
typedef struct cpt_gen_result {
    uint64_t tag;
    int n_samples;
    cpt_gen_sample *samples;
    int64_t id; /* the id cpt_engine_submit returned */
} cpt_gen_result;
void cpt_gen_result_free(cpt_gen_result *r);

typedef struct cpt_engine_opts {
    int slots;   /* concurrent sequences; 0: 8 */
    int max_len; /* context per slot; 0: the model's max_position_embeddings */
    const cpt_tokenizer *tok; /* needed only for stop strings */
    int prefill_chunk; /* most prompt tokens per forward call (bounds activation memory); 0: 2048 */
} cpt_engine_opts;

typedef struct cpt_engine_stats {
    long generated_tokens, prefill_tokens, decode_steps, prefills, shared_prefills;
    long slot_steps; /* sum over decode steps of occupied slots (occupancy = slot_steps / (steps * slots)) */
} cpt_engine_stats;

typedef struct cpt_engine cpt_engine;

cpt_engine *cpt_engine_new(cpt_model *m, const cpt_engine_opts *o, cpt_err *err);
void cpt_engine_free(cpt_engine *e);
/* Copies the request (prompt, stop lists) and queues its samples. Returns its id (>= 0) or -1 on bad input
 * (empty prompt, token outside the vocabulary, prompt longer than the context, bad sampling parameters). */
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

/* Convenience: submits reqs[0..n), steps until all are done, and fills results[i] for reqs[i]. */
int cpt_engine_generate(cpt_engine *e, const cpt_gen_request *reqs, int n, cpt_gen_result *results, cpt_err *err);

/* Checks sampling parameters (temperature >= 0, top_k >= 0, top_p in (0, 1], min_p in [0, 1)). */
int cpt_sample_params_check(const cpt_sample_params *sp, cpt_err *err);

/* ---- per-request bookkeeping shared with rollout/cuda_engine.c ---- */

/* What both engines keep of a request: the first member of their own request struct (so a pointer to theirs is a
 * pointer to this), held in a cpt_gen_reqs list in submission order. */
typedef struct cpt_gen_req_head {
    int64_t id;
    uint64_t tag;
    int n_samples;
    int next_sample;         /* the next sample to admit */
    int done_samples;        /* finished samples */
    cpt_gen_sample *samples; /* [n_samples] */
    int *cap;                /* [n_samples] capacity of each sample's arrays (cpt_gen_sample_append) */
} cpt_gen_req_head;

/* Id, tag and n_samples from g, the samples allocated empty; -1 out of memory (h then freed). */
int cpt_gen_req_head_init(cpt_gen_req_head *h, int64_t id, const cpt_gen_request *g, cpt_err *err);
void cpt_gen_req_head_free(cpt_gen_req_head *h); /* the samples it still holds */

typedef struct cpt_gen_reqs {
    cpt_gen_req_head **r;
    int n, cap;
} cpt_gen_reqs;

int cpt_gen_reqs_push(cpt_gen_reqs *l, cpt_gen_req_head *h, cpt_err *err);
/* The first request with samples left to admit, or NULL. */
cpt_gen_req_head *cpt_gen_reqs_next_waiting(const cpt_gen_reqs *l);
/* The first request whose samples are all finished: its results moved into out, removed from the list and
 * returned (its engine frees it); NULL when none is. */
cpt_gen_req_head *cpt_gen_reqs_take(cpt_gen_reqs *l, cpt_gen_result *out);
int cpt_gen_reqs_idle(const cpt_gen_reqs *l);    /* 1: no request has unfinished samples */
int cpt_gen_reqs_waiting(const cpt_gen_reqs *l); /* samples not yet admitted */
void cpt_gen_reqs_free(cpt_gen_reqs *l);         /* the list only: the engine frees its requests first */

/* ---- per-sample bookkeeping shared with rollout/cuda_engine.c ---- */

/* Appends token tok with behaviour logprob lp to s, growing its arrays (capacity in *cap, doubling from 32). */
int cpt_gen_sample_append(cpt_gen_sample *s, int *cap, int32_t tok, float lp, cpt_err *err);
/* The checks both engines make of a request: a prompt of 1..max_len tokens in [0, V), n_samples in [1,
 * CPT_MAX_SAMPLES], max_new_tokens >= 1, the sampling parameters, stop lists (stop strings need a tokenizer:
 * have_tok). 0, or -1 with err naming the field. */
int cpt_gen_request_check(const cpt_gen_request *g, int V, int max_len, int have_tok, cpt_err *err);

/* A request's stop rules, the engine's own copies. */
typedef struct cpt_gen_stops {
    int32_t *ids;
    int n_ids;
    char **strs;
    size_t *lens, max_len; /* byte lengths, the longest */
    int n_strs;
} cpt_gen_stops;
/* Copies g's stop ids and strings into s (zeroed by the caller). -1 with err set (an empty stop string, out of
 * memory), s then freed. */
int cpt_gen_stops_copy(cpt_gen_stops *s, const cpt_gen_request *g, cpt_err *err);
void cpt_gen_stops_free(cpt_gen_stops *s);
/* 1 when the sample's last token (already appended) is a stop id, or the bytes of its tokens end with a stop string:
 * only the last tokens are decoded, enough to cover the longest. *tail / *tail_cap is the caller's scratch
 * buffer. */
int cpt_gen_stops_hit(const cpt_gen_stops *s, const cpt_tokenizer *tok, const cpt_gen_sample *smp, char **tail,
                      size_t *tail_cap);

#endif
