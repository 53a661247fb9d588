/* Fuzzes the env request and reply decoders (queue/env_msg.h): any bytes must decode or be refused with a reason,
 * never crash or leak; what decodes must re-encode and decode to the same values (the encoder accepts everything
 * the decoder accepts). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "queue/env_msg.h"

static void request_roundtrip(const uint8_t *data, size_t size) {
    cpt_err err;
    cpt_env_request m, m2;
    if (cpt_env_request_decode(data, size, &m, &err) != 0) return;
    cpt_buf b;
    if (cpt_env_request_encode(&m, &b, &err) != 0) abort();
    if (cpt_env_request_decode(b.data, b.len, &m2, &err) != 0) abort();
    if (strcmp(m2.run, m.run) || strcmp(m2.worker, m.worker) || m2.id.epoch != m.id.epoch ||
        m2.id.index != m.id.index || m2.sample != m.sample || m2.turn != m.turn || strcmp(m2.call, m.call) ||
        !m2.extra != !m.extra || (m.extra && strcmp(m2.extra, m.extra)))
        abort();
    cpt_env_request_free(&m2);
    cpt_env_request_free(&m);
    cpt_buf_free(&b);
}

static void reply_roundtrip(const uint8_t *data, size_t size) {
    cpt_err err;
    cpt_env_reply m, m2;
    if (cpt_env_reply_decode(data, size, &m, &err) != 0) return;
    cpt_buf b;
    if (cpt_env_reply_encode(&m, &b, &err) != 0) abort();
    if (cpt_env_reply_decode(b.data, b.len, &m2, &err) != 0) abort();
    if (strcmp(m2.run, m.run) || m2.id.epoch != m.id.epoch || m2.id.index != m.id.index || m2.sample != m.sample ||
        m2.turn != m.turn || m2.ok != m.ok || strcmp(m2.observation, m.observation) || strcmp(m2.env, m.env))
        abort();
    cpt_env_reply_free(&m2);
    cpt_env_reply_free(&m);
    cpt_buf_free(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    cpt_err err;
    cpt_msg_header h;
    (void)cpt_msg_peek_header(data, size, &h, &err);
    request_roundtrip(data, size);
    reply_roundtrip(data, size);
    return 0;
}
