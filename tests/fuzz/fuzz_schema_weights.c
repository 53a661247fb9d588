/* Fuzzes the weights decoder: any bytes must decode or be refused with a reason, never crash or leak; what decodes
 * must re-encode and decode to the same values (the encoder accepts everything the decoder accepts). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "queue/schema.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    cpt_err err;
    cpt_msg_header h;
    (void)cpt_msg_peek_header(data, size, &h, &err);
    cpt_weights_msg m, m2;
    if (cpt_weights_decode(data, size, &m, &err) == 0) {
        cpt_buf b;
        if (cpt_weights_encode(&m, &b, &err) != 0)
            abort();
        if (cpt_weights_decode(b.data, b.len, &m2, &err) != 0 || m2.version != m.version ||
            strcmp(m2.location, m.location))
            abort();
        cpt_buf_free(&b);
    }
    return 0;
}
