/* Decoding: ids -> the bytes of each token (ByteLevel decoder, table built at load) -> UTF-8.
 *
 * Token bytes can stop inside a UTF-8 sequence (a prefix of a generation, a byte-level token of half a char).
 * Like HF (Rust's String::from_utf8_lossy), each maximal ill-formed subsequence becomes one U+FFFD, so the result
 * is always valid UTF-8. Streaming callers that want the raw bytes use cpt_tokenizer_id_bytes. */
#include <stdlib.h>
#include <string.h>

#include "core/tokenizer_internal.h"

char *cpt_tokenizer_decode(const cpt_tokenizer *tok, const int32_t *ids, size_t n, int skip_special, size_t *len,
                           cpt_err *err) {
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t id = ids[i];
        if (id < 0 || id >= tok->n_ids || !tok->dec_bytes[id]) {
            cpt_errf(err, "decode: id %ld at position %zu is not in the vocabulary (size %d)", (long)id, i, tok->n_ids);
            return NULL;
        }
        if (skip_special && tok->is_special[id]) continue;
        total += tok->dec_lens[id];
    }
    /* Worst case every byte is ill-formed and becomes 3 bytes of U+FFFD. */
    char *raw = malloc(total ? total : 1);
    char *out = malloc(total * 3 + 1);
    if (!raw || !out) {
        free(raw);
        free(out);
        cpt_errf(err, "decode: out of memory for %zu bytes", total);
        return NULL;
    }
    size_t r = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t id = ids[i];
        if (skip_special && tok->is_special[id]) continue;
        memcpy(raw + r, tok->dec_bytes[id], tok->dec_lens[id]);
        r += tok->dec_lens[id];
    }
    size_t o = 0;
    for (size_t i = 0; i < r;) {
        int k = tok_utf8_step((const uint8_t *)raw + i, r - i);
        if (k > 0) {
            memcpy(out + o, raw + i, (size_t)k);
            o += (size_t)k;
            i += (size_t)k;
        } else {
            out[o++] = (char)0xEF;
            out[o++] = (char)0xBF;
            out[o++] = (char)0xBD;
            i += (size_t)-k;
        }
    }
    free(raw);
    out[o] = 0;
    if (len) *len = o;
    return out;
}
