/* XXH64: published vectors, vectors from the independent Python implementation in
 * tests/fixtures/make_safetensors_fixture.py, streaming in every split, files, hex. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/checksum.h"
#include "core/fs.h"
#include "tests/check.h"

/* The byte pattern the Python script hashes. */
static void pattern(unsigned char *b, size_t n) {
    for (size_t i = 0; i < n; i++) b[i] = (unsigned char)(((uint32_t)i * 2654435761u) >> 24);
}

static const char *src_path(const char *rel) {
    static char buf[4096];
    const char *root = getenv("CPT_SRC");
    snprintf(buf, sizeof buf, "%s/%s", root ? root : ".", rel);
    return buf;
}

int main(void) {
    /* Published XXH64 values (xxHash documentation and test suites). */
    CHECK(cpt_xxh64("", 0, 0) == 0xef46db3751d8e999ULL);
    CHECK(cpt_xxh64("a", 1, 0) == 0xd24ec4f1a98c6e5bULL);
    CHECK(cpt_xxh64("abc", 3, 0) == 0x44bc2cf5ad770999ULL);
    CHECK(cpt_checksum64("abc", 3) == 0x44bc2cf5ad770999ULL);

    /* Vectors of the Python implementation: lengths 0..79 (every tail path) and longer, two seeds. */
    FILE *f = fopen(src_path("tests/fixtures/safetensors/xxh64_vectors.txt"), "r");
    CHECK(f != NULL);
    unsigned char buf[8192];
    pattern(buf, sizeof buf);
    char line[256];
    int vectors = 0, wrong = 0;
    while (f && fgets(line, sizeof line, f)) {
        if (line[0] == '#') continue;
        size_t n;
        unsigned long long seed;
        char hex[32];
        if (sscanf(line, "%zu %llu %31s", &n, &seed, hex) != 3 || n > sizeof buf) { wrong++; continue; }
        uint64_t want;
        cpt_err err;
        if (cpt_checksum_parse_hex(hex, &want, &err) != 0) { wrong++; continue; }
        vectors++;
        if (cpt_xxh64(buf, n, seed) != want) {
            if (wrong++ < 5) fprintf(stderr, "xxh64 len %zu seed %llu: got %016llx want %s\n", n, seed,
                                     (unsigned long long)cpt_xxh64(buf, n, seed), hex);
        }
        /* streaming in three uneven pieces gives the same */
        cpt_xxh64_state s;
        cpt_xxh64_init(&s, seed);
        size_t a = n / 3, b = n / 2;
        cpt_xxh64_update(&s, buf, a);
        cpt_xxh64_update(&s, buf + a, b - a);
        cpt_xxh64_update(&s, buf + b, n - b);
        if (cpt_xxh64_final(&s) != want) wrong++;
    }
    if (f) fclose(f);
    CHECK(vectors >= 170);
    CHECK_EQ_INT(wrong, 0);

    /* streaming: byte at a time, and every split point of a 100-byte input */
    uint64_t whole = cpt_xxh64(buf, 100, 7);
    cpt_xxh64_state s;
    cpt_xxh64_init(&s, 7);
    for (int i = 0; i < 100; i++) cpt_xxh64_update(&s, buf + i, 1);
    CHECK(cpt_xxh64_final(&s) == whole);
    int split_bad = 0;
    for (size_t k = 0; k <= 100; k++) {
        cpt_xxh64_init(&s, 7);
        cpt_xxh64_update(&s, buf, k);
        uint64_t mid = cpt_xxh64_final(&s); /* final does not disturb the state */
        cpt_xxh64_update(&s, buf + k, 100 - k);
        split_bad += cpt_xxh64_final(&s) != whole || mid != cpt_xxh64(buf, k, 7);
    }
    CHECK_EQ_INT(split_bad, 0);
    /* unaligned input gives the same hash as aligned */
    unsigned char *odd = malloc(1001);
    memcpy(odd + 1, buf, 1000);
    CHECK(cpt_xxh64(odd + 1, 1000, 0) == cpt_xxh64(buf, 1000, 0));
    free(odd);
    CHECK(cpt_xxh64(buf, 1000, 0) != cpt_xxh64(buf, 1000, 1));
    uint64_t before = cpt_xxh64(buf, 1000, 0);
    buf[500] ^= 1; /* one flipped bit changes the hash */
    CHECK(cpt_xxh64(buf, 1000, 0) != before);
    buf[500] ^= 1;

    /* files: 3 MiB + 5 bytes crosses the 1 MiB chunking */
    char path[] = "/tmp/cpt-test-checksum-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    size_t big = (3u << 20) + 5;
    unsigned char *data = malloc(big);
    for (size_t i = 0; i < big; i++) data[i] = (unsigned char)((i * 7919u) >> 3);
    cpt_err err = {{0}};
    CHECK(cpt_write_file_atomic(path, data, big, &err) == 0);
    uint64_t h = 0, bytes = 0;
    CHECK(cpt_checksum_file(path, &h, &bytes, &err) == 0);
    CHECK(h == cpt_checksum64(data, big));
    CHECK(bytes == big);
    free(data);
    close(fd);
    unlink(path);
    CHECK(cpt_checksum_file("/nonexistent-cpt/file", &h, NULL, &err) == -1 && strstr(err.msg, "/nonexistent-cpt/file"));

    /* hex */
    char hex[CPT_CHECKSUM_HEX_LEN + 1];
    CHECK_EQ_STR(cpt_checksum_hex(0xef46db3751d8e999ULL, hex), "ef46db3751d8e999");
    CHECK_EQ_STR(cpt_checksum_hex(0x5ULL, hex), "0000000000000005");
    uint64_t v;
    CHECK(cpt_checksum_parse_hex("EF46DB3751D8E999", &v, &err) == 0 && v == 0xef46db3751d8e999ULL);
    CHECK(cpt_checksum_parse_hex("ef46db3751d8e99", &v, &err) == -1 && strstr(err.msg, "ef46db3751d8e99"));
    CHECK(cpt_checksum_parse_hex("ef46db3751d8e9999", &v, &err) == -1);
    CHECK(cpt_checksum_parse_hex("ef46db3751d8e99g", &v, &err) == -1);
    CHECK(cpt_checksum_parse_hex("", &v, &err) == -1);
    return check_summary("test_checksum");
}
