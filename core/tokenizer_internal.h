/* Tokenizer internals shared by core/tokenizer_*.c: the loaded tables and the per-thread scratch space.
 *
 * Files: tokenizer_load.c (tokenizer.json / GPT-2 folder -> tables, getters), tokenizer_pretok.c (UTF-8 checks,
 * normalizer, regex splitting), tokenizer_bpe.c (merges by rank, word cache), tokenizer_encode.c (added tokens and
 * the pipeline, batch encode), tokenizer_decode.c (ids -> bytes -> UTF-8). */
#ifndef CPT_CORE_TOKENIZER_INTERNAL_H
#define CPT_CORE_TOKENIZER_INTERNAL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "core/tokenizer.h"

/* A string -> id hash table (open addressing, linear probing) over strings owned elsewhere. */
typedef struct tok_strmap {
    int32_t *slots; /* ids, -1 = empty */
    uint32_t mask;  /* capacity - 1 */
    const char *const *strs;       /* strs[id], lens[id]: the keys, indexed by id */
    const uint32_t *lens;
} tok_strmap;

/* A pair of ids -> (rank, merged id) table for BPE merges. */
typedef struct tok_merge_slot {
    uint64_t key; /* (a << 32) | b, UINT64_MAX = empty */
    int32_t rank;
    int32_t id;
} tok_merge_slot;

typedef struct tok_mergemap {
    tok_merge_slot *slots;
    uint32_t mask;
    size_t count;
} tok_mergemap;

typedef struct tok_added {
    char *content;
    size_t len;
    int32_t id;
    int special, lstrip, rstrip, single_word, normalized;
} tok_added;

typedef enum { TOK_NORM_NONE = 0, TOK_NORM_NFC, TOK_NORM_NFD, TOK_NORM_NFKC, TOK_NORM_NFKD } tok_norm_kind;

/* One pre-tokenizer step that splits pieces: a Split regex, or ByteLevel's own regex (use_regex true). */
typedef struct tok_split_step {
    pcre2_code *re;
    int jit;              /* pcre2_jit_compile succeeded */
    int add_prefix_space; /* ByteLevel's add_prefix_space, applied to each piece before splitting */
    int remove_matches;   /* behavior "Removed" (matches dropped); otherwise "Isolated" */
} tok_split_step;

#define TOK_MAX_NORMS 8
#define TOK_MAX_STEPS 8

struct cpt_tokenizer {
    /* Every id's token as written in the file (byte-level alphabet for model tokens), NULL where an id is unused:
     * the added token's content where one has the id, else the model's token. Points into model_tokens/added. */
    const char **tokens;
    uint32_t *token_lens;
    char **model_tokens; /* the BPE vocabulary by id (owned), NULL where unused */
    uint32_t *model_lens;
    int32_t n_ids; /* 1 + the largest id */
    /* Each id's decoded bytes (ByteLevel decoder: byte-level chars mapped back to bytes, a token with any other
     * char kept as its UTF-8). */
    char **dec_bytes;
    uint32_t *dec_lens;
    uint8_t *is_special;

    tok_strmap vocab;    /* the BPE model's vocabulary (not the added tokens) */
    tok_mergemap merges; /* (a, b) -> rank, merged id */
    int32_t byte_id[256]; /* byte -> id of its one-char byte-level token, -1 if the vocabulary lacks it */
    int ignore_merges;

    tok_added *added;
    size_t n_added;
    uint8_t added_first[256]; /* bit set: some non-normalized (1) / normalized (2) added token starts with byte */
    size_t added_max_len;

    tok_norm_kind norms[TOK_MAX_NORMS];
    int n_norms;
    /* For a lone NFC normalizer: bit cp set when U+cp (cp < 0x10000) can stand in NFC text next to any other such
     * char unchanged, so text made only of them skips utf8proc. Built at load (tokenizer_pretok.c). */
    uint8_t *nfc_stable;
    tok_split_step steps[TOK_MAX_STEPS];
    int n_steps;
    int byte_level; /* a ByteLevel pre-tokenizer is present (required: byte-level BPE) */

    int32_t eos_id, bos_id, pad_id;
};

/* Byte-level alphabet: byte b <-> the code point tok_byte_to_cp(b) (GPT-2's bytes_to_unicode). */
uint32_t tok_byte_to_cp(uint8_t b);
int tok_cp_to_byte(uint32_t cp); /* -1 if cp is not in the alphabet */

/* UTF-8. tok_utf8_step: the length of the well-formed sequence at s (1-4; n > 0), or -(length of its maximal
 * ill-formed subpart), as Unicode's U+FFFD substitution counts it. tok_utf8_check returns -1 if valid, else the byte
 * offset of the first invalid sequence. */
int tok_utf8_step(const uint8_t *s, size_t n);
long tok_utf8_check(const uint8_t *s, size_t n);
/* Decodes one code point of valid UTF-8 at s (n > 0); returns its byte length. */
int tok_utf8_next(const uint8_t *s, size_t n, uint32_t *cp);
int tok_utf8_put(uint32_t cp, char *out); /* writes 1-4 bytes, returns the count */

/* Hash tables. */
uint64_t tok_hash(const void *data, size_t len);
int tok_strmap_build(tok_strmap *m, const char *const *strs, const uint32_t *lens, int32_t n, cpt_err *err);
int32_t tok_strmap_get(const tok_strmap *m, const char *s, size_t len);
void tok_strmap_free(tok_strmap *m);
int tok_mergemap_init(tok_mergemap *m, size_t expected, cpt_err *err);
void tok_mergemap_put(tok_mergemap *m, int32_t a, int32_t b, int32_t rank, int32_t id);
const tok_merge_slot *tok_mergemap_get(const tok_mergemap *m, int32_t a, int32_t b);
void tok_mergemap_free(tok_mergemap *m);

/* Per-thread working memory: regex match data, a growable id list, the BPE word arrays and the word cache. */
typedef struct tok_cache_entry {
    uint64_t hash;
    uint32_t len;   /* bytes of the word, 0 = empty slot */
    uint32_t n_ids;
    uint32_t off;   /* into cache_ids */
} tok_cache_entry;

typedef struct tok_scratch {
    pcre2_match_data *md;
    pcre2_match_context *mctx;
    pcre2_jit_stack *jit_stack;
    int32_t *ids;
    size_t n_ids, cap_ids;
    /* BPE word state */
    int32_t *sym_id;
    int32_t *sym_prev, *sym_next;
    uint8_t *sym_alive;
    uint64_t *heap; /* (rank << 32 | pos) keys with the merged id packed alongside: see tokenizer_bpe.c */
    int32_t *heap_id;
    size_t sym_cap, heap_cap;
    char *buf; /* normalized text */
    size_t buf_cap;
    char *wbuf; /* a word in the byte-level alphabet (ignore_merges) */
    size_t wbuf_cap;
    /* word cache: words up to TOK_CACHE_MAX_WORD bytes -> ids */
    tok_cache_entry *cache;
    char *cache_words; /* TOK_CACHE_SLOTS * TOK_CACHE_MAX_WORD bytes */
    int32_t *cache_ids; /* TOK_CACHE_SLOTS * TOK_CACHE_MAX_IDS */
} tok_scratch;

#define TOK_CACHE_SLOTS 8192
#define TOK_CACHE_MAX_WORD 128
#define TOK_CACHE_MAX_IDS 64

int tok_scratch_init(tok_scratch *s, cpt_err *err);
void tok_scratch_free(tok_scratch *s);
int tok_scratch_enable_cache(tok_scratch *s, cpt_err *err); /* without it, every word runs BPE */
int tok_push_id(tok_scratch *s, int32_t id, cpt_err *err);

/* Normalizes len bytes of valid UTF-8 per the tokenizer's normalizers. *out points at text itself when nothing
 * changes, else into s->buf. */
int tok_normalize(const cpt_tokenizer *tok, tok_scratch *s, const char *text, size_t len, const char **out,
                  size_t *out_len, cpt_err *err);

/* Builds tok->nfc_stable when the normalizer is NFC alone. */
int tok_build_nfc_table(cpt_tokenizer *tok, cpt_err *err);
/* 1 if text made only of such code points is unchanged by NFC (exposed for the unit test). */
int tok_nfc_stable_cp(const cpt_tokenizer *tok, uint32_t cp);

/* Pre-tokenizes a normalized piece through every split step and BPE-encodes each resulting word into s->ids. */
int tok_pretokenize_and_bpe(const cpt_tokenizer *tok, tok_scratch *s, const char *text, size_t len, cpt_err *err);

/* BPE-encodes one word (raw bytes; byte-level mapping is implicit) into s->ids. */
int tok_bpe_word(const cpt_tokenizer *tok, tok_scratch *s, const uint8_t *word, size_t len, cpt_err *err);

/* Compiles a Split / ByteLevel regex (PCRE2_UTF | PCRE2_UCP, JIT when available). */
int tok_compile_regex(tok_split_step *step, const char *pattern, size_t len, int literal, cpt_err *err);

#endif
