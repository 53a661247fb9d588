/* Weight transports, worker side (weights/weights_rx.h). */
#include "weights/weights_rx.h"

#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/fs.h"
#include "weights/devices.h"
#include "weights/weights_ann.h"
#include "weights/weights_group.h"
#include "weights/weights_ipc_book.h"

#ifdef CPT_HAVE_CUDA
#include "kernels/cuda/nccl_dp.h"
#include "kernels/cuda/weights_ipc.h"
#endif

struct cpt_weights_rx {
    const cpt_config *cfg;
    char me[CPT_NAME_MAX];
    cpt_queue *q;
    int transport;
    double t_reg;
#ifdef CPT_HAVE_CUDA
    void *opened[2];
    unsigned char opened_handle[2][CPT_CUDA_IPC_HANDLE_BYTES];
    cpt_nccl *comm;
    uint64_t comm_epoch;
    void *staging;
    size_t staging_bytes;
    int has_got;
    uint64_t got_epoch, got_version;
#endif
};

cpt_weights_rx *cpt_weights_rx_new(const cpt_config *cfg, const char *worker, cpt_queue *q, cpt_err *err) {
    const char *t = cpt_transport_resolve(cfg);
    int tr = t ? cpt_weights_transport_parse(t) : -1;
    if (tr < 0) {
        cpt_errf(err, "weights.transport = \"%s\": expected auto, file, nccl or cuda_ipc",
                 cpt_cfg_str(cfg, "weights.transport"));
        return NULL;
    }
    /* the worker's side only: the trainer's device is the trainer's to check */
    if (tr != CPT_WT_FILE && cpt_weights_choice_check(t, "cuda", cpt_device_resolve(cfg, "rollout.device"),
                                                      !strcmp(cpt_cfg_str(cfg, "model.init"), "random"), err))
        return NULL;
    cpt_weights_rx *rx = calloc(1, sizeof *rx);
    if (!rx) {
        cpt_errf(err, "out of memory");
        return NULL;
    }
    rx->cfg = cfg, rx->q = q, rx->transport = tr;
    snprintf(rx->me, sizeof rx->me, "%s", worker);
    if (tr == CPT_WT_NCCL && cpt_wg_register(q->redis, q->run, rx->me, cpt_wg_now_ms(), err)) {
        free(rx);
        return NULL;
    }
    rx->t_reg = cpt_now();
    return rx;
}

void cpt_weights_rx_free(cpt_weights_rx *rx) {
    if (!rx) return;
    cpt_err err;
    if (rx->transport == CPT_WT_NCCL && cpt_wg_leave(rx->q->redis, rx->q->run, rx->me, &err))
        cpt_warn("cpt-rollout %s: leaving the weight group: %s", rx->me, err.msg);
#ifdef CPT_HAVE_CUDA
    cpt_nccl_free(rx->comm);
    for (int s = 0; s < 2; s++) cpt_cuda_ipc_close(rx->opened[s]);
    cpt_cuda_free(rx->staging);
#endif
    free(rx);
}

int cpt_weights_rx_file_path(const char *run_dir, const char *location, char *out, size_t cap, cpt_err *err) {
    char dir[PATH_MAX + 16], real_dir[PATH_MAX], real_file[PATH_MAX];
    if (snprintf(dir, sizeof dir, "%s/weights", run_dir) >= (int)sizeof dir)
        return cpt_errf(err, "run directory %s: path too long", run_dir);
    if (!realpath(dir, real_dir)) return cpt_errno(err, "the run's weights folder %s", dir);
    if (!realpath(location, real_file)) return cpt_errno(err, "weights location %s", location);
    size_t n = strlen(real_dir);
    if (strncmp(real_file, real_dir, n) || real_file[n] != '/')
        return cpt_errf(err, "weights location %s (resolved: %s) is not inside the run's weights folder %s; refused",
                        location, real_file, real_dir);
    struct stat st;
    if (stat(real_file, &st) != 0) return cpt_errno(err, "weights location %s", real_file);
    if (!S_ISREG(st.st_mode)) return cpt_errf(err, "weights location %s is not a regular file; refused", real_file);
    if (strlen(real_file) >= cap) return cpt_errf(err, "weights location %s: path too long", real_file);
    memcpy(out, real_file, strlen(real_file) + 1);
    return 0;
}

int cpt_weights_rx_handles(const cpt_weights_rx *rx, const cpt_weights_msg *wm) {
    int t = cpt_weights_transport_parse(wm->transport);
    return rx && (t == CPT_WT_NCCL || t == CPT_WT_CUDA_IPC);
}

#ifdef CPT_HAVE_CUDA
static int parse_checked(const cpt_weights_msg *wm, cpt_model *m, cpt_weights_ann *a, uint64_t *sum, cpt_err *err) {
    if (cpt_weights_ann_parse(wm->transport, wm->location, a, err)) return -1;
    if (cpt_weights_sum64_parse(wm->checksum, sum))
        return cpt_errf(err, "checksum \"%s\": expected sum64:HEX16", wm->checksum);
    cpt_weights_layout have;
    cpt_weights_layout_of(m, &have);
    if (cpt_weights_layout_check(&a->layout, &have, err)) return -1;
    if (wm->bytes != have.numel * 2)
        return cpt_errf(err, "%" PRIu64 " bytes announced, this model's bf16 weights are %" PRIu64, wm->bytes, have.numel * 2);
    return 0;
}

static int verify(cpt_cuda_ctx *ctx, const void *dev, size_t bytes, uint64_t want, cpt_err *err) {
    uint64_t got;
    if (cpt_cuda_sum64(ctx, dev, bytes, &got, err)) return -1;
    if (got != want) return cpt_errf(err, "sum64 %016" PRIx64 " of the received bytes, announced %016" PRIx64, got, want);
    return 0;
}

static int nccl_receive(cpt_weights_rx *rx, cpt_model *m, const cpt_weights_msg *wm, cpt_err *err) {
    cpt_weights_ann a;
    uint64_t sum;
    if (parse_checked(wm, m, &a, &sum, err)) return -1;
    if (rx->comm && rx->comm_epoch != a.epoch) { /* our epoch is gone: drop its communicator */
        cpt_nccl_free(rx->comm);
        rx->comm = NULL;
    }
    if (rx->has_got && rx->got_epoch == a.epoch && rx->got_version == wm->version) return 0;
    cpt_wg_epoch ep;
    int rc = cpt_wg_current(rx->q->redis, rx->q->run, &ep, err);
    if (rc <= 0) return rc;
    int rank = ep.epoch == a.epoch ? cpt_wg_rank(&ep, rx->me) : -1;
    cpt_wg_epoch_free(&ep);
    if (rank < 0) return 0; /* not in this epoch: the trainer opens one with us at its next version */
    cpt_cuda_ctx *ctx = cpt_model_cuda_ctx(m);
    double timeout = cpt_cfg_float(rx->cfg, "weights.nccl_timeout_s");
    if (!rx->comm) {
        char where[128];
        snprintf(where, sizeof where, "weights epoch %" PRIu64 " rank %d/%d (%s)", a.epoch, rank, a.ranks, rx->me);
        if (!(rx->comm = cpt_nccl_new(ctx, a.uid, rank, a.ranks, timeout, where, err))) return -1;
        rx->comm_epoch = a.epoch;
    }
    if (rx->staging_bytes != wm->bytes) {
        cpt_cuda_free(rx->staging);
        rx->staging_bytes = 0;
        if (!(rx->staging = cpt_cuda_malloc(wm->bytes, "the nccl weight staging buffer", err))) return -1;
        rx->staging_bytes = wm->bytes;
    }
    rx->has_got = 0;
    for (size_t off = 0; off < wm->bytes; off += a.bucket_bytes) {
        size_t len = wm->bytes - off < a.bucket_bytes ? wm->bytes - off : a.bucket_bytes;
        if (cpt_nccl_broadcast(rx->comm, (char *)rx->staging + off, len, 0, err)) goto broken;
    }
    if (cpt_nccl_sync(rx->comm, err)) goto broken;
    if (verify(ctx, rx->staging, wm->bytes, sum, err)) return -1;
    rx->has_got = 1, rx->got_epoch = a.epoch, rx->got_version = wm->version;
    return 0;
broken:
    cpt_nccl_free(rx->comm);
    rx->comm = NULL;
    return -1;
}

static int ipc_load(cpt_weights_rx *rx, cpt_model *m, const cpt_weights_msg *wm, cpt_err *err) {
    cpt_weights_ann a;
    uint64_t sum;
    if (parse_checked(wm, m, &a, &sum, err)) return -1;
    char host[CPT_NAME_MAX] = "";
    if (gethostname(host, sizeof host - 1) == 0 && strcmp(host, a.host))
        return cpt_errf(err, "cuda_ipc: the trainer runs on host %s, this worker on %s (IPC handles only open on the "
                             "same host; use weights.transport = nccl or file)", a.host, host);
    cpt_cuda_ctx *ctx = cpt_model_cuda_ctx(m);
    int s = a.slot;
    if (!rx->opened[s] || memcmp(rx->opened_handle[s], a.handle, sizeof a.handle)) {
        cpt_cuda_ipc_close(rx->opened[s]);
        rx->opened[s] = NULL;
        if (cpt_cuda_ipc_open(ctx, a.handle, &rx->opened[s], err))
            return cpt_err_prefix(err, "cuda_ipc slot %d of trainer pid %ld", s, a.pid);
        memcpy(rx->opened_handle[s], a.handle, sizeof a.handle);
    }
    int64_t lease = (int64_t)(cpt_cfg_float(rx->cfg, "weights.ipc_lease_s") * 1000);
    int in = cpt_ipc_book_enter(rx->q->redis, rx->q->run, s, wm->version, rx->me, cpt_wg_now_ms(), lease, err);
    if (in <= 0) return in; /* 0: superseded while we looked */
    int rc = cpt_model_load_weights_bf16_device(m, rx->opened[s], err);
    if (!rc) rc = verify(ctx, rx->opened[s], wm->bytes, sum, err);
    cpt_err e2;
    if (cpt_ipc_book_leave(rx->q->redis, rx->q->run, s, rx->me, rc ? 0 : wm->version, &e2) && !rc) {
        *err = e2;
        rc = -1;
    }
    return rc ? -1 : 1;
}
#endif

int cpt_weights_rx_poll(cpt_weights_rx *rx, cpt_model *m, const cpt_weights_msg *wm, cpt_err *err) {
    if (rx->transport != CPT_WT_NCCL) return 0;
    if (cpt_now() - rx->t_reg >= cpt_cfg_float(rx->cfg, "weights.member_ttl_s") / 3) {
        if (cpt_wg_register(rx->q->redis, rx->q->run, rx->me, cpt_wg_now_ms(), err)) return -1;
        rx->t_reg = cpt_now();
    }
    if (!wm || strcmp(wm->transport, "nccl") || !m || !cpt_model_cuda_ctx(m)) return 0;
#ifdef CPT_HAVE_CUDA
    return nccl_receive(rx, m, wm, err);
#else
    return cpt_errf(err, "built without CUDA");
#endif
}

int cpt_weights_rx_load(cpt_weights_rx *rx, cpt_model *m, const cpt_weights_msg *wm, cpt_err *err) {
    if (!m || !cpt_model_cuda_ctx(m))
        return cpt_errf(err, "transport %s needs the model on the GPU (rollout.device = cuda)", wm->transport);
#ifdef CPT_HAVE_CUDA
    if (!strcmp(wm->transport, "cuda_ipc")) return ipc_load(rx, m, wm, err);
    if (!rx->has_got || rx->got_version != wm->version || rx->got_epoch != wm->membership_epoch) return 0;
    return cpt_model_load_weights_bf16_device(m, rx->staging, err) ? -1 : 1;
#else
    (void)rx;
    return cpt_errf(err, "built without CUDA");
#endif
}
