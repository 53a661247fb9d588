/* AdamW + warmup/cosine schedule + global-norm clipping + gradient accumulation against torch.optim.AdamW: 10 steps
 * of a tiny Qwen2 model on fixed batches (tests/fixtures/make_adamw_fixture.py). Each step's loss must be within
 * 1e-4 relative of torch's, the pre-clip grad norm within 1e-3, and a few weights after the last step within
 * 1e-3 relative L2. Torch runs each step on a batch of 4 sequences; here each step is 2 packed micro-batches of 2
 * sequences whose gradients add up, so the accumulation must reproduce the one-big-batch result. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/safetensors.h"
#include "tests/check.h"
#include "trainer/optim.h"

#define FIX "tests/fixtures/adamw"

static double meta_f(const cpt_st_file *f, const char *key) {
    const char *v = cpt_st_metadata(f, key);
    CHECK_MSG(v != NULL, "fixture metadata '%s' missing", key);
    return v ? atof(v) : 0;
}

static int read_vec(const cpt_st_file *f, const char *name, float *out, size_t n) {
    const cpt_st_tensor *t = cpt_st_find(f, name);
    cpt_err err;
    CHECK_MSG(t != NULL, "fixture tensor %s missing", name);
    if (!t || cpt_st_read_f32(t, out, n, &err)) return -1;
    return 0;
}

int main(void) {
    cpt_err err;
    cpt_st_file *fx = cpt_st_open(FIX "/fixture.safetensors", &err);
    CHECK_MSG(fx != NULL, "%s (make it with tests/fixtures/make_adamw_fixture.py " FIX " on the device)", err.msg);
    cpt_model *m = cpt_model_load(FIX "/model", &err);
    CHECK_MSG(m != NULL, "loading " FIX "/model: %s", err.msg);
    if (!fx || !m) {
        cpt_st_close(fx);
        cpt_model_free(m);
        return check_summary("test_optim_torch");
    }
    const cpt_st_tensor *ids_t = cpt_st_find(fx, "input_ids");
    CHECK(ids_t && ids_t->ndim == 3 && ids_t->dtype == CPT_DT_I32);
    const int steps = (int)ids_t->shape[0], B = (int)ids_t->shape[1], T = (int)ids_t->shape[2];
    CHECK_EQ_INT(B % 2, 0);
    const int32_t *ids = ids_t->data;
    float loss_ref[64], norm_ref[64], lr_ref[64];
    CHECK(steps <= 64);
    read_vec(fx, "loss", loss_ref, (size_t)steps);
    read_vec(fx, "grad_norm", norm_ref, (size_t)steps);
    read_vec(fx, "lr", lr_ref, (size_t)steps);

    cpt_lr_schedule sched = {.kind = CPT_LR_COSINE, .base_lr = meta_f(fx, "lr"),
                             .warmup_steps = (int64_t)meta_f(fx, "warmup_steps"),
                             .total_steps = (int64_t)meta_f(fx, "total_steps"),
                             .min_lr_ratio = meta_f(fx, "min_lr_ratio")};
    cpt_adamw_hparams hp = {.beta1 = meta_f(fx, "beta1"), .beta2 = meta_f(fx, "beta2"), .eps = meta_f(fx, "eps"),
                            .weight_decay = meta_f(fx, "weight_decay")};
    const double clip = meta_f(fx, "grad_clip");
    size_t np;
    cpt_param **ps = cpt_model_param_list(m, &np, &err);
    cpt_adamw *opt = cpt_adamw_new(ps, np, &hp, &err);
    /* the fixture decays everything but norms and biases: the model must flag exactly those */
    int flags_ok = 1;
    for (size_t i = 0; i < np; i++) {
        int want = strstr(ps[i]->name, "norm") != NULL || strstr(ps[i]->name, ".bias") != NULL;
        if (ps[i]->no_decay != want) {
            flags_ok = 0;
            fprintf(stderr, "no_decay of %s is %d\n", ps[i]->name, ps[i]->no_decay);
        }
    }
    CHECK(flags_ok);

    const int half = B / 2, nt = half * T, n_loss = B * (T - 1);
    int32_t *toks = malloc((size_t)nt * 4), *tg = malloc((size_t)nt * 4), *ss = malloc((size_t)(half + 1) * 4);
    float *lp = malloc((size_t)nt * 4), *dlp = malloc((size_t)nt * 4);
    for (int s = 0; s <= half; s++) ss[s] = s * T;
    for (int step = 0; step < steps; step++) {
        cpt_model_zero_grad(m);
        double loss = 0;
        for (int mb = 0; mb < 2; mb++) {
            const int32_t *src = ids + ((size_t)step * B + (size_t)mb * half) * T;
            for (int i = 0; i < nt; i++) {
                toks[i] = src[i];
                tg[i] = (i % T == T - 1) ? -1 : src[i + 1];
                dlp[i] = tg[i] >= 0 ? -1.0f / (float)n_loss : 0.0f;
            }
            cpt_batch b = {.n_tokens = nt, .n_seqs = half, .tokens = toks, .seq_start = ss, .targets = tg};
            cpt_forward_out fo = {.logprobs = lp};
            CHECK_EQ_INT(cpt_model_forward(m, &b, &fo, 1, &err), 0);
            for (int i = 0; i < nt; i++)
                if (tg[i] >= 0) loss -= lp[i];
            CHECK_EQ_INT(cpt_model_backward(m, &b, dlp, NULL, NULL, &err), 0);
        }
        loss /= n_loss;
        double norm = cpt_clip_grad_norm(ps, np, clip);
        double lr = cpt_lr_at(&sched, step);
        cpt_adamw_step(opt, lr);
        printf("step %d: loss %.6f (torch %.6f)  grad_norm %.6f (torch %.6f)  lr %.6g (torch %.6g)\n", step, loss,
               loss_ref[step], norm, norm_ref[step], lr, lr_ref[step]);
        CHECK_MSG(fabs(loss - loss_ref[step]) <= 1e-4 * fabs(loss_ref[step]), "step %d loss %.7f vs torch %.7f", step,
                  loss, loss_ref[step]);
        CHECK_MSG(fabs(norm - norm_ref[step]) <= 1e-3 * fabs(norm_ref[step]), "step %d grad norm %.6f vs %.6f", step,
                  norm, norm_ref[step]);
        CHECK_NEAR(lr, lr_ref[step], 1e-6);
    }
    /* final weights */
    for (size_t i = 0; i < cpt_st_count(fx); i++) {
        const cpt_st_tensor *t = cpt_st_at(fx, i);
        if (strncmp(t->name, "final.", 6)) continue;
        cpt_param *p = cpt_model_find_param(m, t->name + 6);
        CHECK_MSG(p != NULL, "param %s missing", t->name + 6);
        if (!p) continue;
        float *ref = malloc(p->numel * sizeof *ref);
        CHECK_EQ_INT(cpt_st_read_f32(t, ref, p->numel, &err), 0);
        double num = 0, den = 0;
        for (size_t j = 0; j < p->numel; j++) {
            num += ((double)p->data[j] - ref[j]) * ((double)p->data[j] - ref[j]);
            den += (double)ref[j] * ref[j];
        }
        double rel = sqrt(num / (den > 0 ? den : 1));
        printf("final %s: rel L2 %.3g\n", p->name, rel);
        CHECK_MSG(rel <= 1e-3, "final %s rel L2 %.3g", p->name, rel);
        free(ref);
    }
    free(toks);
    free(tg);
    free(ss);
    free(lp);
    free(dlp);
    free(ps);
    cpt_adamw_free(opt);
    cpt_model_free(m);
    cpt_st_close(fx);
    return check_summary("test_optim_torch");
}
