/* The chunk plan of the offloaded AdamW (kernels/cuda/adamw_offload.cu), plain C so a CPU test checks it: segments
 * (each param's n floats) are cut into pieces that fill staging chunks of `chunk` floats back to back, in order. */
#ifndef CPT_KERNELS_CUDA_OFFLOAD_PLAN_H
#define CPT_KERNELS_CUDA_OFFLOAD_PLAN_H

#include <stddef.h>

typedef struct cpt_offload_piece {
    size_t seg, off, len, pos; /* floats [off, off + len) of segment seg at [pos, pos + len) of the chunk */
} cpt_offload_piece;

/* The pieces of the next chunk, starting at segment *si, float *so (both start at 0; advanced past the chunk).
 * out needs room for n_segs pieces (a chunk holds at most one piece of each segment). Returns how many; 0 when
 * every segment is done. seg_n(ud, i) gives segment i's length. */
static inline size_t cpt_offload_plan_next(size_t (*seg_n)(const void *ud, size_t i), const void *ud, size_t n_segs,
                                           size_t chunk, size_t *si, size_t *so, cpt_offload_piece *out) {
    size_t np = 0, pos = 0;
    while (*si < n_segs && pos < chunk) {
        size_t n = seg_n(ud, *si), left = n - *so;
        if (left == 0) {
            (*si)++, *so = 0;
            continue;
        }
        size_t len = left < chunk - pos ? left : chunk - pos;
        out[np].seg = *si, out[np].off = *so, out[np].len = len, out[np].pos = pos;
        np++;
        pos += len, *so += len;
        if (*so == n) (*si)++, *so = 0;
    }
    return np;
}

#endif
