/* The GPU generation engine (rollout/cuda_engine.h): requests and slots as rollout/engine.c, a paged bf16 KV cache
 * with shared prompt blocks, the bf16 model forward over "rows" (token, position, block table), sampling on the
 * device and CUDA graphs for decode steps. */
#include "rollout/cuda_engine.h"
#include "rollout/gen_engine.h"

#include "core/fs.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef CPT_HAVE_CUDA

#include "kernels/cuda/cuda_ops.h"
#include "kernels/kernels.h"

#define MAX_SPLITS 16
#define MAX_GRAPHS 96
#define SPLIT_MIN_LEN 256 /* positions a split should have at least */
/* the same at <= CPT_CUDA_FUSED_MAX_ROWS rows (opts split_few): one tile of the few-rows attention's 8 warps */
#define SPLIT_MIN_LEN_FEW 128

typedef struct greq {
    cpt_gen_req_head h; /* first: e->reqs holds these */
    int32_t *prompt;
    int n_prompt, max_new;
    cpt_sample_params sp;
    uint64_t seed;
    cpt_gen_stops stops;
    int live;
    /* prompt sharing: the request's own references to its prompt blocks, held from its prefill until every
     * sample is admitted, and the logits after the prompt's last token */
    int held, prefilling;
    int hold_res; /* blocks reserved for the hold: only a request of several samples can outlive its prefill slot */
    int32_t *pblocks;
    int n_pblocks;
    int plog_row;
} greq;

typedef struct gslot {
    greq *r; /* NULL: free */
    int sample;
    int len;         /* positions in the cache */
    int32_t pending; /* the last generated token, not yet in the cache */
    int nb;          /* blocks in the slot's table */
    int need;        /* blocks reserved for it */
    int wait_prefill;
} gslot;

typedef cpt_cuda_decode_layer dlayer; /* a layer's weights (the persistent step reads a device copy of these) */

typedef struct graph_entry {
    int rows, splits;
    cpt_cuda_graph *g;
} graph_entry;

struct cpt_cuda_engine {
    cpt_cuda_ctx *ctx;
    cpt_model_config cfg;
    int V, C, H, KV, D, I, QKV, L;
    const cpt_tokenizer *tok;
    /* weights (bf16) */
    void *wmem;
    void *embed, *norm, *lm;
    dlayer *layers;
    float *inv_freq;
    const uint16_t *dev_src; /* set only inside cpt_cuda_engine_load_weights_bf16: bf16 source in param order */
    /* paged KV cache */
    cpt_cuda_paged_kv kv;
    int32_t *tables_d, *tables_h; /* [n_slots + 1][max_blocks]; the last table is the padding rows' */
    int tables_dirty;
    int block_size, max_blocks, total_blocks; /* usable blocks; block total_blocks is the padding rows' */
    int *refcnt, *free_stack, n_free, reserved;
    /* activations */
    int R; /* rows per forward */
    void *act;
    void *x, *h, *qkv, *att, *o, *gu, *a, *mlp, *hl_in, *hl;
    float *logits, *plog, *partial;
    int gemv_rows, attn_v2, fused, stage_kb, ring_blocks, no_pdl, persistent, split_few, skip;
    dlayer *step_layers;    /* persistent: the layers' weight pointers on the device */
    int step_forwards;      /* forwards that ran as the persistent step (captured ones count once) */
    unsigned *step_barrier; /* persistent: the step kernel's grid-barrier counter */
    float *skinny; /* split-K partial sums of the skinny products */
    void *spart;   /* the sampler's per-chunk partials (cpt_cuda_sample_ex) */
    int *attn_counters; /* [rows][kv heads], zero between calls: attention v2 merges its own splits */
    int *plog_free, n_plog_free;
    /* per-call metadata: pinned host mirror, uploaded in one copy */
    char *meta_h, *meta_d;
    size_t off_tok, off_pos, off_tab, off_last, off_split, off_pairs, off_rows, off_out_tok, off_out_lp, meta_upload;
    int n_pairs;
    /* requests and slots */
    gslot *slots;
    int n_slots, max_len, prefill_chunk;
    cpt_gen_reqs reqs;
    int64_t next_id;
    int *new_slot, *pre_slot, *prog;
    /* graphs */
    int use_graphs;
    graph_entry graphs[MAX_GRAPHS];
    int n_graphs;
    cpt_cuda_graph *last_graph; /* the latest decode step's (cpt_cuda_engine_replay_s) */
    char *tail;
    size_t tail_cap;
    cpt_engine_stats st;
};

#define MT(e, off, type) ((type *)((e)->meta_h + (e)->off))
#define MD(e, off, type) ((type *)((e)->meta_d + (e)->off))

static cpt_tensor BT(void *p, int64_t a, int64_t b) { return cpt_cuda_tensor(p, CPT_DT_BF16, 2, a, b); }
static cpt_tensor B1(void *p, int64_t a) { return p ? cpt_cuda_tensor(p, CPT_DT_BF16, 1, a, 0) : cpt_tensor_none(); }

/* ---- requests ---------------------------------------------------------------------------------------------- */

static void req_free(greq *r) {
    if (!r) return;
    free(r->prompt);
    cpt_gen_stops_free(&r->stops);
    cpt_gen_req_head_free(&r->h);
    free(r->pblocks);
    free(r);
}

static int blocks_for(const cpt_cuda_engine *e, int positions) { return (positions + e->block_size - 1) / e->block_size; }
static int need_of(const cpt_cuda_engine *e, const greq *r) {
    int n = r->n_prompt + r->max_new;
    return blocks_for(e, n < e->max_len ? n : e->max_len);
}

/* ---- blocks -------------------------------------------------------------------------------------------- */

static int block_alloc(cpt_cuda_engine *e, cpt_err *err) {
    if (!e->n_free) return cpt_errf(err, "cuda engine: KV pool exhausted (%d blocks); reservation bug", e->total_blocks);
    int b = e->free_stack[--e->n_free];
    e->refcnt[b] = 1;
    return b;
}

static void block_decref(cpt_cuda_engine *e, int b) {
    if (--e->refcnt[b] == 0) e->free_stack[e->n_free++] = b;
}

static int32_t *table(cpt_cuda_engine *e, int t) { return e->tables_h + (size_t)t * e->max_blocks; }

static void slot_release(cpt_cuda_engine *e, int s) {
    gslot *sl = &e->slots[s];
    int32_t *tb = table(e, s);
    for (int i = 0; i < sl->nb; i++) block_decref(e, tb[i]);
    sl->nb = 0;
    sl->len = 0;
    e->reserved -= sl->need;
    sl->need = 0;
    sl->r = NULL;
}

static void req_release_prompt(cpt_cuda_engine *e, greq *r) {
    if (!r->held) return;
    for (int i = 0; i < r->n_pblocks; i++) block_decref(e, r->pblocks[i]);
    e->reserved -= r->hold_res;
    r->hold_res = 0;
    r->held = 0;
    r->n_pblocks = 0;
    if (r->plog_row >= 0) e->plog_free[e->n_plog_free++] = r->plog_row;
    r->plog_row = -1;
}

/* The slot's table gets the request's prompt blocks (shared: one more reference each). */
static void share_prompt(cpt_cuda_engine *e, int s, greq *r) {
    gslot *sl = &e->slots[s];
    int32_t *tb = table(e, s);
    for (int i = 0; i < r->n_pblocks; i++) {
        tb[i] = r->pblocks[i];
        e->refcnt[r->pblocks[i]]++;
    }
    sl->nb = r->n_pblocks;
    sl->len = r->n_prompt;
    e->tables_dirty = 1;
}

/* Room for the position the slot writes next: a fresh block at a block boundary, or a private copy of a shared,
 * partly filled last block (copy-on-write; the copy runs before the step's forward). */
static int ensure_block(cpt_cuda_engine *e, int s, cpt_err *err) {
    gslot *sl = &e->slots[s];
    int32_t *tb = table(e, s);
    int bi = sl->len / e->block_size;
    if (bi >= e->max_blocks) return cpt_errf(err, "cuda engine: slot %d past the context of %d", s, e->max_len);
    if (bi == sl->nb) {
        int b = block_alloc(e, err);
        if (b < 0) return -1;
        tb[sl->nb++] = b;
        e->tables_dirty = 1;
    } else if (e->refcnt[tb[bi]] > 1) {
        int b = block_alloc(e, err);
        if (b < 0) return -1;
        int32_t *pairs = MT(e, off_pairs, int32_t);
        pairs[2 * e->n_pairs] = tb[bi];
        pairs[2 * e->n_pairs + 1] = b;
        e->n_pairs++;
        block_decref(e, tb[bi]);
        tb[bi] = b;
        e->tables_dirty = 1;
    }
    return 0;
}

/* ---- the forward over rows --------------------------------------------------------------------------------- */

/* out [n, OC] = inp [n, K] @ w^T (+ bias): the skinny kernel for a few rows when enabled, else cuBLASLt. */
static void mm(cpt_cuda_engine *e, void *out, void *inp, void *w, void *bias, int n, int64_t K, int64_t OC) {
    if (n <= e->gemv_rows && K % 8 == 0)
        cpt_cuda_matmul_skinny(e->ctx, out, inp, w, bias, n, K, OC, e->skinny);
    else
        cpt_cuda_matmul_fwd(e->ctx, BT(out, n, OC), BT(inp, n, K), BT(w, OC, K), B1(bias, OC));
}

/* Whether a forward of n rows runs the few-rows attention (attn_v2 = 4): decode steps of at most
 * CPT_CUDA_FUSED_MAX_ROWS rows (whose split lengths choose_splits then takes from at most CPT_PAGED_FEW_MAX_SPLITS
 * splits). */
static int few_attention(const cpt_cuda_engine *e, int n, int decode) {
    cpt_attn_shape shape = {e->H, e->KV, e->D};
    return e->attn_v2 == 4 && decode && n <= CPT_CUDA_FUSED_MAX_ROWS &&
           cpt_cuda_paged_attention_few_ok(shape, CPT_PAGED_FEW_MAX_SPLITS);
}

/* The layer's append and attention; decode: the rows' tables all differ (a decode step), so attention v2 can do
 * the append itself (one launch fewer). */
static void attention(cpt_cuda_engine *e, int l, int n, int splits, int decode) {
    const cpt_model_config *c = &e->cfg;
    const dlayer *w = &e->layers[l];
    cpt_attn_shape shape = {e->H, e->KV, e->D};
    const int32_t *pos = MD(e, off_pos, int32_t), *tab = MD(e, off_tab, int32_t);
    cpt_attn_kind kind = (cpt_attn_kind)(e->attn_v2 - 1);
    if (kind == CPT_ATTN_FEW && !few_attention(e, n, decode)) kind = CPT_ATTN_MMA;
    /* the first version takes only head sizes dividing its 128 threads: the others run the second */
    int v2 = e->attn_v2 || 128 % e->D;
    if (!e->attn_v2 && v2) kind = CPT_ATTN_V2;
    if (decode && v2) {
        cpt_cuda_paged_attention_v2_append(e->ctx, e->att, e->partial, e->qkv, &e->kv, l, pos, tab, n, splits,
                                           MD(e, off_split, int32_t), shape, e->attn_counters, w->q_norm, w->k_norm,
                                           c->rms_norm_eps, e->inv_freq, kind);
        return;
    }
    cpt_cuda_kv_append(e->ctx, &e->kv, l, e->qkv, pos, tab, n, w->q_norm, w->k_norm, c->rms_norm_eps, e->inv_freq, shape);
    if (v2)
        cpt_cuda_paged_attention_v2(e->ctx, e->att, e->partial, e->qkv, &e->kv, l, pos, tab, n, splits,
                                    MD(e, off_split, int32_t), shape, e->attn_counters, kind);
    else
        cpt_cuda_paged_attention(e->ctx, e->att, e->partial, e->qkv, &e->kv, l, pos, tab, n, splits,
                                 MD(e, off_split, int32_t), shape);
}

static int fused_fits(const cpt_cuda_engine *e, int n) {
    return e->fused && n <= CPT_CUDA_FUSED_MAX_ROWS && cpt_cuda_fused_gemv_ok(e->C) &&
           cpt_cuda_fused_gemv_ok((int64_t)e->H * e->D) && cpt_cuda_fused_gemv_ok(e->I);
}

static void fused(cpt_cuda_engine *e, cpt_cuda_fused_out mode, void *out, const void *inp, const int32_t *rows,
                  const void *norm_w, const void *w, const void *bias, int n, int64_t K, int64_t OC) {
    cpt_cuda_fused_gemv g = {mode, out, inp, rows, norm_w, e->cfg.rms_norm_eps, w, bias, n, K, OC, e->fused >= 2,
                             e->fused == 3 ? e->stage_kb : 0, e->fused == 4 ? e->ring_blocks : 0};
    cpt_cuda_fused_gemv_run(e->ctx, &g);
}

/* A decode step of n rows (n_out = n) as one persistent kernel (engine option persistent), when one is compiled
 * for the shapes: fills *st. The same arithmetic as forward_fused with attn_v2 = 3. */
static int step_fits(const cpt_cuda_engine *e, int n, int splits, cpt_cuda_decode_step *st) {
    if (!e->persistent) return 0;
    const cpt_model_config *c = &e->cfg;
    *st = (cpt_cuda_decode_step){
        .n = n, .n_layers = e->L, .H = e->H, .KV = e->KV, .D = e->D, .C = e->C, .I = e->I, .V = e->V,
        .eps = c->rms_norm_eps, .layers = e->step_layers, .norm = e->norm, .lm = e->lm, .x = e->x, .qkv = e->qkv,
        .att = e->att, .a = e->a, .logits = e->logits, .last = MD(e, off_last, int32_t), .kv = e->kv,
        .pos = MD(e, off_pos, int32_t), .tab = MD(e, off_tab, int32_t), .split_len = MD(e, off_split, int32_t),
        .n_splits = splits, .partial = e->partial, .counters = e->attn_counters, .inv_freq = e->inv_freq,
        .barrier = e->step_barrier, .blocks_per_sm = e->persistent == 2 ? 1 : 2};
    return cpt_cuda_decode_step_ok(st);
}

/* The forward of a few rows with the fused products: the residual stream x is complete after every layer (the
 * products add into it), so a layer is qkv = norm(x) W + b, append + attention, x += att Wo + bo,
 * a = swiglu(norm(x) Wgu), x += a Wdown; logits = norm(x[last]) lm^T. The same roundings as forward(). */
static void forward_fused(cpt_cuda_engine *e, int n, int n_out, int splits, int decode) {
    int64_t C = e->C, QKV = e->QKV, HD = (int64_t)e->H * e->D, I = e->I;
    cpt_cuda_embed(e->ctx, e->x, MD(e, off_tok, int32_t), e->embed, n, C);
    cpt_cuda_decode_step st;
    if (decode && step_fits(e, n, splits, &st)) {
        cpt_cuda_decode_step_run(e->ctx, &st);
        e->step_forwards++;
        return;
    }
    cpt_cuda_set_pdl(e->ctx, !e->no_pdl); /* the layers' kernels only: off again at the end */
    const int skip = e->skip;
    for (int l = 0; l < e->L; l++) {
        const dlayer *w = &e->layers[l];
        if (!(skip & CPT_SKIP_QKV))
            fused(e, CPT_FUSED_BF16, e->qkv, e->x, NULL, w->ln1, w->wqkv, w->bqkv, n, C, QKV);
        if (!(skip & CPT_SKIP_ATTN)) attention(e, l, n, splits, decode);
        if (!(skip & CPT_SKIP_O)) fused(e, CPT_FUSED_RESID, e->x, e->att, NULL, NULL, w->wo, w->bo, n, HD, C);
        if (!(skip & CPT_SKIP_GATEUP)) fused(e, CPT_FUSED_SWIGLU, e->a, e->x, NULL, w->ln2, w->wgu, NULL, n, C, I);
        if (!(skip & CPT_SKIP_DOWN)) fused(e, CPT_FUSED_RESID, e->x, e->a, NULL, NULL, w->wdown, NULL, n, I, C);
    }
    if (n_out > 0 && !(skip & CPT_SKIP_LM)) /* a prefill chunk that ends no prompt has no logits */
        fused(e, CPT_FUSED_F32, e->logits, e->x, MD(e, off_last, int32_t), e->norm, e->lm, NULL, n_out, C, e->V);
    cpt_cuda_set_pdl(e->ctx, 0);
}

/* Rows [n] (tok, pos, tab in the uploaded metadata) through the model; logits [n_out, V] for rows last[0..n_out).
 * decode: one row per table (a decode step), which lets the fused path append inside the attention. */
static void forward(cpt_cuda_engine *e, int n, int n_out, int splits, int decode) {
    if (fused_fits(e, n)) {
        forward_fused(e, n, n_out, splits, decode);
        return;
    }
    cpt_cuda_ctx *ctx = e->ctx;
    const cpt_model_config *c = &e->cfg;
    int64_t C = e->C, QKV = e->QKV, HD = (int64_t)e->H * e->D, I = e->I;
    const int32_t *tok = MD(e, off_tok, int32_t);
    cpt_tensor none = cpt_tensor_none();
    cpt_cuda_embed(ctx, e->x, tok, e->embed, n, C);
    for (int l = 0; l < e->L; l++) {
        const dlayer *w = &e->layers[l];
        if (l == 0)
            cpt_cuda_rmsnorm_fwd(ctx, BT(e->h, n, C), none, none, BT(e->x, n, C), none, B1(w->ln1, C), c->rms_norm_eps);
        else
            cpt_cuda_rmsnorm_fwd(ctx, BT(e->h, n, C), none, BT(e->x, n, C), BT(e->x, n, C), BT(e->mlp, n, C),
                                 B1(w->ln1, C), c->rms_norm_eps);
        mm(e, e->qkv, e->h, w->wqkv, w->bqkv, n, C, QKV);
        attention(e, l, n, splits, 0);
        mm(e, e->o, e->att, w->wo, w->bo, n, HD, C);
        cpt_cuda_rmsnorm_fwd(ctx, BT(e->h, n, C), none, BT(e->x, n, C), BT(e->x, n, C), BT(e->o, n, C),
                             B1(w->ln2, C), c->rms_norm_eps);
        mm(e, e->gu, e->h, w->wgu, NULL, n, C, 2 * I);
        cpt_cuda_swiglu_fwd(ctx, BT(e->a, n, I), BT(e->gu, n, 2 * I));
        mm(e, e->mlp, e->a, w->wdown, NULL, n, I, C);
    }
    cpt_cuda_gather_add(ctx, e->hl_in, e->x, e->mlp, MD(e, off_last, int32_t), n_out, C);
    cpt_cuda_rmsnorm_fwd(ctx, BT(e->hl, n_out, C), none, none, BT(e->hl_in, n_out, C), none, B1(e->norm, C),
                         c->rms_norm_eps);
    cpt_cuda_matmul_f32out(ctx, e->logits, e->hl, e->lm, n_out, C, e->V);
}

static int upload_meta(cpt_cuda_engine *e, cpt_err *err) {
    if (cpt_cuda_memcpy_h2d_async(e->ctx, e->meta_d, e->meta_h, e->meta_upload, err)) return -1;
    if (e->tables_dirty) {
        size_t bytes = sizeof(int32_t) * (size_t)(e->n_slots + 1) * e->max_blocks;
        if (cpt_cuda_memcpy_h2d_async(e->ctx, e->tables_d, e->tables_h, bytes, err)) return -1;
        e->tables_dirty = 0;
    }
    if (e->n_pairs) cpt_cuda_kv_copy_blocks(e->ctx, &e->kv, MD(e, off_pairs, int32_t), e->n_pairs);
    e->n_pairs = 0;
    return 0;
}

static void fill_row(cpt_cuda_sample_row *row, const greq *r, int logits_row, int sample, int step) {
    memset(row, 0, sizeof *row);
    row->seed = r->seed;
    row->logits_row = logits_row;
    row->top_k = r->sp.top_k;
    row->temperature = r->sp.temperature;
    row->top_p = r->sp.top_p;
    row->min_p = r->sp.min_p;
    row->sample = (uint32_t)sample;
    row->step = (uint32_t)step;
}

/* Records the slot's new token; ends the sample on a stop rule. 1: the slot became free, 0: goes on, -1: error. */
static int advance(cpt_cuda_engine *e, int si, int32_t tok, float lp, cpt_err *err) {
    gslot *sl = &e->slots[si];
    greq *r = sl->r;
    if (tok < 0 || tok >= e->V) return cpt_errf(err, "cuda engine: sampled token %d outside [0, %d)", tok, e->V);
    if (cpt_gen_sample_append(&r->h.samples[sl->sample], &r->h.cap[sl->sample], tok, lp, err)) return -1;
    e->st.generated_tokens++;
    cpt_gen_sample *s = &r->h.samples[sl->sample];
    int stop = cpt_gen_stops_hit(&r->stops, e->tok, s, &e->tail, &e->tail_cap);
    if (stop || s->n_tokens >= r->max_new) {
        s->finish = stop ? CPT_FINISH_STOP : CPT_FINISH_LENGTH;
        r->h.done_samples++;
        r->live--;
        slot_release(e, si);
        return 1;
    }
    sl->pending = tok;
    return 0;
}

/* ---- admission and prefill ------------------------------------------------------------------------------- */

static greq *next_waiting(cpt_cuda_engine *e) { return (greq *)cpt_gen_reqs_next_waiting(&e->reqs); }

/* Runs the prompts of the slots pre_slot[0..n) (their blocks already in their tables) in chunks of at most R rows;
 * each prompt's last logits go to its request's plog row; then the request takes its references to the blocks. */
static int prefill(cpt_cuda_engine *e, int n, cpt_err *err) {
    for (int k = 0; k < n; k++) e->prog[k] = 0;
    for (;;) {
        int nt = 0, no = 0;
        int32_t *tok = MT(e, off_tok, int32_t), *pos = MT(e, off_pos, int32_t), *tab = MT(e, off_tab, int32_t);
        int32_t *last = MT(e, off_last, int32_t);
        int owner[1024], n_owner = 0; /* bounded by n_slots (<= 1024, checked at creation) */
        for (int k = 0; k < n && nt < e->R; k++) {
            int s = e->pre_slot[k];
            greq *r = e->slots[s].r;
            int left = r->n_prompt - e->prog[k];
            if (left <= 0) continue;
            int take = left < e->R - nt ? left : e->R - nt;
            for (int j = 0; j < take; j++) {
                tok[nt + j] = r->prompt[e->prog[k] + j];
                pos[nt + j] = e->prog[k] + j;
                tab[nt + j] = s;
            }
            e->prog[k] += take;
            nt += take;
            if (e->prog[k] == r->n_prompt) {
                last[no] = nt - 1;
                owner[n_owner++] = k;
                no++;
            }
        }
        if (!nt) break;
        MT(e, off_split, int32_t)[0] = 0;
        if (upload_meta(e, err)) return -1;
        forward(e, nt, no, 1, 0);
        e->st.prefill_tokens += nt;
        for (int j = 0; j < no; j++) {
            greq *r = e->slots[e->pre_slot[owner[j]]].r;
            if (cpt_cuda_memcpy_d2d(e->ctx, e->plog + (size_t)r->plog_row * e->V, e->logits + (size_t)j * e->V,
                                    sizeof(float) * (size_t)e->V, err))
                return -1;
        }
        if (cpt_cuda_sync(e->ctx, err)) return -1; /* the host metadata is rewritten next */
    }
    for (int k = 0; k < n; k++) {
        int s = e->pre_slot[k];
        gslot *sl = &e->slots[s];
        greq *r = sl->r;
        int32_t *tb = table(e, s);
        r->n_pblocks = sl->nb;
        for (int i = 0; i < sl->nb; i++) {
            r->pblocks[i] = tb[i];
            e->refcnt[tb[i]]++;
        }
        r->prefilling = 0;
        sl->len = r->n_prompt;
        e->st.prefills++;
    }
    return 0;
}

static int admit(cpt_cuda_engine *e, cpt_err *err) {
    for (;;) {
        int n_new = 0, n_pre = 0;
        for (int s = 0; s < e->n_slots; s++) {
            if (e->slots[s].r) continue;
            greq *r = next_waiting(e);
            if (!r) break;
            int hold = r->held || r->h.n_samples == 1 ? 0 : blocks_for(e, r->n_prompt);
            int need = need_of(e, r);
            if (e->reserved + need + hold > e->total_blocks) break; /* wait for blocks to free */
            if (!r->held && e->n_plog_free == 0) break;
            e->reserved += need + hold;
            gslot *sl = &e->slots[s];
            memset(sl, 0, sizeof *sl);
            sl->r = r;
            sl->sample = r->h.next_sample++;
            sl->need = need;
            r->live++;
            e->new_slot[n_new++] = s;
            if (!r->held) {
                r->held = 1;
                r->hold_res = hold;
                r->prefilling = 1;
                r->plog_row = e->plog_free[--e->n_plog_free];
                int nb = blocks_for(e, r->n_prompt);
                int32_t *tb = table(e, s);
                for (int i = 0; i < nb; i++) {
                    int b = block_alloc(e, err);
                    if (b < 0) return -1;
                    tb[i] = b;
                }
                sl->nb = nb;
                e->tables_dirty = 1;
                e->pre_slot[n_pre++] = s;
            } else if (r->prefilling) {
                sl->wait_prefill = 1;
            } else {
                share_prompt(e, s, r);
                e->st.shared_prefills++;
            }
        }
        if (!n_new) return 0;
        if (n_pre && prefill(e, n_pre, err)) return -1;
        cpt_cuda_sample_row *rows = MT(e, off_rows, cpt_cuda_sample_row);
        for (int k = 0; k < n_new; k++) {
            gslot *sl = &e->slots[e->new_slot[k]];
            if (sl->wait_prefill) {
                share_prompt(e, e->new_slot[k], sl->r);
                sl->wait_prefill = 0;
                e->st.shared_prefills++;
            }
            fill_row(&rows[k], sl->r, sl->r->plog_row, sl->sample, 0);
        }
        if (upload_meta(e, err)) return -1;
        cpt_cuda_sample_ex(e->ctx, MD(e, off_out_tok, int32_t), MD(e, off_out_lp, float), e->plog, e->V,
                           MD(e, off_rows, cpt_cuda_sample_row), n_new, e->spart);
        if (cpt_cuda_memcpy_d2h(e->ctx, e->meta_h + e->off_out_tok, e->meta_d + e->off_out_tok,
                                e->off_out_lp - e->off_out_tok + sizeof(float) * (size_t)e->n_slots, err))
            return -1;
        int freed = 0;
        for (int k = 0; k < n_new; k++) {
            int rc = advance(e, e->new_slot[k], MT(e, off_out_tok, int32_t)[k], MT(e, off_out_lp, float)[k], err);
            if (rc < 0) return -1;
            freed += rc;
        }
        for (int i = 0; i < e->reqs.n; i++) {
            greq *r = (greq *)e->reqs.r[i];
            if (r->held && r->h.next_sample == r->h.n_samples) req_release_prompt(e, r);
        }
        if (!freed) return 0;
    }
}

/* ---- decode steps -------------------------------------------------------------------------------------------- */

static int bucket_rows(const cpt_cuda_engine *e, int n) {
    int b = 1;
    while (b < n) b *= 2;
    return b < e->n_slots ? b : e->n_slots;
}

static int pow2_at_least(int n) {
    int p = 1;
    while (p < n) p *= 2;
    return p;
}

/* The attention splits of a decode step of B rows, row k over positions 0 .. pos[k], and each row's split length
 * (split_len[0 .. B)). At <= CPT_CUDA_FUSED_MAX_ROWS rows (the products are per row there) a row's split length
 * follows from its own context alone: SPLIT_MIN_LEN_FEW positions, doubled until at most MAX_SPLITS splits (8 with
 * the few-rows attention: one thread block cluster). Its output then does not depend on the other rows of the step,
 * so the n samples of a prompt, admitted and decoded in different steps, stay bitwise the same, and a sequence decodes alike whatever shares its steps. At more rows the splits fill the
 * multiprocessors: one length for all rows (cuBLASLt's products change with the row count anyway). */
static int choose_splits(const cpt_cuda_engine *e, int B, const int32_t *pos, int32_t *split_len) {
    if (B <= CPT_CUDA_FUSED_MAX_ROWS) {
        int most = 1, max_splits = few_attention(e, B, 1) ? CPT_PAGED_FEW_MAX_SPLITS : MAX_SPLITS;
        for (int k = 0; k < B; k++) {
            int len = pos[k] + 1, sl = e->split_few;
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
    int want = (2 * cpt_cuda_num_sms(e->ctx) + B * e->KV - 1) / (B * e->KV);
    int s = by_len < want ? by_len : want;
    if (s > MAX_SPLITS) s = MAX_SPLITS;
    int p = pow2_at_least(s);
    for (int k = 0; k < B; k++) split_len[k] = (max_len + p - 1) / p;
    return p;
}

/* A decode step's kernels: the forward of `rows` rows and the sampler. */
static void decode_kernels(cpt_cuda_engine *e, int rows, int splits) {
    forward(e, rows, rows, splits, 1);
    cpt_cuda_sample_ex(e->ctx, MD(e, off_out_tok, int32_t), MD(e, off_out_lp, float), e->logits, e->V,
                       MD(e, off_rows, cpt_cuda_sample_row), rows, e->spart);
}

/* The graph of a decode step of `rows` rows and `splits` attention splits: found, or captured now. *g stays NULL
 * (run eagerly) once MAX_GRAPHS exist. */
static int graph_for(cpt_cuda_engine *e, int rows, int splits, cpt_cuda_graph **g, cpt_err *err) {
    *g = NULL;
    for (int i = 0; i < e->n_graphs; i++)
        if (e->graphs[i].rows == rows && e->graphs[i].splits == splits) {
            *g = e->graphs[i].g;
            return 0;
        }
    if (e->n_graphs == MAX_GRAPHS) return 0;
    if (cpt_cuda_graph_begin(e->ctx, err)) return -1;
    decode_kernels(e, rows, splits);
    if (!(*g = cpt_cuda_graph_end(e->ctx, err))) return -1;
    e->graphs[e->n_graphs++] = (graph_entry){rows, splits, *g};
    return 0;
}

int cpt_cuda_engine_step(cpt_cuda_engine *e, cpt_err *err) {
    if (admit(e, err)) return -1;
    int n = 0;
    int *act = e->new_slot;
    for (int s = 0; s < e->n_slots; s++) {
        if (!e->slots[s].r) continue;
        if (ensure_block(e, s, err)) return -1;
        act[n++] = s;
    }
    if (!n) return 0;
    int B = e->use_graphs ? bucket_rows(e, n) : n;
    int32_t *tok = MT(e, off_tok, int32_t), *pos = MT(e, off_pos, int32_t), *tab = MT(e, off_tab, int32_t);
    int32_t *last = MT(e, off_last, int32_t);
    cpt_cuda_sample_row *rows = MT(e, off_rows, cpt_cuda_sample_row);
    for (int k = 0; k < B; k++) {
        last[k] = k;
        if (k < n) {
            gslot *sl = &e->slots[act[k]];
            tok[k] = sl->pending;
            pos[k] = sl->len;
            tab[k] = act[k];
            fill_row(&rows[k], sl->r, k, sl->sample, sl->r->h.samples[sl->sample].n_tokens);
        } else { /* padding: position 0 of the padding table, greedy */
            tok[k] = 0;
            pos[k] = 0;
            tab[k] = e->n_slots;
            memset(&rows[k], 0, sizeof rows[k]);
            rows[k].logits_row = k;
        }
    }
    int splits = choose_splits(e, B, pos, MT(e, off_split, int32_t));
    if (upload_meta(e, err)) return -1;
    cpt_cuda_graph *g = NULL;
    if (e->use_graphs && graph_for(e, B, splits, &g, err)) return -1;
    e->last_graph = g;
    if (g) {
        if (cpt_cuda_graph_launch(e->ctx, g, err)) return -1;
    } else {
        decode_kernels(e, B, splits);
    }
    if (cpt_cuda_memcpy_d2h(e->ctx, e->meta_h + e->off_out_tok, e->meta_d + e->off_out_tok,
                            e->off_out_lp - e->off_out_tok + sizeof(float) * (size_t)n, err))
        return -1;
    e->st.decode_steps++;
    e->st.slot_steps += n;
    int active = n;
    for (int k = 0; k < n; k++) {
        e->slots[act[k]].len++;
        int rc = advance(e, act[k], MT(e, off_out_tok, int32_t)[k], MT(e, off_out_lp, float)[k], err);
        if (rc < 0) return -1;
        active -= rc;
    }
    return active;
}

double cpt_cuda_engine_replay_s(cpt_cuda_engine *e, int reps, cpt_err *err) {
    if (!e->last_graph || reps < 1) {
        cpt_errf(err, "cuda engine: no decode graph to replay (graphs off, or no decode step yet)");
        return -1;
    }
    if (cpt_cuda_sync(e->ctx, err)) return -1;
    double t0 = cpt_now();
    for (int r = 0; r < reps; r++)
        if (cpt_cuda_graph_launch(e->ctx, e->last_graph, err)) return -1;
    if (cpt_cuda_sync(e->ctx, err)) return -1;
    return (cpt_now() - t0) / reps;
}

/* ---- creation ------------------------------------------------------------------------------------------------ */

static size_t al(size_t n) { return (n + 63) & ~(size_t)63; } /* bf16 elements, 128-byte aligned */

static int check_shape(const cpt_model_config *c, cpt_err *err) {
    return cpt_model_cuda_shape_check(c, 1, err) ? cpt_err_prefix(err, "cuda engine") : 0;
}

/* Lays out the bf16 weights in one allocation. */
static int alloc_weights(cpt_cuda_engine *e, cpt_err *err) {
    const cpt_model_config *c = &e->cfg;
    size_t C = (size_t)e->C, QKV = (size_t)e->QKV, HD = (size_t)e->H * e->D, I = (size_t)e->I, V = (size_t)e->V;
    size_t D = (size_t)e->D;
    size_t per = al(C) + al(QKV * C) + (c->qkv_bias ? al(QKV) : 0) + (c->qk_norm ? 2 * al(D) : 0) + al(C * HD) +
                 (c->o_bias ? al(C) : 0) + al(C) + al(2 * I * C) + al(C * I);
    size_t total = al(V * C) + (c->tie_word_embeddings ? 0 : al(V * C)) + al(C) + per * (size_t)e->L;
    e->wmem = cpt_cuda_malloc(total * 2, "bf16 weights", err);
    e->layers = calloc((size_t)e->L, sizeof *e->layers);
    e->inv_freq = cpt_cuda_malloc(sizeof(float) * D / 2, "rope inv_freq", err);
    if (!e->wmem || !e->layers || !e->inv_freq) return cpt_errf(err, "cuda engine: out of memory for weights");
    uint16_t *p = e->wmem;
#define TAKE(dst, n) (dst = p, p += al(n))
    TAKE(e->embed, V * C);
    if (c->tie_word_embeddings) e->lm = e->embed;
    else TAKE(e->lm, V * C);
    TAKE(e->norm, C);
    for (int l = 0; l < e->L; l++) {
        dlayer *w = &e->layers[l];
        TAKE(w->ln1, C);
        TAKE(w->wqkv, QKV * C);
        if (c->qkv_bias) TAKE(w->bqkv, QKV);
        if (c->qk_norm) {
            TAKE(w->q_norm, D);
            TAKE(w->k_norm, D);
        }
        TAKE(w->wo, C * HD);
        if (c->o_bias) TAKE(w->bo, C);
        TAKE(w->ln2, C);
        TAKE(w->wgu, 2 * I * C);
        TAKE(w->wdown, C * I);
    }
#undef TAKE
    float inv[256];
    cpt_rope_cfg rc = {c->head_dim, c->rope_theta, c->rope_llama3, c->rope_factor, c->rope_low_freq_factor,
                       c->rope_high_freq_factor, c->rope_original_max_pos};
    cpt_rope_inv_freq(&rc, inv);
    return cpt_cuda_memcpy_h2d(e->ctx, e->inv_freq, inv, sizeof(float) * D / 2, err);
}

static int up(cpt_cuda_engine *e, cpt_model *m, void *dst, size_t at, const char *name, size_t numel, cpt_err *err) {
    cpt_param *p = cpt_model_find_param(m, name);
    if (!p) return cpt_errf(err, "cuda engine: the model has no parameter %s", name);
    if (p->numel != numel) return cpt_errf(err, "cuda engine: %s has %zu values, want %zu", name, p->numel, numel);
    if (e->dev_src) /* the bf16 weights already on the device, at the param's offset in the model's flat order */
        return cpt_cuda_memcpy_d2d(e->ctx, (uint16_t *)dst + at, e->dev_src + (p->data - cpt_model_data(m)),
                                   numel * sizeof(uint16_t), err);
    return cpt_cuda_upload_bf16(e->ctx, (uint16_t *)dst + at, p->data, numel, err);
}

int cpt_cuda_engine_load_weights(cpt_cuda_engine *e, cpt_model *m, cpt_err *err) {
    const cpt_model_config *c = &e->cfg, *mc = cpt_model_cfg(m);
    if (mc->hidden_size != c->hidden_size || mc->num_layers != c->num_layers || mc->vocab_size != c->vocab_size ||
        mc->intermediate_size != c->intermediate_size || mc->num_heads != c->num_heads ||
        mc->num_kv_heads != c->num_kv_heads || mc->head_dim != c->head_dim)
        return cpt_errf(err, "cuda engine: the model's shape differs from the engine's");
    size_t C = (size_t)e->C, HD = (size_t)e->H * e->D, KD = (size_t)e->KV * e->D, I = (size_t)e->I, V = (size_t)e->V;
    size_t D = (size_t)e->D;
    char n[256];
    if (up(e, m, e->embed, 0, "model.embed_tokens.weight", V * C, err)) return -1;
    if (!c->tie_word_embeddings && up(e, m, e->lm, 0, "lm_head.weight", V * C, err)) return -1;
    if (up(e, m, e->norm, 0, "model.norm.weight", C, err)) return -1;
#define LN(suffix) (snprintf(n, sizeof n, "model.layers.%d.%s", l, suffix), n)
    for (int l = 0; l < e->L; l++) {
        dlayer *w = &e->layers[l];
        if (up(e, m, w->ln1, 0, LN("input_layernorm.weight"), C, err) ||
            up(e, m, w->wqkv, 0, LN("self_attn.q_proj.weight"), HD * C, err) ||
            up(e, m, w->wqkv, HD * C, LN("self_attn.k_proj.weight"), KD * C, err) ||
            up(e, m, w->wqkv, (HD + KD) * C, LN("self_attn.v_proj.weight"), KD * C, err) ||
            up(e, m, w->wo, 0, LN("self_attn.o_proj.weight"), C * HD, err) ||
            up(e, m, w->ln2, 0, LN("post_attention_layernorm.weight"), C, err) ||
            up(e, m, w->wgu, 0, LN("mlp.gate_proj.weight"), I * C, err) ||
            up(e, m, w->wgu, I * C, LN("mlp.up_proj.weight"), I * C, err) ||
            up(e, m, w->wdown, 0, LN("mlp.down_proj.weight"), C * I, err))
            return -1;
        if (c->qkv_bias && (up(e, m, w->bqkv, 0, LN("self_attn.q_proj.bias"), HD, err) ||
                            up(e, m, w->bqkv, HD, LN("self_attn.k_proj.bias"), KD, err) ||
                            up(e, m, w->bqkv, HD + KD, LN("self_attn.v_proj.bias"), KD, err)))
            return -1;
        if (c->qk_norm && (up(e, m, w->q_norm, 0, LN("self_attn.q_norm.weight"), D, err) ||
                           up(e, m, w->k_norm, 0, LN("self_attn.k_norm.weight"), D, err)))
            return -1;
        if (c->o_bias && up(e, m, w->bo, 0, LN("self_attn.o_proj.bias"), C, err)) return -1;
    }
#undef LN
    return 0;
}

int cpt_cuda_engine_load_weights_bf16(cpt_cuda_engine *e, cpt_model *m, const void *dev_bf16, cpt_err *err) {
    e->dev_src = dev_bf16;
    int rc = cpt_cuda_engine_load_weights(e, m, err);
    e->dev_src = NULL;
    return rc ? rc : cpt_cuda_sync(e->ctx, err);
}

void *cpt_cuda_engine_cuda_ctx(cpt_cuda_engine *e) { return e->ctx; }

static void random_weights(cpt_cuda_engine *e, uint64_t seed, float std) {
    const cpt_model_config *c = &e->cfg;
    size_t C = (size_t)e->C, QKV = (size_t)e->QKV, HD = (size_t)e->H * e->D, I = (size_t)e->I, V = (size_t)e->V;
    size_t D = (size_t)e->D;
    cpt_cuda_ctx *x = e->ctx;
    uint64_t k = seed * 1000003u;
    cpt_cuda_fill_normal_bf16(x, e->embed, V * C, 0.0f, std, k++);
    if (!c->tie_word_embeddings) cpt_cuda_fill_normal_bf16(x, e->lm, V * C, 0.0f, std, k++);
    cpt_cuda_fill_normal_bf16(x, e->norm, C, 1.0f, 0.0f, 0);
    for (int l = 0; l < e->L; l++) {
        dlayer *w = &e->layers[l];
        cpt_cuda_fill_normal_bf16(x, w->ln1, C, 1.0f, 0.0f, 0);
        cpt_cuda_fill_normal_bf16(x, w->ln2, C, 1.0f, 0.0f, 0);
        cpt_cuda_fill_normal_bf16(x, w->wqkv, QKV * C, 0.0f, std, k++);
        cpt_cuda_fill_normal_bf16(x, w->wo, C * HD, 0.0f, std, k++);
        cpt_cuda_fill_normal_bf16(x, w->wgu, 2 * I * C, 0.0f, std, k++);
        cpt_cuda_fill_normal_bf16(x, w->wdown, C * I, 0.0f, std, k++);
        if (w->bqkv) cpt_cuda_fill_normal_bf16(x, w->bqkv, QKV, 0.0f, 0.0f, 0);
        if (w->bo) cpt_cuda_fill_normal_bf16(x, w->bo, C, 0.0f, 0.0f, 0);
        if (w->q_norm) cpt_cuda_fill_normal_bf16(x, w->q_norm, D, 1.0f, 0.0f, 0);
        if (w->k_norm) cpt_cuda_fill_normal_bf16(x, w->k_norm, D, 1.0f, 0.0f, 0);
    }
}

static size_t take_meta(size_t *at, size_t bytes) {
    size_t o = *at;
    *at = (o + bytes + 15) & ~(size_t)15;
    return o;
}

static cpt_cuda_engine *engine_create(const cpt_model_config *cfg, const cpt_cuda_engine_opts *o, cpt_err *err) {
    if (check_shape(cfg, err)) return NULL;
    cpt_cuda_engine *e = calloc(1, sizeof *e);
    if (!e) {
        cpt_errf(err, "cuda engine: out of memory");
        return NULL;
    }
    e->cfg = *cfg;
    e->V = cfg->vocab_size, e->C = cfg->hidden_size, e->H = cfg->num_heads, e->KV = cfg->num_kv_heads;
    e->D = cfg->head_dim, e->I = cfg->intermediate_size, e->L = cfg->num_layers;
    e->QKV = (e->H + 2 * e->KV) * e->D;
    e->tok = o ? o->base.tok : NULL;
    e->n_slots = o && o->base.slots > 0 ? o->base.slots : 8;
    e->max_len = o && o->base.max_len > 0 ? o->base.max_len : cfg->max_position_embeddings;
    if (e->max_len < 2) e->max_len = 2;
    e->prefill_chunk = o && o->base.prefill_chunk > 0 ? o->base.prefill_chunk : 2048;
    e->block_size = o && o->block_size > 0 ? o->block_size : 16;
    e->use_graphs = !(o && o->no_graphs);
    e->gemv_rows = o ? o->gemv_rows : 0;
    e->attn_v2 = o ? o->attn_v2 : 0;
    e->fused = o ? o->fused : 0;
    e->stage_kb = o && o->stage_kb > 0 ? o->stage_kb : CPT_CUDA_FUSED_STAGE_KB;
    e->ring_blocks = o && o->ring_blocks > 0 ? o->ring_blocks : CPT_CUDA_FUSED_RING_BLOCKS;
    e->no_pdl = o ? o->no_pdl : 0;
    e->persistent = o ? o->persistent : 0;
    e->split_few = o && o->split_few > 0 ? o->split_few : SPLIT_MIN_LEN_FEW;
    e->skip = o ? o->bench_skip : 0;
    {
        const struct {
            const char *name;
            int v, lo, hi;
        } ranges[] = {{"gemv_rows", e->gemv_rows, 0, CPT_CUDA_SKINNY_MAX_ROWS},
                      {"attn_v2", e->attn_v2, 0, 4},
                      {"fused", e->fused, 0, 4},
                      {"stage_kb", e->stage_kb, 1, 227},
                      {"ring_blocks", e->ring_blocks, 1, 8},
                      {"persistent", e->persistent, 0, 2},
                      {"split_few", e->split_few, 0, 65536}};
        for (size_t k = 0; k < sizeof ranges / sizeof ranges[0]; k++)
            if (ranges[k].v < ranges[k].lo || ranges[k].v > ranges[k].hi) {
                cpt_errf(err, "cuda engine: %s %d must be in [%d, %d]", ranges[k].name, ranges[k].v, ranges[k].lo,
                         ranges[k].hi);
                goto fail;
            }
    }
    if (e->persistent && e->fused != 1) {
        cpt_errf(err, "cuda engine: persistent %d needs fused = 1 (the step kernel is the fused products)",
                 e->persistent);
        goto fail;
    }
    if (e->n_slots > 1024) {
        cpt_errf(err, "cuda engine: at most 1024 slots (%d asked)", e->n_slots);
        goto fail;
    }
    e->R = e->prefill_chunk > e->n_slots ? e->prefill_chunk : e->n_slots;
    if (!(e->ctx = cpt_cuda_ctx_new(o ? o->device : 0, err))) goto fail;
    if (alloc_weights(e, err)) goto fail;
    if (e->persistent) {
        size_t lb = sizeof(dlayer) * (size_t)e->L;
        e->step_layers = cpt_cuda_malloc(lb, "decode step layers", err);
        e->step_barrier = cpt_cuda_malloc(sizeof(unsigned), "decode step barrier", err);
        if (!e->step_layers || !e->step_barrier || cpt_cuda_memcpy_h2d(e->ctx, e->step_layers, e->layers, lb, err))
            goto fail;
    }
    if (e->gemv_rows) {
        int64_t oc = e->QKV > 2 * e->I ? e->QKV : 2 * e->I;
        if (e->C > oc) oc = e->C;
        size_t f = cpt_cuda_matmul_skinny_scratch_floats(e->gemv_rows, oc);
        if (!(e->skinny = cpt_cuda_malloc(sizeof(float) * f, "skinny product partials", err))) goto fail;
    }

    /* KV pool */
    e->max_blocks = blocks_for(e, e->max_len);
    size_t block_bytes = (size_t)e->L * 2 * e->block_size * e->KV * e->D * 2;
    long worst = (long)(e->n_slots + 1) * e->max_blocks;
    long want = o && o->kv_blocks > 0 ? o->kv_blocks : worst;
    if (!(o && o->kv_blocks > 0)) {
        size_t fr = 0, tot = 0;
        if (cpt_cuda_mem_info(&fr, &tot, err)) goto fail;
        long cap = (long)(fr / 2 / block_bytes);
        if (want > cap) want = cap;
    }
    if (want < e->max_blocks) {
        cpt_errf(err, "cuda engine: a KV pool of %ld blocks cannot hold one context of %d positions", want, e->max_len);
        goto fail;
    }
    e->total_blocks = (int)want;
    e->kv.n_layers = e->L, e->kv.n_blocks = e->total_blocks + 1, e->kv.block_size = e->block_size;
    e->kv.n_kv_heads = e->KV, e->kv.head_dim = e->D, e->kv.max_blocks = e->max_blocks;
    e->kv.pool = cpt_cuda_malloc(block_bytes * (size_t)e->kv.n_blocks, "the paged KV pool", err);
    size_t tbytes = sizeof(int32_t) * (size_t)(e->n_slots + 1) * e->max_blocks;
    e->tables_d = cpt_cuda_malloc(tbytes, "block tables", err);
    e->tables_h = cpt_cuda_host_alloc(tbytes, "block tables (host)", err);
    e->refcnt = calloc((size_t)e->total_blocks + 1, sizeof *e->refcnt);
    e->free_stack = malloc(sizeof *e->free_stack * ((size_t)e->total_blocks + 1));
    if (!e->kv.pool || !e->tables_d || !e->tables_h || !e->refcnt || !e->free_stack) goto fail;
    e->kv.block_tables = e->tables_d;
    memset(e->tables_h, 0, tbytes);
    for (int b = 0; b < e->max_blocks; b++) table(e, e->n_slots)[b] = e->total_blocks; /* the padding block */
    for (int b = e->total_blocks - 1; b >= 0; b--) e->free_stack[e->n_free++] = b; /* block 0 first */
    e->tables_dirty = 1;

    /* activations */
    {
        size_t R = (size_t)e->R, C = (size_t)e->C, S = (size_t)e->n_slots, V = (size_t)e->V;
        size_t bf = R * C * 4 + R * (size_t)e->QKV + R * (size_t)e->H * e->D + R * 3 * (size_t)e->I + S * C * 2;
        e->act = cpt_cuda_malloc(bf * 2 + 1024, "activations", err);
        size_t part = cpt_cuda_paged_attention_partial_floats(e->n_slots, e->H, e->D, MAX_SPLITS);
        e->logits = cpt_cuda_malloc(sizeof(float) * S * V, "logits", err);
        e->plog = cpt_cuda_malloc(sizeof(float) * (S + 1) * V, "prompt logits", err);
        e->partial = cpt_cuda_malloc(sizeof(float) * (part ? part : 1), "attention partials", err);
        e->spart = cpt_cuda_malloc(cpt_cuda_sample_partials_bytes((int)S + 1), "sampler partials", err);
        size_t cnt_bytes = sizeof(int) * (R > S ? R : S) * (size_t)e->KV;
        e->attn_counters = cpt_cuda_malloc(cnt_bytes, "attention split counters", err);
        e->plog_free = malloc(sizeof *e->plog_free * (S + 1));
        if (!e->act || !e->logits || !e->plog || !e->partial || !e->spart || !e->attn_counters || !e->plog_free)
            goto fail;
        if (cpt_cuda_memset(e->ctx, e->attn_counters, 0, cnt_bytes, err)) goto fail;
        for (int i = (int)S; i >= 0; i--) e->plog_free[e->n_plog_free++] = i;
        uint16_t *p = e->act;
#define TAKE(dst, n) (dst = p, p += al(n))
        TAKE(e->x, R * C);
        TAKE(e->h, R * C);
        TAKE(e->o, R * C);
        TAKE(e->mlp, R * C);
        TAKE(e->qkv, R * (size_t)e->QKV);
        TAKE(e->att, R * (size_t)e->H * e->D);
        TAKE(e->gu, R * 2 * (size_t)e->I);
        TAKE(e->a, R * (size_t)e->I);
        TAKE(e->hl_in, S * C);
        TAKE(e->hl, S * C);
#undef TAKE
        if ((size_t)(p - (uint16_t *)e->act) > bf + 512) {
            cpt_errf(err, "cuda engine: activation layout overflow");
            goto fail;
        }
    }
    /* metadata */
    {
        size_t at = 0, R = (size_t)e->R, S = (size_t)e->n_slots;
        e->off_tok = take_meta(&at, 4 * R);
        e->off_pos = take_meta(&at, 4 * R);
        e->off_tab = take_meta(&at, 4 * R);
        e->off_last = take_meta(&at, 4 * R);
        e->off_split = take_meta(&at, 4 * S);
        e->off_pairs = take_meta(&at, 8 * S);
        e->off_rows = take_meta(&at, sizeof(cpt_cuda_sample_row) * S);
        e->meta_upload = at;
        e->off_out_tok = take_meta(&at, 4 * S);
        e->off_out_lp = take_meta(&at, 4 * S);
        e->meta_h = cpt_cuda_host_alloc(at, "step metadata (host)", err);
        e->meta_d = cpt_cuda_malloc(at, "step metadata", err);
        if (!e->meta_h || !e->meta_d) goto fail;
        memset(e->meta_h, 0, at);
    }
    e->slots = calloc((size_t)e->n_slots, sizeof *e->slots);
    e->new_slot = malloc(sizeof(int) * (size_t)e->n_slots);
    e->pre_slot = malloc(sizeof(int) * (size_t)e->n_slots);
    e->prog = malloc(sizeof(int) * (size_t)e->n_slots);
    if (!e->slots || !e->new_slot || !e->pre_slot || !e->prog) {
        cpt_errf(err, "cuda engine: out of memory for %d slots", e->n_slots);
        goto fail;
    }
    return e;
fail:
    cpt_cuda_engine_free(e);
    return NULL;
}

cpt_cuda_engine *cpt_cuda_engine_new(cpt_model *m, const cpt_cuda_engine_opts *o, cpt_err *err) {
    cpt_cuda_engine *e = engine_create(cpt_model_cfg(m), o, err);
    if (e && (cpt_cuda_engine_load_weights(e, m, err) || cpt_cuda_sync(e->ctx, err))) {
        cpt_cuda_engine_free(e);
        return NULL;
    }
    return e;
}

cpt_cuda_engine *cpt_cuda_engine_new_random(const cpt_model_config *cfg, uint64_t seed, float std,
                                            const cpt_cuda_engine_opts *o, cpt_err *err) {
    cpt_cuda_engine *e = engine_create(cfg, o, err);
    if (!e) return NULL;
    random_weights(e, seed, std);
    if (cpt_cuda_sync(e->ctx, err)) {
        cpt_cuda_engine_free(e);
        return NULL;
    }
    return e;
}

void cpt_cuda_engine_clear(cpt_cuda_engine *e) {
    for (int s = 0; e->slots && s < e->n_slots; s++)
        if (e->slots[s].r) slot_release(e, s);
    for (int i = 0; i < e->reqs.n; i++) {
        greq *r = (greq *)e->reqs.r[i];
        req_release_prompt(e, r);
        req_free(r);
    }
    e->reqs.n = 0;
}

void cpt_cuda_engine_free(cpt_cuda_engine *e) {
    if (!e) return;
    if (e->slots && e->refcnt) cpt_cuda_engine_clear(e);
    cpt_gen_reqs_free(&e->reqs);
    for (int i = 0; i < e->n_graphs; i++) cpt_cuda_graph_free(e->graphs[i].g);
    cpt_cuda_free(e->wmem);
    cpt_cuda_free(e->inv_freq);
    free(e->layers);
    cpt_cuda_free(e->kv.pool);
    cpt_cuda_free(e->tables_d);
    cpt_cuda_host_free(e->tables_h);
    free(e->refcnt);
    free(e->free_stack);
    cpt_cuda_free(e->act);
    cpt_cuda_free(e->logits);
    cpt_cuda_free(e->plog);
    cpt_cuda_free(e->partial);
    cpt_cuda_free(e->spart);
    cpt_cuda_free(e->attn_counters);
    cpt_cuda_free(e->skinny);
    cpt_cuda_free(e->step_layers);
    cpt_cuda_free(e->step_barrier);
    free(e->plog_free);
    cpt_cuda_host_free(e->meta_h);
    cpt_cuda_free(e->meta_d);
    free(e->slots);
    free(e->new_slot);
    free(e->pre_slot);
    free(e->prog);
    free(e->tail);
    cpt_cuda_ctx_free(e->ctx);
    free(e);
}

/* ---- the request interface (as rollout/engine.c) -------------------------------------------------------- */

int64_t cpt_cuda_engine_submit(cpt_cuda_engine *e, const cpt_gen_request *g, cpt_err *err) {
    if (cpt_gen_request_check(g, e->V, e->max_len, e->tok != NULL, err)) return -1;
    greq *r = calloc(1, sizeof *r);
    if (!r) return cpt_errf(err, "cuda engine: out of memory");
    if (cpt_gen_req_head_init(&r->h, e->next_id, g, err)) {
        free(r);
        return -1;
    }
    r->n_prompt = g->n_prompt;
    int room = e->max_len - g->n_prompt + 1;
    r->max_new = g->max_new_tokens < room ? g->max_new_tokens : room;
    r->sp = g->sp;
    r->seed = g->seed;
    r->plog_row = -1;
    r->prompt = malloc(sizeof(int32_t) * (size_t)g->n_prompt);
    r->pblocks = malloc(sizeof(int32_t) * (size_t)blocks_for(e, g->n_prompt));
    if (!r->prompt || !r->pblocks) {
        req_free(r);
        return cpt_errf(err, "cuda engine: out of memory for a request");
    }
    int need = need_of(e, r) + (g->n_samples > 1 ? blocks_for(e, r->n_prompt) : 0);
    if (need > e->total_blocks) {
        req_free(r);
        return cpt_errf(err, "request: needs %d KV blocks, the pool has %d", need, e->total_blocks);
    }
    if (cpt_gen_stops_copy(&r->stops, g, err) || cpt_gen_reqs_push(&e->reqs, &r->h, err)) {
        req_free(r);
        return -1;
    }
    memcpy(r->prompt, g->prompt, sizeof(int32_t) * (size_t)g->n_prompt);
    return e->next_id++;
}

int cpt_cuda_engine_take(cpt_cuda_engine *e, cpt_gen_result *out) {
    greq *r = (greq *)cpt_gen_reqs_take(&e->reqs, out);
    if (!r) return 0;
    req_release_prompt(e, r);
    req_free(r);
    return 1;
}

int cpt_cuda_engine_active(const cpt_cuda_engine *e) {
    int n = 0;
    for (int s = 0; s < e->n_slots; s++) n += e->slots[s].r != NULL;
    return n;
}
int cpt_cuda_engine_idle(const cpt_cuda_engine *e) { return cpt_gen_reqs_idle(&e->reqs); }
int cpt_cuda_engine_pending(const cpt_cuda_engine *e) { return e->reqs.n; }
int cpt_cuda_engine_waiting(const cpt_cuda_engine *e) { return cpt_gen_reqs_waiting(&e->reqs); }
int cpt_cuda_engine_slots(const cpt_cuda_engine *e) { return e->n_slots; }
const cpt_engine_stats *cpt_cuda_engine_get_stats(const cpt_cuda_engine *e) { return &e->st; }
int cpt_cuda_engine_kv_blocks(const cpt_cuda_engine *e) { return e->total_blocks; }
int cpt_cuda_engine_kv_free_blocks(const cpt_cuda_engine *e) { return e->n_free; }
int cpt_cuda_engine_graphs(const cpt_cuda_engine *e) { return e->n_graphs; }
int cpt_cuda_engine_step_forwards(const cpt_cuda_engine *e) { return e->step_forwards; }

int cpt_cuda_engine_generate(cpt_cuda_engine *e, const cpt_gen_request *reqs, int n, cpt_gen_result *results,
                             cpt_err *err) {
    cpt_gen_engine g = {NULL, e};
    return cpt_gen_engine_generate(&g, reqs, n, results, err);
}

#else /* built without CUDA */

static int no_cuda(cpt_err *err) {
    return cpt_errf(err, "cuda engine: cpt was built without CUDA (no nvcc found at configure time)");
}
/* the shape is refused as a GPU build would, before saying that there is no GPU code */
cpt_cuda_engine *cpt_cuda_engine_new(cpt_model *m, const cpt_cuda_engine_opts *o, cpt_err *err) {
    (void)o;
    if (cpt_model_cuda_shape_check(cpt_model_cfg(m), 1, err)) cpt_err_prefix(err, "cuda engine");
    else no_cuda(err);
    return NULL;
}
cpt_cuda_engine *cpt_cuda_engine_new_random(const cpt_model_config *cfg, uint64_t seed, float std,
                                            const cpt_cuda_engine_opts *o, cpt_err *err) {
    (void)seed, (void)std, (void)o;
    if (cpt_model_cuda_shape_check(cfg, 1, err)) cpt_err_prefix(err, "cuda engine");
    else no_cuda(err);
    return NULL;
}
int cpt_cuda_engine_load_weights(cpt_cuda_engine *e, cpt_model *m, cpt_err *err) { (void)e, (void)m; return no_cuda(err); }
int cpt_cuda_engine_load_weights_bf16(cpt_cuda_engine *e, cpt_model *m, const void *dev_bf16, cpt_err *err) {
    (void)e, (void)m, (void)dev_bf16;
    return no_cuda(err);
}
void *cpt_cuda_engine_cuda_ctx(cpt_cuda_engine *e) { (void)e; return NULL; }
void cpt_cuda_engine_free(cpt_cuda_engine *e) { (void)e; }
int64_t cpt_cuda_engine_submit(cpt_cuda_engine *e, const cpt_gen_request *r, cpt_err *err) { (void)e, (void)r; return no_cuda(err); }
int cpt_cuda_engine_step(cpt_cuda_engine *e, cpt_err *err) { (void)e; return no_cuda(err); }
int cpt_cuda_engine_take(cpt_cuda_engine *e, cpt_gen_result *out) { (void)e, (void)out; return 0; }
int cpt_cuda_engine_idle(const cpt_cuda_engine *e) { (void)e; return 1; }
int cpt_cuda_engine_active(const cpt_cuda_engine *e) { (void)e; return 0; }
int cpt_cuda_engine_pending(const cpt_cuda_engine *e) { (void)e; return 0; }
int cpt_cuda_engine_waiting(const cpt_cuda_engine *e) { (void)e; return 0; }
int cpt_cuda_engine_slots(const cpt_cuda_engine *e) { (void)e; return 0; }
const cpt_engine_stats *cpt_cuda_engine_get_stats(const cpt_cuda_engine *e) { (void)e; return NULL; }
void cpt_cuda_engine_clear(cpt_cuda_engine *e) { (void)e; }
int cpt_cuda_engine_generate(cpt_cuda_engine *e, const cpt_gen_request *reqs, int n, cpt_gen_result *results,
                             cpt_err *err) {
    (void)e, (void)reqs, (void)n, (void)results;
    return no_cuda(err);
}
int cpt_cuda_engine_kv_blocks(const cpt_cuda_engine *e) { (void)e; return 0; }
int cpt_cuda_engine_kv_free_blocks(const cpt_cuda_engine *e) { (void)e; return 0; }
int cpt_cuda_engine_graphs(const cpt_cuda_engine *e) { (void)e; return 0; }
int cpt_cuda_engine_step_forwards(const cpt_cuda_engine *e) { (void)e; return 0; }
double cpt_cuda_engine_replay_s(cpt_cuda_engine *e, int reps, cpt_err *err) { (void)e, (void)reps; return no_cuda(err); }

#endif
