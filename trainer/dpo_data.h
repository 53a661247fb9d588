/* DPO data: preference records tokenized into chosen / rejected sequences with loss masks and cached reference
 * logprobs, and packing of pairs into micro-batches (trainer/dpo.h describes the format). */
#ifndef CPT_TRAINER_DPO_DATA_H
#define CPT_TRAINER_DPO_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "core/chat_template.h"
#include "core/config.h"
#include "core/error.h"
#include "core/tokenizer.h"
#include "model/model.h"

typedef struct cpt_dpo_seq {
    int32_t *ids;
    float *mask; /* mask[i] = 1 when the target of position i (ids[i + 1]) is an answer token */
    float *ref;  /* reference logprob of ids[i + 1] at position i (0 at the last position) */
    int n;
} cpt_dpo_seq;

typedef struct cpt_dpo_pair {
    cpt_dpo_seq s[2]; /* chosen, rejected */
    int line;
} cpt_dpo_pair;

typedef struct cpt_dpo_data {
    cpt_dpo_pair *pairs;
    size_t n;
    size_t n_truncated, n_skipped;
} cpt_dpo_data;

typedef struct cpt_dpo_data_opts {
    const cpt_tokenizer *tok;
    const cpt_chat_template *tpl; /* NULL: raw text + eos */
    int32_t eos_id;
    int max_seq_len;
    size_t max_pairs;             /* 0: all */
} cpt_dpo_data_opts;

/* Reads preference records with cfg's data.* settings; errors name path:line. */
int cpt_dpo_data_load(const char *path, const cpt_config *cfg, const cpt_dpo_data_opts *o, cpt_dpo_data *d,
                      cpt_err *err);
void cpt_dpo_data_free(cpt_dpo_data *d);

/* A packed micro-batch of whole pairs (sequence 2k chosen, 2k + 1 rejected). */
typedef struct cpt_dpo_batch {
    int n_tokens, n_seqs, cap_tokens, cap_seqs;
    int32_t *tokens, *seq_start, *targets;
    float *mask, *ref;
} cpt_dpo_batch;

void cpt_dpo_batch_reset(cpt_dpo_batch *b);
int cpt_dpo_batch_add(cpt_dpo_batch *b, const cpt_dpo_pair *p, cpt_err *err);
void cpt_dpo_batch_free(cpt_dpo_batch *b);
static inline int cpt_dpo_pair_tokens(const cpt_dpo_pair *p) { return p->s[0].n + p->s[1].n; }

/* Fills every pair's ref with m's logprobs (batches of up to budget tokens). */
int cpt_dpo_data_reference(cpt_dpo_data *d, cpt_model *m, int budget, cpt_err *err);

#endif
