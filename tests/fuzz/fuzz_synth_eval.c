/* Fuzzes the exact expression evaluator of core/synth (what a countdown check may run on model output): any
 * text must evaluate or give an error, never crash or overflow. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/synth.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *s = malloc(size + 1);
    if (!s) return 0;
    memcpy(s, data, size);
    s[size] = '\0';
    static const int numbers[] = {25, 50, 3, 7};
    int64_t num, den;
    cpt_err err;
    if (cpt_synth_eval(s, NULL, 0, &num, &den, &err) == 0 && den <= 0) abort();
    if (cpt_synth_eval(s, numbers, 4, &num, &den, &err) == 0 && den <= 0) abort();
    free(s);
    return 0;
}
