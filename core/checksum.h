/* 64-bit checksums of byte buffers and files: XXH64 (xxHash, 64-bit variant, seed 0 unless given).
 *
 * Used for checkpoint manifests and weight announcements, where a bit flip or a truncated copy must be caught
 * cheaply (several GB/s). Not a cryptographic hash. The hex form is the canonical one (16 lowercase digits,
 * most significant first), the same as `xxhsum -H1` prints, so files can be checked from a shell. */
#ifndef CPT_CORE_CHECKSUM_H
#define CPT_CORE_CHECKSUM_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"

/* One-shot XXH64 of len bytes. */
uint64_t cpt_xxh64(const void *data, size_t len, uint64_t seed);

/* Streaming form: init, update any number of times with any split, final; equals the one-shot hash of the
 * concatenation. The state is plain data (copyable). */
typedef struct cpt_xxh64_state {
    uint64_t acc[4];
    uint64_t total_len;
    uint64_t seed;
    unsigned char buf[32]; /* bytes of the current incomplete 32-byte stripe */
    unsigned buf_len;
} cpt_xxh64_state;

void cpt_xxh64_init(cpt_xxh64_state *s, uint64_t seed);
void cpt_xxh64_update(cpt_xxh64_state *s, const void *data, size_t len);
uint64_t cpt_xxh64_final(const cpt_xxh64_state *s); /* does not modify s: more updates may follow */

/* The project's checksum: XXH64 with seed 0. */
static inline uint64_t cpt_checksum64(const void *data, size_t len) { return cpt_xxh64(data, len, 0); }

/* Checksum of a whole file, read in 1 MiB chunks (no size limit); *bytes (if not NULL) gets the file size. */
int cpt_checksum_file(const char *path, uint64_t *out, uint64_t *bytes, cpt_err *err);

#define CPT_CHECKSUM_HEX_LEN 16
/* Writes 16 lowercase hex digits and a NUL into out. Returns out. */
char *cpt_checksum_hex(uint64_t h, char out[CPT_CHECKSUM_HEX_LEN + 1]);
/* Parses exactly 16 hex digits (either case); -1 with a message naming the text otherwise. */
int cpt_checksum_parse_hex(const char *s, uint64_t *out, cpt_err *err);

#endif
