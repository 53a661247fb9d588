#include "core/json_util.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fs.h"

json_t *cpt_json_loadb(const char *buf, size_t len, size_t flags, const char *name, cpt_err *err) {
    json_error_t je;
    json_t *j = json_loadb(buf, len, flags | JSON_REJECT_DUPLICATES, &je);
    if (!j) cpt_errf(err, "%s:%d:%d: %s", name, je.line, je.column, je.text);
    return j;
}

json_t *cpt_json_load_file(const char *path, size_t flags, cpt_err *err) {
    size_t len;
    char *text = cpt_read_file(path, &len, err);
    if (!text) return NULL;
    json_t *j = cpt_json_loadb(text, len, flags, path, err);
    free(text);
    return j;
}

void cpt_json_buf_init(cpt_json_buf *b) { memset(b, 0, sizeof *b); }

void cpt_json_buf_free(cpt_json_buf *b) {
    free(b->s);
    memset(b, 0, sizeof *b);
}

void cpt_json_buf_reset(cpt_json_buf *b) {
    b->len = 0;
    if (b->s) b->s[0] = '\0';
}

static int reserve(cpt_json_buf *b, size_t extra) {
    if (b->oom) return -1;
    if (b->len + extra + 1 <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + extra + 1) cap *= 2;
    char *s = realloc(b->s, cap);
    if (!s) { b->oom = 1; return -1; }
    b->s = s;
    b->cap = cap;
    return 0;
}

void cpt_json_buf_append(cpt_json_buf *b, const char *data, size_t len) {
    if (reserve(b, len) != 0) return;
    memcpy(b->s + b->len, data, len);
    b->len += len;
    b->s[b->len] = '\0';
}

void cpt_json_buf_puts(cpt_json_buf *b, const char *s) { cpt_json_buf_append(b, s, strlen(s)); }

void cpt_json_buf_printf(cpt_json_buf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || reserve(b, (size_t)n) != 0) return;
    va_start(ap, fmt);
    vsnprintf(b->s + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

void cpt_json_buf_string(cpt_json_buf *b, const char *s) {
    cpt_json_buf_append(b, "\"", 1);
    const char *run = s; /* bytes that need no escape are copied in runs */
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        const char *esc = NULL;
        char u[8];
        switch (*p) {
        case '"': esc = "\\\""; break;
        case '\\': esc = "\\\\"; break;
        case '\n': esc = "\\n"; break;
        case '\r': esc = "\\r"; break;
        case '\t': esc = "\\t"; break;
        default:
            if (*p < 0x20) { snprintf(u, sizeof u, "\\u%04x", *p); esc = u; }
        }
        if (!esc) continue;
        cpt_json_buf_append(b, run, (size_t)((const char *)p - run));
        cpt_json_buf_puts(b, esc);
        run = (const char *)p + 1;
    }
    cpt_json_buf_puts(b, run);
    cpt_json_buf_append(b, "\"", 1);
}

void cpt_json_number_text(double v, char *out, size_t cap) {
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(out, cap, "%.*g", prec, v);
        if (strtod(out, NULL) == v) break;
    }
}

void cpt_json_buf_number(cpt_json_buf *b, double v) {
    if (!isfinite(v)) { cpt_json_buf_puts(b, "null"); return; }
    char tmp[40];
    cpt_json_number_text(v, tmp, sizeof tmp);
    /* "%g" never writes a bare "inf"/"nan" here, and "1e+20" is valid JSON; a locale comma would not be, but the
     * C locale is the only one cpt runs in. */
    cpt_json_buf_puts(b, tmp);
}
