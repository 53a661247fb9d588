#include "scheduler/supervisor.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/fs.h"

static char **copy_strv(char *const v[]) {
    int n = 0;
    while (v && v[n]) n++;
    char **out = calloc((size_t)n + 1, sizeof *out);
    if (!out) return NULL;
    for (int i = 0; i < n; i++) {
        out[i] = strdup(v[i]);
        if (!out[i]) {
            for (int j = 0; j < i; j++) free(out[j]);
            free(out);
            return NULL;
        }
    }
    return out;
}

static void free_strv(char **v) {
    for (int i = 0; v && v[i]; i++) free(v[i]);
    free(v);
}

void cpt_sup_init(cpt_supervisor *s) {
    memset(s, 0, sizeof *s);
    s->backoff_min = 0.5;
    s->backoff_max = 30.0;
    s->healthy_after = 60.0;
    s->max_restarts = 20;
    s->quick_fail_s = 5.0;
    s->stop_signal = SIGTERM;
    s->max_quick_fails = 0; /* off unless the owner turns it on (the launcher does) */
}

void cpt_sup_free(cpt_supervisor *s) {
    for (int i = 0; i < s->n; i++) {
        free_strv(s->procs[i].argv);
        free_strv(s->procs[i].env);
    }
    free(s->procs);
    memset(s, 0, sizeof *s);
}

int cpt_sup_add(cpt_supervisor *s, const char *name, char *const argv[], char *const env[], const char *log_path,
                cpt_restart_policy policy, cpt_err *err) {
    if (!argv || !argv[0]) return cpt_errf(err, "process '%s': empty command", name);
    if (cpt_sup_find(s, name) >= 0) return cpt_errf(err, "process '%s' already exists", name);
    if (s->n == s->cap) {
        int cap = s->cap ? s->cap * 2 : 8;
        cpt_proc *np = realloc(s->procs, (size_t)cap * sizeof *np);
        if (!np) return cpt_errf(err, "out of memory");
        s->procs = np;
        s->cap = cap;
    }
    cpt_proc *p = &s->procs[s->n];
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s", name);
    p->argv = copy_strv(argv);
    p->env = copy_strv(env);
    if (!p->argv || !p->env) {
        free_strv(p->argv);
        free_strv(p->env);
        return cpt_errf(err, "out of memory");
    }
    if (log_path) snprintf(p->log_path, sizeof p->log_path, "%s", log_path);
    p->policy = policy;
    p->backoff = s->backoff_min;
    return s->n++;
}

int cpt_sup_find(const cpt_supervisor *s, const char *name) {
    for (int i = 0; i < s->n; i++)
        if (!strcmp(s->procs[i].name, name)) return i;
    return -1;
}

int cpt_sup_start(cpt_supervisor *s, int i, cpt_err *err) {
    cpt_proc *p = &s->procs[i];
    /* A pipe that closes on exec tells the parent whether exec itself failed. */
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) return cpt_errno(err, "process '%s': pipe", p->name);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        return cpt_errno(err, "process '%s': fork", p->name);
    }
    if (pid == 0) {
        close(fds[0]);
        /* Dies with the launcher: a launcher killed with -9 leaves no role behind to train on with nobody watching
         * (its own SIGTERM and SIGHUP are stops in order, which end the roles first). SIGKILL, not SIGTERM: with no
         * launcher left to escalate, a role that waits on a queue that also died would never exit, and every role
         * is safe under kill -9 (checkpoints and the queue's pending entries). The signal fires when the thread that
         * forked exits: the launcher forks from its main thread (never from a helper thread such as a TLS pump),
         * so that is the launcher's own exit. The parent may already be gone before the prctl: then nothing would
         * fire, so check and leave. */
        if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent) _exit(127);
        setpgid(0, 0); /* its own group: a terminal's Ctrl-C reaches the launcher, which drains in order */
        if (p->log_path[0]) {
            int fd = open(p->log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
            if (fd >= 0) {
                dup2(fd, 1);
                dup2(fd, 2);
                if (fd > 2) close(fd);
            }
        }
        for (int k = 0; p->env[k]; k++) putenv(p->env[k]);
        signal(SIGPIPE, SIG_DFL);
        execvp(p->argv[0], p->argv);
        int e = errno;
        if (write(fds[1], &e, sizeof e) < 0) _exit(127);
        _exit(127);
    }
    close(fds[1]);
    int child_errno = 0;
    ssize_t got;
    do got = read(fds[0], &child_errno, sizeof child_errno);
    while (got < 0 && errno == EINTR);
    close(fds[0]);
    if (got == (ssize_t)sizeof child_errno) {
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
        }
        p->state = CPT_PROC_FAILED;
        errno = child_errno;
        return cpt_errno(err, "process '%s': cannot run %s", p->name, p->argv[0]);
    }
    p->pid = pid;
    p->state = CPT_PROC_RUNNING;
    p->started_at = cpt_now();
    p->stop_requested = 0;
    return 0;
}

static void on_exit_status(cpt_supervisor *s, cpt_proc *p, int status) {
    double ran = cpt_now() - p->started_at;
    p->pid = 0;
    p->exit_status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    int failed = p->exit_status != 0;
    if (failed && !p->stop_requested && s->no_restart_status && WIFEXITED(status) &&
        p->exit_status == s->no_restart_status) {
        p->state = CPT_PROC_FAILED;
        fprintf(stderr, "cpt: %s exited with status %d (an error a restart cannot mend); not restarting it\n",
                p->name, p->exit_status);
        return;
    }
    if (!failed || p->stop_requested || p->policy == CPT_RESTART_NEVER) {
        p->state = failed && !p->stop_requested ? CPT_PROC_FAILED : CPT_PROC_EXITED;
        if (p->stop_requested)
            fprintf(stderr, "cpt: %s stopped (status %d) %.1f s after the stop request\n", p->name, p->exit_status,
                    cpt_now() - p->stop_at);
        return;
    }
    /* A process that exits with an error status right after starting (a bad config, a missing file) fails the
     * same way every time: give up after a few tries instead of backing off for minutes. A signal (a crash, a
     * kill -9) is not a start failure. */
    if (WIFEXITED(status) && ran < s->quick_fail_s) p->quick_fails++;
    else p->quick_fails = 0;
    if (s->max_quick_fails > 0 && p->quick_fails >= s->max_quick_fails) {
        p->state = CPT_PROC_FAILED;
        fprintf(stderr, "cpt: %s failed %d times in a row within %.0f s of starting (status %d); giving up\n", p->name,
                p->quick_fails, s->quick_fail_s, p->exit_status);
        return;
    }
    if (p->restarts >= s->max_restarts) {
        p->state = CPT_PROC_FAILED;
        fprintf(stderr, "cpt: %s failed %d times; giving up\n", p->name, p->restarts + 1);
        return;
    }
    if (ran >= s->healthy_after) p->backoff = s->backoff_min;
    p->state = CPT_PROC_BACKOFF;
    p->next_start_at = cpt_now() + p->backoff;
    fprintf(stderr, "cpt: %s exited with status %d after %.1f s; restarting in %.1f s\n", p->name, p->exit_status,
            ran, p->backoff);
    p->backoff = p->backoff * 2 > s->backoff_max ? s->backoff_max : p->backoff * 2;
}

int cpt_sup_draining(const cpt_proc *p) { return p->state == CPT_PROC_RUNNING && p->stop_requested; }

static int stop_signal_of(const cpt_supervisor *s, const cpt_proc *p) {
    return p->stop_signal ? p->stop_signal : s->stop_signal;
}

/* A stopping process past its deadline: SIGTERM first when the polite signal was another one (srun ends its step
 * and the tasks with it), SIGKILL 5 s later. */
static void escalate(cpt_supervisor *s, cpt_proc *p, double now) {
    if (!cpt_sup_draining(p) || now < p->stop_deadline || p->stop_stage >= 2) return;
    if (p->stop_stage == 0 && stop_signal_of(s, p) != SIGTERM) {
        fprintf(stderr, "cpt: %s did not stop within its grace; SIGTERM\n", p->name);
        kill(p->pid, SIGTERM);
        p->stop_stage = 1;
    } else {
        fprintf(stderr, "cpt: %s did not stop; SIGKILL\n", p->name);
        kill(p->pid, SIGKILL);
        p->stop_stage = 2;
    }
    p->stop_deadline = now + 5.0;
}

int cpt_sup_poll(cpt_supervisor *s, double timeout) {
    int changes = 0;
    double deadline = cpt_now() + timeout;
    for (;;) {
        /* Only our own children are reaped: other children of this process (a redis-server) keep theirs. */
        for (int i = 0; i < s->n; i++) {
            int status;
            cpt_proc *p = &s->procs[i];
            if (p->state == CPT_PROC_RUNNING && waitpid(p->pid, &status, WNOHANG) == p->pid) {
                on_exit_status(s, p, status);
                changes++;
            }
        }
        double now = cpt_now();
        for (int i = 0; i < s->n; i++) escalate(s, &s->procs[i], now);
        for (int i = 0; i < s->n; i++) {
            cpt_proc *p = &s->procs[i];
            if (p->state == CPT_PROC_BACKOFF && now >= p->next_start_at) {
                cpt_err err;
                p->restarts++;
                if (cpt_sup_start(s, i, &err) != 0) fprintf(stderr, "cpt: %s\n", err.msg);
                changes++;
            }
        }
        if (changes || cpt_now() >= deadline) return changes;
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

void cpt_sup_request_stop(cpt_supervisor *s, int i, double grace) {
    cpt_proc *p = &s->procs[i];
    if (p->state == CPT_PROC_BACKOFF) p->state = CPT_PROC_EXITED;
    if (p->stop_requested && p->state == CPT_PROC_RUNNING) return; /* already draining: keep its deadline */
    p->stop_requested = 1;
    if (p->state != CPT_PROC_RUNNING) return;
    p->stop_stage = 0;
    p->stop_at = cpt_now();
    p->stop_deadline = p->stop_at + grace;
    kill(p->pid, stop_signal_of(s, p));
}


static double stop_wait_limit(const cpt_supervisor *s) {
    /* Past the latest deadline, plus the escalation steps, plus a margin for the kernel to deliver. */
    double last = cpt_now();
    for (int i = 0; i < s->n; i++)
        if (cpt_sup_draining(&s->procs[i]) && s->procs[i].stop_deadline > last) last = s->procs[i].stop_deadline;
    return last + 12.0;
}

void cpt_sup_stop(cpt_supervisor *s, int i, double grace) {
    cpt_sup_request_stop(s, i, grace);
    double limit = stop_wait_limit(s);
    while (s->procs[i].state == CPT_PROC_RUNNING && cpt_now() < limit) cpt_sup_poll(s, 0.05);
}

void cpt_sup_stop_all(cpt_supervisor *s, double grace) {
    /* Signal everyone first so they drain in parallel; poll escalates the stragglers. */
    for (int i = 0; i < s->n; i++) cpt_sup_request_stop(s, i, grace);
    double limit = stop_wait_limit(s);
    while (cpt_sup_running(s) && cpt_now() < limit) cpt_sup_poll(s, 0.05);
}

int cpt_sup_signal(cpt_supervisor *s, int i, int sig) {
    cpt_proc *p = &s->procs[i];
    if (p->state != CPT_PROC_RUNNING) return -1;
    return kill(p->pid, sig);
}

int cpt_sup_running(const cpt_supervisor *s) {
    int n = 0;
    for (int i = 0; i < s->n; i++) n += s->procs[i].state == CPT_PROC_RUNNING;
    return n;
}
