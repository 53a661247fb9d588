/* The generation engine (rollout/engine.h): requests, slots, the admission of waiting samples (with shared
 * prefill) and one batched decode step at a time. */
#include "rollout/engine.h"
#include "rollout/gen_engine.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct req {
    cpt_gen_req_head h; /* first: e->reqs holds these */
    int32_t *prompt;
    int n_prompt;
    int max_new;
    cpt_sample_params sp;
    uint64_t seed;
    cpt_gen_stops stops;
    float *prompt_logits; /* [V] after the prompt's last token, once prefilled */
    int prefilled;
    int live; /* samples now in slots */
} req;

typedef struct slot {
    req *r;  /* NULL: free */
    int sample;
    cpt_rng rng;
    int32_t pending; /* the last generated token, not yet in the cache */
} slot;

struct cpt_engine {
    cpt_model *m;
    const cpt_tokenizer *tok;
    int V, n_slots;
    cpt_kv_cache cache;
    cpt_decode_work work;
    cpt_sampler_work sw;
    slot *slots;
    cpt_gen_reqs reqs;
    int64_t next_id;
    float *logits; /* [slots, V] */
    int32_t *toks;
    int toks_cap;
    cpt_decode_seg *segs; /* [slots] */
    int *seg_slot;        /* [slots] */
    int *new_slot;        /* [slots] */
    int prefill_chunk;    /* most prompt tokens per decode call */
    int *prog;            /* [slots] prompt tokens of each prefill segment done */
    int *which;           /* [slots] the prefill segment of each piece of a call */
    cpt_decode_seg *piece; /* [slots] */
    int32_t *chunk;       /* [prefill_chunk] */
    char *tail;
    size_t tail_cap;
    cpt_engine_stats st;
};

static void samples_free(cpt_gen_sample *s, int n) {
    for (int i = 0; s && i < n; i++) {
        free(s[i].tokens);
        free(s[i].logprobs);
    }
    free(s);
}

void cpt_gen_result_free(cpt_gen_result *r) {
    samples_free(r->samples, r->n_samples);
    memset(r, 0, sizeof *r);
}

/* ---- the request list both engines keep ---- */

int cpt_gen_req_head_init(cpt_gen_req_head *h, int64_t id, const cpt_gen_request *g, cpt_err *err) {
    memset(h, 0, sizeof *h);
    h->id = id;
    h->tag = g->tag;
    h->n_samples = g->n_samples;
    h->samples = calloc((size_t)g->n_samples, sizeof *h->samples);
    h->cap = calloc((size_t)g->n_samples, sizeof *h->cap);
    if (h->samples && h->cap) return 0;
    cpt_gen_req_head_free(h);
    return cpt_errf(err, "engine: out of memory for a request");
}

void cpt_gen_req_head_free(cpt_gen_req_head *h) {
    samples_free(h->samples, h->n_samples);
    free(h->cap);
    h->samples = NULL;
    h->cap = NULL;
}

int cpt_gen_reqs_push(cpt_gen_reqs *l, cpt_gen_req_head *h, cpt_err *err) {
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 16;
        cpt_gen_req_head **p = realloc(l->r, sizeof *p * (size_t)cap);
        if (!p) return cpt_errf(err, "engine: out of memory");
        l->r = p;
        l->cap = cap;
    }
    l->r[l->n++] = h;
    return 0;
}

cpt_gen_req_head *cpt_gen_reqs_next_waiting(const cpt_gen_reqs *l) {
    for (int i = 0; i < l->n; i++)
        if (l->r[i]->next_sample < l->r[i]->n_samples) return l->r[i];
    return NULL;
}

cpt_gen_req_head *cpt_gen_reqs_take(cpt_gen_reqs *l, cpt_gen_result *out) {
    for (int i = 0; i < l->n; i++) {
        cpt_gen_req_head *h = l->r[i];
        if (h->done_samples < h->n_samples) continue;
        memset(out, 0, sizeof *out);
        out->tag = h->tag;
        out->id = h->id;
        out->n_samples = h->n_samples;
        out->samples = h->samples;
        h->samples = NULL;
        memmove(l->r + i, l->r + i + 1, sizeof *l->r * (size_t)(l->n - i - 1));
        l->n--;
        return h;
    }
    return NULL;
}

int cpt_gen_reqs_idle(const cpt_gen_reqs *l) {
    for (int i = 0; i < l->n; i++)
        if (l->r[i]->done_samples < l->r[i]->n_samples) return 0;
    return 1;
}

int cpt_gen_reqs_waiting(const cpt_gen_reqs *l) {
    int n = 0;
    for (int i = 0; i < l->n; i++) n += l->r[i]->n_samples - l->r[i]->next_sample;
    return n;
}

void cpt_gen_reqs_free(cpt_gen_reqs *l) {
    free(l->r);
    memset(l, 0, sizeof *l);
}

/* ---- the CPU engine ---- */

static void req_free(req *r) {
    if (!r) return;
    free(r->prompt);
    cpt_gen_stops_free(&r->stops);
    free(r->prompt_logits);
    cpt_gen_req_head_free(&r->h);
    free(r);
}

int cpt_sample_params_check(const cpt_sample_params *sp, cpt_err *err) {
    if (!(sp->temperature >= 0.0f && sp->temperature <= 100.0f))
        return cpt_errf(err, "sampling: temperature %g must be in [0, 100]", sp->temperature);
    if (sp->top_k < 0) return cpt_errf(err, "sampling: top_k %d must be >= 0", sp->top_k);
    if (!(sp->top_p > 0.0f && sp->top_p <= 1.0f)) return cpt_errf(err, "sampling: top_p %g must be in (0, 1]", sp->top_p);
    if (!(sp->min_p >= 0.0f && sp->min_p < 1.0f)) return cpt_errf(err, "sampling: min_p %g must be in [0, 1)", sp->min_p);
    return 0;
}

cpt_engine *cpt_engine_new(cpt_model *m, const cpt_engine_opts *o, cpt_err *err) {
    cpt_engine *e = calloc(1, sizeof *e);
    if (!e) {
        cpt_errf(err, "engine: out of memory");
        return NULL;
    }
    const cpt_model_config *c = cpt_model_cfg(m);
    e->m = m;
    e->tok = o ? o->tok : NULL;
    e->V = c->vocab_size;
    e->n_slots = o && o->slots > 0 ? o->slots : 8;
    int max_len = o && o->max_len > 0 ? o->max_len : c->max_position_embeddings;
    if (max_len < 2) max_len = 2;
    if (cpt_kv_cache_init(&e->cache, c, e->n_slots, max_len, err)) goto fail;
    e->slots = calloc((size_t)e->n_slots, sizeof *e->slots);
    e->logits = malloc(sizeof(float) * (size_t)e->n_slots * (size_t)e->V);
    e->segs = malloc(sizeof *e->segs * (size_t)e->n_slots);
    e->seg_slot = malloc(sizeof *e->seg_slot * (size_t)e->n_slots);
    e->new_slot = malloc(sizeof *e->new_slot * (size_t)e->n_slots);
    e->prefill_chunk = o && o->prefill_chunk > 0 ? o->prefill_chunk : 2048;
    if (e->prefill_chunk < e->n_slots) e->prefill_chunk = e->n_slots;
    e->prog = malloc(sizeof *e->prog * (size_t)e->n_slots);
    e->which = malloc(sizeof *e->which * (size_t)e->n_slots);
    e->piece = malloc(sizeof *e->piece * (size_t)e->n_slots);
    e->chunk = malloc(sizeof *e->chunk * (size_t)e->prefill_chunk);
    if (!e->slots || !e->logits || !e->segs || !e->seg_slot || !e->new_slot || !e->prog || !e->which || !e->piece || !e->chunk || cpt_sampler_work_init(&e->sw, e->V)) {
        cpt_errf(err, "engine: out of memory for %d slots", e->n_slots);
        goto fail;
    }
    return e;
fail:
    cpt_engine_free(e);
    return NULL;
}

void cpt_engine_clear(cpt_engine *e) {
    for (int i = 0; i < e->reqs.n; i++) req_free((req *)e->reqs.r[i]);
    e->reqs.n = 0;
    for (int s = 0; s < e->n_slots; s++) {
        e->slots[s].r = NULL;
        cpt_kv_cache_reset(&e->cache, s);
    }
}

void cpt_engine_free(cpt_engine *e) {
    if (!e) return;
    if (e->slots) cpt_engine_clear(e);
    cpt_gen_reqs_free(&e->reqs);
    cpt_kv_cache_free(&e->cache);
    cpt_decode_work_free(&e->work);
    cpt_sampler_work_free(&e->sw);
    free(e->slots);
    free(e->logits);
    free(e->toks);
    free(e->segs);
    free(e->seg_slot);
    free(e->new_slot);
    free(e->prog);
    free(e->which);
    free(e->piece);
    free(e->chunk);
    free(e->tail);
    free(e);
}

int cpt_gen_request_check(const cpt_gen_request *g, int V, int max_len, int have_tok, cpt_err *err) {
    if (!g->prompt || g->n_prompt < 1) return cpt_errf(err, "request: empty prompt");
    if (g->n_prompt > max_len)
        return cpt_errf(err, "request: prompt of %d tokens exceeds the context of %d", g->n_prompt, max_len);
    for (int i = 0; i < g->n_prompt; i++)
        if (g->prompt[i] < 0 || g->prompt[i] >= V)
            return cpt_errf(err, "request: prompt token %d at %d is outside the vocabulary [0, %d)", g->prompt[i], i, V);
    if (g->n_samples < 1 || g->n_samples > CPT_MAX_SAMPLES)
        return cpt_errf(err, "request: n_samples %d must be in [1, %d]", g->n_samples, CPT_MAX_SAMPLES);
    if (g->max_new_tokens < 1) return cpt_errf(err, "request: max_new_tokens %d must be >= 1", g->max_new_tokens);
    if (cpt_sample_params_check(&g->sp, err)) return -1;
    if (g->n_stop_strs > 0 && !have_tok) return cpt_errf(err, "request: stop strings need a tokenizer");
    if (g->n_stop_ids < 0 || g->n_stop_strs < 0) return cpt_errf(err, "request: negative stop list length");
    return 0;
}

int cpt_gen_stops_copy(cpt_gen_stops *s, const cpt_gen_request *g, cpt_err *err) {
    s->ids = malloc(sizeof(int32_t) * (size_t)(g->n_stop_ids + 1));
    s->strs = calloc((size_t)g->n_stop_strs + 1, sizeof(char *));
    s->lens = calloc((size_t)g->n_stop_strs + 1, sizeof(size_t));
    if (!s->ids || !s->strs || !s->lens) {
        cpt_gen_stops_free(s);
        return cpt_errf(err, "engine: out of memory for a request");
    }
    if (g->n_stop_ids) memcpy(s->ids, g->stop_ids, sizeof(int32_t) * (size_t)g->n_stop_ids);
    s->n_ids = g->n_stop_ids;
    for (int i = 0; i < g->n_stop_strs; i++) {
        size_t n = strlen(g->stop_strs[i]);
        if (n == 0) {
            cpt_gen_stops_free(s);
            return cpt_errf(err, "request: stop string %d is empty", i);
        }
        s->strs[i] = malloc(n + 1);
        if (!s->strs[i]) {
            cpt_gen_stops_free(s);
            return cpt_errf(err, "engine: out of memory");
        }
        memcpy(s->strs[i], g->stop_strs[i], n + 1);
        s->lens[i] = n;
        if (n > s->max_len) s->max_len = n;
        s->n_strs = i + 1;
    }
    return 0;
}

void cpt_gen_stops_free(cpt_gen_stops *s) {
    free(s->ids);
    for (int i = 0; s->strs && i < s->n_strs; i++) free(s->strs[i]);
    free(s->strs);
    free(s->lens);
    memset(s, 0, sizeof *s);
}

int64_t cpt_engine_submit(cpt_engine *e, const cpt_gen_request *g, cpt_err *err) {
    if (cpt_gen_request_check(g, e->V, e->cache.max_len, e->tok != NULL, err)) return -1;
    req *r = calloc(1, sizeof *r);
    if (!r) return cpt_errf(err, "engine: out of memory");
    if (cpt_gen_req_head_init(&r->h, e->next_id, g, err)) {
        free(r);
        return -1;
    }
    r->n_prompt = g->n_prompt;
    /* the context bounds the completion: n_prompt + n_generated - 1 positions are fed */
    int room = e->cache.max_len - g->n_prompt + 1;
    r->max_new = g->max_new_tokens < room ? g->max_new_tokens : room;
    r->sp = g->sp;
    r->seed = g->seed;
    r->prompt = malloc(sizeof(int32_t) * (size_t)g->n_prompt);
    r->prompt_logits = malloc(sizeof(float) * (size_t)e->V);
    if (!r->prompt || !r->prompt_logits) {
        req_free(r);
        return cpt_errf(err, "engine: out of memory for a request");
    }
    if (cpt_gen_stops_copy(&r->stops, g, err) || cpt_gen_reqs_push(&e->reqs, &r->h, err)) {
        req_free(r);
        return -1;
    }
    memcpy(r->prompt, g->prompt, sizeof(int32_t) * (size_t)g->n_prompt);
    return e->next_id++;
}

/* ---- per-token bookkeeping -------------------------------------------------------------------------------- */

int cpt_gen_sample_append(cpt_gen_sample *s, int *cap, int32_t tok, float lp, cpt_err *err) {
    if (s->n_tokens == *cap) {
        int c = *cap ? 2 * *cap : 32;
        int32_t *t = realloc(s->tokens, sizeof(int32_t) * (size_t)c);
        if (t) s->tokens = t;
        float *l = realloc(s->logprobs, sizeof(float) * (size_t)c);
        if (l) s->logprobs = l;
        if (!t || !l) return cpt_errf(err, "engine: out of memory for a completion");
        *cap = c;
    }
    s->tokens[s->n_tokens] = tok;
    s->logprobs[s->n_tokens] = lp;
    s->n_tokens++;
    return 0;
}

int cpt_gen_stops_hit(const cpt_gen_stops *st, const cpt_tokenizer *tok, const cpt_gen_sample *s, char **tail,
                      size_t *tail_cap) {
    if (s->n_tokens < 1) return 0;
    for (int i = 0; i < st->n_ids; i++)
        if (s->tokens[s->n_tokens - 1] == st->ids[i]) return 1;
    if (!st->n_strs) return 0;
    size_t total = 0, n;
    int k = s->n_tokens;
    while (k > 0 && total < st->max_len) {
        const char *b = cpt_tokenizer_id_bytes(tok, s->tokens[k - 1], &n);
        total += b ? n : 0;
        k--;
    }
    if (total + 1 > *tail_cap) {
        char *p = realloc(*tail, total + 64);
        if (!p) return 0;
        *tail = p;
        *tail_cap = total + 64;
    }
    size_t at = 0;
    for (int i = k; i < s->n_tokens; i++) {
        const char *b = cpt_tokenizer_id_bytes(tok, s->tokens[i], &n);
        if (b && n) memcpy(*tail + at, b, n), at += n;
    }
    for (int i = 0; i < st->n_strs; i++)
        if (st->lens[i] <= at && memcmp(*tail + at - st->lens[i], st->strs[i], st->lens[i]) == 0) return 1;
    return 0;
}

/* Samples the next token of the slot from logits, records it, and ends the sample when a stop rule fires.
 * Returns 1 when the slot became free, 0 when it goes on, -1 on error. */
static int advance(cpt_engine *e, int si, const float *logits, cpt_err *err) {
    slot *sl = &e->slots[si];
    req *r = sl->r;
    float lp = 0;
    int32_t tok = cpt_sample(logits, &r->sp, &sl->rng, &e->sw, &lp);
    if (cpt_gen_sample_append(&r->h.samples[sl->sample], &r->h.cap[sl->sample], tok, lp, err)) return -1;
    e->st.generated_tokens++;
    cpt_gen_sample *s = &r->h.samples[sl->sample];
    int stop = cpt_gen_stops_hit(&r->stops, e->tok, s, &e->tail, &e->tail_cap);
    if (stop || s->n_tokens >= r->max_new) {
        s->finish = stop ? CPT_FINISH_STOP : CPT_FINISH_LENGTH;
        r->h.done_samples++;
        r->live--;
        sl->r = NULL;
        cpt_kv_cache_reset(&e->cache, si);
        return 1;
    }
    sl->pending = tok;
    return 0;
}

static int ensure_toks(cpt_engine *e, int n, cpt_err *err) {
    if (n <= e->toks_cap) return 0;
    int32_t *p = realloc(e->toks, sizeof(int32_t) * (size_t)n);
    if (!p) return cpt_errf(err, "engine: out of memory for %d prefill tokens", n);
    e->toks = p;
    e->toks_cap = n;
    return 0;
}

/* A slot of r other than `except` that holds r's prompt, or -1. */
static int source_slot(const cpt_engine *e, const req *r, int except) {
    for (int s = 0; s < e->n_slots; s++)
        if (s != except && e->slots[s].r == r && e->cache.slots[s].len >= r->n_prompt) return s;
    return -1;
}

static req *next_waiting(cpt_engine *e) { return (req *)cpt_gen_reqs_next_waiting(&e->reqs); }

/* Runs the n prefill segments in e->segs (over e->toks) at most prefill_chunk tokens per decode call (long prompts
 * continue in the next call through the cache), and saves each prompt's last logits in its request. */
static int prefill(cpt_engine *e, int n, cpt_err *err) {
    for (int k = 0; k < n; k++) e->prog[k] = 0;
    for (;;) {
        int np = 0, nt = 0;
        for (int k = 0; k < n && nt < e->prefill_chunk; k++) {
            int left = e->segs[k].count - e->prog[k];
            if (left <= 0) continue;
            int take = left < e->prefill_chunk - nt ? left : e->prefill_chunk - nt;
            memcpy(e->chunk + nt, e->toks + e->segs[k].start + e->prog[k], sizeof(int32_t) * (size_t)take);
            e->piece[np] = (cpt_decode_seg){e->segs[k].slot, nt, take};
            e->which[np++] = k;
            nt += take;
        }
        if (!np) return 0;
        if (cpt_model_decode(e->m, &e->cache, e->chunk, nt, e->piece, np, e->logits, NULL, &e->work, err)) return -1;
        for (int j = 0; j < np; j++) {
            int k = e->which[j];
            e->prog[k] += e->piece[j].count;
            if (e->prog[k] == e->segs[k].count) {
                req *r = e->slots[e->segs[k].slot].r;
                memcpy(r->prompt_logits, e->logits + (size_t)j * e->V, sizeof(float) * (size_t)e->V);
                r->prefilled = 1;
            }
        }
    }
}

/* Fills free slots with waiting samples: one batched prefill for the prompts that no slot holds, prefix copies
 * for the others, then each new sample's first token from its prompt's logits. Repeats while a sample finishing
 * on its first token frees a slot again. */
static int admit(cpt_engine *e, cpt_err *err) {
    for (;;) {
        int n_new = 0, n_pre = 0, n_tok = 0;
        int *new_slot = e->new_slot;
        for (int s = 0; s < e->n_slots; s++) {
            if (e->slots[s].r) continue;
            req *r = next_waiting(e);
            if (!r) break;
            slot *sl = &e->slots[s];
            sl->r = r;
            sl->sample = r->h.next_sample++;
            cpt_rng_seed(&sl->rng, r->seed, (uint64_t)sl->sample);
            cpt_kv_cache_reset(&e->cache, s);
            r->live++;
            new_slot[n_new++] = s;
            /* the first new slot of a request without a live holder of its prompt runs the prefill */
            int has_src = source_slot(e, r, s) >= 0;
            int in_batch = 0;
            for (int k = 0; k < n_pre; k++) in_batch |= e->slots[e->seg_slot[k]].r == r;
            if (!has_src && !in_batch) {
                if (ensure_toks(e, n_tok + r->n_prompt, err)) return -1;
                memcpy(e->toks + n_tok, r->prompt, sizeof(int32_t) * (size_t)r->n_prompt);
                e->segs[n_pre] = (cpt_decode_seg){s, n_tok, r->n_prompt};
                e->seg_slot[n_pre++] = s;
                n_tok += r->n_prompt;
            }
        }
        if (!n_new) return 0;
        if (n_pre && prefill(e, n_pre, err)) return -1;
        if (n_pre) {
            e->st.prefills += n_pre;
            e->st.prefill_tokens += n_tok;
        }
        for (int k = 0; k < n_new; k++) {
            int s = new_slot[k];
            req *r = e->slots[s].r;
            if (e->cache.slots[s].len == 0) {
                int src = source_slot(e, r, s);
                if (src < 0) return cpt_errf(err, "engine: no slot holds the prompt of request %lld", (long long)r->h.id);
                if (cpt_kv_cache_copy_prefix(&e->cache, s, src, r->n_prompt, err)) return -1;
                e->st.shared_prefills++;
            }
        }
        int freed = 0;
        for (int k = 0; k < n_new; k++) {
            int s = new_slot[k];
            int rc = advance(e, s, e->slots[s].r->prompt_logits, err);
            if (rc < 0) return -1;
            freed += rc;
        }
        if (!freed) return 0;
    }
}

int cpt_engine_step(cpt_engine *e, cpt_err *err) {
    if (admit(e, err)) return -1;
    int n = 0;
    for (int s = 0; s < e->n_slots; s++) {
        if (!e->slots[s].r) continue;
        e->segs[n] = (cpt_decode_seg){s, n, 1};
        e->seg_slot[n] = s;
        n++;
    }
    if (!n) return 0;
    if (ensure_toks(e, e->n_slots, err)) return -1;
    for (int k = 0; k < n; k++) e->toks[k] = e->slots[e->seg_slot[k]].pending;
    if (cpt_model_decode(e->m, &e->cache, e->toks, n, e->segs, n, e->logits, NULL, &e->work, err)) return -1;
    e->st.decode_steps++;
    e->st.slot_steps += n;
    int active = n;
    for (int k = 0; k < n; k++) {
        int rc = advance(e, e->seg_slot[k], e->logits + (size_t)k * e->V, err);
        if (rc < 0) return -1;
        active -= rc;
    }
    return active;
}

int cpt_engine_take(cpt_engine *e, cpt_gen_result *out) {
    req *r = (req *)cpt_gen_reqs_take(&e->reqs, out);
    req_free(r);
    return r != NULL;
}

int cpt_engine_active(const cpt_engine *e) {
    int n = 0;
    for (int s = 0; s < e->n_slots; s++) n += e->slots[s].r != NULL;
    return n;
}
int cpt_engine_idle(const cpt_engine *e) { return cpt_gen_reqs_idle(&e->reqs); }
int cpt_engine_pending(const cpt_engine *e) { return e->reqs.n; }
int cpt_engine_waiting(const cpt_engine *e) { return cpt_gen_reqs_waiting(&e->reqs); }
int cpt_engine_slots(const cpt_engine *e) { return e->n_slots; }
const cpt_engine_stats *cpt_engine_get_stats(const cpt_engine *e) { return &e->st; }

int cpt_engine_generate(cpt_engine *e, const cpt_gen_request *reqs, int n, cpt_gen_result *results, cpt_err *err) {
    cpt_gen_engine g = {e, NULL};
    return cpt_gen_engine_generate(&g, reqs, n, results, err);
}
