/* The model's backend table, the way Redis's ae.c picks one event backend behind one header: chosen once when the
 * model is placed (model/forward.c's CPU table at load, cpt_model_use_cuda's or cpt_model_use_cuda_infer's after
 * placement), then every model call goes through it without asking where the model lives. Internal to model/. */
#ifndef CPT_MODEL_BACKEND_H
#define CPT_MODEL_BACKEND_H

#include "model/decoder.h"
#include "model/model.h"

typedef struct cpt_model_backend {
    const char *name; /* "cpu", "cuda" (training placement), "cuda-infer" (bf16 weights only) */
    int (*forward)(cpt_model *m, const cpt_batch *b, cpt_forward_out *out, int keep_activations, cpt_err *err);
    int (*backward)(cpt_model *m, const cpt_batch *b, const float *d_logprobs, const float *d_entropy,
                    const float *d_values, cpt_err *err);
    void (*zero_grad)(cpt_model *m);
    int (*sync_to_host)(cpt_model *m, cpt_err *err);
    int (*sync_to_device)(cpt_model *m, cpt_err *err);
    int (*wait)(cpt_model *m, cpt_err *err);
    int (*pull_weights)(cpt_model *m, cpt_err *err); /* weights only, device -> host (saves); NULL: host current */
    cpt_decoder *(*decoder_new)(cpt_model *m, const cpt_decoder_opts *o, const cpt_decoder_tuning *t, cpt_err *err);
    void (*release)(cpt_model *m); /* frees the device side (cpt_model_free); NULL: nothing to free */
} cpt_model_backend;

/* What a decoder implementation provides; struct cpt_decoder starts with these (model/decoder.c dispatches). */
typedef struct cpt_decoder_ops {
    int (*prefill)(cpt_decoder *d, int n, int n_out, cpt_err *err);
    int (*sample_saved)(cpt_decoder *d, int n, cpt_err *err);
    int (*step)(cpt_decoder *d, int n, cpt_err *err);
    int (*copy_block)(cpt_decoder *d, int src, int dst, cpt_err *err);
    void (*tables_changed)(cpt_decoder *d);
    int (*graphs)(const cpt_decoder *d);
    double (*replay_s)(cpt_decoder *d, int reps, cpt_err *err);
    void (*free)(cpt_decoder *d);
} cpt_decoder_ops;

/* The part every decoder shares; an implementation's struct has it first. */
struct cpt_decoder {
    const cpt_decoder_ops *ops;
    cpt_decoder_io io;
    cpt_model *m;
    int n_tables, max_blocks, block_size, n_blocks, max_rows, saved_rows;
};

/* Fills the shared part from options cpt_decoder_new has checked: the defaults of model/decoder.h (block_size 16,
 * n_blocks every table full, saved_rows n_tables + 1) resolved once for every backend. */
void cpt_decoder_base_init(cpt_decoder *d, const cpt_decoder_ops *ops, cpt_model *m, const cpt_decoder_opts *o);

extern const cpt_model_backend cpt_backend_cpu;        /* model/forward.c (its decoder: model/decoder_cpu.c) */
extern const cpt_model_backend cpt_backend_cuda;       /* model/cuda_model.c */
extern const cpt_model_backend cpt_backend_cuda_infer; /* model/cuda_decoder.c */

#endif
