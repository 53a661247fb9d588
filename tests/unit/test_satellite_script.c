/* The satellite batch script is a file installed beside the cpt programs (scheduler/satellite.h): cpt_sat_init
 * finds it in the programs' folder, and refuses a folder without it with an error naming the path. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
    rmdir(tmp);
    cpt_config_free(cfg);
    return check_summary("test_satellite_script");
}
