/* Which model shapes the CUDA kernels take. Placement (cpt_model_use_cuda), the GPU generation engine and preflight
 * refuse the others here with a message naming what is supported, so no user's config reaches a kernel's operand
 * check (which aborts: a misused op is a program error there). Plain C, in every build: preflight runs on machines
 * without a GPU. */
#include "kernels/cuda/cuda_ops.h"
#include "model/model.h"

int cpt_model_cuda_shape_check(const cpt_model_config *c, int engine, cpt_err *err) {
    if (!cpt_cuda_head_dim_ok(c->head_dim))
        return cpt_errf(err, "head_dim %d is not supported on the GPU (supported: " CPT_CUDA_HEAD_DIMS_TEXT ")",
                        c->head_dim);
    if (!engine) return 0;
    if (c->num_kv_heads < 1 || c->num_heads % c->num_kv_heads || c->num_heads / c->num_kv_heads > 16)
        return cpt_errf(err, "%d query heads over %d kv heads is not supported by the GPU generation engine (at most "
                             "16 query heads per kv head)", c->num_heads, c->num_kv_heads);
    if (c->hidden_size % 8)
        return cpt_errf(err, "hidden_size %d is not supported by the GPU generation engine (a multiple of 8)",
                        c->hidden_size);
    return 0;
}
