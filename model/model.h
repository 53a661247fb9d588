/* The decoder-only transformer (qwen2, qwen3, llama) on the kernels interface.
 *
 * Contract used by the trainer, rollout and reward roles. Parameters keep their Hugging Face names; each has a
 * gradient buffer of the same shape. All objectives meet the model at per-token logprobs: the forward returns the
 * logprob of each token's target (and the entropy of its distribution), and the backward takes d(loss)/d(logprob)
 * per token, so SFT, DPO, GRPO, PPO and OPD share one backward pass. */
#ifndef CPT_MODEL_MODEL_H
#define CPT_MODEL_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"

typedef enum { CPT_ARCH_QWEN2 = 0, CPT_ARCH_QWEN3, CPT_ARCH_LLAMA } cpt_arch;

typedef struct cpt_model_config {
    cpt_arch arch;
    int vocab_size, hidden_size, intermediate_size, num_layers;
    int num_heads, num_kv_heads, head_dim; /* head_dim may differ from hidden_size / num_heads (qwen3) */
    float rms_norm_eps, rope_theta;
    int tie_word_embeddings;
    int qkv_bias;   /* qwen2 (and llama's attention_bias) */
    int qk_norm;    /* qwen3: RMSNorm over each head of q and k */
    int rope_llama3; /* rope_scaling {"rope_type": "llama3"} */
    float rope_factor, rope_low_freq_factor, rope_high_freq_factor;
    int rope_original_max_pos;
    int max_position_embeddings;
    int bos_token_id, eos_token_id; /* -1 when absent */
    int o_bias;      /* llama / qwen3 attention_bias: o_proj has a bias too */
} cpt_model_config;

/* Parses HF_DIR/config.json; an unknown architecture or a missing field is an error naming it. */
int cpt_model_config_load(const char *hf_dir, cpt_model_config *cfg, cpt_err *err);
/* Parameters (floats) a model of this shape holds, without building it: the layout of model/params.c (a value
 * head adds hidden_size). For memory estimates of shapes too big to allocate here. */
uint64_t cpt_model_config_numel(const cpt_model_config *c, int with_value_head);
/* The same from bytes in memory (name is used in messages): the fuzzed entry point. */
int cpt_model_config_parse(const char *json, size_t len, const char *name, cpt_model_config *cfg, cpt_err *err);
/* Writes config.json for cfg (for exports), atomically. */
int cpt_model_config_save(const cpt_model_config *cfg, const char *path, cpt_err *err);

typedef struct cpt_param {
    const char *name; /* HF name, e.g. "model.layers.0.self_attn.q_proj.weight" */
    float *data;      /* fp32 master weights */
    float *grad;      /* same shape, accumulated by backward */
    size_t numel;
    int ndim;
    int64_t shape[2];
    int no_decay;     /* norms and biases: no weight decay */
    struct cpt_model *model; /* the model it belongs to (NULL for a free-standing param) */
} cpt_param;

typedef struct cpt_model cpt_model;

cpt_model *cpt_model_load(const char *hf_dir, cpt_err *err); /* config.json + safetensors (sharded too) */
cpt_model *cpt_model_new_random(const cpt_model_config *cfg, uint64_t seed, cpt_err *err);
/* The same shape with every weight zero (no initialisation pass: benches of big shapes fill it themselves). */
cpt_model *cpt_model_new_zeros(const cpt_model_config *cfg, cpt_err *err);
void cpt_model_free(cpt_model *m);
const cpt_model_config *cpt_model_cfg(const cpt_model *m);
size_t cpt_model_num_params(const cpt_model *m); /* number of parameter tensors */
cpt_param *cpt_model_param(cpt_model *m, size_t i);
cpt_param *cpt_model_find_param(cpt_model *m, const char *name);
/* config.json + model.safetensors in out_dir (created), written atomically; dtype F32 or BF16. */
int cpt_model_save_hf(const cpt_model *m, const char *out_dir, int bf16, cpt_err *err);
/* The same, cut into model-0000K-of-0000N.safetensors shards of at most max_shard_bytes each plus
 * model.safetensors.index.json when the weights exceed it (cpt_st_writer_finish_sharded); 0: one file. */
int cpt_model_save_hf_sharded(const cpt_model *m, const char *out_dir, int bf16, uint64_t max_shard_bytes,
                              cpt_err *err);
/* Copies weights from a safetensors file written by cpt_model_save_hf (weight-version loads). */
int cpt_model_load_weights(cpt_model *m, const char *safetensors_path, cpt_err *err);

/* A scalar value head on the final (normed) hidden state: parameter "score.weight" [1, hidden]. It grows the
 * parameter allocation, so call it before keeping param pointers (optimizer state). Loading a folder whose
 * safetensors hold "score.weight" adds the head automatically. */
int cpt_model_add_value_head(cpt_model *m, uint64_t seed, cpt_err *err);
int cpt_model_has_value_head(const cpt_model *m);

/* All parameters (and all gradients) live in one allocation each, in cpt_model_param order: flat views for
 * fused optimizers and checksums. */
size_t cpt_model_numel(const cpt_model *m);
float *cpt_model_data(cpt_model *m);
float *cpt_model_grads(cpt_model *m);

/* A batch of packed sequences: sequence s is tokens[seq_start[s] .. seq_start[s+1]), positions restart at 0 and
 * no attention crosses a boundary. targets[i] is the token whose logprob is taken at position i (normally
 * tokens[i+1] of the same sequence), or -1 for none. */
typedef struct cpt_batch {
    int n_tokens, n_seqs;
    const int32_t *tokens;    /* [n_tokens] */
    const int32_t *seq_start; /* [n_seqs + 1] */
    const int32_t *targets;   /* [n_tokens], -1 = no target */
} cpt_batch;

/* Caller-owned outputs; any pointer may be NULL when not wanted. */
typedef struct cpt_forward_out {
    float *logprobs; /* [n_tokens]: log p(target) (0 where target < 0) */
    float *entropy;  /* [n_tokens]: entropy of the next-token distribution */
    float *logits;   /* [n_tokens x vocab] */
    float *values;   /* [n_tokens]: value head output (needs the value head) */
} cpt_forward_out;

/* keep_activations: store what backward needs (a training forward). */
int cpt_model_forward(cpt_model *m, const cpt_batch *b, cpt_forward_out *out, int keep_activations, cpt_err *err);
/* Accumulates into every param's grad the gradient of a loss given d(loss)/d(logprob) [n_tokens] and optionally
 * d(loss)/d(entropy) and d(loss)/d(value) (NULL when unused), for the batch of the last keep_activations forward. */
int cpt_model_backward(cpt_model *m, const cpt_batch *b, const float *d_logprobs, const float *d_entropy,
                       const float *d_values, cpt_err *err);
void cpt_model_zero_grad(cpt_model *m);

/* ---- the model on a GPU (model/cuda_model.c) ----
 * cpt_model_use_cuda places the model on CUDA device `device`: fp32 master weights, fp32 gradients and a bf16 copy
 * of the weights on the device (one allocation), bf16 activations. From then on cpt_model_forward, _backward and
 * _zero_grad run there (same contract: logprobs, entropy and values come back to the host, d_logprobs go up), and
 * trainer/optim.c's AdamW, norm and clipping run on the device copies. param->data / ->grad on the host are a mirror
 * refreshed by cpt_model_sync_to_host (cpt_model_save_hf refreshes the weights itself); after changing host
 * weights call cpt_model_sync_to_device (cpt_model_load_weights does). Without CUDA built in, placement fails
 * with a message saying so. */
int cpt_model_use_cuda(cpt_model *m, int device, cpt_err *err);
int cpt_model_on_cuda(const cpt_model *m);
/* Before cpt_model_use_cuda (train.optimizer_offload): the placement keeps the fp32 master weights on the host
 * instead of the device. The host weights move into pinned memory (cudaHostAlloc; param->data is repointed, so
 * take it from the param after placing) and are the master (trainer/optim.c's offloaded AdamW updates them in
 * place); the GPU holds the bf16 copy and the fp32 gradients only. Sync to host then copies the gradients, sync to
 * device casts the host weights up chunk by chunk. Changing it once placed is refused. */
int cpt_model_set_host_master(cpt_model *m, int on, cpt_err *err);
int cpt_model_host_master(const cpt_model *m);
/* The inference placement (the rollout's generation, model/cuda_decoder.c): only a bf16 copy of the weights on
 * CUDA device `device`, no gradients; cpt_decoder_new runs there, forward and backward refuse. cpt_model_sync_to_device
 * (and cpt_model_load_weights) upload the host weights again. */
int cpt_model_use_cuda_infer(cpt_model *m, int device, cpt_err *err);
/* Weights from bf16 already on the model's device, m's parameters in cpt_model_param order back to back (a cuda_ipc
 * or nccl weight version); the host values are not read. */
int cpt_model_load_weights_bf16_device(cpt_model *m, const void *dev_bf16, cpt_err *err);
/* Benches: a model of config cfg without host weights, placed for inference on CUDA device `device` with random
 * N(0, std) bf16 weights drawn there (norm weights 1, biases 0): a 7B shape without its fp32 host copy. It has no
 * parameters (weight loads fail); cpt_model_free frees it. */
cpt_model *cpt_model_new_cuda_random(const cpt_model_config *cfg, int device, uint64_t seed, float std,
                                     cpt_err *err);
/* The cpt_cuda_ctx * of a CUDA placement (kernels/cuda/cuda_ops.h), for weight receivers; NULL on the CPU. */
void *cpt_model_cuda_ctx(cpt_model *m);
/* Whether the CUDA kernels take the model's shape (model/cuda_shape.c): 0, or -1 with err saying what is not and
 * what is ("head_dim 24 is not supported on the GPU (supported: 8, ...)"). engine: the GPU generation engine's
 * limits too (rollout.device = cuda), else the trainer's (train.device = cuda). In every build: placement, the
 * engine and preflight refuse with it before a GPU is touched. */
int cpt_model_cuda_shape_check(const cpt_model_config *c, int engine, cpt_err *err);
int cpt_model_sync_to_host(cpt_model *m, cpt_err *err);   /* weights and gradients, device -> host; 0 on the CPU */
int cpt_model_sync_to_device(cpt_model *m, cpt_err *err); /* weights, host -> device; 0 on the CPU */
/* Waits for the device work queued so far (the optimizer step is asynchronous): for timing; 0 on the CPU. */
int cpt_model_wait(cpt_model *m, cpt_err *err);
/* A readiness callback for data parallelism (trainer/dp.h): the GPU backward calls fn(ud, first, last, err) as soon
 * as the work producing the final gradient of params first..last (cpt_model_param indices) is queued: model.norm
 * through the last param after the LM head and final norm, each layer's params after that layer (last to first),
 * then param 0 (the embedding, also the tied LM head) at the end. A non-zero return ends the backward with that
 * error. NULL fn: none. The CPU backward does not call it. */
typedef int (*cpt_grads_ready_fn)(void *ud, size_t first_param, size_t last_param, cpt_err *err);
void cpt_model_set_grads_ready(cpt_model *m, cpt_grads_ready_fn fn, void *ud);
/* Activation recomputation on the GPU: a training forward keeps only each layer's input (hidden x tokens bf16 per
 * layer instead of about 4 hidden + qkv + 2 x intermediate), and the backward runs each layer's forward again just
 * before its backward: less memory for about a third more compute. Same results up to bf16 rounding of the
 * recomputed layer input norm; deterministic either way. The CPU model always keeps its activations (no effect). */
void cpt_model_set_recompute(cpt_model *m, int on);

/* Padded batches: B rows of T tokens with an attention mask (1 = real token, 0 = padding; each row's real tokens
 * must be one contiguous run, so left and right padding both work; an all-padding row is allowed and yields no
 * sequence). cpt_batch_from_padded packs the real tokens of each row into one sequence with next-token targets
 * (the last real token of a row has none), and remembers where each packed token came from. */
typedef struct cpt_packed {
    cpt_batch batch;   /* points into the arrays below */
    int B, T;
    int32_t *tokens, *seq_start, *targets;
    int32_t *src;      /* [n_tokens]: index b * T + t of each packed token in the padded batch */
} cpt_packed;

int cpt_batch_from_padded(const int32_t *ids, const int32_t *mask, int B, int T, cpt_packed *p, cpt_err *err);
/* padded [B x T] = packed [n_tokens] at the real positions, fill elsewhere (e.g. logprobs back to B x T: entry
 * (b, t) is log p(ids[b, t+1]) as with HF logits shifted by one). */
void cpt_packed_to_padded(const cpt_packed *p, const float *packed, float *padded, float fill);
/* packed [n_tokens] = padded [B x T] at the real positions (e.g. per-token loss weights to d_logprobs). */
void cpt_padded_to_packed(const cpt_packed *p, const float *padded, float *packed);
void cpt_packed_free(cpt_packed *p);

#endif
