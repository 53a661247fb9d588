/* Next-token sampling on the host (kernels/kernels.h), the draw of kernels/cuda/sampling.cu: the kept set as a
 * prefix of the order (p descending, id ascending), then the Gumbel-max trick over it with counter-based Philox
 * uniforms, so a token depends only on the logits and (seed, sample, step). p is computed as the GPU does
 * (expf((l - max) / T) in fp32) so both devices cut the same kept set; the recorded logprob is summed in double. */
#include <math.h>

#include "core/rng.h"
#include "kernels/cpu/cpu_internal.h"

/* A token's draw is g = z - log(E), E = -log u, z its scaled logit; since E >= 1 - u, g <= z - log(1 - u), so a token
 * with p / (1 - u) below e^best (p = e^z) cannot win and is skipped without its two logarithms. SKIP_MARGIN keeps
 * float rounding on the safe side: only tokens clearly below the best are skipped, so the result is the exhaustive
 * argmax. Before its uniform is even drawn, a token is skipped when no uniform could make it win: the noise
 * -log(-log u) of a 24-bit u is below 17.33, and p < e^best * e^-17.5 (NOISE_FLOOR) leaves a margin. */
#define SKIP_MARGIN 1.001f
#define NOISE_FLOOR 2.5e-8f

int cpt_sampler_work_init(cpt_sampler_work *w, int vocab) {
    w->vocab = vocab;
    w->prob = malloc((size_t)vocab * sizeof *w->prob);
    w->idx = malloc((size_t)vocab * sizeof *w->idx);
    if (!w->prob || !w->idx) {
        cpt_sampler_work_free(w);
        return -1;
    }
    return 0;
}

void cpt_sampler_work_free(cpt_sampler_work *w) {
    free(w->prob);
    free(w->idx);
    w->prob = NULL;
    w->idx = NULL;
}

/* Sorts idx[0..n) by prob descending, ties by lower id (so results never depend on the sort's stability). */
static void sort_desc(int32_t *idx, int n, const float *prob) {
    /* Shell sort: no recursion, no comparator context, fast enough for a vocabulary once per truncated token. */
    static const int gaps[] = {701, 301, 132, 57, 23, 10, 4, 1};
    for (int g = 0; g < 8; g++) {
        int gap = gaps[g];
        for (int i = gap; i < n; i++) {
            int32_t t = idx[i];
            int j = i;
            while (j >= gap && (prob[idx[j - gap]] < prob[t] || (prob[idx[j - gap]] == prob[t] && idx[j - gap] > t))) {
                idx[j] = idx[j - gap];
                j -= gap;
            }
            idx[j] = t;
        }
    }
}

static uint64_t fixq(float p) { return (uint64_t)(p * 1099511627776.0f); } /* p in units of 2^-40, truncated */
/* (0, 1): the top 24 bits, centred. The largest rounds to 1.0 in float (16777215.5 is not representable), which
 * would make -log(-log u) infinite and force that token whatever its probability: it takes the float below 1. */
static float u01(uint32_t x) {
    float u = ((float)(x >> 8) + 0.5f) * (1.0f / 16777216.0f);
    return u < 1.0f ? u : 0x1.fffffep-1f;
}

#define RUN_QUADS 8 /* quads drawn together (cpt_philox4x32_run) */

typedef struct draw {
    uint64_t seed;
    uint32_t sample, step;
    int64_t first; /* the first quad whose words are in u */
    uint32_t u[RUN_QUADS][4];
} draw;

static float uniform(draw *d, int i) {
    int64_t q = i / 4;
    if (q < d->first || q >= d->first + RUN_QUADS) {
        d->first = q - q % RUN_QUADS;
        cpt_philox4x32_run(d->u, d->seed, d->sample, d->step, (uint64_t)d->first, RUN_QUADS);
    }
    return u01(d->u[q - d->first][i % 4]);
}

typedef struct best_draw {
    float g, e; /* the best draw so far and e^g */
    int pick;
} best_draw;

/* Token i (probability p, uniform u) against the best draw so far. */
static inline void consider(best_draw *b, const float *logits, float mx, float inv_t, float p, int i, float u) {
    if (p * SKIP_MARGIN < b->e * (1.0f - u)) return;
    float g = (logits[i] - mx) * inv_t - logf(-logf(u));
    if (g > b->g || (g == b->g && i < b->pick)) { /* larger g, then lower id: the GPU's reduction rule */
        b->g = g, b->pick = i;
        b->e = expf(g);
    }
}

int32_t cpt_k_sample(const float *logits, const cpt_sample_params *sp, uint64_t seed, uint32_t sample, uint32_t step,
                     cpt_sampler_work *w, float *logprob) {
    const int V = w->vocab;
    int32_t best = 0;
    for (int i = 1; i < V; i++)
        if (logits[i] > logits[best]) best = i;
    const float mx = logits[best];
    /* greedy, also at a temperature so small that 1/T overflows (its limit; (l - mx) / T would be 0 * inf) */
    if (!(sp->temperature > 0.0f) || isinf(1.0f / sp->temperature)) {
        double sum = 0;
        for (int i = 0; i < V; i++) sum += exp((double)logits[i] - mx);
        if (logprob) *logprob = (float)(-log(sum));
        return best;
    }
    const float inv_t = 1.0f / sp->temperature;
    const float floor_p = sp->min_p; /* min_p * the max p, which is 1 */
    const int top_k = sp->top_k > 0 && sp->top_k < V ? sp->top_k : 0;
    const int sorted = top_k || sp->top_p < 1.0f;
    float *p = w->prob;
    for (int i = 0; i < V; i++) p[i] = expf((logits[i] - mx) * inv_t);
    /* the kept set: idx[0..n) in p order when truncating by rank or mass, else every token; min-p filters both */
    int n = V;
    if (sorted) {
        for (int i = 0; i < V; i++) w->idx[i] = i;
        sort_desc(w->idx, V, p);
        if (top_k) n = top_k;
        if (sp->top_p < 1.0f) {
            uint64_t tot = 0, acc = 0;
            for (int i = 0; i < n; i++) tot += fixq(p[w->idx[i]]);
            uint64_t target = (uint64_t)ceil((double)sp->top_p * (double)tot);
            if (target < 1) target = 1;
            int m = 0;
            while (m < n && acc < target) acc += fixq(p[w->idx[m++]]);
            n = m;
        }
    }
    best_draw b = {-INFINITY, 0.0f, V};
    double kept = 0;
    if (sorted) {
        draw d = {.seed = seed, .sample = sample, .step = step, .first = -RUN_QUADS};
        for (int k = 0; k < n; k++) {
            int i = w->idx[k];
            if (p[i] < floor_p) continue;
            kept += (double)p[i];
            if (p[i] >= b.e * NOISE_FLOOR) consider(&b, logits, mx, inv_t, p[i], i, uniform(&d, i));
        }
    } else {
        /* every token in id order, a run of RUN_QUADS quads at a time: a run none of whose tokens can win is not
         * drawn at all */
        uint32_t u[RUN_QUADS][4];
        for (int i0 = 0; i0 < V; i0 += 4 * RUN_QUADS) {
            int i1 = V - i0 < 4 * RUN_QUADS ? V : i0 + 4 * RUN_QUADS, any = 0;
            float lo = b.e * NOISE_FLOOR;
            for (int i = i0; i < i1; i++) {
                if (p[i] < floor_p) continue;
                kept += (double)p[i];
                any |= p[i] >= lo;
            }
            if (!any) continue;
            cpt_philox4x32_run(u, seed, sample, step, (uint64_t)(i0 / 4), (i1 - i0 + 3) / 4);
            for (int i = i0; i < i1; i++)
                if (p[i] >= floor_p && p[i] >= b.e * NOISE_FLOOR)
                    consider(&b, logits, mx, inv_t, p[i], i, u01(u[(i - i0) / 4][i % 4]));
        }
    }
    int32_t tok = b.pick < V ? b.pick : best;
    if (logprob) *logprob = (float)(((double)logits[tok] - mx) / sp->temperature - log(kept));
    return tok;
}
