/* Countdown expression parser and grader (see countdown.h). */
#include "reward/countdown.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 64

typedef struct {
    int64_t n, d; /* d > 0, reduced */
} rat;

typedef struct {
    const char *s;
    size_t len, pos;
    const int64_t *numbers;
    int n_numbers;
    uint8_t used[CPT_COUNTDOWN_MAX_NUMBERS];
    int depth;
    char *why;
    size_t why_len;
    int failed;
} parser;

static int fail(parser *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(parser *p, const char *fmt, ...) {
    if (!p->failed && p->why && p->why_len) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(p->why, p->why_len, fmt, ap);
        va_end(ap);
        if (k >= 0 && (size_t)k < p->why_len) snprintf(p->why + k, p->why_len - (size_t)k, " (at byte %zu)", p->pos);
    }
    p->failed = 1;
    return -1;
}

static int make(parser *p, __int128 n, __int128 d, rat *out) {
    if (d == 0) return fail(p, "division by zero");
    if (d < 0) n = -n, d = -d;
    /* reduce in 128 bits, then it must fit 64 */
    __int128 a = n < 0 ? -n : n, b = d;
    while (b) {
        __int128 t = a % b;
        a = b;
        b = t;
    }
    if (a > 1) n /= a, d /= a;
    if (n > INT64_MAX || n < -INT64_MAX || d > INT64_MAX) return fail(p, "number too large");
    out->n = (int64_t)n;
    out->d = (int64_t)d;
    return 0;
}

static void skip_space(parser *p) {
    while (p->pos < p->len && isspace((unsigned char)p->s[p->pos])) p->pos++;
}

static int lit(parser *p, const char *t) {
    size_t k = strlen(t);
    if (p->len - p->pos >= k && memcmp(p->s + p->pos, t, k) == 0) {
        p->pos += k;
        return 1;
    }
    return 0;
}

/* Reads an operator of the given precedence level: 0 = + -, 1 = * /. Returns the ASCII form or 0. */
static char read_op(parser *p, int level) {
    skip_space(p);
    if (p->pos >= p->len) return 0;
    if (level == 0) {
        if (lit(p, "+")) return '+';
        if (lit(p, "-") || lit(p, "\xe2\x88\x92")) return '-';
        return 0;
    }
    if (lit(p, "*") || lit(p, "x") || lit(p, "X") || lit(p, "\xc3\x97") || lit(p, "\\times") || lit(p, "\\cdot") ||
        lit(p, "\xc2\xb7"))
        return '*';
    if (lit(p, "/") || lit(p, "\xc3\xb7") || lit(p, "\\div")) return '/';
    return 0;
}

static int expr(parser *p, rat *out);

static int factor(parser *p, rat *out) {
    skip_space(p);
    if (p->pos >= p->len) return fail(p, "expression ends early");
    char c = p->s[p->pos];
    if (c == '(' || c == '[' || c == '{') {
        char close = c == '(' ? ')' : c == '[' ? ']' : '}';
        if (++p->depth > MAX_DEPTH) return fail(p, "parentheses nested deeper than %d", MAX_DEPTH);
        p->pos++;
        if (expr(p, out)) return -1;
        skip_space(p);
        if (p->pos >= p->len || p->s[p->pos] != close) return fail(p, "missing '%c'", close);
        p->pos++;
        p->depth--;
        return 0;
    }
    if (c == '-' || c == '+') return fail(p, "unary '%c' is not allowed", c);
    if (!isdigit((unsigned char)c)) return fail(p, "unexpected '%c'", isprint((unsigned char)c) ? c : '?');
    size_t start = p->pos;
    int64_t v = 0;
    while (p->pos < p->len && isdigit((unsigned char)p->s[p->pos])) {
        if (p->pos - start >= 18) return fail(p, "number too long");
        v = v * 10 + (p->s[p->pos] - '0');
        p->pos++;
    }
    if (p->pos < p->len && p->s[p->pos] == '.') return fail(p, "only integers are allowed");
    /* one unused given number of that value */
    for (int i = 0; i < p->n_numbers; i++) {
        if (!p->used[i] && p->numbers[i] == v) {
            p->used[i] = 1;
            out->n = v;
            out->d = 1;
            return 0;
        }
    }
    for (int i = 0; i < p->n_numbers; i++)
        if (p->numbers[i] == v) return fail(p, "number %lld used more often than given", (long long)v);
    return fail(p, "number %lld is not one of the given numbers", (long long)v);
}

static int term(parser *p, rat *out) {
    if (factor(p, out)) return -1;
    for (;;) {
        size_t save = p->pos;
        char op = read_op(p, 1);
        if (!op) { p->pos = save; return 0; }
        rat b;
        if (factor(p, &b)) return -1;
        if (op == '*') {
            if (make(p, (__int128)out->n * b.n, (__int128)out->d * b.d, out)) return -1;
        } else {
            if (b.n == 0) return fail(p, "division by zero");
            if (make(p, (__int128)out->n * b.d, (__int128)out->d * b.n, out)) return -1;
        }
    }
}

static int expr(parser *p, rat *out) {
    if (term(p, out)) return -1;
    for (;;) {
        size_t save = p->pos;
        char op = read_op(p, 0);
        if (!op) { p->pos = save; return 0; }
        rat b;
        if (term(p, &b)) return -1;
        __int128 x = (__int128)out->n * b.d, y = (__int128)b.n * out->d;
        if (make(p, op == '+' ? x + y : x - y, (__int128)out->d * b.d, out)) return -1;
    }
}

int cpt_countdown_eval(const char *s, size_t len, const int64_t *numbers, int n_numbers, int use_all, int64_t *num,
                       int64_t *den, char *why, size_t why_len) {
    parser p = {.s = s, .len = len, .numbers = numbers, .n_numbers = n_numbers, .why = why, .why_len = why_len};
    if (why && why_len) why[0] = 0;
    if (n_numbers < 0 || n_numbers > CPT_COUNTDOWN_MAX_NUMBERS)
        return fail(&p, "%d numbers given, at most %d supported", n_numbers, CPT_COUNTDOWN_MAX_NUMBERS);
    rat r;
    if (expr(&p, &r)) return -1;
    skip_space(&p);
    if (p.pos != len) return fail(&p, "unexpected '%c' after the expression", isprint((unsigned char)s[p.pos]) ? s[p.pos] : '?');
    if (use_all)
        for (int i = 0; i < n_numbers; i++)
            if (!p.used[i]) return fail(&p, "number %lld is not used", (long long)numbers[i]);
    *num = r.n;
    *den = r.d;
    return 0;
}

static char *dup_trim(const char *s, size_t n) {
    while (n && isspace((unsigned char)*s)) s++, n--;
    while (n && isspace((unsigned char)s[n - 1])) n--;
    if (!n) return NULL;
    char *o = malloc(n + 1);
    if (!o) return NULL;
    memcpy(o, s, n);
    o[n] = 0;
    return o;
}

/* The last occurrence of needle in s[0..n) before `end`, or NULL. */
static const char *last_of(const char *s, size_t end, const char *needle) {
    size_t k = strlen(needle);
    for (size_t i = end; i >= k; i--)
        if (memcmp(s + i - k, needle, k) == 0) return s + i - k;
    return NULL;
}

char *cpt_countdown_extract(const char *t, size_t n) {
    if (!t) return NULL;
    char *e = NULL;
    const char *open = last_of(t, n, "<answer>");
    if (open) {
        const char *a = open + 8;
        const char *close = NULL;
        for (const char *q = a; q + 9 <= t + n; q++)
            if (memcmp(q, "</answer>", 9) == 0) { close = q; break; }
        if (close) e = dup_trim(a, (size_t)(close - a));
        else return NULL; /* an unterminated answer tag is no answer */
    } else if ((open = last_of(t, n, "\\boxed{"))) {
        const char *a = open + 7;
        int depth = 1;
        const char *q = a;
        for (; q < t + n; q++) {
            if (*q == '{') depth++;
            else if (*q == '}' && --depth == 0) break;
        }
        if (q >= t + n) return NULL;
        e = dup_trim(a, (size_t)(q - a));
    } else {
        size_t end = n;
        while (end > 0) {
            size_t start = end;
            while (start > 0 && t[start - 1] != '\n') start--;
            e = dup_trim(t + start, end - start);
            if (e) break;
            end = start ? start - 1 : 0;
        }
    }
    if (!e) return NULL;
    /* drop "= 24" at the end */
    char *eq = strrchr(e, '=');
    if (eq) {
        const char *r = eq + 1;
        while (*r == ' ') r++;
        int digits = 0;
        while (isdigit((unsigned char)*r)) r++, digits++;
        while (*r == ' ') r++;
        if (digits && !*r) {
            *eq = 0;
            char *t2 = dup_trim(e, strlen(e));
            free(e);
            e = t2;
        }
    }
    return e;
}

int cpt_countdown_grade(const char *completion, size_t len, const int64_t *numbers, int n_numbers, int64_t target,
                        int use_all, int *valid, char *why, size_t why_len) {
    if (valid) *valid = 0;
    char *e = cpt_countdown_extract(completion, len);
    if (!e) {
        if (why && why_len) snprintf(why, why_len, "no expression found");
        return 0;
    }
    int64_t num, den;
    int rc = cpt_countdown_eval(e, strlen(e), numbers, n_numbers, use_all, &num, &den, why, why_len);
    free(e);
    if (rc) return 0;
    if (valid) *valid = 1;
    if (den == 1 && num == target) return 1;
    if (why && why_len) {
        if (den == 1) snprintf(why, why_len, "value %lld, target %lld", (long long)num, (long long)target);
        else snprintf(why, why_len, "value %lld/%lld, target %lld", (long long)num, (long long)den, (long long)target);
    }
    return 0;
}
