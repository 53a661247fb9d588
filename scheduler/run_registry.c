#include "scheduler/run_registry.h"

#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/fs.h"
#include "scheduler/satellite.h"

#define MAX_RUNNING_JOBS 256

int cpt_run_registry_dir(char *out, size_t cap, int create, cpt_err *err) {
    const char *state = getenv("XDG_STATE_HOME");
    int n;
    if (state && state[0] == '/') {
        n = snprintf(out, cap, "%s/cpt/runs", state);
    } else {
        const char *home = getenv("HOME");
        if (!home || home[0] != '/') {
            struct passwd *pw = getpwuid(getuid());
            home = pw ? pw->pw_dir : NULL;
        }
        if (!home) return cpt_errf(err, "no home folder for the registry of live runs (set HOME or XDG_STATE_HOME)");
        n = snprintf(out, cap, "%s/.local/state/cpt/runs", home);
    }
    if (n < 0 || (size_t)n >= cap) return cpt_errf(err, "registry of live runs: path too long");
    return create ? cpt_mkdir_p(out, 0700, err) : 0;
}

static void short_host(char *out, size_t cap) {
    if (gethostname(out, cap - 1) != 0) snprintf(out, cap, "unknown");
    out[cap - 1] = '\0';
    char *dot = strchr(out, '.');
    if (dot) *dot = '\0';
}

/* Field 22 of /proc/PID/stat (start time in clock ticks since boot): with the pid, it names one process. 0 when
 * the process is gone. */
static unsigned long long pid_start_time(long pid) {
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *p = strrchr(buf, ')');
    if (!p) return 0;
    p++;
    for (int field = 2; field < 22 && p; field++) p = strchr(p + 1, ' ');
    return p ? strtoull(p + 1, NULL, 10) : 0;
}

int cpt_run_registry_add(const char *run_dir, const char *job, char *entry, size_t cap, cpt_err *err) {
    entry[0] = '\0';
    char dir[2048], host[256], started[40];
    if (cpt_run_registry_dir(dir, sizeof dir, 1, err)) return -1;
    short_host(host, sizeof host);
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(started, sizeof started, "%Y-%m-%dT%H:%M:%SZ", &tm);
    long pid = (long)getpid();
    json_t *j = json_pack("{s:s, s:I, s:I, s:s, s:s, s:s}", "run_dir", run_dir, "pid", (json_int_t)pid, "pid_start",
                          (json_int_t)pid_start_time(pid), "host", host, "job", job ? job : "", "started", started);
    char *text = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (!text) return cpt_errf(err, "registry entry for %s: out of memory", run_dir);
    char path[2400];
    snprintf(path, sizeof path, "%s/%s-%ld.json", dir, host, pid);
    int rc = cpt_write_file_atomic(path, text, strlen(text), err);
    free(text);
    if (rc == 0) snprintf(entry, cap, "%s", path);
    return rc;
}

void cpt_run_registry_remove(const char *entry) {
    if (entry && entry[0]) unlink(entry);
}

int cpt_run_registry_tag_job(const char *job, const char *run_dir, cpt_err *err) {
    if (!cpt_slurm_job_id_valid(job)) return cpt_errf(err, "\"%.64s\" is not a Slurm job id", job);
    char id[64], comment[2200];
    snprintf(id, sizeof id, "JobId=%s", job);
    snprintf(comment, sizeof comment, "Comment=" CPT_RUN_COMMENT_PREFIX "%s", run_dir);
    char *argv[] = {"scontrol", "update", id, comment, NULL};
    int rc = cpt_sat_run_program(argv, NULL, NULL, 0);
    return rc == 0 ? 0 : cpt_errf(err, "scontrol update %s %s failed (status %d)", id, comment, rc);
}

int cpt_run_registry_parse(const char *text, const char *path, cpt_live_run *r, unsigned long long *pid_start,
                           cpt_err *err) {
    memset(r, 0, sizeof *r);
    json_error_t je;
    json_t *j = json_loads(text, 0, &je);
    const char *dir = j ? json_string_value(json_object_get(j, "run_dir")) : NULL;
    const char *host = j ? json_string_value(json_object_get(j, "host")) : NULL;
    const char *job = j ? json_string_value(json_object_get(j, "job")) : NULL;
    const char *started = j ? json_string_value(json_object_get(j, "started")) : NULL;
    json_t *pid = j ? json_object_get(j, "pid") : NULL, *ps = j ? json_object_get(j, "pid_start") : NULL;
    int ok = dir && dir[0] == '/' && strlen(dir) < sizeof r->run_dir && host && strlen(host) < sizeof r->host &&
             job && (!job[0] || cpt_slurm_job_id_valid(job)) && started && strlen(started) < sizeof r->started &&
             json_is_integer(pid) && json_integer_value(pid) > 0 && json_is_integer(ps);
    if (ok) {
        snprintf(r->run_dir, sizeof r->run_dir, "%s", dir);
        snprintf(r->host, sizeof r->host, "%s", host);
        snprintf(r->job, sizeof r->job, "%s", job);
        snprintf(r->started, sizeof r->started, "%s", started);
        r->pid = (long)json_integer_value(pid);
        *pid_start = (unsigned long long)json_integer_value(ps);
    }
    json_decref(j);
    return ok ? 0 : cpt_errf(err, "%s: not a registry entry of a live run", path);
}

/* The user's running jobs (squeue --me): ids, and the run directory of those with a cpt-run: comment. -1 when
 * squeue does not answer (no Slurm here). */
typedef struct {
    char id[32], start[40], host[256], run_dir[2048];
} running_job;

static int running_jobs(const char *only, running_job *out, int cap) {
    static char text[1 << 18];
    char jflag[64];
    char *argv[10];
    int a = 0;
    argv[a++] = "squeue";
    argv[a++] = "--me";
    argv[a++] = "-h";
    argv[a++] = "-t";
    argv[a++] = "RUNNING";
    if (only) {
        snprintf(jflag, sizeof jflag, "--jobs=%s", only);
        argv[a++] = jflag;
    }
    argv[a++] = "-o";
    argv[a++] = "%i|%S|%B|%k";
    argv[a] = NULL;
    /* No squeue here, or no controller: its stderr would only say what the caller already handles. */
    if (cpt_run_program_quiet(argv, text, sizeof text) != 0) return -1;
    int n = 0;
    for (char *save = NULL, *line = strtok_r(text, "\n", &save); line && n < cap; line = strtok_r(NULL, "\n", &save)) {
        running_job *r = &out[n];
        memset(r, 0, sizeof *r);
        char *f[4];
        f[0] = line;
        int k = 1;
        for (char *p = line; *p && k < 4; p++)
            if (*p == '|') {
                *p = '\0';
                f[k++] = p + 1;
            }
        if (k < 4 || !cpt_slurm_job_id_valid(f[0])) continue;
        snprintf(r->id, sizeof r->id, "%s", f[0]);
        snprintf(r->start, sizeof r->start, "%s", f[1]);
        snprintf(r->host, sizeof r->host, "%s", f[2]);
        size_t plen = strlen(CPT_RUN_COMMENT_PREFIX);
        if (!strncmp(f[3], CPT_RUN_COMMENT_PREFIX, plen) && f[3][plen] == '/' &&
            strlen(f[3] + plen) < sizeof r->run_dir)
            snprintf(r->run_dir, sizeof r->run_dir, "%s", f[3] + plen);
        n++;
    }
    return n;
}

static int find_job(const running_job *jobs, int n, const char *id) {
    for (int i = 0; i < n; i++)
        if (!strcmp(jobs[i].id, id)) return i;
    return -1;
}

static int find_run(const cpt_live_run *runs, int n, const char *dir) {
    for (int i = 0; i < n; i++)
        if (!strcmp(runs[i].run_dir, dir)) return i;
    return -1;
}

int cpt_live_runs(const char *job, cpt_live_run *out, int cap, cpt_err *err) {
    static running_job jobs[MAX_RUNNING_JOBS];
    int nj = running_jobs(job, jobs, MAX_RUNNING_JOBS);
    char dir[2048], host[256];
    if (cpt_run_registry_dir(dir, sizeof dir, 0, err)) return -1;
    short_host(host, sizeof host);
    int n = 0;
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (len < 6 || strcmp(e->d_name + len - 5, ".json") || e->d_name[0] == '.') continue;
        char path[2400];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        cpt_err pe;
        char *text = cpt_read_file(path, NULL, &pe);
        if (!text) continue;
        cpt_live_run r;
        unsigned long long pid_start = 0;
        int bad = cpt_run_registry_parse(text, path, &r, &pid_start, &pe);
        free(text);
        if (bad) continue; /* not ours to remove: a file someone else put there */
        int stale = 0;
        if (!strcmp(r.host, host)) /* the pid is checkable here: gone, or reused by another process */
            stale = pid_start_time(r.pid) != pid_start || pid_start == 0;
        else if (r.job[0] && nj >= 0 && !job) /* elsewhere: its job must still run */
            stale = find_job(jobs, nj, r.job) < 0;
        if (stale) {
            unlink(path);
            continue;
        }
        if (job && strcmp(r.job, job)) continue;
        if (n < cap && find_run(out, n, r.run_dir) < 0) out[n++] = r;
    }
    if (d) closedir(d);
    for (int i = 0; i < nj && n < cap; i++) {
        if (!jobs[i].run_dir[0]) continue;
        int k = find_run(out, n, jobs[i].run_dir);
        if (k >= 0) {
            if (!out[k].job[0]) snprintf(out[k].job, sizeof out[k].job, "%s", jobs[i].id);
            continue;
        }
        cpt_live_run *r = &out[n++];
        memset(r, 0, sizeof *r);
        snprintf(r->run_dir, sizeof r->run_dir, "%s", jobs[i].run_dir);
        snprintf(r->job, sizeof r->job, "%s", jobs[i].id);
        snprintf(r->host, sizeof r->host, "%s", jobs[i].host);
        snprintf(r->started, sizeof r->started, "%s", jobs[i].start);
    }
    return n;
}

static void describe(const cpt_live_run *r, char *out, size_t cap) {
    char pid[32] = "";
    if (r->pid) snprintf(pid, sizeof pid, ", pid %ld", r->pid);
    snprintf(out, cap, "job %s, host %s%s, started %s", r->job[0] ? r->job : "-", r->host[0] ? r->host : "?", pid,
             r->started[0] ? r->started : "?");
}

int cpt_run_choose(const char *prog, const char *run_dir, const char *job, char *out, size_t cap, cpt_err *err) {
    if (run_dir && run_dir[0]) {
        snprintf(out, cap, "%s", run_dir);
        return 0;
    }
    if (job && !cpt_slurm_job_id_valid(job)) return cpt_errf(err, "--job %.64s: not a Slurm job id", job);
    const char *env = getenv("CPT_RUN");
    if (!job && env && env[0]) {
        snprintf(out, cap, "%s", env);
        return 0;
    }
    static cpt_live_run runs[64];
    int n = cpt_live_runs(job, runs, 64, err);
    if (n < 0) return -1;
    char reg[2048], what[600];
    if (cpt_run_registry_dir(reg, sizeof reg, 0, err)) return -1;
    if (n == 1) {
        if (strlen(runs[0].run_dir) >= cap) return cpt_errf(err, "%s: path too long", runs[0].run_dir);
        snprintf(out, cap, "%s", runs[0].run_dir);
        describe(&runs[0], what, sizeof what);
        fprintf(stderr, "%s: using the live run %s (%s)\n", prog, out, what);
        return 0;
    }
    if (n == 0 && job)
        return cpt_errf(err, "no live cpt run of job %s: it is not running, or its comment is not %sRUN_DIR and no "
                        "launcher registered it in %s; pass --run RUN_DIR", job, CPT_RUN_COMMENT_PREFIX, reg);
    if (n == 0)
        return cpt_errf(err, "no live cpt run found (none registered in %s, and no running Slurm job of yours has a "
                        "%sRUN_DIR comment); pass --run RUN_DIR", reg, CPT_RUN_COMMENT_PREFIX);
    fprintf(stderr, "%s: %d live runs:\n", prog, n);
    for (int i = 0; i < n; i++) {
        describe(&runs[i], what, sizeof what);
        fprintf(stderr, "  %s  (%s)\n", runs[i].run_dir, what);
    }
    return cpt_errf(err, "%d live runs (listed above): pass --run RUN_DIR or --job JOBID", n);
}
