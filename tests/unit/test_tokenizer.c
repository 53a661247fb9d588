/* Tokenizer unit tests on tests/fixtures/tokenizer/tiny_tokenizer.json (made by make_tokenizer_corpus.py: ids
 * 0-255 are the bytes, merges 256-267, added tokens 300-306), with every expected id worked out by hand from
 * that table: merge order by rank, added tokens (leftmost-longest, lstrip, rstrip, single_word), NFC, invalid
 * UTF-8, lossy decode, loader errors. Parity with HF on real tokenizers is test_tokenizer_parity.c. */
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "core/fs.h"
#include "core/tokenizer.h"
#include "core/tokenizer_internal.h"
#include "tests/check.h"

static cpt_tokenizer *tiny;

/* Encodes s and compares with the expected ids (terminated by -1). */
#define CHECK_ENCODE(s, ...) check_encode(__LINE__, s, sizeof(s) - 1, (const int32_t[]){__VA_ARGS__, -1})

static void check_encode(int line, const char *s, size_t len, const int32_t *want) {
    size_t nw = 0;
    while (want[nw] >= 0) nw++;
    int32_t *ids;
    cpt_err err;
    long n = cpt_tokenizer_encode(tiny, s, len, &ids, &err);
    check_count++;
    int same = n == (long)nw && (n == 0 || memcmp(ids, want, nw * sizeof *ids) == 0);
    if (!same) {
        check_failures++;
        fprintf(stderr, "test_tokenizer.c:%d: encode(\"%s\") =", line, s);
        for (long i = 0; i < n; i++) fprintf(stderr, " %d", ids[i]);
        fprintf(stderr, "%s, want", n < 0 ? err.msg : "");
        for (size_t i = 0; i < nw; i++) fprintf(stderr, " %d", want[i]);
        fprintf(stderr, "\n");
    }
    if (n >= 0) {
        /* and it decodes back (the inputs here are NFC already) */
        size_t dlen;
        char *dec = cpt_tokenizer_decode(tiny, ids, (size_t)n, 0, &dlen, &err);
        CHECK_MSG(dec && dlen == len && memcmp(dec, s, len) == 0, "line %d: decode gave \"%s\"", line, dec ? dec : err.msg);
        free(dec);
    }
    free(ids);
}

static void test_byte_map(void) {
    int seen[324] = {0};
    for (int b = 0; b < 256; b++) {
        uint32_t cp = tok_byte_to_cp((uint8_t)b);
        CHECK(cp < 324);
        if (cp < 324) seen[cp]++;
        CHECK_EQ_INT(tok_cp_to_byte(cp), b);
    }
    CHECK_EQ_INT(tok_byte_to_cp(' '), 0x120); /* 'Ġ' */
    CHECK_EQ_INT(tok_byte_to_cp('\n'), 0x10A); /* 'Ċ' */
    CHECK_EQ_INT(tok_byte_to_cp('a'), 'a');
    CHECK_EQ_INT(tok_byte_to_cp(0xAD), 0x143);
    CHECK_EQ_INT(tok_cp_to_byte(0x20), -1); /* space itself is not in the alphabet */
    CHECK_EQ_INT(tok_cp_to_byte(0x144), -1);
    int dup = 0;
    for (int i = 0; i < 324; i++) dup += seen[i] > 1;
    CHECK_EQ_INT(dup, 0);
}

static void test_bpe(void) {
    /* "hello": (h,e) rank 1 beats (l,l) rank 6, and once "he" exists "h ell"/"e ll" can no longer apply. */
    CHECK_ENCODE("hello", 257, 262, 'o');
    /* " the": (Ġ,t) rank 0, (h,e) rank 1, then (Ġt,he) rank 2. */
    CHECK_ENCODE("hello the", 257, 262, 'o', 258);
    CHECK_ENCODE("abc", 266, 'c');  /* (a,b) rank 10 before (b,c) rank 11 */
    CHECK_ENCODE("bcab", 267, 266); /* one word "bcab": both pairs merge */
    CHECK_ENCODE("sing", 's', 260);
    CHECK_ENCODE("   x", 261, 32, 'x'); /* "  " (\s+(?!\S)) then " x" -> Ġ Ġ merge, then Ġ x */
    CHECK_ENCODE("", -1);
}

static void test_pretokenizer(void) {
    CHECK_ENCODE("it's", 'i', 't', '\'', 's');      /* "it" + "'s" */
    CHECK_ENCODE("IT'S", 'I', 'T', '\'', 'S');      /* (?i:'s) */
    CHECK_ENCODE("a12", 'a', '1', '2');              /* \p{N} one digit at a time */
    CHECK_ENCODE("x\r\ny", 'x', '\r', '\n', 'y');
    CHECK_ENCODE("\xc3\xa9", 0xC3, 0xA9);          /* é: two byte tokens */
}

static void test_normalizer(void) {
    /* e + U+0301 composes to é under NFC, so the ids are those of "é" and the decode is "é". */
    int32_t *ids;
    cpt_err err;
    long n = cpt_tokenizer_encode(tiny, "e\xcc\x81", 3, &ids, &err);
    CHECK_EQ_INT(n, 2);
    if (n == 2) {
        CHECK_EQ_INT(ids[0], 0xC3);
        CHECK_EQ_INT(ids[1], 0xA9);
    }
    free(ids);
}

/* The NFC fast path's per-char test: every code point it calls stable is its own NFC, alone and after "e" and
 * "\xe1\x84\x80" (a Hangul leading jamo, which composes with vowels). */
static void test_nfc_fast_path(void) {
    size_t wrong = 0, stable = 0;
    for (uint32_t cp = 0; cp <= 0x10FFFF; cp++) {
        if (cp >= 0xD800 && cp <= 0xDFFF) continue;
        if (!tok_nfc_stable_cp(tiny, cp)) continue;
        stable++;
        char in[16];
        int n = tok_utf8_put('e', in);
        n += tok_utf8_put(cp, in + n);
        utf8proc_uint8_t *out = NULL;
        utf8proc_ssize_t m = utf8proc_map((const utf8proc_uint8_t *)in, n, &out, UTF8PROC_STABLE | UTF8PROC_COMPOSE);
        if (m != n || memcmp(out, in, (size_t)n) != 0) {
            if (wrong++ < 5) fprintf(stderr, "U+%04X is not NFC-stable\n", (unsigned)cp);
        }
        free(out);
    }
    CHECK_EQ_INT(wrong, 0);
    CHECK(stable > 1000000); /* nearly everything is stable: the fast path matters */
    CHECK(!tok_nfc_stable_cp(tiny, 0x301));  /* combining acute */
    CHECK(!tok_nfc_stable_cp(tiny, 0x212B)); /* ANGSTROM SIGN -> U+00C5 */
    CHECK(!tok_nfc_stable_cp(tiny, 0x1161)); /* Hangul vowel jamo */
    CHECK(tok_nfc_stable_cp(tiny, 0x1EBF));  /* Vietnamese e with circumflex and acute: a primary composite */
    CHECK(tok_nfc_stable_cp(tiny, 0x4E2D));
    CHECK(tok_nfc_stable_cp(tiny, 0x1F600));
}

static void test_added_tokens(void) {
    CHECK_ENCODE("a<|endoftext|>b", 'a', 300, 'b');
    CHECK_ENCODE("<|im_start|>", 301);
    CHECK_ENCODE("<|im_end", 306, '_', 'e', 'n', 'd'); /* leftmost-longest: "<|im" when "<|im_start|>" fails */
    CHECK_ENCODE("<|endoftext|", '<', '|', 'e', 'n', 'd', 'o', 'f', 't', 'e', 'x', 't', '|');
    CHECK_ENCODE("<|endoftext|><|endoftext|>", 300, 300);
    CHECK_ENCODE("x<tool>y", 'x', 302, 'y');
    /* lstrip eats the spaces before, rstrip those after */
    int32_t *ids;
    cpt_err err;
    long n = cpt_tokenizer_encode(tiny, "x  [L]y", 7, &ids, &err);
    CHECK_EQ_INT(n, 3);
    if (n == 3) CHECK(ids[0] == 'x' && ids[1] == 303 && ids[2] == 'y');
    free(ids);
    n = cpt_tokenizer_encode(tiny, "x[R] \t y", 8, &ids, &err);
    CHECK_EQ_INT(n, 3);
    if (n == 3) CHECK(ids[0] == 'x' && ids[1] == 304 && ids[2] == 'y');
    free(ids);
    /* single_word: only between non-word chars */
    CHECK_ENCODE("a [W] b", 'a', 32, 305, 32, 'b');
    CHECK_ENCODE("a[W]b", 'a', '[', 'W', ']', 'b');
    CHECK_ENCODE("[W]", 305);

    size_t len;
    int32_t special[] = {'a', 300, 'b', 302};
    char *s = cpt_tokenizer_decode(tiny, special, 4, 1, &len, &err);
    CHECK_EQ_STR(s, "ab<tool>"); /* skip_special drops <|endoftext|>, keeps the non-special <tool> */
    free(s);
    s = cpt_tokenizer_decode(tiny, special, 4, 0, &len, &err);
    CHECK_EQ_STR(s, "a<|endoftext|>b<tool>");
    free(s);
}

static void test_lookups(void) {
    CHECK_EQ_INT(cpt_tokenizer_vocab_size(tiny), 307);
    CHECK_EQ_INT(cpt_tokenizer_token_id(tiny, "\xc4\xa0the"), 258); /* "Ġthe" */
    CHECK_EQ_INT(cpt_tokenizer_token_id(tiny, "<|im_start|>"), 301);
    CHECK_EQ_INT(cpt_tokenizer_token_id(tiny, "nope"), -1);
    CHECK_EQ_STR(cpt_tokenizer_id_token(tiny, 258), "\xc4\xa0the");
    CHECK(cpt_tokenizer_id_token(tiny, 290) == NULL); /* unused id */
    CHECK(cpt_tokenizer_id_token(tiny, -1) == NULL);
    CHECK(cpt_tokenizer_is_special(tiny, 300));
    CHECK(!cpt_tokenizer_is_special(tiny, 302));
    size_t n;
    const char *b = cpt_tokenizer_id_bytes(tiny, 258, &n);
    CHECK(b && n == 4 && memcmp(b, " the", 4) == 0);
    CHECK_EQ_INT(cpt_tokenizer_eos_id(tiny), -1); /* no tokenizer_config.json beside it */
}

static void test_invalid_utf8(void) {
    struct {
        const char *s;
        size_t len;
        const char *offset;
    } bad[] = {
        {"ab\xff" "cd", 5, "byte offset 2 "},
        {"\xe2\x82", 2, "byte offset 0 "},      /* truncated */
        {"ok\xc0\xaf", 4, "byte offset 2 "},    /* overlong '/' */
        {"\xed\xa0\x80", 3, "byte offset 0 "},  /* surrogate */
        {"x\xf4\x90\x80\x80", 5, "byte offset 1 "}, /* above U+10FFFF */
        {"\xc3\xa9\x80", 3, "byte offset 2 "},  /* stray continuation */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int32_t *ids = (int32_t *)1;
        cpt_err err;
        cpt_err_clear(&err);
        long n = cpt_tokenizer_encode(tiny, bad[i].s, bad[i].len, &ids, &err);
        CHECK_EQ_INT(n, -1);
        CHECK(ids == NULL);
        CHECK_MSG(strstr(err.msg, "invalid UTF-8") && strstr(err.msg, bad[i].offset), "case %zu: %s", i, err.msg);
    }
    /* NUL is valid UTF-8 and encodes like any byte */
    CHECK_ENCODE("a\0b", 'a', 0, 'b');
}

static void test_lossy_decode(void) {
    cpt_err err;
    size_t len;
    int32_t euro[] = {0xE2, 0x82, 0xAC}, half[] = {0xE2, 0x82}, mixed[] = {'a', 0xFF, 'b', 0xE2, 0x82, 'c'};
    char *s = cpt_tokenizer_decode(tiny, euro, 3, 0, &len, &err);
    CHECK_EQ_STR(s, "\xe2\x82\xac");
    free(s);
    s = cpt_tokenizer_decode(tiny, half, 2, 0, &len, &err);
    CHECK_EQ_STR(s, "\xef\xbf\xbd"); /* one U+FFFD for the maximal subpart E2 82 */
    free(s);
    s = cpt_tokenizer_decode(tiny, mixed, 6, 0, &len, &err);
    CHECK_EQ_STR(s, "a\xef\xbf\xbd" "b\xef\xbf\xbd" "c");
    CHECK_EQ_INT(len, 9);
    free(s);
    int32_t bad[] = {'a', 290};
    s = cpt_tokenizer_decode(tiny, bad, 2, 0, &len, &err);
    CHECK(s == NULL);
    CHECK_MSG(strstr(err.msg, "id 290 at position 1"), "%s", err.msg);
    int32_t neg[] = {-5};
    s = cpt_tokenizer_decode(tiny, neg, 1, 0, &len, &err);
    CHECK(s == NULL);
    s = cpt_tokenizer_decode(tiny, NULL, 0, 0, &len, &err);
    CHECK_EQ_STR(s, "");
    CHECK_EQ_INT(len, 0);
    free(s);
}

/* A minimal tokenizer.json around a model fragment and a pre-tokenizer, for loader tests. */
static cpt_tokenizer *load_snippet(const char *model, const char *pre, const char *norm, cpt_err *err) {
    char doc[4096];
    snprintf(doc, sizeof doc,
             "{\"added_tokens\": [], \"normalizer\": %s, \"pre_tokenizer\": %s,"
             " \"decoder\": {\"type\": \"ByteLevel\"}, \"model\": %s}",
             norm, pre, model);
    return cpt_tokenizer_load_json(doc, strlen(doc), "snippet.json", err);
}

#define BYTES_VOCAB "\"a\": 0, \"b\": 1, \"c\": 2, \"ab\": 3, \"abc\": 4, \"\\u0120\": 5"
#define BYTE_LEVEL "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": true}"

static void test_loader(void) {
    cpt_err err;
    /* merges as [a, b] arrays */
    cpt_tokenizer *t = load_snippet("{\"type\": \"BPE\", \"vocab\": {" BYTES_VOCAB "}, \"merges\": [[\"a\", \"b\"], [\"ab\", \"c\"]]}",
                                    BYTE_LEVEL, "null", &err);
    CHECK_MSG(t != NULL, "%s", err.msg);
    if (t) {
        int32_t *ids;
        long n = cpt_tokenizer_encode(t, "abc cab", 7, &ids, &err);
        /* "abc" -> 4; " cab" -> Ġ c ab (5 2 3) */
        CHECK_EQ_INT(n, 4);
        if (n == 4) CHECK(ids[0] == 4 && ids[1] == 5 && ids[2] == 2 && ids[3] == 3);
        free(ids);
        cpt_tokenizer_free(t);
    }
    /* add_prefix_space: "abc" is encoded as " abc" */
    t = load_snippet("{\"type\": \"BPE\", \"vocab\": {" BYTES_VOCAB "}, \"merges\": [\"a b\", \"ab c\"]}",
                     "{\"type\": \"ByteLevel\", \"add_prefix_space\": true}", "null", &err);
    CHECK_MSG(t != NULL, "%s", err.msg);
    if (t) {
        int32_t *ids;
        long n = cpt_tokenizer_encode(t, "abc", 3, &ids, &err);
        CHECK_EQ_INT(n, 2);
        if (n == 2) CHECK(ids[0] == 5 && ids[1] == 4);
        free(ids);
        cpt_tokenizer_free(t);
    }
    /* ignore_merges: a word in the vocabulary is taken whole even where merges would not reach it */
    t = load_snippet("{\"type\": \"BPE\", \"ignore_merges\": true, \"vocab\": {" BYTES_VOCAB "}, \"merges\": []}",
                     BYTE_LEVEL, "null", &err);
    if (t) {
        int32_t *ids;
        long n = cpt_tokenizer_encode(t, "abc", 3, &ids, &err);
        CHECK_EQ_INT(n, 1);
        if (n == 1) CHECK_EQ_INT(ids[0], 4);
        free(ids);
        cpt_tokenizer_free(t);
    }

    struct {
        const char *model, *pre, *norm, *want;
    } bad[] = {
        {"{\"type\": \"BPE\", \"vocab\": {" BYTES_VOCAB "}, \"merges\": [\"a x\"]}", BYTE_LEVEL, "null",
         "model.merges[0]: token \"x\" is not in the vocabulary"},
        {"{\"type\": \"BPE\", \"vocab\": {" BYTES_VOCAB "}, \"merges\": [\"b c\"]}", BYTE_LEVEL, "null",
         "model.merges[0]: token \"bc\""},
        {"{\"type\": \"BPE\", \"vocab\": {" BYTES_VOCAB "}, \"merges\": [\"abc\"]}", BYTE_LEVEL, "null",
         "model.merges[0]: \"abc\" is not two tokens"},
        {"{\"type\": \"BPE\", \"vocab\": {" BYTES_VOCAB "}, \"merges\": [[\"a\"]]}", BYTE_LEVEL, "null",
         "model.merges[0]: expected"},
        {"{\"type\": \"WordPiece\", \"vocab\": {" BYTES_VOCAB "}}", BYTE_LEVEL, "null", "model.type \"WordPiece\""},
        {"{\"type\": \"BPE\", \"byte_fallback\": true, \"vocab\": {" BYTES_VOCAB "}}", BYTE_LEVEL, "null", "byte_fallback"},
        {"{\"type\": \"BPE\", \"vocab\": {\"a\": -1}}", BYTE_LEVEL, "null", "model.vocab[\"a\"]"},
        {"{\"type\": \"BPE\", \"vocab\": [1]}", BYTE_LEVEL, "null", "model.vocab must be an object"},
        {"{\"type\": \"BPE\", \"vocab\": {" BYTES_VOCAB "}}", BYTE_LEVEL, "{\"type\": \"Lowercase\"}",
         "unsupported type \"Lowercase\""},
        {"{\"type\": \"BPE\", \"vocab\": {" BYTES_VOCAB "}}", "{\"type\": \"Metaspace\"}", "null", "unsupported type \"Metaspace\""},
        {"{\"type\": \"BPE\", \"vocab\": {" BYTES_VOCAB "}}",
         "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": {\"Regex\": \"(a\"},"
         " \"behavior\": \"Isolated\", \"invert\": false}, " BYTE_LEVEL "]}",
         "null", "missing closing parenthesis"},
        {"{\"type\": \"BPE\", \"vocab\": {" BYTES_VOCAB "}}",
         "{\"type\": \"Split\", \"pattern\": {\"Regex\": \"a\"}, \"behavior\": \"Isolated\", \"invert\": false}", "null",
         "no ByteLevel"},
        {"{\"type\": \"BPE\", \"vocab\": {" BYTES_VOCAB "}}",
         "{\"type\": \"Split\", \"pattern\": {\"Regex\": \"a\"}, \"behavior\": \"MergedWithNext\"}", "null",
         "unsupported behavior \"MergedWithNext\""},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cpt_err_clear(&err);
        t = load_snippet(bad[i].model, bad[i].pre, bad[i].norm, &err);
        CHECK_MSG(t == NULL && strstr(err.msg, bad[i].want) && strstr(err.msg, "snippet.json"), "case %zu: got \"%s\"",
                  i, t ? "a tokenizer" : err.msg);
        cpt_tokenizer_free(t);
    }
    t = cpt_tokenizer_load_json("{\"model\": \n {", 13, "broken.json", &err);
    CHECK(t == NULL);
    CHECK_MSG(strstr(err.msg, "broken.json:2:"), "%s", err.msg);
    t = cpt_tokenizer_load("/nonexistent/tokenizer.json", &err);
    CHECK(t == NULL);
    CHECK_MSG(strstr(err.msg, "/nonexistent/tokenizer.json"), "%s", err.msg);
    t = cpt_tokenizer_load("tests/fixtures", &err); /* a folder without a tokenizer */
    CHECK(t == NULL);
    CHECK_MSG(strstr(err.msg, "neither tokenizer.json"), "%s", err.msg);
}

/* Long inputs: a 1 MB word of one letter and a 1 MB whitespace run go through BPE and the regex without error. */
static void test_long_inputs(void) {
    size_t n = 1 << 20;
    char *s = malloc(n);
    memset(s, 'l', n);
    int32_t *ids;
    cpt_err err;
    long k = cpt_tokenizer_encode(tiny, s, n, &ids, &err);
    CHECK_EQ_INT(k, (long)n / 2); /* "ll" merges pairwise */
    if (k > 0) CHECK_EQ_INT(ids[0], 262);
    free(ids);
    memset(s, ' ', n);
    s[n - 1] = 'x';
    k = cpt_tokenizer_encode(tiny, s, n, &ids, &err);
    CHECK_MSG(k > 0, "%s", err.msg);
    if (k > 0) {
        size_t len;
        char *d = cpt_tokenizer_decode(tiny, ids, (size_t)k, 0, &len, &err);
        CHECK(d && len == n && memcmp(d, s, n) == 0);
        free(d);
    }
    free(ids);
    free(s);
}

int main(void) {
    const char *src = getenv("CPT_SRC");
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/fixtures/tokenizer/tiny_tokenizer.json", src && *src ? src : ".");
    cpt_err err;
    tiny = cpt_tokenizer_load(path, &err);
    CHECK_MSG(tiny != NULL, "%s", err.msg);
    if (!tiny) return check_summary("test_tokenizer");
    test_byte_map();
    test_bpe();
    test_pretokenizer();
    test_normalizer();
    test_nfc_fast_path();
    test_added_tokens();
    test_lookups();
    test_invalid_utf8();
    test_lossy_decode();
    test_loader();
    test_long_inputs();
    cpt_tokenizer_free(tiny);
    return check_summary("test_tokenizer");
}
