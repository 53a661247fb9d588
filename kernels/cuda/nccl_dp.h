/* NCCL for the trainer's data-parallel group: the library (dlopen'ed), one communicator, and a communication
 * stream beside the compute stream of a cpt_cuda_ctx so gradient all-reduces overlap the backward pass.
 *
 * The library is libnccl.so.2 from the path in CPT_NCCL_LIB, else the loader's path, else /usr/local/cuda/lib64;
 * it needs NCCL >= 2.10 (ncclAvg). Nothing here is loaded or called until one of these functions is: a world of one
 * rank never touches NCCL (trainer/dp.c decides).
 *
 * Ordering: cpt_nccl_allreduce_avg makes the comm stream wait for everything queued on the compute stream so far
 * (an event), then queues the all-reduce on the comm stream; cpt_nccl_join makes the compute stream wait for the
 * comm stream. Both return at once (asynchronous), as the ops of cuda_ops.h do.
 *
 * Timing (tests, benches): with timing on, each all-reduce is bracketed by events on the comm stream and
 * cpt_nccl_stamp records one on the compute stream; after a sync, cpt_nccl_stamp_ms gives each stamp's time in ms
 * since the first stamp, so the overlap of the two streams can be read off. */
#ifndef CPT_KERNELS_CUDA_NCCL_DP_H
#define CPT_KERNELS_CUDA_NCCL_DP_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "core/error.h"
#include "kernels/cuda/cuda_ops.h"

#define CPT_NCCL_ID_BYTES 128 /* sizeof(ncclUniqueId) */

typedef struct cpt_nccl cpt_nccl;

/* Loads the library and draws a unique id (rank 0 only; it opens rank 0's bootstrap socket). */
int cpt_nccl_unique_id(unsigned char id[CPT_NCCL_ID_BYTES], cpt_err *err);
/* NCCL's version as major * 10000 + minor * 100 + patch, or -1 with err set when the library cannot be loaded. */
int cpt_nccl_version(cpt_err *err);

/* Joins the communicator of `size` ranks named by id as `rank`, on ctx's device. The init is non-blocking and
 * polled: after timeout_s it is aborted and the error says so. `where` (e.g. "rank 1/2, bootstrap pmix") starts
 * every error message. */
cpt_nccl *cpt_nccl_new(cpt_cuda_ctx *ctx, const unsigned char id[CPT_NCCL_ID_BYTES], int rank, int size,
                       double timeout_s, const char *where, cpt_err *err);
void cpt_nccl_free(cpt_nccl *c);

/* In-place average over the ranks of count floats at buf (device), on the comm stream, after the compute stream's
 * work queued so far. */
int cpt_nccl_allreduce_avg(cpt_nccl *c, float *buf, size_t count, cpt_err *err);
/* The same with a sum (trainer/dp.c's host collectives). */
int cpt_nccl_allreduce_sum(cpt_nccl *c, float *buf, size_t count, cpt_err *err);
/* In-place broadcast of bytes at buf (device) from rank root to every rank, on the comm stream after the compute
 * stream's work queued so far (the weight transport, trainer/weights_tx.c; needs two GPUs: not run yet). */
int cpt_nccl_broadcast(cpt_nccl *c, void *buf, size_t bytes, int root, cpt_err *err);
/* ZeRO (trainer/zero.h), device buffers, on the comm stream after the compute stream's work queued so far:
 * send holds size * shard floats, rank r receives floats [r * shard, (r + 1) * shard) of their sum (average
 * with average set) in recv; all_gather concatenates every rank's shard floats of send into recv in rank order.
 * recv may be the matching slice of send (NCCL's in-place forms). */
int cpt_nccl_reduce_scatter(cpt_nccl *c, const float *send, float *recv, size_t shard, int average, cpt_err *err);
int cpt_nccl_all_gather(cpt_nccl *c, const float *send, float *recv, size_t shard, cpt_err *err);
/* The compute stream waits for every all-reduce queued so far. */
int cpt_nccl_join(cpt_nccl *c, cpt_err *err);
/* Waits for the comm stream on the host; reports an asynchronous NCCL error (a peer died) naming the rank. */
int cpt_nccl_sync(cpt_nccl *c, cpt_err *err);

/* Timing: on = 1 keeps up to max_stamps events (stamps, and two per all-reduce). Reset by each call with on = 1. */
int cpt_nccl_timing(cpt_nccl *c, int on, int max_stamps, cpt_err *err);
/* An event on the compute stream; returns its index, or -1 when timing is off or full. */
int cpt_nccl_stamp(cpt_nccl *c);
/* All-reduces timed since timing was switched on, and the stamp indices of the k-th one's start and end. */
int cpt_nccl_timed_ops(const cpt_nccl *c);
void cpt_nccl_op_stamps(const cpt_nccl *c, int k, int *start, int *end);
/* ms between stamp 0 and stamp i (after the work has completed: call cpt_nccl_sync and cpt_cuda_sync first). */
float cpt_nccl_stamp_ms(cpt_nccl *c, int i);

#ifdef __cplusplus
}
#endif

#endif
