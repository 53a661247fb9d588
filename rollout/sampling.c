#include "rollout/sampling.h"

#include <math.h>
#include <stdlib.h>

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

/* Sorts idx[0..n) by prob descending (ties: lower id first, so results never depend on the sort's stability). */
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

int32_t cpt_sample(const float *logits, const cpt_sample_params *sp, cpt_rng *rng, cpt_sampler_work *w, float *logprob) {
    int V = w->vocab;
    int32_t best = 0;
    for (int i = 1; i < V; i++)
        if (logits[i] > logits[best]) best = i;
    if (sp->temperature <= 0.0f) {
        double sum = 0;
        for (int i = 0; i < V; i++) sum += exp((double)logits[i] - logits[best]);
        if (logprob) *logprob = (float)(-log(sum));
        return best;
    }
    double inv_t = 1.0 / sp->temperature, maxz = logits[best] * inv_t, total = 0;
    for (int i = 0; i < V; i++) {
        w->prob[i] = (float)exp(logits[i] * inv_t - maxz);
        total += w->prob[i];
    }
    /* The kept set: all tokens, or a sorted prefix when truncating. */
    int n = V;
    int truncating = (sp->top_k > 0 && sp->top_k < V) || sp->top_p < 1.0f || sp->min_p > 0.0f;
    for (int i = 0; i < V; i++) w->idx[i] = i;
    if (truncating) {
        sort_desc(w->idx, V, w->prob);
        if (sp->top_k > 0 && sp->top_k < n) n = sp->top_k;
        if (sp->top_p < 1.0f) {
            double kept_mass = 0;
            for (int i = 0; i < n; i++) kept_mass += w->prob[w->idx[i]];
            double acc = 0;
            int m = 0;
            while (m < n) {
                acc += w->prob[w->idx[m++]];
                if (acc >= sp->top_p * kept_mass) break;
            }
            n = m;
        }
        if (sp->min_p > 0.0f) {
            float floor_p = sp->min_p * w->prob[w->idx[0]];
            int m = 1;
            while (m < n && w->prob[w->idx[m]] >= floor_p) m++;
            n = m;
        }
    }
    double kept = 0;
    for (int i = 0; i < n; i++) kept += w->prob[w->idx[i]];
    double u = cpt_rng_double(rng) * kept, acc = 0;
    int32_t tok = w->idx[n - 1];
    for (int i = 0; i < n; i++) {
        acc += w->prob[w->idx[i]];
        if (u < acc) {
            tok = w->idx[i];
            break;
        }
    }
    if (logprob) *logprob = (float)(log((double)w->prob[tok]) - log(kept));
    (void)total;
    return tok;
}
