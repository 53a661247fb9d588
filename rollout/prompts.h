/* Prompt lists for `cpt generate`: "1,2,3" id lists and JSONL files of {"prompt": TEXT} or {"prompt_ids": [ids]}
 * lines. Outside input: every error names the item (file:line, token index); never a crash. */
#ifndef CPT_ROLLOUT_PROMPTS_H
#define CPT_ROLLOUT_PROMPTS_H

#include <stddef.h>
#include <stdint.h>

#include "core/tokenizer.h"

typedef struct cpt_prompt_list {
    int n, cap;
    int32_t **ids;
    int *len;
} cpt_prompt_list;

void cpt_prompt_list_free(cpt_prompt_list *pl);
int cpt_prompt_list_add(cpt_prompt_list *pl, const int32_t *ids, int n, cpt_err *err);
/* Appends the prompt "1,2,3" (non-negative ids, at least one); where names it in errors. */
int cpt_prompt_list_add_ids(cpt_prompt_list *pl, const char *s, const char *where, cpt_err *err);
/* Appends text encoded with tok (tok NULL: an error saying a tokenizer is needed). */
int cpt_prompt_list_add_text(cpt_prompt_list *pl, const cpt_tokenizer *tok, const char *text, size_t len,
                             const char *where, cpt_err *err);
/* Appends every prompt of a JSONL text (blank lines skipped; at least one prompt). name: for messages. */
int cpt_prompt_list_parse_jsonl(cpt_prompt_list *pl, const char *text, size_t len, const char *name,
                                const cpt_tokenizer *tok, cpt_err *err);

#endif
