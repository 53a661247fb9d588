/* TensorBoard event files: RUN_DIR/tensorboard/events.out.tfevents.<unix seconds>.<host>.<pid>, written from
 * scratch (no TensorFlow, no protobuf library), so a run is watched live with `tensorboard --logdir RUN_DIR`.
 *
 * A file is a sequence of TFRecords: uint64 length (little endian), uint32 masked CRC32C of those 8 bytes, the data,
 * uint32 masked CRC32C of the data; masked(c) = ((c >> 15) | (c << 17)) + 0xa282ead8. Each record's data is a
 * tensorflow.Event protobuf: wall_time (field 1, double), step (2, int64) and one of file_version (3, string),
 * summary (5) or session_log (7). The first event is file_version "brain.Event:2"; the second a session_log
 * {status (1) = START} at the first step this writer will log, which makes TensorBoard drop the events of earlier
 * files at that step and later (a resumed run trains them again, as metrics.jsonl drops their lines); then one
 * event per record of scalars: a Summary with one Summary.Value (field 1) per scalar, its tag (1, string) and
 * simple_value (2, float). Each record goes out with one write() (no user-space buffer), so a reader sees every
 * finished step. A new file's timestamp is later than those of the files already in the folder, so the files
 * sort in the order they were written. */
#ifndef CPT_CORE_TFEVENTS_H
#define CPT_CORE_TFEVENTS_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"

typedef struct cpt_tfevents cpt_tfevents;

/* Creates dir (and its parents) and a new event file in it, with the file_version and START events (start_step:
 * the first step to be logged). */
cpt_tfevents *cpt_tfevents_open(const char *dir, int64_t start_step, cpt_err *err);
const char *cpt_tfevents_path(const cpt_tfevents *w);
void cpt_tfevents_close(cpt_tfevents *w); /* fsyncs, closes, frees; NULL is fine */

/* One Event at step with n scalars tags[i] = values[i] (stored as float: TensorBoard's simple_value). */
int cpt_tfevents_scalars(cpt_tfevents *w, int64_t step, double wall_time, const char *const *tags,
                         const double *values, size_t n, cpt_err *err);

/* CRC-32C (Castagnoli) of n bytes, and the masked form the TFRecord framing stores. */
uint32_t cpt_crc32c(const void *data, size_t n);
uint32_t cpt_tfrecord_masked_crc(const void *data, size_t n);

#endif
