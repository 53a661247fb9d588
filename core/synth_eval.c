/* Exact evaluation of small arithmetic expressions (integers, + - * /, parentheses) over rationals, checking
 * that the integers used come from a given multiset: how synth verifies every instance it writes. */
#include <stdlib.h>
#include <string.h>

#include "core/synth.h"

typedef struct ratio {
    int64_t n, d; /* d > 0, reduced */
} ratio;

typedef struct eval_ctx {
    const char *s, *p;
    const int *numbers;
    int n_numbers;
    int used[CPT_SYNTH_MAX_NUMBERS * 4];
    int depth;
    cpt_err *err;
} eval_ctx;

static int64_t gcd64(int64_t a, int64_t b) {
    if (a < 0) a = -a;
    if (b < 0) b = -b;
    while (b) {
        int64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

static int make(eval_ctx *c, int64_t n, int64_t d, ratio *out) {
    if (d == 0) return cpt_errf(c->err, "division by zero in '%.100s'", c->s);
    if (n == INT64_MIN || d == INT64_MIN) return cpt_errf(c->err, "value too large in '%.100s'", c->s);
    if (d < 0) n = -n, d = -d;
    int64_t g = gcd64(n, d);
    if (g > 1) n /= g, d /= g;
    out->n = n;
    out->d = d;
    return 0;
}

static int overflow(eval_ctx *c) { return cpt_errf(c->err, "value too large in '%.100s'", c->s); }

static int apply(eval_ctx *c, char op, ratio a, ratio b, ratio *out) {
    int64_t x, y, n, d;
    switch (op) {
    case '+':
    case '-':
        if (__builtin_mul_overflow(a.n, b.d, &x) || __builtin_mul_overflow(b.n, a.d, &y) ||
            __builtin_mul_overflow(a.d, b.d, &d))
            return overflow(c);
        if (op == '+' ? __builtin_add_overflow(x, y, &n) : __builtin_sub_overflow(x, y, &n)) return overflow(c);
        return make(c, n, d, out);
    case '*':
        if (__builtin_mul_overflow(a.n, b.n, &n) || __builtin_mul_overflow(a.d, b.d, &d)) return overflow(c);
        return make(c, n, d, out);
    default: /* '/' */
        if (b.n == 0) return cpt_errf(c->err, "division by zero in '%.100s'", c->s);
        if (__builtin_mul_overflow(a.n, b.d, &n) || __builtin_mul_overflow(a.d, b.n, &d)) return overflow(c);
        return make(c, n, d, out);
    }
}

static void skip(eval_ctx *c) {
    while (*c->p == ' ' || *c->p == '\t') c->p++;
}

static int expr(eval_ctx *c, ratio *out);

static int factor(eval_ctx *c, ratio *out) {
    skip(c);
    if (*c->p == '(') {
        if (++c->depth > 64) return cpt_errf(c->err, "too deeply nested: '%.100s'", c->s);
        c->p++;
        if (expr(c, out)) return -1;
        skip(c);
        if (*c->p != ')') return cpt_errf(c->err, "expected ')' at offset %d in '%.100s'", (int)(c->p - c->s), c->s);
        c->p++;
        c->depth--;
        return 0;
    }
    if (*c->p < '0' || *c->p > '9')
        return cpt_errf(c->err, "expected a number or '(' at offset %d in '%.100s'", (int)(c->p - c->s), c->s);
    int64_t v = 0;
    while (*c->p >= '0' && *c->p <= '9') {
        v = v * 10 + (*c->p++ - '0');
        if (v > 1000000000) return overflow(c);
    }
    if (c->numbers) {
        int k = 0;
        while (k < c->n_numbers && (c->used[k] || c->numbers[k] != v)) k++;
        if (k == c->n_numbers) {
            for (k = 0; k < c->n_numbers; k++)
                if (c->numbers[k] == v) return cpt_errf(c->err, "%lld is used more often than given", (long long)v);
            return cpt_errf(c->err, "%lld is not one of the given numbers", (long long)v);
        }
        c->used[k] = 1;
    }
    out->n = v;
    out->d = 1;
    return 0;
}

static int term(eval_ctx *c, ratio *out) {
    if (factor(c, out)) return -1;
    for (;;) {
        skip(c);
        char op = *c->p;
        if (op != '*' && op != '/') return 0;
        c->p++;
        ratio rhs;
        if (factor(c, &rhs) || apply(c, op, *out, rhs, out)) return -1;
    }
}

static int expr(eval_ctx *c, ratio *out) {
    if (term(c, out)) return -1;
    for (;;) {
        skip(c);
        char op = *c->p;
        if (op != '+' && op != '-') return 0;
        c->p++;
        ratio rhs;
        if (term(c, &rhs) || apply(c, op, *out, rhs, out)) return -1;
    }
}

int cpt_synth_eval(const char *s, const int *numbers, int n_numbers, int64_t *num, int64_t *den, cpt_err *err) {
    eval_ctx c = {.s = s, .p = s, .numbers = numbers, .n_numbers = n_numbers, .err = err};
    if (numbers && (n_numbers < 0 || n_numbers > (int)(sizeof c.used / sizeof c.used[0])))
        return cpt_errf(err, "too many numbers (%d)", n_numbers);
    ratio r;
    if (expr(&c, &r)) return -1;
    skip(&c);
    if (*c.p) return cpt_errf(err, "unexpected '%c' at offset %d in '%.100s'", *c.p, (int)(c.p - s), s);
    *num = r.n;
    *den = r.d;
    return 0;
}
