/* Next-token sampling: temperature, top-k, top-p, min-p, seeded per request, and the behaviour logprob.
 *
 * The distribution sampled from (and whose logprob is recorded) is
 *     p = softmax(logits / temperature), restricted to the kept set, renormalised,
 * where the kept set applies, in order: top-k (the k most likely), top-p (the smallest prefix of the sorted kept
 * tokens whose mass reaches top_p), min-p (tokens with p >= min_p * max p). With the defaults (top_k 0, top_p 1,
 * min_p 0) nothing is truncated and the recorded logprob is log_softmax(logits / T)[token]: exactly what the
 * trainer recomputes with the same temperature. temperature 0 is greedy: the first argmax, recorded with its
 * log_softmax(logits)[token] at temperature 1. */
#ifndef CPT_ROLLOUT_SAMPLING_H
#define CPT_ROLLOUT_SAMPLING_H

#include <stdint.h>

#include "core/rng.h"

typedef struct cpt_sample_params {
    float temperature; /* 0: greedy */
    int top_k;         /* 0: off */
    float top_p;       /* 1: off */
    float min_p;       /* 0: off */
} cpt_sample_params;

/* Scratch for one vocabulary: caller-owned so sampling allocates nothing per token. */
typedef struct cpt_sampler_work {
    int vocab;
    float *prob;   /* [vocab] */
    int32_t *idx;  /* [vocab] */
} cpt_sampler_work;

int cpt_sampler_work_init(cpt_sampler_work *w, int vocab);
void cpt_sampler_work_free(cpt_sampler_work *w);

/* Draws one token from logits[vocab]; *logprob gets its log-probability under the distribution above. */
int32_t cpt_sample(const float *logits, const cpt_sample_params *sp, cpt_rng *rng, cpt_sampler_work *w, float *logprob);

#endif
