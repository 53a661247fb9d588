/* Encoding: the pipeline of HF's Tokenizer::encode without post-processing.
 *
 *   text --(added tokens with normalized=false, matched in the text as given)--> gaps
 *   gap  --normalizer--> --(added tokens with normalized=true)--> gaps --pre-tokenizer--> words --BPE--> ids
 *
 * Added tokens match leftmost-longest, as HF's Aho-Corasick does, honouring lstrip / rstrip / single_word.
 * No BOS/EOS is added (the post_processor is ignored): callers add them explicitly.
 * Invalid UTF-8 is an error naming the byte offset (docs/tokenizer.md). */
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "core/tokenizer_internal.h"

/* Rust's char::is_whitespace: the Unicode White_Space property. */
static int is_white_space(uint32_t c) {
    return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

/* Rust's char::is_alphanumeric, approximated by the letter and number categories (only single_word uses it). */
static int is_alnum_cp(uint32_t c) {
    utf8proc_category_t cat = utf8proc_category((utf8proc_int32_t)c);
    return (cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO) ||
           (cat >= UTF8PROC_CATEGORY_ND && cat <= UTF8PROC_CATEGORY_NO);
}

/* The code point that ends text[0..end). */
static uint32_t last_cp(const char *text, size_t end, size_t *start) {
    size_t i = end - 1;
    while (i > 0 && ((uint8_t)text[i] & 0xC0) == 0x80) i--;
    uint32_t cp;
    tok_utf8_next((const uint8_t *)text + i, end - i, &cp);
    if (start) *start = i;
    return cp;
}

/* The longest added token of the given kind (normalized or not) at text[i], or NULL. */
static const tok_added *added_at(const cpt_tokenizer *tok, const char *text, size_t len, size_t i, int normalized) {
    const tok_added *best = NULL;
    for (size_t k = 0; k < tok->n_added; k++) {
        const tok_added *t = &tok->added[k];
        if (t->normalized != normalized || t->len > len - i || (best && t->len <= best->len)) continue;
        if (memcmp(text + i, t->content, t->len) == 0) best = t;
    }
    return best;
}

typedef int (*gap_fn)(const cpt_tokenizer *tok, tok_scratch *s, const char *text, size_t len, cpt_err *err);

/* Splits text on added tokens of one kind: each match pushes its id, each gap goes to fn. */
static int split_added(const cpt_tokenizer *tok, tok_scratch *s, const char *text, size_t len, int normalized,
                       gap_fn fn, cpt_err *err) {
    uint8_t flag = normalized ? 2 : 1;
    size_t done = 0; /* text[0..done) is handled */
    size_t i = 0;
    while (i < len) {
        if (!(tok->added_first[(uint8_t)text[i]] & flag)) {
            i++;
            continue;
        }
        const tok_added *t = added_at(tok, text, len, i, normalized);
        if (!t) {
            i++;
            continue;
        }
        size_t start = i, stop = i + t->len;
        i = stop;
        if (t->single_word) {
            int word_before = start > 0 && is_alnum_cp(last_cp(text, start, NULL));
            uint32_t next_cp = 0;
            if (stop < len) tok_utf8_next((const uint8_t *)text + stop, len - stop, &next_cp);
            int word_after = stop < len && is_alnum_cp(next_cp);
            if (word_before || word_after) continue;
        }
        if (t->lstrip) {
            size_t ws = start;
            while (ws > done) {
                size_t cs;
                if (!is_white_space(last_cp(text, ws, &cs))) break;
                ws = cs;
            }
            start = ws;
        }
        if (t->rstrip) {
            while (stop < len) {
                uint32_t cp;
                int k = tok_utf8_next((const uint8_t *)text + stop, len - stop, &cp);
                if (!is_white_space(cp)) break;
                stop += (size_t)k;
            }
            i = stop;
        }
        if (start > done && fn(tok, s, text + done, start - done, err) != 0) return -1;
        if (tok_push_id(s, t->id, err) != 0) return -1;
        done = stop;
    }
    if (done < len) return fn(tok, s, text + done, len - done, err);
    return 0;
}

static int has_added(const cpt_tokenizer *tok, int normalized) {
    for (size_t k = 0; k < tok->n_added; k++)
        if (tok->added[k].normalized == normalized) return 1;
    return 0;
}

/* A gap between non-normalized added tokens: normalize, then split on normalized added tokens. */
static int encode_gap(const cpt_tokenizer *tok, tok_scratch *s, const char *text, size_t len, cpt_err *err) {
    const char *norm;
    size_t nlen;
    if (tok_normalize(tok, s, text, len, &norm, &nlen, err) != 0) return -1;
    if (!has_added(tok, 1)) return tok_pretokenize_and_bpe(tok, s, norm, nlen, err);
    /* norm may live in s->buf: nothing below normalizes again, so it stays valid. */
    return split_added(tok, s, norm, nlen, 1, tok_pretokenize_and_bpe, err);
}

static int encode_into(const cpt_tokenizer *tok, tok_scratch *s, const char *text, size_t len, cpt_err *err) {
    s->n_ids = 0;
    long bad = tok_utf8_check((const uint8_t *)text, len);
    if (bad >= 0)
        return cpt_errf(err, "invalid UTF-8 at byte offset %ld (byte 0x%02x)", bad, (unsigned)(uint8_t)text[bad]);
    if (!has_added(tok, 0)) return encode_gap(tok, s, text, len, err);
    return split_added(tok, s, text, len, 0, encode_gap, err);
}

static long take_ids(tok_scratch *s, int32_t **ids, cpt_err *err) {
    *ids = malloc(s->n_ids ? s->n_ids * sizeof(int32_t) : 1);
    if (!*ids) return cpt_errf(err, "out of memory for %zu token ids", s->n_ids);
    if (s->n_ids) memcpy(*ids, s->ids, s->n_ids * sizeof(int32_t));
    return (long)s->n_ids;
}

long cpt_tokenizer_encode(const cpt_tokenizer *tok, const char *text, size_t len, int32_t **ids, cpt_err *err) {
    *ids = NULL;
    tok_scratch s;
    if (tok_scratch_init(&s, err) != 0) return -1;
    long n = -1;
    if ((len < 4096 || tok_scratch_enable_cache(&s, err) == 0) && encode_into(tok, &s, text, len, err) == 0)
        n = take_ids(&s, ids, err);
    tok_scratch_free(&s);
    return n;
}

int cpt_tokenizer_encode_batch(const cpt_tokenizer *tok, const char *const *texts, const size_t *lens, size_t n,
                               int nthreads, int32_t **ids, size_t *counts, cpt_err *err) {
    for (size_t i = 0; i < n; i++) {
        ids[i] = NULL;
        counts[i] = 0;
    }
    size_t failed = n; /* the lowest failing index */
    cpt_err first_err;
    cpt_err_clear(&first_err);
    if (nthreads <= 0) nthreads = omp_get_max_threads();
#pragma omp parallel num_threads(nthreads)
    {
        tok_scratch s;
        cpt_err terr;
        int inited = tok_scratch_init(&s, &terr) == 0;
        int ok = inited && tok_scratch_enable_cache(&s, &terr) == 0;
        if (!ok) {
#pragma omp critical(tok_batch_err)
            if (failed == n) { failed = 0; first_err = terr; }
        }
#pragma omp for schedule(dynamic, 16)
        for (size_t i = 0; i < n; i++) {
            if (!ok) continue;
            long c = -1;
            if (encode_into(tok, &s, texts[i], lens[i], &terr) == 0) c = take_ids(&s, &ids[i], &terr);
            if (c < 0) {
#pragma omp critical(tok_batch_err)
                if (i < failed) { failed = i; first_err = terr; }
            } else
                counts[i] = (size_t)c;
        }
        if (inited) tok_scratch_free(&s);
    }
    if (failed < n) {
        for (size_t i = 0; i < n; i++) {
            free(ids[i]);
            ids[i] = NULL;
            counts[i] = 0;
        }
        return cpt_errf(err, "text %zu: %s", failed, first_err.msg);
    }
    return 0;
}
