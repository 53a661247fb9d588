/* Row-wise ops on bf16 activations with fp32 arithmetic: fused residual add + RMSNorm, RoPE, SwiGLU.
 * Every output element is written by one thread; the weight gradient of RMSNorm is reduced over fixed chunks of
 * rows, then over chunks in order, so results are bitwise reproducible. */
#include "kernels/cuda/cuda_internal.h"

#define NORM_THREADS 256
#define ROW_CHUNK 64 /* rows per partial sum of the rmsnorm weight gradient */

/* ---- rmsnorm ---- */

__global__ void rmsnorm_fwd_kernel(__nv_bfloat16 *out, float *rstd, __nv_bfloat16 *resid_out,
                                   const __nv_bfloat16 *inp, const __nv_bfloat16 *resid, const __nv_bfloat16 *w,
                                   int64_t C, float eps) {
    __shared__ float red[32];
    int64_t r = blockIdx.x;
    const __nv_bfloat16 *x = inp + r * C;
    float ss = 0.0f;
    if (resid) {
        /* x = bf16(inp + resid) is what the next layer and the backward see, so normalise the rounded sum */
        const __nv_bfloat16 *y = resid + r * C;
        __nv_bfloat16 *xo = resid_out + r * C;
        for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
            __nv_bfloat16 s = __float2bfloat16(__bfloat162float(x[c]) + __bfloat162float(y[c]));
            xo[c] = s;
            float f = __bfloat162float(s);
            ss += f * f;
        }
        x = xo;
    } else {
        for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
            float f = __bfloat162float(x[c]);
            ss += f * f;
        }
    }
    ss = block_sum(ss, red);
    float s = rsqrtf(ss / (float)C + eps);
    if (rstd && threadIdx.x == 0) rstd[r] = s;
    __nv_bfloat16 *o = out + r * C;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x)
        o[c] = __float2bfloat16(__bfloat162float(w[c]) * (__bfloat162float(x[c]) * s));
}

/* C % 8 == 0 and 16-byte aligned rows: one warp per row, 8 elements per lane per step (the block-per-row kernels
 * above spend more on their two block reductions than on the bytes at C ~ 1k). The second pass reads back what the
 * same lane wrote or read. */
__global__ void rmsnorm_fwd_warp_kernel(__nv_bfloat16 *out, float *rstd, __nv_bfloat16 *resid_out,
                                        const __nv_bfloat16 *inp, const __nv_bfloat16 *resid, const __nv_bfloat16 *w,
                                        int64_t R, int64_t C, float eps) {
    int64_t r = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x & 31;
    if (r >= R) return;
    const __nv_bfloat16 *x = inp + r * C;
    float ss = 0.0f;
    for (int64_t c = lane * 8; c < C; c += 256) {
        float a[8];
        bf16x8_to_f32(*(const uint4 *)(x + c), a);
        if (resid) {
            float b[8];
            bf16x8_to_f32(*(const uint4 *)(resid + r * C + c), b);
#pragma unroll
            for (int k = 0; k < 8; k++) a[k] += b[k];
            uint4 raw = f32_to_bf16x8(a); /* normalise the rounded sum: what the next layer and the backward see */
            *(uint4 *)(resid_out + r * C + c) = raw;
            bf16x8_to_f32(raw, a);
        }
#pragma unroll
        for (int k = 0; k < 8; k++) ss += a[k] * a[k];
    }
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    float s = rsqrtf(ss / (float)C + eps);
    if (rstd && lane == 0) rstd[r] = s;
    if (resid) x = resid_out + r * C;
    for (int64_t c = lane * 8; c < C; c += 256) {
        float a[8], g[8];
        bf16x8_to_f32(*(const uint4 *)(x + c), a);
        bf16x8_to_f32(*(const uint4 *)(w + c), g);
#pragma unroll
        for (int k = 0; k < 8; k++) a[k] = g[k] * (a[k] * s);
        *(uint4 *)(out + r * C + c) = f32_to_bf16x8(a);
    }
}

void cpt_cuda_rmsnorm_fwd(cpt_cuda_ctx *ctx, cpt_tensor out, cpt_tensor rstd, cpt_tensor resid_out, cpt_tensor inp,
                          cpt_tensor resid, cpt_tensor w, float eps) {
    const char *op = "rmsnorm_fwd";
    cpt_cuda_check(op, "out", out, CPT_DT_BF16, 2);
    cpt_cuda_check(op, "inp", inp, CPT_DT_BF16, 2);
    cpt_cuda_check(op, "w", w, CPT_DT_BF16, 1);
    int64_t R = inp.shape[0], C = inp.shape[1];
    CKCHECK(out.shape[0] == R && out.shape[1] == C && w.shape[0] == C, op,
            "shape mismatch: inp [%lld, %lld], out [%lld, %lld], w [%lld]", (long long)R, (long long)C,
            (long long)out.shape[0], (long long)out.shape[1], (long long)w.shape[0]);
    if (cpt_tensor_present(rstd)) {
        cpt_cuda_check(op, "rstd", rstd, CPT_DT_F32, 1);
        CKCHECK(rstd.shape[0] == R, op, "rstd has %lld rows, want %lld", (long long)rstd.shape[0], (long long)R);
    }
    if (cpt_tensor_present(resid)) {
        cpt_cuda_check(op, "resid", resid, CPT_DT_BF16, 2);
        cpt_cuda_check(op, "resid_out", resid_out, CPT_DT_BF16, 2);
        CKCHECK(resid.shape[0] == R && resid.shape[1] == C && resid_out.shape[0] == R && resid_out.shape[1] == C,
                op, "resid / resid_out must be [%lld, %lld]", (long long)R, (long long)C);
    }
    if (R == 0) return;
    int has_resid = cpt_tensor_present(resid);
    __nv_bfloat16 *ro = has_resid ? BF(resid_out) : NULL, *rs = has_resid ? BF(resid) : NULL;
    float *rp = cpt_tensor_present(rstd) ? FP(rstd) : NULL;
    if (vec8_ok(C, {out.data, inp.data, w.data, rs, ro}))
        rmsnorm_fwd_warp_kernel<<<cdiv(R, 8), 256, 0, ctx->stream>>>(BF(out), rp, ro, BF(inp), rs, BF(w), R, C, eps);
    else
        rmsnorm_fwd_kernel<<<(unsigned)R, NORM_THREADS, 0, ctx->stream>>>(BF(out), rp, ro, BF(inp), rs, BF(w), C, eps);
    LAUNCH_OK("rmsnorm_fwd_kernel");
}

__global__ void rmsnorm_bwd_dinp_kernel(__nv_bfloat16 *dinp, const __nv_bfloat16 *dout, const __nv_bfloat16 *inp,
                                        const __nv_bfloat16 *w, const float *rstd, int64_t C) {
    __shared__ float red[32];
    int64_t r = blockIdx.x;
    const __nv_bfloat16 *x = inp + r * C, *dy = dout + r * C;
    float dot = 0.0f;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x)
        dot += __bfloat162float(w[c]) * __bfloat162float(dy[c]) * __bfloat162float(x[c]);
    dot = block_sum(dot, red);
    float s = rstd[r], k = dot * s * s * s / (float)C;
    __nv_bfloat16 *dx = dinp + r * C;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
        float g = s * __bfloat162float(w[c]) * __bfloat162float(dy[c]) - k * __bfloat162float(x[c]);
        dx[c] = __float2bfloat16(__bfloat162float(dx[c]) + g);
    }
}

/* the vectorised twin of rmsnorm_bwd_dinp_kernel: one warp per row */
__global__ void rmsnorm_bwd_dinp_warp_kernel(__nv_bfloat16 *dinp, const __nv_bfloat16 *dout, const __nv_bfloat16 *inp,
                                             const __nv_bfloat16 *w, const float *rstd, int64_t R, int64_t C) {
    int64_t r = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x & 31;
    if (r >= R) return;
    const __nv_bfloat16 *x = inp + r * C, *dy = dout + r * C;
    float dot = 0.0f;
    for (int64_t c = lane * 8; c < C; c += 256) {
        float a[8], g[8], d[8];
        bf16x8_to_f32(*(const uint4 *)(x + c), a);
        bf16x8_to_f32(*(const uint4 *)(w + c), g);
        bf16x8_to_f32(*(const uint4 *)(dy + c), d);
#pragma unroll
        for (int k = 0; k < 8; k++) dot += g[k] * d[k] * a[k];
    }
    for (int o = 16; o > 0; o >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, o);
    float s = rstd[r], k3 = dot * s * s * s / (float)C;
    for (int64_t c = lane * 8; c < C; c += 256) {
        float a[8], g[8], d[8], o[8];
        bf16x8_to_f32(*(const uint4 *)(x + c), a);
        bf16x8_to_f32(*(const uint4 *)(w + c), g);
        bf16x8_to_f32(*(const uint4 *)(dy + c), d);
        uint4 *px = (uint4 *)(dinp + r * C + c);
        bf16x8_to_f32(*px, o);
#pragma unroll
        for (int k = 0; k < 8; k++) o[k] += s * g[k] * d[k] - k3 * a[k];
        *px = f32_to_bf16x8(o);
    }
}

/* part [nchunk, C]: column c of chunk ch = sum over its rows of dy * x * rstd */
__global__ void rmsnorm_bwd_dw_partial_kernel(float *part, const __nv_bfloat16 *dout, const __nv_bfloat16 *inp,
                                              const float *rstd, int64_t R, int64_t C) {
    int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, ch = blockIdx.y;
    if (c >= C) return;
    int64_t r0 = ch * ROW_CHUNK, r1 = r0 + ROW_CHUNK < R ? r0 + ROW_CHUNK : R;
    float acc = 0.0f;
    for (int64_t r = r0; r < r1; r++)
        acc += __bfloat162float(dout[r * C + c]) * __bfloat162float(inp[r * C + c]) * rstd[r];
    part[ch * C + c] = acc;
}

__global__ void sum_chunks_kernel(float *dst, const float *part, int64_t nchunk, int64_t C) {
    int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float acc = dst[c];
    for (int64_t ch = 0; ch < nchunk; ch++) acc += part[ch * C + c];
    dst[c] = acc;
}

void cpt_cuda_rmsnorm_bwd(cpt_cuda_ctx *ctx, cpt_tensor dinp, cpt_tensor dw, cpt_tensor dout, cpt_tensor inp,
                          cpt_tensor w, cpt_tensor rstd) {
    const char *op = "rmsnorm_bwd";
    cpt_cuda_check(op, "dout", dout, CPT_DT_BF16, 2);
    cpt_cuda_check(op, "inp", inp, CPT_DT_BF16, 2);
    cpt_cuda_check(op, "w", w, CPT_DT_BF16, 1);
    cpt_cuda_check(op, "rstd", rstd, CPT_DT_F32, 1);
    int64_t R = inp.shape[0], C = inp.shape[1];
    CKCHECK(dout.shape[0] == R && dout.shape[1] == C && w.shape[0] == C && rstd.shape[0] == R, op,
            "shape mismatch");
    if (R == 0) return;
    if (cpt_tensor_present(dinp)) {
        cpt_cuda_check(op, "dinp", dinp, CPT_DT_BF16, 2);
        CKCHECK(dinp.shape[0] == R && dinp.shape[1] == C, op, "dinp shape mismatch");
        if (vec8_ok(C, {dinp.data, dout.data, inp.data, w.data}))
            rmsnorm_bwd_dinp_warp_kernel<<<cdiv(R, 8), 256, 0, ctx->stream>>>(BF(dinp), BF(dout), BF(inp), BF(w),
                                                                              FP(rstd), R, C);
        else
            rmsnorm_bwd_dinp_kernel<<<(unsigned)R, NORM_THREADS, 0, ctx->stream>>>(BF(dinp), BF(dout), BF(inp),
                                                                                   BF(w), FP(rstd), C);
        LAUNCH_OK("rmsnorm_bwd_dinp_kernel");
    }
    if (cpt_tensor_present(dw)) {
        cpt_cuda_check(op, "dw", dw, CPT_DT_F32, 1);
        CKCHECK(dw.shape[0] == C, op, "dw has %lld entries, want %lld", (long long)dw.shape[0], (long long)C);
        int64_t nchunk = (R + ROW_CHUNK - 1) / ROW_CHUNK;
        CKCHECK(nchunk <= 65535, op, "%lld rows is more than this reduction handles", (long long)R);
        float *part = (float *)cpt_cuda_scratch(ctx, (size_t)(nchunk * C) * sizeof(float));
        dim3 grid(cdiv(C, 256), (unsigned)nchunk);
        rmsnorm_bwd_dw_partial_kernel<<<grid, 256, 0, ctx->stream>>>(part, BF(dout), BF(inp), FP(rstd), R, C);
        LAUNCH_OK("rmsnorm_bwd_dw_partial_kernel");
        sum_chunks_kernel<<<cdiv(C, 256), 256, 0, ctx->stream>>>(FP(dw), part, nchunk, C);
        LAUNCH_OK("sum_chunks_kernel");
    }
}

/* ---- rope ---- */

/* One thread per (row, pair i): the angle pos * inv_freq[i] (fp32, as transformers) and its sincos are computed
 * once and applied to pair i of every head (sincosf of large angles is the costly part). sign -1 rotates back.
 * Block: tpb rows x half threads. */
__global__ void rope_kernel(__nv_bfloat16 *x, int64_t N, int64_t stride, int n_heads, int head_dim,
                            const int32_t *pos, const float *inv_freq, float sign) {
    int half = head_dim / 2;
    int i = threadIdx.x % half;
    int64_t n = (int64_t)blockIdx.x * (blockDim.x / half) + threadIdx.x / half;
    if (n >= N) return;
    float ang = (float)pos[n] * inv_freq[i];
    float sn, cs;
    sincosf(ang, &sn, &cs);
    sn *= sign;
    __nv_bfloat16 *v = x + n * stride;
    for (int h = 0; h < n_heads; h++, v += head_dim) {
        float a = __bfloat162float(v[i]), b = __bfloat162float(v[i + half]);
        v[i] = __float2bfloat16(a * cs - b * sn);
        v[i + half] = __float2bfloat16(b * cs + a * sn);
    }
}

static void rope_apply(cpt_cuda_ctx *ctx, const char *op, cpt_tensor x, int n_heads, int head_dim,
                       cpt_tensor positions, cpt_tensor inv_freq, float sign) {
    cpt_cuda_check(op, "x", x, CPT_DT_BF16, 2);
    cpt_cuda_check(op, "positions", positions, CPT_DT_I32, 1);
    cpt_cuda_check(op, "inv_freq", inv_freq, CPT_DT_F32, 1);
    int64_t N = x.shape[0], stride = x.shape[1];
    CKCHECK(head_dim > 0 && head_dim % 2 == 0 && n_heads > 0 && (int64_t)n_heads * head_dim <= stride &&
                positions.shape[0] == N && inv_freq.shape[0] == head_dim / 2,
            op, "shape mismatch: x [%lld, %lld], %d heads of %d, inv_freq [%lld]", (long long)N, (long long)stride,
            n_heads, head_dim, (long long)inv_freq.shape[0]);
    int half = head_dim / 2;
    CKCHECK(half <= 256, op, "head_dim %d: at most 512", head_dim);
    if (N == 0) return;
    int rows = 256 / half; /* rows per block */
    rope_kernel<<<cdiv(N, rows), rows * half, 0, ctx->stream>>>(BF(x), N, stride, n_heads, head_dim, IP(positions),
                                                                 FP(inv_freq), sign);
    LAUNCH_OK("rope_kernel");
}

void cpt_cuda_rope_fwd(cpt_cuda_ctx *ctx, cpt_tensor x, int n_heads, int head_dim, cpt_tensor positions,
                       cpt_tensor inv_freq) {
    rope_apply(ctx, "rope_fwd", x, n_heads, head_dim, positions, inv_freq, 1.0f);
}

void cpt_cuda_rope_bwd(cpt_cuda_ctx *ctx, cpt_tensor dx, int n_heads, int head_dim, cpt_tensor positions,
                       cpt_tensor inv_freq) {
    rope_apply(ctx, "rope_bwd", dx, n_heads, head_dim, positions, inv_freq, -1.0f);
}

/* ---- swiglu ---- */

/* Rows of the grid: grid.y covers at most 65535 rows, so each block walks rows r, r + gridDim.y, ... */
static dim3 row_grid(int64_t N, int64_t per_row, int threads) {
    return dim3(cdiv(per_row, threads), (unsigned)(N < 65535 ? N : 65535));
}

/* d/dg, d/du of silu(g) * u times d */
__device__ inline void swiglu_grad(float g, float u, float d, float *dg, float *du) {
    float sg = 1.0f / (1.0f + expf(-g));
    *dg = d * u * sg * (1.0f + g * (1.0f - sg));
    *du = d * g * sg;
}

/* W elements per thread (8: one 16-byte access, needs vec8_ok; 1: any H), grid (H / W / 256, rows) */
template <int W>
__global__ void swiglu_fwd_kernel(__nv_bfloat16 *out, const __nv_bfloat16 *gu, int64_t N, int64_t H) {
    int64_t j = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * W;
    if (j >= H) return;
    for (int64_t n = blockIdx.y; n < N; n += gridDim.y) {
        float g[W], u[W], o[W];
        load_bf16<W>(gu + n * 2 * H + j, g);
        load_bf16<W>(gu + n * 2 * H + H + j, u);
#pragma unroll
        for (int k = 0; k < W; k++) o[k] = silu_f(g[k]) * u[k];
        store_bf16<W>(out + n * H + j, o);
    }
}

/* dgu = the gradient (overwritten: the caller needs no zeroed buffer) */
template <int W>
__global__ void swiglu_bwd_kernel(__nv_bfloat16 *dgu, const __nv_bfloat16 *dout, const __nv_bfloat16 *gu, int64_t N,
                                  int64_t H) {
    int64_t j = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * W;
    if (j >= H) return;
    for (int64_t n = blockIdx.y; n < N; n += gridDim.y) {
        float g[W], u[W], d[W], dg[W], du[W];
        load_bf16<W>(gu + n * 2 * H + j, g);
        load_bf16<W>(gu + n * 2 * H + H + j, u);
        load_bf16<W>(dout + n * H + j, d);
#pragma unroll
        for (int k = 0; k < W; k++) swiglu_grad(g[k], u[k], d[k], &dg[k], &du[k]);
        store_bf16<W>(dgu + n * 2 * H + j, dg);
        store_bf16<W>(dgu + n * 2 * H + H + j, du);
    }
}

void cpt_cuda_swiglu_fwd(cpt_cuda_ctx *ctx, cpt_tensor out, cpt_tensor gu) {
    const char *op = "swiglu_fwd";
    cpt_cuda_check(op, "out", out, CPT_DT_BF16, 2);
    cpt_cuda_check(op, "gu", gu, CPT_DT_BF16, 2);
    int64_t N = out.shape[0], H = out.shape[1];
    CKCHECK(gu.shape[0] == N && gu.shape[1] == 2 * H, op, "gu is [%lld, %lld], want [%lld, %lld]",
            (long long)gu.shape[0], (long long)gu.shape[1], (long long)N, (long long)(2 * H));
    if (N * H == 0) return;
    if (vec8_ok(H, {out.data, gu.data}))
        swiglu_fwd_kernel<8><<<row_grid(N, H / 8, 256), 256, 0, ctx->stream>>>(BF(out), BF(gu), N, H);
    else
        swiglu_fwd_kernel<1><<<row_grid(N, H, 256), 256, 0, ctx->stream>>>(BF(out), BF(gu), N, H);
    LAUNCH_OK("swiglu_fwd_kernel");
}

void cpt_cuda_swiglu_bwd(cpt_cuda_ctx *ctx, cpt_tensor dgu, cpt_tensor dout, cpt_tensor gu) {
    const char *op = "swiglu_bwd";
    cpt_cuda_check(op, "dgu", dgu, CPT_DT_BF16, 2);
    cpt_cuda_check(op, "dout", dout, CPT_DT_BF16, 2);
    cpt_cuda_check(op, "gu", gu, CPT_DT_BF16, 2);
    int64_t N = dout.shape[0], H = dout.shape[1];
    CKCHECK(gu.shape[0] == N && gu.shape[1] == 2 * H && dgu.shape[0] == N && dgu.shape[1] == 2 * H, op,
            "shape mismatch: dout [%lld, %lld], gu [%lld, %lld], dgu [%lld, %lld]", (long long)N, (long long)H,
            (long long)gu.shape[0], (long long)gu.shape[1], (long long)dgu.shape[0], (long long)dgu.shape[1]);
    if (N * H == 0) return;
    if (vec8_ok(H, {dgu.data, dout.data, gu.data}))
        swiglu_bwd_kernel<8><<<row_grid(N, H / 8, 256), 256, 0, ctx->stream>>>(BF(dgu), BF(dout), BF(gu), N, H);
    else
        swiglu_bwd_kernel<1><<<row_grid(N, H, 256), 256, 0, ctx->stream>>>(BF(dgu), BF(dout), BF(gu), N, H);
    LAUNCH_OK("swiglu_bwd_kernel");
}
