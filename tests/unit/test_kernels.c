/* CPU kernels: gemm against a naive product (every transpose, ragged sizes, accumulate, thread-count
 * independence), attention against a per-sequence reference (packing, GQA, no cross-boundary reads), and every
 * backward against central finite differences of a random linear functional of the forward. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "core/rng.h"
#include "kernels/kernels.h"

static cpt_rng rng;

static float *randv(size_t n, float scale) {
    float *p = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) p[i] = scale * (2.0f * cpt_rng_float(&rng) - 1.0f);
    return p;
}

static float *zeros(size_t n) { return calloc(n, sizeof(float)); }

static double dotd(const float *a, const float *b, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)a[i] * b[i];
    return s;
}

static double max_abs(const float *a, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs(a[i]));
    return m;
}

/* ---- gemm ---- */

static void test_gemm(void) {
    const int shapes[][3] = {{1, 1, 1}, {7, 13, 5}, {97, 33, 300}, {130, 270, 17}, {6, 16, 256}};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        int M = shapes[si][0], N = shapes[si][1], K = shapes[si][2];
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++)
                for (int acc = 0; acc < 2; acc++) {
                    float *a = randv((size_t)M * K, 1), *b = randv((size_t)K * N, 1), *c = randv((size_t)M * N, 1);
                    float *c0 = malloc(sizeof(float) * M * N);
                    memcpy(c0, c, sizeof(float) * M * N);
                    cpt_tensor A = ta ? cpt_tensor_f32_2d(a, K, M) : cpt_tensor_f32_2d(a, M, K);
                    cpt_tensor B = tb ? cpt_tensor_f32_2d(b, N, K) : cpt_tensor_f32_2d(b, K, N);
                    cpt_k_gemm(cpt_tensor_f32_2d(c, M, N), A, ta, B, tb, acc);
                    double maxerr = 0;
                    for (int i = 0; i < M; i++)
                        for (int j = 0; j < N; j++) {
                            double s = acc ? c0[i * N + j] : 0;
                            for (int k = 0; k < K; k++)
                                s += (double)(ta ? a[k * M + i] : a[i * K + k]) * (tb ? b[j * K + k] : b[k * N + j]);
                            maxerr = fmax(maxerr, fabs(s - c[i * N + j]));
                        }
                    CHECK_MSG(maxerr < 1e-4 * sqrt(K) + 1e-6, "gemm %dx%dx%d ta=%d tb=%d acc=%d: max err %g", M, N, K,
                              ta, tb, acc, maxerr);
                    free(a), free(b), free(c), free(c0);
                }
    }
    /* bitwise identical with 1 and 2 threads */
    int M = 200, N = 150, K = 600;
    float *a = randv((size_t)M * K, 1), *b = randv((size_t)N * K, 1), *c1 = zeros((size_t)M * N),
          *c2 = zeros((size_t)M * N);
    int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    cpt_k_gemm(cpt_tensor_f32_2d(c1, M, N), cpt_tensor_f32_2d(a, M, K), 0, cpt_tensor_f32_2d(b, N, K), 1, 0);
    omp_set_num_threads(2);
    cpt_k_gemm(cpt_tensor_f32_2d(c2, M, N), cpt_tensor_f32_2d(a, M, K), 0, cpt_tensor_f32_2d(b, N, K), 1, 0);
    omp_set_num_threads(saved);
    CHECK(memcmp(c1, c2, sizeof(float) * M * N) == 0);
    free(a), free(b), free(c1), free(c2);
}

/* ---- finite differences ----
 * loss(x) = sum_i r_i * f(x)_i for a fixed random r; the backward gets dout = r. */

typedef struct fd_case {
    const char *name;
    void (*fwd)(void *ctx, float *out);            /* writes the forward output */
    size_t n_out;
} fd_case;

static double fd_loss(const fd_case *fc, void *ctx, const float *r, float *scratch) {
    fc->fwd(ctx, scratch);
    return dotd(scratch, r, fc->n_out);
}

/* Compares grad (analytic, for the input array x of n entries) with central differences at up to 40 entries. */
static void fd_compare(const char *what, const fd_case *fc, void *ctx, float *x, size_t n, const float *grad,
                       const float *r) {
    float *scratch = malloc(sizeof(float) * fc->n_out);
    double gmax = max_abs(grad, n), worst = 0;
    size_t step = n / 40 + 1;
    for (size_t i = 0; i < n; i += step) {
        float keep = x[i];
        float h = 3e-3f * fmaxf(1.0f, fabsf(keep));
        x[i] = keep + h;
        double lp = fd_loss(fc, ctx, r, scratch);
        x[i] = keep - h;
        double lm = fd_loss(fc, ctx, r, scratch);
        x[i] = keep;
        double num = (lp - lm) / (2.0 * h);
        worst = fmax(worst, fabs(num - grad[i]) / (gmax + 1e-6));
    }
    CHECK_MSG(worst < 2e-3, "%s: d/d%s finite-difference mismatch %.3g (relative to max |grad| %.3g)", fc->name, what,
              worst, gmax);
    printf("%s d/d%s: worst finite-difference mismatch %.2e\n", fc->name, what, worst);
    free(scratch);
}

/* rmsnorm */
typedef struct { int R, C; float *x, *w, *rstd; } rms_ctx;
static void rms_fwd(void *p, float *out) {
    rms_ctx *c = p;
    cpt_k_rmsnorm_fwd(cpt_tensor_f32_2d(out, c->R, c->C), cpt_tensor_f32_1d(c->rstd, c->R),
                      cpt_tensor_f32_2d(c->x, c->R, c->C), cpt_tensor_f32_1d(c->w, c->C), 1e-6f);
}
static void test_rmsnorm(void) {
    rms_ctx c = {5, 24, NULL, NULL, NULL};
    c.x = randv(5 * 24, 2), c.w = randv(24, 1), c.rstd = zeros(5);
    fd_case fc = {"rmsnorm", rms_fwd, 5 * 24};
    float *r = randv(fc.n_out, 1), *out = zeros(fc.n_out), *dx = zeros(fc.n_out), *dw = zeros(24);
    rms_fwd(&c, out);
    /* HF formula check on one row */
    double ss = 0;
    for (int i = 0; i < 24; i++) ss += (double)c.x[24 + i] * c.x[24 + i];
    CHECK_NEAR(out[24 + 3], c.w[3] * c.x[24 + 3] / sqrt(ss / 24 + 1e-6), 1e-5);
    cpt_k_rmsnorm_bwd(cpt_tensor_f32_2d(dx, 5, 24), cpt_tensor_f32_1d(dw, 24), cpt_tensor_f32_2d(r, 5, 24),
                      cpt_tensor_f32_2d(c.x, 5, 24), cpt_tensor_f32_1d(c.w, 24), cpt_tensor_f32_1d(c.rstd, 5));
    fd_compare("x", &fc, &c, c.x, 5 * 24, dx, r);
    fd_compare("w", &fc, &c, c.w, 24, dw, r);
    free(c.x), free(c.w), free(c.rstd), free(r), free(out), free(dx), free(dw);
}

/* swiglu */
typedef struct { int N, H; float *gu; } swi_ctx;
static void swi_fwd(void *p, float *out) {
    swi_ctx *c = p;
    cpt_k_swiglu_fwd(cpt_tensor_f32_2d(out, c->N, c->H), cpt_tensor_f32_2d(c->gu, c->N, 2 * c->H));
}
static void test_swiglu(void) {
    swi_ctx c = {4, 10, NULL};
    c.gu = randv(4 * 20, 3);
    fd_case fc = {"swiglu", swi_fwd, 40};
    float *r = randv(40, 1), *out = zeros(40), *dgu = zeros(80);
    swi_fwd(&c, out);
    CHECK_NEAR(out[13], c.gu[20 + 3] / (1 + exp(-c.gu[20 + 3])) * c.gu[20 + 13], 1e-5);
    cpt_k_swiglu_bwd(cpt_tensor_f32_2d(dgu, 4, 20), cpt_tensor_f32_2d(r, 4, 10), cpt_tensor_f32_2d(c.gu, 4, 20));
    fd_compare("gu", &fc, &c, c.gu, 80, dgu, r);
    free(c.gu), free(r), free(out), free(dgu);
}

/* rope: bwd(fwd(x)) == x, a known rotation, and llama3 scaling against hand-computed frequencies */
static void test_rope(void) {
    int N = 3, H = 2, D = 8, stride = 20;
    float *x = randv((size_t)N * stride, 1), *x0 = malloc(sizeof(float) * N * stride), inv[4];
    memcpy(x0, x, sizeof(float) * N * stride);
    int32_t pos[3] = {0, 5, 1000};
    cpt_rope_cfg rc = {D, 10000.0f, 0, 0, 0, 0, 0};
    cpt_rope_inv_freq(&rc, inv);
    CHECK_NEAR(inv[1], pow(10000.0, -2.0 / 8), 1e-6);
    cpt_k_rope_fwd(cpt_tensor_f32_2d(x, N, stride), H, D, cpt_tensor_i32_1d(pos, N), cpt_tensor_f32_1d(inv, 4));
    CHECK(memcmp(x, x0, sizeof(float) * D * H) == 0); /* position 0: identity */
    double ang = 5.0 * inv[2];
    CHECK_NEAR(x[stride + 2], x0[stride + 2] * cos(ang) - x0[stride + 6] * sin(ang), 1e-5);
    CHECK_NEAR(x[stride + 6], x0[stride + 6] * cos(ang) + x0[stride + 2] * sin(ang), 1e-5);
    CHECK(x[stride + 16] == x0[stride + 16]); /* columns past the heads untouched */
    cpt_k_rope_bwd(cpt_tensor_f32_2d(x, N, stride), H, D, cpt_tensor_i32_1d(pos, N), cpt_tensor_f32_1d(inv, 4));
    double err = 0;
    for (int i = 0; i < N * stride; i++) err = fmax(err, fabs(x[i] - x0[i]));
    CHECK_MSG(err < 1e-5, "rope bwd(fwd(x)) differs from x by %g", err);
    /* llama3: wavelen > old/low -> divided by factor; < old/high -> unchanged */
    cpt_rope_cfg l3 = {64, 500000.0f, 1, 8.0f, 1.0f, 4.0f, 8192};
    float f3[32], f0[32];
    cpt_rope_inv_freq(&l3, f3);
    l3.llama3 = 0;
    cpt_rope_inv_freq(&l3, f0);
    CHECK_NEAR(f3[0], f0[0], 1e-7);
    CHECK_NEAR(f3[31], f0[31] / 8.0f, 1e-9);
    int medium = 0;
    for (int i = 0; i < 32; i++) {
        double wl = 2 * M_PI / f0[i];
        if (wl >= 8192 / 4.0 && wl <= 8192 / 1.0) {
            medium++;
            double sm = (8192 / wl - 1.0) / 3.0;
            CHECK_NEAR(f3[i], (1 - sm) * f0[i] / 8 + sm * f0[i], 1e-6 * f0[i] + 1e-9);
        }
    }
    CHECK(medium > 0);
    free(x), free(x0);
}

/* attention */
typedef struct { int N, S, H, KV, D; float *qkv; int32_t *cu; float *lse; } att_ctx;
static void att_fwd(void *p, float *out) {
    att_ctx *c = p;
    cpt_attn_shape s = {c->H, c->KV, c->D};
    cpt_k_attention_fwd(cpt_tensor_f32_2d(out, c->N, c->H * c->D), cpt_tensor_f32_2d(c->lse, c->N, c->H),
                        cpt_tensor_f32_2d(c->qkv, c->N, (c->H + 2 * c->KV) * c->D), cpt_tensor_i32_1d(c->cu, c->S + 1),
                        s);
}

static void test_attention(void) {
    int32_t cu[4] = {0, 5, 6, 13};
    att_ctx c = {13, 3, 4, 2, 8, NULL, cu, NULL};
    int row = (c.H + 2 * c.KV) * c.D;
    c.qkv = randv((size_t)c.N * row, 1.5f);
    c.lse = zeros((size_t)c.N * c.H);
    fd_case fc = {"attention", att_fwd, (size_t)c.N * c.H * c.D};
    float *out = zeros(fc.n_out), *r = randv(fc.n_out, 1), *dqkv = zeros((size_t)c.N * row);
    att_fwd(&c, out);
    /* reference in double, per sequence */
    double err = 0;
    for (int s = 0; s < 3; s++)
        for (int i = cu[s]; i < cu[s + 1]; i++)
            for (int h = 0; h < c.H; h++) {
                int kh = h / (c.H / c.KV);
                double sc[16], m = -1e30, sum = 0;
                for (int j = cu[s]; j <= i; j++) {
                    sc[j - cu[s]] = dotd(c.qkv + i * row + h * c.D, c.qkv + j * row + (c.H + kh) * c.D, c.D) / sqrt(c.D);
                    m = fmax(m, sc[j - cu[s]]);
                }
                for (int j = cu[s]; j <= i; j++) sum += exp(sc[j - cu[s]] - m);
                for (int d = 0; d < c.D; d++) {
                    double o = 0;
                    for (int j = cu[s]; j <= i; j++)
                        o += exp(sc[j - cu[s]] - m) / sum * c.qkv[j * row + (c.H + c.KV + kh) * c.D + d];
                    err = fmax(err, fabs(o - out[i * c.H * c.D + h * c.D + d]));
                }
                err = fmax(err, fabs(m + log(sum) - c.lse[i * c.H + h]));
            }
    CHECK_MSG(err < 1e-5, "attention vs reference: max err %g", err);
    /* a token of sequence 2 is unaffected by sequence 1 */
    float keep = out[7 * c.H * c.D];
    c.qkv[2 * row + c.H * c.D] += 5.0f; /* a key of sequence 0 */
    att_fwd(&c, out);
    CHECK(out[7 * c.H * c.D] == keep);
    c.qkv[2 * row + c.H * c.D] -= 5.0f;
    att_fwd(&c, out);
    cpt_attn_shape sh = {c.H, c.KV, c.D};
    cpt_k_attention_bwd(cpt_tensor_f32_2d(dqkv, c.N, row), cpt_tensor_f32_2d(r, c.N, c.H * c.D),
                        cpt_tensor_f32_2d(out, c.N, c.H * c.D), cpt_tensor_f32_2d(c.lse, c.N, c.H),
                        cpt_tensor_f32_2d(c.qkv, c.N, row), cpt_tensor_i32_1d(cu, 4), sh);
    fd_compare("qkv", &fc, &c, c.qkv, (size_t)c.N * row, dqkv, r);
    free(c.qkv), free(c.lse), free(out), free(r), free(dqkv);
}

/* token stats: loss = sum a_i logprob_i + b_i entropy_i */
typedef struct { int n, V; float *z; int32_t *t; float *a, *b; } ts_ctx;
static void ts_fwd(void *p, float *out) {
    ts_ctx *c = p;
    float *lp = malloc(sizeof(float) * c->n * 3), *en = lp + c->n, *l = en + c->n;
    cpt_k_token_stats_fwd(cpt_tensor_f32_1d(lp, c->n), cpt_tensor_f32_1d(en, c->n), cpt_tensor_f32_1d(l, c->n),
                          cpt_tensor_f32_2d(c->z, c->n, c->V), cpt_tensor_i32_1d(c->t, c->n));
    memcpy(out, lp, sizeof(float) * c->n * 2);
    free(lp);
}
static void test_token_stats(void) {
    int32_t t[4] = {3, -1, 0, 9};
    ts_ctx c = {4, 10, NULL, t, NULL, NULL};
    c.z = randv(40, 3);
    fd_case fc = {"token_stats", ts_fwd, 8};
    float *r = randv(8, 1), out[8], lse[4], ent[4], lp[4];
    ts_fwd(&c, out);
    /* direct formulas */
    double m = -1e30, sum = 0, H = 0;
    for (int v = 0; v < 10; v++) m = fmax(m, c.z[v]);
    for (int v = 0; v < 10; v++) sum += exp(c.z[v] - m);
    for (int v = 0; v < 10; v++) {
        double p = exp(c.z[v] - m) / sum;
        H -= p * log(p);
    }
    CHECK_NEAR(out[0], c.z[3] - m - log(sum), 1e-5);
    CHECK_NEAR(out[4], H, 1e-5);
    CHECK(out[1] == 0.0f);
    float *g = malloc(sizeof(float) * 40);
    memcpy(g, c.z, sizeof(float) * 40);
    cpt_k_token_stats_fwd(cpt_tensor_f32_1d(lp, 4), cpt_tensor_f32_1d(ent, 4), cpt_tensor_f32_1d(lse, 4),
                          cpt_tensor_f32_2d(g, 4, 10), cpt_tensor_i32_1d(t, 4));
    cpt_k_token_stats_bwd(cpt_tensor_f32_2d(g, 4, 10), cpt_tensor_f32_1d(lse, 4), cpt_tensor_f32_1d(ent, 4),
                          cpt_tensor_i32_1d(t, 4), cpt_tensor_f32_1d(r, 4), cpt_tensor_f32_1d(r + 4, 4));
    fd_compare("logits", &fc, &c, c.z, 40, g, r);
    free(c.z), free(r), free(g);
}

/* matmul + bias and embedding backward */
typedef struct { int N, C, OC; float *x, *w, *b; } mm_ctx;
static void mm_fwd(void *p, float *out) {
    mm_ctx *c = p;
    cpt_k_matmul_fwd(cpt_tensor_f32_2d(out, c->N, c->OC), cpt_tensor_f32_2d(c->x, c->N, c->C),
                     cpt_tensor_f32_2d(c->w, c->OC, c->C), cpt_tensor_f32_1d(c->b, c->OC));
}
static void test_matmul_embedding(void) {
    mm_ctx c = {9, 11, 7, NULL, NULL, NULL};
    c.x = randv(99, 1), c.w = randv(77, 1), c.b = randv(7, 1);
    fd_case fc = {"matmul", mm_fwd, 63};
    float *r = randv(63, 1), *dx = zeros(99), *dw = zeros(77), *db = zeros(7);
    cpt_k_matmul_bwd(cpt_tensor_f32_2d(dx, 9, 11), cpt_tensor_f32_2d(dw, 7, 11), cpt_tensor_f32_1d(db, 7),
                     cpt_tensor_f32_2d(r, 9, 7), cpt_tensor_f32_2d(c.x, 9, 11), cpt_tensor_f32_2d(c.w, 7, 11));
    fd_compare("x", &fc, &c, c.x, 99, dx, r);
    fd_compare("w", &fc, &c, c.w, 77, dw, r);
    fd_compare("bias", &fc, &c, c.b, 7, db, r);
    /* embedding: repeated tokens accumulate */
    int32_t tok[4] = {2, 0, 2, 1};
    float *wte = randv(3 * 5, 1), *e = zeros(20), *dwte = zeros(15), *d = randv(20, 1);
    cpt_k_embedding_fwd(cpt_tensor_f32_2d(e, 4, 5), cpt_tensor_i32_1d(tok, 4), cpt_tensor_f32_2d(wte, 3, 5));
    CHECK(e[2 * 5 + 4] == wte[2 * 5 + 4] && e[5] == wte[0]);
    cpt_k_embedding_bwd(cpt_tensor_f32_2d(dwte, 3, 5), cpt_tensor_f32_2d(d, 4, 5), cpt_tensor_i32_1d(tok, 4));
    CHECK_NEAR(dwte[2 * 5 + 1], d[1] + d[2 * 5 + 1], 1e-6);
    CHECK_NEAR(dwte[1 * 5 + 3], d[3 * 5 + 3], 1e-6);
    free(c.x), free(c.w), free(c.b), free(r), free(dx), free(dw), free(db), free(wte), free(e), free(dwte), free(d);
}

int main(void) {
    cpt_rng_seed(&rng, 42, 0);
    test_gemm();
    test_rmsnorm();
    test_swiglu();
    test_rope();
    test_attention();
    test_token_stats();
    test_matmul_embedding();
    return check_summary("test_kernels");
}
