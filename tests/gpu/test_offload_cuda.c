/* train.optimizer_offload on the GPU (trainer/optim.h, kernels/cuda/adamw_offload.cu): the fp32 master weights and
 * the AdamW moments in pinned host memory, streamed through the GPU in chunks, against the plain device AdamW.
 *  1. a tiny random qwen2 twice (the same seed), one placed plainly and one with its master weights on the host;
 *     4 SFT-like steps with clipping that bites: the norms, the weights (max |dw|), the bf16 copy (logprobs of a
 *     forward) and the moments (the saved optimizer files' tensors) agree, at three chunk sizes (the default, one
 *     that cuts params in pieces, one of a few floats: thousands of chunks through both staging buffers);
 *  2. the files: the offloaded optimizer's save is loaded into a fresh offloaded optimizer and into a plain one;
 *     one more step on each equals the plain run's step (resume with or without offload);
 *  3. the placement: no fp32 master weights on the device, and a host weight change reaches the bf16 copy through
 *     cpt_model_sync_to_device.
 * Needs a GPU; run as the other tests/gpu programs (tests/gpu/device_all.sh stage offload). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/safetensors.h"
#include "model/cuda_model.h"
#include "model/model.h"
#include "tests/check.h"
#include "tests/gpu/gpu_check.h"
#include "tests/gpu/tiny_qwen2.h"
#include "trainer/optim.h"

#define LR 1e-3
#define CLIP 0.05

static cpt_model *tiny(int host_master) {
    cpt_model_config c;
    tiny_qwen2_config(&c);
    cpt_model *m = cpt_model_new_random(&c, 7, &err);
    OK(m == NULL);
    OK(cpt_model_set_host_master(m, host_master, &err));
    OK(cpt_model_use_cuda(m, 0, &err));
    return m;
}

static void batch_of(int step, int32_t *tok, int32_t *tgt, int32_t *start, cpt_batch *b) {
    for (int i = 0; i < 10; i++) tok[i] = (i * 5 + 3 + step * 11) % 64;
    for (int i = 0; i < 10; i++) tgt[i] = i < 9 ? tok[i + 1] : -1;
    start[0] = 0, start[1] = 10;
    *b = (cpt_batch){.n_tokens = 10, .n_seqs = 1, .tokens = tok, .seq_start = start, .targets = tgt};
}

/* One backward of a fixed 10-token sequence whose tokens depend on the step. */
static void backward(cpt_model *m, int step) {
    int32_t tok[10], tgt[10], start[2];
    float d[10], lp[10];
    cpt_batch b;
    batch_of(step, tok, tgt, start, &b);
    for (int i = 0; i < 10; i++) d[i] = i < 9 ? -1.0f / 9 : 0.0f;
    cpt_forward_out out = {.logprobs = lp};
    cpt_model_zero_grad(m);
    OK(cpt_model_forward(m, &b, &out, 1, &err));
    OK(cpt_model_backward(m, &b, d, NULL, NULL, &err));
}

/* Largest |difference| of the logprobs of one forward: the bf16 weights the products read. */
static double forward_diff(cpt_model *a, cpt_model *b) {
    int32_t tok[10], tgt[10], start[2];
    float la[10], lb[10];
    cpt_batch bt;
    batch_of(99, tok, tgt, start, &bt);
    cpt_forward_out oa = {.logprobs = la}, ob = {.logprobs = lb};
    OK(cpt_model_forward(a, &bt, &oa, 0, &err));
    OK(cpt_model_forward(b, &bt, &ob, 0, &err));
    double d = 0;
    for (int i = 0; i < 9; i++) d = fmax(d, fabs((double)la[i] - lb[i]));
    return d;
}

static double weight_diff(cpt_model *a, cpt_model *b) {
    OK(cpt_model_sync_to_host(a, &err));
    OK(cpt_model_sync_to_host(b, &err));
    double d = 0;
    for (size_t i = 0; i < cpt_model_numel(a); i++) d = fmax(d, fabs(cpt_model_data(a)[i] - cpt_model_data(b)[i]));
    return d;
}

/* Largest |difference| over every tensor of two optimizer files (same names, shapes and step). */
static double file_diff(const char *pa, const char *pb) {
    cpt_st_file *a = cpt_st_open(pa, &err), *b = NULL;
    OK(a == NULL);
    OK((b = cpt_st_open(pb, &err)) == NULL);
    CHECK_EQ_INT((long long)cpt_st_count(a), (long long)cpt_st_count(b));
    CHECK(!strcmp(cpt_st_metadata(a, "step"), cpt_st_metadata(b, "step")));
    double d = 0;
    for (size_t i = 0; i < cpt_st_count(a); i++) {
        const cpt_st_tensor *ta = cpt_st_at(a, i), *tb = cpt_st_find(b, ta->name);
        CHECK_MSG(tb && tb->nbytes == ta->nbytes, "%s: tensor %s missing or of another size in %s", pa, ta->name, pb);
        if (!tb || tb->nbytes != ta->nbytes) continue;
        const float *x = ta->data, *y = tb->data;
        for (size_t j = 0; j < ta->nbytes / sizeof(float); j++) d = fmax(d, fabs((double)x[j] - y[j]));
    }
    cpt_st_close(a);
    cpt_st_close(b);
    return d;
}

static void run(size_t chunk) {
    cpt_adamw_hparams hp = {.beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.1};
    cpt_model *ref = tiny(0), *off = tiny(1);
    size_t n, n2;
    cpt_param **pr = cpt_model_param_list(ref, &n, &err), **po = cpt_model_param_list(off, &n2, &err);
    OK(pr == NULL || po == NULL);
    cpt_adamw *a = cpt_adamw_new(pr, n, &hp, &err), *b = cpt_adamw_new(po, n2, &hp, &err);
    OK(a == NULL || b == NULL);
    CHECK_MSG(!cpt_adamw_offloaded(a) && cpt_adamw_offloaded(b), "offloaded: plain %d, host master %d",
              cpt_adamw_offloaded(a), cpt_adamw_offloaded(b));
    OK(cpt_adamw_set_offload_chunk(b, chunk, &err));
    cpt_cuda_param_view v;
    OK(cpt_model_cuda_param(off, po[0], &v));
    CHECK_MSG(v.data == NULL && v.grad && v.data_bf16, "the offloaded model still has device master weights");
    CHECK(weight_diff(ref, off) == 0);

    double n1 = 0, nb = 0, ms = 0;
    for (int s = 0; s < 4; s++) {
        backward(ref, s);
        backward(off, s);
        n1 = cpt_clip_grad_norm(pr, n, CLIP);
        nb = cpt_clip_grad_norm(po, n, CLIP);
        CHECK_MSG(fabs(n1 - nb) <= 1e-6 * n1, "step %d: norm %.9g vs %.9g", s, n1, nb);
        cpt_adamw_step(a, LR);
        OK(cpt_model_wait(ref, &err));
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        cpt_adamw_step(b, LR);
        OK(cpt_model_wait(off, &err));
        clock_gettime(CLOCK_MONOTONIC, &t1);
        ms += (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6;
    }
    CHECK_MSG(n1 > CLIP, "the clip never bit (norm %g): the check is weaker than meant", n1);
    double dw = weight_diff(ref, off), dl = forward_diff(ref, off);
    CHECK_MSG(dw < 1e-6, "chunk %zu: offloaded AdamW differs from the device one by %g", chunk, dw);
    CHECK_MSG(dl < 1e-4, "chunk %zu: the bf16 weights differ (logprobs by %g)", chunk, dl);

    char dir[] = "/tmp/cpt-offload-gpu-XXXXXX", fa[256], fb[256];
    OK(mkdtemp(dir) == NULL);
    snprintf(fa, sizeof fa, "%s/plain.safetensors", dir);
    snprintf(fb, sizeof fb, "%s/offload.safetensors", dir);
    OK(cpt_adamw_save(a, fa, &err));
    OK(cpt_adamw_save(b, fb, &err));
    double dm = file_diff(fa, fb);
    CHECK_MSG(dm < 1e-6, "chunk %zu: the moments differ by %g", chunk, dm);
    printf("chunk %zu floats (%zu staging bytes): 4 steps, max |dw| %g (%s), logprobs %g, moments %g, last norm %.7g;"
           " offloaded steps %.2f ms in all\n",
           chunk, 2 * 3 * chunk * sizeof(float), dw, dw == 0 && dm == 0 ? "bitwise" : "within rounding", dl, dm, n1,
           ms);

    /* resume: the offloaded file into a fresh offloaded optimizer and into a plain one (on a third model) */
    cpt_model *pl = tiny(0);
    size_t n3;
    cpt_param **pp = cpt_model_param_list(pl, &n3, &err);
    OK(pp == NULL);
    memcpy(cpt_model_data(pl), cpt_model_data(off), cpt_model_numel(off) * sizeof(float));
    OK(cpt_model_sync_to_device(pl, &err));
    cpt_adamw *b2 = cpt_adamw_new(po, n, &hp, &err), *c = cpt_adamw_new(pp, n, &hp, &err);
    OK(b2 == NULL || c == NULL);
    OK(cpt_adamw_set_offload_chunk(b2, chunk, &err));
    OK(cpt_adamw_load(b2, fb, &err));
    OK(cpt_adamw_load(c, fb, &err));
    CHECK_EQ_INT(b2->step, 4);
    backward(ref, 4);
    backward(off, 4);
    backward(pl, 4);
    cpt_clip_grad_norm(pr, n, CLIP);
    cpt_clip_grad_norm(po, n, CLIP);
    cpt_clip_grad_norm(pp, n, CLIP);
    cpt_adamw_step(a, LR);
    cpt_adamw_step(b2, LR);
    cpt_adamw_step(c, LR);
    double r1 = weight_diff(ref, off), r2 = weight_diff(ref, pl);
    CHECK_MSG(r1 < 1e-6, "chunk %zu: after a save and load the offloaded run differs by %g", chunk, r1);
    CHECK_MSG(r2 < 1e-6, "chunk %zu: the offloaded file resumed without offload differs by %g", chunk, r2);
    printf("chunk %zu: resumed from the offloaded file, one more step: offloaded max |dw| %g, plain %g\n", chunk, r1,
           r2);

    /* a host weight change (a load) reaches the offloaded model's bf16 copy */
    for (size_t i = 0; i < cpt_model_numel(off); i++) cpt_model_data(off)[i] = cpt_model_data(ref)[i] * 0.5f;
    for (size_t i = 0; i < cpt_model_numel(ref); i++) cpt_model_data(ref)[i] *= 0.5f;
    OK(cpt_model_sync_to_device(off, &err));
    OK(cpt_model_sync_to_device(ref, &err));
    double du = forward_diff(ref, off);
    CHECK_MSG(du <= 1e-6, "after sync_to_device the bf16 weights differ (logprobs by %g)", du);

    unlink(fa);
    unlink(fb);
    rmdir(dir);
    cpt_adamw_free(c);
    cpt_adamw_free(b2);
    cpt_adamw_free(b);
    cpt_adamw_free(a);
    free(pp);
    free(pr);
    free(po);
    cpt_model_free(pl);
    cpt_model_free(ref);
    cpt_model_free(off);
}

int main(void) {
    run(CPT_ADAMW_OFFLOAD_CHUNK);
    run(4099);
    run(61);
    printf("%d checks, %d failed\n", check_count, check_failures);
    return check_failures ? 1 : 0;
}
