/* The environments behind one interface (see env.h). */
#include "reward/env.h"

#include <ctype.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reward/countdown.h"
#include "reward/env_plugin.h"
#include "reward/env_sandbox.h"
#include "reward/env_tools.h"

#define CALL_MAX (16 << 10)
#define OBS_MAX (16 << 10)

typedef enum { ENV_CALCULATOR, ENV_COUNTDOWN, ENV_PLUGIN } env_kind;

struct cpt_env {
    env_kind kind;
    cpt_env_limits lim;
    size_t max_observation;
    int use_all; /* countdown: reward.countdown_use_all, so the tool and the reward agree */
    char *call_start, *call_end;
    cpt_env_plugin *plugin;
    char expr[CALL_MAX + 1]; /* the expression of the call in hand */
    size_t expr_len;
    int64_t numbers[CPT_COUNTDOWN_MAX_NUMBERS];
    int n_numbers;
    int64_t target;
    char obs[OBS_MAX + 1];
};

cpt_env *cpt_env_open(const cpt_config *cfg, cpt_err *err) {
    const char *type = cpt_cfg_str(cfg, "env.type");
    env_kind kind;
    if (!strcmp(type, "calculator"))
        kind = ENV_CALCULATOR;
    else if (!strcmp(type, "countdown"))
        kind = ENV_COUNTDOWN;
    else if (!strcmp(type, "plugin"))
        kind = ENV_PLUGIN;
    else {
        cpt_errf(err, "env.type = \"%s\": no environment to open (calculator, countdown or plugin)", type);
        return NULL;
    }
    cpt_env *e = calloc(1, sizeof *e);
    if (!e) {
        cpt_errf(err, "env: out of memory");
        return NULL;
    }
    e->kind = kind;
    e->lim.timeout_ms = (int)cpt_cfg_int(cfg, "env.timeout_ms");
    e->lim.memory_mb = (int)cpt_cfg_int(cfg, "env.memory_mb");
    e->lim.strict = 1;
    e->max_observation = (size_t)cpt_cfg_int(cfg, "env.max_observation");
    if (e->max_observation > OBS_MAX) e->max_observation = OBS_MAX;
    e->use_all = cpt_cfg_bool(cfg, "reward.countdown_use_all");
    e->call_start = strdup(cpt_cfg_str(cfg, "env.call_start"));
    e->call_end = strdup(cpt_cfg_str(cfg, "env.call_end"));
    if (!e->call_start || !e->call_end) {
        cpt_errf(err, "env: out of memory");
        cpt_env_close(e);
        return NULL;
    }
    if (kind == ENV_PLUGIN) {
        e->plugin = cpt_env_plugin_open(cpt_cfg_str(cfg, "env.plugin"), cpt_cfg_str(cfg, "env.plugin_config"),
                                        &e->lim, err);
        if (!e->plugin) {
            cpt_env_close(e);
            return NULL;
        }
    }
    return e;
}

const char *cpt_env_name(const cpt_env *e) {
    return e->kind == ENV_CALCULATOR ? "calculator" : e->kind == ENV_COUNTDOWN ? "countdown" : "plugin";
}

void cpt_env_close(cpt_env *e) {
    if (!e) return;
    cpt_env_plugin_close(e->plugin);
    free(e->call_start);
    free(e->call_end);
    free(e);
}

/* ---- the call ---- */

static const char *find_last(const char *s, size_t n, const char *needle) {
    size_t k = strlen(needle);
    if (!k || k > n) return NULL;
    for (size_t i = n - k + 1; i-- > 0;)
        if (!memcmp(s + i, needle, k)) return s + i;
    return NULL;
}

static const char *find_first(const char *s, size_t n, const char *needle) {
    size_t k = strlen(needle);
    if (!k || k > n) return NULL;
    for (size_t i = 0; i + k <= n; i++)
        if (!memcmp(s + i, needle, k)) return s + i;
    return NULL;
}

/* The payload: after the last call_start, before the first call_end after it, trimmed. */
static void call_payload(const cpt_env *e, const char *call, const char **p, size_t *n) {
    const char *s = call;
    size_t len = strlen(call);
    const char *st = find_last(s, len, e->call_start);
    if (st) {
        len -= (size_t)(st - s) + strlen(e->call_start);
        s = st + strlen(e->call_start);
    }
    const char *en = find_first(s, len, e->call_end);
    if (en) len = (size_t)(en - s);
    while (len && isspace((unsigned char)*s)) s++, len--;
    while (len && isspace((unsigned char)s[len - 1])) len--;
    *p = s;
    *n = len;
}

static int tool_name_ok(const char *name) {
    return !strcmp(name, "calculator") || !strcmp(name, "countdown") || !strcmp(name, "python");
}

/* The expression of a JSON call into e->expr. 0, or -1 with the observation that says why. */
static int json_expression(cpt_env *e, const char *p, size_t n, char *obs, size_t cap) {
    json_error_t je;
    json_t *o = json_loadb(p, n, 0, &je);
    if (!o || !json_is_object(o)) {
        snprintf(obs, cap, "error: the call is not a JSON object (%s)", o ? "another JSON value" : je.text);
        json_decref(o);
        return -1;
    }
    json_t *name = json_object_get(o, "name");
    if (name && (!json_is_string(name) || !tool_name_ok(json_string_value(name)))) {
        snprintf(obs, cap, "error: unknown tool %s%.64s%s (this environment has: %s)", json_is_string(name) ? "\"" : "",
                 json_is_string(name) ? json_string_value(name) : "(not a string)", json_is_string(name) ? "\"" : "",
                 e->kind == ENV_COUNTDOWN ? "countdown" : "calculator");
        json_decref(o);
        return -1;
    }
    json_t *args = json_object_get(o, "arguments"), *parsed = NULL;
    if (!args) args = json_object_get(o, "parameters");
    if (json_is_string(args)) {
        /* some models write the arguments as a JSON string holding the object */
        parsed = json_loads(json_string_value(args), 0, &je);
        if (json_is_object(parsed)) args = parsed;
    }
    json_t *x = NULL;
    if (!args) {
        /* no "arguments": the expression may sit at the top level */
        x = json_object_get(o, "expression");
        if (!x) x = json_object_get(o, "expr");
    } else if (json_is_object(args)) {
        x = json_object_get(args, "expression");
        if (!x) x = json_object_get(args, "expr");
        if (!x && json_object_size(args) == 1) x = json_object_iter_value(json_object_iter(args));
    } else if (json_is_string(args)) {
        x = args;
    }
    int rc = 0;
    if (!json_is_string(x)) {
        snprintf(obs, cap, "error: the call has no \"arguments\": {\"expression\": \"...\"}");
        rc = -1;
    } else {
        size_t k = json_string_length(x);
        if (k > CALL_MAX) k = CALL_MAX;
        memcpy(e->expr, json_string_value(x), k);
        e->expr[k] = 0;
        e->expr_len = strnlen(e->expr, k);
    }
    json_decref(parsed);
    json_decref(o);
    return rc;
}

/* countdown: the prompt's numbers and target. 0, or -1 with the observation that says why. */
static int countdown_extra(cpt_env *e, const char *extra, char *obs, size_t cap) {
    json_error_t je;
    json_t *x = extra && *extra ? json_loads(extra, 0, &je) : NULL;
    json_t *nums = json_object_get(x, "numbers");
    if (!nums) nums = json_object_get(x, "nums");
    json_t *tg = json_object_get(x, "target");
    size_t k = json_array_size(nums);
    int rc = 0;
    if (!json_is_array(nums) || k > CPT_COUNTDOWN_MAX_NUMBERS || !json_is_integer(tg)) {
        snprintf(obs, cap, "error: this prompt has no countdown puzzle (its extra needs \"numbers\": [up to %d "
                           "integers] and \"target\": an integer)", CPT_COUNTDOWN_MAX_NUMBERS);
        rc = -1;
    } else {
        e->n_numbers = (int)k;
        e->target = json_integer_value(tg);
        for (size_t i = 0; i < k && !rc; i++) {
            json_t *v = json_array_get(nums, i);
            if (!json_is_integer(v)) {
                snprintf(obs, cap, "error: this prompt's numbers[%zu] is not an integer", i);
                rc = -1;
            }
            e->numbers[i] = json_integer_value(v);
        }
    }
    json_decref(x);
    return rc;
}

static int run_builtin(void *ctx, char *obs, size_t cap) {
    cpt_env *e = ctx;
    if (e->kind == ENV_COUNTDOWN)
        return cpt_env_countdown_observe(e->expr, e->expr_len, e->numbers, e->n_numbers, e->target, e->use_all, obs,
                                         cap);
    return cpt_env_calculator_observe(e->expr, e->expr_len, obs, cap);
}

/* Cuts s to at most max bytes, ending in "..." when cut, never inside a UTF-8 sequence. */
static void cut_observation(char *s, size_t max) {
    size_t n = strlen(s);
    if (n <= max) return;
    size_t k = max >= 3 ? max - 3 : 0;
    while (k && ((unsigned char)s[k] & 0xC0) == 0x80) k--;
    memcpy(s + k, "...", max >= 3 ? 3 : 0);
    s[k + (max >= 3 ? 3 : 0)] = 0;
}

int cpt_env_answer(cpt_env *e, const char *call, const char *extra_json, char *obs, size_t cap, int *ok,
                   cpt_err *err) {
    if (!obs || !cap) return cpt_errf(err, "env: no room for the observation");
    *ok = 0;
    e->obs[0] = 0;
    const char *p;
    size_t n;
    call_payload(e, call ? call : "", &p, &n);
    int rc = 0, prepared = 0;
    if (e->kind == ENV_PLUGIN) {
        char *payload = strndup(p, n);
        if (!payload) return cpt_errf(err, "env: out of memory");
        rc = cpt_env_plugin_answer(e->plugin, payload, extra_json, e->obs, sizeof e->obs, ok, err);
        free(payload);
        prepared = 1;
    } else if (n == 0) {
        snprintf(e->obs, sizeof e->obs, "error: the call is empty");
    } else if (*p == '{') {
        prepared = !json_expression(e, p, n, e->obs, sizeof e->obs);
    } else {
        if (n > CALL_MAX) n = CALL_MAX;
        memcpy(e->expr, p, n);
        e->expr[n] = 0;
        e->expr_len = n;
        prepared = 1;
    }
    if (prepared && e->kind == ENV_COUNTDOWN) prepared = !countdown_extra(e, extra_json, e->obs, sizeof e->obs);
    if (prepared && e->kind != ENV_PLUGIN)
        rc = cpt_env_sandbox_run(&e->lim, NULL, run_builtin, e, e->obs, sizeof e->obs, ok, err);
    if (rc) return -1;
    cut_observation(e->obs, e->max_observation < cap - 1 ? e->max_observation : cap - 1);
    snprintf(obs, cap, "%s", e->obs);
    return 0;
}
