/* Countdown: reach a target from given numbers with + - * / and parentheses.
 *
 * The expression is parsed by a small recursive-descent parser (no eval of anything else): integers, + - * /
 * (also x, \times, \cdot, the Unicode signs), parentheses up to depth 64, spaces. Every integer must be one of the
 * given numbers, each used at most once (or exactly once with use_all). Arithmetic is exact on 64-bit rationals
 * (division by zero and overflow are errors), so 6 / 4 * 2 == 3 holds exactly. No unary minus. */
#ifndef CPT_REWARD_COUNTDOWN_H
#define CPT_REWARD_COUNTDOWN_H

#include <stddef.h>
#include <stdint.h>

#define CPT_COUNTDOWN_MAX_NUMBERS 16

/* Evaluates expr[0..len): 0 with the reduced value num/den (den > 0), or -1 with the reason in why (which names
 * the byte offset). */
int cpt_countdown_eval(const char *expr, size_t len, const int64_t *numbers, int n_numbers, int use_all,
                       int64_t *num, int64_t *den, char *why, size_t why_len);

/* The expression of a completion, malloc'd: the last <answer>...</answer>, else the last \boxed{...}, else the last
 * non-empty line; a trailing "= <number>" is dropped. NULL when there is nothing. */
char *cpt_countdown_extract(const char *text, size_t len);

/* 1 when the completion's expression is valid and equals target, else 0. *valid (may be NULL): the expression
 * parsed and used the numbers correctly (for a format score). why (may be NULL) gets the reason of a failure. */
int cpt_countdown_grade(const char *completion, size_t len, const int64_t *numbers, int n_numbers, int64_t target,
                        int use_all, int *valid, char *why, size_t why_len);

#endif
