/* TensorBoard event files (core/tfevents.h) and the metrics writer's hook (cpt_metrics_tensorboard): CRC-32C against
 * its published check value, the TFRecord framing of a written file (lengths, both masked CRCs), the byte layout of
 * the file_version, START and scalar events, numbers (not strings) of a metrics record going to the file, no file
 * before the first record, and later files sorting after earlier ones. tests/e2e/test_tensorboard.sh reads whole
 * runs back with an independent Python decoder. */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/fs.h"
#include "core/metrics.h"
#include "core/tfevents.h"
#include "tests/check.h"

static char dir[] = "/tmp/cpt-test-tfevents-XXXXXX";

static uint32_t le32(const unsigned char *p) { return p[0] | p[1] << 8 | p[2] << 16 | (uint32_t)p[3] << 24; }

/* The records of a file: *n of them, each record's data offset and length in data_at / data_len. */
static unsigned char *read_records(const char *path, size_t *n, size_t *data_at, size_t *data_len, size_t max) {
    size_t len = 0;
    unsigned char *b = (unsigned char *)cpt_read_file(path, &len, NULL);
    *n = 0;
    for (size_t at = 0; b && at < len && *n < max;) {
        CHECK_MSG(len - at >= 16, "%s: a torn record at %zu", path, at);
        if (len - at < 16) break;
        uint64_t dl = 0;
        for (int i = 7; i >= 0; i--) dl = dl << 8 | b[at + (size_t)i];
        CHECK_EQ_INT(le32(b + at + 8), cpt_tfrecord_masked_crc(b + at, 8));
        CHECK_MSG(at + 16 + dl <= len, "%s: record at %zu runs past the end", path, at);
        if (at + 16 + dl > len) break;
        CHECK_EQ_INT(le32(b + at + 12 + dl), cpt_tfrecord_masked_crc(b + at + 12, dl));
        data_at[*n] = at + 12;
        data_len[*n] = dl;
        (*n)++;
        at += 16 + dl;
    }
    return b;
}

static int n_event_files(const char *d, char *first, size_t cap) {
    DIR *dd = opendir(d);
    int n = 0;
    struct dirent *e;
    while (dd && (e = readdir(dd)))
        if (!strncmp(e->d_name, "events.out.tfevents.", 20)) {
            if (first && (!n || strcmp(e->d_name, first) < 0)) snprintf(first, cap, "%s", e->d_name);
            n++;
        }
    if (dd) closedir(dd);
    return n;
}

static void test_crc(void) {
    CHECK_EQ_INT(cpt_crc32c("123456789", 9), 0xE3069283u); /* the CRC-32C check value */
    CHECK_EQ_INT(cpt_crc32c("", 0), 0);
    uint32_t c = cpt_crc32c("abc", 3);
    CHECK_EQ_INT(cpt_tfrecord_masked_crc("abc", 3), (uint32_t)(((c >> 15) | (c << 17)) + 0xa282ead8u));
}

static void test_file(void) {
    char d[300];
    snprintf(d, sizeof d, "%s/direct", dir);
    cpt_err err;
    cpt_tfevents *w = cpt_tfevents_open(d, 7, &err);
    CHECK_MSG(w != NULL, "%s", err.msg);
    if (!w) return;
    const char *tags[2] = {"loss", "a/b"};
    double vals[2] = {0.5, -2.0};
    CHECK_EQ_INT(cpt_tfevents_scalars(w, 7, 1234.5, tags, vals, 2, &err), 0);
    char path[600];
    snprintf(path, sizeof path, "%s", cpt_tfevents_path(w));
    CHECK(strstr(path, "/events.out.tfevents.") != NULL);
    size_t n, at[8], len[8];
    unsigned char *b = read_records(path, &n, at, len, 8); /* readable before close: one write per record */
    CHECK_EQ_INT(n, 3);
    if (n == 3) {
        /* file_version: wall_time (09 + 8 bytes), step 0 (10 00), file_version (1a 0d "brain.Event:2") */
        CHECK_EQ_INT(len[0], 9 + 2 + 2 + 13);
        CHECK(b[at[0]] == 0x09 && b[at[0] + 9] == 0x10 && b[at[0] + 10] == 0 && b[at[0] + 11] == 0x1a &&
              b[at[0] + 12] == 13 && !memcmp(b + at[0] + 13, "brain.Event:2", 13));
        /* START at step 7: step (10 07), session_log (3a 02) {status (08 01)} */
        static const unsigned char start[] = {0x10, 7, 0x3a, 2, 0x08, 1};
        CHECK_EQ_INT(len[1], 9 + sizeof start);
        CHECK(!memcmp(b + at[1] + 9, start, sizeof start));
        /* the scalars: wall_time 1234.5, step 7, summary (2a) {value (0a) {tag (0a), simple_value (15) float}} */
        double wt;
        memcpy(&wt, b + at[2] + 1, 8);
        CHECK(b[at[2]] == 0x09 && wt == 1234.5);
        const unsigned char *p = b + at[2] + 9;
        static const unsigned char head[] = {0x10, 7, 0x2a, 2 + 11 + 2 + 10, 0x0a, 11, 0x0a, 4, 'l', 'o', 's', 's',
                                             0x15};
        CHECK(!memcmp(p, head, sizeof head));
        float f;
        memcpy(&f, p + sizeof head, 4);
        CHECK(f == 0.5f);
        static const unsigned char second[] = {0x0a, 10, 0x0a, 3, 'a', '/', 'b', 0x15};
        CHECK(!memcmp(p + sizeof head + 4, second, sizeof second));
        memcpy(&f, p + sizeof head + 4 + sizeof second, 4);
        CHECK(f == -2.0f);
        CHECK_EQ_INT(len[2], 9 + sizeof head + 4 + sizeof second + 4);
    }
    free(b);
    cpt_tfevents_close(w);
    /* a second file in the same folder and second sorts after the first */
    char first[300] = "";
    n_event_files(d, first, sizeof first);
    cpt_tfevents *w2 = cpt_tfevents_open(d, 0, &err);
    CHECK(w2 != NULL);
    CHECK_MSG(w2 && strcmp(strrchr(cpt_tfevents_path(w2), '/') + 1, first) > 0, "%s sorts before %s",
              cpt_tfevents_path(w2), first);
    cpt_tfevents_close(w2);
    CHECK_EQ_INT(n_event_files(d, NULL, 0), 2);
}

static void test_metrics_hook(void) {
    char path[300], d[300];
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    snprintf(d, sizeof d, "%s/tb", dir);
    cpt_err err;
    cpt_metrics *m = cpt_metrics_open(path, &err);
    CHECK(m != NULL);
    if (!m) return;
    CHECK_EQ_INT(cpt_metrics_tensorboard(m, d, 1, &err), 0);
    CHECK_EQ_INT(cpt_metrics_tensorboard(m, d, 1, &err), -1); /* once */
    CHECK(cpt_metrics_tensorboard_path(m) == NULL && !cpt_path_exists(d)); /* nothing logged yet: no file */
    cpt_metrics_begin(m, 1);
    cpt_metrics_add(m, "x", 1.25);
    cpt_metrics_add_str(m, "phase", "train");
    cpt_metrics_add_int(m, "n", 3);
    CHECK_EQ_INT(cpt_metrics_end(m, &err), 0);
    cpt_metrics_begin(m, 2);
    cpt_metrics_add_str(m, "phase", "only a string"); /* no numbers: no event */
    CHECK_EQ_INT(cpt_metrics_end(m, &err), 0);
    const char *tb = cpt_metrics_tensorboard_path(m);
    CHECK(tb != NULL);
    size_t n = 0, at[8], len[8];
    unsigned char *b = tb ? read_records(tb, &n, at, len, 8) : NULL;
    CHECK_EQ_INT(n, 3);
    if (n == 3) {
        static const unsigned char want[] = {0x10, 1, 0x2a, 20, 0x0a, 8, 0x0a, 1, 'x', 0x15, 0, 0, 0xa0, 0x3f,
                                             0x0a, 8, 0x0a, 1, 'n', 0x15, 0, 0, 0x40, 0x40};
        CHECK_EQ_INT(len[2], 9 + sizeof want);
        CHECK(!memcmp(b + at[2] + 9, want, sizeof want));
    }
    free(b);
    cpt_metrics_close(m);
}

int main(void) {
    if (!mkdtemp(dir)) return 1;
    test_crc();
    test_file();
    test_metrics_hook();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return check_summary("test_tfevents");
}
