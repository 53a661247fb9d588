/* Forward and backward of the decoder over a packed batch, on the kernels interface.
 *
 * Per layer (HF order): h1 = rmsnorm(x); qkv = h1 Wqkv^T (+b); [qwen3: rmsnorm per head of q and k]; rope on q, k;
 * att = causal GQA attention within each sequence; x_mid = x + att Wo^T (+b); h2 = rmsnorm(x_mid);
 * x_out = x_mid + (silu(h2 Wg^T) * h2 Wu^T) Wd^T. Then xf = rmsnorm(x_L) and the LM head runs a chunk of tokens
 * at a time (logits [chunk, V] only), yielding logprob, entropy and logsumexp per token; the backward recomputes
 * each chunk's logits. A training forward keeps every layer's activations; an inference forward reuses one slot. */
#include <stdlib.h>
#include <string.h>

#include "model/backend.h"
#include "model/model_internal.h"

#define LOGITS_CHUNK_FLOATS (4 << 20) /* 16 MB of logits per chunk */

static cpt_tensor T1(float *p, int64_t a) { return cpt_tensor_f32_1d(p, a); }
static cpt_tensor T2(float *p, int64_t a, int64_t b) { return cpt_tensor_f32_2d(p, a, b); }
static cpt_tensor NONE(void) { return cpt_tensor_none(); }
static cpt_tensor OPT1(float *p, int64_t a) { return p ? T1(p, a) : NONE(); }

static int logits_chunk(const cpt_model *m, int N) {
    int ch = LOGITS_CHUNK_FLOATS / m->cfg.vocab_size;
    if (ch < 1) ch = 1;
    return ch < N ? ch : N;
}

void cpt_model_free_acts(cpt_model *m) {
    free(m->acts.mem);
    free(m->acts.layers);
    free(m->acts.pos);
    free(m->acts.cu);
    free(m->gs.mem);
    memset(&m->acts, 0, sizeof m->acts);
    memset(&m->gs, 0, sizeof m->gs);
}

/* Sizes (or re-sizes) the activation buffers for N tokens and S sequences. */
static int ensure_acts(cpt_model *m, int N, int S, int keep, cpt_err *err) {
    const cpt_model_config *c = &m->cfg;
    model_acts *a = &m->acts;
    int slots = keep ? c->num_layers : 1;
    if (S + 1 > a->cu_cap) {
        free(a->cu);
        a->cu = malloc(sizeof(int32_t) * (size_t)(S + 1));
        a->cu_cap = a->cu ? S + 1 : 0;
        if (!a->cu) return cpt_errf(err, "out of memory for sequence offsets");
    }
    if (N <= a->cap && slots <= a->kept_layers) return 0;
    int cap = N > a->cap ? N : a->cap;
    free(a->mem), free(a->layers), free(a->pos);
    a->mem = NULL, a->layers = NULL, a->pos = NULL, a->cap = 0, a->kept_layers = 0;
    size_t n = (size_t)cap, C = (size_t)c->hidden_size, H = (size_t)c->num_heads, KV = (size_t)c->num_kv_heads;
    size_t D = (size_t)c->head_dim, I = (size_t)c->intermediate_size, QKV = (size_t)qkv_dim(c);
    size_t qk = c->qk_norm ? 1 : 0;
    size_t per_layer = n * (4 * C + 2 + QKV + qk * (H * D + KV * D + H + KV) + H * D + H + 3 * I);
    size_t global = n * (2 * C + 3) + (size_t)logits_chunk(m, cap) * (size_t)c->vocab_size;
    size_t total = per_layer * (size_t)slots + global;
    a->mem = malloc(total * sizeof(float));
    a->layers = calloc((size_t)slots, sizeof(layer_acts));
    a->pos = malloc(sizeof(int32_t) * n);
    if (!a->mem || !a->layers || !a->pos)
        return cpt_errf(err, "out of memory for activations of %d tokens (%.1f MB)", cap, total * 4.0 / 1e6);
    float *p = a->mem;
#define TAKE(dst, count) (dst = p, p += (count))
    for (int l = 0; l < slots; l++) {
        layer_acts *la = &a->layers[l];
        TAKE(la->x_in, n * C);
        TAKE(la->h1, n * C);
        TAKE(la->rstd1, n);
        TAKE(la->qkv, n * QKV);
        if (qk) {
            TAKE(la->q_raw, n * H * D);
            TAKE(la->k_raw, n * KV * D);
            TAKE(la->q_rstd, n * H);
            TAKE(la->k_rstd, n * KV);
        }
        TAKE(la->att, n * H * D);
        TAKE(la->lse, n * H);
        TAKE(la->x_mid, n * C);
        TAKE(la->h2, n * C);
        TAKE(la->rstd2, n);
        TAKE(la->gu, n * 2 * I);
        TAKE(la->act, n * I);
    }
    TAKE(a->x_final, n * C);
    TAKE(a->xf, n * C);
    TAKE(a->rstdf, n);
    TAKE(a->tok_lse, n);
    TAKE(a->tok_ent, n);
    TAKE(a->logits, (size_t)logits_chunk(m, cap) * (size_t)c->vocab_size);
#undef TAKE
    a->cap = cap;
    a->kept_layers = slots;
    return 0;
}

static int ensure_grad_scratch(cpt_model *m, int N, cpt_err *err) {
    model_grad_scratch *g = &m->gs;
    if (N <= g->cap) return 0;
    const cpt_model_config *c = &m->cfg;
    free(g->mem);
    size_t n = (size_t)N, C = (size_t)c->hidden_size, HD = (size_t)c->num_heads * c->head_dim;
    size_t I = (size_t)c->intermediate_size, QKV = (size_t)qkv_dim(c);
    size_t total = n * (3 * C + QKV + HD + 3 * I + 2 * HD);
    g->mem = malloc(total * sizeof(float));
    if (!g->mem) {
        g->cap = 0;
        return cpt_errf(err, "out of memory for gradient scratch of %d tokens (%.1f MB)", N, total * 4.0 / 1e6);
    }
    float *p = g->mem;
    g->dres = p, p += n * C;
    g->dxf = p, p += n * C;
    g->dh = p, p += n * C;
    g->dqkv = p, p += n * QKV;
    g->datt = p, p += n * HD;
    g->dgu = p, p += n * 2 * I;
    g->dact = p, p += n * I;
    g->dqk_raw = p, p += n * HD;
    g->dqk_norm = p;
    g->cap = N;
    return 0;
}

void cpt_layer_fwd_qkv(cpt_model *m, int l, int N, const layer_acts *a, cpt_tensor pos) {
    const cpt_model_config *c = &m->cfg;
    const layer_offsets *lo = &m->layer[l];
    int64_t C = c->hidden_size, H = c->num_heads, KV = c->num_kv_heads, D = c->head_dim;
    int64_t QKV = qkv_dim(c), HD = H * D, KD = KV * D;
    cpt_k_rmsnorm_fwd(T2(a->h1, N, C), T1(a->rstd1, N), T2(a->x_in, N, C), T1(mp(m, lo->ln1), C), c->rms_norm_eps);
    cpt_k_matmul_fwd(T2(a->qkv, N, QKV), T2(a->h1, N, C), T2(mp(m, lo->wqkv), QKV, C), OPT1(mp(m, lo->bqkv), QKV));
    if (c->qk_norm) {
        /* q heads and k heads through their norms; a->att is free until attention runs, so it holds the result */
        cpt_k_copy_cols(T2(a->q_raw, N, HD), 0, T2(a->qkv, N, QKV), 0, HD);
        cpt_k_rmsnorm_fwd(T2(a->att, N * H, D), T1(a->q_rstd, N * H), T2(a->q_raw, N * H, D),
                          T1(mp(m, lo->q_norm), D), c->rms_norm_eps);
        cpt_k_copy_cols(T2(a->qkv, N, QKV), 0, T2(a->att, N, HD), 0, HD);
        cpt_k_copy_cols(T2(a->k_raw, N, KD), 0, T2(a->qkv, N, QKV), HD, KD);
        cpt_k_rmsnorm_fwd(T2(a->att, N * KV, D), T1(a->k_rstd, N * KV), T2(a->k_raw, N * KV, D),
                          T1(mp(m, lo->k_norm), D), c->rms_norm_eps);
        cpt_k_copy_cols(T2(a->qkv, N, QKV), HD, T2(a->att, N, KD), 0, KD);
    }
    cpt_k_rope_fwd(T2(a->qkv, N, QKV), (int)(H + KV), (int)D, pos, T1(m->inv_freq, D / 2));
}

void cpt_layer_fwd_out(cpt_model *m, int l, int N, const layer_acts *a, float *x_out) {
    const cpt_model_config *c = &m->cfg;
    const layer_offsets *lo = &m->layer[l];
    int64_t C = c->hidden_size, HD = (int64_t)c->num_heads * c->head_dim, I = c->intermediate_size;
    cpt_k_matmul_fwd(T2(a->x_mid, N, C), T2(a->att, N, HD), T2(mp(m, lo->wo), C, HD), OPT1(mp(m, lo->bo), C));
    cpt_k_add(T2(a->x_mid, N, C), T2(a->x_mid, N, C), T2(a->x_in, N, C));
    cpt_k_rmsnorm_fwd(T2(a->h2, N, C), T1(a->rstd2, N), T2(a->x_mid, N, C), T1(mp(m, lo->ln2), C), c->rms_norm_eps);
    cpt_k_matmul_fwd(T2(a->gu, N, 2 * I), T2(a->h2, N, C), T2(mp(m, lo->wgu), 2 * I, C), NONE());
    cpt_k_swiglu_fwd(T2(a->act, N, I), T2(a->gu, N, 2 * I));
    cpt_k_matmul_fwd(T2(x_out, N, C), T2(a->act, N, I), T2(mp(m, lo->wdown), C, I), NONE());
    cpt_k_add(T2(x_out, N, C), T2(x_out, N, C), T2(a->x_mid, N, C));
}

/* One decoder layer on N tokens: reads a->x_in, writes x_out (which must not be a->x_mid). Positions are explicit
 * (rope) and sequences come from cu (attention within each packed sequence). */
static void layer_forward(cpt_model *m, int l, int N, layer_acts *a, float *x_out, cpt_tensor pos, cpt_tensor cu) {
    const cpt_model_config *c = &m->cfg;
    int64_t H = c->num_heads, KV = c->num_kv_heads, D = c->head_dim, QKV = qkv_dim(c);
    cpt_layer_fwd_qkv(m, l, N, a, pos);
    cpt_attn_shape as = {(int)H, (int)KV, (int)D};
    cpt_k_attention_fwd(T2(a->att, N, H * D), T2(a->lse, N, H), T2(a->qkv, N, QKV), cu, as);
    cpt_layer_fwd_out(m, l, N, a, x_out);
}

/* dres holds d/dx_out on entry and d/dx_in on return; parameter gradients accumulate. */
static void layer_backward(cpt_model *m, int l, int N, layer_acts *a, float *dres, cpt_tensor pos, cpt_tensor cu) {
    const cpt_model_config *c = &m->cfg;
    const layer_offsets *lo = &m->layer[l];
    model_grad_scratch *g = &m->gs;
    int64_t C = c->hidden_size, H = c->num_heads, KV = c->num_kv_heads, D = c->head_dim, I = c->intermediate_size;
    int64_t QKV = qkv_dim(c), HD = H * D, KD = KV * D;
    /* MLP branch */
    cpt_k_zero(T2(g->dact, N, I));
    cpt_k_matmul_bwd(T2(g->dact, N, I), T2(mg(m, lo->wdown), C, I), NONE(), T2(dres, N, C), T2(a->act, N, I),
                     T2(mp(m, lo->wdown), C, I));
    cpt_k_zero(T2(g->dgu, N, 2 * I));
    cpt_k_swiglu_bwd(T2(g->dgu, N, 2 * I), T2(g->dact, N, I), T2(a->gu, N, 2 * I));
    cpt_k_zero(T2(g->dh, N, C));
    cpt_k_matmul_bwd(T2(g->dh, N, C), T2(mg(m, lo->wgu), 2 * I, C), NONE(), T2(g->dgu, N, 2 * I), T2(a->h2, N, C),
                     T2(mp(m, lo->wgu), 2 * I, C));
    cpt_k_rmsnorm_bwd(T2(dres, N, C), T1(mg(m, lo->ln2), C), T2(g->dh, N, C), T2(a->x_mid, N, C),
                      T1(mp(m, lo->ln2), C), T1(a->rstd2, N));
    /* attention branch */
    cpt_k_zero(T2(g->datt, N, HD));
    cpt_k_matmul_bwd(T2(g->datt, N, HD), T2(mg(m, lo->wo), C, HD), OPT1(mg(m, lo->bo), C), T2(dres, N, C),
                     T2(a->att, N, HD), T2(mp(m, lo->wo), C, HD));
    cpt_k_zero(T2(g->dqkv, N, QKV));
    cpt_attn_shape as = {(int)H, (int)KV, (int)D};
    cpt_k_attention_bwd(T2(g->dqkv, N, QKV), T2(g->datt, N, HD), T2(a->att, N, HD), T2(a->lse, N, H),
                        T2(a->qkv, N, QKV), cu, as);
    cpt_k_rope_bwd(T2(g->dqkv, N, QKV), (int)(H + KV), (int)D, pos, T1(m->inv_freq, D / 2));
    if (c->qk_norm) {
        cpt_k_copy_cols(T2(g->dqk_norm, N, HD), 0, T2(g->dqkv, N, QKV), 0, HD);
        cpt_k_zero(T2(g->dqk_raw, N, HD));
        cpt_k_rmsnorm_bwd(T2(g->dqk_raw, N * H, D), T1(mg(m, lo->q_norm), D), T2(g->dqk_norm, N * H, D),
                          T2(a->q_raw, N * H, D), T1(mp(m, lo->q_norm), D), T1(a->q_rstd, N * H));
        cpt_k_copy_cols(T2(g->dqkv, N, QKV), 0, T2(g->dqk_raw, N, HD), 0, HD);
        cpt_k_copy_cols(T2(g->dqk_norm, N, KD), 0, T2(g->dqkv, N, QKV), HD, KD);
        cpt_k_zero(T2(g->dqk_raw, N, KD));
        cpt_k_rmsnorm_bwd(T2(g->dqk_raw, N * KV, D), T1(mg(m, lo->k_norm), D), T2(g->dqk_norm, N * KV, D),
                          T2(a->k_raw, N * KV, D), T1(mp(m, lo->k_norm), D), T1(a->k_rstd, N * KV));
        cpt_k_copy_cols(T2(g->dqkv, N, QKV), HD, T2(g->dqk_raw, N, KD), 0, KD);
    }
    cpt_k_zero(T2(g->dh, N, C));
    cpt_k_matmul_bwd(T2(g->dh, N, C), T2(mg(m, lo->wqkv), QKV, C), OPT1(mg(m, lo->bqkv), QKV), T2(g->dqkv, N, QKV),
                     T2(a->h1, N, C), T2(mp(m, lo->wqkv), QKV, C));
    cpt_k_rmsnorm_bwd(T2(dres, N, C), T1(mg(m, lo->ln1), C), T2(g->dh, N, C), T2(a->x_in, N, C),
                      T1(mp(m, lo->ln1), C), T1(a->rstd1, N));
}

/* Arguments checked by model/backend.c; out is never NULL. */
int cpt_cpu_forward(cpt_model *m, const cpt_batch *b, cpt_forward_out *out, int keep_activations, cpt_err *err) {
    const cpt_model_config *c = &m->cfg;
    int N = b->n_tokens, S = b->n_seqs;
    int64_t C = c->hidden_size, V = c->vocab_size;
    m->kept_tokens = -1;
    if (ensure_acts(m, N, S, keep_activations, err)) return -1;
    model_acts *a = &m->acts;
    memcpy(a->cu, b->seq_start, sizeof(int32_t) * (size_t)(S + 1));
    for (int s = 0; s < S; s++)
        for (int i = b->seq_start[s]; i < b->seq_start[s + 1]; i++) a->pos[i] = i - b->seq_start[s];
    cpt_tensor pos = cpt_tensor_i32_1d(a->pos, N), cu = cpt_tensor_i32_1d(a->cu, S + 1);
    cpt_tensor tokens = cpt_tensor_i32_1d((int32_t *)b->tokens, N);

    cpt_k_embedding_fwd(T2(a->layers[0].x_in, N, C), tokens, T2(mp(m, m->off_embed), V, C));
    for (int l = 0; l < c->num_layers; l++) {
        layer_acts *la = &a->layers[keep_activations ? l : 0];
        float *x_out = l + 1 < c->num_layers ? a->layers[keep_activations ? l + 1 : 0].x_in : a->x_final;
        layer_forward(m, l, N, la, x_out, pos, cu);
    }
    cpt_k_rmsnorm_fwd(T2(a->xf, N, C), T1(a->rstdf, N), T2(a->x_final, N, C), T1(mp(m, m->off_norm), C),
                      c->rms_norm_eps);

    if (keep_activations || out->logprobs || out->entropy || out->logits) {
        int ch = logits_chunk(m, N);
        cpt_tensor targets = b->targets ? cpt_tensor_i32_1d((int32_t *)b->targets, N) : NONE();
        for (int n0 = 0; n0 < N; n0 += ch) {
            int n = N - n0 < ch ? N - n0 : ch;
            float *lg = out->logits ? out->logits + (size_t)n0 * V : a->logits;
            cpt_k_matmul_fwd(T2(lg, n, V), T2(a->xf + n0 * C, n, C), T2(mp(m, m->off_lm_head), V, C), NONE());
            cpt_tensor tg = NONE();
            if (b->targets) {
                tg = targets;
                tg.data = (int32_t *)b->targets + n0;
                tg.shape[0] = n;
            }
            cpt_k_token_stats_fwd(out->logprobs && b->targets ? T1(out->logprobs + n0, n) : NONE(),
                                  T1(a->tok_ent + n0, n), T1(a->tok_lse + n0, n), T2(lg, n, V), tg);
        }
        if (out->logprobs && !b->targets) memset(out->logprobs, 0, sizeof(float) * (size_t)N);
        if (out->entropy) memcpy(out->entropy, a->tok_ent, sizeof(float) * (size_t)N);
    }
    if (out->values)
        cpt_k_matmul_fwd(T2(out->values, N, 1), T2(a->xf, N, C), T2(mp(m, m->off_score), 1, C), NONE());
    if (keep_activations) {
        m->kept_tokens = N;
        m->kept_seqs = S;
    }
    return 0;
}

int cpt_cpu_backward(cpt_model *m, const cpt_batch *b, const float *d_logprobs, const float *d_entropy,
                     const float *d_values, cpt_err *err) {
    if (m->kept_tokens != b->n_tokens || m->kept_seqs != b->n_seqs ||
        memcmp(m->acts.cu, b->seq_start, sizeof(int32_t) * (size_t)(b->n_seqs + 1)) != 0)
        return cpt_errf(err, "backward: needs a forward with keep_activations on this same batch first");
    const cpt_model_config *c = &m->cfg;
    int N = b->n_tokens, S = b->n_seqs;
    int64_t C = c->hidden_size, V = c->vocab_size;
    if (ensure_grad_scratch(m, N, err)) return -1;
    model_acts *a = &m->acts;
    model_grad_scratch *g = &m->gs;
    cpt_tensor pos = cpt_tensor_i32_1d(a->pos, N), cu = cpt_tensor_i32_1d(a->cu, S + 1);

    cpt_k_zero(T2(g->dxf, N, C));
    if (d_logprobs || d_entropy) {
        int ch = logits_chunk(m, N);
        for (int n0 = 0; n0 < N; n0 += ch) {
            int n = N - n0 < ch ? N - n0 : ch;
            cpt_tensor xf = T2(a->xf + n0 * C, n, C), w = T2(mp(m, m->off_lm_head), V, C);
            cpt_k_matmul_fwd(T2(a->logits, n, V), xf, w, NONE());
            cpt_tensor tg = b->targets ? cpt_tensor_i32_1d((int32_t *)b->targets + n0, n) : NONE();
            cpt_k_token_stats_bwd(T2(a->logits, n, V), T1(a->tok_lse + n0, n), T1(a->tok_ent + n0, n), tg,
                                  d_logprobs ? T1((float *)d_logprobs + n0, n) : NONE(),
                                  d_entropy ? T1((float *)d_entropy + n0, n) : NONE());
            cpt_k_matmul_bwd(T2(g->dxf + n0 * C, n, C), T2(mg(m, m->off_lm_head), V, C), NONE(), T2(a->logits, n, V),
                             xf, w);
        }
    }
    if (d_values)
        cpt_k_matmul_bwd(T2(g->dxf, N, C), T2(mg(m, m->off_score), 1, C), NONE(), T2((float *)d_values, N, 1),
                         T2(a->xf, N, C), T2(mp(m, m->off_score), 1, C));
    cpt_k_zero(T2(g->dres, N, C));
    cpt_k_rmsnorm_bwd(T2(g->dres, N, C), T1(mg(m, m->off_norm), C), T2(g->dxf, N, C), T2(a->x_final, N, C),
                      T1(mp(m, m->off_norm), C), T1(a->rstdf, N));
    for (int l = c->num_layers - 1; l >= 0; l--) layer_backward(m, l, N, &a->layers[l], g->dres, pos, cu);
    cpt_k_embedding_bwd(T2(mg(m, m->off_embed), V, C), T2(g->dres, N, C), cpt_tensor_i32_1d((int32_t *)b->tokens, N));
    return 0;
}

static int host_nothing(cpt_model *m, cpt_err *err) {
    (void)m, (void)err;
    return 0;
}

const cpt_model_backend cpt_backend_cpu = {
    .name = "cpu",
    .forward = cpt_cpu_forward,
    .backward = cpt_cpu_backward,
    .zero_grad = cpt_cpu_zero_grad,
    .sync_to_host = host_nothing,
    .sync_to_device = host_nothing,
    .wait = host_nothing,
    .pull_weights = NULL,
    .decoder_new = cpt_cpu_decoder_new,
    .release = NULL,
};
