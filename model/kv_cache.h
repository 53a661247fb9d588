/* KV-cache decoding: the model run on new tokens of many sequences at once, each attending over its own cached
 * keys and values (fp32) plus itself.
 *
 * The cache has n_slots slots; slot s holds len positions of one sequence. Per slot the memory is one growable
 * array laid out [position][layer][K | V][kv_heads * head_dim], so appending positions is a realloc and a
 * slot only holds what it uses. Keys are stored after RoPE at their absolute position (and after q/k norm for
 * qwen3), exactly what the full forward's attention reads.
 *
 * A decode call takes segments: segment i feeds tokens[start .. start + count) to slot `slot` at positions
 * len .. len + count - 1 (len before the call), writes their K/V and advances len. Prefill is one segment with
 * the whole prompt; a batched decode step is one single-token segment per active slot; both mix freely. */
#ifndef CPT_MODEL_KV_CACHE_H
#define CPT_MODEL_KV_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "model/model.h"

typedef struct cpt_kv_slot {
    int len, cap; /* positions held / allocated */
    float *kv;    /* [cap][layers][2][kv_dim] */
} cpt_kv_slot;

typedef struct cpt_kv_cache {
    int n_slots, n_layers, kv_dim; /* kv_dim = num_kv_heads * head_dim */
    int max_len;                   /* positions a slot may hold (the model's context) */
    size_t pos_stride;             /* floats per position: layers * 2 * kv_dim */
    cpt_kv_slot *slots;
} cpt_kv_cache;

int cpt_kv_cache_init(cpt_kv_cache *c, const cpt_model_config *cfg, int n_slots, int max_len, cpt_err *err);
void cpt_kv_cache_free(cpt_kv_cache *c);
/* Room for n positions in slot s (keeps its contents). */
int cpt_kv_cache_reserve(cpt_kv_cache *c, int s, int n, cpt_err *err);
/* Empties slot s (keeps its memory for the next sequence). */
void cpt_kv_cache_reset(cpt_kv_cache *c, int s);
/* Slot dst = the first n positions of slot src (a shared prompt prefix); dst != src. */
int cpt_kv_cache_copy_prefix(cpt_kv_cache *c, int dst, int src, int n, cpt_err *err);

static inline float *cpt_kv_k(const cpt_kv_cache *c, int s, int pos, int layer) {
    return c->slots[s].kv + (size_t)pos * c->pos_stride + (size_t)layer * 2 * c->kv_dim;
}
static inline float *cpt_kv_v(const cpt_kv_cache *c, int s, int pos, int layer) {
    return cpt_kv_k(c, s, pos, layer) + c->kv_dim;
}

typedef struct cpt_decode_seg {
    int slot;
    int start, count; /* tokens[start .. start + count) */
} cpt_decode_seg;

/* Scratch of decode calls, grown on demand; zero-initialise, free with cpt_decode_work_free. */
typedef struct cpt_decode_work {
    int cap;  /* tokens */
    int rows; /* rows of the logits buffer */
    float *mem;
    float *x, *x_mid, *h, *qkv, *qk_tmp, *att, *gu, *act, *rstd, *xl;
    int32_t *pos, *slot_of;
} cpt_decode_work;

void cpt_decode_work_free(cpt_decode_work *w);

/* Runs tokens [n_tokens] through the model as described above. logits_last [n_segs, V] (may be NULL) gets the
 * logits after the last token of each segment; logits_all [n_tokens, V] (may be NULL) after every token. Segments
 * must name distinct slots; tokens must be in the vocabulary; a slot must not pass max_len. */
int cpt_model_decode(cpt_model *m, cpt_kv_cache *c, const int32_t *tokens, int n_tokens, const cpt_decode_seg *segs,
                     int n_segs, float *logits_last, float *logits_all, cpt_decode_work *w, cpt_err *err);

#endif
