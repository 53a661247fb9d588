/* The CPU backend's decoder (model/decoder.h): a paged fp32 KV cache and the layers of model/forward.c over rows.
 *
 * A block holds block_size positions of every layer, laid out [layer][K | V][position][kv_heads * head_dim]; keys
 * are stored after RoPE (and q/k norm), exactly what the packed forward's attention reads. A block's memory is
 * allocated when a row first writes into it, so a pool sized for every table full costs only what is used.
 * A call runs cpt_layer_fwd_qkv on its rows, writes their keys and values, attends each row over its table's
 * positions 0 .. pos, then cpt_layer_fwd_out: the packed forward's kernels in its order, so logits agree with it to
 * float rounding and a row's result does not depend on the other rows of the call. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "core/par.h"
#include "model/backend.h"
#include "model/model_internal.h"

/* Float buffers on cache-line boundaries, so a vector load or store never straddles two lines. */
static float *floats(size_t n) {
    size_t bytes = (n * sizeof(float) + 63) & ~(size_t)63;
    return aligned_alloc(64, bytes ? bytes : 64);
}

static cpt_tensor T1(float *p, int64_t a) { return cpt_tensor_f32_1d(p, a); }
static cpt_tensor T2(float *p, int64_t a, int64_t b) { return cpt_tensor_f32_2d(p, a, b); }

typedef struct cpu_decoder {
    struct cpt_decoder base; /* first: the public handle */
    int kv_dim;
    size_t block_floats;
    float **blk;   /* [n_blocks] each block's memory, NULL until written */
    float *saved;  /* [saved_rows, V] */
    float *logits; /* [logits_cap, V] a call's logits */
    int logits_cap;
    /* a call's scratch, grown to the largest call */
    int cap;
    float *mem;
    float *x, *x_mid, *h, *xl, *qkv, *qk_tmp, *att, *gu, *act, *rstd;
    cpt_sampler_work *sw; /* one per thread */
    int n_sw;
} cpu_decoder;

static float *k_at(const cpu_decoder *c, int32_t blk, int layer, int off) {
    return c->blk[blk] + ((size_t)layer * 2 * c->base.block_size + (size_t)off) * c->kv_dim;
}
static float *v_at(const cpu_decoder *c, int32_t blk, int layer, int off) {
    return k_at(c, blk, layer, off) + (size_t)c->base.block_size * c->kv_dim;
}
static int32_t block_of(const cpu_decoder *c, int32_t tab, int32_t pos) {
    return c->base.io.tables[(size_t)tab * c->base.max_blocks + pos / c->base.block_size];
}

static int ensure_block(cpu_decoder *c, int32_t b, cpt_err *err) {
    if (c->blk[b]) return 0;
    c->blk[b] = floats(c->block_floats);
    if (!c->blk[b]) return cpt_errf(err, "decoder: out of memory for KV block %d (%.1f MB)", b, c->block_floats * 4e-6);
    return 0;
}

static int ensure_work(cpu_decoder *c, int N, cpt_err *err) {
    if (N <= c->cap) return 0;
    const cpt_model_config *cf = &c->base.m->cfg;
    free(c->mem);
    size_t n = (size_t)N, C = (size_t)cf->hidden_size, H = (size_t)cf->num_heads, D = (size_t)cf->head_dim;
    size_t I = (size_t)cf->intermediate_size, QKV = (size_t)qkv_dim(cf), HD = H * D;
    c->mem = floats(n * (5 * C + QKV + 2 * HD + 3 * I + H));
    if (!c->mem) {
        c->cap = 0;
        return cpt_errf(err, "decoder: out of memory for a call of %d rows", N);
    }
    float *p = c->mem;
    c->x = p, p += n * C;
    c->x_mid = p, p += n * C;
    c->h = p, p += n * C;
    c->xl = p, p += n * C;
    c->qkv = p, p += n * QKV;
    c->qk_tmp = p, p += n * HD;
    c->att = p, p += n * HD;
    c->gu = p, p += n * 2 * I;
    c->act = p, p += n * I;
    c->rstd = p;
    c->cap = N;
    return 0;
}

static int ensure_logits(cpu_decoder *c, int n, cpt_err *err) {
    if (n <= c->logits_cap) return 0;
    free(c->logits);
    c->logits = floats((size_t)n * (size_t)c->base.m->cfg.vocab_size);
    c->logits_cap = c->logits ? n : 0;
    return c->logits ? 0 : cpt_errf(err, "decoder: out of memory for %d rows of logits", n);
}

static int ensure_samplers(cpu_decoder *c, cpt_err *err) {
    int want = omp_get_max_threads();
    if (want <= c->n_sw) return 0;
    cpt_sampler_work *p = realloc(c->sw, sizeof *p * (size_t)want);
    if (!p) return cpt_errf(err, "decoder: out of memory for samplers");
    c->sw = p;
    for (; c->n_sw < want; c->n_sw++)
        if (cpt_sampler_work_init(&c->sw[c->n_sw], c->base.m->cfg.vocab_size))
            return cpt_errf(err, "decoder: out of memory for samplers");
    return 0;
}

/* out[i, h] = softmax(q_h . K[0..pos_i] / sqrt(D)) V[0..pos_i] over row i's table, with the running-max (online)
 * softmax so no score buffer is needed. One (row, head) per iteration: deterministic. */
static void paged_attention(const cpu_decoder *c, int layer, int N, int H, int KV, int D) {
    const cpt_decoder_io *io = &c->base.io;
    const int QKV = (H + 2 * KV) * D, bs = c->base.block_size, kv_dim = c->kv_dim;
    const float scale = 1.0f / sqrtf((float)D);
    const int group = H / KV;
    long work = 0; /* multiply-adds, to keep small steps off the thread pool */
    for (int i = 0; i < N; i++) work += (long)(io->pos[i] + 1) * H * D * 2;
    CPT_PAR_FOR_WITH(cpt_par(work, 1L << 18), "omp parallel for schedule(dynamic, 4)",
        for (int ih = 0; ih < N * H; ih++) {
            int i = ih / H, h = ih % H, kvh = h / group;
            const float *q = c->qkv + (size_t)i * QKV + (size_t)h * D;
            float *o = c->att + (size_t)i * H * D + (size_t)h * D;
            for (int d = 0; d < D; d++) o[d] = 0.0f;
            float mx = -INFINITY, l = 0.0f;
            const int32_t *tb = io->tables + (size_t)io->tab[i] * c->base.max_blocks;
            for (int j0 = 0; j0 <= io->pos[i]; j0 += bs) { /* a block at a time: positions j0 .. j0 + n - 1 */
                int n = io->pos[i] + 1 - j0 < bs ? io->pos[i] + 1 - j0 : bs;
                const float *k = k_at(c, tb[j0 / bs], layer, 0) + (size_t)kvh * D;
                const float *v = v_at(c, tb[j0 / bs], layer, 0) + (size_t)kvh * D;
                for (int jj = 0; jj < n; jj++, k += kv_dim, v += kv_dim) {
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
            }
            float inv = 1.0f / l;
            for (int d = 0; d < D; d++) o[d] *= inv;
        });
}

/* Rows [0, n) through every layer: c->x holds the final residual stream of each row afterwards. */
static int run_rows(cpu_decoder *c, int N, cpt_err *err) {
    cpt_model *m = c->base.m;
    const cpt_model_config *cf = &m->cfg;
    const cpt_decoder_io *io = &c->base.io;
    if (ensure_work(c, N, err)) return -1;
    for (int i = 0; i < N; i++)
        if (ensure_block(c, block_of(c, io->tab[i], io->pos[i]), err)) return -1;
    int64_t C = cf->hidden_size, H = cf->num_heads, KV = cf->num_kv_heads, D = cf->head_dim;
    int64_t V = cf->vocab_size, QKV = qkv_dim(cf), HD = H * D, KD = KV * D;
    const int bs = c->base.block_size;
    cpt_tensor pos = cpt_tensor_i32_1d(io->pos, N);
    cpt_k_embedding_fwd(T2(c->x, N, C), cpt_tensor_i32_1d(io->tok, N), T2(mp(m, m->off_embed), V, C));
    /* the layer's buffers: nothing is kept for backward, so the norms share h / rstd and the raw q / k heads share
     * qk_tmp */
    layer_acts la = {.x_in = c->x, .h1 = c->h, .rstd1 = c->rstd, .qkv = c->qkv, .q_raw = c->qk_tmp,
                     .k_raw = c->qk_tmp, .q_rstd = c->rstd, .k_rstd = c->rstd, .att = c->att, .x_mid = c->x_mid,
                     .h2 = c->h, .rstd2 = c->rstd, .gu = c->gu, .act = c->act};
    for (int l = 0; l < cf->num_layers; l++) {
        cpt_layer_fwd_qkv(m, l, N, &la, pos);
        for (int i = 0; i < N; i++) {
            const float *row = c->qkv + (size_t)i * QKV;
            int32_t b = block_of(c, io->tab[i], io->pos[i]);
            memcpy(k_at(c, b, l, io->pos[i] % bs), row + HD, sizeof(float) * (size_t)KD);
            memcpy(v_at(c, b, l, io->pos[i] % bs), row + HD + KD, sizeof(float) * (size_t)KD);
        }
        paged_attention(c, l, N, (int)H, (int)KV, (int)D);
        cpt_layer_fwd_out(m, l, N, &la, c->x);
    }
    return 0;
}

/* logits [n, V] of the rows of c->xl (the final norm's input, [n, C]) into out. */
static void lm_head(cpu_decoder *c, int n, float *out) {
    cpt_model *m = c->base.m;
    int64_t C = m->cfg.hidden_size, V = m->cfg.vocab_size;
    cpt_k_rmsnorm_fwd(T2(c->h, n, C), T1(c->rstd, n), T2(c->xl, n, C), T1(mp(m, m->off_norm), C), m->cfg.rms_norm_eps);
    cpt_k_matmul_fwd(T2(out, n, V), T2(c->h, n, C), T2(mp(m, m->off_lm_head), V, C), cpt_tensor_none());
}

/* The draws of rows[0 .. n) from logits rows of base (rows[k].logits_row), in parallel: each is independent. */
static int draw(cpu_decoder *c, int n, const float *base, cpt_err *err) {
    if (ensure_samplers(c, err)) return -1;
    cpt_decoder_io *io = &c->base.io;
    const size_t V = (size_t)c->base.m->cfg.vocab_size;
    CPT_PAR_FOR_WITH(n > 1 && cpt_par((int64_t)n * (int64_t)V, 65536), "omp parallel for schedule(dynamic, 1)",
        for (int k = 0; k < n; k++) {
            const cpt_sample_row *r = &io->rows[k];
            cpt_sample_params sp = {r->temperature, r->top_k, r->top_p, r->min_p};
            io->out_tok[k] = cpt_k_sample(base + (size_t)r->logits_row * V, &sp, r->seed, r->sample, r->step,
                                          &c->sw[omp_get_thread_num()], &io->out_lp[k]);
        });
    return 0;
}

static int cpu_prefill(cpt_decoder *d, int n, int n_out, cpt_err *err) {
    cpu_decoder *c = (cpu_decoder *)d;
    if (run_rows(c, n, err)) return -1;
    if (!n_out) return 0;
    size_t C = (size_t)d->m->cfg.hidden_size, V = (size_t)d->m->cfg.vocab_size;
    for (int k = 0; k < n_out; k++) memcpy(c->xl + k * C, c->x + (size_t)d->io.out[k] * C, sizeof(float) * C);
    if (ensure_logits(c, n_out, err)) return -1;
    lm_head(c, n_out, c->logits);
    for (int k = 0; k < n_out; k++)
        memcpy(c->saved + (size_t)d->io.save_to[k] * V, c->logits + (size_t)k * V, sizeof(float) * V);
    return 0;
}

static int cpu_sample_saved(cpt_decoder *d, int n, cpt_err *err) {
    cpu_decoder *c = (cpu_decoder *)d;
    return draw(c, n, c->saved, err);
}

static int cpu_step(cpt_decoder *d, int n, cpt_err *err) {
    cpu_decoder *c = (cpu_decoder *)d;
    if (run_rows(c, n, err) || ensure_logits(c, n, err)) return -1;
    memcpy(c->xl, c->x, sizeof(float) * (size_t)n * d->m->cfg.hidden_size);
    lm_head(c, n, c->logits);
    return draw(c, n, c->logits, err);
}

static int cpu_copy_block(cpt_decoder *d, int src, int dst, cpt_err *err) {
    cpu_decoder *c = (cpu_decoder *)d;
    if (ensure_block(c, dst, err)) return -1;
    if (c->blk[src]) memcpy(c->blk[dst], c->blk[src], c->block_floats * sizeof(float));
    return 0;
}

static void cpu_free(cpt_decoder *d) {
    cpu_decoder *c = (cpu_decoder *)d;
    for (int b = 0; c->blk && b < d->n_blocks; b++) free(c->blk[b]);
    free(c->blk);
    free(c->saved);
    free(c->logits);
    free(c->mem);
    for (int i = 0; i < c->n_sw; i++) cpt_sampler_work_free(&c->sw[i]);
    free(c->sw);
    cpt_decoder_io *io = &d->io;
    free(io->tok), free(io->pos), free(io->tab), free(io->out), free(io->save_to), free(io->tables);
    free(io->rows), free(io->out_tok), free(io->out_lp);
    free(c);
}

static const cpt_decoder_ops cpu_ops = {
    .prefill = cpu_prefill,
    .sample_saved = cpu_sample_saved,
    .step = cpu_step,
    .copy_block = cpu_copy_block,
    .tables_changed = NULL, /* the calls read io->tables directly */
    .graphs = NULL,
    .replay_s = NULL,
    .free = cpu_free,
};

cpt_decoder *cpt_cpu_decoder_new(cpt_model *m, const cpt_decoder_opts *o, const cpt_decoder_tuning *t, cpt_err *err) {
    (void)t; /* nothing to tune on the CPU */
    const cpt_model_config *cf = &m->cfg;
    cpu_decoder *c = calloc(1, sizeof *c);
    if (!c) {
        cpt_errf(err, "decoder: out of memory");
        return NULL;
    }
    cpt_decoder *d = &c->base;
    cpt_decoder_base_init(d, &cpu_ops, m, o);
    c->kv_dim = cf->num_kv_heads * cf->head_dim;
    c->block_floats = (size_t)cf->num_layers * 2 * (size_t)d->block_size * (size_t)c->kv_dim;
    size_t R = (size_t)d->max_rows, V = (size_t)cf->vocab_size;
    cpt_decoder_io *io = &d->io;
    io->tok = malloc(sizeof(int32_t) * R);
    io->pos = malloc(sizeof(int32_t) * R);
    io->tab = malloc(sizeof(int32_t) * R);
    io->out = malloc(sizeof(int32_t) * R);
    io->save_to = malloc(sizeof(int32_t) * R);
    io->tables = calloc((size_t)d->n_tables * d->max_blocks, sizeof(int32_t));
    io->rows = calloc(R, sizeof(cpt_sample_row));
    io->out_tok = malloc(sizeof(int32_t) * R);
    io->out_lp = malloc(sizeof(float) * R);
    c->blk = calloc((size_t)d->n_blocks, sizeof *c->blk);
    c->saved = floats((size_t)d->saved_rows * V);
    if (!io->tok || !io->pos || !io->tab || !io->out || !io->save_to || !io->tables || !io->rows || !io->out_tok ||
        !io->out_lp || !c->blk || !c->saved) {
        cpt_errf(err, "decoder: out of memory for %d tables of %d blocks", d->n_tables, d->max_blocks);
        cpu_free(d);
        return NULL;
    }
    return d;
}
