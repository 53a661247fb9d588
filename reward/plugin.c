/* Reward plugins isolated in a child process (see plugin.h, plugin_abi.h).
 *
 * Wire format on the socket pair (host byte order, both ends are this program):
 *   child -> parent after init: u8 ok, u32 len, len bytes of message
 *   request:  u32 magic, u32 n, then for each item three strings (prompt, completion, extra) as u32 len + bytes
 *   response: i32 count (the plugin's return), u32 len + error bytes, u32 m, m doubles (m = count clamped to 0..n) */
#include "reward/plugin.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <math.h>

#include "core/elf_check.h"
#include "reward/plugin_abi.h"

#define REQ_MAGIC 0x52545043u /* "CPTR" */
#define MAX_STRING (64u << 20)
#define MAX_BATCH 1000000

struct cpt_plugin {
    char *path, *config;
    int timeout_ms, init_timeout_ms;
    pid_t pid; /* 0: no child running */
    int fd;
    int starts;
};

/* ---- blocking I/O for the child ---- */

static int read_full(int fd, void *buf, size_t n) {
    char *p = buf;
    while (n) {
        ssize_t k = read(fd, p, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return -1;
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

static int write_full(int fd, const void *buf, size_t n) {
    const char *p = buf;
    while (n) {
        ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return -1;
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

static int write_str(int fd, const char *s) {
    uint32_t n = s ? (uint32_t)strlen(s) : 0;
    return write_full(fd, &n, 4) || write_full(fd, s ? s : "", n);
}

/* ---- the child ---- */

static void child_init_reply(int fd, int ok, const char *msg) {
    uint8_t b = (uint8_t)ok;
    if (write_full(fd, &b, 1) || write_str(fd, msg)) _exit(2);
}

static char *child_read_str(int fd) {
    uint32_t n;
    if (read_full(fd, &n, 4) || n > MAX_STRING) return NULL;
    char *s = malloc((size_t)n + 1);
    if (!s) return NULL;
    if (read_full(fd, s, n)) { free(s); return NULL; }
    s[n] = 0;
    return s;
}

static void child_main(int fd, const char *path, const char *config) {
    char err[1024] = "";
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        child_init_reply(fd, 0, dlerror());
        _exit(1);
    }
    cpt_reward_plugin_abi_fn abi = (cpt_reward_plugin_abi_fn)dlsym(h, "cpt_reward_plugin_abi");
    cpt_reward_plugin_init_fn init = (cpt_reward_plugin_init_fn)dlsym(h, "cpt_reward_plugin_init");
    cpt_reward_plugin_score_batch_fn score =
        (cpt_reward_plugin_score_batch_fn)dlsym(h, "cpt_reward_plugin_score_batch");
    cpt_reward_plugin_free_fn fr = (cpt_reward_plugin_free_fn)dlsym(h, "cpt_reward_plugin_free");
    if (!abi || !init || !score || !fr) {
        snprintf(err, sizeof err, "missing symbol %s (see reward/plugin_abi.h)",
                 !abi ? "cpt_reward_plugin_abi" : !init ? "cpt_reward_plugin_init"
                 : !score ? "cpt_reward_plugin_score_batch" : "cpt_reward_plugin_free");
        child_init_reply(fd, 0, err);
        _exit(1);
    }
    int v = abi();
    if (v != CPT_REWARD_PLUGIN_ABI) {
        snprintf(err, sizeof err, "plugin ABI version %d, this cpt speaks %d", v, CPT_REWARD_PLUGIN_ABI);
        child_init_reply(fd, 0, err);
        _exit(1);
    }
    void *state = init(config, err, sizeof err);
    if (!state) {
        err[sizeof err - 1] = 0;
        char msg[1100];
        snprintf(msg, sizeof msg, "init failed: %s", err[0] ? err : "(no message)");
        child_init_reply(fd, 0, msg);
        _exit(1);
    }
    child_init_reply(fd, 1, "");
    for (;;) {
        uint32_t hdr[2];
        if (read_full(fd, hdr, sizeof hdr)) break; /* parent closed: shut down */
        if (hdr[0] != REQ_MAGIC || hdr[1] > MAX_BATCH) _exit(3);
        int n = (int)hdr[1];
        char **strs = calloc((size_t)n * 3 + 1, sizeof(char *));
        double *scores = calloc((size_t)n + 1, sizeof(double));
        if (!strs || !scores) _exit(4);
        for (int i = 0; i < 3 * n; i++)
            if (!(strs[i] = child_read_str(fd))) _exit(3);
        const char **pr = malloc(sizeof(char *) * ((size_t)n + 1)), **co = malloc(sizeof(char *) * ((size_t)n + 1)),
                   **ex = malloc(sizeof(char *) * ((size_t)n + 1));
        if (!pr || !co || !ex) _exit(4);
        for (int i = 0; i < n; i++) {
            pr[i] = strs[3 * i];
            co[i] = strs[3 * i + 1];
            ex[i] = strs[3 * i + 2];
        }
        err[0] = 0;
        int count = score(state, n, pr, co, ex, scores, err, sizeof err);
        err[sizeof err - 1] = 0;
        int32_t c32 = count;
        uint32_t m = count < 0 ? 0 : (uint32_t)(count > n ? n : count);
        if (write_full(fd, &c32, 4) || write_str(fd, err) || write_full(fd, &m, 4) ||
            write_full(fd, scores, sizeof(double) * m))
            _exit(2);
        for (int i = 0; i < 3 * n; i++) free(strs[i]);
        free(strs);
        free(scores);
        free(pr);
        free(co);
        free(ex);
    }
    fr(state);
    _exit(0);
}

/* ---- the parent ---- */

static int64_t now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Reads or writes n bytes before the deadline. Returns 0, -1 on EOF / error, -2 on timeout. */
static int io_deadline(int fd, void *buf, size_t n, int writing, int64_t deadline) {
    char *p = buf;
    while (n) {
        int64_t left = deadline - now_ms();
        if (left <= 0) return -2;
        struct pollfd pfd = {.fd = fd, .events = writing ? POLLOUT : POLLIN};
        int r = poll(&pfd, 1, (int)(left > 1000000 ? 1000000 : left));
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return -1;
        if (r == 0) continue; /* re-check the deadline */
        ssize_t k = writing ? send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT) : recv(fd, p, n, MSG_DONTWAIT);
        if (k < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
        if (k <= 0) return -1;
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

/* Reaps the child and describes how it ended. */
static void describe_exit(cpt_plugin *p, char *out, size_t len) {
    int st = 0;
    pid_t r = 0;
    for (int i = 0; i < 100 && (r = waitpid(p->pid, &st, WNOHANG)) == 0; i++) {
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    if (r == 0) {
        kill(p->pid, SIGKILL);
        r = waitpid(p->pid, &st, 0);
    }
    if (r == p->pid && WIFSIGNALED(st))
        snprintf(out, len, "killed by signal %d (%s)", WTERMSIG(st), strsignal(WTERMSIG(st)));
    else if (r == p->pid && WIFEXITED(st))
        snprintf(out, len, "exited with status %d", WEXITSTATUS(st));
    else
        snprintf(out, len, "ended");
    kill(-p->pid, SIGKILL); /* what it started, if anything of its group is left */
    p->pid = 0;
    close(p->fd);
    p->fd = -1;
}

static void kill_child(cpt_plugin *p) {
    if (!p->pid) return;
    kill(-p->pid, SIGKILL); /* its process group: what the plugin started too */
    kill(p->pid, SIGKILL);
    waitpid(p->pid, NULL, 0);
    p->pid = 0;
    close(p->fd);
    p->fd = -1;
}

/* A child failed at I/O: rc -2 timeout, -1 death. Reaps it and writes the reason. */
static int child_failed(cpt_plugin *p, int rc, const char *during, int timeout_ms, cpt_err *err) {
    if (rc == -2) {
        kill_child(p);
        return cpt_errf(err, "reward plugin %s: timed out after %d ms %s (killed; restarted on the next batch)",
                        p->path, timeout_ms, during);
    }
    char how[128];
    describe_exit(p, how, sizeof how);
    return cpt_errf(err, "reward plugin %s: process %s %s", p->path, how, during);
}

static int start_child(cpt_plugin *p, cpt_err *err) {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv)) return cpt_errno(err, "reward plugin: socketpair");
    fflush(NULL); /* nothing buffered is written twice */
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        close(sv[0]);
        close(sv[1]);
        return cpt_errno(err, "reward plugin: fork");
    }
    if (pid == 0) {
        close(sv[0]);
        /* A group of its own, so a timeout's kill reaches what the plugin started; dies with the worker (a worker
         * killed with -9 leaves no plugin spinning). */
        setpgid(0, 0);
        if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent) _exit(1);
        /* the child needs none of the parent's descriptors (Redis connections would otherwise stay open) */
        for (int fd = 3; fd < 1024; fd++)
            if (fd != sv[1]) close(fd);
        /* the parent's handlers (drain on SIGTERM, ...) are not the plugin's: default dispositions */
        signal(SIGPIPE, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        signal(SIGINT, SIG_DFL);
        signal(SIGHUP, SIG_DFL);
        signal(SIGUSR1, SIG_DFL);
        signal(SIGUSR2, SIG_DFL);
        child_main(sv[1], p->path, p->config);
        _exit(0);
    }
    close(sv[1]);
    setpgid(pid, pid); /* also here: the group exists before any kill of it, whichever side runs first */
    p->pid = pid;
    p->fd = sv[0];
    p->starts++;
    int64_t deadline = now_ms() + p->init_timeout_ms;
    uint8_t ok;
    uint32_t n;
    int rc = io_deadline(p->fd, &ok, 1, 0, deadline);
    if (!rc) rc = io_deadline(p->fd, &n, 4, 0, deadline);
    if (rc) return child_failed(p, rc, "while starting", p->init_timeout_ms, err);
    char msg[1200];
    if (n >= sizeof msg) n = sizeof msg - 1;
    rc = io_deadline(p->fd, msg, n, 0, deadline);
    if (rc) return child_failed(p, rc, "while starting", p->init_timeout_ms, err);
    msg[n] = 0;
    if (!ok) {
        char how[128];
        describe_exit(p, how, sizeof how);
        return cpt_errf(err, "reward plugin %s: %s", p->path, msg);
    }
    return 0;
}

/* ---- checks before loading ---- */

static const char *const ABI_SYMBOLS[4] = {"cpt_reward_plugin_abi", "cpt_reward_plugin_init",
                                           "cpt_reward_plugin_score_batch", "cpt_reward_plugin_free"};
#define MAX_PLUGIN_BYTES ((size_t)1 << 30)

int cpt_plugin_resolve(const char *path, char *out, size_t cap, cpt_err *err) {
    if (!path || !*path) return cpt_errf(err, "reward plugin: reward.plugin_path is empty");
    if (strchr(path, '/')) {
        if (strlen(path) >= cap) return cpt_errf(err, "reward plugin %s: path too long", path);
        snprintf(out, cap, "%s", path);
        return 0;
    }
    char dir[PATH_MAX];
    const char *env = getenv("CPT_BIN");
    if (env && *env) {
        snprintf(dir, sizeof dir, "%s", env);
    } else {
        ssize_t n = readlink("/proc/self/exe", dir, sizeof dir - 1);
        if (n <= 0) return cpt_errno(err, "reward plugin %s: finding the plugins folder (/proc/self/exe)", path);
        dir[n] = '\0';
        char *slash = strrchr(dir, '/');
        if (slash) *slash = '\0';
    }
    if (snprintf(out, cap, "%s/plugins/%s", dir, path) >= (int)cap)
        return cpt_errf(err, "reward plugin %s: path too long", path);
    return 0;
}

int cpt_plugin_elf_symbols(const char *what, const char *path, const char *const *names, int n, int *found,
                           char *file, size_t file_cap, cpt_err *err) {
    if (cpt_plugin_resolve(path, file, file_cap, err)) return -1;
    int fd = open(file, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        if (!strchr(path, '/') && errno == ENOENT)
            return cpt_errf(err, "%s %s: no such file in the plugins folder (%s); give a path with a '/' for a file "
                            "elsewhere", what, path, file);
        return cpt_errno(err, "%s %s", what, file);
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        close(fd);
        return cpt_errno(err, "%s %s", what, file);
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return cpt_errf(err, "%s %s: not a regular file", what, file);
    }
    if ((size_t)st.st_size > MAX_PLUGIN_BYTES) {
        close(fd);
        return cpt_errf(err, "%s %s: %lld bytes, more than a plugin may have (1 GiB)", what, file,
                        (long long)st.st_size);
    }
    size_t len = (size_t)st.st_size;
    unsigned char *buf = malloc(len ? len : 1);
    if (!buf) {
        close(fd);
        return cpt_errf(err, "%s %s: out of memory", what, file);
    }
    size_t got = 0;
    while (got < len) {
        ssize_t k = read(fd, buf + got, len - got);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) break;
        got += (size_t)k;
    }
    close(fd);
    int rc = cpt_elf_check_shared(buf, got, file, names, n, found, err);
    free(buf);
    return rc ? cpt_err_prefix(err, "%s", what) : 0;
}

int cpt_plugin_check(const char *path, cpt_err *err) {
    char file[PATH_MAX + 64];
    int found[4];
    if (cpt_plugin_elf_symbols("reward plugin", path, ABI_SYMBOLS, 4, found, file, sizeof file, err)) return -1;
    char missing[200] = "";
    for (int i = 0; i < 4; i++)
        if (!found[i])
            snprintf(missing + strlen(missing), sizeof missing - strlen(missing), "%s%s", missing[0] ? ", " : "",
                     ABI_SYMBOLS[i]);
    if (missing[0])
        return cpt_errf(err, "reward plugin %s: does not export %s (see reward/plugin_abi.h; C++ needs extern \"C\")",
                        file, missing);
    return 0;
}

cpt_plugin *cpt_plugin_open(const char *path, const char *config, int timeout_ms, cpt_err *err) {
    char file[PATH_MAX + 64];
    if (cpt_plugin_resolve(path, file, sizeof file, err) || cpt_plugin_check(path, err)) return NULL;
    cpt_plugin *p = calloc(1, sizeof *p);
    if (!p) {
        cpt_errf(err, "reward plugin: out of memory");
        return NULL;
    }
    p->path = strdup(file);
    p->config = strdup(config ? config : "");
    p->timeout_ms = timeout_ms > 0 ? timeout_ms : 30000;
    p->init_timeout_ms = p->timeout_ms;
    p->fd = -1;
    if (!p->path || !p->config || start_child(p, err)) {
        cpt_plugin_close(p);
        return NULL;
    }
    return p;
}

int cpt_plugin_starts(const cpt_plugin *p) { return p->starts; }

void cpt_plugin_set_timeout(cpt_plugin *p, int timeout_ms) {
    if (timeout_ms > 0) p->timeout_ms = timeout_ms;
}

static int send_str(cpt_plugin *p, const char *s, int64_t deadline) {
    uint32_t n = (uint32_t)strlen(s);
    int rc = io_deadline(p->fd, &n, 4, 1, deadline);
    return rc ? rc : io_deadline(p->fd, (void *)s, n, 1, deadline);
}

int cpt_plugin_score_batch(cpt_plugin *p, int n, const char *const *prompts, const char *const *completions,
                           const char *const *extras, double *scores, cpt_err *err) {
    if (n < 0 || n > MAX_BATCH) return cpt_errf(err, "reward plugin: batch of %d items", n);
    if (n == 0) return 0;
    for (int i = 0; i < n; i++) {
        const char *s[3] = {prompts[i], completions[i], extras && extras[i] ? extras[i] : "{}"};
        for (int k = 0; k < 3; k++)
            if (!s[k] || strlen(s[k]) > MAX_STRING)
                return cpt_errf(err, "reward plugin: item %d: %s missing or longer than %u bytes", i,
                                k == 0 ? "prompt" : k == 1 ? "completion" : "extra", MAX_STRING);
    }
    if (!p->pid && start_child(p, err)) return -1;
    int64_t deadline = now_ms() + p->timeout_ms;
    uint32_t hdr[2] = {REQ_MAGIC, (uint32_t)n};
    int rc = io_deadline(p->fd, hdr, sizeof hdr, 1, deadline);
    for (int i = 0; i < n && !rc; i++) {
        rc = send_str(p, prompts[i], deadline);
        if (!rc) rc = send_str(p, completions[i], deadline);
        if (!rc) rc = send_str(p, extras && extras[i] ? extras[i] : "{}", deadline);
    }
    if (rc) return child_failed(p, rc, "while receiving the batch", p->timeout_ms, err);
    int32_t count;
    uint32_t elen, m;
    rc = io_deadline(p->fd, &count, 4, 0, deadline);
    if (!rc) rc = io_deadline(p->fd, &elen, 4, 0, deadline);
    if (rc) return child_failed(p, rc, "while scoring", p->timeout_ms, err);
    char emsg[1100];
    if (elen >= sizeof emsg) {
        kill_child(p);
        return cpt_errf(err, "reward plugin %s: malformed reply (error of %u bytes)", p->path, elen);
    }
    rc = io_deadline(p->fd, emsg, elen, 0, deadline);
    if (!rc) rc = io_deadline(p->fd, &m, 4, 0, deadline);
    if (rc) return child_failed(p, rc, "while replying", p->timeout_ms, err);
    emsg[elen] = 0;
    if (m > (uint32_t)n) {
        kill_child(p);
        return cpt_errf(err, "reward plugin %s: malformed reply (%u scores)", p->path, m);
    }
    double *got = malloc(sizeof(double) * ((size_t)m + 1));
    if (!got) return cpt_errf(err, "reward plugin: out of memory");
    rc = io_deadline(p->fd, got, sizeof(double) * m, 0, deadline);
    if (rc) {
        free(got);
        return child_failed(p, rc, "while replying", p->timeout_ms, err);
    }
    if (count < 0) {
        free(got);
        return cpt_errf(err, "reward plugin %s: score_batch failed: %s", p->path, emsg[0] ? emsg : "(no message)");
    }
    if (count != n) {
        free(got);
        return cpt_errf(err, "reward plugin %s: returned %d scores for %d completions", p->path, count, n);
    }
    for (int i = 0; i < n; i++) {
        if (!isfinite(got[i])) {
            int bad = i;
            double v = got[i];
            free(got);
            return cpt_errf(err, "reward plugin %s: score %d of %d is %g (scores must be finite)", p->path, bad, n, v);
        }
    }
    memcpy(scores, got, sizeof(double) * (size_t)n);
    free(got);
    return 0;
}

void cpt_plugin_close(cpt_plugin *p) {
    if (!p) return;
    if (p->pid) {
        /* EOF tells the child to free the plugin and exit */
        shutdown(p->fd, SHUT_WR);
        char how[128];
        describe_exit(p, how, sizeof how);
    }
    free(p->path);
    free(p->config);
    free(p);
}
