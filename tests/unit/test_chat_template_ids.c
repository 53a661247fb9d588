/* Chat templates with the Qwen3 tokenizer (fetched by scripts/fetch_assets.sh into .deps/): for every fixture
 * case, text and token ids equal transformers' apply_chat_template; the ids built segment by segment equal the
 * encoding of the whole text; the assistant mask equals transformers' own (return_assistant_tokens_mask) where
 * the fixture has it, and covers exactly each assistant turn elsewhere. The Llama-3 cases use the Qwen3
 * vocabulary plus Meta's four special tokens at the ids the fixture script got (llama3_added_tokens.json). */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "core/chat_template.h"
#include "core/tokenizer.h"
#include "tests/check.h"

#define FIXTURES "tests/fixtures/chat_template"
#define QWEN3 ".deps/tokenizer-qwen3/models"

/* The Qwen3 tokenizer.json plus the Llama-3 special tokens, loaded from memory. */
static cpt_tokenizer *load_llama3_tokenizer(cpt_err *err) {
    json_error_t je;
    json_t *tj = json_load_file(QWEN3 "/tokenizer.json", 0, &je);
    if (!tj) {
        cpt_errf(err, "%s: %s", QWEN3 "/tokenizer.json", je.text);
        return NULL;
    }
    json_t *extra = json_load_file(FIXTURES "/llama3_added_tokens.json", 0, &je);
    if (!extra) {
        json_decref(tj);
        cpt_errf(err, "llama3_added_tokens.json: %s", je.text);
        return NULL;
    }
    json_t *added = json_object_get(tj, "added_tokens");
    size_t i;
    json_t *e;
    json_array_foreach(extra, i, e) {
        json_array_append_new(added, json_pack("{s:O,s:O,s:b,s:b,s:b,s:b,s:b}", "id", json_object_get(e, "id"),
                                               "content", json_object_get(e, "content"), "single_word", 0,
                                               "lstrip", 0, "rstrip", 0, "normalized", 0, "special", 1));
    }
    char *text = json_dumps(tj, JSON_COMPACT);
    cpt_tokenizer *tok = text ? cpt_tokenizer_load_json(text, strlen(text), "qwen3+llama3 specials", err) : NULL;
    free(text);
    json_decref(extra);
    json_decref(tj);
    return tok;
}

static char *decode(const cpt_tokenizer *tok, const int32_t *ids, size_t n, size_t *len) {
    cpt_err err = {{0}};
    char *s = cpt_tokenizer_decode(tok, ids, n, 0, len, &err);
    CHECK_MSG(s != NULL, "decode: %s", err.msg);
    return s;
}

static int ends_with(const char *s, size_t n, const char *suf, size_t k) { return n >= k && !memcmp(s + n - k, suf, k); }

/* Each run of mask-1 tokens decodes to one assistant turn: the text from the end of the k-th assistant header
 * through its end token (a leading token that straddles the header may add header bytes before it). */
static void check_mask_runs(const cpt_tokenizer *tok, const cpt_chat_rendered *r, const char *header,
                            const char *end_tok, int n_assistant, const char *where) {
    size_t hl = strlen(header), el = strlen(end_tok);
    const char *p = r->text;
    size_t t = 0;
    int runs = 0;
    while (t < r->n_ids) {
        if (!r->assistant_mask[t]) {
            t++;
            continue;
        }
        size_t b = t;
        while (t < r->n_ids && r->assistant_mask[t]) t++;
        runs++;
        const char *h = strstr(p, header);
        CHECK_MSG(h != NULL, "%s: mask run %d has no assistant header before it", where, runs);
        if (!h) return;
        const char *span = h + hl, *end = strstr(span, end_tok);
        CHECK_MSG(end != NULL, "%s: no end token after assistant header", where);
        if (!end) return;
        size_t span_len = (size_t)(end + el - span), dl = 0;
        char *d = decode(tok, r->ids + b, t - b, &dl);
        if (!d) return;
        int ok = ends_with(d, dl, span, span_len) && dl - span_len < hl &&
                 ends_with(header, hl, d, dl - span_len);
        CHECK_MSG(ok, "%s: mask run %d decodes to \"%s\", the assistant turn is \"%.*s\"", where, runs, d,
                  (int)span_len, span);
        CHECK_MSG(r->ids[t - 1] == cpt_tokenizer_token_id(tok, end_tok), "%s: mask run %d does not end with %s",
                  where, runs, end_tok);
        free(d);
        p = end + el;
    }
    CHECK_MSG(runs == n_assistant, "%s: %d mask runs for %d assistant messages", where, runs, n_assistant);
}

static int run_cases(const cpt_tokenizer *qwen, const cpt_tokenizer *llama, const json_t *templates) {
    FILE *f = fopen(FIXTURES "/cases.jsonl", "r");
    CHECK(f != NULL);
    if (!f) return 0;
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int lineno = 0, done = 0;
    long total_ids = 0, masked = 0, hf_masks = 0, skipped_runs = 0;
    while ((len = getline(&line, &cap, f)) > 0) {
        lineno++;
        char where[64];
        snprintf(where, sizeof where, "cases.jsonl:%d", lineno);
        json_t *rec = json_loadb(line, (size_t)len, 0, NULL);
        CHECK_MSG(rec != NULL, "%s: bad JSON", where);
        if (!rec) continue;
        const char *name = json_string_value(json_object_get(rec, "template"));
        const cpt_tokenizer *tok = strcmp(name, "llama3") == 0 ? llama : qwen;
        cpt_err err = {{0}};
        cpt_chat_template tpl;
        int rc = strcmp(name, "qwen3") == 0 || strcmp(name, "llama3") == 0
                     ? cpt_chat_template_by_name(name, &tpl, &err)
                     : cpt_chat_template_detect(json_string_value(json_object_get(templates, name)), &tpl, &err);
        CHECK_MSG(rc == 0, "%s: %s", where, err.msg);
        cpt_chat_message *msgs = NULL;
        size_t n = 0;
        CHECK_EQ_INT(cpt_chat_messages_from_json(json_object_get(rec, "messages"), &msgs, &n, &err), 0);
        cpt_chat_options opt = {json_is_true(json_object_get(rec, "add_generation_prompt")),
                                json_is_false(json_object_get(rec, "enable_thinking"))};
        cpt_chat_rendered r;
        rc = cpt_chat_render(&tpl, tok, msgs, n, &opt, &r, &err);
        CHECK_MSG(rc == 0, "%s: %s", where, err.msg);
        if (rc == 0) {
            json_t *want_text = json_object_get(rec, "text"), *want_ids = json_object_get(rec, "ids");
            CHECK_MSG(r.text_len == json_string_length(want_text) &&
                          memcmp(r.text, json_string_value(want_text), r.text_len) == 0,
                      "%s: text differs", where);
            /* ids equal transformers' */
            int same = r.n_ids == json_array_size(want_ids);
            for (size_t i = 0; same && i < r.n_ids; i++)
                same = r.ids[i] == json_integer_value(json_array_get(want_ids, i));
            CHECK_MSG(same, "%s (%s): ids differ from transformers' (%zu vs %zu ids)", where, name, r.n_ids,
                      json_array_size(want_ids));
            /* the segment-by-segment ids equal the encoding of the whole text */
            int32_t *whole = NULL;
            long nw = cpt_tokenizer_encode(tok, r.text, r.text_len, &whole, &err);
            CHECK_MSG(nw == (long)r.n_ids && (nw <= 0 || !memcmp(whole, r.ids, (size_t)nw * sizeof *whole)),
                      "%s: segment ids differ from the whole-text encoding", where);
            free(whole);
            /* the mask */
            json_t *hf_mask = json_object_get(rec, "hf_assistant_mask");
            if (hf_mask) {
                int eq = json_array_size(hf_mask) == r.n_ids;
                for (size_t i = 0; eq && i < r.n_ids; i++)
                    eq = r.assistant_mask[i] == json_integer_value(json_array_get(hf_mask, i));
                CHECK_MSG(eq, "%s: assistant mask differs from transformers' return_assistant_tokens_mask", where);
                hf_masks++;
            }
            int n_assistant = 0;
            for (size_t i = 0; i < n; i++) n_assistant += strcmp(msgs[i].role, "assistant") == 0;
            /* (a turn whose content holds the end token itself has no clean text boundary to compare with) */
            const char *end_tok = strcmp(name, "llama3") == 0 ? "<|eot_id|>" : "<|im_end|>";
            int clean = 1;
            for (size_t i = 0; i < n; i++) clean &= memmem(msgs[i].content, msgs[i].content_len, end_tok,
                                                           strlen(end_tok)) == NULL;
            if (!clean)
                skipped_runs++;
            else if (strcmp(name, "llama3") == 0)
                check_mask_runs(tok, &r, "<|start_header_id|>assistant<|end_header_id|>\n\n", "<|eot_id|>",
                                n_assistant, where);
            else
                check_mask_runs(tok, &r, "<|im_start|>assistant\n", "<|im_end|>", n_assistant, where);
            if (opt.add_generation_prompt) CHECK_MSG(r.assistant_mask[r.n_ids - 1] == 0, "%s: prompt masked", where);
            for (size_t i = 0; i < r.n_ids; i++) masked += r.assistant_mask[i];
            total_ids += (long)r.n_ids;
            done++;
        }
        cpt_chat_rendered_free(&r);
        free(msgs);
        cpt_chat_template_free(&tpl);
        json_decref(rec);
    }
    free(line);
    fclose(f);
    printf("cases: %d, ids: %ld, assistant tokens: %ld, compared with transformers' masks: %ld, mask runs checked "
           "against the text: %ld\n", done, total_ids, masked, hf_masks, done - skipped_runs);
    CHECK(hf_masks >= 80);
    CHECK(skipped_runs <= 11);
    CHECK(masked > 0 && masked < total_ids);
    return done;
}

int main(void) {
    cpt_err err = {{0}};
    cpt_tokenizer *qwen = cpt_tokenizer_load(QWEN3, &err);
    CHECK_MSG(qwen != NULL, "%s (run scripts/fetch_assets.sh)", err.msg);
    cpt_tokenizer *llama = qwen ? load_llama3_tokenizer(&err) : NULL;
    CHECK_MSG(llama != NULL, "%s", err.msg);
    json_t *templates = json_load_file(FIXTURES "/templates.json", 0, NULL);
    CHECK(templates != NULL);
    if (qwen && llama && templates) {
        CHECK_EQ_INT(cpt_tokenizer_token_id(llama, "<|eot_id|>"), 151672);
        CHECK(cpt_tokenizer_is_special(llama, 151672));
        int n = run_cases(qwen, llama, templates);
        CHECK_MSG(n == 440, "%d cases rendered", n);

        /* A special token the tokenizer does not have is not a cut point: Llama-3 formatting with the plain
         * Qwen3 tokenizer still encodes exactly like the whole text. */
        cpt_chat_template t;
        cpt_chat_template_by_name("qwen3", &t, &err);
        CHECK_EQ_INT(cpt_chat_template_check(&t, qwen, &err), 0);
        cpt_chat_template_by_name("llama3", &t, &err);
        CHECK_EQ_INT(cpt_chat_template_check(&t, llama, &err), 0);
        CHECK_EQ_INT(cpt_chat_template_check(&t, qwen, &err), -1);
        CHECK(strstr(err.msg, "no special token <|begin_of_text|>") != NULL);
        cpt_chat_message m[2] = {{"user", "Hi there", 8, NULL, 0}, {"assistant", "\n\nHello!", 8, NULL, 0}};
        cpt_chat_rendered r;
        CHECK_EQ_INT(cpt_chat_render(&t, qwen, m, 2, NULL, &r, &err), 0);
        int32_t *whole = NULL;
        long nw = cpt_tokenizer_encode(qwen, r.text, r.text_len, &whole, &err);
        CHECK(nw == (long)r.n_ids && !memcmp(whole, r.ids, r.n_ids * sizeof *whole));
        long ones = 0;
        for (size_t i = 0; i < r.n_ids; i++) ones += r.assistant_mask[i];
        CHECK(ones > 0 && r.assistant_mask[r.n_ids - 1] == 1 && r.assistant_mask[0] == 0);
        free(whole);
        cpt_chat_rendered_free(&r);
    }
    json_decref(templates);
    cpt_tokenizer_free(llama);
    cpt_tokenizer_free(qwen);
    return check_summary("test_chat_template_ids");
}
