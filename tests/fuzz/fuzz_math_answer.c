/* Fuzzes math answer extraction and equivalence. Input: completion bytes, then optionally a NUL byte and a gold
 * answer. Checks: no crash or overread; extraction of what was extracted is stable enough to compare; equivalence
 * is reflexive and symmetric. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "reward/math_answer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *text = (const char *)data;
    const uint8_t *nul = memchr(data, 0, size);
    size_t clen = nul ? (size_t)(nul - data) : size;
    char *ans = cpt_math_extract_answer(text, clen);
    char *gold = NULL;
    if (nul) {
        size_t glen = size - clen - 1;
        gold = malloc(glen + 1);
        if (!gold) abort();
        memcpy(gold, nul + 1, glen);
        gold[glen] = 0;
        /* a gold with an embedded NUL is just shorter */
        (void)cpt_math_grade(text, clen, gold, NULL);
    }
    if (ans) {
        if (strlen(ans) > clen) abort();
        if (!cpt_math_answers_equal(ans, ans)) abort(); /* reflexive */
        char *n = cpt_math_normalize(ans);
        free(n);
        if (gold) {
            char *g = cpt_math_gold_answer(gold);
            if (g && cpt_math_answers_equal(ans, g) != cpt_math_answers_equal(g, ans)) abort(); /* symmetric */
            free(g);
        }
    }
    free(ans);
    free(gold);
    return 0;
}
