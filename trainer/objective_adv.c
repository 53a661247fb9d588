/* Advantage and reward-shaping helpers of the objectives: GRPO group advantages, dynamic sampling, DAPO overlong
 * punishment, GAE for PPO, OPD's reverse-KL signal. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "trainer/objective.h"

int cpt_grpo_advantages(const double *rewards, int n_groups, int group_size, int std_norm, double eps, float *adv,
                        cpt_err *err) {
    if (n_groups < 0 || group_size < 1)
        return cpt_errf(err, "grpo advantages: bad shape %d groups x %d", n_groups, group_size);
    for (int g = 0; g < n_groups; g++) {
        const double *r = rewards + (size_t)g * group_size;
        double mean = 0;
        for (int i = 0; i < group_size; i++) {
            if (!isfinite(r[i])) return cpt_errf(err, "grpo advantages: reward %d of group %d is not finite", i, g);
            mean += r[i];
        }
        mean /= group_size;
        double var = 0;
        for (int i = 0; i < group_size; i++) var += (r[i] - mean) * (r[i] - mean);
        /* unbiased, like torch.std; a group of one has no spread */
        double sd = group_size > 1 ? sqrt(var / (group_size - 1)) : 0;
        for (int i = 0; i < group_size; i++) {
            double a = r[i] - mean;
            if (std_norm) a /= sd + eps;
            adv[(size_t)g * group_size + i] = (float)a;
        }
    }
    return 0;
}

int cpt_dynamic_sampling_filter(const double *rewards, int n_groups, int group_size, uint8_t *keep) {
    int dropped = 0;
    for (int g = 0; g < n_groups; g++) {
        const double *r = rewards + (size_t)g * group_size;
        int tie = 1;
        for (int i = 1; i < group_size; i++)
            if (r[i] != r[0]) { tie = 0; break; }
        keep[g] = (uint8_t)!tie;
        dropped += tie;
    }
    return dropped;
}

double cpt_overlong_penalty(int len, int max_len, int buffer_len, double factor) {
    if (buffer_len <= 0) return 0;
    int expected = max_len - buffer_len;
    if (len <= expected) return 0;
    if (len > max_len) return -factor;
    return (double)(expected - len) / buffer_len * factor;
}

void cpt_seq_to_tokens(const float *per_seq, int n_seqs, const int32_t *seq_start, const float *mask, float *out) {
    for (int s = 0; s < n_seqs; s++)
        for (int t = seq_start[s]; t < seq_start[s + 1]; t++) out[t] = mask[t] != 0 ? per_seq[s] : 0.0f;
}

int cpt_gae(const float *token_rewards, const float *values, const float *mask, int n_seqs, const int32_t *seq_start,
            double gamma, double lambda, int whiten, double eps, float *adv, float *returns, cpt_err *err) {
    int n_tokens = seq_start[n_seqs];
    for (int t = 0; t < n_tokens; t++) {
        if (mask[t] == 0) continue;
        if (!isfinite(token_rewards[t]) || !isfinite(values[t]))
            return cpt_errf(err, "gae: reward or value at token %d is not finite", t);
    }
    /* advantages stay in double until the end: whitening subtracts the mean, which would expose float rounding */
    double *a = malloc(sizeof(double) * (size_t)(n_tokens ? n_tokens : 1));
    if (!a) return cpt_errf(err, "gae: out of memory for %d tokens", n_tokens);
    for (int s = 0; s < n_seqs; s++) {
        double next_v = 0, next_a = 0;
        for (int t = seq_start[s + 1] - 1; t >= seq_start[s]; t--) {
            if (mask[t] == 0) {
                a[t] = 0;
                returns[t] = 0;
                continue;
            }
            double delta = token_rewards[t] + gamma * next_v - values[t];
            a[t] = delta + gamma * lambda * next_a;
            returns[t] = (float)(a[t] + values[t]);
            next_v = values[t];
            next_a = a[t];
        }
    }
    if (whiten) {
        double n = 0, mean = 0, var = 0;
        for (int t = 0; t < n_tokens; t++)
            if (mask[t] != 0) { n += 1; mean += a[t]; }
        if (n < 2) {
            free(a);
            return cpt_errf(err, "gae: whitening needs at least 2 masked tokens, have %g", n);
        }
        mean /= n;
        for (int t = 0; t < n_tokens; t++)
            if (mask[t] != 0) var += (a[t] - mean) * (a[t] - mean);
        double sd = sqrt(var / (n - 1));
        for (int t = 0; t < n_tokens; t++)
            if (mask[t] != 0) a[t] = (a[t] - mean) / (sd + eps);
    }
    for (int t = 0; t < n_tokens; t++) adv[t] = (float)a[t];
    free(a);
    return 0;
}

void cpt_opd_advantages(const float *logp_student, const float *logp_teacher, const float *task_adv,
                        double task_weight, const float *mask, int n_tokens, float *adv) {
    for (int t = 0; t < n_tokens; t++) {
        if (mask[t] == 0) { adv[t] = 0; continue; }
        double a = -((double)logp_student[t] - logp_teacher[t]);
        if (task_adv) a += task_weight * task_adv[t];
        adv[t] = (float)a;
    }
}
