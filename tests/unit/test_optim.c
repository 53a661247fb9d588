/* AdamW, clipping and optimizer-state save/load, on hand-made parameters (no model needed). The reference update
 * is torch.optim.AdamW's algorithm written out in double precision here. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/fs.h"
#include "tests/check.h"
#include "trainer/optim.h"

static float wa[6] = {0.5f, -1.0f, 2.0f, 0.0f, 0.25f, -0.75f}, ga[6];
static float wb[3] = {1.0f, 1.0f, 1.0f}, gb[3];

static void set_grads(int step) {
    for (int i = 0; i < 6; i++) ga[i] = (float)(0.1 * (i - 2.5) * (step + 1) + 0.05 * step);
    for (int i = 0; i < 3; i++) gb[i] = (float)(0.3 - 0.2 * i + 0.1 * step);
}

int main(void) {
    cpt_param pa = {.name = "a.weight", .data = wa, .grad = ga, .numel = 6, .ndim = 2, .shape = {2, 3}};
    cpt_param pb = {.name = "a.norm.weight", .data = wb, .grad = gb, .numel = 3, .ndim = 1, .shape = {3}, .no_decay = 1};
    cpt_param *ps[2] = {&pa, &pb};
    cpt_adamw_hparams hp = {.beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1};
    cpt_err err;
    cpt_adamw *o = cpt_adamw_new(ps, 2, &hp, &err);
    CHECK(o != NULL);

    /* reference in double */
    double rw[9], rm[9] = {0}, rv[9] = {0};
    for (int i = 0; i < 6; i++) rw[i] = wa[i];
    for (int i = 0; i < 3; i++) rw[6 + i] = wb[i];
    const double lrs[4] = {1e-2, 5e-3, 2e-2, 1e-3};
    for (int t = 0; t < 4; t++) {
        set_grads(t);
        cpt_adamw_step(o, lrs[t]);
        double bc1 = 1 - pow(0.9, t + 1), bc2 = 1 - pow(0.95, t + 1);
        for (int i = 0; i < 9; i++) {
            double g = i < 6 ? ga[i] : gb[i - 6];
            if (i < 6) rw[i] *= 1 - lrs[t] * 0.1; /* decoupled decay, not on the norm */
            rm[i] = 0.9 * rm[i] + 0.1 * g;
            rv[i] = 0.95 * rv[i] + 0.05 * g * g;
            rw[i] -= lrs[t] / bc1 * rm[i] / (sqrt(rv[i]) / sqrt(bc2) + 1e-8);
        }
    }
    CHECK_EQ_INT(o->step, 4);
    for (int i = 0; i < 6; i++) CHECK_NEAR(wa[i], rw[i], 1e-6);
    for (int i = 0; i < 3; i++) CHECK_NEAR(wb[i], rw[6 + i], 1e-6);
    /* the first update of a fresh optimizer moves each weight by lr * g / (|g| + eps) (bias correction) */
    {
        float w1[1] = {3.0f}, g1[1] = {-0.02f};
        cpt_param p1 = {.name = "x", .data = w1, .grad = g1, .numel = 1, .ndim = 1, .shape = {1}, .no_decay = 1};
        cpt_param *pp = &p1;
        cpt_adamw *o1 = cpt_adamw_new(&pp, 1, &hp, &err);
        cpt_adamw_step(o1, 0.5);
        CHECK_NEAR(w1[0], 3.5, 1e-6);
        cpt_adamw_free(o1);
    }

    /* clipping: global norm over both params, torch's 1e-6 in the coefficient */
    for (int i = 0; i < 6; i++) ga[i] = 0;
    ga[0] = 3;
    ga[1] = 4;
    gb[0] = 12;
    gb[1] = gb[2] = 0;
    CHECK_NEAR(cpt_grad_global_norm(ps, 2), 13.0, 1e-12);
    double pre = cpt_clip_grad_norm(ps, 2, 6.5);
    CHECK_NEAR(pre, 13.0, 1e-12);
    double coef = 6.5 / (13.0 + 1e-6);
    CHECK_NEAR(ga[0], 3 * coef, 1e-6);
    CHECK_NEAR(gb[0], 12 * coef, 1e-6);
    CHECK_NEAR(cpt_grad_global_norm(ps, 2), 6.5, 1e-5);
    /* below the limit and with clipping off: grads untouched */
    float before = ga[1];
    CHECK_NEAR(cpt_clip_grad_norm(ps, 2, 100.0), 6.5, 1e-5);
    CHECK(ga[1] == before);
    CHECK_NEAR(cpt_clip_grad_norm(ps, 2, 0.0), 6.5, 1e-5);
    CHECK(ga[1] == before);

    /* save / load: bit-exact moments and step */
    char dir[] = "/tmp/cpt-test-optim-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char path[256], bad[256];
    snprintf(path, sizeof path, "%s/opt.safetensors", dir);
    CHECK_EQ_INT(cpt_adamw_save(o, path, &err), 0);
    cpt_adamw *o2 = cpt_adamw_new(ps, 2, &hp, &err);
    CHECK_EQ_INT(cpt_adamw_load(o2, path, &err), 0);
    CHECK_EQ_INT(o2->step, 4);
    CHECK(memcmp(o2->m[0], o->m[0], 6 * sizeof(float)) == 0);
    CHECK(memcmp(o2->v[1], o->v[1], 3 * sizeof(float)) == 0);
    /* continuing from the loaded state gives the same weights bit for bit */
    float wa_copy[6];
    memcpy(wa_copy, wa, sizeof wa);
    set_grads(7);
    cpt_adamw_step(o, 1e-2);
    float after_o[6];
    memcpy(after_o, wa, sizeof wa);
    memcpy(wa, wa_copy, sizeof wa);
    cpt_adamw_step(o2, 1e-2);
    CHECK(memcmp(after_o, wa, sizeof wa) == 0);

    /* a state for another model shape is refused and leaves the optimizer untouched */
    float wc[4] = {0}, gc[4] = {0};
    cpt_param pc = {.name = "a.weight", .data = wc, .grad = gc, .numel = 4, .ndim = 2, .shape = {2, 2}};
    cpt_param pd = {.name = "a.norm.weight", .data = wb, .grad = gb, .numel = 3, .ndim = 1, .shape = {3}, .no_decay = 1};
    cpt_param *ps2[2] = {&pc, &pd};
    cpt_adamw *o3 = cpt_adamw_new(ps2, 2, &hp, &err);
    CHECK_EQ_INT(cpt_adamw_load(o3, path, &err), -1);
    CHECK(strstr(err.msg, "exp_avg.a.weight") != NULL && strstr(err.msg, "shape") != NULL);
    CHECK_EQ_INT(o3->step, 0);
    CHECK(o3->m[1][0] == 0.0f);
    /* a truncated file is an error, not a crash */
    size_t len;
    char *bytes = cpt_read_file(path, &len, &err);
    snprintf(bad, sizeof bad, "%s/bad.safetensors", dir);
    CHECK(bytes && cpt_write_file_atomic(bad, bytes, len / 2, &err) == 0);
    CHECK_EQ_INT(cpt_adamw_load(o2, bad, &err), -1);
    free(bytes);
    /* bad hyperparameters */
    cpt_adamw_hparams hb = hp;
    hb.beta2 = 1.0;
    CHECK(cpt_adamw_new(ps, 2, &hb, &err) == NULL);
    CHECK(strstr(err.msg, "beta2") != NULL);

    cpt_adamw_free(o);
    cpt_adamw_free(o2);
    cpt_adamw_free(o3);
    cpt_remove_tree(dir, &err);
    return check_summary("test_optim");
}
