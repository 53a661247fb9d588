/* The product's config: every module's config_keys.def assembled into one table here, above the modules, so that
 * core's config engine (core/config.h) includes no module. Front ends and tests load configs through these. */
#ifndef CPT_CLI_CONFIG_KEYS_H
#define CPT_CLI_CONFIG_KEYS_H

#include "core/config.h"

/* Every declared key, in module order (the order of docs/config.md). */
extern const cpt_key_decl cpt_config_keys[];
extern const size_t cpt_config_n_keys;
extern const cpt_key_table cpt_config_table;

/* cpt_config_load_file / cpt_config_load_table over cpt_config_table. */
cpt_config *cpt_config_load(const char *path, int n_overrides, char *const *overrides, cpt_err *err);
cpt_config *cpt_config_load_text(const char *text, size_t len, const char *name, int n_overrides,
                                 char *const *overrides, cpt_err *err);
/* The generated reference of every declared key (docs/config.md), malloc'd. */
char *cpt_config_docs_markdown(void);
/* 1 if key is declared. */
int cpt_config_has_key(const char *key);
/* cpt_config_check_keys over the product's table. */
int cpt_config_check_table(cpt_err *err);

#endif
