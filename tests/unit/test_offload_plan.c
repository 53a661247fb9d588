/* The chunk plan of the offloaded AdamW (kernels/cuda/offload_plan.h), on the CPU: for segment lists with empty
 * segments, segments longer than a chunk and chunks of 1, 7, 61 and 4099 floats and one larger than everything, the
 * pieces cover every float of every segment exactly once, in order, each chunk filled back to back from position 0
 * and full except the last, at most one piece of a segment per chunk. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kernels/cuda/offload_plan.h"

static size_t len_of(const void *ud, size_t i) { return ((const size_t *)ud)[i]; }

static void plan(const size_t *n, size_t n_segs, size_t chunk) {
    size_t total = 0;
    for (size_t i = 0; i < n_segs; i++) total += n[i];
    cpt_offload_piece *out = malloc(sizeof *out * (n_segs + 1));
    size_t si = 0, so = 0, seen = 0, chunks = 0, bad = 0, cur_seg = 0, cur_off = 0, np;
    while ((np = cpt_offload_plan_next(len_of, n, n_segs, chunk, &si, &so, out)) > 0) {
        size_t pos = 0;
        chunks++;
        for (size_t k = 0; k < np; k++) {
            const cpt_offload_piece *p = &out[k];
            while (cur_seg < n_segs && cur_off == n[cur_seg]) cur_seg++, cur_off = 0; /* empty or finished */
            if (p->seg != cur_seg || p->off != cur_off || p->pos != pos || p->len == 0 || (k && p->seg == out[k - 1].seg))
                bad++;
            cur_off += p->len, pos += p->len, seen += p->len;
        }
        if (pos > chunk || (pos < chunk && seen != total)) bad++; /* only the last chunk may be partly empty */
    }
    CHECK_MSG(bad == 0, "chunk %zu: %zu pieces out of order or misplaced", chunk, bad);
    CHECK_MSG(seen == total, "chunk %zu: %zu floats planned of %zu", chunk, seen, total);
    CHECK_MSG(chunks == (total + chunk - 1) / chunk, "chunk %zu: %zu chunks for %zu floats", chunk, chunks, total);
    free(out);
}

int main(void) {
    size_t a[] = {0, 5, 128, 0, 0, 3, 10000, 1, 64, 4099, 0, 7};
    size_t sizes[] = {1, 7, 61, 4099, 1u << 20};
    for (size_t c = 0; c < sizeof sizes / sizeof *sizes; c++) plan(a, sizeof a / sizeof *a, sizes[c]);
    size_t none[] = {0, 0};
    size_t si = 0, so = 0;
    cpt_offload_piece out[3];
    CHECK(cpt_offload_plan_next(len_of, none, 2, 16, &si, &so, out) == 0);
    unsigned seed = 1;
    size_t r[300];
    for (size_t i = 0; i < 300; i++) seed = seed * 1103515245u + 12345u, r[i] = (seed >> 16) % 3 ? (seed >> 8) % 5000 : 0;
    for (size_t c = 0; c < sizeof sizes / sizeof *sizes; c++) plan(r, 300, sizes[c]);
    return check_summary("test_offload_plan");
}
