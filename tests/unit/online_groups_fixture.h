/* The online learner tests' fixture (test_online_agree.c, test_online_minibatch.c): a tiny random qwen2 and four
 * groups (version 0) of four completions of 2..5 tokens by group, reward 1 for completions of 3s and 0 for 4s, whose
 * behaviour logprobs are the model's own. Header-only, like tests/check.h. */
#ifndef CPT_TESTS_UNIT_ONLINE_GROUPS_FIXTURE_H
#define CPT_TESTS_UNIT_ONLINE_GROUPS_FIXTURE_H

#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "tests/check.h"
#include "trainer/rl_data.h"

static cpt_model *tiny_model(void) {
    cpt_model_config mc = {.arch = CPT_ARCH_QWEN2, .vocab_size = 24, .hidden_size = 16, .intermediate_size = 32,
                           .num_layers = 1, .num_heads = 2, .num_kv_heads = 1, .head_dim = 8, .rms_norm_eps = 1e-6f,
                           .rope_theta = 10000, .tie_word_embeddings = 1, .qkv_bias = 1,
                           .max_position_embeddings = 64, .bos_token_id = -1, .eos_token_id = -1};
    cpt_err err;
    return cpt_model_new_random(&mc, 7, &err);
}

typedef struct groups {
    cpt_rollout_group g[4];
    cpt_completion comp[4][4];
    double rewards[4][4];
    int32_t tok[4][4][8];
    float lp[4][4][8];
    int32_t prompt[2];
} groups;

static void make_batch(groups *f, cpt_model *m, cpt_rl_batch *b) {
    memset(f, 0, sizeof *f);
    f->prompt[0] = 1, f->prompt[1] = 2;
    cpt_err err;
    memset(b, 0, sizeof *b); /* a new batch: callers free it with cpt_rl_batch_free */
    for (int g = 0; g < 4; g++) {
        cpt_rollout_group *rg = &f->g[g];
        rg->id.index = (uint64_t)g;
        rg->n_prompt = 2;
        rg->prompt = f->prompt;
        rg->n_completions = 4;
        rg->completions = f->comp[g];
        rg->has_rewards = 1;
        rg->rewards = f->rewards[g];
        for (int k = 0; k < 4; k++) {
            int n = 2 + g;
            f->comp[g][k].n_tokens = (uint32_t)n;
            f->comp[g][k].tokens = f->tok[g][k];
            f->comp[g][k].logprobs = f->lp[g][k];
            for (int j = 0; j < n; j++) f->tok[g][k][j] = k % 2 ? 4 : 3;
            f->rewards[g][k] = k % 2 ? 0 : 1;
        }
        CHECK_EQ_INT(cpt_rl_batch_add_group(b, rg, 32, 24, &err), 0);
    }
    float *lp = calloc((size_t)b->n_tokens, sizeof *lp);
    cpt_batch mb = {.n_tokens = b->n_tokens, .n_seqs = b->n_seqs, .tokens = b->tokens, .seq_start = b->seq_start,
                    .targets = b->targets};
    cpt_forward_out fo = {.logprobs = lp};
    CHECK_EQ_INT(cpt_model_forward(m, &mb, &fo, 0, &err), 0);
    for (int t = 0; t < b->n_tokens; t++) b->behav_logprobs[t] = b->mask[t] != 0 ? lp[t] : 0;
    free(lp);
}

#endif
