/* `cpt export`: (1) a folder exported by cpt (tests/fixtures/adamw/export, committed) loads in transformers, whose
 * logits for fixed ids (tests/fixtures/make_export_check.py, run on the device) match cpt's forward on the same
 * folder within relative L2 1e-4, and its tokenizer gives the same ids as transformers'; (2) exporting a fresh
 * checkpoint writes config.json, model.safetensors and the tokenizer files, with weights equal to the checkpoint's;
 * a non-empty OUT_DIR or a corrupt checkpoint is refused and leaves nothing behind. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/fs.h"
#include "core/safetensors.h"
#include "core/tokenizer.h"
#include "tests/check.h"
#include "trainer/checkpoint.h"
#include "trainer/export.h"

#define EXPORT_DIR "tests/fixtures/adamw/export"
#define LOGITS "tests/fixtures/adamw/export_logits.safetensors"
#define SHARDED_DIR "tests/fixtures/adamw/export_sharded" /* the same model, cut by cpt into 3 shards + index */

static void check_fixture(void) {
    cpt_err err;
    cpt_st_file *fx = cpt_st_open(LOGITS, &err);
    CHECK_MSG(fx != NULL, "%s (make it with tests/fixtures/make_export_check.py on the device)", err.msg);
    cpt_model *m = cpt_model_load(EXPORT_DIR, &err);
    CHECK_MSG(m != NULL, "loading " EXPORT_DIR ": %s", err.msg);
    if (!fx || !m) {
        cpt_st_close(fx);
        cpt_model_free(m);
        return;
    }
    const cpt_st_tensor *it = cpt_st_find(fx, "input_ids"), *lt = cpt_st_find(fx, "logits");
    CHECK(it && lt && it->ndim == 2 && lt->ndim == 3);
    if (!it || !lt) goto out;
    const int B = (int)it->shape[0], T = (int)it->shape[1], V = (int)lt->shape[2];
    CHECK_EQ_INT(V, cpt_model_cfg(m)->vocab_size);
    int32_t *tg = malloc((size_t)(B * T) * 4), *ss = malloc((size_t)(B + 1) * 4);
    float *ref = malloc((size_t)B * T * V * 4), *got = malloc((size_t)B * T * V * 4);
    for (int i = 0; i < B * T; i++) tg[i] = -1;
    for (int s = 0; s <= B; s++) ss[s] = s * T;
    cpt_batch b = {.n_tokens = B * T, .n_seqs = B, .tokens = it->data, .seq_start = ss, .targets = tg};
    cpt_forward_out fo = {.logits = got};
    CHECK_EQ_INT(cpt_model_forward(m, &b, &fo, 0, &err), 0);
    CHECK_EQ_INT(cpt_st_read_f32(lt, ref, (size_t)B * T * V, &err), 0);
    double num = 0, den = 0;
    for (size_t i = 0; i < (size_t)B * T * V; i++) {
        num += ((double)got[i] - ref[i]) * ((double)got[i] - ref[i]);
        den += (double)ref[i] * ref[i];
    }
    double rel = sqrt(num / (den > 0 ? den : 1));
    printf("exported model: logits rel L2 vs transformers %.3g (|ref| %.4f)\n", rel, sqrt(den));
    CHECK_MSG(rel <= 1e-4, "logits rel L2 %.3g", rel);
    CHECK(den > 0);
    /* the sharded copy: cpt's forward gives exactly the single file's logits; transformers' (the fixture was made
     * with SHARDED_DIR) equal its own on the single file, so they match cpt's as closely as above */
    cpt_model *sm = cpt_model_load(SHARDED_DIR, &err);
    CHECK_MSG(sm != NULL, "loading " SHARDED_DIR ": %s", err.msg);
    if (sm) {
        float *sg = malloc((size_t)B * T * V * 4);
        cpt_forward_out so = {.logits = sg};
        CHECK_EQ_INT(cpt_model_forward(sm, &b, &so, 0, &err), 0);
        CHECK(memcmp(sg, got, (size_t)B * T * V * 4) == 0);
        /* transformers loaded the sharded folder through its index (make_export_check.py on the GPU machine) */
        const cpt_st_tensor *ls = cpt_st_find(fx, "logits_sharded");
        CHECK_MSG(ls != NULL, "%s: no logits_sharded (make_export_check.py ... " SHARDED_DIR ")", LOGITS);
        if (ls) {
            CHECK(cpt_st_read_f32(ls, ref, (size_t)B * T * V, &err) == 0);
            double n2 = 0;
            for (size_t i = 0; i < (size_t)B * T * V; i++) n2 += ((double)sg[i] - ref[i]) * ((double)sg[i] - ref[i]);
            printf("sharded export: logits rel L2 vs transformers %.3g\n", sqrt(n2 / (den > 0 ? den : 1)));
            CHECK(sqrt(n2 / (den > 0 ? den : 1)) <= 1e-4);
        }
        free(sg);
        cpt_model_free(sm);
    }
    free(tg);
    free(ss);
    free(ref);
    free(got);
    /* the exported tokenizer encodes as transformers' AutoTokenizer did */
    const cpt_st_tensor *tt = cpt_st_find(fx, "text_ids");
    const char *text = cpt_st_metadata(fx, "text");
    const char *tok_err = cpt_st_metadata(fx, "tokenizer_error");
    CHECK_MSG(tt != NULL && text != NULL, "transformers did not load the tokenizer of " EXPORT_DIR ": %s",
              tok_err ? tok_err : "(no tokenizer files)");
    if (tt && text) {
        cpt_tokenizer *tok = cpt_tokenizer_load(EXPORT_DIR, &err);
        CHECK_MSG(tok != NULL, "%s", err.msg);
        int32_t *ids = NULL;
        long n = tok ? cpt_tokenizer_encode(tok, text, strlen(text), &ids, &err) : -1;
        CHECK_EQ_INT(n, tt->shape[0]);
        if (n == tt->shape[0]) CHECK(memcmp(ids, tt->data, (size_t)n * 4) == 0);
        free(ids);
        cpt_tokenizer_free(tok);
    }
out:
    cpt_model_free(m);
    cpt_st_close(fx);
}

static void check_export_command(void) {
    cpt_err err;
    char run[] = "/tmp/cpt-test-export-XXXXXX";
    CHECK(mkdtemp(run) != NULL);
    cpt_model_config mc = {.arch = CPT_ARCH_QWEN2, .vocab_size = 40, .hidden_size = 16, .intermediate_size = 32,
                           .num_layers = 2, .num_heads = 4, .num_kv_heads = 2, .head_dim = 4, .rms_norm_eps = 1e-6f,
                           .rope_theta = 10000.0f, .tie_word_embeddings = 0, .qkv_bias = 1,
                           .max_position_embeddings = 64, .bos_token_id = -1, .eos_token_id = -1};
    cpt_model *m = cpt_model_new_random(&mc, 3, &err);
    CHECK_MSG(m != NULL, "%s", err.msg);
    if (!m) return;
    cpt_train_state st = {.step = 7, .weight_version = 7};
    char tokdir[256];
    snprintf(tokdir, sizeof tokdir, "%s/tok", run);
    CHECK_EQ_INT(cpt_mkdir_p(tokdir, 0755, &err), 0);
    char tj[300];
    snprintf(tj, sizeof tj, "%s/tokenizer.json", tokdir);
    CHECK_EQ_INT(cpt_write_file_atomic(tj, "{\"model\": {}}", 13, &err), 0);
    cpt_ckpt_save_args a = {.run_dir = run, .model = m, .state = &st, .tokenizer_path = tokdir, .keep_last = 1};
    char ck[CPT_CKPT_PATH_MAX + 64], out[300], p[400];
    CHECK_EQ_INT(cpt_ckpt_save(&a, ck, sizeof ck, &err), 0);
    snprintf(out, sizeof out, "%s/hf", run);
    CHECK_EQ_INT(cpt_export_hf(run, out, 0, 0, &err), 0);
    snprintf(p, sizeof p, "%s/config.json", out);
    CHECK(cpt_path_exists(p));
    snprintf(p, sizeof p, "%s/tokenizer.json", out);
    CHECK(cpt_path_exists(p));
    cpt_model *e = cpt_model_load(out, &err);
    CHECK_MSG(e != NULL, "%s", err.msg);
    int same = e && cpt_model_num_params(e) == cpt_model_num_params(m);
    for (size_t i = 0; same && i < cpt_model_num_params(m); i++) {
        cpt_param *pm = cpt_model_param(m, i), *pe = cpt_model_find_param(e, pm->name);
        same = pe && pe->numel == pm->numel && !memcmp(pe->data, pm->data, pm->numel * 4);
    }
    CHECK(same);
    cpt_model_free(e);
    /* OUT_DIR with content: refused */
    CHECK_EQ_INT(cpt_export_hf(ck, out, 0, 0, &err), -1);
    CHECK(strstr(err.msg, "not an empty folder") != NULL);
    /* a temporary folder a crashed export of the same pid left, holding a stale whole-model file: cleared, so the
     * sharded export holds only its own files */
    char stale[400], hf3[300];
    snprintf(hf3, sizeof hf3, "%s/hf3", run);
    snprintf(stale, sizeof stale, "%s.tmp-%ld", hf3, (long)getpid());
    CHECK_EQ_INT(cpt_mkdir_p(stale, 0700, &err), 0);
    snprintf(p, sizeof p, "%s/model.safetensors", stale);
    CHECK_EQ_INT(cpt_write_file_atomic(p, "stale", 5, &err), 0);
    CHECK_MSG(cpt_export_hf(ck, hf3, 0, 600, &err) == 0, "%s", err.msg);
    snprintf(p, sizeof p, "%s/model.safetensors", hf3);
    CHECK_MSG(!cpt_path_exists(p), "a crashed export's model.safetensors was shipped with the new export");
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", hf3);
    CHECK(cpt_path_exists(p));
    cpt_model *e3 = cpt_model_load(hf3, &err);
    CHECK_MSG(e3 && !memcmp(cpt_model_data(e3), cpt_model_data(m), cpt_model_numel(m) * 4), "%s", err.msg);
    cpt_model_free(e3);
    /* an export that fails after it began writing (a tokenizer file it cannot copy: a folder in its place) leaves
     * neither its temporary folder nor the parent folders it made */
    char bad[400], deep[400], np[300];
    snprintf(bad, sizeof bad, "%s/model/merges.txt", ck);
    CHECK_EQ_INT(cpt_mkdir_p(bad, 0700, &err), 0);
    snprintf(np, sizeof np, "%s/np", run);
    snprintf(deep, sizeof deep, "%s/a/b/out", np);
    CHECK_EQ_INT(cpt_export_hf(ck, deep, 0, 0, &err), -1);
    CHECK_MSG(!cpt_path_exists(np), "a failed export left %s (%s)", np, err.msg);
    CHECK_EQ_INT(rmdir(bad), 0);
    /* a corrupt checkpoint: refused, nothing written */
    snprintf(p, sizeof p, "%s/model/model.safetensors", ck);
    FILE *f = fopen(p, "r+b");
    if (f) {
        fseek(f, -3, SEEK_END);
        fputc('x', f);
        fclose(f);
    }
    snprintf(out, sizeof out, "%s/hf2", run);
    CHECK_EQ_INT(cpt_export_hf(ck, out, 0, 0, &err), -1);
    CHECK(strstr(err.msg, "checksum") != NULL);
    CHECK(!cpt_path_exists(out));
    cpt_model_free(m);
    cpt_remove_tree(run, &err);
}

/* Logits of a model on fixed ids. */
static float *logits_of(cpt_model *m, int n) {
    int32_t ids[8] = {1, 5, 9, 3, 0, 7, 2, 4}, tg[8], ss[2] = {0, 8};
    for (int i = 0; i < 8; i++) tg[i] = -1;
    float *out = calloc((size_t)8 * n, 4);
    cpt_err err;
    cpt_batch b = {.n_tokens = 8, .n_seqs = 1, .tokens = ids, .seq_start = ss, .targets = tg};
    cpt_forward_out fo = {.logits = out};
    CHECK_EQ_INT(cpt_model_forward(m, &b, &fo, 0, &err), 0);
    return out;
}

/* issue 24: a checkpoint and an export cut into shards (model-0000K-of-0000N.safetensors + index) load back bitwise
 * and give the logits of the single-file export exactly. */
static void check_sharded(void) {
    cpt_err err;
    char run[] = "/tmp/cpt-test-export-shards-XXXXXX";
    CHECK(mkdtemp(run) != NULL);
    cpt_model_config mc = {.arch = CPT_ARCH_QWEN2, .vocab_size = 40, .hidden_size = 16, .intermediate_size = 32,
                           .num_layers = 2, .num_heads = 4, .num_kv_heads = 2, .head_dim = 4, .rms_norm_eps = 1e-6f,
                           .rope_theta = 10000.0f, .tie_word_embeddings = 0, .qkv_bias = 1,
                           .max_position_embeddings = 64, .bos_token_id = -1, .eos_token_id = -1};
    cpt_model *m = cpt_model_new_random(&mc, 5, &err);
    CHECK_MSG(m != NULL, "%s", err.msg);
    if (!m) return;
    cpt_train_state st = {.step = 3, .weight_version = 3};
    cpt_ckpt_save_args a = {.run_dir = run, .model = m, .state = &st, .keep_last = 1, .max_shard_bytes = 2048};
    char ck[CPT_CKPT_PATH_MAX + 64], one[300], many[300], p[400];
    CHECK_EQ_INT(cpt_ckpt_save(&a, ck, sizeof ck, &err), 0);
    snprintf(p, sizeof p, "%s/model/model.safetensors.index.json", ck);
    CHECK_MSG(cpt_path_exists(p), "checkpoint model not sharded");
    /* resume: the sharded checkpoint loads bitwise into a model of the same shape */
    cpt_model *r = cpt_model_new_random(&mc, 99, &err);
    cpt_train_state rs = {0};
    CHECK_EQ_INT(cpt_ckpt_load(ck, r, NULL, &rs, &err), 0);
    CHECK(r && !memcmp(cpt_model_data(r), cpt_model_data(m), cpt_model_numel(m) * 4));
    cpt_train_state_free(&rs);
    cpt_model_free(r);
    snprintf(one, sizeof one, "%s/one", run);
    snprintf(many, sizeof many, "%s/many", run);
    CHECK_EQ_INT(cpt_export_hf(ck, one, 0, 0, &err), 0);
    CHECK_EQ_INT(cpt_export_hf(ck, many, 0, 1500, &err), 0);
    int shards = 0;
    cpt_st_file *f = cpt_st_open(many, &err);
    CHECK_MSG(f != NULL, "%s", err.msg);
    if (f) {
        for (size_t i = 0; i < cpt_st_count(f); i++) { /* distinct files */
            const char *file = cpt_st_tensor_file(f, cpt_st_at(f, i));
            size_t j = 0;
            while (j < i && strcmp(cpt_st_tensor_file(f, cpt_st_at(f, j)), file)) j++;
            shards += j == i;
        }
        CHECK_EQ_INT((int)cpt_st_count(f), (int)cpt_model_num_params(m));
        cpt_st_close(f);
    }
    CHECK_MSG(shards >= 3, "%d shards", shards);
    cpt_model *e1 = cpt_model_load(one, &err), *e2 = cpt_model_load(many, &err);
    CHECK_MSG(e1 && e2, "%s", err.msg);
    if (e1 && e2) {
        float *l1 = logits_of(e1, mc.vocab_size), *l2 = logits_of(e2, mc.vocab_size);
        CHECK(memcmp(l1, l2, (size_t)8 * mc.vocab_size * 4) == 0);
        float s = 0;
        for (int i = 0; i < 8 * mc.vocab_size; i++) s += l1[i] * l1[i];
        CHECK(s > 0);
        free(l1);
        free(l2);
    }
    cpt_model_free(e1);
    cpt_model_free(e2);
    cpt_model_free(m);
    cpt_remove_tree(run, &err);
}

int main(void) {
    check_export_command();
    check_sharded();
    check_fixture();
    return check_summary("test_export_hf");
}
