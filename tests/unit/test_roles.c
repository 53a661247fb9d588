/* The worker roles table (scheduler/roles.h): names, programs, streams and groups per role, a worker's role from
 * its name, and the configured counts: roles.env = -1 (the default) is one env worker when env.type is set, none
 * otherwise; an explicit count wins either way. */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "cli/config_keys.h"
#include "scheduler/roles.h"

static cpt_config *load(int n, const char **ov) {
    cpt_err err;
    cpt_config *c = cpt_config_load_text("", 0, "test.toml", n, (char *const *)ov, &err);
    if (!c) fprintf(stderr, "%s\n", err.msg);
    return c;
}

int main(void) {
    CHECK_EQ_STR(cpt_role_name(CPT_ROLE_ENV), "env");
    CHECK_EQ_STR(cpt_role_program(CPT_ROLE_ENV), "cpt-env");
    CHECK_EQ_STR(cpt_role_input(CPT_ROLE_ENV), "env");
    CHECK_EQ_STR(cpt_role_group(CPT_ROLE_ENV), "env");
    CHECK_EQ_STR(cpt_role_input(CPT_ROLE_REWARD), "rollouts");
    CHECK_EQ_STR(cpt_role_group(CPT_ROLE_ROLLOUT), "rollout");
    CHECK_EQ_INT(cpt_role_from_name("reward"), CPT_ROLE_REWARD);
    CHECK_EQ_INT(cpt_role_from_name("env"), CPT_ROLE_ENV);
    CHECK_EQ_INT(cpt_role_from_name("trainer"), -1);
    CHECK_EQ_INT(cpt_role_of_worker("env-0"), CPT_ROLE_ENV);
    CHECK_EQ_INT(cpt_role_of_worker("env-sat3-r1"), CPT_ROLE_ENV);
    CHECK_EQ_INT(cpt_role_of_worker("reward-12"), CPT_ROLE_REWARD);
    CHECK_EQ_INT(cpt_role_of_worker("rollout-0"), CPT_ROLE_ROLLOUT);
    CHECK_EQ_INT(cpt_role_of_worker("envoy-0"), -1);
    CHECK_EQ_INT(cpt_role_of_worker("trainer"), -1);

    cpt_config *c = load(0, NULL);
    CHECK(c && cpt_role_configured(c, CPT_ROLE_ENV) == 0); /* no tool: no env worker */
    CHECK(c && cpt_role_configured(c, CPT_ROLE_ROLLOUT) == 1 && cpt_role_configured(c, CPT_ROLE_REWARD) == 1);
    cpt_config_free(c);
    const char *tool[] = {"env.type=calculator", "slurm.env_cpus=3"};
    c = load(2, tool);
    CHECK(c && cpt_role_configured(c, CPT_ROLE_ENV) == 1);
    CHECK(c && cpt_role_cpus(c, CPT_ROLE_ENV) == 3 && cpt_role_gpus(c, CPT_ROLE_ENV) == 0);
    cpt_config_free(c);
    const char *many[] = {"env.type=countdown", "roles.env=4"};
    c = load(2, many);
    CHECK(c && cpt_role_configured(c, CPT_ROLE_ENV) == 4);
    cpt_config_free(c);
    const char *none[] = {"env.type=calculator", "roles.env=0"};
    c = load(2, none);
    CHECK(c && cpt_role_configured(c, CPT_ROLE_ENV) == 0);
    cpt_config_free(c);
    return check_summary("test_roles");
}
