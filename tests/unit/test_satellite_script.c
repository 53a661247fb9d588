/* The satellite batch script is a file installed beside the cpt programs (scheduler/satellite.h): cpt_sat_init
 * finds it in the programs' folder, and refuses a folder without it with an error naming the path; the refresh's
 * squeue filter holds every role's job name at the longest run name. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/config_keys.h"
#include "core/fs.h"
#include "scheduler/satellite.h"
#include "tests/check.h"

int main(void) {
    cpt_err err;
    cpt_config *cfg = cpt_config_load(NULL, 0, NULL, &err);
    CHECK_MSG(cfg != NULL, "%s", err.msg);
    if (!cfg) return check_summary("test_satellite_script");
    char tmp[] = "/tmp/cpt_test_satellite_XXXXXX";
    CHECK(mkdtemp(tmp) != NULL);

    /* A folder of programs without the script: refused, naming the path. */
    cpt_satellites S;
    char want[256];
    snprintf(want, sizeof want, "%s/cpt-satellite.sh", tmp);
    CHECK(cpt_sat_init(&S, cfg, tmp, tmp, "c.toml", NULL, NULL, &err) == -1);
    CHECK_MSG(strstr(err.msg, want) != NULL, "%s", err.msg);
    CHECK(access(want, F_OK) != 0); /* nothing written in its place */

    /* The build folder (where cpt is) holds a copy of the source script, which sbatch is given. */
    const char *build = getenv("CPT_BUILD") ? getenv("CPT_BUILD") : "build";
    CHECK_MSG(cpt_sat_init(&S, cfg, tmp, build, "c.toml", NULL, NULL, &err) == 0, "%s", err.msg);
    snprintf(want, sizeof want, "%s/cpt-satellite.sh", build);
    CHECK_EQ_STR(S.script, want);
    char *got = cpt_read_file(S.script, NULL, &err), *src = cpt_read_file("scheduler/cpt-satellite.sh", NULL, &err);
    CHECK(got && src && !strcmp(got, src));
    CHECK(got && !strncmp(got, "#!/usr/bin/env bash\n", 20)); /* wait -n: bash, not sh */
    free(got);
    free(src);
    cpt_sat_free(&S);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "bash -n %s", want);
    CHECK_EQ_INT(system(cmd), 0);

    /* The refresh asks squeue for the run's satellite job names: at the longest run name (127 characters) every
     * role's name is in the filter, so live satellites stay live (a cut filter hid the env one, taken for ended).
     * A stand-in squeue on PATH answers for the names it is given. */
    char sq[300], db[300], path_env[4400];
    snprintf(sq, sizeof sq, "%s/squeue", tmp);
    snprintf(db, sizeof db, "%s/jobs", tmp);
    FILE *f = fopen(sq, "w");
    CHECK(f != NULL);
    if (f) {
        fprintf(f, "#!/bin/bash\nnames=\nfor a in \"$@\"; do case $a in --name=*) names=${a#--name=} ;; esac; done\n"
                   "IFS=, read -ra want <<< \"$names\"\n"
                   "while IFS='|' read -r id name st; do for w in \"${want[@]}\"; do [ \"$w\" = \"$name\" ] && "
                   "echo \"$id|$st\"; done; done < '%s'\nexit 0\n", db);
        fclose(f);
    }
    CHECK_EQ_INT(chmod(sq, 0755), 0);
    cpt_satellites L;
    memset(&L, 0, sizeof L);
    memset(L.run_name, 'r', sizeof L.run_name - 1);
    snprintf(L.run_dir, sizeof L.run_dir, "%s", tmp);
    L.cap = CPT_N_WORKER_ROLES;
    L.v = calloc((size_t)L.cap, sizeof *L.v);
    f = fopen(db, "w");
    CHECK(f != NULL && L.v != NULL);
    for (int r = 0; f && L.v && r < CPT_N_WORKER_ROLES; r++) {
        cpt_satellite *sat = &L.v[L.n++];
        snprintf(sat->job, sizeof sat->job, "%d", 101 + r);
        snprintf(sat->worker, sizeof sat->worker, "%s-sat0", cpt_role_name(r));
        sat->role = r;
        sat->submitted_at = cpt_now() - 100;
        snprintf(sat->state, sizeof sat->state, "RUNNING");
        fprintf(f, "%d|cpt-sat-%s-%s|RUNNING\n", 101 + r, L.run_name, cpt_role_name(r));
    }
    if (f) fclose(f);
    const char *old_path = getenv("PATH");
    snprintf(path_env, sizeof path_env, "%s:%s", tmp, old_path ? old_path : "/usr/bin:/bin");
    char *saved = old_path ? strdup(old_path) : NULL;
    setenv("PATH", path_env, 1);
    cpt_sat_refresh(&L);
    if (saved) setenv("PATH", saved, 1);
    free(saved);
    for (int r = 0; r < CPT_N_WORKER_ROLES; r++)
        CHECK_MSG(cpt_sat_live(&L, r) == 1, "run name of %zu characters: %s satellites live %d", strlen(L.run_name),
                  cpt_role_name(r), cpt_sat_live(&L, r));
    CHECK_EQ_INT(L.n_ended, 0);
    free(L.v);
    unlink(sq);
    unlink(db);
    rmdir(tmp);
    cpt_config_free(cfg);
    return check_summary("test_satellite_script");
}
