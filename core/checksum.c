/* XXH64, written from the published algorithm description (xxHash spec, "XXH64 algorithm description"). */
#include "core/checksum.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define P1 0x9E3779B185EBCA87ULL
#define P2 0xC2B2AE3D27D4EB4FULL
#define P3 0x165667B19E3779F9ULL
#define P4 0x85EBCA77C2B2AE63ULL
#define P5 0x27D4EB2F165667C5ULL

static inline uint64_t rotl64(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

/* Little-endian loads through bytes: no alignment or host byte order assumptions. */
static inline uint64_t load64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

static inline uint32_t load32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline uint64_t xround(uint64_t acc, uint64_t input) {
    acc += input * P2;
    acc = rotl64(acc, 31);
    return acc * P1;
}

static inline uint64_t merge_round(uint64_t h, uint64_t acc) {
    h ^= xround(0, acc);
    return h * P1 + P4;
}

/* Consumes whole 32-byte stripes; returns how many bytes were used. */
static size_t consume_stripes(uint64_t acc[4], const unsigned char *p, size_t len) {
    size_t used = 0;
    while (len - used >= 32) {
        acc[0] = xround(acc[0], load64(p + used));
        acc[1] = xround(acc[1], load64(p + used + 8));
        acc[2] = xround(acc[2], load64(p + used + 16));
        acc[3] = xround(acc[3], load64(p + used + 24));
        used += 32;
    }
    return used;
}

/* Folds the accumulators (or the seed for short inputs), the length and the tail, then avalanches. */
static uint64_t finish(const uint64_t acc[4], int have_stripes, uint64_t seed, uint64_t total_len,
                       const unsigned char *tail, size_t tail_len) {
    uint64_t h;
    if (have_stripes) {
        h = rotl64(acc[0], 1) + rotl64(acc[1], 7) + rotl64(acc[2], 12) + rotl64(acc[3], 18);
        for (int i = 0; i < 4; i++) h = merge_round(h, acc[i]);
    } else {
        h = seed + P5;
    }
    h += total_len;
    size_t i = 0;
    for (; i + 8 <= tail_len; i += 8) {
        h ^= xround(0, load64(tail + i));
        h = rotl64(h, 27) * P1 + P4;
    }
    if (i + 4 <= tail_len) {
        h ^= (uint64_t)load32(tail + i) * P1;
        h = rotl64(h, 23) * P2 + P3;
        i += 4;
    }
    for (; i < tail_len; i++) {
        h ^= (uint64_t)tail[i] * P5;
        h = rotl64(h, 11) * P1;
    }
    h ^= h >> 33;
    h *= P2;
    h ^= h >> 29;
    h *= P3;
    h ^= h >> 32;
    return h;
}

static void init_acc(uint64_t acc[4], uint64_t seed) {
    acc[0] = seed + P1 + P2;
    acc[1] = seed + P2;
    acc[2] = seed;
    acc[3] = seed - P1;
}

uint64_t cpt_xxh64(const void *data, size_t len, uint64_t seed) {
    const unsigned char *p = data;
    uint64_t acc[4];
    init_acc(acc, seed);
    size_t used = len >= 32 ? consume_stripes(acc, p, len) : 0;
    return finish(acc, len >= 32, seed, len, p + used, len - used);
}

void cpt_xxh64_init(cpt_xxh64_state *s, uint64_t seed) {
    memset(s, 0, sizeof *s);
    s->seed = seed;
    init_acc(s->acc, seed);
}

void cpt_xxh64_update(cpt_xxh64_state *s, const void *data, size_t len) {
    const unsigned char *p = data;
    if (len == 0) return;
    s->total_len += len;
    if (s->buf_len) { /* top up the partial stripe first */
        size_t take = 32 - s->buf_len < len ? 32 - s->buf_len : len;
        memcpy(s->buf + s->buf_len, p, take);
        s->buf_len += (unsigned)take;
        p += take;
        len -= take;
        if (s->buf_len < 32) return;
        consume_stripes(s->acc, s->buf, 32);
        s->buf_len = 0;
    }
    size_t used = consume_stripes(s->acc, p, len);
    memcpy(s->buf, p + used, len - used);
    s->buf_len = (unsigned)(len - used);
}

uint64_t cpt_xxh64_final(const cpt_xxh64_state *s) {
    return finish(s->acc, s->total_len >= 32, s->seed, s->total_len, s->buf, s->buf_len);
}

int cpt_checksum_file(const char *path, uint64_t *out, uint64_t *bytes, cpt_err *err) {
    FILE *f = fopen(path, "rb");
    if (!f) return cpt_errno(err, "%s: open for checksum", path);
    enum { CHUNK = 1 << 20 };
    unsigned char *chunk = malloc(CHUNK);
    if (!chunk) { fclose(f); return cpt_errf(err, "%s: out of memory for checksum", path); }
    cpt_xxh64_state s;
    cpt_xxh64_init(&s, 0);
    size_t got;
    while ((got = fread(chunk, 1, CHUNK, f)) > 0) cpt_xxh64_update(&s, chunk, got);
    if (ferror(f)) {
        int saved = errno;
        free(chunk);
        fclose(f);
        errno = saved;
        return cpt_errno(err, "%s: read for checksum", path);
    }
    free(chunk);
    fclose(f);
    *out = cpt_xxh64_final(&s);
    if (bytes) *bytes = s.total_len;
    return 0;
}

char *cpt_checksum_hex(uint64_t h, char out[CPT_CHECKSUM_HEX_LEN + 1]) {
    static const char digits[] = "0123456789abcdef";
    for (int i = CPT_CHECKSUM_HEX_LEN - 1; i >= 0; i--) {
        out[i] = digits[h & 15];
        h >>= 4;
    }
    out[CPT_CHECKSUM_HEX_LEN] = '\0';
    return out;
}

int cpt_checksum_parse_hex(const char *s, uint64_t *out, cpt_err *err) {
    uint64_t v = 0;
    for (int i = 0; i < CPT_CHECKSUM_HEX_LEN; i++) {
        char c = s[i];
        int d;
        if (c >= '0' && c <= '9') d = c - '0';
        else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
        else return cpt_errf(err, "checksum \"%.40s\": expected 16 hex digits", s);
        v = (v << 4) | (uint64_t)d;
    }
    if (s[CPT_CHECKSUM_HEX_LEN] != '\0') return cpt_errf(err, "checksum \"%.40s\": expected 16 hex digits", s);
    *out = v;
    return 0;
}
