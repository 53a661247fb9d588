/* The unit tests' tiny random qwen2 (1 layer, hidden 16, vocab 24, tied embeddings, 2768 floats). Header-only. */
#ifndef CPT_TESTS_UNIT_TINY_MODEL_H
#define CPT_TESTS_UNIT_TINY_MODEL_H

#include "model/model.h"

static inline cpt_model *tiny_model(void) {
    cpt_model_config mc = {.arch = CPT_ARCH_QWEN2, .vocab_size = 24, .hidden_size = 16, .intermediate_size = 32,
                           .num_layers = 1, .num_heads = 2, .num_kv_heads = 1, .head_dim = 8, .rms_norm_eps = 1e-6f,
                           .rope_theta = 10000, .tie_word_embeddings = 1, .qkv_bias = 1,
                           .max_position_embeddings = 64, .bos_token_id = -1, .eos_token_id = -1};
    cpt_err err;
    return cpt_model_new_random(&mc, 7, &err);
}

#endif
