/* The product's key table (cli/config_keys.h). */
#include "cli/config_keys.h"

const cpt_key_decl cpt_config_keys[] = {
#define CPT_KEY_MODULE "core"
#include "core/config_keys.def"
#undef CPT_KEY_MODULE
#define CPT_KEY_MODULE "trainer"
#include "trainer/config_keys.def"
#undef CPT_KEY_MODULE
#define CPT_KEY_MODULE "rollout"
#include "rollout/config_keys.def"
#undef CPT_KEY_MODULE
#define CPT_KEY_MODULE "reward"
#include "reward/config_keys.def"
#undef CPT_KEY_MODULE
#define CPT_KEY_MODULE "queue"
#include "queue/config_keys.def"
#undef CPT_KEY_MODULE
#define CPT_KEY_MODULE "weights"
#include "weights/weights_keys.def"
#undef CPT_KEY_MODULE
#define CPT_KEY_MODULE "scheduler"
#include "scheduler/config_keys.def"
#undef CPT_KEY_MODULE
};
const size_t cpt_config_n_keys = sizeof cpt_config_keys / sizeof cpt_config_keys[0];
const cpt_key_table cpt_config_table = {cpt_config_keys, sizeof cpt_config_keys / sizeof cpt_config_keys[0]};

cpt_config *cpt_config_load(const char *path, int n_overrides, char *const *overrides, cpt_err *err) {
    return cpt_config_load_file(&cpt_config_table, path, n_overrides, overrides, err);
}

cpt_config *cpt_config_load_text(const char *text, size_t len, const char *name, int n_overrides,
                                 char *const *overrides, cpt_err *err) {
    return cpt_config_load_table(cpt_config_keys, cpt_config_n_keys, text, len, name, n_overrides, overrides, err);
}

char *cpt_config_docs_markdown(void) { return cpt_config_docs_markdown_table(cpt_config_keys, cpt_config_n_keys); }

int cpt_config_has_key(const char *key) { return cpt_config_table_has_key(&cpt_config_table, key); }

int cpt_config_check_table(cpt_err *err) { return cpt_config_check_keys(cpt_config_keys, cpt_config_n_keys, err); }
