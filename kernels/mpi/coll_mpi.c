/* libcpt-coll-mpi.so: Open MPI behind the table of kernels/mpi/coll_mpi.h. Built only when CMake finds MPI. */
#include "kernels/mpi/coll_mpi.h"

#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#define CHUNK ((size_t)(INT_MAX / 2))

static int fail(cpt_err *err, int rc, const char *what) {
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) snprintf(text, sizeof text, "MPI error %d", rc);
    if (err) snprintf(err->msg, sizeof err->msg, "%s: %s", what, text);
    return -1;
}

static int init(void **comm, int *rank, int *size, cpt_err *err) {
    int inited = 0, provided = 0, rc;
    MPI_Initialized(&inited);
    if (!inited && (rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided)) != MPI_SUCCESS)
        return fail(err, rc, "MPI_Init_thread");
    /* From here on a failing call returns its code instead of aborting every rank without a word. */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm *c = malloc(sizeof *c);
    if (!c) {
        if (err) snprintf(err->msg, sizeof err->msg, "out of memory");
        return -1;
    }
    if ((rc = MPI_Comm_dup(MPI_COMM_WORLD, c)) != MPI_SUCCESS) {
        free(c);
        return fail(err, rc, "MPI_Comm_dup");
    }
    MPI_Comm_set_errhandler(*c, MPI_ERRORS_RETURN);
    if ((rc = MPI_Comm_rank(*c, rank)) != MPI_SUCCESS || (rc = MPI_Comm_size(*c, size)) != MPI_SUCCESS) {
        MPI_Comm_free(c);
        free(c);
        return fail(err, rc, "MPI_Comm_rank/size");
    }
    *comm = c;
    return 0;
}

static int sum_floats(void *comm, float *buf, size_t n, cpt_err *err) {
    for (size_t done = 0; done < n;) {
        size_t k = n - done < CHUNK ? n - done : CHUNK;
        int rc = MPI_Allreduce(MPI_IN_PLACE, buf + done, (int)k, MPI_FLOAT, MPI_SUM, *(MPI_Comm *)comm);
        if (rc != MPI_SUCCESS) return fail(err, rc, "MPI_Allreduce");
        done += k;
    }
    return 0;
}

static int bcast_bytes(void *comm, void *buf, size_t n, int root, cpt_err *err) {
    for (size_t done = 0; done < n;) {
        size_t k = n - done < CHUNK ? n - done : CHUNK;
        int rc = MPI_Bcast((char *)buf + done, (int)k, MPI_BYTE, root, *(MPI_Comm *)comm);
        if (rc != MPI_SUCCESS) return fail(err, rc, "MPI_Bcast");
        done += k;
    }
    return 0;
}

/* One call each: a shard of more than INT_MAX floats (8 GiB a rank) is refused rather than split. */
static int reduce_scatter_floats(void *comm, const float *send, float *recv, size_t shard, cpt_err *err) {
    if (shard > (size_t)INT_MAX) {
        if (err) snprintf(err->msg, sizeof err->msg, "reduce-scatter of %zu floats a rank: more than INT_MAX", shard);
        return -1;
    }
    int rc = MPI_Reduce_scatter_block(send, recv, (int)shard, MPI_FLOAT, MPI_SUM, *(MPI_Comm *)comm);
    return rc == MPI_SUCCESS ? 0 : fail(err, rc, "MPI_Reduce_scatter_block");
}

static int all_gather_floats(void *comm, const float *send, float *recv, size_t shard, cpt_err *err) {
    if (shard > (size_t)INT_MAX) {
        if (err) snprintf(err->msg, sizeof err->msg, "all-gather of %zu floats a rank: more than INT_MAX", shard);
        return -1;
    }
    int rc = MPI_Allgather(send, (int)shard, MPI_FLOAT, recv, (int)shard, MPI_FLOAT, *(MPI_Comm *)comm);
    return rc == MPI_SUCCESS ? 0 : fail(err, rc, "MPI_Allgather");
}

static int barrier(void *comm, cpt_err *err) {
    int rc = MPI_Barrier(*(MPI_Comm *)comm);
    return rc == MPI_SUCCESS ? 0 : fail(err, rc, "MPI_Barrier");
}

static void finalize(void *comm) {
    if (comm) {
        MPI_Comm_free((MPI_Comm *)comm);
        free(comm);
    }
    int done = 0;
    MPI_Finalized(&done);
    if (!done) MPI_Finalize();
}

static void abort_all(void *comm, int status) {
    MPI_Abort(comm ? *(MPI_Comm *)comm : MPI_COMM_WORLD, status);
    exit(status); /* MPI_Abort does not return; this is for the compiler and a broken library */
}

static const char *library_version(void) {
    static char v[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    if (!v[0] && MPI_Get_library_version(v, &len) != MPI_SUCCESS) snprintf(v, sizeof v, "unknown MPI");
    return v;
}

static const cpt_coll_mpi_api api = {
    .abi = CPT_COLL_MPI_ABI,
    .init = init,
    .sum_floats = sum_floats,
    .bcast_bytes = bcast_bytes,
    .barrier = barrier,
    .reduce_scatter_floats = reduce_scatter_floats,
    .all_gather_floats = all_gather_floats,
    .finalize = finalize,
    .abort = abort_all,
    .library_version = library_version,
};

__attribute__((visibility("default"))) const cpt_coll_mpi_api *cpt_coll_mpi_get(void);
const cpt_coll_mpi_api *cpt_coll_mpi_get(void) { return &api; }
