/* Every malformed safetensors input gives an error naming the file and the tensor, never a crash. Inputs are
 * built in exact-size heap buffers so AddressSanitizer catches any read past the end. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/fs.h"
#include "core/safetensors.h"
#include "tests/check.h"

#define NAME "case.safetensors"

/* 8-byte length + header text + data_len bytes of data. */
static unsigned char *make(const char *header, size_t data_len, size_t *len) {
    size_t h = strlen(header);
    *len = 8 + h + data_len;
    unsigned char *b = malloc(*len);
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)((uint64_t)h >> (8 * i));
    memcpy(b + 8, header, h);
    for (size_t i = 0; i < data_len; i++) b[8 + h + i] = (unsigned char)i;
    return b;
}

/* Expects rejection with every given fragment in the message (and always the file name). */
static void expect_bad(int line, const char *header, size_t data_len, const char *frag1, const char *frag2) {
    size_t len;
    unsigned char *b = make(header, data_len, &len);
    cpt_err err = {{0}};
    cpt_st_file *f = cpt_st_open_memory(b, len, NAME, &err);
    check_count++;
    if (f || !strstr(err.msg, NAME) || (frag1 && !strstr(err.msg, frag1)) || (frag2 && !strstr(err.msg, frag2))) {
        check_failures++;
        fprintf(stderr, "%s:%d: expected rejection with \"%s\" / \"%s\", got %s: %s\n", __FILE__, line,
                frag1 ? frag1 : "", frag2 ? frag2 : "", f ? "accepted" : "error", err.msg);
    }
    cpt_st_close(f);
    free(b);
}

static cpt_st_file *expect_good(int line, const char *header, size_t data_len, size_t ntensors) {
    size_t len;
    unsigned char *b = make(header, data_len, &len);
    cpt_err err = {{0}};
    cpt_st_file *f = cpt_st_open_memory(b, len, NAME, &err);
    check_count++;
    if (!f || cpt_st_count(f) != ntensors) {
        check_failures++;
        fprintf(stderr, "%s:%d: expected %zu tensors, got %s\n", __FILE__, line, ntensors, f ? "other count" : err.msg);
    }
    /* read every tensor fully: ASan checks the pointers stay inside the buffer */
    for (size_t i = 0; f && i < cpt_st_count(f); i++) {
        const cpt_st_tensor *t = cpt_st_at(f, i);
        size_t n = cpt_st_numel(t);
        float *out = malloc((n ? n : 1) * sizeof *out);
        CHECK(cpt_st_read_f32(t, out, n, &err) == 0);
        free(out);
    }
    cpt_st_close(f);
    free(b);
    return NULL;
}

#define BAD(h, d, a, b) expect_bad(__LINE__, h, d, a, b)
#define GOOD(h, d, n) expect_good(__LINE__, h, d, n)
#define T(name, dt, shape, b, e) "\"" name "\":{\"dtype\":\"" dt "\",\"shape\":" shape ",\"data_offsets\":[" #b "," #e "]}"

static void memory_cases(void) {
    cpt_err err = {{0}};
    /* sizes and lengths */
    unsigned char small[5] = {1, 0, 0, 0, 0};
    unsigned char *p = malloc(5);
    memcpy(p, small, 5);
    cpt_st_file *f = cpt_st_open_memory(p, 5, NAME, &err);
    CHECK(!f && strstr(err.msg, NAME) && strstr(err.msg, "truncated"));
    f = cpt_st_open_memory(p, 0, NAME, &err);
    CHECK(!f && strstr(err.msg, "truncated"));
    free(p);
    unsigned char past[10] = {0xe8, 0x03, 0, 0, 0, 0, 0, 0, '{', '}'}; /* says 1000 bytes of header */
    p = malloc(10);
    memcpy(p, past, 10);
    f = cpt_st_open_memory(p, 10, NAME, &err);
    CHECK(!f && strstr(err.msg, "past the end") && strstr(err.msg, "1000"));
    p[5] = 1; /* 2^40 + 1000 */
    f = cpt_st_open_memory(p, 10, NAME, &err);
    CHECK(!f && strstr(err.msg, "absurd"));
    p[5] = 0;
    p[0] = 0; p[1] = 0; /* zero-length header */
    f = cpt_st_open_memory(p, 10, NAME, &err);
    CHECK(!f && strstr(err.msg, "not valid JSON"));
    p[0] = 0xff; p[1] = 0xff; p[2] = 0xff; p[3] = 0xff; p[4] = 0xff; p[5] = 0xff; p[6] = 0xff; p[7] = 0xff;
    f = cpt_st_open_memory(p, 10, NAME, &err); /* 2^64-1: must not wrap around in the bounds check */
    CHECK(!f && strstr(err.msg, "absurd"));
    free(p);

    /* header text */
    BAD("{not json", 0, "not valid JSON", NULL);
    BAD("[1,2]", 0, "not a JSON object", NULL);
    BAD("\"str\"", 0, "not valid JSON", NULL); /* jansson rejects bare scalars */
    BAD("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}} x", 1, "not valid JSON", NULL);
    BAD("{" T("w", "U8", "[1]", 0, 1) "," T("w", "U8", "[1]", 1, 2) "}", 2, "repeated", "\"w\"");
    BAD("{\"w\":{\"dtype\":\"U8\",\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1, "repeated", "\"dtype\"");
    BAD("{\"w\":5}", 0, "\"w\"", "not an object");
    BAD("{\"\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1, "empty name", NULL);
    BAD("{\"__metadata__\":[1]}", 0, "__metadata__", "not an object");
    BAD("{\"__metadata__\":{\"k\":1}}", 0, "\"k\"", "not a string");

    /* entries */
    BAD("{\"w\":{\"shape\":[1],\"data_offsets\":[0,1]}}", 1, "\"w\"", "missing \"dtype\"");
    BAD("{\"w\":{\"dtype\":\"U8\",\"data_offsets\":[0,1]}}", 1, "\"w\"", "missing \"shape\"");
    BAD("{\"w\":{\"dtype\":\"U8\",\"shape\":[1]}}", 1, "\"w\"", "missing \"data_offsets\"");
    BAD("{\"w\":{\"dtype\":7,\"shape\":[1],\"data_offsets\":[0,1]}}", 1, "\"w\"", "not a string");
    BAD("{" T("w", "F8_E4M3", "[1]", 0, 1) "}", 1, "\"w\"", "unsupported dtype \"F8_E4M3\"");
    BAD("{" T("w", "f32", "[1]", 0, 4) "}", 4, "\"w\"", "unsupported dtype");
    BAD("{" T("w", "U8", "\"x\"", 0, 1) "}", 1, "\"w\"", "not an array");
    BAD("{" T("w", "U8", "[1.5]", 0, 1) "}", 1, "\"w\"", "not an integer");
    BAD("{" T("w", "U8", "[true]", 0, 1) "}", 1, "\"w\"", "not an integer");
    BAD("{" T("w", "U8", "[-1]", 0, 1) "}", 1, "\"w\"", "negative");
    BAD("{" T("w", "U8", "[1,1,1,1,1,1,1,1,1]", 0, 1) "}", 1, "\"w\"", "9 dimensions");
    BAD("{" T("w", "F64", "[4294967296,4294967296]", 0, 0) "}", 0, "\"w\"", "overflows");
    BAD("{" T("w", "U8", "[9223372036854775807,3]", 0, 0) "}", 0, "\"w\"", "overflows");
    BAD("{" T("w", "U8", "[99999999999999999999]", 0, 0) "}", 0, "not valid JSON", NULL); /* past int64 */
    BAD("{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0]}}", 1, "\"w\"", "two integers");
    BAD("{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1,2]}}", 2, "\"w\"", "two integers");
    BAD("{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,\"1\"]}}", 1, "\"w\"", "two integers");
    BAD("{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":{\"a\":1}}}", 1, "\"w\"", "two integers");
    BAD("{" T("w", "U8", "[1]", 4, 3) "}", 8, "\"w\"", "out of range");
    BAD("{" T("w", "U8", "[1]", -1, 0) "}", 8, "\"w\"", "out of range");
    BAD("{" T("w", "U8", "[4]", 6, 10) "}", 8, "\"w\"", "out of range (data section is 8 bytes)");
    BAD("{" T("w", "F32", "[2,3]", 0, 20) "}", 24, "\"w\"", "span 20 bytes but F32 [2, 3] needs 24");
    BAD("{" T("w", "BF16", "[3]", 0, 8) "}", 8, "\"w\"", "needs 6");
    BAD("{" T("a", "U8", "[4]", 0, 4) "," T("b", "U8", "[4]", 2, 6) "}", 8, "\"a\"", "\"b\"");
    BAD("{" T("a", "U8", "[4]", 0, 4) "," T("b", "U8", "[4]", 2, 6) "}", 8, "overlap", NULL);
    BAD("{" T("big", "U8", "[8]", 0, 8) "," T("in", "U8", "[2]", 3, 5) "}", 8, "\"in\"", "overlap");
    BAD("{" T("x", "U8", "[2]", 0, 2) "," T("y", "U8", "[6]", 2, 8) "," T("z", "U8", "[2]", 7, 9) "}", 10, "\"z\"",
        "overlap");

    /* accepted: gaps, trailing bytes, zero-size tensors anywhere, padding, any data order, extra fields */
    GOOD("{" T("w", "U8", "[2]", 4, 6) "}", 10, 1);
    GOOD("{" T("e", "F32", "[0,5]", 3, 3) "," T("w", "U8", "[4]", 0, 4) "," T("f", "F32", "[0]", 4, 4) "}      ", 4, 3);
    GOOD("{" T("b", "U8", "[2]", 0, 2) "," T("a", "U8", "[2]", 2, 4) "," T("c", "I32", "[]", 4, 8) "}", 8, 3);
    GOOD("{\"__metadata__\":{\"k\":\"v\"}}", 0, 0);
    GOOD("{}", 0, 0);
    GOOD("{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1],\"extra\":true}}", 1, 1);
}

static void file_cases(void) {
    char dir[] = "/tmp/cpt-test-st-err-XXXXXX";
    if (!mkdtemp(dir)) { perror("mkdtemp"); check_failures++; return; }
    cpt_err err = {{0}};
    char path[512], p2[512];

    /* a bad file on disk: the error names its path and the tensor */
    size_t len;
    unsigned char *b = make("{" T("lm_head.weight", "F32", "[2,3]", 0, 20) "}", 20, &len);
    snprintf(path, sizeof path, "%s/bad.safetensors", dir);
    CHECK(cpt_write_file_atomic(path, b, len, &err) == 0);
    cpt_st_file *f = cpt_st_open(path, &err);
    CHECK(!f && strstr(err.msg, path) && strstr(err.msg, "lm_head.weight"));
    free(b);
    /* a truncated copy of a good file */
    b = make("{" T("w", "F32", "[4]", 0, 16) "}", 16, &len);
    CHECK(cpt_write_file_atomic(path, b, len - 3, &err) == 0);
    f = cpt_st_open(path, &err);
    CHECK(!f && strstr(err.msg, path) && strstr(err.msg, "\"w\"") && strstr(err.msg, "out of range"));
    CHECK(cpt_write_file_atomic(path, b, 0, &err) == 0); /* empty file: mmap of 0 bytes must not be tried */
    f = cpt_st_open(path, &err);
    CHECK(!f && strstr(err.msg, "truncated"));
    free(b);
    CHECK(cpt_st_open("/nonexistent-cpt/model.safetensors", &err) == NULL && strstr(err.msg, "/nonexistent-cpt"));
    CHECK(cpt_st_open(dir, &err) == NULL && strstr(err.msg, "neither model.safetensors"));

    /* sharded sets */
    unsigned char *s1, *s2;
    size_t l1, l2;
    s1 = make("{" T("a", "U8", "[2]", 0, 2) "," T("b", "U8", "[2]", 2, 4) "}", 4, &l1);
    s2 = make("{" T("c", "U8", "[2]", 0, 2) "," T("b", "U8", "[1]", 2, 3) "}", 3, &l2);
    snprintf(path, sizeof path, "%s/s1.safetensors", dir);
    CHECK(cpt_write_file_atomic(path, s1, l1, &err) == 0);
    snprintf(path, sizeof path, "%s/s2.safetensors", dir);
    CHECK(cpt_write_file_atomic(path, s2, l2, &err) == 0);
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    const char *idx_dup = "{\"weight_map\":{\"a\":\"s1.safetensors\",\"b\":\"s1.safetensors\",\"c\":\"s2.safetensors\"}}";
    CHECK(cpt_write_file_atomic(path, idx_dup, strlen(idx_dup), &err) == 0);
    f = cpt_st_open(dir, &err); /* the folder finds the index */
    CHECK(!f && strstr(err.msg, "\"b\"") && strstr(err.msg, "s1.safetensors") && strstr(err.msg, "s2.safetensors"));

    s2 = (free(s2), make("{" T("c", "U8", "[2]", 0, 2) "}", 2, &l2));
    snprintf(p2, sizeof p2, "%s/s2.safetensors", dir);
    CHECK(cpt_write_file_atomic(p2, s2, l2, &err) == 0);
    f = cpt_st_open(dir, &err);
    CHECK_MSG(f && cpt_st_count(f) == 3, "%s", err.msg);
    cpt_st_close(f);

    const char *idx_missing = "{\"weight_map\":{\"a\":\"s1.safetensors\",\"q\":\"s1.safetensors\",\"c\":\"s2.safetensors\"}}";
    CHECK(cpt_write_file_atomic(path, idx_missing, strlen(idx_missing), &err) == 0);
    f = cpt_st_open(path, &err);
    CHECK(!f && strstr(err.msg, "\"q\"") && strstr(err.msg, "lacks") && strstr(err.msg, "index.json"));
    const char *idx_wrong = "{\"weight_map\":{\"a\":\"s2.safetensors\",\"c\":\"s1.safetensors\"}}";
    CHECK(cpt_write_file_atomic(path, idx_wrong, strlen(idx_wrong), &err) == 0);
    f = cpt_st_open(path, &err);
    CHECK(!f && strstr(err.msg, "\"a\"") && strstr(err.msg, "is in"));
    const char *idx_escape = "{\"weight_map\":{\"a\":\"../etc/passwd\"}}";
    CHECK(cpt_write_file_atomic(path, idx_escape, strlen(idx_escape), &err) == 0);
    f = cpt_st_open(path, &err);
    CHECK(!f && strstr(err.msg, "\"a\"") && strstr(err.msg, "leaves the folder"));
    const char *idx_abs = "{\"weight_map\":{\"a\":\"/etc/passwd\"}}";
    CHECK(cpt_write_file_atomic(path, idx_abs, strlen(idx_abs), &err) == 0);
    f = cpt_st_open(path, &err);
    CHECK(!f && strstr(err.msg, "leaves the folder"));
    const char *idx_gone = "{\"weight_map\":{\"a\":\"s9.safetensors\"}}";
    CHECK(cpt_write_file_atomic(path, idx_gone, strlen(idx_gone), &err) == 0);
    f = cpt_st_open(path, &err);
    CHECK(!f && strstr(err.msg, "s9.safetensors"));
    const char *idx_nomap = "{\"metadata\":{}}";
    CHECK(cpt_write_file_atomic(path, idx_nomap, strlen(idx_nomap), &err) == 0);
    f = cpt_st_open(path, &err);
    CHECK(!f && strstr(err.msg, "weight_map") && strstr(err.msg, path));
    const char *idx_type = "{\"weight_map\":{\"a\":3}}";
    CHECK(cpt_write_file_atomic(path, idx_type, strlen(idx_type), &err) == 0);
    f = cpt_st_open(path, &err);
    CHECK(!f && strstr(err.msg, "\"a\"") && strstr(err.msg, "not a string"));
    const char *idx_json = "{\"weight_map\":{\"a\":\"s1.safetensors\",\"a\":\"s1.safetensors\"}}";
    CHECK(cpt_write_file_atomic(path, idx_json, strlen(idx_json), &err) == 0);
    f = cpt_st_open(path, &err);
    CHECK(!f && strstr(err.msg, "duplicate") && strstr(err.msg, path));
    /* a bad shard names the shard */
    CHECK(cpt_write_file_atomic(p2, s2, l2 - 1, &err) == 0);
    const char *idx_ok = "{\"weight_map\":{\"a\":\"s1.safetensors\",\"c\":\"s2.safetensors\"}}";
    CHECK(cpt_write_file_atomic(path, idx_ok, strlen(idx_ok), &err) == 0);
    f = cpt_st_open(path, &err);
    CHECK(!f && strstr(err.msg, "s2.safetensors") && strstr(err.msg, "\"c\""));
    free(s1);
    free(s2);
    cpt_remove_tree(dir, NULL);
}

int main(void) {
    memory_cases();
    file_cases();
    return check_summary("test_safetensors_errors");
}
