/* Fuzzes the prompt decoder: any bytes must decode or be refused with a reason, never crash or leak; what decodes
 * must re-encode and decode to the same values (the encoder accepts everything the decoder accepts). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "queue/schema.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    cpt_err err;
    cpt_msg_header h;
    (void)cpt_msg_peek_header(data, size, &h, &err);
    cpt_prompt_group m;
    if (cpt_prompt_group_decode(data, size, &m, &err) == 0) {
        cpt_buf b;
        if (cpt_prompt_group_encode(&m, &b, &err) != 0)
            abort();
        cpt_prompt_group m2;
        if (cpt_prompt_group_decode(b.data, b.len, &m2, &err) != 0)
            abort();
        if (m2.n_prompt != m.n_prompt || memcmp(m2.prompt, m.prompt, (size_t)m.n_prompt * 4) ||
            m2.id.index != m.id.index || m2.sampling.seed != m.sampling.seed)
            abort();
        cpt_prompt_group_free(&m2);
        cpt_buf_free(&b);
        cpt_prompt_group_free(&m);
    }
    return 0;
}
