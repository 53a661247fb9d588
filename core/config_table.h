/* The declared-key table behind core/config.h, for tests and tools that need the table itself.
 *
 * cpt_config_keys is the X-macro expansion of every module's config_keys.def. The *_table functions run the same
 * loader, dump and docs over any table, so tests can exercise every key type with a table of their own. */
#ifndef CPT_CORE_CONFIG_TABLE_H
#define CPT_CORE_CONFIG_TABLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/config.h"

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

extern const cpt_key_decl cpt_config_keys[];
extern const size_t cpt_config_n_keys;

const char *cpt_key_type_name(cpt_key_type t);

cpt_config *cpt_config_load_table(const cpt_key_decl *keys, size_t n_keys, const char *text, size_t len,
                                  const char *name, int n_overrides, char *const *overrides, cpt_err *err);
char *cpt_config_docs_markdown_table(const cpt_key_decl *keys, size_t n_keys);
int cpt_config_check_keys(const cpt_key_decl *keys, size_t n_keys, cpt_err *err);

#endif
