/* Validation generation on the GPU for a trainer whose policy trains there (validation.device auto or cuda): an
 * inference copy of the policy (cpt_model_use_cuda_infer) on the policy's device, its bf16 weights refreshed from the
 * trainer's own bf16 copy before each validation (a device-to-device copy, as a cuda_ipc weight version), so the
 * GPU engine generates instead of the host decoding from cpt_model_sync_to_host's fp32 mirror. It costs one more
 * bf16 copy of the weights and the engine's KV pool on the GPU, and an fp32 host copy of the shape (the inference
 * placement is built from host parameters). */
#ifndef CPT_TRAINER_VAL_GPU_H
#define CPT_TRAINER_VAL_GPU_H

#include "core/error.h"
#include "model/model.h"

typedef struct cpt_val_gpu cpt_val_gpu;

/* On CUDA device `device` (the policy's). NULL with err when the policy is not on the GPU, its shape is not one the GPU engine takes, or the placement
 * fails (the caller then validates on the host). */
cpt_val_gpu *cpt_val_gpu_new(cpt_model *policy, int device, cpt_err *err);
/* The inference copy with the policy's current weights. */
cpt_model *cpt_val_gpu_refresh(cpt_val_gpu *v, cpt_err *err);
void cpt_val_gpu_free(cpt_val_gpu *v);

#endif
