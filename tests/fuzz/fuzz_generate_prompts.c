/* Fuzzes the prompt inputs of `cpt generate` (rollout/prompts.h): JSONL prompt files and "1,2,3" id lists. Any
 * bytes must parse or be refused with a message, never crash or leak; what parses holds only valid ids. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rollout/prompts.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    cpt_err err;
    cpt_prompt_list pl = {0};
    if (cpt_prompt_list_parse_jsonl(&pl, (const char *)data, size, "fuzz.jsonl", NULL, &err) == 0 && pl.n < 1) abort();
    for (int i = 0; i < pl.n; i++)
        for (int k = 0; k < pl.len[i]; k++)
            if (pl.ids[i][k] < 0) abort();
    cpt_prompt_list_free(&pl);
    char *s = malloc(size + 1);
    if (!s) return 0;
    memcpy(s, data, size);
    s[size] = 0;
    if (cpt_prompt_list_add_ids(&pl, s, "--prompt-ids", &err) == 0 && (pl.n != 1 || pl.len[0] < 1)) abort();
    cpt_prompt_list_free(&pl);
    free(s);
    return 0;
}
