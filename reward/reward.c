/* Reward providers: the common object, the weighted combination, and configuration (see reward.h). The rule
 * providers live in reward_rules.c, the plugin adapter in reward_plugin.c. */
#include "reward/reward.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/config.h"

struct cpt_reward {
    char name[CPT_REWARD_NAME_MAX];
    cpt_reward_ops ops;
    void *state;
};

void cpt_reward_add_part(cpt_reward_result *res, const char *name, double value) {
    if (res->n_parts >= CPT_REWARD_MAX_PARTS) return;
    cpt_reward_part *p = &res->parts[res->n_parts++];
    snprintf(p->name, sizeof p->name, "%s", name);
    p->value = value;
}

void cpt_reward_options_default(cpt_reward_options *o) {
    memset(o, 0, sizeof *o);
    o->answer_key = "answer";
    o->format_regex = "";
    o->format_dotall = 1;
    o->length_penalty = 0.001;
    o->length_max_penalty = 1.0;
    o->plugin_path = "";
    o->plugin_config = "";
    o->plugin_timeout_ms = 30000;
}

void cpt_reward_options_from_config(const cpt_config *cfg, cpt_reward_options *o) {
    cpt_reward_options_default(o);
    o->answer_key = cpt_cfg_str(cfg, "reward.answer_key");
    o->countdown_use_all = cpt_cfg_bool(cfg, "reward.countdown_use_all");
    o->countdown_format_score = cpt_cfg_float(cfg, "reward.countdown_format_score");
    o->format_regex = cpt_cfg_str(cfg, "reward.format_regex");
    o->format_dotall = cpt_cfg_bool(cfg, "reward.format_dotall");
    o->length_tokens = strcmp(cpt_cfg_str(cfg, "reward.length_unit"), "tokens") == 0;
    o->length_target = (int)cpt_cfg_int(cfg, "reward.length_target");
    o->length_penalty = cpt_cfg_float(cfg, "reward.length_penalty");
    o->length_max_penalty = cpt_cfg_float(cfg, "reward.length_max_penalty");
    o->plugin_path = cpt_cfg_str(cfg, "reward.plugin_path");
    o->plugin_config = cpt_cfg_str(cfg, "reward.plugin_config");
    o->plugin_timeout_ms = (int)cpt_cfg_int(cfg, "reward.plugin_timeout_ms");
}

cpt_reward *cpt_reward_new(const char *name, const cpt_reward_ops *ops, void *state, cpt_err *err) {
    cpt_reward *r = calloc(1, sizeof *r);
    if (!r) {
        if (ops && ops->free) ops->free(state);
        cpt_errf(err, "reward %s: out of memory", name);
        return NULL;
    }
    snprintf(r->name, sizeof r->name, "%s", name);
    r->ops = *ops;
    r->state = state;
    return r;
}

const char *cpt_reward_name(const cpt_reward *r) { return r->name; }

void cpt_reward_free(cpt_reward *r) {
    if (!r) return;
    if (r->ops.free) r->ops.free(r->state);
    free(r);
}

int cpt_reward_score_batch(cpt_reward *r, int n, const cpt_reward_item *items, cpt_reward_result *out, cpt_err *err) {
    if (n < 0) return cpt_errf(err, "reward %s: negative batch size", r->name);
    for (int i = 0; i < n; i++) {
        memset(&out[i], 0, sizeof out[i]);
        if (!items[i].completion) return cpt_errf(err, "reward %s: item %d has no completion", r->name, i);
    }
    if (n == 0) return 0;
    if (r->ops.score_batch(r->state, n, items, out, err)) return cpt_err_prefix(err, "reward %s", r->name);
    for (int i = 0; i < n; i++)
        if (!isfinite(out[i].value))
            return cpt_errf(err, "reward %s: item %d scored %g (not finite)", r->name, i, out[i].value);
    return 0;
}

int cpt_reward_score(cpt_reward *r, const char *prompt, const char *completion, const char *extra,
                     cpt_reward_result *out, cpt_err *err) {
    cpt_reward_item it = {prompt ? prompt : "", completion, extra};
    return cpt_reward_score_batch(r, 1, &it, out, err);
}

/* ---- combination ---- */

typedef struct {
    int n;
    cpt_reward **children;
    double *weights;
    cpt_reward_result *tmp;
    int tmp_cap;
} combined;

static void combined_free(void *state) {
    combined *c = state;
    if (!c) return;
    for (int i = 0; i < c->n; i++) cpt_reward_free(c->children[i]);
    free(c->children);
    free(c->weights);
    free(c->tmp);
    free(c);
}

static int combined_score(void *state, int n, const cpt_reward_item *items, cpt_reward_result *out, cpt_err *err) {
    combined *c = state;
    if (n > c->tmp_cap) {
        cpt_reward_result *t = realloc(c->tmp, sizeof *t * (size_t)n);
        if (!t) return cpt_errf(err, "out of memory");
        c->tmp = t;
        c->tmp_cap = n;
    }
    for (int k = 0; k < c->n; k++) {
        if (cpt_reward_score_batch(c->children[k], n, items, c->tmp, err)) return -1;
        for (int i = 0; i < n; i++) {
            out[i].value += c->weights[k] * c->tmp[i].value;
            for (int j = 0; j < c->tmp[i].n_parts; j++)
                cpt_reward_add_part(&out[i], c->tmp[i].parts[j].name, c->tmp[i].parts[j].value);
        }
    }
    return 0;
}

cpt_reward *cpt_reward_combined(int n, cpt_reward **children, const double *weights, cpt_err *err) {
    static const cpt_reward_ops ops = {combined_score, combined_free};
    combined *c = calloc(1, sizeof *c);
    if (c) {
        c->children = calloc((size_t)(n > 0 ? n : 1), sizeof *c->children);
        c->weights = calloc((size_t)(n > 0 ? n : 1), sizeof *c->weights);
    }
    if (!c || !c->children || !c->weights) {
        for (int i = 0; i < n; i++) cpt_reward_free(children[i]);
        combined_free(c);
        cpt_errf(err, "reward combined: out of memory");
        return NULL;
    }
    c->n = n;
    for (int i = 0; i < n; i++) {
        c->children[i] = children[i];
        c->weights[i] = weights[i];
    }
    if (n == 0) {
        combined_free(c);
        cpt_errf(err, "reward combined: no rewards to combine (set reward.combine)");
        return NULL;
    }
    return cpt_reward_new("combined", &ops, c, err);
}

int cpt_reward_parse_weighted(const char *spec, char *name, size_t name_len, double *weight, cpt_err *err) {
    const char *colon = strchr(spec, ':');
    size_t n = colon ? (size_t)(colon - spec) : strlen(spec);
    if (n == 0 || n >= name_len) return cpt_errf(err, "reward.combine: bad entry '%s' (want NAME:WEIGHT)", spec);
    memcpy(name, spec, n);
    name[n] = 0;
    *weight = 1.0;
    if (colon) {
        char *end;
        *weight = strtod(colon + 1, &end);
        if (end == colon + 1 || *end || !isfinite(*weight))
            return cpt_errf(err, "reward.combine: bad weight in '%s' (want NAME:WEIGHT, e.g. format:0.1)", spec);
    }
    return 0;
}

static cpt_reward *from_config(const cpt_config *cfg, int check_only, cpt_err *err) {
    cpt_reward_options o;
    cpt_reward_options_from_config(cfg, &o);
    o.plugin_check_only = check_only;
    const char *type = cpt_cfg_str(cfg, "reward.type");
    if (strcmp(type, "combined") != 0) return cpt_reward_builtin(type, &o, err);
    size_t n = cpt_cfg_array_len(cfg, "reward.combine");
    if (n == 0) {
        cpt_errf(err, "reward.type = combined needs reward.combine, e.g. [\"math:1\", \"format:0.1\"]");
        return NULL;
    }
    cpt_reward **kids = calloc(n, sizeof *kids);
    double *w = calloc(n, sizeof *w);
    if (!kids || !w) {
        free(kids);
        free(w);
        cpt_errf(err, "reward: out of memory");
        return NULL;
    }
    for (size_t i = 0; i < n; i++) {
        char name[CPT_REWARD_NAME_MAX];
        if (cpt_reward_parse_weighted(cpt_cfg_array_str(cfg, "reward.combine", i), name, sizeof name, &w[i], err) ||
            !(kids[i] = cpt_reward_builtin(name, &o, err))) {
            for (size_t j = 0; j < i; j++) cpt_reward_free(kids[j]);
            free(kids);
            free(w);
            cpt_err_prefix(err, "reward.combine[%zu]", i);
            return NULL;
        }
    }
    cpt_reward *r = cpt_reward_combined((int)n, kids, w, err);
    free(kids);
    free(w);
    return r;
}

cpt_reward *cpt_reward_from_config(const cpt_config *cfg, cpt_err *err) { return from_config(cfg, 0, err); }

cpt_reward *cpt_reward_check_config(const cpt_config *cfg, cpt_err *err) { return from_config(cfg, 1, err); }
