/* Small JSON helpers over jansson: loading with errors that name file:line:column, and a growable text buffer
 * for writing JSON lines by hand (metrics, JSONL outputs) with correct string escaping and number formatting. */
#ifndef CPT_CORE_JSON_UTIL_H
#define CPT_CORE_JSON_UTIL_H

#include <jansson.h>
#include <stddef.h>

#include "core/error.h"

/* Parses len bytes; on failure the message is "NAME:LINE:COLUMN: TEXT". flags are jansson's decoding flags
 * (JSON_REJECT_DUPLICATES is always added: a repeated key is an error, never a silent overwrite). */
json_t *cpt_json_loadb(const char *buf, size_t len, size_t flags, const char *name, cpt_err *err);
/* The same for a whole file. */
json_t *cpt_json_load_file(const char *path, size_t flags, cpt_err *err);

/* A growable NUL-terminated buffer. Appends never fail loudly: on out-of-memory the buffer is marked and
 * cpt_json_buf_ok() turns false, so a caller checks once at the end. */
typedef struct cpt_json_buf {
    char *s;
    size_t len, cap;
    int oom;
} cpt_json_buf;

void cpt_json_buf_init(cpt_json_buf *b);
void cpt_json_buf_free(cpt_json_buf *b);
static inline int cpt_json_buf_ok(const cpt_json_buf *b) { return !b->oom; }
void cpt_json_buf_reset(cpt_json_buf *b); /* len = 0, keeps the memory */
void cpt_json_buf_append(cpt_json_buf *b, const char *data, size_t len);
void cpt_json_buf_puts(cpt_json_buf *b, const char *s);
void cpt_json_buf_printf(cpt_json_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A quoted JSON string: escapes ", \, control characters; other bytes (UTF-8) pass through. */
void cpt_json_buf_string(cpt_json_buf *b, const char *s);
/* The shortest decimal that reads back to the same double; NaN and infinities are written as null. */
void cpt_json_buf_number(cpt_json_buf *b, double v);
/* The same decimal as text (a finite v): 0.1 as "0.1", where a 17-digit dump writes 0.10000000000000001. */
void cpt_json_number_text(double v, char *out, size_t cap);

#endif
