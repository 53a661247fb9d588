/* The built-in tools (see env_tools.h). */
#include "reward/env_tools.h"

#include <stdio.h>
#include <string.h>

#include "reward/countdown.h"
#include "reward/env_expr.h"

int cpt_env_calculator_observe(const char *expr, size_t len, char *obs, size_t cap) {
    cpt_env_value v;
    char why[256];
    if (cpt_env_expr_eval(expr, len, &v, NULL, why, sizeof why)) {
        snprintf(obs, cap, "error: %s", why);
        return 0;
    }
    cpt_env_value_format(&v, obs, cap);
    return 1;
}

int cpt_env_countdown_observe(const char *expr, size_t len, const int64_t *numbers, int n_numbers, int64_t target,
                              int use_all, char *obs, size_t cap) {
    cpt_env_value v;
    cpt_env_literals lits;
    char why[256], value[64];
    if (cpt_env_expr_eval(expr, len, &v, &lits, why, sizeof why)) {
        snprintf(obs, cap, "error: %s", why);
        return 0;
    }
    int64_t num = 0, den = 1;
    int valid = cpt_countdown_eval(expr, len, numbers, n_numbers, use_all, &num, &den, why, sizeof why) == 0;
    if (valid && den == 1) {
        snprintf(value, sizeof value, "%lld", (long long)num);
    } else if (valid) {
        cpt_env_value q = {.is_float = 1, .f = (double)num / (double)den};
        cpt_env_value_format(&q, value, sizeof value);
    } else {
        cpt_env_value_format(&v, value, sizeof value);
    }
    char uses[256] = "uses";
    size_t u = strlen(uses);
    for (int i = 0; i < lits.n && u + 24 < sizeof uses; i++) {
        int k = snprintf(uses + u, sizeof uses - u, " %lld", (long long)lits.v[i]);
        if (k > 0) u += (size_t)k;
    }
    if (lits.more && u + 5 < sizeof uses) snprintf(uses + u, sizeof uses - u, " ...");
    int reached = valid && num == target && den == 1;
    snprintf(obs, cap, "= %s (%s; target %lld %s)", value, valid ? uses : why, (long long)target,
             reached ? "reached" : "not reached");
    return 1;
}
