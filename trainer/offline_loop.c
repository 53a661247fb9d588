#include "trainer/offline_loop.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fs.h"
#ifdef CPT_HAVE_CUDA
#include "kernels/cuda/cuda_ops.h"
#endif
#include "weights/devices.h"
#include "weights/model_init.h"

int cpt_offline_tokenizer(cpt_offline *o, cpt_err *err) {
    const char *tp = cpt_cfg_str(o->cfg, "tokenizer.path");
    if (!*tp) tp = cpt_cfg_str(o->cfg, "model.path");
    if (!*tp) return cpt_errf(err, "tokenizer.path is empty and there is no model.path to take it from");
    snprintf(o->tok_path, sizeof o->tok_path, "%s", tp);
    o->tok = cpt_tokenizer_load(tp, err);
    if (!o->tok) return cpt_err_prefix(err, "tokenizer %s", tp);
    const char *tn = cpt_cfg_str(o->cfg, "data.chat_template");
    if (strcmp(tn, "none")) {
        if (cpt_chat_template_load(tp, tn, &o->tpl, err)) return cpt_err_prefix(err, "data.chat_template");
        o->have_tpl = 1;
    }
    return 0;
}

cpt_model *cpt_offline_new_model(const cpt_offline *o, cpt_err *err) {
    int vocab = cpt_tokenizer_vocab_size(o->tok);
    cpt_model *m = cpt_model_from_config(o->cfg, vocab, cpt_tokenizer_bos_id(o->tok),
                                                 cpt_tokenizer_eos_id(o->tok), err);
    if (m && cpt_model_cfg(m)->vocab_size < vocab) {
        cpt_errf(err, "the model's vocabulary (%d) is smaller than the tokenizer's (%d)", cpt_model_cfg(m)->vocab_size,
                 vocab);
        cpt_model_free(m);
        return NULL;
    }
    return m;
}

int cpt_offline_optimizer(cpt_offline *o, cpt_err *err) {
    const cpt_config *cfg = o->cfg;
    o->params = cpt_model_param_list(o->model, &o->n_params, err);
    if (!o->params) return -1;
    cpt_adamw_hparams hp = {
        .beta1 = cpt_cfg_float(cfg, "optim.beta1"),
        .beta2 = cpt_cfg_float(cfg, "optim.beta2"),
        .eps = cpt_cfg_float(cfg, "optim.eps"),
        .weight_decay = cpt_cfg_float(cfg, "optim.weight_decay"),
    };
    if (cpt_cfg_int(cfg, "train.zero")) {
        o->zero = cpt_zero_new(o->model, o->dp, &hp, err);
        if (!o->zero) return -1;
        cpt_info("%s: ZeRO-1 rank %d/%d: optimizer state %zu bytes (floats [%zu, %zu) of %zu)", o->name, o->rank,
                 o->world, cpt_zero_state_bytes(o->zero), o->zero->lo, o->zero->lo + o->zero->shard, o->zero->numel);
    } else {
        o->opt = cpt_adamw_new(o->params, o->n_params, &hp, err);
        if (!o->opt) return -1;
        cpt_info("%s: optimizer state %zu bytes", o->name, 2 * cpt_model_numel(o->model) * sizeof(float));
    }
    if (cpt_lr_kind_parse(cpt_cfg_str(cfg, "optim.schedule"), &o->sched.kind, err)) return -1;
    o->sched.base_lr = cpt_cfg_float(cfg, "optim.lr");
    o->sched.warmup_steps = cpt_cfg_int(cfg, "optim.warmup_steps");
    o->sched.total_steps = cpt_cfg_int(cfg, "train.steps");
    o->sched.min_lr_ratio = cpt_cfg_float(cfg, "optim.min_lr_ratio");
    return 0;
}

int cpt_offline_resume(cpt_offline *o, char *ckpt, size_t ckpt_cap, cpt_err *err) {
    o->last_saved_step = -1;
    if (o->rank == 0 && !o->have_ckpt_lock) {
        o->ckpt_lock = cpt_ckpt_lock(cpt_cfg_str(o->cfg, "run.dir"), err);
        if (o->ckpt_lock < 0) return -1;
        o->have_ckpt_lock = 1;
    }
    uint64_t hash = cpt_config_hash(o->cfg);
    if (!cpt_cfg_bool(o->cfg, "train.resume") && cpt_ckpt_refuse_restart(cpt_cfg_str(o->cfg, "run.dir"), err))
        return -1;
    int found = cpt_cfg_bool(o->cfg, "train.resume")
                    ? cpt_ckpt_find_latest(cpt_cfg_str(o->cfg, "run.dir"), ckpt, ckpt_cap, err)
                    : 0;
    if (found < 0) return cpt_err_prefix(err, "resume");
    if (found) {
        if (cpt_ckpt_load(ckpt, o->model, o->opt, &o->st, err)) return -1;
        if (o->zero && cpt_zero_resume(o->zero, ckpt, o->st.step, 1, o->name, err))
            return cpt_err_prefix(err, "resume: ");
        if (o->st.config_hash != hash)
            cpt_warn("resume: the config differs from the one %s was written with (continuing)", ckpt);
        o->last_saved_step = o->st.step;
    }
    o->st.config_hash = hash;
    return found;
}

int cpt_offline_open_metrics(cpt_offline *o, int write, cpt_err *err) {
    const char *run_dir = cpt_cfg_str(o->cfg, "run.dir");
    char mpath[CPT_CKPT_PATH_MAX + 32];
    if (cpt_mkdir_p(run_dir, 0755, err)) return -1;
    if (!write) return 0;
    snprintf(mpath, sizeof mpath, "%s/metrics.jsonl", run_dir);
    long dropped = cpt_metrics_truncate_after(mpath, o->last_saved_step, err);
    if (dropped < 0) return -1;
    if (dropped > 0) cpt_info("%s: %ld metrics line(s) of steps after the checkpoint removed from %s", o->name, dropped, mpath);
    o->metrics = cpt_metrics_open(mpath, err);
    if (!o->metrics) return -1;
    snprintf(mpath, sizeof mpath, "%s/tensorboard", run_dir);
    if (!cpt_cfg_bool(o->cfg, "metrics.tensorboard")) return 0;
    return cpt_metrics_tensorboard(o->metrics, mpath, o->last_saved_step + 1, err);
}

int cpt_offline_log(cpt_offline *o, const char *const *keys, const double *vals, int n, cpt_err *err) {
    if (!o->metrics) return 0;
    cpt_metrics_begin(o->metrics, o->st.step);
    for (int i = 0; i < n; i++) cpt_metrics_add(o->metrics, keys[i], vals[i]);
    return cpt_metrics_end(o->metrics, err);
}

int cpt_offline_dp_open(cpt_offline *o, cpt_err *err) {
    const cpt_config *cfg = o->cfg;
    char boot[CPT_CKPT_PATH_MAX + 16];
    snprintf(boot, sizeof boot, "%s/bootstrap", cpt_cfg_str(cfg, "run.dir"));
    int gpu = !strcmp(cpt_device_resolve(cfg, "train.device"), "cuda");
    /* GPU ranks average over NCCL; CPU ranks over Open MPI (started by mpirun or srun --mpi=pmix) */
    cpt_dp_opts d = {.bootstrap = cpt_cfg_str(cfg, "train.dp_bootstrap"), .boot_dir = boot,
                     .bucket_bytes = (size_t)cpt_cfg_int(cfg, "train.dp_bucket_mb") << 20,
                     .backend = gpu ? "nccl" : "mpi"};
    o->dp = cpt_dp_new(&d, err);
    if (!o->dp) return cpt_err_prefix(err, "data parallel");
    o->rank = cpt_dp_rank(o->dp);
    o->world = cpt_dp_size(o->dp);
    o->dp_device = 0;
    if (o->world == 1 || !gpu) return 0;
#ifdef CPT_HAVE_CUDA
    o->dp_device = cpt_dp_device(o->dp, cpt_cuda_device_count());
#endif
    return 0;
}

int cpt_offline_place(cpt_offline *o, cpt_model *m, const char *what, int attach, cpt_err *err) {
    if (o->world <= 1) return cpt_trainer_place_model(o->cfg, m, what, err);
    if (cpt_dp_backend(o->dp) == CPT_DP_BACKEND_MPI) { /* CPU ranks: the host gradients, one all-reduce a step */
        if (!attach) return 0;
        if (cpt_dp_attach_model(o->dp, m, err)) return -1;
        cpt_info("%s: data parallel rank %d/%d on the CPU (%s)", o->name, o->rank, o->world, cpt_dp_library(o->dp));
        return 0;
    }
    if ((cpt_cfg_bool(o->cfg, "train.optimizer_offload") && cpt_model_set_host_master(m, 1, err)) ||
        cpt_model_use_cuda(m, o->dp_device, err))
        return cpt_err_prefix(err, "%s, rank %d", what, o->rank);
    cpt_model_set_recompute(m, cpt_cfg_bool(o->cfg, "train.recompute"));
    if (!attach) return 0;
    if (cpt_dp_attach_model(o->dp, m, err)) return -1;
    cpt_model_set_grads_ready(m, cpt_dp_grads_ready_cb, o->dp);
    cpt_info("%s: data parallel rank %d/%d on CUDA device %d (bootstrap %s)", o->name, o->rank, o->world,
             o->dp_device, cpt_dp_bootstrap_name(o->dp));
    return 0;
}

int cpt_offline_agree(cpt_offline *o, float *vals, int n, int signal, cpt_err *err) {
    float v[CPT_DP_HOST_SUM_MAX];
    if (n < 0 || n >= CPT_DP_HOST_SUM_MAX) return cpt_errf(err, "%s: %d values to agree on (fewer than %d)", o->name, n,
                                                          CPT_DP_HOST_SUM_MAX);
    memcpy(v, vals, sizeof(float) * (size_t)n);
    v[n] = signal ? 1.0f : 0.0f;
    if (o->world > 1 && cpt_dp_sum_host(o->dp, v, n + 1, err)) return -1;
    memcpy(vals, v, sizeof(float) * (size_t)n);
    o->stop_all = v[n] > 0;
    return 0;
}

int cpt_offline_stopping(const cpt_offline *o, int signal) { return o->world > 1 ? o->stop_all : signal != 0; }

int cpt_offline_save(cpt_offline *o, cpt_err *err) {
    char staging[CPT_CKPT_PATH_MAX + 64];
    cpt_ckpt_staging_dir(cpt_cfg_str(o->cfg, "run.dir"), o->st.step, staging, sizeof staging);
    if (o->zero && cpt_zero_save_all(o->zero, staging, err))
        return cpt_err_prefix(err, "checkpoint step %" PRId64 ": ", o->st.step);
    if (o->rank != 0) {
        o->last_saved_step = o->st.step;
        return 0;
    }
    uint64_t shard_bytes;
    if (cpt_ckpt_max_shard_bytes(o->cfg, &shard_bytes, err)) return -1;
    o->st.world_size = o->world;
    cpt_ckpt_save_args a = {
        .run_dir = cpt_cfg_str(o->cfg, "run.dir"),
        .max_shard_bytes = shard_bytes,
        .model = o->model,
        .opt = o->opt,
        .state = &o->st,
        .tokenizer_path = o->tok_path,
        .config_text = o->config_text,
        .keep_last = (int)cpt_cfg_int(o->cfg, "checkpoint.keep_last"),
        .extra_dir = o->zero ? staging : NULL,
    };
    char dir[CPT_CKPT_PATH_MAX + 64];
    if (cpt_ckpt_save(&a, dir, sizeof dir, err)) return -1;
    o->last_saved_step = o->st.step;
    cpt_info("%s: checkpoint %s", o->name, dir);
    return 0;
}

void cpt_offline_free(cpt_offline *o) {
    cpt_adamw_free(o->opt);
    cpt_zero_free(o->zero);
    free(o->params);
    cpt_model_free(o->model);
    if (o->have_tpl) cpt_chat_template_free(&o->tpl);
    cpt_tokenizer_free(o->tok);
    cpt_metrics_close(o->metrics);
    cpt_train_state_free(&o->st);
    free(o->config_text);
    cpt_dp_free(o->dp); /* after the model, which its group held */
    if (o->have_ckpt_lock) cpt_ckpt_unlock(o->ckpt_lock);
    o->have_ckpt_lock = 0;
}
