/* The built-in tools' answers as pure functions (no allocation, no system call), so they run unchanged inside the
 * seccomp-strict child and in-process in the fuzz target. */
#ifndef CPT_REWARD_ENV_TOOLS_H
#define CPT_REWARD_ENV_TOOLS_H

#include <stddef.h>
#include <stdint.h>

/* calculator: obs = the value of the expression ("408", "2.5"); returns 1, or 0 with obs = "error: REASON". */
int cpt_env_calculator_observe(const char *expr, size_t len, char *obs, size_t cap);

/* countdown: obs = "= 24 (uses 4 6 1; target 24 reached)", "= 23 (uses 4 6 1; target 24 not reached)", or with the
 * reason the expression breaks the rules (reward/countdown.h: each given number at most once, or exactly once with
 * use_all): "= 25 (number 7 is not one of the given numbers ...; target 24 not reached)"; returns 1. An expression
 * without a value returns 0 with obs = "error: REASON". */
int cpt_env_countdown_observe(const char *expr, size_t len, const int64_t *numbers, int n_numbers, int64_t target,
                              int use_all, char *obs, size_t cap);

#endif
