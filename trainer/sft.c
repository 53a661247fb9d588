#include "trainer/sft.h"

#include <inttypes.h>
#include <math.h>
#include <omp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/chat_template.h"
#include "core/fs.h"
#include "core/metrics.h"
#include "core/tokenizer.h"
#ifdef CPT_HAVE_CUDA
#include "kernels/cuda/cuda_ops.h"
#endif
#include "trainer/checkpoint.h"
#include "trainer/dp.h"
#include "trainer/greedy.h"
#include "trainer/optim.h"
#include "trainer/sft_data.h"

/* Set by SIGUSR1 / SIGTERM (Slurm's preemption warning): finish the step, checkpoint, stop. A signal handler can
 * only reach a static flag. */
static volatile sig_atomic_t stop_requested;
static void on_stop_signal(int sig) { stop_requested = sig; }

typedef struct sft_ctx {
    const cpt_config *cfg;
    char tok_path[CPT_CKPT_PATH_MAX];
    cpt_tokenizer *tok;
    cpt_chat_template tpl;
    int have_tpl;
    int32_t stop_ids[4];
    int n_stop;
    cpt_model *model;
    cpt_param **params;
    size_t n_params;
    cpt_adamw *opt;
    cpt_dp *dp;      /* data parallel group (one rank: bookkeeping only) */
    int rank, world; /* every rank packs the step's world * accum micro-batches and trains on its share */
    int stop_all;    /* some rank was asked to stop: every rank stops after the same step */
    cpt_lr_schedule sched;
    cpt_sft_dataset train, eval;
    cpt_sft_cursor cur;
    int accum, budget;
    cpt_sft_batch *mbs;
    cpt_sft_batch eval_mb;
    float *logprobs, *d_logprobs;
    cpt_metrics *metrics;
    cpt_train_state st;
    int64_t last_saved_step;
    char *config_text;
} sft_ctx;

/* ---------------- setup ---------------- */

cpt_model *cpt_trainer_model_from_config(const cpt_config *cfg, int vocab_size, int bos_id, int eos_id, cpt_err *err) {
    if (!strcmp(cpt_cfg_str(cfg, "model.init"), "load")) {
        const char *path = cpt_cfg_str(cfg, "model.path");
        if (!*path) {
            cpt_errf(err, "model.path is empty (set it to a Hugging Face folder, or model.init = \"random\")");
            return NULL;
        }
        cpt_model *m = cpt_model_load(path, err);
        if (!m) cpt_err_prefix(err, "model.path %s", path);
        return m;
    }
    cpt_model_config mc;
    memset(&mc, 0, sizeof mc);
    const char *arch = cpt_cfg_str(cfg, "model.arch");
    mc.arch = !strcmp(arch, "qwen3") ? CPT_ARCH_QWEN3 : !strcmp(arch, "llama") ? CPT_ARCH_LLAMA : CPT_ARCH_QWEN2;
    mc.vocab_size = cpt_cfg_int(cfg, "model.vocab_size") ? (int)cpt_cfg_int(cfg, "model.vocab_size") : vocab_size;
    mc.hidden_size = (int)cpt_cfg_int(cfg, "model.hidden_size");
    mc.intermediate_size = (int)cpt_cfg_int(cfg, "model.intermediate_size");
    mc.num_layers = (int)cpt_cfg_int(cfg, "model.num_layers");
    mc.num_heads = (int)cpt_cfg_int(cfg, "model.num_heads");
    mc.num_kv_heads = cpt_cfg_int(cfg, "model.num_kv_heads") ? (int)cpt_cfg_int(cfg, "model.num_kv_heads") : mc.num_heads;
    if (mc.hidden_size % mc.num_heads || mc.num_heads % mc.num_kv_heads) {
        cpt_errf(err, "model.hidden_size (%d) must divide by model.num_heads (%d), and that by model.num_kv_heads (%d)",
                 mc.hidden_size, mc.num_heads, mc.num_kv_heads);
        return NULL;
    }
    if (mc.vocab_size < vocab_size) {
        cpt_errf(err, "model.vocab_size %d is smaller than the tokenizer's %d", mc.vocab_size, vocab_size);
        return NULL;
    }
    mc.head_dim = mc.hidden_size / mc.num_heads;
    mc.rms_norm_eps = 1e-6f;
    mc.rope_theta = (float)cpt_cfg_float(cfg, "model.rope_theta");
    mc.tie_word_embeddings = cpt_cfg_bool(cfg, "model.tie_word_embeddings");
    mc.qkv_bias = mc.arch == CPT_ARCH_QWEN2;
    mc.qk_norm = mc.arch == CPT_ARCH_QWEN3;
    mc.max_position_embeddings = (int)cpt_cfg_int(cfg, "model.max_position_embeddings");
    mc.bos_token_id = bos_id;
    mc.eos_token_id = eos_id;
    return cpt_model_new_random(&mc, (uint64_t)cpt_cfg_int(cfg, "run.seed"), err);
}

static int32_t find_token(const cpt_tokenizer *tok, const char *s) { return cpt_tokenizer_token_id(tok, s); }

static void add_stop(sft_ctx *c, int32_t id) {
    if (id < 0 || c->n_stop == (int)(sizeof c->stop_ids / sizeof c->stop_ids[0])) return;
    for (int i = 0; i < c->n_stop; i++)
        if (c->stop_ids[i] == id) return;
    c->stop_ids[c->n_stop++] = id;
}

static int setup_tokenizer(sft_ctx *c, cpt_err *err) {
    const char *tp = cpt_cfg_str(c->cfg, "tokenizer.path");
    if (!*tp) tp = cpt_cfg_str(c->cfg, "model.path");
    if (!*tp) return cpt_errf(err, "tokenizer.path is empty and there is no model.path to take it from");
    snprintf(c->tok_path, sizeof c->tok_path, "%s", tp);
    c->tok = cpt_tokenizer_load(tp, err);
    if (!c->tok) return cpt_err_prefix(err, "tokenizer %s", tp);
    const char *tn = cpt_cfg_str(c->cfg, "data.chat_template");
    if (strcmp(tn, "none")) {
        if (cpt_chat_template_load(tp, tn, &c->tpl, err)) return cpt_err_prefix(err, "data.chat_template");
        c->have_tpl = 1;
    }
    add_stop(c, cpt_tokenizer_eos_id(c->tok));
    add_stop(c, find_token(c->tok, "<|im_end|>"));
    add_stop(c, find_token(c->tok, "<|eot_id|>"));
    add_stop(c, find_token(c->tok, "<|endoftext|>"));
    return 0;
}

static int setup_data(sft_ctx *c, cpt_err *err) {
    const cpt_config *cfg = c->cfg;
    int32_t eos = cpt_tokenizer_eos_id(c->tok);
    if (eos < 0) eos = find_token(c->tok, "<|endoftext|>");
    cpt_sft_data_opts o = {
        .format = cpt_cfg_str(cfg, "data.format"),
        .tok = c->tok,
        .tpl = c->have_tpl ? &c->tpl : NULL,
        .max_seq_len = (int)cpt_cfg_int(cfg, "train.max_seq_len"),
        .skip_bad_lines = cpt_cfg_bool(cfg, "data.skip_bad_lines"),
        .eos_id = eos,
    };
    const char *train = cpt_cfg_str(cfg, "data.train");
    if (!*train) return cpt_errf(err, "data.train is empty");
    if (cpt_sft_dataset_load(train, &o, &c->train, err)) return -1;
    const char *ev = cpt_cfg_str(cfg, "data.eval");
    if (*ev) {
        o.max_examples = (size_t)cpt_cfg_int(cfg, "train.eval_max_examples");
        if (cpt_sft_dataset_load(ev, &o, &c->eval, err)) return -1;
    }
    cpt_info("sft: %zu train examples (%zu truncated, %zu skipped), %zu eval examples", c->train.n,
             c->train.n_truncated, c->train.n_skipped, c->eval.n);
    return 0;
}

static int setup_optimizer(sft_ctx *c, cpt_err *err) {
    const cpt_config *cfg = c->cfg;
    c->params = cpt_model_param_list(c->model, &c->n_params, err);
    if (!c->params) return -1;
    cpt_adamw_hparams hp = {
        .beta1 = cpt_cfg_float(cfg, "optim.beta1"),
        .beta2 = cpt_cfg_float(cfg, "optim.beta2"),
        .eps = cpt_cfg_float(cfg, "optim.eps"),
        .weight_decay = cpt_cfg_float(cfg, "optim.weight_decay"),
    };
    c->opt = cpt_adamw_new(c->params, c->n_params, &hp, err);
    if (!c->opt) return -1;
    if (cpt_lr_kind_parse(cpt_cfg_str(cfg, "optim.schedule"), &c->sched.kind, err)) return -1;
    c->sched.base_lr = cpt_cfg_float(cfg, "optim.lr");
    c->sched.warmup_steps = cpt_cfg_int(cfg, "optim.warmup_steps");
    c->sched.total_steps = cpt_cfg_int(cfg, "train.steps");
    c->sched.min_lr_ratio = cpt_cfg_float(cfg, "optim.min_lr_ratio");
    return 0;
}

/* Data parallel: ranks from the bootstrap (PMIx under `srun --mpi=pmix`, else CPT_RANK / CPT_WORLD_SIZE), each
 * rank on its own GPU, gradients averaged by NCCL all-reduces that overlap the backward (trainer/dp.h). One rank
 * places the model as train.device says and never touches NCCL. */
static int setup_dp_and_place(sft_ctx *c, cpt_err *err) {
    const cpt_config *cfg = c->cfg;
    char boot[CPT_CKPT_PATH_MAX + 16];
    snprintf(boot, sizeof boot, "%s/bootstrap", cpt_cfg_str(cfg, "run.dir"));
    cpt_dp_opts o = {.bootstrap = cpt_cfg_str(cfg, "train.dp_bootstrap"), .boot_dir = boot,
                     .bucket_bytes = (size_t)cpt_cfg_int(cfg, "train.dp_bucket_mb") << 20};
    c->dp = cpt_dp_new(&o, err);
    if (!c->dp) return cpt_err_prefix(err, "data parallel");
    c->rank = cpt_dp_rank(c->dp);
    c->world = cpt_dp_size(c->dp);
    if (c->world == 1) return cpt_trainer_place_model(cfg, c->model, "sft model", err);
    if (strcmp(cpt_cfg_str(cfg, "train.device"), "cuda"))
        return cpt_errf(err, "data parallel over %d ranks needs train.device = \"cuda\" (NCCL averages GPU gradients)",
                        c->world);
#ifdef CPT_HAVE_CUDA
    int dev = cpt_dp_device(c->dp, cpt_cuda_device_count());
#else
    int dev = 0;
#endif
    if (cpt_model_use_cuda(c->model, dev, err)) return cpt_err_prefix(err, "sft model, rank %d", c->rank);
    if (cpt_dp_attach_model(c->dp, c->model, err)) return -1;
    cpt_model_set_grads_ready(c->model, cpt_dp_grads_ready_cb, c->dp);
    cpt_info("sft: data parallel rank %d/%d on CUDA device %d (bootstrap %s)", c->rank, c->world, dev,
             cpt_dp_bootstrap_name(c->dp));
    return 0;
}

/* ---------------- steps ---------------- */

static int forward_loss(sft_ctx *c, const cpt_sft_batch *mb, int train, double scale, double *loss_sum,
                        cpt_err *err) {
    cpt_batch b = {.n_tokens = mb->n_tokens, .n_seqs = mb->n_seqs, .tokens = mb->tokens,
                   .seq_start = mb->seq_start, .targets = mb->targets};
    cpt_forward_out fo = {.logprobs = c->logprobs};
    if (cpt_model_forward(c->model, &b, &fo, train, err)) return -1;
    double s = 0;
    for (int i = 0; i < mb->n_tokens; i++) {
        if (mb->targets[i] >= 0) s -= c->logprobs[i];
        if (train) c->d_logprobs[i] = mb->targets[i] >= 0 ? (float)-scale : 0.0f;
    }
    *loss_sum += s;
    if (train && cpt_model_backward(c->model, &b, c->d_logprobs, NULL, NULL, err)) return -1;
    return 0;
}

typedef struct step_stats {
    double loss, grad_norm, lr;
    long tokens, loss_tokens;
} step_stats;

/* One optimizer step over `accum` packed micro-batches per rank. The loss is the mean CE over every loss token of
 * the step on all ranks, so each token's gradient is scaled by 1 / (loss tokens of the whole step); every rank
 * packs all world * accum micro-batches (cheap: token ids only), so it knows that count and the data cursor stays
 * identical on every rank, and trains on micro-batches rank, rank + world, ... The all-reduce averages over the
 * ranks, hence the factor world in the scale: the summed gradient equals one big batch's. */
static int train_step(sft_ctx *c, step_stats *ss, cpt_err *err) {
    long n_loss = 0, n_tok = 0;
    const int n_mb = c->accum * c->world;
    for (int k = 0; k < n_mb; k++) {
        if (cpt_sft_pack_next(&c->cur, c->budget, &c->mbs[k], err)) return -1;
        n_loss += c->mbs[k].n_loss;
        n_tok += c->mbs[k].n_tokens;
    }
    cpt_model_zero_grad(c->model);
    double loss_sum = 0;
    for (int k = c->rank; k < n_mb; k += c->world) {
        cpt_dp_set_sync(c->dp, k + c->world >= n_mb); /* all-reduce during the last micro-batch's backward only */
        if (forward_loss(c, &c->mbs[k], 1, (double)c->world / (double)n_loss, &loss_sum, err)) return -1;
    }
    if (cpt_dp_finish(c->dp, err)) return -1;
    /* The step's loss over all ranks, and whether any rank was asked to stop. */
    float agree[2] = {(float)loss_sum, stop_requested ? 1.0f : 0.0f};
    if (c->world > 1 && cpt_dp_sum_host(c->dp, agree, 2, err)) return -1;
    if (c->world > 1) loss_sum = agree[0];
    c->stop_all = agree[1] > 0;
    ss->loss = loss_sum / (double)n_loss;
    ss->tokens = n_tok;
    ss->loss_tokens = n_loss;
    if (!isfinite(ss->loss))
        return cpt_errf(err, "step %" PRId64 ": the loss is not finite (%g); lower optim.lr?", c->st.step, ss->loss);
    ss->grad_norm = cpt_clip_grad_norm(c->params, c->n_params, cpt_cfg_float(c->cfg, "optim.grad_clip"));
    ss->lr = cpt_lr_at(&c->sched, c->st.step);
    cpt_adamw_step(c->opt, ss->lr);
    c->st.step++;
    c->st.weight_version = c->st.step;
    cpt_sft_cursor_tell(&c->cur, &c->st.data_epoch, &c->st.data_index);
    return 0;
}

static int eval_loss(sft_ctx *c, double *out, cpt_err *err) {
    double sum = 0;
    long n_loss = 0;
    size_t i = 0;
    while (i < c->eval.n) {
        int took = cpt_sft_pack_range(&c->eval, i, c->eval.n - i, c->budget, &c->eval_mb, err);
        if (took <= 0) return took < 0 ? -1 : cpt_errf(err, "eval: packing made no progress");
        if (forward_loss(c, &c->eval_mb, 0, 0, &sum, err)) return -1;
        n_loss += c->eval_mb.n_loss;
        i += (size_t)took;
    }
    *out = n_loss ? sum / (double)n_loss : NAN;
    return 0;
}

static char *trimmed_decode(const cpt_tokenizer *tok, const int32_t *ids, int n, cpt_err *err) {
    size_t len;
    char *s = cpt_tokenizer_decode(tok, ids, (size_t)n, 1, &len, err);
    if (!s) return NULL;
    size_t a = 0;
    while (a < len && (s[a] == ' ' || s[a] == '\n' || s[a] == '\t' || s[a] == '\r')) a++;
    while (len > a && (s[len - 1] == ' ' || s[len - 1] == '\n' || s[len - 1] == '\t' || s[len - 1] == '\r')) len--;
    memmove(s, s + a, len - a);
    s[len - a] = '\0';
    return s;
}

/* Greedy exact match over the first n eval examples: the decoded generation (special tokens dropped, trimmed)
 * equals the decoded reference completion. */
static int eval_exact_match(sft_ctx *c, int n, double *out, cpt_err *err) {
    if ((size_t)n > c->eval.n) n = (int)c->eval.n;
    int max_new = (int)cpt_cfg_int(c->cfg, "train.eval_max_new_tokens"), hits = 0;
    if (cpt_model_sync_to_host(c->model, err)) return -1; /* greedy decoding runs on the host weights */
    int32_t *gen = malloc((size_t)max_new * sizeof *gen);
    if (!gen) return cpt_errf(err, "out of memory");
    int rc = 0;
    for (int i = 0; i < n && !rc; i++) {
        const cpt_sft_example *e = &c->eval.ex[i];
        int g = cpt_greedy_generate(c->model, e->ids, e->n_prompt, max_new, c->stop_ids, c->n_stop, gen, err);
        if (g < 0) { rc = -1; break; }
        char *got = trimmed_decode(c->tok, gen, g, err);
        char *want = got ? trimmed_decode(c->tok, e->ids + e->n_prompt, e->n_answer, err) : NULL;
        if (!got || !want) rc = -1;
        else hits += !strcmp(got, want);
        if (i < 3 && got && want) cpt_info("sft eval: example %d: want \"%s\", got \"%s\"", i, want, got);
        free(got);
        free(want);
    }
    free(gen);
    *out = n ? (double)hits / n : NAN;
    return rc;
}

static int save_checkpoint(sft_ctx *c, cpt_err *err) {
    if (c->rank != 0) { /* every rank holds the same weights and optimizer state: rank 0 writes them */
        c->last_saved_step = c->st.step;
        return 0;
    }
    cpt_ckpt_save_args a = {
        .run_dir = cpt_cfg_str(c->cfg, "run.dir"),
        .model = c->model,
        .opt = c->opt,
        .state = &c->st,
        .tokenizer_path = c->tok_path,
        .config_text = c->config_text,
        .keep_last = (int)cpt_cfg_int(c->cfg, "checkpoint.keep_last"),
    };
    char dir[CPT_CKPT_PATH_MAX + 64];
    if (cpt_ckpt_save(&a, dir, sizeof dir, err)) return -1;
    c->last_saved_step = c->st.step;
    cpt_info("sft: checkpoint %s", dir);
    return 0;
}

static void fmt_duration(double s, char *buf, size_t cap) {
    if (!isfinite(s) || s < 0) s = 0;
    long t = (long)(s + 0.5);
    if (t >= 3600) snprintf(buf, cap, "%ldh%02ldm", t / 3600, (t / 60) % 60);
    else if (t >= 60) snprintf(buf, cap, "%ldm%02lds", t / 60, t % 60);
    else snprintf(buf, cap, "%lds", t);
}

static int log_metrics(sft_ctx *c, const char *const *keys, const double *vals, int n, cpt_err *err) {
    if (!c->metrics) return 0; /* ranks other than 0 */
    cpt_metrics_begin(c->metrics, c->st.step);
    for (int i = 0; i < n; i++) cpt_metrics_add(c->metrics, keys[i], vals[i]);
    return cpt_metrics_end(c->metrics, err);
}

/* ---------------- the run ---------------- */

static void ctx_free(sft_ctx *c) {
    if (c->mbs)
        for (int k = 0; k < c->accum * c->world; k++) cpt_sft_batch_free(&c->mbs[k]);
    free(c->mbs);
    cpt_sft_batch_free(&c->eval_mb);
    free(c->logprobs);
    free(c->d_logprobs);
    cpt_sft_cursor_free(&c->cur);
    cpt_sft_dataset_free(&c->train);
    cpt_sft_dataset_free(&c->eval);
    cpt_adamw_free(c->opt);
    free(c->params);
    cpt_model_free(c->model);
    cpt_dp_free(c->dp);
    if (c->have_tpl) cpt_chat_template_free(&c->tpl);
    cpt_tokenizer_free(c->tok);
    cpt_metrics_close(c->metrics);
    cpt_train_state_free(&c->st);
    free(c->config_text);
}

static int run(sft_ctx *c, cpt_sft_result *res, cpt_err *err) {
    const cpt_config *cfg = c->cfg;
    const char *run_dir = cpt_cfg_str(cfg, "run.dir");
    const int64_t total = cpt_cfg_int(cfg, "train.steps");
    const int64_t this_run = cpt_cfg_int(cfg, "train.max_steps_this_run");
    c->accum = (int)cpt_cfg_int(cfg, "train.grad_accum");
    c->budget = (int)cpt_cfg_int(cfg, "train.tokens_per_micro_batch");
    if (c->budget < cpt_cfg_int(cfg, "train.max_seq_len"))
        return cpt_errf(err, "train.tokens_per_micro_batch (%d) must be at least train.max_seq_len (%" PRId64 ")",
                        c->budget, cpt_cfg_int(cfg, "train.max_seq_len"));
    if (cpt_cfg_int(cfg, "train.threads") > 0) omp_set_num_threads((int)cpt_cfg_int(cfg, "train.threads"));

    if (setup_tokenizer(c, err) || setup_data(c, err)) return -1;
    c->model = cpt_trainer_model_from_config(cfg, cpt_tokenizer_vocab_size(c->tok), cpt_tokenizer_bos_id(c->tok),
                                             cpt_tokenizer_eos_id(c->tok), err);
    if (!c->model) return -1;
    if (cpt_model_cfg(c->model)->vocab_size < cpt_tokenizer_vocab_size(c->tok))
        return cpt_errf(err, "the model's vocabulary (%d) is smaller than the tokenizer's (%d)",
                        cpt_model_cfg(c->model)->vocab_size, cpt_tokenizer_vocab_size(c->tok));
    if (setup_dp_and_place(c, err)) return -1;
    if (setup_optimizer(c, err)) return -1;
    c->mbs = calloc((size_t)c->accum * (size_t)c->world, sizeof *c->mbs);
    c->logprobs = malloc((size_t)c->budget * sizeof *c->logprobs);
    c->d_logprobs = malloc((size_t)c->budget * sizeof *c->d_logprobs);
    c->config_text = cpt_config_dump(cfg);
    if (!c->mbs || !c->logprobs || !c->d_logprobs || !c->config_text) return cpt_errf(err, "out of memory");

    /* Resume from the newest good checkpoint, or start fresh. */
    c->last_saved_step = -1;
    uint64_t hash = cpt_config_hash(cfg);
    char ckpt[CPT_CKPT_PATH_MAX];
    int found = cpt_cfg_bool(cfg, "train.resume") ? cpt_ckpt_find_latest(run_dir, ckpt, sizeof ckpt, err) : 0;
    if (found < 0) return cpt_err_prefix(err, "resume");
    if (found) {
        if (cpt_ckpt_load(ckpt, c->model, c->opt, &c->st, err)) return -1;
        if (c->st.config_hash != hash)
            cpt_warn("resume: the config differs from the one %s was written with (continuing)", ckpt);
        c->last_saved_step = c->st.step;
        cpt_info("sft: resumed from %s at step %" PRId64 " (epoch %" PRId64 ", example %" PRId64 ")", ckpt,
                 c->st.step, c->st.data_epoch, c->st.data_index);
    }
    c->st.config_hash = hash;
    if (cpt_sft_cursor_init(&c->cur, &c->train, (uint64_t)cpt_cfg_int(cfg, "run.seed"), cpt_cfg_bool(cfg, "data.shuffle"),
                            c->st.data_epoch, c->st.data_index, err))
        return -1;

    char mpath[CPT_CKPT_PATH_MAX + 32];
    if (cpt_mkdir_p(run_dir, 0755, err)) return -1;
    snprintf(mpath, sizeof mpath, "%s/metrics.jsonl", run_dir);
    if (c->rank == 0) {
        c->metrics = cpt_metrics_open(mpath, err);
        if (!c->metrics) return -1;
    }

    const int64_t log_every = cpt_cfg_int(cfg, "train.log_every"), eval_every = cpt_cfg_int(cfg, "train.eval_every");
    const int64_t ck_every = cpt_cfg_int(cfg, "checkpoint.every");
    const int64_t first_step = c->st.step;
    double t0 = cpt_now(), t_log = t0;
    long tok_since_log = 0;
    res->last_loss = NAN;
    while (c->st.step < total && !c->stop_all && !stop_requested && !(this_run > 0 && c->st.step - first_step >= this_run)) {
        step_stats ss = {0};
        if (train_step(c, &ss, err)) return -1;
        res->last_loss = ss.loss;
        tok_since_log += ss.tokens;
        int64_t s = c->st.step;
        if (c->rank == 0 && (s % log_every == 0 || s == total)) {
            double now = cpt_now(), tok_s = tok_since_log / fmax(now - t_log, 1e-9);
            double eta = (now - t0) / (double)(s - first_step) * (double)(total - s);
            char eta_s[32];
            fmt_duration(eta, eta_s, sizeof eta_s);
            fprintf(stderr, "sft step %" PRId64 "/%" PRId64 " | loss %.4f | lr %.3e | grad_norm %.3f | %.0f tok/s | ETA %s\n",
                    s, total, ss.loss, ss.lr, ss.grad_norm, tok_s, eta_s);
            const char *k[] = {"train/loss", "lr", "grad_norm", "perf/train_tok_s", "train/loss_tokens"};
            double v[] = {ss.loss, ss.lr, ss.grad_norm, tok_s, (double)ss.loss_tokens};
            if (log_metrics(c, k, v, 5, err)) return -1;
            t_log = now;
            tok_since_log = 0;
        }
        if (c->rank == 0 && c->eval.n && eval_every > 0 && s % eval_every == 0 && s != total) {
            double el;
            if (eval_loss(c, &el, err)) return -1;
            fprintf(stderr, "sft step %" PRId64 "/%" PRId64 " | eval loss %.4f\n", s, total, el);
            const char *k[] = {"eval/loss"};
            if (log_metrics(c, k, &el, 1, err)) return -1;
        }
        if (ck_every > 0 && s % ck_every == 0 && s != total && save_checkpoint(c, err)) return -1;
    }
    res->steps_done = c->st.step;
    res->interrupted = c->stop_all || stop_requested != 0;
    if (res->interrupted)
        cpt_warn("sft: stopping at step %" PRId64 " on signal %d", c->st.step, (int)stop_requested);
    if (c->last_saved_step != c->st.step && save_checkpoint(c, err)) return -1;

    res->eval_loss = res->exact_match = NAN;
    if (c->rank == 0 && c->st.step >= total && c->eval.n) {
        if (eval_loss(c, &res->eval_loss, err)) return -1;
        int ng = (int)cpt_cfg_int(cfg, "train.eval_generate");
        if (ng > 0 && eval_exact_match(c, ng, &res->exact_match, err)) return -1;
        const char *k[] = {"eval/loss", "eval/exact_match"};
        double v[] = {res->eval_loss, res->exact_match};
        if (log_metrics(c, k, v, ng > 0 ? 2 : 1, err)) return -1;
        fprintf(stderr, "sft done: step %" PRId64 " | eval loss %.4f", c->st.step, res->eval_loss);
        if (ng > 0) fprintf(stderr, " | exact match %.3f (%d examples)", res->exact_match, ng < (int)c->eval.n ? ng : (int)c->eval.n);
        fprintf(stderr, "\n");
    }
    res->seconds = cpt_now() - t0;
    return 0;
}

int cpt_sft_run(const cpt_config *cfg, cpt_sft_result *res, cpt_err *err) {
    memset(res, 0, sizeof *res);
    sft_ctx c;
    memset(&c, 0, sizeof c);
    c.cfg = cfg;
    struct sigaction sa, old_usr1, old_term;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    stop_requested = 0;
    sigaction(SIGUSR1, &sa, &old_usr1);
    sigaction(SIGTERM, &sa, &old_term);
    int rc = run(&c, res, err);
    sigaction(SIGUSR1, &old_usr1, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    ctx_free(&c);
    return rc;
}
