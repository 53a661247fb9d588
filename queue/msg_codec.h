/* The strict msgpack reading and writing shared by the queue's message codecs (queue/schema.c, queue/env_msg.c).
 *
 * A decoder opens the whole buffer with cpt_mp_dec_open (a pre-scan bounds every length and element count, and the
 * objects in all, before msgpack-c allocates anything; exactly one map, nothing after it), checks the map's keys with cpt_mp_check_keys
 * (no unknown, duplicate or missing key) and reads each field with a cpt_mp_get_* that names the field in its
 * error. Encoders pack into a msgpack_sbuffer and hand it over with cpt_mp_finish_buf. */
#ifndef CPT_QUEUE_MSG_CODEC_H
#define CPT_QUEUE_MSG_CODEC_H

#include <msgpack.h>
#include <stddef.h>
#include <stdint.h>

#include "core/error.h"

typedef struct cpt_mp_dec {
    msgpack_unpacked up;
    const msgpack_object *root; /* the map; NULL until opened */
    cpt_err *err;
} cpt_mp_dec;

/* Unpacks data[0..len) as one map (len at most max_len). Close d even when this fails. */
int cpt_mp_dec_open(cpt_mp_dec *d, const void *data, size_t len, size_t max_len, cpt_err *err);
void cpt_mp_dec_close(cpt_mp_dec *d);

int cpt_mp_key_is(const msgpack_object *k, const char *name);
/* The map's keys: strings, each in allowed (NULL-terminated, at most 32), none twice; required[i] marks those
 * that must be present. ctx prefixes messages ("sampling"; "" at the top). */
int cpt_mp_check_keys(const msgpack_object *map, const char *const *allowed, const int *required, const char *ctx,
                      cpt_err *err);
/* The value of key name in map, or NULL. */
const msgpack_object *cpt_mp_get(const msgpack_object *map, const char *name);

/* Field readers: `what` names the field in the error. */
int cpt_mp_get_u64(const msgpack_object *o, const char *what, uint64_t max, uint64_t *out, cpt_err *err);
int cpt_mp_get_i64(const msgpack_object *o, const char *what, int64_t lo, int64_t hi, int64_t *out, cpt_err *err);
int cpt_mp_get_f64(const msgpack_object *o, const char *what, double *out, cpt_err *err); /* finite */
/* A string without NUL bytes into out[cap]. */
int cpt_mp_get_str(const msgpack_object *o, const char *what, char *out, size_t cap, cpt_err *err);
/* A malloc'd copy of a string of at most max bytes without NUL bytes; NULL on failure. */
char *cpt_mp_dup_str(const msgpack_object *o, const char *what, size_t max, cpt_err *err);

void cpt_mp_pack_cstr(msgpack_packer *pk, const char *s);
void cpt_mp_pack_key(msgpack_packer *pk, const char *k);
/* The envelope every message starts with: "schema" (the version), "type" (the message's name) and "run". */
void cpt_mp_pack_envelope(msgpack_packer *pk, int64_t schema, const char *type, const char *run);
/* Checks root's "schema" and "type" against those wanted and copies "run" into run[run_cap] (the caller checks
 * that it is a valid run id). */
int cpt_mp_dec_envelope(const msgpack_object *root, int64_t schema, const char *type, char *run, size_t run_cap,
                        cpt_err *err);
/* Hands the packed bytes over as a malloc'd *data of *len bytes (at most max_len; sb is released or destroyed). */
int cpt_mp_finish_buf(msgpack_sbuffer *sb, size_t max_len, char **data, size_t *len, cpt_err *err);

#endif
