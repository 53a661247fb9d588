/* Fuzzes the calculator's expression evaluator and the countdown tool in-process (no sandbox, no fork). Input: the
 * first byte picks how many of the fixed numbers the countdown is given, the rest is the expression. Checks: no
 * crash, no overread, a failure always says why, a value prints as a non-empty NUL-terminated text that a second
 * evaluation of the printed integer reproduces, and evaluating twice gives the same answer. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reward/env_expr.h"
#include "reward/env_tools.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    static const int64_t pool[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 25, 50, 75, 100, 3, 7};
    int n = data[0] % 17;
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    cpt_env_value v, v2;
    cpt_env_literals lits;
    char why[256], out[64], obs[512];
    int rc = cpt_env_expr_eval(text, len, &v, &lits, why, sizeof why);
    if (rc == 0) {
        if (cpt_env_expr_eval(text, len, &v2, NULL, why, sizeof why) != 0) abort();
        if (v2.is_float != v.is_float || (!v.is_float && v2.i != v.i)) abort();
        size_t k = cpt_env_value_format(&v, out, sizeof out);
        if (k == 0 || k >= sizeof out || strlen(out) != k) abort();
        if (!v.is_float && v.i != INT64_MIN) {
            if (cpt_env_expr_eval(out, k, &v2, NULL, why, sizeof why) != 0 || v2.is_float || v2.i != v.i) abort();
        }
        if (lits.n < 0 || lits.n > CPT_ENV_EXPR_MAX_LITERALS) abort();
    } else if (why[0] == 0) {
        abort();
    }
    int ok = cpt_env_calculator_observe(text, len, obs, sizeof obs);
    if ((ok == 1) != (rc == 0) || strlen(obs) >= sizeof obs) abort();
    ok = cpt_env_countdown_observe(text, len, pool, n, 24, data[0] >> 7, obs, sizeof obs);
    if ((ok == 1) != (rc == 0) || strlen(obs) >= sizeof obs) abort();
    return 0;
}
