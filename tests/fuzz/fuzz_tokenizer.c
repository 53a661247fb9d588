/* Fuzzes the tokenizer with arbitrary bytes.
 *
 * Input "J" + bytes: the bytes are a tokenizer.json; loading must fail cleanly or give a tokenizer that encodes
 * and decodes a fixed sample. Any other input is text for the Qwen3 tokenizer (.deps/, loaded once; the tiny
 * fixture tokenizer when the assets are absent):
 *   valid UTF-8   -> encode succeeds and decode(encode(x)) == NFC(x) (the tokenizer normalizes to NFC);
 *   invalid UTF-8 -> encode fails with "invalid UTF-8 at byte offset N", N the first bad byte;
 * and the input read as ids (mod the vocabulary size) decodes to valid UTF-8. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "core/fs.h"
#include "core/tokenizer.h"
#include "core/tokenizer_internal.h"
#include "fuzz_tokenizer_once.h"

static cpt_tokenizer *load_once(void) {
    static const char *const paths[] = {".deps/tokenizer-qwen3/models/tokenizer.json",
                                        "tests/fixtures/tokenizer/tiny_tokenizer.json"};
    return fuzz_tokenizer_once("fuzz_tokenizer", paths, 2);
}

static void fuzz_json(const uint8_t *data, size_t size) {
    cpt_err err;
    cpt_tokenizer *t = cpt_tokenizer_load_json((const char *)data, size, "fuzz.json", &err);
    if (!t) {
        if (!err.msg[0]) abort(); /* a failure always says why */
        return;
    }
    static const char sample[] = "Hello, world! 123 <|im_start|> caf\xc3\xa9  \n\t x";
    int32_t *ids;
    long n = cpt_tokenizer_encode(t, sample, sizeof sample - 1, &ids, &err);
    if (n >= 0) {
        size_t len;
        char *s = cpt_tokenizer_decode(t, ids, (size_t)n, 0, &len, &err);
        if (s && tok_utf8_check((const uint8_t *)s, len) >= 0) abort();
        free(s);
        free(ids);
    }
    cpt_tokenizer_free(t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 0 && data[0] == 'J') {
        fuzz_json(data + 1, size - 1);
        return 0;
    }
    cpt_tokenizer *tok = load_once();
    cpt_err err;
    int32_t *ids = NULL;
    long n = cpt_tokenizer_encode(tok, (const char *)data, size, &ids, &err);
    long bad = tok_utf8_check(data, size);
    if (bad >= 0) {
        char want[64];
        snprintf(want, sizeof want, "invalid UTF-8 at byte offset %ld ", bad);
        if (n != -1 || ids != NULL || !strstr(err.msg, want)) abort();
    } else {
        if (n < 0) {
            fprintf(stderr, "encode failed on valid UTF-8: %s\n", err.msg);
            abort();
        }
        utf8proc_uint8_t *nfc = NULL;
        utf8proc_ssize_t nfc_len =
            utf8proc_map(data, (utf8proc_ssize_t)size, &nfc, UTF8PROC_STABLE | UTF8PROC_COMPOSE);
        if (nfc_len < 0) abort();
        size_t len;
        char *dec = cpt_tokenizer_decode(tok, ids, (size_t)n, 0, &len, &err);
        if (!dec || len != (size_t)nfc_len || memcmp(dec, nfc, len) != 0) {
            fprintf(stderr, "round trip differs: %zu bytes in, %zu bytes back\n", size, dec ? len : 0);
            abort();
        }
        free(dec);
        free(nfc);
        free(ids);
    }
    /* the bytes as ids: any decode is valid UTF-8 */
    size_t n_ids = size / 4;
    if (n_ids) {
        int32_t *as_ids = malloc(n_ids * sizeof *as_ids);
        int32_t vocab = cpt_tokenizer_vocab_size(tok);
        size_t k = 0;
        for (size_t i = 0; i < n_ids; i++) {
            uint32_t v;
            memcpy(&v, data + 4 * i, 4);
            int32_t id = (int32_t)(v % (uint32_t)vocab);
            if (cpt_tokenizer_id_token(tok, id)) as_ids[k++] = id;
        }
        size_t len;
        char *dec = cpt_tokenizer_decode(tok, as_ids, k, data[0] & 1, &len, &err);
        if (!dec || tok_utf8_check((const uint8_t *)dec, len) >= 0 || strlen(dec) > len) abort();
        free(dec);
        free(as_ids);
    }
    return 0;
}
