/* Fuzzes the JSONL dataset reader: any bytes, in every format mode with and without skip_bad_lines, must give
 * records whose strings are readable, or an error that names the file; never a crash. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/dataset.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    for (int f = CPT_DATA_AUTO; f <= CPT_DATA_RL_PROMPT; f++) {
        for (int skip = 0; skip < 2; skip++) {
            cpt_dataset_opts o = {.format = (cpt_data_format)f, .skip_bad_lines = skip};
            cpt_err err;
            cpt_dataset *ds = cpt_dataset_load_text((const char *)data, size, "fuzz.jsonl", &o, &err);
            if (!ds) {
                if (!strstr(err.msg, "fuzz.jsonl")) abort();
                continue;
            }
            size_t total = 0;
            for (size_t i = 0; i < cpt_dataset_count(ds); i++) {
                const cpt_record *r = cpt_dataset_get(ds, i);
                if (r->prompt) total += strlen(r->prompt);
                if (r->completion) total += strlen(r->completion);
                if (r->chosen) total += strlen(r->chosen) + strlen(r->rejected);
                if (r->answer) total += strlen(r->answer) + strlen(r->extra);
                for (size_t m = 0; m < r->n_messages; m++)
                    total += strlen(r->messages[m].role) + strlen(r->messages[m].content);
                if (r->line < 1) abort();
            }
            if (total > 2 * size + 64 * cpt_dataset_count(ds) + 64) abort(); /* records come from the input */
            cpt_dataset_free(ds);
        }
    }
    return 0;
}
