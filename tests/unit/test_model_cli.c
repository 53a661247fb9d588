/* `cpt forward` on a fixture: the written logits, logprobs, entropy, loss and grad.* match the PyTorch fixture;
 * a padded input with an attention mask gives the same numbers at the real positions; bad inputs exit non-zero
 * with a message and leave no output file. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "core/fs.h"
#include "core/safetensors.h"

static char tmpdir[256];

static float *get(cpt_st_file *f, const char *name, size_t *n) {
    const cpt_st_tensor *t = cpt_st_find(f, name);
    if (!t) return NULL;
    *n = cpt_st_numel(t);
    float *p = malloc(sizeof(float) * (*n ? *n : 1));
    cpt_err err;
    if (cpt_st_read_f32(t, p, *n, &err)) {
        free(p);
        return NULL;
    }
    return p;
}

static int cpt_forward(const char *model, const char *input, const char *out, int grads) {
    const char *build = getenv("CPT_BUILD");
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s/cpt forward --model %s --input %s --out %s %s 2>%s/stderr.txt",
             build ? build : "build", model, input, out, grads ? "--grads" : "", tmpdir);
    return system(cmd);
}

static int stderr_has(const char *needle) {
    char path[300];
    snprintf(path, sizeof path, "%s/stderr.txt", tmpdir);
    char *s = cpt_read_file(path, NULL, NULL);
    int ok = s && strstr(s, needle) != NULL;
    if (!ok) fprintf(stderr, "stderr lacks \"%s\": %s\n", needle, s ? s : "(unreadable)");
    free(s);
    return ok;
}

static void compare_fixture(const char *fx) {
    char model[256], expected[300], out[300];
    snprintf(model, sizeof model, "tests/fixtures/model/%s", fx);
    snprintf(expected, sizeof expected, "%s/expected.safetensors", model);
    snprintf(out, sizeof out, "%s/%s.out.safetensors", tmpdir, fx);
    CHECK_EQ_INT(cpt_forward(model, expected, out, 1), 0);
    cpt_err err;
    cpt_st_file *e = cpt_st_open(expected, &err), *o = cpt_st_open(out, &err);
    CHECK_MSG(e && o, "%s", err.msg);
    if (!e || !o) {
        cpt_st_close(e);
        cpt_st_close(o);
        return;
    }
    int grads = 0;
    for (size_t i = 0; i < cpt_st_count(e); i++) {
        const char *n = cpt_st_at(e, i)->name;
        int is_grad = !strncmp(n, "grad.", 5);
        if (!is_grad && strcmp(n, "logits") && strcmp(n, "logprobs") && strcmp(n, "entropy") && strcmp(n, "loss"))
            continue;
        const cpt_st_tensor *te = cpt_st_at(e, i), *to = cpt_st_find(o, n);
        CHECK_MSG(to != NULL, "%s: output lacks %s", fx, n);
        if (!to) continue;
        CHECK_EQ_INT(to->ndim, te->ndim);
        for (int d = 0; d < te->ndim && d < to->ndim; d++) CHECK_EQ_INT(to->shape[d], te->shape[d]);
        size_t ne = 0, no = 0;
        float *a = get(e, n, &ne), *b = get(o, n, &no);
        CHECK(a && b && ne == no);
        if (a && b && ne == no) {
            double r = check_rel_l2(b, a, ne);
            CHECK_MSG(r <= (is_grad ? 1e-3 : 1e-4), "%s %s: rel L2 %g", fx, n, r);
        }
        grads += is_grad;
        free(a), free(b);
    }
    CHECK(grads > 10);
    cpt_st_close(e);
    cpt_st_close(o);
}

/* Left-pads row 0 by 3 tokens: the real positions must equal the unpadded run. */
static void padded_matches(void) {
    const char *model = "tests/fixtures/model/qwen3";
    char expected[300], in[300], out[300];
    snprintf(expected, sizeof expected, "%s/expected.safetensors", model);
    snprintf(in, sizeof in, "%s/padded.safetensors", tmpdir);
    snprintf(out, sizeof out, "%s/padded.out.safetensors", tmpdir);
    cpt_err err;
    cpt_st_file *e = cpt_st_open(expected, &err);
    CHECK(e != NULL);
    if (!e) return;
    const cpt_st_tensor *ids = cpt_st_find(e, "input_ids");
    int B = (int)ids->shape[0], T = (int)ids->shape[1], P = 3, TP = T + P;
    int32_t *pid = calloc((size_t)B * TP, 4), *mask = calloc((size_t)B * TP, 4);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            int col = b == 0 ? t + P : t; /* row 0 left-padded, row 1 right-padded */
            pid[b * TP + col] = ((const int32_t *)ids->data)[b * T + t];
            mask[b * TP + col] = 1;
        }
    cpt_st_writer *w = cpt_st_writer_new();
    int64_t shape[2] = {B, TP};
    CHECK(cpt_st_writer_add(w, "input_ids", CPT_DT_I32, 2, shape, pid, &err) == 0);
    CHECK(cpt_st_writer_add(w, "attention_mask", CPT_DT_I32, 2, shape, mask, &err) == 0);
    CHECK_MSG(cpt_st_writer_finish(w, in, &err) == 0, "%s", err.msg);
    CHECK_EQ_INT(cpt_forward(model, in, out, 0), 0);
    cpt_st_file *o = cpt_st_open(out, &err);
    CHECK_MSG(o != NULL, "%s", err.msg);
    if (o) {
        size_t n1, n2;
        float *lpe = get(e, "logprobs", &n1), *lpo = get(o, "logprobs", &n2), *le = get(e, "loss", &n1),
              *lo = get(o, "loss", &n2);
        CHECK(lpe && lpo && le && lo);
        if (lpe && lpo && le && lo) {
            double err0 = 0;
            for (int b = 0; b < B; b++)
                for (int t = 0; t < T - 1; t++) {
                    int col = b == 0 ? t + P : t;
                    err0 = fmax(err0, fabs(lpo[b * (TP - 1) + col] - lpe[b * (T - 1) + t]));
                }
            CHECK_MSG(err0 < 1e-4, "padded logprobs differ by %g", err0);
            CHECK_NEAR(lo[0], le[0], 1e-4);
            CHECK(lpo[0] == 0.0f); /* a padding position */
        }
        free(lpe), free(lpo), free(le), free(lo);
        cpt_st_close(o);
    }
    free(pid), free(mask);
    cpt_st_close(e);
}

static void bad_inputs(void) {
    char out[300], in[300];
    snprintf(out, sizeof out, "%s/never.safetensors", tmpdir);
    CHECK(cpt_forward("tests/fixtures/model/nope", "tests/fixtures/model/qwen3/expected.safetensors", out, 0) != 0);
    CHECK(stderr_has("config.json"));
    CHECK(!cpt_path_exists(out));
    /* token outside the vocabulary */
    snprintf(in, sizeof in, "%s/badtok.safetensors", tmpdir);
    int32_t ids[4] = {1, 2, 999, 3};
    int64_t shape[2] = {1, 4};
    cpt_err err;
    cpt_st_writer *w = cpt_st_writer_new();
    cpt_st_writer_add(w, "input_ids", CPT_DT_I32, 2, shape, ids, &err);
    CHECK(cpt_st_writer_finish(w, in, &err) == 0);
    CHECK(cpt_forward("tests/fixtures/model/qwen3", in, out, 0) != 0);
    CHECK(stderr_has("outside the vocabulary"));
    CHECK(!cpt_path_exists(out));
    /* no input_ids */
    w = cpt_st_writer_new();
    cpt_st_writer_add(w, "tokens", CPT_DT_I32, 2, shape, ids, &err);
    CHECK(cpt_st_writer_finish(w, in, &err) == 0);
    CHECK(cpt_forward("tests/fixtures/model/qwen3", in, out, 0) != 0);
    CHECK(stderr_has("input_ids"));
    CHECK(!cpt_path_exists(out));
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/cpt_test_model_cli.%d", (int)getpid());
    cpt_err err;
    if (cpt_mkdir_p(tmpdir, 0700, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    compare_fixture("qwen2_tied");
    compare_fixture("llama3");
    padded_matches();
    bad_inputs();
    cpt_remove_tree(tmpdir, &err);
    return check_summary("test_model_cli");
}
