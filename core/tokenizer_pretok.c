/* Pre-tokenization: UTF-8 checks, the normalizer (utf8proc), and the regex split steps (PCRE2, UTF + UCP, the
 * pattern exactly as the file writes it), whose words go to BPE. */
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "core/tokenizer_internal.h"

/* ---- UTF-8 ---- */

/* Well-formed UTF-8 per Unicode table 3-7: no overlongs, no surrogates, nothing above U+10FFFF. */
int tok_utf8_step(const uint8_t *s, size_t n) {
    uint8_t c = s[0];
    if (c < 0x80) return 1;
    size_t need;
    uint8_t lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) need = 1;
    else if (c >= 0xE0 && c <= 0xEF) {
        need = 2;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 3;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else
        return -1;
    size_t k = 1;
    for (; k <= need && k < n; k++) {
        uint8_t b = s[k];
        uint8_t l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
        if (b < l || b > h) break;
    }
    return k == need + 1 ? (int)k : -(int)k;
}

long tok_utf8_check(const uint8_t *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        int k = tok_utf8_step(s + i, n - i);
        if (k < 0) return (long)i; /* ill-formed or truncated at the end */
        i += (size_t)k;
    }
    return -1;
}

int tok_utf8_next(const uint8_t *s, size_t n, uint32_t *cp) {
    uint8_t c = s[0];
    if (c < 0x80 || n < 2) { *cp = c; return 1; }
    if (c < 0xE0) { *cp = ((uint32_t)(c & 0x1F) << 6) | (s[1] & 0x3F); return 2; }
    if (c < 0xF0 || n < 4) {
        if (n < 3) { *cp = c; return 1; }
        *cp = ((uint32_t)(c & 0x0F) << 12) | ((uint32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3F);
        return 3;
    }
    *cp = ((uint32_t)(c & 0x07) << 18) | ((uint32_t)(s[1] & 0x3F) << 12) | ((uint32_t)(s[2] & 0x3F) << 6) | (s[3] & 0x3F);
    return 4;
}

int tok_utf8_put(uint32_t cp, char *out) {
    if (cp < 0x80) { out[0] = (char)cp; return 1; }
    if (cp < 0x800) { out[0] = (char)(0xC0 | (cp >> 6)); out[1] = (char)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* ---- scratch ---- */

int tok_scratch_init(tok_scratch *s, cpt_err *err) {
    memset(s, 0, sizeof *s);
    s->md = pcre2_match_data_create(1, NULL);
    s->mctx = pcre2_match_context_create(NULL);
    if (!s->md || !s->mctx) {
        tok_scratch_free(s);
        return cpt_errf(err, "out of memory for tokenizer scratch space");
    }
    return 0;
}

void tok_scratch_free(tok_scratch *s) {
    pcre2_match_data_free(s->md);
    pcre2_match_context_free(s->mctx);
    if (s->jit_stack) pcre2_jit_stack_free(s->jit_stack);
    free(s->ids);
    free(s->sym_id);
    free(s->sym_prev);
    free(s->sym_next);
    free(s->sym_alive);
    free(s->heap);
    free(s->heap_id);
    free(s->buf);
    free(s->wbuf);
    free(s->cache);
    free(s->cache_words);
    free(s->cache_ids);
    memset(s, 0, sizeof *s);
}

int tok_scratch_enable_cache(tok_scratch *s, cpt_err *err) {
    if (s->cache) return 0;
    s->cache = calloc(TOK_CACHE_SLOTS, sizeof *s->cache);
    s->cache_words = malloc((size_t)TOK_CACHE_SLOTS * TOK_CACHE_MAX_WORD);
    s->cache_ids = malloc((size_t)TOK_CACHE_SLOTS * TOK_CACHE_MAX_IDS * sizeof(int32_t));
    if (!s->cache || !s->cache_words || !s->cache_ids) {
        free(s->cache);
        free(s->cache_words);
        free(s->cache_ids);
        s->cache = NULL;
        s->cache_words = NULL;
        s->cache_ids = NULL;
        return cpt_errf(err, "out of memory for the tokenizer word cache");
    }
    return 0;
}

int tok_push_id(tok_scratch *s, int32_t id, cpt_err *err) {
    if (s->n_ids == s->cap_ids) {
        size_t cap = s->cap_ids ? s->cap_ids * 2 : 256;
        int32_t *n = realloc(s->ids, cap * sizeof *n);
        if (!n) return cpt_errf(err, "out of memory for token ids");
        s->ids = n;
        s->cap_ids = cap;
    }
    s->ids[s->n_ids++] = id;
    return 0;
}

static int reserve_buf(tok_scratch *s, size_t n, cpt_err *err) {
    if (n <= s->buf_cap) return 0;
    size_t cap = n * 2 > 4096 ? n * 2 : 4096;
    char *b = realloc(s->buf, cap);
    if (!b) return cpt_errf(err, "out of memory");
    s->buf = b;
    s->buf_cap = cap;
    return 0;
}

/* ---- normalizer ---- */

/* A code point is NFC-stable here when it is a starter (combining class 0), never the second half of a
 * composition, not a conjoining Hangul jamo, and NFC maps it to itself. A string of such code points is its own
 * NFC: nothing reorders, nothing composes across them, and each maps to itself. */
static int nfc_stable_slow(uint32_t cp) {
    if (cp < 0x300) return 1;
    if ((cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) return 0;
    if (cp >= 0x1100 && cp <= 0x11FF) return 0;
    const utf8proc_property_t *p = utf8proc_get_property((utf8proc_int32_t)cp);
    if (p->combining_class != 0) return 0;
    if (p->comb_index != UINT16_MAX && p->comb_index >= 0x8000) return 0;
    if (p->decomp_seqindex == UINT16_MAX) return 1;
    utf8proc_int32_t buf[32];
    int boundclass = 0;
    utf8proc_ssize_t n = utf8proc_decompose_char((utf8proc_int32_t)cp, buf, 32, UTF8PROC_DECOMPOSE, &boundclass);
    if (n < 1 || n > 32) return 0;
    n = utf8proc_normalize_utf32(buf, n, UTF8PROC_COMPOSE | UTF8PROC_STABLE);
    return n == 1 && (uint32_t)buf[0] == cp;
}

int tok_build_nfc_table(cpt_tokenizer *tok, cpt_err *err) {
    if (tok->n_norms != 1 || tok->norms[0] != TOK_NORM_NFC) return 0;
    tok->nfc_stable = calloc(0x10000 / 8, 1);
    if (!tok->nfc_stable) return cpt_errf(err, "out of memory");
    for (uint32_t cp = 0; cp < 0x10000; cp++)
        if (nfc_stable_slow(cp)) tok->nfc_stable[cp >> 3] |= (uint8_t)(1u << (cp & 7));
    return 0;
}

int tok_nfc_stable_cp(const cpt_tokenizer *tok, uint32_t cp) {
    if (cp < 0x10000 && tok->nfc_stable) return (tok->nfc_stable[cp >> 3] >> (cp & 7)) & 1;
    /* outside the BMP: stable unless it has a canonical decomposition (rare: CJK compatibility ideographs,
     * musical symbols), which takes the full path */
    if (cp > 0x10FFFF) return 0;
    const utf8proc_property_t *p = utf8proc_get_property((utf8proc_int32_t)cp);
    if (p->combining_class != 0 || (p->comb_index != UINT16_MAX && p->comb_index >= 0x8000)) return 0;
    return p->decomp_seqindex == UINT16_MAX || p->decomp_type != 0;
}

static int append_buf(tok_scratch *s, size_t *n, const void *data, size_t len, cpt_err *err) {
    if (reserve_buf(s, *n + len + 1, err) != 0) return -1;
    memcpy(s->buf + *n, data, len);
    *n += len;
    return 0;
}

static int is_stable_at(const cpt_tokenizer *tok, const char *text, size_t len, size_t i, int *k) {
    uint8_t c = (uint8_t)text[i];
    if (c < 0x80) {
        *k = 1;
        return 1;
    }
    uint32_t cp;
    *k = tok_utf8_next((const uint8_t *)text + i, len - i, &cp);
    return cp < 0x300 || tok_nfc_stable_cp(tok, cp);
}

/* NFC of text when the normalizer is NFC alone. NFC acts locally: a stable char (see nfc_stable_slow) never
 * composes with what precedes it and blocks reordering, so only the segments from the last stable char before an
 * unstable one up to the next stable char go through utf8proc. Text that is all stable (most text) is returned
 * as is without a copy. */
static int nfc_by_segments(const cpt_tokenizer *tok, tok_scratch *s, const char *text, size_t len, const char **out,
                           size_t *out_len, cpt_err *err) {
    size_t done = 0, n = 0, i = 0, last_stable = 0;
    int k, copied = 0;
    while (i < len) {
        if (is_stable_at(tok, text, len, i, &k)) {
            last_stable = i;
            i += (size_t)k;
            continue;
        }
        size_t seg = last_stable >= done && last_stable < i ? last_stable : done;
        size_t j = i + (size_t)k;
        while (j < len && !is_stable_at(tok, text, len, j, &k)) j += (size_t)k;
        if (append_buf(s, &n, text + done, seg - done, err) != 0) return -1;
        utf8proc_uint8_t *dst = NULL;
        utf8proc_ssize_t m = utf8proc_map((const utf8proc_uint8_t *)text + seg, (utf8proc_ssize_t)(j - seg), &dst,
                                          UTF8PROC_STABLE | UTF8PROC_COMPOSE);
        if (m < 0) return cpt_errf(err, "normalizing text: %s", utf8proc_errmsg(m));
        int rc = append_buf(s, &n, dst, (size_t)m, err);
        free(dst);
        if (rc != 0) return -1;
        copied = 1;
        done = i = j;
    }
    if (!copied) {
        *out = text;
        *out_len = len;
        return 0;
    }
    if (append_buf(s, &n, text + done, len - done, err) != 0) return -1;
    *out = s->buf;
    *out_len = n;
    return 0;
}

int tok_normalize(const cpt_tokenizer *tok, tok_scratch *s, const char *text, size_t len, const char **out,
                  size_t *out_len, cpt_err *err) {
    *out = text;
    *out_len = len;
    if (tok->n_norms == 0) return 0;
    if (tok->nfc_stable) return nfc_by_segments(tok, s, text, len, out, out_len, err);
    {
        /* Below U+0300 nothing decomposes or composes; only the compatibility forms change a few Latin-1 chars. */
        int only_canonical = 1;
        for (int i = 0; i < tok->n_norms; i++)
            if (tok->norms[i] == TOK_NORM_NFKC || tok->norms[i] == TOK_NORM_NFKD) only_canonical = 0;
        if (only_canonical) {
            size_t i = 0;
            while (i < len && (uint8_t)text[i] < 0xCC) i++;
            if (i == len) return 0;
        }
    }
    const char *cur = text;
    size_t cur_len = len;
    for (int i = 0; i < tok->n_norms; i++) {
        utf8proc_option_t opt = UTF8PROC_STABLE;
        switch (tok->norms[i]) {
        case TOK_NORM_NFC: opt |= UTF8PROC_COMPOSE; break;
        case TOK_NORM_NFD: opt |= UTF8PROC_DECOMPOSE; break;
        case TOK_NORM_NFKC: opt |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT; break;
        case TOK_NORM_NFKD: opt |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT; break;
        default: break;
        }
        utf8proc_uint8_t *dst = NULL;
        utf8proc_ssize_t n = utf8proc_map((const utf8proc_uint8_t *)cur, (utf8proc_ssize_t)cur_len, &dst, opt);
        if (n < 0) return cpt_errf(err, "normalizing text: %s", utf8proc_errmsg(n));
        if (reserve_buf(s, (size_t)n + 1, err) != 0) { free(dst); return -1; }
        memcpy(s->buf, dst, (size_t)n);
        free(dst);
        cur = s->buf;
        cur_len = (size_t)n;
    }
    *out = cur;
    *out_len = cur_len;
    return 0;
}

/* ---- regex split ---- */

int tok_compile_regex(tok_split_step *step, const char *pattern, size_t len, int literal, cpt_err *err) {
    int code;
    PCRE2_SIZE off;
    uint32_t opts = PCRE2_UTF | PCRE2_UCP | (literal ? PCRE2_LITERAL : 0);
    step->re = pcre2_compile((PCRE2_SPTR)pattern, len, opts, &code, &off, NULL);
    if (!step->re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(code, msg, sizeof msg);
        return cpt_errf(err, "regex /%.*s/ at offset %zu: %s", (int)(len > 200 ? 200 : len), pattern, (size_t)off,
                        (const char *)msg);
    }
    step->jit = pcre2_jit_compile(step->re, PCRE2_JIT_COMPLETE) == 0;
    return 0;
}

static int split_step(const cpt_tokenizer *tok, tok_scratch *s, int step, const char *text, size_t len, cpt_err *err);

/* A piece goes on to the next step, or to BPE after the last. Empty pieces are dropped, as HF does. */
static int emit_piece(const cpt_tokenizer *tok, tok_scratch *s, int step, const char *text, size_t len, cpt_err *err) {
    if (len == 0) return 0;
    if (step + 1 < tok->n_steps) return split_step(tok, s, step + 1, text, len, err);
    return tok_bpe_word(tok, s, (const uint8_t *)text, len, err);
}

static int regex_error(int rc, cpt_err *err) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(rc, msg, sizeof msg);
    return cpt_errf(err, "pre-tokenizer regex: %s", (const char *)msg);
}

/* Splits text by the step's regex into matches and the gaps between them (behavior Isolated; Removed drops the
 * matches). The search walks like Oniguruma's find_iter under HF: an empty match right where the previous match
 * ended is skipped by moving one char on. */
static int regex_split(const cpt_tokenizer *tok, tok_scratch *s, int step, const char *text, size_t len,
                       cpt_err *err) {
    const tok_split_step *st = &tok->steps[step];
    size_t pos = 0, prev = 0;
    long last_match_end = -1;
    while (pos <= len) {
        int m = st->jit ? pcre2_jit_match(st->re, (PCRE2_SPTR)text, len, pos, PCRE2_NO_UTF_CHECK, s->md, s->mctx)
                        : pcre2_match(st->re, (PCRE2_SPTR)text, len, pos, PCRE2_NO_UTF_CHECK, s->md, s->mctx);
        if (m == PCRE2_ERROR_JIT_STACKLIMIT && !s->jit_stack) {
            /* Deep backtracking (long runs): retry with a JIT stack that grows to 64 MiB instead of the 32 KiB
             * default; made on first need, as most texts never need it. */
            s->jit_stack = pcre2_jit_stack_create(64 * 1024, 64 * 1024 * 1024, NULL);
            if (!s->jit_stack) return cpt_errf(err, "out of memory for the regex stack");
            pcre2_jit_stack_assign(s->mctx, NULL, s->jit_stack);
            continue;
        }
        if (m == PCRE2_ERROR_NOMATCH) break;
        if (m < 0) return regex_error(m, err);
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(s->md);
        size_t ms = ov[0], me = ov[1];
        if (ms == me && (long)me == last_match_end) {
            if (pos >= len) break;
            uint32_t cp;
            pos += (size_t)tok_utf8_next((const uint8_t *)text + pos, len - pos, &cp);
            continue;
        }
        pos = me;
        last_match_end = (long)me;
        /* ms, me and prev are locals: the nested steps below reuse s->md. */
        if (ms > prev && emit_piece(tok, s, step, text + prev, ms - prev, err) != 0) return -1;
        if (!st->remove_matches && emit_piece(tok, s, step, text + ms, me - ms, err) != 0) return -1;
        prev = me;
    }
    if (prev < len) return emit_piece(tok, s, step, text + prev, len - prev, err);
    return 0;
}

static int split_step(const cpt_tokenizer *tok, tok_scratch *s, int step, const char *text, size_t len, cpt_err *err) {
    const tok_split_step *st = &tok->steps[step];
    if (st->add_prefix_space && text[0] != ' ') { /* ByteLevel add_prefix_space: each piece gets a leading space */
        char *copy = malloc(len + 1);
        if (!copy) return cpt_errf(err, "out of memory");
        copy[0] = ' ';
        memcpy(copy + 1, text, len);
        int rc = st->re ? regex_split(tok, s, step, copy, len + 1, err) : emit_piece(tok, s, step, copy, len + 1, err);
        free(copy);
        return rc;
    }
    return st->re ? regex_split(tok, s, step, text, len, err) : emit_piece(tok, s, step, text, len, err);
}

int tok_pretokenize_and_bpe(const cpt_tokenizer *tok, tok_scratch *s, const char *text, size_t len, cpt_err *err) {
    if (len == 0) return 0;
    if (tok->n_steps == 0) return tok_bpe_word(tok, s, (const uint8_t *)text, len, err);
    return split_step(tok, s, 0, text, len, err);
}
