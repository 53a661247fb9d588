#include "core/fs.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <libgen.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

char *cpt_read_file(const char *path, size_t *len, cpt_err *err) {
    FILE *f = fopen(path, "rb");
    if (!f) { cpt_errno(err, "%s", path); return NULL; }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    if (!buf) { fclose(f); cpt_errf(err, "%s: out of memory", path); return NULL; }
    for (;;) {
        if (n + 1 >= cap) {
            cap *= 2;
            char *nb = realloc(buf, cap);
            if (!nb) { free(buf); fclose(f); cpt_errf(err, "%s: out of memory", path); return NULL; }
            buf = nb;
        }
        size_t got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
        if (got == 0) break;
    }
    if (ferror(f)) { cpt_errno(err, "%s: read", path); free(buf); fclose(f); return NULL; }
    fclose(f);
    buf[n] = '\0';
    if (len) *len = n;
    return buf;
}

int cpt_fsync_dir(const char *dir, cpt_err *err) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0) return cpt_errno(err, "%s: open folder", dir);
    int rc = fsync(fd);
    close(fd);
    if (rc != 0 && errno != EINVAL) return cpt_errno(err, "%s: fsync folder", dir);
    return 0;
}

int cpt_atomic_open(cpt_atomic_file *af, const char *path, cpt_err *err) {
    memset(af, 0, sizeof *af);
    if (strlen(path) >= sizeof af->path) return cpt_errf(err, "%s: path too long", path);
    snprintf(af->path, sizeof af->path, "%s", path);
    snprintf(af->tmp, sizeof af->tmp, "%s.tmp.%ld", path, (long)getpid());
    af->fp = fopen(af->tmp, "wb");
    if (!af->fp) return cpt_errno(err, "%s: create", af->tmp);
    return 0;
}

int cpt_atomic_commit(cpt_atomic_file *af, cpt_err *err) {
    if (!af->fp) return cpt_errf(err, "%s: not open", af->path);
    int bad = fflush(af->fp) != 0 || ferror(af->fp) || fsync(fileno(af->fp)) != 0;
    if (bad) {
        cpt_errno(err, "%s: write", af->tmp);
        cpt_atomic_abort(af);
        return -1;
    }
    fclose(af->fp);
    af->fp = NULL;
    if (rename(af->tmp, af->path) != 0) {
        cpt_errno(err, "%s: rename to %s", af->tmp, af->path);
        unlink(af->tmp);
        return -1;
    }
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", af->path);
    return cpt_fsync_dir(dirname(dir), err);
}

void cpt_atomic_abort(cpt_atomic_file *af) {
    if (af->fp) fclose(af->fp);
    af->fp = NULL;
    if (af->tmp[0]) unlink(af->tmp);
}

int cpt_write_file_atomic(const char *path, const void *data, size_t len, cpt_err *err) {
    cpt_atomic_file af;
    if (cpt_atomic_open(&af, path, err) != 0) return -1;
    if (len && fwrite(data, 1, len, af.fp) != len) {
        cpt_errno(err, "%s: write", af.tmp);
        cpt_atomic_abort(&af);
        return -1;
    }
    return cpt_atomic_commit(&af, err);
}

int cpt_mkdir_p(const char *path, unsigned mode, cpt_err *err) {
    char buf[4096];
    if (strlen(path) >= sizeof buf) return cpt_errf(err, "%s: path too long", path);
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(buf, mode) != 0 && errno != EEXIST) return cpt_errno(err, "%s: mkdir", buf);
        *p = '/';
    }
    if (mkdir(buf, mode) != 0 && errno != EEXIST) return cpt_errno(err, "%s: mkdir", buf);
    return 0;
}

static int remove_entry(const char *p, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st; (void)flag; (void)ftw;
    return remove(p);
}

int cpt_remove_tree(const char *path, cpt_err *err) {
    if (!cpt_path_exists(path)) return 0;
    if (nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS) != 0) return cpt_errno(err, "%s: remove", path);
    return 0;
}

int cpt_path_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

double cpt_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int cpt_lock_file(const char *path, long *holder_pid, cpt_err *err) {
    *holder_pid = 0;
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) return cpt_errno(err, "%s", path);
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        char buf[32];
        ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
        close(fd);
        if (e != EWOULDBLOCK) {
            errno = e;
            return cpt_errno(err, "%s: lock", path);
        }
        buf[n > 0 ? n : 0] = '\0';
        char *end;
        long pid = strtol(buf, &end, 10);
        *holder_pid = end != buf && pid > 0 ? pid : 0;
        return -2;
    }
    char pid[32];
    int len = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
    if (ftruncate(fd, 0) != 0 || pwrite(fd, pid, (size_t)len, 0) != len) {
        cpt_errno(err, "%s: writing the holder's pid", path);
        close(fd);
        return -1;
    }
    return fd;
}
