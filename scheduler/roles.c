/* The worker roles (see roles.h). */
#include "scheduler/roles.h"

#include <string.h>

static const struct {
    const char *name, *program, *input, *group, *count_key, *cpus_key;
} ROLES[CPT_N_WORKER_ROLES] = {
    {"rollout", "cpt-rollout", "prompts", "rollout", "roles.rollout", "slurm.rollout_cpus"},
    {"reward", "cpt-reward", "rollouts", "reward", "roles.reward", "slurm.reward_cpus"},
    {"env", "cpt-env", "env", "env", "roles.env", "slurm.env_cpus"},
};

static int valid(int role) { return role >= 0 && role < CPT_N_WORKER_ROLES; }

const char *cpt_role_name(int role) { return valid(role) ? ROLES[role].name : "?"; }
const char *cpt_role_program(int role) { return valid(role) ? ROLES[role].program : "?"; }
const char *cpt_role_input(int role) { return valid(role) ? ROLES[role].input : "?"; }
const char *cpt_role_group(int role) { return valid(role) ? ROLES[role].group : "?"; }

int cpt_role_from_name(const char *name) {
    for (int r = 0; name && r < CPT_N_WORKER_ROLES; r++)
        if (!strcmp(name, ROLES[r].name)) return r;
    return -1;
}

int cpt_role_of_worker(const char *worker) {
    for (int r = 0; worker && r < CPT_N_WORKER_ROLES; r++) {
        size_t n = strlen(ROLES[r].name);
        if (!strncmp(worker, ROLES[r].name, n) && worker[n] == '-') return r;
    }
    return -1;
}

int cpt_role_configured(const cpt_config *cfg, int role) {
    if (!valid(role)) return 0;
    int n = (int)cpt_cfg_int(cfg, ROLES[role].count_key);
    if (role == CPT_ROLE_ENV && n < 0) n = strcmp(cpt_cfg_str(cfg, "env.type"), "none") ? 1 : 0;
    return n;
}

int cpt_role_cpus(const cpt_config *cfg, int role) {
    return valid(role) ? (int)cpt_cfg_int(cfg, ROLES[role].cpus_key) : 1;
}

int cpt_role_gpus(const cpt_config *cfg, int role) {
    return role == CPT_ROLE_ROLLOUT ? (int)cpt_cfg_int(cfg, "slurm.rollout_gpus") : 0;
}
