/* Fuzzes chat templates with arbitrary bytes.
 *
 * Input "T" + bytes: the bytes are a jinja chat_template text; detection must succeed or fail cleanly.
 * Any other input is a JSONL line {"messages": [...]}: reading the messages must fail cleanly or give messages
 * that every family renders; with the tiny tokenizer (examples/tiny-tokenizer, loaded once) the ids built segment
 * by segment must equal the encoding of the whole text, and the mask must have one entry per id. */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/chat_template.h"
#include "core/tokenizer.h"
#include "fuzz_tokenizer_once.h"

static cpt_tokenizer *load_once(void) {
    static const char *const paths[] = {"examples/tiny-tokenizer"};
    return fuzz_tokenizer_once("fuzz_chat_template", paths, 1);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    cpt_err err;
    if (size >= 1 && data[0] == 'T') {
        char *text = malloc(size);
        if (!text) return 0;
        memcpy(text, data + 1, size - 1);
        text[size - 1] = 0;
        cpt_chat_template tpl;
        if (cpt_chat_template_detect(text, &tpl, &err) == 0) cpt_chat_template_free(&tpl);
        free(text);
        return 0;
    }
    const cpt_tokenizer *tok = load_once();
    json_t *line = json_loadb((const char *)data, size, JSON_ALLOW_NUL, NULL);
    if (!line) return 0;
    cpt_chat_message *msgs = NULL;
    size_t n = 0;
    if (cpt_chat_messages_from_json(json_object_get(line, "messages"), &msgs, &n, &err) == 0) {
        static const char *const names[] = {"chatml", "qwen3", "llama3"};
        for (int f = 0; f < 3; f++) {
            cpt_chat_template tpl;
            if (cpt_chat_template_by_name(names[f], &tpl, &err)) abort();
            for (int o = 0; o < 4; o++) {
                cpt_chat_options opt = {o & 1, (o >> 1) & 1};
                cpt_chat_rendered r;
                if (cpt_chat_render_text(&tpl, msgs, n, &opt, &r, &err)) abort(); /* valid messages render */
                if (strlen(r.text) > r.text_len) abort();
                cpt_chat_rendered ri;
                if (cpt_chat_render(&tpl, tok, msgs, n, &opt, &ri, &err) == 0) {
                    if (ri.text_len != r.text_len || memcmp(ri.text, r.text, r.text_len)) abort();
                    int32_t *whole = NULL;
                    long nw = cpt_tokenizer_encode(tok, ri.text, ri.text_len, &whole, &err);
                    if (nw != (long)ri.n_ids || (nw > 0 && memcmp(whole, ri.ids, (size_t)nw * sizeof *whole))) abort();
                    for (size_t i = 0; i < ri.n_ids; i++)
                        if (ri.assistant_mask[i] > 1) abort();
                    free(whole);
                    cpt_chat_rendered_free(&ri);
                }
                cpt_chat_rendered_free(&r);
            }
            cpt_chat_template_free(&tpl);
        }
        free(msgs);
    }
    json_decref(line);
    return 0;
}
