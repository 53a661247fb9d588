/* cpt side of the tokenizer benchmark (bench/tokenizer_bench.sh runs it beside bench/tokenizer_bench.py).
 *
 * Encodes the parity corpus repeated to --mb megabytes, one document per corpus line (the same documents in the
 * same order as the Python side), and prints
 *   cpt threads=N mode=MODE bytes=B docs=D ids=I checksum=C seconds=S mb_s=R
 * for mode encode (one cpt_tokenizer_encode call per document, single thread) and encode_batch (N threads).
 * The checksum (sum of ids mod 2^32) must match HF's. --dump FILE writes each corpus line's ids as JSONL instead
 * (for parity checks on machines with HF tokenizers). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fs.h"
#include "core/tokenizer.h"

typedef struct {
    char **texts;
    size_t *lens;
    size_t n, cap;
} docs_t;

static void push(docs_t *d, char *t, size_t len) {
    if (d->n == d->cap) {
        d->cap = d->cap ? d->cap * 2 : 1024;
        d->texts = realloc(d->texts, d->cap * sizeof *d->texts);
        d->lens = realloc(d->lens, d->cap * sizeof *d->lens);
        if (!d->texts || !d->lens) exit(1);
    }
    d->texts[d->n] = t;
    d->lens[d->n++] = len;
}

static int load_corpus(const char *path, docs_t *base, int keep_empty) {
    cpt_err err;
    size_t len;
    char *text = cpt_read_file(path, &len, &err);
    if (!text) {
        fprintf(stderr, "%s\n", err.msg);
        return -1;
    }
    size_t line = 0;
    for (char *p = text; p < text + len;) {
        char *nl = memchr(p, '\n', (size_t)(text + len - p));
        size_t n = nl ? (size_t)(nl - p) : (size_t)(text + len - p);
        line++;
        json_error_t je;
        json_t *j = json_loadb(p, n, JSON_ALLOW_NUL, &je);
        json_t *t = json_object_get(j, "text");
        if (!json_is_string(t)) {
            fprintf(stderr, "%s:%zu: expected {\"text\": ...}\n", path, line);
            return -1;
        }
        size_t tl = json_string_length(t);
        if (tl || keep_empty) {
            char *copy = malloc(tl + 1);
            memcpy(copy, json_string_value(t), tl + 1);
            push(base, copy, tl);
        }
        json_decref(j);
        p += n + 1;
    }
    free(text);
    return 0;
}

static void report(const char *mode, int threads, size_t bytes, size_t docs, size_t ids, uint32_t sum, double secs) {
    printf("cpt threads=%d mode=%s bytes=%zu docs=%zu ids=%zu checksum=%u seconds=%.3f mb_s=%.2f\n", threads, mode,
           bytes, docs, ids, sum, secs, (double)bytes / secs / 1e6);
    fflush(stdout);
}

/* The id count and checksum of one pass over the documents (what report() prints); frees the ids. */
static void tally(const docs_t *docs, int32_t **ids, const size_t *counts, size_t *total, uint32_t *sum) {
    *total = 0;
    *sum = 0;
    for (size_t i = 0; i < docs->n; i++) {
        *total += counts[i];
        for (size_t k = 0; k < counts[i]; k++) *sum += (uint32_t)ids[i][k];
        free(ids[i]);
    }
}

int main(int argc, char **argv) {
    const char *tok_path = NULL, *corpus = NULL, *dump = NULL;
    double mb = 20;
    int threads = 1, reps = 3;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--tokenizer")) tok_path = argv[i + 1];
        else if (!strcmp(argv[i], "--corpus")) corpus = argv[i + 1];
        else if (!strcmp(argv[i], "--mb")) mb = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--threads")) threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--reps")) reps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--dump")) dump = argv[i + 1];
    }
    if (!tok_path || !corpus || threads < 1 || reps < 1) {
        fprintf(stderr, "usage: tokenizer_bench --tokenizer PATH --corpus JSONL [--mb 20] [--threads N] [--reps 3] "
                        "[--dump OUT.jsonl]\n");
        return 2;
    }
    cpt_err err;
    cpt_tokenizer *tok = cpt_tokenizer_load(tok_path, &err);
    if (!tok) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    docs_t base = {0};
    if (load_corpus(corpus, &base, dump != NULL) != 0) return 1;
    if (dump) {
        FILE *f = fopen(dump, "w");
        if (!f) return 1;
        for (size_t i = 0; i < base.n; i++) {
            int32_t *ids;
            long n = cpt_tokenizer_encode(tok, base.texts[i], base.lens[i], &ids, &err);
            if (n < 0) {
                fprintf(stderr, "%s:%zu: %s\n", corpus, i + 1, err.msg);
                return 1;
            }
            fputs("{\"ids\":[", f);
            for (long k = 0; k < n; k++) fprintf(f, k ? ",%d" : "%d", ids[k]);
            fputs("]}\n", f);
            free(ids);
        }
        fclose(f);
        return 0;
    }
    /* The documents: the corpus repeated until mb megabytes. */
    docs_t docs = {0};
    size_t bytes = 0, target = (size_t)(mb * 1e6);
    while (bytes < target)
        for (size_t i = 0; i < base.n && bytes < target; i++) {
            push(&docs, base.texts[i], base.lens[i]);
            bytes += base.lens[i];
        }
    int32_t **ids = calloc(docs.n, sizeof *ids);
    size_t *counts = calloc(docs.n, sizeof *counts);

    if (threads == 1) { /* one call per document */
        double best = 1e30;
        size_t total = 0;
        uint32_t sum = 0;
        for (int r = 0; r < reps; r++) {
            double t0 = cpt_now();
            for (size_t i = 0; i < docs.n; i++) {
                long n = cpt_tokenizer_encode(tok, docs.texts[i], docs.lens[i], &ids[i], &err);
                if (n < 0) {
                    fprintf(stderr, "doc %zu: %s\n", i, err.msg);
                    return 1;
                }
                counts[i] = (size_t)n;
            }
            double dt = cpt_now() - t0;
            if (dt < best) best = dt;
            tally(&docs, ids, counts, &total, &sum);
        }
        report("encode", 1, bytes, docs.n, total, sum, best);
    }
    double best = 1e30;
    size_t total = 0;
    uint32_t sum = 0;
    for (int r = 0; r < reps; r++) {
        double t0 = cpt_now();
        if (cpt_tokenizer_encode_batch(tok, (const char *const *)docs.texts, docs.lens, docs.n, threads, ids, counts,
                                       &err) != 0) {
            fprintf(stderr, "%s\n", err.msg);
            return 1;
        }
        double dt = cpt_now() - t0;
        if (dt < best) best = dt;
        tally(&docs, ids, counts, &total, &sum);
    }
    report("encode_batch", threads, bytes, docs.n, total, sum, best);
    for (size_t i = 0; i < base.n; i++) free(base.texts[i]);
    free(base.texts);
    free(base.lens);
    free(docs.texts);
    free(docs.lens);
    free(ids);
    free(counts);
    cpt_tokenizer_free(tok);
    return 0;
}
