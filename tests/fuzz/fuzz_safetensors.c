/* Fuzzes the safetensors readers:
 * - the header validation (cpt_st_open_memory), then reads every tensor it accepts in every typed form, so a
 *   header that validates but points outside the buffer shows up as an ASan error;
 * - an input that starts with '{' is also tried as a model.safetensors.index.json next to two fixed valid
 *   shards (s1.safetensors: a, b; s2.safetensors: c) in a private temp folder. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/fs.h"
#include "core/safetensors.h"

static void check_file(cpt_st_file *f, const uint8_t *lo, const uint8_t *hi) {
    cpt_err err;
    const char *prev = NULL;
    for (size_t i = 0; i < cpt_st_count(f); i++) {
        const cpt_st_tensor *t = cpt_st_at(f, i);
        if (prev && strcmp(prev, t->name) >= 0) abort(); /* sorted, unique */
        prev = t->name;
        if (cpt_st_find(f, t->name) != t) abort();
        if (lo && ((const uint8_t *)t->data < lo || (const uint8_t *)t->data + t->nbytes > hi)) abort();
        size_t n = cpt_st_numel(t);
        if (n * cpt_dtype_size(t->dtype) != t->nbytes) abort();
        if (n > (1u << 22)) continue; /* a big tensor needs a big input; bounded work per input */
        float *out = malloc((n ? n : 1) * sizeof *out);
        uint16_t *bf = malloc((n ? n : 1) * sizeof *bf);
        if (out && cpt_st_read_f32(t, out, n, &err) != 0) abort();
        if (bf) cpt_st_read_bf16(t, bf, n, &err); /* integer dtypes are refused, floating ones must work */
        free(out);
        free(bf);
    }
    for (size_t i = 0; i < cpt_st_metadata_count(f); i++) {
        const char *k, *v;
        if (cpt_st_metadata_at(f, i, &k, &v) != 0 || cpt_st_metadata(f, k) != v) abort();
    }
}

static char dir[64];

static void remove_dir(void) { cpt_remove_tree(dir, NULL); }

static int write_shard(const char *name, const char *header, size_t data_len) {
    char path[128];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    size_t h = strlen(header);
    unsigned char buf[512];
    if (8 + h + data_len > sizeof buf) return -1;
    for (int i = 0; i < 8; i++) buf[i] = (unsigned char)((uint64_t)h >> (8 * i));
    memcpy(buf + 8, header, h);
    memset(buf + 8 + h, 0x3f, data_len);
    return cpt_write_file_atomic(path, buf, 8 + h + data_len, NULL);
}

static const char *index_dir(void) {
    if (dir[0]) return dir;
    snprintf(dir, sizeof dir, "/tmp/cpt-fuzz-st-%ld-XXXXXX", (long)getpid());
    if (!mkdtemp(dir)) abort();
    atexit(remove_dir);
    if (write_shard("s1.safetensors", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                                      "\"b\":{\"dtype\":\"BF16\",\"shape\":[1,2],\"data_offsets\":[8,12]}}", 12) != 0 ||
        write_shard("s2.safetensors", "{\"__metadata__\":{\"format\":\"pt\"},"
                                      "\"c\":{\"dtype\":\"F16\",\"shape\":[3],\"data_offsets\":[0,6]}}", 6) != 0)
        abort();
    return dir;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    cpt_err err;
    cpt_st_file *f = cpt_st_open_memory(data, size, "fuzz.safetensors", &err);
    if (f) check_file(f, data, data + size);
    else if (!err.msg[0]) abort(); /* a rejection always says why */
    cpt_st_close(f);

    if (size > 0 && data[0] == '{') {
        char path[128];
        snprintf(path, sizeof path, "%s/model.safetensors.index.json", index_dir());
        FILE *idx = fopen(path, "wb"); /* plain write: an fsync per input would slow fuzzing tenfold */
        if (!idx || fwrite(data, 1, size, idx) != size || fclose(idx) != 0) abort();
        f = cpt_st_open(path, &err);
        if (f) check_file(f, NULL, NULL);
        else if (!err.msg[0]) abort();
        cpt_st_close(f);
    }
    return 0;
}
