/* Sharding arithmetic of the safetensors writer: the shard plan, shard file names and max_shard_size parsing. Pure
 * functions, so the 64-bit size arithmetic is testable with sizes far past what a test could allocate. */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/safetensors.h"

size_t cpt_st_shard_plan(const uint64_t *nbytes, size_t n, uint64_t max_shard_bytes, size_t *shard_of) {
    if (n == 0) return 0;
    size_t shard = 0;
    uint64_t used = 0;
    int empty = 1;
    for (size_t i = 0; i < n; i++) {
        /* compared as "room left" so no sum can wrap, whatever the sizes */
        if (!empty && max_shard_bytes && nbytes[i] > max_shard_bytes - used) {
            shard++;
            used = 0;
            empty = 1;
        }
        shard_of[i] = shard;
        used = (max_shard_bytes && nbytes[i] > max_shard_bytes - used) ? max_shard_bytes : used + nbytes[i];
        empty = 0;
    }
    return shard + 1;
}

void cpt_st_shard_name(char *buf, size_t cap, size_t i, size_t n_shards) {
    snprintf(buf, cap, "model-%05zu-of-%05zu.safetensors", i + 1, n_shards);
}

int cpt_parse_byte_size(const char *text, uint64_t *out, cpt_err *err) {
    static const struct { const char *unit; uint64_t mult; } units[] = {
        {"", 1},
        {"b", 1},
        {"kb", 1000ULL},
        {"mb", 1000000ULL},
        {"gb", 1000000000ULL},
        {"tb", 1000000000000ULL},
        {"kib", 1ULL << 10},
        {"mib", 1ULL << 20},
        {"gib", 1ULL << 30},
        {"tib", 1ULL << 40},
    };
    if (!text || !*text) return cpt_errf(err, "empty size (expected bytes or a number with KB/MB/GB/KiB/MiB/GiB)");
    const char *p = text;
    while (isspace((unsigned char)*p)) p++;
    size_t ndig = strspn(p, "0123456789");
    int frac = p[ndig] == '.';
    size_t nfrac = frac ? strspn(p + ndig + 1, "0123456789") : 0;
    if (ndig + nfrac == 0)
        return cpt_errf(err, "size \"%s\": expected a number, e.g. \"5GB\", \"500MB\", \"2GiB\" or bytes", text);
    const char *end = p + ndig + (frac ? 1 + nfrac : 0);
    while (isspace((unsigned char)*end)) end++;
    size_t ul = strlen(end);
    while (ul && isspace((unsigned char)end[ul - 1])) ul--;
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        if (strlen(units[i].unit) != ul || strncasecmp(end, units[i].unit, ul)) continue;
        uint64_t bytes;
        if (!frac) {
            /* integers exactly, with overflow caught */
            errno = 0;
            unsigned long long v = strtoull(p, NULL, 10);
            if (errno == ERANGE || __builtin_mul_overflow((uint64_t)v, units[i].mult, &bytes) || bytes > INT64_MAX)
                return cpt_errf(err, "size \"%s\" is too large", text);
        } else {
            double b = floor(strtod(p, NULL) * (double)units[i].mult);
            if (b >= 9223372036854775808.0) return cpt_errf(err, "size \"%s\" is too large", text);
            bytes = (uint64_t)b;
        }
        if (bytes < 1) return cpt_errf(err, "size \"%s\" is less than one byte", text);
        *out = bytes;
        return 0;
    }
    return cpt_errf(err, "size \"%s\": unknown unit \"%.*s\" (B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)", text, (int)ul,
                    end);
}
