/* The model without fixtures: the backward against central finite differences on tiny random models (every
 * feature: GQA, qk-norm, head_dim != hidden/heads, QKV and o biases, tied and untied, llama3 rope, logprob +
 * entropy + value losses, packed sequences), the value head gradient, thread-count independence, inference vs
 * training forward, padded batches, config and weight errors that name the culprit, and save/load round trips. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "core/fs.h"
#include "core/rng.h"
#include "core/safetensors.h"
#include "model/model.h"

static char tmpdir[256];

static cpt_model_config tiny_qwen3(void) {
    cpt_model_config c;
    memset(&c, 0, sizeof c);
    c.arch = CPT_ARCH_QWEN3;
    c.vocab_size = 32, c.hidden_size = 16, c.intermediate_size = 24, c.num_layers = 2;
    c.num_heads = 4, c.num_kv_heads = 2, c.head_dim = 6;
    c.rms_norm_eps = 1e-6f, c.rope_theta = 10000.0f;
    c.tie_word_embeddings = 1, c.qkv_bias = 1, c.o_bias = 1, c.qk_norm = 1;
    c.max_position_embeddings = 128, c.bos_token_id = -1, c.eos_token_id = -1;
    return c;
}

static cpt_model_config tiny_llama(void) {
    cpt_model_config c = tiny_qwen3();
    c.arch = CPT_ARCH_LLAMA;
    c.num_heads = 2, c.num_kv_heads = 2, c.head_dim = 8;
    c.tie_word_embeddings = 0, c.qkv_bias = 0, c.o_bias = 0, c.qk_norm = 0;
    c.rope_llama3 = 1, c.rope_factor = 8, c.rope_low_freq_factor = 1, c.rope_high_freq_factor = 4;
    c.rope_original_max_pos = 64, c.rope_theta = 500000.0f;
    return c;
}

/* Random weights larger than the init, so every path carries signal. */
static void scramble(cpt_model *m, uint64_t seed) {
    cpt_rng r;
    cpt_rng_seed(&r, seed, 9);
    for (size_t i = 0; i < cpt_model_num_params(m); i++) {
        cpt_param *p = cpt_model_param(m, i);
        int norm = strstr(p->name, "norm") != NULL;
        for (size_t k = 0; k < p->numel; k++)
            p->data[k] = (norm ? 1.0f : 0.0f) + (norm ? 0.2f : 0.4f) * (float)cpt_rng_normal(&r);
    }
}

/* A packed batch of two sequences (5 and 4 tokens) with next-token targets. */
static int32_t TOK[9] = {3, 17, 5, 30, 1, 9, 9, 22, 4};
static int32_t SS[3] = {0, 5, 9};
static int32_t TGT[9] = {17, 5, 30, 1, -1, 9, 22, 4, -1};
static const cpt_batch BATCH = {9, 2, TOK, SS, TGT};

typedef struct lossw {
    float a[9], b[9], c[9]; /* weights of logprob, entropy, value */
    int use_ent, use_val;
} lossw;

static double loss_of(cpt_model *m, const lossw *w) {
    float lp[9], ent[9], val[9];
    cpt_forward_out out = {lp, ent, NULL, w->use_val ? val : NULL};
    cpt_err err;
    if (cpt_model_forward(m, &BATCH, &out, 0, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return NAN;
    }
    double L = 0;
    for (int i = 0; i < 9; i++) {
        L += (double)w->a[i] * lp[i];
        if (w->use_ent) L += (double)w->b[i] * ent[i];
        if (w->use_val) L += (double)w->c[i] * val[i];
    }
    return L;
}

/* Analytic gradient of loss_of vs central differences at a few entries of every parameter. */
static void fd_check(const char *what, cpt_model *m, const lossw *w, const char *only) {
    cpt_err err;
    float lp[9], ent[9], val[9];
    cpt_forward_out out = {lp, ent, NULL, w->use_val ? val : NULL};
    cpt_model_zero_grad(m);
    CHECK_MSG(cpt_model_forward(m, &BATCH, &out, 1, &err) == 0, "%s", err.msg);
    CHECK_MSG(cpt_model_backward(m, &BATCH, w->a, w->use_ent ? w->b : NULL, w->use_val ? w->c : NULL, &err) == 0,
              "%s", err.msg);
    double worst = 0;
    const char *worst_name = "";
    int checked = 0;
    for (size_t i = 0; i < cpt_model_num_params(m); i++) {
        cpt_param *p = cpt_model_param(m, i);
        if (only && strcmp(p->name, only)) continue;
        double gmax = 0;
        size_t imax = 0;
        for (size_t k = 0; k < p->numel; k++)
            if (fabs(p->grad[k]) > gmax) gmax = fabs(p->grad[k]), imax = k;
        size_t picks[3] = {imax, p->numel / 3, (p->numel * 7) / 9};
        for (int j = 0; j < 3; j++) {
            size_t k = picks[j];
            float keep = p->data[k], h = 2e-3f;
            p->data[k] = keep + h;
            double lp1 = loss_of(m, w);
            p->data[k] = keep - h;
            double lm1 = loss_of(m, w);
            p->data[k] = keep;
            double num = (lp1 - lm1) / (2.0 * h);
            double e = fabs(num - p->grad[k]) / (gmax + 1e-3);
            checked++;
            if (e > worst) worst = e, worst_name = p->name;
        }
    }
    CHECK_MSG(checked > 0, "%s: nothing checked", what);
    CHECK_MSG(worst < 1e-2, "%s: finite differences differ by %.3g of max |grad| (%s)", what, worst, worst_name);
    printf("%s: %d entries, worst FD mismatch %.2e\n", what, checked, worst);
}

static void test_fd(void) {
    cpt_err err;
    lossw w;
    memset(&w, 0, sizeof w);
    cpt_rng r;
    cpt_rng_seed(&r, 5, 0);
    for (int i = 0; i < 9; i++) {
        w.a[i] = TGT[i] >= 0 ? (float)cpt_rng_normal(&r) : 0.0f;
        w.b[i] = 0.5f * (float)cpt_rng_normal(&r);
        w.c[i] = (float)cpt_rng_normal(&r);
    }
    cpt_model_config c = tiny_qwen3();
    cpt_model *m = cpt_model_new_random(&c, 7, &err);
    CHECK_MSG(m != NULL, "%s", err.msg);
    if (!m) return;
    scramble(m, 1);
    fd_check("qwen3-like logprob", m, &w, NULL);
    w.use_ent = 1;
    fd_check("qwen3-like logprob+entropy", m, &w, NULL);
    /* value head: only d_values flows */
    CHECK(cpt_model_add_value_head(m, 3, &err) == 0);
    CHECK(cpt_model_has_value_head(m));
    cpt_param *score = cpt_model_find_param(m, "score.weight");
    CHECK(score && score->ndim == 2 && score->shape[0] == 1 && score->shape[1] == 16);
    for (int k = 0; score && k < 16; k++) score->data[k] = 0.3f * (float)cpt_rng_normal(&r);
    lossw v;
    memset(&v, 0, sizeof v);
    memcpy(v.c, w.c, sizeof v.c);
    v.use_val = 1;
    fd_check("value head: score.weight", m, &v, "score.weight");
    fd_check("value head: trunk", m, &v, NULL);
    /* value grads only reach score.weight and the trunk, never the (tied) LM head beyond the trunk's embedding */
    cpt_model_free(m);

    c = tiny_llama();
    m = cpt_model_new_random(&c, 8, &err);
    CHECK_MSG(m != NULL, "%s", err.msg);
    if (!m) return;
    scramble(m, 2);
    fd_check("llama3-rope untied logprob+entropy", m, &w, NULL);
    cpt_model_free(m);
}

/* Bitwise equal gradients with 1 and 2 threads; inference forward equals training forward. */
static void test_determinism(void) {
    cpt_err err;
    cpt_model_config c = tiny_qwen3();
    c.vocab_size = 300, c.hidden_size = 64, c.intermediate_size = 160, c.head_dim = 16;
    cpt_model *m = cpt_model_new_random(&c, 11, &err);
    CHECK(m != NULL);
    if (!m) return;
    scramble(m, 3);
    int N = 150;
    int32_t *tok = malloc(sizeof(int32_t) * N), *tgt = malloc(sizeof(int32_t) * N), ss[4] = {0, 40, 41, 150};
    for (int i = 0; i < N; i++) tok[i] = (i * 37 + 11) % 300;
    for (int i = 0; i < N; i++) tgt[i] = (i + 1 == 40 || i + 1 == 41 || i + 1 == 150) ? -1 : tok[i + 1];
    cpt_batch b = {N, 3, tok, ss, tgt};
    float *d = malloc(sizeof(float) * N), *lp1 = malloc(sizeof(float) * N), *lp2 = malloc(sizeof(float) * N);
    for (int i = 0; i < N; i++) d[i] = tgt[i] >= 0 ? -1.0f / N : 0.0f;
    size_t n = cpt_model_numel(m);
    float *g1 = malloc(sizeof(float) * n);
    int saved = omp_get_max_threads();
    for (int threads = 1; threads <= 2; threads++) {
        omp_set_num_threads(threads);
        cpt_forward_out out = {threads == 1 ? lp1 : lp2, NULL, NULL, NULL};
        cpt_model_zero_grad(m);
        CHECK(cpt_model_forward(m, &b, &out, 1, &err) == 0);
        CHECK(cpt_model_backward(m, &b, d, NULL, NULL, &err) == 0);
        if (threads == 1) memcpy(g1, cpt_model_grads(m), sizeof(float) * n);
    }
    omp_set_num_threads(saved);
    CHECK(memcmp(g1, cpt_model_grads(m), sizeof(float) * n) == 0);
    CHECK(memcmp(lp1, lp2, sizeof(float) * N) == 0);
    /* inference forward (one activation slot) gives the same logprobs */
    cpt_forward_out out = {lp2, NULL, NULL, NULL};
    CHECK(cpt_model_forward(m, &b, &out, 0, &err) == 0);
    CHECK(memcmp(lp1, lp2, sizeof(float) * N) == 0);
    /* backward after an inference forward is refused */
    CHECK(cpt_model_backward(m, &b, d, NULL, NULL, &err) != 0);
    CHECK(strstr(err.msg, "keep_activations") != NULL);
    /* a sequence's logprobs do not depend on its neighbours: sequence 2 alone */
    cpt_batch alone = {109, 1, tok + 41, (int32_t[]){0, 109}, tgt + 41};
    float *lp3 = malloc(sizeof(float) * 109);
    cpt_forward_out o3 = {lp3, NULL, NULL, NULL};
    CHECK(cpt_model_forward(m, &alone, &o3, 0, &err) == 0);
    double e = 0;
    for (int i = 0; i < 109; i++) e = fmax(e, fabs(lp3[i] - lp1[41 + i]));
    CHECK_MSG(e < 1e-5, "packed vs alone differ by %g", e);
    free(lp3);
    free(tok), free(tgt), free(d), free(lp1), free(lp2), free(g1);
    cpt_model_free(m);
}

static void test_padded(void) {
    cpt_err err;
    /* row 0 left-padded, row 1 right-padded, row 2 empty */
    int32_t ids[12] = {0, 0, 5, 6, 7, 8, 9, 0, 0, 0, 0, 0};
    int32_t mask[12] = {0, 0, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0};
    cpt_packed p;
    CHECK(cpt_batch_from_padded(ids, mask, 3, 4, &p, &err) == 0);
    CHECK_EQ_INT(p.batch.n_tokens, 5);
    CHECK_EQ_INT(p.batch.n_seqs, 2);
    CHECK(p.tokens[0] == 5 && p.tokens[1] == 6 && p.tokens[2] == 7 && p.tokens[3] == 8 && p.tokens[4] == 9);
    CHECK(p.targets[0] == 6 && p.targets[1] == -1 && p.targets[2] == 8 && p.targets[3] == 9 && p.targets[4] == -1);
    CHECK(p.seq_start[0] == 0 && p.seq_start[1] == 2 && p.seq_start[2] == 5);
    float packed[5] = {1, 2, 3, 4, 5}, padded[12], back[5];
    cpt_packed_to_padded(&p, packed, padded, -7.0f);
    CHECK(padded[0] == -7.0f && padded[2] == 1.0f && padded[3] == 2.0f && padded[4] == 3.0f && padded[6] == 5.0f &&
          padded[7] == -7.0f);
    cpt_padded_to_packed(&p, padded, back);
    CHECK(memcmp(back, packed, sizeof packed) == 0);
    cpt_packed_free(&p);
    int32_t gap[4] = {1, 0, 1, 1};
    CHECK(cpt_batch_from_padded(ids, gap, 1, 4, &p, &err) != 0);
    CHECK(strstr(err.msg, "not contiguous") != NULL);
    int32_t two[4] = {1, 2, 1, 1};
    CHECK(cpt_batch_from_padded(ids, two, 1, 4, &p, &err) != 0);
    int32_t none[4] = {0, 0, 0, 0};
    CHECK(cpt_batch_from_padded(ids, none, 1, 4, &p, &err) != 0);
}

static int write_text(const char *path, const char *text) {
    cpt_err err;
    return cpt_write_file_atomic(path, text, strlen(text), &err);
}

static void expect_config_error(const char *json, const char *needle) {
    char dir[400], path[500];
    snprintf(dir, sizeof dir, "%s/cfg", tmpdir);
    snprintf(path, sizeof path, "%s/config.json", dir);
    cpt_err err;
    cpt_mkdir_p(dir, 0755, &err);
    write_text(path, json);
    cpt_model_config c;
    int rc = cpt_model_config_load(dir, &c, &err);
    CHECK_MSG(rc != 0 && strstr(err.msg, needle), "config %s: want an error naming \"%s\", got rc %d: %s", json,
              needle, rc, rc ? err.msg : "");
}

static void test_config(void) {
    cpt_err err;
    cpt_model_config c;
    CHECK_MSG(cpt_model_config_load("tests/fixtures/model/llama3", &c, &err) == 0, "%s", err.msg);
    CHECK(c.arch == CPT_ARCH_LLAMA && c.rope_llama3 && c.rope_original_max_pos == 8192 && c.head_dim == 16);
    CHECK_NEAR(c.rope_theta, 500000.0, 1e-9);
    CHECK(c.qkv_bias && c.o_bias && !c.tie_word_embeddings && c.num_kv_heads == 2);
    CHECK_MSG(cpt_model_config_load("tests/fixtures/model/qwen3", &c, &err) == 0, "%s", err.msg);
    CHECK(c.arch == CPT_ARCH_QWEN3 && c.qk_norm && c.head_dim == 32 && c.num_heads == 4 && c.tie_word_embeddings);
    CHECK(c.bos_token_id == 1 && c.eos_token_id == 2);
    /* save and load back */
    char path[400];
    snprintf(path, sizeof path, "%s/config.json", tmpdir);
    CHECK(cpt_model_config_save(&c, path, &err) == 0);
    cpt_model_config d;
    CHECK_MSG(cpt_model_config_load(tmpdir, &d, &err) == 0, "%s", err.msg);
    CHECK(memcmp(&c, &d, sizeof c) == 0);
    expect_config_error("{\"architectures\": [\"GPT2LMHeadModel\"], \"vocab_size\": 5}", "GPT2LMHeadModel");
    expect_config_error("{\"architectures\": [\"Qwen2ForCausalLM\"], \"vocab_size\": 5, \"intermediate_size\": 8, "
                        "\"num_hidden_layers\": 1, \"num_attention_heads\": 2}",
                        "hidden_size");
    expect_config_error("{\"model_type\": \"llama\", \"vocab_size\": 5, \"hidden_size\": 8, \"intermediate_size\": 8, "
                        "\"num_hidden_layers\": 1, \"num_attention_heads\": 2, \"rope_scaling\": {\"rope_type\": \"yarn\"}}",
                        "yarn");
    expect_config_error("{\"model_type\": \"llama\", \"vocab_size\": 5, \"hidden_size\": 8, \"intermediate_size\": 8, "
                        "\"num_hidden_layers\": 1, \"num_attention_heads\": 3, \"num_key_value_heads\": 2}",
                        "multiple");
    expect_config_error("{\"model_type\": \"qwen2\", \"vocab_size\": \"big\"}", "vocab_size");
    expect_config_error("{\"model_type\": \"qwen2\", ", "config.json");
}

static void test_weights_io(void) {
    cpt_err err;
    cpt_model *m = cpt_model_load("tests/fixtures/model/qwen2_untied", &err);
    CHECK_MSG(m != NULL, "%s", err.msg);
    if (!m) return;
    char dir[400], path[500];
    snprintf(dir, sizeof dir, "%s/export", tmpdir);
    CHECK_MSG(cpt_model_save_hf(m, dir, 0, &err) == 0, "%s", err.msg);
    cpt_model *m2 = cpt_model_load(dir, &err);
    CHECK_MSG(m2 != NULL, "%s", err.msg);
    if (m2) {
        CHECK_EQ_INT(cpt_model_numel(m2), cpt_model_numel(m));
        CHECK(memcmp(cpt_model_data(m2), cpt_model_data(m), cpt_model_numel(m) * 4) == 0);
        /* load_weights restores a changed model */
        cpt_model_data(m2)[5] += 1.0f;
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        CHECK_MSG(cpt_model_load_weights(m2, path, &err) == 0, "%s", err.msg);
        CHECK(memcmp(cpt_model_data(m2), cpt_model_data(m), cpt_model_numel(m) * 4) == 0);
        cpt_model_free(m2);
    }
    /* bf16 export: close, not equal */
    snprintf(dir, sizeof dir, "%s/export_bf16", tmpdir);
    CHECK(cpt_model_save_hf(m, dir, 1, &err) == 0);
    m2 = cpt_model_load(dir, &err);
    CHECK_MSG(m2 != NULL, "%s", err.msg);
    if (m2) {
        double e = 0;
        for (size_t i = 0; i < cpt_model_numel(m); i++)
            e = fmax(e, fabs(cpt_model_data(m2)[i] - cpt_model_data(m)[i]) / (fabs(cpt_model_data(m)[i]) + 1e-6));
        CHECK(e < 1e-2);
        cpt_model_free(m2);
    }
    /* a file lacking a tensor, then one with a wrong shape: errors name the tensor; the model is unchanged */
    snprintf(path, sizeof path, "%s/bad.safetensors", tmpdir);
    cpt_st_writer *w = cpt_st_writer_new();
    for (size_t i = 0; i < cpt_model_num_params(m); i++) {
        cpt_param *p = cpt_model_param(m, i);
        if (strcmp(p->name, "model.layers.1.mlp.up_proj.weight"))
            cpt_st_writer_add(w, p->name, CPT_DT_F32, p->ndim, p->shape, p->data, &err);
    }
    CHECK(cpt_st_writer_finish(w, path, &err) == 0);
    float before = cpt_model_data(m)[0];
    cpt_model_data(m)[0] = 42.0f;
    CHECK(cpt_model_load_weights(m, path, &err) != 0);
    CHECK_MSG(strstr(err.msg, "model.layers.1.mlp.up_proj.weight") != NULL, "%s", err.msg);
    CHECK(cpt_model_data(m)[0] == 42.0f);
    cpt_model_data(m)[0] = before;
    w = cpt_st_writer_new();
    for (size_t i = 0; i < cpt_model_num_params(m); i++) {
        cpt_param *p = cpt_model_param(m, i);
        int64_t shape[2] = {p->shape[0], p->shape[1]};
        if (!strcmp(p->name, "model.norm.weight")) shape[0] = 32;
        cpt_st_writer_add(w, p->name, CPT_DT_F32, p->ndim, shape, p->data, &err);
    }
    CHECK(cpt_st_writer_finish(w, path, &err) == 0);
    CHECK(cpt_model_load_weights(m, path, &err) != 0);
    CHECK_MSG(strstr(err.msg, "model.norm.weight") && strstr(err.msg, "[32]") && strstr(err.msg, "[64]"), "%s", err.msg);
    /* a sharded folder: two safetensors files and model.safetensors.index.json, bf16 in one shard */
    snprintf(dir, sizeof dir, "%s/sharded", tmpdir);
    cpt_mkdir_p(dir, 0755, &err);
    snprintf(path, sizeof path, "%s/config.json", dir);
    CHECK(cpt_model_config_save(cpt_model_cfg(m), path, &err) == 0);
    cpt_st_writer *w1 = cpt_st_writer_new(), *w2 = cpt_st_writer_new();
    size_t np = cpt_model_num_params(m), len = 0;
    char *index = malloc(100000);
    len += (size_t)snprintf(index + len, 100000 - len, "{\"metadata\": {}, \"weight_map\": {");
    uint16_t *half = malloc(sizeof(uint16_t) * cpt_model_numel(m));
    for (size_t i = 0; i < np; i++) {
        cpt_param *p = cpt_model_param(m, i);
        int second = i >= np / 2;
        const void *data = p->data;
        cpt_dtype dt = CPT_DT_F32;
        if (second) {
            for (size_t k = 0; k < p->numel; k++) half[p->data - cpt_model_data(m) + k] = cpt_f32_to_bf16(p->data[k]);
            data = half + (p->data - cpt_model_data(m));
            dt = CPT_DT_BF16;
        }
        CHECK(cpt_st_writer_add(second ? w2 : w1, p->name, dt, p->ndim, p->shape, data, &err) == 0);
        len += (size_t)snprintf(index + len, 100000 - len, "%s\"%s\": \"model-0000%d-of-00002.safetensors\"",
                                i ? ", " : "", p->name, second + 1);
    }
    snprintf(index + len, 100000 - len, "}}");
    snprintf(path, sizeof path, "%s/model-00001-of-00002.safetensors", dir);
    CHECK(cpt_st_writer_finish(w1, path, &err) == 0);
    snprintf(path, sizeof path, "%s/model-00002-of-00002.safetensors", dir);
    CHECK(cpt_st_writer_finish(w2, path, &err) == 0);
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    CHECK(write_text(path, index) == 0);
    m2 = cpt_model_load(dir, &err);
    CHECK_MSG(m2 != NULL, "sharded: %s", err.msg);
    if (m2) {
        cpt_param *first = cpt_model_param(m2, 0), *last = cpt_model_param(m2, np - 1);
        CHECK(memcmp(first->data, cpt_model_param(m, 0)->data, first->numel * 4) == 0);
        CHECK_NEAR(last->data[3], cpt_bf16_to_f32(cpt_f32_to_bf16(cpt_model_param(m, np - 1)->data[3])), 1e-9);
        cpt_model_free(m2);
    }
    free(index);
    free(half);
    /* value head survives save/load */
    CHECK(cpt_model_add_value_head(m, 1, &err) == 0);
    CHECK(cpt_model_add_value_head(m, 1, &err) != 0);
    snprintf(dir, sizeof dir, "%s/critic", tmpdir);
    CHECK(cpt_model_save_hf(m, dir, 0, &err) == 0);
    m2 = cpt_model_load(dir, &err);
    CHECK(m2 && cpt_model_has_value_head(m2));
    if (m2) {
        CHECK(memcmp(cpt_model_find_param(m2, "score.weight")->data, cpt_model_find_param(m, "score.weight")->data,
                     64 * 4) == 0);
        cpt_model_free(m2);
    }
    cpt_model_free(m);
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/cpt_test_model.%d", (int)getpid());
    cpt_err err;
    if (cpt_mkdir_p(tmpdir, 0700, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    test_fd();
    test_determinism();
    test_padded();
    test_config();
    test_weights_io();
    cpt_remove_tree(tmpdir, &err);
    return check_summary("test_model");
}
