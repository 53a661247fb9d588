/* Where cpt-sched puts a worker: inside the allocation (an `srun --exact` step) while the allocation has room for
 * one more step of that role, else in a satellite job (sbatch) up to slurm.max_satellites, else nowhere (the
 * desired count stays above the running one and the launcher says why).
 *
 * The room is counted per node from what Slurm granted (SLURM_JOB_CPUS_PER_NODE, SLURM_GPUS_ON_NODE) minus the
 * steps cpt-sched holds: the trainer's tasks, the workers, and the workers still draining (they hold their CPUs
 * until they exit). A task is placed on the first node with room (one task never spans nodes), like srun. Pure
 * arithmetic, so it is unit-tested without Slurm. */
#ifndef CPT_SCHEDULER_PLACEMENT_H
#define CPT_SCHEDULER_PLACEMENT_H

#include "core/error.h"

#define CPT_ALLOC_MAX_NODES 256
#define CPT_MAX_WORKERS 4096 /* the most workers of one role cpt-scale may ask for */
#define CPT_PLAN_MAX_ROLES 8  /* the most roles cpt_plan_scale plans at once */

/* A desired worker count as cpt-scale writes it and the launcher reads it from cpt:{run}:control: the whole string
 * is decimal digits (no sign, no spaces) with a value in 0..CPT_MAX_WORKERS. Returns 0 and *out, or -1. */
int cpt_parse_worker_count(const char *s, int *out);

typedef struct cpt_alloc {
    int n_nodes;
    int cpus[CPT_ALLOC_MAX_NODES]; /* free CPUs per node */
    int gpus[CPT_ALLOC_MAX_NODES]; /* free GPUs per node */
} cpt_alloc;

/* cpus_per_node: Slurm's "8", "8(x2),4"; gpus_per_node: GPUs on each node (NULL or "": none). */
int cpt_alloc_parse(cpt_alloc *a, const char *cpus_per_node, const char *gpus_per_node, cpt_err *err);

/* From the environment of a batch step: SLURM_JOB_CPUS_PER_NODE (else SLURM_CPUS_ON_NODE), SLURM_GPUS_ON_NODE
 * (else the count of ids in SLURM_JOB_GPUS; neither: no GPUs). */
int cpt_alloc_from_env(cpt_alloc *a, cpt_err *err);

/* Takes a step of `tasks` tasks of cpus + gpus each, each task on the first node with room. Returns 0 when the
 * whole step fits (and takes it), -1 when it does not (a is unchanged). */
int cpt_alloc_take(cpt_alloc *a, int tasks, int cpus, int gpus);

/* How many more one-task steps of cpus + gpus fit. */
int cpt_alloc_room(const cpt_alloc *a, int cpus, int gpus);

/* One role's moves toward its desired count. */
typedef struct cpt_scale_move {
    int start_inside;   /* new srun steps */
    int submit;         /* new satellite jobs */
    int stop_satellite; /* satellites to drain (scale-down drains satellites first: they hold extra nodes) */
    int stop_inside;    /* steps to drain */
    int unplaced;       /* wanted but no room inside and no satellite left */
} cpt_scale_move;

/* want: desired count; inside, satellites: live (not draining) workers of the role; room: more steps of the role
 * that fit inside now; satellites_left: satellite jobs that may still be submitted (all roles). */
cpt_scale_move cpt_plan_role(int want, int inside, int satellites, int room, int satellites_left);

/* The n roles at once (arrays of n, in role order: scheduler/roles.h), from the room left (room, updated) and the
 * satellites that may still be submitted: first each role's base count (what the allocation was sized for:
 * roles.rollout, roles.reward, roles.env) goes inside, so a run that starts with higher desired counts (a requeue
 * after cpt-scale) does not give one role's room to another; then each role's rest goes inside while room lasts,
 * then to satellites. */
void cpt_plan_scale(cpt_alloc *room, int n, const int *want, const int *base, const int *inside,
                    const int *satellites, const int *cpus, const int *gpus, int satellites_left,
                    cpt_scale_move *out);

#endif
