/* Preflight: every check a run needs before it takes resources, each printed as a line, all problems collected
 * (not only the first), so one look tells a user everything to fix.
 *
 * Checks: where each role runs (train.device, rollout.device, weights.transport with auto resolved: by slurm.*_gpus
 * under Slurm, by the GPUs this process sees otherwise; a GPU held but used by no role is a warning), the model (HF folder: config.json parses and safetensors open; or model.init = random), the tokenizer
 * loads, the trainer's model-state memory fits the GPU and the host (trainer/train_memory.h), the data files parse in the format the method needs, the reward builds (online methods), the roles the
 * method needs and their programs, redis-server (online, private queue), and the resources the roles ask
 * (slurm.* x roles) against Slurm's allocation (SLURM_* environment) or this machine. */
#ifndef CPT_SCHEDULER_PREFLIGHT_H
#define CPT_SCHEDULER_PREFLIGHT_H

#include <stdio.h>

#include "core/config.h"
#include "weights/devices.h"

typedef struct cpt_preflight {
    const cpt_config *cfg;
    const char *bin_dir;  /* folder of the cpt programs (cpt-train, cpt-rollout, cpt-reward) */
    int slurm;            /* check resources against the Slurm allocation in the environment */
    FILE *out;            /* where each check's line goes (NULL: nowhere) */
    int problems, warnings;
    long model_vocab;     /* the model's vocabulary once checked (0: unknown or from the tokenizer) */
    cpt_devices dev;      /* where the roles run, every auto resolved (weights/devices.h) */
    int dev_ok;           /* dev is valid */
} cpt_preflight;

/* Runs every check; returns the number of problems (0: the run can start). */
int cpt_preflight_run(cpt_preflight *p);

/* Resources the roles ask, summed over roles (for tests and the resources check). */
typedef struct cpt_resources {
    long cpus, gpus, tasks;
} cpt_resources;
void cpt_preflight_resources(const cpt_config *cfg, cpt_resources *out);

/* CPUs and GPUs of the Slurm allocation from the environment (SLURM_CPUS_ON_NODE or SLURM_JOB_CPUS_PER_NODE,
 * SLURM_JOB_NUM_NODES, SLURM_GPUS_ON_NODE, SLURM_GPUS, SLURM_JOB_GPUS, SLURM_STEP_GPUS). -1: not given. */
void cpt_preflight_slurm_alloc(cpt_resources *out);

#endif
