/* Deterministic reductions of the training step: bias gradients (column sums), the scalar value head (a dot per
 * row and its backward), sums of squares for the global gradient norm, and gradient scaling for clipping.
 * No float atomics: fixed row chunks are summed by one thread each, then the chunks in order; a sum of squares
 * goes through a fixed grid of per-block partials (in fp64), then one block adds them in a fixed tree. */
#include "kernels/cuda/cuda_internal.h"

#define COL_CHUNK 128 /* rows per partial column sum */
#define SUMSQ_BLOCKS 256
#define SUMSQ_THREADS 512

/* part [nchunk, C]: chunk ch's sum over its rows of x (times scale[r] when given) */
__global__ void col_partial_kernel(float *part, const __nv_bfloat16 *x, const float *scale, int64_t R, int64_t C) {
    int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, ch = blockIdx.y;
    if (c >= C) return;
    int64_t r0 = ch * COL_CHUNK, r1 = r0 + COL_CHUNK < R ? r0 + COL_CHUNK : R;
    float acc = 0.0f;
    for (int64_t r = r0; r < r1; r++) {
        float v = __bfloat162float(x[r * C + c]);
        acc += scale ? v * scale[r] : v;
    }
    part[ch * C + c] = acc;
}

__global__ void add_chunks_kernel(float *dst, const float *part, int64_t nchunk, int64_t C) {
    int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float acc = 0.0f;
    for (int64_t ch = 0; ch < nchunk; ch++) acc += part[ch * C + c];
    dst[c] += acc;
}

/* dst [C] f32 += sum over rows of x [R, C] bf16 (scaled per row by scale [R] when present) */
static void col_sum(cpt_cuda_ctx *ctx, const char *op, float *dst, const __nv_bfloat16 *x, const float *scale,
                    int64_t R, int64_t C) {
    if (R == 0 || C == 0) return;
    int64_t nchunk = (R + COL_CHUNK - 1) / COL_CHUNK;
    CKCHECK(nchunk <= 65535, op, "%lld rows is more than this reduction handles", (long long)R);
    float *part = (float *)cpt_cuda_scratch(ctx, (size_t)(nchunk * C) * sizeof(float));
    dim3 grid(cdiv(C, 256), (unsigned)nchunk);
    col_partial_kernel<<<grid, 256, 0, ctx->stream>>>(part, x, scale, R, C);
    LAUNCH_OK("col_partial_kernel");
    add_chunks_kernel<<<cdiv(C, 256), 256, 0, ctx->stream>>>(dst, part, nchunk, C);
    LAUNCH_OK("add_chunks_kernel");
}

void cpt_cuda_bias_grad(cpt_cuda_ctx *ctx, cpt_tensor dbias, cpt_tensor dout) {
    const char *op = "bias_grad";
    cpt_cuda_check(op, "dbias", dbias, CPT_DT_F32, 1);
    cpt_cuda_check(op, "dout", dout, CPT_DT_BF16, 2);
    CKCHECK(dbias.shape[0] == dout.shape[1], op, "dbias [%lld], dout [%lld, %lld]", (long long)dbias.shape[0],
            (long long)dout.shape[0], (long long)dout.shape[1]);
    col_sum(ctx, op, FP(dbias), BF(dout), NULL, dout.shape[0], dout.shape[1]);
}

/* one warp per row */
__global__ void rowdot_kernel(float *out, const __nv_bfloat16 *x, const __nv_bfloat16 *w, int64_t N, int64_t C) {
    int64_t r = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    int lane = threadIdx.x & 31;
    if (r >= N) return;
    float acc = 0.0f;
    for (int64_t c = lane; c < C; c += 32) acc += __bfloat162float(x[r * C + c]) * __bfloat162float(w[c]);
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    if (lane == 0) out[r] = acc;
}

void cpt_cuda_rowdot_fwd(cpt_cuda_ctx *ctx, cpt_tensor out, cpt_tensor x, cpt_tensor w) {
    const char *op = "rowdot_fwd";
    cpt_cuda_check(op, "out", out, CPT_DT_F32, 1);
    cpt_cuda_check(op, "x", x, CPT_DT_BF16, 2);
    cpt_cuda_check(op, "w", w, CPT_DT_BF16, 1);
    int64_t N = x.shape[0], C = x.shape[1];
    CKCHECK(out.shape[0] == N && w.shape[0] == C, op, "out [%lld], x [%lld, %lld], w [%lld]",
            (long long)out.shape[0], (long long)N, (long long)C, (long long)w.shape[0]);
    if (N == 0) return;
    rowdot_kernel<<<cdiv(N * 32, 256), 256, 0, ctx->stream>>>(FP(out), BF(x), BF(w), N, C);
    LAUNCH_OK("rowdot_kernel");
}

__global__ void rowdot_bwd_dx_kernel(__nv_bfloat16 *dx, const float *dout, const __nv_bfloat16 *w, int64_t N,
                                     int64_t C) {
    int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= N * C) return;
    int64_t r = idx / C, c = idx % C;
    dx[idx] = __float2bfloat16(__bfloat162float(dx[idx]) + dout[r] * __bfloat162float(w[c]));
}

void cpt_cuda_rowdot_bwd(cpt_cuda_ctx *ctx, cpt_tensor dx, cpt_tensor dw, cpt_tensor dout, cpt_tensor x,
                         cpt_tensor w) {
    const char *op = "rowdot_bwd";
    cpt_cuda_check(op, "dout", dout, CPT_DT_F32, 1);
    cpt_cuda_check(op, "x", x, CPT_DT_BF16, 2);
    cpt_cuda_check(op, "w", w, CPT_DT_BF16, 1);
    int64_t N = x.shape[0], C = x.shape[1];
    CKCHECK(dout.shape[0] == N && w.shape[0] == C, op, "dout [%lld], x [%lld, %lld], w [%lld]",
            (long long)dout.shape[0], (long long)N, (long long)C, (long long)w.shape[0]);
    if (cpt_tensor_present(dx)) {
        cpt_cuda_check(op, "dx", dx, CPT_DT_BF16, 2);
        CKCHECK(dx.shape[0] == N && dx.shape[1] == C, op, "dx shape mismatch");
        if (N * C > 0) {
            rowdot_bwd_dx_kernel<<<cdiv(N * C, 256), 256, 0, ctx->stream>>>(BF(dx), FP(dout), BF(w), N, C);
            LAUNCH_OK("rowdot_bwd_dx_kernel");
        }
    }
    if (cpt_tensor_present(dw)) {
        cpt_cuda_check(op, "dw", dw, CPT_DT_F32, dw.ndim);
        CKCHECK(cpt_tensor_numel(dw) == C, op, "dw has %lld elements, want %lld", (long long)cpt_tensor_numel(dw),
                (long long)C);
        col_sum(ctx, op, FP(dw), BF(x), FP(dout), N, C);
    }
}

/* ---- global norm and clipping ---- */

__global__ void sumsq_partial_kernel(double *part, const float *x, int64_t n) {
    __shared__ double red[SUMSQ_THREADS];
    double acc = 0.0;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        acc += (double)x[i] * (double)x[i];
    red[threadIdx.x] = acc;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) part[blockIdx.x] = red[0];
}

__global__ void sumsq_final_kernel(double *out, const double *part, int nparts) {
    __shared__ double red[SUMSQ_BLOCKS];
    red[threadIdx.x] = (int)threadIdx.x < nparts ? part[threadIdx.x] : 0.0;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) *out = red[0];
}

void cpt_cuda_sumsq(cpt_cuda_ctx *ctx, double *out, cpt_tensor x) {
    const char *op = "sumsq";
    cpt_cuda_check(op, "x", x, CPT_DT_F32, x.ndim);
    CKCHECK(out != NULL, op, "out is absent");
    int64_t n = cpt_tensor_numel(x);
    /* the grid depends only on n, so the summation order is fixed */
    int blocks = (int)(n / SUMSQ_THREADS + 1 < SUMSQ_BLOCKS ? n / SUMSQ_THREADS + 1 : SUMSQ_BLOCKS);
    double *part = (double *)cpt_cuda_scratch(ctx, SUMSQ_BLOCKS * sizeof(double));
    sumsq_partial_kernel<<<blocks, SUMSQ_THREADS, 0, ctx->stream>>>(part, FP(x), n);
    LAUNCH_OK("sumsq_partial_kernel");
    sumsq_final_kernel<<<1, SUMSQ_BLOCKS, 0, ctx->stream>>>(out, part, blocks);
    LAUNCH_OK("sumsq_final_kernel");
}

__global__ void scale_kernel(float *x, float c, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= c;
}

void cpt_cuda_scale(cpt_cuda_ctx *ctx, cpt_tensor x, float c) {
    cpt_cuda_check("scale", "x", x, CPT_DT_F32, x.ndim);
    int64_t n = cpt_tensor_numel(x);
    if (n == 0) return;
    scale_kernel<<<cdiv(n, 256), 256, 0, ctx->stream>>>(FP(x), c, n);
    LAUNCH_OK("scale_kernel");
}
