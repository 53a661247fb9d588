/* The calculator's expression language: Python-expression arithmetic, parsed and evaluated by this module alone (no
 * eval of anything else, no memory allocation, bounded recursion), so it can run inside a seccomp-strict child.
 *
 *   numbers      integers (decimal, '_' between digits allowed) and floats (1.5, .5, 2., 1e3, 2.5E-3)
 *   operators    + - * / // % ** with Python's precedence: ** binds tighter than a unary minus on its left
 *                (-2**2 == -4) and is right-associative (2**3**2 == 512); unary + and -; parentheses
 *   semantics    int op int stays int for + - * // % and ** with a non-negative exponent (checked against 64-bit
 *                overflow: an error, never a wrapped value); / is always float; // and % floor like Python (the
 *                sign of % follows the divisor); a negative exponent gives a float; mixing int and float gives float
 *   errors       division by zero, an overflow, a complex result, anything else in the text; the reason names the
 *                byte offset; an expression longer than CPT_ENV_EXPR_MAX_LEN bytes or nested deeper than
 *                CPT_ENV_EXPR_MAX_DEPTH is refused before any recursion can run away
 *
 * Results print like Python's repr: 408, 2.5, 4.0, 1e+16, 1e-05. */
#ifndef CPT_REWARD_ENV_EXPR_H
#define CPT_REWARD_ENV_EXPR_H

#include <stddef.h>
#include <stdint.h>

#define CPT_ENV_EXPR_MAX_LEN 4096
#define CPT_ENV_EXPR_MAX_DEPTH 100
#define CPT_ENV_EXPR_MAX_LITERALS 64

typedef struct cpt_env_value {
    int is_float;
    int64_t i;
    double f;
} cpt_env_value;

/* The integer literals of an expression in order of appearance (the countdown environment reports them). */
typedef struct cpt_env_literals {
    int n;         /* how many were recorded (at most CPT_ENV_EXPR_MAX_LITERALS) */
    int more;      /* 1: the expression had more than were recorded */
    int has_float; /* a float literal appeared */
    int64_t v[CPT_ENV_EXPR_MAX_LITERALS];
} cpt_env_literals;

/* Evaluates s[0..len). 0 with *out, or -1 with the reason in why ("division by zero (at byte 3)").
 * lits (may be NULL) receives the integer literals. */
int cpt_env_expr_eval(const char *s, size_t len, cpt_env_value *out, cpt_env_literals *lits, char *why,
                      size_t why_len);

/* Writes v as Python's repr would (NUL-terminated, truncated to cap). Returns the length written. */
size_t cpt_env_value_format(const cpt_env_value *v, char *out, size_t cap);

#endif
