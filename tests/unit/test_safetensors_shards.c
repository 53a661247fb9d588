/* Sharded safetensors output (issue 24): the shard plan and the size parsing as pure functions, with 64-bit sizes
 * far past what a test can allocate (tensors of 3e9 and 2^62 bytes: no 32-bit wrap); the writer's shards and index
 * (every tensor once, in the order added, total_size the sum) read back through cpt_st_open; one shard is a plain
 * model.safetensors; a failing shard leaves no file behind. */
#include <jansson.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/fs.h"
#include "core/safetensors.h"
#include "tests/check.h"

static void check_parse(void) {
    cpt_err err;
    uint64_t v = 0;
    CHECK(cpt_parse_byte_size("5GB", &v, &err) == 0 && v == 5000000000ULL);
    CHECK(cpt_parse_byte_size("500MB", &v, &err) == 0 && v == 500000000ULL);
    CHECK(cpt_parse_byte_size("2GiB", &v, &err) == 0 && v == 2147483648ULL);
    CHECK(cpt_parse_byte_size("1048576", &v, &err) == 0 && v == 1048576ULL);
    CHECK(cpt_parse_byte_size("1.5GB", &v, &err) == 0 && v == 1500000000ULL);
    CHECK(cpt_parse_byte_size("20kb", &v, &err) == 0 && v == 20000ULL);
    CHECK(cpt_parse_byte_size("3 TiB", &v, &err) == 0 && v == 3ULL << 40);
    CHECK(cpt_parse_byte_size("9223372036854775807", &v, &err) == 0 && v == 9223372036854775807ULL);
    CHECK_EQ_INT(cpt_parse_byte_size("5XB", &v, &err), -1);
    CHECK(strstr(err.msg, "unknown unit \"XB\"") != NULL);
    CHECK_EQ_INT(cpt_parse_byte_size("", &v, &err), -1);
    CHECK_EQ_INT(cpt_parse_byte_size("GB", &v, &err), -1);
    CHECK_EQ_INT(cpt_parse_byte_size("0", &v, &err), -1);
    CHECK_EQ_INT(cpt_parse_byte_size("-5GB", &v, &err), -1);
    CHECK_EQ_INT(cpt_parse_byte_size("99999999TB", &v, &err), -1);
    CHECK(strstr(err.msg, "too large") != NULL);
    CHECK_EQ_INT(cpt_parse_byte_size("18446744073709551617", &v, &err), -1);
}

static void check_plan(void) {
    size_t s[8];
    uint64_t a[] = {10, 10, 10};
    CHECK_EQ_INT(cpt_st_shard_plan(a, 3, 25, s), 2);
    CHECK(s[0] == 0 && s[1] == 0 && s[2] == 1);
    CHECK_EQ_INT(cpt_st_shard_plan(a, 3, 20, s), 2); /* exactly full: 10 + 10 fits 20 */
    CHECK(s[0] == 0 && s[1] == 0 && s[2] == 1);
    CHECK_EQ_INT(cpt_st_shard_plan(a, 3, 0, s), 1); /* no limit */
    CHECK_EQ_INT(cpt_st_shard_plan(a, 0, 5, s), 0);
    uint64_t big[] = {4, 100, 4, 4}; /* a tensor over the limit gets a shard of its own, never split */
    CHECK_EQ_INT(cpt_st_shard_plan(big, 4, 10, s), 3);
    CHECK(s[0] == 0 && s[1] == 1 && s[2] == 2 && s[3] == 2);
    /* 7B-shape sizes: an embedding of 152064 x 3584 fp32 = 2.18e9 bytes (past 2^31) and 5 GB shards */
    uint64_t emb = 152064ULL * 3584 * 4, mlp = 18944ULL * 3584 * 4;
    uint64_t q[] = {emb, mlp, mlp, mlp, emb};
    CHECK_EQ_INT(cpt_st_shard_plan(q, 5, 5000000000ULL, s), 2); /* 2.99e9 | 2.18e9 */
    CHECK(s[0] == 0 && s[1] == 0 && s[2] == 0 && s[3] == 0 && s[4] == 1);
    /* near 2^64: "used + next" would wrap in 64 bits (2^63 + 2^63 = 0) and put all three in one shard */
    uint64_t huge[] = {1ULL << 63, 1ULL << 63, 1ULL << 63};
    CHECK_EQ_INT(cpt_st_shard_plan(huge, 3, UINT64_MAX, s), 3);
    CHECK(s[0] == 0 && s[1] == 1 && s[2] == 2);
    uint64_t fit[] = {1ULL << 62, 1ULL << 62, 1ULL << 62};
    CHECK_EQ_INT(cpt_st_shard_plan(fit, 3, 1ULL << 63, s), 2);
    CHECK(s[0] == 0 && s[1] == 0 && s[2] == 1);
    uint64_t x[] = {3000000000ULL, 3000000000ULL}; /* each past 2^31, together past 2^32 */
    CHECK_EQ_INT(cpt_st_shard_plan(x, 2, 5000000000ULL, s), 2);
    char name[64];
    cpt_st_shard_name(name, sizeof name, 1, 5);
    CHECK(strcmp(name, "model-00002-of-00005.safetensors") == 0);
}

#define NT 6
static const char *names[NT] = {"z.embed", "a.norm", "m.q", "m.k", "b.bias", "y.head"};
static const int64_t lens[NT] = {64, 8, 32, 32, 4, 64}; /* floats */

static cpt_st_writer *make_writer(float **bufs) {
    cpt_err err;
    cpt_st_writer *w = cpt_st_writer_new();
    CHECK_EQ_INT(cpt_st_writer_meta(w, "format", "pt", &err), 0);
    for (int i = 0; i < NT; i++) {
        bufs[i] = malloc((size_t)lens[i] * 4);
        for (int k = 0; k < lens[i]; k++) bufs[i][k] = (float)(i * 1000 + k);
        CHECK_EQ_INT(cpt_st_writer_add(w, names[i], CPT_DT_F32, 1, &lens[i], bufs[i], &err), 0);
    }
    return w;
}

static void free_bufs(float **bufs) {
    for (int i = 0; i < NT; i++) free(bufs[i]);
}

static void check_writer(void) {
    cpt_err err;
    char dir[] = "/tmp/cpt-test-shards-XXXXXX", p[512];
    CHECK(mkdtemp(dir) != NULL);
    float *bufs[NT];
    /* 300 bytes a shard: z.embed 256 + a.norm 32 | m.q 128 + m.k 128 + b.bias 16 | y.head 256 */
    cpt_st_writer *w = make_writer(bufs);
    CHECK_EQ_INT(cpt_st_writer_finish_sharded(w, dir, 300, &err), 0);
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    CHECK(!cpt_path_exists(p));
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir);
    json_error_t je;
    json_t *idx = json_load_file(p, 0, &je);
    CHECK(idx != NULL);
    json_t *wm = json_object_get(idx, "weight_map");
    json_t *meta = json_object_get(idx, "metadata");
    CHECK(json_integer_value(json_object_get(meta, "total_size")) == (64 + 8 + 32 + 32 + 4 + 64) * 4);
    CHECK_EQ_INT((int)json_object_size(wm), NT);
    /* in the order added, not by name */
    const char *want[NT] = {"model-00001-of-00003.safetensors", "model-00001-of-00003.safetensors",
                            "model-00002-of-00003.safetensors", "model-00002-of-00003.safetensors",
                            "model-00002-of-00003.safetensors", "model-00003-of-00003.safetensors"};
    for (int i = 0; i < NT; i++) {
        const char *f = json_string_value(json_object_get(wm, names[i]));
        CHECK_MSG(f && !strcmp(f, want[i]), "%s in %s, want %s", names[i], f ? f : "(none)", want[i]);
    }
    json_decref(idx);
    cpt_st_file *f = cpt_st_open(dir, &err);
    CHECK_MSG(f != NULL, "%s", err.msg);
    if (f) {
        CHECK_EQ_INT((int)cpt_st_count(f), NT);
        for (int i = 0; i < NT; i++) {
            const cpt_st_tensor *t = cpt_st_find(f, names[i]);
            CHECK(t && t->nbytes == (size_t)lens[i] * 4 && !memcmp(t->data, bufs[i], t->nbytes));
        }
        CHECK(cpt_st_metadata(f, "format") && !strcmp(cpt_st_metadata(f, "format"), "pt"));
        cpt_st_close(f);
    }
    free_bufs(bufs);
    CHECK_EQ_INT(cpt_remove_tree(dir, &err), 0);

    /* one shard: model.safetensors, no index */
    CHECK_EQ_INT(mkdir(dir, 0700), 0);
    w = make_writer(bufs);
    CHECK_EQ_INT(cpt_st_writer_finish_sharded(w, dir, 1ULL << 30, &err), 0);
    free_bufs(bufs);
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    CHECK(cpt_path_exists(p));
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir);
    CHECK(!cpt_path_exists(p));
    CHECK_EQ_INT(cpt_remove_tree(dir, &err), 0);

    /* the second shard cannot be written (a non-empty folder in its place): the first is removed, no index */
    CHECK_EQ_INT(mkdir(dir, 0700), 0);
    snprintf(p, sizeof p, "%s/model-00002-of-00003.safetensors/x", dir);
    CHECK_EQ_INT(cpt_mkdir_p(p, 0700, &err), 0);
    w = make_writer(bufs);
    CHECK_EQ_INT(cpt_st_writer_finish_sharded(w, dir, 300, &err), -1);
    free_bufs(bufs);
    CHECK(strstr(err.msg, "model-00002-of-00003.safetensors") != NULL);
    snprintf(p, sizeof p, "%s/model-00001-of-00003.safetensors", dir);
    CHECK(!cpt_path_exists(p));
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir);
    CHECK(!cpt_path_exists(p));
    /* a repeated name is refused before anything is written */
    w = make_writer(bufs);
    CHECK_EQ_INT(cpt_st_writer_add(w, "m.q", CPT_DT_F32, 1, &lens[2], bufs[2], &err), 0);
    CHECK_EQ_INT(cpt_st_writer_finish_sharded(w, dir, 300, &err), -1);
    CHECK(strstr(err.msg, "added twice") != NULL);
    CHECK_EQ_INT(cpt_remove_tree(dir, &err), 0);
    free_bufs(bufs);
}

/* Big shapes without the memory: the writer's header for a 7B-shape embedding in fp32 (2.18e9 bytes, past 2^31)
 * and a 2^32 + 8-byte tensor behind it (offsets past 2^32), then the same header read back from a sparse file of the
 * full size (no data written: the reader maps it and validates offsets, touching one page at the far end). */
static void check_big_header(void) {
    cpt_err err;
    static const float dummy[4];
    cpt_st_writer *w = cpt_st_writer_new();
    int64_t emb[2] = {152064, 3584}, huge[1] = {(1LL << 30) + 2}, small[1] = {4};
    CHECK_EQ_INT(cpt_st_writer_add(w, "model.embed_tokens.weight", CPT_DT_F32, 2, emb, dummy, &err), 0);
    CHECK_EQ_INT(cpt_st_writer_add(w, "x.huge", CPT_DT_F32, 1, huge, dummy, &err), 0);
    CHECK_EQ_INT(cpt_st_writer_add(w, "y.small", CPT_DT_F32, 1, small, dummy, &err), 0);
    size_t hlen = 0;
    char *h = cpt_st_writer_header(w, &hlen, &err);
    CHECK_MSG(h != NULL, "%s", err.msg);
    cpt_st_writer_free(w);
    if (!h) return;
    const uint64_t e_bytes = 152064ULL * 3584 * 4, h_bytes = ((1ULL << 30) + 2) * 4, total = e_bytes + h_bytes + 16;
    char want[128];
    snprintf(want, sizeof want, "\"data_offsets\":[%llu,%llu]", (unsigned long long)e_bytes,
             (unsigned long long)(e_bytes + h_bytes));
    CHECK_MSG(strstr(h, want) != NULL, "%s not in %s", want, h);
    CHECK_EQ_INT((int)((8 + hlen) % 8), 0);
    char path[] = "/tmp/cpt-test-big-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    unsigned char len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
    int ok = write(fd, len8, 8) == 8 && write(fd, h, hlen) == (ssize_t)hlen &&
             ftruncate(fd, (off_t)(8 + hlen + total)) == 0;
    close(fd);
    free(h);
    if (!ok) {
        printf("test_safetensors_shards: no sparse file of %llu bytes here; big header read back not checked\n",
               (unsigned long long)total);
        unlink(path);
        return;
    }
    cpt_st_file *f = cpt_st_open(path, &err);
    CHECK_MSG(f != NULL, "%s", err.msg);
    if (f) {
        const cpt_st_tensor *te = cpt_st_find(f, "model.embed_tokens.weight"), *th = cpt_st_find(f, "x.huge"),
                            *ts = cpt_st_find(f, "y.small");
        CHECK(te && th && ts);
        if (te && th && ts) {
            CHECK((uint64_t)te->nbytes == e_bytes && (uint64_t)th->nbytes == h_bytes);
            CHECK((const char *)th->data - (const char *)te->data == (ptrdiff_t)e_bytes);
            CHECK((const char *)ts->data - (const char *)te->data == (ptrdiff_t)(e_bytes + h_bytes));
            CHECK(cpt_st_numel(th) == (size_t)((1LL << 30) + 2));
            float last;
            CHECK_EQ_INT(cpt_st_read_f32(ts, &last, 1, &err), -1); /* n must equal the count: 4 */
            float four[4] = {1, 1, 1, 1};
            CHECK_EQ_INT(cpt_st_read_f32(ts, four, 4, &err), 0);
            CHECK(four[0] == 0 && four[3] == 0); /* the sparse file reads as zeros, 6.5 GB past the start */
        }
        cpt_st_close(f);
    }
    unlink(path);
}

int main(void) {
    check_big_header();
    check_parse();
    check_plan();
    check_writer();
    return check_summary("test_safetensors_shards");
}
