/* The inference placement's device side (model/cuda_infer.c): the bf16 weights of a model placed with
 * cpt_model_use_cuda_infer, one allocation, laid out for the decoder (model/cuda_decoder.c): q|k|v and gate|up
 * stored as one matrix each. Internal to model/. */
#ifndef CPT_MODEL_CUDA_INFER_H
#define CPT_MODEL_CUDA_INFER_H

#include "model/backend.h"

/* One layer's bf16 weights on the device; NULL where the architecture has none. */
typedef struct cpt_cuda_infer_layer {
    void *ln1, *wqkv, *bqkv, *q_norm, *k_norm, *wo, *bo, *ln2, *wgu, *wdown;
} cpt_cuda_infer_layer;

typedef struct cpt_cuda_infer {
    int device;
    void *ctx; /* cpt_cuda_ctx * */
    void *wmem;
    void *embed, *norm, *lm; /* lm is embed when the embeddings are tied */
    cpt_cuda_infer_layer *layers;
    float *inv_freq; /* [head_dim / 2] on the device */
    const uint16_t *dev_src; /* set only while loading from bf16 already on the device (param order) */
} cpt_cuda_infer;

/* model/cuda_decoder.c: the backend's decoder_new. */
cpt_decoder *cpt_cuda_decoder_new(cpt_model *m, const cpt_decoder_opts *o, const cpt_decoder_tuning *t,
                                  cpt_err *err);
/* The context of the inference placement, NULL when m has none. */
void *cpt_cuda_infer_ctx(const cpt_model *m);

#endif
