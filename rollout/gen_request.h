/* Generation requests: what a caller submits to the engine (rollout/engine.h) and gets back, and the engine's own
 * checked copy of a request with its completions and stop rules (rollout/gen_request.c). */
#ifndef CPT_ROLLOUT_GEN_REQUEST_H
#define CPT_ROLLOUT_GEN_REQUEST_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "core/tokenizer.h"
#include "kernels/kernels.h"
#include "queue/schema.h"

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

/* Checks sampling parameters (temperature in [0, 100], top_k >= 0, top_p in (0, 1], min_p in [0, 1)). */
int cpt_sample_params_check(const cpt_sample_params *sp, cpt_err *err);

/* ---- the engine's copy of a request ---- */

/* A request's stop rules, the engine's own copies. */
typedef struct gen_stops {
    int32_t *ids;
    int n_ids;
    char **strs;
    size_t *lens, max_len; /* byte lengths, the longest */
    int n_strs;
} gen_stops;

typedef struct gen_req {
    int64_t id;
    uint64_t tag;
    int n_samples;
    int next_sample;         /* the next sample to admit */
    int done_samples;        /* finished samples */
    cpt_gen_sample *samples; /* [n_samples] */
    int *cap;                /* [n_samples] capacity of each sample's arrays */
    int32_t *prompt;
    int n_prompt, max_new;
    cpt_sample_params sp;
    uint64_t seed;
    gen_stops stops;
    int live; /* samples now in slots */
    /* prompt sharing: the request's own references to its prompt blocks, held from its prefill until every sample
     * is admitted, and the saved logits row of the prompt's last position */
    int held, prefilling;
    int hold_res; /* blocks reserved for the hold: only a request of several samples can outlive its prefill slot */
    int32_t *pblocks;
    int n_pblocks;
    int plog_row;
} gen_req;

/* Checks g (a prompt of 1..max_len tokens in [0, V), n_samples in [1, CPT_MAX_SAMPLES], max_new_tokens >= 1, the
 * sampling parameters, stop lists; stop strings need have_tok) and copies it. NULL with err naming the field. */
gen_req *cpt_gen_req_new(const cpt_gen_request *g, int64_t id, int V, int max_len, int have_tok, cpt_err *err);
void cpt_gen_req_free(gen_req *r);
/* Appends token tok with behaviour logprob lp to sample s of r. */
int cpt_gen_req_append(gen_req *r, int s, int32_t tok, float lp, cpt_err *err);
/* 1 when sample s's last token is a stop id, or the bytes of its tokens end with a stop string (only the last
 * tokens are decoded, enough to cover the longest). *tail / *tail_cap is the caller's scratch buffer. */
int cpt_gen_req_stopped(const gen_req *r, int s, const cpt_tokenizer *tok, char **tail, size_t *tail_cap);
/* Moves r's samples into out (r keeps none). */
void cpt_gen_req_result(gen_req *r, cpt_gen_result *out);

#endif
