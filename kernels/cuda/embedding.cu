/* Token embedding forward and a deterministic backward, plus the bf16 data movement the model needs (column blocks
 * of fused rows, fp32 <-> bf16 casts).
 *
 * Embedding backward without float atomics: the tokens are known on the host, so the host groups positions by token
 * id (cpt_cuda_embedding_plan); one block per distinct id then adds that id's gradient rows in position order, the
 * CPU backend's order, into its fp32 row. */
#include <string.h>

#include "kernels/cuda/cuda_internal.h"

/* ---- embedding ---- */

__global__ void embedding_fwd_kernel(__nv_bfloat16 *out, const int32_t *tokens, const __nv_bfloat16 *wte, int64_t C) {
    int64_t n = blockIdx.x;
    const __nv_bfloat16 *src = wte + (int64_t)tokens[n] * C;
    __nv_bfloat16 *dst = out + n * C;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) dst[c] = src[c];
}

void cpt_cuda_embedding_fwd(cpt_cuda_ctx *ctx, cpt_tensor out, cpt_tensor tokens, cpt_tensor wte) {
    const char *op = "embedding_fwd";
    cpt_cuda_check(op, "out", out, CPT_DT_BF16, 2);
    cpt_cuda_check(op, "tokens", tokens, CPT_DT_I32, 1);
    cpt_cuda_check(op, "wte", wte, CPT_DT_BF16, 2);
    int64_t N = out.shape[0], C = out.shape[1];
    CKCHECK(tokens.shape[0] == N && wte.shape[1] == C, op, "out [%lld, %lld], tokens [%lld], wte [%lld, %lld]",
            (long long)N, (long long)C, (long long)tokens.shape[0], (long long)wte.shape[0], (long long)wte.shape[1]);
    if (N == 0) return;
    embedding_fwd_kernel<<<(unsigned)N, 256, 0, ctx->stream>>>(BF(out), IP(tokens), BF(wte), C);
    LAUNCH_OK("embedding_fwd_kernel");
}

static int cmp_key(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

int cpt_cuda_embedding_plan(const int32_t *tokens, int n, int32_t *ids, int32_t *starts, int32_t *order) {
    int64_t *key = (int64_t *)malloc(sizeof(int64_t) * (size_t)(n ? n : 1));
    if (!key) return -1;
    for (int i = 0; i < n; i++) key[i] = ((int64_t)tokens[i] << 32) | (int64_t)i; /* by id, then position */
    qsort(key, (size_t)n, sizeof *key, cmp_key);
    int u = 0;
    for (int i = 0; i < n; i++) {
        int32_t id = (int32_t)(key[i] >> 32);
        if (i == 0 || id != ids[u - 1]) {
            ids[u] = id;
            starts[u++] = i;
        }
        order[i] = (int32_t)(key[i] & 0xffffffff);
    }
    starts[u] = n;
    free(key);
    return u;
}

__global__ void embedding_bwd_kernel(float *dwte, const __nv_bfloat16 *dout, const int32_t *ids,
                                     const int32_t *starts, const int32_t *order, int64_t C) {
    int u = blockIdx.x;
    int32_t j0 = starts[u], j1 = starts[u + 1];
    float *row = dwte + (int64_t)ids[u] * C;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
        float acc = row[c];
        for (int32_t j = j0; j < j1; j++) acc += __bfloat162float(dout[(int64_t)order[j] * C + c]);
        row[c] = acc;
    }
}

void cpt_cuda_embedding_bwd(cpt_cuda_ctx *ctx, cpt_tensor dwte, cpt_tensor dout, cpt_tensor ids, cpt_tensor starts,
                            cpt_tensor order) {
    const char *op = "embedding_bwd";
    cpt_cuda_check(op, "dwte", dwte, CPT_DT_F32, 2);
    cpt_cuda_check(op, "dout", dout, CPT_DT_BF16, 2);
    cpt_cuda_check(op, "ids", ids, CPT_DT_I32, 1);
    cpt_cuda_check(op, "starts", starts, CPT_DT_I32, 1);
    cpt_cuda_check(op, "order", order, CPT_DT_I32, 1);
    int64_t N = dout.shape[0], C = dout.shape[1], U = ids.shape[0];
    CKCHECK(dwte.shape[1] == C && order.shape[0] == N && starts.shape[0] == U + 1 && U <= N, op,
            "dwte [%lld, %lld], dout [%lld, %lld], ids [%lld], starts [%lld], order [%lld]",
            (long long)dwte.shape[0], (long long)dwte.shape[1], (long long)N, (long long)C, (long long)U,
            (long long)starts.shape[0], (long long)order.shape[0]);
    if (U == 0) return;
    embedding_bwd_kernel<<<(unsigned)U, 256, 0, ctx->stream>>>(FP(dwte), BF(dout), IP(ids), IP(starts), IP(order), C);
    LAUNCH_OK("embedding_bwd_kernel");
}

/* ---- data movement ---- */

__global__ void copy_cols_kernel(__nv_bfloat16 *dst, int64_t dst_stride, const __nv_bfloat16 *src,
                                 int64_t src_stride, int64_t N, int64_t width) {
    int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= N * width) return;
    int64_t n = idx / width, c = idx % width;
    dst[n * dst_stride + c] = src[n * src_stride + c];
}

void cpt_cuda_copy_cols(cpt_cuda_ctx *ctx, cpt_tensor dst, int64_t dst_col, cpt_tensor src, int64_t src_col,
                        int64_t width) {
    const char *op = "copy_cols";
    cpt_cuda_check(op, "dst", dst, CPT_DT_BF16, 2);
    cpt_cuda_check(op, "src", src, CPT_DT_BF16, 2);
    int64_t N = dst.shape[0];
    CKCHECK(src.shape[0] == N && dst_col >= 0 && src_col >= 0 && width >= 0 && dst_col + width <= dst.shape[1] &&
                src_col + width <= src.shape[1],
            op, "dst [%lld, %lld] col %lld, src [%lld, %lld] col %lld, width %lld", (long long)N,
            (long long)dst.shape[1], (long long)dst_col, (long long)src.shape[0], (long long)src.shape[1],
            (long long)src_col, (long long)width);
    if (N * width == 0) return;
    copy_cols_kernel<<<cdiv(N * width, 256), 256, 0, ctx->stream>>>(BF(dst) + dst_col, dst.shape[1],
                                                                     BF(src) + src_col, src.shape[1], N, width);
    LAUNCH_OK("copy_cols_kernel");
}

__global__ void cast_bf16_kernel(__nv_bfloat16 *dst, const float *src, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = __float2bfloat16(src[i]);
}

__global__ void cast_f32_kernel(float *dst, const __nv_bfloat16 *src, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = __bfloat162float(src[i]);
}

/* The checks of a cast: dst of dtype ddt, src of sdt, any shape with the same element count; returns it. */
static int64_t cast_numel(const char *op, cpt_tensor dst, cpt_dtype ddt, cpt_tensor src, cpt_dtype sdt) {
    cpt_cuda_check(op, "dst", dst, ddt, dst.ndim);
    cpt_cuda_check(op, "src", src, sdt, src.ndim);
    int64_t n = cpt_tensor_numel(src);
    CKCHECK(cpt_tensor_numel(dst) == n, op, "dst has %lld elements, src %lld", (long long)cpt_tensor_numel(dst),
            (long long)n);
    return n;
}

void cpt_cuda_cast_bf16(cpt_cuda_ctx *ctx, cpt_tensor dst, cpt_tensor src) {
    int64_t n = cast_numel("cast_bf16", dst, CPT_DT_BF16, src, CPT_DT_F32);
    if (n == 0) return;
    cast_bf16_kernel<<<cdiv(n, 256), 256, 0, ctx->stream>>>(BF(dst), FP(src), n);
    LAUNCH_OK("cast_bf16_kernel");
}

void cpt_cuda_cast_f32(cpt_cuda_ctx *ctx, cpt_tensor dst, cpt_tensor src) {
    int64_t n = cast_numel("cast_f32", dst, CPT_DT_F32, src, CPT_DT_BF16);
    if (n == 0) return;
    cast_f32_kernel<<<cdiv(n, 256), 256, 0, ctx->stream>>>(FP(dst), BF(src), n);
    LAUNCH_OK("cast_f32_kernel");
}
