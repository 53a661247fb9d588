/* Fuzzes the trainer_state.json reader of checkpoints (outside bytes after a crash or a bad copy). */
#include <stddef.h>
#include <stdint.h>

#include "trainer/checkpoint.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    cpt_train_state st;
    cpt_err err;
    if (cpt_train_state_parse((const char *)data, size, "fuzz", &st, &err) == 0) cpt_train_state_free(&st);
    return 0;
}
