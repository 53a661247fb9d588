#include "scheduler/satellite.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/fs.h"

extern char **environ;

static const char *role_name(int role) { return cpt_role_name(role); }

/* Runs argv (PATH lookup) with envp (NULL: ours); its stdout goes to out (NUL-terminated, truncated to cap), its
 * stderr to ours. Returns the exit status, or -1 when it could not run. */
int cpt_slurm_job_id_valid(const char *id) {
    size_t n = strspn(id, "0123456789");
    if (n == 0 || n > 18) return 0;
    if (id[n] == '\0') return 1;
    if (id[n] != '_') return 0;
    size_t m = strspn(id + n + 1, "0123456789");
    return m > 0 && m <= 18 && id[n + 1 + m] == '\0';
}

long cpt_slurm_time_seconds(const char *s) {
    long v[4];
    int n = 0, days = -1;
    const char *p = s;
    for (;;) {
        if (*p < '0' || *p > '9' || n == 4) return -1;
        char *end;
        long x = strtol(p, &end, 10);
        if (x > 1000000) return -1;
        p = end;
        if (*p == '-' && days < 0 && n == 0) {
            days = (int)x;
            p++;
            continue;
        }
        v[n++] = x;
        if (*p == '\0') break;
        if (*p != ':') return -1;
        p++;
    }
    if (days >= 0) { /* D-H, D-H:M, D-H:M:S */
        long h = v[0], m = n > 1 ? v[1] : 0, sec = n > 2 ? v[2] : 0;
        return n > 3 ? -1 : ((days * 24L + h) * 60 + m) * 60 + sec;
    }
    if (n == 1) return v[0] * 60;                  /* M */
    if (n == 2) return v[0] * 60 + v[1];           /* M:S */
    if (n == 3) return (v[0] * 60 + v[1]) * 60 + v[2]; /* H:M:S */
    return -1;
}

static int run_capture_to(char *const argv[], char *const envp[], char *out, size_t cap, int quiet) {
    int fds[2];
    if (out && cap) out[0] = '\0';
    if (pipe2(fds, O_CLOEXEC) != 0) return -1;
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        return -1;
    }
    if (pid == 0) {
        dup2(fds[1], 1);
        if (quiet) {
            int null = open("/dev/null", O_WRONLY);
            if (null >= 0) dup2(null, 2);
        }
        execvpe(argv[0], argv, envp ? envp : environ);
        fprintf(stderr, "cpt: cannot run %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    close(fds[1]);
    size_t len = 0;
    char buf[4096];
    for (;;) {
        ssize_t got = read(fds[0], buf, sizeof buf);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) break;
        if (out && len + 1 < cap) {
            size_t n = (size_t)got < cap - 1 - len ? (size_t)got : cap - 1 - len;
            memcpy(out + len, buf, n);
            len += n;
            out[len] = '\0';
        }
    }
    close(fds[0]);
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static int run_capture(char *const argv[], char *const envp[], char *out, size_t cap) {
    return run_capture_to(argv, envp, out, cap, 0);
}

int cpt_run_program_quiet(char *const argv[], char *out, size_t cap) { return run_capture_to(argv, NULL, out, cap, 1); }

int cpt_sat_init(cpt_satellites *S, const cpt_config *cfg, const char *run_dir, const char *bin_dir,
                 const char *config_path, const char *queue_url, const char *password_file, cpt_err *err) {
    memset(S, 0, sizeof *S);
    S->max = (int)cpt_cfg_int(cfg, "slurm.max_satellites");
    snprintf(S->run_name, sizeof S->run_name, "%s", cpt_cfg_str(cfg, "run.name"));
    snprintf(S->run_dir, sizeof S->run_dir, "%s", run_dir);
    const char *job = getenv("SLURM_JOB_ID");
    snprintf(S->main_job, sizeof S->main_job, "%s", job ? job : "");
    snprintf(S->script, sizeof S->script, "%s/" CPT_SAT_SCRIPT, bin_dir);
    for (int r = 0; r < CPT_N_WORKER_ROLES; r++)
        snprintf(S->program[r], sizeof S->program[r], "%s/%s", bin_dir, cpt_role_program(r));
    snprintf(S->config_path, sizeof S->config_path, "%s", config_path);
    snprintf(S->queue_url, sizeof S->queue_url, "%s", queue_url ? queue_url : "");
    snprintf(S->password_file, sizeof S->password_file, "%s", password_file ? password_file : "");
    const char *v = cpt_cfg_str(cfg, "slurm.satellite_partition");
    if (!*v && getenv("SLURM_JOB_PARTITION")) v = getenv("SLURM_JOB_PARTITION");
    snprintf(S->partition, sizeof S->partition, "%s", v);
    v = cpt_cfg_str(cfg, "slurm.satellite_account");
    if (!*v && getenv("SLURM_JOB_ACCOUNT")) v = getenv("SLURM_JOB_ACCOUNT");
    snprintf(S->account, sizeof S->account, "%s", v);
    snprintf(S->time_limit, sizeof S->time_limit, "%s", cpt_cfg_str(cfg, "slurm.satellite_time"));
    snprintf(S->extra, sizeof S->extra, "%s", cpt_cfg_str(cfg, "slurm.satellite_args"));
    for (int r = 0; r < CPT_N_WORKER_ROLES; r++) {
        S->cpus[r] = cpt_role_cpus(cfg, r);
        S->gpus[r] = cpt_role_gpus(cfg, r);
    }
    S->check_s = cpt_cfg_float(cfg, "slurm.satellite_check_s");
    S->warn_s = (int)cpt_cfg_int(cfg, "slurm.satellite_warn_s");
    const char *rc = getenv("SLURM_RESTART_COUNT");
    S->restart = rc ? atoi(rc) : 0;
    for (int r = 0; r < CPT_N_WORKER_ROLES; r++) S->backoff[r] = 5.0;
    if (access(S->script, R_OK) != 0)
        return cpt_errno(err, "satellite script %s (installed beside the cpt programs: rebuild or reinstall cpt)",
                         S->script);
    return 0;
}

void cpt_sat_free(cpt_satellites *S) {
    free(S->v);
    S->v = NULL;
    S->n = S->cap = 0;
}

/* squeue/scancel --name argument: every role's job name. */
int cpt_sat_run_program(char *const argv[], char *const envp[], char *out, size_t cap) {
    return run_capture(argv, envp, out, cap);
}

/* Room for "--name=" and every role's job name at the longest run name (a cut filter would hide live satellites,
 * which the refresh would then take for ended). */
#define JOB_NAMES_CAP (8 + CPT_N_WORKER_ROLES * (sizeof(((cpt_satellites *)0)->run_name) + 24))

static void job_names(const cpt_satellites *S, char *out, size_t cap) {
    size_t k = (size_t)snprintf(out, cap, "--name=");
    for (int r = 0; r < CPT_N_WORKER_ROLES && k < cap; r++)
        k += (size_t)snprintf(out + k, cap - k, "%scpt-sat-%s-%s", r ? "," : "", S->run_name, role_name(r));
}

static int scancel(const char *job, int drain_signal) {
    char *argv[6];
    int n = 0;
    argv[n++] = "scancel";
    if (drain_signal) {
        /* The batch step runs satellite.sh, whose trap drains the worker; other steps have nothing to drain. */
        argv[n++] = "--batch";
        argv[n++] = "--signal=TERM";
    }
    argv[n++] = (char *)job;
    argv[n] = NULL;
    return run_capture(argv, NULL, NULL, 0);
}

void cpt_sat_cancel_stale(cpt_satellites *S) {
    if (!S->main_job[0]) return;
    char names[JOB_NAMES_CAP], out[16384], want[64];
    job_names(S, names, sizeof names);
    char *argv[] = {"squeue", "-h", names, "-o", "%i|%T|%k", NULL};
    if (run_capture(argv, NULL, out, sizeof out) != 0) return;
    snprintf(want, sizeof want, "cpt-main:%s", S->main_job);
    for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
        char id[32], st[32], comment[128];
        if (sscanf(line, "%31[^|]|%31[^|]|%127s", id, st, comment) != 3 || strcmp(comment, want)) continue;
        fprintf(stderr, "cpt: satellite job %s (%s) is left from an earlier start of job %s; cancelling it\n", id, st,
                S->main_job);
        scancel(id, !strcmp(st, "RUNNING"));
    }
}

int cpt_sat_may_submit(const cpt_satellites *S, int role) { return cpt_now() >= S->next_submit_at[role]; }

/* The environment of sbatch: ours without the main job's SLURM_ and SBATCH_ variables (they would describe the
 * wrong job to the satellite, and SBATCH_ ones would change its options), plus CPT_RUN and CPT_ROLE. */
static char **satellite_env(const cpt_satellites *S, const char *worker) {
    int n = 0;
    while (environ[n]) n++;
    char **env = calloc((size_t)n + 3, sizeof *env);
    if (!env) return NULL;
    int k = 0;
    for (int i = 0; i < n; i++) {
        const char *e = environ[i];
        if (!strncmp(e, "SLURM_CONF=", 11) || (strncmp(e, "SLURM_", 6) && strncmp(e, "SBATCH_", 7) &&
                                               strncmp(e, "SALLOC_", 7) && strncmp(e, "CPT_RUN=", 8) &&
                                               strncmp(e, "CPT_ROLE=", 9)))
            env[k++] = (char *)e;
    }
    size_t len = strlen(S->run_dir) + 16;
    env[k] = malloc(len);
    if (env[k]) snprintf(env[k], len, "CPT_RUN=%s", S->run_dir), k++;
    len = strlen(worker) + 16;
    env[k] = malloc(len);
    if (env[k]) snprintf(env[k], len, "CPT_ROLE=%s", worker), k++;
    env[k] = NULL;
    return env;
}

static void free_env(char **env) {
    if (!env) return;
    for (int i = 0; env[i]; i++)
        if (!strncmp(env[i], "CPT_RUN=", 8) || !strncmp(env[i], "CPT_ROLE=", 9)) free(env[i]);
    free(env);
}

int cpt_sat_submit(cpt_satellites *S, int role, cpt_err *err) {
    if (S->n == S->cap) {
        int cap = S->cap ? S->cap * 2 : 8;
        cpt_satellite *v = realloc(S->v, (size_t)cap * sizeof *v);
        if (!v) return cpt_errf(err, "out of memory");
        S->v = v;
        S->cap = cap;
    }
    char worker[64], jobname[256], comment[64], out_arg[2300], cpus[32], gres[48], part[160], acct[160], tlim[96];
    char check[32], url[800], pw[2200], extra[1024], id_out[256], sig[48];
    if (S->restart > 0)
        snprintf(worker, sizeof worker, "%s-sat%d-r%d", role_name(role), S->next_index[role], S->restart);
    else
        snprintf(worker, sizeof worker, "%s-sat%d", role_name(role), S->next_index[role]);
    snprintf(jobname, sizeof jobname, "--job-name=cpt-sat-%s-%s", S->run_name, role_name(role));
    snprintf(comment, sizeof comment, "--comment=cpt-main:%s", S->main_job);
    snprintf(out_arg, sizeof out_arg, "--output=%s/logs/%s.log", S->run_dir, worker);
    snprintf(cpus, sizeof cpus, "--cpus-per-task=%d", S->cpus[role]);
    snprintf(gres, sizeof gres, "--gres=gpu:%d", S->gpus[role]);
    snprintf(part, sizeof part, "--partition=%s", S->partition);
    snprintf(acct, sizeof acct, "--account=%s", S->account);
    snprintf(tlim, sizeof tlim, "--time=%s", S->time_limit);
    snprintf(check, sizeof check, "%g", S->check_s);
    snprintf(url, sizeof url, "queue.url=%s", S->queue_url);
    snprintf(pw, sizeof pw, "queue.password_file=%s", S->password_file);
    snprintf(extra, sizeof extra, "%s", S->extra);
    char *argv[64];
    int n = 0;
    argv[n++] = "sbatch";
    argv[n++] = "--parsable";
    argv[n++] = jobname;
    argv[n++] = comment;
    argv[n++] = "--nodes=1";
    argv[n++] = "--ntasks=1";
    argv[n++] = cpus;
    if (S->gpus[role] > 0) argv[n++] = gres;
    if (S->partition[0]) argv[n++] = part;
    if (S->account[0]) argv[n++] = acct;
    if (S->time_limit[0]) argv[n++] = tlim;
    argv[n++] = "--no-requeue";
    snprintf(sig, sizeof sig, "--signal=B:USR2@%d", S->warn_s);
    argv[n++] = sig;
    argv[n++] = "--open-mode=append";
    argv[n++] = out_arg;
    /* The user's arguments last but before the script, so they can override ours. */
    char *save = NULL;
    for (char *tok = strtok_r(extra, " \t", &save); tok && n < 40; tok = strtok_r(NULL, " \t", &save))
        argv[n++] = tok;
    argv[n++] = S->script;
    argv[n++] = S->main_job[0] ? S->main_job : "0";
    argv[n++] = check;
    argv[n++] = S->program[role];
    argv[n++] = S->config_path;
    argv[n++] = "--worker-id";
    argv[n++] = worker;
    if (S->queue_url[0]) argv[n++] = url;
    if (S->password_file[0]) argv[n++] = pw;
    argv[n] = NULL;
    char **env = satellite_env(S, worker);
    if (!env) return cpt_errf(err, "out of memory");
    int rc = run_capture(argv, env, id_out, sizeof id_out);
    free_env(env);
    char *end;
    long id = strtol(id_out, &end, 10);
    if (rc != 0 || id <= 0) {
        S->next_submit_at[role] = cpt_now() + S->backoff[role];
        S->backoff[role] = S->backoff[role] * 2 > 300 ? 300 : S->backoff[role] * 2;
        return cpt_errf(err, "sbatch of satellite %s failed (status %d%s%s); its stderr is above; retrying later",
                        worker, rc, id_out[0] ? ", output " : "", id_out);
    }
    cpt_satellite *s = &S->v[S->n++];
    memset(s, 0, sizeof *s);
    snprintf(s->job, sizeof s->job, "%ld", id);
    snprintf(s->worker, sizeof s->worker, "%s", worker);
    s->role = role;
    s->submitted_at = cpt_now();
    S->next_index[role]++;
    fprintf(stderr, "cpt: submitted satellite job %s for %s (log %s/logs/%s.log)\n", s->job, worker, S->run_dir,
            worker);
    return 0;
}

static int is_live_state(const char *st) {
    return !st[0] || !strcmp(st, "PENDING") || !strcmp(st, "CONFIGURING") || !strcmp(st, "RUNNING") ||
           !strcmp(st, "SUSPENDED") || !strcmp(st, "REQUEUED") || !strcmp(st, "RESIZING");
}

int cpt_sat_drain_one(cpt_satellites *S, int role, double grace) {
    for (int i = S->n - 1; i >= 0; i--) {
        cpt_satellite *s = &S->v[i];
        if (s->role != role || s->draining) continue;
        int running = !strcmp(s->state, "RUNNING");
        fprintf(stderr, "cpt: draining satellite %s (job %s, %s)\n", s->worker, s->job,
                s->state[0] ? s->state : "submitted");
        /* A job not started yet holds no work: cancel it. A running one drains through its batch script. */
        if (scancel(s->job, running) != 0) fprintf(stderr, "cpt: scancel of satellite job %s failed\n", s->job);
        s->draining = 1;
        s->drain_deadline = cpt_now() + grace;
        return 0;
    }
    return -1;
}

void cpt_sat_refresh(cpt_satellites *S) {
    if (S->n == 0) return;
    char names[JOB_NAMES_CAP], out[65536];
    job_names(S, names, sizeof names);
    char *argv[] = {"squeue", "-h", "-t", "all", names, "-o", "%i|%T", NULL};
    if (run_capture(argv, NULL, out, sizeof out) != 0) return; /* slurmctld busy: keep what we know */
    double now = cpt_now();
    int *seen = calloc((size_t)S->n, sizeof *seen);
    if (!seen) return;
    for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
        char id[32], st[32];
        if (sscanf(line, "%31[^|]|%31s", id, st) != 2) continue;
        for (int i = 0; i < S->n; i++)
            if (!strcmp(S->v[i].job, id)) {
                seen[i] = 1;
                if (!strcmp(st, "RUNNING") && strcmp(S->v[i].state, "RUNNING")) S->v[i].started_at = now;
                snprintf(S->v[i].state, sizeof S->v[i].state, "%s", st);
            }
    }
    int k = 0;
    for (int i = 0; i < S->n; i++) {
        cpt_satellite *s = &S->v[i];
        /* A job Slurm no longer lists ended long ago (MinJobAge); give a fresh submission a few seconds. */
        int gone = seen[i] ? !is_live_state(s->state) && strcmp(s->state, "COMPLETING") : now - s->submitted_at > 10;
        if (gone) {
            if (S->n_ended < (int)(sizeof S->ended / sizeof S->ended[0])) {
                snprintf(S->ended[S->n_ended], sizeof S->ended[0], "%s", s->worker);
                S->ended_role[S->n_ended++] = s->role;
            }
            int ran = s->started_at > 0 ? (int)(now - s->started_at) : 0;
            /* COMPLETED: the worker stopped cleanly, which it does only on a signal (the preemption's or the time
             * limit's USR2, a user's scancel --signal): no failure to back off from */
            int replaced = !strcmp(s->state, "PREEMPTED") || !strcmp(s->state, "TIMEOUT") ||
                           !strcmp(s->state, "COMPLETED");
            if (s->draining) {
                fprintf(stderr, "cpt: satellite %s (job %s) drained: %s\n", s->worker, s->job,
                        s->state[0] ? s->state : "ended");
            } else if (replaced) { /* backfill: the partition took it back, or its time is up; not a failure */
                fprintf(stderr, "cpt: satellite %s (job %s) ended %s after %d s (preempted or at its time limit); "
                                "a new one is submitted while the desired count asks for it\n",
                        s->worker, s->job, s->state, ran);
                S->next_submit_at[s->role] = now;
                S->backoff[s->role] = 5.0;
            } else {
                int r = s->role;
                int ran_long = s->started_at > 0 && now - s->started_at > 60;
                if (ran_long) S->backoff[r] = 5.0;
                S->next_submit_at[r] = now + S->backoff[r];
                fprintf(stderr, "cpt: satellite %s (job %s) ended on its own (%s); see %s/logs/%s.log; "
                                "a new one may be submitted in %.0f s\n", s->worker, s->job,
                        s->state[0] ? s->state : "gone", S->run_dir, s->worker, S->backoff[r]);
                S->backoff[r] = S->backoff[r] * 2 > 300 ? 300 : S->backoff[r] * 2;
            }
            continue;
        }
        if (s->draining && !s->cancelled_hard && now >= s->drain_deadline) {
            fprintf(stderr, "cpt: satellite %s (job %s) did not drain in time; scancel\n", s->worker, s->job);
            scancel(s->job, 0);
            s->cancelled_hard = 1;
        }
        S->v[k++] = *s;
    }
    S->n = k;
    free(seen);
}

int cpt_sat_live(const cpt_satellites *S, int role) {
    int n = 0;
    for (int i = 0; i < S->n; i++) n += S->v[i].role == role && !S->v[i].draining;
    return n;
}

int cpt_sat_running(const cpt_satellites *S, int role) {
    int n = 0;
    for (int i = 0; i < S->n; i++) n += S->v[i].role == role && !S->v[i].draining && !strcmp(S->v[i].state, "RUNNING");
    return n;
}

void cpt_sat_describe(const cpt_satellites *S, int role, char *out, size_t cap) {
    size_t len = 0;
    out[0] = '\0';
    for (int i = 0; i < S->n && len + 1 < cap; i++) {
        const cpt_satellite *s = &S->v[i];
        if (s->role != role) continue;
        int w = snprintf(out + len, cap - len, "%s%s:%s", len ? "," : "", s->job,
                         s->draining ? "DRAINING" : s->state[0] ? s->state : "SUBMITTED");
        if (w < 0) break;
        len += (size_t)w < cap - len ? (size_t)w : cap - len - 1;
    }
}

void cpt_sat_cancel_rest(cpt_satellites *S) {
    for (int i = 0; i < S->n; i++) {
        fprintf(stderr, "cpt: satellite %s (job %s) still listed as %s; scancel\n", S->v[i].worker, S->v[i].job,
                S->v[i].state[0] ? S->v[i].state : "submitted");
        scancel(S->v[i].job, 0);
    }
    S->n = 0;
}
