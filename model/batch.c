/* Padded B x T batches with attention masks <-> packed cpt_batch. */
#include <stdlib.h>
#include <string.h>

#include "model/model.h"

int cpt_batch_from_padded(const int32_t *ids, const int32_t *mask, int B, int T, cpt_packed *p, cpt_err *err) {
    memset(p, 0, sizeof *p);
    if (B < 1 || T < 1 || (int64_t)B * T > 0x7fffffff) return cpt_errf(err, "padded batch: bad shape %d x %d", B, T);
    int n = 0, s = 0;
    for (int b = 0; b < B; b++) {
        int first = -1, last = -1;
        for (int t = 0; t < T; t++) {
            int32_t v = mask[b * T + t];
            if (v != 0 && v != 1) return cpt_errf(err, "padded batch: mask[%d, %d] = %d, want 0 or 1", b, t, v);
            if (v) {
                if (first < 0) first = t;
                else if (last != t - 1)
                    return cpt_errf(err, "padded batch: row %d's real tokens are not contiguous (gap before column %d)",
                                    b, t);
                last = t;
            }
        }
        if (first >= 0) n += last - first + 1, s++;
    }
    if (n == 0) return cpt_errf(err, "padded batch: the mask selects no token");
    p->B = B, p->T = T;
    p->tokens = malloc(sizeof(int32_t) * (size_t)n);
    p->targets = malloc(sizeof(int32_t) * (size_t)n);
    p->src = malloc(sizeof(int32_t) * (size_t)n);
    p->seq_start = malloc(sizeof(int32_t) * (size_t)(s + 1));
    if (!p->tokens || !p->targets || !p->src || !p->seq_start) {
        cpt_packed_free(p);
        return cpt_errf(err, "padded batch: out of memory");
    }
    int i = 0, q = 0;
    for (int b = 0; b < B; b++) {
        int start = i;
        for (int t = 0; t < T; t++)
            if (mask[b * T + t]) {
                p->tokens[i] = ids[b * T + t];
                p->src[i] = b * T + t;
                i++;
            }
        if (i == start) continue;
        p->seq_start[q++] = start;
        for (int k = start; k < i; k++) p->targets[k] = k + 1 < i ? p->tokens[k + 1] : -1;
    }
    p->seq_start[q] = i;
    p->batch.n_tokens = n;
    p->batch.n_seqs = s;
    p->batch.tokens = p->tokens;
    p->batch.seq_start = p->seq_start;
    p->batch.targets = p->targets;
    return 0;
}

void cpt_packed_to_padded(const cpt_packed *p, const float *packed, float *padded, float fill) {
    for (int i = 0; i < p->B * p->T; i++) padded[i] = fill;
    for (int i = 0; i < p->batch.n_tokens; i++) padded[p->src[i]] = packed[i];
}

void cpt_padded_to_packed(const cpt_packed *p, const float *padded, float *packed) {
    for (int i = 0; i < p->batch.n_tokens; i++) packed[i] = padded[p->src[i]];
}

void cpt_packed_free(cpt_packed *p) {
    free(p->tokens);
    free(p->targets);
    free(p->src);
    free(p->seq_start);
    memset(p, 0, sizeof *p);
}
