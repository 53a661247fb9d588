/* The tokenizer a fuzz harness loads once per process (its only state): the first of the given paths, relative to
 * CPT_SRC (else the source folder the build names), that exists and loads; the last one is always tried, and when
 * it fails too the harness aborts with the reason. */
#ifndef CPT_FUZZ_TOKENIZER_ONCE_H
#define CPT_FUZZ_TOKENIZER_ONCE_H

#include <stdio.h>
#include <stdlib.h>

#include "core/fs.h"
#include "core/tokenizer.h"

static cpt_tokenizer *fuzz_tok;

static inline cpt_tokenizer *fuzz_tokenizer_once(const char *harness, const char *const *rel, int n) {
    if (fuzz_tok) return fuzz_tok;
    const char *src = getenv("CPT_SRC");
    char path[4096];
    cpt_err err = {""};
    for (int i = 0; i < n && !fuzz_tok; i++) {
        snprintf(path, sizeof path, "%s/%s", src && *src ? src : CPT_SOURCE_DIR, rel[i]);
        if (i == n - 1 || cpt_path_exists(path)) fuzz_tok = cpt_tokenizer_load(path, &err);
    }
    if (!fuzz_tok) {
        fprintf(stderr, "%s: %s\n", harness, err.msg);
        abort();
    }
    return fuzz_tok;
}

#endif
