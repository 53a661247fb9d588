#include "scheduler/run_lock.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

/* The pid recorded by the holder, 0 when unknown (it may not have written it yet). */
static long holder_pid(int fd) {
    char buf[32];
    ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    if (n <= 0) return 0;
    buf[n] = '\0';
    char *end;
    long pid = strtol(buf, &end, 10);
    return end != buf && pid > 0 ? pid : 0;
}

int cpt_run_lock_take(const char *run_dir, cpt_err *err) {
    char path[4200];
    snprintf(path, sizeof path, "%s/.lock", run_dir);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) return cpt_errno(err, "%s", path);
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        long pid = holder_pid(fd);
        close(fd);
        if (e != EWOULDBLOCK) {
            errno = e;
            return cpt_errno(err, "%s: lock", path);
        }
        if (pid)
            return cpt_errf(err, "%s is in use by another launcher (pid %ld holds %s); nothing was written. Stop "
                            "that run first, or use another run.dir", run_dir, pid, path);
        return cpt_errf(err, "%s is in use by another launcher (it holds %s); nothing was written. Stop that run "
                        "first, or use another run.dir", run_dir, path);
    }
    char pid[32];
    int len = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
    if (ftruncate(fd, 0) != 0 || pwrite(fd, pid, (size_t)len, 0) != len) {
        cpt_errno(err, "%s: write", path);
        close(fd);
        return -1;
    }
    return fd;
}

void cpt_run_lock_release(int fd) {
    if (fd >= 0) close(fd);
}
