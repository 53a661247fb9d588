/* The whole transformer on CUDA (cpt_model_use_cuda) against the PyTorch fixtures and the CPU model.
 *
 * 1. Each fixture of tests/fixtures/model (qwen2 tied / untied, qwen3, llama3): forward + backward of mean
 *    next-token CE on the packed batch; relative L2 error of logits, logprobs, entropy, loss and every parameter
 *    gradient against the fixture (PyTorch fp32) and against the CPU model. bf16 tolerances: 2e-2 for
 *    logits / logprobs / entropy / loss, 5e-2 per gradient.
 * 2. A bigger random qwen2 (hidden 512, 4 layers, vocab 4096, head_dim 64, GQA 8/2, untied, value head) on packed
 *    sequences of up to 1000 tokens, with d_logprobs, d_entropy and d_values all given: GPU against CPU; again with
 *    a logits budget small enough that the LM head runs in chunks and the backward recomputes them; and with
 *    activation recomputation (cpt_model_set_recompute), against the CPU, against keeping everything, and twice.
 * 3. Five SFT-like AdamW steps with clipping on GPU and on CPU from the same weights: the losses (printed).
 * 4. Determinism: two GPU runs of the same steps give bitwise-identical weights; and exact resume: a checkpoint
 *    (weights + AdamW state) written from the GPU, loaded into a fresh GPU model, continues bitwise like the
 *    uninterrupted run; the same optimizer file loads into a CPU optimizer with the GPU's moments.
 * 5. The model's own ops (embedding fwd/bwd with repeated ids, bias grad, value-head dot, sum of squares, scale,
 *    casts, copy_cols) against the CPU ops or host sums, device outputs poisoned (0xFF: NaN) first.
 * 6. Head sizes of other real models (80, 96, 256) on small random qwen3 models (explicit head_dim, q/k norm):
 *    forward + backward against the CPU at the tolerances of 1; a head size the CPU takes and the GPU kernels do not
 *    (24) refused at placement with a message naming the supported ones, the model still running on the CPU.
 * Host outputs are poisoned with NaN before every GPU call that writes them. With CPT_CUDA_MODEL_BENCH=1 it also
 * times train steps (forward + backward + clip + AdamW) at the Qwen2.5-0.5B shape, =2 also at 1.5B. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/rng.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/kernels.h"
#include "model/decoder.h"
#include "core/safetensors.h"
#include "model/model.h"
#include "reward/reward_model.h"
#include "reward/teacher.h"
#include "tests/check.h"
#include "tests/gpu/gpu_check.h"
#include "trainer/optim.h"

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

/* The greedy first token after a 5-token prompt, through a decoder on m's placement. */
static int first_token(cpt_model *m, int32_t *tok, float *lp, cpt_err *err) {
    cpt_decoder_opts o = {.n_tables = 1, .max_len = 16, .max_rows = 8, .saved_rows = 1};
    cpt_decoder *d = cpt_decoder_new(m, &o, NULL, err);
    if (!d) return -1;
    cpt_decoder_io *io = cpt_decoder_io_of(d);
    const int32_t prompt[5] = {1, 17, 42, 200, 9};
    io->tables[0] = 0;
    cpt_decoder_tables_changed(d);
    for (int i = 0; i < 5; i++) io->tok[i] = prompt[i], io->pos[i] = i, io->tab[i] = 0;
    io->out[0] = 4;
    io->save_to[0] = 0;
    int rc = cpt_decoder_prefill(d, 5, 1, err);
    if (!rc) {
        memset(&io->rows[0], 0, sizeof io->rows[0]); /* temperature 0: greedy */
        rc = cpt_decoder_sample_saved(d, 1, err);
    }
    if (!rc) *tok = io->out_tok[0], *lp = io->out_lp[0];
    cpt_decoder_free(d);
    return rc;
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
    /* the training placement generates with the CPU decoder over its host mirror (the trainer's validation): the
     * same first token and logprob as the CPU model; it cannot become the inference placement */
    int32_t tok_c = -1, tok_g = -2;
    float lp_c = 0, lp_g = 1;
    cpt_err_clear(&err);
    CHECK_MSG(first_token(cpu, &tok_c, &lp_c, &err) == 0, "decoder on the CPU: %s", err.msg);
    CHECK_MSG(first_token(gpu, &tok_g, &lp_g, &err) == 0, "decoder on the training placement: %s", err.msg);
    CHECK_MSG(tok_c == tok_g && lp_c == lp_g, "first token cpu %d (%g), training placement %d (%g)", tok_c,
              (double)lp_c, tok_g, (double)lp_g);
    cpt_err_clear(&err);
    CHECK_MSG(cpt_model_use_cuda_infer(gpu, 0, &err) == -1 && strstr(err.msg, "placed for training"),
              "inference placement of a training placement: %s", err.msg);
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

/* the readiness callback: records the ranges it is given */
typedef struct ready_log {
    int n;
    size_t first[64], last[64];
} ready_log;

static int on_ready(void *ud, size_t first, size_t last, cpt_err *e) {
    (void)e;
    ready_log *r = ud;
    if (r->n < 64) r->first[r->n] = first, r->last[r->n] = last;
    r->n++;
    return 0;
}

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
    ready_log rl = {0};
    cpt_model_set_grads_ready(gpu, on_ready, &rl);
    fwd_bwd(cpu, &bb.b, 0, d_ent, d_val, &rc);
    fwd_bwd(gpu, &bb.b, 0, d_ent, d_val, &rg);
    cpt_model_set_grads_ready(gpu, NULL, NULL);
    /* norm..last, then each layer's range from the last layer down, then the embedding; every param exactly once */
    size_t np = cpt_model_num_params(gpu), covered = 0;
    int order_ok = rl.n == 4 + 2 && rl.last[0] == np - 1 && rl.first[rl.n - 1] == 0 && rl.last[rl.n - 1] == 0;
    for (int k = 0; k < rl.n && k < 64; k++) {
        covered += rl.last[k] - rl.first[k] + 1;
        if (k > 0 && rl.last[k] + 1 != rl.first[k - 1]) order_ok = 0;
    }
    CHECK_MSG(order_ok && covered == np, "grads-ready callback: %d calls covering %zu of %zu params, order %s", rl.n,
              covered, np, order_ok ? "ok" : "wrong");
    printf("  grads-ready callback: %d calls, %zu of %zu params, in backward order: %s\n", rl.n, covered, np,
           order_ok && covered == np ? "ok" : "WRONG");
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
    /* the LM head in chunks of 256 rows with the logits recomputed in the backward (a 2 MiB logits budget) */
    setenv("CPT_CUDA_LOGITS_MB", "2", 1);
    cpt_model *chunked = big_model(1, 1);
    unsetenv("CPT_CUDA_LOGITS_MB");
    result rk = {0};
    fwd_bwd(chunked, &bb.b, 0, d_ent, d_val, &rk);
    row("big chunked", "logprobs", (size_t)N, -1, rel_l2(rk.lp, rc.lp, (size_t)N), 2e-2);
    row("big chunked", "entropy", (size_t)N, -1, rel_l2(rk.ent, rc.ent, (size_t)N), 2e-2);
    size_t nall = cpt_model_numel(cpu);
    row("big chunked", "all gradients", nall, -1, rel_l2(rk.grads, rc.grads, nall), 5e-2);
    result_free(&rk);
    cpt_model_free(chunked);
    /* activation recomputation: only layer inputs kept, each layer run again before its backward; the same
     * function (against the CPU) and, run twice, bitwise the same gradients */
    cpt_model *rec = big_model(1, 1), *rec2 = big_model(1, 1);
    cpt_model_set_recompute(rec, 1);
    cpt_model_set_recompute(rec2, 1);
    result rr = {0}, rr2 = {0};
    fwd_bwd(rec, &bb.b, 0, d_ent, d_val, &rr);
    fwd_bwd(rec2, &bb.b, 0, d_ent, d_val, &rr2);
    row("big recompute", "logprobs", (size_t)N, -1, rel_l2(rr.lp, rc.lp, (size_t)N), 2e-2);
    row("big recompute", "all gradients", nall, -1, rel_l2(rr.grads, rc.grads, nall), 5e-2);
    row("big recompute", "vs keeping all", nall, -1, rel_l2(rr.grads, rg.grads, nall), 2e-2);
    CHECK_MSG(memcmp(rr.grads, rr2.grads, sizeof(float) * nall) == 0, "recompute: two runs differ");
    result_free(&rr);
    result_free(&rr2);
    cpt_model_free(rec);
    cpt_model_free(rec2);
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

/* ---- the model's own ops ---- */

static cpt_tensor DB(void *p, int64_t a, int64_t b) { return cpt_cuda_tensor(p, CPT_DT_BF16, b ? 2 : 1, a, b); }
static cpt_tensor DF(void *p, int64_t a, int64_t b) { return cpt_cuda_tensor(p, CPT_DT_F32, b ? 2 : 1, a, b); }
static cpt_tensor DI(void *p, int64_t a) { return cpt_cuda_tensor(p, CPT_DT_I32, 1, a, 0); }

static void check_ops(void) {
    cpt_cuda_ctx *ctx = cpt_cuda_ctx_new(0, &err);
    OK(!ctx);
    cpt_rng rng;
    cpt_rng_seed(&rng, 11, 1);
    const int V = 300, C = 200, N = 1000;
    /* embedding: ids drawn from a small range, so most repeat many times */
    int32_t *tok = malloc(sizeof(int32_t) * N);
    for (int i = 0; i < N; i++) tok[i] = (int32_t)(i % 7 == 0 ? cpt_rng_below(&rng, V) : cpt_rng_below(&rng, 12));
    float *wte = rand_bf16(&rng, (size_t)V * C, 1.0f), *dout = rand_bf16(&rng, (size_t)N * C, 1.0f);
    float *dw0 = rand_bf16(&rng, (size_t)V * C, 1.0f);
    void *d_wte = dev_bf16(ctx, wte, (size_t)V * C, "bf16 input");
    void *d_tok = dev_raw(ctx, tok, sizeof(int32_t) * N, "input");
    void *d_out = dev_poison(ctx, (size_t)N * C * 2, "output");
    cpt_cuda_embedding_fwd(ctx, DB(d_out, N, C), DI(d_tok, N), DB(d_wte, V, C));
    float *got = get_bf16(ctx, d_out, (size_t)N * C), *ref = hbuf((size_t)N * C);
    cpt_k_embedding_fwd(cpt_tensor_f32_2d(ref, N, C), cpt_tensor_i32_1d(tok, N), cpt_tensor_f32_2d(wte, V, C));
    row("ops", "embedding_fwd", (size_t)N * C, -1, rel_l2(got, ref, (size_t)N * C), 0);
    free(got), free(ref);
    int32_t *ids = malloc(sizeof(int32_t) * (N + 1)), *starts = malloc(sizeof(int32_t) * (N + 1)),
            *order = malloc(sizeof(int32_t) * N);
    int U = cpt_cuda_embedding_plan(tok, N, ids, starts, order);
    CHECK(U > 0 && U <= 12 + N / 7 + 1);
    void *d_ids = dev_raw(ctx, ids, sizeof(int32_t) * U, "input");
    void *d_st = dev_raw(ctx, starts, sizeof(int32_t) * (U + 1), "input");
    void *d_ord = dev_raw(ctx, order, sizeof(int32_t) * N, "input");
    void *d_dout = dev_bf16(ctx, dout, (size_t)N * C, "bf16 input");
    float *dws[2];
    for (int rep = 0; rep < 2; rep++) {
        void *d_dw = dev_raw(ctx, dw0, sizeof(float) * V * C, "input");
        cpt_cuda_embedding_bwd(ctx, DF(d_dw, V, C), DB(d_dout, N, C), DI(d_ids, U), DI(d_st, U + 1), DI(d_ord, N));
        dws[rep] = get_f32(ctx, d_dw, (size_t)V * C);
        cpt_cuda_free(d_dw);
    }
    ref = hbuf((size_t)V * C);
    memcpy(ref, dw0, sizeof(float) * V * C);
    cpt_k_embedding_bwd(cpt_tensor_f32_2d(ref, V, C), cpt_tensor_f32_2d(dout, N, C), cpt_tensor_i32_1d(tok, N));
    row("ops", "embedding_bwd (f32, += , repeated ids)", (size_t)V * C, -1, rel_l2(dws[0], ref, (size_t)V * C), 1e-6);
    CHECK_MSG(!memcmp(dws[0], dws[1], sizeof(float) * V * C), "embedding_bwd is not bitwise reproducible");
    free(dws[0]), free(dws[1]), free(ref);
    /* bias grad and value head over the same dout [N, C] */
    float *db0 = rand_bf16(&rng, C, 1.0f);
    void *d_db = dev_raw(ctx, db0, sizeof(float) * C, "input");
    cpt_cuda_bias_grad(ctx, DF(d_db, C, 0), DB(d_dout, N, C));
    got = get_f32(ctx, d_db, C);
    ref = hbuf(C);
    for (int c = 0; c < C; c++) {
        double acc = db0[c];
        for (int n = 0; n < N; n++) acc += dout[(size_t)n * C + c];
        ref[c] = (float)acc;
    }
    row("ops", "bias_grad (f32, +=)", C, -1, rel_l2(got, ref, C), 1e-5);
    free(got), free(ref);
    float *w = rand_bf16(&rng, C, 1.0f), *dv = rand_bf16(&rng, N, 1.0f);
    void *d_w = dev_bf16(ctx, w, C, "bf16 input"), *d_v = dev_poison(ctx, sizeof(float) * N, "output");
    cpt_cuda_rowdot_fwd(ctx, DF(d_v, N, 0), DB(d_dout, N, C), DB(d_w, C, 0));
    got = get_f32(ctx, d_v, N);
    ref = hbuf(N);
    for (int n = 0; n < N; n++) {
        double acc = 0;
        for (int c = 0; c < C; c++) acc += (double)dout[(size_t)n * C + c] * w[c];
        ref[n] = (float)acc;
    }
    row("ops", "rowdot_fwd (value head)", N, -1, rel_l2(got, ref, N), 1e-5);
    free(got), free(ref);
    void *d_dv = dev_raw(ctx, dv, sizeof(float) * N, "input");
    float *x0 = rand_bf16(&rng, (size_t)N * C, 1.0f);
    void *d_dx = dev_bf16(ctx, x0, (size_t)N * C, "bf16 input");
    void *d_dwv = dev_raw(ctx, db0, sizeof(float) * C, "input");
    cpt_cuda_rowdot_bwd(ctx, DB(d_dx, N, C), DF(d_dwv, C, 0), DF(d_dv, N, 0), DB(d_dout, N, C), DB(d_w, C, 0));
    got = get_bf16(ctx, d_dx, (size_t)N * C);
    ref = hbuf((size_t)N * C);
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) ref[(size_t)n * C + c] = x0[(size_t)n * C + c] + dv[n] * w[c];
    row("ops", "rowdot_bwd dx (bf16, +=)", (size_t)N * C, -1, rel_l2(got, ref, (size_t)N * C), 1e-2);
    free(got), free(ref);
    got = get_f32(ctx, d_dwv, C);
    ref = hbuf(C);
    for (int c = 0; c < C; c++) {
        double acc = db0[c];
        for (int n = 0; n < N; n++) acc += (double)dv[n] * dout[(size_t)n * C + c];
        ref[c] = (float)acc;
    }
    row("ops", "rowdot_bwd dw (f32, +=)", C, -1, rel_l2(got, ref, C), 1e-5);
    free(got), free(ref);
    /* sum of squares (fp64) and scale, on an odd size */
    size_t n = 1234567;
    float *g = hbuf(n);
    cpt_rng_fill_normal(&rng, g, n, 0.0f, 1.0f);
    void *d_g = dev_raw(ctx, g, sizeof(float) * n, "input"), *d_s = dev_poison(ctx, sizeof(double) * 2, "output");
    cpt_cuda_sumsq(ctx, (double *)d_s, DF(d_g, (int64_t)n, 0));
    cpt_cuda_sumsq(ctx, (double *)d_s + 1, DF(d_g, (int64_t)n, 0));
    double s2[2], want = 0;
    OK(cpt_cuda_sync(ctx, &err));
    OK(cpt_cuda_memcpy_d2h(ctx, s2, d_s, sizeof s2, &err));
    for (size_t i = 0; i < n; i++) want += (double)g[i] * g[i];
    row("ops", "sumsq (fp64)", n, -1, fabs(s2[0] - want) / want, 1e-9);
    CHECK_MSG(s2[0] == s2[1], "sumsq is not bitwise reproducible");
    cpt_cuda_scale(ctx, DF(d_g, (int64_t)n, 0), 0.37f);
    got = get_f32(ctx, d_g, n);
    size_t off = 0;
    for (size_t i = 0; i < n; i++) off += got[i] != g[i] * 0.37f;
    CHECK_MSG(off == 0, "scale: %zu elements differ from x * c", off);
    row("ops", "scale (exact)", n, -1, off ? 1.0 : 0.0, 0);
    free(got);
    /* casts and copy_cols */
    void *d_b = dev_poison(ctx, n * 2, "output"), *d_f = dev_poison(ctx, n * 4, "output");
    cpt_cuda_cast_bf16(ctx, DB(d_b, (int64_t)n, 0), DF(d_g, (int64_t)n, 0));
    cpt_cuda_cast_f32(ctx, DF(d_f, (int64_t)n, 0), DB(d_b, (int64_t)n, 0));
    got = get_f32(ctx, d_f, n);
    float *sc = get_f32(ctx, d_g, n);
    round_bf16(sc, n);
    CHECK_MSG(!memcmp(got, sc, n * 4), "cast_bf16 / cast_f32 differ from round-to-nearest-even");
    row("ops", "cast_bf16 + cast_f32 (exact rne)", n, -1, memcmp(got, sc, n * 4) ? 1.0 : 0.0, 0);
    free(got), free(sc);
    void *d_c = dev_poison(ctx, (size_t)N * 64 * 2, "output");
    cpt_cuda_copy_cols(ctx, DB(d_c, N, 64), 0, DB(d_dout, N, C), 100, 64);
    got = get_bf16(ctx, d_c, (size_t)N * 64);
    ref = hbuf((size_t)N * 64);
    cpt_k_copy_cols(cpt_tensor_f32_2d(ref, N, 64), 0, cpt_tensor_f32_2d(dout, N, C), 100, 64);
    row("ops", "copy_cols", (size_t)N * 64, -1, rel_l2(got, ref, (size_t)N * 64), 0);
    free(got), free(ref);
    void *frees[] = {d_wte, d_tok, d_out, d_ids, d_st, d_ord, d_dout, d_db, d_w, d_v, d_dv, d_dx, d_dwv, d_g, d_s, d_b, d_f, d_c};
    for (size_t i = 0; i < sizeof frees / sizeof frees[0]; i++) cpt_cuda_free(frees[i]);
    cpt_cuda_ctx_free(ctx);
    free(tok), free(wte), free(dout), free(dw0), free(ids), free(starts), free(order), free(db0), free(w), free(dv);
    free(x0), free(g);
}

/* ---- timing at real shapes (CPT_CUDA_MODEL_BENCH=1) ---- */

static void bench_shape(const char *name, int C, int I, int L, int H, int KV, int D, int seqs, int T) {
    cpt_model_config c;
    memset(&c, 0, sizeof c);
    c.arch = CPT_ARCH_QWEN2;
    c.vocab_size = 151936;
    c.hidden_size = C;
    c.intermediate_size = I;
    c.num_layers = L;
    c.num_heads = H;
    c.num_kv_heads = KV;
    c.head_dim = D;
    c.rms_norm_eps = 1e-6f;
    c.rope_theta = 1e6f;
    c.tie_word_embeddings = 1;
    c.qkv_bias = 1;
    c.max_position_embeddings = 32768;
    c.bos_token_id = c.eos_token_id = -1;
    double t0 = now_s();
    cpt_model *m = cpt_model_new_random(&c, 1, &err);
    OK(!m);
    OK(cpt_model_use_cuda(m, 0, &err));
    cpt_param **ps;
    size_t np;
    OK(!(ps = cpt_model_param_list(m, &np, &err)));
    cpt_adamw_hparams hp = {0.9, 0.95, 1e-8, 0.1};
    cpt_adamw *opt = cpt_adamw_new(ps, np, &hp, &err);
    OK(!opt);
    int *lens = malloc(sizeof(int) * seqs);
    for (int s = 0; s < seqs; s++) lens[s] = T;
    big_batch bb;
    make_batch(&bb, lens, seqs, c.vocab_size, 9);
    int N = bb.b.n_tokens;
    float *lp = hbuf(N), *dlp = hbuf(N);
    for (int i = 0; i < N; i++) dlp[i] = bb.tg[i] >= 0 ? -1.0f / N : 0.0f;
    double setup = now_s() - t0, t_step = 0, t_fwd = 0, t_bwd = 0;
    const int warm = 1, steps = 3;
    for (int s = 0; s < warm + steps; s++) {
        OK(cpt_model_wait(m, &err));
        double a = now_s();
        cpt_model_zero_grad(m);
        cpt_forward_out out = {lp, NULL, NULL, NULL};
        OK(cpt_model_forward(m, &bb.b, &out, 1, &err));
        double b = now_s();
        OK(cpt_model_backward(m, &bb.b, dlp, NULL, NULL, &err));
        OK(cpt_model_wait(m, &err));
        double cc = now_s();
        cpt_clip_grad_norm(ps, np, 1.0);
        cpt_adamw_step(opt, 1e-5);
        OK(cpt_model_wait(m, &err));
        double d = now_s();
        if (s >= warm) t_step += d - a, t_fwd += b - a, t_bwd += cc - b;
    }
    t_step /= steps, t_fwd /= steps, t_bwd /= steps;
    /* model FLOPs: 6 per parameter of every matmul (the LM head included, the embedding gather not) per token, plus
     * causal attention 6 * L * H * D * T per token (half of the full 12 L H D T) */
    double P = 0;
    for (size_t i = 0; i < np; i++) /* an untied embedding is a gather, not a matmul */
        if (ps[i]->ndim == 2 && (c.tie_word_embeddings || strcmp(ps[i]->name, "model.embed_tokens.weight")))
            P += (double)ps[i]->numel;
    double flops = (6.0 * P + 6.0 * L * H * D * (double)T) * N;
    printf("  bench %-12s %d x %d tokens: step %.1f ms (fwd %.1f, bwd %.1f, clip+adamw %.1f), %.0f tokens/s, "
           "%.1f%% MFU of 989 TFLOPS (setup %.0f s)\n",
           name, seqs, T, t_step * 1e3, t_fwd * 1e3, t_bwd * 1e3, (t_step - t_fwd - t_bwd) * 1e3, N / t_step,
           100.0 * flops / t_step / 989e12, setup);
    free(lp), free(dlp), free(lens);
    big_batch_free(&bb);
    cpt_adamw_free(opt);
    free(ps);
    cpt_model_free(m);
}

/* A small qwen3 model (q/k norm, head_dim not hidden / heads) with non-trivial norm weights. */
static cpt_model *head_dim_model(int H, int KV, int D) {
    cpt_model_config c = big_config();
    c.arch = CPT_ARCH_QWEN3;
    c.qkv_bias = 0, c.qk_norm = 1;
    c.vocab_size = 1024, c.hidden_size = 256, c.intermediate_size = 512, c.num_layers = 2;
    c.num_heads = H, c.num_kv_heads = KV, c.head_dim = D;
    cpt_model *m = cpt_model_new_random(&c, 4321, &err);
    OK(!m);
    cpt_rng rng;
    cpt_rng_seed(&rng, 17, 1);
    for (size_t i = 0; i < cpt_model_num_params(m); i++) {
        cpt_param *p = cpt_model_param(m, i);
        if (p->ndim == 1) cpt_rng_fill_normal(&rng, p->data, p->numel, 1.0f, 0.1f);
    }
    return m;
}

static void check_head_dims(void) {
    static const int shapes[][3] = {{8, 2, 80}, {6, 2, 96}, {4, 2, 256}};
    int lens[] = {300, 129, 64, 7, 1};
    for (int k = 0; k < 3; k++) {
        int H = shapes[k][0], KV = shapes[k][1], D = shapes[k][2];
        cpt_model *cpu = head_dim_model(H, KV, D), *gpu = head_dim_model(H, KV, D);
        OK(cpt_model_use_cuda(gpu, 0, &err));
        big_batch bb;
        make_batch(&bb, lens, 5, 1024, 11);
        int N = bb.b.n_tokens;
        result rc = {0}, rg = {0};
        fwd_bwd(cpu, &bb.b, 1, NULL, NULL, &rc);
        fwd_bwd(gpu, &bb.b, 1, NULL, NULL, &rg);
        char name[32];
        snprintf(name, sizeof name, "hd%d (%d/%d)", D, H, KV);
        row(name, "logits", (size_t)N * 1024, -1, rel_l2(rg.logits, rc.logits, (size_t)N * 1024), 2e-2);
        row(name, "logprobs", (size_t)N, -1, rel_l2(rg.lp, rc.lp, (size_t)N), 2e-2);
        row(name, "entropy", (size_t)N, -1, rel_l2(rg.ent, rc.ent, (size_t)N), 2e-2);
        row(name, "loss", 1, -1, rel_l2(&rg.loss, &rc.loss, 1), 2e-2);
        size_t off = 0;
        double worst = 0;
        const char *worst_name = "";
        for (size_t i = 0; i < cpt_model_num_params(cpu); i++) {
            cpt_param *p = cpt_model_param(cpu, i);
            double r = rel_l2(rg.grads + off, rc.grads + off, p->numel);
            CHECK_MSG(r <= 5e-2, "%s grad.%s: rel L2 vs cpu %.3e, tolerance 5e-2", name, p->name, r);
            if (!(r <= worst)) worst = r, worst_name = p->name;
            off += p->numel;
        }
        printf("  %-13s %-52s %9zu  %-10s %.3e  5e-02 %s\n", name, "grad (worst of all)", off, worst_name, worst,
               worst <= 5e-2 ? "" : "FAIL");
        result_free(&rc), result_free(&rg);
        big_batch_free(&bb);
        cpt_model_free(cpu), cpt_model_free(gpu);
    }
    /* head_dim 24: the CPU model runs it, the GPU refuses it at placement (and the process goes on) */
    cpt_model *m = head_dim_model(4, 2, 24);
    int32_t tok[4] = {1, 2, 3, 4}, tg[4] = {2, 3, 4, -1}, ss[2] = {0, 4};
    cpt_batch b = {4, 1, tok, ss, tg};
    float lp[4];
    cpt_forward_out o = {lp, NULL, NULL, NULL};
    cpt_err_clear(&err);
    int rc = cpt_model_use_cuda(m, 0, &err);
    const char *want = "placing the model on CUDA device 0: head_dim 24 is not supported on the GPU (supported: "
                       CPT_CUDA_HEAD_DIMS_TEXT ")";
    int refused = rc == -1 && !strcmp(err.msg, want) && !cpt_model_on_cuda(m);
    CHECK_MSG(refused, "head_dim 24: placement returned %d, '%s'", rc, err.msg);
    OK(cpt_model_forward(m, &b, &o, 0, &err));
    printf("  head_dim 24: placement %s ('%s'); the CPU forward still runs: logprob[0] %.4f\n",
           refused ? "refused" : "NOT REFUSED", err.msg, lp[0]);
    cpt_model_free(m);
}

/* ids[0..n) drawn uniformly from [0, V) by the stream of seed. */
static void random_ids(uint64_t seed, int V, int32_t *ids, int n) {
    cpt_rng r;
    cpt_rng_seed(&r, seed, 0);
    for (int i = 0; i < n; i++) ids[i] = (int32_t)cpt_rng_below(&r, (uint64_t)V);
}

/* The OPD teacher on the GPU (teacher.device = cuda or auto, reward/teacher.h): placed with its fp32 weights on the
 * host, its per-token logprobs of packed completions within bf16 tolerance of the same teacher on the CPU. */
static void check_teacher(void) {
    const char *dir = "tests/fixtures/model/qwen2_tied";
    cpt_model *cpu = cpt_frozen_model_load(dir, &err), *gpu = cpt_frozen_model_load(dir, &err);
    OK(!cpu || !gpu);
    const char *where = "";
    OK(cpt_frozen_model_place(gpu, "teacher.device", "auto", 7, &where, &err)); /* GPU 7 not seen: GPU 0 */
    CHECK_MSG(!strcmp(where, "cuda") && cpt_model_on_cuda(gpu) && cpt_model_host_master(gpu), "placed: %s", where);
    int V = cpt_model_cfg(cpu)->vocab_size;
    enum { NC = 3 };
    int32_t prompt[5], comp[NC][9];
    int nt[NC] = {9, 4, 1};
    random_ids(12345, V, prompt, 5);
    random_ids(12346, V, &comp[0][0], NC * 9);
    const int32_t *toks[NC] = {comp[0], comp[1], comp[2]};
    float lc[NC][9], lg[NC][9];
    float *oc[NC] = {lc[0], lc[1], lc[2]}, *og[NC] = {lg[0], lg[1], lg[2]};
    OK(cpt_teacher_logprobs(cpu, prompt, 5, NC, toks, nt, oc, &err));
    OK(cpt_teacher_logprobs(gpu, prompt, 5, NC, toks, nt, og, &err));
    double worst = 0;
    for (int c = 0; c < NC; c++)
        for (int j = 0; j < nt[c]; j++) worst = fmax(worst, fabs((double)lc[c][j] - lg[c][j]));
    printf("  teacher on the GPU: max |logprob - cpu| %.3e over %d tokens\n", worst, nt[0] + nt[1] + nt[2]);
    CHECK_MSG(worst < 5e-2 && lg[0][0] < 0, "teacher logprobs: max |gpu - cpu| %.3e", worst);
    cpt_model_free(cpu);
    cpt_model_free(gpu);
}

/* The reward model on the GPU (reward.model_device, reward/reward_model.h): a value head on a fixture, its scores of
 * packed completions within bf16 tolerance of the same model on the CPU. */
static void check_reward_model(void) {
    const char *dir = "tests/fixtures/model/qwen2_untied";
    cpt_model *cpu = cpt_frozen_model_load(dir, &err), *gpu = cpt_frozen_model_load(dir, &err);
    OK(!cpu || !gpu);
    OK(cpt_model_add_value_head(cpu, 5, &err));
    OK(cpt_model_add_value_head(gpu, 5, &err));
    const char *where = "";
    OK(cpt_frozen_model_place(gpu, "reward.model_device", "cuda", 0, &where, &err));
    CHECK_MSG(!strcmp(where, "cuda") && cpt_model_on_cuda(gpu), "placed: %s", where);
    int V = cpt_model_cfg(cpu)->vocab_size;
    enum { NC = 3 };
    int32_t prompt[4], comp[NC][7];
    int nt[NC] = {7, 3, 1};
    random_ids(777, V, prompt, 4);
    random_ids(778, V, &comp[0][0], NC * 7);
    const int32_t *toks[NC] = {comp[0], comp[1], comp[2]};
    double sc[NC], sg[NC], worst = 0;
    OK(cpt_reward_model_score_ids(cpu, prompt, 4, NC, toks, nt, sc, &err));
    OK(cpt_reward_model_score_ids(gpu, prompt, 4, NC, toks, nt, sg, &err));
    for (int c = 0; c < NC; c++) {
        double d = fabs(sc[c] - sg[c]);
        worst = fmax(worst, d);
        CHECK_MSG(d <= 0.02 + 0.05 * fabs(sc[c]), "reward model score %d: gpu %.6f cpu %.6f", c, sg[c], sc[c]);
    }
    CHECK_MSG(sc[0] != sc[1] || sc[1] != sc[2], "the scores do not depend on the completion");
    printf("  reward model on the GPU: scores %.4f %.4f %.4f, max |gpu - cpu| %.3e\n", sg[0], sg[1], sg[2], worst);
    cpt_model_free(cpu);
    cpt_model_free(gpu);
}

int main(void) {
    const char *fixtures[] = {"qwen2_tied", "qwen2_untied", "qwen3", "llama3"};
    printf("  %-13s %-52s %9s  %-10s %-10s %s\n", "model", "tensor", "elements", "vs torch", "vs cpu", "tol");
    for (size_t i = 0; i < sizeof fixtures / sizeof fixtures[0]; i++) check_fixture(fixtures[i]);
    check_big();
    check_head_dims();
    printf("  worst: outputs %.3e, gradients %.3e\n", worst_out, worst_grad);
    check_training();
    check_teacher();
    check_reward_model();
    check_ops();
    const char *bench = getenv("CPT_CUDA_MODEL_BENCH");
    if (bench && (*bench == '1' || *bench == '2')) bench_shape("qwen2.5-0.5b", 896, 4864, 24, 14, 2, 64, 8, 2048);
    if (bench && *bench == '2') bench_shape("qwen2.5-1.5b", 1536, 8960, 28, 12, 2, 128, 8, 2048);
    return check_summary("test_cuda_model");
}
