/* Loading the MPI collective plugin and checking its view of the ranks against the launcher's (see dp_mpi.h). */
#include "trainer/dp_mpi.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/bootstrap.h"
#include "kernels/mpi/coll_mpi.h"

struct cpt_dp_mpi {
    const cpt_coll_mpi_api *api;
    void *comm;
    int rank, size;
};

static int env_set(const char *name) {
    const char *v = getenv(name);
    return v && *v;
}

int cpt_dp_mpi_env_size(void) {
    if (env_set("OMPI_COMM_WORLD_SIZE")) return cpt_boot_env_int("OMPI_COMM_WORLD_SIZE", 1);
    /* any srun step: with --mpi=none its tasks cannot meet, and must fail rather than train as groups of one */
    if (env_set("SLURM_STEP_NUM_TASKS")) return cpt_boot_env_int("SLURM_STEP_NUM_TASKS", 1);
    return cpt_boot_env_int("CPT_WORLD_SIZE", 1);
}

int cpt_dp_mpi_find_plugin(char *path, size_t cap) {
    char dirs[2][PATH_MAX];
    int n = 0;
    ssize_t len = readlink("/proc/self/exe", dirs[0], sizeof dirs[0] - 1);
    if (len > 0) {
        dirs[0][len] = '\0';
        char *slash = strrchr(dirs[0], '/');
        if (slash) *slash = '\0';
        n++;
    }
    const char *bin = getenv("CPT_BIN");
    if (bin && *bin) snprintf(dirs[n++], sizeof dirs[0], "%s", bin);
    for (int i = 0; i < n; i++) {
        snprintf(path, cap, "%s/%s", dirs[i], CPT_COLL_MPI_FILE);
        if (access(path, R_OK) == 0) return 1;
    }
    snprintf(path, cap, "%s/%s", n ? dirs[0] : ".", CPT_COLL_MPI_FILE);
    return 0;
}

/* A launcher variable that disagrees with MPI's view: the ranks were started by something else than they think. */
static int check_env(const char *name, int want, const char *what, cpt_err *err) {
    if (!env_set(name)) return 0;
    int v = cpt_boot_env_int(name, -1);
    if (v == want) return 0;
    return cpt_errf(err, "dp (mpi): MPI says this process is %s %d, but %s=%s: the ranks were not all started by "
                    "one `mpirun -n N` or `srun --mpi=pmix -n N`", what, want, name, getenv(name));
}

cpt_dp_mpi *cpt_dp_mpi_open(int *rank, int *size, cpt_err *err) {
    char path[PATH_MAX + 64];
    int expect = cpt_dp_mpi_env_size();
    if (!cpt_dp_mpi_find_plugin(path, sizeof path)) {
        cpt_errf(err, "dp: %d CPU ranks need the MPI collective plugin %s, which is absent: build cpt where Open MPI "
                 "is installed (libopenmpi-dev, scripts/deps.sh), or train on GPUs (NCCL)", expect, path);
        return NULL;
    }
    if (!env_set("OMPI_COMM_WORLD_SIZE") && !env_set("SLURM_STEP_NUM_TASKS")) {
        cpt_errf(err, "dp: CPU ranks (CPT_WORLD_SIZE=%d) are started by `mpirun -n N` or `srun --mpi=pmix -n N` "
                 "(cpt run and cpt-sched do so for slurm.trainer_tasks = N); CPT_RANK / CPT_WORLD_SIZE alone are the "
                 "file bootstrap of GPU ranks (train.device = cuda)", expect);
        return NULL;
    }
    /* Open MPI would abort inside MPI_Init with a page about PMI builds: say what is wrong instead. */
    if (env_set("SLURM_STEP_NUM_TASKS") && !env_set("PMIX_RANK") && !env_set("OMPI_COMM_WORLD_RANK")) {
        cpt_errf(err, "dp: this srun step of %d CPU ranks has no PMIx: start it with `srun --mpi=pmix` (cpt-sched "
                 "does for slurm.trainer_tasks > 1)", expect);
        return NULL;
    }
    /* Global: Open MPI's own components, loaded later, resolve libmpi's symbols through it. */
    void *h = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
    if (!h) {
        cpt_errf(err, "dp: loading %s: %s (is Open MPI's libmpi installed? libopenmpi3 / openmpi-bin)", path, dlerror());
        return NULL;
    }
    cpt_coll_mpi_api_fn get = (cpt_coll_mpi_api_fn)dlsym(h, CPT_COLL_MPI_SYMBOL);
    const cpt_coll_mpi_api *api = get ? get() : NULL;
    if (!api || api->abi != CPT_COLL_MPI_ABI) {
        cpt_errf(err, "dp: %s is not a cpt MPI plugin of this version (symbol %s, ABI %d wanted): rebuild cpt", path,
                 CPT_COLL_MPI_SYMBOL, CPT_COLL_MPI_ABI);
        return NULL;
    }
    cpt_dp_mpi *m = calloc(1, sizeof *m);
    if (!m) {
        cpt_errf(err, "dp: out of memory");
        return NULL;
    }
    m->api = api;
    cpt_err_clear(err);
    if (api->init(&m->comm, &m->rank, &m->size, err) != 0) {
        cpt_err e = *err;
        cpt_errf(err, "dp (mpi, %s): %s; CPU ranks start under `mpirun -n N` or `srun --mpi=pmix -n N`", path, e.msg);
        free(m);
        return NULL;
    }
    /* Under mpirun inside an allocation the Slurm variables are the batch step's: only OMPI's count there. */
    int by_mpirun = env_set("OMPI_COMM_WORLD_RANK");
    if (check_env("OMPI_COMM_WORLD_RANK", m->rank, "rank", err) ||
        check_env("OMPI_COMM_WORLD_SIZE", m->size, "of a group of", err) ||
        (!by_mpirun && check_env("SLURM_PROCID", m->rank, "rank", err)) ||
        (!by_mpirun && check_env("SLURM_STEP_NUM_TASKS", m->size, "of a group of", err)) ||
        check_env("CPT_RANK", m->rank, "rank", err) || check_env("CPT_WORLD_SIZE", m->size, "of a group of", err)) {
        cpt_dp_mpi_close(m);
        return NULL;
    }
    *rank = m->rank;
    *size = m->size;
    return m;
}

void cpt_dp_mpi_close(cpt_dp_mpi *m) {
    if (!m) return;
    m->api->finalize(m->comm);
    free(m); /* the plugin stays loaded: MPI cannot be initialised again in this process anyway */
}

void cpt_dp_mpi_abort(cpt_dp_mpi *m, int status) {
    fflush(stdout);
    fflush(stderr);
    m->api->abort(m->comm, status);
}

int cpt_dp_mpi_sum(cpt_dp_mpi *m, float *buf, size_t n, cpt_err *err) {
    if (m->api->sum_floats(m->comm, buf, n, err) == 0) return 0;
    return cpt_err_prefix(err, "dp rank %d/%d (mpi): summing %zu floats: ", m->rank, m->size, n);
}

int cpt_dp_mpi_bcast(cpt_dp_mpi *m, void *buf, size_t n, cpt_err *err) {
    if (m->api->bcast_bytes(m->comm, buf, n, 0, err) == 0) return 0;
    return cpt_err_prefix(err, "dp rank %d/%d (mpi): broadcasting %zu bytes from rank 0: ", m->rank, m->size, n);
}

int cpt_dp_mpi_reduce_scatter(cpt_dp_mpi *m, const float *send, float *recv, size_t shard, cpt_err *err) {
    if (m->api->reduce_scatter_floats(m->comm, send, recv, shard, err) == 0) return 0;
    return cpt_err_prefix(err, "dp rank %d/%d (mpi): reduce-scatter of %zu floats a rank: ", m->rank, m->size, shard);
}

int cpt_dp_mpi_all_gather(cpt_dp_mpi *m, const float *send, float *recv, size_t shard, cpt_err *err) {
    if (m->api->all_gather_floats(m->comm, send, recv, shard, err) == 0) return 0;
    return cpt_err_prefix(err, "dp rank %d/%d (mpi): all-gather of %zu floats a rank: ", m->rank, m->size, shard);
}

int cpt_dp_mpi_barrier(cpt_dp_mpi *m, cpt_err *err) {
    if (m->api->barrier(m->comm, err) == 0) return 0;
    return cpt_err_prefix(err, "dp rank %d/%d (mpi): barrier: ", m->rank, m->size);
}

const char *cpt_dp_mpi_version(const cpt_dp_mpi *m) { return m->api->library_version(); }
