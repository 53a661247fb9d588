/* The supervisor against real child processes: exit codes, restart with backoff, give-up, stop with grace. */
#include <signal.h>
#include <stdlib.h>

#include "scheduler/supervisor.h"
#include "core/fs.h"
#include "tests/check.h"

static void wait_until(cpt_supervisor *s, int i, cpt_proc_state st, double secs) {
    double end = cpt_now() + secs;
    while (s->procs[i].state != st && cpt_now() < end) cpt_sup_poll(s, 0.05);
}

int main(void) {
    cpt_err err;
    cpt_supervisor s;
    cpt_sup_init(&s);
    s.backoff_min = 0.05;
    s.backoff_max = 0.2;
    s.max_restarts = 3;

    /* A clean exit is not restarted. */
    char *ok_argv[] = {"sh", "-c", "exit 0", NULL};
    int ok = cpt_sup_add(&s, "ok", ok_argv, NULL, NULL, CPT_RESTART_ON_FAILURE, &err);
    CHECK(ok >= 0);
    CHECK(cpt_sup_start(&s, ok, &err) == 0);
    wait_until(&s, ok, CPT_PROC_EXITED, 5);
    CHECK_EQ_INT(s.procs[ok].state, CPT_PROC_EXITED);
    CHECK_EQ_INT(s.procs[ok].restarts, 0);

    /* A failing process is restarted max_restarts times, counting its runs in a file, then given up. */
    char tmpl[] = "/tmp/cpt-sup-XXXXXX";
    char *dir = mkdtemp(tmpl);
    CHECK(dir != NULL);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "echo run >> %s/count; exit 3", dir);
    char *bad_argv[] = {"sh", "-c", cmd, NULL};
    int bad = cpt_sup_add(&s, "bad", bad_argv, NULL, NULL, CPT_RESTART_ON_FAILURE, &err);
    CHECK(cpt_sup_start(&s, bad, &err) == 0);
    wait_until(&s, bad, CPT_PROC_FAILED, 10);
    CHECK_EQ_INT(s.procs[bad].state, CPT_PROC_FAILED);
    CHECK_EQ_INT(s.procs[bad].exit_status, 3);
    CHECK_EQ_INT(s.procs[bad].restarts, 3);
    char path[512];
    snprintf(path, sizeof path, "%s/count", dir);
    size_t len = 0;
    char *runs = cpt_read_file(path, &len, &err);
    CHECK(runs != NULL);
    CHECK_EQ_INT(len, 4 * 4); /* four runs of "run\n": the first and three restarts */
    free(runs);

    /* The environment reaches the child, and its output goes to the log file. */
    snprintf(path, sizeof path, "%s/log", dir);
    char *env_argv[] = {"sh", "-c", "echo \"role=$CPT_ROLE\"", NULL};
    char *env[] = {"CPT_ROLE=rollout-0", NULL};
    int e = cpt_sup_add(&s, "env", env_argv, env, path, CPT_RESTART_NEVER, &err);
    CHECK(cpt_sup_start(&s, e, &err) == 0);
    wait_until(&s, e, CPT_PROC_EXITED, 5);
    char *log = cpt_read_file(path, &len, &err);
    CHECK_EQ_STR(log, "role=rollout-0\n");
    free(log);

    /* A killed process (chaos) is restarted; a stop is final and escalates to SIGKILL past the grace. */
    /* Short sleeps in a loop, not `sleep 30 &`: an orphaned sleep would hold ctest's output pipe open for 30 s. */
    char *sleeper_argv[] = {"sh", "-c", "trap '' TERM; while :; do sleep 0.1; done", NULL};
    int sl = cpt_sup_add(&s, "sleeper", sleeper_argv, NULL, NULL, CPT_RESTART_ON_FAILURE, &err);
    CHECK(cpt_sup_start(&s, sl, &err) == 0);
    pid_t first = s.procs[sl].pid;
    CHECK(cpt_sup_signal(&s, sl, SIGKILL) == 0);
    wait_until(&s, sl, CPT_PROC_BACKOFF, 5);
    wait_until(&s, sl, CPT_PROC_RUNNING, 5);
    CHECK_EQ_INT(s.procs[sl].state, CPT_PROC_RUNNING);
    CHECK(s.procs[sl].pid != first);
    double t0 = cpt_now();
    cpt_sup_stop(&s, sl, 0.3);
    CHECK_EQ_INT(s.procs[sl].state, CPT_PROC_EXITED);
    CHECK(cpt_now() - t0 < 5.0);
    CHECK_EQ_INT(cpt_sup_running(&s), 0);

    /* A non-blocking stop: the call returns at once, the process drains (here 0.8 s) while the supervisor keeps
     * restarting others, and it is reaped as stopped, not restarted. */
    char *drainer_argv[] = {"sh", "-c", "trap 'sleep 0.8; exit 0' TERM; while :; do sleep 0.1; done", NULL};
    int dr = cpt_sup_add(&s, "drainer", drainer_argv, NULL, NULL, CPT_RESTART_ON_FAILURE, &err);
    char *crasher_argv[] = {"sleep", "30", NULL};
    int cr = cpt_sup_add(&s, "crasher", crasher_argv, NULL, NULL, CPT_RESTART_ON_FAILURE, &err);
    CHECK(cpt_sup_start(&s, dr, &err) == 0);
    CHECK(cpt_sup_start(&s, cr, &err) == 0);
    cpt_sup_poll(&s, 0.2); /* the shell sets its trap */
    t0 = cpt_now();
    cpt_sup_request_stop(&s, dr, 10.0);
    CHECK(cpt_now() - t0 < 0.1);
    CHECK(cpt_sup_draining(&s.procs[dr]));
    pid_t crasher_first = s.procs[cr].pid;
    CHECK(cpt_sup_signal(&s, cr, SIGKILL) == 0);
    wait_until(&s, cr, CPT_PROC_BACKOFF, 5);
    wait_until(&s, cr, CPT_PROC_RUNNING, 5);
    CHECK(s.procs[cr].pid != crasher_first);
    CHECK(cpt_sup_draining(&s.procs[dr])); /* the crasher came back while the drainer still drains */
    wait_until(&s, dr, CPT_PROC_EXITED, 5);
    CHECK_EQ_INT(s.procs[dr].state, CPT_PROC_EXITED);
    CHECK_EQ_INT(s.procs[dr].exit_status, 0);
    CHECK(cpt_now() - t0 >= 0.7);
    cpt_sup_poll(&s, 0.3);
    CHECK_EQ_INT(s.procs[dr].state, CPT_PROC_EXITED); /* not restarted */
    /* Past its grace a process that ignores the stop signal is killed by poll. */
    char *deaf_argv[] = {"sh", "-c", "trap '' TERM; while :; do sleep 0.1; done", NULL};
    int deaf = cpt_sup_add(&s, "deaf", deaf_argv, NULL, NULL, CPT_RESTART_ON_FAILURE, &err);
    CHECK(cpt_sup_start(&s, deaf, &err) == 0);
    cpt_sup_poll(&s, 0.2);
    t0 = cpt_now();
    cpt_sup_request_stop(&s, deaf, 0.3);
    wait_until(&s, deaf, CPT_PROC_EXITED, 5);
    CHECK_EQ_INT(s.procs[deaf].state, CPT_PROC_EXITED);
    CHECK_EQ_INT(s.procs[deaf].exit_status, 128 + SIGKILL);
    CHECK(cpt_now() - t0 < 2.0);
    cpt_sup_stop(&s, cr, 1.0);

    /* A missing program is reported at start, not as a silent restart loop. */
    char *missing_argv[] = {"/nonexistent/cpt-nothing", NULL};
    int m = cpt_sup_add(&s, "missing", missing_argv, NULL, NULL, CPT_RESTART_ON_FAILURE, &err);
    CHECK(cpt_sup_start(&s, m, &err) != 0);
    CHECK(strstr(err.msg, "cannot run /nonexistent/cpt-nothing") != NULL);

    cpt_sup_stop_all(&s, 1.0);
    cpt_sup_free(&s);
    cpt_remove_tree(dir, &err);
    return check_summary("test_supervisor");
}
