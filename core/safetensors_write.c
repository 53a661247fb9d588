/* safetensors writer: tensors laid out back to back after a space-padded header, widest dtype first and then by
 * name (the order the reference implementation uses: with the data section starting 8-aligned, every tensor
 * starts at a multiple of its element size, so readers may use the mapped data in place), written through an
 * atomic temp file (fsync, rename, fsync of the folder). */
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/checksum.h"
#include "core/fs.h"
#include "core/safetensors.h"

typedef struct wtensor {
    char *name;
    cpt_dtype dt;
    int ndim;
    int64_t shape[CPT_ST_MAX_DIMS];
    size_t nbytes;
    const void *data;
    void *owned; /* the copy made by cpt_st_writer_add_copy */
} wtensor;

struct cpt_st_writer {
    wtensor *t;
    size_t n, cap;
    char **meta_keys, **meta_vals;
    size_t nmeta;
};

cpt_st_writer *cpt_st_writer_new(void) { return calloc(1, sizeof(cpt_st_writer)); }

void cpt_st_writer_free(cpt_st_writer *w) {
    if (!w) return;
    for (size_t i = 0; i < w->n; i++) { free(w->t[i].name); free(w->t[i].owned); }
    free(w->t);
    for (size_t i = 0; i < w->nmeta; i++) { free(w->meta_keys[i]); free(w->meta_vals[i]); }
    free(w->meta_keys);
    free(w->meta_vals);
    free(w);
}

/* Checks a name is a valid JSON string (UTF-8) by building one. */
static int utf8_ok(const char *s) {
    json_t *j = json_string(s);
    if (!j) return 0;
    json_decref(j);
    return 1;
}

static int add(cpt_st_writer *w, const char *name, cpt_dtype dt, int ndim, const int64_t *shape, const void *data,
               int copy, cpt_err *err) {
    if (!name || !name[0]) return cpt_errf(err, "safetensors writer: empty tensor name");
    if (strcmp(name, "__metadata__") == 0) return cpt_errf(err, "safetensors writer: \"__metadata__\" is reserved");
    if (!utf8_ok(name)) return cpt_errf(err, "safetensors writer: tensor name \"%s\" is not valid UTF-8", name);
    size_t es = cpt_dtype_size(dt);
    if (!es) return cpt_errf(err, "safetensors writer: tensor \"%s\": unknown dtype %d", name, (int)dt);
    if (ndim < 0 || ndim > CPT_ST_MAX_DIMS)
        return cpt_errf(err, "safetensors writer: tensor \"%s\": %d dimensions (0..%d allowed)", name, ndim,
                        CPT_ST_MAX_DIMS);
    if (ndim > 0 && !shape) return cpt_errf(err, "safetensors writer: tensor \"%s\": no shape", name);
    uint64_t nbytes = es;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0)
            return cpt_errf(err, "safetensors writer: tensor \"%s\": shape[%d] = %" PRId64 " is negative", name, i,
                            shape[i]);
        if (__builtin_mul_overflow(nbytes, (uint64_t)shape[i], &nbytes) || nbytes > SIZE_MAX / 2)
            return cpt_errf(err, "safetensors writer: tensor \"%s\": size overflows", name);
    }
    if (nbytes && !data) return cpt_errf(err, "safetensors writer: tensor \"%s\": no data", name);
    if (w->n == w->cap) {
        size_t cap = w->cap ? w->cap * 2 : 64;
        wtensor *t = realloc(w->t, cap * sizeof *t);
        if (!t) return cpt_errf(err, "safetensors writer: out of memory");
        w->t = t;
        w->cap = cap;
    }
    wtensor *t = &w->t[w->n];
    memset(t, 0, sizeof *t);
    t->name = strdup(name);
    if (!t->name) return cpt_errf(err, "safetensors writer: out of memory");
    if (copy && nbytes) {
        t->owned = malloc(nbytes);
        if (!t->owned) { free(t->name); return cpt_errf(err, "safetensors writer: tensor \"%s\": out of memory", name); }
        memcpy(t->owned, data, nbytes);
        data = t->owned;
    }
    t->dt = dt;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) t->shape[i] = shape[i];
    t->nbytes = (size_t)nbytes;
    t->data = data;
    w->n++;
    return 0;
}

int cpt_st_writer_add(cpt_st_writer *w, const char *name, cpt_dtype dt, int ndim, const int64_t *shape,
                      const void *data, cpt_err *err) {
    return add(w, name, dt, ndim, shape, data, 0, err);
}

int cpt_st_writer_add_copy(cpt_st_writer *w, const char *name, cpt_dtype dt, int ndim, const int64_t *shape,
                           const void *data, cpt_err *err) {
    return add(w, name, dt, ndim, shape, data, 1, err);
}

int cpt_st_writer_meta(cpt_st_writer *w, const char *key, const char *value, cpt_err *err) {
    if (!key || !key[0] || !value) return cpt_errf(err, "safetensors writer: empty metadata key or no value");
    if (!utf8_ok(key) || !utf8_ok(value))
        return cpt_errf(err, "safetensors writer: metadata \"%s\" is not valid UTF-8", key);
    char *v = strdup(value);
    if (!v) return cpt_errf(err, "safetensors writer: out of memory");
    for (size_t i = 0; i < w->nmeta; i++)
        if (strcmp(w->meta_keys[i], key) == 0) { free(w->meta_vals[i]); w->meta_vals[i] = v; return 0; }
    char **k = realloc(w->meta_keys, (w->nmeta + 1) * sizeof *k);
    if (k) w->meta_keys = k;
    char **vs = k ? realloc(w->meta_vals, (w->nmeta + 1) * sizeof *vs) : NULL;
    if (vs) w->meta_vals = vs;
    char *kk = vs ? strdup(key) : NULL;
    if (!kk) { free(v); return cpt_errf(err, "safetensors writer: out of memory"); }
    w->meta_keys[w->nmeta] = kk;
    w->meta_vals[w->nmeta] = v;
    w->nmeta++;
    return 0;
}

static int name_cmp(const void *a, const void *b) {
    return strcmp(((const wtensor *)a)->name, ((const wtensor *)b)->name);
}

/* Layout order: element size descending, then name. */
static int layout_cmp(const void *a, const void *b) {
    const wtensor *x = a, *y = b;
    size_t sx = cpt_dtype_size(x->dt), sy = cpt_dtype_size(y->dt);
    if (sx != sy) return sx > sy ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* The header JSON, space-padded so 8 + its length is a multiple of 8. */
static char *build_header(cpt_st_writer *w, size_t *len_out, cpt_err *err) {
    json_t *root = json_object();
    if (!root) { cpt_errf(err, "out of memory"); return NULL; }
    int bad = 0;
    if (w->nmeta) {
        json_t *m = json_object();
        bad |= !m || json_object_set_new(root, "__metadata__", m) != 0;
        for (size_t i = 0; !bad && i < w->nmeta; i++)
            bad |= json_object_set_new(m, w->meta_keys[i], json_string(w->meta_vals[i])) != 0;
    }
    uint64_t off = 0;
    for (size_t i = 0; !bad && i < w->n; i++) {
        const wtensor *t = &w->t[i];
        json_t *shape = json_array();
        for (int d = 0; shape && d < t->ndim; d++) bad |= json_array_append_new(shape, json_integer(t->shape[d])) != 0;
        json_t *offs = json_pack("[II]", (json_int_t)off, (json_int_t)(off + t->nbytes));
        json_t *e = json_pack("{s:s, s:o, s:o}", "dtype", cpt_dtype_name(t->dt), "shape", shape, "data_offsets", offs);
        bad |= !shape || !offs || !e || json_object_set_new(root, t->name, e) != 0;
        off += t->nbytes;
    }
    char *text = bad ? NULL : json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(root);
    if (!text) { cpt_errf(err, "safetensors writer: cannot build the header (out of memory)"); return NULL; }
    size_t n = strlen(text), padded = n + (8 - (8 + n) % 8) % 8;
    char *h = realloc(text, padded + 1);
    if (!h) { free(text); cpt_errf(err, "out of memory"); return NULL; }
    memset(h + n, ' ', padded - n);
    h[padded] = '\0';
    *len_out = padded;
    return h;
}

/* Writes len bytes and folds them into the checksum. */
static int put(FILE *fp, const void *p, size_t len, cpt_xxh64_state *h) {
    if (len == 0) return 1;
    cpt_xxh64_update(h, p, len);
    return fwrite(p, 1, len, fp) == len;
}

char *cpt_st_writer_header(cpt_st_writer *w, size_t *len, cpt_err *err) {
    /* on a shallow copy, so the tensors keep the order they were added in (the shard plan follows it) */
    cpt_st_writer c = *w;
    c.t = malloc((w->n ? w->n : 1) * sizeof *c.t);
    if (!c.t) { cpt_errf(err, "out of memory"); return NULL; }
    if (w->n) memcpy(c.t, w->t, w->n * sizeof *c.t);
    qsort(c.t, c.n, sizeof *c.t, layout_cmp);
    char *h = build_header(&c, len, err);
    free(c.t);
    return h;
}

int cpt_st_writer_finish(cpt_st_writer *w, const char *path, cpt_err *err) {
    return cpt_st_writer_finish_checksum(w, path, NULL, NULL, err);
}

int cpt_st_writer_finish_checksum(cpt_st_writer *w, const char *path, uint64_t *checksum, uint64_t *bytes,
                                  cpt_err *err) {
    int rc = -1;
    cpt_xxh64_state h;
    cpt_xxh64_init(&h, 0);
    char *header = NULL;
    qsort(w->t, w->n, sizeof *w->t, name_cmp);
    for (size_t i = 1; i < w->n; i++)
        if (strcmp(w->t[i - 1].name, w->t[i].name) == 0) {
            cpt_errf(err, "%s: tensor \"%s\" added twice", path, w->t[i].name);
            goto out;
        }
    qsort(w->t, w->n, sizeof *w->t, layout_cmp);
    size_t hlen;
    if (!(header = build_header(w, &hlen, err))) { cpt_err_prefix(err, "%s", path); goto out; }
    if (hlen > 100000000) { cpt_errf(err, "%s: header of %zu bytes is over the 100 MB limit", path, hlen); goto out; }
    cpt_atomic_file af;
    if (cpt_atomic_open(&af, path, err) != 0) goto out;
    unsigned char len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
    int ok = put(af.fp, len8, 8, &h) && put(af.fp, header, hlen, &h);
    for (size_t i = 0; ok && i < w->n; i++) ok = put(af.fp, w->t[i].data, w->t[i].nbytes, &h);
    if (!ok) {
        cpt_errno(err, "%s: write", af.tmp);
        cpt_atomic_abort(&af);
        goto out;
    }
    rc = cpt_atomic_commit(&af, err);
    if (rc == 0 && checksum) *checksum = cpt_xxh64_final(&h);
    if (rc == 0 && bytes) *bytes = h.total_len;
out:
    free(header);
    cpt_st_writer_free(w);
    return rc;
}

static int str_ptr_cmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* The index, as save_pretrained writes it. */
static int write_index(const cpt_st_writer *w, const size_t *shard_of, size_t n_shards, const char *dir,
                       cpt_err *err) {
    uint64_t total = 0;
    for (size_t i = 0; i < w->n; i++) total += w->t[i].nbytes;
    json_t *root = json_object(), *meta = json_object(), *map = json_object();
    int bad = !root || !meta || !map;
    if (!bad) bad |= json_object_set_new(meta, "total_size", json_integer((json_int_t)total)) != 0;
    for (size_t i = 0; !bad && i < w->n; i++) {
        char name[64];
        cpt_st_shard_name(name, sizeof name, shard_of[i], n_shards);
        bad |= json_object_set_new(map, w->t[i].name, json_string(name)) != 0;
    }
    if (!bad) bad |= json_object_set(root, "metadata", meta) != 0 || json_object_set(root, "weight_map", map) != 0;
    json_decref(meta);
    json_decref(map);
    char *text = bad ? NULL : json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(root);
    if (!text) return cpt_errf(err, "%s: cannot build the shard index (out of memory)", dir);
    char path[4096 + 64];
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    size_t len = strlen(text);
    text[len] = '\n'; /* json_dumps' terminator becomes a final newline; the length covers it */
    int rc = cpt_write_file_atomic(path, text, len + 1, err);
    free(text);
    return rc;
}

int cpt_st_writer_finish_sharded(cpt_st_writer *w, const char *dir, uint64_t max_shard_bytes, cpt_err *err) {
    char path[4096 + 64];
    int rc = -1;
    size_t *shard_of = NULL, written = 0, n_shards = 0;
    uint64_t *sizes = NULL;
    char **names = malloc((w->n ? w->n : 1) * sizeof *names);
    shard_of = malloc((w->n ? w->n : 1) * sizeof *shard_of);
    sizes = malloc((w->n ? w->n : 1) * sizeof *sizes);
    if (!names || !shard_of || !sizes) { cpt_errf(err, "%s: out of memory", dir); goto out; }
    /* repeated names: checked on a sorted copy, the tensors keep the order they were added in */
    for (size_t i = 0; i < w->n; i++) names[i] = w->t[i].name, sizes[i] = w->t[i].nbytes;
    qsort(names, w->n, sizeof *names, str_ptr_cmp);
    for (size_t i = 1; i < w->n; i++)
        if (strcmp(names[i - 1], names[i]) == 0) {
            cpt_errf(err, "%s: tensor \"%s\" added twice", dir, names[i]);
            goto out;
        }
    n_shards = cpt_st_shard_plan(sizes, w->n, max_shard_bytes, shard_of);
    if (n_shards <= 1) {
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        rc = cpt_st_writer_finish(w, path, err);
        w = NULL;
        goto out;
    }
    for (size_t s = 0; s < n_shards; s++) {
        cpt_st_writer *sw = cpt_st_writer_new();
        if (!sw) { cpt_errf(err, "%s: out of memory", dir); goto out; }
        int bad = 0;
        for (size_t k = 0; !bad && k < w->nmeta; k++) bad = cpt_st_writer_meta(sw, w->meta_keys[k], w->meta_vals[k], err);
        for (size_t i = 0; !bad && i < w->n; i++)
            if (shard_of[i] == s)
                bad = cpt_st_writer_add(sw, w->t[i].name, w->t[i].dt, w->t[i].ndim, w->t[i].shape, w->t[i].data, err);
        char name[64];
        cpt_st_shard_name(name, sizeof name, s, n_shards);
        snprintf(path, sizeof path, "%s/%s", dir, name);
        if (bad) { cpt_st_writer_free(sw); goto out; }
        if (cpt_st_writer_finish(sw, path, err)) goto out; /* frees sw */
        written++;
    }
    rc = write_index(w, shard_of, n_shards, dir, err);
out:
    if (rc && written) /* no half-written set: the shards already in place go */
        for (size_t s = 0; s < written; s++) {
            char name[64];
            cpt_st_shard_name(name, sizeof name, s, n_shards);
            snprintf(path, sizeof path, "%s/%s", dir, name);
            unlink(path);
        }
    free(names);
    free(shard_of);
    free(sizes);
    cpt_st_writer_free(w);
    return rc;
}
