/* Generation requests (rollout/gen_request.h): checked copies, completions, stop rules, results. */
#include <stdlib.h>
#include <string.h>

#include "rollout/gen_request.h"

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

int cpt_sample_params_check(const cpt_sample_params *sp, cpt_err *err) {
    if (!(sp->temperature >= 0.0f && sp->temperature <= 100.0f))
        return cpt_errf(err, "sampling: temperature %g must be in [0, 100]", sp->temperature);
    if (sp->top_k < 0) return cpt_errf(err, "sampling: top_k %d must be >= 0", sp->top_k);
    if (!(sp->top_p > 0.0f && sp->top_p <= 1.0f)) return cpt_errf(err, "sampling: top_p %g must be in (0, 1]", sp->top_p);
    if (!(sp->min_p >= 0.0f && sp->min_p < 1.0f)) return cpt_errf(err, "sampling: min_p %g must be in [0, 1)", sp->min_p);
    return 0;
}

static int request_check(const cpt_gen_request *g, int V, int max_len, int have_tok, cpt_err *err) {
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

static void stops_free(gen_stops *s) {
    free(s->ids);
    for (int i = 0; s->strs && i < s->n_strs; i++) free(s->strs[i]);
    free(s->strs);
    free(s->lens);
    memset(s, 0, sizeof *s);
}

static int stops_copy(gen_stops *s, const cpt_gen_request *g, cpt_err *err) {
    s->ids = malloc(sizeof(int32_t) * (size_t)(g->n_stop_ids + 1));
    s->strs = calloc((size_t)g->n_stop_strs + 1, sizeof(char *));
    s->lens = calloc((size_t)g->n_stop_strs + 1, sizeof(size_t));
    if (!s->ids || !s->strs || !s->lens) return cpt_errf(err, "engine: out of memory for a request");
    if (g->n_stop_ids) memcpy(s->ids, g->stop_ids, sizeof(int32_t) * (size_t)g->n_stop_ids);
    s->n_ids = g->n_stop_ids;
    for (int i = 0; i < g->n_stop_strs; i++) {
        size_t n = strlen(g->stop_strs[i]);
        if (n == 0) return cpt_errf(err, "request: stop string %d is empty", i);
        if (!(s->strs[i] = malloc(n + 1))) return cpt_errf(err, "engine: out of memory");
        memcpy(s->strs[i], g->stop_strs[i], n + 1);
        s->lens[i] = n;
        if (n > s->max_len) s->max_len = n;
        s->n_strs = i + 1;
    }
    return 0;
}

void cpt_gen_req_free(gen_req *r) {
    if (!r) return;
    samples_free(r->samples, r->n_samples);
    free(r->cap);
    free(r->prompt);
    stops_free(&r->stops);
    free(r->pblocks);
    free(r);
}

gen_req *cpt_gen_req_new(const cpt_gen_request *g, int64_t id, int V, int max_len, int have_tok, cpt_err *err) {
    if (request_check(g, V, max_len, have_tok, err)) return NULL;
    gen_req *r = calloc(1, sizeof *r);
    if (!r) {
        cpt_errf(err, "engine: out of memory");
        return NULL;
    }
    r->id = id;
    r->tag = g->tag;
    r->n_samples = g->n_samples;
    r->n_prompt = g->n_prompt;
    /* the context bounds the completion: n_prompt + n_generated - 1 positions are fed */
    int room = max_len - g->n_prompt + 1;
    r->max_new = g->max_new_tokens < room ? g->max_new_tokens : room;
    r->sp = g->sp;
    r->seed = g->seed;
    r->plog_row = -1;
    r->samples = calloc((size_t)g->n_samples, sizeof *r->samples);
    r->cap = calloc((size_t)g->n_samples, sizeof *r->cap);
    r->prompt = malloc(sizeof(int32_t) * (size_t)g->n_prompt);
    r->pblocks = malloc(sizeof(int32_t) * (size_t)g->n_prompt); /* at most one block per position */
    if (!r->samples || !r->cap || !r->prompt || !r->pblocks) {
        cpt_gen_req_free(r);
        cpt_errf(err, "engine: out of memory for a request");
        return NULL;
    }
    if (stops_copy(&r->stops, g, err)) {
        cpt_gen_req_free(r);
        return NULL;
    }
    memcpy(r->prompt, g->prompt, sizeof(int32_t) * (size_t)g->n_prompt);
    return r;
}

int cpt_gen_req_append(gen_req *r, int si, int32_t tok, float lp, cpt_err *err) {
    cpt_gen_sample *s = &r->samples[si];
    int *cap = &r->cap[si];
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

int cpt_gen_req_stopped(const gen_req *r, int si, const cpt_tokenizer *tok, char **tail, size_t *tail_cap) {
    const gen_stops *st = &r->stops;
    const cpt_gen_sample *s = &r->samples[si];
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

void cpt_gen_req_result(gen_req *r, cpt_gen_result *out) {
    memset(out, 0, sizeof *out);
    out->tag = r->tag;
    out->id = r->id;
    out->n_samples = r->n_samples;
    out->samples = r->samples;
    r->samples = NULL;
}
