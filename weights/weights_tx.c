/* Weight transports, trainer side (weights/weights_tx.h). */
#include "weights/weights_tx.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/fs.h"
#include "weights/devices.h"
#include "weights/weights_ann.h"
#include "weights/weights_group.h"
#include "weights/weights_ipc_book.h"
#include "weights/weights_pub.h"

#ifdef CPT_HAVE_CUDA
#include "kernels/cuda/nccl_dp.h"
#include "kernels/cuda/weights_ipc.h"
#include "model/cuda_model.h"
#endif

struct cpt_weights_tx {
    const cpt_config *cfg;
    cpt_queue *q;
    char run[CPT_RUN_ID_MAX];
    const char *run_dir;
    int transport;
    cpt_weights_layout layout;
    size_t bytes;
    double t_idle;
#ifdef CPT_HAVE_CUDA
    cpt_cuda_ctx *ctx;  /* the model's */
    const void *wb;     /* the model's bf16 weights, param order */
    void *slot[2];
    unsigned char handle[2][CPT_CUDA_IPC_HANDLE_BYTES];
    cpt_nccl *comm;
    cpt_wg_epoch ep;
    int ep_broken;      /* the epoch's communicator failed: open a new one at the next publish */
#endif
};

int cpt_weights_tx_check_config(const cpt_config *cfg, cpt_err *err) {
    return cpt_weights_choice_check(cpt_transport_resolve(cfg), cpt_device_resolve(cfg, "train.device"),
                                    cpt_device_resolve(cfg, "rollout.device"),
                                    !strcmp(cpt_cfg_str(cfg, "model.init"), "random"), err);
}

#ifdef CPT_HAVE_CUDA /* helpers of the GPU transports */
static void fill_msg(cpt_weights_tx *tx, cpt_weights_msg *w, uint64_t version, uint64_t sum, uint64_t epoch) {
    memset(w, 0, sizeof *w);
    snprintf(w->run, sizeof w->run, "%s", tx->run);
    w->version = version;
    snprintf(w->transport, sizeof w->transport, "%s", cpt_weights_transport_name((cpt_weights_transport)tx->transport));
    w->bytes = tx->bytes;
    cpt_weights_sum64_str(sum, w->checksum, sizeof w->checksum);
    w->membership_epoch = epoch;
}
#endif

cpt_weights_tx *cpt_weights_tx_new(const cpt_config *cfg, cpt_queue *q, const char *run, const char *run_dir,
                                   cpt_model *policy, cpt_err *err) {
    if (cpt_weights_tx_check_config(cfg, err)) return NULL;
    cpt_weights_tx *tx = calloc(1, sizeof *tx);
    if (!tx) {
        cpt_errf(err, "out of memory");
        return NULL;
    }
    tx->cfg = cfg, tx->q = q, tx->run_dir = run_dir;
    snprintf(tx->run, sizeof tx->run, "%s", run);
    tx->transport = cpt_weights_transport_parse(cpt_transport_resolve(cfg));
    cpt_weights_layout_of(policy, &tx->layout);
    tx->bytes = (size_t)tx->layout.numel * 2;
    if (tx->transport == CPT_WT_FILE) return tx;
#ifdef CPT_HAVE_CUDA
    cpt_cuda_param_view v;
    cpt_param *p0 = cpt_model_param(policy, 0);
    if (cpt_model_cuda_param(policy, p0, &v)) {
        cpt_errf(err, "weights.transport = %s: the policy is not on the GPU", cpt_weights_transport_name((cpt_weights_transport)tx->transport));
        goto fail;
    }
    tx->ctx = v.ctx;
    tx->wb = (const uint16_t *)v.data_bf16 - (p0->data - cpt_model_data(policy));
    if (tx->transport == CPT_WT_CUDA_IPC)
        for (int s = 0; s < 2; s++)
            if (cpt_cuda_ipc_alloc(tx->ctx, tx->bytes, &tx->slot[s], tx->handle[s], err)) {
                cpt_err_prefix(err, "cuda_ipc: slot %d (%zu bytes)", s, tx->bytes);
                goto fail;
            }
    return tx;
fail:
    cpt_weights_tx_free(tx);
    return NULL;
#else
    return tx; /* not reached: check_config refused every GPU transport */
#endif
}

void cpt_weights_tx_free(cpt_weights_tx *tx) {
    if (!tx) return;
#ifdef CPT_HAVE_CUDA
    cpt_nccl_free(tx->comm);
    cpt_wg_epoch_free(&tx->ep);
    for (int s = 0; s < 2; s++) cpt_cuda_ipc_free(tx->slot[s]);
#endif
    free(tx);
}

static int publish_file(cpt_weights_tx *tx, cpt_model *m, uint64_t v, cpt_err *err) {
    cpt_weights_msg w;
    if (cpt_weights_write(m, tx->run_dir, tx->run, v, &w, err)) return -1;
    if (cpt_queue_publish_weights(tx->q, &w, err)) return cpt_err_prefix(err, "announcing weights v%" PRIu64, v);
    return cpt_weights_prune(tx->run_dir, v, (int)cpt_cfg_int(tx->cfg, "online.keep_weight_versions"), err) < 0 ? -1 : 0;
}

#ifdef CPT_HAVE_CUDA
static int publish_ipc(cpt_weights_tx *tx, uint64_t v, cpt_err *err) {
    int s = (int)(v % 2);
    cpt_redis *r = tx->q->redis;
    double wait = cpt_cfg_float(tx->cfg, "weights.ipc_wait_s"), t0 = cpt_now();
    for (;;) {
        long readers = 0;
        int got = cpt_ipc_book_claim(r, tx->run, s, cpt_wg_now_ms(), &readers, err);
        if (got < 0) return -1;
        if (got) break;
        if (cpt_now() - t0 > wait)
            return cpt_errf(err, "cuda_ipc: %ld reader(s) still hold slot %d after weights.ipc_wait_s = %g s", readers, s, wait);
        usleep(2000);
    }
    uint64_t sum;
    /* the optimizer's queued work on the model's stream comes first: the copy and the sum run on that stream */
    if (cpt_cuda_memcpy_d2d(tx->ctx, tx->slot[s], tx->wb, tx->bytes, err) ||
        cpt_cuda_sum64(tx->ctx, tx->slot[s], tx->bytes, &sum, err))
        return cpt_err_prefix(err, "cuda_ipc: writing v%" PRIu64 " to slot %d", v, s);
    if (cpt_ipc_book_publish(r, tx->run, s, v, err)) return -1;
    cpt_weights_ann a = {.transport = CPT_WT_CUDA_IPC, .layout = tx->layout, .slot = s,
                         .device = (int)cpt_cfg_int(tx->cfg, "train.cuda_device"), .pid = (long)getpid()};
    memcpy(a.handle, tx->handle[s], sizeof a.handle);
    if (gethostname(a.host, sizeof a.host - 1)) snprintf(a.host, sizeof a.host, "unknown");
    cpt_weights_msg w;
    fill_msg(tx, &w, v, sum, 0);
    if (cpt_weights_ann_format(&a, w.location, sizeof w.location, err)) return -1;
    return cpt_queue_publish_weights(tx->q, &w, err) ? cpt_err_prefix(err, "announcing weights v%" PRIu64, v) : 0;
}

static void drop_comm(cpt_weights_tx *tx) {
    cpt_nccl_free(tx->comm);
    tx->comm = NULL;
    tx->ep_broken = 1;
}

/* Opens a new epoch when the live members differ (or the last one broke). 1: a new epoch, 0: unchanged. */
static int refresh_epoch(cpt_weights_tx *tx, uint64_t v, cpt_err *err) {
    char (*names)[CPT_NAME_MAX] = NULL;
    int n = 0;
    int64_t ttl = (int64_t)(cpt_cfg_float(tx->cfg, "weights.member_ttl_s") * 1000);
    if (cpt_wg_live(tx->q->redis, tx->run, cpt_wg_now_ms(), ttl, &names, &n, err)) return -1;
    if (!tx->ep_broken && cpt_wg_same_members(&tx->ep, names, n)) {
        free(names);
        return 0;
    }
    unsigned char uid[CPT_WG_UID_BYTES] = {0};
    if (n > 0 && cpt_nccl_unique_id(uid, err)) {
        free(names);
        return -1;
    }
    cpt_nccl_free(tx->comm);
    tx->comm = NULL;
    cpt_wg_epoch_free(&tx->ep);
    int rc = cpt_wg_open_epoch(tx->q->redis, tx->run, names, n, uid, v, &tx->ep, err);
    free(names);
    if (rc) return -1;
    tx->ep_broken = 0;
    cpt_info("weights: nccl epoch %" PRIu64 " with %d worker(s) from v%" PRIu64, tx->ep.epoch, n, v);
    return 1;
}

static int publish_nccl(cpt_weights_tx *tx, uint64_t v, cpt_err *err) {
    if (refresh_epoch(tx, v, err) < 0) return -1;
    uint64_t sum;
    if (cpt_cuda_sum64(tx->ctx, tx->wb, tx->bytes, &sum, err)) return -1;
    size_t bucket = (size_t)cpt_cfg_int(tx->cfg, "weights.bucket_mb") << 20;
    cpt_weights_ann a = {.transport = CPT_WT_NCCL, .layout = tx->layout, .epoch = tx->ep.epoch,
                         .ranks = tx->ep.n + 1, .bucket_bytes = bucket};
    memcpy(a.uid, tx->ep.uid, sizeof a.uid);
    cpt_weights_msg w;
    fill_msg(tx, &w, v, sum, tx->ep.epoch);
    if (cpt_weights_ann_format(&a, w.location, sizeof w.location, err)) return -1;
    if (cpt_queue_publish_weights(tx->q, &w, err)) return cpt_err_prefix(err, "announcing weights v%" PRIu64, v);
    if (tx->ep.n == 0) return 0; /* nobody to send to; a worker that registers triggers a new epoch */
    double timeout = cpt_cfg_float(tx->cfg, "weights.nccl_timeout_s");
    cpt_err e2;
    if (!tx->comm) {
        char where[96];
        snprintf(where, sizeof where, "weights epoch %" PRIu64 " rank 0/%d", tx->ep.epoch, tx->ep.n + 1);
        if (!(tx->comm = cpt_nccl_new(tx->ctx, tx->ep.uid, 0, tx->ep.n + 1, timeout, where, &e2))) {
            cpt_warn("weights v%" PRIu64 ": %s; the next version opens a new epoch", v, e2.msg);
            tx->ep_broken = 1;
            return 0;
        }
    }
    for (size_t off = 0; off < tx->bytes; off += bucket) {
        size_t len = tx->bytes - off < bucket ? tx->bytes - off : bucket;
        if (cpt_nccl_broadcast(tx->comm, (char *)tx->wb + off, len, 0, &e2)) {
            cpt_warn("weights v%" PRIu64 ": %s; the next version opens a new epoch", v, e2.msg);
            drop_comm(tx);
            return 0;
        }
    }
    if (cpt_nccl_sync(tx->comm, &e2)) {
        cpt_warn("weights v%" PRIu64 ": %s; the next version opens a new epoch", v, e2.msg);
        drop_comm(tx);
    }
    return 0;
}
#endif

int cpt_weights_tx_publish(cpt_weights_tx *tx, cpt_model *policy, uint64_t version, cpt_err *err) {
    if (tx->transport == CPT_WT_FILE) return publish_file(tx, policy, version, err);
#ifdef CPT_HAVE_CUDA
    return tx->transport == CPT_WT_CUDA_IPC ? publish_ipc(tx, version, err) : publish_nccl(tx, version, err);
#else
    return cpt_errf(err, "weights.transport needs CUDA");
#endif
}

int cpt_weights_tx_idle(cpt_weights_tx *tx, cpt_model *policy, uint64_t version, cpt_err *err) {
    (void)policy;
    if (tx->transport != CPT_WT_NCCL || cpt_now() - tx->t_idle < 1.0) return 0;
    tx->t_idle = cpt_now();
#ifdef CPT_HAVE_CUDA
    char (*names)[CPT_NAME_MAX] = NULL;
    int n = 0;
    int64_t ttl = (int64_t)(cpt_cfg_float(tx->cfg, "weights.member_ttl_s") * 1000);
    if (cpt_wg_live(tx->q->redis, tx->run, cpt_wg_now_ms(), ttl, &names, &n, err)) return -1;
    int same = !tx->ep_broken && cpt_wg_same_members(&tx->ep, names, n);
    free(names);
    return same ? 0 : publish_nccl(tx, version, err);
#else
    (void)version, (void)err;
    return 0;
#endif
}
