/* A trainer rank started by cpt's launchers (CPT_RUN and CPT_ROLE set, a group of more than one: OMPI_COMM_WORLD_*
 * from mpirun, SLURM_PROCID / SLURM_STEP_NUM_TASKS in an srun step, CPT_RANK / CPT_WORLD_SIZE from
 * `cpt local-ranks`): it dies with its parent (a local mpirun killed with the launcher leaves no rank behind), and a
 * rank above 0 writes its output to RUN/logs/ROLE.rankK.log, so RUN/logs/ROLE.log stays rank 0's. */
#ifndef CPT_CLI_TRAINER_RANK_H
#define CPT_CLI_TRAINER_RANK_H

/* Nothing for one rank or a process started by hand. */
void cpt_cli_trainer_rank_setup(void);

#endif
