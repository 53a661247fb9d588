/* The trainer's side of the weight transports (docs/weights.md): one object chosen by weights.transport.
 *
 *   file      weights/weights_pub.h: RUN_DIR/weights/vN.safetensors, announced, old files pruned.
 *   cuda_ipc  two exported device buffers (slots); version v goes to slot v % 2 once the slot's readers have left
 *             (weights/weights_ipc_book.h), by a device-to-device copy of the model's bf16 weights; announced with
 *             the slot's IPC handle, the layout digest and the sum64 of the bf16 bytes.
 *   nccl      the live members (weights/weights_group.h) decide the epoch; a changed set opens a new one (new
 *             unique id); the version is announced, then rank 0 joins the epoch's communicator (once per epoch)
 *             and broadcasts the bf16 weights in weights.bucket_mb buckets. A member that does not join or
 *             receive within weights.nccl_timeout_s costs that epoch: the communicator is dropped, the version stays
 *             announced, and the next publish opens a new epoch with the members still alive.
 *
 * cuda_ipc and nccl need train.device = cuda and a build with CUDA: cpt_weights_tx_new fails at start naming the
 * key otherwise. cuda_ipc ran on an H200 (a GRPO run, docs/performance.md); nccl needs two GPUs and has not run. */
#ifndef CPT_WEIGHTS_WEIGHTS_TX_H
#define CPT_WEIGHTS_WEIGHTS_TX_H

#include <stdint.h>

#include "core/config.h"
#include "core/error.h"
#include "model/model.h"
#include "queue/stream.h"

typedef struct cpt_weights_tx cpt_weights_tx;

/* Checks weights.transport against train.device and the build (no GPU touched; callable from preflight). */
int cpt_weights_tx_check_config(const cpt_config *cfg, cpt_err *err);

cpt_weights_tx *cpt_weights_tx_new(const cpt_config *cfg, cpt_queue *q, const char *run, const char *run_dir,
                                   cpt_model *policy, cpt_err *err);
void cpt_weights_tx_free(cpt_weights_tx *tx);

/* Writes or sends version of policy and announces it in the weights hash. */
int cpt_weights_tx_publish(cpt_weights_tx *tx, cpt_model *policy, uint64_t version, cpt_err *err);
/* nccl, while the trainer waits for data: when the live members differ from the epoch's (a worker joined or
 * died), sends the current version again in a new epoch, so a new worker does not wait for the next step. Checks
 * at most once a second; 0 and nothing for the other transports. */
int cpt_weights_tx_idle(cpt_weights_tx *tx, cpt_model *policy, uint64_t version, cpt_err *err);

#endif
