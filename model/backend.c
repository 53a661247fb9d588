/* The model's public calls and the public decoder (model/decoder.h), dispatched through the backend chosen when the
 * model was placed (model/backend.h). Arguments are checked here once, for every backend: a bad decoder row is the
 * caller's bug, but it would make a device read or write outside the KV pool, so it is refused with the row named. */
#include "model/backend.h"
#include "model/model_internal.h"

static int check_batch(const cpt_model *m, const cpt_batch *b, cpt_err *err) {
    if (!b || b->n_tokens < 1 || b->n_seqs < 1 || !b->tokens || !b->seq_start)
        return cpt_errf(err, "batch: needs at least one token and one sequence");
    if (b->seq_start[0] != 0 || b->seq_start[b->n_seqs] != b->n_tokens)
        return cpt_errf(err, "batch: seq_start must run from 0 to n_tokens = %d (got %d .. %d)", b->n_tokens,
                        b->seq_start[0], b->seq_start[b->n_seqs]);
    for (int s = 0; s < b->n_seqs; s++)
        if (b->seq_start[s + 1] < b->seq_start[s]) return cpt_errf(err, "batch: seq_start decreases at sequence %d", s);
    int V = m->cfg.vocab_size;
    for (int i = 0; i < b->n_tokens; i++)
        if (b->tokens[i] < 0 || b->tokens[i] >= V)
            return cpt_errf(err, "batch: token %d at position %d is outside the vocabulary [0, %d)", b->tokens[i], i, V);
    for (int i = 0; b->targets && i < b->n_tokens; i++)
        if (b->targets[i] < -1 || b->targets[i] >= V)
            return cpt_errf(err, "batch: target %d at position %d is outside [-1, %d)", b->targets[i], i, V);
    return 0;
}

int cpt_model_forward(cpt_model *m, const cpt_batch *b, cpt_forward_out *out, int keep_activations, cpt_err *err) {
    if (check_batch(m, b, err)) return -1;
    cpt_forward_out none = {0};
    if (!out) out = &none;
    if (out->values && m->off_score < 0) return cpt_errf(err, "forward: values asked for, but the model has no value head");
    return m->be->forward(m, b, out, keep_activations, err);
}

int cpt_model_backward(cpt_model *m, const cpt_batch *b, const float *d_logprobs, const float *d_entropy,
                       const float *d_values, cpt_err *err) {
    if (check_batch(m, b, err)) return -1;
    if (d_values && m->off_score < 0) return cpt_errf(err, "backward: d_values given, but the model has no value head");
    if (d_logprobs && !b->targets) return cpt_errf(err, "backward: d_logprobs given, but the batch has no targets");
    return m->be->backward(m, b, d_logprobs, d_entropy, d_values, err);
}

void cpt_model_zero_grad(cpt_model *m) { m->be->zero_grad(m); }
int cpt_model_sync_to_host(cpt_model *m, cpt_err *err) { return m->be->sync_to_host(m, err); }
int cpt_model_sync_to_device(cpt_model *m, cpt_err *err) { return m->be->sync_to_device(m, err); }
int cpt_model_wait(cpt_model *m, cpt_err *err) { return m->be->wait(m, err); }

/* ---- the decoder ---- */

cpt_decoder *cpt_decoder_new(cpt_model *m, const cpt_decoder_opts *o, const cpt_decoder_tuning *tuning,
                             cpt_err *err) {
    if (!o || o->n_tables < 1 || o->max_len < 1 || o->block_size < 0 || o->n_blocks < 0 || o->saved_rows < 0 ||
        o->max_rows < o->n_tables) {
        cpt_errf(err, "decoder: needs n_tables >= 1, max_len >= 1, max_rows >= n_tables and no negative sizes");
        return NULL;
    }
    if (!m->be->decoder_new) {
        cpt_errf(err, "decoder: the model's %s placement does not generate", m->be->name);
        return NULL;
    }
    return m->be->decoder_new(m, o, tuning, err);
}

void cpt_decoder_base_init(cpt_decoder *d, const cpt_decoder_ops *ops, cpt_model *m, const cpt_decoder_opts *o) {
    d->ops = ops;
    d->m = m;
    d->n_tables = o->n_tables;
    d->block_size = o->block_size > 0 ? o->block_size : 16;
    d->max_blocks = (o->max_len + d->block_size - 1) / d->block_size;
    d->n_blocks = o->n_blocks > 0 ? o->n_blocks : (d->n_tables + 1) * d->max_blocks;
    d->max_rows = o->max_rows;
    d->saved_rows = o->saved_rows > 0 ? o->saved_rows : d->n_tables + 1;
}

size_t cpt_kv_block_bytes(const cpt_model_config *c, int block_size, int elem_bytes) {
    return (size_t)c->num_layers * 2 * (size_t)block_size * (size_t)c->num_kv_heads * (size_t)c->head_dim *
           (size_t)elem_bytes;
}

long cpt_kv_pool_blocks(size_t block_bytes, double fraction, size_t free_bytes, size_t total_bytes, long cap) {
    if (!block_bytes || free_bytes > total_bytes) return 0;
    double budget = fraction * (double)total_bytes - (double)(total_bytes - free_bytes);
    if (budget < (double)block_bytes) return 0;
    double n = budget / (double)block_bytes;
    return n > (double)cap ? cap : (long)n;
}

void cpt_decoder_free(cpt_decoder *d) {
    if (d) d->ops->free(d);
}
cpt_decoder_io *cpt_decoder_io_of(cpt_decoder *d) { return &d->io; }
int cpt_decoder_blocks(const cpt_decoder *d) { return d->n_blocks; }
int cpt_decoder_block_size(const cpt_decoder *d) { return d->block_size; }
int cpt_decoder_max_blocks(const cpt_decoder *d) { return d->max_blocks; }

void cpt_decoder_tables_changed(cpt_decoder *d) {
    if (d->ops->tables_changed) d->ops->tables_changed(d);
}

int cpt_decoder_copy_block(cpt_decoder *d, int src, int dst, cpt_err *err) {
    if (src < 0 || src >= d->n_blocks || dst < 0 || dst >= d->n_blocks || src == dst)
        return cpt_errf(err, "decoder: copy of block %d to %d (the pool has %d)", src, dst, d->n_blocks);
    return d->ops->copy_block(d, src, dst, err);
}

/* Rows [0, n): token, table and position in range, and the block holding the position is in the pool. */
static int check_rows(const cpt_decoder *d, int n, const char *call, cpt_err *err) {
    if (n < 1 || n > d->max_rows) return cpt_errf(err, "decoder %s: %d rows (1 .. %d)", call, n, d->max_rows);
    const int V = d->m->cfg.vocab_size;
    const cpt_decoder_io *io = &d->io;
    for (int k = 0; k < n; k++) {
        int32_t t = io->tab[k], p = io->pos[k];
        if (io->tok[k] < 0 || io->tok[k] >= V)
            return cpt_errf(err, "decoder %s: row %d: token %d outside the vocabulary [0, %d)", call, k, io->tok[k], V);
        if (t < 0 || t >= d->n_tables) return cpt_errf(err, "decoder %s: row %d: table %d of %d", call, k, t, d->n_tables);
        if (p < 0 || p >= d->max_blocks * d->block_size)
            return cpt_errf(err, "decoder %s: row %d: position %d outside the context of %d", call, k, p,
                            d->max_blocks * d->block_size);
        int32_t b = io->tables[(size_t)t * d->max_blocks + p / d->block_size];
        if (b < 0 || b >= d->n_blocks)
            return cpt_errf(err, "decoder %s: row %d: table %d holds block %d at position %d (the pool has %d)", call,
                            k, t, b, p, d->n_blocks);
    }
    return 0;
}

static int check_draws(const cpt_decoder *d, int n, int logits_rows, const char *call, cpt_err *err) {
    for (int k = 0; k < n; k++) {
        const cpt_sample_row *r = &d->io.rows[k];
        if (r->logits_row < 0 || r->logits_row >= logits_rows)
            return cpt_errf(err, "decoder %s: draw %d reads logits row %d of %d", call, k, r->logits_row, logits_rows);
    }
    return 0;
}

int cpt_decoder_prefill(cpt_decoder *d, int n, int n_out, cpt_err *err) {
    if (check_rows(d, n, "prefill", err)) return -1;
    if (n_out < 0 || n_out > n) return cpt_errf(err, "decoder prefill: %d logits rows of %d rows", n_out, n);
    for (int k = 0; k < n_out; k++)
        if (d->io.out[k] < 0 || d->io.out[k] >= n || d->io.save_to[k] < 0 || d->io.save_to[k] >= d->saved_rows)
            return cpt_errf(err, "decoder prefill: output %d is row %d to saved row %d (%d rows, %d saved rows)", k,
                            d->io.out[k], d->io.save_to[k], n, d->saved_rows);
    return d->ops->prefill(d, n, n_out, err);
}

int cpt_decoder_sample_saved(cpt_decoder *d, int n, cpt_err *err) {
    if (n < 1 || n > d->max_rows) return cpt_errf(err, "decoder sample_saved: %d draws (1 .. %d)", n, d->max_rows);
    if (check_draws(d, n, d->saved_rows, "sample_saved", err)) return -1;
    return d->ops->sample_saved(d, n, err);
}

int cpt_decoder_step(cpt_decoder *d, int n, cpt_err *err) {
    if (n > d->n_tables) return cpt_errf(err, "decoder step: %d rows for %d tables", n, d->n_tables);
    if (check_rows(d, n, "step", err) || check_draws(d, n, n, "step", err)) return -1;
    return d->ops->step(d, n, err);
}

int cpt_decoder_graphs(const cpt_decoder *d) { return d->ops->graphs ? d->ops->graphs(d) : 0; }

double cpt_decoder_replay_s(cpt_decoder *d, int reps, cpt_err *err) {
    if (!d->ops->replay_s) {
        cpt_errf(err, "decoder: the %s backend has no step graphs to replay", d->m->be->name);
        return -1;
    }
    return d->ops->replay_s(d, reps, err);
}
