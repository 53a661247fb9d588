#include "scheduler/run_lock.h"

#include <stdio.h>
#include <unistd.h>

#include "core/fs.h"

int cpt_run_lock_take(const char *run_dir, cpt_err *err) {
    char path[4200];
    snprintf(path, sizeof path, "%s/.lock", run_dir);
    long pid = 0;
    int fd = cpt_lock_file(path, &pid, err);
    if (fd != -2) return fd;
    if (pid)
        return cpt_errf(err, "%s is in use by another launcher (pid %ld holds %s); nothing was written. Stop that run "
                        "first, or use another run.dir", run_dir, pid, path);
    return cpt_errf(err, "%s is in use by another launcher (it holds %s); nothing was written. Stop that run first, "
                    "or use another run.dir", run_dir, path);
}

void cpt_run_lock_release(int fd) {
    if (fd >= 0) close(fd);
}
