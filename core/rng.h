/* A small deterministic pseudo-random generator with explicit state (xoshiro256** core, seeded through splitmix64).
 *
 * Every consumer owns a cpt_rng seeded from (seed, stream): the same pair always gives the same sequence, and
 * different streams (data order = 0, init = 1, sampling = 2 + worker, ...) give independent sequences from one
 * run.seed. No global state. The whole state is CPT_RNG_STATE_WORDS plain uint64 values, so a checkpoint saves it
 * as integers and restores it exactly (the next draw after restore equals the uninterrupted one). */
#ifndef CPT_CORE_RNG_H
#define CPT_CORE_RNG_H

#include <stddef.h>
#include <stdint.h>

#define CPT_RNG_STATE_WORDS 4

typedef struct cpt_rng {
    uint64_t s[CPT_RNG_STATE_WORDS];
} cpt_rng;

/* Seeds from (seed, stream). Distinct pairs give unrelated sequences. */
void cpt_rng_seed(cpt_rng *rng, uint64_t seed, uint64_t stream);

uint64_t cpt_rng_u64(cpt_rng *rng);
uint32_t cpt_rng_u32(cpt_rng *rng);
/* Uniform in [0, n) without modulo bias; n == 0 returns 0. */
uint64_t cpt_rng_below(cpt_rng *rng, uint64_t n);
/* Uniform in [0, 1): 24 random bits for float, 53 for double. */
float cpt_rng_float(cpt_rng *rng);
double cpt_rng_double(cpt_rng *rng);
/* Standard normal (mean 0, std 1), Box-Muller; uses two uniform draws per value, keeps no spare, so the state
 * stays the four words above. */
double cpt_rng_normal(cpt_rng *rng);
/* out[i] = mean + std * normal, for weight initialisation. */
void cpt_rng_fill_normal(cpt_rng *rng, float *out, size_t n, float mean, float std);

/* Fisher-Yates permutation of 0..n-1 into perm. */
void cpt_rng_permutation(cpt_rng *rng, uint64_t *perm, size_t n);

/* State as plain integers for checkpoints. Restoring an all-zero state (never produced by seeding) is rejected:
 * returns -1 and leaves rng unchanged. */
void cpt_rng_save(const cpt_rng *rng, uint64_t out[CPT_RNG_STATE_WORDS]);
int cpt_rng_restore(cpt_rng *rng, const uint64_t in[CPT_RNG_STATE_WORDS]);

/* Counter-based draws (Philox4x32-10), for sampling keyed by position instead of by a stream's history: the four
 * words for key `seed` and counter (quad, step, sample, quad >> 32), the same words kernels/cuda/sampling.cu draws
 * on the GPU, so both devices see one random sequence per (seed, sample, step). */
void cpt_philox4x32(uint32_t out[4], uint64_t seed, uint32_t sample, uint32_t step, uint64_t quad);
/* The same for quads first .. first + n - 1 (out[i] for quad first + i), several at a time. */
void cpt_philox4x32_run(uint32_t (*out)[4], uint64_t seed, uint32_t sample, uint32_t step, uint64_t first, int n);

#endif
