/* Rule rewards (math, countdown, format, length) and the plugin adapter, as cpt_reward providers. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <jansson.h>
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/json_util.h"
#include "reward/countdown.h"
#include "reward/math_answer.h"
#include "reward/plugin.h"
#include "reward/reward.h"

/* Parses an item's extra JSON object ("{}" when absent). */
static json_t *item_extra(const cpt_reward_item *it, int i, cpt_err *err) {
    if (!it->extra || !*it->extra) return json_object();
    json_error_t je;
    json_t *j = json_loads(it->extra, JSON_REJECT_DUPLICATES, &je);
    if (!j) {
        cpt_errf(err, "item %d: extra JSON: %d:%d: %s", i, je.line, je.column, je.text);
        return NULL;
    }
    if (!json_is_object(j)) {
        json_decref(j);
        cpt_errf(err, "item %d: extra JSON is not an object", i);
        return NULL;
    }
    return j;
}

/* ---- math ---- */

typedef struct {
    char *answer_key;
} math_state;

static void math_free(void *s) {
    math_state *m = s;
    if (m) free(m->answer_key);
    free(m);
}


static int math_score(void *state, int n, const cpt_reward_item *items, cpt_reward_result *out, cpt_err *err) {
    math_state *m = state;
    for (int i = 0; i < n; i++) {
        json_t *x = item_extra(&items[i], i, err);
        if (!x) return -1;
        json_t *a = json_object_get(x, m->answer_key);
        char gold[64];
        const char *g = NULL;
        if (json_is_string(a)) g = json_string_value(a);
        else if (json_is_integer(a)) snprintf(gold, sizeof gold, "%lld", (long long)json_integer_value(a)), g = gold;
        /* the number the data file wrote: 0.1, not 0.10000000000000001, which the exact grader holds against 0.1 */
        else if (json_is_real(a)) cpt_json_number_text(json_real_value(a), gold, sizeof gold), g = gold;
        if (!g || !*g) {
            json_decref(x);
            return cpt_errf(err, "item %d: extra has no '%s' (a non-empty string or a number) to grade against", i,
                            m->answer_key);
        }
        int found;
        int ok = cpt_math_grade(items[i].completion, strlen(items[i].completion), g, &found);
        json_decref(x);
        out[i].value = ok;
        cpt_reward_add_part(&out[i], "math", ok);
        cpt_reward_add_part(&out[i], "math/answer_found", found);
    }
    return 0;
}

/* ---- countdown ---- */

typedef struct {
    int use_all;
    double format_score;
} countdown_state;

static void plain_free(void *s) { free(s); }

static int countdown_score(void *state, int n, const cpt_reward_item *items, cpt_reward_result *out, cpt_err *err) {
    countdown_state *c = state;
    for (int i = 0; i < n; i++) {
        json_t *x = item_extra(&items[i], i, err);
        if (!x) return -1;
        json_t *nums = json_object_get(x, "nums");
        if (!nums) nums = json_object_get(x, "numbers");
        json_t *tg = json_object_get(x, "target");
        int64_t v[CPT_COUNTDOWN_MAX_NUMBERS];
        size_t k = json_array_size(nums);
        if (!json_is_array(nums) || k > CPT_COUNTDOWN_MAX_NUMBERS || !json_is_integer(tg)) {
            json_decref(x);
            return cpt_errf(err, "item %d: extra needs \"nums\": [up to %d integers] and \"target\": integer", i,
                            CPT_COUNTDOWN_MAX_NUMBERS);
        }
        for (size_t j = 0; j < k; j++) {
            json_t *e = json_array_get(nums, j);
            if (!json_is_integer(e)) {
                json_decref(x);
                return cpt_errf(err, "item %d: extra nums[%zu] is not an integer", i, j);
            }
            v[j] = json_integer_value(e);
        }
        int64_t target = json_integer_value(tg);
        json_decref(x);
        int valid;
        char why[160];
        int ok = cpt_countdown_grade(items[i].completion, strlen(items[i].completion), v, (int)k, target, c->use_all,
                                     &valid, why, sizeof why);
        out[i].value = ok ? 1.0 : valid ? c->format_score : 0.0;
        cpt_reward_add_part(&out[i], "countdown", ok);
        cpt_reward_add_part(&out[i], "countdown/valid", valid);
    }
    return 0;
}

/* ---- format (PCRE2) ---- */

typedef struct {
    pcre2_code *re;
    pcre2_match_data *md;
    pcre2_match_context *mctx;
} format_state;

static void format_free(void *s) {
    format_state *f = s;
    if (!f) return;
    pcre2_match_data_free(f->md);
    pcre2_match_context_free(f->mctx);
    pcre2_code_free(f->re);
    free(f);
}

static int format_score(void *state, int n, const cpt_reward_item *items, cpt_reward_result *out, cpt_err *err) {
    format_state *f = state;
    for (int i = 0; i < n; i++) {
        const char *s = items[i].completion;
        int rc = pcre2_match(f->re, (PCRE2_SPTR)s, strlen(s), 0, 0, f->md, f->mctx);
        if (rc < 0 && rc != PCRE2_ERROR_NOMATCH) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            return cpt_errf(err, "item %d: reward.format_regex: %s", i, (const char *)msg);
        }
        out[i].value = rc >= 0;
        cpt_reward_add_part(&out[i], "format", rc >= 0);
    }
    return 0;
}

static void *format_new(const cpt_reward_options *o, cpt_err *err) {
    if (!o->format_regex || !*o->format_regex) {
        cpt_errf(err, "reward format: reward.format_regex is empty");
        return NULL;
    }
    format_state *f = calloc(1, sizeof *f);
    if (!f) return NULL;
    int ec;
    PCRE2_SIZE off;
    f->re = pcre2_compile((PCRE2_SPTR)o->format_regex, PCRE2_ZERO_TERMINATED, o->format_dotall ? PCRE2_DOTALL : 0,
                          &ec, &off, NULL);
    if (!f->re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(ec, msg, sizeof msg);
        cpt_errf(err, "reward.format_regex at offset %zu: %s", (size_t)off, (const char *)msg);
        format_free(f);
        return NULL;
    }
    f->md = pcre2_match_data_create_from_pattern(f->re, NULL);
    f->mctx = pcre2_match_context_create(NULL);
    if (!f->md || !f->mctx) {
        format_free(f);
        cpt_errf(err, "reward format: out of memory");
        return NULL;
    }
    /* a pathological pattern fails loudly instead of stalling the worker */
    pcre2_set_match_limit(f->mctx, 10000000);
    pcre2_set_depth_limit(f->mctx, 100000);
    return f;
}

/* ---- length penalty ---- */

static int length_score(void *state, int n, const cpt_reward_item *items, cpt_reward_result *out, cpt_err *err) {
    const cpt_reward_options *o = state;
    for (int i = 0; i < n; i++) {
        double len;
        if (o->length_tokens) {
            json_t *x = item_extra(&items[i], i, err);
            if (!x) return -1;
            json_t *t = json_object_get(x, "n_tokens");
            if (!json_is_integer(t)) {
                json_decref(x);
                return cpt_errf(err, "item %d: reward.length_unit = tokens needs extra \"n_tokens\"", i);
            }
            len = (double)json_integer_value(t);
            json_decref(x);
        } else {
            len = (double)strlen(items[i].completion);
        }
        double over = len - o->length_target;
        double p = over > 0 ? -o->length_penalty * over : 0;
        if (p < -o->length_max_penalty) p = -o->length_max_penalty;
        out[i].value = p;
        cpt_reward_add_part(&out[i], "length", p);
    }
    return 0;
}

/* ---- plugin ---- */

typedef struct {
    cpt_plugin *p;
    const char **pr, **co, **ex;
    double *scores;
    int cap;
} plugin_state;

static void plugin_free(void *s) {
    plugin_state *ps = s;
    if (!ps) return;
    cpt_plugin_close(ps->p);
    free(ps->pr);
    free(ps->co);
    free(ps->ex);
    free(ps->scores);
    free(ps);
}

/* A plugin checked but not loaded (cpt_reward_check_config): it cannot score. */
static int plugin_unloaded_score(void *state, int n, const cpt_reward_item *items, cpt_reward_result *out,
                                 cpt_err *err) {
    (void)state, (void)n, (void)items, (void)out;
    return cpt_errf(err, "the plugin was only checked, not loaded");
}

static int plugin_score(void *state, int n, const cpt_reward_item *items, cpt_reward_result *out, cpt_err *err) {
    plugin_state *ps = state;
    if (n > ps->cap) {
        free(ps->pr); free(ps->co); free(ps->ex); free(ps->scores);
        ps->pr = malloc(sizeof(char *) * (size_t)n);
        ps->co = malloc(sizeof(char *) * (size_t)n);
        ps->ex = malloc(sizeof(char *) * (size_t)n);
        ps->scores = malloc(sizeof(double) * (size_t)n);
        ps->cap = (ps->pr && ps->co && ps->ex && ps->scores) ? n : 0;
        if (!ps->cap) return cpt_errf(err, "out of memory");
    }
    for (int i = 0; i < n; i++) {
        ps->pr[i] = items[i].prompt ? items[i].prompt : "";
        ps->co[i] = items[i].completion;
        ps->ex[i] = items[i].extra;
    }
    if (cpt_plugin_score_batch(ps->p, n, ps->pr, ps->co, ps->ex, ps->scores, err)) return -1;
    for (int i = 0; i < n; i++) {
        out[i].value = ps->scores[i];
        cpt_reward_add_part(&out[i], "plugin", ps->scores[i]);
    }
    return 0;
}

/* ---- by name ---- */

cpt_reward *cpt_reward_builtin(const char *name, const cpt_reward_options *o, cpt_err *err) {
    if (!strcmp(name, "math")) {
        static const cpt_reward_ops ops = {math_score, math_free};
        math_state *m = calloc(1, sizeof *m);
        if (m) m->answer_key = strdup(o->answer_key && *o->answer_key ? o->answer_key : "answer");
        if (!m || !m->answer_key) {
            math_free(m);
            cpt_errf(err, "reward math: out of memory");
            return NULL;
        }
        return cpt_reward_new("math", &ops, m, err);
    }
    if (!strcmp(name, "countdown")) {
        static const cpt_reward_ops ops = {countdown_score, plain_free};
        countdown_state *c = calloc(1, sizeof *c);
        if (!c) { cpt_errf(err, "reward countdown: out of memory"); return NULL; }
        c->use_all = o->countdown_use_all;
        c->format_score = o->countdown_format_score;
        return cpt_reward_new("countdown", &ops, c, err);
    }
    if (!strcmp(name, "format")) {
        static const cpt_reward_ops ops = {format_score, format_free};
        void *f = format_new(o, err);
        return f ? cpt_reward_new("format", &ops, f, err) : NULL;
    }
    if (!strcmp(name, "length")) {
        static const cpt_reward_ops ops = {length_score, plain_free};
        cpt_reward_options *c = malloc(sizeof *c);
        if (!c) { cpt_errf(err, "reward length: out of memory"); return NULL; }
        *c = *o; /* only the numeric fields are read */
        return cpt_reward_new("length", &ops, c, err);
    }
    if (!strcmp(name, "plugin") && o->plugin_check_only) {
        static const cpt_reward_ops ops = {plugin_unloaded_score, NULL};
        return cpt_plugin_check(o->plugin_path, err) ? NULL : cpt_reward_new("plugin", &ops, NULL, err);
    }
    if (!strcmp(name, "plugin")) {
        static const cpt_reward_ops ops = {plugin_score, plugin_free};
        plugin_state *ps = calloc(1, sizeof *ps);
        if (!ps) { cpt_errf(err, "reward plugin: out of memory"); return NULL; }
        ps->p = cpt_plugin_open(o->plugin_path, o->plugin_config, o->plugin_timeout_ms, err);
        if (!ps->p) {
            free(ps);
            return NULL;
        }
        return cpt_reward_new("plugin", &ops, ps, err);
    }
    cpt_errf(err, "reward: unknown reward '%s' (math|countdown|format|length|plugin)", name);
    return NULL;
}
