/* Metrics: one JSON object per line in RUN_DIR/metrics.jsonl, {"step":N,"time":UNIX_SECONDS,"key":value,...}.
 *
 *   cpt_metrics *m = cpt_metrics_open("run/metrics.jsonl", &err);
 *   cpt_metrics_begin(m, step);
 *   cpt_metrics_add(m, "reward/mean", 0.42);
 *   cpt_metrics_add_str(m, "phase", "train");
 *   if (cpt_metrics_end(m, &err) != 0) ...;
 *   cpt_metrics_close(m);
 *
 * Each line goes out with a single write() on an O_APPEND descriptor, so lines from several processes sharing a
 * file never interleave, and a crash leaves at most a torn last line (which readers skip). NaN and infinities
 * are written as null. Values print with the fewest digits that read back to the same double.
 * A NULL cpt_metrics is a valid "metrics off" writer: begin/add/end do nothing (ranks other than 0). */
#ifndef CPT_CORE_METRICS_H
#define CPT_CORE_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"

typedef struct cpt_metrics cpt_metrics;

/* Opens (creating, mode 0644) for appending. If the file ends in a torn line, a newline is added first so the
 * next record starts clean. fsync policy defaults to CPT_METRICS_FSYNC_NEVER (the page cache is enough for a
 * log that a crash may shorten by a few lines). */
cpt_metrics *cpt_metrics_open(const char *path, cpt_err *err);
void cpt_metrics_close(cpt_metrics *m); /* fsyncs, closes, frees; NULL is fine */

/* A restart from a checkpoint of step `step` retrains the steps after it: this rewrites the file (a new file,
 * then a rename) keeping only the records of steps <= step, so every step appears once. Torn or garbage lines
 * go too; step < 0 keeps nothing. Call it before opening the file for the new attempt, in the one process that
 * writes it. Returns the number of lines dropped (0 when the file does not exist), or -1. */
long cpt_metrics_truncate_after(const char *path, int64_t step, cpt_err *err);

/* metrics.tensorboard: from now on every record's numbers also go to a TensorBoard event file in dir
 * (core/tfevents.h; dir and the file are made at the first such record, so a process that logs nothing leaves no
 * file), as scalars under the same keys at the record's step and time; strings stay in the JSONL only. first_step:
 * the first step this process logs (after cpt_metrics_truncate_after(step), step + 1): TensorBoard drops what
 * earlier files hold at that step and later. A second call is an error. */
int cpt_metrics_tensorboard(cpt_metrics *m, const char *dir, int64_t first_step, cpt_err *err);
/* The event file's path, or NULL when TensorBoard is off or no record went there yet. */
const char *cpt_metrics_tensorboard_path(const cpt_metrics *m);

/* 0: never fsync (default); 1: after every line; N: after every N lines. close always fsyncs. */
void cpt_metrics_set_fsync_every(cpt_metrics *m, int every);

/* Starts a record. A record left open is discarded by the next begin. */
void cpt_metrics_begin(cpt_metrics *m, int64_t step);
/* Adds a key to the open record. "step" and "time" are reserved; a key repeated in one record, an empty key or
 * an add without begin make cpt_metrics_end fail with a message naming the key. */
void cpt_metrics_add(cpt_metrics *m, const char *key, double value);
void cpt_metrics_add_int(cpt_metrics *m, const char *key, int64_t value);
void cpt_metrics_add_str(cpt_metrics *m, const char *key, const char *value);
/* Writes the record as one line. */
int cpt_metrics_end(cpt_metrics *m, cpt_err *err);

/* The series of one key, in file order. Lines without the key are skipped; a null value reads as NaN (a gap in
 * a plot); a string value is an error naming file:line. When a point's step is not above the previous point's
 * (a run resumed from an earlier checkpoint re-logs steps), the earlier points at or above that step are
 * dropped, so the series is what the resumed run saw; steps come out strictly increasing. Lines that are not
 * JSON objects with an integer "step" (a torn last line, garbage) are skipped and counted in bad_lines, the
 * first at first_bad_line. */
typedef struct cpt_metrics_series {
    int64_t *steps;
    double *values;
    double *times; /* the line's "time" (NaN when absent) */
    size_t n;
    size_t bad_lines;
    size_t first_bad_line; /* 1-based; 0 when none */
} cpt_metrics_series;

int cpt_metrics_read_series(const char *path, const char *key, cpt_metrics_series *out, cpt_err *err);
void cpt_metrics_series_free(cpt_metrics_series *s);

/* Every numeric key seen in the file (except step and time), sorted, without repeats: for plotting all of them.
 * *keys is a malloc'd array of malloc'd strings; free with cpt_metrics_keys_free. */
int cpt_metrics_read_keys(const char *path, char ***keys, size_t *n, cpt_err *err);
void cpt_metrics_keys_free(char **keys, size_t n);

#endif
