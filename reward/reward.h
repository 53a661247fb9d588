/* Reward providers: score(prompt, completion, extra JSON) -> value + named parts.
 *
 * One interface for every kind: the rule rewards here (math, countdown, format, length), plugins (reward/plugin.h,
 * run isolated in a child process), a weighted combination of named rewards, and providers registered from
 * elsewhere (the reward model) through cpt_reward_new. Scoring is batched; a batch either scores every item or fails
 * with a reason naming the item (a plugin crash, a missing gold answer), so the reward worker can send that group to
 * the `dead` stream and carry on. A completion that is merely wrong is not an error: it scores 0.
 *
 * Extra JSON per item (the dataset record's fields): math reads the gold answer from reward.answer_key ("answer":
 * string or number, bare or with its own "#### x" / \boxed{x}); countdown reads "nums" (or "numbers") and "target";
 * length in tokens reads "n_tokens". */
#ifndef CPT_REWARD_REWARD_H
#define CPT_REWARD_REWARD_H

#include "core/error.h"

typedef struct cpt_config cpt_config;

#define CPT_REWARD_MAX_PARTS 16
#define CPT_REWARD_NAME_MAX 32

typedef struct cpt_reward_part {
    char name[CPT_REWARD_NAME_MAX];
    double value;
} cpt_reward_part;

typedef struct cpt_reward_result {
    double value;
    int n_parts;
    cpt_reward_part parts[CPT_REWARD_MAX_PARTS];
} cpt_reward_result;

typedef struct cpt_reward_item {
    const char *prompt;
    const char *completion;
    const char *extra; /* JSON object text, or NULL for none */
} cpt_reward_item;

/* What a provider implements. score_batch fills out[0..n) (value and parts) or fails with a reason. */
typedef struct cpt_reward_ops {
    int (*score_batch)(void *state, int n, const cpt_reward_item *items, cpt_reward_result *out, cpt_err *err);
    void (*free)(void *state);
} cpt_reward_ops;

typedef struct cpt_reward cpt_reward;

/* Options of the built-in providers (the reward.* keys; cpt_reward_options_from_config reads them). */
typedef struct cpt_reward_options {
    const char *answer_key;        /* math */
    int countdown_use_all;         /* countdown: every number exactly once */
    double countdown_format_score; /* countdown: value of a valid expression that misses the target */
    const char *format_regex;      /* format (PCRE2) */
    int format_dotall;
    int length_tokens;             /* length: 1 counts extra.n_tokens, 0 counts bytes */
    int length_target;
    double length_penalty, length_max_penalty;
    const char *plugin_path, *plugin_config;
    int plugin_timeout_ms;
    int plugin_check_only; /* plugin: check the file (cpt_plugin_check), never load it; scoring then fails */
} cpt_reward_options;

void cpt_reward_options_default(cpt_reward_options *o);
void cpt_reward_options_from_config(const cpt_config *cfg, cpt_reward_options *o);

/* A provider from its ops; takes ownership of state (freed by ops->free even when this fails). */
cpt_reward *cpt_reward_new(const char *name, const cpt_reward_ops *ops, void *state, cpt_err *err);
/* A built-in by name: math | countdown | format | length | plugin. */
cpt_reward *cpt_reward_builtin(const char *name, const cpt_reward_options *o, cpt_err *err);
/* Weighted sum of providers (takes ownership of them): value = sum w_i * value_i; parts = every child's parts
 * (unweighted) in order. */
cpt_reward *cpt_reward_combined(int n, cpt_reward **children, const double *weights, cpt_err *err);
/* From reward.type (and reward.combine = ["math:1", "format:0.1", ...] when it is "combined"). */
cpt_reward *cpt_reward_from_config(const cpt_config *cfg, cpt_err *err);
/* The same for checking a config (preflight): a plugin's file is checked but not loaded, so none of its code runs. */
cpt_reward *cpt_reward_check_config(const cpt_config *cfg, cpt_err *err);
/* Parses "name:weight" (weight defaults to 1). */
int cpt_reward_parse_weighted(const char *spec, char *name, size_t name_len, double *weight, cpt_err *err);

int cpt_reward_score_batch(cpt_reward *r, int n, const cpt_reward_item *items, cpt_reward_result *out, cpt_err *err);
int cpt_reward_score(cpt_reward *r, const char *prompt, const char *completion, const char *extra,
                     cpt_reward_result *out, cpt_err *err);
const char *cpt_reward_name(const cpt_reward *r);
void cpt_reward_free(cpt_reward *r);

/* Adds a named part to a result (ignored past CPT_REWARD_MAX_PARTS; names are truncated). */
void cpt_reward_add_part(cpt_reward_result *res, const char *name, double value);

#endif
