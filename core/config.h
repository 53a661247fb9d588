/* Configuration: a TOML subset plus `section.key=value` overrides, checked against one table of declared keys.
 *
 * Every key is declared exactly once, in the config_keys.def file of the module that reads it (core/, trainer/,
 * queue/, rollout/, reward/, scheduler/), with its type, default, bounds and a one-line doc:
 *
 *   CPT_KEY_INT(name, default, min, max, doc)
 *   CPT_KEY_FLOAT(name, default, min, max, doc)
 *   CPT_KEY_BOOL(name, default, doc)
 *   CPT_KEY_STR(name, default, choices, doc)     choices: "a|b|c", or "" for any string
 *   CPT_KEY_STR_ARRAY(name, doc)                 default: empty
 *   CPT_KEY_INT_ARRAY(name, doc)                 default: empty
 *
 * docs/config.md is generated from that table (`cpt config docs`), and a test fails when they differ.
 * Reading a key that is not declared, or with the wrong type, is a programming error: it aborts with the name. */
#ifndef CPT_CORE_CONFIG_H
#define CPT_CORE_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"

typedef struct cpt_config cpt_config;

/* Loads path (NULL: defaults only) then applies overrides "section.key=value" in order. Errors name file:line
 * (or "override 'k=v'") and, for an unknown key, the closest declared key. */
cpt_config *cpt_config_load(const char *path, int n_overrides, char *const *overrides, cpt_err *err);
/* Same from text in memory (NULL: defaults only); name is used in messages. */
cpt_config *cpt_config_load_text(const char *text, size_t len, const char *name, int n_overrides,
                                 char *const *overrides, cpt_err *err);
void cpt_config_free(cpt_config *cfg);

int64_t cpt_cfg_int(const cpt_config *cfg, const char *key);
double cpt_cfg_float(const cpt_config *cfg, const char *key);
int cpt_cfg_bool(const cpt_config *cfg, const char *key);
const char *cpt_cfg_str(const cpt_config *cfg, const char *key);
size_t cpt_cfg_array_len(const cpt_config *cfg, const char *key);
const char *cpt_cfg_array_str(const cpt_config *cfg, const char *key, size_t i);
int64_t cpt_cfg_array_int(const cpt_config *cfg, const char *key, size_t i);
int cpt_cfg_is_set(const cpt_config *cfg, const char *key); /* 1 if the file or an override set it */

/* Resolved config as TOML (every key, defaults included), malloc'd. Loading this text gives the same config,
 * except that a password in a connection URL key (NAME.url, NAME_url) reads "***" here and in the hash: such a URL
 * is refused where it is used (the password goes in a file). */
char *cpt_config_dump(const cpt_config *cfg);
/* A stable hash of the resolved values (checkpoints record it). */
uint64_t cpt_config_hash(const cpt_config *cfg);

/* The generated reference (markdown) of every declared key, malloc'd. */
char *cpt_config_docs_markdown(void);

/* 1 if key is declared (for tools that take key names from users, e.g. preflight). */
int cpt_config_has_key(const char *key);
/* Checks the declared table itself: no key declared twice, no key that is also a table of another, defaults
 * inside their bounds and choices, a doc for each. Returns -1 naming the offending key. */
int cpt_config_check_table(cpt_err *err);

#endif
