/* Data-parallel training: every rank runs the same step on its own micro-batch, and the fp32 gradients are
 * averaged over the ranks: GPU ranks with NCCL all-reduces that overlap the backward pass, CPU ranks with one
 * Open MPI all-reduce of the host gradients per step (trainer/dp_mpi.h: a plugin loaded only when needed).
 *
 * Backends (opts.backend): "nccl" for GPU ranks, "mpi" for CPU ranks (started by `mpirun -n N` or
 * `srun --mpi=pmix -n N`; rank and size come from MPI, which does its own PMIx; the bootstrap option is not used),
 * "auto" nccl with an explicit file or redis bootstrap (they only hand out NCCL's id) or when the build has CUDA
 * and a GPU is visible, else mpi. One rank never loads either library.
 *
 * Setup, in this order:
 *   cpt_dp_new      rank and world size from core/bootstrap.h ("auto": PMIx under `srun --mpi=pmix`, else
 *                   the file transport with CPT_RANK / CPT_WORLD_SIZE), or "redis" (ranks from the same variables,
 *                   the NCCL unique id published by rank 0 under a Redis key, for runs on several hosts outside
 *                   srun); rank 0 draws the unique id and shares it. No CUDA is touched yet.
 *   cpt_dp_device   the GPU this rank should use (SLURM_LOCALID / CPT_LOCAL_RANK, else the rank), for the model's
 *                   CUDA context.
 *   cpt_dp_attach   joins the NCCL communicator on that context's device (with a timeout; errors name the rank
 *                   and the bootstrap) and plans the gradient buckets over the flat gradient buffer.
 * Each optimizer step:
 *   cpt_dp_grads_ready(dp, first, last)  from the backward, as soon as params first..last (cpt_model_param
 *                   indices) hold their final gradient for the step; once every param of the next bucket is ready,
 *                   its all-reduce is queued on the comm stream after the compute stream's work so far.
 *   cpt_dp_finish   queues the buckets not yet launched, then makes the compute stream wait for the comm stream:
 *                   call it before clipping and the optimizer. Alone (no grads_ready calls) it is a correct,
 *                   non-overlapped all-reduce.
 * With one rank (and force_nccl off) all of this is bookkeeping only: NCCL is never loaded or called.
 *
 * Buckets: the params are walked from the last to the first (the backward's order), adding whole params to a
 * bucket until it holds bucket_bytes; a param larger than that is a bucket of its own. Buckets are contiguous
 * ranges of the flat buffer, launched strictly in plan order, so every rank issues the same collectives in the same
 * order (NCCL's requirement) whatever the order of grads_ready calls. */
#ifndef CPT_TRAINER_DP_H
#define CPT_TRAINER_DP_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"

/* ---- bucket planning (no GPU) ---- */

typedef struct cpt_dp_bucket {
    size_t first_param, last_param; /* inclusive, cpt_model_param order */
    size_t offset, count;           /* in floats, within the flat gradient buffer */
} cpt_dp_bucket;

typedef struct cpt_dp_plan {
    size_t n_params, n_buckets;
    cpt_dp_bucket *buckets;   /* bucket 0 holds the last params (the first ready in backward) */
    size_t *bucket_of_param;  /* [n_params] */
} cpt_dp_plan;

/* offsets may be NULL: params packed back to back in index order. Errors: no params, an empty param, params that
 * overlap or run backwards. */
int cpt_dp_plan_buckets(const size_t *numel, const size_t *offsets, size_t n_params, size_t bucket_bytes,
                        cpt_dp_plan *plan, cpt_err *err);
void cpt_dp_plan_free(cpt_dp_plan *plan);

/* ---- the data-parallel group ---- */

#define CPT_DP_BUCKET_BYTES_DEFAULT (32u << 20)

typedef struct cpt_redis cpt_redis;

typedef struct cpt_dp_opts {
    const char *bootstrap;  /* "auto" (default), "pmix", "file" or "redis" */
    const char *boot_dir;   /* file transport: a folder every rank sees (RUN_DIR/bootstrap) */
    cpt_redis *redis;       /* "redis": an open connection */
    const char *redis_key;  /* "redis": e.g. cpt:{run}:dp_uid:{attempt}; a fresh key per launch */
    double timeout_s;       /* bootstrap waits and NCCL init; 0: 300 */
    size_t bucket_bytes;    /* 0: CPT_DP_BUCKET_BYTES_DEFAULT */
    int force_nccl;         /* a communicator even for one rank (tests and benches of the NCCL path) */
    const char *backend;    /* "nccl", "mpi" or "auto" (NULL, ""): see above */
} cpt_dp_opts;

typedef struct cpt_dp cpt_dp;

cpt_dp *cpt_dp_new(const cpt_dp_opts *opts, cpt_err *err);
/* The end of a group that went well: over MPI it finalises, which waits for every rank to get there. */
void cpt_dp_free(cpt_dp *dp);
/* The end of a rank that failed while the others may be inside a collective (they would wait for it forever, and
 * MPI's finalise would wait for them): over MPI it prints err (when given) and ends every rank of the job
 * (MPI_Abort with status; mpirun and srun then exit non-zero) and does not return; otherwise it returns and the
 * caller exits non-zero (srun --kill-on-bad-exit and `cpt local-ranks` end the other ranks). Call it on the
 * failure path before cpt_dp_free. */
void cpt_dp_abort(cpt_dp *dp, int status, const cpt_err *err);
int cpt_dp_rank(const cpt_dp *dp);
int cpt_dp_size(const cpt_dp *dp);
const char *cpt_dp_bootstrap_name(const cpt_dp *dp); /* "pmix", "file", "redis", or "mpi" (MPI's own) */
/* The CUDA device index this rank should use, given how many the process sees. */
int cpt_dp_device(const cpt_dp *dp, int device_count);
/* The NCCL unique id every rank holds after cpt_dp_new (128 bytes; zeros without NCCL), for logs and tests. */
const unsigned char *cpt_dp_unique_id(const cpt_dp *dp);
/* 1 when all-reduces go through NCCL (world > 1 or force_nccl). */
int cpt_dp_uses_nccl(const cpt_dp *dp);
/* 1 when the group talks over MPI (CPU ranks), 2 over NCCL, 0 one rank without a library. */
#define CPT_DP_BACKEND_NONE 0
#define CPT_DP_BACKEND_MPI 1
#define CPT_DP_BACKEND_NCCL 2
int cpt_dp_backend(const cpt_dp *dp);
/* The MPI library's version string, or "" for the other backends (logs). */
const char *cpt_dp_library(const cpt_dp *dp);

/* cuda_ctx is a cpt_cuda_ctx * (kernels/cuda/cuda_ops.h) whose stream runs the backward; dev_grads the flat
 * fp32 gradient buffer on its device; numel/offsets as cpt_dp_plan_buckets. */
int cpt_dp_attach(cpt_dp *dp, void *cuda_ctx, float *dev_grads, const size_t *numel, const size_t *offsets,
                  size_t n_params, cpt_err *err);
const cpt_dp_plan *cpt_dp_get_plan(const cpt_dp *dp);
/* The same for a model: its CUDA context, device gradient buffer and parameter offsets (cpt_model_use_cuda first);
 * a CPU model with the MPI backend (its host gradient buffer) or for one rank without NCCL. */
struct cpt_model;
int cpt_dp_attach_model(cpt_dp *dp, struct cpt_model *m, cpt_err *err);

/* sync = 0 for the micro-batches of gradient accumulation that do not end a step: grads_ready and finish do
 * nothing until sync is set again. */
void cpt_dp_set_sync(cpt_dp *dp, int sync);
int cpt_dp_grads_ready(cpt_dp *dp, size_t first_param, size_t last_param, cpt_err *err);
/* cpt_dp_grads_ready with the group as a void *, the shape of a callback the model's backward can hold. */
int cpt_dp_grads_ready_cb(void *dp, size_t first_param, size_t last_param, cpt_err *err);
/* MPI backend: one blocking all-reduce (average) of the whole host gradient buffer; grads_ready is bookkeeping. */
int cpt_dp_finish(cpt_dp *dp, cpt_err *err);
/* Sums n (<= CPT_DP_HOST_SUM_MAX) host floats over the ranks, in place, blocking: the per-step agreements of a
 * trainer (a stop request seen by any rank stops every rank at the same step; the step's loss and token counts for
 * metrics). Call it at the same point of the step on every rank. One rank: the values are left as they are. */
#define CPT_DP_HOST_SUM_MAX 64
int cpt_dp_sum_host(cpt_dp *dp, float *vals, int n, cpt_err *err);
/* The collectives of a step outside the gradient buckets. Every rank calls each at the same point, blocking; one
 * rank without a library: no-ops that leave the values as they are. NCCL: through a device staging buffer on the
 * attached model's CUDA context and the comm stream, so call them after cpt_dp_attach(_model).
 *
 * In-place sum over the ranks of n host floats (any n), blocking; every rank calls it at the same point. */
int cpt_dp_sum_floats(cpt_dp *dp, float *host, size_t n, cpt_err *err);
/* Broadcast of n host bytes from rank 0 to every rank, blocking (n must be equal on every rank: send it first
 * with a fixed-size header). */
int cpt_dp_bcast_bytes(cpt_dp *dp, void *host, size_t n, cpt_err *err);
/* ZeRO's collectives over a flat fp32 buffer padded to world * shard floats (cpt_dp_shard_floats): reduce-scatter
 * leaves in shard (shard floats) this rank's slice [rank * shard, (rank + 1) * shard) of the sum over the ranks of
 * full (its average with average set); all-gather writes every rank's shard, in rank order, into full. Blocking.
 * Buffers are on the host for MPI (CPU ranks) and one rank without a library (plain copies: shard may be the
 * matching slice of full), on the device of the attached model for NCCL (after cpt_dp_attach). */
size_t cpt_dp_shard_floats(const cpt_dp *dp, size_t n);
int cpt_dp_reduce_scatter(cpt_dp *dp, const float *full, float *shard, size_t shard_n, int average, cpt_err *err);
int cpt_dp_all_gather(cpt_dp *dp, const float *shard, float *full, size_t shard_n, cpt_err *err);
/* Averages the flat gradient buffer of a model over the ranks (cpt_model_grads; on the device for a CUDA
 * training placement, on the host for a CPU model), blocking, not overlapped: for a second model (a critic) or
 * a backend without buckets. */
int cpt_dp_allreduce_model_grads(cpt_dp *dp, struct cpt_model *m, cpt_err *err);
/* Buckets launched by grads_ready (before finish) in the last finished step: how much overlap was possible. */
size_t cpt_dp_buckets_overlapped(const cpt_dp *dp);
/* The NCCL state (a cpt_nccl *, kernels/cuda/nccl_dp.h) for timing in tests; NULL without NCCL. */
void *cpt_dp_nccl(cpt_dp *dp);

#endif
