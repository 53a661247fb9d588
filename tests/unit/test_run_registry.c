/* The registry of live runs (scheduler/run_registry.h): this process's entry is found, an entry whose pid is gone or
 * whose pid now names another process (start time differs) is stale and removed, a file that is not an entry is
 * left alone, and removing the entry forgets the run. squeue is absent or answers nothing here: only the registry. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/fs.h"
#include "scheduler/run_registry.h"
#include "tests/check.h"

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

int main(void) {
    char tmpl[] = "/tmp/cpt-registry-XXXXXX";
    char *dir = mkdtemp(tmpl);
    CHECK(dir != NULL);
    if (!dir) return check_summary("test_run_registry");
    setenv("XDG_STATE_HOME", dir, 1);
    unsetenv("CPT_RUN");
    setenv("PATH", "/nonexistent", 1); /* no squeue: the registry alone */
    cpt_err err;
    char reg[2048], entry[2400], host[256];
    CHECK(cpt_run_registry_dir(reg, sizeof reg, 1, &err) == 0);
    char want[2100];
    snprintf(want, sizeof want, "%s/cpt/runs", dir);
    CHECK_EQ_STR(reg, want);
    gethostname(host, sizeof host);
    host[sizeof host - 1] = '\0';
    char *dot = strchr(host, '.');
    if (dot) *dot = '\0';

    CHECK(cpt_run_registry_add("/runs/live", NULL, entry, sizeof entry, &err) == 0);
    /* a launcher that died (pid 0x7ffffffe is never a live process here) and one whose pid was reused */
    char dead[2600], reused[2600], junk[2600], text[512];
    snprintf(dead, sizeof dead, "%s/dead.json", reg);
    snprintf(text, sizeof text, "{\"run_dir\":\"/runs/dead\",\"pid\":2147483646,\"pid_start\":5,\"host\":\"%s\","
             "\"job\":\"\",\"started\":\"2026-01-01T00:00:00Z\"}", host);
    write_text(dead, text);
    snprintf(reused, sizeof reused, "%s/reused.json", reg);
    snprintf(text, sizeof text, "{\"run_dir\":\"/runs/reused\",\"pid\":%ld,\"pid_start\":1,\"host\":\"%s\","
             "\"job\":\"\",\"started\":\"2026-01-01T00:00:00Z\"}", (long)getpid(), host);
    write_text(reused, text);
    snprintf(junk, sizeof junk, "%s/junk.json", reg);
    write_text(junk, "{\"run_dir\":\"relative\",\"pid\":1}");

    cpt_live_run runs[8];
    int n = cpt_live_runs(NULL, runs, 8, &err);
    CHECK_EQ_INT(n, 1);
    if (n >= 1) {
        CHECK_EQ_STR(runs[0].run_dir, "/runs/live");
        CHECK_EQ_INT(runs[0].pid, (long)getpid());
        CHECK_EQ_STR(runs[0].job, "");
    }
    CHECK(!cpt_path_exists(dead));
    CHECK(!cpt_path_exists(reused));
    CHECK(cpt_path_exists(junk));
    char out[2048];
    CHECK(cpt_run_choose("test", NULL, NULL, out, sizeof out, &err) == 0);
    CHECK_EQ_STR(out, "/runs/live");
    CHECK(cpt_run_choose("test", "/given", NULL, out, sizeof out, &err) == 0);
    CHECK_EQ_STR(out, "/given");
    CHECK(cpt_run_choose("test", NULL, "12;rm", out, sizeof out, &err) == -1);
    CHECK(cpt_run_choose("test", NULL, "12", out, sizeof out, &err) == -1); /* no job 12 among the runs */

    cpt_run_registry_remove(entry);
    CHECK_EQ_INT(cpt_live_runs(NULL, runs, 8, &err), 0);
    CHECK(cpt_run_choose("test", NULL, NULL, out, sizeof out, &err) == -1);
    CHECK(strstr(err.msg, "no live cpt run found") != NULL);
    cpt_remove_tree(dir, &err);
    return check_summary("test_run_registry");
}
