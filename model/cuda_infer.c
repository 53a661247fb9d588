/* The inference placement (cpt_model_use_cuda_infer): the model's weights in bf16 on one CUDA device, no fp32
 * copy and no gradients, for generation (the decoder of model/cuda_decoder.c). Its backend table refuses forward
 * and backward; sync_to_device uploads the host weights again (fp32 -> bf16, round to nearest even), and
 * cpt_model_load_weights_bf16_device copies a weight version already on the device. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/cuda_infer.h"
#include "model/model_internal.h"

static int refuse(const char *what, cpt_err *err) {
    return cpt_errf(err, "%s: the model is placed for inference on CUDA (bf16 weights only, "
                         "cpt_model_use_cuda_infer): use cpt_decoder_new, or place it with cpt_model_use_cuda",
                    what);
}
static int infer_forward(cpt_model *m, const cpt_batch *b, cpt_forward_out *out, int keep, cpt_err *err) {
    (void)m, (void)b, (void)out, (void)keep;
    return refuse("forward", err);
}
static int infer_backward(cpt_model *m, const cpt_batch *b, const float *dl, const float *de, const float *dv,
                          cpt_err *err) {
    (void)m, (void)b, (void)dl, (void)de, (void)dv;
    return refuse("backward", err);
}
static void infer_zero_grad(cpt_model *m) { (void)m; }
/* The host weights are the source of this placement: the device holds a bf16 rounding of them. */
static int infer_sync_to_host(cpt_model *m, cpt_err *err) {
    (void)m;
    return refuse("sync_to_host", err);
}

#ifndef CPT_HAVE_CUDA

static int no_cuda(cpt_err *err) {
    return cpt_errf(err, "this cpt was built without CUDA (no nvcc found at configure time): generation on the GPU "
                         "is not available; rebuild with the CUDA toolkit installed, or use rollout.device = \"cpu\"");
}
int cpt_model_use_cuda_infer(cpt_model *m, int device, cpt_err *err) {
    if (cpt_model_cuda_shape_check(&m->cfg, 1, err))
        return cpt_err_prefix(err, "placing the model for inference on CUDA device %d", device);
    return no_cuda(err);
}
cpt_model *cpt_model_new_cuda_random(const cpt_model_config *cfg, int device, uint64_t seed, float std,
                                     cpt_err *err) {
    (void)seed, (void)std;
    if (cpt_model_cuda_shape_check(cfg, 1, err))
        cpt_err_prefix(err, "placing the model for inference on CUDA device %d", device);
    else no_cuda(err);
    return NULL;
}
int cpt_model_load_weights_bf16_device(cpt_model *m, const void *dev_bf16, cpt_err *err) {
    (void)m, (void)dev_bf16;
    return no_cuda(err);
}
void *cpt_cuda_infer_ctx(const cpt_model *m) {
    (void)m;
    return NULL;
}
static int infer_sync_to_device(cpt_model *m, cpt_err *err) {
    (void)m;
    return no_cuda(err);
}
static int infer_wait(cpt_model *m, cpt_err *err) {
    (void)m;
    return no_cuda(err);
}
static cpt_decoder *infer_decoder_new(cpt_model *m, const cpt_decoder_opts *o, const cpt_decoder_tuning *t,
                                      cpt_err *err) {
    (void)m, (void)o, (void)t;
    no_cuda(err);
    return NULL;
}
static void infer_release(cpt_model *m) { (void)m; }

#else

#include "kernels/cuda/cuda_ops.h"

static size_t al(size_t n) { return (n + 63) & ~(size_t)63; } /* bf16 elements, 128-byte aligned */

static void infer_free(cpt_cuda_infer *w) {
    if (!w) return;
    if (w->ctx) cpt_cuda_sync(w->ctx, NULL);
    cpt_cuda_free(w->wmem);
    cpt_cuda_free(w->inv_freq);
    free(w->layers);
    cpt_cuda_ctx_free(w->ctx);
    free(w);
}

static void infer_release(cpt_model *m) {
    infer_free(m->cuda_infer);
    m->cuda_infer = NULL;
}

void *cpt_cuda_infer_ctx(const cpt_model *m) { return m && m->cuda_infer ? m->cuda_infer->ctx : NULL; }

/* Lays out the bf16 weights in one allocation and uploads rope's inverse frequencies. */
static cpt_cuda_infer *infer_alloc(const cpt_model_config *c, int device, cpt_err *err) {
    cpt_cuda_infer *w = calloc(1, sizeof *w);
    if (!w) {
        cpt_errf(err, "out of memory");
        return NULL;
    }
    w->device = device;
    size_t C = (size_t)c->hidden_size, D = (size_t)c->head_dim, I = (size_t)c->intermediate_size;
    size_t V = (size_t)c->vocab_size, HD = (size_t)c->num_heads * D, QKV = (size_t)qkv_dim(c);
    int L = c->num_layers;
    size_t per = al(C) + al(QKV * C) + (c->qkv_bias ? al(QKV) : 0) + (c->qk_norm ? 2 * al(D) : 0) + al(C * HD) +
                 (c->o_bias ? al(C) : 0) + al(C) + al(2 * I * C) + al(C * I);
    size_t total = al(V * C) + (c->tie_word_embeddings ? 0 : al(V * C)) + al(C) + per * (size_t)L;
    if (!(w->ctx = cpt_cuda_ctx_new(device, err))) goto fail;
    w->wmem = cpt_cuda_malloc(total * 2, "bf16 weights", err);
    w->inv_freq = cpt_cuda_malloc(sizeof(float) * D / 2, "rope inv_freq", err);
    w->layers = calloc((size_t)L, sizeof *w->layers);
    if (!w->wmem || !w->inv_freq) goto fail;
    if (!w->layers) {
        cpt_errf(err, "out of memory");
        goto fail;
    }
    uint16_t *p = w->wmem;
#define TAKE(dst, n) (dst = p, p += al(n))
    TAKE(w->embed, V * C);
    if (c->tie_word_embeddings) w->lm = w->embed;
    else TAKE(w->lm, V * C);
    TAKE(w->norm, C);
    for (int l = 0; l < L; l++) {
        cpt_cuda_infer_layer *y = &w->layers[l];
        TAKE(y->ln1, C);
        TAKE(y->wqkv, QKV * C);
        if (c->qkv_bias) TAKE(y->bqkv, QKV);
        if (c->qk_norm) {
            TAKE(y->q_norm, D);
            TAKE(y->k_norm, D);
        }
        TAKE(y->wo, C * HD);
        if (c->o_bias) TAKE(y->bo, C);
        TAKE(y->ln2, C);
        TAKE(y->wgu, 2 * I * C);
        TAKE(y->wdown, C * I);
    }
#undef TAKE
    float inv[256];
    cpt_rope_cfg rc = {c->head_dim, c->rope_theta, c->rope_llama3, c->rope_factor, c->rope_low_freq_factor,
                       c->rope_high_freq_factor, c->rope_original_max_pos};
    cpt_rope_inv_freq(&rc, inv);
    if (cpt_cuda_memcpy_h2d(w->ctx, w->inv_freq, inv, sizeof(float) * D / 2, err)) goto fail;
    return w;
fail:
    infer_free(w);
    return NULL;
}

/* Parameter `name` (numel values) into dst + at: from the host weights, or from w->dev_src at the parameter's
 * offset in the model's flat order. */
static int up(cpt_model *m, void *dst, size_t at, const char *name, size_t numel, cpt_err *err) {
    cpt_cuda_infer *w = m->cuda_infer;
    cpt_param *p = cpt_model_find_param(m, name);
    if (!p) return cpt_errf(err, "weights: the model has no parameter %s", name);
    if (p->numel != numel) return cpt_errf(err, "weights: %s has %zu values, want %zu", name, p->numel, numel);
    if (w->dev_src)
        return cpt_cuda_memcpy_d2d(w->ctx, (uint16_t *)dst + at, w->dev_src + (p->data - cpt_model_data(m)),
                                   numel * sizeof(uint16_t), err);
    return cpt_cuda_upload_bf16(w->ctx, (uint16_t *)dst + at, p->data, numel, err);
}

static int load_weights(cpt_model *m, cpt_err *err) {
    const cpt_model_config *c = &m->cfg;
    cpt_cuda_infer *w = m->cuda_infer;
    size_t C = (size_t)c->hidden_size, D = (size_t)c->head_dim, I = (size_t)c->intermediate_size;
    size_t V = (size_t)c->vocab_size, HD = (size_t)c->num_heads * D, KD = (size_t)c->num_kv_heads * D;
    char n[256];
    if (up(m, w->embed, 0, "model.embed_tokens.weight", V * C, err)) return -1;
    if (!c->tie_word_embeddings && up(m, w->lm, 0, "lm_head.weight", V * C, err)) return -1;
    if (up(m, w->norm, 0, "model.norm.weight", C, err)) return -1;
#define LN(suffix) (snprintf(n, sizeof n, "model.layers.%d.%s", l, suffix), n)
    for (int l = 0; l < c->num_layers; l++) {
        cpt_cuda_infer_layer *y = &w->layers[l];
        if (up(m, y->ln1, 0, LN("input_layernorm.weight"), C, err) ||
            up(m, y->wqkv, 0, LN("self_attn.q_proj.weight"), HD * C, err) ||
            up(m, y->wqkv, HD * C, LN("self_attn.k_proj.weight"), KD * C, err) ||
            up(m, y->wqkv, (HD + KD) * C, LN("self_attn.v_proj.weight"), KD * C, err) ||
            up(m, y->wo, 0, LN("self_attn.o_proj.weight"), C * HD, err) ||
            up(m, y->ln2, 0, LN("post_attention_layernorm.weight"), C, err) ||
            up(m, y->wgu, 0, LN("mlp.gate_proj.weight"), I * C, err) ||
            up(m, y->wgu, I * C, LN("mlp.up_proj.weight"), I * C, err) ||
            up(m, y->wdown, 0, LN("mlp.down_proj.weight"), C * I, err))
            return -1;
        if (c->qkv_bias && (up(m, y->bqkv, 0, LN("self_attn.q_proj.bias"), HD, err) ||
                            up(m, y->bqkv, HD, LN("self_attn.k_proj.bias"), KD, err) ||
                            up(m, y->bqkv, HD + KD, LN("self_attn.v_proj.bias"), KD, err)))
            return -1;
        if (c->qk_norm && (up(m, y->q_norm, 0, LN("self_attn.q_norm.weight"), D, err) ||
                           up(m, y->k_norm, 0, LN("self_attn.k_norm.weight"), D, err)))
            return -1;
        if (c->o_bias && up(m, y->bo, 0, LN("self_attn.o_proj.bias"), C, err)) return -1;
    }
#undef LN
    return cpt_cuda_sync(w->ctx, err);
}

static int infer_sync_to_device(cpt_model *m, cpt_err *err) {
    return load_weights(m, err) ? cpt_err_prefix(err, "uploading the weights (bf16)") : 0;
}

static int infer_wait(cpt_model *m, cpt_err *err) { return cpt_cuda_sync(m->cuda_infer->ctx, err); }

static cpt_decoder *infer_decoder_new(cpt_model *m, const cpt_decoder_opts *o, const cpt_decoder_tuning *t,
                                      cpt_err *err) {
    return cpt_cuda_decoder_new(m, o, t, err);
}

/* Places m with the weights not yet uploaded. */
static int place(cpt_model *m, int device, cpt_err *err) {
    if (m->cuda_infer) {
        if (m->cuda_infer->device == device) return 0;
        return cpt_errf(err, "the model is already placed for inference on CUDA device %d (asked for %d)",
                        m->cuda_infer->device, device);
    }
    if (m->cuda) return cpt_errf(err, "the model is placed for training (cpt_model_use_cuda)");
    if (cpt_model_cuda_shape_check(&m->cfg, 1, err)) return -1;
    if (!(m->cuda_infer = infer_alloc(&m->cfg, device, err))) return -1;
    m->be = &cpt_backend_cuda_infer;
    return 0;
}

int cpt_model_use_cuda_infer(cpt_model *m, int device, cpt_err *err) {
    if (m->cuda_infer && m->cuda_infer->device == device) return 0;
    const cpt_model_backend *was = m->be;
    if (place(m, device, err)) return cpt_err_prefix(err, "placing the model for inference on CUDA device %d", device);
    if (infer_sync_to_device(m, err)) {
        infer_release(m);
        m->be = was;
        return cpt_err_prefix(err, "placing the model for inference on CUDA device %d", device);
    }
    return 0;
}

int cpt_model_load_weights_bf16_device(cpt_model *m, const void *dev_bf16, cpt_err *err) {
    if (!m->cuda_infer) return cpt_errf(err, "weights from the device: the model is not placed for inference on CUDA");
    m->cuda_infer->dev_src = dev_bf16;
    int rc = load_weights(m, err);
    m->cuda_infer->dev_src = NULL;
    return rc ? cpt_err_prefix(err, "weights from bf16 on the device") : 0;
}

static void random_weights(cpt_model *m, uint64_t seed, float std) {
    const cpt_model_config *c = &m->cfg;
    cpt_cuda_infer *w = m->cuda_infer;
    size_t C = (size_t)c->hidden_size, D = (size_t)c->head_dim, I = (size_t)c->intermediate_size;
    size_t V = (size_t)c->vocab_size, HD = (size_t)c->num_heads * D, QKV = (size_t)qkv_dim(c);
    cpt_cuda_ctx *x = w->ctx;
    uint64_t k = seed * 1000003u;
    cpt_cuda_fill_normal_bf16(x, w->embed, V * C, 0.0f, std, k++);
    if (!c->tie_word_embeddings) cpt_cuda_fill_normal_bf16(x, w->lm, V * C, 0.0f, std, k++);
    cpt_cuda_fill_normal_bf16(x, w->norm, C, 1.0f, 0.0f, 0);
    for (int l = 0; l < c->num_layers; l++) {
        cpt_cuda_infer_layer *y = &w->layers[l];
        cpt_cuda_fill_normal_bf16(x, y->ln1, C, 1.0f, 0.0f, 0);
        cpt_cuda_fill_normal_bf16(x, y->ln2, C, 1.0f, 0.0f, 0);
        cpt_cuda_fill_normal_bf16(x, y->wqkv, QKV * C, 0.0f, std, k++);
        cpt_cuda_fill_normal_bf16(x, y->wo, C * HD, 0.0f, std, k++);
        cpt_cuda_fill_normal_bf16(x, y->wgu, 2 * I * C, 0.0f, std, k++);
        cpt_cuda_fill_normal_bf16(x, y->wdown, C * I, 0.0f, std, k++);
        if (y->bqkv) cpt_cuda_fill_normal_bf16(x, y->bqkv, QKV, 0.0f, 0.0f, 0);
        if (y->bo) cpt_cuda_fill_normal_bf16(x, y->bo, C, 0.0f, 0.0f, 0);
        if (y->q_norm) cpt_cuda_fill_normal_bf16(x, y->q_norm, D, 1.0f, 0.0f, 0);
        if (y->k_norm) cpt_cuda_fill_normal_bf16(x, y->k_norm, D, 1.0f, 0.0f, 0);
    }
}

cpt_model *cpt_model_new_cuda_random(const cpt_model_config *cfg, int device, uint64_t seed, float std,
                                     cpt_err *err) {
    if (cpt_model_config_check(cfg, "random model", err)) return NULL;
    cpt_model *m = calloc(1, sizeof *m);
    if (!m) {
        cpt_errf(err, "out of memory");
        return NULL;
    }
    m->cfg = *cfg;
    m->off_embed = m->off_norm = m->off_lm_head = m->off_score = -1;
    m->kept_tokens = -1;
    if (place(m, device, err)) {
        cpt_err_prefix(err, "placing the model for inference on CUDA device %d", device);
        free(m);
        return NULL;
    }
    random_weights(m, seed, std);
    if (cpt_cuda_sync(m->cuda_infer->ctx, err)) {
        cpt_model_free(m);
        return NULL;
    }
    return m;
}

#endif

const cpt_model_backend cpt_backend_cuda_infer = {
    .name = "cuda-infer",
    .forward = infer_forward,
    .backward = infer_backward,
    .zero_grad = infer_zero_grad,
    .sync_to_host = infer_sync_to_host,
    .sync_to_device = infer_sync_to_device,
    .wait = infer_wait,
    .decoder_new = infer_decoder_new,
    .release = infer_release,
};
