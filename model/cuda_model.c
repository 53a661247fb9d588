/* The transformer on one GPU: the CUDA twin of model/forward.c over the ops of kernels/cuda/cuda_ops.h.
 *
 * Placement (cpt_model_use_cuda): one device allocation holds the fp32 master weights, the fp32 gradients and a
 * bf16 copy of the weights, all in the flat order of the host arrays, so the fused q|k|v and gate|up matrices stay
 * contiguous and each linear layer is one GEMM. Activations live in a second allocation carved into named tensors
 * (llm.c style), bf16 except per-row statistics; backward scratch in a third. Both grow to the largest batch seen.
 *
 * A forward uploads the batch once (tokens, targets, positions, sequence offsets and the grouping of positions by
 * token id that the embedding backward needs), queues every kernel on the context's stream and copies back
 * logprobs / entropy / values: that copy is its only synchronisation. A backward uploads d(loss)/d(logprob) (and
 * d_entropy, d_values) and synchronises nowhere. Residual adds are fused into the RMSNorm that follows them.
 *
 * The LM head runs chunks of tokens so B x T x V fp32 logits never exist: bf16 logits of a chunk feed the fused
 * token statistics (logsumexp, logprob, entropy). When the bf16 logits of the whole batch fit the logits budget
 * (default 8 GiB, CPT_CUDA_LOGITS_MB overrides) a training forward keeps them and the backward turns them into
 * d(logits) in place; otherwise the backward recomputes each chunk's logits (chunks of at most 512 MiB, or of the
 * budget when it is smaller). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/backend.h"
#include "model/cuda_infer.h"
#include "model/cuda_model.h"
#include "model/model_internal.h"

void cpt_model_set_grads_ready(cpt_model *m, cpt_grads_ready_fn fn, void *ud) {
    m->grads_ready = fn;
    m->grads_ready_ud = ud;
}

void cpt_model_set_recompute(cpt_model *m, int on) { m->recompute = on != 0; }

int cpt_model_on_cuda(const cpt_model *m) { return m && m->cuda != NULL; }

int cpt_model_set_host_master(cpt_model *m, int on, cpt_err *err) {
    if ((m->cuda || m->cuda_infer) && m->host_master != (on != 0))
        return cpt_errf(err, "the fp32 master weights' place is chosen before the model is placed on the GPU");
    m->host_master = on != 0;
    return 0;
}

int cpt_model_host_master(const cpt_model *m) { return m && m->host_master; }

#ifndef CPT_HAVE_CUDA

static int no_cuda(cpt_err *err) {
    return cpt_errf(err, "this cpt was built without CUDA (no nvcc found at configure time): the GPU model is not "
                         "available; rebuild with the CUDA toolkit installed, or use train.device = \"cpu\"");
}
int cpt_model_use_cuda(cpt_model *m, int device, cpt_err *err) {
    if (cpt_model_cuda_shape_check(&m->cfg, 0, err))
        return cpt_err_prefix(err, "placing the model on CUDA device %d", device);
    return no_cuda(err);
}
int cpt_model_grads_settle(cpt_model *m, cpt_err *err) {
    (void)m, (void)err;
    return 0;
}
int cpt_cuda_model_pull_weights(cpt_model *m, cpt_err *err) {
    (void)m, (void)err;
    return 0;
}
void cpt_cuda_model_free(cpt_cuda_model *cm) { (void)cm; }
int cpt_model_cuda_param(cpt_model *m, const cpt_param *p, cpt_cuda_param_view *v) {
    (void)m, (void)p, (void)v;
    return -1;
}
double *cpt_model_cuda_norm_slots(cpt_model *m) {
    (void)m;
    return NULL;
}
void *cpt_model_cuda_ctx(cpt_model *m) {
    (void)m;
    return NULL;
}

/* Never chosen in this build (placement fails first); defined so the table links everywhere. */
static int cuda_forward(cpt_model *m, const cpt_batch *b, cpt_forward_out *out, int keep, cpt_err *err) {
    (void)m, (void)b, (void)out, (void)keep;
    return no_cuda(err);
}
static int cuda_backward(cpt_model *m, const cpt_batch *b, const float *dl, const float *de, const float *dv,
                         cpt_err *err) {
    (void)m, (void)b, (void)dl, (void)de, (void)dv;
    return no_cuda(err);
}
static void cuda_zero_grad(cpt_model *m) { (void)m; }
static int cuda_sync_to_host(cpt_model *m, cpt_err *err) {
    (void)m;
    return no_cuda(err);
}
static int cuda_sync_to_device(cpt_model *m, cpt_err *err) {
    (void)m;
    return no_cuda(err);
}
static int cuda_wait(cpt_model *m, cpt_err *err) {
    (void)m;
    return no_cuda(err);
}
static void cuda_release(cpt_model *m) { (void)m; }

#else

#include "kernels/cuda/cuda_ops.h"

typedef uint16_t bf16; /* device bf16 storage, addressed by element */

#define STATS_ROWS 32768 /* rows per token_stats call (its backward takes at most 65535) */

typedef struct cl_acts {
    bf16 *x_in, *h1, *qkv, *q_raw, *k_raw, *att, *x_mid, *h2, *gu, *act; /* act: NULL when recomputing */
    float *rstd1, *q_rstd, *k_rstd, *lse, *rstd2;
} cl_acts;

struct cpt_cuda_model {
    int device;
    cpt_cuda_ctx *ctx;
    /* parameters: one allocation */
    void *pmem;
    float *w, *g, *inv_freq; /* w: NULL when the master weights stay on the host (host_master) */
    int pinned;              /* m->data was moved into pinned memory (cudaHostAlloc) by this placement */
    bf16 *wb;
    double *norm_slots; /* [n_params] */
    /* activations: one allocation */
    void *amem;
    int cap, slots, lrows; /* tokens, kept layers, rows of the logits buffer */
    int inputs_only;       /* recompute: the kept layers share one set of buffers and own only x_in */
    cl_acts *layers;
    bf16 *x_final, *xf, *logits, *proj, *act;
    float *rstdf, *lse, *outs; /* outs [3 N]: logprob | entropy | value, copied back in one piece */
    int32_t *ints;             /* tokens | targets | pos | cu [N + 1] | emb ids [N] | emb starts [N + 1] | order [N] */
    /* backward scratch: one allocation */
    void *gmem;
    int gcap;
    bf16 *dres, *dxf, *dh, *dact, *dgu, *datt, *dqkv, *dqk_a, *dqk_b;
    float *dins; /* d_logprob | d_entropy | d_value [3 N] */
    /* host staging */
    int32_t *h_ints;
    float *h_f32;
    int h_cap;
    /* zero_grad is deferred (zero_pending): the backward zeroes only zero_runs, the element ranges [a, b) outside the
     * layers' product weights, and writes those with its first products (beta 0) instead of a memset plus reads */
    int zero_pending, n_zero_runs;
    int64_t (*zero_runs)[2];
    /* the last training forward */
    int kept_tokens, kept_seqs, kept_logits, n_emb_ids, max_seqlen;
    int32_t *kept_cu;
    int has_targets;
    size_t logits_budget;
};

static cpt_tensor TB(void *p, int64_t a, int64_t b) { return cpt_cuda_tensor(p, CPT_DT_BF16, 2, a, b); }
static cpt_tensor TB1(void *p, int64_t a) { return cpt_cuda_tensor(p, CPT_DT_BF16, 1, a, 0); }
static cpt_tensor TF(void *p, int64_t a, int64_t b) { return cpt_cuda_tensor(p, CPT_DT_F32, 2, a, b); }
static cpt_tensor TF1(void *p, int64_t a) { return cpt_cuda_tensor(p, CPT_DT_F32, 1, a, 0); }
static cpt_tensor TI1(void *p, int64_t a) { return cpt_cuda_tensor(p, CPT_DT_I32, 1, a, 0); }
static cpt_tensor NONE(void) { return cpt_tensor_none(); }

/* views into the parameter arrays at an element offset (absent when the offset is -1) */
static cpt_tensor WB(cpt_model *m, int64_t off, int64_t a, int64_t b) {
    return off < 0 ? NONE() : (b ? TB(m->cuda->wb + off, a, b) : TB1(m->cuda->wb + off, a));
}
static cpt_tensor GF(cpt_model *m, int64_t off, int64_t a, int64_t b) {
    return off < 0 ? NONE() : (b ? TF(m->cuda->g + off, a, b) : TF1(m->cuda->g + off, a));
}

/* A bump allocator run twice: once on NULL to measure, once on the allocation. 256-byte alignment for cuBLASLt. */
typedef struct carver {
    char *base;
    size_t off;
} carver;
static void *take(carver *c, size_t bytes) {
    size_t o = (c->off + 255) & ~(size_t)255;
    c->off = o + bytes;
    return c->base ? c->base + o : NULL;
}

static int build_zero_runs(cpt_model *m, cpt_err *err);

void cpt_cuda_model_free(cpt_cuda_model *cm) {
    if (!cm) return;
    if (cm->ctx) cpt_cuda_sync(cm->ctx, NULL);
    cpt_cuda_free(cm->pmem);
    cpt_cuda_free(cm->amem);
    cpt_cuda_free(cm->gmem);
    cpt_cuda_ctx_free(cm->ctx);
    free(cm->layers);
    free(cm->h_ints);
    free(cm->h_f32);
    free(cm->kept_cu);
    free(cm->zero_runs);
    free(cm);
}

/* The host master weights -> the bf16 copy, through a device staging buffer a chunk at a time (the same cast as
 * a placement with device master weights, so the bf16 values agree bit for bit). */
static int upload_host_master(cpt_model *m, cpt_err *err) {
    cpt_cuda_model *cm = m->cuda;
    size_t n = m->numel, chunk = (size_t)1 << 24;
    if (chunk > n) chunk = n ? n : 1;
    float *stage = cpt_cuda_malloc(chunk * sizeof(float), "staging the host master weights", err);
    if (!stage) return -1;
    int rc = 0;
    for (size_t at = 0; at < n && !rc; at += chunk) {
        size_t k = n - at < chunk ? n - at : chunk;
        /* the copy is ordered after the previous chunk's cast on the same stream, and waited for */
        rc = cpt_cuda_memcpy_h2d(cm->ctx, stage, m->data + at, k * sizeof(float), err);
        if (!rc) cpt_cuda_cast_bf16(cm->ctx, TB1(cm->wb + at, (int64_t)k), TF1(stage, (int64_t)k));
    }
    if (!rc) rc = cpt_cuda_sync(cm->ctx, err);
    cpt_cuda_free(stage);
    return rc ? cpt_err_prefix(err, "uploading the weights") : 0;
}

static int cuda_sync_to_device(cpt_model *m, cpt_err *err) {
    cpt_cuda_model *cm = m->cuda;
    if (!cm) return 0;
    if (!cm->w) return upload_host_master(m, err);
    size_t n = m->numel;
    if (cpt_cuda_memcpy_h2d(cm->ctx, cm->w, m->data, n * sizeof(float), err))
        return cpt_err_prefix(err, "uploading the weights");
    cpt_cuda_cast_bf16(cm->ctx, TB1(cm->wb, (int64_t)n), TF1(cm->w, (int64_t)n));
    return cpt_cuda_sync(cm->ctx, err);
}

static int cuda_wait(cpt_model *m, cpt_err *err) { return m->cuda ? cpt_cuda_sync(m->cuda->ctx, err) : 0; }

int cpt_cuda_model_pull_weights(cpt_model *m, cpt_err *err) {
    cpt_cuda_model *cm = m->cuda;
    if (cm && !cm->w) return 0; /* the host weights are the master (the offloaded optimizer updated them) */
    if (cm && cpt_cuda_memcpy_d2h(cm->ctx, m->data, cm->w, m->numel * sizeof(float), err))
        return cpt_err_prefix(err, "copying the weights to the host");
    return 0;
}

static int cuda_sync_to_host(cpt_model *m, cpt_err *err) {
    cpt_cuda_model *cm = m->cuda;
    if (!cm) return 0;
    if (cpt_model_grads_settle(m, err) ||
        (cm->w && cpt_cuda_memcpy_d2h(cm->ctx, m->data, cm->w, m->numel * sizeof(float), err)) ||
        cpt_cuda_memcpy_d2h(cm->ctx, m->grad, cm->g, m->numel * sizeof(float), err))
        return cpt_err_prefix(err, "copying the weights to the host");
    return 0;
}

/* The host weights into (pin = 1) or out of (pin = 0) pinned memory: a new array, the params repointed. Pinned
 * memory is allocated apart (not registered in place), so two models' arrays never share a locked page. */
static int move_host_weights(cpt_model *m, int pin, cpt_err *err) {
    size_t b = m->numel * sizeof(float);
    float *dst = pin ? cpt_cuda_host_alloc(b, "the fp32 master weights (train.optimizer_offload)", err)
                     : malloc(b ? b : 1);
    if (!dst) return pin ? -1 : cpt_errf(err, "out of memory for the host weights");
    memcpy(dst, m->data, b);
    if (pin) free(m->data);
    else cpt_cuda_host_free(m->data);
    m->data = dst;
    for (size_t i = 0; i < m->n_params; i++) m->params[i].data = m->data + m->offsets[i];
    return 0;
}

/* Only cpt_model_free releases, and it frees m->data next with free(): a pinned array goes back here instead. */
static void cuda_release(cpt_model *m) {
    if (m->cuda && m->cuda->pinned) {
        cpt_cuda_sync(m->cuda->ctx, NULL);
        cpt_cuda_host_free(m->data);
        m->data = NULL;
        for (size_t i = 0; i < m->n_params; i++) m->params[i].data = NULL;
    }
    cpt_cuda_model_free(m->cuda);
    m->cuda = NULL;
}

int cpt_model_use_cuda(cpt_model *m, int device, cpt_err *err) {
    if (m->cuda_infer)
        return cpt_errf(err, "the model is placed for inference (cpt_model_use_cuda_infer): it cannot train on CUDA");
    if (m->cuda) {
        if (m->cuda->device == device) return 0;
        return cpt_errf(err, "the model is already on CUDA device %d (asked for %d)", m->cuda->device, device);
    }
    const cpt_model_config *c = &m->cfg;
    if (cpt_model_cuda_shape_check(c, 0, err))
        return cpt_err_prefix(err, "placing the model on CUDA device %d", device);
    cpt_cuda_model *cm = calloc(1, sizeof *cm);
    if (!cm) return cpt_errf(err, "out of memory");
    cm->device = device;
    cm->kept_tokens = -1;
    size_t mb = 8192;
    const char *env = getenv("CPT_CUDA_LOGITS_MB");
    if (env && *env) mb = (size_t)strtoull(env, NULL, 10);
    cm->logits_budget = mb << 20;
    if (!(cm->ctx = cpt_cuda_ctx_new(device, err))) goto fail;
    size_t n = m->numel;
    carver cv = {NULL, 0};
    for (int pass = 0; pass < 2; pass++) {
        cv.off = 0;
        cm->w = m->host_master ? NULL : take(&cv, n * sizeof(float));
        cm->g = take(&cv, n * sizeof(float));
        cm->wb = take(&cv, n * sizeof(bf16));
        cm->inv_freq = take(&cv, sizeof(float) * (size_t)(c->head_dim / 2));
        cm->norm_slots = take(&cv, sizeof(double) * m->n_params);
        if (pass == 0 && !(cv.base = cm->pmem = cpt_cuda_malloc(cv.off, "the model's parameters", err))) goto fail;
    }
    if (m->host_master) {
        if (move_host_weights(m, 1, err)) goto fail;
        cm->pinned = 1;
    }
    m->cuda = cm;
    if (build_zero_runs(m, err) || cuda_sync_to_device(m, err)) goto fail_placed;
    if (cpt_cuda_memset(cm->ctx, cm->g, 0, n * sizeof(float), err) ||
        cpt_cuda_memcpy_h2d(cm->ctx, cm->inv_freq, m->inv_freq, sizeof(float) * (size_t)(c->head_dim / 2), err))
        goto fail_placed;
    m->kept_tokens = -1;
    m->be = &cpt_backend_cuda;
    return 0;
fail_placed:
    m->cuda = NULL;
    if (cm->pinned) { /* the model stays a host model: its weights back in ordinary memory */
        cpt_err e;
        if (move_host_weights(m, 0, &e)) {
            fprintf(stderr, "cpt cuda model: %s\n", e.msg);
            abort();
        }
    }
fail:
    cpt_cuda_model_free(cm);
    return cpt_err_prefix(err, "placing the model on CUDA device %d", device);
}

int cpt_model_cuda_param(cpt_model *m, const cpt_param *p, cpt_cuda_param_view *v) {
    if (!m || !m->cuda || p->data < m->data || p->data >= m->data + m->numel) return -1;
    cpt_err e; /* a reader outside the backward (optimizer, norm, data parallel) sees zeros after zero_grad */
    if (cpt_model_grads_settle(m, &e)) {
        fprintf(stderr, "cpt cuda model: zeroing the gradients: %s\n", e.msg);
        abort();
    }
    size_t off = (size_t)(p->data - m->data);
    v->ctx = m->cuda->ctx;
    v->data = m->cuda->w ? m->cuda->w + off : NULL; /* NULL: the master weights are on the host (p->data) */
    v->grad = m->cuda->g + off;
    v->data_bf16 = m->cuda->wb + off;
    return 0;
}

double *cpt_model_cuda_norm_slots(cpt_model *m) { return m && m->cuda ? m->cuda->norm_slots : NULL; }

void *cpt_model_cuda_ctx(cpt_model *m) { return m->cuda ? (void *)m->cuda->ctx : cpt_cuda_infer_ctx(m); }

static void cuda_zero_grad(cpt_model *m) { m->cuda->zero_pending = 1; }

int cpt_model_grads_settle(cpt_model *m, cpt_err *err) {
    cpt_cuda_model *cm = m ? m->cuda : NULL;
    if (!cm || !cm->zero_pending) return 0;
    cm->zero_pending = 0;
    return cpt_cuda_memset(cm->ctx, cm->g, 0, m->numel * sizeof(float), err);
}

/* The complement of the layers' product weights (wqkv, wo, wgu, wdown) in [0, numel), in ascending runs. The
 * parameter layout (model/params.c) puts them in that order, layer after layer; anything else is refused. */
static int build_zero_runs(cpt_model *m, cpt_err *err) {
    const cpt_model_config *c = &m->cfg;
    int64_t C = c->hidden_size, I = c->intermediate_size, HD = (int64_t)c->num_heads * c->head_dim;
    int L = c->num_layers, n = 0;
    int64_t(*runs)[2] = malloc(sizeof *runs * (size_t)(4 * L + 1)), at = 0;
    if (!runs) return cpt_errf(err, "out of memory");
    for (int l = 0; l < L; l++) {
        const layer_offsets *lo = &m->layer[l];
        int64_t skip[4][2] = {{lo->wqkv, lo->wqkv + qkv_dim(c) * C}, {lo->wo, lo->wo + C * HD},
                              {lo->wgu, lo->wgu + 2 * I * C}, {lo->wdown, lo->wdown + C * I}};
        for (int j = 0; j < 4; j++) {
            if (skip[j][0] < at) {
                free(runs);
                return cpt_errf(err, "CUDA model: layer %d's product weights are not in ascending order", l);
            }
            if (skip[j][0] > at) runs[n][0] = at, runs[n][1] = skip[j][0], n++;
            at = skip[j][1];
        }
    }
    if ((int64_t)m->numel > at) runs[n][0] = at, runs[n][1] = (int64_t)m->numel, n++;
    m->cuda->zero_runs = runs;
    m->cuda->n_zero_runs = n;
    return 0;
}

/* ---- buffers ---- */

static int ensure_host(cpt_cuda_model *cm, int N, cpt_err *err) {
    if (N <= cm->h_cap) return 0;
    free(cm->h_ints), free(cm->h_f32), free(cm->kept_cu);
    cm->h_ints = malloc(sizeof(int32_t) * (size_t)(7 * N + 2));
    cm->h_f32 = malloc(sizeof(float) * (size_t)(3 * N));
    cm->kept_cu = malloc(sizeof(int32_t) * (size_t)(N + 1));
    cm->h_cap = cm->h_ints && cm->h_f32 && cm->kept_cu ? N : 0;
    return cm->h_cap ? 0 : cpt_errf(err, "out of memory for a batch of %d tokens", N);
}

/* Rows of the logits buffer: the whole batch when a training forward may keep it, else a chunk. */
static int logits_rows(const cpt_cuda_model *cm, int N, int V, int keep) {
    size_t row = (size_t)V * sizeof(bf16);
    if (keep && (size_t)N * row <= cm->logits_budget) return N;
    size_t chunk = cm->logits_budget < ((size_t)512 << 20) ? cm->logits_budget : ((size_t)512 << 20);
    size_t r = chunk / row; /* chunks of at most 512 MiB (less when the budget is smaller) */
    if (r < 1) r = 1;
    if (r > STATS_ROWS) r = STATS_ROWS;
    return (int)r < N ? (int)r : N;
}

static int ensure_acts(cpt_model *m, int N, int keep, cpt_err *err) {
    cpt_cuda_model *cm = m->cuda;
    const cpt_model_config *c = &m->cfg;
    int slots = keep ? c->num_layers : 1, lrows = logits_rows(cm, N, c->vocab_size, keep);
    int inputs_only = keep && m->recompute;
    if (ensure_host(cm, N, err)) return -1;
    if (N <= cm->cap && slots <= cm->slots && lrows <= cm->lrows && inputs_only == cm->inputs_only) return 0;
    if (cm->amem) {
        if (cpt_cuda_sync(cm->ctx, err)) return -1;
        cpt_cuda_free(cm->amem);
        cm->amem = NULL;
    }
    if (N < cm->cap) N = cm->cap;
    if (slots < cm->slots) slots = cm->slots;
    if (lrows < cm->lrows) lrows = cm->lrows;
    free(cm->layers);
    cm->cap = cm->slots = cm->lrows = 0;
    if (!(cm->layers = calloc((size_t)slots, sizeof(cl_acts)))) return cpt_errf(err, "out of memory");
    size_t n = (size_t)N, C = (size_t)c->hidden_size, H = (size_t)c->num_heads, KV = (size_t)c->num_kv_heads;
    size_t D = (size_t)c->head_dim, I = (size_t)c->intermediate_size, QKV = (size_t)qkv_dim(c);
    carver cv = {NULL, 0};
    for (int pass = 0; pass < 2; pass++) {
        cv.off = 0;
        for (int l = 0; l < slots; l++) {
            cl_acts *a = &cm->layers[l];
            a->x_in = take(&cv, n * C * 2);
            if (inputs_only && l > 0) { /* everything but x_in is layer 0's, reused while recomputing */
                bf16 *x_in = a->x_in;
                *a = cm->layers[0];
                a->x_in = x_in;
                continue;
            }
            a->h1 = take(&cv, n * C * 2);
            a->qkv = take(&cv, n * QKV * 2);
            if (c->qk_norm) {
                a->q_raw = take(&cv, n * H * D * 2);
                a->k_raw = take(&cv, n * KV * D * 2);
                a->q_rstd = take(&cv, n * H * 4);
                a->k_rstd = take(&cv, n * KV * 4);
            }
            a->att = take(&cv, n * H * D * 2);
            a->lse = take(&cv, n * H * 4);
            a->x_mid = take(&cv, n * C * 2);
            a->h2 = take(&cv, n * C * 2);
            a->gu = take(&cv, n * 2 * I * 2);
            /* silu(gate) * up, kept for the down projection's weight gradient (recomputing it cost a second
             * pass over gu per layer; with train.recompute the layer is recomputed anyway and cm->act serves) */
            a->act = inputs_only ? NULL : take(&cv, n * I * 2);
            a->rstd1 = take(&cv, n * 4);
            a->rstd2 = take(&cv, n * 4);
        }
        cm->x_final = take(&cv, n * C * 2);
        cm->xf = take(&cv, n * C * 2);
        cm->proj = take(&cv, n * C * 2);
        cm->act = take(&cv, n * I * 2);
        cm->logits = take(&cv, (size_t)lrows * (size_t)c->vocab_size * 2);
        cm->rstdf = take(&cv, n * 4);
        cm->lse = take(&cv, n * 4);
        cm->outs = take(&cv, 3 * n * 4);
        cm->ints = take(&cv, (7 * n + 2) * 4);
        if (pass == 0) {
            char what[96];
            snprintf(what, sizeof what, "activations of %d tokens x %d layers", N, slots);
            if (!(cv.base = cm->amem = cpt_cuda_malloc(cv.off, what, err))) return -1;
        }
    }
    cm->cap = N, cm->slots = slots, cm->lrows = lrows, cm->inputs_only = inputs_only;
    return 0;
}

static int ensure_grad_scratch(cpt_model *m, int N, cpt_err *err) {
    cpt_cuda_model *cm = m->cuda;
    if (N <= cm->gcap) return 0;
    const cpt_model_config *c = &m->cfg;
    if (cm->gmem) {
        if (cpt_cuda_sync(cm->ctx, err)) return -1;
        cpt_cuda_free(cm->gmem);
        cm->gmem = NULL;
        cm->gcap = 0;
    }
    size_t n = (size_t)N, C = (size_t)c->hidden_size, HD = (size_t)c->num_heads * c->head_dim;
    size_t I = (size_t)c->intermediate_size, QKV = (size_t)qkv_dim(c);
    carver cv = {NULL, 0};
    for (int pass = 0; pass < 2; pass++) {
        cv.off = 0;
        cm->dres = take(&cv, n * C * 2);
        cm->dxf = take(&cv, n * C * 2);
        cm->dh = take(&cv, n * C * 2);
        cm->dact = take(&cv, n * I * 2);
        cm->dgu = take(&cv, n * 2 * I * 2);
        cm->datt = take(&cv, n * HD * 2);
        cm->dqkv = take(&cv, n * QKV * 2);
        cm->dqk_a = c->qk_norm ? take(&cv, n * HD * 2) : NULL;
        cm->dqk_b = c->qk_norm ? take(&cv, n * HD * 2) : NULL;
        cm->dins = take(&cv, 3 * n * 4);
        if (pass == 0 && !(cv.base = cm->gmem = cpt_cuda_malloc(cv.off, "backward scratch", err))) return -1;
    }
    cm->gcap = N;
    return 0;
}

/* ---- forward ---- */

static int zero_dev(cpt_cuda_model *cm, void *p, size_t bytes) {
    cpt_err e;
    if (cpt_cuda_memset(cm->ctx, p, 0, bytes, &e)) {
        fprintf(stderr, "cpt cuda model: %s\n", e.msg);
        abort();
    }
    return 0;
}

/* One decoder layer. x_in of the layer holds the residual stream; the layer ends with the fused residual add +
 * RMSNorm that makes the next layer's x_in and h1 (or, after the last layer, x_final and xf), unless tail is 0
 * (recomputing the layer for its backward: only its own activations are wanted). */
static void layer_forward(cpt_model *m, int l, int N, cl_acts *a, cl_acts *next, int S, int tail) {
    cpt_cuda_model *cm = m->cuda;
    cpt_cuda_ctx *ctx = cm->ctx;
    const cpt_model_config *c = &m->cfg;
    const layer_offsets *lo = &m->layer[l];
    int64_t C = c->hidden_size, H = c->num_heads, KV = c->num_kv_heads, D = c->head_dim, I = c->intermediate_size;
    int64_t QKV = qkv_dim(c), HD = H * D, KD = KV * D;
    int32_t *pos = cm->ints + 2 * N, *cu = cm->ints + 3 * N;
    cpt_cuda_matmul_fwd(ctx, TB(a->qkv, N, QKV), TB(a->h1, N, C), WB(m, lo->wqkv, QKV, C), WB(m, lo->bqkv, QKV, 0));
    if (c->qk_norm) {
        /* q heads, then k heads, through their norms; att is free until attention runs, so it holds the result */
        cpt_cuda_copy_cols(ctx, TB(a->q_raw, N, HD), 0, TB(a->qkv, N, QKV), 0, HD);
        cpt_cuda_rmsnorm_fwd(ctx, TB(a->att, N * H, D), TF1(a->q_rstd, N * H), NONE(), TB(a->q_raw, N * H, D), NONE(),
                             WB(m, lo->q_norm, D, 0), c->rms_norm_eps);
        cpt_cuda_copy_cols(ctx, TB(a->qkv, N, QKV), 0, TB(a->att, N, HD), 0, HD);
        cpt_cuda_copy_cols(ctx, TB(a->k_raw, N, KD), 0, TB(a->qkv, N, QKV), HD, KD);
        cpt_cuda_rmsnorm_fwd(ctx, TB(a->att, N * KV, D), TF1(a->k_rstd, N * KV), NONE(), TB(a->k_raw, N * KV, D),
                             NONE(), WB(m, lo->k_norm, D, 0), c->rms_norm_eps);
        cpt_cuda_copy_cols(ctx, TB(a->qkv, N, QKV), HD, TB(a->att, N, KD), 0, KD);
    }
    cpt_cuda_rope_fwd(ctx, TB(a->qkv, N, QKV), (int)(H + KV), (int)D, TI1(pos, N), TF1(cm->inv_freq, D / 2));
    cpt_attn_shape as = {(int)H, (int)KV, (int)D};
    cpt_cuda_attention_fwd(ctx, TB(a->att, N, HD), TF(a->lse, N, H), TB(a->qkv, N, QKV), TI1(cu, S + 1), S,
                           cm->max_seqlen, as);
    cpt_cuda_matmul_fwd(ctx, TB(cm->proj, N, C), TB(a->att, N, HD), WB(m, lo->wo, C, HD), WB(m, lo->bo, C, 0));
    cpt_cuda_rmsnorm_fwd(ctx, TB(a->h2, N, C), TF1(a->rstd2, N), TB(a->x_mid, N, C), TB(cm->proj, N, C),
                         TB(a->x_in, N, C), WB(m, lo->ln2, C, 0), c->rms_norm_eps);
    cpt_cuda_matmul_fwd(ctx, TB(a->gu, N, 2 * I), TB(a->h2, N, C), WB(m, lo->wgu, 2 * I, C), NONE());
    if (!tail) return; /* the backward recomputes silu(gate) * up itself; the rest feeds only the next layer */
    bf16 *act = a->act ? a->act : cm->act;
    cpt_cuda_swiglu_fwd(ctx, TB(act, N, I), TB(a->gu, N, 2 * I));
    cpt_cuda_matmul_fwd(ctx, TB(cm->proj, N, C), TB(act, N, I), WB(m, lo->wdown, C, I), NONE());
    if (next)
        cpt_cuda_rmsnorm_fwd(ctx, TB(next->h1, N, C), TF1(next->rstd1, N), TB(next->x_in, N, C), TB(cm->proj, N, C),
                             TB(a->x_mid, N, C), WB(m, m->layer[l + 1].ln1, C, 0), c->rms_norm_eps);
    else
        cpt_cuda_rmsnorm_fwd(ctx, TB(cm->xf, N, C), TF1(cm->rstdf, N), TB(cm->x_final, N, C), TB(cm->proj, N, C),
                             TB(a->x_mid, N, C), WB(m, m->off_norm, C, 0), c->rms_norm_eps);
}

/* Tokens, targets (-1 when none), positions, sequence offsets and, for a training forward, the embedding
 * backward's grouping, staged on the host and sent in one copy. */
static int upload_batch(cpt_model *m, const cpt_batch *b, int keep, cpt_err *err) {
    cpt_cuda_model *cm = m->cuda;
    int N = b->n_tokens, S = b->n_seqs;
    int32_t *h = cm->h_ints;
    memcpy(h, b->tokens, sizeof(int32_t) * (size_t)N);
    for (int i = 0; i < N; i++) h[N + i] = b->targets ? b->targets[i] : -1;
    int maxlen = 0;
    for (int s = 0; s < S; s++) {
        int len = b->seq_start[s + 1] - b->seq_start[s];
        if (len > maxlen) maxlen = len;
        for (int i = b->seq_start[s]; i < b->seq_start[s + 1]; i++) h[2 * N + i] = i - b->seq_start[s];
    }
    memcpy(h + 3 * N, b->seq_start, sizeof(int32_t) * (size_t)(S + 1));
    size_t count = (size_t)(3 * N + S + 1);
    cm->n_emb_ids = 0;
    if (keep) {
        int32_t *ids = h + 4 * N + 1, *starts = h + 5 * N + 1, *order = h + 6 * N + 2;
        int u = cpt_cuda_embedding_plan(b->tokens, N, ids, starts, order);
        if (u < 0) return cpt_errf(err, "out of memory grouping tokens");
        cm->n_emb_ids = u;
        count = (size_t)(7 * N + 2);
    }
    cm->max_seqlen = maxlen;
    return cpt_cuda_memcpy_h2d(cm->ctx, cm->ints, h, count * sizeof(int32_t), err);
}

static int cuda_forward(cpt_model *m, const cpt_batch *b, cpt_forward_out *out, int keep, cpt_err *err) {
    cpt_cuda_model *cm = m->cuda;
    cpt_cuda_ctx *ctx = cm->ctx;
    const cpt_model_config *c = &m->cfg;
    int N = b->n_tokens, S = b->n_seqs, L = c->num_layers;
    int64_t C = c->hidden_size, V = c->vocab_size;
    cm->kept_tokens = -1;
    m->kept_tokens = -1;
    if (ensure_acts(m, N, keep, err) || upload_batch(m, b, keep, err)) return -1;
    int32_t *tokens = cm->ints, *targets = cm->ints + N;

    cl_acts *a0 = &cm->layers[0];
    cpt_cuda_embedding_fwd(ctx, TB(a0->x_in, N, C), TI1(tokens, N), WB(m, m->off_embed, V, C));
    cpt_cuda_rmsnorm_fwd(ctx, TB(a0->h1, N, C), TF1(a0->rstd1, N), NONE(), TB(a0->x_in, N, C), NONE(),
                         WB(m, m->layer[0].ln1, C, 0), c->rms_norm_eps);
    for (int l = 0; l < L; l++) {
        cl_acts *a = &cm->layers[keep ? l : 0];
        cl_acts *next = l + 1 < L ? &cm->layers[keep ? l + 1 : 0] : NULL;
        layer_forward(m, l, N, a, next, S, 1);
    }

    float *lp = cm->outs, *ent = cm->outs + N, *val = cm->outs + 2 * N;
    int stats = keep || out->logprobs || out->entropy || out->logits;
    cm->kept_logits = keep && cm->lrows >= N;
    if (stats) {
        for (int n0 = 0; n0 < N; n0 += STATS_ROWS < cm->lrows ? STATS_ROWS : cm->lrows) {
            int ch = STATS_ROWS < cm->lrows ? STATS_ROWS : cm->lrows, n = N - n0 < ch ? N - n0 : ch;
            bf16 *lg = cm->logits + (cm->kept_logits ? (size_t)n0 * V : 0);
            cpt_cuda_matmul_fwd(ctx, TB(lg, n, V), TB(cm->xf + n0 * C, n, C), WB(m, m->off_lm_head, V, C), NONE());
            cpt_cuda_token_stats_fwd(ctx, TF1(lp + n0, n), TF1(ent + n0, n), TF1(cm->lse + n0, n), TB(lg, n, V),
                                     TI1(targets + n0, n));
            if (out->logits && cpt_cuda_download_bf16(ctx, out->logits + (size_t)n0 * V, lg, (size_t)n * V, err))
                return -1;
        }
    }
    if (out->values) cpt_cuda_rowdot_fwd(ctx, TF1(val, N), TB(cm->xf, N, C), WB(m, m->off_score, C, 0));
    /* one copy back: logprob | entropy | value, as far as asked for */
    int parts = out->values ? 3 : out->entropy ? 2 : out->logprobs ? 1 : 0;
    if (parts) {
        if (cpt_cuda_memcpy_d2h(ctx, cm->h_f32, cm->outs, sizeof(float) * (size_t)N * parts, err)) return -1;
        if (out->logprobs) memcpy(out->logprobs, cm->h_f32, sizeof(float) * (size_t)N);
        if (out->entropy) memcpy(out->entropy, cm->h_f32 + N, sizeof(float) * (size_t)N);
        if (out->values) memcpy(out->values, cm->h_f32 + 2 * N, sizeof(float) * (size_t)N);
    } else if (cpt_cuda_sync(ctx, err)) {
        return -1;
    }
    if (keep) {
        cm->kept_tokens = N;
        cm->kept_seqs = S;
        cm->has_targets = b->targets != NULL;
        memcpy(cm->kept_cu, b->seq_start, sizeof(int32_t) * (size_t)(S + 1));
    }
    return 0;
}

/* ---- backward ---- */

/* dres holds d/d(x_out) on entry and d/d(x_in) on return; parameter gradients accumulate in fp32, except that with
 * first_grads (the first backward after a zero_grad) the four products' weight gradients are written, not added. */
static void layer_backward(cpt_model *m, int l, int N, cl_acts *a, int S, int first_grads) {
    cpt_cuda_model *cm = m->cuda;
    cpt_cuda_ctx *ctx = cm->ctx;
    const cpt_model_config *c = &m->cfg;
    const layer_offsets *lo = &m->layer[l];
    int64_t C = c->hidden_size, H = c->num_heads, KV = c->num_kv_heads, D = c->head_dim, I = c->intermediate_size;
    int64_t QKV = qkv_dim(c), HD = H * D, KD = KV * D;
    int32_t *pos = cm->ints + 2 * N, *cu = cm->ints + 3 * N;
    size_t n = (size_t)N;
    int mm = CPT_MM_DINP_SET | (first_grads ? CPT_MM_DW_SET : 0);
    /* MLP branch. The products (CPT_MM_DINP_SET) and swiglu_bwd overwrite their scratch, which needs no zeroing. */
    bf16 *act = a->act;
    if (!act) { /* recomputing: silu(gate) * up again */
        act = cm->act;
        cpt_cuda_swiglu_fwd(ctx, TB(act, N, I), TB(a->gu, N, 2 * I));
    }
    cpt_cuda_matmul_bwd_ex(ctx, TB(cm->dact, N, I), GF(m, lo->wdown, C, I), TB(cm->dres, N, C), TB(act, N, I),
                           WB(m, lo->wdown, C, I), mm);
    cpt_cuda_swiglu_bwd(ctx, TB(cm->dgu, N, 2 * I), TB(cm->dact, N, I), TB(a->gu, N, 2 * I));
    cpt_cuda_matmul_bwd_ex(ctx, TB(cm->dh, N, C), GF(m, lo->wgu, 2 * I, C), TB(cm->dgu, N, 2 * I), TB(a->h2, N, C),
                           WB(m, lo->wgu, 2 * I, C), mm);
    cpt_cuda_rmsnorm_bwd(ctx, TB(cm->dres, N, C), GF(m, lo->ln2, C, 0), TB(cm->dh, N, C), TB(a->x_mid, N, C),
                         WB(m, lo->ln2, C, 0), TF1(a->rstd2, N));
    /* attention branch */
    cpt_cuda_matmul_bwd_ex(ctx, TB(cm->datt, N, HD), GF(m, lo->wo, C, HD), TB(cm->dres, N, C), TB(a->att, N, HD),
                           WB(m, lo->wo, C, HD), mm);
    if (lo->bo >= 0) cpt_cuda_bias_grad(ctx, GF(m, lo->bo, C, 0), TB(cm->dres, N, C));
    cpt_attn_shape as = {(int)H, (int)KV, (int)D};
    cpt_cuda_attention_bwd(ctx, TB(cm->dqkv, N, QKV), TB(cm->datt, N, HD), TB(a->att, N, HD), TF(a->lse, N, H),
                           TB(a->qkv, N, QKV), TI1(cu, S + 1), S, cm->max_seqlen, as);
    cpt_cuda_rope_bwd(ctx, TB(cm->dqkv, N, QKV), (int)(H + KV), (int)D, TI1(pos, N), TF1(cm->inv_freq, D / 2));
    if (c->qk_norm) {
        cpt_cuda_copy_cols(ctx, TB(cm->dqk_a, N, HD), 0, TB(cm->dqkv, N, QKV), 0, HD);
        zero_dev(cm, cm->dqk_b, n * HD * 2);
        cpt_cuda_rmsnorm_bwd(ctx, TB(cm->dqk_b, N * H, D), GF(m, lo->q_norm, D, 0), TB(cm->dqk_a, N * H, D),
                             TB(a->q_raw, N * H, D), WB(m, lo->q_norm, D, 0), TF1(a->q_rstd, N * H));
        cpt_cuda_copy_cols(ctx, TB(cm->dqkv, N, QKV), 0, TB(cm->dqk_b, N, HD), 0, HD);
        cpt_cuda_copy_cols(ctx, TB(cm->dqk_a, N, KD), 0, TB(cm->dqkv, N, QKV), HD, KD);
        zero_dev(cm, cm->dqk_b, n * KD * 2);
        cpt_cuda_rmsnorm_bwd(ctx, TB(cm->dqk_b, N * KV, D), GF(m, lo->k_norm, D, 0), TB(cm->dqk_a, N * KV, D),
                             TB(a->k_raw, N * KV, D), WB(m, lo->k_norm, D, 0), TF1(a->k_rstd, N * KV));
        cpt_cuda_copy_cols(ctx, TB(cm->dqkv, N, QKV), HD, TB(cm->dqk_b, N, KD), 0, KD);
    }
    if (lo->bqkv >= 0) cpt_cuda_bias_grad(ctx, GF(m, lo->bqkv, QKV, 0), TB(cm->dqkv, N, QKV));
    cpt_cuda_matmul_bwd_ex(ctx, TB(cm->dh, N, C), GF(m, lo->wqkv, QKV, C), TB(cm->dqkv, N, QKV), TB(a->h1, N, C),
                           WB(m, lo->wqkv, QKV, C), mm);
    cpt_cuda_rmsnorm_bwd(ctx, TB(cm->dres, N, C), GF(m, lo->ln1, C, 0), TB(cm->dh, N, C), TB(a->x_in, N, C),
                         WB(m, lo->ln1, C, 0), TF1(a->rstd1, N));
}

/* The cpt_model_param index of the param at element offset off. */
static size_t param_index(const cpt_model *m, int64_t off) {
    for (size_t i = 0; i < m->n_params; i++)
        if (m->offsets[i] == off) return i;
    fprintf(stderr, "cpt cuda model: no parameter at offset %lld\n", (long long)off);
    abort();
}

static int ready(cpt_model *m, int64_t first_off, int64_t last_off, size_t last_index, cpt_err *err) {
    if (!m->grads_ready) return 0;
    size_t last = last_off >= 0 ? param_index(m, last_off) : last_index;
    if (m->grads_ready(m->grads_ready_ud, param_index(m, first_off), last, err))
        return cpt_err_prefix(err, "backward: gradients-ready callback");
    return 0;
}

static int cuda_backward(cpt_model *m, const cpt_batch *b, const float *d_logprobs, const float *d_entropy,
                         const float *d_values, cpt_err *err) {
    cpt_cuda_model *cm = m->cuda;
    cpt_cuda_ctx *ctx = cm->ctx;
    const cpt_model_config *c = &m->cfg;
    int N = b->n_tokens, S = b->n_seqs;
    if (cm->kept_tokens != N || cm->kept_seqs != S || cm->has_targets != (b->targets != NULL) ||
        memcmp(cm->kept_cu, b->seq_start, sizeof(int32_t) * (size_t)(S + 1)) != 0)
        return cpt_errf(err, "backward: needs a forward with keep_activations on this same batch first");
    int64_t C = c->hidden_size, V = c->vocab_size;
    if (ensure_grad_scratch(m, N, err)) return -1;
    /* d_logprob | d_entropy | d_value in one copy */
    float *h = cm->h_f32;
    const float *src[3] = {d_logprobs, d_entropy, d_values};
    int last = -1;
    for (int k = 0; k < 3; k++) {
        if (src[k]) {
            memcpy(h + (size_t)k * N, src[k], sizeof(float) * (size_t)N);
            last = k;
        } else {
            memset(h + (size_t)k * N, 0, sizeof(float) * (size_t)N);
        }
    }
    if (last >= 0 && cpt_cuda_memcpy_h2d(ctx, cm->dins, h, sizeof(float) * (size_t)N * (last + 1), err)) return -1;
    float *dlp = cm->dins, *dent = cm->dins + N, *dval = cm->dins + 2 * N;
    /* a pending zero_grad: zero all but the layers' product weights, whose first products overwrite */
    int first_grads = cm->zero_pending;
    if (first_grads) {
        for (int i = 0; i < cm->n_zero_runs; i++)
            zero_dev(cm, cm->g + cm->zero_runs[i][0], (size_t)(cm->zero_runs[i][1] - cm->zero_runs[i][0]) * 4);
        cm->zero_pending = 0;
    }
    float *ent = cm->outs + N;
    int32_t *targets = cm->ints + N;

    if (d_logprobs || d_entropy) { /* each chunk's product writes its rows of dxf (_set) */
        int ch = STATS_ROWS < cm->lrows ? STATS_ROWS : cm->lrows;
        for (int n0 = 0; n0 < N; n0 += ch) {
            int n = N - n0 < ch ? N - n0 : ch;
            bf16 *lg = cm->logits + (cm->kept_logits ? (size_t)n0 * V : 0);
            cpt_tensor xf = TB(cm->xf + n0 * C, n, C), w = WB(m, m->off_lm_head, V, C);
            if (!cm->kept_logits) cpt_cuda_matmul_fwd(ctx, TB(lg, n, V), xf, w, NONE());
            cpt_cuda_token_stats_bwd(ctx, TB(lg, n, V), TF1(cm->lse + n0, n), TF1(ent + n0, n), TI1(targets + n0, n),
                                     d_logprobs ? TF1(dlp + n0, n) : NONE(), d_entropy ? TF1(dent + n0, n) : NONE());
            cpt_cuda_matmul_bwd_ex(ctx, TB(cm->dxf + n0 * C, n, C), GF(m, m->off_lm_head, V, C), TB(lg, n, V), xf, w,
                                   CPT_MM_DINP_SET);
        }
        cm->kept_logits = 0; /* they are gradients now */
    } else {
        zero_dev(cm, cm->dxf, (size_t)N * C * 2);
    }
    if (d_values)
        cpt_cuda_rowdot_bwd(ctx, TB(cm->dxf, N, C), GF(m, m->off_score, C, 0), TF1(dval, N), TB(cm->xf, N, C),
                            WB(m, m->off_score, C, 0));
    zero_dev(cm, cm->dres, (size_t)N * C * 2);
    cpt_cuda_rmsnorm_bwd(ctx, TB(cm->dres, N, C), GF(m, m->off_norm, C, 0), TB(cm->dxf, N, C), TB(cm->x_final, N, C),
                         WB(m, m->off_norm, C, 0), TF1(cm->rstdf, N));
    if (ready(m, m->off_norm, -1, m->n_params - 1, err)) return -1; /* norm, [lm_head], [score] */
    for (int l = c->num_layers - 1; l >= 0; l--) {
        cl_acts *a = &cm->layers[l];
        if (cm->inputs_only) { /* this layer's activations again, from its kept input */
            cpt_cuda_rmsnorm_fwd(ctx, TB(a->h1, N, C), TF1(a->rstd1, N), NONE(), TB(a->x_in, N, C), NONE(),
                                 WB(m, m->layer[l].ln1, C, 0), c->rms_norm_eps);
            layer_forward(m, l, N, a, NULL, S, 0);
        }
        layer_backward(m, l, N, a, S, first_grads);
        if (ready(m, m->layer[l].ln1, m->layer[l].wdown, 0, err)) return -1;
    }
    int U = cm->n_emb_ids;
    int32_t *ids = cm->ints + 4 * N + 1, *starts = cm->ints + 5 * N + 1, *order = cm->ints + 6 * N + 2;
    cpt_cuda_embedding_bwd(ctx, GF(m, m->off_embed, V, C), TB(cm->dres, N, C), TI1(ids, U), TI1(starts, U + 1),
                           TI1(order, N));
    return ready(m, m->off_embed, m->off_embed, 0, err);
}

#endif

/* Generation on the training placement (the trainer's validation runs): the CPU decoder over the host mirror of the
 * weights, refreshed from the device first. The rollout generates on the inference placement instead. */
static cpt_decoder *cuda_decoder_new(cpt_model *m, const cpt_decoder_opts *o, const cpt_decoder_tuning *t,
                                     cpt_err *err) {
    if (cpt_cuda_model_pull_weights(m, err)) return NULL;
    return cpt_cpu_decoder_new(m, o, t, err);
}

const cpt_model_backend cpt_backend_cuda = {
    .name = "cuda",
    .forward = cuda_forward,
    .backward = cuda_backward,
    .zero_grad = cuda_zero_grad,
    .sync_to_host = cuda_sync_to_host,
    .sync_to_device = cuda_sync_to_device,
    .wait = cuda_wait,
    .pull_weights = cpt_cuda_model_pull_weights,
    .decoder_new = cuda_decoder_new,
    .release = cuda_release,
};
