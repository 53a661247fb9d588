/* The generation engine (rollout/engine.h): slots, the KV pool's blocks (free stack, reference counts, shared
 * prompt blocks, copy-on-write), admission, chunked prefill and decode steps, over model/decoder.h. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "rollout/engine.h"

typedef struct slot {
    gen_req *r; /* NULL: free */
    int sample;
    int len;         /* positions in the cache */
    int32_t pending; /* the last generated token, not yet in the cache */
    int nb;          /* blocks in the slot's table */
    int need;        /* blocks reserved for it */
    int wait_prefill; /* admitted with its request's prefill in the same round: shares the blocks after it */
    int recompute;    /* re-admitted after a preemption: its prompt and tokens so far run as a prefill */
    int from;         /* the first position its prefill writes (a recompute over its request's held prompt) */
    long seq;         /* admission order: preemption takes the newest first */
} slot;

/* A preempted sample waiting to be recomputed. */
typedef struct preempted {
    gen_req *r;
    int sample;
} preempted;

struct cpt_engine {
    cpt_model *m;
    cpt_decoder *d;
    cpt_decoder_io *io;
    const cpt_tokenizer *tok;
    int V, n_slots, max_len, R; /* R: most rows of a decoder call */
    /* the block pool */
    int block_size, max_blocks, total_blocks;
    int *refcnt, *free_stack, n_free, reserved;
    int tables_dirty;
    int reserve_full, reserve; /* admission: reserve whole completions, or a prompt and `reserve` blocks */
    long admit_seq;
    preempted *pre; /* preempted samples, the next to re-admit first */
    int n_pre, cap_pre;
    int *plog_free, n_plog_free; /* saved logits rows */
    /* requests (submission order) and slots */
    gen_req **reqs;
    int n_reqs, cap_reqs;
    int64_t next_id;
    slot *slots;
    int *new_slot, *pre_slot, *prog;
    char *tail;
    size_t tail_cap;
    cpt_engine_stats st;
};

/* ---- blocks ---------------------------------------------------------------------------------------------- */

static int blocks_for(const cpt_engine *e, int positions) { return (positions + e->block_size - 1) / e->block_size; }

/* Blocks a sample of r may fill: its prompt and completion, counted without sharing. */
static int need_of(const cpt_engine *e, const gen_req *r) {
    int n = r->n_prompt + r->max_new;
    return blocks_for(e, n < e->max_len ? n : e->max_len);
}

static int32_t *table(cpt_engine *e, int s) { return e->io->tables + (size_t)s * e->max_blocks; }

static int block_alloc(cpt_engine *e, cpt_err *err) {
    if (!e->n_free) return cpt_errf(err, "engine: KV pool exhausted (%d blocks); reservation bug", e->total_blocks);
    int b = e->free_stack[--e->n_free];
    e->refcnt[b] = 1;
    return b;
}

static void block_decref(cpt_engine *e, int b) {
    if (--e->refcnt[b] == 0) e->free_stack[e->n_free++] = b;
}

static void slot_release(cpt_engine *e, int s) {
    slot *sl = &e->slots[s];
    int32_t *tb = table(e, s);
    for (int i = 0; i < sl->nb; i++) block_decref(e, tb[i]);
    e->reserved -= sl->need;
    memset(sl, 0, sizeof *sl);
}

static void req_release_prompt(cpt_engine *e, gen_req *r) {
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
static void share_prompt(cpt_engine *e, int s, gen_req *r) {
    slot *sl = &e->slots[s];
    int32_t *tb = table(e, s);
    for (int i = 0; i < r->n_pblocks; i++) {
        tb[i] = r->pblocks[i];
        e->refcnt[r->pblocks[i]]++;
    }
    sl->nb = r->n_pblocks;
    sl->len = r->n_prompt;
    e->tables_dirty = 1;
    e->st.shared_prefills++;
}

/* Room for the position the slot writes next: a fresh block at a block boundary, or a private copy of a shared,
 * partly filled last block (copy-on-write: the decoder copies it before the step's forward). */
static int ensure_block(cpt_engine *e, int s, cpt_err *err) {
    slot *sl = &e->slots[s];
    int32_t *tb = table(e, s);
    int bi = sl->len / e->block_size;
    if (bi >= e->max_blocks) return cpt_errf(err, "engine: slot %d past the context of %d", s, e->max_len);
    if (bi == sl->nb) {
        int b = block_alloc(e, err);
        if (b < 0) return -1;
        tb[sl->nb++] = b;
        e->tables_dirty = 1;
    } else if (e->refcnt[tb[bi]] > 1) {
        int b = block_alloc(e, err);
        if (b < 0 || cpt_decoder_copy_block(e->d, tb[bi], b, err)) return -1;
        block_decref(e, tb[bi]);
        tb[bi] = b;
        e->tables_dirty = 1;
    }
    return 0;
}

static void tables_sync(cpt_engine *e) {
    if (!e->tables_dirty) return;
    cpt_decoder_tables_changed(e->d);
    e->tables_dirty = 0;
}

/* ---- samples --------------------------------------------------------------------------------------------- */

static void fill_row(cpt_sample_row *row, const gen_req *r, int logits_row, int sample, int step) {
    memset(row, 0, sizeof *row);
    row->seed = r->seed;
    row->logits_row = logits_row;
    row->top_k = r->sp.top_k;
    /* a temperature so small that 1/T overflows samples as its limit, greedy (both devices' samplers) */
    row->temperature = isinf(1.0f / r->sp.temperature) ? 0.0f : r->sp.temperature;
    row->top_p = r->sp.top_p;
    row->min_p = r->sp.min_p;
    row->sample = (uint32_t)sample;
    row->step = (uint32_t)step;
}

/* Records the slot's new token; ends the sample on a stop rule. 1: the slot became free, 0: goes on, -1: error. */
static int advance(cpt_engine *e, int si, int32_t tok, float lp, cpt_err *err) {
    slot *sl = &e->slots[si];
    gen_req *r = sl->r;
    if (tok < 0 || tok >= e->V) return cpt_errf(err, "engine: sampled token %d outside [0, %d)", tok, e->V);
    if (cpt_gen_req_append(r, sl->sample, tok, lp, err)) return -1;
    e->st.generated_tokens++;
    cpt_gen_sample *s = &r->samples[sl->sample];
    int stop = cpt_gen_req_stopped(r, sl->sample, e->tok, &e->tail, &e->tail_cap);
    if (stop || s->n_tokens >= r->max_new) {
        s->finish = stop ? CPT_FINISH_STOP : CPT_FINISH_LENGTH;
        r->done_samples++;
        r->live--;
        slot_release(e, si);
        return 1;
    }
    sl->pending = tok;
    return 0;
}

/* ---- admission and prefill ------------------------------------------------------------------------------- */

static gen_req *next_waiting(const cpt_engine *e) {
    for (int i = 0; i < e->n_reqs; i++)
        if (e->reqs[i]->next_sample < e->reqs[i]->n_samples) return e->reqs[i];
    return NULL;
}

/* Positions a slot's prefill writes: its prompt, or for a recompute the prompt and every generated token but the
 * last (that one is the pending token of the next step, as if never preempted). */
static int prefill_len(const slot *sl) {
    return sl->r->n_prompt + (sl->recompute ? sl->r->samples[sl->sample].n_tokens - 1 : 0);
}

static int32_t seq_token(const slot *sl, int p) {
    const gen_req *r = sl->r;
    return p < r->n_prompt ? r->prompt[p] : r->samples[sl->sample].tokens[p - r->n_prompt];
}

/* Runs the prefills of the slots pre_slot[0..n) (their blocks already in their tables) in calls of at most R rows;
 * each prompt's last logits go to its request's saved row; then the request takes its references to the blocks.
 * A recomputed sample saves no logits: it continues from its pending token. */
static int prefill(cpt_engine *e, int n, cpt_err *err) {
    cpt_decoder_io *io = e->io;
    for (int k = 0; k < n; k++) e->prog[k] = e->slots[e->pre_slot[k]].from;
    for (;;) {
        int nt = 0, no = 0;
        for (int k = 0; k < n && nt < e->R; k++) {
            int s = e->pre_slot[k];
            const slot *sl = &e->slots[s];
            int len = prefill_len(sl);
            int left = len - e->prog[k];
            if (left <= 0) continue;
            int take = left < e->R - nt ? left : e->R - nt;
            for (int j = 0; j < take; j++) {
                io->tok[nt + j] = seq_token(sl, e->prog[k] + j);
                io->pos[nt + j] = e->prog[k] + j;
                io->tab[nt + j] = s;
            }
            e->prog[k] += take;
            nt += take;
            if (sl->recompute) e->st.recomputed_tokens += take;
            if (e->prog[k] == len && !sl->recompute) {
                io->out[no] = nt - 1;
                io->save_to[no++] = sl->r->plog_row;
            }
        }
        if (!nt) break;
        tables_sync(e);
        if (cpt_decoder_prefill(e->d, nt, no, err)) return -1;
        e->st.prefill_tokens += nt;
    }
    for (int k = 0; k < n; k++) {
        int s = e->pre_slot[k];
        slot *sl = &e->slots[s];
        gen_req *r = sl->r;
        if (sl->recompute) {
            const cpt_gen_sample *smp = &r->samples[sl->sample];
            sl->len = prefill_len(sl);
            sl->pending = smp->tokens[smp->n_tokens - 1];
            sl->recompute = 0;
            continue;
        }
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

/* Takes slot s for the next sample of r (its reservation already counted). */
static int admit_one(cpt_engine *e, int s, gen_req *r, int need, int hold, int *n_pre, cpt_err *err) {
    slot *sl = &e->slots[s];
    memset(sl, 0, sizeof *sl);
    sl->r = r;
    sl->sample = r->next_sample++;
    sl->need = need;
    sl->seq = e->admit_seq++;
    r->live++;
    if (r->held) {
        if (r->prefilling) sl->wait_prefill = 1;
        else share_prompt(e, s, r);
        return 0;
    }
    /* the request's first sample: its slot gets fresh blocks for the prompt and runs the prefill */
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
        sl->nb++;
    }
    e->tables_dirty = 1;
    e->pre_slot[(*n_pre)++] = s;
    return 0;
}

/* Drops the prompt blocks held by a request with none of its samples running (its next sample prefills again).
 * 1: one was dropped. */
static int release_idle_prompt(cpt_engine *e) {
    for (int i = 0; i < e->n_reqs; i++) {
        gen_req *r = e->reqs[i];
        if (r->held && !r->live && !r->prefilling) {
            req_release_prompt(e, r);
            return 1;
        }
    }
    return 0;
}

/* Blocks a preempted sample's re-admission takes (at most): its whole recompute, or when its request still holds
 * the prompt, the blocks after the prompt's full ones. */
static int recompute_blocks(const cpt_engine *e, const gen_req *r, int len) {
    return blocks_for(e, len) - (r->held && !r->prefilling ? r->n_prompt / e->block_size : 0);
}

/* Takes slot s for the preempted sample at the front of the queue: fresh blocks for its prompt and tokens so far,
 * recomputed by the round's prefill. */
static int admit_recompute(cpt_engine *e, int s, int *n_pre, cpt_err *err) {
    preempted p = e->pre[0];
    memmove(e->pre, e->pre + 1, sizeof *e->pre * (size_t)(--e->n_pre));
    slot *sl = &e->slots[s];
    memset(sl, 0, sizeof *sl);
    sl->r = p.r;
    sl->sample = p.sample;
    sl->recompute = 1;
    sl->seq = e->admit_seq++;
    p.r->live++;
    int len = prefill_len(sl);
    int32_t *tb = table(e, s);
    gen_req *r = p.r;
    if (r->held && !r->prefilling) { /* the prompt is still in the pool: only the tokens run again */
        for (int i = 0; i < r->n_pblocks; i++) {
            tb[i] = r->pblocks[i];
            e->refcnt[r->pblocks[i]]++;
        }
        sl->nb = r->n_pblocks;
        sl->from = r->n_prompt;
        if (len > r->n_prompt && r->n_prompt % e->block_size) { /* copy-on-write of the partly filled one */
            int b = block_alloc(e, err);
            if (b < 0 || cpt_decoder_copy_block(e->d, tb[sl->nb - 1], b, err)) return -1;
            block_decref(e, tb[sl->nb - 1]);
            tb[sl->nb - 1] = b;
        }
    }
    while (sl->nb < blocks_for(e, len)) {
        int b = block_alloc(e, err);
        if (b < 0) return -1;
        tb[sl->nb++] = b;
    }
    e->tables_dirty = 1;
    e->pre_slot[(*n_pre)++] = s;
    return 0;
}

/* Fills free slots with waiting samples, preempted ones first: reserve_full admits a sample while the pool can hold
 * its whole completion; otherwise while the free blocks hold its prompt (unless shared) or its recompute, plus
 * `reserve` blocks for each sample admitted in the round. One batched prefill for the new prompts and recomputes,
 * then each new sample's first token from its prompt's saved logits. Repeats while a sample finishing on its first
 * token frees a slot again. */
static int admit(cpt_engine *e, cpt_err *err) {
    for (;;) {
        int n_new = 0, n_pre = 0, promised = 0, running = cpt_engine_active(e);
        for (int s = 0; s < e->n_slots; s++) {
            if (e->slots[s].r) continue;
            /* alone, a sample needs no reserve: it takes blocks as it goes (make_room frees idle prompts) */
            int reserve = running ? e->reserve : 0;
            if (e->n_pre) {
                slot probe = {.r = e->pre[0].r, .sample = e->pre[0].sample, .recompute = 1};
                int want = recompute_blocks(e, probe.r, prefill_len(&probe)) + reserve + promised;
                while (!running && want > e->n_free && release_idle_prompt(e)) {}
                if (want > e->n_free) break;
                promised += reserve;
                running++;
                if (admit_recompute(e, s, &n_pre, err)) return -1;
                continue;
            }
            gen_req *r = next_waiting(e);
            if (!r) break;
            if (!r->held && e->n_plog_free == 0) break;
            int need = 0, hold = 0;
            if (e->reserve_full) {
                hold = r->held || r->n_samples == 1 ? 0 : blocks_for(e, r->n_prompt);
                need = need_of(e, r);
                if (e->reserved + need + hold > e->total_blocks) break; /* wait for blocks to free */
                e->reserved += need + hold;
            } else {
                int want;
                for (;;) { /* releasing r's own idle prompt makes r prefill again: count it anew */
                    want = (r->held ? 0 : blocks_for(e, r->n_prompt)) + reserve + promised;
                    if (running || want <= e->n_free || !release_idle_prompt(e)) break;
                }
                if (want > e->n_free) break;
                promised += reserve;
            }
            running++;
            if (admit_one(e, s, r, need, hold, &n_pre, err)) return -1;
            e->new_slot[n_new++] = s;
        }
        if (n_pre && prefill(e, n_pre, err)) return -1;
        if (!n_new) return 0;
        for (int k = 0; k < n_new; k++) {
            slot *sl = &e->slots[e->new_slot[k]];
            if (sl->wait_prefill) {
                share_prompt(e, e->new_slot[k], sl->r);
                sl->wait_prefill = 0;
            }
            fill_row(&e->io->rows[k], sl->r, sl->r->plog_row, sl->sample, 0);
        }
        if (cpt_decoder_sample_saved(e->d, n_new, err)) return -1;
        int freed = 0;
        for (int k = 0; k < n_new; k++) {
            int rc = advance(e, e->new_slot[k], e->io->out_tok[k], e->io->out_lp[k], err);
            if (rc < 0) return -1;
            freed += rc;
        }
        for (int i = 0; i < e->n_reqs; i++)
            if (e->reqs[i]->held && e->reqs[i]->next_sample == e->reqs[i]->n_samples) req_release_prompt(e, e->reqs[i]);
        if (!freed) return 0;
    }
}

/* ---- steps ------------------------------------------------------------------------------------------------- */

/* 1 when the slot's next position needs a block from the pool (a fresh one, or a copy of a shared one). */
static int wants_block(cpt_engine *e, int s) {
    const slot *sl = &e->slots[s];
    int bi = sl->len / e->block_size;
    return bi == sl->nb || (bi < sl->nb && e->refcnt[table(e, s)[bi]] > 1);
}

/* Frees slot s's blocks (shared prompt blocks stay while others hold them) and queues its sample at the front of
 * the waiting samples, with its tokens so far. */
static int preempt(cpt_engine *e, int s, cpt_err *err) {
    if (e->n_pre == e->cap_pre) {
        int cap = e->cap_pre ? 2 * e->cap_pre : 16;
        preempted *p = realloc(e->pre, sizeof *p * (size_t)cap);
        if (!p) return cpt_errf(err, "engine: out of memory");
        e->pre = p;
        e->cap_pre = cap;
    }
    memmove(e->pre + 1, e->pre, sizeof *e->pre * (size_t)e->n_pre++);
    e->pre[0] = (preempted){e->slots[s].r, e->slots[s].sample};
    e->slots[s].r->live--;
    slot_release(e, s);
    e->st.preemptions++;
    return 0;
}

/* The pool is empty and slot s needs a block: frees blocks until it fits. First the newest running samples (never
 * the last one running; s itself when it is the newest), then the prompts held by requests with none of their
 * samples running (their next sample prefills again). 1: s was preempted, 0: s can take its block. */
static int make_room(cpt_engine *e, int s, cpt_err *err) {
    while (e->n_free == 0) {
        int victim = -1, running = 0;
        for (int t = 0; t < e->n_slots; t++) {
            if (!e->slots[t].r) continue;
            running++;
            if (victim < 0 || e->slots[t].seq > e->slots[victim].seq) victim = t;
        }
        if (running > 1) {
            if (preempt(e, victim, err)) return -1;
            if (victim == s) return 1;
            continue;
        }
        if (!release_idle_prompt(e))
            return cpt_errf(err, "engine: KV pool exhausted (%d blocks) with one sample running", e->total_blocks);
    }
    return 0;
}

int cpt_engine_step(cpt_engine *e, cpt_err *err) {
    if (admit(e, err)) return -1;
    cpt_decoder_io *io = e->io;
    int n = 0;
    int *act = e->new_slot;
    for (int s = 0; s < e->n_slots; s++) {
        if (!e->slots[s].r) continue;
        if (!e->reserve_full && wants_block(e, s)) {
            int rc = make_room(e, s, err);
            if (rc < 0) return -1;
            if (rc) continue;
        }
        if (ensure_block(e, s, err)) return -1;
    }
    for (int s = 0; s < e->n_slots; s++)
        if (e->slots[s].r) act[n++] = s;
    if (!n) return 0;
    for (int k = 0; k < n; k++) {
        slot *sl = &e->slots[act[k]];
        io->tok[k] = sl->pending;
        io->pos[k] = sl->len;
        io->tab[k] = act[k];
        fill_row(&io->rows[k], sl->r, k, sl->sample, sl->r->samples[sl->sample].n_tokens);
    }
    tables_sync(e);
    if (cpt_decoder_step(e->d, n, err)) return -1;
    e->st.decode_steps++;
    e->st.slot_steps += n;
    int active = n;
    for (int k = 0; k < n; k++) {
        e->slots[act[k]].len++;
        int rc = advance(e, act[k], io->out_tok[k], io->out_lp[k], err);
        if (rc < 0) return -1;
        active -= rc;
    }
    return active;
}

/* ---- creation and the request interface -------------------------------------------------------------------- */

cpt_engine *cpt_engine_new_tuned(cpt_model *m, const cpt_engine_opts *o, const cpt_decoder_tuning *tuning,
                                 cpt_err *err) {
    const cpt_model_config *c = cpt_model_cfg(m);
    cpt_engine_opts none = {0};
    if (!o) o = &none;
    if (o->slots < 0 || o->max_len < 0 || o->prefill_chunk < 0 || o->block_size < 0 || o->kv_blocks < 0 ||
        o->kv_reserve_blocks < 0 || o->gpu_memory_fraction < 0 || o->gpu_memory_fraction > 1 ||
        (o->kv_admission != CPT_KV_ADMIT_OPTIMISTIC && o->kv_admission != CPT_KV_ADMIT_RESERVE_FULL)) {
        cpt_errf(err, "engine: slots %d, max_len %d, prefill_chunk %d, block_size %d, kv_blocks %d, "
                      "kv_reserve_blocks %d: none may be negative; gpu_memory_fraction %g in [0, 1], "
                      "kv_admission %d a CPT_KV_ADMIT_*",
                 o->slots, o->max_len, o->prefill_chunk, o->block_size, o->kv_blocks, o->kv_reserve_blocks,
                 (double)o->gpu_memory_fraction, o->kv_admission);
        return NULL;
    }
    cpt_engine *e = calloc(1, sizeof *e);
    if (!e) {
        cpt_errf(err, "engine: out of memory");
        return NULL;
    }
    e->m = m;
    e->tok = o->tok;
    e->V = c->vocab_size;
    e->n_slots = o->slots > 0 ? o->slots : 8;
    e->max_len = o->max_len > 0 ? o->max_len : c->max_position_embeddings;
    if (e->max_len < 2) e->max_len = 2;
    int chunk = o->prefill_chunk > 0 ? o->prefill_chunk : 2048;
    e->R = chunk > e->n_slots ? chunk : e->n_slots;
    cpt_decoder_opts dop = {.n_tables = e->n_slots, .max_len = e->max_len, .block_size = o->block_size,
                            .n_blocks = o->kv_blocks, .max_rows = e->R, .saved_rows = e->n_slots + 1,
                            .mem_fraction = o->gpu_memory_fraction};
    if (!(e->d = cpt_decoder_new(m, &dop, tuning, err))) goto fail;
    e->io = cpt_decoder_io_of(e->d);
    e->block_size = cpt_decoder_block_size(e->d);
    e->max_blocks = cpt_decoder_max_blocks(e->d);
    e->total_blocks = cpt_decoder_blocks(e->d);
    if (e->total_blocks < e->max_blocks) {
        cpt_errf(err, "engine: a KV pool of %d blocks cannot hold one context of %d positions (%d blocks of %d)",
                 e->total_blocks, e->max_len, e->max_blocks, e->block_size);
        goto fail;
    }
    e->refcnt = calloc((size_t)e->total_blocks, sizeof *e->refcnt);
    e->free_stack = malloc(sizeof *e->free_stack * (size_t)e->total_blocks);
    e->plog_free = malloc(sizeof *e->plog_free * (size_t)(e->n_slots + 1));
    e->slots = calloc((size_t)e->n_slots, sizeof *e->slots);
    e->new_slot = malloc(sizeof(int) * (size_t)e->n_slots);
    e->pre_slot = malloc(sizeof(int) * (size_t)e->n_slots);
    e->prog = malloc(sizeof(int) * (size_t)e->n_slots);
    if (!e->refcnt || !e->free_stack || !e->plog_free || !e->slots || !e->new_slot || !e->pre_slot || !e->prog) {
        cpt_errf(err, "engine: out of memory for %d slots", e->n_slots);
        goto fail;
    }
    for (int b = e->total_blocks - 1; b >= 0; b--) e->free_stack[e->n_free++] = b; /* block 0 first */
    for (int i = e->n_slots; i >= 0; i--) e->plog_free[e->n_plog_free++] = i;
    e->tables_dirty = 1;
    e->reserve_full = o->kv_admission == CPT_KV_ADMIT_RESERVE_FULL;
    e->reserve = o->kv_reserve_blocks > 0 ? o->kv_reserve_blocks : 1;
    return e;
fail:
    cpt_engine_free(e);
    return NULL;
}

cpt_engine *cpt_engine_new(cpt_model *m, const cpt_engine_opts *o, cpt_err *err) {
    return cpt_engine_new_tuned(m, o, NULL, err);
}

void cpt_engine_clear(cpt_engine *e) {
    for (int s = 0; e->slots && s < e->n_slots; s++)
        if (e->slots[s].r) slot_release(e, s);
    for (int i = 0; i < e->n_reqs; i++) {
        req_release_prompt(e, e->reqs[i]);
        cpt_gen_req_free(e->reqs[i]);
    }
    e->n_reqs = 0;
    e->n_pre = 0;
}

void cpt_engine_free(cpt_engine *e) {
    if (!e) return;
    if (e->refcnt && e->plog_free) cpt_engine_clear(e);
    free(e->reqs);
    free(e->pre);
    cpt_decoder_free(e->d);
    free(e->refcnt);
    free(e->free_stack);
    free(e->plog_free);
    free(e->slots);
    free(e->new_slot);
    free(e->pre_slot);
    free(e->prog);
    free(e->tail);
    free(e);
}

int64_t cpt_engine_submit(cpt_engine *e, const cpt_gen_request *g, cpt_err *err) {
    gen_req *r = cpt_gen_req_new(g, e->next_id, e->V, e->max_len, e->tok != NULL, err);
    if (!r) return -1;
    int need = need_of(e, r) + (g->n_samples > 1 ? blocks_for(e, r->n_prompt) : 0);
    if (need > e->total_blocks) {
        cpt_gen_req_free(r);
        return cpt_errf(err, "request: needs %d KV blocks, the pool has %d", need, e->total_blocks);
    }
    if (e->n_reqs == e->cap_reqs) {
        int cap = e->cap_reqs ? 2 * e->cap_reqs : 16;
        gen_req **p = realloc(e->reqs, sizeof *p * (size_t)cap);
        if (!p) {
            cpt_gen_req_free(r);
            return cpt_errf(err, "engine: out of memory");
        }
        e->reqs = p;
        e->cap_reqs = cap;
    }
    e->reqs[e->n_reqs++] = r;
    return e->next_id++;
}

int cpt_engine_take(cpt_engine *e, cpt_gen_result *out) {
    for (int i = 0; i < e->n_reqs; i++) {
        gen_req *r = e->reqs[i];
        if (r->done_samples < r->n_samples) continue;
        cpt_gen_req_result(r, out);
        req_release_prompt(e, r);
        cpt_gen_req_free(r);
        memmove(e->reqs + i, e->reqs + i + 1, sizeof *e->reqs * (size_t)(e->n_reqs - i - 1));
        e->n_reqs--;
        return 1;
    }
    return 0;
}

int cpt_engine_active(const cpt_engine *e) {
    int n = 0;
    for (int s = 0; s < e->n_slots; s++) n += e->slots[s].r != NULL;
    return n;
}

int cpt_engine_idle(const cpt_engine *e) {
    for (int i = 0; i < e->n_reqs; i++)
        if (e->reqs[i]->done_samples < e->reqs[i]->n_samples) return 0;
    return 1;
}

int cpt_engine_waiting(const cpt_engine *e) {
    int n = 0;
    for (int i = 0; i < e->n_reqs; i++) n += e->reqs[i]->n_samples - e->reqs[i]->next_sample;
    return n + e->n_pre;
}

int cpt_engine_pending(const cpt_engine *e) { return e->n_reqs; }
int cpt_engine_slots(const cpt_engine *e) { return e->n_slots; }
const cpt_engine_stats *cpt_engine_get_stats(const cpt_engine *e) { return &e->st; }
int cpt_engine_kv_blocks(const cpt_engine *e) { return e->total_blocks; }
int cpt_engine_kv_free_blocks(const cpt_engine *e) { return e->n_free; }
cpt_decoder *cpt_engine_decoder(cpt_engine *e) { return e->d; }

int cpt_engine_generate(cpt_engine *e, const cpt_gen_request *reqs, int n, cpt_gen_result *results, cpt_err *err) {
    int64_t first = -1;
    for (int i = 0; i < n; i++) {
        int64_t id = cpt_engine_submit(e, &reqs[i], err);
        if (id < 0) return -1;
        if (i == 0) first = id;
        memset(&results[i], 0, sizeof results[i]);
    }
    int got = 0;
    while (got < n) {
        if (cpt_engine_idle(e) && !cpt_engine_pending(e)) return cpt_errf(err, "engine: requests lost");
        if (cpt_engine_step(e, err) < 0) return -1;
        cpt_gen_result r;
        while (cpt_engine_take(e, &r)) {
            int64_t k = r.id - first;
            if (k < 0 || k >= n) {
                cpt_gen_result_free(&r); /* a request submitted before this call: not ours to return */
                continue;
            }
            results[k] = r;
            got++;
        }
    }
    return 0;
}
