#include "core/toml.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- growing string buffer ---- */

int cpt_strbuf_add(cpt_strbuf *b, const char *s, size_t n) {
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) cap *= 2;
        char *d = realloc(b->data, cap);
        if (!d) return -1;
        b->data = d;
        b->cap = cap;
    }
    memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = '\0';
    return 0;
}

int cpt_strbuf_printf(cpt_strbuf *b, const char *fmt, ...) {
    char small[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0) return -1;
    if ((size_t)n < sizeof small) return cpt_strbuf_add(b, small, (size_t)n);
    char *big = malloc((size_t)n + 1);
    if (!big) return -1;
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    int rc = cpt_strbuf_add(b, big, (size_t)n);
    free(big);
    return rc;
}

int cpt_toml_write_string(cpt_strbuf *b, const char *s) {
    if (cpt_strbuf_add(b, "\"", 1)) return -1;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        int rc;
        switch (*p) {
        case '"': rc = cpt_strbuf_add(b, "\\\"", 2); break;
        case '\\': rc = cpt_strbuf_add(b, "\\\\", 2); break;
        case '\n': rc = cpt_strbuf_add(b, "\\n", 2); break;
        case '\t': rc = cpt_strbuf_add(b, "\\t", 2); break;
        case '\r': rc = cpt_strbuf_add(b, "\\r", 2); break;
        default:
            if (*p < 0x20 || *p == 0x7f) rc = cpt_strbuf_printf(b, "\\u%04x", *p);
            else rc = cpt_strbuf_add(b, (const char *)p, 1);
        }
        if (rc) return -1;
    }
    return cpt_strbuf_add(b, "\"", 1);
}

int cpt_toml_write_float(cpt_strbuf *b, double f) {
    if (isnan(f)) return cpt_strbuf_add(b, "nan", 3);
    if (isinf(f)) return f > 0 ? cpt_strbuf_add(b, "inf", 3) : cpt_strbuf_add(b, "-inf", 4);
    char tmp[400];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*g", prec, f);
        if (strtod(tmp, NULL) == f) break;
    }
    /* Plain notation reads better for moderate magnitudes (10.0, not 1e+01). */
    if (strchr(tmp, 'e') && fabs(f) >= 1e-4 && fabs(f) < 1e16) {
        for (int prec = 1; prec <= 20; prec++) {
            snprintf(tmp, sizeof tmp, "%.*f", prec, f);
            if (strtod(tmp, NULL) == f) break;
        }
    }
    if (!strpbrk(tmp, ".eEn")) strcat(tmp, ".0");
    /* TOML needs a digit after '.', and C prints "1e+20" which TOML accepts; "1.e5" cannot occur with %g. */
    return cpt_strbuf_add(b, tmp, strlen(tmp));
}

/* ---- a small string set for duplicate detection (open addressing) ---- */

typedef struct strset {
    char **slots;
    size_t cap, n;
} strset;

static uint64_t hash_str(const char *s) {
    uint64_t h = 1469598103934665603ULL;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ULL;
    return h;
}

/* Returns 1 if s was already present, 0 if added (set takes no ownership: s must outlive the set), -1 on OOM. */
static int strset_add(strset *set, char *s) {
    if ((set->n + 1) * 2 > set->cap) {
        size_t cap = set->cap ? set->cap * 2 : 64;
        char **slots = calloc(cap, sizeof *slots);
        if (!slots) return -1;
        for (size_t i = 0; i < set->cap; i++) {
            if (!set->slots[i]) continue;
            size_t j = hash_str(set->slots[i]) & (cap - 1);
            while (slots[j]) j = (j + 1) & (cap - 1);
            slots[j] = set->slots[i];
        }
        free(set->slots);
        set->slots = slots;
        set->cap = cap;
    }
    size_t j = hash_str(s) & (set->cap - 1);
    while (set->slots[j]) {
        if (!strcmp(set->slots[j], s)) return 1;
        j = (j + 1) & (set->cap - 1);
    }
    set->slots[j] = s;
    set->n++;
    return 0;
}

/* ---- parser ---- */

typedef struct parser {
    const char *p, *end;
    const char *name;
    int line;
    cpt_err *err;
} parser;

static int perr(parser *ps, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int perr(parser *ps, const char *fmt, ...) {
    char msg[CPT_ERR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (!ps->name) return cpt_errf(ps->err, "%s", msg);
    if (ps->line > 0) return cpt_errf(ps->err, "%s:%d: %s", ps->name, ps->line, msg);
    return cpt_errf(ps->err, "%s: %s", ps->name, msg);
}

static int peek(const parser *ps) { return ps->p < ps->end ? (unsigned char)*ps->p : -1; }
static int peek_at(const parser *ps, size_t k) {
    return ps->p + k < ps->end ? (unsigned char)ps->p[k] : -1;
}

static void skip_ws(parser *ps) {
    while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t')) ps->p++;
}

static void skip_comment(parser *ps) {
    if (peek(ps) == '#')
        while (ps->p < ps->end && *ps->p != '\n') ps->p++;
}

/* Consumes a newline (\n or \r\n) if one is next; returns 1 if it did. */
static int eat_newline(parser *ps) {
    if (peek(ps) == '\n') {
        ps->p++;
        ps->line++;
        return 1;
    }
    if (peek(ps) == '\r' && peek_at(ps, 1) == '\n') {
        ps->p += 2;
        ps->line++;
        return 1;
    }
    return 0;
}

static int expect_eol(parser *ps, const char *after) {
    skip_ws(ps);
    skip_comment(ps);
    if (ps->p >= ps->end || eat_newline(ps)) return 0;
    int c = peek(ps);
    if (c >= 0x21 && c < 0x7f) return perr(ps, "unexpected '%c' after %s (expected end of line)", c, after);
    return perr(ps, "unexpected byte 0x%02x after %s (expected end of line)", c, after);
}

static int utf8_valid(const unsigned char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        size_t k;
        uint32_t cp;
        if (c < 0x80) { i++; continue; }
        else if ((c & 0xe0) == 0xc0) { k = 1; cp = c & 0x1f; }
        else if ((c & 0xf0) == 0xe0) { k = 2; cp = c & 0x0f; }
        else if ((c & 0xf8) == 0xf0) { k = 3; cp = c & 0x07; }
        else return 0;
        for (size_t j = 1; j <= k; j++) {
            if (i + j >= n || (s[i + j] & 0xc0) != 0x80) return 0;
            cp = (cp << 6) | (s[i + j] & 0x3f);
        }
        if ((k == 1 && cp < 0x80) || (k == 2 && cp < 0x800) || (k == 3 && cp < 0x10000)) return 0; /* overlong */
        if (cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
        i += k + 1;
    }
    return 1;
}

static int put_utf8(cpt_strbuf *b, uint32_t cp) {
    char u[4];
    size_t n;
    if (cp < 0x80) { u[0] = (char)cp; n = 1; }
    else if (cp < 0x800) { u[0] = (char)(0xc0 | (cp >> 6)); u[1] = (char)(0x80 | (cp & 0x3f)); n = 2; }
    else if (cp < 0x10000) {
        u[0] = (char)(0xe0 | (cp >> 12)); u[1] = (char)(0x80 | ((cp >> 6) & 0x3f)); u[2] = (char)(0x80 | (cp & 0x3f));
        n = 3;
    } else {
        u[0] = (char)(0xf0 | (cp >> 18)); u[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
        u[2] = (char)(0x80 | ((cp >> 6) & 0x3f)); u[3] = (char)(0x80 | (cp & 0x3f));
        n = 4;
    }
    return cpt_strbuf_add(b, u, n);
}

static int hexval(int c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Parses a basic ("...") or literal ('...') single-line string at ps->p into a malloc'd NUL-terminated string. */
static int parse_string(parser *ps, char **out) {
    int quote = peek(ps);
    if (peek_at(ps, 1) == quote && peek_at(ps, 2) == quote)
        return perr(ps, "multi-line strings (%c%c%c) are not supported", quote, quote, quote);
    ps->p++;
    cpt_strbuf b = {0};
    if (cpt_strbuf_add(&b, "", 0)) return perr(ps, "out of memory");
    for (;;) {
        int c = peek(ps);
        if (c < 0 || c == '\n' || (c == '\r' && peek_at(ps, 1) == '\n')) {
            free(b.data);
            return perr(ps, "unterminated string");
        }
        if (c == quote) { ps->p++; break; }
        if ((c < 0x20 && c != '\t') || c == 0x7f) {
            free(b.data);
            return perr(ps, "control character 0x%02x in a string (use an escape)", c);
        }
        if (c == '\\' && quote == '"') {
            int e = peek_at(ps, 1);
            int rc = 0;
            ps->p += 2;
            switch (e) {
            case 'b': rc = cpt_strbuf_add(&b, "\b", 1); break;
            case 't': rc = cpt_strbuf_add(&b, "\t", 1); break;
            case 'n': rc = cpt_strbuf_add(&b, "\n", 1); break;
            case 'f': rc = cpt_strbuf_add(&b, "\f", 1); break;
            case 'r': rc = cpt_strbuf_add(&b, "\r", 1); break;
            case '"': rc = cpt_strbuf_add(&b, "\"", 1); break;
            case '\\': rc = cpt_strbuf_add(&b, "\\", 1); break;
            case 'u':
            case 'U': {
                int nd = e == 'u' ? 4 : 8;
                uint32_t cp = 0;
                for (int k = 0; k < nd; k++) {
                    int h = hexval(peek(ps));
                    if (h < 0) {
                        free(b.data);
                        return perr(ps, "bad \\%c escape: expected %d hex digits", e, nd);
                    }
                    cp = cp * 16 + (uint32_t)h;
                    ps->p++;
                }
                if (cp == 0 || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) {
                    free(b.data);
                    return perr(ps, "escape \\%c%0*X is not a usable Unicode scalar value", e, nd, (unsigned)cp);
                }
                rc = put_utf8(&b, cp);
                break;
            }
            default:
                free(b.data);
                if (e >= 0x21 && e < 0x7f) return perr(ps, "unknown escape '\\%c' in a string", e);
                return perr(ps, "unknown escape in a string");
            }
            if (rc) { free(b.data); return perr(ps, "out of memory"); }
            continue;
        }
        if (cpt_strbuf_add(&b, ps->p, 1)) { free(b.data); return perr(ps, "out of memory"); }
        ps->p++;
    }
    if (!utf8_valid((const unsigned char *)b.data, b.len)) {
        free(b.data);
        return perr(ps, "string is not valid UTF-8");
    }
    *out = b.data;
    return 0;
}

static int is_bare(int c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
}

/* key = simple-key ( ws '.' ws simple-key )*, joined with '.' into b. */
static int parse_key(parser *ps, cpt_strbuf *b) {
    for (;;) {
        skip_ws(ps);
        int c = peek(ps);
        if (c == '"' || c == '\'') {
            char *s;
            if (parse_string(ps, &s)) return -1;
            int rc = cpt_strbuf_add(b, s, strlen(s));
            free(s);
            if (rc) return perr(ps, "out of memory");
        } else if (is_bare(c)) {
            const char *start = ps->p;
            while (is_bare(peek(ps))) ps->p++;
            if (cpt_strbuf_add(b, start, (size_t)(ps->p - start))) return perr(ps, "out of memory");
        } else if (c < 0 || c == '\n' || c == '\r') {
            return perr(ps, "expected a key");
        } else if (c >= 0x21 && c < 0x7f) {
            return perr(ps, "unexpected '%c' where a key was expected", c);
        } else {
            return perr(ps, "unexpected byte 0x%02x where a key was expected", c);
        }
        skip_ws(ps);
        if (peek(ps) != '.') return 0;
        ps->p++;
        if (cpt_strbuf_add(b, ".", 1)) return perr(ps, "out of memory");
    }
}

static int is_value_end(int c) {
    return c < 0 || c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '#' || c == ',' || c == ']';
}

/* Validates digits with single '_' between digits for the given base; returns the digit count or -1. */
static int check_digits(const char *s, size_t n, int base) {
    int count = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '_') {
            if (i == 0 || i + 1 == n || s[i - 1] == '_') return -1;
            continue;
        }
        int v = hexval((unsigned char)s[i]);
        if (v < 0 || v >= base) return -1;
        count++;
    }
    return count;
}

/* An extension of TOML: C99 hexadecimal floats, [+-]0xHEX[.HEX]p[+-]DEC (e.g. 0x1p-3 = 0.125), exact in binary. */
static int parse_hex_float(parser *ps, const char *tok, size_t n, cpt_toml_value *v) {
    size_t i = (tok[0] == '+' || tok[0] == '-') ? 3 : 2, mant = 0;
    for (; i < n && isxdigit((unsigned char)tok[i]); i++) mant++;
    if (i < n && tok[i] == '.')
        for (i++; i < n && isxdigit((unsigned char)tok[i]); i++) mant++;
    size_t exp = 0;
    if (i < n && (tok[i] == 'p' || tok[i] == 'P')) {
        i++;
        if (i < n && (tok[i] == '+' || tok[i] == '-')) i++;
        for (; i < n && isdigit((unsigned char)tok[i]); i++) exp++;
    }
    if (!mant || !exp || i != n || n >= 128)
        return perr(ps, "not a number: '%.*s' (a hexadecimal float is written like 0x1.8p-3)", (int)(n > 60 ? 60 : n), tok);
    char clean[128];
    memcpy(clean, tok, n);
    clean[n] = '\0';
    errno = 0;
    char *end;
    v->type = CPT_TOML_FLOAT;
    v->f = strtod(clean, &end);
    if (end != clean + n) return perr(ps, "not a number: '%.*s'", (int)n, tok);
    if (errno == ERANGE && isinf(v->f)) return perr(ps, "float '%.*s' is out of range", (int)n, tok);
    return 0;
}

static int parse_number(parser *ps, const char *tok, size_t n, cpt_toml_value *v) {
    const char *s = tok;
    size_t len = n;
    int neg = 0, signed_ = 0;
    if (len && (*s == '+' || *s == '-')) {
        neg = *s == '-';
        signed_ = 1;
        s++, len--;
    }
    if ((len == 3 && !memcmp(s, "inf", 3)) || (len == 3 && !memcmp(s, "nan", 3))) {
        v->type = CPT_TOML_FLOAT;
        v->f = s[0] == 'i' ? (neg ? -INFINITY : INFINITY) : NAN;
        return 0;
    }
    if (len > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X') && (memchr(s, 'p', len) || memchr(s, 'P', len)))
        return parse_hex_float(ps, tok, n, v);
    for (size_t i = 0; i < len; i++)
        if (s[i] == ':' || (s[i] == '-' && i > 0 && s[i - 1] != 'e' && s[i - 1] != 'E'))
            return perr(ps, "dates and times are not supported: '%.*s'", (int)n, tok);
    if (len > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'o' || s[1] == 'b')) {
        int base = s[1] == 'x' ? 16 : s[1] == 'o' ? 8 : 2;
        if (signed_) return perr(ps, "a sign is not allowed on '%.*s'", (int)n, tok);
        if (check_digits(s + 2, len - 2, base) <= 0) return perr(ps, "bad integer '%.*s'", (int)n, tok);
        uint64_t acc = 0;
        for (size_t i = 2; i < len; i++) {
            if (s[i] == '_') continue;
            uint64_t d = (uint64_t)hexval((unsigned char)s[i]);
            if (acc > (UINT64_MAX - d) / (uint64_t)base || acc * (uint64_t)base + d > (uint64_t)INT64_MAX)
                return perr(ps, "integer '%.*s' does not fit in 64 bits", (int)n, tok);
            acc = acc * (uint64_t)base + d;
        }
        v->type = CPT_TOML_INT;
        v->i = (int64_t)acc;
        return 0;
    }
    /* decimal: int-part [ '.' digits ] [ (e|E) [sign] digits ] */
    size_t i = 0;
    while (i < len && s[i] != '.' && s[i] != 'e' && s[i] != 'E') i++;
    size_t int_len = i;
    if (check_digits(s, int_len, 10) <= 0) return perr(ps, "bad value '%.*s'", (int)n, tok);
    if (int_len > 1 && s[0] == '0') return perr(ps, "leading zeros are not allowed: '%.*s'", (int)n, tok);
    int is_float = 0;
    if (i < len && s[i] == '.') {
        size_t f0 = ++i;
        while (i < len && s[i] != 'e' && s[i] != 'E') i++;
        if (check_digits(s + f0, i - f0, 10) <= 0)
            return perr(ps, "bad float '%.*s' (digits needed after '.')", (int)n, tok);
        is_float = 1;
    }
    if (i < len && (s[i] == 'e' || s[i] == 'E')) {
        size_t e0 = ++i;
        if (i < len && (s[i] == '+' || s[i] == '-')) e0 = ++i;
        if (check_digits(s + e0, len - e0, 10) <= 0) return perr(ps, "bad float exponent in '%.*s'", (int)n, tok);
        is_float = 1;
    }
    char clean[128];
    size_t k = 0;
    for (size_t j = 0; j < n; j++) {
        if (tok[j] == '_') continue;
        if (k + 1 >= sizeof clean) return perr(ps, "number too long: '%.40s...'", tok);
        clean[k++] = tok[j];
    }
    clean[k] = '\0';
    errno = 0;
    if (is_float) {
        v->type = CPT_TOML_FLOAT;
        v->f = strtod(clean, NULL);
        if (errno == ERANGE && isinf(v->f)) return perr(ps, "float '%.*s' is out of range", (int)n, tok);
    } else {
        v->type = CPT_TOML_INT;
        v->i = strtoll(clean, NULL, 10);
        if (errno == ERANGE) return perr(ps, "integer '%.*s' does not fit in 64 bits", (int)n, tok);
    }
    return 0;
}

static int parse_value(parser *ps, cpt_toml_value *v, int in_array);

/* Skips blanks, newlines and comments between array items. */
static void skip_array_space(parser *ps) {
    for (;;) {
        skip_ws(ps);
        skip_comment(ps);
        if (!eat_newline(ps)) return;
    }
}

static int parse_array(parser *ps, cpt_toml_value *v) {
    int start_line = ps->line;
    ps->p++; /* '[' */
    v->type = CPT_TOML_ARRAY;
    v->n = 0;
    v->items = NULL;
    size_t cap = 0;
    for (;;) {
        skip_array_space(ps);
        if (peek(ps) == ']') { ps->p++; return 0; }
        if (peek(ps) < 0) { cpt_toml_value_free(v); return perr(ps, "unterminated array (opened at line %d)", start_line); }
        if (v->n == cap) {
            cap = cap ? cap * 2 : 8;
            cpt_toml_value *items = realloc(v->items, cap * sizeof *items);
            if (!items) { cpt_toml_value_free(v); return perr(ps, "out of memory"); }
            v->items = items;
        }
        cpt_toml_value *it = &v->items[v->n];
        memset(it, 0, sizeof *it);
        if (parse_value(ps, it, 1)) { cpt_toml_value_free(v); return -1; }
        v->n++;
        if (v->n > 1 && it->type != v->items[0].type) {
            const char *a = cpt_toml_type_name(v->items[0].type), *b = cpt_toml_type_name(it->type);
            cpt_toml_value_free(v);
            return perr(ps, "array mixes %s and %s values", a, b);
        }
        skip_array_space(ps);
        if (peek(ps) == ',') { ps->p++; continue; }
        if (peek(ps) == ']') { ps->p++; return 0; }
        cpt_toml_value_free(v);
        if (peek(ps) < 0) return perr(ps, "unterminated array (opened at line %d)", start_line);
        return perr(ps, "expected ',' or ']' in an array");
    }
}

static int parse_value(parser *ps, cpt_toml_value *v, int in_array) {
    memset(v, 0, sizeof *v);
    int c = peek(ps);
    if (c == '"' || c == '\'') {
        v->type = CPT_TOML_STR;
        return parse_string(ps, &v->s);
    }
    if (c == '[') {
        if (in_array) return perr(ps, "nested arrays are not supported");
        return parse_array(ps, v);
    }
    if (c == '{') return perr(ps, "inline tables are not supported; use a [table] or dotted keys");
    if (c < 0 || c == '\n' || c == '\r' || c == '#') return perr(ps, "missing value");
    const char *start = ps->p;
    while (!is_value_end(peek(ps))) ps->p++;
    size_t n = (size_t)(ps->p - start);
    if (n == 0) return perr(ps, "unexpected '%c' where a value was expected", c);
    if ((n == 4 && !memcmp(start, "true", 4)) || (n == 5 && !memcmp(start, "false", 5))) {
        v->type = CPT_TOML_BOOL;
        v->b = n == 4;
        return 0;
    }
    int ok = (c >= '0' && c <= '9') || c == '+' || c == '-' || c == 'i' || c == 'n';
    for (size_t i = 0; ok && i < n; i++) {
        unsigned char ch = (unsigned char)start[i];
        if (ch < 0x21 || ch >= 0x7f) ok = 0;
    }
    if (!ok) {
        if (n > 60) n = 60;
        for (size_t i = 0; i < n; i++)
            if ((unsigned char)start[i] < 0x20 || (unsigned char)start[i] >= 0x7f)
                return perr(ps, "unexpected byte 0x%02x where a value was expected", (unsigned char)start[i]);
        return perr(ps, "bad value '%.*s' (strings need quotes)", (int)n, start);
    }
    return parse_number(ps, start, n, v);
}

static void doc_clear(cpt_toml_doc *doc) {
    for (size_t i = 0; i < doc->n; i++) {
        free(doc->entries[i].key);
        cpt_toml_value_free(&doc->entries[i].value);
    }
    free(doc->entries);
    memset(doc, 0, sizeof *doc);
}

int cpt_toml_parse(const char *text, size_t len, const char *name, cpt_toml_doc *doc, cpt_err *err) {
    memset(doc, 0, sizeof *doc);
    parser ps = {.p = text, .end = text + len, .name = name ? name : "<toml>", .line = 1, .err = err};
    strset keys = {0}, tables = {0};
    char **table_names = NULL;
    size_t n_tables = 0;
    char *table = NULL; /* current [table] prefix; NULL: root */
    int rc = -1;
    if (len >= 3 && !memcmp(text, "\xef\xbb\xbf", 3)) ps.p += 3; /* UTF-8 byte order mark */
    for (;;) {
        skip_ws(&ps);
        skip_comment(&ps);
        if (ps.p >= ps.end) break;
        if (eat_newline(&ps)) continue;
        int line = ps.line;
        cpt_strbuf kb = {0};
        if (peek(&ps) == '[') {
            if (peek_at(&ps, 1) == '[') { perr(&ps, "arrays of tables ([[...]]) are not supported"); goto out; }
            ps.p++;
            if (parse_key(&ps, &kb)) { free(kb.data); goto out; }
            skip_ws(&ps);
            if (peek(&ps) != ']') { free(kb.data); perr(&ps, "expected ']' to close the table header"); goto out; }
            ps.p++;
            if (expect_eol(&ps, "a table header")) { free(kb.data); goto out; }
            char **tn = realloc(table_names, (n_tables + 1) * sizeof *tn);
            if (!tn) { free(kb.data); perr(&ps, "out of memory"); goto out; }
            table_names = tn;
            table_names[n_tables++] = kb.data;
            int dup = strset_add(&tables, kb.data);
            if (dup) {
                ps.line = line;
                perr(&ps, dup < 0 ? "out of memory" : "table [%s] is defined twice", kb.data);
                goto out;
            }
            table = kb.data;
            continue;
        }
        if (table) {
            if (cpt_strbuf_add(&kb, table, strlen(table)) || cpt_strbuf_add(&kb, ".", 1)) {
                free(kb.data);
                perr(&ps, "out of memory");
                goto out;
            }
        }
        if (parse_key(&ps, &kb)) { free(kb.data); goto out; }
        skip_ws(&ps);
        if (peek(&ps) != '=') {
            free(kb.data);
            perr(&ps, "expected '=' after the key");
            goto out;
        }
        ps.p++;
        skip_ws(&ps);
        if (doc->n == doc->cap) {
            size_t cap = doc->cap ? doc->cap * 2 : 16;
            cpt_toml_entry *e = realloc(doc->entries, cap * sizeof *e);
            if (!e) { free(kb.data); perr(&ps, "out of memory"); goto out; }
            doc->entries = e;
            doc->cap = cap;
        }
        cpt_toml_entry *e = &doc->entries[doc->n];
        if (parse_value(&ps, &e->value, 0)) { free(kb.data); goto out; }
        e->key = kb.data;
        e->line = line;
        doc->n++;
        if (expect_eol(&ps, "a value")) goto out;
        int dup = strset_add(&keys, e->key);
        if (dup) {
            int first = 0;
            for (size_t i = 0; i + 1 < doc->n; i++)
                if (!strcmp(doc->entries[i].key, e->key)) first = doc->entries[i].line;
            ps.line = line;
            if (dup < 0) perr(&ps, "out of memory");
            else perr(&ps, "duplicate key '%s' (first set at line %d)", e->key, first);
            goto out;
        }
    }
    rc = 0;
out:
    for (size_t i = 0; i < n_tables; i++) free(table_names[i]);
    free(table_names);
    free(keys.slots);
    free(tables.slots);
    if (rc) doc_clear(doc);
    return rc;
}

void cpt_toml_free(cpt_toml_doc *doc) { doc_clear(doc); }

int cpt_toml_parse_value(const char *text, cpt_toml_value *out, cpt_err *err) {
    parser ps = {.p = text, .end = text + strlen(text), .name = NULL, .line = 0, .err = err};
    memset(out, 0, sizeof *out);
    skip_array_space(&ps);
    if (parse_value(&ps, out, 0)) return -1;
    skip_array_space(&ps);
    if (ps.p < ps.end) {
        cpt_toml_value_free(out);
        return perr(&ps, "unexpected text after the value: '%.40s'", ps.p);
    }
    return 0;
}

void cpt_toml_value_free(cpt_toml_value *v) {
    if (v->type == CPT_TOML_STR) free(v->s);
    if (v->type == CPT_TOML_ARRAY) {
        for (size_t i = 0; i < v->n; i++) cpt_toml_value_free(&v->items[i]);
        free(v->items);
    }
    memset(v, 0, sizeof *v);
}

const char *cpt_toml_type_name(cpt_toml_type t) {
    switch (t) {
    case CPT_TOML_STR: return "string";
    case CPT_TOML_INT: return "integer";
    case CPT_TOML_FLOAT: return "float";
    case CPT_TOML_BOOL: return "boolean";
    case CPT_TOML_ARRAY: return "array";
    }
    return "?";
}
