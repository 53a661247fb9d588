/* The C model against PyTorch/transformers on the committed fixtures (tests/fixtures/make_model_fixture.py):
 * logits, logprobs, entropy, loss within 1e-4 relative L2, every parameter gradient within 1e-3, for a B x T batch
 * and for two packed sequences (which HF ran one at a time). Prints the worst error per tensor family. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "core/safetensors.h"
#include "model/model.h"

static const char *FIXTURES[] = {"qwen2_tied", "qwen2_untied", "qwen3", "llama3"};

typedef struct worst {
    double logits, logprobs, entropy, loss, grad;
    char grad_name[200];
} worst;

static float *read_tensor(cpt_st_file *f, const char *name, size_t *n_out) {
    const cpt_st_tensor *t = cpt_st_find(f, name);
    if (!t) {
        fprintf(stderr, "fixture lacks %s\n", name);
        return NULL;
    }
    size_t n = cpt_st_numel(t);
    float *p = malloc(sizeof(float) * (n ? n : 1));
    cpt_err err;
    if (t->dtype == CPT_DT_I32) {
        for (size_t i = 0; i < n; i++) p[i] = (float)((const int32_t *)t->data)[i];
    } else if (cpt_st_read_f32(t, p, n, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        free(p);
        return NULL;
    }
    if (n_out) *n_out = n;
    return p;
}

/* Runs forward + backward of mean next-token CE on batch b and compares with the fixture's tensors under prefix. */
static void compare(const char *fixture, cpt_model *m, cpt_st_file *f, const cpt_batch *b, const char *prefix,
                    const int *lp_map /* fixture logprob index -> packed index */, size_t n_lp, worst *w) {
    cpt_err err;
    int N = b->n_tokens, V = cpt_model_cfg(m)->vocab_size;
    float *logits = malloc(sizeof(float) * N * V), *lp = malloc(sizeof(float) * N), *ent = malloc(sizeof(float) * N);
    cpt_forward_out out = {lp, ent, logits, NULL};
    cpt_model_zero_grad(m);
    CHECK_MSG(cpt_model_forward(m, b, &out, 1, &err) == 0, "%s", err.msg);
    char name[300];
    size_t n;
    snprintf(name, sizeof name, "%slogits", prefix);
    float *e = read_tensor(f, name, &n);
    CHECK(e && n == (size_t)N * V);
    if (e) {
        double r = check_rel_l2(logits, e, n);
        w->logits = fmax(w->logits, r);
        CHECK_MSG(r <= 1e-4, "%s %s: rel L2 %g", fixture, name, r);
    }
    free(e);
    /* logprobs in the fixture's order */
    snprintf(name, sizeof name, "%slogprobs", prefix);
    e = read_tensor(f, name, &n);
    CHECK(e && n == n_lp);
    float *mine = malloc(sizeof(float) * n_lp);
    double total = 0;
    int count = 0;
    for (size_t i = 0; i < n_lp; i++) mine[i] = lp_map[i] >= 0 ? lp[lp_map[i]] : 0.0f;
    for (int i = 0; i < N; i++)
        if (b->targets[i] >= 0) total -= lp[i], count++;
    if (e) {
        double r = check_rel_l2(mine, e, n_lp);
        w->logprobs = fmax(w->logprobs, r);
        CHECK_MSG(r <= 1e-4, "%s %s: rel L2 %g", fixture, name, r);
    }
    free(e);
    free(mine);
    snprintf(name, sizeof name, "%sentropy", prefix);
    e = read_tensor(f, name, &n);
    CHECK(e && n == (size_t)N);
    if (e) {
        double r = check_rel_l2(ent, e, n);
        w->entropy = fmax(w->entropy, r);
        CHECK_MSG(r <= 1e-4, "%s %s: rel L2 %g", fixture, name, r);
    }
    free(e);
    snprintf(name, sizeof name, "%sloss", prefix);
    e = read_tensor(f, name, &n);
    CHECK(e && n == 1);
    if (e) {
        float loss = (float)(total / count);
        double r = fabs(loss - e[0]) / fabs(e[0]);
        w->loss = fmax(w->loss, r);
        CHECK_MSG(r <= 1e-4, "%s %s: %g vs %g", fixture, name, loss, e[0]);
    }
    free(e);
    /* backward of the mean CE: d loss / d logprob = -1 / count at every target */
    float *dlp = malloc(sizeof(float) * N);
    for (int i = 0; i < N; i++) dlp[i] = b->targets[i] >= 0 ? -1.0f / count : 0.0f;
    CHECK_MSG(cpt_model_backward(m, b, dlp, NULL, NULL, &err) == 0, "%s", err.msg);
    size_t grads_in_fixture = 0, plen = strlen(prefix);
    for (size_t i = 0; i < cpt_st_count(f); i++) {
        const char *tn = cpt_st_at(f, i)->name;
        if (!strncmp(tn, prefix, plen) && !strncmp(tn + plen, "grad.", 5)) grads_in_fixture++;
    }
    CHECK_EQ_INT(grads_in_fixture, cpt_model_num_params(m));
    for (size_t i = 0; i < cpt_model_num_params(m); i++) {
        cpt_param *p = cpt_model_param(m, i);
        snprintf(name, sizeof name, "%sgrad.%s", prefix, p->name);
        e = read_tensor(f, name, &n);
        CHECK_MSG(e && n == p->numel, "%s: %s", fixture, name);
        if (!e || n != p->numel) {
            free(e);
            continue;
        }
        double r = check_rel_l2(p->grad, e, n);
        if (r > w->grad) {
            w->grad = r;
            snprintf(w->grad_name, sizeof w->grad_name, "%s %s", fixture, name);
        }
        CHECK_MSG(r <= 1e-3, "%s %s: rel L2 %g", fixture, name, r);
        free(e);
    }
    free(dlp), free(logits), free(lp), free(ent);
}

static void run_fixture(const char *fixture, worst *w) {
    char dir[512], path[600];
    snprintf(dir, sizeof dir, "tests/fixtures/model/%s", fixture);
    snprintf(path, sizeof path, "%s/expected.safetensors", dir);
    cpt_err err;
    cpt_model *m = cpt_model_load(dir, &err);
    CHECK_MSG(m != NULL, "%s", err.msg);
    cpt_st_file *f = cpt_st_open(path, &err);
    CHECK_MSG(f != NULL, "%s", err.msg);
    if (!m || !f) {
        cpt_model_free(m);
        cpt_st_close(f);
        return;
    }
    /* B x T: each row one sequence */
    const cpt_st_tensor *ids = cpt_st_find(f, "input_ids");
    CHECK(ids && ids->dtype == CPT_DT_I32 && ids->ndim == 2);
    int B = (int)ids->shape[0], T = (int)ids->shape[1], N = B * T;
    int32_t *tok = malloc(sizeof(int32_t) * N), *tgt = malloc(sizeof(int32_t) * N), *ss = malloc(sizeof(int32_t) * (B + 1));
    memcpy(tok, ids->data, sizeof(int32_t) * N);
    for (int b = 0; b <= B; b++) ss[b] = b * T;
    for (int i = 0; i < N; i++) tgt[i] = (i % T) + 1 < T ? tok[i + 1] : -1;
    int *map = malloc(sizeof(int) * B * (T - 1));
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T - 1; t++) map[b * (T - 1) + t] = b * T + t;
    cpt_batch batch = {N, B, tok, ss, tgt};
    compare(fixture, m, f, &batch, "", map, (size_t)B * (T - 1), w);
    free(tok), free(tgt), free(ss), free(map);

    /* packed: two sequences back to back */
    const cpt_st_tensor *pi = cpt_st_find(f, "packed_input_ids"), *pc = cpt_st_find(f, "packed_cu_seqlens");
    CHECK(pi && pc && pi->dtype == CPT_DT_I32 && pc->dtype == CPT_DT_I32);
    if (pi && pc) {
        int n = (int)pi->shape[0], S = (int)pc->shape[0] - 1;
        const int32_t *cu = pc->data;
        int32_t *t2 = malloc(sizeof(int32_t) * n);
        int *m2 = malloc(sizeof(int) * n);
        for (int s = 0; s < S; s++)
            for (int i = cu[s]; i < cu[s + 1]; i++) t2[i] = i + 1 < cu[s + 1] ? ((const int32_t *)pi->data)[i + 1] : -1;
        for (int i = 0; i < n; i++) m2[i] = i;
        cpt_batch pb = {n, S, pi->data, cu, t2};
        compare(fixture, m, f, &pb, "packed_", m2, (size_t)n, w);
        free(t2), free(m2);
    }
    cpt_st_close(f);
    cpt_model_free(m);
}

int main(void) {
    for (size_t i = 0; i < sizeof FIXTURES / sizeof FIXTURES[0]; i++) {
        worst w = {0};
        run_fixture(FIXTURES[i], &w);
        printf("%-13s worst relative L2: logits %.2g, logprobs %.2g, entropy %.2g, loss %.2g, grad %.2g (%s)\n",
               FIXTURES[i], w.logits, w.logprobs, w.entropy, w.loss, w.grad, w.grad_name);
    }
    return check_summary("test_model_parity");
}
