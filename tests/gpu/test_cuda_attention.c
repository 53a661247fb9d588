/* CUDA attention (kernels/cuda/attention*.cu) against the CPU backend (kernels/cpu/attention.c, fp32) on the same
 * inputs: fresh random qkv and dout rounded to bf16 on the host, packed sequences whose lengths are not multiples
 * of the tiles (1, 7, 64, 65, 300, 1000), GQA ratios 1, 2, 6 and 7, every head_dim of cpt_cuda_head_dim_ok (8 ..
 * 256), both the tensor-core path and the simple path for head_dim 64, 80, 96, 128 and 256. Outputs are poisoned with NaN first; out and dqkv must reach relative
 * L2 <= 1e-2, lse <= 1e-4 (against a reference RMS of at least 1e-2), no NaN; two runs of the backward (and
 * forward) must agree bit for bit.
 * With CPT_CUDA_BENCH=1 it also times forward and backward on 8 x 2048 packed tokens at the Qwen2.5 shapes and at
 * head_dim 80, 96 and 256. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "core/safetensors.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/kernels.h"
#include "tests/check.h"
#include "tests/gpu/gpu_check.h"

static cpt_cuda_ctx *ctx;
static cpt_rng rng;

/* ---- comparison and the table ---- */

static gpu_table table = {.echo = 1};

/* relative L2 of got against ref over the columns c0 .. c0+w of rows of width ld; NaN/inf fails */
static void compare_cols(const char *ocase, const char *out, const float *got, const float *ref, int64_t rows,
                         int64_t ld, int64_t c0, int64_t w, double tol) {
    l2_acc a = {0};
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = c0; c < c0 + w; c++) l2_add(&a, got[r * ld + c], ref[r * ld + c]);
    /* a reference RMS floor of 1e-2: where the exact gradient is 0 (one token: dq = dk = 0) both sides hold only
     * rounding noise, and relative error would compare noise with noise */
    double cnt = (double)rows * (double)w, floor2 = cnt * 1e-4;
    double rel = sqrt(a.num / (a.den > floor2 ? a.den : floor2));
    int pass = a.nans == 0 && rel <= tol;
    CHECK_MSG(pass, "%s %s: rel L2 %.3e (tol %.0e), %zu NaN/inf", ocase, out, rel, tol, a.nans);
    table_add(&table, "%-38s %-5s %.3e  %.3e  %.0e  %5zu  %s", ocase, out, rel, a.maxabs, tol, a.nans,
              pass ? "ok" : "FAIL");
}

/* ---- one case ---- */

static void check_case(const int *lens, int nseq, int H, int KV, int Dh, int simple) {
    setenv("CPT_ATTN_SIMPLE", simple ? "1" : "0", 1);
    int32_t *cu = xmalloc(sizeof(int32_t) * (size_t)(nseq + 1));
    int maxlen = 0;
    for (int s = 0; s < nseq; s++) {
        cu[s + 1] = cu[s] + lens[s];
        if (lens[s] > maxlen) maxlen = lens[s];
    }
    const int64_t N = cu[nseq], row = (int64_t)(H + 2 * KV) * Dh, HD = (int64_t)H * Dh;
    char name[96];
    int n = snprintf(name, sizeof name, "H%d KV%d D%d%s len", H, KV, Dh, simple ? " simple" : "");
    for (int s = 0; s < nseq && n < (int)sizeof name - 8; s++) n += snprintf(name + n, sizeof name - (size_t)n, " %d", lens[s]);
    cpt_attn_shape shp = {H, KV, Dh};

    /* q and k a little wider than unit so the softmax is peaked somewhere, not flat */
    float *qkv = rand_bf16(&rng, (size_t)(N * row), 1.5f), *dout = rand_bf16(&rng, (size_t)(N * HD), 1.0f);
    float *out = xmalloc(sizeof(float) * (size_t)(N * HD)), *lse = xmalloc(sizeof(float) * (size_t)(N * H));
    cpt_k_attention_fwd(cpt_tensor_f32_2d(out, N, HD), cpt_tensor_f32_2d(lse, N, H), cpt_tensor_f32_2d(qkv, N, row),
                        cpt_tensor_i32_1d(cu, nseq + 1), shp);

    void *d_qkv = dev_bf16(ctx, qkv, (size_t)(N * row), "qkv"), *d_cu = dev((size_t)(nseq + 1) * 4, "cu_seqlens");
    OK(cpt_cuda_memcpy_h2d(ctx, d_cu, cu, (size_t)(nseq + 1) * 4, &err));
    void *d_out = dev((size_t)(N * HD) * 2, "out"), *d_lse = dev((size_t)(N * H) * 4, "lse");
    void *d_dout = dev_bf16(ctx, dout, (size_t)(N * HD), "dout"), *d_dqkv = dev((size_t)(N * row) * 2, "dqkv");
    cpt_tensor t_qkv = D2(d_qkv, CPT_DT_BF16, N, row), t_cu = D1(d_cu, CPT_DT_I32, nseq + 1);
    cpt_tensor t_out = D2(d_out, CPT_DT_BF16, N, HD), t_lse = D2(d_lse, CPT_DT_F32, N, H);

    /* forward, twice from poisoned outputs */
    void *raw1 = NULL;
    for (int rep = 0; rep < 2; rep++) {
        OK(cpt_cuda_memset(ctx, d_out, 0xFF, (size_t)(N * HD) * 2, &err));
        OK(cpt_cuda_memset(ctx, d_lse, 0xFF, (size_t)(N * H) * 4, &err));
        cpt_cuda_attention_fwd(ctx, t_out, t_lse, t_qkv, t_cu, nseq, maxlen, shp);
        void *raw = get_raw(ctx, d_out, (size_t)(N * HD) * 2);
        if (rep == 0) raw1 = raw;
        else {
            CHECK_MSG(memcmp(raw, raw1, (size_t)(N * HD) * 2) == 0, "%s: forward differs between two runs", name);
            free(raw);
        }
    }
    free(raw1);
    float *g_out = get_bf16(ctx, d_out, (size_t)(N * HD)), *g_lse = xmalloc(sizeof(float) * (size_t)(N * H));
    OK(cpt_cuda_memcpy_d2h(ctx, g_lse, d_lse, (size_t)(N * H) * 4, &err));
    compare_cols(name, "out", g_out, out, N, HD, 0, HD, 1e-2);
    compare_cols(name, "lse", g_lse, lse, N, H, 0, H, 1e-4);

    /* backward from the same out (the CPU's, rounded to bf16) and lse on both sides */
    round_bf16(out, (size_t)(N * HD));
    OK(cpt_cuda_upload_bf16(ctx, d_out, out, (size_t)(N * HD), &err));
    OK(cpt_cuda_memcpy_h2d(ctx, d_lse, lse, (size_t)(N * H) * 4, &err));
    float *dqkv = xmalloc(sizeof(float) * (size_t)(N * row)); /* zeros: the CPU op accumulates */
    cpt_k_attention_bwd(cpt_tensor_f32_2d(dqkv, N, row), cpt_tensor_f32_2d(dout, N, HD), cpt_tensor_f32_2d(out, N, HD),
                        cpt_tensor_f32_2d(lse, N, H), cpt_tensor_f32_2d(qkv, N, row), cpt_tensor_i32_1d(cu, nseq + 1),
                        shp);
    raw1 = NULL;
    for (int rep = 0; rep < 2; rep++) {
        OK(cpt_cuda_memset(ctx, d_dqkv, 0xFF, (size_t)(N * row) * 2, &err));
        cpt_cuda_attention_bwd(ctx, D2(d_dqkv, CPT_DT_BF16, N, row), D2(d_dout, CPT_DT_BF16, N, HD), t_out, t_lse,
                               t_qkv, t_cu, nseq, maxlen, shp);
        void *raw = get_raw(ctx, d_dqkv, (size_t)(N * row) * 2);
        if (rep == 0) raw1 = raw;
        else {
            CHECK_MSG(memcmp(raw, raw1, (size_t)(N * row) * 2) == 0, "%s: dqkv differs between two runs", name);
            free(raw);
        }
    }
    free(raw1);
    float *g_dqkv = get_bf16(ctx, d_dqkv, (size_t)(N * row));
    compare_cols(name, "dq", g_dqkv, dqkv, N, row, 0, HD, 1e-2);
    compare_cols(name, "dk", g_dqkv, dqkv, N, row, HD, (int64_t)KV * Dh, 1e-2);
    compare_cols(name, "dv", g_dqkv, dqkv, N, row, HD + (int64_t)KV * Dh, (int64_t)KV * Dh, 1e-2);

    void *ds[] = {d_qkv, d_cu, d_out, d_lse, d_dout, d_dqkv};
    for (size_t i = 0; i < sizeof ds / sizeof ds[0]; i++) cpt_cuda_free(ds[i]);
    free(cu), free(qkv), free(dout), free(out), free(lse), free(g_out), free(g_lse), free(dqkv), free(g_dqkv);
    unsetenv("CPT_ATTN_SIMPLE");
}

/* ---- timing: host clock around synchronised repeats, median of trials after a warm-up ---- */

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void bench_shape(int H, int KV, int Dh) {
    const int S = 8, T = 2048;
    const int64_t N = (int64_t)S * T, row = (int64_t)(H + 2 * KV) * Dh, HD = (int64_t)H * Dh;
    int32_t cu[S + 1];
    for (int s = 0; s <= S; s++) cu[s] = s * T;
    cpt_attn_shape shp = {H, KV, Dh};
    float *qkv = rand_bf16(&rng, (size_t)(N * row), 1.0f), *dout = rand_bf16(&rng, (size_t)(N * HD), 1.0f);
    void *d_qkv = dev_bf16(ctx, qkv, (size_t)(N * row), "qkv"), *d_dout = dev_bf16(ctx, dout, (size_t)(N * HD), "dout");
    void *d_cu = dev(sizeof cu, "cu"), *d_out = dev((size_t)(N * HD) * 2, "out"), *d_lse = dev((size_t)(N * H) * 4, "lse");
    void *d_dqkv = dev((size_t)(N * row) * 2, "dqkv");
    OK(cpt_cuda_memcpy_h2d(ctx, d_cu, cu, sizeof cu, &err));
    cpt_tensor t_qkv = D2(d_qkv, CPT_DT_BF16, N, row), t_cu = D1(d_cu, CPT_DT_I32, S + 1);
    cpt_tensor t_out = D2(d_out, CPT_DT_BF16, N, HD), t_lse = D2(d_lse, CPT_DT_F32, N, H);
    /* causal: T (T + 1) / 2 scores per head and sequence, 2 matmuls of 2 D flops each forward; backward 2.5x */
    double flops_fwd = 4.0 * S * ((double)T * (T + 1) / 2) * Dh * H, ms[2];
    for (int which = 0; which < 2; which++) {
        const int reps = 10, trials = 7;
        double t[7];
        for (int trial = 0; trial <= trials; trial++) {
            OK(cpt_cuda_sync(ctx, &err));
            double t0 = now_s();
            for (int r = 0; r < reps; r++) {
                if (which == 0) cpt_cuda_attention_fwd(ctx, t_out, t_lse, t_qkv, t_cu, S, T, shp);
                else
                    cpt_cuda_attention_bwd(ctx, D2(d_dqkv, CPT_DT_BF16, N, row), D2(d_dout, CPT_DT_BF16, N, HD), t_out,
                                           t_lse, t_qkv, t_cu, S, T, shp);
            }
            OK(cpt_cuda_sync(ctx, &err));
            if (trial > 0) t[trial - 1] = (now_s() - t0) / reps; /* trial 0 warms up */
        }
        qsort(t, trials, sizeof t[0], cmp_d);
        ms[which] = t[trials / 2] * 1e3;
    }
    printf("bench attention %dx%d H%d KV%d D%d: fwd %.3f ms %.1f TFLOP/s | bwd %.3f ms %.1f TFLOP/s (2.5x fwd flops)\n",
           S, T, H, KV, Dh, ms[0], flops_fwd / ms[0] / 1e9, ms[1], 2.5 * flops_fwd / ms[1] / 1e9);
    void *ds[] = {d_qkv, d_dout, d_cu, d_out, d_lse, d_dqkv};
    for (size_t i = 0; i < sizeof ds / sizeof ds[0]; i++) cpt_cuda_free(ds[i]);
    free(qkv), free(dout);
}

int main(void) {
    ctx = ctx_or_exit("test_cuda_attention");
    seed_rng(&rng);

    static const int all[] = {1, 7, 64, 65, 300, 1000};
    static const int mix[] = {65, 1000, 7, 300, 1, 129};
    for (int simple = 0; simple < 2; simple++) {
        check_case(all, 6, 14, 2, 64, simple);  /* Qwen2.5-0.5B: ratio 7 */
        check_case(mix, 6, 12, 2, 128, simple); /* Qwen2.5-1.5B: ratio 6 */
        check_case(mix, 4, 4, 2, 64, simple);   /* ratio 2 */
        check_case(all, 6, 3, 3, 128, simple);  /* ratio 1 */
        check_case(mix, 6, 8, 2, 80, simple);   /* the head sizes of other real models */
        check_case(all, 6, 12, 4, 96, simple);
        check_case(mix, 6, 8, 4, 256, simple);
        check_case(all, 6, 3, 3, 256, simple);
    }
    /* many short sequences: enough key tiles that the dK/dV work is not split (the cases above split it) */
    int many[100];
    for (int i = 0; i < 100; i++) many[i] = 65 + (int)cpt_rng_below(&rng, 64);
    check_case(many, 100, 8, 4, 64, 0);
    check_case(many, 100, 8, 4, 128, 0);
    check_case(many, 100, 8, 4, 80, 0);
    check_case(many, 100, 4, 2, 256, 0);
    check_case(all, 6, 4, 2, 32, 0);
    check_case(mix, 6, 7, 1, 16, 0);
    check_case(all, 6, 2, 2, 8, 0);
    static const int one[] = {1};
    check_case(one, 1, 2, 1, 64, 0);

    printf("\n%-38s %-5s %-9s  %-9s  %-5s  %5s\n", "case", "out", "rel L2", "max abs", "tol", "NaN");
    table_print(&table);
    const char *b = getenv("CPT_CUDA_BENCH");
    if (b && *b && strcmp(b, "0") != 0) {
        bench_shape(14, 2, 64);
        bench_shape(12, 2, 128);
        bench_shape(32, 8, 80);
        bench_shape(16, 8, 96);
        bench_shape(8, 4, 256);
    }
    cpt_cuda_ctx_free(ctx);
    return check_summary("test_cuda_attention");
}
