#include "core/rng.h"

#include <math.h>
#include <string.h>

/* splitmix64: a bijective mixer, used to spread (seed, stream) over the 256-bit state. */
static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

void cpt_rng_seed(cpt_rng *rng, uint64_t seed, uint64_t stream) {
    /* Mix seed and stream separately before combining, so (seed, stream) and (stream, seed) differ and nearby
     * seeds or streams do not give correlated starting points. */
    uint64_t a = seed, b = stream ^ 0x6a09e667f3bcc909ULL;
    uint64_t x = splitmix64(&a) ^ rotl(splitmix64(&b), 17);
    for (int i = 0; i < CPT_RNG_STATE_WORDS; i++) rng->s[i] = splitmix64(&x);
    if (!(rng->s[0] | rng->s[1] | rng->s[2] | rng->s[3])) rng->s[0] = 1; /* all-zero is a fixed point */
}

uint64_t cpt_rng_u64(cpt_rng *rng) {
    uint64_t *s = rng->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

uint32_t cpt_rng_u32(cpt_rng *rng) { return (uint32_t)(cpt_rng_u64(rng) >> 32); }

uint64_t cpt_rng_below(cpt_rng *rng, uint64_t n) {
    if (n == 0) return 0;
    /* Rejection on the top of the range: accept x < limit where limit is the largest multiple of n. */
    uint64_t limit = UINT64_MAX - (UINT64_MAX % n + 1) % n;
    uint64_t x;
    do x = cpt_rng_u64(rng);
    while (x > limit);
    return x % n;
}

float cpt_rng_float(cpt_rng *rng) { return (float)(cpt_rng_u64(rng) >> 40) * (1.0f / 16777216.0f); }

double cpt_rng_double(cpt_rng *rng) { return (double)(cpt_rng_u64(rng) >> 11) * (1.0 / 9007199254740992.0); }

double cpt_rng_normal(cpt_rng *rng) {
    double u1 = 1.0 - cpt_rng_double(rng); /* (0, 1]: log is finite */
    double u2 = cpt_rng_double(rng);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

void cpt_rng_fill_normal(cpt_rng *rng, float *out, size_t n, float mean, float std) {
    for (size_t i = 0; i < n; i++) out[i] = mean + std * (float)cpt_rng_normal(rng);
}

void cpt_rng_permutation(cpt_rng *rng, uint64_t *perm, size_t n) {
    for (size_t i = 0; i < n; i++) perm[i] = i;
    for (size_t i = n; i > 1; i--) {
        size_t j = (size_t)cpt_rng_below(rng, i);
        uint64_t t = perm[i - 1];
        perm[i - 1] = perm[j];
        perm[j] = t;
    }
}

void cpt_rng_save(const cpt_rng *rng, uint64_t out[CPT_RNG_STATE_WORDS]) {
    memcpy(out, rng->s, sizeof rng->s);
}

int cpt_rng_restore(cpt_rng *rng, const uint64_t in[CPT_RNG_STATE_WORDS]) {
    if (!(in[0] | in[1] | in[2] | in[3])) return -1;
    memcpy(rng->s, in, sizeof rng->s);
    return 0;
}

void cpt_philox4x32(uint32_t out[4], uint64_t seed, uint32_t sample, uint32_t step, uint64_t quad) {
    uint32_t c0 = (uint32_t)quad, c1 = step, c2 = sample, c3 = (uint32_t)(quad >> 32);
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int r = 0; r < 10; r++) {
        uint64_t p0 = (uint64_t)0xD2511F53u * c0, p1 = (uint64_t)0xCD9E8D57u * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        c1 = (uint32_t)p1;
        c3 = (uint32_t)p0;
        c0 = n0;
        c2 = n2;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    out[0] = c0, out[1] = c1, out[2] = c2, out[3] = c3;
}

#define PHILOX_LANES 8

void cpt_philox4x32_run(uint32_t (*out)[4], uint64_t seed, uint32_t sample, uint32_t step, uint64_t first, int n) {
    for (int at = 0; at < n; at += PHILOX_LANES) {
        /* the rounds of cpt_philox4x32 on PHILOX_LANES counters side by side: independent lanes vectorise */
        uint32_t c0[PHILOX_LANES], c1[PHILOX_LANES], c2[PHILOX_LANES], c3[PHILOX_LANES];
        for (int l = 0; l < PHILOX_LANES; l++) {
            uint64_t q = first + (uint64_t)(at + l);
            c0[l] = (uint32_t)q, c1[l] = step, c2[l] = sample, c3[l] = (uint32_t)(q >> 32);
        }
        uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
        for (int r = 0; r < 10; r++) {
            for (int l = 0; l < PHILOX_LANES; l++) {
                uint64_t p0 = (uint64_t)0xD2511F53u * c0[l], p1 = (uint64_t)0xCD9E8D57u * c2[l];
                uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1[l] ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c3[l] ^ k1;
                c1[l] = (uint32_t)p1;
                c3[l] = (uint32_t)p0;
                c0[l] = n0;
                c2[l] = n2;
            }
            k0 += 0x9E3779B9u;
            k1 += 0xBB67AE85u;
        }
        for (int l = 0; l < PHILOX_LANES && at + l < n; l++)
            out[at + l][0] = c0[l], out[at + l][1] = c1[l], out[at + l][2] = c2[l], out[at + l][3] = c3[l];
    }
}
