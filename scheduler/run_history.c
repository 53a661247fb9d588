#include "scheduler/run_history.h"

#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "core/fs.h"
#include "weights/checkpoint_dir.h"

static int kept(const char *name) {
    return !strcmp(name, ".") || !strcmp(name, "..") || !strcmp(name, ".lock") || !strncmp(name, "previous-", 9);
}

int cpt_run_dir_set_aside(const char *run_dir, char *out, size_t cap, cpt_err *err) {
    out[0] = '\0';
    DIR *d = opendir(run_dir);
    if (!d) return cpt_errno(err, "%s", run_dir);
    char dest[4300];
    int moved = 0, rc = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (kept(e->d_name)) continue;
        if (!moved) {
            time_t now = time(NULL);
            struct tm tm;
            gmtime_r(&now, &tm);
            char stamp[32];
            strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%SZ", &tm);
            /* two fresh starts within a second get -2, -3, ... */
            for (int n = 1; n < 100; n++) {
                if (n == 1) snprintf(dest, sizeof dest, "%s/previous-%s", run_dir, stamp);
                else snprintf(dest, sizeof dest, "%s/previous-%s-%d", run_dir, stamp, n);
                if (mkdir(dest, 0700) == 0) break;
                if (n == 99) {
                    rc = cpt_errno(err, "%s", dest);
                    goto done;
                }
            }
            moved = 1;
        }
        char from[4300], to[4600];
        snprintf(from, sizeof from, "%s/%s", run_dir, e->d_name);
        snprintf(to, sizeof to, "%s/%s", dest, e->d_name);
        if (rename(from, to) != 0) {
            rc = cpt_errno(err, "moving %s to %s", from, to);
            goto done;
        }
    }
    if (moved) snprintf(out, cap, "%s", dest);
done:
    closedir(d);
    return rc < 0 ? -1 : moved;
}

int cpt_run_history_check(const char *run_dir, int64_t total_steps, int requeue, int fresh, int64_t *step,
                          char *moved_to, size_t cap, cpt_err *err) {
    *step = 0;
    moved_to[0] = '\0';
    if (fresh && !requeue) {
        if (cpt_run_dir_set_aside(run_dir, moved_to, cap, err) < 0)
            return cpt_err_prefix(err, "run.fresh=true: setting the earlier run aside");
        return CPT_RUN_NEW;
    }
    char ckdir[4200];
    snprintf(ckdir, sizeof ckdir, "%s/checkpoints", run_dir);
    int64_t latest = cpt_ckpt_read_latest(ckdir);
    if (latest <= 0) return CPT_RUN_NEW;
    *step = latest;
    if (latest < total_steps) return CPT_RUN_RESUME;
    if (requeue) return CPT_RUN_DONE_ON_REQUEUE;
    return cpt_errf(err, "run.dir %s holds a finished run (step %lld of %lld); choose another run.dir, or pass "
                    "run.fresh=true to start a fresh run there (the finished one moves to %s/previous-<UTC time>/), or "
                    "raise train.steps to train it further; nothing was started",
                    run_dir, (long long)latest, (long long)total_steps, run_dir);
}
