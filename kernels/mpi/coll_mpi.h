/* The CPU collective of data parallel: Open MPI behind a small table of functions, built as its own shared object
 * (libcpt-coll-mpi.so, beside the programs) only where CMake finds MPI. trainer/dp_mpi.c dlopens it when a group of
 * CPU ranks needs it, so the programs themselves never need libmpi: one rank, and GPU ranks (NCCL), never load it.
 *
 * The plugin exports one function, cpt_coll_mpi_get (CPT_COLL_MPI_SYMBOL), returning the table. Every function fills
 * err (its msg only: the plugin does not link the rest of cpt) and returns 0 or -1; MPI errors come back as errors
 * (MPI_ERRORS_RETURN on the group's communicator), never as an abort inside MPI. Counts of any size are split into
 * MPI calls of at most INT_MAX / 2 elements. */
#ifndef CPT_KERNELS_MPI_COLL_MPI_H
#define CPT_KERNELS_MPI_COLL_MPI_H

#include <stddef.h>

#include "core/error.h"

#define CPT_COLL_MPI_ABI 3
#define CPT_COLL_MPI_FILE "libcpt-coll-mpi.so"
#define CPT_COLL_MPI_SYMBOL "cpt_coll_mpi_get"

typedef struct cpt_coll_mpi_api {
    int abi; /* CPT_COLL_MPI_ABI */
    /* MPI_Init_thread (funneled: only the calling thread talks to MPI) from the environment mpirun or
     * `srun --mpi=pmix` set up; *comm is this group's private communicator (a duplicate of MPI_COMM_WORLD). */
    int (*init)(void **comm, int *rank, int *size, cpt_err *err);
    /* In-place sum of n floats over the ranks. */
    int (*sum_floats)(void *comm, float *buf, size_t n, cpt_err *err);
    /* n bytes from rank root to every rank, in place. */
    int (*bcast_bytes)(void *comm, void *buf, size_t n, int root, cpt_err *err);
    int (*barrier)(void *comm, cpt_err *err);
    /* Sums world * shard floats of send over the ranks; rank r receives floats [r * shard, (r + 1) * shard) of the
     * sum in recv (MPI_Reduce_scatter_block; the caller pads the buffer to a multiple of the world size). */
    int (*reduce_scatter_floats)(void *comm, const float *send, float *recv, size_t shard, cpt_err *err);
    /* Every rank's shard floats of send, concatenated in rank order into recv (world * shard floats). */
    int (*all_gather_floats)(void *comm, const float *send, float *recv, size_t shard, cpt_err *err);
    /* Frees the communicator and finalises MPI. */
    void (*finalize)(void *comm);
    /* Ends every rank of the job (MPI_Abort) with status; does not return. */
    void (*abort)(void *comm, int status);
    /* The library's own version string ("Open MPI v4.1.4, ..."). */
    const char *(*library_version)(void);
} cpt_coll_mpi_api;

typedef const cpt_coll_mpi_api *(*cpt_coll_mpi_api_fn)(void);

#endif
