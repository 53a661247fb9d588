/* safetensors: writer -> reader round trip of every dtype, the file made by the stdlib Python script in the
 * safetensors package's layout, a sharded folder, typed reads, writer errors. */
#include <dirent.h>
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/checksum.h"
#include "core/fs.h"
#include "core/safetensors.h"
#include "tests/check.h"

static char tmpdir[256];

static const char *src_path(const char *rel) {
    static char buf[4096];
    const char *root = getenv("CPT_SRC");
    snprintf(buf, sizeof buf, "%s/%s", root ? root : ".", rel);
    return buf;
}

static int count_entries(const char *dir) {
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (e->d_name[0] != '.') n++;
    if (d) closedir(d);
    return n;
}

static void test_round_trip(void) {
    /* one tensor per dtype, with odd sizes so nothing lands aligned by accident */
    static const cpt_dtype dts[] = {CPT_DT_F32, CPT_DT_BF16, CPT_DT_F16, CPT_DT_I32, CPT_DT_I64, CPT_DT_U8, CPT_DT_F64};
    static const char *names[] = {"z.f32", "y.bf16", "x.f16", "w.i32", "v.i64", "u.u8", "t.f64"};
    unsigned char *bufs[7];
    int64_t shapes[7][3];
    cpt_err err = {{0}};
    cpt_st_writer *w = cpt_st_writer_new();
    for (int i = 0; i < 7; i++) {
        shapes[i][0] = 3 + i;
        shapes[i][1] = 5;
        shapes[i][2] = 1 + (i % 2);
        size_t nb = (size_t)(shapes[i][0] * shapes[i][1] * shapes[i][2]) * cpt_dtype_size(dts[i]);
        bufs[i] = malloc(nb);
        for (size_t k = 0; k < nb; k++) bufs[i][k] = (unsigned char)(k * 131 + i * 7 + 1);
        CHECK(cpt_st_writer_add(w, names[i], dts[i], 3, shapes[i], bufs[i], &err) == 0);
    }
    float scalar = 7.25f;
    CHECK(cpt_st_writer_add_copy(w, "scalar", CPT_DT_F32, 0, NULL, &scalar, &err) == 0);
    scalar = 0; /* the copy must not see this */
    int64_t zero_shape[2] = {0, 4};
    CHECK(cpt_st_writer_add(w, "empty", CPT_DT_BF16, 2, zero_shape, NULL, &err) == 0);
    CHECK(cpt_st_writer_meta(w, "format", "pt", &err) == 0);
    CHECK(cpt_st_writer_meta(w, "step", "1", &err) == 0);
    CHECK(cpt_st_writer_meta(w, "step", "12", &err) == 0); /* replaces */
    CHECK(cpt_st_writer_meta(w, "quote\"d", "tab\there", &err) == 0);
    char path[512];
    snprintf(path, sizeof path, "%s/rt.safetensors", tmpdir);
    CHECK_MSG(cpt_st_writer_finish(w, path, &err) == 0, "%s", err.msg);
    CHECK_EQ_INT(count_entries(tmpdir), 1); /* no temp file left behind */

    /* header: length padded to 8, JSON starts with {, metadata first */
    size_t flen;
    char *raw = cpt_read_file(path, &flen, &err);
    CHECK(raw != NULL);
    uint64_t hlen = 0;
    for (int i = 7; raw && i >= 0; i--) hlen = (hlen << 8) | (unsigned char)raw[i];
    CHECK_EQ_INT(hlen % 8, 0);
    CHECK(raw && raw[8] == '{');
    CHECK(raw && strncmp(raw + 8, "{\"__metadata__\"", 15) == 0);
    free(raw);

    cpt_st_file *f = cpt_st_open(path, &err);
    CHECK_MSG(f != NULL, "%s", err.msg);
    if (!f) return;
    CHECK_EQ_INT(cpt_st_count(f), 9);
    for (size_t i = 1; i < cpt_st_count(f); i++) CHECK(strcmp(cpt_st_at(f, i - 1)->name, cpt_st_at(f, i)->name) < 0);
    CHECK(cpt_st_at(f, 9) == NULL);
    for (int i = 0; i < 7; i++) {
        const cpt_st_tensor *t = cpt_st_find(f, names[i]);
        CHECK(t != NULL);
        if (!t) continue;
        CHECK_EQ_INT(t->dtype, dts[i]);
        CHECK_EQ_INT(t->ndim, 3);
        CHECK_EQ_INT(t->shape[0], shapes[i][0]);
        CHECK_EQ_INT(t->shape[2], shapes[i][2]);
        size_t nb = (size_t)(shapes[i][0] * shapes[i][1] * shapes[i][2]) * cpt_dtype_size(dts[i]);
        CHECK_EQ_INT(t->nbytes, nb);
        CHECK(memcmp(t->data, bufs[i], nb) == 0);
    }
    /* contiguous from offset 0 to the end of the file (what the Rust safetensors reader requires), widest dtype
     * first then by name, so every tensor is aligned to its element size */
    {
        const cpt_st_tensor *by_off[16];
        size_t nt = cpt_st_count(f);
        for (size_t i = 0; i < nt; i++) by_off[i] = cpt_st_at(f, i);
        for (size_t i = 1; i < nt; i++) /* insertion sort by address */
            for (size_t k = i; k > 0 && (const char *)by_off[k]->data < (const char *)by_off[k - 1]->data; k--) {
                const cpt_st_tensor *tmp = by_off[k]; by_off[k] = by_off[k - 1]; by_off[k - 1] = tmp;
            }
        const char *start = (const char *)by_off[0]->data;
        CHECK_EQ_INT((uintptr_t)start % 8, 0);
        CHECK_EQ_STR(by_off[0]->name, "t.f64");
        CHECK_EQ_STR(by_off[1]->name, "v.i64");
        CHECK_EQ_STR(by_off[2]->name, "scalar"); /* F32 and I32 by name: scalar, w.i32, z.f32 */
        CHECK_EQ_STR(by_off[nt - 1]->name, "u.u8");
        for (size_t i = 0; i < nt; i++) {
            CHECK_EQ_INT((uintptr_t)by_off[i]->data % cpt_dtype_size(by_off[i]->dtype), 0);
            if (i) CHECK((const char *)by_off[i]->data == (const char *)by_off[i - 1]->data + by_off[i - 1]->nbytes);
            if (i) CHECK(cpt_dtype_size(by_off[i]->dtype) <= cpt_dtype_size(by_off[i - 1]->dtype));
        }
        CHECK_EQ_INT((const char *)by_off[nt - 1]->data + by_off[nt - 1]->nbytes - start + 8 + (long long)hlen, flen);
    }
    const cpt_st_tensor *s = cpt_st_find(f, "scalar");
    CHECK(s && s->ndim == 0 && s->nbytes == 4 && cpt_st_numel(s) == 1);
    float got = 0;
    CHECK(s && cpt_st_read_f32(s, &got, 1, &err) == 0 && got == 7.25f);
    const cpt_st_tensor *e = cpt_st_find(f, "empty");
    CHECK(e && e->nbytes == 0 && cpt_st_numel(e) == 0 && e->shape[1] == 4);
    CHECK(e && cpt_st_read_f32(e, NULL, 0, &err) == 0);
    CHECK(cpt_st_find(f, "nope") == NULL);
    CHECK(cpt_st_find(f, "") == NULL);
    CHECK_EQ_STR(cpt_st_metadata(f, "format"), "pt");
    CHECK_EQ_STR(cpt_st_metadata(f, "step"), "12");
    CHECK_EQ_STR(cpt_st_metadata(f, "quote\"d"), "tab\there");
    CHECK(cpt_st_metadata(f, "absent") == NULL);
    CHECK_EQ_INT(cpt_st_metadata_count(f), 3);
    CHECK_EQ_STR(cpt_st_tensor_file(f, s), path);

    /* read_f32 converts; wrong element counts are errors naming the tensor */
    const cpt_st_tensor *tb = cpt_st_find(f, "y.bf16");
    size_t n = cpt_st_numel(tb);
    float *vals = malloc(n * sizeof *vals);
    CHECK(cpt_st_read_f32(tb, vals, n, &err) == 0);
    uint16_t h0;
    memcpy(&h0, bufs[1], 2);
    CHECK(vals[0] == cpt_bf16_to_f32(h0));
    CHECK(cpt_st_read_f32(tb, vals, n - 1, &err) == -1);
    CHECK(strstr(err.msg, "y.bf16") != NULL);
    uint16_t *bf = malloc(n * sizeof *bf);
    CHECK(cpt_st_read_bf16(tb, bf, n, &err) == 0 && memcmp(bf, bufs[1], n * 2) == 0);
    const cpt_st_tensor *ti = cpt_st_find(f, "w.i32");
    CHECK(cpt_st_read_bf16(ti, bf, cpt_st_numel(ti), &err) == -1 && strstr(err.msg, "w.i32"));
    const cpt_st_tensor *tu = cpt_st_find(f, "u.u8");
    float *u8 = malloc(cpt_st_numel(tu) * sizeof *u8);
    CHECK(cpt_st_read_f32(tu, u8, cpt_st_numel(tu), &err) == 0 && u8[1] == (float)bufs[5][1]);
    free(u8);
    free(bf);
    free(vals);
    cpt_st_close(f);

    /* finishing over an existing file replaces it whole */
    w = cpt_st_writer_new();
    int64_t one = 1;
    CHECK(cpt_st_writer_add(w, "only", CPT_DT_U8, 1, &one, "Q", &err) == 0);
    uint64_t sum = 0, sum_bytes = 0, file_sum = 1, file_bytes = 0;
    CHECK(cpt_st_writer_finish_checksum(w, path, &sum, &sum_bytes, &err) == 0);
    CHECK(cpt_checksum_file(path, &file_sum, &file_bytes, &err) == 0);
    CHECK(sum == file_sum && sum_bytes == file_bytes && file_bytes == 8 + 56 + 1); /* the 56-byte header needs no padding */
    f = cpt_st_open(path, &err);
    CHECK(f && cpt_st_count(f) == 1 && *(const char *)cpt_st_at(f, 0)->data == 'Q' && cpt_st_metadata_count(f) == 0);
    cpt_st_close(f);
    for (int i = 0; i < 7; i++) free(bufs[i]);
}

static double expected_value(json_t *v) {
    if (json_is_string(v)) return strcmp(json_string_value(v), "inf") == 0 ? INFINITY : -INFINITY;
    return json_number_value(v);
}

static void test_python_fixture(void) {
    cpt_err err = {{0}};
    json_error_t je;
    json_t *exp = json_load_file(src_path("tests/fixtures/safetensors/tiny.expected.json"), 0, &je);
    CHECK_MSG(exp != NULL, "%s", je.text);
    cpt_st_file *f = cpt_st_open(src_path("tests/fixtures/safetensors/tiny.safetensors"), &err);
    CHECK_MSG(f != NULL, "%s", err.msg);
    if (!f || !exp) return;
    json_t *tensors = json_object_get(exp, "tensors");
    CHECK_EQ_INT(cpt_st_count(f), json_object_size(tensors));
    CHECK_EQ_STR(cpt_st_metadata(f, "format"), "pt");
    CHECK_EQ_STR(cpt_st_metadata(f, "made_by"), "make_safetensors_fixture.py");
    const char *name;
    json_t *want;
    int value_mismatch = 0, compared = 0;
    json_object_foreach(tensors, name, want) {
        const cpt_st_tensor *t = cpt_st_find(f, name);
        CHECK_MSG(t != NULL, "tensor %s", name);
        if (!t) continue;
        CHECK_EQ_STR(cpt_dtype_name(t->dtype), json_string_value(json_object_get(want, "dtype")));
        json_t *shape = json_object_get(want, "shape");
        CHECK_EQ_INT(t->ndim, json_array_size(shape));
        for (int d = 0; d < t->ndim; d++) CHECK_EQ_INT(t->shape[d], json_integer_value(json_array_get(shape, d)));
        json_t *vals = json_object_get(want, "values");
        size_t n = cpt_st_numel(t);
        CHECK_EQ_INT(n, json_array_size(vals));
        float *got = malloc((n ? n : 1) * sizeof *got);
        CHECK(cpt_st_read_f32(t, got, n, &err) == 0);
        for (size_t i = 0; i < n; i++, compared++) {
            double w = expected_value(json_array_get(vals, i));
            if ((double)got[i] != w) {
                if (value_mismatch++ < 5) fprintf(stderr, "%s[%zu]: %.9g != %.9g\n", name, i, got[i], w);
            }
        }
        free(got);
    }
    CHECK_EQ_INT(value_mismatch, 0);
    CHECK(compared > 1000);

    /* CPython's struct 'e' packed these f32 inputs into f16 (round to nearest even): ours must agree bit for bit */
    const cpt_st_tensor *src = cpt_st_find(f, "f16.src"), *dst = cpt_st_find(f, "f16.dst");
    json_t *bits = json_object_get(exp, "f16_bits");
    int f16_bad = 0;
    if (src && dst) {
        size_t n = cpt_st_numel(src);
        CHECK_EQ_INT(n, json_array_size(bits));
        float *in = malloc(n * sizeof *in);
        cpt_st_read_f32(src, in, n, &err);
        for (size_t i = 0; i < n; i++) {
            uint16_t mine = cpt_f32_to_f16(in[i]), stored;
            memcpy(&stored, (const char *)dst->data + 2 * i, 2);
            if (mine != stored || stored != json_integer_value(json_array_get(bits, i))) f16_bad++;
        }
        free(in);
    }
    CHECK_EQ_INT(f16_bad, 0);

    /* the data are not in name order in this layout: the reader must not assume they are */
    const cpt_st_tensor *emb = cpt_st_find(f, "model.embed_tokens.weight"), *dbl = cpt_st_find(f, "dbl");
    CHECK(emb && dbl && (const char *)dbl->data < (const char *)emb->data);
    cpt_st_close(f);
    json_decref(exp);
}

static void test_sharded(void) {
    cpt_err err = {{0}};
    const char *dir = src_path("tests/fixtures/safetensors/sharded");
    char dirbuf[4096];
    snprintf(dirbuf, sizeof dirbuf, "%s", dir);
    cpt_st_file *f = cpt_st_open(dirbuf, &err);
    CHECK_MSG(f != NULL, "%s", err.msg);
    if (!f) return;
    CHECK_EQ_INT(cpt_st_count(f), 4);
    CHECK_EQ_STR(cpt_st_at(f, 0)->name, "a.weight");
    CHECK_EQ_STR(cpt_st_at(f, 3)->name, "lm_head.weight");
    size_t total = 0;
    for (size_t i = 0; i < cpt_st_count(f); i++) total += cpt_st_at(f, i)->nbytes;
    char tot[32];
    snprintf(tot, sizeof tot, "%zu", total);
    CHECK_EQ_STR(cpt_st_metadata(f, "total_size"), tot);
    CHECK_EQ_STR(cpt_st_metadata(f, "format"), "pt"); /* from the shards */
    const cpt_st_tensor *c = cpt_st_find(f, "c.weight");
    CHECK(c && strstr(cpt_st_tensor_file(f, c), "model-00002-of-00002.safetensors"));
    /* each tensor's bytes equal those of the shard opened on its own */
    char shard[4200];
    snprintf(shard, sizeof shard, "%s/model-00002-of-00002.safetensors", dirbuf);
    cpt_st_file *one = cpt_st_open(shard, &err);
    CHECK(one && cpt_st_count(one) == 2);
    const cpt_st_tensor *c1 = one ? cpt_st_find(one, "c.weight") : NULL;
    CHECK(c && c1 && c->nbytes == 16 && memcmp(c->data, c1->data, 16) == 0);
    cpt_st_close(one);
    cpt_st_close(f);
    /* the index path itself opens the same set */
    char idx[4200];
    snprintf(idx, sizeof idx, "%s/model.safetensors.index.json", dirbuf);
    f = cpt_st_open(idx, &err);
    CHECK(f && cpt_st_count(f) == 4);
    cpt_st_close(f);
}

static void test_writer_errors(void) {
    cpt_err err = {{0}};
    char path[512];
    snprintf(path, sizeof path, "%s/bad.safetensors", tmpdir);
    int64_t shape[2] = {2, 2}, neg[1] = {-3}, huge[3] = {INT64_MAX / 2, 4, 4};
    float data[4] = {1, 2, 3, 4};
    cpt_st_writer *w = cpt_st_writer_new();
    CHECK(cpt_st_writer_add(w, "", CPT_DT_F32, 2, shape, data, &err) == -1 && strstr(err.msg, "empty"));
    CHECK(cpt_st_writer_add(w, "__metadata__", CPT_DT_F32, 2, shape, data, &err) == -1 && strstr(err.msg, "reserved"));
    CHECK(cpt_st_writer_add(w, "n", CPT_DT_F32, 1, neg, data, &err) == -1 && strstr(err.msg, "\"n\""));
    CHECK(cpt_st_writer_add(w, "h", CPT_DT_F32, 3, huge, data, &err) == -1 && strstr(err.msg, "overflow"));
    CHECK(cpt_st_writer_add(w, "d", CPT_DT_F32, 9, shape, data, &err) == -1 && strstr(err.msg, "dimensions"));
    CHECK(cpt_st_writer_add(w, "nodata", CPT_DT_F32, 2, shape, NULL, &err) == -1 && strstr(err.msg, "nodata"));
    CHECK(cpt_st_writer_add(w, "bad\xff", CPT_DT_F32, 2, shape, data, &err) == -1 && strstr(err.msg, "UTF-8"));
    CHECK(cpt_st_writer_add(w, "t", (cpt_dtype)99, 2, shape, data, &err) == -1 && strstr(err.msg, "dtype"));
    CHECK(cpt_st_writer_add(w, "same", CPT_DT_F32, 2, shape, data, &err) == 0);
    CHECK(cpt_st_writer_add(w, "same", CPT_DT_F32, 2, shape, data, &err) == 0);
    int before = count_entries(tmpdir);
    CHECK(cpt_st_writer_finish(w, path, &err) == -1);
    CHECK(strstr(err.msg, "\"same\"") && strstr(err.msg, "twice"));
    CHECK_EQ_INT(count_entries(tmpdir), before); /* nothing written */
    w = cpt_st_writer_new();
    CHECK(cpt_st_writer_add(w, "x", CPT_DT_F32, 2, shape, data, &err) == 0);
    CHECK(cpt_st_writer_finish(w, "/nonexistent-dir-cpt/x.safetensors", &err) == -1);
    CHECK(strstr(err.msg, "/nonexistent-dir-cpt/x.safetensors") != NULL);
    cpt_st_writer_free(NULL);
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/cpt-test-st-XXXXXX");
    if (!mkdtemp(tmpdir)) { perror("mkdtemp"); return 1; }
    test_round_trip();
    test_python_fixture();
    test_sharded();
    test_writer_errors();
    cpt_remove_tree(tmpdir, NULL);
    return check_summary("test_safetensors");
}
