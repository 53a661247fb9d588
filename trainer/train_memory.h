/* The memory a CUDA trainer's policy state takes (weights, gradients, optimizer), per parameter count and options,
 * and whether it fits a GPU and a host: preflight prints it and refuses a run that cannot fit (scheduler/preflight.c).
 *
 * Bytes per parameter on the GPU: bf16 weights 2, fp32 gradients 4, and without train.optimizer_offload the fp32
 * master weights 4 and the two AdamW moments 8 (divided by the ranks with train.zero = 1): 18 in all, 6 offloaded
 * (plus the two staging buffers of the streamed update). In host memory: the fp32 weights 4 (a mirror on the plain
 * path, the master offloaded) and offloaded the moments 8, pinned. Activations, the logits, cuBLAS workspaces and
 * the CUDA context come on top: the check leaves them room. */
#ifndef CPT_TRAINER_TRAIN_MEMORY_H
#define CPT_TRAINER_TRAIN_MEMORY_H

#include <stddef.h>
#include <stdint.h>

typedef struct cpt_train_memory {
    uint64_t params;
    int offload, zero_world;
    uint64_t weights_bf16, grads, master_gpu, moments_gpu, staging, gpu_total; /* GPU bytes */
    uint64_t master_host, moments_host, host_total;                          /* host bytes */
} cpt_train_memory;

/* zero_world: ranks the moments are sharded over (1: not sharded). */
void cpt_train_memory_estimate(uint64_t params, int offload, int zero_world, cpt_train_memory *out);

typedef enum { CPT_MEM_FITS = 0, CPT_MEM_TIGHT = 1, CPT_MEM_NO_FIT = 2 } cpt_mem_verdict;
/* The estimate against a GPU of gpu_bytes and a host of host_bytes (0: unknown, not checked). NO_FIT when the state
 * exceeds either; TIGHT when it takes over 85% of the GPU (little is left for activations) or 90% of the host. msg
 * says which memory and the option that would make it fit (train.optimizer_offload = true, with its figures), or
 * that none here would. */
cpt_mem_verdict cpt_train_memory_check(const cpt_train_memory *m, uint64_t gpu_bytes, uint64_t host_bytes, char *msg,
                                       size_t cap);

#endif
