/* The calculator's evaluator (see env_expr.h). Recursive descent over
 *   expr  := term (('+' | '-') term)*
 *   term  := unary (('*' | '/' | '//' | '%') unary)*
 *   unary := ('+' | '-') unary | power
 *   power := atom ['**' unary]
 *   atom  := number | '(' expr ')'
 * Every path of recursion goes through unary(), which holds the depth bound. */
#include "reward/env_expr.h"

#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *s;
    size_t len, pos;
    int depth;
    cpt_env_literals *lits;
    char *why;
    size_t why_len;
    int failed;
} parser;

static int fail_at(parser *p, size_t at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail_at(parser *p, size_t at, const char *fmt, ...) {
    if (!p->failed && p->why && p->why_len) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(p->why, p->why_len, fmt, ap);
        va_end(ap);
        if (k >= 0 && (size_t)k < p->why_len) snprintf(p->why + k, p->why_len - (size_t)k, " (at byte %zu)", at);
    }
    p->failed = 1;
    return -1;
}

static void skip_space(parser *p) {
    while (p->pos < p->len && isspace((unsigned char)p->s[p->pos])) p->pos++;
}

static int peek(parser *p, const char *t) {
    size_t k = strlen(t);
    return p->len - p->pos >= k && memcmp(p->s + p->pos, t, k) == 0;
}

/* ---- arithmetic ---- */

static double as_float(const cpt_env_value *v) { return v->is_float ? v->f : (double)v->i; }

static int float_result(parser *p, size_t at, double f, cpt_env_value *out) {
    if (!isfinite(f)) return fail_at(p, at, "number too large");
    out->is_float = 1;
    out->f = f;
    out->i = 0;
    return 0;
}

static int int_result(cpt_env_value *out, int64_t i) {
    out->is_float = 0;
    out->i = i;
    out->f = 0;
    return 0;
}

static int overflow(parser *p, size_t at) {
    return fail_at(p, at, "integer overflow: the result does not fit in 64 bits");
}

/* Python's float floor division and modulo (Objects/floatobject.c float_divmod, same results). */
static void float_divmod(double a, double b, double *q, double *r) {
    double mod = fmod(a, b), div = (a - mod) / b;
    if (mod != 0) {
        if ((b < 0) != (mod < 0)) {
            mod += b;
            div -= 1.0;
        }
    } else {
        mod = copysign(0.0, b);
    }
    double fl;
    if (div != 0) {
        fl = floor(div);
        if (div - fl > 0.5) fl += 1.0;
    } else {
        fl = copysign(0.0, a / b);
    }
    *q = fl;
    *r = mod;
}

static int int_pow(parser *p, size_t at, int64_t base, int64_t e, cpt_env_value *out) {
    int64_t r = 1;
    while (e) {
        if (e & 1)
            if (__builtin_mul_overflow(r, base, &r)) return overflow(p, at);
        e >>= 1;
        if (e && __builtin_mul_overflow(base, base, &base)) return overflow(p, at);
    }
    return int_result(out, r);
}

static int apply(parser *p, size_t at, const char *op, const cpt_env_value *a, const cpt_env_value *b,
                 cpt_env_value *out) {
    int both_int = !a->is_float && !b->is_float;
    int64_t x = a->i, y = b->i, r;
    double fa = as_float(a), fb = as_float(b);
    if (!strcmp(op, "+")) {
        if (!both_int) return float_result(p, at, fa + fb, out);
        if (__builtin_add_overflow(x, y, &r)) return overflow(p, at);
        return int_result(out, r);
    }
    if (!strcmp(op, "-")) {
        if (!both_int) return float_result(p, at, fa - fb, out);
        if (__builtin_sub_overflow(x, y, &r)) return overflow(p, at);
        return int_result(out, r);
    }
    if (!strcmp(op, "*")) {
        if (!both_int) return float_result(p, at, fa * fb, out);
        if (__builtin_mul_overflow(x, y, &r)) return overflow(p, at);
        return int_result(out, r);
    }
    if (!strcmp(op, "/")) {
        if (fb == 0) return fail_at(p, at, "division by zero");
        return float_result(p, at, fa / fb, out);
    }
    if (!strcmp(op, "//") || !strcmp(op, "%")) {
        int floor_div = op[0] == '/';
        if (both_int ? y == 0 : fb == 0) return fail_at(p, at, "division by zero");
        if (!both_int) {
            double q, m;
            float_divmod(fa, fb, &q, &m);
            return float_result(p, at, floor_div ? q : m, out);
        }
        if (y == -1) {
            if (!floor_div) return int_result(out, 0);
            if (x == INT64_MIN) return overflow(p, at);
            return int_result(out, -x);
        }
        int64_t q = x / y, m = x % y;
        if (m != 0 && ((m < 0) != (y < 0))) {
            q -= 1;
            m += y;
        }
        return int_result(out, floor_div ? q : m);
    }
    /* ** */
    if (both_int && y >= 0) return int_pow(p, at, x, y, out);
    if (fa == 0 && fb < 0) return fail_at(p, at, "zero cannot be raised to a negative power");
    if (fa < 0 && fb != floor(fb)) return fail_at(p, at, "a negative number to a fractional power is complex");
    return float_result(p, at, pow(fa, fb), out);
}

/* ---- parsing ---- */

static int expr(parser *p, cpt_env_value *out);
static int unary(parser *p, cpt_env_value *out);

static void note_literal(parser *p, const cpt_env_value *v) {
    cpt_env_literals *l = p->lits;
    if (!l) return;
    if (v->is_float) {
        l->has_float = 1;
        return;
    }
    if (l->n < CPT_ENV_EXPR_MAX_LITERALS)
        l->v[l->n++] = v->i;
    else
        l->more = 1;
}

static int number(parser *p, cpt_env_value *out) {
    size_t start = p->pos;
    char buf[512];
    size_t n = 0;
    int is_float = 0, digits = 0;
    /* integer part, fraction, exponent; '_' only between digits */
    while (p->pos < p->len) {
        char c = p->s[p->pos];
        if (isdigit((unsigned char)c)) {
            digits++;
        } else if (c == '_' && p->pos > start && isdigit((unsigned char)p->s[p->pos - 1]) && p->pos + 1 < p->len &&
                   isdigit((unsigned char)p->s[p->pos + 1])) {
            p->pos++;
            continue;
        } else if (c == '.' && !is_float) {
            is_float = 1;
        } else if ((c == 'e' || c == 'E') && digits) {
            size_t q = p->pos + 1;
            if (q < p->len && (p->s[q] == '+' || p->s[q] == '-')) q++;
            if (q >= p->len || !isdigit((unsigned char)p->s[q])) break;
            is_float = 1;
            if (n + (q - p->pos) >= sizeof buf) return fail_at(p, start, "number too long");
            while (p->pos < q) buf[n++] = p->s[p->pos++];
            while (p->pos < p->len && isdigit((unsigned char)p->s[p->pos])) {
                if (n + 1 >= sizeof buf) return fail_at(p, start, "number too long");
                buf[n++] = p->s[p->pos++];
            }
            break;
        } else {
            break;
        }
        if (n + 1 >= sizeof buf) return fail_at(p, start, "number too long");
        buf[n++] = c;
        p->pos++;
    }
    buf[n] = 0;
    if (!digits) return fail_at(p, start, "expected a number");
    if (p->pos < p->len && (isalpha((unsigned char)p->s[p->pos]) || p->s[p->pos] == '_'))
        return fail_at(p, p->pos, "unexpected '%c' after a number", p->s[p->pos]);
    if (is_float) {
        double f = strtod(buf, NULL);
        if (!isfinite(f)) return fail_at(p, start, "number too large");
        out->is_float = 1;
        out->f = f;
        out->i = 0;
    } else {
        int64_t v = 0;
        for (size_t i = 0; i < n; i++)
            if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, buf[i] - '0', &v))
                return fail_at(p, start, "integer literal does not fit in 64 bits");
        int_result(out, v);
    }
    note_literal(p, out);
    return 0;
}

static int atom(parser *p, cpt_env_value *out) {
    skip_space(p);
    if (p->pos >= p->len) return fail_at(p, p->pos, "the expression ends early");
    char c = p->s[p->pos];
    if (c == '(') {
        size_t open = p->pos++;
        if (expr(p, out)) return -1;
        skip_space(p);
        if (p->pos >= p->len || p->s[p->pos] != ')') return fail_at(p, open, "'(' is never closed");
        p->pos++;
        return 0;
    }
    if (isdigit((unsigned char)c) || c == '.') return number(p, out);
    if (c == ')') return fail_at(p, p->pos, "unmatched ')'");
    if (isalpha((unsigned char)c) || c == '_')
        return fail_at(p, p->pos, "names are not supported (only numbers and + - * / // %% ** and parentheses)");
    if (isprint((unsigned char)c)) return fail_at(p, p->pos, "unexpected '%c'", c);
    return fail_at(p, p->pos, "unexpected byte 0x%02x", (unsigned char)c);
}

static int power(parser *p, cpt_env_value *out) {
    if (atom(p, out)) return -1;
    skip_space(p);
    if (!peek(p, "**")) return 0;
    size_t at = p->pos;
    p->pos += 2;
    cpt_env_value e;
    if (unary(p, &e)) return -1;
    return apply(p, at, "**", out, &e, out);
}

static int unary(parser *p, cpt_env_value *out) {
    skip_space(p);
    if (++p->depth > CPT_ENV_EXPR_MAX_DEPTH)
        return fail_at(p, p->pos, "expression nested deeper than %d levels", CPT_ENV_EXPR_MAX_DEPTH);
    int rc;
    if (p->pos < p->len && (p->s[p->pos] == '-' || p->s[p->pos] == '+')) {
        size_t at = p->pos;
        char sign = p->s[p->pos++];
        rc = unary(p, out);
        if (!rc && sign == '-') {
            if (out->is_float)
                out->f = -out->f;
            else if (out->i == INT64_MIN)
                rc = overflow(p, at);
            else
                out->i = -out->i;
        }
    } else {
        rc = power(p, out);
    }
    p->depth--;
    return rc;
}

/* Reads a multiplicative operator: "*", "/", "//", "%" (never the start of "**"), or NULL. */
static const char *mul_op(parser *p) {
    skip_space(p);
    if (peek(p, "**")) return NULL;
    if (peek(p, "//")) return p->pos += 2, "//";
    if (peek(p, "*")) return p->pos += 1, "*";
    if (peek(p, "/")) return p->pos += 1, "/";
    if (peek(p, "%")) return p->pos += 1, "%";
    return NULL;
}

static int term(parser *p, cpt_env_value *out) {
    if (unary(p, out)) return -1;
    for (;;) {
        size_t at = p->pos;
        const char *op = mul_op(p);
        if (!op) return 0;
        cpt_env_value b;
        if (unary(p, &b) || apply(p, at, op, out, &b, out)) return -1;
    }
}

static int expr(parser *p, cpt_env_value *out) {
    if (term(p, out)) return -1;
    for (;;) {
        skip_space(p);
        if (p->pos >= p->len || (p->s[p->pos] != '+' && p->s[p->pos] != '-')) return 0;
        size_t at = p->pos;
        const char *op = p->s[p->pos++] == '+' ? "+" : "-";
        cpt_env_value b;
        if (term(p, &b) || apply(p, at, op, out, &b, out)) return -1;
    }
}

int cpt_env_expr_eval(const char *s, size_t len, cpt_env_value *out, cpt_env_literals *lits, char *why,
                      size_t why_len) {
    parser p = {.s = s, .len = len, .lits = lits, .why = why, .why_len = why_len};
    if (why && why_len) why[0] = 0;
    if (lits) memset(lits, 0, sizeof *lits);
    if (len > CPT_ENV_EXPR_MAX_LEN)
        return fail_at(&p, 0, "expression too long: %zu bytes, at most %d", len, CPT_ENV_EXPR_MAX_LEN);
    if (memchr(s, 0, len)) return fail_at(&p, (size_t)((const char *)memchr(s, 0, len) - s), "unexpected NUL byte");
    skip_space(&p);
    if (p.pos >= len) return fail_at(&p, 0, "empty expression");
    cpt_env_value v;
    if (expr(&p, &v)) return -1;
    skip_space(&p);
    if (p.pos < len) {
        char c = s[p.pos];
        if (c == ')') return fail_at(&p, p.pos, "unmatched ')'");
        if (c == '^') return fail_at(&p, p.pos, "'^' is not supported (write ** for a power)");
        if (c == '=') return fail_at(&p, p.pos, "'=' is not supported (write the expression alone)");
        if (isprint((unsigned char)c)) return fail_at(&p, p.pos, "unexpected '%c' after the expression", c);
        return fail_at(&p, p.pos, "unexpected byte 0x%02x after the expression", (unsigned char)c);
    }
    *out = v;
    return 0;
}

/* ---- printing like Python's repr ---- */

size_t cpt_env_value_format(const cpt_env_value *v, char *out, size_t cap) {
    if (!cap) return 0;
    int k;
    if (!v->is_float) {
        k = snprintf(out, cap, "%lld", (long long)v->i);
        return k < 0 ? 0 : (size_t)k < cap ? (size_t)k : cap - 1;
    }
    double f = v->f;
    if (isnan(f)) {
        k = snprintf(out, cap, "nan");
    } else if (isinf(f)) {
        k = snprintf(out, cap, f < 0 ? "-inf" : "inf");
    } else if (f == 0) {
        k = snprintf(out, cap, signbit(f) ? "-0.0" : "0.0");
    } else {
        /* the shortest digits that read back as f */
        char e[64];
        for (int prec = 1; prec <= 17; prec++) {
            snprintf(e, sizeof e, "%.*e", prec - 1, f);
            if (strtod(e, NULL) == f) break;
        }
        const char *q = e;
        int neg = *q == '-';
        if (neg) q++;
        char digits[32];
        int nd = 0;
        for (; *q && *q != 'e'; q++)
            if (isdigit((unsigned char)*q) && nd < 31) digits[nd++] = *q;
        while (nd > 1 && digits[nd - 1] == '0') nd--;
        digits[nd] = 0;
        int exp10 = *q == 'e' ? atoi(q + 1) : 0;
        char body[400];
        size_t b = 0;
        if (exp10 < -4 || exp10 >= 16) {
            body[b++] = digits[0];
            if (nd > 1) {
                body[b++] = '.';
                for (int i = 1; i < nd; i++) body[b++] = digits[i];
            }
            snprintf(body + b, sizeof body - b, "e%c%02d", exp10 < 0 ? '-' : '+', exp10 < 0 ? -exp10 : exp10);
        } else if (exp10 >= 0) {
            for (int i = 0; i <= exp10; i++) body[b++] = i < nd ? digits[i] : '0';
            body[b++] = '.';
            if (nd > exp10 + 1)
                for (int i = exp10 + 1; i < nd; i++) body[b++] = digits[i];
            else
                body[b++] = '0';
            body[b] = 0;
        } else {
            body[b++] = '0';
            body[b++] = '.';
            for (int i = 0; i < -exp10 - 1; i++) body[b++] = '0';
            for (int i = 0; i < nd; i++) body[b++] = digits[i];
            body[b] = 0;
        }
        k = snprintf(out, cap, "%s%s", neg ? "-" : "", body);
    }
    return k < 0 ? 0 : (size_t)k < cap ? (size_t)k : cap - 1;
}
