/* The round trip of the rollout-group decoder, shared by the harnesses of the two streams that carry groups
 * (rollouts: CPT_MSG_ROLLOUT_GROUP, scored: CPT_MSG_SCORED_GROUP): any bytes must decode or be refused with a
 * reason, never crash or leak; what decodes must re-encode and decode to the same values (the encoder accepts
 * everything the decoder accepts). */
#ifndef CPT_FUZZ_SCHEMA_GROUP_H
#define CPT_FUZZ_SCHEMA_GROUP_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "queue/schema.h"

static inline void fuzz_group_roundtrip(const uint8_t *data, size_t size, cpt_msg_type type) {
    cpt_err err;
    cpt_msg_header h;
    (void)cpt_msg_peek_header(data, size, &h, &err);
    cpt_rollout_group m;
    if (cpt_rollout_group_decode(data, size, type, &m, &err) == 0) {
        cpt_buf b;
        if (cpt_rollout_group_encode(&m, &b, &err) != 0)
            abort();
        cpt_rollout_group m2;
        if (cpt_rollout_group_decode(b.data, b.len, type, &m2, &err) != 0)
            abort();
        if (m2.n_completions != m.n_completions || m2.weight_version != m.weight_version)
            abort();
        for (uint32_t c = 0; c < m.n_completions; c++)
            if (m2.completions[c].n_tokens != m.completions[c].n_tokens ||
                memcmp(m2.completions[c].logprobs, m.completions[c].logprobs, (size_t)m.completions[c].n_tokens * 4))
                abort();
        /* a mask with a 0 comes back equal; an all-ones one is not sent and comes back NULL */
        for (uint32_t c = 0; c < m.n_completions; c++) {
            const cpt_completion *k = &m.completions[c], *k2 = &m2.completions[c];
            int any0 = 0;
            for (uint32_t i = 0; k->mask && i < k->n_tokens; i++) any0 |= !k->mask[i];
            if (any0 ? !k2->mask || memcmp(k2->mask, k->mask, k->n_tokens) : k2->mask != NULL)
                abort();
        }
        cpt_rollout_group_free(&m2);
        cpt_buf_free(&b);
        cpt_rollout_group_free(&m);
    }
}

#endif
