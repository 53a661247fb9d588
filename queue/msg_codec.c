#include "queue/msg_codec.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Objects a message may hold (every string, number, array and map counts one): far above any schema's (the
 * completions of a group, stop strings, a record's extra fields), far below what would exhaust a role's memory. */
#define CPT_MSG_MAX_OBJECTS (1u << 20)
#define CPT_MSG_MAX_OBJECTS_TEXT "1048576"

/* Walks the raw bytes before msgpack-c sees them: every length inside the buffer, every container's element
 * count no larger than the bytes left (each element takes at least one), nesting <= 16, and at most
 * CPT_MSG_MAX_OBJECTS objects in all. msgpack-c allocates a container's elements up front, so without this a 5-byte
 * header claiming 4 billion elements would ask for ~100 GB; and it takes 24 bytes an object, so a large message of
 * one-byte elements would ask for 24 times its size (the schemas' token arrays are bins: one object each).
 * *budget counts down the objects left. Returns the offset after one object, or 0 on failure. */
static size_t prescan(const uint8_t *p, size_t len, size_t off, int depth, size_t *budget, const char **why) {
    if (depth > 16) { *why = "nesting deeper than 16"; return 0; }
    if (off >= len) { *why = "truncated"; return 0; }
    if (*budget == 0) { *why = "more than " CPT_MSG_MAX_OBJECTS_TEXT " objects"; return 0; }
    (*budget)--;
    uint8_t b = p[off++];
    uint64_t n = 0; /* payload bytes, or container elements */
    int container = 0; /* 1 array, 2 map */
    size_t avail = len - off;
#define NEED(k) do { if (avail < (k)) { *why = "truncated"; return 0; } } while (0)
#define BE(k) ({ uint64_t v_ = 0; for (int i_ = 0; i_ < (k); i_++) v_ = v_ << 8 | p[off + i_]; off += (k); avail -= (k); v_; })
    if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3) return off;
    if (b >= 0x80 && b <= 0x8f) { n = b & 0x0f; container = 2; }
    else if (b >= 0x90 && b <= 0x9f) { n = b & 0x0f; container = 1; }
    else if (b >= 0xa0 && b <= 0xbf) n = b & 0x1f;
    else switch (b) {
        case 0xc4: case 0xd9: NEED(1); n = BE(1); break;
        case 0xc5: case 0xda: NEED(2); n = BE(2); break;
        case 0xc6: case 0xdb: NEED(4); n = BE(4); break;
        case 0xc7: NEED(2); n = BE(1) + 1; break; /* ext 8: length, then type */
        case 0xc8: NEED(3); n = BE(2) + 1; break;
        case 0xc9: NEED(5); n = BE(4) + 1; break;
        case 0xca: n = 4; break;
        case 0xcb: n = 8; break;
        case 0xcc: case 0xd0: n = 1; break;
        case 0xcd: case 0xd1: n = 2; break;
        case 0xce: case 0xd2: n = 4; break;
        case 0xcf: case 0xd3: n = 8; break;
        case 0xd4: n = 2; break;
        case 0xd5: n = 3; break;
        case 0xd6: n = 5; break;
        case 0xd7: n = 9; break;
        case 0xd8: n = 17; break;
        case 0xdc: NEED(2); n = BE(2); container = 1; break;
        case 0xdd: NEED(4); n = BE(4); container = 1; break;
        case 0xde: NEED(2); n = BE(2); container = 2; break;
        case 0xdf: NEED(4); n = BE(4); container = 2; break;
        default: *why = "reserved byte 0xc1"; return 0;
    }
#undef BE
    if (!container) {
        if (n > avail) { *why = "a string or bin runs past the end"; return 0; }
        return off + (size_t)n;
    }
    uint64_t items = container == 2 ? 2 * n : n;
    if (items > avail) { *why = "a container claims more elements than bytes left"; return 0; }
    for (uint64_t i = 0; i < items; i++) {
        off = prescan(p, len, off, depth + 1, budget, why);
        if (!off) return 0;
    }
    return off;
#undef NEED
}

int cpt_mp_dec_open(cpt_mp_dec *d, const void *data, size_t len, size_t max_len, cpt_err *err) {
    d->root = NULL;
    d->err = err;
    msgpack_unpacked_init(&d->up);
    if (len == 0) return cpt_errf(err, "empty message");
    if (len > max_len) return cpt_errf(err, "message is %zu bytes, max %zu", len, max_len);
    const char *why = "malformed";
    size_t budget = CPT_MSG_MAX_OBJECTS;
    size_t end = prescan(data, len, 0, 0, &budget, &why);
    if (!end) return cpt_errf(err, "malformed msgpack: %s", why);
    if (end != len) return cpt_errf(err, "malformed message: %zu trailing bytes after the map", len - end);
    size_t off = 0;
    msgpack_unpack_return rc = msgpack_unpack_next(&d->up, data, len, &off);
    if (rc != MSGPACK_UNPACK_SUCCESS || off != len) return cpt_errf(err, "malformed msgpack (unpack returned %d)", (int)rc);
    d->root = &d->up.data;
    if (d->root->type != MSGPACK_OBJECT_MAP) return cpt_errf(err, "message is not a map");
    return 0;
}

void cpt_mp_dec_close(cpt_mp_dec *d) { msgpack_unpacked_destroy(&d->up); }

int cpt_mp_key_is(const msgpack_object *k, const char *name) {
    size_t n = strlen(name);
    return k->type == MSGPACK_OBJECT_STR && k->via.str.size == n && !memcmp(k->via.str.ptr, name, n);
}

/* Checks a map's keys: strings, each in allowed (NULL-terminated), none twice; required[i] marks those that
 * must be present. ctx prefixes messages ("sampling"). */
int cpt_mp_check_keys(const msgpack_object *map, const char *const *allowed, const int *required, const char *ctx,
                      cpt_err *err) {
    int seen[32] = {0};
    const msgpack_object_map *m = &map->via.map;
    for (uint32_t i = 0; i < m->size; i++) {
        const msgpack_object *k = &m->ptr[i].key;
        if (k->type != MSGPACK_OBJECT_STR) return cpt_errf(err, "%s%sa key is not a string", ctx, *ctx ? ": " : "");
        int j = 0;
        for (; allowed[j]; j++)
            if (cpt_mp_key_is(k, allowed[j])) break;
        if (!allowed[j])
            return cpt_errf(err, "%s%sunknown key \"%.*s\"", ctx, *ctx ? ": " : "", (int)(k->via.str.size > 64 ? 64 : k->via.str.size),
                            k->via.str.ptr);
        if (seen[j]++) return cpt_errf(err, "%s%skey \"%s\" appears twice", ctx, *ctx ? ": " : "", allowed[j]);
    }
    for (int j = 0; allowed[j]; j++)
        if (required[j] && !seen[j]) return cpt_errf(err, "%s%smissing key \"%s\"", ctx, *ctx ? ": " : "", allowed[j]);
    return 0;
}

const msgpack_object *cpt_mp_get(const msgpack_object *map, const char *name) {
    const msgpack_object_map *m = &map->via.map;
    for (uint32_t i = 0; i < m->size; i++)
        if (cpt_mp_key_is(&m->ptr[i].key, name)) return &m->ptr[i].val;
    return NULL;
}

int cpt_mp_get_u64(const msgpack_object *o, const char *what, uint64_t max, uint64_t *out, cpt_err *err) {
    if (o->type != MSGPACK_OBJECT_POSITIVE_INTEGER) {
        if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER) return cpt_errf(err, "%s = %lld: must not be negative", what, (long long)o->via.i64);
        return cpt_errf(err, "%s: expected an unsigned integer", what);
    }
    if (o->via.u64 > max) return cpt_errf(err, "%s = %llu: max %llu", what, (unsigned long long)o->via.u64, (unsigned long long)max);
    *out = o->via.u64;
    return 0;
}

int cpt_mp_get_i64(const msgpack_object *o, const char *what, int64_t lo, int64_t hi, int64_t *out, cpt_err *err) {
    int64_t v;
    if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER) {
        if (o->via.u64 > (uint64_t)INT64_MAX) return cpt_errf(err, "%s: out of range", what);
        v = (int64_t)o->via.u64;
    } else if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER) {
        v = o->via.i64;
    } else {
        return cpt_errf(err, "%s: expected an integer", what);
    }
    if (v < lo || v > hi) return cpt_errf(err, "%s = %lld: expected %lld..%lld", what, (long long)v, (long long)lo, (long long)hi);
    *out = v;
    return 0;
}

/* Numbers: float32, float64, or an integer (some encoders write 1.0 as 1). */
int cpt_mp_get_f64(const msgpack_object *o, const char *what, double *out, cpt_err *err) {
    switch (o->type) {
        case MSGPACK_OBJECT_FLOAT32:
        case MSGPACK_OBJECT_FLOAT64: *out = o->via.f64; break;
        case MSGPACK_OBJECT_POSITIVE_INTEGER: *out = (double)o->via.u64; break;
        case MSGPACK_OBJECT_NEGATIVE_INTEGER: *out = (double)o->via.i64; break;
        default: return cpt_errf(err, "%s: expected a number", what);
    }
    if (!isfinite(*out)) return cpt_errf(err, "%s: not finite", what);
    return 0;
}


/* A string into a fixed buffer; no NUL bytes inside. */
int cpt_mp_get_str(const msgpack_object *o, const char *what, char *out, size_t cap, cpt_err *err) {
    if (o->type != MSGPACK_OBJECT_STR) return cpt_errf(err, "%s: expected a string", what);
    if (o->via.str.size >= cap) return cpt_errf(err, "%s: %u bytes, max %zu", what, o->via.str.size, cap - 1);
    if (memchr(o->via.str.ptr, '\0', o->via.str.size)) return cpt_errf(err, "%s: contains a NUL byte", what);
    memcpy(out, o->via.str.ptr, o->via.str.size);
    out[o->via.str.size] = '\0';
    return 0;
}

char *cpt_mp_dup_str(const msgpack_object *o, const char *what, size_t max, cpt_err *err) {
    if (o->type != MSGPACK_OBJECT_STR) { cpt_errf(err, "%s: expected a string", what); return NULL; }
    if (o->via.str.size > max) { cpt_errf(err, "%s: %u bytes, max %zu", what, o->via.str.size, max); return NULL; }
    if (memchr(o->via.str.ptr, '\0', o->via.str.size)) { cpt_errf(err, "%s: contains a NUL byte", what); return NULL; }
    char *s = malloc((size_t)o->via.str.size + 1);
    if (!s) { cpt_errf(err, "%s: out of memory", what); return NULL; }
    memcpy(s, o->via.str.ptr, o->via.str.size);
    s[o->via.str.size] = '\0';
    return s;
}

void cpt_mp_pack_cstr(msgpack_packer *pk, const char *s) { msgpack_pack_str_with_body(pk, s, strlen(s)); }

void cpt_mp_pack_key(msgpack_packer *pk, const char *k) { cpt_mp_pack_cstr(pk, k); }

int cpt_mp_finish_buf(msgpack_sbuffer *sb, size_t max_len, char **data, size_t *len, cpt_err *err) {
    size_t n = sb->size;
    if (n > max_len || !sb->data) {
        msgpack_sbuffer_destroy(sb);
        return cpt_errf(err, "encoded message is %zu bytes, max %zu", n, max_len);
    }
    *data = msgpack_sbuffer_release(sb);
    *len = n;
    return 0;
}

void cpt_mp_pack_envelope(msgpack_packer *pk, int64_t schema, const char *type, const char *run) {
    cpt_mp_pack_key(pk, "schema");
    msgpack_pack_int64(pk, schema);
    cpt_mp_pack_key(pk, "type");
    cpt_mp_pack_cstr(pk, type);
    cpt_mp_pack_key(pk, "run");
    cpt_mp_pack_cstr(pk, run);
}

int cpt_mp_dec_envelope(const msgpack_object *root, int64_t version, const char *type, char *run, size_t run_cap,
                        cpt_err *err) {
    const msgpack_object *o = cpt_mp_get(root, "schema");
    if (!o) return cpt_errf(err, "missing key \"schema\"");
    int64_t schema = 0;
    if (cpt_mp_get_i64(o, "schema", INT64_MIN, INT64_MAX, &schema, err)) return -1;
    if (schema != version)
        return cpt_errf(err, "unknown schema version %lld (this build reads %lld)", (long long)schema, (long long)version);
    o = cpt_mp_get(root, "type");
    if (!o) return cpt_errf(err, "missing key \"type\"");
    if (!cpt_mp_key_is(o, type)) {
        char t[40];
        if (cpt_mp_get_str(o, "type", t, sizeof t, err)) return -1;
        return cpt_errf(err, "type \"%s\" where a %s was expected", t, type);
    }
    o = cpt_mp_get(root, "run");
    if (!o) return cpt_errf(err, "missing key \"run\"");
    return cpt_mp_get_str(o, "run", run, run_cap, err);
}
