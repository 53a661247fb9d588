/* The turn driver (rollout/turns.h). */
#include "rollout/turns.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fs.h"
#include "queue/env_msg.h"

enum { S_GEN = 0, S_WAIT, S_DONE };

typedef struct tsample {
    int32_t *tokens;
    float *logprobs;
    uint8_t *mask;
    int n, cap;
    int n_model, calls;
    int state;
    cpt_finish finish;
    int64_t req;  /* the engine request of its turn > 1 (-1: none, or the group's first request) */
    char *call;   /* S_WAIT: the call text */
    int sent;     /* S_WAIT: handed out by cpt_turns_next_call */
    double t_call;
} tsample;

typedef struct tgroup {
    int64_t handle, req0; /* req0: the first turn's request, -1 once taken from the engine */
    int n_samples, n_done;
    tsample *s;
    int32_t *prompt;
    int n_prompt, max_new;
    cpt_sample_params sp;
    uint64_t seed;
    int32_t *stop_ids;
    int n_stop_ids;
    char **stop_strs; /* the group's, then call_end */
    int n_stop_strs;
    char *extra;
} tgroup;

struct cpt_turns {
    cpt_engine *e;
    const cpt_tokenizer *tok;
    cpt_turn_opts o;
    cpt_turn_answer_fn fn;
    void *ctx;
    tgroup **g;
    int n_g, cap_g;
    int64_t next_handle;
    char *bytes; /* scratch: a turn's bytes */
    size_t bytes_cap;
};

/* ---- text ---- */

char *cpt_turn_format_observation(const char *tpl, const char *obs) {
    static const char ph[] = "{observation}";
    const size_t np = sizeof ph - 1, no = strlen(obs);
    size_t n = 0;
    for (const char *p = tpl; (p = strstr(p, ph)); p += np) n++;
    size_t len = strlen(tpl) + n * no - n * np;
    char *out = malloc(len + 1), *w = out;
    if (!out) return NULL;
    for (const char *p = tpl;;) {
        const char *q = strstr(p, ph);
        if (!q) {
            strcpy(w, p);
            break;
        }
        memcpy(w, p, (size_t)(q - p));
        w += q - p;
        memcpy(w, obs, no);
        w += no;
        p = q + np;
    }
    return out;
}

static const char *last_occurrence(const char *hay, size_t n, const char *needle) {
    size_t k = strlen(needle);
    if (!k || k > n) return NULL;
    for (size_t i = n - k + 1; i-- > 0;)
        if (!memcmp(hay + i, needle, k)) return hay + i;
    return NULL;
}

int cpt_turn_extract_call(const char *turn, size_t n, const char *call_start, const char *call_end, size_t max_call,
                          char **call) {
    *call = NULL;
    size_t ke = strlen(call_end);
    if (!ke || n < ke || memcmp(turn + n - ke, call_end, ke)) return 0;
    const char *from = call_start && *call_start ? last_occurrence(turn, n - ke, call_start) : NULL;
    if (!from) from = turn;
    size_t len = (size_t)(turn + n - from);
    if (len > max_call) from += len - max_call, len = max_call; /* the end holds call_end: keep it */
    char *s = malloc(len + 1);
    if (!s) return -1;
    size_t w = 0;
    for (size_t i = 0; i < len; i++)
        if (from[i]) s[w++] = from[i]; /* the messages carry C strings */
    s[w] = 0;
    *call = s;
    return 1;
}

char *cpt_turn_default_template(const cpt_chat_template *tpl, cpt_err *err) {
    if (!tpl) {
        char *s = strdup("\n<tool_response>{observation}</tool_response>\n");
        if (!s) cpt_errf(err, "out of memory");
        return s;
    }
    /* Render user, assistant (a marker), user (the tool response) with the generation prompt, and keep what
     * follows the marker: the assistant turn's end, the user turn, the next assistant header. */
    static const char mark[] = "CPT-ASSISTANT-TURN-MARK";
    static const char resp[] = "<tool_response>\n{observation}\n</tool_response>";
    cpt_chat_message msgs[3] = {{.role = "user", .content = "q", .content_len = 1},
                                {.role = "assistant", .content = mark, .content_len = sizeof mark - 1},
                                {.role = "user", .content = resp, .content_len = sizeof resp - 1}};
    cpt_chat_options opt = {.add_generation_prompt = 1};
    cpt_chat_rendered r = {0};
    if (cpt_chat_render_text(tpl, msgs, 3, &opt, &r, err)) return NULL;
    const char *at = last_occurrence(r.text, r.text_len, mark);
    char *s = NULL;
    if (!at || !strstr(at, "{observation}"))
        cpt_errf(err, "the %s chat template does not render a tool response after an assistant turn; set "
                 "env.observation_template", cpt_chat_family_name(tpl->family));
    else if (!(s = strdup(at + sizeof mark - 1)))
        cpt_errf(err, "out of memory");
    free(r.text);
    free(r.ids);
    free(r.assistant_mask);
    return s;
}

/* ---- options ---- */

void cpt_turn_opts_free(cpt_turn_opts *o) {
    free(o->call_start);
    free(o->call_end);
    free(o->observation_template);
    memset(o, 0, sizeof *o);
}

int cpt_turn_opts_from_config(const cpt_config *cfg, const char *tok_path, cpt_turn_opts *o, int *enabled,
                              cpt_err *err) {
    memset(o, 0, sizeof *o);
    *enabled = strcmp(cpt_cfg_str(cfg, "env.type"), "none") != 0;
    if (!*enabled) return 0;
    o->max_turns = (int)cpt_cfg_int(cfg, "env.max_turns");
    o->reply_timeout_s = (double)cpt_cfg_int(cfg, "env.reply_timeout_ms") / 1000.0;
    const char *end = cpt_cfg_str(cfg, "env.call_end");
    if (!*end || strlen(end) > CPT_MAX_STOP_STR)
        return cpt_errf(err, "env.call_end: %zu bytes, expected 1..%d", strlen(end), CPT_MAX_STOP_STR);
    o->call_start = strdup(cpt_cfg_str(cfg, "env.call_start"));
    o->call_end = strdup(end);
    const char *tpl = cpt_cfg_str(cfg, "env.observation_template");
    if (*tpl) {
        o->observation_template = strdup(tpl);
    } else {
        const char *tn = cpt_cfg_str(cfg, "data.chat_template");
        cpt_chat_template ct;
        int have = strcmp(tn, "none") != 0;
        if (have && cpt_chat_template_load(tok_path, tn, &ct, err)) {
            cpt_turn_opts_free(o);
            return cpt_err_prefix(err, "env.observation_template from data.chat_template");
        }
        o->observation_template = cpt_turn_default_template(have ? &ct : NULL, err);
        if (have) cpt_chat_template_free(&ct);
        if (!o->observation_template) {
            cpt_turn_opts_free(o);
            return -1;
        }
    }
    if (!o->call_start || !o->call_end || !o->observation_template) {
        cpt_turn_opts_free(o);
        return cpt_errf(err, "out of memory");
    }
    if (!strstr(o->observation_template, "{observation}")) {
        cpt_turn_opts_free(o);
        return cpt_errf(err, "env.observation_template: no {observation} placeholder");
    }
    return 0;
}

/* ---- groups ---- */

static void group_free(tgroup *g) {
    if (!g) return;
    for (int i = 0; g->s && i < g->n_samples; i++) {
        free(g->s[i].tokens);
        free(g->s[i].logprobs);
        free(g->s[i].mask);
        free(g->s[i].call);
    }
    free(g->s);
    free(g->prompt);
    free(g->stop_ids);
    for (int i = 0; g->stop_strs && i < g->n_stop_strs; i++) free(g->stop_strs[i]);
    free(g->stop_strs);
    free(g->extra);
    free(g);
}

cpt_turns *cpt_turns_new(cpt_engine *e, const cpt_tokenizer *tok, const cpt_turn_opts *o, cpt_err *err) {
    if (!tok) {
        cpt_errf(err, "multi-turn rollouts need a tokenizer (tokenizer.path): the call stop string and the "
                 "observations are text");
        return NULL;
    }
    if (!o->call_end || !*o->call_end || !o->observation_template || o->max_turns < 1) {
        cpt_errf(err, "multi-turn options incomplete (env.call_end, env.observation_template, env.max_turns)");
        return NULL;
    }
    cpt_turns *t = calloc(1, sizeof *t);
    if (!t) {
        cpt_errf(err, "out of memory");
        return NULL;
    }
    t->e = e;
    t->tok = tok;
    t->o.max_turns = o->max_turns;
    t->o.reply_timeout_s = o->reply_timeout_s;
    t->o.call_start = strdup(o->call_start ? o->call_start : "");
    t->o.call_end = strdup(o->call_end);
    t->o.observation_template = strdup(o->observation_template);
    if (!t->o.call_start || !t->o.call_end || !t->o.observation_template) {
        cpt_turns_free(t);
        cpt_errf(err, "out of memory");
        return NULL;
    }
    return t;
}

void cpt_turns_clear(cpt_turns *t) {
    for (int i = 0; i < t->n_g; i++) group_free(t->g[i]);
    t->n_g = 0;
}

void cpt_turns_free(cpt_turns *t) {
    if (!t) return;
    cpt_turns_clear(t);
    free(t->g);
    free(t->bytes);
    cpt_turn_opts_free(&t->o);
    free(t);
}

void cpt_turns_set_answer(cpt_turns *t, cpt_turn_answer_fn fn, void *ctx) {
    t->fn = fn;
    t->ctx = ctx;
}

int cpt_turns_groups(const cpt_turns *t) { return t->n_g; }

int cpt_turns_waiting(const cpt_turns *t) {
    int n = 0;
    for (int i = 0; i < t->n_g; i++)
        for (int k = 0; k < t->g[i]->n_samples; k++) n += t->g[i]->s[k].state == S_WAIT;
    return n;
}

static uint64_t turn_seed(uint64_t seed, int sample, int turn) {
    uint64_t z = seed ^ ((uint64_t)(sample + 1) * 0x9E3779B97F4A7C15ull) ^ ((uint64_t)turn * 0xD6E8FEB86659FD93ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static cpt_gen_request group_request(const tgroup *g) {
    cpt_gen_request r = {.prompt = g->prompt, .n_prompt = g->n_prompt, .n_samples = g->n_samples, .sp = g->sp,
                         .seed = g->seed, .max_new_tokens = g->max_new, .stop_ids = g->stop_ids,
                         .n_stop_ids = g->n_stop_ids, .stop_strs = (const char *const *)g->stop_strs,
                         .n_stop_strs = g->n_stop_strs};
    return r;
}

int64_t cpt_turns_submit(cpt_turns *t, const cpt_gen_request *r, const char *extra, cpt_err *err) {
    if (t->n_g == t->cap_g) {
        int cap = t->cap_g ? 2 * t->cap_g : 16;
        tgroup **p = realloc(t->g, sizeof *p * (size_t)cap);
        if (!p) return cpt_errf(err, "out of memory");
        t->g = p;
        t->cap_g = cap;
    }
    tgroup *g = calloc(1, sizeof *g);
    if (!g) return cpt_errf(err, "out of memory");
    int n = r->n_samples > 0 ? r->n_samples : 1;
    g->n_samples = r->n_samples;
    g->n_prompt = r->n_prompt;
    g->max_new = r->max_new_tokens;
    g->sp = r->sp;
    g->seed = r->seed;
    g->s = calloc((size_t)n, sizeof *g->s);
    g->prompt = malloc(sizeof(int32_t) * (size_t)(r->n_prompt > 0 ? r->n_prompt : 1));
    g->stop_ids = malloc(sizeof(int32_t) * (size_t)(r->n_stop_ids + 1));
    g->stop_strs = calloc((size_t)r->n_stop_strs + 1, sizeof(char *));
    if (!g->s || !g->prompt || !g->stop_ids || !g->stop_strs || (extra && !(g->extra = strdup(extra)))) goto oom;
    if (r->n_prompt > 0) memcpy(g->prompt, r->prompt, sizeof(int32_t) * (size_t)r->n_prompt);
    if (r->n_stop_ids > 0) memcpy(g->stop_ids, r->stop_ids, sizeof(int32_t) * (size_t)r->n_stop_ids);
    g->n_stop_ids = r->n_stop_ids;
    for (int i = 0; i < r->n_stop_strs; i++) {
        if (!(g->stop_strs[i] = strdup(r->stop_strs[i]))) goto oom;
        g->n_stop_strs = i + 1;
    }
    if (!(g->stop_strs[g->n_stop_strs] = strdup(t->o.call_end))) goto oom;
    g->n_stop_strs++;
    for (int k = 0; k < g->n_samples; k++) g->s[k].req = -1;
    cpt_gen_request q = group_request(g);
    q.tag = r->tag;
    g->req0 = cpt_engine_submit(t->e, &q, err);
    if (g->req0 < 0) {
        group_free(g);
        return -1;
    }
    g->handle = t->next_handle++;
    t->g[t->n_g++] = g;
    return g->handle;
oom:
    group_free(g);
    return cpt_errf(err, "out of memory");
}

static int sample_reserve(tsample *s, int n) {
    if (n <= s->cap) return 0;
    int cap = s->cap ? s->cap : 64;
    while (cap < n) cap *= 2;
    int32_t *tk = realloc(s->tokens, sizeof(int32_t) * (size_t)cap);
    if (tk) s->tokens = tk;
    float *lp = realloc(s->logprobs, sizeof(float) * (size_t)cap);
    if (lp) s->logprobs = lp;
    uint8_t *mk = realloc(s->mask, (size_t)cap);
    if (mk) s->mask = mk;
    if (!tk || !lp || !mk) return -1;
    s->cap = cap;
    return 0;
}

static void sample_done(tgroup *g, tsample *s, cpt_finish f) {
    s->state = S_DONE;
    s->finish = f;
    free(s->call);
    s->call = NULL;
    g->n_done++;
}

/* The bytes of tokens [from, n) of sample s into t->bytes; their count, or -1. */
static long turn_bytes(cpt_turns *t, const tsample *s, int from) {
    size_t total = 0, len;
    for (int i = from; i < s->n; i++) {
        const char *b = cpt_tokenizer_id_bytes(t->tok, s->tokens[i], &len);
        total += b ? len : 0;
    }
    if (total + 1 > t->bytes_cap) {
        char *p = realloc(t->bytes, total + 64);
        if (!p) return -1;
        t->bytes = p;
        t->bytes_cap = total + 64;
    }
    size_t at = 0;
    for (int i = from; i < s->n; i++) {
        const char *b = cpt_tokenizer_id_bytes(t->tok, s->tokens[i], &len);
        if (b && len) memcpy(t->bytes + at, b, len), at += len;
    }
    t->bytes[at] = 0;
    return (long)at;
}

/* Appends a finished turn of sample k, then decides: a call (answered at once with a callback), or done. */
static int turn_finished(cpt_turns *t, tgroup *g, int k, const cpt_gen_sample *gs, double now, cpt_err *err);

/* Appends the observation to sample k and continues it (or finishes it at the length budget). */
static int continue_sample(cpt_turns *t, tgroup *g, int k, const char *obs, double now, cpt_err *err) {
    tsample *s = &g->s[k];
    free(s->call);
    s->call = NULL;
    s->sent = 0;
    char *text = cpt_turn_format_observation(t->o.observation_template, obs);
    if (!text) {
        sample_done(g, s, CPT_FINISH_ABORT);
        return cpt_errf(err, "out of memory for an observation");
    }
    int32_t *ids = NULL;
    long n_ids = cpt_tokenizer_encode(t->tok, text, strlen(text), &ids, err);
    free(text);
    if (n_ids < 0) {
        /* an answer that is not UTF-8: the sample goes on with what says so */
        n_ids = cpt_tokenizer_encode(t->tok, "error: the tool's answer is not valid UTF-8", 43, &ids, err);
        if (n_ids < 0) {
            sample_done(g, s, CPT_FINISH_ABORT);
            return -1;
        }
    }
    int room = g->max_new - s->n;
    int take = n_ids < room ? (int)n_ids : room;
    if (take > 0 && sample_reserve(s, s->n + take)) {
        free(ids);
        sample_done(g, s, CPT_FINISH_ABORT);
        return cpt_errf(err, "out of memory for a sample of %d tokens", s->n + take);
    }
    for (int i = 0; i < take; i++) {
        s->tokens[s->n] = ids[i];
        s->logprobs[s->n] = 0.0f;
        s->mask[s->n] = 0;
        s->n++;
    }
    free(ids);
    if (take < n_ids || s->n >= g->max_new) {
        sample_done(g, s, CPT_FINISH_LENGTH);
        return 0;
    }
    /* the next turn: the whole sequence so far is its prompt */
    int np = g->n_prompt + s->n;
    int32_t *prompt = malloc(sizeof(int32_t) * (size_t)np);
    if (!prompt) {
        sample_done(g, s, CPT_FINISH_ABORT);
        return cpt_errf(err, "out of memory");
    }
    memcpy(prompt, g->prompt, sizeof(int32_t) * (size_t)g->n_prompt);
    memcpy(prompt + g->n_prompt, s->tokens, sizeof(int32_t) * (size_t)s->n);
    cpt_gen_request q = group_request(g);
    q.prompt = prompt;
    q.n_prompt = np;
    q.n_samples = 1;
    q.max_new_tokens = g->max_new - s->n;
    q.seed = turn_seed(g->seed, k, s->calls + 1);
    s->req = cpt_engine_submit(t->e, &q, err);
    free(prompt);
    if (s->req < 0) {
        sample_done(g, s, CPT_FINISH_LENGTH);
        return cpt_err_prefix(err, "continuing sample %d after tool call %d", k, s->calls);
    }
    s->state = S_GEN;
    (void)now;
    return 0;
}

static int answer_now(cpt_turns *t, tgroup *g, int k, double now, cpt_err *err) {
    tsample *s = &g->s[k];
    char obs[CPT_ENV_MAX_TEXT + 1];
    obs[0] = 0;
    int ok = 0;
    if (t->fn(t->ctx, s->call, g->extra, obs, sizeof obs, &ok) != 0) snprintf(obs, sizeof obs, "%s", CPT_TURN_TIMEOUT_OBS);
    obs[sizeof obs - 1] = 0;
    return continue_sample(t, g, k, obs, now, err);
}

static int turn_finished(cpt_turns *t, tgroup *g, int k, const cpt_gen_sample *gs, double now, cpt_err *err) {
    tsample *s = &g->s[k];
    int from = s->n;
    if (gs->n_tokens > 0 && sample_reserve(s, s->n + gs->n_tokens)) {
        sample_done(g, s, CPT_FINISH_ABORT);
        return cpt_errf(err, "out of memory for a sample of %d tokens", s->n + gs->n_tokens);
    }
    for (int i = 0; i < gs->n_tokens; i++) {
        s->tokens[s->n] = gs->tokens[i];
        s->logprobs[s->n] = gs->logprobs[i];
        s->mask[s->n] = 1;
        s->n++;
    }
    s->n_model += gs->n_tokens;
    s->req = -1;
    if (gs->finish != CPT_FINISH_STOP || s->calls >= t->o.max_turns) {
        sample_done(g, s, gs->finish);
        return 0;
    }
    long nb = turn_bytes(t, s, from);
    if (nb < 0) {
        sample_done(g, s, CPT_FINISH_ABORT);
        return cpt_errf(err, "out of memory");
    }
    char *call = NULL;
    int is_call = cpt_turn_extract_call(t->bytes, (size_t)nb, t->o.call_start, t->o.call_end, CPT_ENV_MAX_TEXT, &call);
    if (is_call < 0) {
        sample_done(g, s, CPT_FINISH_ABORT);
        return cpt_errf(err, "out of memory");
    }
    if (!is_call || s->n >= g->max_new) {
        free(call);
        /* a call with no room left for its observation ends the sample at the length budget */
        sample_done(g, s, is_call ? CPT_FINISH_LENGTH : gs->finish);
        return 0;
    }
    s->calls++;
    s->call = call;
    s->sent = 0;
    s->t_call = now;
    s->state = S_WAIT;
    return t->fn ? answer_now(t, g, k, now, err) : 0;
}

static int find_group(const cpt_turns *t, int64_t handle) {
    for (int i = 0; i < t->n_g; i++)
        if (t->g[i]->handle == handle) return i;
    return -1;
}

/* Routes one finished engine request to its group. */
static int route(cpt_turns *t, const cpt_gen_result *res, double now, cpt_err *err) {
    int rc = 0;
    for (int i = 0; i < t->n_g; i++) {
        tgroup *g = t->g[i];
        if (g->req0 == res->id) {
            g->req0 = -1;
            for (int k = 0; k < res->n_samples && k < g->n_samples; k++)
                if (turn_finished(t, g, k, &res->samples[k], now, err)) rc = -1;
            return rc;
        }
        for (int k = 0; k < g->n_samples; k++)
            if (g->s[k].state == S_GEN && g->s[k].req == res->id && g->req0 < 0)
                return res->n_samples == 1 ? turn_finished(t, g, k, &res->samples[0], now, err) : 0;
    }
    return 0;
}

int cpt_turns_step(cpt_turns *t, double now, cpt_err *err) {
    if (!cpt_engine_idle(t->e) && cpt_engine_step(t->e, err) < 0) return -1;
    /* a sample that cannot go on (out of memory, a continuation the engine refuses) is finished and logged: the
     * other samples and groups go on */
    cpt_gen_result res;
    cpt_err serr;
    while (cpt_engine_take(t->e, &res)) {
        if (route(t, &res, now, &serr)) cpt_warn("multi-turn: %s", serr.msg);
        cpt_gen_result_free(&res);
    }
    /* calls past their time get the timeout observation: a lost reply never stalls the group */
    for (int i = 0; i < t->n_g; i++) {
        tgroup *g = t->g[i];
        for (int k = 0; k < g->n_samples; k++) {
            tsample *s = &g->s[k];
            if (s->state == S_WAIT && now - s->t_call >= t->o.reply_timeout_s &&
                continue_sample(t, g, k, CPT_TURN_TIMEOUT_OBS, now, &serr))
                cpt_warn("multi-turn: %s", serr.msg);
        }
    }
    return t->n_g;
}

int cpt_turns_next_call(cpt_turns *t, cpt_turn_call *c) {
    for (int i = 0; i < t->n_g; i++) {
        tgroup *g = t->g[i];
        for (int k = 0; k < g->n_samples; k++) {
            tsample *s = &g->s[k];
            if (s->state != S_WAIT || s->sent) continue;
            s->sent = 1;
            *c = (cpt_turn_call){.handle = g->handle, .sample = k, .turn = s->calls, .call = s->call,
                                 .extra = g->extra};
            return 1;
        }
    }
    return 0;
}

int cpt_turns_answer(cpt_turns *t, int64_t handle, int sample, int turn, const char *obs, int ok, cpt_err *err) {
    (void)ok; /* a failed tool's observation says why; the model reads it the same way */
    int i = find_group(t, handle);
    if (i < 0) return 1;
    tgroup *g = t->g[i];
    if (sample < 0 || sample >= g->n_samples) return 1;
    tsample *s = &g->s[sample];
    if (s->state != S_WAIT || s->calls != turn) return 1;
    return continue_sample(t, g, sample, obs, cpt_now(), err) ? -1 : 0;
}

void cpt_turn_result_free(cpt_turn_result *r) {
    for (int k = 0; r->samples && k < r->n_samples; k++) {
        free(r->samples[k].tokens);
        free(r->samples[k].logprobs);
        free(r->samples[k].mask);
    }
    free(r->samples);
    memset(r, 0, sizeof *r);
}

int cpt_turn_result_to_gen(cpt_turn_result *r, cpt_gen_result *out) {
    memset(out, 0, sizeof *out);
    cpt_gen_sample *s = calloc((size_t)(r->n_samples > 0 ? r->n_samples : 1), sizeof *s);
    if (!s) return -1;
    for (int k = 0; k < r->n_samples; k++) {
        s[k] = (cpt_gen_sample){.n_tokens = r->samples[k].n_tokens, .tokens = r->samples[k].tokens,
                                .logprobs = r->samples[k].logprobs, .finish = r->samples[k].finish};
        free(r->samples[k].mask);
    }
    out->n_samples = r->n_samples;
    out->samples = s;
    out->id = r->handle;
    free(r->samples);
    memset(r, 0, sizeof *r);
    return 0;
}

int cpt_turns_take(cpt_turns *t, cpt_turn_result *out) {
    for (int i = 0; i < t->n_g; i++) {
        tgroup *g = t->g[i];
        if (g->req0 >= 0 || g->n_done < g->n_samples) continue;
        memset(out, 0, sizeof *out);
        out->handle = g->handle;
        out->n_samples = g->n_samples;
        out->samples = calloc((size_t)g->n_samples, sizeof *out->samples);
        if (!out->samples) return 0; /* tried again at the next take */
        for (int k = 0; k < g->n_samples; k++) {
            tsample *s = &g->s[k];
            cpt_turn_sample *o = &out->samples[k];
            if (!s->tokens && sample_reserve(s, 1)) { /* an empty completion still gets its (empty) arrays */
                free(out->samples);
                out->samples = NULL;
                return 0;
            }
            o->n_tokens = s->n;
            o->tokens = s->tokens;
            o->logprobs = s->logprobs;
            o->mask = s->mask;
            o->finish = s->finish;
            o->n_model = s->n_model;
            o->n_calls = s->calls;
            s->tokens = NULL, s->logprobs = NULL, s->mask = NULL;
        }
        group_free(g);
        t->g[i] = t->g[--t->n_g];
        return 1;
    }
    return 0;
}

int cpt_turns_generate(cpt_turns *t, const cpt_gen_request *reqs, const char *const *extras, int n,
                       cpt_turn_result *results, cpt_err *err) {
    if (!t->fn) return cpt_errf(err, "cpt_turns_generate: no answer callback set");
    int64_t *h = malloc(sizeof(int64_t) * (size_t)(n > 0 ? n : 1));
    if (!h) return cpt_errf(err, "out of memory");
    int rc = -1, got = 0;
    for (int i = 0; i < n; i++) memset(&results[i], 0, sizeof results[i]);
    for (int i = 0; i < n; i++)
        if ((h[i] = cpt_turns_submit(t, &reqs[i], extras ? extras[i] : NULL, err)) < 0) goto out;
    while (got < n) {
        if (cpt_turns_step(t, cpt_now(), err) < 0) goto out;
        cpt_turn_result r;
        while (cpt_turns_take(t, &r)) {
            int j = 0;
            while (j < n && h[j] != r.handle) j++;
            if (j < n) {
                results[j] = r;
                got++;
            } else {
                cpt_turn_result_free(&r);
            }
        }
    }
    rc = 0;
out:
    if (rc)
        for (int i = 0; i < n; i++) cpt_turn_result_free(&results[i]);
    free(h);
    return rc;
}
