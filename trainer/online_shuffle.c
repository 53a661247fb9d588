#include "trainer/online_shuffle.h"

#include <stdlib.h>
#include <string.h>

#include "core/rng.h"

void cpt_online_shuffle_order(uint64_t seed, int64_t step, int n_seqs, uint64_t *order) {
    cpt_rng rng;
    cpt_rng_seed(&rng, seed, 0x5348554646000000ull ^ (uint64_t)step); /* a stream of its own for each step */
    cpt_rng_permutation(&rng, order, (size_t)n_seqs);
}

int cpt_online_batch_permuted(const cpt_rl_batch *b, const uint64_t *order, cpt_rl_batch *out, cpt_err *err) {
    memset(out, 0, sizeof *out);
    size_t nt = (size_t)b->n_tokens, ns = (size_t)b->n_seqs;
    out->tokens = malloc(nt * sizeof *out->tokens);
    out->targets = malloc(nt * sizeof *out->targets);
    out->mask = malloc(nt * sizeof *out->mask);
    out->behav_logprobs = malloc(nt * sizeof *out->behav_logprobs);
    out->teacher_logprobs = b->teacher_logprobs ? malloc(nt * sizeof *out->teacher_logprobs) : NULL;
    out->seq_start = malloc((ns + 1) * sizeof *out->seq_start);
    out->seq_reward = malloc(ns * sizeof *out->seq_reward);
    out->seq_group = malloc(ns * sizeof *out->seq_group);
    out->seq_resp_len = malloc(ns * sizeof *out->seq_resp_len);
    out->group_seq0 = malloc(ns * sizeof *out->group_seq0);
    out->group_size = malloc(ns * sizeof *out->group_size);
    out->group_version = malloc(ns * sizeof *out->group_version);
    if (!out->tokens || !out->targets || !out->mask || !out->behav_logprobs ||
        (b->teacher_logprobs && !out->teacher_logprobs) || !out->seq_start || !out->seq_reward || !out->seq_group ||
        !out->seq_resp_len || !out->group_seq0 || !out->group_size || !out->group_version) {
        cpt_rl_batch_free(out);
        return cpt_errf(err, "out of memory shuffling a batch of %d sequences", b->n_seqs);
    }
    out->n_tokens = b->n_tokens;
    out->n_seqs = out->n_groups = b->n_seqs;
    out->cap_tokens = b->n_tokens;
    out->cap_seqs = out->cap_groups = b->n_seqs;
    out->has_teacher = b->has_teacher;
    out->n_truncated = b->n_truncated;
    int p = 0;
    for (int i = 0; i < b->n_seqs; i++) {
        int s = (int)order[i], t0 = b->seq_start[s], n = b->seq_start[s + 1] - t0;
        out->seq_start[i] = p;
        memcpy(out->tokens + p, b->tokens + t0, (size_t)n * sizeof *out->tokens);
        memcpy(out->targets + p, b->targets + t0, (size_t)n * sizeof *out->targets);
        memcpy(out->mask + p, b->mask + t0, (size_t)n * sizeof *out->mask);
        memcpy(out->behav_logprobs + p, b->behav_logprobs + t0, (size_t)n * sizeof *out->behav_logprobs);
        if (out->teacher_logprobs)
            memcpy(out->teacher_logprobs + p, b->teacher_logprobs + t0, (size_t)n * sizeof *out->teacher_logprobs);
        out->seq_reward[i] = b->seq_reward[s];
        out->seq_resp_len[i] = b->seq_resp_len[s];
        out->seq_group[i] = out->group_seq0[i] = i;
        out->group_size[i] = 1;
        out->group_version[i] = b->group_version[b->seq_group[s]];
        p += n;
    }
    out->seq_start[b->n_seqs] = p;
    return 0;
}

void cpt_online_permute_tokens(const cpt_rl_batch *b, const cpt_rl_batch *pb, const uint64_t *order, const float *src,
                               float *dst, int inverse) {
    for (int i = 0; i < b->n_seqs; i++) {
        int s = (int)order[i], n = b->seq_start[s + 1] - b->seq_start[s];
        const float *from = inverse ? src + pb->seq_start[i] : src + b->seq_start[s];
        float *to = inverse ? dst + b->seq_start[s] : dst + pb->seq_start[i];
        memcpy(to, from, (size_t)n * sizeof *to);
    }
}
