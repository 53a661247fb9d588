/* Data of the online trainer: rl_prompt records -> prompt token ids and the reward's extra JSON, and scored groups
 * -> a packed training batch.
 *
 * A completion k of a group becomes one packed sequence: tokens = prompt ++ completion, targets = next token (the
 * last token has none). mask is 1 exactly at the positions whose target is a completion token the model generated
 * (the positions n_prompt - 1 .. n_prompt + n_completion - 2, less those whose completion mask is 0: a tool's
 * observation in a multi-turn rollout), so the objective sees one logprob per generated token, aligned with the
 * rollout's behaviour logprobs (and the teacher's for opd). A sequence longer than max_seq_len keeps its prompt
 * and the first max_seq_len - n_prompt completion tokens (counted in n_truncated). */
#ifndef CPT_TRAINER_RL_DATA_H
#define CPT_TRAINER_RL_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "core/chat_template.h"
#include "core/dataset.h"
#include "core/error.h"
#include "core/tokenizer.h"
#include "queue/schema.h"

/* Prompt ids of an rl_prompt record: the chat template (user message, or the record's messages) with the generation
 * prompt, or the raw prompt text when tpl is NULL. *ids is malloc'd. */
int cpt_rl_prompt_ids(const cpt_chat_template *tpl, const cpt_tokenizer *tok, const cpt_record *r, int32_t **ids,
                      size_t *n, cpt_err *err);

/* The reward's extra JSON of a record: its other fields plus "answer" (as a string). malloc'd. */
char *cpt_rl_extra_json(const cpt_record *r, cpt_err *err);

typedef struct cpt_rl_batch {
    int n_tokens, n_seqs, n_groups;
    int cap_tokens, cap_seqs, cap_groups;
    int32_t *tokens, *targets, *seq_start; /* seq_start [n_seqs + 1] */
    float *mask;
    float *behav_logprobs;   /* rollout behaviour logprobs at masked positions, 0 elsewhere */
    float *teacher_logprobs; /* opd: the teacher's at masked positions (0 elsewhere) */
    int has_teacher;         /* every completion of the batch carried teacher logprobs */
    double *seq_reward;      /* [n_seqs]: kept double until the advantages normalise them */
    int32_t *seq_group;      /* [n_seqs]: group index in the batch */
    int32_t *seq_resp_len;   /* [n_seqs]: completion tokens kept (observations included: they count against the
                                length budget, so against the overlong penalty too) */
    int32_t *group_seq0, *group_size; /* [n_groups]: first sequence and count */
    uint64_t *group_version; /* [n_groups]: weight version that generated it */
    long n_truncated;        /* completions cut to max_seq_len */
} cpt_rl_batch;

void cpt_rl_batch_reset(cpt_rl_batch *b);
void cpt_rl_batch_free(cpt_rl_batch *b);

/* Appends the completions of a scored group. A completion with no tokens gives a sequence with no masked token.
 * Errors: not a scored group, a prompt that does not fit max_seq_len, a token outside the vocabulary. */
int cpt_rl_batch_add_group(cpt_rl_batch *b, const cpt_rollout_group *g, int max_seq_len, int vocab_size,
                           cpt_err *err);

/* What the trainer accepts from the wire: a scored group is checked against the run before it is used, and one
 * that fails is dead-lettered with the reason (a forged or corrupt message must not stop the trainer). */
typedef struct cpt_rl_group_limits {
    int vocab_size;        /* every token id in [0, vocab_size) */
    int max_seq_len;       /* the prompt leaves room for at least one completion token */
    uint32_t group_size;   /* completions per group (rollout.group_size); 0: any */
    int64_t max_version;   /* the newest weight version issued: a later one was never made */
    double max_abs_reward; /* rewards finite and |r| <= this (reward.max_abs); 0: finite only */
    int need_teacher;      /* opd: every completion carries teacher_logprobs */
} cpt_rl_group_limits;

/* 0 if g may be trained on, else -1 with the reason in err (naming the field and the bound). */
int cpt_rl_group_check(const cpt_rollout_group *g, const cpt_rl_group_limits *lim, cpt_err *err);

#endif
