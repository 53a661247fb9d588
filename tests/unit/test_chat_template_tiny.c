/* The committed tiny tokenizer (examples/tiny-tokenizer, made by scripts/make_tiny_tokenizer.py): cpt loads it,
 * encodes and decodes like transformers (tiny.jsonl), renders its ChatML template like transformers, and the
 * script regenerates it byte for byte. Then `cpt chat-template` end to end: output lines, and errors that name
 * the input line. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/chat_template.h"
#include "core/fs.h"
#include "core/tokenizer.h"
#include "tests/check.h"

#define TINY "examples/tiny-tokenizer"
#define FIXTURE "tests/fixtures/chat_template/tiny.jsonl"

static int ids_equal(const int32_t *ids, size_t n, const json_t *want) {
    if (n != json_array_size(want)) return 0;
    for (size_t i = 0; i < n; i++)
        if (ids[i] != json_integer_value(json_array_get(want, i))) return 0;
    return 1;
}

static int str_equal(const char *s, size_t n, const json_t *want) {
    return json_is_string(want) && n == json_string_length(want) && memcmp(s, json_string_value(want), n) == 0;
}

static void test_tokenizer_and_chat(const cpt_tokenizer *tok, json_t *records) {
    cpt_err err = {{0}};
    CHECK_EQ_INT(cpt_tokenizer_vocab_size(tok), 709);
    CHECK_EQ_INT(cpt_tokenizer_token_id(tok, "<|endoftext|>"), 706);
    CHECK_EQ_INT(cpt_tokenizer_token_id(tok, "<|im_start|>"), 707);
    CHECK_EQ_INT(cpt_tokenizer_token_id(tok, "<|im_end|>"), 708);
    CHECK(cpt_tokenizer_is_special(tok, 708));
    CHECK_EQ_INT(cpt_tokenizer_eos_id(tok), 708);
    CHECK_EQ_INT(cpt_tokenizer_pad_id(tok), 706);
    cpt_chat_template tpl;
    CHECK_EQ_INT(cpt_chat_template_load(TINY, "auto", &tpl, &err), 0);
    CHECK_EQ_INT(tpl.family, CPT_CHAT_CHATML);
    CHECK_EQ_INT(cpt_chat_template_check(&tpl, tok, &err), 0);
    cpt_chat_template llama;
    cpt_chat_template_by_name("llama3", &llama, &err);
    CHECK_EQ_INT(cpt_chat_template_check(&llama, tok, &err), -1);
    size_t i;
    json_t *rec;
    int plain = 0, chats = 0;
    json_array_foreach(records, i, rec) {
        if (!json_object_get(rec, "template")) { /* plain encode / decode */
            json_t *text = json_object_get(rec, "text");
            int32_t *ids = NULL;
            long n = cpt_tokenizer_encode(tok, json_string_value(text), json_string_length(text), &ids, &err);
            CHECK_MSG(n >= 0 && ids_equal(ids, (size_t)n, json_object_get(rec, "ids")),
                      "tiny.jsonl:%zu: ids of \"%s\" differ from transformers'", i + 1, json_string_value(text));
            size_t dl = 0;
            char *d = n >= 0 ? cpt_tokenizer_decode(tok, ids, (size_t)n, 0, &dl, &err) : NULL;
            CHECK_MSG(d && str_equal(d, dl, json_object_get(rec, "decoded")), "tiny.jsonl:%zu: decode differs",
                      i + 1);
            free(d);
            d = n >= 0 ? cpt_tokenizer_decode(tok, ids, (size_t)n, 1, &dl, &err) : NULL;
            CHECK_MSG(d && str_equal(d, dl, json_object_get(rec, "decoded_skip_special")),
                      "tiny.jsonl:%zu: decode (skip special) differs", i + 1);
            free(d);
            free(ids);
            plain++;
            continue;
        }
        cpt_chat_message *msgs = NULL;
        size_t n = 0;
        CHECK_EQ_INT(cpt_chat_messages_from_json(json_object_get(rec, "messages"), &msgs, &n, &err), 0);
        cpt_chat_options opt = {json_is_true(json_object_get(rec, "add_generation_prompt")), 0};
        cpt_chat_rendered r;
        int rc = cpt_chat_render(&tpl, tok, msgs, n, &opt, &r, &err);
        CHECK_MSG(rc == 0, "tiny.jsonl:%zu: %s", i + 1, err.msg);
        if (rc == 0) {
            CHECK_MSG(str_equal(r.text, r.text_len, json_object_get(rec, "text")), "tiny.jsonl:%zu: text", i + 1);
            CHECK_MSG(ids_equal(r.ids, r.n_ids, json_object_get(rec, "ids")), "tiny.jsonl:%zu: ids", i + 1);
            /* round trip: the ids decode back to the text (NFC-normalized, as transformers' decode shows) */
            size_t dl = 0;
            char *d = cpt_tokenizer_decode(tok, r.ids, r.n_ids, 0, &dl, &err);
            int32_t *again = NULL;
            long na = d ? cpt_tokenizer_encode(tok, d, dl, &again, &err) : -1;
            CHECK_MSG(na >= 0 && (size_t)na == r.n_ids && !memcmp(again, r.ids, r.n_ids * sizeof *again),
                      "tiny.jsonl:%zu: encode(decode(ids)) != ids", i + 1);
            free(again);
            free(d);
            chats++;
        }
        cpt_chat_rendered_free(&r);
        free(msgs);
    }
    cpt_chat_template_free(&tpl);
    printf("tiny tokenizer: %d plain strings, %d chat renderings identical to transformers\n", plain, chats);
    CHECK_EQ_INT(plain, 26);
    CHECK_EQ_INT(chats, 80);
}

/* The script regenerates the committed files byte for byte. */
static void test_script_reproducible(void) {
    char dir[] = "/tmp/cpt-tiny-tok-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "python3 scripts/make_tiny_tokenizer.py %s > /dev/null", dir);
    CHECK_EQ_INT(system(cmd), 0);
    const char *files[] = {"tokenizer.json", "tokenizer_config.json"};
    for (int k = 0; k < 2; k++) {
        char a[600], b[600];
        snprintf(a, sizeof a, "%s/%s", dir, files[k]);
        snprintf(b, sizeof b, TINY "/%s", files[k]);
        size_t la = 0, lb = 0;
        char *da = cpt_read_file(a, &la, NULL), *db = cpt_read_file(b, &lb, NULL);
        CHECK_MSG(da && db && la == lb && !memcmp(da, db, la), "%s differs from what the script makes", b);
        free(da);
        free(db);
    }
    cpt_remove_tree(dir, NULL);
}

/* Runs cpt chat-template on input; returns the exit status; out and err get stdout and stderr. */
static int run_cli(const char *dir, const char *args, const char *input, char **out, char **errout) {
    char in_path[600], out_path[600], err_path[600], cmd[2400];
    snprintf(in_path, sizeof in_path, "%s/in.jsonl", dir);
    snprintf(out_path, sizeof out_path, "%s/out.jsonl", dir);
    snprintf(err_path, sizeof err_path, "%s/err.txt", dir);
    cpt_write_file_atomic(in_path, input, strlen(input), NULL);
    const char *build = getenv("CPT_BUILD");
    snprintf(cmd, sizeof cmd, "%s/cpt chat-template %s < %s > %s 2> %s", build ? build : "build", args, in_path,
             out_path, err_path);
    int st = system(cmd);
    *out = cpt_read_file(out_path, NULL, NULL);
    *errout = cpt_read_file(err_path, NULL, NULL);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void test_cli(json_t *records, const cpt_tokenizer *tok, const cpt_chat_template *tpl) {
    char dir[] = "/tmp/cpt-chat-cli-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    /* three conversations, with and without the generation prompt; the expected lines come from the fixture */
    for (int gen = 0; gen < 2; gen++) {
        char *input = NULL;
        size_t ilen = 0;
        FILE *in = open_memstream(&input, &ilen);
        json_t *want[3];
        int k = 0;
        size_t i;
        json_t *rec;
        json_array_foreach(records, i, rec) {
            json_t *conv = json_object_get(rec, "conv");
            if (!json_object_get(rec, "template") || json_is_true(json_object_get(rec, "add_generation_prompt")) != gen)
                continue;
            json_int_t c = json_integer_value(conv);
            if (c != 3 && c != 5 && c != 33) continue;
            json_t *line = json_pack("{s:O}", "messages", json_object_get(rec, "messages"));
            char *s = json_dumps(line, JSON_COMPACT);
            fprintf(in, "%s\n%s", s, k == 0 ? "\n" : ""); /* a blank line is skipped */
            free(s);
            json_decref(line);
            want[k++] = rec;
        }
        fclose(in);
        CHECK_EQ_INT(k, 3);
        char *out = NULL, *err = NULL;
        int st = run_cli(dir, gen ? "--tokenizer " TINY " --add-generation-prompt" : "--tokenizer=" TINY, input,
                         &out, &err);
        CHECK_MSG(st == 0, "cpt chat-template exited %d: %s", st, err ? err : "");
        int lines = 0;
        for (char *p = out, *nl; p && *p && lines < 3; p = nl + 1, lines++) {
            nl = strchr(p, '\n');
            if (!nl) break;
            json_t *o = json_loadb(p, (size_t)(nl - p), 0, NULL);
            CHECK(o != NULL);
            if (!o) continue;
            CHECK(json_equal(json_object_get(o, "text"), json_object_get(want[lines], "text")));
            CHECK(json_equal(json_object_get(o, "ids"), json_object_get(want[lines], "ids")));
            /* the mask equals the library's */
            json_t *mask = json_object_get(o, "assistant_mask");
            cpt_chat_message *msgs = NULL;
            size_t n = 0;
            cpt_chat_rendered r = {0};
            cpt_chat_options opt = {gen, 0};
            cpt_err e = {{0}};
            CHECK_EQ_INT(cpt_chat_messages_from_json(json_object_get(want[lines], "messages"), &msgs, &n, &e), 0);
            CHECK_EQ_INT(cpt_chat_render(tpl, tok, msgs, n, &opt, &r, &e), 0);
            CHECK_EQ_INT(json_array_size(mask), r.n_ids);
            for (size_t j = 0; j < json_array_size(mask) && j < r.n_ids; j++)
                CHECK_EQ_INT(json_integer_value(json_array_get(mask, j)), r.assistant_mask[j]);
            cpt_chat_rendered_free(&r);
            free(msgs);
            json_decref(o);
        }
        CHECK_EQ_INT(lines, 3);
        free(out);
        free(err);
        free(input);
    }
    /* errors name the line */
    const char *good = "{\"messages\": [{\"role\": \"user\", \"content\": \"What is 1 + 1?\"}]}\n";
    char input[512], *out = NULL, *err = NULL;
    snprintf(input, sizeof input, "%s\n{\"messages\": [{\"role\": \"user\"}]}\n%s", good, good);
    CHECK(run_cli(dir, "--tokenizer " TINY, input, &out, &err) != 0);
    CHECK_MSG(err && strstr(err, "stdin:3: messages[0].content: missing"), "stderr: %s", err ? err : "");
    free(out);
    free(err);
    snprintf(input, sizeof input, "%s{\"messages\": [}\n", good);
    CHECK(run_cli(dir, "--tokenizer " TINY, input, &out, &err) != 0);
    CHECK_MSG(err && strstr(err, "stdin:2:") && strstr(err, "invalid JSON"), "stderr: %s", err ? err : "");
    free(out);
    free(err);
    CHECK(run_cli(dir, "--tokenizer " TINY, "[1]\n", &out, &err) != 0);
    CHECK_MSG(err && strstr(err, "stdin:1: expected an object"), "stderr: %s", err ? err : "");
    free(out);
    free(err);
    CHECK(run_cli(dir, "--tokenizer " TINY " --template vicuna", good, &out, &err) != 0);
    CHECK_MSG(err && strstr(err, "unknown template 'vicuna'"), "stderr: %s", err ? err : "");
    free(out);
    free(err);
    CHECK(run_cli(dir, "--tokenizer " TINY " --template llama3", good, &out, &err) != 0);
    CHECK_MSG(err && strstr(err, "has no special token <|begin_of_text|>"), "stderr: %s", err ? err : "");
    CHECK(out && *out == 0); /* nothing written */
    free(out);
    free(err);
    CHECK_EQ_INT(run_cli(dir, "", good, &out, &err), 2);
    CHECK(err && strstr(err, "--tokenizer PATH is required"));
    free(out);
    free(err);
    CHECK(run_cli(dir, "--tokenizer /nonexistent/tok", good, &out, &err) != 0);
    CHECK(err && strstr(err, "/nonexistent/tok"));
    free(out);
    free(err);
    cpt_remove_tree(dir, NULL);
}

int main(void) {
    cpt_err err = {{0}};
    json_t *records = json_array();
    FILE *f = fopen(FIXTURE, "r");
    CHECK(f != NULL);
    char *line = NULL;
    size_t cap = 0;
    while (f && getline(&line, &cap, f) > 0) {
        json_t *rec = json_loads(line, 0, NULL);
        CHECK(rec != NULL);
        if (rec) json_array_append_new(records, rec);
    }
    free(line);
    if (f) fclose(f);
    cpt_tokenizer *tok = cpt_tokenizer_load(TINY, &err);
    CHECK_MSG(tok != NULL, "%s", err.msg);
    if (tok) test_tokenizer_and_chat(tok, records);
    test_script_reproducible();
    cpt_chat_template tpl;
    CHECK_EQ_INT(cpt_chat_template_load(TINY, NULL, &tpl, &err), 0);
    if (tok) test_cli(records, tok, &tpl);
    cpt_chat_template_free(&tpl);
    cpt_tokenizer_free(tok);
    json_decref(records);
    return check_summary("test_chat_template_tiny");
}
