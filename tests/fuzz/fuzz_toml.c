/* Fuzzes the TOML subset parser and the config loader on top of it: any bytes must give a document or a clear
 * error, never a crash; a config that loads must dump to TOML that loads back to the same hash. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/config_keys.h"
#include "core/config.h"
#include "core/toml.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    cpt_err err;
    cpt_toml_doc doc;
    if (cpt_toml_parse((const char *)data, size, "fuzz.toml", &doc, &err) == 0) {
        for (size_t i = 0; i < doc.n; i++)
            if (!doc.entries[i].key || doc.entries[i].line < 1) abort();
        cpt_toml_free(&doc);
    } else if (!strstr(err.msg, "fuzz.toml")) {
        abort(); /* every document error names the file */
    }

    cpt_config *cfg = cpt_config_load_text((const char *)data, size, "fuzz.toml", 0, NULL, &err);
    if (cfg) {
        char *dump = cpt_config_dump(cfg);
        if (!dump) abort();
        cpt_config *again = cpt_config_load_text(dump, strlen(dump), "dump", 0, NULL, &err);
        if (!again) {
            fprintf(stderr, "dump does not reload: %s\n%s\n", err.msg, dump);
            abort();
        }
        if (cpt_config_hash(again) != cpt_config_hash(cfg)) abort();
        cpt_config_free(again);
        free(dump);
        cpt_config_free(cfg);
    }

    /* The same bytes as one override value (NUL-terminated copy), as `run.name=...` and `run.seed=...`. */
    char *ov = malloc(size + 16);
    if (!ov) return 0;
    memcpy(ov, "run.seed=", 9);
    memcpy(ov + 9, data, size);
    ov[9 + size] = '\0';
    char *ovs[] = {ov};
    cfg = cpt_config_load_text(NULL, 0, "fuzz", 1, ovs, &err);
    cpt_config_free(cfg);
    cpt_toml_value v;
    if (cpt_toml_parse_value(ov + 9, &v, &err) == 0) cpt_toml_value_free(&v);
    free(ov);
    return 0;
}
