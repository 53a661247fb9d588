/* Every CUDA op against the CPU backend (kernels/cpu, fp32) on the same inputs: fresh random inputs rounded to
 * bf16 on the host so both backends see identical values, outputs poisoned with NaN before the GPU runs, then
 * relative L2 error <= 1e-2 for bf16 outputs (1e-5 for the fp32 AdamW state) and no NaN left anywhere.
 * Prints a table op -> error. With CPT_CUDA_BENCH=1 it also times a few ops at model sizes. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/kernels.h"
#include "model/model.h"
#include "tests/check.h"
#include "tests/gpu/gpu_check.h"
#include "trainer/optim.h"

static cpt_cuda_ctx *ctx;
static cpt_rng rng;

static float *copy_of(const float *x, size_t n) {
    float *p = hbuf(n);
    memcpy(p, x, n * sizeof(float));
    return p;
}

/* ---- comparison and the table ---- */

static gpu_table table = {.echo = 1};

/* relative L2 error of got against ref; NaN (or an unwritten poisoned element) fails */
static void compare(const char *op, const char *out, const float *got, const float *ref, size_t n, double tol) {
    l2_acc a = {0};
    for (size_t i = 0; i < n; i++) l2_add(&a, got[i], ref[i]);
    double rel = a.den > 0 ? sqrt(a.num / a.den) : sqrt(a.num);
    int pass = a.nans == 0 && rel <= tol;
    CHECK_MSG(pass, "%s %s: rel L2 %.3e (tol %.0e), %zu NaN/inf of %zu", op, out, rel, tol, a.nans, n);
    table_add(&table, "%-22s %-12s %10zu  %.3e  %.0e  %6zu  %s", op, out, n, rel, tol, a.nans, pass ? "ok" : "FAIL");
    free((void *)got);
}

#define TOL_BF16 1e-2
#define TOL_F32 1e-5

/* ---- the checks ---- */

static void check_matmul(int64_t N, int64_t C, int64_t OC, int with_bias) {
    float *inp = rand_bf16(&rng, (size_t)(N * C), 1.0f), *w = rand_bf16(&rng, (size_t)(OC * C), 0.05f);
    float *bias = rand_bf16(&rng, (size_t)OC, 0.5f);
    float *ref = hbuf((size_t)(N * OC));
    cpt_k_matmul_fwd(cpt_tensor_f32_2d(ref, N, OC), cpt_tensor_f32_2d(inp, N, C), cpt_tensor_f32_2d(w, OC, C),
                     with_bias ? cpt_tensor_f32_1d(bias, OC) : cpt_tensor_none());
    void *d_inp = dev_bf16(ctx, inp, (size_t)(N * C), "inp"), *d_w = dev_bf16(ctx, w, (size_t)(OC * C), "w");
    void *d_bias = dev_bf16(ctx, bias, (size_t)OC, "bias"), *d_out = dev_poison(ctx, (size_t)(N * OC) * 2, "out");
    cpt_cuda_matmul_fwd(ctx, D2(d_out, CPT_DT_BF16, N, OC), D2(d_inp, CPT_DT_BF16, N, C),
                        D2(d_w, CPT_DT_BF16, OC, C), with_bias ? D1(d_bias, CPT_DT_BF16, OC) : cpt_tensor_none());
    compare(with_bias ? "matmul_fwd+bias" : "matmul_fwd", "out", get_bf16(ctx, d_out, (size_t)(N * OC)), ref,
            (size_t)(N * OC), TOL_BF16);

    /* backward accumulates into random existing gradients */
    float *dout = rand_bf16(&rng, (size_t)(N * OC), 1.0f);
    float *dinp = rand_bf16(&rng, (size_t)(N * C), 1.0f), *dw = rand_bf16(&rng, (size_t)(OC * C), 1.0f);
    void *d_dout = dev_bf16(ctx, dout, (size_t)(N * OC), "dout");
    void *d_dinp = dev_bf16(ctx, dinp, (size_t)(N * C), "dinp");
    void *d_dw = dev_f32(ctx, dw, (size_t)(OC * C), "dw");
    cpt_k_matmul_bwd(cpt_tensor_f32_2d(dinp, N, C), cpt_tensor_f32_2d(dw, OC, C), cpt_tensor_none(),
                     cpt_tensor_f32_2d(dout, N, OC), cpt_tensor_f32_2d(inp, N, C), cpt_tensor_f32_2d(w, OC, C));
    cpt_cuda_matmul_bwd(ctx, D2(d_dinp, CPT_DT_BF16, N, C), D2(d_dw, CPT_DT_F32, OC, C),
                        D2(d_dout, CPT_DT_BF16, N, OC), D2(d_inp, CPT_DT_BF16, N, C), D2(d_w, CPT_DT_BF16, OC, C));
    if (!with_bias) {
        compare("matmul_bwd", "dinp (bf16)", get_bf16(ctx, d_dinp, (size_t)(N * C)), dinp, (size_t)(N * C), TOL_BF16);
        compare("matmul_bwd", "dw (f32)", get_f32(ctx, d_dw, (size_t)(OC * C)), dw, (size_t)(OC * C), TOL_BF16);
        /* _ex(DINP_SET): dinp overwritten (poisoned first: NaN must not leak in), dw accumulates on top of the
         * above; then _ex(DW_SET) into a poisoned dw */
        float *dinp0 = hbuf((size_t)(N * C));
        memset(dinp0, 0, sizeof(float) * (size_t)(N * C));
        void *d_dinp0 = dev_poison(ctx, (size_t)(N * C) * 2, "dinp (set)");
        cpt_k_matmul_bwd(cpt_tensor_f32_2d(dinp0, N, C), cpt_tensor_f32_2d(dw, OC, C), cpt_tensor_none(),
                         cpt_tensor_f32_2d(dout, N, OC), cpt_tensor_f32_2d(inp, N, C), cpt_tensor_f32_2d(w, OC, C));
        cpt_cuda_matmul_bwd_ex(ctx, D2(d_dinp0, CPT_DT_BF16, N, C), D2(d_dw, CPT_DT_F32, OC, C),
                               D2(d_dout, CPT_DT_BF16, N, OC), D2(d_inp, CPT_DT_BF16, N, C),
                               D2(d_w, CPT_DT_BF16, OC, C), CPT_MM_DINP_SET);
        compare("matmul_bwd_ex DINP_SET", "dinp (bf16, =)", get_bf16(ctx, d_dinp0, (size_t)(N * C)), dinp0,
                (size_t)(N * C), TOL_BF16);
        compare("matmul_bwd_ex DINP_SET", "dw (f32, +=)", get_f32(ctx, d_dw, (size_t)(OC * C)), dw, (size_t)(OC * C),
                TOL_BF16);
        float *dw0 = hbuf((size_t)(OC * C));
        memset(dw0, 0, sizeof(float) * (size_t)(OC * C));
        void *d_dw0 = dev_poison(ctx, (size_t)(OC * C) * 4, "dw (set)");
        cpt_k_matmul_bwd(cpt_tensor_none(), cpt_tensor_f32_2d(dw0, OC, C), cpt_tensor_none(),
                         cpt_tensor_f32_2d(dout, N, OC), cpt_tensor_f32_2d(inp, N, C), cpt_tensor_f32_2d(w, OC, C));
        cpt_cuda_matmul_bwd_ex(ctx, cpt_tensor_none(), D2(d_dw0, CPT_DT_F32, OC, C), D2(d_dout, CPT_DT_BF16, N, OC),
                               D2(d_inp, CPT_DT_BF16, N, C), D2(d_w, CPT_DT_BF16, OC, C), CPT_MM_DW_SET);
        compare("matmul_bwd_ex DW_SET", "dw (f32, =)", get_f32(ctx, d_dw0, (size_t)(OC * C)), dw0, (size_t)(OC * C),
                TOL_BF16);
        cpt_cuda_free(d_dinp0), cpt_cuda_free(d_dw0);
        free(dinp0), free(dw0);
    }
    void *ds[] = {d_inp, d_w, d_bias, d_out, d_dout, d_dinp, d_dw};
    for (size_t i = 0; i < sizeof ds / sizeof ds[0]; i++) cpt_cuda_free(ds[i]);
    free(inp), free(w), free(bias), free(ref), free(dout), free(dinp), free(dw);
}

static void check_rmsnorm(int64_t R, int64_t C) {
    const float eps = 1e-6f;
    float *inp = rand_bf16(&rng, (size_t)(R * C), 1.0f), *resid = rand_bf16(&rng, (size_t)(R * C), 1.0f);
    float *w = rand_bf16(&rng, (size_t)C, 1.0f);
    for (int64_t c = 0; c < C; c++) w[c] = cpt_bf16_to_f32(cpt_f32_to_bf16(1.0f + 0.1f * w[c]));
    /* plain */
    float *ref = hbuf((size_t)(R * C)), *rstd = hbuf((size_t)R);
    cpt_k_rmsnorm_fwd(cpt_tensor_f32_2d(ref, R, C), cpt_tensor_f32_1d(rstd, R), cpt_tensor_f32_2d(inp, R, C),
                      cpt_tensor_f32_1d(w, C), eps);
    void *d_inp = dev_bf16(ctx, inp, (size_t)(R * C), "inp"), *d_resid = dev_bf16(ctx, resid, (size_t)(R * C), "resid");
    void *d_w = dev_bf16(ctx, w, (size_t)C, "w");
    void *d_out = dev_poison(ctx, (size_t)(R * C) * 2, "out"), *d_rstd = dev_poison(ctx, (size_t)R * 4, "rstd");
    cpt_cuda_rmsnorm_fwd(ctx, D2(d_out, CPT_DT_BF16, R, C), D1(d_rstd, CPT_DT_F32, R), cpt_tensor_none(),
                         D2(d_inp, CPT_DT_BF16, R, C), cpt_tensor_none(), D1(d_w, CPT_DT_BF16, C), eps);
    compare("rmsnorm_fwd", "out", get_bf16(ctx, d_out, (size_t)(R * C)), ref, (size_t)(R * C), TOL_BF16);
    compare("rmsnorm_fwd", "rstd (f32)", get_f32(ctx, d_rstd, (size_t)R), rstd, (size_t)R, TOL_BF16);

    /* fused residual: x = bf16(inp + resid) */
    float *x = hbuf((size_t)(R * C));
    cpt_k_add(cpt_tensor_f32_2d(x, R, C), cpt_tensor_f32_2d(inp, R, C), cpt_tensor_f32_2d(resid, R, C));
    round_bf16(x, (size_t)(R * C));
    cpt_k_rmsnorm_fwd(cpt_tensor_f32_2d(ref, R, C), cpt_tensor_f32_1d(rstd, R), cpt_tensor_f32_2d(x, R, C),
                      cpt_tensor_f32_1d(w, C), eps);
    void *d_x = dev_poison(ctx, (size_t)(R * C) * 2, "x");
    OK(cpt_cuda_memset(ctx, d_out, 0xFF, (size_t)(R * C) * 2, &err));
    OK(cpt_cuda_memset(ctx, d_rstd, 0xFF, (size_t)R * 4, &err));
    cpt_cuda_rmsnorm_fwd(ctx, D2(d_out, CPT_DT_BF16, R, C), D1(d_rstd, CPT_DT_F32, R), D2(d_x, CPT_DT_BF16, R, C),
                         D2(d_inp, CPT_DT_BF16, R, C), D2(d_resid, CPT_DT_BF16, R, C), D1(d_w, CPT_DT_BF16, C), eps);
    compare("rmsnorm_fwd+residual", "x = a + b", get_bf16(ctx, d_x, (size_t)(R * C)), x, (size_t)(R * C), TOL_BF16);
    compare("rmsnorm_fwd+residual", "out", get_bf16(ctx, d_out, (size_t)(R * C)), ref, (size_t)(R * C), TOL_BF16);

    /* backward from x and the GPU's rstd (uploaded as the CPU's, so both start equal) */
    float *dout = rand_bf16(&rng, (size_t)(R * C), 1.0f), *dinp = rand_bf16(&rng, (size_t)(R * C), 1.0f);
    float *dw = rand_bf16(&rng, (size_t)C, 1.0f);
    void *d_dout = dev_bf16(ctx, dout, (size_t)(R * C), "dout"), *d_dinp = dev_bf16(ctx, dinp, (size_t)(R * C), "dinp");
    void *d_dw = dev_f32(ctx, dw, (size_t)C, "dw"), *d_rstd_ref = dev_f32(ctx, rstd, (size_t)R, "rstd");
    float *dw0 = copy_of(dw, (size_t)C);
    cpt_k_rmsnorm_bwd(cpt_tensor_f32_2d(dinp, R, C), cpt_tensor_f32_1d(dw, C), cpt_tensor_f32_2d(dout, R, C),
                      cpt_tensor_f32_2d(x, R, C), cpt_tensor_f32_1d(w, C), cpt_tensor_f32_1d(rstd, R));
    cpt_cuda_rmsnorm_bwd(ctx, D2(d_dinp, CPT_DT_BF16, R, C), D1(d_dw, CPT_DT_F32, C), D2(d_dout, CPT_DT_BF16, R, C),
                         D2(d_x, CPT_DT_BF16, R, C), D1(d_w, CPT_DT_BF16, C), D1(d_rstd_ref, CPT_DT_F32, R));
    compare("rmsnorm_bwd", "dinp", get_bf16(ctx, d_dinp, (size_t)(R * C)), dinp, (size_t)(R * C), TOL_BF16);
    float *g1 = get_f32(ctx, d_dw, (size_t)C);
    /* determinism: the same accumulation again from the same start gives the same bits */
    OK(cpt_cuda_memcpy_h2d(ctx, d_dw, dw0, (size_t)C * 4, &err));
    cpt_cuda_rmsnorm_bwd(ctx, cpt_tensor_none(), D1(d_dw, CPT_DT_F32, C), D2(d_dout, CPT_DT_BF16, R, C),
                         D2(d_x, CPT_DT_BF16, R, C), D1(d_w, CPT_DT_BF16, C), D1(d_rstd_ref, CPT_DT_F32, R));
    float *g2 = get_f32(ctx, d_dw, (size_t)C);
    CHECK_MSG(memcmp(g1, g2, (size_t)C * 4) == 0, "rmsnorm_bwd dw differs between two identical runs");
    free(g2);
    compare("rmsnorm_bwd", "dw (f32)", g1, dw, (size_t)C, TOL_BF16);
    void *ds[] = {d_inp, d_resid, d_w, d_out, d_rstd, d_x, d_dout, d_dinp, d_dw, d_rstd_ref};
    for (size_t i = 0; i < sizeof ds / sizeof ds[0]; i++) cpt_cuda_free(ds[i]);
    free(inp), free(resid), free(w), free(ref), free(rstd), free(x), free(dout), free(dinp), free(dw), free(dw0);
}

static void check_rope(int llama3) {
    const int H = 14, KV = 2, Dh = 64;
    const int64_t N = 300, stride = (int64_t)(H + 2 * KV) * Dh;
    cpt_rope_cfg cfg = {Dh, llama3 ? 500000.0f : 1000000.0f, llama3, 8.0f, 1.0f, 4.0f, 8192};
    float inv_freq[Dh / 2];
    cpt_rope_inv_freq(&cfg, inv_freq);
    /* packed sequences restart at 0; the last runs to large positions, where fp32 angles matter */
    int32_t pos[300];
    for (int64_t n = 0; n < N; n++) pos[n] = n < 100 ? (int32_t)n : n < 200 ? (int32_t)(n - 100) : (int32_t)(30000 + n);
    float *x = rand_bf16(&rng, (size_t)(N * stride), 1.0f);
    void *d_x = dev_bf16(ctx, x, (size_t)(N * stride), "x"), *d_pos = dev_raw(ctx, pos, (size_t)N * 4, "positions");
    void *d_freq = dev_f32(ctx, inv_freq, (size_t)Dh / 2, "inv_freq");
    const char *name = llama3 ? "rope_fwd (llama3)" : "rope_fwd";
    cpt_k_rope_fwd(cpt_tensor_f32_2d(x, N, stride), H + KV, Dh, cpt_tensor_i32_1d(pos, N),
                   cpt_tensor_f32_1d(inv_freq, Dh / 2));
    cpt_cuda_rope_fwd(ctx, D2(d_x, CPT_DT_BF16, N, stride), H + KV, Dh, D1(d_pos, CPT_DT_I32, N),
                      D1(d_freq, CPT_DT_F32, Dh / 2));
    /* the GPU rounds its output to bf16; the value heads stay untouched on both */
    compare(name, "x (q, k, v)", get_bf16(ctx, d_x, (size_t)(N * stride)), x, (size_t)(N * stride), TOL_BF16);
    float *dx = rand_bf16(&rng, (size_t)(N * stride), 1.0f);
    OK(cpt_cuda_upload_bf16(ctx, d_x, dx, (size_t)(N * stride), &err));
    cpt_k_rope_bwd(cpt_tensor_f32_2d(dx, N, stride), H + KV, Dh, cpt_tensor_i32_1d(pos, N),
                   cpt_tensor_f32_1d(inv_freq, Dh / 2));
    cpt_cuda_rope_bwd(ctx, D2(d_x, CPT_DT_BF16, N, stride), H + KV, Dh, D1(d_pos, CPT_DT_I32, N),
                      D1(d_freq, CPT_DT_F32, Dh / 2));
    compare(llama3 ? "rope_bwd (llama3)" : "rope_bwd", "dx", get_bf16(ctx, d_x, (size_t)(N * stride)), dx,
            (size_t)(N * stride), TOL_BF16);
    cpt_cuda_free(d_x), cpt_cuda_free(d_pos), cpt_cuda_free(d_freq);
    free(x), free(dx);
}

static void check_swiglu(int64_t N, int64_t I) {
    float *gu = rand_bf16(&rng, (size_t)(N * 2 * I), 2.0f), *ref = hbuf((size_t)(N * I));
    cpt_k_swiglu_fwd(cpt_tensor_f32_2d(ref, N, I), cpt_tensor_f32_2d(gu, N, 2 * I));
    void *d_gu = dev_bf16(ctx, gu, (size_t)(N * 2 * I), "gu"), *d_out = dev_poison(ctx, (size_t)(N * I) * 2, "out");
    cpt_cuda_swiglu_fwd(ctx, D2(d_out, CPT_DT_BF16, N, I), D2(d_gu, CPT_DT_BF16, N, 2 * I));
    compare("swiglu_fwd", "out", get_bf16(ctx, d_out, (size_t)(N * I)), ref, (size_t)(N * I), TOL_BF16);
    /* the backward overwrites dgu: a poisoned buffer against the CPU's += into zeros */
    float *dout = rand_bf16(&rng, (size_t)(N * I), 1.0f), *dgu = hbuf((size_t)(N * 2 * I));
    memset(dgu, 0, sizeof(float) * (size_t)(N * 2 * I));
    void *d_dout = dev_bf16(ctx, dout, (size_t)(N * I), "dout");
    void *d_dgu = dev_poison(ctx, (size_t)(N * 2 * I) * 2, "dgu");
    cpt_k_swiglu_bwd(cpt_tensor_f32_2d(dgu, N, 2 * I), cpt_tensor_f32_2d(dout, N, I), cpt_tensor_f32_2d(gu, N, 2 * I));
    cpt_cuda_swiglu_bwd(ctx, D2(d_dgu, CPT_DT_BF16, N, 2 * I), D2(d_dout, CPT_DT_BF16, N, I),
                        D2(d_gu, CPT_DT_BF16, N, 2 * I));
    compare("swiglu_bwd", "dgu (=)", get_bf16(ctx, d_dgu, (size_t)(N * 2 * I)), dgu, (size_t)(N * 2 * I), TOL_BF16);
    cpt_cuda_free(d_gu), cpt_cuda_free(d_out), cpt_cuda_free(d_dout), cpt_cuda_free(d_dgu);
    free(gu), free(ref), free(dout), free(dgu);
}

static void check_token_stats(int64_t n, int64_t V) {
    float *z = rand_bf16(&rng, (size_t)(n * V), 3.0f);
    int32_t *tg = malloc((size_t)n * sizeof(int32_t));
    for (int64_t r = 0; r < n; r++) tg[r] = r % 7 == 3 ? -1 : (int32_t)cpt_rng_below(&rng, (uint64_t)V);
    float *lp = hbuf((size_t)n), *ent = hbuf((size_t)n), *lse = hbuf((size_t)n);
    cpt_k_token_stats_fwd(cpt_tensor_f32_1d(lp, n), cpt_tensor_f32_1d(ent, n), cpt_tensor_f32_1d(lse, n),
                          cpt_tensor_f32_2d(z, n, V), cpt_tensor_i32_1d(tg, n));
    void *d_z = dev_bf16(ctx, z, (size_t)(n * V), "logits"), *d_tg = dev_raw(ctx, tg, (size_t)n * 4, "targets");
    void *d_lp = dev_poison(ctx, (size_t)n * 4, "logprob"), *d_ent = dev_poison(ctx, (size_t)n * 4, "entropy");
    void *d_lse = dev_poison(ctx, (size_t)n * 4, "lse");
    cpt_cuda_token_stats_fwd(ctx, D1(d_lp, CPT_DT_F32, n), D1(d_ent, CPT_DT_F32, n), D1(d_lse, CPT_DT_F32, n),
                             D2(d_z, CPT_DT_BF16, n, V), D1(d_tg, CPT_DT_I32, n));
    compare("token_stats_fwd", "lse", get_f32(ctx, d_lse, (size_t)n), lse, (size_t)n, TOL_BF16);
    compare("token_stats_fwd", "logprob", get_f32(ctx, d_lp, (size_t)n), lp, (size_t)n, TOL_BF16);
    compare("token_stats_fwd", "entropy", get_f32(ctx, d_ent, (size_t)n), ent, (size_t)n, TOL_BF16);

    /* backward over the logits, from the CPU's lse and entropy (the same on both) */
    float *dlp = rand_bf16(&rng, (size_t)n, 1.0f), *dent = rand_bf16(&rng, (size_t)n, 1.0f);
    void *d_dlp = dev_f32(ctx, dlp, (size_t)n, "d_logprob"), *d_dent = dev_f32(ctx, dent, (size_t)n, "d_entropy");
    OK(cpt_cuda_memcpy_h2d(ctx, d_lse, lse, (size_t)n * 4, &err));
    OK(cpt_cuda_memcpy_h2d(ctx, d_ent, ent, (size_t)n * 4, &err));
    cpt_k_token_stats_bwd(cpt_tensor_f32_2d(z, n, V), cpt_tensor_f32_1d(lse, n), cpt_tensor_f32_1d(ent, n),
                          cpt_tensor_i32_1d(tg, n), cpt_tensor_f32_1d(dlp, n), cpt_tensor_f32_1d(dent, n));
    cpt_cuda_token_stats_bwd(ctx, D2(d_z, CPT_DT_BF16, n, V), D1(d_lse, CPT_DT_F32, n), D1(d_ent, CPT_DT_F32, n),
                             D1(d_tg, CPT_DT_I32, n), D1(d_dlp, CPT_DT_F32, n), D1(d_dent, CPT_DT_F32, n));
    compare("token_stats_bwd", "dlogits", get_bf16(ctx, d_z, (size_t)(n * V)), z, (size_t)(n * V), TOL_BF16);
    void *ds[] = {d_z, d_tg, d_lp, d_ent, d_lse, d_dlp, d_dent};
    for (size_t i = 0; i < sizeof ds / sizeof ds[0]; i++) cpt_cuda_free(ds[i]);
    free(z), free(tg), free(lp), free(ent), free(lse), free(dlp), free(dent);
}

static void check_adamw(int64_t n, int no_decay) {
    float *w = hbuf((size_t)n), *g = hbuf((size_t)n), *m = hbuf((size_t)n), *v = hbuf((size_t)n);
    cpt_rng_fill_normal(&rng, w, (size_t)n, 0.0f, 0.1f);
    cpt_rng_fill_normal(&rng, g, (size_t)n, 0.0f, 0.01f);
    cpt_rng_fill_normal(&rng, m, (size_t)n, 0.0f, 0.01f);
    cpt_rng_fill_normal(&rng, v, (size_t)n, 0.0f, 1e-4f);
    for (int64_t i = 0; i < n; i++) v[i] = fabsf(v[i]);
    void *d_w = dev_f32(ctx, w, (size_t)n, "param"), *d_g = dev_f32(ctx, g, (size_t)n, "grad");
    void *d_m = dev_f32(ctx, m, (size_t)n, "m"), *d_v = dev_f32(ctx, v, (size_t)n, "v");
    void *d_wb = dev_poison(ctx, (size_t)n * 2, "param_bf16");
    /* the CPU optimizer on one param, resumed at step 4 from the same moments */
    cpt_param p = {"p", w, g, (size_t)n, 1, {n, 0}, no_decay, NULL};
    cpt_param *pl[1] = {&p};
    cpt_adamw_hparams hp = {0.9, 0.95, 1e-8, 0.1};
    cpt_adamw *o = cpt_adamw_new(pl, 1, &hp, &err);
    if (!o) {
        fprintf(stderr, "cpt_adamw_new: %s\n", err.msg);
        exit(1);
    }
    memcpy(o->m[0], m, (size_t)n * 4);
    memcpy(o->v[0], v, (size_t)n * 4);
    o->step = 4;
    cpt_adamw_step(o, 3e-4);
    cpt_cuda_adamw_args a = {3e-4, 0.9, 0.95, 1e-8, 0.1, 5, no_decay};
    cpt_cuda_adamw(ctx, D1(d_w, CPT_DT_F32, n), D1(d_wb, CPT_DT_BF16, n), D1(d_g, CPT_DT_F32, n),
                   D1(d_m, CPT_DT_F32, n), D1(d_v, CPT_DT_F32, n), &a);
    const char *name = no_decay ? "adamw (no decay)" : "adamw";
    compare(name, "param (f32)", get_f32(ctx, d_w, (size_t)n), w, (size_t)n, TOL_F32);
    compare(name, "m (f32)", get_f32(ctx, d_m, (size_t)n), o->m[0], (size_t)n, TOL_F32);
    compare(name, "v (f32)", get_f32(ctx, d_v, (size_t)n), o->v[0], (size_t)n, TOL_F32);
    compare(name, "param (bf16)", get_bf16(ctx, d_wb, (size_t)n), w, (size_t)n, TOL_BF16);
    cpt_adamw_free(o);
    cpt_cuda_free(d_w), cpt_cuda_free(d_g), cpt_cuda_free(d_m), cpt_cuda_free(d_v), cpt_cuda_free(d_wb);
    free(w), free(g), free(m), free(v);
}

/* ---- optional timing (host clock around synchronised repeats, after a warm-up) ---- */

static void bench(void) {
    const int64_t N = 8192, C = 1536, OC = 8960, V = 151936, nl = 512;
    float *h = rand_bf16(&rng, (size_t)(OC * C), 0.05f);
    float *hx = rand_bf16(&rng, (size_t)(N * C), 1.0f);
    void *d_w = dev_bf16(ctx, h, (size_t)(OC * C), "w"), *d_x = dev_bf16(ctx, hx, (size_t)(N * C), "x");
    void *d_o = dev((size_t)(N * OC) * 2, "out"), *d_rs = dev((size_t)N * 4, "rstd");
    float *hz = rand_bf16(&rng, (size_t)(nl * V), 3.0f);
    void *d_z = dev_bf16(ctx, hz, (size_t)(nl * V), "logits"), *d_lse = dev((size_t)nl * 4, "lse");
    void *d_ent = dev((size_t)nl * 4, "ent");
    const int reps = 20;
    for (int which = 0; which < 3; which++) {
        double best = 1e30;
        for (int trial = 0; trial < 3; trial++) {
            double t0 = now_s();
            for (int r = 0; r < reps; r++) {
                if (which == 0)
                    cpt_cuda_matmul_fwd(ctx, D2(d_o, CPT_DT_BF16, N, OC), D2(d_x, CPT_DT_BF16, N, C),
                                        D2(d_w, CPT_DT_BF16, OC, C), cpt_tensor_none());
                else if (which == 1)
                    cpt_cuda_rmsnorm_fwd(ctx, D2(d_o, CPT_DT_BF16, N, C), D1(d_rs, CPT_DT_F32, N), cpt_tensor_none(),
                                         D2(d_x, CPT_DT_BF16, N, C), cpt_tensor_none(), D1(d_w, CPT_DT_BF16, C), 1e-6f);
                else
                    cpt_cuda_token_stats_fwd(ctx, cpt_tensor_none(), D1(d_ent, CPT_DT_F32, nl),
                                             D1(d_lse, CPT_DT_F32, nl), D2(d_z, CPT_DT_BF16, nl, V), cpt_tensor_none());
            }
            OK(cpt_cuda_sync(ctx, &err));
            double t = (now_s() - t0) / reps;
            if (trial > 0 && t < best) best = t; /* trial 0 is the warm-up */
        }
        if (which == 0)
            printf("bench matmul_fwd %lldx%lldx%lld: %.3f ms, %.0f TFLOP/s\n", (long long)N, (long long)OC,
                   (long long)C, best * 1e3, 2.0 * N * OC * C / best / 1e12);
        else if (which == 1)
            printf("bench rmsnorm_fwd [%lld, %lld]: %.3f ms, %.0f GB/s\n", (long long)N, (long long)C, best * 1e3,
                   (2.0 * N * C * 2) / best / 1e9);
        else
            printf("bench token_stats_fwd [%lld, %lld]: %.3f ms, %.0f GB/s\n", (long long)nl, (long long)V,
                   best * 1e3, (2.0 * nl * V) / best / 1e9);
    }
    void *ds[] = {d_w, d_x, d_o, d_rs, d_z, d_lse, d_ent};
    for (size_t i = 0; i < sizeof ds / sizeof ds[0]; i++) cpt_cuda_free(ds[i]);
    free(h), free(hx), free(hz);
}

int main(void) {
    ctx = ctx_or_exit("test_cuda_ops");
    seed_rng(&rng);

    check_rmsnorm(300, 896); /* warp-per-row 8-wide kernels */
    check_rmsnorm(37, 100);  /* block-per-row scalar kernels */
    check_rmsnorm(1000, 64); /* q_norm / k_norm shape: rows = tokens x heads, C = head_dim */
    check_rope(0);
    check_rope(1);
    check_swiglu(200, 1000); /* 8-wide kernels */
    check_swiglu(7, 13);     /* scalar kernels */
    check_token_stats(40, 151936);
    check_token_stats(33, 1000); /* 8-wide */
    check_token_stats(9, 1001);  /* scalar */
    check_adamw(100003, 0);
    check_adamw(4097, 1);
    check_matmul(200, 896, 1000, 1); /* last: a cuBLASLt failure aborts, and the rows above are printed by then */
    check_matmul(264, 512, 136, 0);

    printf("\n%-22s %-12s %10s  %-9s  %-5s  %6s  %s\n", "op", "output", "elements", "rel L2", "tol", "NaN", "");
    table_print(&table);
    if (getenv("CPT_CUDA_BENCH")) bench();
    cpt_cuda_ctx_free(ctx);
    return check_summary("test_cuda_ops");
}
