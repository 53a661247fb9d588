/* cpt tokenize --tokenizer PATH [--decode] [--skip-special] [--threads N]
 *
 * JSONL on stdin, JSONL on stdout, one output line per input line (blank lines are skipped):
 *   encode: {"text": "..."}  ->  {"ids": [...]}
 *   decode: {"ids": [...]}   ->  {"text": "..."}
 * A bad line stops the run with "stdin:LINE: ..." and exit status 1; lines before it have been written.
 * Encoding runs in chunks of lines over --threads threads (default 1). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "core/tokenizer.h"

#define CHUNK_LINES 1024

static void usage(FILE *f) {
    fprintf(f, "usage: cpt tokenize --tokenizer PATH [--decode] [--skip-special] [--threads N] < in.jsonl > out.jsonl\n"
               "  encode: {\"text\": ...} lines -> {\"ids\": [...]} lines\n"
               "  --decode: {\"ids\": [...]} lines -> {\"text\": ...} lines (--skip-special drops special tokens)\n"
               "  PATH: tokenizer.json, a folder holding it, or GPT-2's encoder.json + vocab.bpe folder\n");
}

static int is_blank(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r' && s[i] != '\n') return 0;
    return 1;
}

typedef struct {
    char *text;
    size_t len;
    size_t line;
} pending_t;

/* Encodes the chunk and prints it; frees the texts. */
static int flush_encode(const cpt_tokenizer *tok, pending_t *p, size_t n, int threads) {
    const char **texts = calloc(n + 1, sizeof *texts);
    size_t *lens = calloc(n + 1, sizeof *lens), *counts = calloc(n + 1, sizeof *counts);
    int32_t **ids = calloc(n + 1, sizeof *ids);
    int rc = 0;
    if (!texts || !lens || !counts || !ids) {
        fprintf(stderr, "cpt tokenize: out of memory\n");
        rc = -1;
    }
    for (size_t i = 0; rc == 0 && i < n; i++) {
        texts[i] = p[i].text;
        lens[i] = p[i].len;
    }
    cpt_err err;
    if (rc == 0 && cpt_tokenizer_encode_batch(tok, texts, lens, n, threads, ids, counts, &err) != 0) {
        /* the message starts "text K: ..." with K the index in the chunk */
        size_t k = 0;
        const char *msg = err.msg;
        if (sscanf(err.msg, "text %zu: ", &k) == 1 && k < n) msg = strchr(err.msg, ':') + 2;
        fprintf(stderr, "cpt tokenize: stdin:%zu: %s\n", k < n ? p[k].line : 0, msg);
        rc = -1;
    }
    for (size_t i = 0; rc == 0 && i < n; i++) {
        fputs("{\"ids\":[", stdout);
        for (size_t j = 0; j < counts[i]; j++) printf(j ? ",%d" : "%d", ids[i][j]);
        fputs("]}\n", stdout);
        free(ids[i]);
    }
    for (size_t i = 0; i < n; i++) free(p[i].text);
    free(texts);
    free(lens);
    free(counts);
    free(ids);
    return rc;
}

static int decode_line(const cpt_tokenizer *tok, json_t *j, size_t line, int skip_special) {
    json_t *arr = json_object_get(j, "ids");
    if (!json_is_array(arr)) {
        fprintf(stderr, "cpt tokenize: stdin:%zu: expected an object with an \"ids\" array\n", line);
        return -1;
    }
    size_t n = json_array_size(arr);
    int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
    if (!ids) return -1;
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_array_get(arr, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX) {
            fprintf(stderr, "cpt tokenize: stdin:%zu: ids[%zu] is not a non-negative 32-bit integer\n", line, i);
            free(ids);
            return -1;
        }
        ids[i] = (int32_t)json_integer_value(v);
    }
    cpt_err err;
    size_t len;
    char *text = cpt_tokenizer_decode(tok, ids, n, skip_special, &len, &err);
    free(ids);
    if (!text) {
        fprintf(stderr, "cpt tokenize: stdin:%zu: %s\n", line, err.msg);
        return -1;
    }
    json_t *out = json_pack("{s:s%}", "text", text, len);
    free(text);
    char *s = out ? json_dumps(out, JSON_COMPACT) : NULL;
    json_decref(out);
    if (!s) {
        fprintf(stderr, "cpt tokenize: stdin:%zu: cannot write the text as JSON\n", line);
        return -1;
    }
    puts(s);
    free(s);
    return 0;
}

int cmd_tokenize(int argc, char **argv) {
    const char *path = NULL;
    int decode = 0, skip_special = 0, threads = 1;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--tokenizer") == 0 && i + 1 < argc) path = argv[++i];
        else if (strcmp(argv[i], "--decode") == 0) decode = 1;
        else if (strcmp(argv[i], "--skip-special") == 0) skip_special = 1;
        else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc) {
            char *end;
            long t = strtol(argv[++i], &end, 10);
            if (*end || t < 1 || t > 1024) {
                fprintf(stderr, "cpt tokenize: --threads needs a number from 1 to 1024, got \"%s\"\n", argv[i]);
                return 2;
            }
            threads = (int)t;
        } else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "cpt tokenize: unknown or incomplete argument \"%s\"\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }
    if (!path) {
        fprintf(stderr, "cpt tokenize: --tokenizer PATH is required\n");
        usage(stderr);
        return 2;
    }
    cpt_err err;
    cpt_tokenizer *tok = cpt_tokenizer_load(path, &err);
    if (!tok) {
        fprintf(stderr, "cpt tokenize: %s\n", err.msg);
        return 1;
    }
    pending_t *pend = malloc(CHUNK_LINES * sizeof *pend);
    size_t n_pend = 0, line = 0;
    char *buf = NULL;
    size_t cap = 0;
    ssize_t got;
    int rc = pend ? 0 : -1;
    while (rc == 0 && (got = getline(&buf, &cap, stdin)) >= 0) {
        line++;
        if (is_blank(buf, (size_t)got)) continue;
        json_error_t je;
        json_t *j = json_loadb(buf, (size_t)got, JSON_ALLOW_NUL, &je);
        if (!j) {
            fprintf(stderr, "cpt tokenize: stdin:%zu:%d: invalid JSON: %s\n", line, je.column, je.text);
            rc = -1;
            break;
        }
        if (decode) {
            rc = decode_line(tok, j, line, skip_special);
        } else {
            json_t *t = json_object_get(j, "text");
            if (!json_is_string(t)) {
                fprintf(stderr, "cpt tokenize: stdin:%zu: expected an object with a \"text\" string\n", line);
                rc = -1;
            } else {
                pending_t *p = &pend[n_pend];
                p->len = json_string_length(t);
                p->text = malloc(p->len + 1);
                p->line = line;
                if (!p->text) rc = -1;
                else {
                    memcpy(p->text, json_string_value(t), p->len + 1);
                    if (++n_pend == CHUNK_LINES) {
                        rc = flush_encode(tok, pend, n_pend, threads);
                        n_pend = 0;
                    }
                }
            }
        }
        json_decref(j);
    }
    if (n_pend) { /* the good lines before a bad one are written too */
        int frc = flush_encode(tok, pend, n_pend, threads);
        if (rc == 0) rc = frc;
    }
    if (rc == 0 && ferror(stdin)) {
        fprintf(stderr, "cpt tokenize: reading stdin failed\n");
        rc = -1;
    }
    if (fflush(stdout) != 0 && rc == 0) {
        fprintf(stderr, "cpt tokenize: writing stdout failed\n");
        rc = -1;
    }
    free(buf);
    free(pend);
    cpt_tokenizer_free(tok);
    return rc == 0 ? 0 : 1;
}
