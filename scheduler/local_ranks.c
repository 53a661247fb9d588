/* N local ranks behind one process (see local_ranks.h). */
#include "scheduler/local_ranks.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/exit_status.h"
#include "core/fs.h"

#define MAX_RANKS 1024

static volatile sig_atomic_t pending[65];
static void on_signal(int sig) { pending[sig] = 1; }

static void clear_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char path[4600];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        unlink(path);
    }
    closedir(d);
}

static pid_t start_rank(const cpt_local_ranks_opts *o, int k) {
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid != 0) return pid;
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent) _exit(127);
    char v[32];
    snprintf(v, sizeof v, "%d", k);
    setenv("CPT_RANK", v, 1);
    setenv("CPT_LOCAL_RANK", v, 1);
    snprintf(v, sizeof v, "%d", o->n);
    setenv("CPT_WORLD_SIZE", v, 1);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    execvp(o->argv[0], o->argv);
    fprintf(stderr, "cpt local-ranks: rank %d: %s: %s\n", k, o->argv[0], strerror(errno));
    _exit(127);
}

int cpt_local_ranks_run(const cpt_local_ranks_opts *o, cpt_err *err) {
    if (o->n < 1 || o->n > MAX_RANKS) return cpt_errf(err, "local-ranks: %d ranks (1..%d)", o->n, MAX_RANKS);
    if (!o->argv || !o->argv[0]) return cpt_errf(err, "local-ranks: no program to start");
    if (o->clear_dir && *o->clear_dir) clear_dir(o->clear_dir);
    static const int forwarded[] = {SIGTERM, SIGUSR1, SIGINT, SIGHUP};
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    for (size_t i = 0; i < sizeof forwarded / sizeof forwarded[0]; i++) sigaction(forwarded[i], &sa, NULL);
    pid_t pids[MAX_RANKS];
    int live = 0;
    for (int k = 0; k < o->n; k++) {
        if ((pids[k] = start_rank(o, k)) < 0) {
            for (int j = 0; j < k; j++) kill(pids[j], SIGKILL);
            return cpt_errno(err, "local-ranks: starting rank %d", k);
        }
        live++;
    }
    double kill_after = o->kill_after_s > 0 ? o->kill_after_s : 10.0, kill_at = 0;
    int status = 0;
    while (live > 0) {
        for (size_t i = 0; i < sizeof forwarded / sizeof forwarded[0]; i++) {
            int sig = forwarded[i];
            if (!pending[sig]) continue;
            pending[sig] = 0;
            for (int k = 0; k < o->n; k++)
                if (pids[k] > 0) kill(pids[k], sig);
        }
        int ws;
        pid_t pid = waitpid(-1, &ws, WNOHANG);
        if (pid > 0) {
            for (int k = 0; k < o->n; k++) {
                if (pids[k] != pid) continue;
                pids[k] = 0;
                live--;
                int st = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
                if (st != 0 && status == 0) status = st;
                if (st != 0 && st != CPT_EXIT_STOPPED && kill_at == 0) {
                    fprintf(stderr, "cpt local-ranks: rank %d exited with status %d; stopping the other ranks\n", k,
                            st);
                    for (int j = 0; j < o->n; j++)
                        if (pids[j] > 0) kill(pids[j], SIGTERM);
                    kill_at = cpt_now() + kill_after;
                }
            }
            continue;
        }
        if (kill_at > 0 && cpt_now() >= kill_at) {
            for (int k = 0; k < o->n; k++)
                if (pids[k] > 0) kill(pids[k], SIGKILL);
            kill_at = cpt_now() + 3600;
        }
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return status;
}
