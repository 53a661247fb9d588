/* Reward plugins in their child process: the example keyword plugin scores, and a plugin that crashes, aborts,
 * exits, hangs, returns NaN / inf / the wrong count / an error, or fails init gives an error with the reason while
 * this process lives on; a crashed plugin is restarted on the next batch. A plugin file is checked without being
 * loaded (ELF of this machine, the four functions), and a bare name resolves in the plugins folder. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/fs.h"
#include "reward/plugin.h"
#include "reward/reward.h"
#include "tests/check.h"

static char keyword_so[4096], crash_so[4096], ctor_so[4096];

/* Checks without loading: a good plugin passes; a text file, a truncated or foreign-class ELF, a shared object
 * without the ABI's functions, a folder fail with the reason; the checked plugin's constructor never runs, while
 * opening it does run it (so the marker shows what loading looks like). */
static void test_check(void) {
    cpt_err err;
    char marker[256], path[4096];
    snprintf(marker, sizeof marker, "/tmp/cpt-plugin-marker-%d", (int)getpid());
    unlink(marker);
    setenv("CPT_TEST_PLUGIN_MARKER", marker, 1);
    CHECK_MSG(cpt_plugin_check(keyword_so, &err) == 0, "%s", err.msg);
    CHECK_MSG(cpt_plugin_check(ctor_so, &err) == 0, "%s", err.msg);
    CHECK_MSG(access(marker, F_OK) != 0, "checking %s ran its constructor", ctor_so);
    cpt_reward_options o;
    cpt_reward_options_default(&o);
    o.plugin_path = ctor_so;
    o.plugin_check_only = 1;
    cpt_reward *r = cpt_reward_builtin("plugin", &o, &err);
    CHECK_MSG(r != NULL, "%s", err.msg);
    cpt_reward_result res;
    CHECK(r && cpt_reward_score(r, "p", "c", NULL, &res, &err) == -1 && strstr(err.msg, "only checked"));
    cpt_reward_free(r);
    CHECK(access(marker, F_OK) != 0);
    cpt_plugin *p = cpt_plugin_open(ctor_so, "", 5000, &err); /* a real load: the constructor runs */
    CHECK_MSG(p != NULL, "%s", err.msg);
    cpt_plugin_close(p);
    CHECK_MSG(access(marker, F_OK) == 0, "the test plugin's constructor wrote no marker: the check above is vacuous");
    unlink(marker);
    unsetenv("CPT_TEST_PLUGIN_MARKER");

    snprintf(path, sizeof path, "%s/tests/unit/test_plugin.c", getenv("CPT_SRC") ? getenv("CPT_SRC") : ".");
    CHECK(cpt_plugin_check(path, &err) == -1 && strstr(err.msg, "not an ELF file") && strstr(err.msg, "test_plugin.c"));
    CHECK(cpt_plugin_check("/tmp", &err) == -1 && strstr(err.msg, "not a regular file"));
    CHECK(cpt_plugin_check("/nonexistent/libx.so", &err) == -1 && strstr(err.msg, "/nonexistent/libx.so"));
    /* libm is a shared object of this machine without the plugin functions */
    const char *libm = access("/lib/x86_64-linux-gnu/libm.so.6", R_OK) == 0 ? "/lib/x86_64-linux-gnu/libm.so.6"
                       : access("/lib/aarch64-linux-gnu/libm.so.6", R_OK) == 0 ? "/lib/aarch64-linux-gnu/libm.so.6"
                                                                               : NULL;
    if (libm) {
        CHECK(cpt_plugin_check(libm, &err) == -1);
        CHECK_MSG(strstr(err.msg, "does not export cpt_reward_plugin_abi, cpt_reward_plugin_init, "
                                  "cpt_reward_plugin_score_batch, cpt_reward_plugin_free"), "%s", err.msg);
    }
    /* truncated copies and a 32-bit class byte */
    size_t len;
    char *so = cpt_read_file(keyword_so, &len, &err);
    CHECK(so != NULL);
    snprintf(path, sizeof path, "/tmp/cpt-plugin-bad-%d.so", (int)getpid());
    size_t cuts[3] = {16, 64, 200};
    for (int i = 0; so && i < 3; i++) {
        CHECK(cpt_write_file_atomic(path, so, cuts[i], &err) == 0);
        CHECK_MSG(cpt_plugin_check(path, &err) == -1 && strstr(err.msg, path), "cut at %zu: %s", cuts[i], err.msg);
    }
    if (so) { /* one function renamed in the symbol tables: reported as missing, by name */
        char *copy = malloc(len);
        memcpy(copy, so, len);
        const char *name = "cpt_reward_plugin_score_batch";
        int patched = 0;
        for (char *q = copy; (q = memmem(q, len - (size_t)(q - copy), name, strlen(name))); q++, patched++)
            q[strlen(name) - 1] = 'X';
        CHECK(patched >= 1);
        CHECK(cpt_write_file_atomic(path, copy, len, &err) == 0);
        CHECK(cpt_plugin_check(path, &err) == -1);
        CHECK_MSG(strstr(err.msg, "does not export cpt_reward_plugin_score_batch (") != NULL, "%s", err.msg);
        free(copy);
    }
    if (so) {
        so[4] = 1; /* ELFCLASS32 */
        CHECK(cpt_write_file_atomic(path, so, len, &err) == 0);
        CHECK_MSG(cpt_plugin_check(path, &err) == -1 && strstr(err.msg, "32-bit"), "%s", err.msg);
    }
    free(so);
    unlink(path);

    /* a bare name: the plugins folder beside the programs ($CPT_BIN here), never the loader's search path */
    const char *build = getenv("CPT_BUILD") ? getenv("CPT_BUILD") : "build";
    setenv("CPT_BIN", build, 1);
    CHECK(cpt_plugin_resolve("libreward_keyword.so", path, sizeof path, &err) == 0);
    char want[4096];
    snprintf(want, sizeof want, "%s/plugins/libreward_keyword.so", build);
    CHECK_EQ_STR(path, want);
    CHECK_MSG(cpt_plugin_check("libreward_keyword.so", &err) == 0, "%s", err.msg);
    CHECK(cpt_plugin_check("libm.so.6", &err) == -1 && strstr(err.msg, "no such file in the plugins folder"));
    CHECK(cpt_plugin_resolve("./x/libq.so", path, sizeof path, &err) == 0);
    CHECK_EQ_STR(path, "./x/libq.so");
    unsetenv("CPT_BIN");
}

static void test_keyword(void) {
    cpt_err err;
    cpt_plugin *p = cpt_plugin_open(keyword_so, "because, Therefore", 5000, &err);
    CHECK_MSG(p != NULL, "%s", err.msg);
    if (!p) return;
    const char *pr[3] = {"q1", "q2", "q3"};
    const char *co[3] = {"no reasons", "because I said so", "BECAUSE x, therefore y"};
    const char *ex[3] = {NULL, "{\"answer\": 1}", NULL};
    double s[3] = {-1, -1, -1};
    CHECK_MSG(cpt_plugin_score_batch(p, 3, pr, co, ex, s, &err) == 0, "%s", err.msg);
    CHECK_NEAR(s[0], 0.0, 0);
    CHECK_NEAR(s[1], 0.5, 0);
    CHECK_NEAR(s[2], 1.0, 0);
    /* a second batch on the same child */
    CHECK(cpt_plugin_score_batch(p, 1, pr + 2, co + 2, ex + 2, s, &err) == 0);
    CHECK_NEAR(s[0], 1.0, 0);
    CHECK_EQ_INT(cpt_plugin_starts(p), 1);
    cpt_plugin_close(p);

    /* through the reward interface */
    cpt_reward_options o;
    cpt_reward_options_default(&o);
    o.plugin_path = keyword_so;
    o.plugin_config = "apple";
    cpt_reward *r = cpt_reward_builtin("plugin", &o, &err);
    CHECK_MSG(r != NULL, "%s", err.msg);
    if (r) {
        cpt_reward_result res;
        CHECK(cpt_reward_score(r, "", "An apple a day", NULL, &res, &err) == 0);
        CHECK_NEAR(res.value, 1.0, 0);
        CHECK_EQ_STR(res.parts[0].name, "plugin");
        cpt_reward_free(r);
    }
    /* init refusing: no keywords */
    CHECK(cpt_plugin_open(keyword_so, "", 5000, &err) == NULL);
    CHECK(strstr(err.msg, "init failed: no keywords") != NULL);
}

/* Opens the crash plugin in mode, scores two items, expects failure with `want` in the message. */
static void expect_failure(const char *mode, const char *want, int timeout_ms) {
    cpt_err err;
    /* a generous start (fork + dlopen on a loaded machine), then the deadline under test */
    cpt_plugin *p = cpt_plugin_open(crash_so, mode, 20000, &err);
    CHECK_MSG(p != NULL, "%s: %s", mode, err.msg);
    if (!p) return;
    cpt_plugin_set_timeout(p, timeout_ms);
    const char *pr[2] = {"a", "b"}, *co[2] = {"xyz", "hello"};
    double s[2] = {-7, -7};
    int rc = cpt_plugin_score_batch(p, 2, pr, co, NULL, s, &err);
    CHECK_MSG(rc == -1, "mode %s: scoring succeeded", mode);
    CHECK_MSG(strstr(err.msg, want) != NULL, "mode %s: error \"%s\" lacks \"%s\"", mode, err.msg, want);
    CHECK_MSG(s[0] == -7 && s[1] == -7, "mode %s: scores written on failure", mode);
    cpt_plugin_close(p);
}

static void test_crashes(void) {
    expect_failure("crash", "process", 5000);
    expect_failure("abort", "process", 5000);
    expect_failure("exit", "exited with status 7", 5000);
    expect_failure("hang", "timed out after 300 ms", 300);
    /* a plugin that started a process of its own and hangs: the timeout's kill takes that process too */
    char pidfile[64], mode[128];
    snprintf(pidfile, sizeof pidfile, "/tmp/cpt-plugin-spawn-%ld", (long)getpid());
    unlink(pidfile);
    snprintf(mode, sizeof mode, "spawnhang:%s", pidfile);
    expect_failure(mode, "timed out after 300 ms", 300);
    cpt_err perr;
    char *txt = cpt_read_file(pidfile, NULL, &perr);
    int kid = txt ? atoi(txt) : 0;
    free(txt);
    unlink(pidfile);
    CHECK_MSG(kid > 0, "the plugin wrote no pid");
    int gone = 0;
    for (int i = 0; kid > 0 && i < 200 && !gone; i++) { /* gone, or a zombie waiting for init */
        char stat[64], *st;
        snprintf(stat, sizeof stat, "/proc/%d/stat", kid);
        st = cpt_read_file(stat, NULL, &perr);
        const char *close_paren = st ? strrchr(st, ')') : NULL;
        gone = !st || (close_paren && close_paren[1] == ' ' && close_paren[2] == 'Z');
        free(st);
        if (!gone) usleep(10000);
    }
    CHECK_MSG(gone, "the plugin's own process %d still runs after the timeout", kid);
    if (!gone && kid > 0) kill(kid, 9);
    expect_failure("nan", "score 1 of 2 is nan", 5000);
    expect_failure("inf", "score 0 of 2 is inf", 5000);
    expect_failure("count", "returned 1 scores for 2 completions", 5000);
    expect_failure("error", "the judge is unavailable", 5000);

    cpt_err err;
    CHECK(cpt_plugin_open(crash_so, "initfail", 5000, &err) == NULL);
    CHECK(strstr(err.msg, "refusing to start as asked") != NULL);
    CHECK(cpt_plugin_open(crash_so, "inithang", 500, &err) == NULL);
    CHECK(strstr(err.msg, "timed out") && strstr(err.msg, "starting"));
    CHECK(cpt_plugin_open("/nonexistent/libx.so", "", 5000, &err) == NULL);
    CHECK(strstr(err.msg, "/nonexistent/libx.so") != NULL);
    char notso[4096];
    snprintf(notso, sizeof notso, "%s/tests/unit/test_plugin.c", getenv("CPT_SRC") ? getenv("CPT_SRC") : ".");
    CHECK(cpt_plugin_open(notso, "", 5000, &err) == NULL);
    CHECK_MSG(strstr(err.msg, "test_plugin.c") != NULL, "%s", err.msg);

    /* restart after a crash: batch 1 works, batch 2 crashes, batch 3 runs on a fresh child */
    cpt_plugin *p = cpt_plugin_open(crash_so, "crash_after:1", 5000, &err);
    CHECK_MSG(p != NULL, "%s", err.msg);
    if (p) {
        const char *pr[1] = {"p"}, *co[1] = {"four"};
        double s[1];
        CHECK(cpt_plugin_score_batch(p, 1, pr, co, NULL, s, &err) == 0);
        CHECK_NEAR(s[0], 4.0, 0);
        CHECK(cpt_plugin_score_batch(p, 1, pr, co, NULL, s, &err) == -1);
        CHECK(cpt_plugin_score_batch(p, 1, pr, co, NULL, s, &err) == 0);
        CHECK_NEAR(s[0], 4.0, 0);
        CHECK_EQ_INT(cpt_plugin_starts(p), 2);
        cpt_plugin_close(p);
    }
    /* inside a combination the failure propagates with the plugin's reason, so the group can go to `dead` */
    cpt_reward_options o;
    cpt_reward_options_default(&o);
    o.plugin_path = crash_so;
    o.plugin_config = "nan";
    cpt_reward *kids[2] = {cpt_reward_builtin("length", &o, &err), cpt_reward_builtin("plugin", &o, &err)};
    double w[2] = {1, 1};
    CHECK(kids[0] && kids[1]);
    if (kids[0] && kids[1]) {
        cpt_reward *r = cpt_reward_combined(2, kids, w, &err);
        CHECK_MSG(r != NULL, "%s", err.msg);
        if (r) {
            cpt_reward_item items[2] = {{"p", "a", NULL}, {"p", "b", NULL}};
            cpt_reward_result res[2];
            CHECK(cpt_reward_score_batch(r, 2, items, res, &err) == -1);
            CHECK_MSG(strstr(err.msg, "reward combined") && strstr(err.msg, "is nan"), "%s", err.msg);
            cpt_reward_free(r);
        }
    } else {
        cpt_reward_free(kids[0]);
        cpt_reward_free(kids[1]);
    }
    /* a large batch crosses the socket buffers both ways */
    p = cpt_plugin_open(crash_so, "ok", 10000, &err);
    if (p) {
        enum { N = 2000 };
        static const char *pr[N], *co[N];
        static double s[N];
        char *big = malloc(5000);
        memset(big, 'z', 4999);
        big[4999] = 0;
        for (int i = 0; i < N; i++) {
            pr[i] = "p";
            co[i] = (i % 2) ? big : "ab";
        }
        CHECK_MSG(cpt_plugin_score_batch(p, N, pr, co, NULL, s, &err) == 0, "%s", err.msg);
        CHECK_NEAR(s[0], 2.0, 0);
        CHECK_NEAR(s[N - 1], 4999.0, 0);
        free(big);
        cpt_plugin_close(p);
    }
}

int main(void) {
    const char *build = getenv("CPT_BUILD");
    if (!build) build = "build";
    snprintf(keyword_so, sizeof keyword_so, "%s/plugins/libreward_keyword.so", build);
    snprintf(crash_so, sizeof crash_so, "%s/plugins/libreward_crash_test.so", build);
    snprintf(ctor_so, sizeof ctor_so, "%s/plugins/libreward_ctor_test.so", build);
    test_check();
    test_keyword();
    test_crashes();
    return check_summary("test_plugin");
}
