#include "trainer/val_gpu.h"

#include <stdlib.h>

#ifdef CPT_HAVE_CUDA
#include "model/cuda_model.h"
#endif

struct cpt_val_gpu {
    cpt_model *policy, *infer;
};

#ifdef CPT_HAVE_CUDA
/* The policy's bf16 device weights, all parameters back to back in cpt_model_param order (weights/weights_tx.c
 * publishes the same buffer). */
static const void *policy_bf16(cpt_model *policy, cpt_err *err) {
    cpt_cuda_param_view v;
    cpt_param *p0 = cpt_model_param(policy, 0);
    if (!p0 || cpt_model_cuda_param(policy, p0, &v)) {
        cpt_errf(err, "validation.device = \"cuda\": the policy is not on the GPU");
        return NULL;
    }
    return (const uint16_t *)v.data_bf16 - (p0->data - cpt_model_data(policy));
}
#endif

cpt_val_gpu *cpt_val_gpu_new(cpt_model *policy, int device, cpt_err *err) {
#ifdef CPT_HAVE_CUDA
    if (!policy_bf16(policy, err)) return NULL;
    const cpt_model_config *c = cpt_model_cfg(policy);
    if (cpt_model_cuda_shape_check(c, 1, err)) return NULL;
    cpt_val_gpu *v = calloc(1, sizeof *v);
    if (!v) {
        cpt_errf(err, "out of memory");
        return NULL;
    }
    v->policy = policy;
    v->infer = cpt_model_new_zeros(c, err);
    if (!v->infer || cpt_model_use_cuda_infer(v->infer, device, err)) {
        cpt_val_gpu_free(v);
        return NULL;
    }
    return v;
#else
    (void)policy, (void)device;
    cpt_errf(err, "validation.device = \"cuda\": this build has no CUDA");
    return NULL;
#endif
}

cpt_model *cpt_val_gpu_refresh(cpt_val_gpu *v, cpt_err *err) {
#ifdef CPT_HAVE_CUDA
    const void *wb = policy_bf16(v->policy, err);
    if (!wb || cpt_model_load_weights_bf16_device(v->infer, wb, err)) return NULL;
    return v->infer;
#else
    (void)v;
    cpt_errf(err, "validation.device = \"cuda\": this build has no CUDA");
    return NULL;
#endif
}

void cpt_val_gpu_free(cpt_val_gpu *v) {
    if (!v) return;
    cpt_model_free(v->infer);
    free(v);
}
