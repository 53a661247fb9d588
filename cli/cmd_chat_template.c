/* cpt chat-template --tokenizer PATH [--template NAME] [--add-generation-prompt] [--no-thinking]
 * JSONL {"messages": [...]} on stdin -> {"text": ..., "ids": [...], "assistant_mask": [...]} lines on stdout. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "core/chat_template.h"
#include "core/tokenizer.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: cpt chat-template --tokenizer PATH [--template auto|chatml|qwen3|llama3] "
            "[--add-generation-prompt] [--no-thinking]\n"
            "  reads JSONL lines {\"messages\": [{\"role\": ..., \"content\": ...}, ...]} on stdin and writes\n"
            "  {\"text\": ..., \"ids\": [...], \"assistant_mask\": [...]} lines on stdout.\n"
            "  --template       template family (default auto: from the tokenizer's chat_template)\n"
            "  --no-thinking    qwen3: empty think block after the generation prompt (enable_thinking=False)\n");
}

static int is_blank(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r' && s[i] != '\n') return 0;
    return 1;
}

/* Renders one JSONL line and writes its output line; errors go to err without the line prefix. */
static int process_line(const cpt_chat_template *tpl, const cpt_tokenizer *tok, const cpt_chat_options *opt,
                        const char *line, size_t len, FILE *out, cpt_err *err) {
    json_error_t je;
    json_t *in = json_loadb(line, len, JSON_ALLOW_NUL, &je);
    if (!in) return cpt_errf(err, "column %d: invalid JSON: %s", je.column, je.text);
    int rc = -1;
    cpt_chat_message *msgs = NULL;
    size_t n = 0;
    cpt_chat_rendered r = {0};
    json_t *o = NULL;
    if (!json_is_object(in)) {
        cpt_errf(err, "expected an object {\"messages\": [...]}");
        goto done;
    }
    json_t *messages = json_object_get(in, "messages");
    if (!messages) {
        cpt_errf(err, "messages: missing");
        goto done;
    }
    if (cpt_chat_messages_from_json(messages, &msgs, &n, err)) goto done;
    if (cpt_chat_render(tpl, tok, msgs, n, opt, &r, err)) goto done;
    o = json_object();
    json_t *ids = json_array(), *mask = json_array();
    json_object_set_new(o, "text", json_stringn(r.text, r.text_len));
    json_object_set_new(o, "ids", ids);
    json_object_set_new(o, "assistant_mask", mask);
    for (size_t i = 0; i < r.n_ids; i++) {
        json_array_append_new(ids, json_integer(r.ids[i]));
        json_array_append_new(mask, json_integer(r.assistant_mask[i]));
    }
    char *s = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
    if (!s) {
        cpt_errf(err, "out of memory writing the output");
        goto done;
    }
    fputs(s, out);
    fputc('\n', out);
    free(s);
    rc = 0;
done:
    json_decref(o);
    json_decref(in);
    free(msgs);
    cpt_chat_rendered_free(&r);
    return rc;
}

int cmd_chat_template(int argc, char **argv) {
    const char *tok_path = NULL, *name = "auto";
    cpt_chat_options opt = {0, 0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--tokenizer") == 0 && i + 1 < argc) tok_path = argv[++i];
        else if (strncmp(a, "--tokenizer=", 12) == 0) tok_path = a + 12;
        else if (strcmp(a, "--template") == 0 && i + 1 < argc) name = argv[++i];
        else if (strncmp(a, "--template=", 11) == 0) name = a + 11;
        else if (strcmp(a, "--add-generation-prompt") == 0) opt.add_generation_prompt = 1;
        else if (strcmp(a, "--no-thinking") == 0) opt.disable_thinking = 1;
        else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "cpt chat-template: unknown or incomplete argument '%s'\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (!tok_path) {
        fprintf(stderr, "cpt chat-template: --tokenizer PATH is required\n");
        usage(stderr);
        return 2;
    }
    cpt_err err = {{0}};
    cpt_chat_template tpl;
    if (cpt_chat_template_load(tok_path, name, &tpl, &err)) {
        fprintf(stderr, "cpt chat-template: %s\n", err.msg);
        return 1;
    }
    cpt_tokenizer *tok = cpt_tokenizer_load(tok_path, &err);
    if (!tok) {
        fprintf(stderr, "cpt chat-template: %s\n", err.msg);
        cpt_chat_template_free(&tpl);
        return 1;
    }
    if (cpt_chat_template_check(&tpl, tok, &err)) {
        fprintf(stderr, "cpt chat-template: %s: %s\n", tok_path, err.msg);
        cpt_tokenizer_free(tok);
        cpt_chat_template_free(&tpl);
        return 1;
    }
    int status = 0;
    char *line = NULL;
    size_t cap = 0, lineno = 0;
    ssize_t len;
    while ((len = getline(&line, &cap, stdin)) >= 0) {
        lineno++;
        if (is_blank(line, (size_t)len)) continue;
        if (process_line(&tpl, tok, &opt, line, (size_t)len, stdout, &err)) {
            fprintf(stderr, "cpt chat-template: stdin:%zu: %s\n", lineno, err.msg);
            status = 1;
            break;
        }
    }
    if (status == 0 && ferror(stdin)) {
        fprintf(stderr, "cpt chat-template: reading stdin failed\n");
        status = 1;
    }
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "cpt chat-template: writing stdout failed\n");
        status = 1;
    }
    free(line);
    cpt_tokenizer_free(tok);
    cpt_chat_template_free(&tpl);
    return status;
}
