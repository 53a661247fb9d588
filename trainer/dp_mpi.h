/* The MPI backend of data parallel (trainer/dp.c): CPU ranks started by `mpirun -n N` or `srun --mpi=pmix -n N`
 * talk through Open MPI, loaded at run time from the plugin kernels/mpi/coll_mpi.h describes (libcpt-coll-mpi.so
 * in the programs' folder, or in $CPT_BIN). Nothing here is loaded for one rank.
 *
 * A rank that dies does not leave the others waiting forever: mpirun aborts the whole job when one rank exits
 * without finalising (or by a signal), and cpt-sched's steps run with srun --kill-on-bad-exit=1. MPI itself has no
 * timeout on a collective; those launchers are the guard. A rank that fails (an error, not a crash) must end the
 * job with cpt_dp_mpi_abort rather than finalise, which would wait for the others while they wait for it. MPI is
 * initialised once per process and finalised by cpt_dp_mpi_close (it cannot be initialised again in that
 * process). */
#ifndef CPT_TRAINER_DP_MPI_H
#define CPT_TRAINER_DP_MPI_H

#include <stddef.h>

#include "core/error.h"

typedef struct cpt_dp_mpi cpt_dp_mpi;

/* The group size the launcher announced, read from the environment without touching MPI: OMPI_COMM_WORLD_SIZE
 * (mpirun), else SLURM_STEP_NUM_TASKS inside an srun step, else CPT_WORLD_SIZE, else 1. */
int cpt_dp_mpi_env_size(void);
/* Where the plugin is (path filled, 1), or where it was looked for (path filled with the first place, 0). */
int cpt_dp_mpi_find_plugin(char *path, size_t cap);
/* Loads the plugin, initialises MPI, and checks that MPI's rank and size agree with the launcher's environment
 * (OMPI_COMM_WORLD_*, SLURM_PROCID / SLURM_STEP_NUM_TASKS under srun, CPT_RANK / CPT_WORLD_SIZE when set). */
cpt_dp_mpi *cpt_dp_mpi_open(int *rank, int *size, cpt_err *err);
void cpt_dp_mpi_close(cpt_dp_mpi *m);
/* Ends every rank of the job with status (MPI_Abort); does not return. */
void cpt_dp_mpi_abort(cpt_dp_mpi *m, int status);
int cpt_dp_mpi_sum(cpt_dp_mpi *m, float *buf, size_t n, cpt_err *err);
int cpt_dp_mpi_bcast(cpt_dp_mpi *m, void *buf, size_t n, cpt_err *err); /* from rank 0 */
/* send: size * shard floats; recv: this rank's shard of their sum (kernels/mpi/coll_mpi.h). */
int cpt_dp_mpi_reduce_scatter(cpt_dp_mpi *m, const float *send, float *recv, size_t shard, cpt_err *err);
int cpt_dp_mpi_all_gather(cpt_dp_mpi *m, const float *send, float *recv, size_t shard, cpt_err *err);
int cpt_dp_mpi_barrier(cpt_dp_mpi *m, cpt_err *err);
const char *cpt_dp_mpi_version(const cpt_dp_mpi *m);

#endif
