/* Sampling (kernels/cpu/sampling.c): greedy, determinism per (seed, sample, step), empirical frequencies against
 * the intended distribution, each truncation rule, recorded logprobs equal to the distribution's own
 * log-probabilities, and the draw of kernels/cuda/sampling.cu recomputed here from Philox words (Gumbel-max). */
#include <math.h>
#include <stdlib.h>

#include "core/rng.h"
#include "kernels/kernels.h"
#include "tests/check.h"

#define V 6

static double logsumexp_scaled(const float *l, int n, double t) {
    double m = l[0] / t, s = 0;
    for (int i = 1; i < n; i++) m = fmax(m, l[i] / t);
    for (int i = 0; i < n; i++) s += exp(l[i] / t - m);
    return m + log(s);
}

/* The GPU's rule written out: argmax over tokens of (l - max) / T - log(-log u), u from word i % 4 of quad i / 4. */
static int gumbel_reference(const float *l, int n, float t, uint64_t seed, uint32_t sample, uint32_t step) {
    float mx = l[0], inv_t = 1.0f / t, best = -INFINITY;
    for (int i = 1; i < n; i++) mx = fmaxf(mx, l[i]);
    int pick = -1;
    for (int i = 0; i < n; i++) {
        uint32_t w[4];
        cpt_philox4x32(w, seed, sample, step, (uint64_t)(i / 4));
        float u = ((float)(w[i % 4] >> 8) + 0.5f) * (1.0f / 16777216.0f);
        if (u >= 1.0f) u = 0x1.fffffep-1f; /* the top word: below 1 */
        float g = (l[i] - mx) * inv_t - logf(-logf(u));
        if (g > best) best = g, pick = i;
    }
    return pick;
}

/* The top uniform word (its 24 bits all ones) does not force its token. Token 0 leads; token t, whose draw at some
 * step of seed 1234 is that word, is set just above the level below which no draw could make it win (so it is
 * drawn), and no other token can win: t may not be picked there, as before (u rounded to 1.0, an infinite draw). */
static void top_word_not_forced(void) {
    enum { BIG = 151936 };
    float *l = malloc(sizeof(float) * BIG);
    cpt_sampler_work w;
    CHECK(l && cpt_sampler_work_init(&w, BIG) == 0);
    if (!l) return;
    for (int i = 0; i < BIG; i++) l[i] = i == 0 ? 0.0f : -1e9f;
    cpt_sample_params sp = {1.0f, 0, 1.0f, 0.0f};
    int tested = 0;
    for (uint32_t step = 0; step < 4000 && !tested; step++)
        for (int q = 0; q < BIG / 4 && !tested; q++) {
            uint32_t wd[4];
            cpt_philox4x32(wd, 1234, 0, step, (uint64_t)q);
            for (int k = 0; k < 4 && !tested; k++) {
                int t = 4 * q + k;
                if ((wd[k] >> 8) != 0xFFFFFFu || t == 0) continue;
                uint32_t w0[4];
                cpt_philox4x32(w0, 1234, 0, step, 0);
                float u0 = ((float)(w0[0] >> 8) + 0.5f) * (1.0f / 16777216.0f);
                float g0 = -logf(-logf(u0)); /* token 0's draw */
                l[t] = g0 + logf(2.5e-8f) + 0.5f; /* above the sampler's noise floor relative to token 0 */
                float lp;
                int32_t got = cpt_k_sample(l, &sp, 1234, 0, step, &w, &lp);
                CHECK_MSG(got == 0, "step %u: token %d picked on the top uniform word (logit %.2f against the leader's "
                          "draw %.2f)", step, t, (double)l[t], (double)g0);
                CHECK(isfinite(lp));
                tested = 1;
            }
        }
    CHECK_MSG(tested, "no top uniform word in 4000 steps of seed 1234");
    cpt_sampler_work_free(&w);
    free(l);
}

/* A temperature so small that 1/T overflows is greedy (the limit), not token 0 with a NaN logprob. */
static void tiny_temperature_is_greedy(void) {
    float l[4] = {0.5f, 1.0f, 3.0f, 2.0f};
    cpt_sampler_work w;
    CHECK(cpt_sampler_work_init(&w, 4) == 0);
    cpt_sample_params sp = {2e-39f, 0, 1.0f, 0.0f};
    float lp = 0;
    CHECK_EQ_INT(cpt_k_sample(l, &sp, 7, 0, 0, &w, &lp), 2);
    CHECK(isfinite(lp) && lp <= 0.0f);
    cpt_sampler_work_free(&w);
}

int main(void) {
    float logits[V] = {1.0f, 3.0f, 2.5f, -1.0f, 0.0f, 2.9f};
    cpt_sampler_work w;
    CHECK(cpt_sampler_work_init(&w, V) == 0);
    float lp;

    /* Greedy: the argmax with log_softmax at T = 1. */
    cpt_sample_params greedy = {0, 0, 1, 0};
    CHECK_EQ_INT(cpt_k_sample(logits, &greedy, 7, 0, 0, &w, &lp), 1);
    CHECK_NEAR(lp, 3.0 - logsumexp_scaled(logits, V, 1.0), 1e-6);

    /* Plain temperature: frequencies over steps follow softmax(l / T); logprobs equal log_softmax(l / T); each
     * draw is the Gumbel-max of the Philox words. */
    cpt_sample_params plain = {0.7f, 0, 1, 0};
    int counts[V] = {0};
    const int N = 200000;
    double lse = logsumexp_scaled(logits, V, 0.7);
    int logprob_ok = 1, gumbel_ok = 1;
    for (int i = 0; i < N; i++) {
        int32_t t = cpt_k_sample(logits, &plain, 7, 3, (uint32_t)i, &w, &lp);
        counts[t]++;
        if (fabs(lp - (logits[t] / 0.7 - lse)) > 1e-5) logprob_ok = 0;
        if (i < 2000 && t != gumbel_reference(logits, V, 0.7f, 7, 3, (uint32_t)i)) gumbel_ok = 0;
    }
    CHECK(logprob_ok);
    CHECK(gumbel_ok);
    for (int i = 0; i < V; i++) {
        double p = exp(logits[i] / 0.7 - lse);
        CHECK_MSG(fabs(counts[i] / (double)N - p) < 4 * sqrt(p * (1 - p) / N) + 1e-4, "token %d: %f vs %f", i,
                  counts[i] / (double)N, p);
    }

    /* The draw is keyed by (seed, sample, step) alone: repeating one gives the same token; another seed, sample
     * or step gives another sequence. */
    int same = 1, differ_seed = 0, differ_sample = 0;
    for (uint32_t s = 0; s < 64; s++) {
        int32_t a = cpt_k_sample(logits, &plain, 42, 1, s, &w, NULL);
        same &= a == cpt_k_sample(logits, &plain, 42, 1, s, &w, NULL);
        differ_seed |= a != cpt_k_sample(logits, &plain, 43, 1, s, &w, NULL);
        differ_sample |= a != cpt_k_sample(logits, &plain, 42, 2, s, &w, NULL);
    }
    CHECK(same);
    CHECK(differ_seed);
    CHECK(differ_sample);

    /* top-k 2: only tokens 1 and 5 (logits 3.0, 2.9), renormalised. */
    cpt_sample_params topk = {1.0f, 2, 1, 0};
    int seen[V] = {0};
    double z = exp(3.0) + exp(2.9);
    for (int i = 0; i < 20000; i++) {
        int32_t t = cpt_k_sample(logits, &topk, 1, 0, (uint32_t)i, &w, &lp);
        seen[t]++;
        CHECK_NEAR(lp, logits[t] - log(z), 1e-5);
    }
    CHECK_EQ_INT(seen[0] + seen[2] + seen[3] + seen[4], 0);
    CHECK(seen[1] > seen[5] && seen[5] > 0);

    /* top-p: probabilities at T = 1 are sorted 1, 5, 2, 0, 4, 3; with top_p just above p1 + p5 the set is {1, 5, 2}. */
    double lse1 = logsumexp_scaled(logits, V, 1.0);
    double p1 = exp(3.0 - lse1), p5 = exp(2.9 - lse1);
    cpt_sample_params topp = {1.0f, 0, (float)(p1 + p5 + 1e-3), 0};
    int seen_p[V] = {0};
    for (int i = 0; i < 20000; i++) seen_p[cpt_k_sample(logits, &topp, 2, 0, (uint32_t)i, &w, &lp)]++;
    CHECK(seen_p[2] > 0 && seen_p[1] > 0 && seen_p[5] > 0);
    CHECK_EQ_INT(seen_p[0] + seen_p[3] + seen_p[4], 0);

    /* min-p 0.5: keep p >= 0.5 * p_max: exp(l - 3) >= 0.5 <=> l >= 3 - ln 2 = 2.307: tokens 1, 5, 2. */
    cpt_sample_params minp = {1.0f, 0, 1, 0.5f};
    int seen_m[V] = {0};
    double zm = exp(3.0) + exp(2.9) + exp(2.5);
    for (int i = 0; i < 20000; i++) {
        int32_t t = cpt_k_sample(logits, &minp, 3, 0, (uint32_t)i, &w, &lp);
        seen_m[t]++;
        CHECK_NEAR(lp, logits[t] - log(zm), 1e-5);
    }
    CHECK_EQ_INT(seen_m[0] + seen_m[3] + seen_m[4], 0);
    CHECK(seen_m[2] > 0);

    cpt_sampler_work_free(&w);

    /* A vocabulary of 1000 with spread logits at two temperatures: the sampler skips tokens that cannot win, and
     * still picks exactly the exhaustive Gumbel-max. */
    enum { BIG = 1000 };
    static float big[BIG];
    cpt_rng rng;
    cpt_rng_seed(&rng, 9, 0);
    for (int i = 0; i < BIG; i++) big[i] = (float)(4.0 * cpt_rng_normal(&rng));
    cpt_sampler_work wb;
    CHECK(cpt_sampler_work_init(&wb, BIG) == 0);
    int agree = 1;
    for (int t = 0; t < 2; t++) {
        cpt_sample_params sp = {t ? 0.5f : 1.0f, 0, 1, 0};
        for (uint32_t s = 0; s < 300; s++)
            agree &= cpt_k_sample(big, &sp, 77, 5, s, &wb, NULL) == gumbel_reference(big, BIG, sp.temperature, 77, 5, s);
    }
    CHECK(agree);
    cpt_sampler_work_free(&wb);
    top_word_not_forced();
    tiny_temperature_is_greedy();
    return check_summary("test_sampling");
}
