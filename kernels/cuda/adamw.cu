/* Fused AdamW over fp32 master weights, as trainer/optim.c (torch.optim.AdamW): decay, moment updates, bias-
 * corrected step, and the bf16 copy the forward reads, in one pass over the parameter. */
#include <math.h>

#include "kernels/cuda/cuda_internal.h"

__global__ void adamw_kernel(float *w, __nv_bfloat16 *w_bf16, const float *g, float *m, float *v, int64_t n,
                             float decay, float b1, float b2, float one_b1, float one_b2, float step_size,
                             float bc2_sqrt, float eps) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float gi = g[i];
    float mi = b1 * m[i] + one_b1 * gi;
    float vi = b2 * v[i] + one_b2 * gi * gi;
    float wi = w[i] * decay;
    wi -= step_size * mi / (sqrtf(vi) / bc2_sqrt + eps);
    m[i] = mi;
    v[i] = vi;
    w[i] = wi;
    if (w_bf16) w_bf16[i] = __float2bfloat16(wi);
}

void cpt_cuda_adamw(cpt_cuda_ctx *ctx, cpt_tensor param, cpt_tensor param_bf16, cpt_tensor grad, cpt_tensor m,
                    cpt_tensor v, const cpt_cuda_adamw_args *a) {
    const char *op = "adamw";
    cpt_cuda_check(op, "param", param, CPT_DT_F32, param.ndim);
    cpt_cuda_check(op, "grad", grad, CPT_DT_F32, grad.ndim);
    cpt_cuda_check(op, "m", m, CPT_DT_F32, m.ndim);
    cpt_cuda_check(op, "v", v, CPT_DT_F32, v.ndim);
    int64_t n = cpt_tensor_numel(param);
    CKCHECK(cpt_tensor_numel(grad) == n && cpt_tensor_numel(m) == n && cpt_tensor_numel(v) == n, op,
            "param has %lld elements; grad %lld, m %lld, v %lld", (long long)n, (long long)cpt_tensor_numel(grad),
            (long long)cpt_tensor_numel(m), (long long)cpt_tensor_numel(v));
    if (cpt_tensor_present(param_bf16)) {
        cpt_cuda_check(op, "param_bf16", param_bf16, CPT_DT_BF16, param_bf16.ndim);
        CKCHECK(cpt_tensor_numel(param_bf16) == n, op, "param_bf16 has %lld elements, want %lld",
                (long long)cpt_tensor_numel(param_bf16), (long long)n);
    }
    CKCHECK(a->step >= 1, op, "step %lld: the first update is step 1", (long long)a->step);
    /* the same host-side constants as cpt_adamw_step, so both backends round alike */
    double bc1 = 1 - pow(a->beta1, (double)a->step), bc2 = 1 - pow(a->beta2, (double)a->step);
    float step_size = (float)(a->lr / bc1), bc2_sqrt = (float)sqrt(bc2);
    float decay = a->no_decay ? 1.0f : (float)(1 - a->lr * a->weight_decay);
    if (n == 0) return;
    adamw_kernel<<<cdiv(n, 256), 256, 0, ctx->stream>>>(
        FP(param), cpt_tensor_present(param_bf16) ? BF(param_bf16) : NULL, FP(grad), FP(m), FP(v), n, decay,
        (float)a->beta1, (float)a->beta2, (float)(1 - a->beta1), (float)(1 - a->beta2), step_size, bc2_sqrt,
        (float)a->eps);
    LAUNCH_OK("adamw_kernel");
}
