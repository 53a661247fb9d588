/* Row-wise ops of the CPU backend: embedding, rmsnorm, rope, swiglu, add. Each output element belongs to one
 * thread; reductions across rows (weight gradients) go through fixed-size row chunks summed in chunk order, so the
 * result does not depend on the thread count. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/par.h"
#include "kernels/cpu/cpu_internal.h"

#define ROW_CHUNK 64 /* rows per partial sum in weight-gradient reductions */

/* ---- embedding ---- */

void cpt_k_embedding_fwd(cpt_tensor out, cpt_tensor tokens, cpt_tensor wte) {
    const char *op = "embedding_fwd";
    cpt_kcheck_f32(op, "out", out, 2);
    cpt_kcheck_i32(op, "tokens", tokens, 1);
    cpt_kcheck_f32(op, "wte", wte, 2);
    int64_t N = out.shape[0], C = out.shape[1], V = wte.shape[0];
    KCHECK(tokens.shape[0] == N && wte.shape[1] == C, op, "shapes: out [%lld, %lld], tokens [%lld], wte [%lld, %lld]",
           (long long)N, (long long)C, (long long)tokens.shape[0], (long long)V, (long long)wte.shape[1]);
    const int32_t *tok = I(tokens);
    for (int64_t n = 0; n < N; n++) KCHECK(tok[n] >= 0 && tok[n] < V, op, "token %d at %lld outside [0, %lld)", tok[n], (long long)n, (long long)V);
    CPT_PAR_FOR(cpt_par(N * C, PAR_MIN),
        for (int64_t n = 0; n < N; n++) memcpy(F(out) + n * C, F(wte) + (int64_t)tok[n] * C, (size_t)C * sizeof(float)););
}

void cpt_k_embedding_bwd(cpt_tensor dwte, cpt_tensor dout, cpt_tensor tokens) {
    const char *op = "embedding_bwd";
    cpt_kcheck_f32(op, "dwte", dwte, 2);
    cpt_kcheck_f32(op, "dout", dout, 2);
    cpt_kcheck_i32(op, "tokens", tokens, 1);
    int64_t N = dout.shape[0], C = dout.shape[1], V = dwte.shape[0];
    KCHECK(tokens.shape[0] == N && dwte.shape[1] == C, op, "shape mismatch");
    const int32_t *tok = I(tokens);
    for (int64_t n = 0; n < N; n++) KCHECK(tok[n] >= 0 && tok[n] < V, op, "token %d outside [0, %lld)", tok[n], (long long)V);
    /* each thread owns a block of columns and walks the tokens in order */
    int64_t nb = (C + 31) / 32;
    CPT_PAR_FOR(cpt_par(N * C, PAR_MIN),
        for (int64_t b = 0; b < nb; b++) {
            int64_t c0 = b * 32, c1 = c0 + 32 < C ? c0 + 32 : C;
            for (int64_t n = 0; n < N; n++) {
                float *dst = F(dwte) + (int64_t)tok[n] * C;
                const float *src = F(dout) + n * C;
                for (int64_t c = c0; c < c1; c++) dst[c] += src[c];
            }
        });
}

/* ---- rmsnorm ---- */

void cpt_k_rmsnorm_fwd(cpt_tensor out, cpt_tensor rstd, cpt_tensor inp, cpt_tensor w, float eps) {
    const char *op = "rmsnorm_fwd";
    cpt_kcheck_f32(op, "out", out, 2);
    cpt_kcheck_f32(op, "inp", inp, 2);
    cpt_kcheck_f32(op, "w", w, 1);
    int64_t R = inp.shape[0], C = inp.shape[1];
    KCHECK(out.shape[0] == R && out.shape[1] == C && w.shape[0] == C, op, "shape mismatch: inp [%lld, %lld], w [%lld]",
           (long long)R, (long long)C, (long long)w.shape[0]);
    if (cpt_tensor_present(rstd)) {
        cpt_kcheck_f32(op, "rstd", rstd, 1);
        KCHECK(rstd.shape[0] == R, op, "rstd has %lld rows, want %lld", (long long)rstd.shape[0], (long long)R);
    }
    const float *x = F(inp), *wt = F(w);
    float *o = F(out), *rs = cpt_tensor_present(rstd) ? F(rstd) : NULL;
    CPT_PAR_FOR(cpt_par(R * C, PAR_MIN),
        for (int64_t r = 0; r < R; r++) {
            const float *xr = x + r * C;
            float ss = 0.0f;
            for (int64_t c = 0; c < C; c++) ss += xr[c] * xr[c];
            float s = 1.0f / sqrtf(ss / (float)C + eps);
            if (rs) rs[r] = s;
            float *orow = o + r * C;
            for (int64_t c = 0; c < C; c++) orow[c] = wt[c] * (xr[c] * s);
        });
}

void cpt_k_rmsnorm_bwd(cpt_tensor dinp, cpt_tensor dw, cpt_tensor dout, cpt_tensor inp, cpt_tensor w,
                       cpt_tensor rstd) {
    const char *op = "rmsnorm_bwd";
    cpt_kcheck_f32(op, "dout", dout, 2);
    cpt_kcheck_f32(op, "inp", inp, 2);
    cpt_kcheck_f32(op, "w", w, 1);
    cpt_kcheck_f32(op, "rstd", rstd, 1);
    int64_t R = inp.shape[0], C = inp.shape[1];
    KCHECK(dout.shape[0] == R && dout.shape[1] == C && w.shape[0] == C && rstd.shape[0] == R, op, "shape mismatch");
    const float *x = F(inp), *dy = F(dout), *wt = F(w), *rs = F(rstd);
    if (cpt_tensor_present(dinp)) {
        cpt_kcheck_f32(op, "dinp", dinp, 2);
        KCHECK(dinp.shape[0] == R && dinp.shape[1] == C, op, "dinp shape mismatch");
        float *dx = F(dinp);
        CPT_PAR_FOR(cpt_par(R * C, PAR_MIN),
            for (int64_t r = 0; r < R; r++) {
                const float *xr = x + r * C, *dyr = dy + r * C;
                float s = rs[r], dot = 0.0f;
                for (int64_t c = 0; c < C; c++) dot += wt[c] * dyr[c] * xr[c];
                float k = dot * s * s * s / (float)C;
                float *dxr = dx + r * C;
                for (int64_t c = 0; c < C; c++) dxr[c] += s * wt[c] * dyr[c] - k * xr[c];
            });
    }
    if (cpt_tensor_present(dw)) {
        cpt_kcheck_f32(op, "dw", dw, 1);
        KCHECK(dw.shape[0] == C, op, "dw has %lld entries, want %lld", (long long)dw.shape[0], (long long)C);
        int64_t nchunk = (R + ROW_CHUNK - 1) / ROW_CHUNK;
        float *part = calloc((size_t)(nchunk * C), sizeof(float));
        KCHECK(part != NULL, op, "out of memory");
        CPT_PAR_FOR(cpt_par(R * C, PAR_MIN),
            for (int64_t ch = 0; ch < nchunk; ch++) {
                int64_t r0 = ch * ROW_CHUNK, r1 = r0 + ROW_CHUNK < R ? r0 + ROW_CHUNK : R;
                float *p = part + ch * C;
                for (int64_t r = r0; r < r1; r++)
                    for (int64_t c = 0; c < C; c++) p[c] += dy[r * C + c] * x[r * C + c] * rs[r];
            });
        float *g = F(dw);
        for (int64_t ch = 0; ch < nchunk; ch++)
            for (int64_t c = 0; c < C; c++) g[c] += part[ch * C + c];
        free(part);
    }
}

/* ---- rope ---- */

void cpt_rope_inv_freq(const cpt_rope_cfg *cfg, float *inv_freq) {
    int half = cfg->head_dim / 2;
    for (int i = 0; i < half; i++) {
        /* as transformers: 1 / theta ** (arange(0, d, 2).float() / d), in fp32 */
        float e = (float)(2 * i) / (float)cfg->head_dim;
        float f = 1.0f / powf(cfg->theta, e);
        if (cfg->llama3) {
            const float pi = 3.14159265358979323846f;
            float low_wavelen = (float)cfg->original_max_pos / cfg->low_freq_factor;
            float high_wavelen = (float)cfg->original_max_pos / cfg->high_freq_factor;
            float wavelen = 2.0f * pi / f;
            float g = wavelen > low_wavelen ? f / cfg->factor : f;
            if (!(wavelen < high_wavelen) && !(wavelen > low_wavelen)) {
                float smooth = ((float)cfg->original_max_pos / wavelen - cfg->low_freq_factor) /
                               (cfg->high_freq_factor - cfg->low_freq_factor);
                g = (1.0f - smooth) * g / cfg->factor + smooth * g;
            }
            f = g;
        }
        inv_freq[i] = f;
    }
}

/* One row's heads rotated by its position's angles; cs holds 2 * half floats of scratch (cos, then sin). */
static void rope_row(float *xr, int32_t pos, const float *fr, int half, int n_heads, int head_dim, float sign,
                     float *cs) {
    float *sn = cs + half;
    for (int i = 0; i < half; i++) {
        float ang = (float)pos * fr[i]; /* fp32 product, as transformers */
        cs[i] = cosf(ang);
        sn[i] = sign * sinf(ang);
    }
    for (int h = 0; h < n_heads; h++) {
        float *v = xr + (int64_t)h * head_dim;
        for (int i = 0; i < half; i++) {
            float a = v[i], b = v[i + half];
            v[i] = a * cs[i] - b * sn[i];
            v[i + half] = b * cs[i] + a * sn[i];
        }
    }
}

static void rope_apply(const char *op, cpt_tensor x, int n_heads, int head_dim, cpt_tensor positions,
                       cpt_tensor inv_freq, float sign) {
    cpt_kcheck_f32(op, "x", x, 2);
    cpt_kcheck_i32(op, "positions", positions, 1);
    cpt_kcheck_f32(op, "inv_freq", inv_freq, 1);
    int64_t N = x.shape[0], stride = x.shape[1];
    int half = head_dim / 2;
    KCHECK(head_dim % 2 == 0 && (int64_t)n_heads * head_dim <= stride && positions.shape[0] == N &&
               inv_freq.shape[0] == half,
           op, "shape mismatch: x [%lld, %lld], %d heads of %d, inv_freq [%lld]", (long long)N, (long long)stride,
           n_heads, head_dim, (long long)inv_freq.shape[0]);
    const int32_t *pos = I(positions);
    const float *fr = F(inv_freq);
    if (cpt_par(N * n_heads * head_dim, PAR_MIN)) {
#pragma omp parallel
        {
            float *cs = malloc(sizeof(float) * (size_t)half * 2);
            KCHECK(cs != NULL, op, "out of memory");
#pragma omp for
            for (int64_t n = 0; n < N; n++) rope_row(F(x) + n * stride, pos[n], fr, half, n_heads, head_dim, sign, cs);
            free(cs);
        }
    } else {
        float *cs = malloc(sizeof(float) * (size_t)half * 2);
        KCHECK(cs != NULL, op, "out of memory");
        for (int64_t n = 0; n < N; n++) rope_row(F(x) + n * stride, pos[n], fr, half, n_heads, head_dim, sign, cs);
        free(cs);
    }
}

void cpt_k_rope_fwd(cpt_tensor x, int n_heads, int head_dim, cpt_tensor positions, cpt_tensor inv_freq) {
    rope_apply("rope_fwd", x, n_heads, head_dim, positions, inv_freq, 1.0f);
}

/* the rotation is orthogonal: its transpose is the rotation by -angle */
void cpt_k_rope_bwd(cpt_tensor dx, int n_heads, int head_dim, cpt_tensor positions, cpt_tensor inv_freq) {
    rope_apply("rope_bwd", dx, n_heads, head_dim, positions, inv_freq, -1.0f);
}

/* ---- swiglu ---- */

void cpt_k_swiglu_fwd(cpt_tensor out, cpt_tensor gu) {
    const char *op = "swiglu_fwd";
    cpt_kcheck_f32(op, "out", out, 2);
    cpt_kcheck_f32(op, "gu", gu, 2);
    int64_t N = out.shape[0], H = out.shape[1];
    KCHECK(gu.shape[0] == N && gu.shape[1] == 2 * H, op, "gu is [%lld, %lld], want [%lld, %lld]",
           (long long)gu.shape[0], (long long)gu.shape[1], (long long)N, (long long)(2 * H));
    CPT_PAR_FOR(cpt_par(N * H, PAR_MIN),
        for (int64_t n = 0; n < N; n++) {
            const float *g = F(gu) + n * 2 * H, *u = g + H;
            float *o = F(out) + n * H;
            for (int64_t i = 0; i < H; i++) o[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
        });
}

void cpt_k_swiglu_bwd(cpt_tensor dgu, cpt_tensor dout, cpt_tensor gu) {
    const char *op = "swiglu_bwd";
    cpt_kcheck_f32(op, "dgu", dgu, 2);
    cpt_kcheck_f32(op, "dout", dout, 2);
    cpt_kcheck_f32(op, "gu", gu, 2);
    int64_t N = dout.shape[0], H = dout.shape[1];
    KCHECK(gu.shape[0] == N && gu.shape[1] == 2 * H && dgu.shape[0] == N && dgu.shape[1] == 2 * H, op,
           "shape mismatch");
    CPT_PAR_FOR(cpt_par(N * H, PAR_MIN),
        for (int64_t n = 0; n < N; n++) {
            const float *g = F(gu) + n * 2 * H, *u = g + H, *d = F(dout) + n * H;
            float *dg = F(dgu) + n * 2 * H, *du = dg + H;
            for (int64_t i = 0; i < H; i++) {
                float s = 1.0f / (1.0f + expf(-g[i]));
                float silu = g[i] * s;
                dg[i] += d[i] * u[i] * s * (1.0f + g[i] * (1.0f - s));
                du[i] += d[i] * silu;
            }
        });
}

/* ---- elementwise ---- */

void cpt_k_add(cpt_tensor out, cpt_tensor a, cpt_tensor b) {
    const char *op = "add";
    KCHECK(out.data && a.data && b.data && out.device == CPT_DEVICE_CPU && out.dtype == CPT_DT_F32 &&
               a.dtype == CPT_DT_F32 && b.dtype == CPT_DT_F32,
           op, "operands must be host fp32");
    int64_t n = cpt_tensor_numel(out);
    KCHECK(cpt_tensor_numel(a) == n && cpt_tensor_numel(b) == n, op, "sizes differ");
    float *o = F(out);
    const float *x = F(a), *y = F(b);
    CPT_PAR_FOR(cpt_par(n, PAR_MIN),
        for (int64_t i = 0; i < n; i++) o[i] = x[i] + y[i];);
}

void cpt_k_copy_cols(cpt_tensor dst, int64_t dst_col, cpt_tensor src, int64_t src_col, int64_t width) {
    const char *op = "copy_cols";
    cpt_kcheck_f32(op, "dst", dst, 2);
    cpt_kcheck_f32(op, "src", src, 2);
    int64_t N = dst.shape[0], dc = dst.shape[1], sc = src.shape[1];
    KCHECK(src.shape[0] == N && dst_col >= 0 && src_col >= 0 && width >= 0 && dst_col + width <= dc &&
               src_col + width <= sc,
           op, "columns out of range: dst [%lld, %lld] at %lld, src [%lld, %lld] at %lld, width %lld", (long long)N,
           (long long)dc, (long long)dst_col, (long long)src.shape[0], (long long)sc, (long long)src_col,
           (long long)width);
    CPT_PAR_FOR(cpt_par(N * width, PAR_MIN),
        for (int64_t n = 0; n < N; n++)
            memcpy(F(dst) + n * dc + dst_col, F(src) + n * sc + src_col, (size_t)width * sizeof(float)););
}

void cpt_k_zero(cpt_tensor t) {
    KCHECK(t.device == CPT_DEVICE_CPU, "zero", "tensor not on the CPU");
    if (!t.data) return;
    memset(t.data, 0, (size_t)cpt_tensor_numel(t) * cpt_dtype_size_local(t.dtype));
}
