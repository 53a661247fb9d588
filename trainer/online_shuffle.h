/* Mini-batches of completions drawn across the whole step (train.mini_batch_shuffle), as TRL's GRPOTrainer takes
 * them, instead of whole groups in order. A step's sequences are put in a random order, the same on every
 * data-parallel rank (seeded by run.seed and the step), and the batch is copied in that order as a batch of
 * one-sequence groups, so the mini-batch split (cpt_online_mini_batch) cuts it by sequences. The per-token arrays
 * the updates read (proximal logprobs, advantages, returns, reference logprobs) are permuted the same way; the
 * advantages are computed before, on the whole batch, so groups still normalise within themselves. */
#ifndef CPT_TRAINER_ONLINE_SHUFFLE_H
#define CPT_TRAINER_ONLINE_SHUFFLE_H

#include <stdint.h>

#include "core/error.h"
#include "trainer/rl_data.h"

/* order[i] = the sequence of the step placed at i: a permutation of [0, n_seqs), a function of (seed, step). */
void cpt_online_shuffle_order(uint64_t seed, int64_t step, int n_seqs, uint64_t *order);

/* *out = b's sequences in `order`, each its own group (group_size 1, its group's weight version): owns its arrays
 * (cpt_rl_batch_free). */
int cpt_online_batch_permuted(const cpt_rl_batch *b, const uint64_t *order, cpt_rl_batch *out, cpt_err *err);

/* Per-token values between b's order and pb's (pb = b permuted by order): forward, dst[pb's sequence i] =
 * src[b's sequence order[i]]; inverse, the other way. src and dst do not overlap. */
void cpt_online_permute_tokens(const cpt_rl_batch *b, const cpt_rl_batch *pb, const uint64_t *order, const float *src,
                               float *dst, int inverse);

#endif
