/* Datasets: JSONL readers for the four record formats, held in memory, and a deterministic epoch order with a
 * cursor that a checkpoint saves and restores exactly.
 *
 * Formats (one JSON object per line; blank lines are ignored):
 *   prompt_completion  {"prompt": str, "completion": str}
 *   messages           {"messages": [{"role": "system|user|assistant|tool", "content": str}, ...]}
 *                      (at least one assistant message: it is what SFT learns)
 *   preference         {"prompt": str | messages, "chosen": str, "rejected": str}
 *   rl_prompt          {"prompt": str | messages, "answer": str | number, ...}: every other field is kept, as a
 *                      JSON object text, for rewards (e.g. countdown's "numbers" and "target")
 * Other fields of the first three formats are ignored. data.format = auto picks the format of each file from its
 * first record: "messages" -> messages; "chosen" and "rejected" -> preference; "answer" -> rl_prompt;
 * "completion" -> prompt_completion.
 *
 * A bad line (not JSON, not an object, a missing or mistyped field) fails the load with
 * "FILE:LINE: field 'x': ..." unless skip_bad_lines, which skips it, counts it and keeps the first message. */
#ifndef CPT_CORE_DATASET_H
#define CPT_CORE_DATASET_H

#include <stddef.h>
#include <stdint.h>

#include "core/config.h"
#include "core/error.h"

typedef enum {
    CPT_DATA_AUTO = 0,
    CPT_DATA_PROMPT_COMPLETION,
    CPT_DATA_MESSAGES,
    CPT_DATA_PREFERENCE,
    CPT_DATA_RL_PROMPT
} cpt_data_format;

typedef struct cpt_message {
    const char *role;
    const char *content;
} cpt_message;

/* One record. Strings are NUL-terminated UTF-8 owned by the dataset. Fields not used by a format are NULL / 0. */
typedef struct cpt_record {
    int line;                   /* 1-based line in the source file */
    /* prompt: prompt_completion always; preference and rl_prompt when the prompt is a string. */
    const char *prompt;
    /* messages: the messages format; the prompt of preference and rl_prompt when it is a list. */
    const cpt_message *messages;
    size_t n_messages;
    const char *completion;     /* prompt_completion */
    const char *chosen;         /* preference */
    const char *rejected;       /* preference */
    const char *answer;         /* rl_prompt: a number is kept as its JSON text ("85", "2.5") */
    const char *extra;          /* rl_prompt: the other fields as a compact JSON object, "{}" if none */
} cpt_record;

typedef struct cpt_dataset cpt_dataset;

typedef struct cpt_dataset_opts {
    cpt_data_format format; /* CPT_DATA_AUTO: detect from the first record */
    int skip_bad_lines;
    size_t max_records;     /* 0: all */
} cpt_dataset_opts;

/* Reads a JSONL file. Fails on the first bad line (or, with skip_bad_lines, when no good record is left). */
cpt_dataset *cpt_dataset_load(const char *path, const cpt_dataset_opts *opts, cpt_err *err);
/* The same over text in memory; name is used in messages. */
cpt_dataset *cpt_dataset_load_text(const char *text, size_t len, const char *name, const cpt_dataset_opts *opts,
                                   cpt_err *err);
/* Reads the file with data.format and data.skip_bad_lines from cfg. */
cpt_dataset *cpt_dataset_load_config(const char *path, const cpt_config *cfg, cpt_err *err);
void cpt_dataset_free(cpt_dataset *ds);

size_t cpt_dataset_count(const cpt_dataset *ds);
const cpt_record *cpt_dataset_get(const cpt_dataset *ds, size_t i); /* NULL when i >= count */
cpt_data_format cpt_dataset_format(const cpt_dataset *ds);
const char *cpt_dataset_path(const cpt_dataset *ds);
/* "PATH:LINE" of a record of ds, for messages about it (the path cut to fit cap). */
void cpt_dataset_where(const cpt_dataset *ds, const cpt_record *r, char *out, size_t cap);
size_t cpt_dataset_bad_lines(const cpt_dataset *ds);
const char *cpt_dataset_first_bad(const cpt_dataset *ds); /* message of the first skipped line, or "" */

const char *cpt_data_format_name(cpt_data_format f);
/* "auto", "prompt_completion", ...; -1 for an unknown name. */
int cpt_data_format_parse(const char *name, cpt_data_format *out);

/* ---- deterministic order ----
 * Epoch e visits every record once, in a permutation drawn from (seed, e) through core/rng (stream
 * CPT_DATA_RNG_STREAM + e), or in file order when shuffle is off. The cursor is the position of the next record:
 * saving it and restoring it into a fresh order gives exactly the records the uninterrupted run would get. */
#define CPT_DATA_RNG_STREAM 0x6461746100000000ULL /* "data" << 32 */

typedef struct cpt_data_cursor {
    uint64_t epoch;
    uint64_t index; /* position inside the epoch's order, 0 .. n-1 */
} cpt_data_cursor;

typedef struct cpt_data_order {
    size_t n;
    uint64_t seed;
    int shuffle;
    uint64_t perm_epoch; /* epoch whose permutation is in perm (UINT64_MAX: none yet) */
    uint64_t *perm;
    cpt_data_cursor cursor;
} cpt_data_order;

int cpt_data_order_init(cpt_data_order *o, size_t n, uint64_t seed, int shuffle, cpt_err *err);
void cpt_data_order_free(cpt_data_order *o);
/* Record index at (epoch, index) without moving the cursor. */
size_t cpt_data_order_at(cpt_data_order *o, uint64_t epoch, uint64_t index);
/* Record index under the cursor; advances it (into the next epoch after the last record). */
size_t cpt_data_order_next(cpt_data_order *o);
cpt_data_cursor cpt_data_order_tell(const cpt_data_order *o);
/* Restores a saved cursor; (e, n), the end of epoch e, is (e + 1, 0); -1 if it does not fit (index > n). */
int cpt_data_order_seek(cpt_data_order *o, cpt_data_cursor c, cpt_err *err);

#endif
