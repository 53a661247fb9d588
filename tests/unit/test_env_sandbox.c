/* The tools through reward/env.h with the sandbox (reward/env_sandbox.h): calls in Qwen's JSON form and bare, the
 * markup stripped, countdown, observations cut to env.max_observation; plugins that misbehave: a loop is killed at
 * env.timeout_ms, 1 GiB fails under env.memory_mb, open() under seccomp strict mode is stopped and reported, a crash,
 * a bad return value, a refused init; a grandchild left behind is killed with its group; no child is left unreaped. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "cli/config_keys.h"
#include "reward/env.h"

/* Under AddressSanitizer its allocator and its fault handler are its own: memory limits and the report of a crash
 * cannot be checked there (the crash is still a failed call). */
#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif
#ifndef UNDER_ASAN
#define UNDER_ASAN 0
#endif

static char strict_so[512], limits_so[512], echo_so[512];

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static cpt_env *open_env(const char *type, const char *plugin, const char *plugin_config, const char *extra_key,
                         cpt_err *err) {
    char o1[600], o2[600], o3[600];
    snprintf(o1, sizeof o1, "env.type=%s", type);
    snprintf(o2, sizeof o2, "env.plugin=%s", plugin ? plugin : "");
    snprintf(o3, sizeof o3, "env.plugin_config=%s", plugin_config ? plugin_config : "");
    const char *ov[5] = {o1, o2, o3, "env.timeout_ms=400", extra_key ? extra_key : "env.memory_mb=64"};
    cpt_config *cfg = cpt_config_load_text("", 0, "test.toml", 5, (char *const *)ov, err);
    if (!cfg) return NULL;
    cpt_env *e = cpt_env_open(cfg, err);
    cpt_config_free(cfg);
    return e;
}

/* Answers call; checks ok and that the observation starts with want. */
static void answer(cpt_env *e, const char *call, const char *extra, int want_ok, const char *want) {
    char obs[2048];
    int ok = -1;
    cpt_err err = {{0}};
    int rc = cpt_env_answer(e, call, extra, obs, sizeof obs, &ok, &err);
    CHECK_MSG(rc == 0, "%s: %s", call, err.msg);
    CHECK_MSG(ok == want_ok && !strncmp(obs, want, strlen(want)), "%s: got ok=%d \"%s\", want ok=%d \"%s\"", call,
              ok, obs, want_ok, want);
}

static void test_calculator(void) {
    cpt_err err = {{0}};
    cpt_env *e = open_env("calculator", NULL, NULL, NULL, &err);
    CHECK_MSG(e != NULL, "%s", err.msg);
    if (!e) return;
    CHECK_EQ_STR(cpt_env_name(e), "calculator");
    answer(e, "<tool_call>\n{\"name\": \"calculator\", \"arguments\": {\"expression\": \"12*34\"}}\n</tool_call>", NULL,
           1, "408");
    answer(e, "Let me compute. <tool_call>{\"name\": \"calculator\", \"arguments\": \"{\\\"expression\\\": "
              "\\\"7/2\\\"}\"}</tool_call>", NULL, 1, "3.5");
    answer(e, "<tool_call> (1+2)*3 </tool_call>", NULL, 1, "9");
    answer(e, "2**10", NULL, 1, "1024");
    answer(e, "<tool_call>1/0</tool_call>", NULL, 0, "error: division by zero");
    answer(e, "<tool_call>{\"name\": \"search\", \"arguments\": {\"query\": \"x\"}}</tool_call>", NULL, 0,
           "error: unknown tool \"search\"");
    answer(e, "<tool_call>{\"name\": \"calculator\"}</tool_call>", NULL, 0, "error: the call has no \"arguments\"");
    answer(e, "<tool_call>{\"name\": </tool_call>", NULL, 0, "error: the call is not a JSON object");
    answer(e, "<tool_call>  </tool_call>", NULL, 0, "error: the call is empty");
    answer(e, "<tool_call>open('/etc/passwd')</tool_call>", NULL, 0, "error: names are not supported");
    cpt_env_close(e);
    /* none is not an environment */
    e = open_env("none", NULL, NULL, NULL, &err);
    CHECK(e == NULL);
    CHECK_MSG(strstr(err.msg, "env.type = \"none\"") != NULL, "%s", err.msg);
}

static void test_countdown(void) {
    cpt_err err = {{0}};
    cpt_env *e = open_env("countdown", NULL, NULL, NULL, &err);
    CHECK_MSG(e != NULL, "%s", err.msg);
    if (!e) return;
    const char *extra = "{\"numbers\": [4, 6, 1], \"target\": 24}";
    answer(e, "<tool_call>4*6*1</tool_call>", extra, 1, "= 24 (uses 4 6 1; target 24 reached)");
    answer(e, "<tool_call>{\"name\": \"countdown\", \"arguments\": {\"expression\": \"4*6-1\"}}</tool_call>", extra, 1,
           "= 23 (uses 4 6 1; target 24 not reached)");
    answer(e, "<tool_call>4*6*1</tool_call>", "{}", 0, "error: this prompt has no countdown puzzle");
    cpt_env_close(e);
}

static void test_strict_plugin(void) {
    cpt_err err = {{0}};
    cpt_env *e = open_env("plugin", strict_so, NULL, NULL, &err);
    CHECK_MSG(e != NULL, "%s", err.msg);
    if (!e) return;
    answer(e, "<tool_call>ok</tool_call>", NULL, 1, "fine");
    answer(e, "<tool_call>fail</tool_call>", NULL, 0, "error: as asked");
    answer(e, "<tool_call>extra</tool_call>", "{\"a\": 1}", 1, "{\"a\": 1}");
    answer(e, "<tool_call>extra</tool_call>", NULL, 1, "{}");
    answer(e, "<tool_call>small</tool_call>", NULL, 1, "allocated 1048576 bytes");
    double t0 = now_s();
    answer(e, "<tool_call>loop</tool_call>", NULL, 0, "error: the tool did not finish within 400 ms");
    double dt = now_s() - t0;
    CHECK_MSG(dt >= 0.35 && dt < 2.0, "the loop was stopped after %.3f s", dt);
    answer(e, "<tool_call>open</tool_call>", NULL, 0, "error: the sandbox stopped the tool (a forbidden system call");
    if (!UNDER_ASAN) {
        answer(e, "<tool_call>alloc</tool_call>", NULL, 0, "error: the sandbox stopped the tool");
        answer(e, "<tool_call>crash</tool_call>", NULL, 0, "error: the tool crashed (signal 11");
    } else {
        answer(e, "<tool_call>crash</tool_call>", NULL, 0, "error: ");
    }
    answer(e, "<tool_call>badrc</tool_call>", NULL, 0, "error: the env plugin's answer returned 7");
    cpt_env_close(e);

    /* a long observation is cut to env.max_observation and ends in "..." */
    e = open_env("plugin", strict_so, NULL, "env.max_observation=16", &err);
    CHECK_MSG(e != NULL, "%s", err.msg);
    if (e) {
        answer(e, "<tool_call>extra</tool_call>", "{\"a\": \"0123456789abcdefghij\"}", 1, "{\"a\": \"012345...");
        char obs[64];
        int ok;
        cpt_env_answer(e, "extra", "{\"a\": \"0123456789abcdefghij\"}", obs, sizeof obs, &ok, &err);
        CHECK_EQ_INT(strlen(obs), 16);
        cpt_env_close(e);
    }

    /* init refusing, a missing file, a file that is no plugin: errors at open that name the cause */
    e = open_env("plugin", strict_so, "initfail", NULL, &err);
    CHECK(e == NULL);
    CHECK_MSG(strstr(err.msg, "init failed: refusing to start as asked") != NULL, "%s", err.msg);
    e = open_env("plugin", "/nonexistent/libx.so", NULL, NULL, &err);
    CHECK(e == NULL);
    CHECK_MSG(strstr(err.msg, "/nonexistent/libx.so") != NULL, "%s", err.msg);
    e = open_env("plugin", "", NULL, NULL, &err);
    CHECK(e == NULL);
    CHECK_MSG(strstr(err.msg, "env.plugin is empty") != NULL, "%s", err.msg);
    char notso[512];
    snprintf(notso, sizeof notso, "%s/tests/unit/test_env_sandbox.c", getenv("CPT_SRC") ? getenv("CPT_SRC") : ".");
    e = open_env("plugin", notso, NULL, NULL, &err);
    CHECK(e == NULL);
    CHECK_MSG(strstr(err.msg, "ELF") != NULL || strstr(err.msg, "not") != NULL, "%s", err.msg);
}

/* The documented example plugin (docs/env.md) works as documented. */
static void test_example_plugin(void) {
    cpt_err err = {{0}};
    cpt_env *e = open_env("plugin", echo_so, "count: ", NULL, &err);
    CHECK_MSG(e != NULL, "%s", err.msg);
    if (!e) return;
    answer(e, "<tool_call>{\"name\": \"wordcount\", \"arguments\": {\"text\": \"h\u00e9llo w\u00f6rld\"}}</tool_call>",
           NULL, 1, "count: 2 words, 11 characters"); /* UTF-8 characters, not bytes */
    answer(e, "<tool_call>one two  three</tool_call>", NULL, 1, "count: 3 words, 14 characters");
    cpt_env_close(e);
}

static int process_gone(pid_t pid) {
    char path[64], st[512] = "";
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) return 1;
    size_t n = fread(st, 1, sizeof st - 1, f);
    fclose(f);
    st[n] = 0;
    const char *rp = strrchr(st, ')');
    return rp && rp[1] == ' ' && (rp[2] == 'Z' || rp[2] == 'X'); /* a zombie of someone else's: not running */
}

static void test_limits_plugin(void) {
    char pidfile[256];
    snprintf(pidfile, sizeof pidfile, "/tmp/cpt_env_orphan_%d", (int)getpid());
    unlink(pidfile);
    cpt_err err = {{0}};
    cpt_env *e = open_env("plugin", limits_so, pidfile, NULL, &err);
    CHECK_MSG(e != NULL, "%s", err.msg);
    if (!e) return;
    answer(e, "ok", NULL, 1, "read");
    if (!UNDER_ASAN) answer(e, "alloc", NULL, 0, "error: out of memory");
    answer(e, "loop", NULL, 0, "error: the tool did not finish within 400 ms");
    answer(e, "orphan", NULL, 0, "error: the tool did not finish within 400 ms");
    FILE *f = fopen(pidfile, "r");
    int gpid = 0;
    CHECK(f && fscanf(f, "%d", &gpid) == 1 && gpid > 0);
    if (f) fclose(f);
    unlink(pidfile);
    int gone = 0;
    for (int i = 0; i < 200 && gpid > 0 && !(gone = process_gone(gpid)); i++) usleep(5000);
    CHECK_MSG(gone, "the tool's grandchild %d outlived the call", gpid);
    cpt_env_close(e);
}

int main(void) {
    const char *build = getenv("CPT_BUILD");
    if (!build) build = "build";
    snprintf(strict_so, sizeof strict_so, "%s/plugins/libenv_strict_test.so", build);
    snprintf(limits_so, sizeof limits_so, "%s/plugins/libenv_limits_test.so", build);
    snprintf(echo_so, sizeof echo_so, "%s/plugins/libenv_echo.so", build);
    test_calculator();
    test_countdown();
    test_strict_plugin();
    test_limits_plugin();
    test_example_plugin();
    /* every sandbox child was reaped */
    errno = 0;
    CHECK_MSG(waitpid(-1, NULL, WNOHANG) < 0 && errno == ECHILD, "a sandbox child was left unreaped");
    return check_summary("test_env_sandbox");
}
