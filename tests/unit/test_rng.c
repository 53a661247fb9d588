/* core/rng: known answers of the xoshiro256** core and of Philox4x32-10, determinism, independent streams, exact save/restore,
 * rough uniformity and normal moments, unbiased bounded draws and permutations. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "tests/check.h"

static void test_known_answers(void) {
    /* Reference outputs of xoshiro256** from state {1, 2, 3, 4}. */
    cpt_rng r;
    uint64_t st[4] = {1, 2, 3, 4};
    CHECK(cpt_rng_restore(&r, st) == 0);
    CHECK(cpt_rng_u64(&r) == 11520ULL);
    CHECK(cpt_rng_u64(&r) == 0ULL);
    CHECK(cpt_rng_u64(&r) == 1509978240ULL);
    CHECK(cpt_rng_u64(&r) == 1215971899390074240ULL);
}

static void test_determinism_and_streams(void) {
    cpt_rng a, b, c, d;
    cpt_rng_seed(&a, 42, 0);
    cpt_rng_seed(&b, 42, 0);
    cpt_rng_seed(&c, 42, 1);
    cpt_rng_seed(&d, 43, 0);
    int same_ab = 1, same_ac = 0, same_ad = 0;
    for (int i = 0; i < 1000; i++) {
        uint64_t x = cpt_rng_u64(&a), y = cpt_rng_u64(&b), z = cpt_rng_u64(&c), w = cpt_rng_u64(&d);
        if (x != y) same_ab = 0;
        if (x == z) same_ac++;
        if (x == w) same_ad++;
    }
    CHECK(same_ab);
    CHECK_EQ_INT(same_ac, 0);
    CHECK_EQ_INT(same_ad, 0);
    /* (seed, stream) is not symmetric. */
    cpt_rng e, f;
    cpt_rng_seed(&e, 5, 9);
    cpt_rng_seed(&f, 9, 5);
    CHECK(cpt_rng_u64(&e) != cpt_rng_u64(&f));
    /* Seed 0 stream 0 works (no all-zero state). */
    cpt_rng z;
    cpt_rng_seed(&z, 0, 0);
    uint64_t v1 = cpt_rng_u64(&z), v2 = cpt_rng_u64(&z);
    CHECK(v1 != 0 || v2 != 0);
    /* Streams from one seed are uncorrelated: correlation of the uniforms of streams 0 and 1 is near 0. */
    cpt_rng s0, s1;
    cpt_rng_seed(&s0, 7, 0);
    cpt_rng_seed(&s1, 7, 1);
    double sxy = 0, sx = 0, sy = 0, sxx = 0, syy = 0;
    int n = 20000;
    for (int i = 0; i < n; i++) {
        double x = cpt_rng_double(&s0), y = cpt_rng_double(&s1);
        sxy += x * y, sx += x, sy += y, sxx += x * x, syy += y * y;
    }
    double cov = sxy / n - (sx / n) * (sy / n);
    double corr = cov / sqrt((sxx / n - (sx / n) * (sx / n)) * (syy / n - (sy / n) * (sy / n)));
    CHECK_MSG(fabs(corr) < 0.03, "corr %g", corr);
}

static void test_save_restore(void) {
    cpt_rng a;
    cpt_rng_seed(&a, 1234, 3);
    for (int i = 0; i < 17; i++) cpt_rng_normal(&a);
    uint64_t st[CPT_RNG_STATE_WORDS];
    cpt_rng_save(&a, st);
    double expect[50];
    for (int i = 0; i < 50; i++) expect[i] = (i % 2) ? cpt_rng_normal(&a) : (double)cpt_rng_u32(&a);
    cpt_rng b;
    cpt_rng_seed(&b, 999, 999);
    CHECK(cpt_rng_restore(&b, st) == 0);
    int same = 1;
    for (int i = 0; i < 50; i++) {
        double v = (i % 2) ? cpt_rng_normal(&b) : (double)cpt_rng_u32(&b);
        if (v != expect[i]) same = 0;
    }
    CHECK(same);
    uint64_t zero[CPT_RNG_STATE_WORDS] = {0, 0, 0, 0};
    uint64_t before = b.s[0];
    CHECK(cpt_rng_restore(&b, zero) == -1);
    CHECK(b.s[0] == before);
}

static void test_uniformity(void) {
    cpt_rng r;
    cpt_rng_seed(&r, 2024, 0);
    enum { BINS = 16, N = 64000 };
    int bins[BINS] = {0};
    double sum = 0, fmin = 1, fmax = 0;
    int outside = 0;
    for (int i = 0; i < N; i++) {
        float f = cpt_rng_float(&r);
        if (!(f >= 0.0f && f < 1.0f)) {
            outside++;
            continue;
        }
        if (f < fmin) fmin = f;
        if (f > fmax) fmax = f;
        bins[(int)(f * BINS)]++;
        sum += f;
    }
    double chi2 = 0, e = (double)N / BINS;
    for (int i = 0; i < BINS; i++) chi2 += (bins[i] - e) * (bins[i] - e) / e;
    /* 15 degrees of freedom: 99.9th percentile is about 37.7. */
    CHECK_MSG(chi2 < 37.7, "chi2 %g", chi2);
    CHECK_EQ_INT(outside, 0);
    CHECK_NEAR(sum / N, 0.5, 0.01);
    CHECK(fmin < 0.001 && fmax > 0.999);

    /* Bounded draws: every value of [0, 7) appears about N/7 times and none outside. */
    int cnt[7] = {0};
    outside = 0;
    for (int i = 0; i < 70000; i++) {
        uint64_t v = cpt_rng_below(&r, 7);
        if (v < 7) cnt[v]++;
        else outside++;
    }
    CHECK_EQ_INT(outside, 0);
    for (int i = 0; i < 7; i++) CHECK_MSG(abs(cnt[i] - 10000) < 500, "bin %d: %d", i, cnt[i]);
    CHECK(cpt_rng_below(&r, 1) == 0);
    CHECK(cpt_rng_below(&r, 0) == 0);
    /* A bound just over 2^63 still works (rejection path). */
    uint64_t big = (1ULL << 63) + 12345;
    outside = 0;
    for (int i = 0; i < 100; i++) outside += cpt_rng_below(&r, big) >= big;
    CHECK_EQ_INT(outside, 0);

    double d = cpt_rng_double(&r);
    CHECK(d >= 0.0 && d < 1.0);
}

static void test_normal(void) {
    cpt_rng r;
    cpt_rng_seed(&r, 77, 2);
    int n = 50000;
    double s = 0, s2 = 0, s4 = 0;
    int nonfinite = 0;
    for (int i = 0; i < n; i++) {
        double x = cpt_rng_normal(&r);
        nonfinite += !isfinite(x);
        s += x, s2 += x * x, s4 += x * x * x * x;
    }
    CHECK_EQ_INT(nonfinite, 0);
    double mean = s / n, var = s2 / n - mean * mean;
    CHECK_NEAR(mean, 0.0, 0.02);
    CHECK_NEAR(var, 1.0, 0.03);
    CHECK_NEAR(s4 / n, 3.0, 0.15); /* kurtosis of a normal */
    float buf[10000];
    cpt_rng_fill_normal(&r, buf, 10000, 2.0f, 0.5f);
    double m = 0;
    for (int i = 0; i < 10000; i++) m += buf[i];
    CHECK_NEAR(m / 10000, 2.0, 0.02);
}

static void test_permutation(void) {
    cpt_rng r;
    cpt_rng_seed(&r, 1, 0);
    uint64_t p[100];
    cpt_rng_permutation(&r, p, 100);
    int seen[100] = {0}, fixed = 0;
    for (int i = 0; i < 100; i++) {
        if (p[i] < 100) seen[p[i]]++;
        if (p[i] == (uint64_t)i) fixed++;
    }
    int all_once = 1;
    for (int i = 0; i < 100; i++)
        if (seen[i] != 1) all_once = 0;
    CHECK(all_once);
    CHECK(fixed < 10); /* identity would be 100; expected about 1 */
    /* Position of element 0 over many shuffles of 4 is uniform. */
    int pos[4] = {0};
    for (int t = 0; t < 40000; t++) {
        uint64_t q[4];
        cpt_rng_permutation(&r, q, 4);
        for (int i = 0; i < 4; i++)
            if (q[i] == 0) pos[i]++;
    }
    for (int i = 0; i < 4; i++) CHECK_MSG(abs(pos[i] - 10000) < 400, "pos %d: %d", i, pos[i]);
    cpt_rng_permutation(&r, p, 0); /* no-op */
}

/* Philox4x32-10 against the known answers of Random123 (counter words c0..c3 = quad low, step, sample, quad high;
 * key = seed low, seed high), the words kernels/cuda/sampling.cu draws. */
static void test_philox(void) {
    uint32_t o[4];
    cpt_philox4x32(o, 0, 0, 0, 0);
    CHECK(o[0] == 0x6627e8d5u && o[1] == 0xe169c58du && o[2] == 0xbc57ac4cu && o[3] == 0x9b00dbd8u);
    cpt_philox4x32(o, UINT64_MAX, UINT32_MAX, UINT32_MAX, UINT64_MAX);
    CHECK(o[0] == 0x408f276du && o[1] == 0x41c83b0eu && o[2] == 0xa20bc7c6u && o[3] == 0x6d5451fdu);
    cpt_philox4x32(o, 0x299f31d0a4093822ull, 0x13198a2eu, 0x85a308d3u, 0x03707344243f6a88ull);
    CHECK(o[0] == 0xd16cfe09u && o[1] == 0x94fdccebu && o[2] == 0x5001e420u && o[3] == 0x24126ea1u);
    /* a run of quads (several counters side by side) equals one call per quad, across the 32-bit carry */
    uint32_t run[19][4];
    cpt_philox4x32_run(run, 0x1234567890abcdefull, 7, 9, 0xfffffff8ull, 19);
    int same = 1;
    for (int i = 0; i < 19; i++) {
        cpt_philox4x32(o, 0x1234567890abcdefull, 7, 9, 0xfffffff8ull + (uint64_t)i);
        same &= !memcmp(o, run[i], sizeof o);
    }
    CHECK(same);
}

int main(void) {
    test_known_answers();
    test_philox();
    test_determinism_and_streams();
    test_save_restore();
    test_uniformity();
    test_normal();
    test_permutation();
    return check_summary("test_rng");
}
