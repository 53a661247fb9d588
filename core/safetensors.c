/* safetensors reader: header validation, mmap of single files, sharded sets through the index, typed reads. */
#include "core/safetensors.h"

#include <errno.h>
#include <float.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/fs.h"
#include "core/json_util.h"

#define ST_MAX_HEADER 100000000ULL /* the limit the reference implementation uses */

typedef struct shard {
    char *path;       /* or the name given for errors */
    void *map;        /* NULL for memory buffers and empty files */
    size_t map_len;
} shard;

struct cpt_st_file {
    cpt_st_tensor *tensors;
    uint32_t *tensor_shard; /* shard index of each tensor */
    size_t n, cap;
    shard *shards;
    size_t nshards;
    char **meta_keys, **meta_vals;
    size_t nmeta;
};

/* ---- building ------------------------------------------------------------------------------------------ */

static cpt_st_file *file_new(void) { return calloc(1, sizeof(cpt_st_file)); }

static int add_shard(cpt_st_file *f, const char *path, cpt_err *err) {
    shard *s = realloc(f->shards, (f->nshards + 1) * sizeof *s);
    if (!s) return cpt_errf(err, "%s: out of memory", path);
    f->shards = s;
    memset(&s[f->nshards], 0, sizeof *s);
    if (!(s[f->nshards].path = strdup(path))) return cpt_errf(err, "%s: out of memory", path);
    f->nshards++;
    return 0;
}

static cpt_st_tensor *add_tensor(cpt_st_file *f, const char *name, uint32_t shard_idx, cpt_err *err) {
    if (f->n == f->cap) {
        size_t cap = f->cap ? f->cap * 2 : 64;
        cpt_st_tensor *t = realloc(f->tensors, cap * sizeof *t);
        if (!t) { cpt_errf(err, "out of memory for %zu tensors", cap); return NULL; }
        f->tensors = t;
        uint32_t *ts = realloc(f->tensor_shard, cap * sizeof *ts);
        if (!ts) { cpt_errf(err, "out of memory for %zu tensors", cap); return NULL; }
        f->tensor_shard = ts;
        f->cap = cap;
    }
    cpt_st_tensor *t = &f->tensors[f->n];
    memset(t, 0, sizeof *t);
    if (!(t->name = strdup(name))) { cpt_errf(err, "out of memory"); return NULL; }
    f->tensor_shard[f->n] = shard_idx;
    f->n++;
    return t;
}

/* Adds key=value unless key is already present (earlier sources win). */
static int add_meta(cpt_st_file *f, const char *key, const char *val, cpt_err *err) {
    for (size_t i = 0; i < f->nmeta; i++)
        if (strcmp(f->meta_keys[i], key) == 0) return 0;
    char **k = realloc(f->meta_keys, (f->nmeta + 1) * sizeof *k);
    if (!k) return cpt_errf(err, "out of memory");
    f->meta_keys = k;
    char **v = realloc(f->meta_vals, (f->nmeta + 1) * sizeof *v);
    if (!v) return cpt_errf(err, "out of memory");
    f->meta_vals = v;
    char *kk = strdup(key), *vv = strdup(val);
    if (!kk || !vv) { free(kk); free(vv); return cpt_errf(err, "out of memory"); }
    f->meta_keys[f->nmeta] = kk;
    f->meta_vals[f->nmeta] = vv;
    f->nmeta++;
    return 0;
}

void cpt_st_close(cpt_st_file *f) {
    if (!f) return;
    for (size_t i = 0; i < f->n; i++) free(f->tensors[i].name);
    free(f->tensors);
    free(f->tensor_shard);
    for (size_t i = 0; i < f->nshards; i++) {
        if (f->shards[i].map) munmap(f->shards[i].map, f->shards[i].map_len);
        free(f->shards[i].path);
    }
    free(f->shards);
    for (size_t i = 0; i < f->nmeta; i++) { free(f->meta_keys[i]); free(f->meta_vals[i]); }
    free(f->meta_keys);
    free(f->meta_vals);
    free(f);
}

/* ---- header validation --------------------------------------------------------------------------------- */

static void format_shape(char *buf, size_t cap, const int64_t *shape, int ndim) {
    size_t at = 0;
    at += (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < ndim && at < cap; i++)
        at += (size_t)snprintf(buf + at, cap - at, "%s%" PRId64, i ? ", " : "", shape[i]);
    if (at < cap) snprintf(buf + at, cap - at, "]");
}

/* Fills t from one header entry; data_len is the size of the data section. *begin gets the start offset. */
static int parse_entry(const char *fname, const char *name, json_t *entry, const unsigned char *data,
                       size_t data_len, cpt_st_tensor *t, uint64_t *begin_out, cpt_err *err) {
    if (!json_is_object(entry)) return cpt_errf(err, "%s: tensor \"%s\": entry is not an object", fname, name);

    json_t *jd = json_object_get(entry, "dtype");
    if (!jd) return cpt_errf(err, "%s: tensor \"%s\": missing \"dtype\"", fname, name);
    if (!json_is_string(jd)) return cpt_errf(err, "%s: tensor \"%s\": \"dtype\" is not a string", fname, name);
    if (cpt_dtype_from_name(json_string_value(jd), &t->dtype) != 0)
        return cpt_errf(err, "%s: tensor \"%s\": unsupported dtype \"%.32s\" (supported: F32 BF16 F16 F64 I32 I64 U8)",
                        fname, name, json_string_value(jd));

    json_t *js = json_object_get(entry, "shape");
    if (!js) return cpt_errf(err, "%s: tensor \"%s\": missing \"shape\"", fname, name);
    if (!json_is_array(js)) return cpt_errf(err, "%s: tensor \"%s\": \"shape\" is not an array", fname, name);
    size_t nd = json_array_size(js);
    if (nd > CPT_ST_MAX_DIMS)
        return cpt_errf(err, "%s: tensor \"%s\": shape has %zu dimensions (at most %d)", fname, name, nd,
                        CPT_ST_MAX_DIMS);
    t->ndim = (int)nd;
    uint64_t nbytes = cpt_dtype_size(t->dtype);
    for (size_t i = 0; i < nd; i++) {
        json_t *d = json_array_get(js, i);
        if (!json_is_integer(d))
            return cpt_errf(err, "%s: tensor \"%s\": shape[%zu] is not an integer", fname, name, i);
        json_int_t v = json_integer_value(d);
        if (v < 0) return cpt_errf(err, "%s: tensor \"%s\": shape[%zu] = %lld is negative", fname, name, i, (long long)v);
        t->shape[i] = (int64_t)v;
        if (__builtin_mul_overflow(nbytes, (uint64_t)v, &nbytes) || nbytes > SIZE_MAX)
            return cpt_errf(err, "%s: tensor \"%s\": shape overflows the size of a tensor", fname, name);
    }

    json_t *jo = json_object_get(entry, "data_offsets");
    if (!jo) return cpt_errf(err, "%s: tensor \"%s\": missing \"data_offsets\"", fname, name);
    if (!json_is_array(jo) || json_array_size(jo) != 2 || !json_is_integer(json_array_get(jo, 0)) ||
        !json_is_integer(json_array_get(jo, 1)))
        return cpt_errf(err, "%s: tensor \"%s\": \"data_offsets\" is not an array of two integers", fname, name);
    json_int_t b = json_integer_value(json_array_get(jo, 0)), e = json_integer_value(json_array_get(jo, 1));
    if (b < 0 || e < b || (uint64_t)e > data_len)
        return cpt_errf(err, "%s: tensor \"%s\": data_offsets [%lld, %lld] out of range (data section is %zu bytes)",
                        fname, name, (long long)b, (long long)e, data_len);
    if ((uint64_t)(e - b) != nbytes) {
        char sh[160];
        format_shape(sh, sizeof sh, t->shape, t->ndim);
        return cpt_errf(err, "%s: tensor \"%s\": data_offsets [%lld, %lld] span %lld bytes but %s %s needs %" PRIu64,
                        fname, name, (long long)b, (long long)e, (long long)(e - b), cpt_dtype_name(t->dtype), sh,
                        nbytes);
    }
    t->nbytes = (size_t)nbytes;
    t->data = data + b;
    *begin_out = (uint64_t)b;
    return 0;
}

typedef struct span { uint64_t begin, end; const char *name; } span;

static int span_cmp(const void *a, const void *b) {
    const span *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

/* Parses one file's bytes into f as shard shard_idx. On failure f may hold some of its tensors: the caller
 * closes f. */
static int parse_buffer(cpt_st_file *f, uint32_t shard_idx, const unsigned char *bytes, size_t len, cpt_err *err) {
    const char *fname = f->shards[shard_idx].path;
    if (len < 8)
        return cpt_errf(err, "%s: truncated: %zu bytes, but a safetensors file starts with an 8-byte header length",
                        fname, len);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | bytes[i];
    if (hlen > ST_MAX_HEADER)
        return cpt_errf(err, "%s: header length %" PRIu64 " is absurd (limit %llu): not a safetensors file?", fname,
                        hlen, ST_MAX_HEADER);
    if (hlen > len - 8)
        return cpt_errf(err, "%s: truncated: header length %" PRIu64 " runs past the end of the file (%zu bytes)",
                        fname, hlen, len);
    const unsigned char *data = bytes + 8 + hlen;
    size_t data_len = len - 8 - (size_t)hlen;

    json_error_t je;
    json_t *root = json_loadb((const char *)bytes + 8, (size_t)hlen, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        if (json_error_code(&je) == json_error_duplicate_key)
            return cpt_errf(err, "%s: header: a name or field given twice (repeated key): %s (header byte %d)", fname,
                            je.text, je.position);
        return cpt_errf(err, "%s: header is not valid JSON: %s (header byte %d)", fname, je.text, je.position);
    }
    int rc = -1;
    span *spans = NULL;
    if (!json_is_object(root)) {
        cpt_errf(err, "%s: header is not a JSON object", fname);
        goto out;
    }
    size_t nspans = 0;
    spans = malloc((json_object_size(root) + 1) * sizeof *spans);
    if (!spans) { cpt_errf(err, "%s: out of memory", fname); goto out; }
    const char *key;
    json_t *val;
    json_object_foreach(root, key, val) {
        if (strcmp(key, "__metadata__") == 0) {
            if (!json_is_object(val)) { cpt_errf(err, "%s: __metadata__ is not an object", fname); goto out; }
            const char *mk;
            json_t *mv;
            json_object_foreach(val, mk, mv) {
                if (!json_is_string(mv)) {
                    cpt_errf(err, "%s: __metadata__ value of \"%s\" is not a string", fname, mk);
                    goto out;
                }
                if (add_meta(f, mk, json_string_value(mv), err) != 0) goto out;
            }
            continue;
        }
        if (!key[0]) { cpt_errf(err, "%s: a tensor has an empty name", fname); goto out; }
        cpt_st_tensor *t = add_tensor(f, key, shard_idx, err);
        if (!t) goto out;
        uint64_t begin = 0;
        if (parse_entry(fname, key, val, data, data_len, t, &begin, err) != 0) goto out;
        if (t->nbytes) spans[nspans++] = (span){begin, begin + t->nbytes, t->name};
    }
    /* Overlap: sorted by start, each non-empty tensor must start at or after the end of every earlier one. */
    qsort(spans, nspans, sizeof *spans, span_cmp);
    size_t far = 0; /* the span reaching furthest so far */
    for (size_t i = 1; i < nspans; i++) {
        if (spans[i].begin < spans[far].end) {
            cpt_errf(err, "%s: tensors \"%s\" [%" PRIu64 ", %" PRIu64 ") and \"%s\" [%" PRIu64 ", %" PRIu64
                          ") overlap", fname, spans[far].name, spans[far].begin, spans[far].end, spans[i].name,
                     spans[i].begin, spans[i].end);
            goto out;
        }
        if (spans[i].end > spans[far].end) far = i;
    }
    rc = 0;
out:
    free(spans);
    json_decref(root);
    return rc;
}

static int name_cmp(const void *a, const void *b) {
    return strcmp(((const cpt_st_tensor *)a)->name, ((const cpt_st_tensor *)b)->name);
}

/* Sorts tensors by name (keeping each tensor's shard index with it) and rejects a name seen twice. */
static int sort_and_check(cpt_st_file *f, cpt_err *err) {
    if (f->n < 2) return 0;
    /* Sort (tensor, shard) pairs so the shard indices follow their tensors. */
    typedef struct { cpt_st_tensor t; uint32_t shard; } pair;
    pair *p = malloc(f->n * sizeof *p);
    if (!p) return cpt_errf(err, "out of memory");
    for (size_t i = 0; i < f->n; i++) p[i] = (pair){f->tensors[i], f->tensor_shard[i]};
    qsort(p, f->n, sizeof *p, name_cmp); /* the tensor is the first member, so name_cmp applies */
    for (size_t i = 0; i < f->n; i++) { f->tensors[i] = p[i].t; f->tensor_shard[i] = p[i].shard; }
    free(p);
    for (size_t i = 1; i < f->n; i++)
        if (strcmp(f->tensors[i - 1].name, f->tensors[i].name) == 0)
            return cpt_errf(err, "tensor \"%s\" appears in both %s and %s", f->tensors[i].name,
                            f->shards[f->tensor_shard[i - 1]].path, f->shards[f->tensor_shard[i]].path);
    return 0;
}

/* ---- opening ------------------------------------------------------------------------------------------- */

cpt_st_file *cpt_st_open_memory(const void *bytes, size_t len, const char *name_for_errors, cpt_err *err) {
    const char *name = name_for_errors ? name_for_errors : "(memory)";
    cpt_st_file *f = file_new();
    if (!f) { cpt_errf(err, "%s: out of memory", name); return NULL; }
    if (add_shard(f, name, err) != 0 || parse_buffer(f, 0, bytes, len, err) != 0 || sort_and_check(f, err) != 0) {
        cpt_st_close(f);
        return NULL;
    }
    return f;
}

/* Maps path read-only into a new shard of f and parses it. */
static int open_shard(cpt_st_file *f, const char *path, cpt_err *err) {
    if (add_shard(f, path, err) != 0) return -1;
    shard *s = &f->shards[f->nshards - 1];
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return cpt_errno(err, "%s: open", path);
    struct stat st;
    if (fstat(fd, &st) != 0) { cpt_errno(err, "%s: stat", path); close(fd); return -1; }
    if (!S_ISREG(st.st_mode)) { close(fd); return cpt_errf(err, "%s: not a regular file", path); }
    size_t len = (size_t)st.st_size;
    if (len > 0) {
        void *m = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) { cpt_errno(err, "%s: mmap", path); close(fd); return -1; }
        s->map = m;
        s->map_len = len;
    }
    close(fd); /* the mapping keeps the file */
    return parse_buffer(f, (uint32_t)(f->nshards - 1), s->map, len, err);
}

static int has_suffix(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* A shard name from an index must stay inside the index's folder. */
static int shard_name_ok(const char *s) {
    if (!s[0] || s[0] == '/') return 0;
    for (const char *p = s; *p;) {
        const char *q = strchr(p, '/');
        size_t n = q ? (size_t)(q - p) : strlen(p);
        if (n == 2 && p[0] == '.' && p[1] == '.') return 0;
        if (!q) break;
        p = q + 1;
    }
    return 1;
}

static int str_cmp(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

static cpt_st_file *open_index(const char *index_path, cpt_err *err) {
    json_t *root = cpt_json_load_file(index_path, 0, err);
    if (!root) return NULL;
    cpt_st_file *f = NULL;
    const char **names = NULL;
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", index_path);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = '\0';
    else snprintf(dir, sizeof dir, ".");

    json_t *wm = json_object_get(root, "weight_map");
    if (!json_is_object(root) || !json_is_object(wm)) {
        cpt_errf(err, "%s: no \"weight_map\" object", index_path);
        goto fail;
    }
    size_t nw = json_object_size(wm), nu = 0;
    names = malloc((nw + 1) * sizeof *names);
    if (!(f = file_new()) || !names) { cpt_errf(err, "%s: out of memory", index_path); goto fail; }
    const char *key;
    json_t *val;
    json_object_foreach(wm, key, val) {
        if (!json_is_string(val)) {
            cpt_errf(err, "%s: weight_map: tensor \"%s\": the shard name is not a string", index_path, key);
            goto fail;
        }
        if (!shard_name_ok(json_string_value(val))) {
            cpt_errf(err, "%s: weight_map: tensor \"%s\": shard \"%s\" is empty, absolute or leaves the folder",
                     index_path, key, json_string_value(val));
            goto fail;
        }
        names[nu++] = json_string_value(val);
    }
    qsort(names, nu, sizeof *names, str_cmp);

    json_t *meta = json_object_get(root, "metadata");
    if (json_is_object(meta)) {
        json_object_foreach(meta, key, val) {
            char num[32];
            const char *s = NULL;
            if (json_is_string(val)) s = json_string_value(val);
            else if (json_is_integer(val)) { snprintf(num, sizeof num, "%lld", (long long)json_integer_value(val)); s = num; }
            if (s && add_meta(f, key, s, err) != 0) goto fail;
        }
    }
    for (size_t i = 0; i < nu; i++) {
        if (i && strcmp(names[i], names[i - 1]) == 0) continue;
        char path[8192];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        if (open_shard(f, path, err) != 0) goto fail;
    }
    if (sort_and_check(f, err) != 0) goto fail;
    /* Every name in the index must be in the shard the index names. */
    json_object_foreach(wm, key, val) {
        const cpt_st_tensor *t = cpt_st_find(f, key);
        char want[8192];
        snprintf(want, sizeof want, "%s/%s", dir, json_string_value(val));
        if (!t) {
            cpt_errf(err, "%s: tensor \"%s\" is listed for %s but that shard lacks it", index_path, key, want);
            goto fail;
        }
        const char *have = cpt_st_tensor_file(f, t);
        if (strcmp(have, want) != 0) {
            cpt_errf(err, "%s: tensor \"%s\" is listed for %s but is in %s", index_path, key, want, have);
            goto fail;
        }
    }
    free(names);
    json_decref(root);
    return f;
fail:
    free(names);
    json_decref(root);
    cpt_st_close(f);
    return NULL;
}

static cpt_st_file *open_single(const char *path, cpt_err *err) {
    cpt_st_file *f = file_new();
    if (!f) { cpt_errf(err, "%s: out of memory", path); return NULL; }
    if (open_shard(f, path, err) != 0 || sort_and_check(f, err) != 0) {
        cpt_st_close(f);
        return NULL;
    }
    return f;
}

cpt_st_file *cpt_st_open(const char *path, cpt_err *err) {
    struct stat st;
    if (stat(path, &st) != 0) { cpt_errno(err, "%s", path); return NULL; }
    if (S_ISDIR(st.st_mode)) {
        char p[4096 + 64];
        snprintf(p, sizeof p, "%s/model.safetensors", path);
        if (cpt_path_exists(p)) return open_single(p, err);
        snprintf(p, sizeof p, "%s/model.safetensors.index.json", path);
        if (cpt_path_exists(p)) return open_index(p, err);
        cpt_errf(err, "%s: folder holds neither model.safetensors nor model.safetensors.index.json", path);
        return NULL;
    }
    if (has_suffix(path, ".json")) return open_index(path, err);
    return open_single(path, err);
}

/* double -> float, round to nearest even; values from FLT_MAX + half its ulp (2^103) up go to infinity
 * explicitly, since the plain cast is undefined behaviour there. */
static inline float f64_to_f32(double v) {
    const double limit = (double)FLT_MAX + 0x1p103;
    if (v >= limit) return (float)INFINITY;
    if (v <= -limit) return -(float)INFINITY;
    return (float)v;
}

/* ---- access -------------------------------------------------------------------------------------------- */

size_t cpt_st_count(const cpt_st_file *f) { return f->n; }

const cpt_st_tensor *cpt_st_at(const cpt_st_file *f, size_t i) { return i < f->n ? &f->tensors[i] : NULL; }

const cpt_st_tensor *cpt_st_find(const cpt_st_file *f, const char *name) {
    size_t lo = 0, hi = f->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(f->tensors[mid].name, name);
        if (c == 0) return &f->tensors[mid];
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

const char *cpt_st_metadata(const cpt_st_file *f, const char *key) {
    for (size_t i = 0; i < f->nmeta; i++)
        if (strcmp(f->meta_keys[i], key) == 0) return f->meta_vals[i];
    return NULL;
}

size_t cpt_st_metadata_count(const cpt_st_file *f) { return f->nmeta; }

int cpt_st_metadata_at(const cpt_st_file *f, size_t i, const char **key, const char **value) {
    if (i >= f->nmeta) return -1;
    *key = f->meta_keys[i];
    *value = f->meta_vals[i];
    return 0;
}

const char *cpt_st_tensor_file(const cpt_st_file *f, const cpt_st_tensor *t) {
    if (t < f->tensors || t >= f->tensors + f->n) return "?";
    return f->shards[f->tensor_shard[t - f->tensors]].path;
}

size_t cpt_st_numel(const cpt_st_tensor *t) {
    size_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= (size_t)t->shape[i]; /* validated not to overflow at open */
    return n;
}

int cpt_st_read_f32(const cpt_st_tensor *t, float *out, size_t n, cpt_err *err) {
    size_t numel = cpt_st_numel(t);
    if (n != numel)
        return cpt_errf(err, "tensor \"%s\": asked for %zu elements, it has %zu", t->name, n, numel);
    const unsigned char *p = t->data;
    switch (t->dtype) {
    case CPT_DT_F32: if (n) memcpy(out, p, n * 4); return 0;
    case CPT_DT_BF16: cpt_bf16_to_f32_n(p, out, n); return 0;
    case CPT_DT_F16: cpt_f16_to_f32_n(p, out, n); return 0;
    case CPT_DT_F64: for (size_t i = 0; i < n; i++) { double v; memcpy(&v, p + 8 * i, 8); out[i] = f64_to_f32(v); } return 0;
    case CPT_DT_I32: for (size_t i = 0; i < n; i++) { int32_t v; memcpy(&v, p + 4 * i, 4); out[i] = (float)v; } return 0;
    case CPT_DT_I64: for (size_t i = 0; i < n; i++) { int64_t v; memcpy(&v, p + 8 * i, 8); out[i] = (float)v; } return 0;
    case CPT_DT_U8: for (size_t i = 0; i < n; i++) out[i] = (float)p[i]; return 0;
    }
    return cpt_errf(err, "tensor \"%s\": unknown dtype %d", t->name, (int)t->dtype);
}

int cpt_st_read_bf16(const cpt_st_tensor *t, uint16_t *out, size_t n, cpt_err *err) {
    size_t numel = cpt_st_numel(t);
    if (n != numel)
        return cpt_errf(err, "tensor \"%s\": asked for %zu elements, it has %zu", t->name, n, numel);
    const unsigned char *p = t->data;
    switch (t->dtype) {
    case CPT_DT_BF16: if (n) memcpy(out, p, n * 2); return 0;
    case CPT_DT_F32: for (size_t i = 0; i < n; i++) { float v; memcpy(&v, p + 4 * i, 4); out[i] = cpt_f32_to_bf16(v); } return 0;
    case CPT_DT_F16: for (size_t i = 0; i < n; i++) { uint16_t h; memcpy(&h, p + 2 * i, 2); out[i] = cpt_f32_to_bf16(cpt_f16_to_f32(h)); } return 0;
    case CPT_DT_F64: for (size_t i = 0; i < n; i++) { double v; memcpy(&v, p + 8 * i, 8); out[i] = cpt_f32_to_bf16(f64_to_f32(v)); } return 0;
    default: break;
    }
    return cpt_errf(err, "tensor \"%s\": %s is not a floating-point dtype, cannot read as bf16", t->name,
                    cpt_dtype_name(t->dtype));
}
