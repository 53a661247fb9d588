/* Files: whole-file reads, atomic writes (temp file, fsync, rename, fsync of the folder), folders. */
#ifndef CPT_CORE_FS_H
#define CPT_CORE_FS_H

#include <stddef.h>
#include <stdio.h>

#include "core/error.h"

/* Reads a whole file into a NUL-terminated malloc'd buffer; *len (if not NULL) gets the size without the NUL. */
char *cpt_read_file(const char *path, size_t *len, cpt_err *err);

/* An atomic writer: data goes to PATH.tmp.PID, and cpt_atomic_commit fsyncs it, renames it over PATH and fsyncs
 * the folder, so a reader sees the old file or the whole new one, never a half-written one. */
typedef struct cpt_atomic_file {
    FILE *fp;
    char path[4096];
    char tmp[4200];
} cpt_atomic_file;

int cpt_atomic_open(cpt_atomic_file *af, const char *path, cpt_err *err);
int cpt_atomic_commit(cpt_atomic_file *af, cpt_err *err); /* closes fp in every case */
void cpt_atomic_abort(cpt_atomic_file *af);              /* closes and removes the temp file */

/* Writes len bytes to path atomically. */
int cpt_write_file_atomic(const char *path, const void *data, size_t len, cpt_err *err);

/* mkdir -p; mode for created folders. */
int cpt_mkdir_p(const char *path, unsigned mode, cpt_err *err);

/* fsyncs a folder so a rename inside it is durable. */
int cpt_fsync_dir(const char *dir, cpt_err *err);

/* rm -rf of a folder the caller owns (checkpoints, temp folders). */
int cpt_remove_tree(const char *path, cpt_err *err);

int cpt_path_exists(const char *path);

/* An exclusive lock on path (created 0600) for as long as the returned descriptor stays open (O_CLOEXEC: no child
 * inherits it; it goes with the process, kill -9 included). The holder's pid is written into the file. Returns the
 * descriptor; -2 when another process holds it (*holder_pid: its pid, 0 when not yet written); -1 on any other
 * error (err set). */
int cpt_lock_file(const char *path, long *holder_pid, cpt_err *err);

/* Monotonic seconds, for rates and timeouts. */
double cpt_now(void);

#endif
