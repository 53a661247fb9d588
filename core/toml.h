/* A TOML subset parser, flat: the document becomes a list of (full dotted key, value, line).
 *
 * Supported: [table] and [a.b] headers, bare / quoted / dotted keys, basic strings (escapes \b \t \n \f \r \" \\
 * \uXXXX \UXXXXXXXX) and literal strings, integers (sign, _ separators, 0x/0o/0b), floats (fraction, exponent,
 * inf, nan), booleans, arrays of one scalar type (multi-line, trailing comma), # comments.
 * Not supported (a clear error): multi-line strings, inline tables, arrays of tables, dates, nested arrays.
 * Errors are "NAME:LINE: message". Duplicate keys and duplicate [table] headers are errors. */
#ifndef CPT_CORE_TOML_H
#define CPT_CORE_TOML_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"

typedef enum { CPT_TOML_STR, CPT_TOML_INT, CPT_TOML_FLOAT, CPT_TOML_BOOL, CPT_TOML_ARRAY } cpt_toml_type;

typedef struct cpt_toml_value {
    cpt_toml_type type;
    int64_t i;                     /* INT */
    double f;                      /* FLOAT */
    int b;                         /* BOOL */
    char *s;                       /* STR: malloc'd, valid UTF-8, no NUL inside */
    size_t n;                      /* ARRAY: item count */
    struct cpt_toml_value *items;  /* ARRAY: n scalars of one type */
} cpt_toml_value;

typedef struct cpt_toml_entry {
    char *key; /* full dotted key, table prefix included */
    int line;
    cpt_toml_value value;
} cpt_toml_entry;

typedef struct cpt_toml_doc {
    cpt_toml_entry *entries;
    size_t n, cap;
} cpt_toml_doc;

/* Parses len bytes of text (need not be NUL-terminated); name is used in messages. On error doc is left empty. */
int cpt_toml_parse(const char *text, size_t len, const char *name, cpt_toml_doc *doc, cpt_err *err);
void cpt_toml_free(cpt_toml_doc *doc);

/* Parses one value (a scalar or an array) that must fill the whole NUL-terminated text, surrounding blanks
 * allowed: for `key=value` overrides. */
int cpt_toml_parse_value(const char *text, cpt_toml_value *out, cpt_err *err);
void cpt_toml_value_free(cpt_toml_value *v);

const char *cpt_toml_type_name(cpt_toml_type t);

/* Appends s as a TOML basic string (quotes and escapes) to a growing buffer; returns -1 on allocation failure. */
typedef struct cpt_strbuf {
    char *data;
    size_t len, cap;
} cpt_strbuf;
int cpt_strbuf_add(cpt_strbuf *b, const char *s, size_t n);
int cpt_strbuf_printf(cpt_strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int cpt_toml_write_string(cpt_strbuf *b, const char *s);
/* Shortest text that reads back to exactly f, always with a '.' or exponent (or inf / nan). */
int cpt_toml_write_float(cpt_strbuf *b, double f);

#endif
