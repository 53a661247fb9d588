/* Math answer extraction and equivalence (see math_answer.h). Every scan is bounded by the input length; numbers
 * are exact 128-bit rationals with a long double shadow for values that overflow them (over 38 digits). */
#include "reward/math_answer.h"

#include <ctype.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- small string helpers ---- */

static char *dup_range(const char *s, size_t n) {
    char *o = malloc(n + 1);
    if (!o) return NULL;
    memcpy(o, s, n);
    o[n] = 0;
    return o;
}

static int starts(const char *s, size_t n, const char *lit) {
    size_t k = strlen(lit);
    return n >= k && memcmp(s, lit, k) == 0;
}

/* Index just past the '}' matching the '{' at s[i], or 0 when unbalanced. Escaped braces \{ \} do not count. */
static size_t match_brace(const char *s, size_t n, size_t i) {
    int depth = 0;
    for (size_t j = i; j < n; j++) {
        if (s[j] == '\\' && j + 1 < n && (s[j + 1] == '{' || s[j + 1] == '}')) { j++; continue; }
        if (s[j] == '{') depth++;
        else if (s[j] == '}' && --depth == 0) return j + 1;
    }
    return 0;
}

static void trim(const char **s, size_t *n) {
    while (*n && isspace((unsigned char)**s)) (*s)++, (*n)--;
    while (*n && isspace((unsigned char)(*s)[*n - 1])) (*n)--;
}

/* ---- extraction ---- */

/* The argument of a \boxed at text[i] (pointing at the backslash, k = length of the command): "{...}" or " x". */
static char *boxed_arg(const char *t, size_t n, size_t i, size_t k) {
    size_t j = i + k;
    if (j < n && t[j] == '{') {
        size_t e = match_brace(t, n, j);
        if (!e) return NULL;
        const char *s = t + j + 1;
        size_t m = e - j - 2;
        trim(&s, &m);
        return m ? dup_range(s, m) : NULL; /* \boxed{} holds no answer */
    }
    if (j < n && t[j] == ' ') {
        while (j < n && t[j] == ' ') j++;
        size_t e = j;
        while (e < n && !isspace((unsigned char)t[e]) && t[e] != '$') e++;
        return e > j ? dup_range(t + j, e - j) : NULL;
    }
    return NULL;
}

char *cpt_math_extract_answer(const char *t, size_t n) {
    if (!t) return NULL;
    /* last well-formed \boxed / \fbox */
    for (size_t i = n; i-- > 0;) {
        if (t[i] != '\\') continue;
        size_t k = starts(t + i, n - i, "\\boxed") ? 6 : starts(t + i, n - i, "\\fbox") ? 5 : 0;
        if (!k) continue;
        char *a = boxed_arg(t, n, i, k);
        if (a) return a;
    }
    /* after the last #### up to the end of that line */
    for (size_t i = n; i-- > 3;) {
        if (memcmp(t + i - 3, "####", 4) != 0) continue;
        size_t j = i + 1, e = j;
        while (e < n && t[e] != '\n') e++;
        const char *s = t + j;
        size_t m = e - j;
        trim(&s, &m);
        return m ? dup_range(s, m) : NULL;
    }
    return NULL;
}

/* ---- normalisation ---- */

typedef struct {
    char *p;
    size_t n, cap;
} sbuf;

static int sb_put(sbuf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t cap = (b->n + n + 1) * 2;
        char *q = realloc(b->p, cap);
        if (!q) return -1;
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
    return 0;
}

/* Replaces every occurrence of the listed tokens; returns a new string. */
static char *replace_tokens(const char *s, const char *const (*pairs)[2], int n_pairs) {
    sbuf b = {0};
    if (sb_put(&b, "", 0)) return NULL;
    size_t n = strlen(s);
    for (size_t i = 0; i < n;) {
        int hit = 0;
        for (int k = 0; k < n_pairs; k++) {
            size_t m = strlen(pairs[k][0]);
            if (starts(s + i, n - i, pairs[k][0])) {
                /* a command name must not continue with letters: "\right" is not "\rightarrow" */
                if (pairs[k][0][0] == '\\' && isalpha((unsigned char)pairs[k][0][m - 1]) && i + m < n &&
                    isalpha((unsigned char)s[i + m]))
                    continue;
                if (sb_put(&b, pairs[k][1], strlen(pairs[k][1]))) { free(b.p); return NULL; }
                i += m;
                hit = 1;
                break;
            }
        }
        if (!hit) {
            if (sb_put(&b, s + i, 1)) { free(b.p); return NULL; }
            i++;
        }
    }
    return b.p;
}

static const char *const wrappers[] = {"\\text", "\\textbf", "\\mathrm", "\\mbox", "\\boxed", "\\mathbf", "\\textrm"};

/* If s[0..n) is entirely one wrapper group "\text{...}", returns the length of the command and sets the inner span. */
static int whole_wrapper(const char *s, size_t n, const char **in, size_t *in_n) {
    for (size_t k = 0; k < sizeof wrappers / sizeof *wrappers; k++) {
        size_t m = strlen(wrappers[k]);
        if (starts(s, n, wrappers[k]) && m < n && s[m] == '{' && match_brace(s, n, m) == n) {
            *in = s + m + 1;
            *in_n = n - m - 2;
            return 1;
        }
    }
    return 0;
}

/* Peels outer decorations until none is left: spaces, $...$, \( \), \[ \], wrapper groups, a final period. */
static void peel(const char **s, size_t *n) {
    for (int changed = 1; changed;) {
        changed = 0;
        trim(s, n);
        const char *in;
        size_t in_n;
        if (*n >= 2 && (*s)[0] == '$' && (*s)[*n - 1] == '$') { (*s)++; *n -= 2; changed = 1; continue; }
        if (*n >= 4 && (starts(*s, *n, "\\(") || starts(*s, *n, "\\[")) && (*s)[*n - 2] == '\\' &&
            ((*s)[*n - 1] == ')' || (*s)[*n - 1] == ']')) {
            *s += 2; *n -= 4; changed = 1; continue;
        }
        if (whole_wrapper(*s, *n, &in, &in_n)) { *s = in; *n = in_n; changed = 1; continue; }
        if (*n >= 1 && (*s)[*n - 1] == '.') { (*n)--; changed = 1; continue; }
    }
}

static const char *const token_map[][2] = {
    {"\\left", ""},  {"\\right", ""}, {"\\displaystyle", ""}, {"\\!", ""}, {"\\,", ""}, {"\\;", ""},
    {"\\:", ""},     {"\\ ", " "},    {"~", " "},   {"\\dfrac", "\\frac"}, {"\\tfrac", "\\frac"},
    {"^{\\circ}", ""}, {"^\\circ", ""}, {"\\circ", ""}, {"\\%", ""}, {"%", ""}, {"\\$", ""}, {"$", ""},
    {"{,}", ","},   {"\xe2\x88\x92", "-"}, {"\\cdot", "*"}, {"\\times", "*"},
};

/* Normalised text before whitespace removal: peeled, tokens mapped, "x =" dropped. */
static char *normalize_keep_spaces(const char *a) {
    const char *s = a;
    size_t n = strlen(a);
    peel(&s, &n);
    char *c = dup_range(s, n);
    if (!c) return NULL;
    char *r = replace_tokens(c, token_map, (int)(sizeof token_map / sizeof *token_map));
    free(c);
    if (!r) return NULL;
    /* "x = 5" -> "5" */
    char *eq = strrchr(r, '=');
    if (eq && eq[1]) memmove(r, eq + 1, strlen(eq + 1) + 1);
    s = r;
    n = strlen(r);
    peel(&s, &n);
    char *o = dup_range(s, n);
    free(r);
    return o;
}

char *cpt_math_normalize(const char *a) {
    char *r = normalize_keep_spaces(a);
    if (!r) return NULL;
    size_t w = 0;
    for (size_t i = 0; r[i]; i++)
        if (!isspace((unsigned char)r[i])) r[w++] = r[i];
    r[w] = 0;
    return r;
}

/* ---- numbers ---- */

typedef __int128 i128;
#define I128_MIN (-(i128)((~(unsigned __int128)0) >> 1) - 1)

typedef struct {
    int exact;       /* n / d is the value */
    i128 n, d;       /* d > 0 */
    long double v;   /* the value, always */
} num;

static int mul_ok(i128 a, i128 b, i128 *o) { return !__builtin_mul_overflow(a, b, o); }
static int add_ok(i128 a, i128 b, i128 *o) { return !__builtin_add_overflow(a, b, o); }

/* decimal := digits (with 3-digit comma groups) [. digits] | . digits, then [eE][+-]digits (at most 4) */
static size_t parse_decimal(const char *s, size_t n, num *x) {
    size_t i = 0;
    int digits = 0, group = -1; /* group: digits since the last comma, -1 before any comma */
    x->exact = 1;
    x->n = 0;
    x->d = 1;
    x->v = 0;
    while (i < n && (isdigit((unsigned char)s[i]) || (s[i] == ',' && digits > 0))) {
        if (s[i] == ',') {
            if ((group == -1 && digits > 3) || (group != -1 && group != 3)) return 0;
            group = 0;
            i++;
            continue;
        }
        int dg = s[i] - '0';
        if (x->exact && !(mul_ok(x->n, 10, &x->n) && add_ok(x->n, dg, &x->n))) x->exact = 0;
        x->v = x->v * 10 + dg;
        digits++;
        if (group >= 0) group++;
        i++;
    }
    if (group != -1 && group != 3) return 0;
    if (i < n && s[i] == '.' && i + 1 < n && isdigit((unsigned char)s[i + 1])) {
        i++;
        long double scale = 1;
        while (i < n && isdigit((unsigned char)s[i])) {
            int dg = s[i] - '0';
            if (x->exact && !(mul_ok(x->n, 10, &x->n) && add_ok(x->n, dg, &x->n) && mul_ok(x->d, 10, &x->d)))
                x->exact = 0;
            scale /= 10;
            x->v += dg * scale;
            digits++;
            i++;
        }
    } else if (i < n && s[i] == '.' && digits > 0 && (i + 1 == n || !isdigit((unsigned char)s[i + 1]))) {
        i++; /* "5." */
    }
    if (!digits) return 0;
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        size_t j = i + 1;
        int neg = 0;
        if (j < n && (s[j] == '+' || s[j] == '-')) neg = s[j++] == '-';
        int e = 0, ed = 0;
        while (j < n && isdigit((unsigned char)s[j]) && ed < 5) e = e * 10 + (s[j++] - '0'), ed++;
        if (ed > 0 && ed <= 4 && !(j < n && isdigit((unsigned char)s[j]))) {
            for (int k = 0; k < e; k++) {
                if (neg) { if (x->exact && !mul_ok(x->d, 10, &x->d)) x->exact = 0; x->v /= 10; }
                else { if (x->exact && !mul_ok(x->n, 10, &x->n)) x->exact = 0; x->v *= 10; }
                if (x->v == 0 || isinf(x->v)) break;
            }
            i = j;
        }
    }
    return i;
}

static int num_div(num *a, const num *b) {
    if (b->v == 0 || (b->exact && b->n == 0)) return -1;
    a->v /= b->v;
    if (a->exact && b->exact) {
        i128 n, d;
        if (mul_ok(a->n, b->d, &n) && mul_ok(a->d, b->n, &d)) {
            if (d < 0) {
                if (n == I128_MIN || d == I128_MIN) { a->exact = 0; return 0; }
                n = -n;
                d = -d;
            }
            a->n = n;
            a->d = d;
            return 0;
        }
    }
    a->exact = 0;
    return 0;
}

static int num_add(num *a, const num *b) {
    a->v += b->v;
    i128 x, y, n, d;
    if (a->exact && b->exact && mul_ok(a->n, b->d, &x) && mul_ok(b->n, a->d, &y) && add_ok(x, y, &n) &&
        mul_ok(a->d, b->d, &d)) {
        a->n = n;
        a->d = d;
    } else {
        a->exact = 0;
    }
    return 0;
}

static void num_neg(num *a) {
    a->v = -a->v;
    if (a->exact) {
        if (a->n == I128_MIN) a->exact = 0;
        else a->n = -a->n;
    }
}

static size_t parse_sign(const char *s, size_t n, int *neg) {
    *neg = 0;
    if (n && (s[0] == '+' || s[0] == '-')) { *neg = s[0] == '-'; return 1; }
    return 0;
}

/* "{[sign]decimal}" or a single digit (\frac12). */
static size_t parse_frac_arg(const char *s, size_t n, num *x) {
    if (n && isdigit((unsigned char)s[0])) {
        x->exact = 1; x->n = s[0] - '0'; x->d = 1; x->v = x->n;
        return 1;
    }
    if (!n || s[0] != '{') return 0;
    size_t i = 1;
    while (i < n && s[i] == ' ') i++;
    int neg;
    i += parse_sign(s + i, n - i, &neg);
    size_t k = parse_decimal(s + i, n - i, x);
    if (!k) return 0;
    i += k;
    while (i < n && s[i] == ' ') i++;
    if (i >= n || s[i] != '}') return 0;
    if (neg) num_neg(x);
    return i + 1;
}

static size_t parse_frac(const char *s, size_t n, num *x) {
    if (!starts(s, n, "\\frac")) return 0;
    size_t i = 5;
    while (i < n && s[i] == ' ') i++;
    num b;
    size_t k = parse_frac_arg(s + i, n - i, x);
    if (!k) return 0;
    i += k;
    while (i < n && s[i] == ' ') i++;
    k = parse_frac_arg(s + i, n - i, &b);
    if (!k || num_div(x, &b)) return 0;
    return i + k;
}

/* The whole of s[0..n) as a number, allowing trailing unit words after a space; 1 on success. */
static int parse_number(const char *s, size_t n, num *x) {
    trim(&s, &n);
    int neg;
    size_t i = parse_sign(s, n, &neg);
    size_t k;
    if ((k = parse_frac(s + i, n - i, x))) {
        i += k;
    } else if ((k = parse_decimal(s + i, n - i, x))) {
        i += k;
        num b;
        size_t k2;
        if (i < n && s[i] == '/' && (k2 = parse_decimal(s + i + 1, n - i - 1, &b))) {
            if (num_div(x, &b)) return 0;
            i += 1 + k2;
        } else {
            /* mixed number "2\frac{1}{2}" (or "2 \frac12"): a whole number and a proper positive fraction */
            size_t sp = i < n && s[i] == ' ' ? 1 : 0;
            if ((k2 = parse_frac(s + i + sp, n - i - sp, &b))) {
                if (!(x->exact && x->d == 1 && b.exact && b.n >= 0 && b.n < b.d)) return 0;
                num_add(x, &b);
                i += sp + k2;
            }
        }
    } else {
        return 0;
    }
    /* what follows may only be unit words: a space, then letters and spaces */
    if (i < n) {
        if (!isspace((unsigned char)s[i])) return 0;
        for (size_t j = i; j < n; j++)
            if (!isalpha((unsigned char)s[j]) && !isspace((unsigned char)s[j])) return 0;
    }
    if (neg) num_neg(x);
    return isfinite(x->v) ? 1 : 0;
}

/* Removes \text{...}, \mbox{...}, \mathrm{...} groups (units such as "5 \text{cm}"), keeping a space. */
static char *drop_text_groups(const char *s) {
    sbuf b = {0};
    if (sb_put(&b, "", 0)) return NULL;
    size_t n = strlen(s);
    for (size_t i = 0; i < n;) {
        size_t m = 0;
        if (starts(s + i, n - i, "\\text{")) m = 5;
        else if (starts(s + i, n - i, "\\mbox{")) m = 5;
        else if (starts(s + i, n - i, "\\mathrm{")) m = 7;
        size_t e = m ? match_brace(s, n, i + m) : 0;
        if (e) {
            /* keep the words so "5 \text{ cm}" reads as "5 cm" */
            if (sb_put(&b, " ", 1) || sb_put(&b, s + i + m + 1, e - i - m - 2)) { free(b.p); return NULL; }
            i = e;
        } else {
            if (sb_put(&b, s + i, 1)) { free(b.p); return NULL; }
            i++;
        }
    }
    return b.p;
}

static int as_number(const char *norm_spaces, num *x) {
    if (parse_number(norm_spaces, strlen(norm_spaces), x)) return 1;
    char *d = drop_text_groups(norm_spaces);
    int ok = d && parse_number(d, strlen(d), x);
    free(d);
    return ok;
}

static void reduce(i128 *n, i128 *d) {
    if (*n == I128_MIN) return;
    i128 a = *n < 0 ? -*n : *n, b = *d;
    while (b) {
        i128 t = a % b;
        a = b;
        b = t;
    }
    if (a > 1) {
        *n /= a;
        *d /= a;
    }
}

static int nums_equal(const num *a, const num *b) {
    if (a->exact && b->exact) {
        /* reduced fractions with positive denominators are unique */
        i128 an = a->n, ad = a->d, bn = b->n, bd = b->d;
        reduce(&an, &ad);
        reduce(&bn, &bd);
        return an == bn && ad == bd;
    }
    long double diff = fabsl(a->v - b->v), m = fmaxl(fabsl(a->v), fabsl(b->v));
    return diff <= 1e-12L * m;
}

int cpt_math_answers_equal(const char *a, const char *b) {
    if (!a || !b) return 0;
    char *na = normalize_keep_spaces(a), *nb = normalize_keep_spaces(b);
    int eq = 0;
    if (na && nb) {
        num x, y;
        int xa = as_number(na, &x), yb = as_number(nb, &y);
        if (xa && yb) {
            eq = nums_equal(&x, &y);
        } else if (!xa && !yb) {
            char *sa = cpt_math_normalize(a), *sb = cpt_math_normalize(b);
            eq = sa && sb && strcmp(sa, sb) == 0;
            free(sa);
            free(sb);
        }
    }
    free(na);
    free(nb);
    return eq;
}

char *cpt_math_gold_answer(const char *gold) {
    if (!gold) return NULL;
    size_t n = strlen(gold);
    char *a = cpt_math_extract_answer(gold, n);
    return a ? a : dup_range(gold, n);
}

int cpt_math_grade(const char *completion, size_t len, const char *gold, int *found) {
    char *ans = cpt_math_extract_answer(completion, len);
    if (found) *found = ans != NULL;
    if (!ans) return 0;
    char *g = cpt_math_gold_answer(gold);
    int ok = g && cpt_math_answers_equal(ans, g);
    free(ans);
    free(g);
    return ok;
}
