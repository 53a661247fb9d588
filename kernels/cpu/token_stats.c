/* Per-token log-softmax statistics from a chunk of logits: logsumexp, logprob of the target, entropy; and the
 * gradient of a loss that depends on them, written over the logits chunk. One row per task. */
#include <math.h>

#include "core/par.h"
#include "kernels/cpu/cpu_internal.h"

static void check_rows(const char *op, const char *what, cpt_tensor t, int64_t n) {
    if (!cpt_tensor_present(t)) return;
    if (t.dtype == CPT_DT_I32)
        cpt_kcheck_i32(op, what, t, 1);
    else
        cpt_kcheck_f32(op, what, t, 1);
    KCHECK(t.shape[0] == n, op, "%s has %lld rows, want %lld", what, (long long)t.shape[0], (long long)n);
}

void cpt_k_token_stats_fwd(cpt_tensor logprob, cpt_tensor entropy, cpt_tensor lse, cpt_tensor logits,
                           cpt_tensor targets) {
    const char *op = "token_stats_fwd";
    cpt_kcheck_f32(op, "logits", logits, 2);
    cpt_kcheck_f32(op, "lse", lse, 1);
    int64_t n = logits.shape[0], V = logits.shape[1];
    check_rows(op, "lse", lse, n);
    check_rows(op, "logprob", logprob, n);
    check_rows(op, "entropy", entropy, n);
    KCHECK(!cpt_tensor_present(logprob) || cpt_tensor_present(targets), op, "logprob needs targets");
    if (cpt_tensor_present(targets)) {
        KCHECK(targets.dtype == CPT_DT_I32, op, "targets must be int32");
        check_rows(op, "targets", targets, n);
        for (int64_t r = 0; r < n; r++)
            KCHECK(I(targets)[r] < V, op, "target %d at row %lld outside [0, %lld)", I(targets)[r], (long long)r, (long long)V);
    }
    CPT_PAR_FOR(cpt_par(n * V, PAR_MIN),
        for (int64_t r = 0; r < n; r++) {
            const float *z = F(logits) + r * V;
            float m = -INFINITY;
            for (int64_t v = 0; v < V; v++) m = z[v] > m ? z[v] : m;
            float sum = 0.0f, wsum = 0.0f; /* sum e^(z-m), sum e^(z-m) * (z-m) */
            for (int64_t v = 0; v < V; v++) {
                float e = expf(z[v] - m);
                sum += e;
                wsum += e * (z[v] - m);
            }
            float l = m + logf(sum);
            F(lse)[r] = l;
            /* H = lse - sum p z = log(sum) - wsum / sum (shifted by m) */
            if (cpt_tensor_present(entropy)) F(entropy)[r] = logf(sum) - wsum / sum;
            if (cpt_tensor_present(logprob)) {
                int32_t t = I(targets)[r];
                F(logprob)[r] = t >= 0 ? z[t] - l : 0.0f;
            }
        });
}

void cpt_k_token_stats_bwd(cpt_tensor logits, cpt_tensor lse, cpt_tensor entropy, cpt_tensor targets,
                           cpt_tensor d_logprob, cpt_tensor d_entropy) {
    const char *op = "token_stats_bwd";
    cpt_kcheck_f32(op, "logits", logits, 2);
    int64_t n = logits.shape[0], V = logits.shape[1];
    cpt_kcheck_f32(op, "lse", lse, 1);
    check_rows(op, "lse", lse, n);
    check_rows(op, "targets", targets, n);
    check_rows(op, "d_logprob", d_logprob, n);
    check_rows(op, "d_entropy", d_entropy, n);
    KCHECK(!cpt_tensor_present(d_logprob) || cpt_tensor_present(targets), op, "d_logprob needs targets");
    KCHECK(!cpt_tensor_present(d_entropy) || cpt_tensor_present(entropy), op, "d_entropy needs the entropy");
    check_rows(op, "entropy", entropy, n);
    CPT_PAR_FOR(cpt_par(n * V, PAR_MIN),
        for (int64_t r = 0; r < n; r++) {
            float *z = F(logits) + r * V;
            float l = F(lse)[r];
            float dl = cpt_tensor_present(d_logprob) ? F(d_logprob)[r] : 0.0f;
            int32_t t = cpt_tensor_present(targets) ? I(targets)[r] : -1;
            if (t < 0) dl = 0.0f;
            float de = cpt_tensor_present(d_entropy) ? F(d_entropy)[r] : 0.0f;
            float H = de != 0.0f ? F(entropy)[r] : 0.0f;
            for (int64_t v = 0; v < V; v++) {
                float lp = z[v] - l, p = expf(lp);
                z[v] = -dl * p - de * p * (lp + H);
            }
            if (t >= 0) z[t] += dl;
        });
}
