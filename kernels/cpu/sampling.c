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
 * argmax. */
#define SKIP_MARGIN 1.001f

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
static float u01(uint32_t x) { return ((float)(x >> 8) + 0.5f) * (1.0f / 16777216.0f); }

typedef struct draw {
    uint64_t seed;
    uint32_t sample, step;
    int64_t quad; /* the quad whose words are in u */
    uint32_t u[4];
} draw;

static float uniform(draw *d, int i) {
    if (i / 4 != d->quad) {
        d->quad = i / 4;
        cpt_philox4x32(d->u, d->seed, d->sample, d->step, (uint64_t)d->quad);
    }
    return u01(d->u[i % 4]);
}

int32_t cpt_k_sample(const float *logits, const cpt_sample_params *sp, uint64_t seed, uint32_t sample, uint32_t step,
                     cpt_sampler_work *w, float *logprob) {
    const int V = w->vocab;
    int32_t best = 0;
    for (int i = 1; i < V; i++)
        if (logits[i] > logits[best]) best = i;
    const float mx = logits[best];
    if (!(sp->temperature > 0.0f)) {
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
    draw d = {.seed = seed, .sample = sample, .step = step, .quad = -1};
    float best_g = -INFINITY, best_e = 0.0f; /* best_e = e^best_g */
    int pick = V;
    double kept = 0;
    for (int k = 0; k < n; k++) {
        int i = sorted ? w->idx[k] : k;
        if (p[i] < floor_p) continue;
        kept += (double)p[i];
        float u = uniform(&d, i);
        if (p[i] * SKIP_MARGIN < best_e * (1.0f - u)) continue;
        float g = (logits[i] - mx) * inv_t - logf(-logf(u));
        if (g > best_g || (g == best_g && i < pick)) { /* larger g, then lower id: the GPU's reduction rule */
            best_g = g, pick = i;
            best_e = expf(best_g);
        }
    }
    int32_t tok = pick < V ? pick : best;
    if (logprob) *logprob = (float)(((double)logits[tok] - mx) / sp->temperature - log(kept));
    return tok;
}
