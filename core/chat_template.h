/* Chat templates: a conversation (system / user / assistant messages) rendered to the exact text that
 * transformers' apply_chat_template gives for the model's template, then to token ids with an assistant-token
 * mask for SFT.
 *
 * Families (docs/chat-templates.md):
 *   chatml  <|im_start|>ROLE\nCONTENT<|im_end|>\n per message; optionally a default system prompt when the first
 *           message is not a system message (Qwen2.5's template), detected from the template text.
 *   qwen3   Qwen3's template without tools: ChatML, the first system message first, and <think> handling:
 *           reasoning (reasoning_content, or the text before </think>) is kept only for assistant messages after
 *           the last user query, and the last assistant message always gets a <think>...</think> block.
 *   llama3  Meta's Llama-3 template: <|begin_of_text|>, then <|start_header_id|>ROLE<|end_header_id|>\n\n
 *           CONTENT(trimmed as Python's str.strip())<|eot_id|> per message.
 * Not jinja: the families are implemented in C and checked against transformers' output (fixture). "auto" reads
 * the chat_template from tokenizer_config.json (or chat_template.jinja) and tells the family from its text.
 *
 * The assistant-token mask is 1 on the tokens of what the assistant writes (everything after the assistant
 * header: content, think block, and the end token <|im_end|> / <|eot_id|>), 0 elsewhere. A token that straddles
 * a boundary counts as assistant. Ids are built segment by segment, cut only next to special tokens (which the
 * tokenizer matches before anything else), so they equal the encoding of the whole text. */
#ifndef CPT_CORE_CHAT_TEMPLATE_H
#define CPT_CORE_CHAT_TEMPLATE_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "core/tokenizer.h"

typedef enum { CPT_CHAT_CHATML = 1, CPT_CHAT_QWEN3 = 2, CPT_CHAT_LLAMA3 = 3 } cpt_chat_family;

typedef struct cpt_chat_template {
    cpt_chat_family family;
    char *default_system; /* chatml: system prompt used when messages[0] is not a system message; NULL if none */
} cpt_chat_template;

typedef struct cpt_chat_message {
    const char *role;      /* "system", "user" or "assistant" */
    const char *content;   /* UTF-8, content_len bytes (NULs allowed) */
    size_t content_len;
    const char *reasoning; /* qwen3 only: reasoning_content, or NULL when absent */
    size_t reasoning_len;
} cpt_chat_message;

typedef struct cpt_chat_options {
    int add_generation_prompt; /* append the assistant header, ready for generation */
    int disable_thinking;      /* qwen3: with the generation prompt, add an empty think block
                                  (transformers' enable_thinking=False) */
} cpt_chat_options;

typedef struct cpt_chat_rendered {
    char *text;             /* NUL-terminated; text_len bytes */
    size_t text_len;
    int32_t *ids;           /* NULL after cpt_chat_render_text */
    uint8_t *assistant_mask;
    size_t n_ids;
} cpt_chat_rendered;

/* name: "chatml", "qwen3" or "llama3". */
int cpt_chat_template_by_name(const char *name, cpt_chat_template *tpl, cpt_err *err);
/* Tells the family from a jinja chat_template text; an unknown or unsupported template is an error. */
int cpt_chat_template_detect(const char *jinja, cpt_chat_template *tpl, cpt_err *err);
/* name NULL or "auto": detect from the chat template beside the tokenizer (tokenizer_path is a tokenizer folder
 * or its tokenizer.json; the template is read from tokenizer_config.json's chat_template, else
 * chat_template.jinja). Otherwise as cpt_chat_template_by_name. */
int cpt_chat_template_load(const char *tokenizer_path, const char *name, cpt_chat_template *tpl, cpt_err *err);
void cpt_chat_template_free(cpt_chat_template *tpl);
const char *cpt_chat_family_name(cpt_chat_family family);

/* Checks that the tokenizer has the template's special tokens (<|im_start|>, <|im_end|> / Llama-3's four) as
 * special tokens: without them the template's markers are encoded as plain text, a sign of the wrong template.
 * cpt_chat_render itself works either way (it cuts only next to tokens the tokenizer matches as special). */
int cpt_chat_template_check(const cpt_chat_template *tpl, const cpt_tokenizer *tok, cpt_err *err);

/* Renders the text only. */
int cpt_chat_render_text(const cpt_chat_template *tpl, const cpt_chat_message *msgs, size_t n,
                         const cpt_chat_options *opt, cpt_chat_rendered *out, cpt_err *err);
/* Renders text, ids and assistant mask. */
int cpt_chat_render(const cpt_chat_template *tpl, const cpt_tokenizer *tok, const cpt_chat_message *msgs, size_t n,
                    const cpt_chat_options *opt, cpt_chat_rendered *out, cpt_err *err);
void cpt_chat_rendered_free(cpt_chat_rendered *r);

/* Reads a JSON array of {"role", "content"[, "reasoning_content"]} objects. The strings are borrowed from the
 * JSON (keep it alive); *msgs is malloc'd (free it). Errors name the field: "messages[2].content: ...". */
int cpt_chat_messages_from_json(const json_t *messages, cpt_chat_message **msgs, size_t *n, cpt_err *err);

#endif
