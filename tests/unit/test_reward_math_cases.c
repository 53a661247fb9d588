/* The math reward's shared cases: tests/fixtures/math_reward/cases.jsonl holds completions, gold answers and the
 * score and answer_found that cpt's math reward gives them; bench/cpt_math_reward.py (the TRL side-by-side run's
 * reward) is checked against the same file by tests/e2e/test_trl_reward.sh, so both grade alike. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reward/math_answer.h"
#include "tests/check.h"

#define CASES "tests/fixtures/math_reward/cases.jsonl"

int main(void) {
    FILE *f = fopen(CASES, "r");
    CHECK_MSG(f != NULL, "cannot open %s", CASES);
    if (!f) return check_summary("test_reward_math_cases");
    char *line = NULL;
    size_t cap = 0;
    int n = 0, correct = 0, found_n = 0, lineno = 0;
    while (getline(&line, &cap, f) > 0) {
        lineno++;
        json_error_t je;
        json_t *o = json_loads(line, 0, &je);
        CHECK_MSG(o != NULL, "%s:%d: %s", CASES, lineno, je.text);
        if (!o) continue;
        const char *comp = json_string_value(json_object_get(o, "completion"));
        const char *gold = json_string_value(json_object_get(o, "answer"));
        json_t *ws = json_object_get(o, "score"), *wf = json_object_get(o, "found");
        CHECK_MSG(comp && gold && json_is_integer(ws) && json_is_integer(wf), "%s:%d: fields", CASES, lineno);
        if (comp && gold && ws && wf) {
            int found = -1;
            int got = cpt_math_grade(comp, strlen(comp), gold, &found);
            CHECK_MSG(got == json_integer_value(ws) && found == json_integer_value(wf),
                      "%s:%d: completion \"%s\" gold \"%s\": score %d found %d, the file says %lld %lld", CASES,
                      lineno, comp, gold, got, found, json_integer_value(ws), json_integer_value(wf));
            n++;
            correct += got;
            found_n += found;
        }
        json_decref(o);
    }
    free(line);
    fclose(f);
    /* the file must exercise both outcomes and the no-answer case */
    CHECK_MSG(n >= 900, "%d cases", n);
    CHECK_MSG(correct >= 200 && n - found_n >= 100 && found_n - correct >= 100,
              "%d correct, %d without an answer, %d wrong of %d", correct, n - found_n, found_n - correct, n);
    printf("test_reward_math_cases: %d cases, %d correct, %d without an answer\n", n, correct, n - found_n);
    return check_summary("test_reward_math_cases");
}
