/* The CUDA decoder (model/decoder.h) on a model placed with cpt_model_use_cuda_infer: a paged bf16 KV cache, the
 * bf16 forward over rows (token, position, block table), sampling on the device, CUDA graphs for decode steps.
 *
 * Which kernels run is this file's choice, the one the benches chose (docs/performance.md, "GPU decode"):
 * - forwards of at most CPT_CUDA_FUSED_MAX_ROWS rows run the fused products (rmsnorm, bias, residual add and swiglu
 *   folded in) streamed through per-thread shared-memory rings, with programmatic dependent launch; products of at
 *   most SKINNY_ROWS rows outside them the skinny kernel; everything else cuBLASLt;
 * - attention is the tensor-core paged kernel (CPT_ATTN_MMA, which runs the plain v2 kernel where head_dim does not
 *   allow it), and the few-rows kernel (CPT_ATTN_FEW) in decode steps of at most CPT_CUDA_FUSED_MAX_ROWS rows.
 *
 * Batch independence: in decode steps of <= CPT_CUDA_FUSED_MAX_ROWS rows each row is computed on its own (per-row
 * fused products, attention splits from the row's own length), so a sequence decodes bitwise alike whatever shares
 * its steps. Larger steps and prefill run cuBLASLt products whose kernel may depend on the row count.
 *
 * A call's inputs live in one pinned host region (io->tok, pos, tab, out, rows point into it) uploaded in one copy;
 * decode steps are padded to a power-of-two row count (rows of the decoder's own padding table and block) so a
 * graph captured per (rows, attention splits) replays them. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fs.h"
#include "model/cuda_infer.h"
#include "model/model_internal.h"

#ifdef CPT_HAVE_CUDA

#include "kernels/cuda/cuda_ops.h"

#define MAX_SPLITS 16
#define MAX_GRAPHS 96
#define SPLIT_MIN_LEN 256     /* positions an attention split should have at least */
#define SPLIT_MIN_LEN_FEW 128 /* the same at <= CPT_CUDA_FUSED_MAX_ROWS rows: one tile of the few-rows kernel */
#define SKINNY_ROWS 4         /* products of at most this many rows: the skinny kernel (faster than cuBLASLt) */

_Static_assert(sizeof(cpt_sample_row) == sizeof(cpt_cuda_sample_row), "sample rows: one layout on both sides");
_Static_assert(offsetof(cpt_sample_row, logits_row) == offsetof(cpt_cuda_sample_row, logits_row) &&
                   offsetof(cpt_sample_row, temperature) == offsetof(cpt_cuda_sample_row, temperature) &&
                   offsetof(cpt_sample_row, sample) == offsetof(cpt_cuda_sample_row, sample),
               "sample rows: one layout on both sides");

typedef struct graph_entry {
    int rows, splits;
    cpt_cuda_graph *g;
} graph_entry;

typedef struct cuda_decoder {
    struct cpt_decoder base; /* first: a cpt_decoder * is a cuda_decoder * */
    cpt_cuda_infer *w;
    cpt_cuda_ctx *ctx;
    int V, C, H, KV, D, I, QKV, L;
    float eps;
    /* paged KV cache: table n_tables and block n_blocks are the padding rows' */
    cpt_cuda_paged_kv kv;
    int32_t *tables_d;
    int tables_dirty;
    /* activations; LR: rows of logits a call can produce */
    int R, LR;
    void *act;
    void *x, *h, *qkv, *att, *o, *gu, *a, *mlp, *hl_in, *hl;
    float *logits, *saved, *partial, *skinny;
    void *spart;        /* the sampler's per-chunk partials */
    int *attn_counters; /* [rows][kv heads], zero between calls: attention merges its own splits */
    /* the call's inputs: pinned host region, uploaded up to the rows in one copy; outputs after it */
    char *meta_h, *meta_d;
    size_t off_tok, off_pos, off_tab, off_last, off_split, off_pairs, off_rows, off_out_tok, off_out_lp;
    int n_pairs, max_pairs;
    /* graphs */
    int use_graphs;
    graph_entry graphs[MAX_GRAPHS];
    int n_graphs;
    cpt_cuda_graph *last_graph; /* the latest decode step's (replay_s) */
} cuda_decoder;

#define MT(d, off, type) ((type *)((d)->meta_h + (d)->off))
#define MD(d, off, type) ((type *)((d)->meta_d + (d)->off))

static cpt_tensor BT(void *p, int64_t a, int64_t b) { return cpt_cuda_tensor(p, CPT_DT_BF16, 2, a, b); }
static cpt_tensor B1(void *p, int64_t a) { return p ? cpt_cuda_tensor(p, CPT_DT_BF16, 1, a, 0) : cpt_tensor_none(); }

/* ---- the forward over rows --------------------------------------------------------------------------------- */

/* out [n, OC] = inp [n, K] @ w^T (+ bias): the skinny kernel for a few rows, else cuBLASLt. */
static void mm(cuda_decoder *d, void *out, void *inp, void *w, void *bias, int n, int64_t K, int64_t OC) {
    if (n <= SKINNY_ROWS && K % 8 == 0)
        cpt_cuda_matmul_skinny(d->ctx, out, inp, w, bias, n, K, OC, d->skinny);
    else
        cpt_cuda_matmul_fwd(d->ctx, BT(out, n, OC), BT(inp, n, K), BT(w, OC, K), B1(bias, OC));
}

/* Whether a forward of n rows runs the few-rows attention: decode steps of at most CPT_CUDA_FUSED_MAX_ROWS rows
 * (whose split lengths choose_splits then takes from at most CPT_PAGED_FEW_MAX_SPLITS splits). */
static int few_attention(const cuda_decoder *d, int n, int decode) {
    cpt_attn_shape shape = {d->H, d->KV, d->D};
    return decode && n <= CPT_CUDA_FUSED_MAX_ROWS && cpt_cuda_paged_attention_few_ok(shape, CPT_PAGED_FEW_MAX_SPLITS);
}

/* The layer's append and attention; decode: the rows' tables all differ, so the attention does the append itself
 * (one launch fewer). */
static void attention(cuda_decoder *d, int l, int n, int splits, int decode) {
    const cpt_cuda_infer_layer *w = &d->w->layers[l];
    cpt_attn_shape shape = {d->H, d->KV, d->D};
    const int32_t *pos = MD(d, off_pos, int32_t), *tab = MD(d, off_tab, int32_t);
    const int32_t *split_len = MD(d, off_split, int32_t);
    cpt_attn_kind kind = few_attention(d, n, decode) ? CPT_ATTN_FEW : CPT_ATTN_MMA;
    if (decode) {
        cpt_cuda_paged_attention_v2_append(d->ctx, d->att, d->partial, d->qkv, &d->kv, l, pos, tab, n, splits,
                                           split_len, shape, d->attn_counters, w->q_norm, w->k_norm, d->eps,
                                           d->w->inv_freq, kind);
        return;
    }
    cpt_cuda_kv_append(d->ctx, &d->kv, l, d->qkv, pos, tab, n, w->q_norm, w->k_norm, d->eps, d->w->inv_freq, shape);
    cpt_cuda_paged_attention_v2(d->ctx, d->att, d->partial, d->qkv, &d->kv, l, pos, tab, n, splits, split_len, shape,
                                d->attn_counters, kind);
}

static int fused_fits(const cuda_decoder *d, int n) {
    return n <= CPT_CUDA_FUSED_MAX_ROWS && cpt_cuda_fused_gemv_ok(d->C) &&
           cpt_cuda_fused_gemv_ok((int64_t)d->H * d->D) && cpt_cuda_fused_gemv_ok(d->I);
}

static void fused(cuda_decoder *d, cpt_cuda_fused_out mode, void *out, const void *inp, const int32_t *rows,
                  const void *norm_w, const void *w, const void *bias, int n, int64_t K, int64_t OC) {
    cpt_cuda_fused_gemv g = {mode, out, inp, rows, norm_w, d->eps, w, bias, n, K, OC};
    cpt_cuda_fused_gemv_run(d->ctx, &g);
}

/* The forward of a few rows with the fused products: the residual stream x is complete after every layer (the
 * products add into it), so a layer is qkv = norm(x) W + b, append + attention, x += att Wo + bo,
 * a = swiglu(norm(x) Wgu), x += a Wdown; logits = norm(x[last]) lm^T. The same roundings as forward(). */
static void forward_fused(cuda_decoder *d, int n, int n_out, int splits, int decode) {
    int64_t C = d->C, QKV = d->QKV, HD = (int64_t)d->H * d->D, I = d->I;
    cpt_cuda_embed(d->ctx, d->x, MD(d, off_tok, int32_t), d->w->embed, n, C);
    cpt_cuda_set_pdl(d->ctx, 1); /* the layers' kernels only: off again at the end */
    for (int l = 0; l < d->L; l++) {
        const cpt_cuda_infer_layer *w = &d->w->layers[l];
        fused(d, CPT_FUSED_BF16, d->qkv, d->x, NULL, w->ln1, w->wqkv, w->bqkv, n, C, QKV);
        attention(d, l, n, splits, decode);
        fused(d, CPT_FUSED_RESID, d->x, d->att, NULL, NULL, w->wo, w->bo, n, HD, C);
        fused(d, CPT_FUSED_SWIGLU, d->a, d->x, NULL, w->ln2, w->wgu, NULL, n, C, I);
        fused(d, CPT_FUSED_RESID, d->x, d->a, NULL, NULL, w->wdown, NULL, n, I, C);
    }
    if (n_out > 0) /* a prefill chunk that ends no prompt has no logits */
        fused(d, CPT_FUSED_F32, d->logits, d->x, MD(d, off_last, int32_t), d->w->norm, d->w->lm, NULL, n_out, C,
              d->V);
    cpt_cuda_set_pdl(d->ctx, 0);
}

/* Rows [n] (tok, pos, tab in the uploaded region) through the model; logits [n_out, V] for rows last[0..n_out).
 * decode: one row per table (a decode step), which lets the attention append the rows itself. */
static void forward(cuda_decoder *d, int n, int n_out, int splits, int decode) {
    if (fused_fits(d, n)) {
        forward_fused(d, n, n_out, splits, decode);
        return;
    }
    cpt_cuda_ctx *ctx = d->ctx;
    int64_t C = d->C, QKV = d->QKV, HD = (int64_t)d->H * d->D, I = d->I;
    float eps = d->eps;
    cpt_tensor none = cpt_tensor_none();
    cpt_cuda_embed(ctx, d->x, MD(d, off_tok, int32_t), d->w->embed, n, C);
    for (int l = 0; l < d->L; l++) {
        const cpt_cuda_infer_layer *w = &d->w->layers[l];
        if (l == 0)
            cpt_cuda_rmsnorm_fwd(ctx, BT(d->h, n, C), none, none, BT(d->x, n, C), none, B1(w->ln1, C), eps);
        else
            cpt_cuda_rmsnorm_fwd(ctx, BT(d->h, n, C), none, BT(d->x, n, C), BT(d->x, n, C), BT(d->mlp, n, C),
                                 B1(w->ln1, C), eps);
        mm(d, d->qkv, d->h, w->wqkv, w->bqkv, n, C, QKV);
        attention(d, l, n, splits, decode);
        mm(d, d->o, d->att, w->wo, w->bo, n, HD, C);
        cpt_cuda_rmsnorm_fwd(ctx, BT(d->h, n, C), none, BT(d->x, n, C), BT(d->x, n, C), BT(d->o, n, C),
                             B1(w->ln2, C), eps);
        mm(d, d->gu, d->h, w->wgu, NULL, n, C, 2 * I);
        cpt_cuda_swiglu_fwd(ctx, BT(d->a, n, I), BT(d->gu, n, 2 * I));
        mm(d, d->mlp, d->a, w->wdown, NULL, n, I, C);
    }
    if (n_out <= 0) return;
    cpt_cuda_gather_add(ctx, d->hl_in, d->x, d->mlp, MD(d, off_last, int32_t), n_out, C);
    cpt_cuda_rmsnorm_fwd(ctx, BT(d->hl, n_out, C), none, none, BT(d->hl_in, n_out, C), none, B1(d->w->norm, C), eps);
    cpt_cuda_matmul_f32out(ctx, d->logits, d->hl, d->w->lm, n_out, C, d->V);
}

/* Uploads the call's inputs (through rows[0 .. n_rows)), the tables when they changed, and runs the queued block
 * copies. */
static int upload(cuda_decoder *d, int n_rows, cpt_err *err) {
    size_t bytes = d->off_rows + sizeof(cpt_sample_row) * (size_t)n_rows;
    if (cpt_cuda_memcpy_h2d_async(d->ctx, d->meta_d, d->meta_h, bytes, err)) return -1;
    if (d->tables_dirty) {
        size_t tb = sizeof(int32_t) * (size_t)(d->base.n_tables + 1) * d->base.max_blocks;
        if (cpt_cuda_memcpy_h2d_async(d->ctx, d->tables_d, d->base.io.tables, tb, err)) return -1;
        d->tables_dirty = 0;
    }
    if (d->n_pairs) cpt_cuda_kv_copy_blocks(d->ctx, &d->kv, MD(d, off_pairs, int32_t), d->n_pairs);
    d->n_pairs = 0;
    return 0;
}

/* Drawn tokens and logprobs of rows [0, n) back to io->out_tok / out_lp (one copy: the two arrays are adjacent). */
static int download(cuda_decoder *d, int n, cpt_err *err) {
    size_t bytes = d->off_out_lp - d->off_out_tok + sizeof(float) * (size_t)n;
    return cpt_cuda_memcpy_d2h(d->ctx, d->meta_h + d->off_out_tok, d->meta_d + d->off_out_tok, bytes, err);
}

/* The calls' arguments were checked by model/backend.c (rows, tables, blocks, draws); what is left is this
 * decoder's own limits. */
static int cd_prefill(cpt_decoder *base, int n, int n_out, cpt_err *err) {
    cuda_decoder *d = (cuda_decoder *)base;
    const cpt_decoder_io *io = &base->io;
    if (n_out > d->LR)
        return cpt_errf(err, "decoder prefill: %d saved rows in one call (at most %d, the tables)", n_out, d->LR);
    MT(d, off_split, int32_t)[0] = 0;
    if (upload(d, 0, err)) return -1;
    forward(d, n, n_out, 1, 0);
    for (int j = 0; j < n_out; j++)
        if (cpt_cuda_memcpy_d2d(d->ctx, d->saved + (size_t)io->save_to[j] * d->V, d->logits + (size_t)j * d->V,
                                sizeof(float) * (size_t)d->V, err))
            return -1;
    return cpt_cuda_sync(d->ctx, err); /* the caller rewrites the pinned inputs next */
}

static int cd_sample_saved(cpt_decoder *base, int n, cpt_err *err) {
    cuda_decoder *d = (cuda_decoder *)base;
    if (upload(d, n, err)) return -1;
    cpt_cuda_sample_ex(d->ctx, MD(d, off_out_tok, int32_t), MD(d, off_out_lp, float), d->saved, d->V,
                       MD(d, off_rows, cpt_cuda_sample_row), n, d->spart);
    return download(d, n, err);
}

/* ---- decode steps -------------------------------------------------------------------------------------------- */

static int pow2_at_least(int n) {
    int p = 1;
    while (p < n) p *= 2;
    return p;
}

static int bucket_rows(const cuda_decoder *d, int n) {
    int b = pow2_at_least(n);
    return b < d->base.n_tables ? b : d->base.n_tables;
}

/* The attention splits of a decode step of B rows, row k over positions 0 .. pos[k], and each row's split length
 * (split_len[0 .. B)). At <= CPT_CUDA_FUSED_MAX_ROWS rows (the products are per row there) a row's split length
 * follows from its own context alone: SPLIT_MIN_LEN_FEW positions, doubled until at most MAX_SPLITS splits (8 with
 * the few-rows attention: one thread block cluster). Its output then does not depend on the other rows of the step.
 * At more rows the splits fill the multiprocessors: one length for all rows. */
static int choose_splits(const cuda_decoder *d, int B, const int32_t *pos, int32_t *split_len) {
    if (B <= CPT_CUDA_FUSED_MAX_ROWS) {
        int most = 1, max_splits = few_attention(d, B, 1) ? CPT_PAGED_FEW_MAX_SPLITS : MAX_SPLITS;
        for (int k = 0; k < B; k++) {
            int len = pos[k] + 1, sl = SPLIT_MIN_LEN_FEW;
            while ((len + sl - 1) / sl > max_splits) sl *= 2;
            split_len[k] = sl;
            if ((len + sl - 1) / sl > most) most = (len + sl - 1) / sl;
        }
        return pow2_at_least(most);
    }
    int max_len = 0;
    for (int k = 0; k < B; k++)
        if (pos[k] + 1 > max_len) max_len = pos[k] + 1;
    int by_len = (max_len + SPLIT_MIN_LEN - 1) / SPLIT_MIN_LEN;
    int want = (2 * cpt_cuda_num_sms(d->ctx) + B * d->KV - 1) / (B * d->KV);
    int s = by_len < want ? by_len : want;
    if (s > MAX_SPLITS) s = MAX_SPLITS;
    int p = pow2_at_least(s);
    for (int k = 0; k < B; k++) split_len[k] = (max_len + p - 1) / p;
    return p;
}

/* A decode step's kernels: the forward of `rows` rows and the sampler. */
static void step_kernels(cuda_decoder *d, int rows, int splits) {
    forward(d, rows, rows, splits, 1);
    cpt_cuda_sample_ex(d->ctx, MD(d, off_out_tok, int32_t), MD(d, off_out_lp, float), d->logits, d->V,
                       MD(d, off_rows, cpt_cuda_sample_row), rows, d->spart);
}

/* The graph of a decode step of `rows` rows and `splits` attention splits: found, or captured now. *g stays NULL
 * (run eagerly) once MAX_GRAPHS exist. */
static int graph_for(cuda_decoder *d, int rows, int splits, cpt_cuda_graph **g, cpt_err *err) {
    *g = NULL;
    for (int i = 0; i < d->n_graphs; i++)
        if (d->graphs[i].rows == rows && d->graphs[i].splits == splits) {
            *g = d->graphs[i].g;
            return 0;
        }
    if (d->n_graphs == MAX_GRAPHS) return 0;
    if (cpt_cuda_graph_begin(d->ctx, err)) return -1;
    step_kernels(d, rows, splits);
    if (!(*g = cpt_cuda_graph_end(d->ctx, err))) return -1;
    d->graphs[d->n_graphs++] = (graph_entry){rows, splits, *g};
    return 0;
}

static int cd_step(cpt_decoder *base, int n, cpt_err *err) {
    cuda_decoder *d = (cuda_decoder *)base;
    cpt_decoder_io *io = &base->io;
    int B = d->use_graphs ? bucket_rows(d, n) : n;
    for (int k = 0; k < B; k++) {
        io->out[k] = k;
        if (k < n) {
            io->rows[k].logits_row = k;
        } else { /* padding: position 0 of the padding table, greedy */
            io->tok[k] = 0;
            io->pos[k] = 0;
            io->tab[k] = base->n_tables;
            memset(&io->rows[k], 0, sizeof io->rows[k]);
            io->rows[k].logits_row = k;
        }
    }
    int splits = choose_splits(d, B, io->pos, MT(d, off_split, int32_t));
    if (upload(d, B, err)) return -1;
    cpt_cuda_graph *g = NULL;
    if (d->use_graphs && graph_for(d, B, splits, &g, err)) return -1;
    d->last_graph = g;
    if (g) {
        if (cpt_cuda_graph_launch(d->ctx, g, err)) return -1;
    } else {
        step_kernels(d, B, splits);
    }
    return download(d, n, err);
}

static int cd_copy_block(cpt_decoder *base, int src, int dst, cpt_err *err) {
    cuda_decoder *d = (cuda_decoder *)base;
    if (d->n_pairs == d->max_pairs)
        return cpt_errf(err, "decoder copy_block: %d copies already queued before the next call", d->max_pairs);
    int32_t *pairs = MT(d, off_pairs, int32_t);
    pairs[2 * d->n_pairs] = src;
    pairs[2 * d->n_pairs + 1] = dst;
    d->n_pairs++;
    return 0;
}

static void cd_tables_changed(cpt_decoder *base) { ((cuda_decoder *)base)->tables_dirty = 1; }

static int cd_graphs(const cpt_decoder *base) { return ((const cuda_decoder *)base)->n_graphs; }

/* Replays the latest step's graph reps times back to back: the device time of a step without the host's share. */
static double cd_replay_s(cpt_decoder *base, int reps, cpt_err *err) {
    cuda_decoder *d = (cuda_decoder *)base;
    if (!d->last_graph || reps < 1) {
        cpt_errf(err, "decoder: no decode graph to replay (graphs off, or no decode step yet)");
        return -1;
    }
    if (cpt_cuda_sync(d->ctx, err)) return -1;
    double t0 = cpt_now();
    for (int r = 0; r < reps; r++)
        if (cpt_cuda_graph_launch(d->ctx, d->last_graph, err)) return -1;
    if (cpt_cuda_sync(d->ctx, err)) return -1;
    return (cpt_now() - t0) / reps;
}

static void cd_free(cpt_decoder *base) {
    cuda_decoder *d = (cuda_decoder *)base;
    if (!d) return;
    if (d->ctx) cpt_cuda_sync(d->ctx, NULL);
    for (int i = 0; i < d->n_graphs; i++) cpt_cuda_graph_free(d->graphs[i].g);
    cpt_cuda_free(d->kv.pool);
    cpt_cuda_free(d->tables_d);
    cpt_cuda_host_free(d->base.io.tables);
    cpt_cuda_free(d->act);
    cpt_cuda_free(d->logits);
    cpt_cuda_free(d->saved);
    cpt_cuda_free(d->partial);
    cpt_cuda_free(d->spart);
    cpt_cuda_free(d->attn_counters);
    cpt_cuda_free(d->skinny);
    cpt_cuda_host_free(d->meta_h);
    cpt_cuda_free(d->meta_d);
    free(d->base.io.save_to);
    free(d);
}

static const cpt_decoder_ops cuda_decoder_ops = {
    .prefill = cd_prefill,
    .sample_saved = cd_sample_saved,
    .step = cd_step,
    .copy_block = cd_copy_block,
    .tables_changed = cd_tables_changed,
    .graphs = cd_graphs,
    .replay_s = cd_replay_s,
    .free = cd_free,
};

/* ---- creation ------------------------------------------------------------------------------------------------ */

static size_t al(size_t n) { return (n + 63) & ~(size_t)63; } /* bf16 elements, 128-byte aligned */

static size_t take_meta(size_t *at, size_t bytes) {
    size_t o = *at;
    *at = (o + bytes + 15) & ~(size_t)15;
    return o;
}

/* The paged pool and the tables (one more table and block for the padding rows). Made after the workspace, so that
 * the pool takes what mem_fraction leaves of the device once the model and the workspace are in. */
static int make_pool(cuda_decoder *d, const cpt_decoder_opts *o, cpt_err *err) {
    cpt_decoder *b = &d->base;
    size_t block_bytes = cpt_kv_block_bytes(&d->base.m->cfg, b->block_size, 2);
    double frac = o->mem_fraction > 0 ? o->mem_fraction : 0.9;
    size_t fr = 0, tot = 0;
    if (cpt_cuda_mem_info(&fr, &tot, err)) return -1;
    /* one block more: the padding rows' */
    long want = cpt_kv_pool_blocks(block_bytes, frac, fr, tot, (long)b->n_blocks + 1) - 1;
    if (want < b->max_blocks)
        return cpt_errf(err, "decoder: a KV pool of %ld blocks (%.2f MiB each; %.0f of %.0f MiB free, "
                             "rollout.gpu_memory_fraction %g) cannot hold one context of %d positions",
                        want < 0 ? 0 : want, block_bytes / 1048576.0, fr / 1048576.0, tot / 1048576.0, frac,
                        b->max_blocks * b->block_size);
    b->n_blocks = (int)want;
    d->kv.n_layers = d->L, d->kv.n_blocks = b->n_blocks + 1, d->kv.block_size = b->block_size;
    d->kv.n_kv_heads = d->KV, d->kv.head_dim = d->D, d->kv.max_blocks = b->max_blocks;
    if (!(d->kv.pool = cpt_cuda_malloc(block_bytes * (size_t)d->kv.n_blocks, "the paged KV pool", err))) return -1;
    size_t tbytes = sizeof(int32_t) * (size_t)(b->n_tables + 1) * b->max_blocks;
    if (!(d->tables_d = cpt_cuda_malloc(tbytes, "block tables", err))) return -1;
    if (!(b->io.tables = cpt_cuda_host_alloc(tbytes, "block tables (host)", err))) return -1;
    d->kv.block_tables = d->tables_d;
    memset(b->io.tables, 0, tbytes);
    for (int i = 0; i < b->max_blocks; i++) b->io.tables[(size_t)b->n_tables * b->max_blocks + i] = b->n_blocks;
    d->tables_dirty = 1;
    return 0;
}

static int make_activations(cuda_decoder *d, cpt_err *err) {
    size_t R = (size_t)d->R, C = (size_t)d->C, S = (size_t)d->base.n_tables, LR = (size_t)d->LR;
    size_t V = (size_t)d->V, SR = (size_t)d->base.saved_rows;
    size_t bf = R * C * 4 + R * (size_t)d->QKV + R * (size_t)d->H * d->D + R * 3 * (size_t)d->I + LR * C * 2;
    size_t part = cpt_cuda_paged_attention_partial_floats((int)S, d->H, d->D, MAX_SPLITS);
    size_t cnt_bytes = sizeof(int) * R * (size_t)d->KV;
    int64_t oc = d->QKV > 2 * d->I ? d->QKV : 2 * d->I;
    if (d->C > oc) oc = d->C;
    if (!(d->act = cpt_cuda_malloc(bf * 2 + 1024, "activations", err)) ||
        !(d->logits = cpt_cuda_malloc(sizeof(float) * LR * V, "logits", err)) ||
        !(d->saved = cpt_cuda_malloc(sizeof(float) * SR * V, "saved logits", err)) ||
        !(d->partial = cpt_cuda_malloc(sizeof(float) * (part ? part : 1), "attention partials", err)) ||
        !(d->spart = cpt_cuda_malloc(cpt_cuda_sample_partials_bytes((int)R), "sampler partials", err)) ||
        !(d->attn_counters = cpt_cuda_malloc(cnt_bytes, "attention split counters", err)) ||
        !(d->skinny = cpt_cuda_malloc(sizeof(float) * cpt_cuda_matmul_skinny_scratch_floats(SKINNY_ROWS, oc),
                                      "skinny product partials", err)))
        return -1;
    if (cpt_cuda_memset(d->ctx, d->attn_counters, 0, cnt_bytes, err)) return -1;
    uint16_t *p = d->act;
#define TAKE(dst, n) (dst = p, p += al(n))
    TAKE(d->x, R * C);
    TAKE(d->h, R * C);
    TAKE(d->o, R * C);
    TAKE(d->mlp, R * C);
    TAKE(d->qkv, R * (size_t)d->QKV);
    TAKE(d->att, R * (size_t)d->H * d->D);
    TAKE(d->gu, R * 2 * (size_t)d->I);
    TAKE(d->a, R * (size_t)d->I);
    TAKE(d->hl_in, LR * C);
    TAKE(d->hl, LR * C);
#undef TAKE
    if ((size_t)(p - (uint16_t *)d->act) > bf + 512) return cpt_errf(err, "decoder: activation layout overflow");
    return 0;
}

/* The pinned input region: the row arrays, split lengths, block copies and draws (uploaded up to the call's draws),
 * then the outputs. io's arrays point into it. */
static int make_io(cuda_decoder *d, cpt_err *err) {
    cpt_decoder_io *io = &d->base.io;
    size_t at = 0, R = (size_t)d->R, S = (size_t)d->base.n_tables;
    d->max_pairs = (int)S;
    d->off_tok = take_meta(&at, 4 * R);
    d->off_pos = take_meta(&at, 4 * R);
    d->off_tab = take_meta(&at, 4 * R);
    d->off_last = take_meta(&at, 4 * R);
    d->off_split = take_meta(&at, 4 * S);
    d->off_pairs = take_meta(&at, 8 * S);
    d->off_rows = take_meta(&at, sizeof(cpt_sample_row) * R);
    d->off_out_tok = take_meta(&at, 4 * R);
    d->off_out_lp = take_meta(&at, 4 * R);
    if (!(d->meta_h = cpt_cuda_host_alloc(at, "decoder inputs (host)", err)) ||
        !(d->meta_d = cpt_cuda_malloc(at, "decoder inputs", err)))
        return -1;
    memset(d->meta_h, 0, at);
    io->tok = MT(d, off_tok, int32_t);
    io->pos = MT(d, off_pos, int32_t);
    io->tab = MT(d, off_tab, int32_t);
    io->out = MT(d, off_last, int32_t);
    io->rows = MT(d, off_rows, cpt_sample_row);
    io->out_tok = MT(d, off_out_tok, int32_t);
    io->out_lp = MT(d, off_out_lp, float);
    if (!(io->save_to = calloc(R, sizeof *io->save_to))) return cpt_errf(err, "decoder: out of memory");
    return 0;
}

cpt_decoder *cpt_cuda_decoder_new(cpt_model *m, const cpt_decoder_opts *o, const cpt_decoder_tuning *t,
                                  cpt_err *err) {
    const cpt_model_config *c = &m->cfg;
    if (!m->cuda_infer) {
        cpt_errf(err, "decoder: the model is not placed for inference on CUDA");
        return NULL;
    }
    cuda_decoder *d = calloc(1, sizeof *d);
    if (!d) {
        cpt_errf(err, "decoder: out of memory");
        return NULL;
    }
    cpt_decoder *b = &d->base;
    cpt_decoder_base_init(b, &cuda_decoder_ops, m, o); /* options checked by cpt_decoder_new */
    d->w = m->cuda_infer;
    d->ctx = m->cuda_infer->ctx;
    d->V = c->vocab_size, d->C = c->hidden_size, d->H = c->num_heads, d->KV = c->num_kv_heads;
    d->D = c->head_dim, d->I = c->intermediate_size, d->L = c->num_layers;
    d->QKV = qkv_dim(c);
    d->eps = c->rms_norm_eps;
    d->R = b->max_rows;
    d->LR = b->n_tables;
    d->use_graphs = !(t && t->no_graphs);
    if (make_activations(d, err) || make_io(d, err) || make_pool(d, o, err)) {
        cd_free(b);
        return NULL;
    }
    return b;
}

#else /* built without CUDA: the inference placement fails first, so this never runs */

cpt_decoder *cpt_cuda_decoder_new(cpt_model *m, const cpt_decoder_opts *o, const cpt_decoder_tuning *t,
                                  cpt_err *err) {
    (void)m, (void)o, (void)t;
    cpt_errf(err, "decoder: this cpt was built without CUDA");
    return NULL;
}

#endif
