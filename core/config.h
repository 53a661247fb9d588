/* Configuration: a TOML subset plus `section.key=value` overrides, checked against one table of declared keys.
 *
 * Every key is declared exactly once, in the config_keys.def file of the module that reads it (core/, trainer/,
 * queue/, rollout/, reward/, scheduler/, weights/), with its type, default, bounds and a one-line doc:
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

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/error.h"

typedef struct cpt_config cpt_config;

/* A table of declared keys. The product's table (every module's config_keys.def) is assembled by the front end
 * (cli/config_keys.h) and passed in; tests use tables of their own to exercise every key type. */
typedef enum {
    CPT_KEY_T_INT,
    CPT_KEY_T_FLOAT,
    CPT_KEY_T_BOOL,
    CPT_KEY_T_STR,
    CPT_KEY_T_STR_ARRAY,
    CPT_KEY_T_INT_ARRAY
} cpt_key_type;

typedef struct cpt_key_decl {
    const char *name;
    cpt_key_type type;
    int64_t idef, imin, imax;
    double fdef, fmin, fmax;
    int bdef;
    const char *sdef, *choices, *doc, *module;
} cpt_key_decl;

/* Expands config_keys.def lines into cpt_key_decl initialisers; define CPT_KEY_MODULE (a string) first. */
#define CPT_KEY_INT(n, d, lo, hi, doc_) \
    {.name = #n, .type = CPT_KEY_T_INT, .idef = (d), .imin = (lo), .imax = (hi), .doc = doc_, .module = CPT_KEY_MODULE},
#define CPT_KEY_FLOAT(n, d, lo, hi, doc_) \
    {.name = #n, .type = CPT_KEY_T_FLOAT, .fdef = (d), .fmin = (lo), .fmax = (hi), .doc = doc_, .module = CPT_KEY_MODULE},
#define CPT_KEY_BOOL(n, d, doc_) {.name = #n, .type = CPT_KEY_T_BOOL, .bdef = (d), .doc = doc_, .module = CPT_KEY_MODULE},
#define CPT_KEY_STR(n, d, ch, doc_) \
    {.name = #n, .type = CPT_KEY_T_STR, .sdef = d, .choices = ch, .doc = doc_, .module = CPT_KEY_MODULE},
#define CPT_KEY_STR_ARRAY(n, doc_) {.name = #n, .type = CPT_KEY_T_STR_ARRAY, .doc = doc_, .module = CPT_KEY_MODULE},
#define CPT_KEY_INT_ARRAY(n, doc_) {.name = #n, .type = CPT_KEY_T_INT_ARRAY, .doc = doc_, .module = CPT_KEY_MODULE},

typedef struct cpt_key_table {
    const cpt_key_decl *keys;
    size_t n;
} cpt_key_table;

const char *cpt_key_type_name(cpt_key_type t);

/* Loads path (NULL: defaults only) then applies overrides "section.key=value" in order, against the keys of t.
 * Errors name file:line (or "override 'k=v'") and, for an unknown key, the closest declared key. */
cpt_config *cpt_config_load_file(const cpt_key_table *t, const char *path, int n_overrides, char *const *overrides,
                                 cpt_err *err);
/* Same from text in memory (NULL: defaults only); name is used in messages. */
cpt_config *cpt_config_load_table(const cpt_key_decl *keys, size_t n_keys, const char *text, size_t len,
                                  const char *name, int n_overrides, char *const *overrides, cpt_err *err);
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

/* The generated reference (markdown) of every key of a table, malloc'd. */
char *cpt_config_docs_markdown_table(const cpt_key_decl *keys, size_t n_keys);
/* 1 if key is declared in t (for tools that take key names from users). */
int cpt_config_table_has_key(const cpt_key_table *t, const char *key);
/* Checks a declared table itself: no key declared twice, no key that is also a table of another, defaults
 * inside their bounds and choices, a doc for each. Returns -1 naming the offending key. */
int cpt_config_check_keys(const cpt_key_decl *keys, size_t n_keys, cpt_err *err);

#endif
