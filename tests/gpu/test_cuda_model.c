/* The whole transformer on CUDA (cpt_model_use_cuda) against the PyTorch fixtures and the CPU model.
 *
 * 1. Each fixture of tests/fixtures/model (qwen2 tied / untied, qwen3, llama3): forward + backward of mean
 *    next-token CE on the packed batch; relative L2 error of logits, logprobs, entropy, loss and every parameter
 *    gradient against the fixture (PyTorch fp32) and against the CPU model. bf16 tolerances: 2e-2 for
 *    logits / logprobs / entropy / loss, 5e-2 per gradient.
 * 2. A bigger random qwen2 (hidden 512, 4 layers, vocab 4096, head_dim 64, GQA 8/2, untied, value head) on packed
 *    sequences of up to 1000 tokens, with d_logprobs, d_entropy and d_values all given: GPU against CPU.
 * 3. Five SFT-like AdamW steps with clipping on GPU and on CPU from the same weights: the losses (printed).
 * 4. Determinism: two GPU runs of the same steps give bitwise-identical weights; and exact resume: a checkpoint
 *    (weights + AdamW state) written from the GPU, loaded into a fresh GPU model, continues bitwise like the
 *    uninterrupted run; the same optimizer file loads into a CPU optimizer with the GPU's moments.
 * Host outputs are poisoned with NaN before every GPU call that writes them. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/rng.h"
#include "core/safetensors.h"
#include "model/model.h"
#include "tests/check.h"
#include "trainer/optim.h"

static cpt_err err;

#define OK(call)                                                                    \
    do {                                                                            \
        if ((call) != 0) {                                                          \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, err.msg); \
            exit(1);                                                                \
        }                                                                           \
    } while (0)

static float *hbuf(size_t n) {
    float *p = malloc((n ? n : 1) * sizeof(float));
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    return p;
}

static float *poisoned(size_t n) {
    float *p = hbuf(n);
    for (size_t i = 0; i < n; i++) p[i] = NAN;
    return p;
}

/* relative L2 error; any NaN gives +inf */
static double rel_l2(const float *a, const float *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        if (isnan(a[i]) || isnan(b[i])) return INFINITY;
        double d = (double)a[i] - b[i];
        num += d * d;
        den += (double)b[i] * b[i];
    }
    if (den == 0) return sqrt(num) == 0 ? 0 : INFINITY;
    return sqrt(num) / sqrt(den);
}

typedef struct result {
    float *lp, *ent, *logits, *val, loss;
    float *grads; /* flat, in param order */
} result;

static void result_free(result *r) {
    free(r->lp), free(r->ent), free(r->logits), free(r->val), free(r->grads);
    memset(r, 0, sizeof *r);
}

/* Forward + backward of mean CE (d_logprob = -1 / count) plus the optional extra gradients; gradients read back
 * from the host mirror (poisoned first, so a missing sync shows). */
static void fwd_bwd(cpt_model *m, const cpt_batch *b, int want_logits, const float *d_ent, const float *d_val,
                    result *r) {
    int N = b->n_tokens, V = cpt_model_cfg(m)->vocab_size;
    int vh = cpt_model_has_value_head(m);
    r->lp = poisoned((size_t)N);
    r->ent = poisoned((size_t)N);
    r->logits = want_logits ? poisoned((size_t)N * V) : NULL;
    r->val = vh ? poisoned((size_t)N) : NULL;
    cpt_forward_out out = {r->lp, r->ent, r->logits, r->val};
    cpt_model_zero_grad(m);
    OK(cpt_model_forward(m, b, &out, 1, &err));
    double total = 0;
    int count = 0;
    for (int i = 0; i < N; i++)
        if (b->targets[i] >= 0) total -= r->lp[i], count++;
    r->loss = (float)(total / count);
    float *dlp = hbuf((size_t)N);
    for (int i = 0; i < N; i++) dlp[i] = b->targets[i] >= 0 ? -1.0f / count : 0.0f;
    OK(cpt_model_backward(m, b, dlp, d_ent, vh ? d_val : NULL, &err));
    free(dlp);
    size_t n = cpt_model_numel(m);
    if (cpt_model_on_cuda(m)) {
        float *g = cpt_model_grads(m);
        for (size_t i = 0; i < n; i++) g[i] = NAN;
        OK(cpt_model_sync_to_host(m, &err));
    }
    r->grads = hbuf(n);
    memcpy(r->grads, cpt_model_grads(m), n * sizeof(float));
}

/* ---- the table ---- */

static double worst_out, worst_grad;

static void row(const char *model, const char *tensor, size_t n, double vs_ref, double vs_cpu, double tol) {
    int ok = vs_cpu <= tol && (vs_ref < 0 || vs_ref <= tol);
    char ref[32] = "-";
    if (vs_ref >= 0) snprintf(ref, sizeof ref, "%.3e", vs_ref);
    printf("  %-13s %-52s %9zu  %-10s %.3e  %.0e %s\n", model, tensor, n, ref, vs_cpu, tol, ok ? "" : "FAIL");
    CHECK_MSG(ok, "%s %s: rel L2 vs fixture %s, vs cpu %.3e, tolerance %.0e", model, tensor, ref, vs_cpu, tol);
    double w = vs_cpu > vs_ref ? vs_cpu : vs_ref;
    if (tol > 3e-2) worst_grad = w > worst_grad ? w : worst_grad;
    else worst_out = w > worst_out ? w : worst_out;
}

static float *fixture_tensor(cpt_st_file *f, const char *name, size_t want) {
    const cpt_st_tensor *t = cpt_st_find(f, name);
    if (!t) return NULL;
    float *p = hbuf(want);
    if (cpt_st_read_f32(t, p, want, &err)) {
        fprintf(stderr, "%s: %s\n", name, err.msg);
        free(p);
        return NULL;
    }
    return p;
}

static void check_fixture(const char *name) {
    char dir[512], path[600];
    snprintf(dir, sizeof dir, "tests/fixtures/model/%s", name);
    snprintf(path, sizeof path, "%s/expected.safetensors", dir);
    cpt_st_file *f = cpt_st_open(path, &err);
    if (!f) {
        CHECK_MSG(0, "%s", err.msg);
        return;
    }
    cpt_model *cpu = cpt_model_load(dir, &err), *gpu = cpt_model_load(dir, &err);
    OK(!cpu || !gpu);
    OK(cpt_model_use_cuda(gpu, 0, &err));
    const cpt_st_tensor *pi = cpt_st_find(f, "packed_input_ids"), *pc = cpt_st_find(f, "packed_cu_seqlens");
    CHECK(pi && pc && pi->dtype == CPT_DT_I32 && pc->dtype == CPT_DT_I32);
    if (!pi || !pc) return;
    int N = (int)pi->shape[0], S = (int)pc->shape[0] - 1, V = cpt_model_cfg(cpu)->vocab_size;
    const int32_t *cu = pc->data, *ids = pi->data;
    int32_t *tg = malloc(sizeof(int32_t) * (size_t)N);
    for (int s = 0; s < S; s++)
        for (int i = cu[s]; i < cu[s + 1]; i++) tg[i] = i + 1 < cu[s + 1] ? ids[i + 1] : -1;
    cpt_batch b = {N, S, ids, cu, tg};
    result rc = {0}, rg = {0};
    fwd_bwd(cpu, &b, 1, NULL, NULL, &rc);
    fwd_bwd(gpu, &b, 1, NULL, NULL, &rg);
    struct {
        const char *fx;
        float *g, *c;
        size_t n;
    } outs[] = {{"packed_logits", rg.logits, rc.logits, (size_t)N * V},
                {"packed_logprobs", rg.lp, rc.lp, (size_t)N},
                {"packed_entropy", rg.ent, rc.ent, (size_t)N},
                {"packed_loss", &rg.loss, &rc.loss, 1}};
    for (size_t k = 0; k < sizeof outs / sizeof outs[0]; k++) {
        float *e = fixture_tensor(f, outs[k].fx, outs[k].n);
        CHECK_MSG(e != NULL, "%s lacks %s", path, outs[k].fx);
        row(name, outs[k].fx + 7, outs[k].n, e ? rel_l2(outs[k].g, e, outs[k].n) : -1,
            rel_l2(outs[k].g, outs[k].c, outs[k].n), 2e-2);
        free(e);
    }
    size_t off = 0;
    for (size_t i = 0; i < cpt_model_num_params(cpu); i++) {
        cpt_param *p = cpt_model_param(cpu, i);
        char gname[300];
        snprintf(gname, sizeof gname, "packed_grad.%s", p->name);
        float *e = fixture_tensor(f, gname, p->numel);
        CHECK_MSG(e != NULL, "%s lacks %s", path, gname);
        row(name, gname + 7, p->numel, e ? rel_l2(rg.grads + off, e, p->numel) : -1,
            rel_l2(rg.grads + off, rc.grads + off, p->numel), 5e-2);
        free(e);
        off += p->numel;
    }
    result_free(&rc);
    result_free(&rg);
    free(tg);
    cpt_st_close(f);
    cpt_model_free(cpu);
    cpt_model_free(gpu);
}

/* ---- a bigger random model ---- */

static cpt_model_config big_config(void) {
    cpt_model_config c;
    memset(&c, 0, sizeof c);
    c.arch = CPT_ARCH_QWEN2;
    c.vocab_size = 4096;
    c.hidden_size = 512;
    c.intermediate_size = 1536;
    c.num_layers = 4;
    c.num_heads = 8;
    c.num_kv_heads = 2;
    c.head_dim = 64;
    c.rms_norm_eps = 1e-6f;
    c.rope_theta = 10000.0f;
    c.tie_word_embeddings = 0;
    c.qkv_bias = 1;
    c.max_position_embeddings = 4096;
    c.bos_token_id = c.eos_token_id = -1;
    return c;
}

static cpt_model *big_model(int value_head, int cuda) {
    cpt_model_config c = big_config();
    cpt_model *m = cpt_model_new_random(&c, 1234, &err);
    OK(!m);
    /* non-trivial biases and norm weights, so their gradients and the fused epilogues are exercised */
    cpt_rng rng;
    cpt_rng_seed(&rng, 99, 1);
    for (size_t i = 0; i < cpt_model_num_params(m); i++) {
        cpt_param *p = cpt_model_param(m, i);
        if (p->ndim == 1) {
            int norm = strstr(p->name, "norm") != NULL;
            cpt_rng_fill_normal(&rng, p->data, p->numel, norm ? 1.0f : 0.0f, 0.1f);
        }
    }
    if (value_head) OK(cpt_model_add_value_head(m, 7, &err));
    if (cuda) OK(cpt_model_use_cuda(m, 0, &err));
    return m;
}

typedef struct big_batch {
    cpt_batch b;
    int32_t *tok, *tg, *ss;
} big_batch;

/* Sequences of the given lengths with a learnable pattern (token i+1 = token i * 5 + 3 mod V, with some noise). */
static void make_batch(big_batch *bb, const int *lens, int S, int V, uint64_t seed) {
    int N = 0;
    for (int s = 0; s < S; s++) N += lens[s];
    bb->tok = malloc(sizeof(int32_t) * (size_t)N);
    bb->tg = malloc(sizeof(int32_t) * (size_t)N);
    bb->ss = malloc(sizeof(int32_t) * (size_t)(S + 1));
    cpt_rng rng;
    cpt_rng_seed(&rng, seed, 5);
    int i = 0;
    bb->ss[0] = 0;
    for (int s = 0; s < S; s++) {
        int32_t t = (int32_t)(cpt_rng_u64(&rng) % (uint64_t)V);
        for (int k = 0; k < lens[s]; k++, i++) {
            bb->tok[i] = t;
            t = (cpt_rng_u64(&rng) % 8 == 0) ? (int32_t)(cpt_rng_u64(&rng) % (uint64_t)V) : (t * 5 + 3) % V;
        }
        bb->ss[s + 1] = i;
        for (int k = bb->ss[s]; k < i; k++) bb->tg[k] = k + 1 < i ? bb->tok[k + 1] : -1;
    }
    bb->b = (cpt_batch){N, S, bb->tok, bb->ss, bb->tg};
}

static void big_batch_free(big_batch *bb) { free(bb->tok), free(bb->tg), free(bb->ss); }

static void check_big(void) {
    cpt_model *cpu = big_model(1, 0), *gpu = big_model(1, 1);
    int lens[] = {1000, 613, 300, 87, 1};
    big_batch bb;
    make_batch(&bb, lens, 5, 4096, 1);
    int N = bb.b.n_tokens;
    float *d_ent = hbuf((size_t)N), *d_val = hbuf((size_t)N);
    cpt_rng rng;
    cpt_rng_seed(&rng, 3, 3);
    cpt_rng_fill_normal(&rng, d_ent, (size_t)N, 0.0f, 0.01f);
    cpt_rng_fill_normal(&rng, d_val, (size_t)N, 0.0f, 1.0f / N);
    result rc = {0}, rg = {0};
    fwd_bwd(cpu, &bb.b, 0, d_ent, d_val, &rc);
    fwd_bwd(gpu, &bb.b, 0, d_ent, d_val, &rg);
    row("big", "logprobs", (size_t)N, -1, rel_l2(rg.lp, rc.lp, (size_t)N), 2e-2);
    row("big", "entropy", (size_t)N, -1, rel_l2(rg.ent, rc.ent, (size_t)N), 2e-2);
    row("big", "values", (size_t)N, -1, rel_l2(rg.val, rc.val, (size_t)N), 2e-2);
    row("big", "loss", 1, -1, rel_l2(&rg.loss, &rc.loss, 1), 2e-2);
    size_t off = 0;
    for (size_t i = 0; i < cpt_model_num_params(cpu); i++) {
        cpt_param *p = cpt_model_param(cpu, i);
        char gname[300];
        snprintf(gname, sizeof gname, "grad.%s", p->name);
        row("big", gname, p->numel, -1, rel_l2(rg.grads + off, rc.grads + off, p->numel), 5e-2);
        off += p->numel;
    }
    /* an inference forward after training reuses the buffers and agrees with the training one bitwise */
    float *lp2 = poisoned((size_t)N);
    cpt_forward_out o2 = {lp2, NULL, NULL, NULL};
    OK(cpt_model_forward(gpu, &bb.b, &o2, 0, &err));
    CHECK_MSG(memcmp(lp2, rg.lp, sizeof(float) * (size_t)N) == 0, "inference forward differs from training forward");
    free(lp2);
    result_free(&rc);
    result_free(&rg);
    free(d_ent), free(d_val);
    big_batch_free(&bb);
    cpt_model_free(cpu);
    cpt_model_free(gpu);
}

/* ---- training steps ---- */

typedef struct trainer {
    cpt_model *m;
    cpt_param **params;
    size_t n;
    cpt_adamw *opt;
} trainer;

static void trainer_new(trainer *t, int cuda) {
    t->m = big_model(0, cuda);
    OK(!(t->params = cpt_model_param_list(t->m, &t->n, &err)));
    cpt_adamw_hparams hp = {0.9, 0.95, 1e-8, 0.1};
    OK(!(t->opt = cpt_adamw_new(t->params, t->n, &hp, &err)));
}

static void trainer_free(trainer *t) {
    cpt_adamw_free(t->opt);
    free(t->params);
    cpt_model_free(t->m);
}

/* one SFT step: mean CE, clip at 1.0, AdamW lr 1e-3; returns the loss */
static double train_step(trainer *t, const cpt_batch *b, double *norm) {
    int N = b->n_tokens, count = 0;
    float *lp = poisoned((size_t)N), *dlp = hbuf((size_t)N);
    cpt_forward_out out = {lp, NULL, NULL, NULL};
    cpt_model_zero_grad(t->m);
    OK(cpt_model_forward(t->m, b, &out, 1, &err));
    double loss = 0;
    for (int i = 0; i < N; i++)
        if (b->targets[i] >= 0) loss -= lp[i], count++;
    for (int i = 0; i < N; i++) dlp[i] = b->targets[i] >= 0 ? -1.0f / count : 0.0f;
    OK(cpt_model_backward(t->m, b, dlp, NULL, NULL, &err));
    *norm = cpt_clip_grad_norm(t->params, t->n, 1.0);
    cpt_adamw_step(t->opt, 1e-3);
    free(lp), free(dlp);
    return loss / count;
}

static void check_training(void) {
    int lens[] = {700, 400, 250};
    big_batch bb;
    make_batch(&bb, lens, 3, 4096, 2);
    trainer cpu, gpu, gpu2;
    trainer_new(&cpu, 0);
    trainer_new(&gpu, 1);
    trainer_new(&gpu2, 1);
    printf("\n  SFT-like AdamW steps (lr 1e-3, clip 1.0) on %d tokens:\n  step  loss cpu    loss gpu    rel diff   "
           "norm cpu   norm gpu\n",
           bb.b.n_tokens);
    double first = 0, last = 0;
    char ck[256] = "";
    for (int s = 0; s < 5; s++) {
        double nc, ng, ng2;
        double lc = train_step(&cpu, &bb.b, &nc), lg = train_step(&gpu, &bb.b, &ng);
        double lg2 = train_step(&gpu2, &bb.b, &ng2);
        double rd = fabs(lg - lc) / fabs(lc);
        printf("  %4d  %.6f    %.6f    %.2e   %.4f     %.4f\n", s + 1, lc, lg, rd, nc, ng);
        CHECK_MSG(rd <= 2e-2, "step %d: loss gpu %.6f, cpu %.6f", s + 1, lg, lc);
        CHECK_MSG(fabs(ng - nc) <= 5e-2 * nc, "step %d: grad norm gpu %.6f, cpu %.6f", s + 1, ng, nc);
        CHECK_MSG(lg == lg2 && ng == ng2, "step %d: two identical GPU runs differ (loss %.9g vs %.9g)", s + 1, lg, lg2);
        if (s == 0) first = lg;
        last = lg;
        if (s == 2) {
            /* checkpoint after 3 steps: weights and optimizer, from the GPU */
            snprintf(ck, sizeof ck, "/tmp/cpt_cuda_model_ck_%d", (int)getpid());
            OK(cpt_model_save_hf(gpu2.m, ck, 0, &err));
            char p[300];
            snprintf(p, sizeof p, "%s/optim.safetensors", ck);
            OK(cpt_adamw_save(gpu2.opt, p, &err));
        }
    }
    CHECK_MSG(last < first, "the GPU loss did not go down (%.4f -> %.4f)", first, last);
    /* determinism: the two GPU runs agree bitwise on every weight */
    OK(cpt_model_sync_to_host(gpu.m, &err));
    OK(cpt_model_sync_to_host(gpu2.m, &err));
    size_t n = cpt_model_numel(gpu.m);
    CHECK_MSG(memcmp(cpt_model_data(gpu.m), cpt_model_data(gpu2.m), n * sizeof(float)) == 0,
              "two identical GPU runs give different weights");
    printf("  determinism: two GPU runs of 5 steps, weights bitwise %s\n",
           memcmp(cpt_model_data(gpu.m), cpt_model_data(gpu2.m), n * sizeof(float)) ? "DIFFERENT" : "identical");
    /* exact resume: a fresh GPU model + optimizer from the step-3 checkpoint, two more steps */
    trainer r;
    trainer_new(&r, 1);
    char p[300];
    snprintf(p, sizeof p, "%s/model.safetensors", ck);
    OK(cpt_model_load_weights(r.m, p, &err));
    snprintf(p, sizeof p, "%s/optim.safetensors", ck);
    OK(cpt_adamw_load(r.opt, p, &err));
    double nr;
    train_step(&r, &bb.b, &nr);
    train_step(&r, &bb.b, &nr);
    OK(cpt_model_sync_to_host(r.m, &err));
    int same = memcmp(cpt_model_data(r.m), cpt_model_data(gpu.m), n * sizeof(float)) == 0;
    CHECK_MSG(same, "resume from a GPU checkpoint is not exact");
    printf("  exact resume from a GPU checkpoint at step 3 (weights + AdamW state): %s\n", same ? "bitwise" : "DIFFERENT");
    /* the GPU-written optimizer state on a CPU optimizer: the moments of the file */
    trainer c;
    trainer_new(&c, 0);
    OK(cpt_adamw_load(c.opt, p, &err));
    CHECK_EQ_INT(c.opt->step, 3);
    size_t bad = 0;
    for (size_t i = 0; i < c.n; i++)
        for (size_t j = 0; j < c.params[i]->numel; j++) bad += !isfinite(c.opt->m[i][j]) || !isfinite(c.opt->v[i][j]);
    CHECK_MSG(bad == 0, "%zu non-finite moments in the GPU-written optimizer state", bad);
    printf("  GPU optimizer state loads on the CPU: step %lld, %s\n", (long long)c.opt->step, bad ? "BAD" : "ok");
    trainer_free(&c);
    trainer_free(&r);
    trainer_free(&cpu);
    trainer_free(&gpu);
    trainer_free(&gpu2);
    big_batch_free(&bb);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf %s", ck);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", ck);
}

int main(void) {
    const char *fixtures[] = {"qwen2_tied", "qwen2_untied", "qwen3", "llama3"};
    printf("  %-13s %-52s %9s  %-10s %-10s %s\n", "model", "tensor", "elements", "vs torch", "vs cpu", "tol");
    for (size_t i = 0; i < sizeof fixtures / sizeof fixtures[0]; i++) check_fixture(fixtures[i]);
    check_big();
    printf("  worst: outputs %.3e, gradients %.3e\n", worst_out, worst_grad);
    check_training();
    return check_summary("test_cuda_model");
}
