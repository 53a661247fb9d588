/* ZeRO-1 on the GPU (trainer/zero.h), one rank: the sharded step on the device against the plain AdamW path.
 *  1. no library (one rank copies instead of the collectives): 3 SFT-like steps of a tiny random qwen2 with
 *     clipping that bites, ZeRO against cpt_clip_grad_norm + cpt_adamw_step on an identical model: max |dw|;
 *  2. the same with a real one-rank NCCL communicator (force_nccl): ncclReduceScatter and ncclAllGather run;
 *  3. the moments' bytes, and a save and load of the shard (bitwise the same moments after a round trip).
 * Needs a GPU (and libnccl.so.2 for part 2); run as the other tests/gpu programs are (docs/data-parallel.md). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/model.h"
#include "tests/check.h"
#include "tests/gpu/gpu_check.h"
#include "tests/gpu/tiny_qwen2.h"
#include "trainer/dp.h"
#include "trainer/optim.h"
#include "trainer/zero.h"

static cpt_model *tiny(void) {
    cpt_model_config c;
    tiny_qwen2_config(&c);
    cpt_model *m = cpt_model_new_random(&c, 7, &err);
    OK(m == NULL);
    OK(cpt_model_use_cuda(m, 0, &err));
    return m;
}

/* One backward of a fixed 10-token sequence whose tokens depend on the step. */
static void backward(cpt_model *m, int step) {
    int32_t tok[10], tgt[10], start[2] = {0, 10};
    float d[10], lp[10];
    for (int i = 0; i < 10; i++) tok[i] = (i * 5 + 3 + step * 11) % 64, d[i] = i < 9 ? -1.0f / 9 : 0.0f;
    for (int i = 0; i < 10; i++) tgt[i] = i < 9 ? tok[i + 1] : -1;
    cpt_batch b = {.n_tokens = 10, .n_seqs = 1, .tokens = tok, .seq_start = start, .targets = tgt};
    cpt_forward_out out = {.logprobs = lp};
    cpt_model_zero_grad(m);
    OK(cpt_model_forward(m, &b, &out, 1, &err));
    OK(cpt_model_backward(m, &b, d, NULL, NULL, &err));
}

static double max_diff(cpt_model *a, cpt_model *b) {
    OK(cpt_model_sync_to_host(a, &err));
    OK(cpt_model_sync_to_host(b, &err));
    double d = 0;
    for (size_t i = 0; i < cpt_model_numel(a); i++) d = fmax(d, fabs(cpt_model_data(a)[i] - cpt_model_data(b)[i]));
    return d;
}

static void run(const char *what, int force_nccl) {
    cpt_dp_opts o = {.bootstrap = "file", .force_nccl = force_nccl, .timeout_s = 60};
    cpt_dp *dp = cpt_dp_new(&o, &err);
    OK(dp == NULL);
    cpt_model *ref = tiny(), *zm = tiny();
    if (force_nccl) OK(cpt_dp_attach_model(dp, zm, &err));
    CHECK_EQ_INT(cpt_dp_backend(dp), force_nccl ? CPT_DP_BACKEND_NCCL : CPT_DP_BACKEND_NONE);
    cpt_adamw_hparams hp = {.beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.1};
    size_t n;
    cpt_param **ps = cpt_model_param_list(ref, &n, &err);
    OK(ps == NULL);
    cpt_adamw *opt = cpt_adamw_new(ps, n, &hp, &err);
    OK(opt == NULL);
    cpt_zero *z = cpt_zero_new(zm, dp, &hp, &err);
    OK(z == NULL);
    CHECK_MSG(z->cuda_ctx != NULL, "the ZeRO state of a GPU model is not on the device");
    double start = max_diff(ref, zm), n1 = 0, n2 = 0;
    CHECK(start == 0);
    for (int s = 0; s < 3; s++) {
        backward(ref, s);
        backward(zm, s);
        n1 = cpt_clip_grad_norm(ps, n, 0.05);
        cpt_adamw_step(opt, 1e-3);
        OK(cpt_zero_step(z, 1e-3, 0.05, &n2, &err));
        CHECK_MSG(fabs(n1 - n2) <= 1e-6 * n1, "step %d: norm %.9g vs %.9g", s, n1, n2);
    }
    double d = max_diff(ref, zm), moved = 0;
    for (size_t i = 0; i < cpt_model_numel(ref); i++) moved = fmax(moved, fabs(cpt_model_data(ref)[i]));
    CHECK_MSG(d < 1e-6, "%s: ZeRO differs from AdamW by %g", what, d);
    CHECK_MSG(n1 > 0.05, "the clip never bit (norm %g): the check is weaker than meant", n1);
    printf("%s: 3 steps, ZeRO-1 vs AdamW max |dw| %g (last norm %.7g vs %.7g), moments %zu bytes\n", what, d, n1, n2,
           cpt_zero_state_bytes(z));

    /* save and load the shard: the same moments, and the next step still matches */
    char dir[] = "/tmp/cpt-zero-gpu-XXXXXX", name[96], path[256];
    OK(mkdtemp(dir) == NULL);
    cpt_zero_shard_name(name, sizeof name, 0, 1);
    snprintf(path, sizeof path, "%s/%s", dir, name);
    OK(cpt_zero_save(z, path, &err));
    cpt_zero *z2 = cpt_zero_new(zm, dp, &hp, &err);
    OK(z2 == NULL);
    OK(cpt_zero_load(z2, dir, NULL, &err));
    CHECK_EQ_INT(z2->step, 3);
    backward(ref, 3);
    backward(zm, 3);
    cpt_clip_grad_norm(ps, n, 0.05);
    cpt_adamw_step(opt, 1e-3);
    OK(cpt_zero_step(z2, 1e-3, 0.05, &n2, &err));
    double d2 = max_diff(ref, zm);
    CHECK_MSG(d2 < 1e-6, "%s: after a save and load ZeRO differs by %g", what, d2);
    printf("%s: after save + load + 1 step max |dw| %g\n", what, d2);
    unlink(path);
    rmdir(dir);
    cpt_zero_free(z2);
    cpt_zero_free(z);
    cpt_adamw_free(opt);
    free(ps);
    cpt_model_free(ref);
    cpt_model_free(zm);
    cpt_dp_free(dp);
}

int main(void) {
    unsetenv("CPT_RANK");
    unsetenv("CPT_WORLD_SIZE");
    unsetenv("PMIX_RANK");
    unsetenv("PMIX_NAMESPACE");
    run("one rank, no library", 0);
    run("one rank, NCCL", 1);
    printf("%d checks, %d failed\n", check_count, check_failures);
    return check_failures ? 1 : 0;
}
