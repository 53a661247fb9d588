#include "trainer/online.h"

#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/chat_template.h"
#include "core/dataset.h"
#include "core/exit_status.h"
#include "core/fs.h"
#include "core/metrics.h"
#include "core/tokenizer.h"
#include "queue/conn.h"
#include "queue/lease.h"
#include "queue/stream.h"
#include "reward/eval.h"
#include "reward/reward.h"
#include "trainer/checkpoint.h"
#include "trainer/dp.h"
#include "trainer/online_agree.h"
#include "trainer/online_book.h"
#include "trainer/online_dead.h"
#include "trainer/online_defaults.h"
#include "trainer/online_idle.h"
#include "trainer/online_ranks.h"
#include "trainer/online_step.h"
#include "trainer/rl_data.h"
#include "trainer/val_gpu.h"
#include "trainer/zero.h"
#include "weights/devices.h"
#include "weights/model_init.h"
#include "weights/weights_pub.h"
#include "weights/weights_tx.h"
#ifdef CPT_HAVE_CUDA
#include "kernels/cuda/cuda_ops.h"
#endif

/* Whole-run counters kept in the checkpoint's trainer state, so a restart adds to them. */
enum { T_TRAINED, T_STALE, T_DUPLICATES, T_UNKNOWN, T_REISSUED, T_DYNAMIC, T_FAILED, T_SKIPPED, N_TOTALS };
static const char *const total_names[N_TOTALS] = {"groups/trained", "groups/dropped_stale", "groups/duplicates",
                                                  "groups/unknown", "groups/reissued", "groups/dynamic_dropped",
                                                  "groups/failed", "groups/skipped"};

int cpt_online_is_online(const char *t) { return !strcmp(t, "grpo") || !strcmp(t, "ppo") || !strcmp(t, "opd"); }

typedef struct online_ctx {
    const cpt_config *cfg;
    const char *run_dir, *run;
    volatile sig_atomic_t *stop;
    cpt_objective_config oc;
    int sync;
    int64_t max_staleness, groups_per_step, total_steps;
    char tok_path[CPT_CKPT_PATH_MAX];
    cpt_tokenizer *tok;
    cpt_chat_template tpl;
    int have_tpl;
    int32_t stop_ids[4];
    int n_stop;
    cpt_dataset *ds;
    cpt_data_order order;
    cpt_model *policy, *ref, *critic;
    cpt_online_learner L;
    cpt_queue *q;
    cpt_queue_conn conn; /* where q lives (the queue's and the lease's connections read it) */
    cpt_weights_tx *tx; /* weights.transport (weights/weights_tx.h) */
    cpt_online_book book;
    cpt_dead_reader dead; /* failed groups: bounded re-issue, then skip */
    cpt_queue_item *held; /* accepted scored groups waiting to be trained on */
    size_t n_held, cap_held;
    cpt_rl_batch batch;
    cpt_metrics *metrics;
    cpt_train_state st;
    int64_t last_saved_step;
    char *config_text;
    long dynamic_dropped, queue_dup_base;
    int64_t total_base[N_TOTALS]; /* the totals of the checkpoint this attempt resumed from */
    cpt_lease *lease;             /* this trainer's hold on the run's queue (queue/lease.h) */
    int ckpt_lock;                /* RUN_DIR/checkpoints/lock, -1 when not held */
    double wait_s;
    /* held-out validation (validation.*): greedy or sampled generations scored with the run's reward */
    cpt_dataset *val;
    cpt_reward *val_reward;
    cpt_eval_tools val_tools; /* env.type: validation with the tool */
    cpt_val_gpu *val_gpu; /* validation.device auto/cuda: the inference copy on the policy's GPU (lazily) */
    int val_gpu_off;      /* it could not be placed: the host validates */
    int cuda_device;      /* the policy's CUDA device */
    /* trainer ranks (trainer/online_ranks.h): rank 0 is this trainer, the others follow its headers */
    cpt_dp *dp;
    int rank, world;
    int stop_all;       /* a stop request seen by some rank at the last step */
    int peers_at_header; /* rank 0: the other ranks wait for a header (a failure here can be told to them) */
    int rank0_failed;    /* a follower: rank 0 told it failed (every rank is out of the collectives) */
    int64_t ck_every;
} online_ctx;

/* ---------------- setup ---------------- */

static void add_stop(online_ctx *c, int32_t id) {
    if (id < 0 || c->n_stop == 4) return;
    for (int i = 0; i < c->n_stop; i++)
        if (c->stop_ids[i] == id) return;
    c->stop_ids[c->n_stop++] = id;
}

/* Every rank's: the tokenizer gives the models' vocabulary and end tokens. */
static int setup_data(online_ctx *c, cpt_err *err) {
    const cpt_config *cfg = c->cfg;
    const char *tp = cpt_cfg_str(cfg, "tokenizer.path");
    if (!*tp) tp = cpt_cfg_str(cfg, "model.path");
    if (!*tp) return cpt_errf(err, "tokenizer.path is empty and there is no model.path to take it from");
    snprintf(c->tok_path, sizeof c->tok_path, "%s", tp);
    c->tok = cpt_tokenizer_load(tp, err);
    if (!c->tok) return cpt_err_prefix(err, "tokenizer %s", tp);
    const char *tn = cpt_cfg_str(cfg, "data.chat_template");
    if (strcmp(tn, "none")) {
        if (cpt_chat_template_load(tp, tn, &c->tpl, err)) return cpt_err_prefix(err, "data.chat_template");
        c->have_tpl = 1;
    }
    add_stop(c, cpt_tokenizer_eos_id(c->tok));
    add_stop(c, cpt_tokenizer_token_id(c->tok, "<|im_end|>"));
    add_stop(c, cpt_tokenizer_token_id(c->tok, "<|eot_id|>"));
    add_stop(c, cpt_tokenizer_token_id(c->tok, "<|endoftext|>"));
    return 0;
}

/* Rank 0's: the prompts and their order. */
static int setup_dataset(online_ctx *c, cpt_err *err) {
    const cpt_config *cfg = c->cfg;
    const char *train = cpt_cfg_str(cfg, "data.train");
    if (!*train) return cpt_errf(err, "data.train is empty (an rl_prompt JSONL file)");
    c->ds = cpt_dataset_load_config(train, cfg, err);
    if (!c->ds) return -1;
    if (cpt_dataset_format(c->ds) != CPT_DATA_RL_PROMPT)
        return cpt_errf(err, "%s: online training needs rl_prompt records ({\"prompt\", \"answer\"}), not %s", train,
                        cpt_data_format_name(cpt_dataset_format(c->ds)));
    return cpt_data_order_init(&c->order, cpt_dataset_count(c->ds), (uint64_t)cpt_cfg_int(cfg, "run.seed"),
                               cpt_cfg_bool(cfg, "data.shuffle"), err);
}

/* With several ranks on GPUs (the NCCL backend) each rank takes its own device (the local rank modulo the visible
 * devices). */
static int place(online_ctx *c, cpt_model *m, const char *what, cpt_err *err) {
    if (c->world <= 1 || cpt_dp_backend(c->dp) != CPT_DP_BACKEND_NCCL)
        return cpt_trainer_place_model(c->cfg, m, what, err);
    int d = 0;
#ifdef CPT_HAVE_CUDA
    d = cpt_dp_device(c->dp, cpt_cuda_device_count());
#endif
    /* cuda_ipc announces train.cuda_device as the device its readers open the weights on */
    if (c->rank == 0 && !strcmp(cpt_transport_resolve(c->cfg), "cuda_ipc") &&
        d != (int)cpt_cfg_int(c->cfg, "train.cuda_device"))
        return cpt_errf(err, "weights.transport = \"cuda_ipc\" announces train.cuda_device = %d, but trainer rank 0 "
                        "of %d runs on CUDA device %d (its local rank): set train.cuda_device = %d",
                        (int)cpt_cfg_int(c->cfg, "train.cuda_device"), c->world, d, d);
    if ((cpt_cfg_bool(c->cfg, "train.optimizer_offload") && cpt_model_set_host_master(m, 1, err)) ||
        cpt_model_use_cuda(m, d, err))
        return cpt_err_prefix(err, "%s, trainer rank %d", what, c->rank);
    cpt_model_set_recompute(m, cpt_cfg_bool(c->cfg, "train.recompute"));
    c->cuda_device = d;
    cpt_info("%s: trainer rank %d/%d on CUDA device %d", what, c->rank, c->world, d);
    return 0;
}

static int setup_models(online_ctx *c, cpt_err *err) {
    const cpt_config *cfg = c->cfg;
    int V = cpt_tokenizer_vocab_size(c->tok), bos = cpt_tokenizer_bos_id(c->tok), eos = cpt_tokenizer_eos_id(c->tok);
    c->policy = cpt_model_from_config(cfg, V, bos, eos, err);
    if (!c->policy) return -1;
    if (cpt_model_cfg(c->policy)->vocab_size < V)
        return cpt_errf(err, "the model's vocabulary (%d) is smaller than the tokenizer's (%d)",
                        cpt_model_cfg(c->policy)->vocab_size, V);
    if (cpt_objective_needs_ref(&c->oc)) {
        /* The reference is the initial policy, frozen: loaded again from the config, never from a checkpoint. */
        c->ref = cpt_model_from_config(cfg, V, bos, eos, err);
        if (!c->ref) return cpt_err_prefix(err, "reference model");
    }
    if (c->oc.type == CPT_OBJ_PPO) {
        const char *cp = cpt_cfg_str(cfg, "critic.path");
        c->critic = *cp ? cpt_model_load(cp, err) : cpt_model_from_config(cfg, V, bos, eos, err);
        if (!c->critic) return cpt_err_prefix(err, "critic %s", *cp ? cp : "(the policy's initial weights)");
        if (!cpt_model_has_value_head(c->critic) &&
            cpt_model_add_value_head(c->critic, (uint64_t)cpt_cfg_int(cfg, "run.seed") + 17, err))
            return -1;
    }
    /* on a GPU every objective runs there: they all meet the model at logprobs (and values) */
    if (place(c, c->policy, "policy", err) || (c->ref && place(c, c->ref, "reference model", err)) ||
        (c->critic && place(c, c->critic, "critic", err)))
        return -1;
    if (cpt_online_learner_init(&c->L, cfg, &c->oc, c->policy, c->ref, c->critic, err)) return -1;
    c->L.dp = c->dp;
    /* the group's collectives run on the policy's device (NCCL); gradients are averaged whole after the backward */
    if (c->world > 1 && cpt_dp_attach_model(c->dp, c->policy, err))
        return cpt_err_prefix(err, "trainer rank %d", c->rank);
    if (cpt_cfg_int(cfg, "train.zero")) {
        if (cpt_online_learner_shard(&c->L, c->dp, err)) return cpt_err_prefix(err, "trainer rank %d", c->rank);
        cpt_info("online: ZeRO-1 rank %d/%d: policy optimizer state %zu bytes (floats [%zu, %zu) of %zu)%s", c->rank,
                 c->world, cpt_zero_state_bytes(c->L.zero), c->L.zero->lo, c->L.zero->lo + c->L.zero->shard,
                 c->L.zero->numel, c->L.czero ? ", the critic's sharded too" : "");
    }
    return 0;
}

/* One trainer per queue and per run folder: the lease before anything is written (its token then goes with every
 * prompt, weights announcement and checkpoint switch), and the checkpoint folder's lock. */
static int take_lease(online_ctx *c, const char *url, const char *tls_ca, cpt_err *err) {
    cpt_lease_opts lo = {
        .url = url,
        .password_file = c->conn.password_file[0] ? c->conn.password_file : NULL,
        .tls_ca = tls_ca,
        .run = c->run,
        .ttl_ms = (int)(cpt_cfg_float(c->cfg, "online.lease_ttl_s") * 1000.0),
        .wait_s = cpt_cfg_float(c->cfg, "online.lease_wait_s"),
        .stop = c->stop,
    };
    c->lease = cpt_lease_acquire(&lo, err);
    if (!c->lease) return -1;
    cpt_queue_set_fence(c->q, cpt_lease_token(c->lease));
    c->ckpt_lock = cpt_ckpt_lock(c->run_dir, err);
    return c->ckpt_lock < 0 ? -1 : 0;
}

/* The checkpoint's commit check: refuses when a newer trainer holds the lease. */
static int check_fence(void *arg, cpt_err *err) {
    online_ctx *c = arg;
    if (cpt_lease_lost(c->lease))
        return cpt_errf(err, "fenced off: another trainer took this run's queue (lease token %" PRId64 " superseded)",
                        cpt_lease_token(c->lease));
    return cpt_lease_check(c->q->redis, c->run, cpt_lease_token(c->lease), err);
}

static int open_queue(online_ctx *c, cpt_err *err) {
    const cpt_config *cfg = c->cfg;
    /* queue.url, else RUN_DIR/queue.json as the launcher wrote it for every role (url, password file, TLS CA) */
    cpt_queue_conn *conn = &c->conn;
    if (*cpt_cfg_str(cfg, "queue.url") ? cpt_queue_conn_from_config(cfg, conn, err)
                                       : cpt_queue_conn_from_run_dir(c->run_dir, conn, err))
        return cpt_err_prefix(err, "the run's queue (set queue.url, or start the run with `cpt run`)");
    /* a password file or CA the config names wins over the folder's */
    if (*cpt_cfg_str(cfg, "queue.password_file"))
        snprintf(conn->password_file, sizeof conn->password_file, "%s", cpt_cfg_str(cfg, "queue.password_file"));
    if (*cpt_cfg_str(cfg, "queue.tls_ca"))
        snprintf(conn->tls_ca, sizeof conn->tls_ca, "%s", cpt_cfg_str(cfg, "queue.tls_ca"));
    cpt_queue_opts o;
    cpt_queue_opts_from_config(cfg, conn, &o);
    o.run = c->run;
    o.read_count = 16;
    o.stop = c->stop;
    c->q = cpt_queue_open(&o, err);
    if (!c->q) return -1;
    if (take_lease(c, conn->url, o.tls_ca, err)) return -1;
    /* Creating the downstream groups here too means prompts issued before the first worker starts are kept. */
    if (cpt_queue_create_group(c->q, CPT_STREAM_PROMPTS, "rollout", err) ||
        cpt_queue_create_group(c->q, CPT_STREAM_ROLLOUTS, "reward", err) ||
        cpt_queue_create_group(c->q, CPT_STREAM_SCORED, "trainer", err))
        return -1;
    return 0;
}

/* ---------------- whole-run totals ---------------- */

static void totals_now(const online_ctx *c, int64_t t[N_TOTALS]) {
    t[T_TRAINED] = c->book.trained;
    t[T_STALE] = c->book.stale;
    t[T_DUPLICATES] = c->book.duplicates + (c->q ? c->q->stats.duplicates : 0);
    t[T_UNKNOWN] = c->book.unknown;
    t[T_REISSUED] = c->book.reissued;
    t[T_DYNAMIC] = c->dynamic_dropped;
    t[T_FAILED] = c->book.failed;
    t[T_SKIPPED] = c->book.skipped;
    for (int i = 0; i < N_TOTALS; i++) t[i] += c->total_base[i];
}

static void totals_from_state(online_ctx *c) {
    for (int i = 0; i < N_TOTALS; i++) c->total_base[i] = cpt_train_state_total(&c->st, total_names[i]);
}

static int totals_to_state(online_ctx *c, cpt_err *err) {
    int64_t t[N_TOTALS];
    totals_now(c, t);
    for (int i = 0; i < N_TOTALS; i++)
        if (cpt_train_state_set_total(&c->st, total_names[i], t[i], err)) return -1;
    return 0;
}

/* ---------------- checkpoints ---------------- */

static void critic_run_dir(online_ctx *c, char *out, size_t cap) { snprintf(out, cap, "%s/critic", c->run_dir); }

/* Where the ZeRO ranks put their optimizer shards of step `step` before rank 0 moves them into the step folder. */
static void zero_staging(online_ctx *c, int critic, int64_t step, char *out, size_t cap) {
    char run[CPT_CKPT_PATH_MAX];
    if (critic) critic_run_dir(c, run, sizeof run);
    else snprintf(run, sizeof run, "%s", c->run_dir);
    cpt_ckpt_staging_dir(run, step, out, cap);
}

/* train.zero = 1: every rank writes its optimizer shards of the current step (the policy's, the critic's) for the
 * checkpoint rank 0 is about to write. Collective: every rank at the same point. */
static int zero_stage(online_ctx *c, int64_t step, cpt_err *err) {
    char dir[CPT_CKPT_PATH_MAX + 64];
    struct cpt_zero *z[2] = {c->L.zero, c->L.czero};
    for (int k = 0; k < 2; k++) {
        if (!z[k]) continue;
        zero_staging(c, k, step, dir, sizeof dir);
        if (cpt_zero_save_all(z[k], dir, err))
            return cpt_err_prefix(err, "checkpoint step %" PRId64 ", rank %d", step, c->rank);
    }
    return 0;
}

static int save_checkpoint(online_ctx *c, cpt_err *err) {
    free(c->st.outstanding);
    c->st.outstanding = NULL;
    if (cpt_book_outstanding(&c->book, &c->st.outstanding, &c->st.n_outstanding, err)) return -1;
    /* The order's cursor, not the book's: the book's is one past the last id and does not wrap at the end of an
     * epoch, (0, n) where the order says (1, 0). */
    cpt_data_cursor cur = cpt_data_order_tell(&c->order);
    c->st.data_epoch = (int64_t)cur.epoch;
    c->st.data_index = (int64_t)cur.index;
    c->st.lease_token = cpt_lease_token(c->lease);
    if (totals_to_state(c, err)) return -1;
    c->st.world_size = c->world;
    int keep = (int)cpt_cfg_int(c->cfg, "checkpoint.keep_last");
    uint64_t shard_bytes;
    if (cpt_ckpt_max_shard_bytes(c->cfg, &shard_bytes, err)) return -1;
    char dir[CPT_CKPT_PATH_MAX + 64], staging[2][CPT_CKPT_PATH_MAX + 64];
    /* with other ranks they wrote their shards at the step (after_step, or FINISH); alone, here */
    if (c->L.zero && c->world == 1 && zero_stage(c, c->st.step, err)) return -1;
    for (int k = 0; k < 2; k++) zero_staging(c, k, c->st.step, staging[k], sizeof staging[k]);
    if (c->critic) {
        /* The critic first: the policy's `latest` is the commit point, and resume loads the critic of that step. */
        char cdir[CPT_CKPT_PATH_MAX];
        critic_run_dir(c, cdir, sizeof cdir);
        cpt_ckpt_save_args a = {.run_dir = cdir, .model = c->critic, .opt = c->L.copt, .state = &c->st,
                                .keep_last = keep, .max_shard_bytes = shard_bytes, .before_commit = check_fence,
                                .commit_arg = c, .extra_dir = c->L.czero ? staging[1] : NULL};
        if (cpt_ckpt_save(&a, dir, sizeof dir, err)) return cpt_err_prefix(err, "critic checkpoint");
    }
    cpt_ckpt_save_args a = {
        .run_dir = c->run_dir,
        .model = c->policy,
        .opt = c->L.opt,
        .state = &c->st,
        .tokenizer_path = c->tok_path,
        .config_text = c->config_text,
        .keep_last = keep,
        .max_shard_bytes = shard_bytes,
        .before_commit = check_fence,
        .commit_arg = c,
        .extra_dir = c->L.zero ? staging[0] : NULL,
    };
    if (cpt_ckpt_save(&a, dir, sizeof dir, err)) return -1;
    c->last_saved_step = c->st.step;
    cpt_info("online: checkpoint %s (version %" PRId64 ", %zu groups outstanding)", dir, c->st.weight_version,
             c->st.n_outstanding);
    return 0;
}

/* The policy's checkpoint ckpt (model, state, optimizer), then the critic's of the same step. */
static int load_checkpoint(online_ctx *c, const char *ckpt, cpt_err *err) {
    const int ups = c->L.updates_per_step;
    if (cpt_ckpt_load_steps(ckpt, c->policy, c->L.opt, ups, &c->st, err)) return -1;
    if (c->L.zero && cpt_zero_resume(c->L.zero, ckpt, c->st.step, ups, "policy", err))
        return cpt_err_prefix(err, "loading checkpoint %s", ckpt);
    if (!c->critic) return 0;
    char cdir[CPT_CKPT_PATH_MAX], cstep[CPT_CKPT_PATH_MAX + 64];
    critic_run_dir(c, cdir, sizeof cdir);
    snprintf(cstep, sizeof cstep, "%s/checkpoints/step-%" PRId64, cdir, c->st.step);
    cpt_train_state cst;
    memset(&cst, 0, sizeof cst);
    int rc = cpt_ckpt_load_steps(cstep, c->critic, c->L.copt, ups, &cst, err) ||
             (c->L.czero && cpt_zero_resume(c->L.czero, cstep, c->st.step, ups, "critic", err));
    cpt_train_state_free(&cst);
    return rc ? cpt_err_prefix(err, "resume: the critic of step %" PRId64, c->st.step) : 0;
}

static int resume(online_ctx *c, cpt_err *err) {
    c->last_saved_step = -1;
    uint64_t hash = cpt_config_hash(c->cfg);
    char ckpt[CPT_CKPT_PATH_MAX];
    if (!cpt_cfg_bool(c->cfg, "train.resume") && cpt_ckpt_refuse_restart(c->run_dir, err)) return -1;
    int found = cpt_cfg_bool(c->cfg, "train.resume") ? cpt_ckpt_find_latest(c->run_dir, ckpt, sizeof ckpt, err) : 0;
    if (found < 0) return cpt_err_prefix(err, "resume");
    if (found) {
        if (load_checkpoint(c, ckpt, err)) return -1;
        if (c->st.config_hash != hash)
            cpt_warn("resume: the config differs from the one %s was written with (continuing)", ckpt);
        c->last_saved_step = c->st.step;
        cpt_info("online: resumed from %s at step %" PRId64 ", version %" PRId64 ", cursor (%" PRId64 ", %" PRId64
                 "), %zu groups to issue again",
                 ckpt, c->st.step, c->st.weight_version, c->st.data_epoch, c->st.data_index, c->st.n_outstanding);
    }
    c->st.config_hash = hash;
    totals_from_state(c);
    cpt_data_cursor cur = {(uint64_t)c->st.data_epoch, (uint64_t)c->st.data_index};
    if (cpt_data_order_seek(&c->order, cur, err)) return cpt_err_prefix(err, "resume: data cursor");
    cur = cpt_data_order_tell(&c->order); /* normalised: the end of an epoch is the start of the next */
    cpt_book_init(&c->book, cur.epoch, cur.index);
    return 0;
}

/* Counts trainer starts in the queue (durable in its AOF) and gives this start its own attempt range, then puts
 * back the checkpoint's outstanding ids. */
static int restore_outstanding(online_ctx *c, cpt_err *err) {
    char key[CPT_RUN_ID_MAX + 32];
    snprintf(key, sizeof key, "cpt:%s:trainer_starts", c->q->run);
    const char *argv[] = {"INCR", key};
    long long starts = 0;
    if (cpt_redis_integer(c->q->redis, 2, argv, key, &starts, err)) return cpt_err_prefix(err, "counting trainer starts");
    c->book.attempt_base = (uint32_t)(((uint64_t)(starts > 0 ? starts - 1 : 0) * CPT_ONLINE_ATTEMPTS_PER_START) & 0xffff);
    return cpt_book_restore(&c->book, c->st.outstanding, c->st.n_outstanding, err);
}

/* ---------------- weights ---------------- */

static int publish(online_ctx *c, double *secs, cpt_err *err) {
    double t0 = cpt_now();
    uint64_t v = (uint64_t)c->st.weight_version;
    /* before the weights file: a fenced-off trainer must not overwrite the version the live one announces */
    if (check_fence(c, err)) return cpt_err_prefix(err, "weights v%" PRIu64, v);
    if (cpt_weights_tx_publish(c->tx, c->policy, v, err)) return cpt_err_prefix(err, "weights v%" PRIu64, v);
    if (secs) *secs = cpt_now() - t0;
    return 0;
}

/* ---------------- issuing ---------------- */

static uint64_t mix64(uint64_t x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

static int issue_one(online_ctx *c, cpt_book_entry *e, cpt_err *err) {
    const cpt_config *cfg = c->cfg;
    cpt_group_id base = e->id;
    size_t ri = cpt_data_order_at(&c->order, base.epoch, base.index);
    const cpt_record *r = cpt_dataset_get(c->ds, ri);
    if (!r) return cpt_errf(err, "group (%" PRIu64 ", %" PRIu64 "): no record %zu", base.epoch, base.index, ri);
    int64_t version = c->st.weight_version;
    int64_t minv = c->sync ? version : version - c->max_staleness;
    cpt_prompt_group pg;
    memset(&pg, 0, sizeof pg);
    size_t n = 0;
    char where[700];
    cpt_dataset_where(c->ds, r, where, sizeof where);
    if (cpt_rl_prompt_ids(c->have_tpl ? &c->tpl : NULL, c->tok, r, &pg.prompt, &n, err))
        return cpt_err_prefix(err, "%s", where);
    pg.extra = cpt_rl_extra_json(r, err);
    if (!pg.extra) {
        free(pg.prompt);
        return cpt_err_prefix(err, "%s", where);
    }
    snprintf(pg.run, sizeof pg.run, "%s", c->run);
    pg.id = cpt_book_mark_issued(&c->book, e, version);
    e->issued_at = cpt_now();
    pg.n_prompt = (uint32_t)n;
    pg.n_samples = (uint32_t)cpt_cfg_int(cfg, "rollout.group_size");
    pg.sampling.temperature = (float)cpt_cfg_float(cfg, "sampling.temperature");
    pg.sampling.top_p = (float)cpt_cfg_float(cfg, "sampling.top_p");
    pg.sampling.top_k = (int32_t)cpt_cfg_int(cfg, "sampling.top_k");
    pg.sampling.min_p = (float)cpt_cfg_float(cfg, "sampling.min_p");
    pg.sampling.max_new_tokens = (uint32_t)cpt_cfg_int(cfg, "sampling.max_new_tokens");
    /* The same prompt gets the same seed on every attempt: a sync run is reproducible. */
    pg.sampling.seed = mix64((uint64_t)cpt_cfg_int(cfg, "run.seed") ^ mix64(base.epoch * 0x9e3779b97f4a7c15ULL + base.index));
    pg.sampling.n_stop_ids = (uint32_t)c->n_stop;
    pg.sampling.stop_ids = c->stop_ids;
    pg.min_version = minv > 0 ? (uint64_t)minv : 0;
    cpt_buf buf = {0};
    int rc = cpt_prompt_group_encode(&pg, &buf, err);
    if (rc) cpt_err_prefix(err, "%s", where); /* e.g. a prompt of more tokens than a message holds */
    if (!rc) rc = cpt_queue_add(c->q, CPT_STREAM_PROMPTS, buf.data, buf.len, NULL, err);
    cpt_buf_free(&buf);
    free(pg.prompt);
    free(pg.extra);
    return rc;
}

/* Keeps the pipeline full: sync, exactly the next step's groups; async, up to groups_per_step * (max_staleness + 1)
 * outstanding. New ids come from the data cursor; groups sent back (stale, resumed) go out again first. */
static int issue(online_ctx *c, cpt_err *err) {
    size_t want = c->sync ? (size_t)c->groups_per_step : (size_t)(c->groups_per_step * (c->max_staleness + 1));
    while (c->book.n < want) {
        cpt_data_cursor cur = cpt_data_order_tell(&c->order);
        cpt_group_id id = {cur.epoch, cur.index};
        (void)cpt_data_order_next(&c->order);
        if (cpt_book_add_new(&c->book, id, err)) return -1;
    }
    cpt_book_entry *e;
    while ((e = cpt_book_next_to_issue(&c->book))) {
        cpt_group_id id = e->id;
        if (cpt_book_skip_if_exhausted(&c->book, e)) {
            cpt_warn("online: group (%llu, %llu) issued %u times since this trainer started, its groups stale or "
                     "failed each time (generation slower than async.max_staleness allows?): skipped",
                     (unsigned long long)id.epoch, (unsigned long long)id.index, CPT_ONLINE_ATTEMPTS_PER_START);
            continue;
        }
        if (issue_one(c, e, err)) return -1;
    }
    return 0;
}

/* ---------------- receiving ---------------- */

static int hold(online_ctx *c, cpt_queue_item *it, cpt_err *err) {
    if (c->n_held == c->cap_held) {
        size_t cap = c->cap_held ? c->cap_held * 2 : 16;
        cpt_queue_item *h = realloc(c->held, cap * sizeof *h);
        if (!h) return cpt_errf(err, "out of memory");
        c->held = h;
        c->cap_held = cap;
    }
    c->held[c->n_held++] = *it;
    memset(it, 0, sizeof *it);
    return 0;
}

static int all_tied(const cpt_rollout_group *g) {
    for (uint32_t k = 1; k < g->n_completions; k++)
        if (g->rewards[k] != g->rewards[0]) return 0;
    return 1;
}

/* A scored group the run cannot train on (forged or corrupt: tokens outside the vocabulary, a weight version never
 * issued, the wrong number of completions, rewards out of bounds) goes to the dead stream with the reason; the dead
 * reader then counts it as a failed attempt of its group. Returns 1 if refused, 0 if usable, -1 on error. */
static int refuse_invalid(online_ctx *c, cpt_queue_item *it, cpt_err *err) {
    const cpt_model_config *mc = cpt_model_cfg(c->policy);
    int max_len = (int)cpt_cfg_int(c->cfg, "train.max_seq_len");
    if (max_len > mc->max_position_embeddings) max_len = mc->max_position_embeddings;
    cpt_rl_group_limits lim = {.vocab_size = mc->vocab_size,
                               .max_seq_len = max_len,
                               .group_size = (uint32_t)cpt_cfg_int(c->cfg, "rollout.group_size"),
                               .max_version = c->st.weight_version,
                               .max_abs_reward = cpt_cfg_float(c->cfg, "reward.max_abs"),
                               .need_teacher = c->oc.type == CPT_OBJ_OPD};
    /* ppo puts the reward on a float32 token reward for GAE: beyond 1e30 it would not stay finite */
    if (c->oc.type == CPT_OBJ_PPO && lim.max_abs_reward > 1e30) lim.max_abs_reward = 1e30;
    cpt_err why;
    if (!cpt_rl_group_check(&it->rollout, &lim, &why)) return 0;
    char reason[CPT_ERR_MAX + 32];
    snprintf(reason, sizeof reason, "cpt-train: %s", why.msg);
    cpt_warn("online: scored group (%" PRIu64 ", %" PRIu64 ") -> dead: %s", it->rollout.id.epoch, it->rollout.id.index,
             reason);
    return cpt_queue_dead_letter(c->q, CPT_STREAM_SCORED, "trainer", &it->msg, reason, err) ? -1 : 1;
}

/* Takes scored groups until groups_per_step usable ones are held (or a stop, or one read times out: returns so the
 * caller can issue and check the stop flag). */
static int receive(online_ctx *c, cpt_err *err) {
    const char *consumer = cpt_cfg_str(c->cfg, "online.consumer");
    double t0 = cpt_now();
    while (c->n_held < (size_t)c->groups_per_step) {
        if (c->stop && *c->stop) break;
        cpt_queue_item it;
        int rc = cpt_queue_next(c->q, CPT_STREAM_SCORED, "trainer", consumer, &it, err);
        if (rc < 0) {
            if (c->stop && *c->stop) break;
            return -1;
        }
        if (rc == 0) break;
        int bad = refuse_invalid(c, &it, err);
        if (bad) {
            cpt_queue_item_free(&it);
            if (bad < 0) return -1;
            continue;
        }
        cpt_group_id base = cpt_online_base_id(it.rollout.id);
        cpt_book_verdict v = cpt_book_receive(&c->book, it.rollout.id, it.rollout.weight_version,
                                              c->st.weight_version, c->sync ? 0 : c->max_staleness);
        int r = 0;
        if (v == CPT_BOOK_ACCEPT && c->oc.dynamic_sampling && all_tied(&it.rollout)) {
            /* DAPO: a group whose rewards all tie has no signal; it is consumed, not trained, not re-issued. */
            c->dynamic_dropped++;
            r = cpt_book_trained(&c->book, base, err);
            c->book.trained--;
            if (!r) r = cpt_queue_done(c->q, &it, err);
        } else if (v == CPT_BOOK_ACCEPT) {
            r = hold(c, &it, err);
        } else if (v == CPT_BOOK_DUPLICATE) {
            r = cpt_queue_done(c->q, &it, err);
        } else {
            if (v == CPT_BOOK_STALE)
                cpt_info("online: group (%" PRIu64 ", %" PRIu64 ") from version %" PRIu64 " is stale at version %" PRId64
                         ": issued again",
                         base.epoch, base.index, it.rollout.weight_version, c->st.weight_version);
            else
                cpt_warn("online: group (%" PRIu64 ", %" PRIu64 ") was never issued by this run: dead-lettered",
                         base.epoch, base.index);
            /* a plain ack (or the dead stream): the id must stay open for its next attempt */
            if (v == CPT_BOOK_STALE)
                r = cpt_queue_ack(c->q, CPT_STREAM_SCORED, "trainer", it.msg.id, err);
            else
                r = cpt_queue_dead_letter(c->q, CPT_STREAM_SCORED, "trainer", &it.msg,
                                          "cpt-train: group id never issued by this run", err);
        }
        cpt_queue_item_free(&it);
        if (r) return -1;
        if (v == CPT_BOOK_STALE && issue(c, err)) return -1;
    }
    c->wait_s += cpt_now() - t0;
    return 0;
}

static int cmp_held(const void *a, const void *b) {
    cpt_group_id x = cpt_online_base_id(((const cpt_queue_item *)a)->rollout.id);
    cpt_group_id y = cpt_online_base_id(((const cpt_queue_item *)b)->rollout.id);
    if (x.epoch != y.epoch) return x.epoch < y.epoch ? -1 : 1;
    return x.index < y.index ? -1 : x.index > y.index;
}

/* Drops held groups that became stale while waiting (async); returns how many. */
static int drop_stale_held(online_ctx *c, cpt_err *err) {
    int dropped = 0;
    size_t k = 0;
    for (size_t i = 0; i < c->n_held; i++) {
        cpt_queue_item *it = &c->held[i];
        if (!c->sync && (int64_t)it->rollout.weight_version + c->max_staleness < c->st.weight_version) {
            cpt_book_drop_stale(&c->book, cpt_online_base_id(it->rollout.id));
            int r = cpt_queue_ack(c->q, CPT_STREAM_SCORED, "trainer", it->msg.id, err);
            cpt_queue_item_free(it);
            if (r) return -1;
            dropped++;
        } else {
            c->held[k++] = *it;
        }
    }
    c->n_held = k;
    return dropped;
}

/* ---------------- validation ---------------- */

static int setup_validation(online_ctx *c, cpt_err *err) {
    const char *path = cpt_cfg_str(c->cfg, "validation.data");
    if (!*path) return 0;
    c->val = cpt_dataset_load_config(path, c->cfg, err);
    if (!c->val) return cpt_err_prefix(err, "validation.data");
    c->val_reward = cpt_reward_from_config(c->cfg, err);
    if (!c->val_reward) return cpt_err_prefix(err, "validation reward");
    /* with env.type set, validation answers tool calls in-process, as the rollouts get them from cpt-env */
    return cpt_eval_tools_open(c->cfg, c->tok_path, &c->val_tools, err) ? cpt_err_prefix(err, "validation") : 0;
}

/* The model validation generates with: the GPU inference copy (validation.device auto or cuda, a policy on the
 * GPU), else the policy itself, whose host mirror generation reads. A copy that cannot be placed is warned about once
 * and the host is used from then on. */
static cpt_model *val_model(online_ctx *c, cpt_err *err) {
    if (strcmp(cpt_cfg_str(c->cfg, "validation.device"), "cpu") && cpt_model_on_cuda(c->policy) && !c->val_gpu_off) {
        if (!c->val_gpu) {
            cpt_err e;
            cpt_err_clear(&e);
            c->val_gpu = cpt_val_gpu_new(c->policy, c->cuda_device, &e);
            if (!c->val_gpu) {
                cpt_warn("online: validation.device = \"%s\": %s; validating on the host",
                         cpt_cfg_str(c->cfg, "validation.device"), e.msg);
                c->val_gpu_off = 1;
            }
        }
        if (c->val_gpu) return cpt_val_gpu_refresh(c->val_gpu, err);
    }
    return cpt_model_sync_to_host(c->policy, err) ? NULL : c->policy; /* generation reads the host weights */
}

static int validate(online_ctx *c, cpt_err *err) {
    if (!c->val) return 0;
    cpt_eval_opts o;
    cpt_eval_opts_from_config(c->cfg, &o);
    o.tpl = c->have_tpl ? &c->tpl : NULL;
    o.tools = &c->val_tools;
    o.stop = c->stop;
    cpt_eval_results r;
    memset(&r, 0, sizeof r);
    cpt_model *gen = val_model(c, err);
    if (!gen) return -1;
    if (cpt_eval_run(gen, c->tok, c->val, c->val_reward, &o, &r, err)) return cpt_err_prefix(err, "validation");
    if (r.interrupted) { /* the checkpoint goes first; this step's validation is not logged */
        cpt_warn("online: validation at step %" PRId64 " left after %.1f s: stop requested", c->st.step, r.seconds);
        return 0;
    }
    char tools[64] = "";
    if (r.with_tools) snprintf(tools, sizeof tools, " | tool use %.3f", r.tool_use);
    fprintf(stderr, "%s validation at step %" PRId64 ": accuracy %.3f | reward %.3f | len %.1f%s | %zu prompts x %d (%.1fs)\n",
            cpt_obj_type_name(c->oc.type), c->st.step, r.accuracy, r.mean_reward, r.mean_tokens, tools, r.n_prompts,
            r.samples, r.seconds);
    cpt_metrics_begin(c->metrics, c->st.step);
    cpt_eval_add_metrics(c->metrics, "val", &r);
    cpt_eval_results_free(&r);
    return cpt_metrics_end(c->metrics, err);
}

/* ---------------- one step ---------------- */

static void fmt_duration(double s, char *buf, size_t cap) {
    if (!isfinite(s) || s < 0) s = 0;
    long t = (long)(s + 0.5);
    if (t >= 3600) snprintf(buf, cap, "%ldh%02ldm", t / 3600, (t / 60) % 60);
    else if (t >= 60) snprintf(buf, cap, "%ldm%02lds", t / 60, t % 60);
    else snprintf(buf, cap, "%lds", t);
}

/* The step's packed batch from its groups (the same on every rank). */
static int build_batch(online_ctx *c, const cpt_rollout_group *g, size_t stride, size_t n, cpt_err *err) {
    cpt_rl_batch_reset(&c->batch);
    const cpt_model_config *mc = cpt_model_cfg(c->policy);
    int max_len = (int)cpt_cfg_int(c->cfg, "train.max_seq_len");
    if (max_len > mc->max_position_embeddings) max_len = mc->max_position_embeddings;
    for (size_t i = 0; i < n; i++) {
        const cpt_rollout_group *gi = (const cpt_rollout_group *)((const char *)g + i * stride);
        if (cpt_rl_batch_add_group(&c->batch, gi, max_len, mc->vocab_size, err)) return -1;
    }
    return 0;
}

static int is_checkpoint_step(const online_ctx *c, int64_t step) {
    return c->ck_every > 0 && step % c->ck_every == 0 && step != c->total_steps;
}

/* Every rank's replicas must be identical where rank 0 writes a checkpoint. */
static int check_replicas(online_ctx *c, int64_t step, cpt_err *err) {
    cpt_model *models[2] = {c->policy, c->critic};
    return cpt_ranks_check_replicas(c->dp, models, c->critic ? 2 : 1, step, err);
}

/* Every rank after its learner step: the stop agreement, and at a checkpoint step the replicas' check. */
static int after_step(online_ctx *c, int64_t step_done, cpt_err *err) {
    if (c->world <= 1) return 0;
    if (cpt_ranks_agree_stop(c->dp, c->stop && *c->stop, &c->stop_all, err)) return -1;
    if (!is_checkpoint_step(c, step_done)) return 0;
    return check_replicas(c, step_done, err) || (c->L.zero && zero_stage(c, step_done, err)) ? -1 : 0;
}

/* Rank 0 with other ranks: the step's groups go to every rank first, and every rank builds its batch from them. */
static int share_and_build(online_ctx *c, size_t n, cpt_err *err) {
    const cpt_rollout_group **in = malloc(n * sizeof *in);
    if (!in) return cpt_errf(err, "out of memory");
    for (size_t i = 0; i < n; i++) in[i] = &c->held[i].rollout;
    cpt_ranks_groups gs;
    c->peers_at_header = 0;
    int rc = cpt_ranks_send_step(c->dp, c->st.step, in, n, &gs, err);
    free(in);
    if (!rc) rc = build_batch(c, gs.g, sizeof *gs.g, gs.n, err);
    cpt_ranks_groups_free(&gs);
    return rc;
}

static int train_step(online_ctx *c, double t_start, int64_t first_step, cpt_err *err) {
    size_t n = (size_t)c->groups_per_step;
    qsort(c->held, c->n_held, sizeof *c->held, cmp_held);
    double stale_sum = 0;
    for (size_t i = 0; i < n; i++)
        stale_sum += (double)(c->st.weight_version - (int64_t)c->held[i].rollout.weight_version);
    if (c->world > 1 ? share_and_build(c, n, err) : build_batch(c, &c->held[0].rollout, sizeof *c->held, n, err))
        return -1;
    double t0 = cpt_now();
    cpt_online_step_stats ss;
    if (cpt_online_learner_step(&c->L, &c->batch, c->st.step, &ss, err)) return -1;
    cpt_agree_stats agree; /* the step's proximal logprobs are the weights of version weight_version */
    cpt_agree_measure(&c->batch, c->L.old_logp, (uint64_t)c->st.weight_version, &agree);
    if (after_step(c, c->st.step + 1, err)) return -1;
    c->peers_at_header = c->world > 1;
    double t_train = cpt_now() - t0;
    c->st.step++;
    c->st.weight_version = c->st.step;
    double t_sync = 0;
    if (publish(c, &t_sync, err)) return -1;
    /* Only now are the groups trained: ack them and close their ids. */
    for (size_t i = 0; i < n; i++) {
        if (cpt_queue_done(c->q, &c->held[i], err)) return -1;
        if (cpt_book_trained(&c->book, cpt_online_base_id(c->held[i].rollout.id), err)) return -1;
        cpt_queue_item_free(&c->held[i]);
    }
    memmove(c->held, c->held + n, (c->n_held - n) * sizeof *c->held);
    c->n_held -= n;

    int64_t s = c->st.step;
    int64_t tot[N_TOTALS];
    totals_now(c, tot);
    double tok_s = (double)ss.tokens / fmax(t_train, 1e-9);
    if (s % cpt_cfg_int(c->cfg, "train.log_every") == 0 || s == c->total_steps) {
        char eta[32];
        fmt_duration((cpt_now() - t_start) / (double)(s - first_step) * (double)(c->total_steps - s), eta, sizeof eta);
        fprintf(stderr,
                "%s step %" PRId64 "/%" PRId64 " | reward %.3f | len %.1f | loss %.4f | kl %.4f | grad_norm %.3f | "
                "%.0f tok/s | wait %.1fs | stale drop %ld | ETA %s\n",
                cpt_obj_type_name(c->oc.type), s, c->total_steps, ss.reward_mean, ss.resp_len_mean, ss.m.loss, ss.m.kl,
                ss.grad_norm, tok_s, c->wait_s, (long)tot[T_STALE], eta);
    }
    cpt_metrics_begin(c->metrics, s);
    cpt_metrics_add(c->metrics, "reward/mean", ss.reward_mean);
    cpt_metrics_add(c->metrics, "reward/std", ss.reward_std);
    cpt_metrics_add(c->metrics, "response_len/mean", ss.resp_len_mean);
    const char *names[32];
    double vals[32];
    int k = cpt_obj_metrics_list(&c->oc, &ss.m, names, vals, 32);
    for (int i = 0; i < k; i++) cpt_metrics_add(c->metrics, names[i], vals[i]);
    if (ss.m.entropy == 0) cpt_metrics_add(c->metrics, "entropy", 0);
    cpt_metrics_add_int(c->metrics, "agree/tokens", agree.tokens);
    k = cpt_agree_metrics_list(&agree, names, vals, 32);
    for (int i = 0; i < k; i++) cpt_metrics_add(c->metrics, names[i], vals[i]);
    cpt_metrics_add(c->metrics, "grad_norm", ss.grad_norm);
    cpt_metrics_add(c->metrics, "lr", ss.lr);
    cpt_metrics_add_int(c->metrics, "train/optimizer_steps", ss.optimizer_steps);
    if (c->critic) {
        cpt_metrics_add(c->metrics, "critic/grad_norm", ss.critic_grad_norm);
        cpt_metrics_add(c->metrics, "critic/lr", ss.critic_lr);
    }
    cpt_metrics_add(c->metrics, "staleness/mean", stale_sum / (double)n);
    cpt_metrics_add(c->metrics, "perf/train_tok_s", tok_s);
    cpt_metrics_add(c->metrics, "time/train", t_train);
    cpt_metrics_add(c->metrics, "time/wait_scored", c->wait_s);
    cpt_metrics_add(c->metrics, "time/weight_sync", t_sync);
    cpt_metrics_add(c->metrics, "time/logprob", ss.t_logprob);
    cpt_metrics_add(c->metrics, "time/backward", ss.t_backward);
    cpt_metrics_add(c->metrics, "time/optimizer", ss.t_optimizer);
    cpt_metrics_add_int(c->metrics, "version", c->st.weight_version);
    for (int i = 0; i < N_TOTALS; i++) cpt_metrics_add_int(c->metrics, total_names[i], tot[i]);
    cpt_metrics_add_int(c->metrics, "train/truncated", c->batch.n_truncated);
    c->wait_s = 0;
    return cpt_metrics_end(c->metrics, err);
}

/* ---------------- the run ---------------- */

/* The steps after the checkpoint are trained again, so their lines from the lost attempt go (all of them on a
 * start from scratch): every step is in the file once. */
static int open_metrics(online_ctx *c, const char *path, cpt_err *err) {
    long dropped = cpt_metrics_truncate_after(path, c->last_saved_step, err);
    if (dropped < 0) return -1;
    if (dropped > 0)
        cpt_info("online: %ld metrics line(s) after step %" PRId64 " removed from %s (a lost attempt's)", dropped,
                 c->last_saved_step < 0 ? 0 : c->last_saved_step, path);
    c->metrics = cpt_metrics_open(path, err);
    if (!c->metrics) return -1;
    char tb[CPT_CKPT_PATH_MAX + 16];
    snprintf(tb, sizeof tb, "%s/tensorboard", c->run_dir);
    if (!cpt_cfg_bool(c->cfg, "metrics.tensorboard")) return 0;
    return cpt_metrics_tensorboard(c->metrics, tb, c->last_saved_step + 1, err);
}

static void ctx_free(online_ctx *c) {
    for (size_t i = 0; i < c->n_held; i++) cpt_queue_item_free(&c->held[i]);
    free(c->held);
    cpt_rl_batch_free(&c->batch);
    cpt_book_free(&c->book);
    cpt_online_learner_free(&c->L);
    cpt_weights_tx_free(c->tx); /* before the policy: the cuda_ipc slots live on its device */
    cpt_model_free(c->policy);
    cpt_model_free(c->ref);
    cpt_model_free(c->critic);
    cpt_lease_release(c->lease);
    cpt_ckpt_unlock(c->ckpt_lock);
    cpt_queue_close(c->q);
    cpt_data_order_free(&c->order);
    if (c->ds) cpt_dataset_free(c->ds);
    if (c->have_tpl) cpt_chat_template_free(&c->tpl);
    cpt_tokenizer_free(c->tok);
    cpt_metrics_close(c->metrics);
    cpt_train_state_free(&c->st);
    free(c->config_text);
    if (c->val) cpt_dataset_free(c->val);
    if (c->val_reward) cpt_reward_free(c->val_reward);
    cpt_val_gpu_free(c->val_gpu);
    cpt_eval_tools_close(&c->val_tools);
    cpt_dp_free(c->dp);
}

static int open_ranks(online_ctx *c, cpt_err *err) {
    char boot[CPT_CKPT_PATH_MAX + 16];
    snprintf(boot, sizeof boot, "%s/bootstrap", c->run_dir);
    /* CPU ranks average host gradients over MPI, GPU ranks over NCCL */
    const char *dev = cpt_device_resolve(c->cfg, "train.device");
    cpt_dp_opts d = {.bootstrap = cpt_cfg_str(c->cfg, "train.dp_bootstrap"), .boot_dir = boot,
                     .backend = !strcmp(dev, "cuda") ? "nccl" : "mpi"};
    c->dp = cpt_dp_new(&d, err);
    if (!c->dp) return cpt_err_prefix(err, "trainer ranks");
    c->rank = cpt_dp_rank(c->dp);
    c->world = cpt_dp_size(c->dp);
    if (c->world > 1)
        cpt_info("online: trainer rank %d of %d (bootstrap %s)%s", c->rank, c->world, cpt_dp_bootstrap_name(c->dp),
                 c->rank ? ": following rank 0" : "");
    return 0;
}

/* A rank other than 0: the same models and learner, no queue, lease, metrics or weights; each step's groups come
 * from rank 0 (trainer/online_ranks.h). Returns the exit status rank 0 sends. */
static int follow(online_ctx *c, cpt_err *err) {
    if (setup_data(c, err) || setup_models(c, err)) return -1;
    cpt_ranks_header h;
    cpt_ranks_groups gs;
    if (cpt_ranks_recv(c->dp, &h, &gs, err)) return -1;
    c->rank0_failed = h.command == CPT_RANKS_FAIL;
    if (h.command == CPT_RANKS_FAIL)
        return cpt_errf(err, "trainer rank %d: rank 0 failed before the first step (its log says why)", c->rank);
    if (h.command != CPT_RANKS_START)
        return cpt_errf(err, "trainer rank %d: expected rank 0's start, got command %" PRId64, c->rank, h.command);
    if (h.step >= 0) {
        /* read only: rank 0 holds the checkpoint folder, and writes nothing before the first step's exchange */
        char ckpt[CPT_CKPT_PATH_MAX + 64];
        snprintf(ckpt, sizeof ckpt, "%s/checkpoints/step-%" PRId64, c->run_dir, h.step);
        if (load_checkpoint(c, ckpt, err)) return cpt_err_prefix(err, "trainer rank %d", c->rank);
        cpt_info("online: trainer rank %d resumed from %s", c->rank, ckpt);
    }
    c->st.step = h.step >= 0 ? h.step : 0;
    for (;;) {
        if (cpt_ranks_recv(c->dp, &h, &gs, err)) return -1;
        switch (h.command) {
        case CPT_RANKS_TRAIN: {
            cpt_online_step_stats ss;
            int rc = build_batch(c, gs.g, sizeof *gs.g, gs.n, err);
            cpt_ranks_groups_free(&gs);
            if (rc || cpt_online_learner_step(&c->L, &c->batch, h.step, &ss, err)) return -1;
            c->st.step = h.step + 1;
            if (after_step(c, c->st.step, err)) return -1;
            break;
        }
        case CPT_RANKS_FINISH: /* status 1: rank 0 writes a checkpoint of this step */
            if (check_replicas(c, h.step, err) || (h.status && c->L.zero && zero_stage(c, h.step, err))) return -1;
            break;
        case CPT_RANKS_EXIT:
            cpt_info("online: trainer rank %d ends at step %" PRId64 " with rank 0 (status %" PRId64 ")", c->rank,
                     h.step, h.status);
            return (int)h.status;
        case CPT_RANKS_FAIL:
            c->rank0_failed = 1;
            return cpt_errf(err, "trainer rank %d: rank 0 failed after step %" PRId64 " (its log says why)", c->rank,
                            h.step);
        default:
            return cpt_errf(err, "trainer rank %d: unknown command %" PRId64 " from rank 0", c->rank, h.command);
        }
    }
}

static int finish(online_ctx *c, cpt_err *err);

static int run(online_ctx *c, cpt_err *err) {
    const cpt_config *cfg = c->cfg;
    c->run_dir = cpt_cfg_str(cfg, "run.dir");
    c->run = cpt_cfg_str(cfg, "run.name");
    if (cpt_obj_type_parse(cpt_cfg_str(cfg, "algo.type"), &c->oc.type, err)) return -1;
    if (cpt_objective_from_config(cfg, &c->oc, err)) return -1;
    c->oc.kl_beta = cpt_online_kl_beta(cfg); /* unset: the method's default (trainer/online_defaults.h) */
    c->sync = !strcmp(cpt_cfg_str(cfg, "async.mode"), "sync");
    c->max_staleness = c->sync ? 0 : cpt_cfg_int(cfg, "async.max_staleness");
    c->groups_per_step = cpt_cfg_int(cfg, "train.groups_per_step");
    c->total_steps = cpt_cfg_int(cfg, "train.steps");
    if (cpt_cfg_int(cfg, "train.threads") > 0) omp_set_num_threads((int)cpt_cfg_int(cfg, "train.threads"));
    c->ck_every = cpt_cfg_int(cfg, "checkpoint.every");
    if (cpt_weights_tx_check_config(cfg, err)) return -1; /* before any model is loaded */
    if (open_ranks(c, err)) return -1;
    if (c->rank > 0) return follow(c, err);
    c->peers_at_header = c->world > 1;
    if (open_queue(c, err)) return -1; /* holds the lease before anything of the run is read or written */
    if (setup_data(c, err) || setup_dataset(c, err) || setup_models(c, err) || setup_validation(c, err)) return -1;
    c->config_text = cpt_config_dump(cfg);
    if (!c->config_text) return cpt_errf(err, "out of memory");
    if (resume(c, err)) return -1;
    if (c->world > 1 && cpt_ranks_send(c->dp, CPT_RANKS_START, c->last_saved_step, 0, err)) return -1;
    if (cpt_mkdir_p(c->run_dir, 0755, err)) return -1;
    char mpath[CPT_CKPT_PATH_MAX + 32];
    snprintf(mpath, sizeof mpath, "%s/metrics.jsonl", c->run_dir);
    if (open_metrics(c, mpath, err)) return -1;
    if (restore_outstanding(c, err)) return -1;
    if (cpt_dead_reader_init(&c->dead, c->q, (uint32_t)cpt_cfg_int(cfg, "queue.group_retries"),
                             cpt_cfg_float(cfg, "queue.group_timeout_s"), err))
        return -1;
    if (!(c->tx = cpt_weights_tx_new(cfg, c->q, c->run, c->run_dir, c->policy, err))) return -1;
    /* The current version (0 fresh, the checkpoint's after a resume) is announced before any prompt, so workers
     * that answer min_version can load it. */
    if (publish(c, NULL, err)) return -1;
    cpt_info("online: %s, %s mode (max staleness %" PRId64 "), %" PRId64 " groups of %" PRId64 " per step, %zu prompts",
             cpt_obj_type_name(c->oc.type), c->sync ? "sync" : "async", c->max_staleness, c->groups_per_step,
             cpt_cfg_int(cfg, "rollout.group_size"), cpt_dataset_count(c->ds));

    const int64_t val_every = cpt_cfg_int(cfg, "validation.every_steps");
    if (c->st.step == 0 && cpt_cfg_bool(cfg, "validation.before_training") && validate(c, err)) return -1;
    const int64_t this_run = cpt_cfg_int(cfg, "train.max_steps_this_run");
    const int64_t first_step = c->st.step;
    const double idle_warn = cpt_cfg_float(cfg, "online.idle_warn_s");
    double t_start = cpt_now(), last_progress = cpt_now();
    while (c->st.step < c->total_steps && !(c->stop && *c->stop) && !c->stop_all &&
           !(this_run > 0 && c->st.step - first_step >= this_run)) {
        if (cpt_lease_lost(c->lease) && check_fence(c, err)) return -1;
        if (cpt_dead_reader_poll(&c->dead, c->q, &c->book, cpt_now(), err) < 0) return -1;
        if (issue(c, err)) return -1;
        size_t before = c->n_held;
        if (receive(c, err)) return -1;
        if (c->n_held > before) last_progress = cpt_now();
        else if (cpt_weights_tx_idle(c->tx, c->policy, (uint64_t)c->st.weight_version, err)) return -1;
        else if (cpt_now() - last_progress > idle_warn) {
            char *workers = cpt_online_idle_workers(c->q, (uint64_t)c->st.weight_version);
            cpt_warn("online: no scored group for %.0f s at step %" PRId64 " (%zu in flight, weights v%" PRId64
                     " announced); %s",
                     cpt_now() - last_progress, c->st.step, cpt_book_count(&c->book, CPT_BOOK_IN_FLIGHT),
                     c->st.weight_version, workers ? workers : "workers not read: out of memory");
            free(workers);
            last_progress = cpt_now();
        }
        if (c->n_held < (size_t)c->groups_per_step) continue;
        int d = drop_stale_held(c, err);
        if (d < 0) return -1;
        if (d > 0 || c->n_held < (size_t)c->groups_per_step) continue;
        if (train_step(c, t_start, first_step, err)) return -1;
        if (val_every > 0 && c->st.step % val_every == 0 && c->st.step != c->total_steps && validate(c, err)) return -1;
        if (is_checkpoint_step(c, c->st.step) && save_checkpoint(c, err)) return -1;
    }
    int stopped = (c->stop && *c->stop) || c->stop_all;
    if (stopped) cpt_warn("online: stopping at step %" PRId64 " on request", c->st.step);
    if (c->world > 1) {
        c->peers_at_header = 0;
        int saving = c->last_saved_step != c->st.step; /* finish() writes a checkpoint */
        if (cpt_ranks_send(c->dp, CPT_RANKS_FINISH, c->st.step, saving, err) || check_replicas(c, c->st.step, err) ||
            (saving && c->L.zero && zero_stage(c, c->st.step, err)))
            return -1;
        c->peers_at_header = 1;
    }
    int status = finish(c, err);
    if (status >= 0 && c->world > 1) {
        c->peers_at_header = 0;
        if (cpt_ranks_send(c->dp, CPT_RANKS_EXIT, c->st.step, status, err)) return -1;
    }
    return status;
}

/* Rank 0's end: the last checkpoint, and at the end of training the validation and the summary. Returns the exit
 * status (0 finished, CPT_EXIT_STOPPED) or -1. */
static int finish(online_ctx *c, cpt_err *err) {
    if (c->last_saved_step != c->st.step && save_checkpoint(c, err)) return -1;
    if (c->st.step >= c->total_steps) {
        if (validate(c, err)) return -1;
        int64_t tot[N_TOTALS];
        totals_now(c, tot);
        fprintf(stderr, "%s done: step %" PRId64 ", version %" PRId64 ", %" PRId64 " groups trained, %" PRId64
                " skipped, %" PRId64 " stale dropped, %" PRId64 " duplicates (whole run)\n",
                cpt_obj_type_name(c->oc.type), c->st.step, c->st.weight_version, tot[T_TRAINED], tot[T_SKIPPED],
                tot[T_STALE], tot[T_DUPLICATES]);
        return 0;
    }
    return CPT_EXIT_STOPPED;
}

int cpt_online_train(const cpt_config *cfg, const char *config_path, volatile sig_atomic_t *stop, cpt_err *err) {
    online_ctx c;
    memset(&c, 0, sizeof c);
    c.cfg = cfg;
    c.stop = stop;
    c.ckpt_lock = -1;
    int rc = run(&c, err);
    if (rc < 0) {
        cpt_err_prefix(err, "%s", config_path ? config_path : "online");
        rc = 1;
        if (c.world > 1) {
            /* said first: once told, a rank exits, and mpirun or srun may end this one before its caller prints */
            if (c.rank == 0) {
                cpt_error("%s", err->msg);
                err->msg[0] = '\0';
            }
            /* the others wait for rank 0's next header: tell them, and every rank ends cleanly; a failure anywhere
             * else may leave ranks inside a collective, so it ends them all */
            cpt_err e2;
            int told = c.rank == 0 && c.peers_at_header &&
                       cpt_ranks_send(c.dp, CPT_RANKS_FAIL, c.st.step, 1, &e2) == 0;
            if (!told && !c.rank0_failed) cpt_dp_abort(c.dp, 1, err);
        }
    }
    ctx_free(&c);
    return rc;
}
