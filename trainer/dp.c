/* Data-parallel gradient averaging: bucket planning, the rank bootstrap of the NCCL unique id, and the per-step
 * bookkeeping that launches each bucket's all-reduce as soon as the backward has finished it (see dp.h). */
#include "trainer/dp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/bootstrap.h"
#include "core/fs.h"
#include "model/cuda_model.h"
#include "model/model.h"
#include "queue/redis.h"
#include "trainer/dp_mpi.h"
#ifdef CPT_HAVE_CUDA
#include "kernels/cuda/nccl_dp.h"
#endif

#define UID_BYTES 128

/* ---- planning ---- */

int cpt_dp_plan_buckets(const size_t *numel, const size_t *offsets, size_t n_params, size_t bucket_bytes,
                        cpt_dp_plan *plan, cpt_err *err) {
    memset(plan, 0, sizeof *plan);
    if (n_params == 0) return cpt_errf(err, "dp: no parameters to plan buckets for");
    if (bucket_bytes < sizeof(float)) bucket_bytes = sizeof(float);
    size_t *off = malloc(n_params * sizeof *off);
    plan->bucket_of_param = malloc(n_params * sizeof *plan->bucket_of_param);
    plan->buckets = malloc(n_params * sizeof *plan->buckets); /* at most one bucket per param */
    if (!off || !plan->bucket_of_param || !plan->buckets) {
        free(off);
        cpt_dp_plan_free(plan);
        return cpt_errf(err, "dp: out of memory planning %zu params", n_params);
    }
    size_t acc = 0;
    for (size_t i = 0; i < n_params; i++) {
        off[i] = offsets ? offsets[i] : acc;
        int bad = numel[i] == 0 ? cpt_errf(err, "dp: param %zu is empty", i) : 0;
        if (!bad && i > 0 && off[i] < off[i - 1] + numel[i - 1])
            bad = cpt_errf(err, "dp: param %zu at offset %zu overlaps or precedes param %zu (offset %zu, %zu floats)",
                           i, off[i], i - 1, off[i - 1], numel[i - 1]);
        if (bad) {
            free(off);
            cpt_dp_plan_free(plan);
            return -1;
        }
        acc = off[i] + numel[i];
    }
    plan->n_params = n_params;
    size_t target = bucket_bytes / sizeof(float);
    size_t i = n_params;
    while (i > 0) {
        /* A bucket grows downward from param `last` until it holds target floats. */
        size_t last = i - 1, first = last, count = numel[last];
        while (first > 0 && count < target) {
            if (numel[first - 1] >= target) break; /* a big param gets a bucket of its own */
            first--;
            count = off[last] + numel[last] - off[first];
        }
        cpt_dp_bucket *b = &plan->buckets[plan->n_buckets];
        b->first_param = first;
        b->last_param = last;
        b->offset = off[first];
        b->count = off[last] + numel[last] - off[first];
        for (size_t p = first; p <= last; p++) plan->bucket_of_param[p] = plan->n_buckets;
        plan->n_buckets++;
        i = first;
    }
    free(off);
    return 0;
}

void cpt_dp_plan_free(cpt_dp_plan *plan) {
    free(plan->buckets);
    free(plan->bucket_of_param);
    memset(plan, 0, sizeof *plan);
}

/* ---- the group ---- */

struct cpt_dp {
    cpt_dp_opts opts;
    char boot_name[16];
    cpt_bootstrap boot;
    int boot_open;
    int rank, size, use_nccl;
    unsigned char uid[UID_BYTES];
    cpt_dp_plan plan;
    int attached;
    float *grads;
    cpt_model *model; /* cpt_dp_attach_model's, or NULL */
    void *nccl;       /* cpt_nccl * */
    void *cuda_ctx;   /* the model's context (cpt_cuda_ctx *) */
    float *host_sums; /* device scratch of cpt_dp_sum_host */
    void *stage;      /* device staging of cpt_dp_sum_floats / cpt_dp_bcast_bytes */
    size_t stage_bytes;
    cpt_dp_mpi *mpi;  /* the MPI backend (CPU ranks), or NULL */
    /* per step */
    int sync;
    unsigned char *ready;   /* [n_params] */
    size_t *ready_count;    /* [n_buckets] params of each bucket ready */
    size_t next_bucket;     /* buckets [0, next_bucket) are launched */
    size_t overlapped, last_overlapped;
    cpt_err sticky;         /* a failure inside grads_ready, reported again by finish */
    int failed;
};

#ifdef CPT_HAVE_CUDA
/* Rank 0 publishes the id with SET ... PX (a stale key of an earlier launch expires; a fresh key per launch is
 * still the caller's part), the others poll GET until it appears. */
static int share_uid_redis(cpt_dp *dp, cpt_err *err) {
    const char *key = dp->opts.redis_key;
    if (!dp->opts.redis || !key || !*key) return cpt_errf(err, "dp: bootstrap redis needs a connection and a key");
    if (dp->rank == 0) {
        char px[32];
        snprintf(px, sizeof px, "%lld", (long long)(dp->opts.timeout_s * 1000 * 4));
        const char *argv[] = {"SET", key, (const char *)dp->uid, "PX", px};
        size_t lens[] = {3, strlen(key), UID_BYTES, 2, strlen(px)};
        redisReply *r = cpt_redis_command(dp->opts.redis, 5, argv, lens, key, 0, err);
        if (!r) return cpt_err_prefix(err, "dp rank 0: publishing the NCCL unique id: ");
        freeReplyObject(r);
        return 0;
    }
    double deadline = cpt_now() + dp->opts.timeout_s;
    for (;;) {
        const char *argv[] = {"GET", key};
        redisReply *r = cpt_redis_command(dp->opts.redis, 2, argv, NULL, key, 0, err);
        if (!r) return cpt_err_prefix(err, "dp rank %d: reading the NCCL unique id: ", dp->rank);
        int got = r->type == REDIS_REPLY_STRING;
        size_t len = got ? r->len : 0;
        if (got && len == UID_BYTES) memcpy(dp->uid, r->str, UID_BYTES);
        freeReplyObject(r);
        if (got && len != UID_BYTES)
            return cpt_errf(err, "dp rank %d: redis key %s holds %zu bytes, not a %d-byte NCCL unique id", dp->rank,
                            key, len, UID_BYTES);
        if (got) return 0;
        if (cpt_now() > deadline)
            return cpt_errf(err, "dp rank %d: waited %.0f s for rank 0 to publish the NCCL unique id at redis key %s",
                            dp->rank, dp->opts.timeout_s, key);
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

#endif

/* 1 for the MPI backend, 0 for NCCL, -1 with err for a name that is neither. */
static int wants_mpi(const cpt_dp_opts *o, cpt_err *err) {
    const char *b = o->backend && *o->backend ? o->backend : "auto";
    if (o->force_nccl || !strcmp(b, "nccl")) return 0;
    if (!strcmp(b, "mpi")) return 1;
    if (strcmp(b, "auto")) return cpt_errf(err, "dp: backend \"%s\" is not nccl, mpi or auto", b);
    /* the file and redis bootstraps exist only to hand out NCCL's unique id */
    const char *boot = o->bootstrap && *o->bootstrap ? o->bootstrap : "auto";
    if (!strcmp(boot, "file") || !strcmp(boot, "redis")) return 0;
#ifdef CPT_HAVE_CUDA
    return cpt_cuda_device_count() > 0 ? 0 : 1;
#else
    return 1;
#endif
}

/* CPU ranks: the launcher (mpirun, srun --mpi=pmix) announced the size; MPI gives rank and size. */
static cpt_dp *open_mpi(cpt_dp *dp, cpt_err *err) {
    snprintf(dp->boot_name, sizeof dp->boot_name, "mpi");
    dp->mpi = cpt_dp_mpi_open(&dp->rank, &dp->size, err);
    if (!dp->mpi) {
        free(dp);
        return NULL;
    }
    return dp;
}

cpt_dp *cpt_dp_new(const cpt_dp_opts *opts, cpt_err *err) {
    cpt_dp *dp = calloc(1, sizeof *dp);
    if (!dp) {
        cpt_errf(err, "dp: out of memory");
        return NULL;
    }
    if (opts) dp->opts = *opts;
    if (dp->opts.timeout_s <= 0) dp->opts.timeout_s = 300;
    if (!dp->opts.bucket_bytes) dp->opts.bucket_bytes = CPT_DP_BUCKET_BYTES_DEFAULT;
    const char *kind = dp->opts.bootstrap && *dp->opts.bootstrap ? dp->opts.bootstrap : "auto";
    dp->sync = 1;
    int mpi = wants_mpi(&dp->opts, err);
    if (mpi < 0) {
        free(dp);
        return NULL;
    }
    /* One rank takes the path below whatever the backend: no library, the bootstrap's view of rank 0 of 1. */
    if (mpi && cpt_dp_mpi_env_size() > 1) return open_mpi(dp, err);
    int is_redis = !strcmp(kind, "redis");
    if (is_redis) {
        /* Ranks from the variables the file transport reads; the id travels through Redis, not a folder. */
        dp->boot.kind = CPT_BOOT_FILE;
        dp->boot.rank = cpt_boot_env_int("CPT_RANK", 0);
        dp->boot.size = cpt_boot_env_int("CPT_WORLD_SIZE", 1);
        if (dp->boot.rank < 0 || dp->boot.size < 1 || dp->boot.rank >= dp->boot.size) {
            cpt_errf(err, "dp: bootstrap redis: CPT_RANK=%d is outside CPT_WORLD_SIZE=%d", dp->boot.rank,
                     dp->boot.size);
            free(dp);
            return NULL;
        }
    } else {
        if (cpt_boot_init(&dp->boot, kind, dp->opts.boot_dir, err) != 0) {
            cpt_err_prefix(err, "dp: bootstrap %s: ", kind);
            free(dp);
            return NULL;
        }
        dp->boot_open = 1;
    }
    dp->boot.timeout_s = dp->opts.timeout_s;
    snprintf(dp->boot_name, sizeof dp->boot_name, "%s",
             is_redis ? "redis" : dp->boot.kind == CPT_BOOT_PMIX ? "pmix" : "file");
    dp->rank = dp->boot.rank;
    dp->size = dp->boot.size;
    dp->use_nccl = dp->size > 1 || dp->opts.force_nccl;
    if (!dp->use_nccl) return dp;
#ifdef CPT_HAVE_CUDA
    if (dp->rank == 0 && cpt_nccl_unique_id(dp->uid, err) != 0) {
        cpt_err_prefix(err, "dp rank 0/%d (bootstrap %s): ", dp->size, dp->boot_name);
        cpt_dp_free(dp);
        return NULL;
    }
    int rc = is_redis ? share_uid_redis(dp, err) : cpt_boot_share(&dp->boot, "cpt-dp-uid", dp->uid, UID_BYTES, err);
    if (rc != 0) {
        cpt_err_prefix(err, "dp rank %d/%d (bootstrap %s): sharing the NCCL unique id: ", dp->rank, dp->size,
                       dp->boot_name);
        cpt_dp_free(dp);
        return NULL;
    }
    return dp;
#else
    cpt_errf(err, "dp: %d ranks need NCCL, but cpt was built without CUDA", dp->size);
    cpt_dp_free(dp);
    return NULL;
#endif
}

void cpt_dp_free(cpt_dp *dp) {
    if (!dp) return;
#ifdef CPT_HAVE_CUDA
    cpt_nccl_free(dp->nccl);
    cpt_cuda_free(dp->host_sums);
    cpt_cuda_free(dp->stage);
#endif
    cpt_dp_mpi_close(dp->mpi);
    if (dp->boot_open) cpt_boot_finalize(&dp->boot);
    cpt_dp_plan_free(&dp->plan);
    free(dp->ready);
    free(dp->ready_count);
    free(dp);
}

void cpt_dp_abort(cpt_dp *dp, int status, const cpt_err *err) {
    if (!dp || !dp->mpi) return;
    fprintf(stderr, "dp rank %d/%d: ending every rank (MPI_Abort, status %d)%s%s\n", dp->rank, dp->size, status,
            err && err->msg[0] ? ": " : "", err && err->msg[0] ? err->msg : "");
    cpt_dp_mpi_abort(dp->mpi, status);
}

int cpt_dp_rank(const cpt_dp *dp) { return dp->rank; }
int cpt_dp_size(const cpt_dp *dp) { return dp->size; }
const char *cpt_dp_bootstrap_name(const cpt_dp *dp) { return dp->boot_name; }
int cpt_dp_uses_nccl(const cpt_dp *dp) { return dp->use_nccl; }
int cpt_dp_backend(const cpt_dp *dp) {
    return dp->mpi ? CPT_DP_BACKEND_MPI : dp->use_nccl ? CPT_DP_BACKEND_NCCL : CPT_DP_BACKEND_NONE;
}
const char *cpt_dp_library(const cpt_dp *dp) { return dp->mpi ? cpt_dp_mpi_version(dp->mpi) : ""; }
const unsigned char *cpt_dp_unique_id(const cpt_dp *dp) { return dp->uid; }
const cpt_dp_plan *cpt_dp_get_plan(const cpt_dp *dp) { return &dp->plan; }
size_t cpt_dp_buckets_overlapped(const cpt_dp *dp) { return dp->last_overlapped; }
void *cpt_dp_nccl(cpt_dp *dp) { return dp->nccl; }
void cpt_dp_set_sync(cpt_dp *dp, int sync) { dp->sync = sync; }

int cpt_dp_device(const cpt_dp *dp, int device_count) {
    if (device_count <= 0) return 0;
    /* Slurm gives each task its local index; with per-task GPU binding the task sees one device and uses 0. */
    int local = cpt_boot_env_int("PMIX_LOCAL_RANK", dp->rank);
    local = cpt_boot_env_int("CPT_LOCAL_RANK", cpt_boot_env_int("SLURM_LOCALID", local));
    return local % device_count;
}

static void reset_step(cpt_dp *dp) {
    memset(dp->ready, 0, dp->plan.n_params);
    memset(dp->ready_count, 0, dp->plan.n_buckets * sizeof *dp->ready_count);
    dp->next_bucket = 0;
    dp->overlapped = 0;
}

int cpt_dp_attach(cpt_dp *dp, void *cuda_ctx, float *dev_grads, const size_t *numel, const size_t *offsets,
                  size_t n_params, cpt_err *err) {
    if (dp->attached) return cpt_errf(err, "dp: already attached to a model");
    if (cpt_dp_plan_buckets(numel, offsets, n_params, dp->opts.bucket_bytes, &dp->plan, err) != 0) return -1;
    dp->ready = calloc(n_params, 1);
    dp->ready_count = calloc(dp->plan.n_buckets, sizeof *dp->ready_count);
    if (!dp->ready || !dp->ready_count) return cpt_errf(err, "dp: out of memory");
    dp->grads = dev_grads;
    if (dp->use_nccl) {
#ifdef CPT_HAVE_CUDA
        if (!cuda_ctx || !dev_grads) return cpt_errf(err, "dp: attach needs the model's CUDA context and gradients");
        char where[128];
        snprintf(where, sizeof where, "dp rank %d/%d (bootstrap %s)", dp->rank, dp->size, dp->boot_name);
        dp->nccl = cpt_nccl_new(cuda_ctx, dp->uid, dp->rank, dp->size, dp->opts.timeout_s, where, err);
        if (!dp->nccl) return -1;
        dp->cuda_ctx = cuda_ctx;
#else
        (void)cuda_ctx;
        return cpt_errf(err, "dp: built without CUDA");
#endif
    }
    dp->attached = 1;
    reset_step(dp);
    return 0;
}

int cpt_dp_attach_model(cpt_dp *dp, cpt_model *m, cpt_err *err) {
    size_t n = cpt_model_num_params(m);
    if (n == 0) return cpt_errf(err, "dp: the model has no parameters");
    size_t *numel = malloc(n * sizeof *numel), *off = malloc(n * sizeof *off);
    if (!numel || !off) {
        free(numel), free(off);
        return cpt_errf(err, "dp: out of memory");
    }
    /* Device offsets equal host offsets: one allocation in cpt_model_param order on both sides. */
    float *host_base = cpt_model_grads(m);
    for (size_t i = 0; i < n; i++) {
        cpt_param *p = cpt_model_param(m, i);
        numel[i] = p->numel;
        off[i] = (size_t)(p->grad - host_base);
    }
    void *ctx = NULL;
    float *dev_grads = NULL;
    cpt_cuda_param_view v;
    if (cpt_model_on_cuda(m) && cpt_model_cuda_param(m, cpt_model_param(m, 0), &v) == 0) {
        ctx = v.ctx;
        dev_grads = v.grad - off[0];
    } else if (dp->use_nccl) {
        free(numel), free(off);
        return cpt_errf(err, "dp rank %d/%d: data parallel over NCCL needs the model on the GPU (train.device cuda)",
                        dp->rank, dp->size);
    } else {
        dev_grads = host_base; /* the MPI backend averages the host buffer */
    }
    if (dp->mpi && ctx) {
        free(numel), free(off);
        return cpt_errf(err, "dp rank %d/%d: CPU ranks (MPI) average host gradients, but the model is on the GPU: GPU "
                        "ranks use NCCL (dp backend nccl)", dp->rank, dp->size);
    }
    int rc = cpt_dp_attach(dp, ctx, dev_grads, numel, off, n, err);
    free(numel), free(off);
    if (rc == 0) dp->model = m;
    return rc;
}

int cpt_dp_grads_ready_cb(void *dp, size_t first_param, size_t last_param, cpt_err *err) {
    return cpt_dp_grads_ready(dp, first_param, last_param, err);
}

static int launch_ready_buckets(cpt_dp *dp, int all, cpt_err *err) {
    (void)err; /* used with CUDA only */
    while (dp->next_bucket < dp->plan.n_buckets) {
        const cpt_dp_bucket *b = &dp->plan.buckets[dp->next_bucket];
        if (!all && dp->ready_count[dp->next_bucket] < b->last_param - b->first_param + 1) break;
#ifdef CPT_HAVE_CUDA
        if (dp->nccl && cpt_nccl_allreduce_avg(dp->nccl, dp->grads + b->offset, b->count, err) != 0) return -1;
#endif
        dp->next_bucket++;
    }
    return 0;
}

int cpt_dp_grads_ready(cpt_dp *dp, size_t first_param, size_t last_param, cpt_err *err) {
    if (!dp->sync || !dp->attached) return 0;
    if (dp->failed) {
        *err = dp->sticky;
        return -1;
    }
    if (first_param > last_param || last_param >= dp->plan.n_params)
        return cpt_errf(err, "dp: grads_ready(%zu, %zu) is outside the %zu params", first_param, last_param,
                        dp->plan.n_params);
    for (size_t p = first_param; p <= last_param; p++) {
        if (dp->ready[p]) return cpt_errf(err, "dp: param %zu reported ready twice in one step", p);
        size_t bk = dp->plan.bucket_of_param[p];
        if (bk < dp->next_bucket)
            return cpt_errf(err, "dp: param %zu reported ready after its bucket %zu was all-reduced", p, bk);
        dp->ready[p] = 1;
        dp->ready_count[bk]++;
    }
    size_t before = dp->next_bucket;
    if (launch_ready_buckets(dp, 0, err) != 0) {
        dp->sticky = *err;
        dp->failed = 1;
        return -1;
    }
    dp->overlapped += dp->next_bucket - before;
    return 0;
}

static int average_host(cpt_dp *dp, float *buf, size_t n, cpt_err *err) {
    if (cpt_dp_mpi_sum(dp->mpi, buf, n, err)) return -1;
    float inv = 1.0f / (float)dp->size;
    for (size_t i = 0; i < n; i++) buf[i] *= inv;
    return 0;
}

int cpt_dp_finish(cpt_dp *dp, cpt_err *err) {
    if (!dp->sync || !dp->attached) return 0;
    if (dp->failed) {
        *err = dp->sticky;
        return -1;
    }
    /* a rank that ran no backward this step still holds a deferred zero_grad: all-reduce zeros, not stale values */
    if (dp->model && cpt_model_grads_settle(dp->model, err)) return -1;
    if (launch_ready_buckets(dp, 1, err) != 0) return -1;
#ifdef CPT_HAVE_CUDA
    if (dp->nccl && cpt_nccl_join(dp->nccl, err) != 0) return -1;
#endif
    if (dp->mpi) {
        /* One all-reduce of the span the plan covers: bucket 0 holds the last params, the last bucket the first. */
        const cpt_dp_bucket *hi = &dp->plan.buckets[0], *lo = &dp->plan.buckets[dp->plan.n_buckets - 1];
        if (average_host(dp, dp->grads + lo->offset, hi->offset + hi->count - lo->offset, err)) return -1;
        dp->overlapped = 0;
    }
    dp->last_overlapped = dp->overlapped;
    reset_step(dp);
    return 0;
}

int cpt_dp_sum_host(cpt_dp *dp, float *vals, int n, cpt_err *err) {
    if (n < 0 || n > CPT_DP_HOST_SUM_MAX) return cpt_errf(err, "dp: %d host values to sum (at most %d)", n,
                                                         CPT_DP_HOST_SUM_MAX);
    if (dp->mpi) return n ? cpt_dp_mpi_sum(dp->mpi, vals, (size_t)n, err) : 0;
    if (!dp->nccl || n == 0) return 0; /* one rank: the sums are the values */
#ifdef CPT_HAVE_CUDA
    if (!dp->host_sums) {
        dp->host_sums = cpt_cuda_malloc(CPT_DP_HOST_SUM_MAX * sizeof(float), "dp host sums", err);
        if (!dp->host_sums) return -1;
    }
    /* Through the same communicator and comm stream as the gradient buckets, so its order among the collectives
     * is the same on every rank; the copies synchronise the compute stream, the join orders the comm stream. */
    if (cpt_cuda_memcpy_h2d(dp->cuda_ctx, dp->host_sums, vals, (size_t)n * sizeof(float), err) ||
        cpt_nccl_allreduce_avg(dp->nccl, dp->host_sums, (size_t)n, err) || cpt_nccl_join(dp->nccl, err) ||
        cpt_cuda_memcpy_d2h(dp->cuda_ctx, vals, dp->host_sums, (size_t)n * sizeof(float), err))
        return cpt_err_prefix(err, "dp rank %d/%d: summing %d host values", dp->rank, dp->size, n);
    for (int i = 0; i < n; i++) vals[i] *= (float)dp->size;
    return 0;
#else
    (void)vals;
    return cpt_errf(err, "dp: built without CUDA");
#endif
}

#ifdef CPT_HAVE_CUDA
/* The NCCL side of the host collectives: a device buffer of at least bytes on the attached model's context. */
static void *staging(cpt_dp *dp, size_t bytes, const char *what, cpt_err *err) {
    if (!dp->nccl || !dp->cuda_ctx) {
        cpt_errf(err, "dp rank %d/%d: %s over NCCL before cpt_dp_attach: attach the model first", dp->rank, dp->size,
                 what);
        return NULL;
    }
    if (bytes > dp->stage_bytes) {
        cpt_cuda_free(dp->stage);
        dp->stage_bytes = 0;
        if (!(dp->stage = cpt_cuda_malloc(bytes, "dp staging", err))) return NULL;
        dp->stage_bytes = bytes;
    }
    return dp->stage;
}
#endif

int cpt_dp_sum_floats(cpt_dp *dp, float *host, size_t n, cpt_err *err) {
    if (n == 0) return 0;
    if (dp->mpi) return cpt_dp_mpi_sum(dp->mpi, host, n, err);
    if (!dp->use_nccl) return 0; /* one rank: the sums are the values */
#ifdef CPT_HAVE_CUDA
    float *d = staging(dp, n * sizeof(float), "summing floats", err);
    /* The copies synchronise the compute stream; the join orders the comm stream before the copy back. */
    if (!d || cpt_cuda_memcpy_h2d(dp->cuda_ctx, d, host, n * sizeof(float), err) ||
        cpt_nccl_allreduce_sum(dp->nccl, d, n, err) || cpt_nccl_join(dp->nccl, err) ||
        cpt_cuda_memcpy_d2h(dp->cuda_ctx, host, d, n * sizeof(float), err))
        return cpt_err_prefix(err, "dp rank %d/%d (nccl): summing %zu floats: ", dp->rank, dp->size, n);
    return 0;
#else
    (void)host;
    return cpt_errf(err, "dp: built without CUDA");
#endif
}

int cpt_dp_bcast_bytes(cpt_dp *dp, void *host, size_t n, cpt_err *err) {
    if (n == 0) return 0;
    if (dp->mpi) return cpt_dp_mpi_bcast(dp->mpi, host, n, err);
    if (!dp->use_nccl) return 0;
#ifdef CPT_HAVE_CUDA
    void *d = staging(dp, n, "broadcasting bytes", err);
    if (!d || cpt_cuda_memcpy_h2d(dp->cuda_ctx, d, host, n, err) || cpt_nccl_broadcast(dp->nccl, d, n, 0, err) ||
        cpt_nccl_join(dp->nccl, err) || cpt_cuda_memcpy_d2h(dp->cuda_ctx, host, d, n, err))
        return cpt_err_prefix(err, "dp rank %d/%d (nccl): broadcasting %zu bytes from rank 0: ", dp->rank, dp->size, n);
    return 0;
#else
    (void)host;
    return cpt_errf(err, "dp: built without CUDA");
#endif
}

size_t cpt_dp_shard_floats(const cpt_dp *dp, size_t n) { return (n + (size_t)dp->size - 1) / (size_t)dp->size; }

int cpt_dp_reduce_scatter(cpt_dp *dp, const float *full, float *shard, size_t shard_n, int average, cpt_err *err) {
    if (shard_n == 0) return 0;
    if (dp->mpi) {
        if (cpt_dp_mpi_reduce_scatter(dp->mpi, full, shard, shard_n, err)) return -1;
        if (average)
            for (size_t i = 0; i < shard_n; i++) shard[i] *= 1.0f / (float)dp->size;
        return 0;
    }
    if (!dp->use_nccl) {
        if (shard != full) memmove(shard, full, shard_n * sizeof(float));
        return 0;
    }
#ifdef CPT_HAVE_CUDA
    if (!dp->nccl) return cpt_errf(err, "dp rank %d/%d: reduce-scatter over NCCL before cpt_dp_attach", dp->rank,
                                   dp->size);
    if (cpt_nccl_reduce_scatter(dp->nccl, full, shard, shard_n, average, err) || cpt_nccl_join(dp->nccl, err))
        return cpt_err_prefix(err, "dp rank %d/%d (nccl): reduce-scatter of %zu floats a rank: ", dp->rank, dp->size,
                              shard_n);
    return 0;
#else
    return cpt_errf(err, "dp: built without CUDA");
#endif
}

int cpt_dp_all_gather(cpt_dp *dp, const float *shard, float *full, size_t shard_n, cpt_err *err) {
    if (shard_n == 0) return 0;
    if (dp->mpi) return cpt_dp_mpi_all_gather(dp->mpi, shard, full, shard_n, err);
    if (!dp->use_nccl) {
        if (shard != full) memmove(full, shard, shard_n * sizeof(float));
        return 0;
    }
#ifdef CPT_HAVE_CUDA
    if (!dp->nccl) return cpt_errf(err, "dp rank %d/%d: all-gather over NCCL before cpt_dp_attach", dp->rank,
                                   dp->size);
    if (cpt_nccl_all_gather(dp->nccl, shard, full, shard_n, err) || cpt_nccl_join(dp->nccl, err))
        return cpt_err_prefix(err, "dp rank %d/%d (nccl): all-gather of %zu floats a rank: ", dp->rank, dp->size,
                              shard_n);
    return 0;
#else
    return cpt_errf(err, "dp: built without CUDA");
#endif
}

int cpt_dp_allreduce_model_grads(cpt_dp *dp, cpt_model *m, cpt_err *err) {
    if (!dp->mpi && !dp->use_nccl) return 0;
    size_t n = cpt_model_numel(m);
    if (n == 0) return 0;
    /* a deferred zero_grad (a rank without a backward this step) becomes zeros, not stale values */
    if (cpt_model_grads_settle(m, err)) return -1;
    if (dp->mpi) {
        if (cpt_model_on_cuda(m))
            return cpt_errf(err, "dp rank %d/%d: CPU ranks (MPI) average host gradients, but the model is on the GPU",
                            dp->rank, dp->size);
        return average_host(dp, cpt_model_grads(m), n, err);
    }
#ifdef CPT_HAVE_CUDA
    cpt_cuda_param_view v;
    cpt_param *p0 = cpt_model_param(m, 0);
    if (!cpt_model_on_cuda(m) || cpt_model_cuda_param(m, p0, &v) != 0)
        return cpt_errf(err, "dp rank %d/%d: data parallel over NCCL needs the model on the GPU (train.device cuda)",
                        dp->rank, dp->size);
    if (!dp->nccl) return cpt_errf(err, "dp rank %d/%d: averaging a model's gradients over NCCL before cpt_dp_attach",
                                   dp->rank, dp->size);
    float *dev = v.grad - (p0->grad - cpt_model_grads(m));
    /* The model may have its own stream (a critic): its backward is waited for on the host, then the comm stream
     * runs the all-reduce and is waited for too, so the call is blocking for any model. */
    if (cpt_model_wait(m, err) || cpt_nccl_allreduce_avg(dp->nccl, dev, n, err) || cpt_nccl_sync(dp->nccl, err))
        return cpt_err_prefix(err, "dp rank %d/%d (nccl): averaging %zu gradients: ", dp->rank, dp->size, n);
    return 0;
#else
    return cpt_errf(err, "dp: built without CUDA");
#endif
}
