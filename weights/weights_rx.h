/* The rollout worker's side of the cuda_ipc and nccl weight transports (docs/weights.md; the trainer's side is
 * weights/weights_tx.h). The file transport stays in rollout/worker.c.
 *
 *   cuda_ipc  load: enter the announced slot as a reader (weights/weights_ipc_book.h; 0 when the version was
 *             superseded), open the slot's IPC handle once, copy device to device into the GPU engine
 *             (the sink's load_bf16), check the slot's sum64 against the announcement, leave (ack).
 *   nccl      poll (every weight poll, also while generating): keep the worker's membership fresh; when the
 *             announced epoch lists this worker, join its communicator (rank from the epoch's member order) and
 *             receive each announced version into a device staging buffer (between decode steps), sum64 checked;
 *             load (once nothing is generating): copy the staging buffer into the engine. A new epoch drops the old
 *             communicator; a worker left out of an epoch waits, registered, for the next one.
 *
 * Both need rollout.device = cuda and the model at start (model.path): cpt_weights_rx_new fails clearly otherwise,
 * or when built without CUDA. cuda_ipc ran on an H200; nccl (two GPUs) has not run. */
#ifndef CPT_WEIGHTS_WEIGHTS_RX_H
#define CPT_WEIGHTS_WEIGHTS_RX_H

#include "core/config.h"
#include "core/error.h"
#include "model/model.h"
#include "queue/stream.h"

typedef struct cpt_weights_rx cpt_weights_rx;

/* Where received weights go, given by the caller (the rollout engine) so this module needs no rollout type:
 * cuda_ctx returns the engine's cpt_cuda_ctx * (kernels/cuda/cuda_ops.h); load_bf16 copies the device bf16
 * weights (cpt_model_param order) into the engine. */
typedef struct cpt_weights_sink {
    void *engine;
    void *(*cuda_ctx)(void *engine);
    int (*load_bf16)(void *engine, cpt_model *m, const void *dev_bf16, cpt_err *err);
} cpt_weights_sink;

/* The file transport's announced location resolved (realpath, so symlinks and ".." count): refused unless it is a
 * regular file inside RUN_DIR/weights (also resolved), so a forged announcement cannot make a worker read any
 * other file. out receives the resolved path, which the caller then reads instead of the announced one. */
int cpt_weights_rx_file_path(const char *run_dir, const char *location, char *out, size_t cap, cpt_err *err);

/* NULL with err set on a bad combination; for weights.transport = file returns an object that does nothing. */
cpt_weights_rx *cpt_weights_rx_new(const cpt_config *cfg, const char *worker, cpt_queue *q, cpt_err *err);
/* Leaves the nccl membership (a drain: the trainer opens a new epoch without this worker). */
void cpt_weights_rx_free(cpt_weights_rx *rx);
/* 1 when wm's transport is one this object loads (cuda_ipc, nccl). */
int cpt_weights_rx_handles(const cpt_weights_rx *rx, const cpt_weights_msg *wm);
/* Every weight poll; wm is the current announcement or NULL. Errors are warnings for the caller (-1, err set). */
int cpt_weights_rx_poll(cpt_weights_rx *rx, const cpt_weights_sink *sink, cpt_model *m, const cpt_weights_msg *wm, cpt_err *err);
/* 1 loaded into the sink, 0 not available now (superseded, or not received in this worker's epoch: wait for the next
 * announcement), -1 error (the version is refused). */
int cpt_weights_rx_load(cpt_weights_rx *rx, const cpt_weights_sink *sink, cpt_model *m, const cpt_weights_msg *wm, cpt_err *err);

#endif
