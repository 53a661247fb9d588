/* The worker roles a launcher starts beside the trainer, and what each needs: its program, its consumer group and
 * input stream, its count and resources from the config. Every launcher loop over roles goes through this table, so
 * a role added here is started, placed, scaled, put on satellites and released like the others. */
#ifndef CPT_SCHEDULER_ROLES_H
#define CPT_SCHEDULER_ROLES_H

#include "core/config.h"

enum { CPT_ROLE_ROLLOUT = 0, CPT_ROLE_REWARD = 1, CPT_ROLE_ENV = 2, CPT_N_WORKER_ROLES = 3 };

/* "rollout", "reward", "env": the worker names' prefix (rollout-0, env-sat1), the cpt-scale and control field. */
const char *cpt_role_name(int role);
/* "cpt-rollout", "cpt-reward", "cpt-env". */
const char *cpt_role_program(int role);
/* The stream a worker of role reads ("prompts", "rollouts", "env": cpt:RUN:<it>) and its consumer group. */
const char *cpt_role_input(int role);
const char *cpt_role_group(int role);
/* The role of "rollout", "reward" or "env"; -1 for another name. */
int cpt_role_from_name(const char *name);
/* The role of a worker named ROLE-...; -1 for another name (the trainer). */
int cpt_role_of_worker(const char *worker);

/* The configured count (roles.rollout, roles.reward, roles.env; roles.env = -1 is 1 when env.type is not "none",
 * else 0), and the CPUs and GPUs of one step (slurm.<role>_cpus; GPUs only for rollout: slurm.rollout_gpus). */
int cpt_role_configured(const cpt_config *cfg, int role);
int cpt_role_cpus(const cpt_config *cfg, int role);
int cpt_role_gpus(const cpt_config *cfg, int role);

#endif
