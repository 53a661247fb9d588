/* KV-cache decoding (see model/kv_cache.h): the layer of model/forward.c on new tokens only, with attention over
 * each slot's cached keys and values instead of over the packed batch. Same kernels, same order of operations, so
 * the logits agree with a full forward to float rounding. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/kv_cache.h"
#include "model/model_internal.h"

static cpt_tensor T1(float *p, int64_t a) { return cpt_tensor_f32_1d(p, a); }
static cpt_tensor T2(float *p, int64_t a, int64_t b) { return cpt_tensor_f32_2d(p, a, b); }

/* ---- the cache -------------------------------------------------------------------------------------------- */

int cpt_kv_cache_init(cpt_kv_cache *c, const cpt_model_config *cfg, int n_slots, int max_len, cpt_err *err) {
    memset(c, 0, sizeof *c);
    if (n_slots < 1 || max_len < 1) return cpt_errf(err, "kv cache: needs at least one slot and one position");
    c->n_slots = n_slots;
    c->n_layers = cfg->num_layers;
    c->kv_dim = cfg->num_kv_heads * cfg->head_dim;
    c->max_len = max_len;
    c->pos_stride = (size_t)c->n_layers * 2 * (size_t)c->kv_dim;
    c->slots = calloc((size_t)n_slots, sizeof *c->slots);
    if (!c->slots) return cpt_errf(err, "kv cache: out of memory for %d slots", n_slots);
    return 0;
}

void cpt_kv_cache_free(cpt_kv_cache *c) {
    for (int s = 0; c->slots && s < c->n_slots; s++) free(c->slots[s].kv);
    free(c->slots);
    memset(c, 0, sizeof *c);
}

int cpt_kv_cache_reserve(cpt_kv_cache *c, int s, int n, cpt_err *err) {
    cpt_kv_slot *sl = &c->slots[s];
    if (n > c->max_len) return cpt_errf(err, "kv cache: %d positions exceed the context of %d", n, c->max_len);
    if (n <= sl->cap) return 0;
    int cap = sl->cap ? sl->cap : 64;
    while (cap < n) cap = cap > c->max_len / 2 ? c->max_len : cap * 2;
    float *p = realloc(sl->kv, (size_t)cap * c->pos_stride * sizeof(float));
    if (!p) return cpt_errf(err, "kv cache: out of memory for %d positions of slot %d", cap, s);
    sl->kv = p;
    sl->cap = cap;
    return 0;
}

void cpt_kv_cache_reset(cpt_kv_cache *c, int s) { c->slots[s].len = 0; }

int cpt_kv_cache_copy_prefix(cpt_kv_cache *c, int dst, int src, int n, cpt_err *err) {
    if (dst == src || n > c->slots[src].len) return cpt_errf(err, "kv cache: bad prefix copy %d -> %d (%d positions)", src, dst, n);
    if (cpt_kv_cache_reserve(c, dst, n, err)) return -1;
    memcpy(c->slots[dst].kv, c->slots[src].kv, (size_t)n * c->pos_stride * sizeof(float));
    c->slots[dst].len = n;
    return 0;
}

/* ---- scratch ---------------------------------------------------------------------------------------------- */

void cpt_decode_work_free(cpt_decode_work *w) {
    free(w->mem);
    free(w->pos);
    free(w->slot_of);
    memset(w, 0, sizeof *w);
}

static int ensure_work(const cpt_model_config *c, cpt_decode_work *w, int N, cpt_err *err) {
    if (N <= w->cap) return 0;
    free(w->mem), free(w->pos), free(w->slot_of);
    size_t n = (size_t)N, C = (size_t)c->hidden_size, H = (size_t)c->num_heads, D = (size_t)c->head_dim;
    size_t I = (size_t)c->intermediate_size, QKV = (size_t)qkv_dim(c), HD = H * D;
    size_t per = 5 * C + QKV + 2 * HD + 3 * I + H;
    w->mem = malloc(n * per * sizeof(float));
    w->pos = malloc(n * sizeof(int32_t));
    w->slot_of = malloc(n * sizeof(int32_t));
    if (!w->mem || !w->pos || !w->slot_of) {
        free(w->mem), free(w->pos), free(w->slot_of);
        memset(w, 0, sizeof *w);
        return cpt_errf(err, "decode: out of memory for %d tokens", N);
    }
    float *p = w->mem;
    w->x = p, p += n * C;
    w->x_mid = p, p += n * C;
    w->h = p, p += n * C;
    w->xl = p, p += n * C;
    w->qkv = p, p += n * QKV;
    w->qk_tmp = p, p += n * HD;
    w->att = p, p += n * HD;
    w->gu = p, p += n * 2 * I;
    w->act = p, p += n * I;
    w->rstd = p, p += n * H;
    w->cap = N;
    (void)p;
    return 0;
}

/* ---- attention over the cache ----------------------------------------------------------------------------- */

/* out[i, h] = softmax(q_h . K[0..pos_i] / sqrt(D)) V[0..pos_i] of token i's slot, with the running-max
 * (online) softmax so no score buffer is needed. One (token, head) per iteration: deterministic. */
static void cache_attention(const cpt_kv_cache *c, int layer, int N, const float *qkv, int QKV, const int32_t *pos,
                            const int32_t *slot_of, int H, int KV, int D, float *att) {
    const float scale = 1.0f / sqrtf((float)D);
    const int group = H / KV;
    long work = 0; /* multiply-adds, to keep small steps off the thread pool */
    for (int i = 0; i < N; i++) work += (long)(pos[i] + 1) * H * D * 2;
#pragma omp parallel for schedule(dynamic, 4) if(work >= (1L << 18))
    for (int ih = 0; ih < N * H; ih++) {
        int i = ih / H, h = ih % H, kvh = h / group;
        const float *q = qkv + (size_t)i * QKV + (size_t)h * D;
        float *o = att + (size_t)i * H * D + (size_t)h * D;
        for (int d = 0; d < D; d++) o[d] = 0.0f;
        float mx = -INFINITY, l = 0.0f;
        for (int j = 0; j <= pos[i]; j++) {
            const float *k = cpt_kv_k(c, slot_of[i], j, layer) + (size_t)kvh * D;
            const float *v = cpt_kv_v(c, slot_of[i], j, layer) + (size_t)kvh * D;
            float s = 0.0f;
            for (int d = 0; d < D; d++) s += q[d] * k[d];
            s *= scale;
            if (s > mx) {
                float r = expf(mx - s); /* 0 on the first key */
                l *= r;
                for (int d = 0; d < D; d++) o[d] *= r;
                mx = s;
            }
            float p = expf(s - mx);
            l += p;
            for (int d = 0; d < D; d++) o[d] += p * v[d];
        }
        float inv = 1.0f / l;
        for (int d = 0; d < D; d++) o[d] *= inv;
    }
}

/* ---- the decode call -------------------------------------------------------------------------------------- */

static int check_call(const cpt_model *m, const cpt_kv_cache *c, const int32_t *tokens, int N,
                      const cpt_decode_seg *segs, int S, cpt_err *err) {
    if (N < 1 || S < 1) return cpt_errf(err, "decode: needs at least one token and one segment");
    if (c->n_layers != m->cfg.num_layers || c->kv_dim != m->cfg.num_kv_heads * m->cfg.head_dim)
        return cpt_errf(err, "decode: the kv cache was made for another model shape");
    int next = 0;
    for (int i = 0; i < S; i++) {
        const cpt_decode_seg *g = &segs[i];
        if (g->slot < 0 || g->slot >= c->n_slots) return cpt_errf(err, "decode: segment %d names slot %d of %d", i, g->slot, c->n_slots);
        if (g->start != next || g->count < 1)
            return cpt_errf(err, "decode: segment %d must start at token %d and hold at least one (start %d count %d)", i,
                            next, g->start, g->count);
        next += g->count;
        if (c->slots[g->slot].len + g->count > c->max_len)
            return cpt_errf(err, "decode: slot %d would hold %d positions, past the context of %d", g->slot,
                            c->slots[g->slot].len + g->count, c->max_len);
        for (int k = 0; k < i; k++)
            if (segs[k].slot == g->slot) return cpt_errf(err, "decode: slot %d appears in two segments", g->slot);
    }
    if (next != N) return cpt_errf(err, "decode: segments cover %d tokens of %d", next, N);
    for (int i = 0; i < N; i++)
        if (tokens[i] < 0 || tokens[i] >= m->cfg.vocab_size)
            return cpt_errf(err, "decode: token %d at %d is outside the vocabulary [0, %d)", tokens[i], i, m->cfg.vocab_size);
    return 0;
}

int cpt_model_decode(cpt_model *m, cpt_kv_cache *c, const int32_t *tokens, int N, const cpt_decode_seg *segs,
                     int S, float *logits_last, float *logits_all, cpt_decode_work *w, cpt_err *err) {
    if (check_call(m, c, tokens, N, segs, S, err)) return -1;
    const cpt_model_config *cf = &m->cfg;
    if (ensure_work(cf, w, N, err)) return -1;
    for (int i = 0; i < S; i++) {
        const cpt_decode_seg *g = &segs[i];
        int len = c->slots[g->slot].len;
        if (cpt_kv_cache_reserve(c, g->slot, len + g->count, err)) return -1;
        for (int k = 0; k < g->count; k++) {
            w->pos[g->start + k] = len + k;
            w->slot_of[g->start + k] = g->slot;
        }
    }
    int64_t C = cf->hidden_size, H = cf->num_heads, KV = cf->num_kv_heads, D = cf->head_dim;
    int64_t V = cf->vocab_size, QKV = qkv_dim(cf), HD = H * D, KD = KV * D;
    cpt_tensor pos = cpt_tensor_i32_1d(w->pos, N);

    cpt_k_embedding_fwd(T2(w->x, N, C), cpt_tensor_i32_1d((int32_t *)tokens, N), T2(mp(m, m->off_embed), V, C));
    /* The layer's buffers: decode keeps nothing for backward, so the norms share h / rstd and the raw q / k heads
     * share qk_tmp. */
    layer_acts la = {.x_in = w->x, .h1 = w->h, .rstd1 = w->rstd, .qkv = w->qkv, .q_raw = w->qk_tmp,
                     .k_raw = w->qk_tmp, .q_rstd = w->rstd, .k_rstd = w->rstd, .att = w->att, .x_mid = w->x_mid,
                     .h2 = w->h, .rstd2 = w->rstd, .gu = w->gu, .act = w->act};
    for (int l = 0; l < cf->num_layers; l++) {
        cpt_layer_fwd_qkv(m, l, N, &la, pos);
        for (int i = 0; i < N; i++) {
            const float *row = w->qkv + (size_t)i * QKV;
            memcpy(cpt_kv_k(c, w->slot_of[i], w->pos[i], l), row + HD, sizeof(float) * (size_t)KD);
            memcpy(cpt_kv_v(c, w->slot_of[i], w->pos[i], l), row + HD + KD, sizeof(float) * (size_t)KD);
        }
        cache_attention(c, l, N, w->qkv, (int)QKV, w->pos, w->slot_of, (int)H, (int)KV, (int)D, w->att);
        cpt_layer_fwd_out(m, l, N, &la, w->x);
    }
    for (int i = 0; i < S; i++) c->slots[segs[i].slot].len += segs[i].count;
    cpt_tensor lm = T2(mp(m, m->off_lm_head), V, C);
    if (logits_all) {
        cpt_k_rmsnorm_fwd(T2(w->h, N, C), T1(w->rstd, N), T2(w->x, N, C), T1(mp(m, m->off_norm), C), cf->rms_norm_eps);
        cpt_k_matmul_fwd(T2(logits_all, N, V), T2(w->h, N, C), lm, cpt_tensor_none());
    }
    if (logits_last) {
        for (int i = 0; i < S; i++)
            memcpy(w->x_mid + (size_t)i * C, w->x + (size_t)(segs[i].start + segs[i].count - 1) * C, sizeof(float) * (size_t)C);
        cpt_k_rmsnorm_fwd(T2(w->xl, S, C), T1(w->rstd, S), T2(w->x_mid, S, C), T1(mp(m, m->off_norm), C), cf->rms_norm_eps);
        cpt_k_matmul_fwd(T2(logits_last, S, V), T2(w->xl, S, C), lm, cpt_tensor_none());
    }
    return 0;
}
