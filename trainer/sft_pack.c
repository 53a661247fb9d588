/* Tokenized SFT examples in memory, packing them into micro-batches, and the resumable data cursor. */
#include <stdlib.h>
#include <string.h>

#include "trainer/sft_data.h"

void cpt_sft_dataset_free(cpt_sft_dataset *ds) {
    for (size_t i = 0; i < ds->n; i++) {
        free(ds->ex[i].ids);
        free(ds->ex[i].mask);
    }
    free(ds->ex);
    memset(ds, 0, sizeof *ds);
}

int cpt_sft_dataset_add(cpt_sft_dataset *ds, const int32_t *ids, const uint8_t *mask, int n, int n_prompt,
                        int n_answer, int max_seq_len, cpt_err *err) {
    if (n > max_seq_len) {
        n = max_seq_len;
        ds->n_truncated++;
    }
    int loss = 0;
    for (int i = 1; i < n; i++) loss += mask[i] != 0;
    if (!loss) {
        ds->n_skipped++;
        return 0;
    }
    if ((ds->n & (ds->n - 1)) == 0) { /* grow at powers of two */
        cpt_sft_example *ne = realloc(ds->ex, (ds->n ? 2 * ds->n : 16) * sizeof *ne);
        if (!ne) return cpt_errf(err, "data: out of memory");
        ds->ex = ne;
    }
    cpt_sft_example *e = &ds->ex[ds->n];
    e->ids = malloc((size_t)n * sizeof *e->ids);
    e->mask = malloc((size_t)n);
    if (!e->ids || !e->mask) {
        free(e->ids);
        free(e->mask);
        return cpt_errf(err, "data: out of memory");
    }
    memcpy(e->ids, ids, (size_t)n * sizeof *ids);
    for (int i = 0; i < n; i++) e->mask[i] = mask[i] != 0;
    e->n = n;
    e->n_prompt = n_prompt < n ? n_prompt : n;
    e->n_answer = n_prompt + n_answer <= n ? n_answer : n - e->n_prompt;
    ds->n++;
    return 0;
}

void cpt_sft_batch_free(cpt_sft_batch *b) {
    free(b->tokens);
    free(b->seq_start);
    free(b->targets);
    memset(b, 0, sizeof *b);
}

static int batch_reserve(cpt_sft_batch *b, int tokens, int seqs, cpt_err *err) {
    if (tokens > b->cap_tokens) {
        int32_t *t = realloc(b->tokens, (size_t)tokens * sizeof *t);
        if (!t) return cpt_errf(err, "packing: out of memory");
        b->tokens = t;
        int32_t *g = realloc(b->targets, (size_t)tokens * sizeof *g);
        if (!g) return cpt_errf(err, "packing: out of memory");
        b->targets = g;
        b->cap_tokens = tokens;
    }
    if (seqs + 1 > b->cap_seqs) {
        int32_t *s = realloc(b->seq_start, (size_t)(seqs + 1) * sizeof *s);
        if (!s) return cpt_errf(err, "packing: out of memory");
        b->seq_start = s;
        b->cap_seqs = seqs + 1;
    }
    return 0;
}

static void batch_reset(cpt_sft_batch *b) {
    b->n_tokens = b->n_seqs = b->n_loss = 0;
    if (b->seq_start) b->seq_start[0] = 0;
}

static int batch_append(cpt_sft_batch *b, const cpt_sft_example *e, cpt_err *err) {
    if (batch_reserve(b, b->n_tokens + e->n, b->n_seqs + 1, err)) return -1;
    int base = b->n_tokens;
    b->seq_start[0] = 0;
    memcpy(b->tokens + base, e->ids, (size_t)e->n * sizeof *e->ids);
    for (int i = 0; i < e->n; i++) {
        int t = i + 1 < e->n && e->mask[i + 1] ? e->ids[i + 1] : -1;
        b->targets[base + i] = t;
        b->n_loss += t >= 0;
    }
    b->n_tokens += e->n;
    b->seq_start[++b->n_seqs] = b->n_tokens;
    return 0;
}

int cpt_sft_cursor_init(cpt_sft_cursor *c, const cpt_sft_dataset *ds, uint64_t seed, int shuffle, int64_t epoch,
                        int64_t index, cpt_err *err) {
    memset(c, 0, sizeof *c);
    if (ds->n == 0) return cpt_errf(err, "data: no usable examples");
    if (epoch < 0 || index < 0)
        return cpt_errf(err, "data cursor (epoch %lld, index %lld) is negative", (long long)epoch, (long long)index);
    /* index == n (a cursor saved right at the end of an epoch) is the start of the next one */
    if ((size_t)index == ds->n) {
        epoch++;
        index = 0;
    }
    c->ds = ds;
    if (cpt_data_order_init(&c->order, ds->n, seed, shuffle, err)) return -1;
    cpt_data_cursor at = {.epoch = (uint64_t)epoch, .index = (uint64_t)index};
    if (cpt_data_order_seek(&c->order, at, err)) {
        cpt_data_order_free(&c->order);
        return cpt_err_prefix(err, "data cursor");
    }
    return 0;
}

void cpt_sft_cursor_free(cpt_sft_cursor *c) {
    if (c->ds) cpt_data_order_free(&c->order);
    memset(c, 0, sizeof *c);
}

void cpt_sft_cursor_tell(const cpt_sft_cursor *c, int64_t *epoch, int64_t *index) {
    cpt_data_cursor at = cpt_data_order_tell(&c->order);
    *epoch = (int64_t)at.epoch;
    *index = (int64_t)at.index;
}

int cpt_sft_pack_next(cpt_sft_cursor *c, int budget, cpt_sft_batch *b, cpt_err *err) {
    if (batch_reserve(b, budget, 1, err)) return -1;
    batch_reset(b);
    for (;;) {
        cpt_data_cursor at = cpt_data_order_tell(&c->order);
        const cpt_sft_example *e = &c->ds->ex[cpt_data_order_at(&c->order, at.epoch, at.index)];
        if (e->n > budget) return cpt_errf(err, "packing: an example of %d tokens exceeds the budget of %d", e->n, budget);
        if (b->n_seqs > 0 && b->n_tokens + e->n > budget) return 0;
        if (batch_append(b, e, err)) return -1;
        cpt_data_order_next(&c->order);
    }
}

int cpt_sft_pack_range(const cpt_sft_dataset *ds, size_t first, size_t count, int budget, cpt_sft_batch *b,
                       cpt_err *err) {
    if (batch_reserve(b, budget, 1, err)) return -1;
    batch_reset(b);
    size_t i = 0;
    for (; i < count && first + i < ds->n; i++) {
        const cpt_sft_example *e = &ds->ex[first + i];
        if (e->n > budget) return cpt_errf(err, "packing: an example of %d tokens exceeds the budget of %d", e->n, budget);
        if (b->n_seqs > 0 && b->n_tokens + e->n > budget) break;
        if (batch_append(b, e, err)) return -1;
    }
    return (int)i;
}
