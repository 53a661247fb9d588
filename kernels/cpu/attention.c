/* Causal grouped-query attention over packed sequences, CPU backend.
 *
 * Forward: one task per (token, query head); scores against the keys of the same sequence up to the token,
 * softmax, weighted sum of values; the logsumexp is kept. Backward recomputes the probabilities from it
 * (flash-attention style, no T x T storage); one task per (sequence, kv head) owns the gradients of that kv head's
 * keys and values and of its group's queries, so nothing is summed across threads. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu_internal.h"

static inline float dot(const float *a, const float *b, int n) {
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

static inline void axpy(float *y, float a, const float *x, int n) {
#pragma omp simd
    for (int i = 0; i < n; i++) y[i] += a * x[i];
}

/* Validates shapes and cu_seqlens; returns the longest sequence. */
static int64_t check_attn(const char *op, cpt_tensor qkv, cpt_tensor cu, cpt_attn_shape s) {
    cpt_kcheck_f32(op, "qkv", qkv, 2);
    cpt_kcheck_i32(op, "cu_seqlens", cu, 1);
    KCHECK(s.n_heads > 0 && s.n_kv_heads > 0 && s.head_dim > 0 && s.n_heads % s.n_kv_heads == 0, op,
           "bad head counts: %d query heads, %d kv heads, head_dim %d", s.n_heads, s.n_kv_heads, s.head_dim);
    int64_t N = qkv.shape[0];
    KCHECK(qkv.shape[1] == (int64_t)(s.n_heads + 2 * s.n_kv_heads) * s.head_dim, op, "qkv has %lld columns, want %lld",
           (long long)qkv.shape[1], (long long)(s.n_heads + 2 * s.n_kv_heads) * s.head_dim);
    const int32_t *c = I(cu);
    int64_t S = cu.shape[0] - 1, maxlen = 0;
    KCHECK(S >= 0 && c[0] == 0 && c[S] == N, op, "cu_seqlens must run from 0 to %lld", (long long)N);
    for (int64_t i = 0; i < S; i++) {
        KCHECK(c[i + 1] >= c[i], op, "cu_seqlens decreases at %lld", (long long)i);
        if (c[i + 1] - c[i] > maxlen) maxlen = c[i + 1] - c[i];
    }
    return maxlen;
}

void cpt_k_attention_fwd(cpt_tensor out, cpt_tensor lse, cpt_tensor qkv, cpt_tensor cu_seqlens, cpt_attn_shape s) {
    const char *op = "attention_fwd";
    int64_t maxlen = check_attn(op, qkv, cu_seqlens, s);
    int64_t N = qkv.shape[0], S = cu_seqlens.shape[0] - 1;
    int H = s.n_heads, KV = s.n_kv_heads, D = s.head_dim, group = H / KV;
    int64_t row = qkv.shape[1];
    cpt_kcheck_f32(op, "out", out, 2);
    cpt_kcheck_f32(op, "lse", lse, 2);
    KCHECK(out.shape[0] == N && out.shape[1] == (int64_t)H * D && lse.shape[0] == N && lse.shape[1] == H, op,
           "out or lse shape mismatch");
    int32_t *start = malloc(sizeof(int32_t) * (size_t)(N > 0 ? N : 1));
    KCHECK(start != NULL, op, "out of memory");
    const int32_t *cu = I(cu_seqlens);
    for (int64_t q = 0; q < S; q++)
        for (int32_t n = cu[q]; n < cu[q + 1]; n++) start[n] = cu[q];
    const float *x = F(qkv);
    float scale = 1.0f / sqrtf((float)D);
#pragma omp parallel if(N * H >= 64)
    {
        float *sc = malloc(sizeof(float) * (size_t)(maxlen > 0 ? maxlen : 1));
        KCHECK(sc != NULL, op, "out of memory");
#pragma omp for schedule(dynamic, 16)
        for (int64_t t = 0; t < N * H; t++) {
            int64_t n = t / H;
            int h = (int)(t % H), kh = h / group;
            const float *q = x + n * row + (int64_t)h * D;
            int64_t j0 = start[n], len = n - j0 + 1;
            float m = -INFINITY;
            for (int64_t j = 0; j < len; j++) {
                float v = dot(q, x + (j0 + j) * row + (int64_t)(H + kh) * D, D) * scale;
                sc[j] = v;
                if (v > m) m = v;
            }
            float sum = 0.0f;
            for (int64_t j = 0; j < len; j++) {
                sc[j] = expf(sc[j] - m);
                sum += sc[j];
            }
            float *o = F(out) + n * (int64_t)H * D + (int64_t)h * D;
            memset(o, 0, sizeof(float) * (size_t)D);
            for (int64_t j = 0; j < len; j++) axpy(o, sc[j] / sum, x + (j0 + j) * row + (int64_t)(H + KV + kh) * D, D);
            F(lse)[n * H + h] = m + logf(sum);
        }
        free(sc);
    }
    free(start);
}

void cpt_k_attention_bwd(cpt_tensor dqkv, cpt_tensor dout, cpt_tensor out, cpt_tensor lse, cpt_tensor qkv,
                         cpt_tensor cu_seqlens, cpt_attn_shape s) {
    const char *op = "attention_bwd";
    check_attn(op, qkv, cu_seqlens, s);
    int64_t N = qkv.shape[0], S = cu_seqlens.shape[0] - 1;
    int H = s.n_heads, KV = s.n_kv_heads, D = s.head_dim, group = H / KV;
    int64_t row = qkv.shape[1], orow = (int64_t)H * D;
    cpt_kcheck_f32(op, "dqkv", dqkv, 2);
    cpt_kcheck_f32(op, "dout", dout, 2);
    cpt_kcheck_f32(op, "out", out, 2);
    cpt_kcheck_f32(op, "lse", lse, 2);
    KCHECK(dqkv.shape[0] == N && dqkv.shape[1] == row && dout.shape[0] == N && dout.shape[1] == orow &&
               out.shape[0] == N && out.shape[1] == orow && lse.shape[0] == N && lse.shape[1] == H,
           op, "shape mismatch");
    const int32_t *cu = I(cu_seqlens);
    const float *x = F(qkv), *dO = F(dout), *O = F(out), *L = F(lse);
    float *dx = F(dqkv);
    float scale = 1.0f / sqrtf((float)D);
#pragma omp parallel for schedule(dynamic, 1) if(N * H >= 64)
    for (int64_t t = 0; t < S * KV; t++) {
        int64_t sq = t / KV;
        int kh = (int)(t % KV);
        int64_t j0 = cu[sq], j1 = cu[sq + 1];
        int64_t koff = (int64_t)(H + kh) * D, voff = (int64_t)(H + KV + kh) * D;
        for (int h = kh * group; h < (kh + 1) * group; h++) {
            for (int64_t i = j0; i < j1; i++) {
                const float *q = x + i * row + (int64_t)h * D;
                const float *doi = dO + i * orow + (int64_t)h * D;
                float *dq = dx + i * row + (int64_t)h * D;
                float Di = dot(doi, O + i * orow + (int64_t)h * D, D);
                float li = L[i * H + h];
                for (int64_t j = j0; j <= i; j++) {
                    const float *k = x + j * row + koff, *v = x + j * row + voff;
                    float p = expf(dot(q, k, D) * scale - li);
                    float dp = dot(doi, v, D);
                    float ds = p * (dp - Di) * scale;
                    axpy(dq, ds, k, D);
                    axpy(dx + j * row + koff, ds, q, D);
                    axpy(dx + j * row + voff, p, doi, D);
                }
            }
        }
    }
}
