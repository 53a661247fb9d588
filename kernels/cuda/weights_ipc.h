/* The device side of the cuda_ipc and nccl weight transports (trainer/weights_tx.h, rollout/weights_rx.h):
 * exportable buffers and their IPC handles, opening a peer's handle, and the sum64 checksum of device bytes
 * (the value of cpt_weights_sum64 in trainer/weights_ann.h, computed on the GPU with one reduction).
 *
 * IPC rules that shape the callers: a handle opens only in another process on the same host, the buffer must come
 * from cudaMalloc (no pool), and a handle opened once stays valid until closed, so a worker opens each slot's
 * handle once and keeps it (the trainer never reallocates a slot).
 *
 * Compiled only with nvcc; the .c callers sit under CPT_HAVE_CUDA. */
#ifndef CPT_KERNELS_CUDA_WEIGHTS_IPC_H
#define CPT_KERNELS_CUDA_WEIGHTS_IPC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "core/error.h"
#include "kernels/cuda/cuda_ops.h"

#define CPT_CUDA_IPC_HANDLE_BYTES 64

/* cudaMalloc of bytes on ctx's device, and its IPC handle. */
int cpt_cuda_ipc_alloc(cpt_cuda_ctx *ctx, size_t bytes, void **dev, unsigned char handle[CPT_CUDA_IPC_HANDLE_BYTES],
                       cpt_err *err);
void cpt_cuda_ipc_free(void *dev);
/* Opens a handle exported by another process (same host), on ctx's device. */
int cpt_cuda_ipc_open(cpt_cuda_ctx *ctx, const unsigned char handle[CPT_CUDA_IPC_HANDLE_BYTES], void **dev,
                      cpt_err *err);
void cpt_cuda_ipc_close(void *dev);

/* sum64 of bytes at dev (ctx's stream; waits for the result). */
int cpt_cuda_sum64(cpt_cuda_ctx *ctx, const void *dev, size_t bytes, uint64_t *out, cpt_err *err);

#ifdef __cplusplus
}
#endif

#endif
