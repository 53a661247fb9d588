/* Linear layers through cuBLASLt: bf16 operands, fp32 accumulation (CUBLAS_COMPUTE_32F), bias fused in the
 * epilogue. cuBLASLt is column-major; a row-major [R, C] buffer is a column-major [C, R] one, so each row-major
 * product below is written as the column-major product of the transposed views. */
#include "kernels/cuda/cuda_internal.h"

typedef struct lt_operand {
    const void *p;
    cudaDataType_t type;
    int64_t rows, cols, ld; /* column-major layout as stored */
} lt_operand;

#define LT_OK(call, what)                                                                                      \
    do {                                                                                                       \
        cublasStatus_t s_ = (call);                                                                            \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                                     \
            fprintf(stderr, "cpt cuda: %s: %s failed with cuBLAS status %d (%s:%d)\n", what, #call, (int)s_,   \
                    __FILE__, __LINE__);                                                                       \
            abort();                                                                                           \
        }                                                                                                      \
    } while (0)

/* D [m, n] (column-major) = op(A) @ op(B) + beta * D (+ bias [m] broadcast over columns). */
static void lt_gemm(cpt_cuda_ctx *ctx, const char *op, int trans_a, int trans_b, int64_t m, int64_t n, int64_t k,
                    lt_operand A, lt_operand B, void *D, cudaDataType_t dtype, int64_t ldd, float beta,
                    const void *bias) {
    cpt_cublaslt_api *lt = &ctx->lt;
    cublasLtMatmulDesc_t desc = NULL;
    cublasLtMatrixLayout_t la = NULL, lb = NULL, ld = NULL;
    cublasLtMatmulPreference_t pref = NULL;
    LT_OK(lt->desc_create(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), op);
    cublasOperation_t ta = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, tb = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    LT_OK(lt->desc_set(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta), op);
    LT_OK(lt->desc_set(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb), op);
    if (bias) {
        cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
        LT_OK(lt->desc_set(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi), op);
        LT_OK(lt->desc_set(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias), op);
    }
    LT_OK(lt->layout_create(&la, A.type, (uint64_t)A.rows, (uint64_t)A.cols, A.ld), op);
    LT_OK(lt->layout_create(&lb, B.type, (uint64_t)B.rows, (uint64_t)B.cols, B.ld), op);
    LT_OK(lt->layout_create(&ld, dtype, (uint64_t)m, (uint64_t)n, ldd), op);
    LT_OK(lt->pref_create(&pref), op);
    size_t ws = ctx->lt_workspace_bytes;
    LT_OK(lt->pref_set(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws), op);
    cublasLtMatmulHeuristicResult_t heur;
    int found = 0;
    LT_OK(lt->heuristic(ctx->lt_handle, desc, la, lb, ld, ld, pref, 1, &heur, &found), op);
    CKCHECK(found > 0, op, "cuBLASLt has no algorithm for m=%lld n=%lld k=%lld", (long long)m, (long long)n,
            (long long)k);
    float alpha = 1.0f;
    LT_OK(lt->matmul(ctx->lt_handle, desc, &alpha, A.p, la, B.p, lb, &beta, D, ld, D, ld, &heur.algo,
                     ctx->lt_workspace, ws, ctx->stream),
          op);
    lt->pref_destroy(pref);
    lt->layout_destroy(ld);
    lt->layout_destroy(lb);
    lt->layout_destroy(la);
    lt->desc_destroy(desc);
}

void cpt_cuda_matmul_fwd(cpt_cuda_ctx *ctx, cpt_tensor out, cpt_tensor inp, cpt_tensor w, cpt_tensor bias) {
    const char *op = "matmul_fwd";
    cpt_cuda_check(op, "out", out, CPT_DT_BF16, 2);
    cpt_cuda_check(op, "inp", inp, CPT_DT_BF16, 2);
    cpt_cuda_check(op, "w", w, CPT_DT_BF16, 2);
    int64_t N = inp.shape[0], C = inp.shape[1], OC = w.shape[0];
    CKCHECK(w.shape[1] == C && out.shape[0] == N && out.shape[1] == OC, op,
            "shapes: out [%lld, %lld], inp [%lld, %lld], w [%lld, %lld]", (long long)out.shape[0],
            (long long)out.shape[1], (long long)N, (long long)C, (long long)OC, (long long)w.shape[1]);
    if (cpt_tensor_present(bias)) {
        cpt_cuda_check(op, "bias", bias, CPT_DT_BF16, 1);
        CKCHECK(bias.shape[0] == OC, op, "bias has %lld entries, want %lld", (long long)bias.shape[0], (long long)OC);
    }
    /* out^T [OC, N] = (w stored [C, OC])^T @ (inp stored [C, N]) */
    lt_operand A = {w.data, CUDA_R_16BF, C, OC, C};
    lt_operand B = {inp.data, CUDA_R_16BF, C, N, C};
    lt_gemm(ctx, op, 1, 0, OC, N, C, A, B, out.data, CUDA_R_16BF, OC, 0.0f, bias.data);
}

static void matmul_bwd(cpt_cuda_ctx *ctx, const char *op, cpt_tensor dinp, cpt_tensor dw, cpt_tensor dout,
                       cpt_tensor inp, cpt_tensor w, float dinp_beta, float dw_beta) {
    cpt_cuda_check(op, "dout", dout, CPT_DT_BF16, 2);
    cpt_cuda_check(op, "inp", inp, CPT_DT_BF16, 2);
    cpt_cuda_check(op, "w", w, CPT_DT_BF16, 2);
    int64_t N = inp.shape[0], C = inp.shape[1], OC = w.shape[0];
    CKCHECK(w.shape[1] == C && dout.shape[0] == N && dout.shape[1] == OC, op, "shape mismatch");
    if (cpt_tensor_present(dinp)) {
        cpt_cuda_check(op, "dinp", dinp, CPT_DT_BF16, 2);
        CKCHECK(dinp.shape[0] == N && dinp.shape[1] == C, op, "dinp shape mismatch");
        /* dinp^T [C, N] += w^T [C, OC] @ dout^T [OC, N] */
        lt_operand A = {w.data, CUDA_R_16BF, C, OC, C};
        lt_operand B = {dout.data, CUDA_R_16BF, OC, N, OC};
        lt_gemm(ctx, op, 0, 0, C, N, OC, A, B, dinp.data, CUDA_R_16BF, C, dinp_beta, NULL);
    }
    if (cpt_tensor_present(dw)) {
        cpt_cuda_check(op, "dw", dw, CPT_DT_F32, 2);
        CKCHECK(dw.shape[0] == OC && dw.shape[1] == C, op, "dw shape mismatch");
        /* dw^T [C, OC] += inp^T [C, N] @ dout [N, OC], dout stored [OC, N] col-major, transposed */
        lt_operand A = {inp.data, CUDA_R_16BF, C, N, C};
        lt_operand B = {dout.data, CUDA_R_16BF, OC, N, OC};
        lt_gemm(ctx, op, 0, 1, C, OC, N, A, B, dw.data, CUDA_R_32F, C, dw_beta, NULL);
    }
}

void cpt_cuda_matmul_bwd(cpt_cuda_ctx *ctx, cpt_tensor dinp, cpt_tensor dw, cpt_tensor dout, cpt_tensor inp,
                         cpt_tensor w) {
    matmul_bwd(ctx, "matmul_bwd", dinp, dw, dout, inp, w, 1.0f, 1.0f);
}

void cpt_cuda_matmul_bwd_ex(cpt_cuda_ctx *ctx, cpt_tensor dinp, cpt_tensor dw, cpt_tensor dout, cpt_tensor inp,
                            cpt_tensor w, int flags) {
    matmul_bwd(ctx, "matmul_bwd_ex", dinp, dw, dout, inp, w, flags & CPT_MM_DINP_SET ? 0.0f : 1.0f,
               flags & CPT_MM_DW_SET ? 0.0f : 1.0f);
}
