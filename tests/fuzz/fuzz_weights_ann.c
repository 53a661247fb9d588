/* Fuzzes the cuda_ipc / nccl announcement line (weights/weights_ann.h), which arrives from Redis in the weights
 * message's location field: byte 0 picks the transport the message claims (even: nccl, odd: cuda_ipc), the rest
 * is the line. Any bytes give an announcement or a clear error, never a crash; an accepted line formats back to
 * one that parses to the same announcement. The sum64 checksum string parser gets the same bytes. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "queue/schema.h"
#include "weights/weights_ann.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1 || size > CPT_MAX_LOCATION) return 0;
    const char *transport = data[0] % 2 ? "cuda_ipc" : "nccl";
    char *line = malloc(size); /* the rest, NUL-terminated as the message decoder hands it over */
    if (!line) return 0;
    memcpy(line, data + 1, size - 1);
    line[size - 1] = '\0';
    uint64_t h;
    (void)cpt_weights_sum64_parse(line, &h);
    cpt_err err;
    cpt_weights_ann a, b;
    memset(&a, 0, sizeof a);
    if (cpt_weights_ann_parse(transport, line, &a, &err) == 0) {
        char again[CPT_MAX_LOCATION];
        if (cpt_weights_ann_format(&a, again, sizeof again, &err) != 0) abort();
        memset(&b, 0, sizeof b);
        if (cpt_weights_ann_parse(transport, again, &b, &err) != 0) abort();
        if (memcmp(&a, &b, sizeof a) != 0) abort();
    } else if (!err.msg[0]) {
        abort(); /* a refusal always says why */
    }
    free(line);
    return 0;
}
