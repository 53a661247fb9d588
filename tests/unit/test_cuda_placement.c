/* cpt_model_use_cuda where no GPU can be used (a build without CUDA, or no device, as on CI): a clear error, and
 * the model stays a working CPU model (the same logprobs as before the attempt). On a machine with a GPU the
 * placement itself is tested by tests/gpu/test_cuda_model.c; here only the first part runs there. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "model/model.h"
#include "tests/tiny_model.h"

int main(void) {
    cpt_model_config c = tiny_model_config(64, 1);
    c.qkv_bias = 0;
    c.max_position_embeddings = 64;
    cpt_err err;
    cpt_model *m = cpt_model_new_random(&c, 5, &err);
    CHECK(m != NULL);
    if (!m) return check_summary("test_cuda_placement");
    int32_t tok[6] = {1, 2, 3, 4, 5, 6}, tg[6] = {2, 3, 4, 5, 6, -1}, ss[2] = {0, 6};
    cpt_batch b = {6, 1, tok, ss, tg};
    float lp0[6], lp1[6];
    cpt_forward_out o0 = {lp0, NULL, NULL, NULL}, o1 = {lp1, NULL, NULL, NULL};
    CHECK(cpt_model_forward(m, &b, &o0, 0, &err) == 0);
    CHECK(!cpt_model_on_cuda(m));
    CHECK(cpt_model_sync_to_host(m, &err) == 0); /* a no-op on the CPU */
    CHECK(cpt_model_wait(m, &err) == 0);
    if (access("/dev/nvidia0", F_OK) != 0) {
        cpt_err_clear(&err);
        int rc = cpt_model_use_cuda(m, 0, &err);
        CHECK_MSG(rc == -1, "cpt_model_use_cuda succeeded without a GPU");
        CHECK_MSG(strlen(err.msg) > 0, "no error message");
        printf("cpt_model_use_cuda without a GPU: %s\n", err.msg);
        CHECK(!cpt_model_on_cuda(m));
        CHECK(cpt_model_forward(m, &b, &o1, 0, &err) == 0);
        CHECK(memcmp(lp0, lp1, sizeof lp0) == 0);
    }
    cpt_model_free(m);
    return check_summary("test_cuda_placement");
}
