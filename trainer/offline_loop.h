/* What the offline loops (SFT: trainer/sft.h, DPO: trainer/dpo.h) share: the tokenizer and chat template, the model
 * and its optimizer, the trainer state with its checkpoints and exact resume, and the metrics file. Each loop embeds
 * a cpt_offline and keeps its data, batches and steps to itself. */
#ifndef CPT_TRAINER_OFFLINE_LOOP_H
#define CPT_TRAINER_OFFLINE_LOOP_H

#include <stddef.h>
#include <stdint.h>

#include "core/chat_template.h"
#include "core/config.h"
#include "core/error.h"
#include "core/metrics.h"
#include "core/tokenizer.h"
#include "model/model.h"
#include "trainer/checkpoint.h"
#include "trainer/dp.h"
#include "trainer/optim.h"
#include "trainer/zero.h"

typedef struct cpt_offline {
    const cpt_config *cfg;
    const char *name; /* "sft", "dpo": the prefix of its log lines */
    char tok_path[CPT_CKPT_PATH_MAX];
    cpt_tokenizer *tok;
    cpt_chat_template tpl;
    int have_tpl;
    cpt_model *model;
    cpt_param **params;
    size_t n_params;
    cpt_adamw *opt;   /* NULL with train.zero = 1 */
    cpt_zero *zero;   /* train.zero = 1: this rank's slice of the optimizer (trainer/zero.h), else NULL */
    cpt_lr_schedule sched;
    cpt_metrics *metrics; /* NULL where this process does not write them (data-parallel ranks other than 0) */
    cpt_train_state st;
    int64_t last_saved_step;
    char *config_text; /* the resolved config, saved with each checkpoint */
    /* data parallel (cpt_offline_dp_open): one rank unless a bootstrap says otherwise */
    cpt_dp *dp;
    int rank, world, dp_device;
    int stop_all; /* the last cpt_offline_agree: some rank had been asked to stop */
    int ckpt_lock, have_ckpt_lock; /* rank 0: RUN_DIR/checkpoints/lock (cpt_ckpt_lock) */
} cpt_offline;

/* tokenizer.path (else model.path) and data.chat_template ("none": no template). */
int cpt_offline_tokenizer(cpt_offline *o, cpt_err *err);
/* The model of model.init (weights/model_init.h), checked to cover the tokenizer's
 * vocabulary; not placed on a device. */
cpt_model *cpt_offline_new_model(const cpt_offline *o, cpt_err *err);
/* The param list of o->model, AdamW from optim.beta1/beta2/eps/weight_decay, and the optim.lr schedule. With
 * train.zero = 1 (SFT only) the optimizer is this rank's ZeRO-1 slice (o->zero) instead of o->opt: call it after
 * cpt_offline_dp_open and cpt_offline_place. */
int cpt_offline_optimizer(cpt_offline *o, cpt_err *err);
/* Rank 0 first takes the run folder's checkpoint lock (a second trainer on the same run.dir is refused; held until
 * cpt_offline_free). Then, with train.resume, loads the newest good checkpoint of run.dir into the model, optimizer
 * and state (a config that differs is a warning). Returns 1 when it resumed (ckpt names the checkpoint), 0 for a
 * fresh start, -1. Either way the state then carries this config's hash. Call it after cpt_offline_dp_open. */
int cpt_offline_resume(cpt_offline *o, char *ckpt, size_t ckpt_cap, cpt_err *err);
/* Creates run.dir and, when write is set, opens run.dir/metrics.jsonl, first removing the lines of steps after the
 * checkpoint resumed from (all of them on a fresh start): those steps are trained and logged again. */
int cpt_offline_open_metrics(cpt_offline *o, int write, cpt_err *err);
/* One metrics line at the current step; nothing where the metrics are not open. */
int cpt_offline_log(cpt_offline *o, const char *const *keys, const double *vals, int n, cpt_err *err);
/* Data parallel: the ranks of train.dp_bootstrap (PMIx under `srun --mpi=pmix`, else CPT_RANK / CPT_WORLD_SIZE),
 * each rank on its own GPU (o->dp_device), gradients averaged by NCCL all-reduces that overlap the backward
 * (trainer/dp.h). More than one rank needs train.device = "cuda"; one rank never touches NCCL. */
int cpt_offline_dp_open(cpt_offline *o, cpt_err *err);
/* Places m: as train.device says with one rank, else on this rank's GPU (train.recompute applies). With attach, m
 * is the model whose gradients the group averages (the trained one; at most one). */
int cpt_offline_place(cpt_offline *o, cpt_model *m, const char *what, int attach, cpt_err *err);
/* The end of a step on every rank: vals[0..n) (n < CPT_DP_HOST_SUM_MAX) summed over the ranks in place, and
 * o->stop_all set when any rank has a stop signal (signal != 0). One rank: nothing moves. */
int cpt_offline_agree(cpt_offline *o, float *vals, int n, int signal, cpt_err *err);
/* Whether the loop ends before another step. One rank: at once on its signal. More: only when they agreed to
 * (o->stop_all), so a signal seen by one rank between two agreements cannot leave the others waiting in a collective
 * it never joins. */
int cpt_offline_stopping(const cpt_offline *o, int signal);
/* A checkpoint of the current step (checkpoint.keep_last retention), logged as "NAME: checkpoint DIR". Every rank
 * holds the same weights and optimizer state, so only rank 0 writes; the others only note the step. With ZeRO each
 * rank first writes its optimizer slice into RUN_DIR/checkpoints/.zero-step-N/, the ranks agree that all did, and
 * rank 0 moves those files into the step folder it commits. Collective then: every rank calls it at the same step. */
int cpt_offline_save(cpt_offline *o, cpt_err *err);
void cpt_offline_free(cpt_offline *o);

#endif
