#include "trainer/online_agree.h"

#include <math.h>
#include <string.h>

void cpt_agree_measure(const cpt_rl_batch *b, const float *trainer_logp, uint64_t version, cpt_agree_stats *out) {
    memset(out, 0, sizeof *out);
    for (int g = 0; g < b->n_groups; g++) {
        if (b->group_version[g] != version) continue;
        int s0 = b->group_seq0[g], s1 = s0 + b->group_size[g];
        for (int t = b->seq_start[s0]; t < b->seq_start[s1]; t++) {
            if (b->mask[t] == 0) continue; /* prompts, and a tool's observation tokens: not sampled */
            double d = (double)trainer_logp[t] - (double)b->behav_logprobs[t];
            double a = fabs(d);
            out->tokens++;
            out->abs_sum += a;
            if (a > out->abs_max) out->abs_max = a;
            if (fabs(expm1(d)) > 0.1) out->far++;
        }
    }
}

int cpt_agree_metrics_list(const cpt_agree_stats *a, const char **names, double *vals, int cap) {
    int k = 0;
#define ADD(n, v)          \
    if (k < cap) {         \
        names[k] = n;      \
        vals[k++] = (v);   \
    }
    if (a->tokens > 0) {
        ADD("agree/logprob_delta_mean", a->abs_sum / (double)a->tokens);
        ADD("agree/logprob_delta_max", a->abs_max);
        ADD("agree/prob_delta_frac10", (double)a->far / (double)a->tokens);
    }
#undef ADD
    return k;
}
