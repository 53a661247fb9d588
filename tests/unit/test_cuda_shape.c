/* The model shapes the GPU takes (cpt_model_cuda_shape_check), checked without a GPU: exactly the head sizes the
 * CUDA attention kernels are built for pass, the others are refused with a message naming the supported ones, and
 * both placements (cpt_model_use_cuda for training, cpt_model_use_cuda_infer for generation) refuse such a model the
 * same way in every build, leaving the CPU model working. tests/gpu/test_cuda_model.c runs the supported sizes on a
 * GPU. */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "model/model.h"
#include "tests/tiny_model.h"

static cpt_model_config shape(int heads, int kv, int head_dim) {
    cpt_model_config c = tiny_model_config(64, 1);
    c.num_heads = heads;
    c.num_kv_heads = kv;
    c.head_dim = head_dim;
    c.hidden_size = heads * head_dim;
    return c;
}

int main(void) {
    static const int supported[] = {8, 16, 32, 64, 80, 96, 128, 256};
    cpt_err err;
    /* every even size the CPU model takes: the trainer's and the engine's answers agree on head_dim */
    for (int d = 2; d <= 1024; d += 2) {
        int want = 0;
        for (size_t i = 0; i < sizeof supported / sizeof supported[0]; i++) want |= d == supported[i];
        cpt_model_config c = shape(4, 2, d);
        CHECK_MSG((cpt_model_cuda_shape_check(&c, 0, &err) == 0) == want, "head_dim %d: trainer says %s", d,
                  want ? "no" : "yes");
        CHECK_MSG((cpt_model_cuda_shape_check(&c, 1, &err) == 0) == want, "head_dim %d: engine says %s", d,
                  want ? "no" : "yes");
    }
    cpt_model_config c = shape(4, 2, 24);
    cpt_err_clear(&err);
    CHECK(cpt_model_cuda_shape_check(&c, 0, &err) == -1);
    CHECK_EQ_STR(err.msg, "head_dim 24 is not supported on the GPU (supported: 8, 16, 32, 64, 80, 96, 128, 256)");

    /* the engine's own limits: a group of at most 16 query heads, a hidden size of a multiple of 8 */
    c = shape(34, 2, 64);
    CHECK(cpt_model_cuda_shape_check(&c, 0, &err) == 0);
    CHECK(cpt_model_cuda_shape_check(&c, 1, &err) == -1);
    CHECK_MSG(strstr(err.msg, "34 query heads over 2 kv heads") && strstr(err.msg, "at most 16"), "%s", err.msg);
    c = shape(32, 2, 64);
    CHECK(cpt_model_cuda_shape_check(&c, 1, &err) == 0);
    c.hidden_size = 2052;
    CHECK(cpt_model_cuda_shape_check(&c, 0, &err) == 0);
    CHECK(cpt_model_cuda_shape_check(&c, 1, &err) == -1);
    CHECK_MSG(strstr(err.msg, "hidden_size 2052") != NULL, "%s", err.msg);

    /* a model the CPU runs (head_dim 24) is refused at placement and by the engine, GPU or not */
    c = shape(4, 2, 24);
    cpt_model *m = cpt_model_new_random(&c, 7, &err);
    CHECK_MSG(m != NULL, "%s", err.msg);
    if (!m) return check_summary("test_cuda_shape");
    int32_t tok[5] = {1, 2, 3, 4, 5}, tg[5] = {2, 3, 4, 5, -1}, ss[2] = {0, 5};
    cpt_batch b = {5, 1, tok, ss, tg};
    float lp0[5], lp1[5];
    cpt_forward_out o0 = {lp0, NULL, NULL, NULL}, o1 = {lp1, NULL, NULL, NULL};
    CHECK(cpt_model_forward(m, &b, &o0, 0, &err) == 0);
    cpt_err_clear(&err);
    CHECK(cpt_model_use_cuda(m, 0, &err) == -1);
    printf("placement: %s\n", err.msg);
    CHECK_MSG(strstr(err.msg, "head_dim 24 is not supported on the GPU (supported: 8, 16, 32, 64, 80, 96, 128, 256)"),
              "placement: %s", err.msg);
    CHECK(!cpt_model_on_cuda(m));
    CHECK(cpt_model_forward(m, &b, &o1, 0, &err) == 0);
    CHECK(memcmp(lp0, lp1, sizeof lp0) == 0);
    cpt_err_clear(&err);
    CHECK(cpt_model_use_cuda_infer(m, 0, &err) == -1);
    printf("inference placement: %s\n", err.msg);
    CHECK_MSG(!strcmp(err.msg, "placing the model for inference on CUDA device 0: head_dim 24 is not supported on the "
                               "GPU (supported: 8, 16, 32, 64, 80, 96, 128, 256)"),
              "inference placement: %s", err.msg);
    CHECK(cpt_model_forward(m, &b, &o1, 0, &err) == 0);
    CHECK(memcmp(lp0, lp1, sizeof lp0) == 0);
    cpt_model_free(m);
    return check_summary("test_cuda_shape");
}
