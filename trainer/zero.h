/* ZeRO-1: AdamW whose moments are sharded over the data-parallel ranks (train.zero = 1).
 *
 * The flat parameter buffer of the model (cpt_model_data / cpt_model_grads, numel floats) is padded to world * shard
 * floats (shard = ceil(numel / world)); rank r owns floats [r * shard, (r + 1) * shard) and keeps the AdamW moments
 * of that slice only: 2 * shard floats instead of 2 * numel. A step, on every rank at the same point:
 *   1. reduce-scatter (average) of the gradients: this rank's slice of the step's mean gradient;
 *   2. the global norm: each rank's sum of squares of its slice (double), summed over the ranks; clipping scales the
 *      slice as torch.nn.utils.clip_grad_norm_ would scale the whole;
 *   3. AdamW (the same element-wise update as trainer/optim.h, no decay for no_decay params) on the slice's weights;
 *   4. all-gather of the weights: every rank again holds the whole updated model.
 * The all-reduce of plain data parallel is not used (cpt_dp_finish must not be called on a ZeRO step).
 *
 * Checkpoints: each rank writes its slice as "optimizer-rank-R-of-W.safetensors" (tensors exp_avg and exp_avg_sq,
 * shard floats each; metadata step, rank, world_size, numel) into the step folder. Resuming re-shards: each rank
 * reads the floats of its slice from whichever files hold them, so a checkpoint of W ranks resumes at any number of
 * ranks, and one written with train.zero = 0 (a whole optimizer.safetensors) resumes with train.zero = 1.
 *
 * Host buffers for a CPU model (CPU ranks over MPI, or one rank). A model on the GPU (train.device = cuda, ranks over
 * NCCL) runs the same step on the device: the moments and the gradient slice live there, the norm and clipping use
 * the device sum-of-squares and scale kernels, the AdamW kernel updates the slice's fp32 master weights, the fp32
 * weights are all-gathered and the bf16 copy the forward reads is cast again from them. The fp32 master weights
 * stay whole on every rank (only the moments are sharded there). Run on a GPU at one rank (test_zero_cuda, the GRPO
 * check with train.zero = 1); several GPU ranks have not run (no machine with several GPUs was lent). */
#ifndef CPT_TRAINER_ZERO_H
#define CPT_TRAINER_ZERO_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "model/model.h"
#include "trainer/dp.h"
#include "trainer/optim.h"

typedef struct cpt_zero {
    cpt_adamw_hparams hp;
    cpt_dp *dp;       /* not owned */
    cpt_model *model; /* not owned */
    int rank, world;
    size_t numel, shard, lo; /* this rank's slice: [lo, lo + shard) of the padded buffer */
    size_t valid;            /* floats of the slice inside the model (the last rank's slice may hold padding) */
    float *m, *v;            /* [shard] the moments of the slice */
    float *g;                /* [shard] the slice of the step's mean gradient */
    unsigned char *kind;     /* [shard] 0: not a parameter, 1: weight decay, 2: no decay */
    float *pad;              /* [world * shard] padded staging when numel % world != 0, else NULL */
    int64_t step;
    /* a model on the GPU: m, v, g and pad are device buffers, kind stays on the host */
    void *cuda_ctx;          /* cpt_cuda_ctx *, or NULL for a host model */
    double *dev_norm;        /* one fp64 on the device: the slice's sum of squares */
    float *host_m, *host_v;  /* host copies for save and load */
} cpt_zero;

cpt_zero *cpt_zero_new(cpt_model *m, cpt_dp *dp, const cpt_adamw_hparams *hp, cpt_err *err);
void cpt_zero_free(cpt_zero *z);
/* Bytes of optimizer state this rank holds (the two moment slices). */
size_t cpt_zero_state_bytes(const cpt_zero *z);
/* One step as above with learning rate lr and clipping at max_norm (<= 0: none); *norm gets the global gradient
 * norm before clipping. Blocking, collective. */
int cpt_zero_step(cpt_zero *z, double lr, double max_norm, double *norm, cpt_err *err);

/* This rank's file name in a step folder. */
void cpt_zero_shard_name(char *buf, size_t cap, int rank, int world);
int cpt_zero_save(const cpt_zero *z, const char *path, cpt_err *err);
/* Every rank writes its slice into dir (made when missing) under cpt_zero_shard_name, then all learn whether every
 * rank did: -1 on every rank when one failed. Collective. */
int cpt_zero_save_all(const cpt_zero *z, const char *dir, cpt_err *err);
/* The number of ranks whose shards the step folder dir holds, 0 when it holds none, -1 when it holds shards of more
 * than one number of ranks (only exact shard names count). cpt_zero_save_all leaves only its own world's shards in
 * its folder (rank 0 removes the rest once every rank has written). */
int cpt_zero_shards_world(const char *dir);
/* This rank's slice of the moments and the step from the step folder ckpt_dir: from the shards of any number of
 * ranks, or from a whole optimizer.safetensors (train.zero = 0). *from_world (may be NULL) gets the number of ranks
 * that wrote the shards, 0 for the whole file. A bad or missing file leaves the optimizer as it was. */
int cpt_zero_load(cpt_zero *z, const char *ckpt_dir, int *from_world, cpt_err *err);
/* A resume's load: cpt_zero_load, then the slice must have taken train_step x updates_per_step optimizer steps; a
 * re-shard (another number of ranks, or a whole optimizer file) is logged as "ZeRO-1 rank R re-sharded the WHAT
 * optimizer state of DIR (the shards of 2 ranks) for W ranks". */
int cpt_zero_resume(cpt_zero *z, const char *ckpt_dir, int64_t train_step, int updates_per_step, const char *what,
                    cpt_err *err);

#endif
