/* The tool sandbox (see env_sandbox.h).
 *
 * Child to parent on the pipe: one byte (1: the tool succeeded, 0: it failed), then the observation's bytes; the
 * child's end closing marks the end. */
#include "reward/env_sandbox.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/seccomp.h>
#include <malloc.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CHILD_FD 3
/* heap kept by the child's allocator before seccomp closes brk and mmap, so a strict tool can still malloc a little */
#define STRICT_HEAP_RESERVE_MAX ((size_t)16 << 20)

/* ---- the child ---- */

static void child_write_all(const void *buf, size_t n) {
    const char *p = buf;
    while (n) {
        ssize_t k = write(CHILD_FD, p, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) break;
        p += k;
        n -= (size_t)k;
    }
}

/* Not declared noreturn: a sanitizer instruments calls to noreturn functions with system calls strict mode forbids. */
static void child_answer(int ok, const char *obs, size_t cap) {
    uint8_t b = ok ? 1 : 0;
    child_write_all(&b, 1);
    child_write_all(obs, strnlen(obs, cap));
    /* exit_group is not among the system calls strict mode allows: end this thread, the only one */
    for (;;) syscall(SYS_exit, 0);
}

/* Bytes of address space mapped now (the first field of /proc/self/statm, in pages), or 0 when unknown. */
static size_t mapped_bytes(void) {
    int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    char buf[128];
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return 0;
    buf[n] = 0;
    unsigned long long pages = strtoull(buf, NULL, 10);
    long page = sysconf(_SC_PAGESIZE);
    return (size_t)pages * (size_t)(page > 0 ? page : 4096);
}

static void close_other_fds(void) {
#ifdef SYS_close_range
    if (syscall(SYS_close_range, CHILD_FD + 1, ~0U, 0) == 0) return;
#endif
    for (int fd = CHILD_FD + 1; fd < 65536; fd++) close(fd);
}

static void child_main(pid_t parent, int wfd, const cpt_env_limits *lim, cpt_env_prepare_fn prepare,
                       cpt_env_tool_fn tool, void *ctx, char *obs, size_t cap) {
    setpgid(0, 0);
    /* a caller killed outright takes its tool with it (its own group shields it from the caller's group signals) */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) {
        syscall(SYS_exit, 1);
        return;
    }
    /* the parent's handlers (drain on SIGTERM, ...) are not the tool's: default dispositions, nothing blocked */
    int sigs[] = {SIGPIPE, SIGTERM, SIGINT, SIGHUP, SIGUSR1, SIGUSR2, SIGCHLD, SIGXCPU, SIGALRM};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) signal(sigs[i], SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    if (wfd != CHILD_FD) {
        if (dup2(wfd, CHILD_FD) < 0) {
            syscall(SYS_exit, 3);
            return;
        }
        close(wfd);
    }
    int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (devnull >= 0) {
        dup2(devnull, 0);
        dup2(devnull, 1);
        if (devnull > 2) close(devnull);
    }
    close_other_fds();

    size_t limit = mapped_bytes() + ((size_t)lim->memory_mb << 20);
    struct rlimit as = {limit, limit};
    rlim_t cpu_s = (rlim_t)(lim->timeout_ms / 1000 + 1);
    struct rlimit cpu = {cpu_s, cpu_s + 1};
    if (setrlimit(RLIMIT_AS, &as) || setrlimit(RLIMIT_CPU, &cpu)) {
        snprintf(obs, cap, "error: the sandbox could not set its limits (%s)", strerror(errno));
        child_answer(0, obs, cap);
        return;
    }
    struct rlimit no_core = {0, 0};
    setrlimit(RLIMIT_CORE, &no_core);
    if (prepare && prepare(ctx, obs, cap)) {
        child_answer(0, obs, cap);
        return;
    }
    if (lim->strict) {
        /* large blocks from the heap, and the heap never handed back, so freed memory is reused without brk/mmap */
        mallopt(M_MMAP_MAX, 0);
        mallopt(M_TRIM_THRESHOLD, -1);
        size_t reserve = ((size_t)lim->memory_mb << 20) / 2;
        if (reserve > STRICT_HEAP_RESERVE_MAX) reserve = STRICT_HEAP_RESERVE_MAX;
        void *volatile held = malloc(reserve); /* volatile: the compiler may not drop the pair */
        free(held);
        if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_STRICT) != 0) {
            snprintf(obs, cap, "error: the sandbox could not enter seccomp strict mode (%s)", strerror(errno));
            child_answer(0, obs, cap);
            return;
        }
    }
    obs[0] = 0;
    int ok = tool(ctx, obs, cap);
    if (cap) obs[cap - 1] = 0;
    child_answer(ok == 1, obs, cap);
}

/* ---- the parent ---- */

static int64_t now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Waits for pid until deadline; returns 1 with *status when it ended, 0 when it is still running. A pidfd makes the
 * wait exact (the child ends microseconds after its answer); without one (kernels before 5.3) it polls every 100 us. */
static int wait_until(pid_t pid, int *status, int64_t deadline) {
#ifdef SYS_pidfd_open
    int pfd = (int)syscall(SYS_pidfd_open, pid, 0);
#else
    int pfd = -1;
#endif
    for (;;) {
        pid_t r = waitpid(pid, status, WNOHANG);
        if (r == pid || (r < 0 && errno != EINTR)) { /* ended, or not ours to wait for any more */
            if (pfd >= 0) close(pfd);
            return 1;
        }
        int64_t left = deadline - now_ms();
        if (left <= 0) {
            if (pfd >= 0) close(pfd);
            return 0;
        }
        if (pfd >= 0) {
            struct pollfd p = {.fd = pfd, .events = POLLIN};
            poll(&p, 1, (int)left);
        } else {
            struct timespec ts = {0, 100 * 1000};
            nanosleep(&ts, NULL);
        }
    }
}

static void kill_and_reap(pid_t pid, int *status) {
    kill(-pid, SIGKILL);
    kill(pid, SIGKILL);
    while (waitpid(pid, status, 0) < 0 && errno == EINTR) {
    }
}

int cpt_env_sandbox_run(const cpt_env_limits *lim, cpt_env_prepare_fn prepare, cpt_env_tool_fn tool, void *ctx,
                        char *obs, size_t cap, int *ok, cpt_err *err) {
    if (!obs || cap < 2) return cpt_errf(err, "env sandbox: observation buffer too small");
    *ok = 0;
    obs[0] = 0;
    int fds[2];
    if (pipe2(fds, O_CLOEXEC)) return cpt_errno(err, "env sandbox: pipe");
    pid_t parent = getpid(), pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        return cpt_errno(err, "env sandbox: fork");
    }
    if (pid == 0) {
        close(fds[0]);
        child_main(parent, fds[1], lim, prepare, tool, ctx, obs, cap);
        for (;;) syscall(SYS_exit, 0); /* child_answer ended the child already */
    }
    close(fds[1]);
    setpgid(pid, pid); /* also done by the child: whichever runs first, the group exists before a kill */
    int64_t start = now_ms(), deadline = start + (lim->timeout_ms > 0 ? lim->timeout_ms : 1);
    size_t got = 0, want = cap; /* one status byte + at most cap - 1 observation bytes */
    char *buf = obs;            /* the status byte is read into obs[0] and moved out below */
    int timed_out = 0, eof = 0;
    while (!eof) {
        int64_t left = deadline - now_ms();
        if (left <= 0) {
            timed_out = 1;
            break;
        }
        struct pollfd pfd = {.fd = fds[0], .events = POLLIN};
        int r = poll(&pfd, 1, (int)left);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) break;
        if (r == 0) continue;
        char sink[4096];
        ssize_t k = got < want ? read(fds[0], buf + got, want - got) : read(fds[0], sink, sizeof sink);
        if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (k <= 0) {
            eof = 1;
            break;
        }
        if (got < want) got += (size_t)k;
    }
    close(fds[0]);
    int status = 0, ended = 0;
    if (!timed_out) ended = wait_until(pid, &status, deadline);
    if (!ended) {
        timed_out = 1;
        kill_and_reap(pid, &status);
    } else {
        kill(-pid, SIGKILL); /* whatever the tool left behind in its group goes with it */
    }
    int status_byte = got ? (unsigned char)buf[0] : -1;
    size_t n = got ? got - 1 : 0;
    if (n) memmove(obs, obs + 1, n);
    obs[n < cap ? n : cap - 1] = 0;
    if (timed_out) {
        snprintf(obs, cap, "error: the tool did not finish within %d ms", lim->timeout_ms);
        return 0;
    }
    if (WIFSIGNALED(status)) {
        int sig = WTERMSIG(status);
        if (sig == SIGKILL && lim->strict)
            snprintf(obs, cap, "error: the sandbox stopped the tool (a forbidden system call: no file, network or "
                               "process access, no memory beyond its limit)");
        else if (sig == SIGXCPU)
            snprintf(obs, cap, "error: the tool ran past its CPU time limit");
        else
            snprintf(obs, cap, "error: the tool crashed (signal %d, %s)", sig, strsignal(sig));
        return 0;
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || status_byte < 0) {
        snprintf(obs, cap, "error: the tool ended without an answer (exit status %d)",
                 WIFEXITED(status) ? WEXITSTATUS(status) : -1);
        return 0;
    }
    *ok = status_byte == 1;
    return 0;
}
