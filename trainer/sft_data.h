/* SFT data: JSONL examples tokenized into ids with a loss mask, and packing of examples into micro-batches.
 *
 * Formats (data.format, read by core/dataset.h): prompt_completion ({"prompt", "completion"}), messages
 * ({"messages": [...]}) and rl_prompt ({"prompt", "answer"}: trained as prompt -> answer, for synthetic tasks).
 * With a chat template (data.chat_template != "none"), a prompt/completion pair is the conversation
 * [user: prompt, assistant: completion] and the loss covers the assistant tokens (the template's assistant mask,
 * end-of-turn token included). Without one, the ids are encode(prompt) + encode(completion) + [eos] and the loss
 * covers the completion and the eos. A messages example needs a chat template.
 * An rl_prompt record with "segments": [{"text": str, "train": bool}, ...] (cpt data gen --format tool-sft), raw
 * only, is encode(prompt) + encode(text 1) + encode(text 2) + ... + [eos], each text encoded on its own as a
 * rollout appends a tool's observation, the loss on the texts with "train": true and the eos: a tool call's
 * observation is in the context but not learned.
 *
 * The loss is on a target token: position i predicts ids[i+1] and counts when mask[i+1] is 1. */
#ifndef CPT_TRAINER_SFT_DATA_H
#define CPT_TRAINER_SFT_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "core/chat_template.h"
#include "core/dataset.h"
#include "core/error.h"
#include "core/tokenizer.h"

typedef struct cpt_sft_example {
    int32_t *ids;
    uint8_t *mask;  /* 1: a token the loss predicts */
    int n;          /* tokens, after truncation to max_seq_len */
    int n_prompt;   /* ids[0..n_prompt) is the prompt of the last completion (for generation evals) */
    int n_answer;   /* ids[n_prompt..n_prompt+n_answer) is that completion (end token included) */
} cpt_sft_example;

typedef struct cpt_sft_dataset {
    cpt_sft_example *ex;
    size_t n;
    size_t n_truncated; /* examples cut to max_seq_len */
    size_t n_skipped;   /* examples with no loss token left (after truncation) or bad lines skipped */
} cpt_sft_dataset;

typedef struct cpt_sft_data_opts {
    const char *format;              /* data.format: "auto" | "prompt_completion" | "messages" */
    const cpt_tokenizer *tok;
    const cpt_chat_template *tpl;    /* NULL: no chat template */
    int max_seq_len;
    int skip_bad_lines;
    int32_t eos_id;                  /* appended after a raw completion; -1: none */
    size_t max_examples;             /* 0: all */
} cpt_sft_data_opts;

/* Reads and tokenizes a JSONL file. Bad lines are errors naming path:line and the field. */
int cpt_sft_dataset_load(const char *path, const cpt_sft_data_opts *o, cpt_sft_dataset *ds, cpt_err *err);
void cpt_sft_dataset_free(cpt_sft_dataset *ds);
/* Adds one tokenized example (copies ids and mask; truncates to max_seq_len). Skips (returns 0, counts) an
 * example with no loss token. */
int cpt_sft_dataset_add(cpt_sft_dataset *ds, const int32_t *ids, const uint8_t *mask, int n, int n_prompt,
                        int n_answer, int max_seq_len, cpt_err *err);

/* A packed micro-batch (see cpt_batch in model/model.h). */
typedef struct cpt_sft_batch {
    int n_tokens, n_seqs, n_loss; /* n_loss: targets >= 0 */
    int cap_tokens, cap_seqs;
    int32_t *tokens, *seq_start, *targets;
} cpt_sft_batch;

void cpt_sft_batch_free(cpt_sft_batch *b);

/* The data cursor over a dataset (core/dataset.h's order): with shuffle, each epoch's order is a permutation
 * drawn from (seed, epoch) alone, so a cursor restored from a checkpoint continues exactly. */
typedef struct cpt_sft_cursor {
    const cpt_sft_dataset *ds;
    cpt_data_order order;
} cpt_sft_cursor;

int cpt_sft_cursor_init(cpt_sft_cursor *c, const cpt_sft_dataset *ds, uint64_t seed, int shuffle, int64_t epoch,
                        int64_t index, cpt_err *err);
void cpt_sft_cursor_free(cpt_sft_cursor *c);
/* The position of the next example, for checkpoints. */
void cpt_sft_cursor_tell(const cpt_sft_cursor *c, int64_t *epoch, int64_t *index);

/* Packs examples from the cursor into b until the next one would pass budget tokens (at least one example),
 * advancing the cursor (into the next epoch when one ends). */
int cpt_sft_pack_next(cpt_sft_cursor *c, int budget, cpt_sft_batch *b, cpt_err *err);
/* Packs examples first..first+count (in dataset order) that fit the budget; returns how many were taken. */
int cpt_sft_pack_range(const cpt_sft_dataset *ds, size_t first, size_t count, int budget, cpt_sft_batch *b,
                       cpt_err *err);

#endif
