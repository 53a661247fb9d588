/* Causal grouped-query attention over packed sequences, CPU backend.
 *
 * Blocked on the GEMM kernel: for a block of up to BQ queries of one head, S = Q K^T over the keys up to the
 * block's last query, a causal row softmax gives P (the logsumexp is kept), and O = P V. The backward recomputes P
 * from the logsumexp (flash-attention style: memory stays O(BQ x sequence) per thread, never T x T per head) and
 * forms dV += P^T dO, dP = dO V^T, dS = P (dP - rowsum(dO O)), dQ += dS K, dK += dS^T Q. One backward task per
 * (sequence, kv head) owns that kv head's dK and dV and its query heads' dQ, so nothing is summed across
 * threads and the result does not depend on the thread count. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/par.h"
#include "kernels/cpu/cpu_internal.h"

#define BQ 128 /* queries per block */

static inline float dot(const float *a, const float *b, int n) {
    float s = 0.0f;
    for (int i = 0; i < n; i++) s += a[i] * b[i];
    return s;
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

/* What every task of one call reads: the packed rows and their layout. */
typedef struct {
    const int32_t *cu;
    const float *x, *dO, *O, *L;
    float *o, *lse, *dx;
    int H, KV, D, group;
    int64_t row, HD, nblk;
    float scale;
} attn_args;

/* Forward task t: one block of up to BQ queries of one head of one sequence; P is this thread's scratch. */
static void fwd_task(const attn_args *A, int64_t t, float *P) {
    const int32_t *cu = A->cu;
    const float *x = A->x;
    float *o = A->o, *L = A->lse;
    const int H = A->H, KV = A->KV, D = A->D, group = A->group;
    const int64_t row = A->row, HD = A->HD, nblk = A->nblk;
    const float scale = A->scale;

    int64_t sq = t / (H * nblk), j0 = cu[sq], len = cu[sq + 1] - j0;
    int h = (int)((t / nblk) % H), kh = h / group;
    int64_t i0 = (t % nblk) * BQ;
    if (i0 >= len) return;
    int64_t i1 = i0 + BQ < len ? i0 + BQ : len, nq = i1 - i0, nk = i1;
    const float *q = x + (j0 + i0) * row + (int64_t)h * D, *k = x + j0 * row + (int64_t)(H + kh) * D,
                *v = x + j0 * row + (int64_t)(H + KV + kh) * D;
    cpt_cpu_gemm_strided(P, nk, nq, nk, D, q, row, 0, k, row, 1, 0);
    for (int64_t r = 0; r < nq; r++) {
        float *pr = P + r * nk;
        int64_t last = i0 + r; /* keys 0 .. last */
        float m = -INFINITY;
        for (int64_t j = 0; j <= last; j++) {
            pr[j] *= scale;
            m = pr[j] > m ? pr[j] : m;
        }
        float sum = 0.0f;
        for (int64_t j = 0; j <= last; j++) {
            pr[j] = expf(pr[j] - m);
            sum += pr[j];
        }
        float inv = 1.0f / sum;
        for (int64_t j = 0; j <= last; j++) pr[j] *= inv;
        for (int64_t j = last + 1; j < nk; j++) pr[j] = 0.0f;
        L[(j0 + i0 + r) * H + h] = m + logf(sum);
    }
    cpt_cpu_gemm_strided(o + (j0 + i0) * HD + (int64_t)h * D, HD, nq, D, nk, P, nk, 0, v, row, 0, 0);
}

void cpt_k_attention_fwd(cpt_tensor out, cpt_tensor lse, cpt_tensor qkv, cpt_tensor cu_seqlens, cpt_attn_shape s) {
    const char *op = "attention_fwd";
    int64_t maxlen = check_attn(op, qkv, cu_seqlens, s);
    int64_t N = qkv.shape[0], S = cu_seqlens.shape[0] - 1;
    int H = s.n_heads, KV = s.n_kv_heads, D = s.head_dim, group = H / KV;
    int64_t row = qkv.shape[1], HD = (int64_t)H * D;
    cpt_kcheck_f32(op, "out", out, 2);
    cpt_kcheck_f32(op, "lse", lse, 2);
    KCHECK(out.shape[0] == N && out.shape[1] == HD && lse.shape[0] == N && lse.shape[1] == H, op,
           "out or lse shape mismatch");
    attn_args A = {.cu = I(cu_seqlens), .x = F(qkv), .o = F(out), .lse = F(lse), .H = H, .KV = KV, .D = D,
                   .group = group, .row = row, .HD = HD, .nblk = (maxlen + BQ - 1) / BQ,
                   .scale = 1.0f / sqrtf((float)D)};
    int64_t tasks = S * H * A.nblk;
    size_t scratch = sizeof(float) * (size_t)BQ * (size_t)(maxlen > 0 ? maxlen : 1);
    if (cpt_par(N * H, 64)) {
#pragma omp parallel
        {
            float *P = malloc(scratch);
            KCHECK(P != NULL, op, "out of memory");
#pragma omp for schedule(dynamic, 1)
            for (int64_t t = 0; t < tasks; t++) fwd_task(&A, t, P);
            free(P);
        }
    } else {
        float *P = malloc(scratch);
        KCHECK(P != NULL, op, "out of memory");
        for (int64_t t = 0; t < tasks; t++) fwd_task(&A, t, P);
        free(P);
    }
}

/* Backward task t: one kv head of one sequence, with its query heads; P, dP and Di are this thread's scratch. */
static void bwd_task(const attn_args *A, int64_t t, float *P, float *dP, float *Di) {
    const int32_t *cu = A->cu;
    const float *x = A->x, *dO = A->dO, *O = A->O, *L = A->L;
    float *dx = A->dx;
    const int H = A->H, KV = A->KV, D = A->D, group = A->group;
    const int64_t row = A->row, HD = A->HD;
    const float scale = A->scale;

    int64_t sq = t / KV, j0 = cu[sq], len = cu[sq + 1] - j0;
    int kh = (int)(t % KV);
    const float *k = x + j0 * row + (int64_t)(H + kh) * D, *v = x + j0 * row + (int64_t)(H + KV + kh) * D;
    float *dk = dx + j0 * row + (int64_t)(H + kh) * D, *dv = dx + j0 * row + (int64_t)(H + KV + kh) * D;
    for (int h = kh * group; h < (kh + 1) * group; h++) {
        for (int64_t i0 = 0; i0 < len; i0 += BQ) {
            int64_t i1 = i0 + BQ < len ? i0 + BQ : len, nq = i1 - i0, nk = i1;
            const float *q = x + (j0 + i0) * row + (int64_t)h * D;
            const float *dob = dO + (j0 + i0) * HD + (int64_t)h * D, *ob = O + (j0 + i0) * HD + (int64_t)h * D;
            float *dq = dx + (j0 + i0) * row + (int64_t)h * D;
            /* P from the kept logsumexp */
            cpt_cpu_gemm_strided(P, nk, nq, nk, D, q, row, 0, k, row, 1, 0);
            for (int64_t r = 0; r < nq; r++) {
                float *pr = P + r * nk, l = L[(j0 + i0 + r) * H + h];
                int64_t last = i0 + r;
                for (int64_t j = 0; j <= last; j++) pr[j] = expf(pr[j] * scale - l);
                for (int64_t j = last + 1; j < nk; j++) pr[j] = 0.0f;
                Di[r] = dot(dob + r * HD, ob + r * HD, D);
            }
            cpt_cpu_gemm_strided(dv, row, nk, D, nq, P, nk, 1, dob, HD, 0, 1);       /* dV += P^T dO */
            cpt_cpu_gemm_strided(dP, nk, nq, nk, D, dob, HD, 0, v, row, 1, 0);       /* dP = dO V^T */
            for (int64_t r = 0; r < nq; r++)
                for (int64_t j = 0; j < nk; j++) dP[r * nk + j] = P[r * nk + j] * (dP[r * nk + j] - Di[r]) * scale;
            cpt_cpu_gemm_strided(dq, row, nq, D, nk, dP, nk, 0, k, row, 0, 1);       /* dQ += dS K */
            cpt_cpu_gemm_strided(dk, row, nk, D, nq, dP, nk, 1, q, row, 0, 1);       /* dK += dS^T Q */
        }
    }
}

void cpt_k_attention_bwd(cpt_tensor dqkv, cpt_tensor dout, cpt_tensor out, cpt_tensor lse, cpt_tensor qkv,
                         cpt_tensor cu_seqlens, cpt_attn_shape s) {
    const char *op = "attention_bwd";
    int64_t maxlen = check_attn(op, qkv, cu_seqlens, s);
    int64_t N = qkv.shape[0], S = cu_seqlens.shape[0] - 1;
    int H = s.n_heads, KV = s.n_kv_heads, D = s.head_dim, group = H / KV;
    int64_t row = qkv.shape[1], HD = (int64_t)H * D;
    cpt_kcheck_f32(op, "dqkv", dqkv, 2);
    cpt_kcheck_f32(op, "dout", dout, 2);
    cpt_kcheck_f32(op, "out", out, 2);
    cpt_kcheck_f32(op, "lse", lse, 2);
    KCHECK(dqkv.shape[0] == N && dqkv.shape[1] == row && dout.shape[0] == N && dout.shape[1] == HD &&
               out.shape[0] == N && out.shape[1] == HD && lse.shape[0] == N && lse.shape[1] == H,
           op, "shape mismatch");
    attn_args A = {.cu = I(cu_seqlens), .x = F(qkv), .dO = F(dout), .O = F(out), .L = F(lse), .dx = F(dqkv),
                   .H = H, .KV = KV, .D = D, .group = group, .row = row, .HD = HD,
                   .scale = 1.0f / sqrtf((float)D)};
    size_t scratch = (size_t)BQ * (size_t)(maxlen > 0 ? maxlen : 1), bytes = sizeof(float) * (scratch * 2 + BQ);
    if (cpt_par(N * H, 64)) {
#pragma omp parallel
        {
            float *P = malloc(bytes);
            KCHECK(P != NULL, op, "out of memory");
#pragma omp for schedule(dynamic, 1)
            for (int64_t t = 0; t < S * KV; t++) bwd_task(&A, t, P, P + scratch, P + 2 * scratch);
            free(P);
        }
    } else {
        float *P = malloc(bytes);
        KCHECK(P != NULL, op, "out of memory");
        for (int64_t t = 0; t < S * KV; t++) bwd_task(&A, t, P, P + scratch, P + 2 * scratch);
        free(P);
    }
}
