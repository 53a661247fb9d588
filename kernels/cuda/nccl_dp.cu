/* NCCL through dlopen, one communicator and its comm stream (see nccl_dp.h). */
#include <dlfcn.h>
#include <nccl.h>
#include <string.h>
#include <time.h>

#include "kernels/cuda/cuda_internal.h"
#include "kernels/cuda/nccl_dp.h"

static_assert(sizeof(ncclUniqueId) == CPT_NCCL_ID_BYTES, "ncclUniqueId is 128 bytes");

typedef struct nccl_api {
    void *lib;
    decltype(&ncclGetVersion) get_version;
    decltype(&ncclGetUniqueId) get_unique_id;
    decltype(&ncclCommInitRankConfig) init_rank_config;
    decltype(&ncclCommGetAsyncError) get_async_error;
    decltype(&ncclCommFinalize) finalize;
    decltype(&ncclCommDestroy) destroy;
    decltype(&ncclCommAbort) abort_comm;
    decltype(&ncclAllReduce) all_reduce;
    decltype(&ncclBroadcast) broadcast;
    decltype(&ncclReduceScatter) reduce_scatter;
    decltype(&ncclAllGather) all_gather;
    decltype(&ncclGetErrorString) error_string;
    decltype(&ncclGetLastError) last_error;
} nccl_api;

/* The library is never dlclose'd: ncclGetUniqueId leaves a bootstrap thread running inside it, and dlopen of a
 * loaded library just returns the same handle, so loading per use keeps no global state of ours. */
static int load_nccl(nccl_api *api, cpt_err *err) {
    memset(api, 0, sizeof *api);
    const char *env = getenv("CPT_NCCL_LIB");
    const char *names[] = {env, "libnccl.so.2", "/usr/local/cuda/lib64/libnccl.so.2"};
    for (size_t i = 0; i < sizeof names / sizeof names[0] && !api->lib; i++)
        if (names[i] && *names[i]) api->lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!api->lib)
        return cpt_cuda_err(err, "cannot load NCCL (libnccl.so.2; set CPT_NCCL_LIB to its path, e.g. from python's "
                            "nvidia-nccl-cu13 package): %s", dlerror());
#define SYM(field, name)                                                              \
    do {                                                                              \
        *(void **)&api->field = dlsym(api->lib, name);                                \
        if (!api->field) return cpt_cuda_err(err, "NCCL has no symbol %s", name);     \
    } while (0)
    SYM(get_version, "ncclGetVersion");
    SYM(get_unique_id, "ncclGetUniqueId");
    SYM(init_rank_config, "ncclCommInitRankConfig");
    SYM(get_async_error, "ncclCommGetAsyncError");
    SYM(finalize, "ncclCommFinalize");
    SYM(destroy, "ncclCommDestroy");
    SYM(abort_comm, "ncclCommAbort");
    SYM(all_reduce, "ncclAllReduce");
    SYM(broadcast, "ncclBroadcast");
    SYM(reduce_scatter, "ncclReduceScatter");
    SYM(all_gather, "ncclAllGather");
    SYM(error_string, "ncclGetErrorString");
    SYM(last_error, "ncclGetLastError");
#undef SYM
    int v = 0;
    if (api->get_version(&v) != ncclSuccess) return cpt_cuda_err(err, "ncclGetVersion failed");
    if (v < NCCL_VERSION(2, 10, 0)) return cpt_cuda_err(err, "NCCL %d is too old: ncclAvg needs 2.10 or newer", v);
    return 0;
}

int cpt_nccl_version(cpt_err *err) {
    nccl_api api;
    if (load_nccl(&api, err)) return -1;
    int v = 0;
    api.get_version(&v);
    /* NCCL >= 2.9 encodes major * 10000 + minor * 100 + patch already. */
    return v;
}

int cpt_nccl_unique_id(unsigned char id[CPT_NCCL_ID_BYTES], cpt_err *err) {
    nccl_api api;
    if (load_nccl(&api, err)) return -1;
    ncclUniqueId uid;
    ncclResult_t r = api.get_unique_id(&uid);
    if (r != ncclSuccess)
        return cpt_cuda_err(err, "ncclGetUniqueId failed: %s (%s)", api.error_string(r), api.last_error(NULL));
    memcpy(id, uid.internal, CPT_NCCL_ID_BYTES);
    return 0;
}

struct cpt_nccl {
    nccl_api api;
    cpt_cuda_ctx *ctx;
    ncclComm_t comm;
    cudaStream_t comm_stream;
    cudaEvent_t compute_done; /* recorded on the compute stream before each all-reduce */
    cudaEvent_t comm_done;    /* recorded on the comm stream by join */
    int rank, size;
    int ready; /* the init completed: finalize is allowed (else only abort) */
    char where[128];
    /* timing */
    cudaEvent_t *stamps;
    int n_stamps, max_stamps;
    int *op_start, *op_end; /* [max_stamps / 2] stamp indices of each timed all-reduce */
    int n_ops;
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int nccl_fail(cpt_nccl *c, const char *call, ncclResult_t r, cpt_err *err) {
    const char *last = c->api.last_error(c->comm);
    return cpt_cuda_err(err, "%s: %s failed: %s%s%s", c->where, call, c->api.error_string(r), last && *last ? ": " : "",
                        last ? last : "");
}

/* A non-blocking communicator answers ncclInProgress while it works in the background: poll until it settles. */
static int settle(cpt_nccl *c, const char *call, ncclResult_t r, double timeout_s, cpt_err *err) {
    double deadline = now_s() + timeout_s;
    while (r == ncclInProgress) {
        if (now_s() > deadline) {
            cpt_cuda_err(err, "%s: %s did not complete within %.0f s (are all %d ranks started, and can they reach "
                         "rank 0's address in the unique id? NCCL_SOCKET_IFNAME picks the interface)",
                         c->where, call, timeout_s, c->size);
            return -1;
        }
        struct timespec ts = {0, 1000 * 1000};
        nanosleep(&ts, NULL);
        ncclResult_t q = c->api.get_async_error(c->comm, &r);
        if (q != ncclSuccess) return nccl_fail(c, "ncclCommGetAsyncError", q, err);
    }
    if (r != ncclSuccess) return nccl_fail(c, call, r, err);
    return 0;
}

cpt_nccl *cpt_nccl_new(cpt_cuda_ctx *ctx, const unsigned char id[CPT_NCCL_ID_BYTES], int rank, int size,
                       double timeout_s, const char *where, cpt_err *err) {
    cpt_nccl *c = (cpt_nccl *)calloc(1, sizeof *c);
    if (!c) {
        cpt_cuda_err(err, "%s: out of memory", where);
        return NULL;
    }
    snprintf(c->where, sizeof c->where, "%s", where ? where : "nccl");
    c->ctx = ctx;
    c->rank = rank;
    c->size = size;
    cudaError_t e;
    int least = 0, greatest = 0;
    ncclUniqueId uid;
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    ncclResult_t r;
    if (load_nccl(&c->api, err)) {
        char m[sizeof err->msg];
        snprintf(m, sizeof m, "%s", err->msg);
        cpt_cuda_err(err, "%s: %s", c->where, m);
        free(c);
        return NULL;
    }
    if ((e = cudaSetDevice(ctx->device)) != cudaSuccess) {
        cpt_cuda_err(err, "%s: cudaSetDevice(%d) failed: %s", c->where, ctx->device, cudaGetErrorString(e));
        goto fail;
    }
    /* The comm stream gets the higher priority, so its small kernels start between the backward's large ones
     * instead of queueing behind them. */
    cudaDeviceGetStreamPriorityRange(&least, &greatest);
    if ((e = cudaStreamCreateWithPriority(&c->comm_stream, cudaStreamNonBlocking, greatest)) != cudaSuccess ||
        (e = cudaEventCreateWithFlags(&c->compute_done, cudaEventDisableTiming)) != cudaSuccess ||
        (e = cudaEventCreateWithFlags(&c->comm_done, cudaEventDisableTiming)) != cudaSuccess) {
        cpt_cuda_err(err, "%s: creating the comm stream and its events failed: %s", c->where, cudaGetErrorString(e));
        goto fail;
    }
    memcpy(uid.internal, id, CPT_NCCL_ID_BYTES);
    config.blocking = 0; /* so the init can be timed out and aborted */
    config.commName = "cpt-dp";
    r = c->api.init_rank_config(&c->comm, size, uid, rank, &config);
    if (r != ncclSuccess && r != ncclInProgress) {
        nccl_fail(c, "ncclCommInitRankConfig", r, err);
        goto fail;
    }
    if (settle(c, "ncclCommInitRankConfig", r, timeout_s, err)) goto fail;
    c->ready = 1;
    return c;
fail:
    cpt_nccl_free(c);
    return NULL;
}

void cpt_nccl_free(cpt_nccl *c) {
    if (!c) return;
    if (c->comm) {
        /* Finalize flushes outstanding work; a communicator whose init never completed, or any failure, is
         * aborted instead, which never blocks on peers. */
        ncclResult_t r = c->ready ? c->api.finalize(c->comm) : ncclInternalError;
        cpt_err ignored;
        if ((r == ncclSuccess || r == ncclInProgress) && settle(c, "ncclCommFinalize", r, 30.0, &ignored) == 0)
            c->api.destroy(c->comm);
        else
            c->api.abort_comm(c->comm);
        c->comm = NULL;
    }
    cpt_nccl_timing(c, 0, 0, NULL);
    if (c->compute_done) cudaEventDestroy(c->compute_done);
    if (c->comm_done) cudaEventDestroy(c->comm_done);
    if (c->comm_stream) cudaStreamDestroy(c->comm_stream);
    free(c);
}

static int stamp_on(cpt_nccl *c, cudaStream_t s) {
    if (!c->stamps || c->n_stamps >= c->max_stamps) return -1;
    int i = c->n_stamps;
    if (cudaEventCreate(&c->stamps[i]) != cudaSuccess) return -1;
    if (cudaEventRecord(c->stamps[i], s) != cudaSuccess) {
        cudaEventDestroy(c->stamps[i]);
        return -1;
    }
    c->n_stamps++;
    return i;
}

static int allreduce(cpt_nccl *c, float *buf, size_t count, ncclRedOp_t op, cpt_err *err) {
    cudaError_t e;
    if ((e = cudaEventRecord(c->compute_done, c->ctx->stream)) != cudaSuccess ||
        (e = cudaStreamWaitEvent(c->comm_stream, c->compute_done, 0)) != cudaSuccess)
        return cpt_cuda_err(err, "%s: ordering the all-reduce after the compute stream failed: %s", c->where,
                            cudaGetErrorString(e));
    int start = stamp_on(c, c->comm_stream);
    ncclResult_t r = c->api.all_reduce(buf, buf, count, ncclFloat32, op, c->comm, c->comm_stream);
    if (r != ncclSuccess && r != ncclInProgress) return nccl_fail(c, "ncclAllReduce", r, err);
    if (settle(c, "ncclAllReduce", r, 600.0, err)) return -1;
    int end = stamp_on(c, c->comm_stream);
    if (start >= 0 && end >= 0 && c->n_ops < c->max_stamps / 2) {
        c->op_start[c->n_ops] = start;
        c->op_end[c->n_ops] = end;
        c->n_ops++;
    }
    return 0;
}

int cpt_nccl_allreduce_avg(cpt_nccl *c, float *buf, size_t count, cpt_err *err) {
    return allreduce(c, buf, count, ncclAvg, err);
}

int cpt_nccl_allreduce_sum(cpt_nccl *c, float *buf, size_t count, cpt_err *err) {
    return allreduce(c, buf, count, ncclSum, err);
}

int cpt_nccl_broadcast(cpt_nccl *c, void *buf, size_t bytes, int root, cpt_err *err) {
    cudaError_t e;
    if ((e = cudaEventRecord(c->compute_done, c->ctx->stream)) != cudaSuccess ||
        (e = cudaStreamWaitEvent(c->comm_stream, c->compute_done, 0)) != cudaSuccess)
        return cpt_cuda_err(err, "%s: ordering the broadcast after the compute stream failed: %s", c->where,
                            cudaGetErrorString(e));
    ncclResult_t r = c->api.broadcast(buf, buf, bytes, ncclUint8, root, c->comm, c->comm_stream);
    if (r != ncclSuccess && r != ncclInProgress) return nccl_fail(c, "ncclBroadcast", r, err);
    return settle(c, "ncclBroadcast", r, 600.0, err);
}

static int after_compute(cpt_nccl *c, const char *what, cpt_err *err) {
    cudaError_t e;
    if ((e = cudaEventRecord(c->compute_done, c->ctx->stream)) != cudaSuccess ||
        (e = cudaStreamWaitEvent(c->comm_stream, c->compute_done, 0)) != cudaSuccess)
        return cpt_cuda_err(err, "%s: ordering the %s after the compute stream failed: %s", c->where, what,
                            cudaGetErrorString(e));
    return 0;
}

int cpt_nccl_reduce_scatter(cpt_nccl *c, const float *send, float *recv, size_t shard, int average, cpt_err *err) {
    if (after_compute(c, "reduce-scatter", err)) return -1;
    ncclResult_t r = c->api.reduce_scatter(send, recv, shard, ncclFloat32, average ? ncclAvg : ncclSum, c->comm,
                                           c->comm_stream);
    if (r != ncclSuccess && r != ncclInProgress) return nccl_fail(c, "ncclReduceScatter", r, err);
    return settle(c, "ncclReduceScatter", r, 600.0, err);
}

int cpt_nccl_all_gather(cpt_nccl *c, const float *send, float *recv, size_t shard, cpt_err *err) {
    if (after_compute(c, "all-gather", err)) return -1;
    ncclResult_t r = c->api.all_gather(send, recv, shard, ncclFloat32, c->comm, c->comm_stream);
    if (r != ncclSuccess && r != ncclInProgress) return nccl_fail(c, "ncclAllGather", r, err);
    return settle(c, "ncclAllGather", r, 600.0, err);
}

int cpt_nccl_join(cpt_nccl *c, cpt_err *err) {
    cudaError_t e;
    if ((e = cudaEventRecord(c->comm_done, c->comm_stream)) != cudaSuccess ||
        (e = cudaStreamWaitEvent(c->ctx->stream, c->comm_done, 0)) != cudaSuccess)
        return cpt_cuda_err(err, "%s: joining the comm stream failed: %s", c->where, cudaGetErrorString(e));
    return 0;
}

int cpt_nccl_sync(cpt_nccl *c, cpt_err *err) {
    cudaError_t e = cudaStreamSynchronize(c->comm_stream);
    ncclResult_t a = ncclSuccess;
    if (c->api.get_async_error(c->comm, &a) == ncclSuccess && a != ncclSuccess && a != ncclInProgress)
        return nccl_fail(c, "an all-reduce", a, err);
    if (e != cudaSuccess) return cpt_cuda_err(err, "%s: comm stream: %s", c->where, cudaGetErrorString(e));
    return 0;
}

int cpt_nccl_timing(cpt_nccl *c, int on, int max_stamps, cpt_err *err) {
    for (int i = 0; i < c->n_stamps; i++) cudaEventDestroy(c->stamps[i]);
    free(c->stamps);
    free(c->op_start);
    free(c->op_end);
    c->stamps = NULL;
    c->op_start = c->op_end = NULL;
    c->n_stamps = c->max_stamps = c->n_ops = 0;
    if (!on) return 0;
    c->stamps = (cudaEvent_t *)calloc((size_t)max_stamps, sizeof *c->stamps);
    c->op_start = (int *)calloc((size_t)max_stamps / 2 + 1, sizeof(int));
    c->op_end = (int *)calloc((size_t)max_stamps / 2 + 1, sizeof(int));
    if (!c->stamps || !c->op_start || !c->op_end)
        return cpt_cuda_err(err, "%s: out of memory for %d timing events", c->where, max_stamps);
    c->max_stamps = max_stamps;
    return 0;
}

int cpt_nccl_stamp(cpt_nccl *c) { return stamp_on(c, c->ctx->stream); }

int cpt_nccl_timed_ops(const cpt_nccl *c) { return c->n_ops; }

void cpt_nccl_op_stamps(const cpt_nccl *c, int k, int *start, int *end) {
    *start = k >= 0 && k < c->n_ops ? c->op_start[k] : -1;
    *end = k >= 0 && k < c->n_ops ? c->op_end[k] : -1;
}

float cpt_nccl_stamp_ms(cpt_nccl *c, int i) {
    if (i < 0 || i >= c->n_stamps || c->n_stamps == 0) return -1.0f;
    float ms = -1.0f;
    if (cudaEventElapsedTime(&ms, c->stamps[0], c->stamps[i]) != cudaSuccess) return -1.0f;
    return ms;
}
