/* The launcher's guards (issue 19): control values and Slurm job ids parsed strictly, the run directory's lock,
 * the trainer's check that it can write checkpoints, a "do not restart" exit status, and children that die with
 * the process that started them (PR_SET_PDEATHSIG), even under kill -9. */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/fs.h"
#include "scheduler/placement.h"
#include "scheduler/run_lock.h"
#include "scheduler/satellite.h"
#include "scheduler/supervisor.h"
#include "tests/check.h"
#include "trainer/checkpoint.h"

/* 1 while pid exists and is not a zombie (a container's pid 1 may not reap orphans). */
static int alive(pid_t pid) {
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%ld/stat", (long)pid);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *close_paren = strrchr(buf, ')');
    return close_paren && close_paren[1] == ' ' && close_paren[2] != 'Z' && close_paren[2] != 'X';
}

static void test_worker_count(void) {
    int v = -1;
    CHECK(cpt_parse_worker_count("0", &v) == 0 && v == 0);
    CHECK(cpt_parse_worker_count("3", &v) == 0 && v == 3);
    CHECK(cpt_parse_worker_count("4096", &v) == 0 && v == 4096);
    v = 7;
    const char *bad[] = {"", "garbage", "3x", " 3", "3 ", "+3", "-1", "4097", "99999999999", "0x10", "1e3", NULL};
    for (int i = 0; bad[i]; i++) CHECK_MSG(cpt_parse_worker_count(bad[i], &v) != 0, "'%s' accepted", bad[i]);
    CHECK_EQ_INT(v, 7); /* untouched by a refusal */
    CHECK(cpt_parse_worker_count(NULL, &v) != 0);
}

static void test_job_id(void) {
    CHECK(cpt_slurm_job_id_valid("12345"));
    CHECK(cpt_slurm_job_id_valid("12345_7"));
    const char *bad[] = {"", "12;rm -rf /", "12 13", "$(id)", "12_", "_3", "12_3_4", "12a", "-1", NULL};
    for (int i = 0; bad[i]; i++) CHECK_MSG(!cpt_slurm_job_id_valid(bad[i]), "'%s' accepted", bad[i]);
}

static void test_lock(const char *dir) {
    cpt_err err;
    int fd = cpt_run_lock_take(dir, &err);
    CHECK(fd >= 0);
    /* A second taker (another open file, as another launcher has) is refused with our pid in the message. */
    int fd2 = cpt_run_lock_take(dir, &err);
    CHECK(fd2 < 0);
    char want[64];
    snprintf(want, sizeof want, "pid %ld holds", (long)getpid());
    CHECK_MSG(strstr(err.msg, want) != NULL, "%s", err.msg);
    struct stat st;
    char path[600];
    snprintf(path, sizeof path, "%s/.lock", dir);
    CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == 0600);
    /* Not inherited across exec: a child running a program does not keep the run locked after we release. */
    int sync[2];
    CHECK(pipe2(sync, O_CLOEXEC) == 0);
    pid_t child = fork();
    if (child == 0) {
        execlp("sleep", "sleep", "5", (char *)NULL);
        _exit(127);
    }
    close(sync[1]);
    char c;
    while (read(sync[0], &c, 1) > 0) {} /* EOF: the child has exec'd (or exited) */
    close(sync[0]);
    cpt_run_lock_release(fd);
    fd2 = cpt_run_lock_take(dir, &err);
    CHECK_MSG(fd2 >= 0, "lock still held after release while a child runs: %s", err.msg);
    cpt_run_lock_release(fd2);
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
}

static void test_checkpoints_writable(const char *dir) {
    cpt_err err;
    char run[600], ck[700];
    snprintf(run, sizeof run, "%s/ok", dir);
    CHECK(cpt_ckpt_check_writable(run, &err) == 0);
    snprintf(ck, sizeof ck, "%s/checkpoints", run);
    struct stat st;
    CHECK(stat(ck, &st) == 0 && S_ISDIR(st.st_mode) && (st.st_mode & 077) == 0);
    /* Root writes through modes: then a folder of /proc stands for an unwritable one. */
    snprintf(run, sizeof run, "%s/ro", dir);
    snprintf(ck, sizeof ck, "%s/checkpoints", run);
    CHECK(cpt_mkdir_p(run, 0700, &err) == 0);
    if (getuid() == 0) {
        CHECK(symlink("/proc/1", ck) == 0);
    } else {
        CHECK(mkdir(ck, 0500) == 0);
    }
    CHECK(cpt_ckpt_check_writable(run, &err) != 0);
    CHECK_MSG(strstr(err.msg, "cannot write into the checkpoints folder") != NULL, "%s", err.msg);
    if (getuid() != 0) chmod(ck, 0700);
}

static void test_no_restart_status(void) {
    cpt_err err;
    cpt_supervisor s;
    cpt_sup_init(&s);
    s.backoff_min = 0.05;
    s.no_restart_status = CPT_EXIT_NO_RESTART;
    char code[32];
    snprintf(code, sizeof code, "exit %d", CPT_EXIT_NO_RESTART);
    char *argv[] = {"sh", "-c", code, NULL};
    int i = cpt_sup_add(&s, "fatal", argv, NULL, NULL, CPT_RESTART_ON_FAILURE, &err);
    CHECK(i >= 0 && cpt_sup_start(&s, i, &err) == 0);
    double end = cpt_now() + 5;
    while (s.procs[i].state == CPT_PROC_RUNNING && cpt_now() < end) cpt_sup_poll(&s, 0.05);
    cpt_sup_poll(&s, 0.3); /* a restart would be due by now */
    CHECK_EQ_INT(s.procs[i].state, CPT_PROC_FAILED);
    CHECK_EQ_INT(s.procs[i].restarts, 0);
    cpt_sup_free(&s);
}

/* A middle process (the launcher) starts a long child through the supervisor and is killed with -9: the child
 * must not outlive it. */
static void test_dies_with_launcher(void) {
    int fds[2];
    CHECK(pipe(fds) == 0);
    pid_t mid = fork();
    if (mid == 0) {
        close(fds[0]);
        cpt_supervisor s;
        cpt_err err;
        cpt_sup_init(&s);
        char *argv[] = {"sleep", "30", NULL};
        int i = cpt_sup_add(&s, "sleeper", argv, NULL, NULL, CPT_RESTART_ON_FAILURE, &err);
        if (i < 0 || cpt_sup_start(&s, i, &err) != 0) _exit(1);
        pid_t p = s.procs[i].pid;
        if (write(fds[1], &p, sizeof p) != (ssize_t)sizeof p) _exit(1);
        pause();
        _exit(0);
    }
    close(fds[1]);
    pid_t child = 0;
    CHECK(read(fds[0], &child, sizeof child) == (ssize_t)sizeof child);
    close(fds[0]);
    CHECK(child > 0 && alive(child));
    kill(mid, SIGKILL);
    waitpid(mid, NULL, 0);
    double end = cpt_now() + 3;
    while (child > 0 && alive(child) && cpt_now() < end) usleep(20000);
    CHECK_MSG(child > 0 && !alive(child), "pid %ld outlived its launcher", (long)child);
    if (child > 0 && alive(child)) kill(child, SIGKILL);
}

int main(void) {
    char tmpl[] = "/tmp/cpt-guards-XXXXXX";
    char *dir = mkdtemp(tmpl);
    CHECK(dir != NULL);
    if (!dir) return check_summary("test_launcher_guards");
    test_worker_count();
    test_job_id();
    test_lock(dir);
    test_checkpoints_writable(dir);
    test_no_restart_status();
    test_dies_with_launcher();
    cpt_err err;
    cpt_remove_tree(dir, &err);
    return check_summary("test_launcher_guards");
}
