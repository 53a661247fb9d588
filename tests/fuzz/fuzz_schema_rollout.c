/* Fuzzes the rollout decoder: any bytes must decode or be refused with a reason, never crash or leak; what decodes
 * must re-encode and decode to the same values (the encoder accepts everything the decoder accepts). */
#include <stddef.h>
#include <stdint.h>

#include "fuzz_schema_group.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_group_roundtrip(data, size, CPT_MSG_ROLLOUT_GROUP);
    return 0;
}
