/* AdamW, the learning-rate schedule and global-norm gradient clipping.
 *
 * AdamW follows torch.optim.AdamW exactly (decoupled weight decay applied before the moment update, bias correction
 * 1 - beta^t on both moments, eps added after the square root of the corrected second moment), so a run can be
 * checked step by step against PyTorch. Parameters flagged no_decay (norms, biases) get no weight decay.
 *
 * Gradient accumulation is the caller's part: micro-batches add into each param's grad and the loss of every
 * micro-batch is divided by the token count of the whole step, so the summed gradient equals one big batch's. */
#ifndef CPT_TRAINER_OPTIM_H
#define CPT_TRAINER_OPTIM_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "model/model.h"

/* ---- learning-rate schedule ---- */

typedef enum { CPT_LR_CONSTANT = 0, CPT_LR_LINEAR, CPT_LR_COSINE } cpt_lr_kind;

typedef struct cpt_lr_schedule {
    cpt_lr_kind kind;
    double base_lr;
    int64_t warmup_steps; /* linear ramp: step s < warmup gets base_lr * (s + 1) / warmup */
    int64_t total_steps;  /* decay runs from the end of warmup to total_steps */
    double min_lr_ratio;  /* the decay ends at base_lr * min_lr_ratio */
} cpt_lr_schedule;

/* "constant" | "linear" | "cosine". */
int cpt_lr_kind_parse(const char *name, cpt_lr_kind *kind, cpt_err *err);

/* The learning rate of optimizer step `step` (0-based: the first update is step 0). After warmup, with
 * p = (step - warmup) / max(1, total - warmup) clamped to [0, 1]:
 *   constant: base;  linear: base * (r + (1 - r) * (1 - p));  cosine: base * (r + (1 - r) * (1 + cos(pi p)) / 2). */
double cpt_lr_at(const cpt_lr_schedule *s, int64_t step);

/* ---- clipping ---- */

/* sqrt of the sum of squares of every grad, accumulated in double in a fixed order (deterministic). On a GPU model
 * the per-tensor sums are made on the device (fp64, fixed order) and added on the host in param order. */
double cpt_grad_global_norm(cpt_param *const *params, size_t n);
/* Scales every grad by max_norm / (norm + 1e-6) when that is below 1 (as torch.nn.utils.clip_grad_norm_);
 * max_norm <= 0 disables clipping. Returns the norm before clipping. */
double cpt_clip_grad_norm(cpt_param *const *params, size_t n, double max_norm);

/* ---- AdamW ---- */

typedef struct cpt_adamw_hparams {
    double beta1, beta2, eps, weight_decay;
} cpt_adamw_hparams;

typedef struct cpt_adamw {
    cpt_adamw_hparams hp;
    size_t n;
    cpt_param **params; /* not owned */
    float **m, **v;     /* first and second moments, one array per param (on a GPU: a host copy made for save/load) */
    int64_t step;       /* updates taken so far */
    /* When the params' model is on a GPU (cpt_model_use_cuda) the moments live there, flat in param order, and
     * step / norm / clip run on the device; save and load go through the host arrays, so the file is the same. */
    struct cpt_model *dev_model;
    float *dev_m, *dev_v;
    size_t *dev_off; /* [n] element offset of each param's moments */
    /* train.optimizer_offload: when the model keeps its fp32 master weights on the host (cpt_model_set_host_master)
     * the moments live in pinned host memory, flat in param order (m[i] and v[i] point into it; no dev_m / dev_v),
     * and each step streams master weights and moments through the GPU in chunks (kernels/cuda/adamw_offload.cu):
     * the same arithmetic as the device path, the same checkpoint files. */
    float *pinned_m, *pinned_v;
    void *offload;        /* cpt_cuda_offload * */
    void *segs;           /* cpt_cuda_offload_seg [n], rebuilt each step */
    size_t offload_chunk; /* floats per staging array (cpt_adamw_set_offload_chunk) */
} cpt_adamw;

/* params must stay valid for the optimizer's life. */
cpt_adamw *cpt_adamw_new(cpt_param *const *params, size_t n, const cpt_adamw_hparams *hp, cpt_err *err);
void cpt_adamw_free(cpt_adamw *o);
/* Whether the state is offloaded to pinned host memory (the params' model keeps its master weights on the host). */
int cpt_adamw_offloaded(const cpt_adamw *o);
/* The offloaded step's chunk: floats of each of the three arrays (master, m, v) per staging buffer; two buffers
 * live on the GPU. Default CPT_ADAMW_OFFLOAD_CHUNK. Only meaningful when offloaded. */
#define CPT_ADAMW_OFFLOAD_CHUNK ((size_t)1 << 24)
int cpt_adamw_set_offload_chunk(cpt_adamw *o, size_t floats, cpt_err *err);
/* One update with learning rate lr from the current grads (grads are left as they are). */
void cpt_adamw_step(cpt_adamw *o, double lr);

/* State as safetensors: "exp_avg.<param>" and "exp_avg_sq.<param>" (F32) plus metadata "step"; written atomically.
 * Loading checks every param's tensors are present with the right shape and restores them bit for bit. */
int cpt_adamw_save(const cpt_adamw *o, const char *path, cpt_err *err);
int cpt_adamw_load(cpt_adamw *o, const char *path, cpt_err *err);

/* The param list of a model in its order (malloc'd array; the pointers belong to the model). */
cpt_param **cpt_model_param_list(cpt_model *m, size_t *n, cpt_err *err);

/* Places a trainer's model as configured: train.device = "cuda" puts it on GPU train.cuda_device
 * (cpt_model_use_cuda); "cpu" leaves it. Call it after loading (and after adding a value head). */
struct cpt_config;
int cpt_trainer_place_model(const struct cpt_config *cfg, cpt_model *m, const char *what, cpt_err *err);

#endif
