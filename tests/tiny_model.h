/* The tiny Qwen2-shaped model several tests build: hidden 32, 4 query heads of 8 over 2 kv heads, MLP 64, tied
 * embeddings, qkv bias, no bos / eos. Small enough for exact checks against a direct computation. */
#ifndef CPT_TESTS_TINY_MODEL_H
#define CPT_TESTS_TINY_MODEL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"

static inline cpt_model_config tiny_model_config(int vocab, int layers) {
    cpt_model_config c;
    memset(&c, 0, sizeof c);
    c.arch = CPT_ARCH_QWEN2;
    c.vocab_size = vocab;
    c.hidden_size = 32;
    c.intermediate_size = 64;
    c.num_layers = layers;
    c.num_heads = 4;
    c.num_kv_heads = 2;
    c.head_dim = 8;
    c.rms_norm_eps = 1e-6f;
    c.rope_theta = 10000;
    c.tie_word_embeddings = 1;
    c.qkv_bias = 1;
    c.max_position_embeddings = 256;
    c.bos_token_id = c.eos_token_id = -1;
    return c;
}

/* Random weights from seed; a test cannot go on without its model, so a failure exits with the message. */
static inline cpt_model *tiny_model_new(int vocab, int layers, uint64_t seed) {
    cpt_model_config c = tiny_model_config(vocab, layers);
    cpt_err err;
    cpt_model *m = cpt_model_new_random(&c, seed, &err);
    if (!m) {
        fprintf(stderr, "%s\n", err.msg);
        exit(1);
    }
    return m;
}

static inline void tiny_model_add_value_head(cpt_model *m, uint64_t seed) {
    cpt_err err;
    if (cpt_model_add_value_head(m, seed, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        exit(1);
    }
}

#endif
