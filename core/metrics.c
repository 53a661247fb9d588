/* metrics.jsonl writer and reader. */
#include "core/metrics.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/fs.h"
#include "core/json_util.h"
#include "core/tfevents.h"

struct cpt_metrics {
    int fd;
    char *path;
    int fsync_every, unsynced;
    int torn;          /* a failed write may have left part of a line: start the next one on a new line */
    int open_record;
    cpt_json_buf line;
    cpt_json_buf keys; /* the record's keys, each followed by a NUL, for the repeat check */
    char problem[300]; /* the first misuse in the record, reported by end */
    /* TensorBoard (cpt_metrics_tensorboard): the record's numbers, as offsets of their keys in `keys` */
    char *tb_dir;      /* set: TensorBoard on; the file is made at the first record with numbers */
    int64_t tb_start;
    cpt_tfevents *tb;
    int64_t step;
    double wall_time;
    size_t n_num, cap_num;
    size_t *num_key;
    double *num_val;
    const char **tags;
};

cpt_metrics *cpt_metrics_open(const char *path, cpt_err *err) {
    cpt_metrics *m = calloc(1, sizeof *m);
    if (!m || !(m->path = strdup(path))) { free(m); cpt_errf(err, "%s: out of memory", path); return NULL; }
    m->fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (m->fd < 0) { cpt_errno(err, "%s: open metrics", path); free(m->path); free(m); return NULL; }
    cpt_json_buf_init(&m->line);
    cpt_json_buf_init(&m->keys);
    /* A torn last line from a crash: end it so the next record is a line of its own. (With other processes
     * appending at this moment the last byte may belong to a line still being written; the extra newline then
     * makes an empty line, which readers skip.) */
    struct stat st;
    if (fstat(m->fd, &st) == 0 && st.st_size > 0) {
        int rfd = open(path, O_RDONLY | O_CLOEXEC);
        char last = '\n';
        if (rfd >= 0) {
            if (pread(rfd, &last, 1, st.st_size - 1) != 1) last = '\n';
            close(rfd);
        }
        if (last != '\n') m->torn = 1;
    }
    return m;
}

/* The step of a metrics line, or -1 when it is not an object with an integer step. */
static int64_t line_step(const char *line, size_t n) {
    json_t *j = json_loadb(line, n, JSON_REJECT_DUPLICATES, NULL);
    json_t *step = j ? json_object_get(j, "step") : NULL;
    int64_t s = json_is_object(j) && json_is_integer(step) ? (int64_t)json_integer_value(step) : -1;
    json_decref(j);
    return s;
}

long cpt_metrics_truncate_after(const char *path, int64_t step, cpt_err *err) {
    FILE *f = fopen(path, "rb");
    if (!f) return errno == ENOENT ? 0 : cpt_errno(err, "%s", path);
    cpt_atomic_file af;
    if (cpt_atomic_open(&af, path, err)) {
        fclose(f);
        return -1;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    long dropped = 0;
    int werr = 0;
    while ((len = getline(&line, &cap, f)) >= 0) {
        size_t n = (size_t)len;
        while (n && (line[n - 1] == '\n' || line[n - 1] == '\r' || line[n - 1] == ' ')) n--;
        if (n == 0) continue;
        int64_t s = line_step(line, n);
        if (s < 0 || s > step) {
            dropped++;
            continue;
        }
        if (fwrite(line, 1, n, af.fp) != n || fputc('\n', af.fp) == EOF) werr = 1;
    }
    int rerr = ferror(f);
    free(line);
    fclose(f);
    if (rerr || werr) {
        cpt_atomic_abort(&af);
        return rerr ? cpt_errf(err, "%s: read error", path) : cpt_errf(err, "%s: writing the truncated copy", path);
    }
    if (cpt_atomic_commit(&af, err)) return cpt_err_prefix(err, "%s: truncating to step %" PRId64, path, step);
    return dropped;
}

int cpt_metrics_tensorboard(cpt_metrics *m, const char *dir, int64_t first_step, cpt_err *err) {
    if (!m) return 0;
    m->tb_start = first_step;
    if (m->tb_dir) return cpt_errf(err, "%s: TensorBoard events already go to %s", m->path, m->tb_dir);
    if (!(m->tb_dir = strdup(dir))) return cpt_errf(err, "%s: out of memory", dir);
    return 0;
}

const char *cpt_metrics_tensorboard_path(const cpt_metrics *m) { return m && m->tb ? cpt_tfevents_path(m->tb) : NULL; }

/* The number just added under the key at offset off of `keys`, for the record's event. */
static void add_number(cpt_metrics *m, size_t off, double v) {
    if (!m->tb_dir || m->problem[0]) return;
    if (m->n_num == m->cap_num) {
        size_t cap = m->cap_num ? m->cap_num * 2 : 32;
        size_t *k = realloc(m->num_key, cap * sizeof *k);
        if (k) m->num_key = k;
        double *d = realloc(m->num_val, cap * sizeof *d);
        if (d) m->num_val = d;
        const char **t = realloc(m->tags, cap * sizeof *t);
        if (t) m->tags = t;
        if (!k || !d || !t) {
            snprintf(m->problem, sizeof m->problem, "out of memory for the TensorBoard event");
            return;
        }
        m->cap_num = cap;
    }
    m->num_key[m->n_num] = off;
    m->num_val[m->n_num++] = v;
}

void cpt_metrics_close(cpt_metrics *m) {
    if (!m) return;
    cpt_tfevents_close(m->tb);
    free(m->tb_dir);
    free(m->num_key);
    free(m->num_val);
    free(m->tags);
    fsync(m->fd);
    close(m->fd);
    cpt_json_buf_free(&m->line);
    cpt_json_buf_free(&m->keys);
    free(m->path);
    free(m);
}

void cpt_metrics_set_fsync_every(cpt_metrics *m, int every) {
    if (m) m->fsync_every = every < 0 ? 0 : every;
}

void cpt_metrics_begin(cpt_metrics *m, int64_t step) {
    if (!m) return;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    cpt_json_buf_reset(&m->line);
    cpt_json_buf_reset(&m->keys);
    m->problem[0] = '\0';
    m->open_record = 1;
    m->step = step;
    m->wall_time = (double)ts.tv_sec + (double)(ts.tv_nsec / 1000000) * 1e-3; /* the line's "time" */
    m->n_num = 0;
    if (m->torn) cpt_json_buf_append(&m->line, "\n", 1); /* end a torn line inside this record's one write */
    cpt_json_buf_printf(&m->line, "{\"step\":%" PRId64 ",\"time\":%lld.%03ld", step, (long long)ts.tv_sec,
                        ts.tv_nsec / 1000000);
}

/* Validates key and writes `,"key":` ; returns 0 when the value should follow. */
static int add_key(cpt_metrics *m, const char *key) {
    if (!m || m->problem[0]) return -1;
    if (!m->open_record) { snprintf(m->problem, sizeof m->problem, "metric \"%s\" added outside begin/end", key ? key : "(null)"); return -1; }
    if (!key || !key[0]) { snprintf(m->problem, sizeof m->problem, "empty metric name"); return -1; }
    if (!strcmp(key, "step") || !strcmp(key, "time")) {
        snprintf(m->problem, sizeof m->problem, "metric name \"%s\" is reserved", key);
        return -1;
    }
    for (size_t at = 0; at < m->keys.len; at += strlen(m->keys.s + at) + 1)
        if (strcmp(m->keys.s + at, key) == 0) {
            snprintf(m->problem, sizeof m->problem, "metric \"%.200s\" added twice in one record", key);
            return -1;
        }
    cpt_json_buf_append(&m->keys, key, strlen(key) + 1);
    cpt_json_buf_append(&m->line, ",", 1);
    cpt_json_buf_string(&m->line, key);
    cpt_json_buf_append(&m->line, ":", 1);
    return 0;
}

void cpt_metrics_add(cpt_metrics *m, const char *key, double value) {
    size_t off = m ? m->keys.len : 0;
    if (add_key(m, key) == 0) {
        cpt_json_buf_number(&m->line, value);
        add_number(m, off, value);
    }
}

void cpt_metrics_add_int(cpt_metrics *m, const char *key, int64_t value) {
    size_t off = m ? m->keys.len : 0;
    if (add_key(m, key) == 0) {
        cpt_json_buf_printf(&m->line, "%" PRId64, value);
        add_number(m, off, (double)value);
    }
}

void cpt_metrics_add_str(cpt_metrics *m, const char *key, const char *value) {
    if (add_key(m, key) == 0) cpt_json_buf_string(&m->line, value ? value : "");
}

int cpt_metrics_end(cpt_metrics *m, cpt_err *err) {
    if (!m) return 0;
    if (!m->open_record) return cpt_errf(err, "%s: metrics end without begin", m->path);
    m->open_record = 0;
    if (m->problem[0]) return cpt_errf(err, "%s: %s", m->path, m->problem);
    cpt_json_buf_append(&m->line, "}\n", 2);
    if (!cpt_json_buf_ok(&m->line)) return cpt_errf(err, "%s: out of memory for a metrics line", m->path);
    const char *p = m->line.s;
    size_t left = m->line.len;
    while (left > 0) { /* one write() for a regular file; the loop only matters for a full disk or a signal */
        ssize_t w = write(m->fd, p, left);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            m->torn = 1;
            return cpt_errno(err, "%s: write metrics", m->path);
        }
        p += w;
        left -= (size_t)w;
    }
    m->torn = 0;
    if (m->fsync_every > 0 && ++m->unsynced >= m->fsync_every) {
        m->unsynced = 0;
        if (fsync(m->fd) != 0) return cpt_errno(err, "%s: fsync metrics", m->path);
    }
    if (m->tb_dir && m->n_num > 0) {
        if (!m->tb && !(m->tb = cpt_tfevents_open(m->tb_dir, m->tb_start, err))) return cpt_err_prefix(err, "metrics.tensorboard");
        for (size_t i = 0; i < m->n_num; i++) m->tags[i] = m->keys.s + m->num_key[i];
        if (cpt_tfevents_scalars(m->tb, m->step, m->wall_time, m->tags, m->num_val, m->n_num, err))
            return cpt_err_prefix(err, "metrics.tensorboard");
    }
    return 0;
}

/* ---- reading ------------------------------------------------------------------------------------------- */

void cpt_metrics_series_free(cpt_metrics_series *s) {
    free(s->steps);
    free(s->values);
    free(s->times);
    memset(s, 0, sizeof *s);
}

/* Calls fn for every parsed line that is an object with an integer step; counts the others. */
typedef int (*line_fn)(json_t *obj, int64_t step, size_t lineno, void *ctx, cpt_err *err);

static int scan(const char *path, line_fn fn, void *ctx, size_t *bad, size_t *first_bad, cpt_err *err) {
    FILE *f = fopen(path, "rb");
    if (!f) return cpt_errno(err, "%s", path);
    char *line = NULL;
    size_t cap = 0, lineno = 0;
    ssize_t len;
    int rc = 0;
    *bad = 0;
    *first_bad = 0;
    while ((len = getline(&line, &cap, f)) >= 0) {
        lineno++;
        size_t n = (size_t)len;
        while (n && (line[n - 1] == '\n' || line[n - 1] == '\r' || line[n - 1] == ' ')) n--;
        if (n == 0) continue;
        json_t *j = json_loadb(line, n, JSON_REJECT_DUPLICATES, NULL);
        json_t *step = j ? json_object_get(j, "step") : NULL;
        if (!json_is_object(j) || !json_is_integer(step)) {
            if (!(*bad)++) *first_bad = lineno;
            json_decref(j);
            continue;
        }
        rc = fn(j, (int64_t)json_integer_value(step), lineno, ctx, err);
        json_decref(j);
        if (rc != 0) break;
    }
    free(line);
    fclose(f);
    return rc;
}

typedef struct series_ctx {
    const char *path, *key;
    cpt_metrics_series *s;
    size_t cap;
} series_ctx;

static int series_line(json_t *obj, int64_t step, size_t lineno, void *vctx, cpt_err *err) {
    series_ctx *c = vctx;
    json_t *v = json_object_get(obj, c->key);
    if (!v) return 0;
    double value;
    if (json_is_number(v)) value = json_number_value(v);
    else if (json_is_null(v)) value = NAN;
    else return cpt_errf(err, "%s:%zu: \"%s\" is not a number", c->path, lineno, c->key);
    json_t *t = json_object_get(obj, "time");
    cpt_metrics_series *s = c->s;
    /* A step at or below the last one: a resumed run re-logging; its points replace the old ones from there. */
    while (s->n > 0 && s->steps[s->n - 1] >= step) s->n--;
    if (s->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 256;
        int64_t *st = realloc(s->steps, cap * sizeof *st);
        if (st) s->steps = st;
        double *va = st ? realloc(s->values, cap * sizeof *va) : NULL;
        if (va) s->values = va;
        double *ti = va ? realloc(s->times, cap * sizeof *ti) : NULL;
        if (!ti) return cpt_errf(err, "%s: out of memory", c->path);
        s->times = ti;
        c->cap = cap;
    }
    s->steps[s->n] = step;
    s->values[s->n] = value;
    s->times[s->n] = json_is_number(t) ? json_number_value(t) : NAN;
    s->n++;
    return 0;
}

int cpt_metrics_read_series(const char *path, const char *key, cpt_metrics_series *out, cpt_err *err) {
    memset(out, 0, sizeof *out);
    series_ctx c = {path, key, out, 0};
    if (scan(path, series_line, &c, &out->bad_lines, &out->first_bad_line, err) != 0) {
        cpt_metrics_series_free(out);
        return -1;
    }
    return 0;
}

typedef struct keys_ctx {
    const char *path;
    char **keys;
    size_t n, cap;
} keys_ctx;

static int keys_line(json_t *obj, int64_t step, size_t lineno, void *vctx, cpt_err *err) {
    (void)step; (void)lineno;
    keys_ctx *c = vctx;
    const char *key;
    json_t *v;
    json_object_foreach(obj, key, v) {
        if (!(json_is_number(v) || json_is_null(v)) || !strcmp(key, "step") || !strcmp(key, "time")) continue;
        size_t lo = 0, hi = c->n; /* binary search for the insertion point */
        while (lo < hi) {
            size_t mid = (lo + hi) / 2;
            if (strcmp(c->keys[mid], key) < 0) lo = mid + 1;
            else hi = mid;
        }
        if (lo < c->n && strcmp(c->keys[lo], key) == 0) continue;
        if (c->n == c->cap) {
            size_t cap = c->cap ? c->cap * 2 : 32;
            char **k = realloc(c->keys, cap * sizeof *k);
            if (!k) return cpt_errf(err, "%s: out of memory", c->path);
            c->keys = k;
            c->cap = cap;
        }
        char *dup = strdup(key);
        if (!dup) return cpt_errf(err, "%s: out of memory", c->path);
        memmove(c->keys + lo + 1, c->keys + lo, (c->n - lo) * sizeof *c->keys);
        c->keys[lo] = dup;
        c->n++;
    }
    return 0;
}

int cpt_metrics_read_keys(const char *path, char ***keys, size_t *n, cpt_err *err) {
    keys_ctx c = {path, NULL, 0, 0};
    size_t bad, first_bad;
    if (scan(path, keys_line, &c, &bad, &first_bad, err) != 0) {
        cpt_metrics_keys_free(c.keys, c.n);
        return -1;
    }
    *keys = c.keys;
    *n = c.n;
    return 0;
}

void cpt_metrics_keys_free(char **keys, size_t n) {
    for (size_t i = 0; i < n; i++) free(keys[i]);
    free(keys);
}
