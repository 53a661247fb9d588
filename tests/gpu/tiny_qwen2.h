/* The tiny random qwen2 that the GPU optimizer and data-parallel tests step (vocab 64, hidden 64, 2 layers, 4/2
 * heads of 16, tied embeddings, QKV bias): small enough for seconds, with every kind of parameter. */
#ifndef CPT_TESTS_GPU_TINY_QWEN2_H
#define CPT_TESTS_GPU_TINY_QWEN2_H

#include <string.h>

#include "model/model.h"

static inline void tiny_qwen2_config(cpt_model_config *c) {
    memset(c, 0, sizeof *c);
    c->arch = CPT_ARCH_QWEN2;
    c->vocab_size = 64, c->hidden_size = 64, c->intermediate_size = 128, c->num_layers = 2;
    c->num_heads = 4, c->num_kv_heads = 2, c->head_dim = 16;
    c->rms_norm_eps = 1e-6f, c->rope_theta = 10000.0f, c->tie_word_embeddings = 1, c->qkv_bias = 1;
    c->max_position_embeddings = 64, c->bos_token_id = -1, c->eos_token_id = -1;
}

#endif
