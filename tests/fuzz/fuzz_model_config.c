/* Fuzzes the HF config.json parser of the model (model/config.c): any bytes must give a config that passes the
 * checks or an error message, never a crash. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "model/model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    cpt_model_config cfg;
    cpt_err err;
    if (cpt_model_config_parse((const char *)data, size, "fuzz/config.json", &cfg, &err) == 0) {
        if (cfg.num_heads % cfg.num_kv_heads != 0 || cfg.head_dim % 2 != 0 || cfg.vocab_size < 1) __builtin_trap();
    } else if (strlen(err.msg) == 0) {
        __builtin_trap();
    }
    return 0;
}
