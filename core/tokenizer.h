/* Hugging Face tokenizer.json: byte-level BPE (Qwen2/3, Llama-3, GPT-2 style).
 *
 * Pipeline: added/special tokens are matched first (longest match, in the text as given), the rest is
 * normalized (NFC via utf8proc when the file asks), pre-tokenized by the Split regex(es) exactly as written in
 * the file (PCRE2, UTF + UCP), mapped byte-to-unicode (ByteLevel), and merged by rank. decode() reverses it.
 * Invalid UTF-8 input is an error naming the byte offset; decode replaces ill-formed bytes with U+FFFD
 * (docs/tokenizer.md). */
#ifndef CPT_CORE_TOKENIZER_H
#define CPT_CORE_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"

typedef struct cpt_tokenizer cpt_tokenizer;

/* path: a tokenizer.json, or a folder holding tokenizer.json (and optionally tokenizer_config.json, whose
 * eos/bos/pad tokens and chat template name are read too). Also accepts GPT-2's encoder.json + vocab.bpe folder. */
cpt_tokenizer *cpt_tokenizer_load(const char *path, cpt_err *err);
void cpt_tokenizer_free(cpt_tokenizer *tok);

/* Encodes len bytes of UTF-8 text. *ids is malloc'd (caller frees); returns the count, or -1 on error. */
long cpt_tokenizer_encode(const cpt_tokenizer *tok, const char *text, size_t len, int32_t **ids, cpt_err *err);
/* Decodes ids to malloc'd NUL-terminated UTF-8; *len gets the byte count. skip_special drops special tokens. */
char *cpt_tokenizer_decode(const cpt_tokenizer *tok, const int32_t *ids, size_t n, int skip_special, size_t *len,
                           cpt_err *err);

int32_t cpt_tokenizer_vocab_size(const cpt_tokenizer *tok); /* 1 + the largest id, added tokens included */
int32_t cpt_tokenizer_token_id(const cpt_tokenizer *tok, const char *token); /* -1 if absent */
const char *cpt_tokenizer_id_token(const cpt_tokenizer *tok, int32_t id);    /* NULL if absent */
int cpt_tokenizer_is_special(const cpt_tokenizer *tok, int32_t id);

/* Loads a tokenizer from tokenizer.json text in memory; name (e.g. a path) prefixes error messages. */
cpt_tokenizer *cpt_tokenizer_load_json(const char *json, size_t len, const char *name, cpt_err *err);

/* Encodes n texts on up to nthreads threads (<= 0: OpenMP's default). ids[i] is malloc'd (caller frees, NULL
 * when counts[i] is 0) and counts[i] set. Returns 0, or -1 with the first failing text's index in the message
 * (then every ids[i] is freed and NULL). */
int cpt_tokenizer_encode_batch(const cpt_tokenizer *tok, const char *const *texts, const size_t *lens, size_t n,
                               int nthreads, int32_t **ids, size_t *counts, cpt_err *err);

/* The bytes id decodes to (a token may hold part of a UTF-8 sequence): for streaming decoders that join tokens
 * themselves. NULL if id is absent. */
const char *cpt_tokenizer_id_bytes(const cpt_tokenizer *tok, int32_t id, size_t *len);

/* From tokenizer_config.json when present (-1 when unknown). */
int32_t cpt_tokenizer_eos_id(const cpt_tokenizer *tok);
int32_t cpt_tokenizer_bos_id(const cpt_tokenizer *tok);
int32_t cpt_tokenizer_pad_id(const cpt_tokenizer *tok);

#endif
