/* The device side of a model placed on a GPU for training with cpt_model_use_cuda (model/cuda_model.c: its
 * backend table cpt_backend_cuda, model/backend.h, carries forward, backward and the syncs). Internal: params.c
 * refreshes host weights through it and trainer/optim.c reaches the device copies of parameters through it.
 * Every function here exists in a build without CUDA too, failing with a "built without CUDA" error. */
#ifndef CPT_MODEL_CUDA_MODEL_H
#define CPT_MODEL_CUDA_MODEL_H

#include "model/model.h"

typedef struct cpt_cuda_model cpt_cuda_model;

/* The weights only, device -> host (cpt_model_save_hf: each published weight version; the grads stay). */
int cpt_cuda_model_pull_weights(cpt_model *m, cpt_err *err);
void cpt_cuda_model_free(cpt_cuda_model *cm);

/* Where one parameter lives on the device: fp32 master weights, fp32 gradient, the bf16 copy the matmuls read,
 * and the context (a cpt_cuda_ctx *) whose stream every op on them uses. */
typedef struct cpt_cuda_param_view {
    void *ctx;
    float *data, *grad;
    void *data_bf16;
} cpt_cuda_param_view;
/* 0 and the view when p belongs to m and m is on the GPU, else -1. */
int cpt_model_cuda_param(cpt_model *m, const cpt_param *p, cpt_cuda_param_view *v);
/* zero_grad on the GPU is deferred to the next backward (whose first weight-gradient products overwrite instead of
 * adding); this makes a pending zeroing real. cpt_model_cuda_param and cpt_model_sync_to_host call it, so readers
 * of gradients outside a backward see zeros. 0 when nothing is pending or the model is on the host. */
int cpt_model_grads_settle(cpt_model *m, cpt_err *err);
/* A device array of one fp64 per parameter tensor (per-tensor sums of squares for the global norm). */
double *cpt_model_cuda_norm_slots(cpt_model *m);

#endif
