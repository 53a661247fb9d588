/* TensorBoard event file writer: TFRecord framing and the few Event protobuf fields it needs. */
#include "core/tfevents.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <time.h>
#include <unistd.h>

#include "core/fs.h"

struct cpt_tfevents {
    int fd;
    char *path;
    unsigned char *buf; /* one record being encoded */
    size_t len, cap;
    int oom;
};

uint32_t cpt_crc32c(const void *data, size_t n) {
    const unsigned char *p = data;
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0x82f63b78u & (0u - (c & 1u)));
    }
    return c ^ 0xffffffffu;
}

uint32_t cpt_tfrecord_masked_crc(const void *data, size_t n) {
    uint32_t c = cpt_crc32c(data, n);
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

/* ---- protobuf encoding into w->buf ---- */

static void put(cpt_tfevents *w, const void *p, size_t n) {
    if (w->oom) return;
    if (w->len + n > w->cap) {
        size_t cap = w->cap ? w->cap : 256;
        while (cap < w->len + n) cap *= 2;
        unsigned char *b = realloc(w->buf, cap);
        if (!b) {
            w->oom = 1;
            return;
        }
        w->buf = b;
        w->cap = cap;
    }
    memcpy(w->buf + w->len, p, n);
    w->len += n;
}

static void put_varint(cpt_tfevents *w, uint64_t v) {
    unsigned char b[10];
    size_t n = 0;
    do {
        b[n] = (unsigned char)(v & 0x7f);
        v >>= 7;
        if (v) b[n] |= 0x80;
        n++;
    } while (v);
    put(w, b, n);
}

static void put_le(cpt_tfevents *w, uint64_t v, size_t bytes) {
    unsigned char b[8];
    for (size_t i = 0; i < bytes; i++) b[i] = (unsigned char)(v >> (8 * i));
    put(w, b, bytes);
}

static size_t varint_len(uint64_t v) {
    size_t n = 1;
    while (v >= 0x80) v >>= 7, n++;
    return n;
}

enum { WIRE_VARINT = 0, WIRE_FIXED64 = 1, WIRE_LEN = 2, WIRE_FIXED32 = 5 };

static void put_tag(cpt_tfevents *w, unsigned field, unsigned wire) { put_varint(w, (uint64_t)(field << 3 | wire)); }

static void put_double(cpt_tfevents *w, unsigned field, double d) {
    uint64_t u;
    memcpy(&u, &d, sizeof u);
    put_tag(w, field, WIRE_FIXED64);
    put_le(w, u, 8);
}

/* Summary.Value {tag = 1, simple_value = 2}: its encoded size, then the encoding. */
static size_t value_len(const char *tag) {
    size_t t = strlen(tag);
    return 1 + varint_len(t) + t + 1 + 4;
}

static void put_value(cpt_tfevents *w, const char *tag, float v) {
    size_t t = strlen(tag);
    put_tag(w, 1, WIRE_LEN);
    put_varint(w, t);
    put(w, tag, t);
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    put_tag(w, 2, WIRE_FIXED32);
    put_le(w, u, 4);
}

/* Frames w->buf[12 .. len) (the Event, encoded after 12 reserved bytes) as a TFRecord and writes it. */
static int write_record(cpt_tfevents *w, cpt_err *err) {
    put_le(w, 0, 4); /* room for the data CRC */
    if (w->oom) {
        w->oom = 0;
        return cpt_errf(err, "%s: out of memory for an event", w->path);
    }
    size_t data_len = w->len - 16;
    for (int i = 0; i < 8; i++) w->buf[i] = (unsigned char)((uint64_t)data_len >> (8 * i));
    uint32_t hc = cpt_tfrecord_masked_crc(w->buf, 8), dc = cpt_tfrecord_masked_crc(w->buf + 12, data_len);
    for (int i = 0; i < 4; i++) {
        w->buf[8 + i] = (unsigned char)(hc >> (8 * i));
        w->buf[w->len - 4 + (size_t)i] = (unsigned char)(dc >> (8 * i));
    }
    const unsigned char *p = w->buf;
    size_t left = w->len;
    while (left > 0) {
        ssize_t n = write(w->fd, p, left);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return cpt_errno(err, "%s: write event", w->path);
        p += n;
        left -= (size_t)n;
    }
    return 0;
}

static void begin_event(cpt_tfevents *w, double wall_time, int64_t step) {
    w->len = 0;
    put_le(w, 0, 8); /* length and its CRC, filled by write_record */
    put_le(w, 0, 4);
    put_double(w, 1, wall_time);
    put_tag(w, 2, WIRE_VARINT);
    put_varint(w, (uint64_t)step); /* int64: negative steps as ten bytes, as protobuf does */
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The newest timestamp in the names of dir's event files (0 when none): a new file takes a later one, so the
 * files of a run's attempts sort in the order they were written (readers take them in name order). */
static long long newest_stamp(const char *dir) {
    static const char prefix[] = "events.out.tfevents.";
    long long best = 0;
    DIR *d = opendir(dir);
    if (!d) return 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (!strncmp(e->d_name, prefix, sizeof prefix - 1)) {
            long long t = strtoll(e->d_name + sizeof prefix - 1, NULL, 10);
            if (t > best) best = t;
        }
    closedir(d);
    return best;
}

cpt_tfevents *cpt_tfevents_open(const char *dir, int64_t start_step, cpt_err *err) {
    if (cpt_mkdir_p(dir, 0755, err)) return NULL;
    cpt_tfevents *w = calloc(1, sizeof *w);
    if (!w) {
        cpt_errf(err, "%s: out of memory", dir);
        return NULL;
    }
    char host[256] = "localhost";
    if (gethostname(host, sizeof host - 1) != 0) snprintf(host, sizeof host, "localhost");
    size_t cap = strlen(dir) + strlen(host) + 96;
    w->path = malloc(cap);
    w->fd = -1;
    long long stamp = (long long)time(NULL), newest = newest_stamp(dir);
    if (stamp <= newest) stamp = newest + 1;
    for (int k = 0; w->path && w->fd < 0 && k < 100; k++) {
        snprintf(w->path, cap, "%s/events.out.tfevents.%lld.%s.%ld", dir, stamp + k, host, (long)getpid());
        w->fd = open(w->path, O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0644);
        if (w->fd < 0 && errno != EEXIST) break;
    }
    if (!w->path || w->fd < 0) {
        if (w->path) cpt_errno(err, "%s: create event file", w->path);
        else cpt_errf(err, "%s: out of memory", dir);
        free(w->path);
        free(w);
        return NULL;
    }
    begin_event(w, now_s(), 0);
    static const char version[] = "brain.Event:2";
    put_tag(w, 3, WIRE_LEN);
    put_varint(w, sizeof version - 1);
    put(w, version, sizeof version - 1);
    if (write_record(w, err)) {
        cpt_tfevents_close(w);
        return NULL;
    }
    /* session_log (field 7) {status = START (1)}: TensorBoard drops the earlier files' events at steps >= this */
    begin_event(w, now_s(), start_step);
    put_tag(w, 7, WIRE_LEN);
    put_varint(w, 2);
    put_tag(w, 1, WIRE_VARINT);
    put_varint(w, 1);
    if (write_record(w, err)) {
        cpt_tfevents_close(w);
        return NULL;
    }
    return w;
}

const char *cpt_tfevents_path(const cpt_tfevents *w) { return w ? w->path : ""; }

int cpt_tfevents_scalars(cpt_tfevents *w, int64_t step, double wall_time, const char *const *tags,
                         const double *values, size_t n, cpt_err *err) {
    if (!w) return 0;
    size_t summary = 0;
    for (size_t i = 0; i < n; i++) {
        size_t v = value_len(tags[i]);
        summary += 1 + varint_len(v) + v;
    }
    begin_event(w, wall_time, step);
    put_tag(w, 5, WIRE_LEN);
    put_varint(w, summary);
    for (size_t i = 0; i < n; i++) {
        put_tag(w, 1, WIRE_LEN);
        put_varint(w, value_len(tags[i]));
        put_value(w, tags[i], (float)values[i]);
    }
    return write_record(w, err);
}

void cpt_tfevents_close(cpt_tfevents *w) {
    if (!w) return;
    if (w->fd >= 0) {
        fsync(w->fd);
        close(w->fd);
    }
    free(w->path);
    free(w->buf);
    free(w);
}
