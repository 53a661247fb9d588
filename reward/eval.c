#include "reward/eval.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fs.h"
#include "rollout/engine.h"

#define EVAL_CHUNK 64

void cpt_eval_opts_default(cpt_eval_opts *o) {
    memset(o, 0, sizeof *o);
    o->samples = 1;
    o->max_new_tokens = 64;
    o->temperature = 0;
    o->seed = 1234;
    o->correct_above = 0.5;
}

void cpt_eval_opts_from_config(const cpt_config *cfg, cpt_eval_opts *o) {
    cpt_eval_opts_default(o);
    o->samples = (int)cpt_cfg_int(cfg, "validation.samples");
    o->max_new_tokens = (int)cpt_cfg_int(cfg, "validation.max_new_tokens");
    o->temperature = (float)cpt_cfg_float(cfg, "validation.temperature");
    o->max_records = (size_t)cpt_cfg_int(cfg, "validation.max_records");
    o->seed = (uint64_t)cpt_cfg_int(cfg, "run.seed");
}

int cpt_eval_tools_open(const cpt_config *cfg, const char *tok_path, cpt_eval_tools *t, cpt_err *err) {
    memset(t, 0, sizeof *t);
    if (cpt_turn_opts_from_config(cfg, tok_path, &t->turns, &t->enabled, err)) return -1;
    if (!t->enabled) return 0;
    t->env = cpt_env_open(cfg, err);
    if (!t->env) {
        cpt_turn_opts_free(&t->turns);
        memset(t, 0, sizeof *t);
        return cpt_err_prefix(err, "env");
    }
    return 0;
}

void cpt_eval_tools_close(cpt_eval_tools *t) {
    if (t->env) cpt_env_close(t->env);
    cpt_turn_opts_free(&t->turns);
    memset(t, 0, sizeof *t);
}

/* The turn driver's synchronous answer: the tool, in-process. */
static int answer_call(void *ctx, const char *call, const char *extra, char *obs, size_t cap, int *ok) {
    cpt_err err;
    if (cpt_env_answer(ctx, call, extra, obs, cap, ok, &err) == 0) return 0;
    cpt_warn("eval: the tool could not run: %s", err.msg);
    return -1;
}

void cpt_eval_results_free(cpt_eval_results *r) {
    free(r->rewards);
    free(r->n_tokens);
    memset(r, 0, sizeof *r);
}

double cpt_pass_at_k(int n, int c, int k) {
    if (k < 1 || n < k || c < 0 || c > n) return NAN;
    if (n - c < k) return 1.0;
    /* 1 - prod_{i = n-c+1}^{n} (1 - k / i): the stable form of 1 - C(n-c, k) / C(n, k). */
    double p = 1.0;
    for (int i = n - c + 1; i <= n; i++) p *= 1.0 - (double)k / (double)i;
    return 1.0 - p;
}

/* The prompt of a record, rendered: ids and text (malloc'd). */
static int render_prompt(const cpt_record *r, const cpt_tokenizer *tok, const cpt_chat_template *tpl,
                         int32_t **ids, int *n, char **text, cpt_err *err) {
    if (!tpl) {
        if (!r->prompt) return cpt_errf(err, "line %d: a messages prompt needs a chat template", r->line);
        long k = cpt_tokenizer_encode(tok, r->prompt, strlen(r->prompt), ids, err);
        if (k < 0) return cpt_err_prefix(err, "line %d", r->line);
        *n = (int)k;
        *text = strdup(r->prompt);
        return *text ? 0 : cpt_errf(err, "out of memory");
    }
    cpt_chat_message one, *msgs = &one;
    size_t nm = 1;
    cpt_chat_message *heap = NULL;
    if (r->prompt) {
        one = (cpt_chat_message){.role = "user", .content = r->prompt, .content_len = strlen(r->prompt)};
    } else {
        heap = calloc(r->n_messages ? r->n_messages : 1, sizeof *heap);
        if (!heap) return cpt_errf(err, "out of memory");
        for (size_t i = 0; i < r->n_messages; i++)
            heap[i] = (cpt_chat_message){.role = r->messages[i].role, .content = r->messages[i].content,
                                         .content_len = strlen(r->messages[i].content)};
        msgs = heap;
        nm = r->n_messages;
    }
    cpt_chat_options co = {.add_generation_prompt = 1};
    cpt_chat_rendered out;
    memset(&out, 0, sizeof out);
    int rc = cpt_chat_render(tpl, tok, msgs, nm, &co, &out, err);
    free(heap);
    if (rc) return cpt_err_prefix(err, "line %d", r->line);
    *ids = out.ids;
    *n = (int)out.n_ids;
    *text = out.text;
    out.ids = NULL;
    out.text = NULL;
    cpt_chat_rendered_free(&out);
    return 0;
}

static char *make_extra(const cpt_record *r, int n_tokens) {
    json_error_t je;
    json_t *o = r->extra ? json_loads(r->extra, 0, &je) : NULL;
    if (o && !json_is_object(o)) {
        json_decref(o);
        o = NULL;
    }
    if (!o) o = json_object();
    if (!o) return NULL;
    if (r->answer && !json_object_get(o, "answer")) json_object_set_new(o, "answer", json_string(r->answer));
    json_object_set_new(o, "n_tokens", json_integer(n_tokens));
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return s;
}

static void stop_ids(const cpt_tokenizer *tok, int32_t *ids, int *n) {
    const char *names[] = {"<|im_end|>", "<|eot_id|>", "<|endoftext|>"};
    int32_t cand[4] = {cpt_tokenizer_eos_id(tok), -1, -1, -1};
    for (int i = 0; i < 3; i++) cand[i + 1] = cpt_tokenizer_token_id(tok, names[i]);
    *n = 0;
    for (int i = 0; i < 4; i++) {
        if (cand[i] < 0) continue;
        int dup = 0;
        for (int j = 0; j < *n; j++) dup |= ids[j] == cand[i];
        if (!dup) ids[(*n)++] = cand[i];
    }
}

/* s with newlines escaped, cut to fit cap (for log lines); NULL: "(messages)". */
static const char *escaped(const char *s, char *buf, size_t cap) {
    if (!s) return "(messages)";
    size_t j = 0;
    for (; *s && j + 5 < cap; s++) {
        if (*s == '\n') {
            buf[j++] = '\\';
            buf[j++] = 'n';
        } else {
            buf[j++] = *s;
        }
    }
    if (*s) {
        buf[j++] = '.';
        buf[j++] = '.';
    }
    buf[j] = '\0';
    return buf;
}

/* Generates and scores records [first, first + count); through the turn driver when turns is not NULL. */
static int eval_chunk(cpt_engine *e, cpt_turns *turns, const cpt_tokenizer *tok, const cpt_dataset *ds, size_t first,
                      int count, cpt_reward *reward, const cpt_eval_opts *o, const int32_t *stops, int n_stops,
                      cpt_eval_results *res, cpt_err *err) {
    int K = o->samples, rc = -1, n_items = count * K;
    cpt_gen_request *reqs = calloc((size_t)count, sizeof *reqs);
    cpt_gen_result *outs = calloc((size_t)count, sizeof *outs);
    cpt_turn_result *touts = turns ? calloc((size_t)count, sizeof *touts) : NULL;
    const char **rextras = turns ? calloc((size_t)count, sizeof *rextras) : NULL;
    int32_t **pids = calloc((size_t)count, sizeof *pids);
    char **ptext = calloc((size_t)count, sizeof *ptext);
    char **texts = calloc((size_t)n_items, sizeof *texts), **extras = calloc((size_t)n_items, sizeof *extras);
    cpt_reward_item *items = calloc((size_t)n_items, sizeof *items);
    cpt_reward_result *rr = calloc((size_t)n_items, sizeof *rr);
    int generated = 0;
    if (!reqs || !outs || !pids || !ptext || !texts || !extras || !items || !rr || (turns && (!touts || !rextras))) {
        cpt_errf(err, "out of memory");
        goto done;
    }
    for (int i = 0; i < count; i++) {
        const cpt_record *r = cpt_dataset_get(ds, first + (size_t)i);
        int np = 0;
        if (render_prompt(r, tok, o->tpl, &pids[i], &np, &ptext[i], err)) {
            cpt_err_prefix(err, "%s", cpt_dataset_path(ds)); /* "PATH: line N: ..." */
            goto done;
        }
        if (np < 1) {
            char where[600];
            cpt_dataset_where(ds, r, where, sizeof where);
            cpt_errf(err, "%s: the prompt renders to no tokens", where);
            goto done;
        }
        reqs[i] = (cpt_gen_request){.prompt = pids[i], .n_prompt = np, .n_samples = K,
                                    .sp = {.temperature = o->temperature, .top_k = 0, .top_p = 1, .min_p = 0},
                                    .seed = o->seed + first + (uint64_t)i, .max_new_tokens = o->max_new_tokens,
                                    .stop_ids = stops, .n_stop_ids = n_stops, .tag = first + (uint64_t)i};
        if (turns) rextras[i] = r->extra;
    }
    int gen_rc = turns ? cpt_turns_generate(turns, reqs, rextras, count, touts, err)
                       : cpt_engine_generate(e, reqs, count, outs, err);
    if (gen_rc) goto done;
    generated = 1;
    for (int i = 0; i < count; i++) {
        const cpt_record *r = cpt_dataset_get(ds, first + (size_t)i);
        int got = turns ? touts[i].n_samples : outs[i].n_samples;
        if (got != K) {
            char where[600];
            cpt_dataset_where(ds, r, where, sizeof where);
            cpt_errf(err, "%s: the engine returned %d samples, want %d", where, got, K);
            goto done;
        }
        for (int j = 0; j < K; j++) {
            /* With tools the completion holds the observations too; n counts the model's tokens. */
            const int32_t *ids = turns ? touts[i].samples[j].tokens : outs[i].samples[j].tokens;
            int n_ids = turns ? touts[i].samples[j].n_tokens : outs[i].samples[j].n_tokens;
            int n_model = turns ? touts[i].samples[j].n_model : n_ids;
            int calls = turns ? touts[i].samples[j].n_calls : 0;
            res->tool_use += calls > 0;
            res->tool_calls += calls;
            int t = i * K + j;
            size_t len;
            texts[t] = cpt_tokenizer_decode(tok, ids, (size_t)n_ids, 1, &len, err);
            extras[t] = texts[t] ? make_extra(r, n_model) : NULL;
            if (!texts[t]) goto done;
            if (!extras[t]) {
                cpt_errf(err, "out of memory");
                goto done;
            }
            items[t] = (cpt_reward_item){.prompt = ptext[i], .completion = texts[t], .extra = extras[t]};
            res->n_tokens[(first + (size_t)i) * (size_t)K + (size_t)j] = n_model;
        }
    }
    if (cpt_reward_score_batch(reward, n_items, items, rr, err)) goto done;
    for (int t = 0; t < n_items; t++) {
        if (!isfinite(rr[t].value)) {
            cpt_errf(err, "reward %s: record %zu sample %d: not finite", cpt_reward_name(reward), first + (size_t)(t / K),
                     t % K);
            goto done;
        }
        res->rewards[first * (size_t)K + (size_t)t] = rr[t].value;
    }
    if (o->verbose)
        for (int i = 0; i < count && first + (size_t)i < 3; i++) {
            char a[96], b[96];
            cpt_info("eval: record %zu: \"%s\" -> \"%s\" (reward %g)", first + (size_t)i,
                     escaped(cpt_dataset_get(ds, first + (size_t)i)->prompt, a, sizeof a), escaped(texts[i * K], b, sizeof b),
                     rr[i * K].value);
        }
    rc = 0;
done:
    for (int i = 0; i < count && generated; i++) {
        if (turns) cpt_turn_result_free(&touts[i]);
        else cpt_gen_result_free(&outs[i]);
    }
    for (int i = 0; i < count && pids; i++) {
        free(pids[i]);
        free(ptext[i]);
    }
    for (int t = 0; t < n_items && texts; t++) {
        free(texts[t]);
        free(extras[t]);
    }
    free(reqs);
    free(outs);
    free(touts);
    free(rextras);
    free(pids);
    free(ptext);
    free(texts);
    free(extras);
    free(items);
    free(rr);
    return rc;
}

int cpt_eval_run(cpt_model *m, const cpt_tokenizer *tok, const cpt_dataset *records, cpt_reward *reward,
                 const cpt_eval_opts *o, cpt_eval_results *res, cpt_err *err) {
    memset(res, 0, sizeof *res);
    if (o->samples < 1) return cpt_errf(err, "eval: samples must be >= 1 (got %d)", o->samples);
    if (o->max_new_tokens < 1) return cpt_errf(err, "eval: max_new_tokens must be >= 1");
    if (o->temperature < 0 || !isfinite(o->temperature)) return cpt_errf(err, "eval: temperature must be >= 0");
    if (cpt_dataset_format(records) != CPT_DATA_RL_PROMPT)
        return cpt_errf(err, "eval: %s holds %s records; want rl_prompt ({\"prompt\", \"answer\", ...})",
                        cpt_dataset_path(records), cpt_data_format_name(cpt_dataset_format(records)));
    size_t n = cpt_dataset_count(records);
    if (o->max_records && o->max_records < n) n = o->max_records;
    if (!n) return cpt_errf(err, "eval: no records");
    int K = o->samples;
    res->n_prompts = n;
    res->samples = K;
    res->rewards = calloc(n * (size_t)K, sizeof *res->rewards);
    res->n_tokens = calloc(n * (size_t)K, sizeof *res->n_tokens);
    if (!res->rewards || !res->n_tokens) {
        cpt_eval_results_free(res);
        return cpt_errf(err, "out of memory");
    }
    double t0 = cpt_now();
    cpt_engine_opts eo = {.slots = o->slots > 0 ? o->slots : 16, .tok = tok};
    cpt_engine *e = cpt_engine_new(m, &eo, err);
    if (!e) {
        cpt_eval_results_free(res);
        return cpt_err_prefix(err, "eval");
    }
    cpt_turns *turns = NULL;
    if (o->tools && o->tools->enabled) {
        turns = cpt_turns_new(e, tok, &o->tools->turns, err);
        if (!turns) {
            cpt_engine_free(e);
            cpt_eval_results_free(res);
            return cpt_err_prefix(err, "eval");
        }
        cpt_turns_set_answer(turns, answer_call, o->tools->env);
        res->with_tools = 1;
    }
    int32_t stops[4];
    int n_stops;
    stop_ids(tok, stops, &n_stops);
    for (size_t first = 0; first < n; first += EVAL_CHUNK) {
        if (o->stop && *o->stop) {
            cpt_turns_free(turns);
            cpt_engine_free(e);
            cpt_eval_results_free(res);
            res->interrupted = 1;
            res->seconds = cpt_now() - t0;
            return 0;
        }
        int count = (int)(n - first < EVAL_CHUNK ? n - first : EVAL_CHUNK);
        if (eval_chunk(e, turns, tok, records, first, count, reward, o, stops, n_stops, res, err)) {
            cpt_turns_free(turns);
            cpt_engine_free(e);
            cpt_eval_results_free(res);
            return cpt_err_prefix(err, "eval");
        }
    }
    cpt_turns_free(turns);
    cpt_engine_free(e);

    double sum = 0, toks = 0;
    long correct = 0;
    for (size_t i = 0; i < n * (size_t)K; i++) {
        sum += res->rewards[i];
        toks += res->n_tokens[i];
        correct += res->rewards[i] > o->correct_above;
    }
    res->accuracy = (double)correct / (double)(n * (size_t)K);
    res->mean_reward = sum / (double)(n * (size_t)K);
    res->mean_tokens = toks / (double)(n * (size_t)K);
    res->tool_use /= (double)(n * (size_t)K);
    res->tool_calls /= (double)(n * (size_t)K);
    for (int k = 1; res->n_k < CPT_EVAL_MAX_K; k = 2 * k < K ? 2 * k : K) {
        double s = 0;
        for (size_t i = 0; i < n; i++) {
            int c = 0;
            for (int j = 0; j < K; j++) c += res->rewards[i * (size_t)K + (size_t)j] > o->correct_above;
            s += cpt_pass_at_k(K, c, k);
        }
        res->k[res->n_k] = k;
        res->pass_at_k[res->n_k++] = s / (double)n;
        if (k == K) break;
    }
    res->seconds = cpt_now() - t0;
    return 0;
}

void cpt_eval_add_metrics(cpt_metrics *m, const char *prefix, const cpt_eval_results *r) {
    char key[96];
    snprintf(key, sizeof key, "%s/accuracy", prefix);
    cpt_metrics_add(m, key, r->accuracy);
    snprintf(key, sizeof key, "%s/reward_mean", prefix);
    cpt_metrics_add(m, key, r->mean_reward);
    snprintf(key, sizeof key, "%s/response_len", prefix);
    cpt_metrics_add(m, key, r->mean_tokens);
    snprintf(key, sizeof key, "%s/seconds", prefix); /* so a run's training rate can leave its evaluations out */
    cpt_metrics_add(m, key, r->seconds);
    if (r->with_tools) {
        snprintf(key, sizeof key, "%s/tool_use", prefix);
        cpt_metrics_add(m, key, r->tool_use);
        snprintf(key, sizeof key, "%s/tool_calls", prefix);
        cpt_metrics_add(m, key, r->tool_calls);
    }
    for (int i = 0; i < r->n_k; i++) {
        snprintf(key, sizeof key, "%s/pass@%d", prefix, r->k[i]);
        cpt_metrics_add(m, key, r->pass_at_k[i]);
    }
}
