/* Internals shared by the model's files (config, weights, forward/backward, decoders). Not a public API. */
#ifndef CPT_MODEL_INTERNAL_H
#define CPT_MODEL_INTERNAL_H

#include "kernels/kernels.h"
#include "model/decoder.h"
#include "model/model.h"

#define CPT_MODEL_MAX_PARAMS_PER_LAYER 16

/* Where one layer's parameters sit in the flat parameter (and gradient) arrays, as element offsets; -1 = absent.
 * q, k, v weights are adjacent, so they form one [(H + 2KV) * D, C] matrix; so are their biases, and gate and up
 * ([2I, C]): one matmul each. */
typedef struct layer_offsets {
    int64_t ln1, wqkv, bqkv, q_norm, k_norm, wo, bo, ln2, wgu, wdown;
} layer_offsets;

/* Activations of one layer kept for backward (all [N, ...] row-major, N tokens). */
typedef struct layer_acts {
    float *x_in;   /* [N, C] residual stream entering the layer */
    float *h1;     /* [N, C] input_layernorm output */
    float *rstd1;  /* [N] */
    float *qkv;    /* [N, QKV] after q/k norm and rope: what attention read */
    float *q_raw;  /* [N * H, D] q before q_norm (qwen3 only) */
    float *k_raw;  /* [N * KV, D] */
    float *q_rstd; /* [N * H] */
    float *k_rstd; /* [N * KV] */
    float *att;    /* [N, H * D] attention output */
    float *lse;    /* [N, H] */
    float *x_mid;  /* [N, C] residual after attention */
    float *h2;     /* [N, C] post_attention_layernorm output */
    float *rstd2;  /* [N] */
    float *gu;     /* [N, 2I] gate | up */
    float *act;    /* [N, I] silu(gate) * up */
} layer_acts;

typedef struct model_acts {
    int cap;          /* tokens the buffers hold */
    int kept_layers;  /* 1 when only one layer's slot exists (inference), else num_layers */
    float *mem;       /* one allocation */
    layer_acts *layers;
    float *x_final;   /* [N, C] residual after the last layer */
    float *xf;        /* [N, C] final norm output */
    float *rstdf;     /* [N] */
    float *tok_lse;   /* [N] */
    float *tok_ent;   /* [N] */
    float *logits;    /* [chunk, V] scratch */
    int32_t *pos;     /* [N] positions inside each sequence */
    int32_t *cu;      /* [S + 1] */
    int cu_cap;
} model_acts;

/* Scratch for backward (sized like the activations). */
typedef struct model_grad_scratch {
    int cap;
    float *mem;
    float *dres, *dxf, *dh, *dqkv, *datt, *dgu, *dact, *dqk_raw, *dqk_norm;
} model_grad_scratch;

struct cpt_model {
    cpt_model_config cfg;
    const struct cpt_model_backend *be; /* where it runs (model/backend.h): cpt_backend_cpu until a placement */
    size_t n_params;
    cpt_param *params;
    int64_t *offsets; /* [n_params] offset of each param in data / grad */
    char **names;
    size_t numel;
    float *data, *grad;
    int64_t off_embed, off_norm, off_lm_head, off_score; /* -1 when absent */
    layer_offsets *layer;
    float *inv_freq; /* [head_dim / 2] */
    model_acts acts;
    model_grad_scratch gs;
    int kept_tokens; /* tokens of the last keep_activations forward; -1 when none */
    int kept_seqs;
    struct cpt_cuda_model *cuda; /* the device side after cpt_model_use_cuda (model/cuda_model.c), else NULL */
    struct cpt_cuda_infer *cuda_infer; /* the device side after cpt_model_use_cuda_infer (model/cuda_infer.c) */
    cpt_grads_ready_fn grads_ready; /* cpt_model_set_grads_ready */
    void *grads_ready_ud;
    int recompute; /* CUDA training forward keeps only each layer input; the backward recomputes the layer */
    int host_master; /* cpt_model_set_host_master: a CUDA placement keeps the fp32 weights on the host, pinned */
};

/* model/config.c */
int cpt_model_config_check(const cpt_model_config *cfg, const char *where, cpt_err *err);
/* config.json with the given "dtype" ("float32", "bfloat16"). */
int cpt_model_config_write(const cpt_model_config *cfg, const char *path, const char *dtype, cpt_err *err);

/* model/params.c: builds the parameter table for m->cfg (data and grad zeroed). */
int cpt_model_build_params(cpt_model *m, int with_value_head, cpt_err *err);
void cpt_model_free_acts(cpt_model *m);

/* model/forward.c: the CPU backend's forward, backward and gradient zeroing (cpt_backend_cpu's entries). */
int cpt_cpu_forward(cpt_model *m, const cpt_batch *b, cpt_forward_out *out, int keep_activations, cpt_err *err);
int cpt_cpu_backward(cpt_model *m, const cpt_batch *b, const float *d_logprobs, const float *d_entropy,
                     const float *d_values, cpt_err *err);
void cpt_cpu_zero_grad(cpt_model *m); /* model/params.c */
/* model/decoder_cpu.c: the paged fp32 decoder of cpt_backend_cpu. */
cpt_decoder *cpt_cpu_decoder_new(cpt_model *m, const cpt_decoder_opts *o, const cpt_decoder_tuning *t, cpt_err *err);

/* model/forward.c: one decoder layer in two halves around its attention, shared by the packed forward and the
 * paged decoder (model/decoder_cpu.c) so that both run the same kernels in the same order. Buffers come from a (the
 * decoder points several fields at one scratch buffer: it keeps nothing for backward).
 * Before attention: h1 = rmsnorm(x_in) (rstd1), qkv = h1 Wqkv^T (+b); with qk_norm each q and k head through its
 * norm (raw heads in q_raw / k_raw, rstds in q_rstd / k_rstd, a->att as scratch); rope on q and k at pos. */
void cpt_layer_fwd_qkv(cpt_model *m, int l, int N, const layer_acts *a, cpt_tensor pos);
/* After attention (a->att): x_mid = x_in + att Wo^T (+b); h2 = rmsnorm(x_mid) (rstd2);
 * x_out = x_mid + (silu(h2 Wg^T) * h2 Wu^T) Wd^T (gu, act kept). x_out may be x_in, not x_mid. */
void cpt_layer_fwd_out(cpt_model *m, int l, int N, const layer_acts *a, float *x_out);

/* Shorthands. */
static inline float *mp(cpt_model *m, int64_t off) { return off < 0 ? NULL : m->data + off; }
static inline float *mg(cpt_model *m, int64_t off) { return off < 0 ? NULL : m->grad + off; }
static inline int qkv_dim(const cpt_model_config *c) { return (c->num_heads + 2 * c->num_kv_heads) * c->head_dim; }

#endif
