/* Chat templates without a tokenizer: the rendered text of every fixture case equals transformers'
 * apply_chat_template text; template detection and loading; message validation; Python-style trimming. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "core/chat_template.h"
#include "tests/check.h"

#ifndef CHAT_FIXTURE_DIR
#define CHAT_FIXTURE_DIR "tests/fixtures/chat_template"
#endif

static int template_for(const char *name, const json_t *templates, cpt_chat_template *tpl, cpt_err *err) {
    if (strcmp(name, "qwen3") == 0 || strcmp(name, "llama3") == 0) return cpt_chat_template_by_name(name, tpl, err);
    if (strcmp(name, "tiny_chatml") == 0) return cpt_chat_template_load("examples/tiny-tokenizer", "auto", tpl, err);
    /* chatml, chatml_gen, qwen25: detected from the jinja text the fixture used */
    json_t *t = json_object_get(templates, name);
    if (!json_is_string(t)) return cpt_errf(err, "templates.json: no template '%s'", name);
    return cpt_chat_template_detect(json_string_value(t), tpl, err);
}

/* Every case of a JSONL fixture file: rendered text equals the recorded text. */
static int check_fixture_texts(const char *path, const json_t *templates) {
    FILE *f = fopen(path, "r");
    CHECK_MSG(f != NULL, "cannot open %s (run tests/fixtures/make_chat_template_fixture.py)", path);
    if (!f) return 0;
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int lineno = 0, compared = 0;
    while ((len = getline(&line, &cap, f)) > 0) {
        lineno++;
        json_error_t je;
        json_t *rec = json_loadb(line, (size_t)len, JSON_ALLOW_NUL, &je);
        CHECK_MSG(rec != NULL, "%s:%d: %s", path, lineno, je.text);
        if (!rec) continue;
        const char *name = json_string_value(json_object_get(rec, "template"));
        if (!name || json_object_get(rec, "error")) { /* plain tokenizer records, or a case HF rejected */
            CHECK_MSG(!json_object_get(rec, "error"), "%s:%d: transformers rejected this case", path, lineno);
            json_decref(rec);
            continue;
        }
        cpt_err err = {{0}};
        cpt_chat_template tpl;
        int ok = template_for(name, templates, &tpl, &err) == 0;
        CHECK_MSG(ok, "%s:%d: %s", path, lineno, err.msg);
        cpt_chat_message *msgs = NULL;
        size_t n = 0;
        if (ok) {
            ok = cpt_chat_messages_from_json(json_object_get(rec, "messages"), &msgs, &n, &err) == 0;
            CHECK_MSG(ok, "%s:%d: %s", path, lineno, err.msg);
        }
        if (ok) {
            cpt_chat_options opt = {json_is_true(json_object_get(rec, "add_generation_prompt")),
                                    json_is_false(json_object_get(rec, "enable_thinking"))};
            cpt_chat_rendered r;
            ok = cpt_chat_render_text(&tpl, msgs, n, &opt, &r, &err) == 0;
            CHECK_MSG(ok, "%s:%d: %s", path, lineno, err.msg);
            json_t *want = json_object_get(rec, "text");
            if (ok) {
                int same = json_string_length(want) == r.text_len &&
                           memcmp(json_string_value(want), r.text, r.text_len) == 0;
                CHECK_MSG(same, "%s:%d (%s): text differs:\n got: %s\nwant: %s", path, lineno, name, r.text,
                          json_string_value(want));
                CHECK_EQ_INT(strlen(r.text), r.text_len); /* NUL-terminated, no NULs in these cases */
                CHECK(r.ids == NULL && r.n_ids == 0);
                compared++;
            }
            cpt_chat_rendered_free(&r);
        }
        free(msgs);
        cpt_chat_template_free(&tpl);
        json_decref(rec);
    }
    free(line);
    fclose(f);
    return compared;
}

static void test_detect(const json_t *templates) {
    cpt_err err = {{0}};
    cpt_chat_template t;
    /* The real Qwen3 template, from the fetched tokenizer (scripts/fetch_assets.sh). */
    CHECK_EQ_INT(cpt_chat_template_load(".deps/tokenizer-qwen3/models", "auto", &t, &err), 0);
    CHECK_EQ_INT(t.family, CPT_CHAT_QWEN3);
    CHECK(t.default_system == NULL);
    cpt_chat_template_free(&t);
    CHECK_EQ_INT(cpt_chat_template_load(".deps/tokenizer-qwen3/models/tokenizer.json", NULL, &t, &err), 0);
    CHECK_EQ_INT(t.family, CPT_CHAT_QWEN3);
    cpt_chat_template_free(&t);

    CHECK_EQ_INT(cpt_chat_template_detect(json_string_value(json_object_get(templates, "chatml")), &t, &err), 0);
    CHECK_EQ_INT(t.family, CPT_CHAT_CHATML);
    CHECK(t.default_system == NULL);
    cpt_chat_template_free(&t);
    CHECK_EQ_INT(cpt_chat_template_detect(json_string_value(json_object_get(templates, "qwen25")), &t, &err), 0);
    CHECK_EQ_INT(t.family, CPT_CHAT_CHATML);
    CHECK_EQ_STR(t.default_system, "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.");
    cpt_chat_template_free(&t);
    CHECK_EQ_INT(cpt_chat_template_detect(json_string_value(json_object_get(templates, "llama3")), &t, &err), 0);
    CHECK_EQ_INT(t.family, CPT_CHAT_LLAMA3);
    cpt_chat_template_free(&t);
    CHECK_EQ_INT(cpt_chat_template_load("examples/tiny-tokenizer", "auto", &t, &err), 0);
    CHECK_EQ_INT(t.family, CPT_CHAT_CHATML);
    cpt_chat_template_free(&t);

    /* by name, and the errors */
    CHECK_EQ_INT(cpt_chat_template_load("/nonexistent", "llama3", &t, &err), 0);
    CHECK_EQ_INT(t.family, CPT_CHAT_LLAMA3);
    CHECK_EQ_STR(cpt_chat_family_name(t.family), "llama3");
    cpt_chat_template_free(&t);
    CHECK_EQ_INT(cpt_chat_template_by_name("vicuna", &t, &err), -1);
    CHECK(strstr(err.msg, "unknown template 'vicuna'") != NULL);
    CHECK_EQ_INT(cpt_chat_template_detect("{{ messages[0].content }}", &t, &err), -1);
    CHECK(strstr(err.msg, "unknown template family") != NULL);
    CHECK_EQ_INT(cpt_chat_template_detect("", &t, &err), -1);
    CHECK_EQ_INT(cpt_chat_template_detect("{{'<|start_header_id|>'}} Cutting Knowledge Date", &t, &err), -1);
    CHECK(strstr(err.msg, "Llama-3.1") != NULL);
    CHECK_EQ_INT(cpt_chat_template_detect("{{'<|im_start|>'}}{{'<think>\\n'}}", &t, &err), -1);
    CHECK_EQ_INT(cpt_chat_template_load("/nonexistent-dir", "auto", &t, &err), -1);
    CHECK(strstr(err.msg, "no chat template found") != NULL);
}

static int render_err(const char *json, cpt_err *err) {
    json_error_t je;
    json_t *j = json_loads(json, JSON_ALLOW_NUL, &je);
    if (!j) return cpt_errf(err, "bad test JSON: %s", je.text);
    cpt_chat_message *m = NULL;
    size_t n = 0;
    int rc = cpt_chat_messages_from_json(j, &m, &n, err);
    free(m);
    json_decref(j);
    return rc;
}

static void test_message_errors(void) {
    cpt_err err = {{0}};
    CHECK_EQ_INT(render_err("[]", &err), -1);
    CHECK(strstr(err.msg, "messages: empty") != NULL);
    CHECK_EQ_INT(render_err("{\"role\": \"user\"}", &err), -1);
    CHECK(strstr(err.msg, "expected an array") != NULL);
    CHECK_EQ_INT(render_err("[{\"role\": \"user\", \"content\": \"a\"}, 3]", &err), -1);
    CHECK_EQ_STR(err.msg, "messages[1]: expected an object");
    CHECK_EQ_INT(render_err("[{\"role\": \"user\"}]", &err), -1);
    CHECK_EQ_STR(err.msg, "messages[0].content: missing");
    CHECK_EQ_INT(render_err("[{\"role\": \"user\", \"content\": null}]", &err), -1);
    CHECK_EQ_STR(err.msg, "messages[0].content: expected a string");
    CHECK_EQ_INT(render_err("[{\"content\": \"x\"}]", &err), -1);
    CHECK_EQ_STR(err.msg, "messages[0].role: missing");
    CHECK_EQ_INT(render_err("[{\"role\": \"tool\", \"content\": \"x\"}]", &err), -1);
    CHECK(strstr(err.msg, "messages[0].role: unknown role 'tool'") != NULL);
    CHECK_EQ_INT(render_err("[{\"role\": \"us\\u0000er\", \"content\": \"x\"}]", &err), -1);
    CHECK(strstr(err.msg, "NUL") != NULL);
    CHECK_EQ_INT(render_err("[{\"role\": \"user\", \"content\": \"x\", \"reasoning_content\": 1}]", &err), -1);
    CHECK(strstr(err.msg, "reasoning_content") != NULL);
    CHECK_EQ_INT(render_err("[{\"role\": \"assistant\", \"content\": \"x\", \"reasoning_content\": null}]", &err), 0);

    /* the renderer refuses an empty conversation too */
    cpt_chat_template t;
    cpt_chat_template_by_name("chatml", &t, &err);
    cpt_chat_rendered r;
    CHECK_EQ_INT(cpt_chat_render_text(&t, NULL, 0, NULL, &r, &err), -1);
    CHECK(strstr(err.msg, "no messages") != NULL);
}

/* Content with a NUL byte and invalid UTF-8 renders byte for byte; llama3 trims only Python whitespace. */
static void test_bytes(void) {
    cpt_err err = {{0}};
    cpt_chat_template t;
    cpt_chat_template_by_name("chatml", &t, &err);
    cpt_chat_message m[1] = {{"user", "a\0b\xff", 4, NULL, 0}};
    cpt_chat_rendered r;
    CHECK_EQ_INT(cpt_chat_render_text(&t, m, 1, NULL, &r, &err), 0);
    const char want[] = "<|im_start|>user\na\0b\xff<|im_end|>\n";
    CHECK_EQ_INT(r.text_len, sizeof want - 1);
    CHECK(r.text_len == sizeof want - 1 && memcmp(r.text, want, r.text_len) == 0);
    cpt_chat_rendered_free(&r);

    cpt_chat_template_by_name("llama3", &t, &err);
    /* U+3000, U+00A0 and U+001F are Python whitespace; U+200B (zero width space) is not; \xff is kept. */
    cpt_chat_message l[2] = {{"user", "\xe3\x80\x80\xc2\xa0\x1fhi\xe2\x80\x8b \n", 13, NULL, 0},
                             {"assistant", " \xff ", 3, NULL, 0}};
    cpt_chat_options gen = {1, 0};
    CHECK_EQ_INT(cpt_chat_render_text(&t, l, 2, &gen, &r, &err), 0);
    CHECK_EQ_STR(r.text, "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi\xe2\x80\x8b<|eot_id|>"
                         "<|start_header_id|>assistant<|end_header_id|>\n\n\xff<|eot_id|>"
                         "<|start_header_id|>assistant<|end_header_id|>\n\n");
    cpt_chat_rendered_free(&r);
}

int main(void) {
    json_error_t je;
    json_t *templates = json_load_file(CHAT_FIXTURE_DIR "/templates.json", 0, &je);
    CHECK_MSG(templates != NULL, "%s", je.text);
    int n = check_fixture_texts(CHAT_FIXTURE_DIR "/cases.jsonl", templates);
    CHECK_MSG(n >= 400, "only %d fixture cases compared", n);
    printf("fixture texts compared: %d\n", n);
    int nt = check_fixture_texts(CHAT_FIXTURE_DIR "/tiny.jsonl", templates);
    CHECK_MSG(nt >= 80, "only %d tiny fixture cases compared", nt);
    test_detect(templates);
    test_message_errors();
    test_bytes();
    json_decref(templates);
    return check_summary("test_chat_template");
}
