/* Device and transport resolution (weights/devices.h). */
#include "weights/devices.h"

#include <stdio.h>
#include <string.h>

#ifdef CPT_HAVE_CUDA
#include "kernels/cuda/cuda_ops.h"
#endif

int cpt_gpus_visible(void) {
#ifdef CPT_HAVE_CUDA
    return cpt_cuda_device_count();
#else
    return 0;
#endif
}

const char *cpt_device_pick(const char *value, int gpus_seen) {
    if (!value) return NULL;
    if (!strcmp(value, "auto")) return gpus_seen > 0 ? "cuda" : "cpu";
    if (!strcmp(value, "cpu")) return "cpu";
    if (!strcmp(value, "cuda")) return "cuda";
    return NULL;
}

const char *cpt_transport_pick(const char *value, const char *train_dev, const char *rollout_dev, int own_gpus,
                               int random_init) {
    if (!value) return NULL;
    if (!strcmp(value, "file")) return "file";
    if (!strcmp(value, "cuda_ipc")) return "cuda_ipc";
    if (!strcmp(value, "nccl")) return "nccl";
    if (strcmp(value, "auto")) return NULL;
    if (!train_dev || !rollout_dev || strcmp(train_dev, "cuda") || strcmp(rollout_dev, "cuda") || random_init)
        return "file";
    return own_gpus ? "nccl" : "cuda_ipc";
}

int cpt_weights_choice_check(const char *transport, const char *train_dev, const char *rollout_dev, int random_init,
                             cpt_err *err) {
    if (!strcmp(transport, "file")) return 0;
    if (strcmp(transport, "cuda_ipc") && strcmp(transport, "nccl"))
        return cpt_errf(err, "weights.transport = \"%s\": expected auto, file, nccl or cuda_ipc", transport);
#ifndef CPT_HAVE_CUDA
    (void)train_dev, (void)rollout_dev, (void)random_init;
    return cpt_errf(err, "weights.transport = \"%s\" needs CUDA, but this cpt was built without it (no nvcc at "
                         "configure time); use weights.transport = \"file\" or \"auto\"", transport);
#else
    if (strcmp(train_dev, "cuda"))
        return cpt_errf(err, "weights.transport = \"%s\" sends the trainer's GPU weights, but train.device = \"%s\"; "
                             "set train.device = \"cuda\" or weights.transport = \"file\"", transport, train_dev);
    if (strcmp(rollout_dev, "cuda"))
        return cpt_errf(err, "weights.transport = \"%s\" lands in the GPU engine, but rollout.device = \"%s\"; set "
                             "rollout.device = \"cuda\" or weights.transport = \"file\"", transport, rollout_dev);
    if (random_init)
        return cpt_errf(err, "weights.transport = \"%s\" needs the worker's model at start (model.path); model.init = "
                             "random builds it from the first file version: use weights.transport = \"file\"",
                        transport);
    return 0;
#endif
}

int cpt_devices_resolve(const cpt_config *cfg, const cpt_devices_view *v, cpt_devices *out, cpt_err *err) {
    memset(out, 0, sizeof *out);
    int tgpus = (int)cpt_cfg_int(cfg, "slurm.trainer_gpus"), rgpus = (int)cpt_cfg_int(cfg, "slurm.rollout_gpus");
    const char *tv = cpt_cfg_str(cfg, "train.device"), *rv = cpt_cfg_str(cfg, "rollout.device");
    out->train = cpt_device_pick(tv, v->slurm ? tgpus : v->gpus);
    if (!out->train) return cpt_errf(err, "train.device = \"%s\": expected auto, cpu or cuda", tv);
    out->rollout = cpt_device_pick(rv, v->slurm ? rgpus : v->gpus);
    if (!out->rollout) return cpt_errf(err, "rollout.device = \"%s\": expected auto, cpu or cuda", rv);
    /* the reward worker's models; the reward steps of a Slurm job hold no GPU: auto is the CPU there */
    static const char *const keys[2] = {"teacher.device", "reward.model_device"};
    int used[2] = {!strcmp(cpt_cfg_str(cfg, "algo.type"), "opd") && cpt_cfg_str(cfg, "teacher.path")[0],
                   cpt_cfg_str(cfg, "reward.model_path")[0] != 0};
    int *gpu[2] = {&out->teacher_gpu, &out->reward_model_gpu};
    for (int i = 0; i < 2; i++) {
        if (!used[i]) continue;
        const char *dv = cpt_cfg_str(cfg, keys[i]), *d = cpt_device_pick(dv, v->slurm ? 0 : v->gpus);
        if (!d) return cpt_errf(err, "%s = \"%s\": expected auto, cpu or cuda", keys[i], dv);
        *gpu[i] = !strcmp(d, "cuda");
    }
    out->reward = out->teacher_gpu || out->reward_model_gpu ? "cuda" : "cpu";
    out->train_gpu = (int)cpt_cfg_int(cfg, "train.cuda_device");
    int on_gpu = !strcmp(out->rollout, "cuda");
    out->rollout_own_gpus = on_gpu && v->slurm && rgpus > 0 && tgpus > 0;
    out->rollout_shares_gpu = on_gpu && !out->rollout_own_gpus && !strcmp(out->train, "cuda");
    const char *wv = cpt_cfg_str(cfg, "weights.transport");
    out->transport = cpt_transport_pick(wv, out->train, out->rollout, out->rollout_own_gpus,
                                        !strcmp(cpt_cfg_str(cfg, "model.init"), "random"));
    if (!out->transport) return cpt_errf(err, "weights.transport = \"%s\": expected auto, file, nccl or cuda_ipc", wv);
    if (!strcmp(out->train, "cuda") && cpt_cfg_str(cfg, "validation.data")[0])
        out->validation = strcmp(cpt_cfg_str(cfg, "validation.device"), "cpu") ? "cuda" : "cpu";
    return 0;
}

void cpt_devices_describe(const cpt_devices *d, char *out, size_t cap) {
    char tgpu[32] = "";
    if (!strcmp(d->train, "cuda")) snprintf(tgpu, sizeof tgpu, " (GPU %d)", d->train_gpu);
    const char *rwhere = d->rollout_own_gpus ? " (a GPU per worker)" : d->rollout_shares_gpu ? " (beside the trainer)" : "";
    const char *val = !d->validation ? "" : strcmp(d->validation, "cuda") ? "; validation on the host"
                                                                           : "; validation on the trainer's GPU";
    char models[80] = "";
    if (d->teacher_gpu || d->reward_model_gpu)
        snprintf(models, sizeof models, " (%s%s%s on GPU %d)", d->teacher_gpu ? "the OPD teacher" : "",
                 d->teacher_gpu && d->reward_model_gpu ? " and " : "", d->reward_model_gpu ? "the reward model" : "",
                 d->train_gpu);
    snprintf(out, cap, "trainer %s%s, rollout %s%s, reward %s%s; weights over %s%s", d->train, tgpu, d->rollout,
             rwhere, d->reward, models, d->transport, val);
}

const char *cpt_device_resolve(const cpt_config *cfg, const char *key) {
    const char *v = cpt_cfg_str(cfg, key);
    if (strcmp(v, "auto")) return v;
    return cpt_device_pick(v, cpt_gpus_visible());
}

const char *cpt_transport_resolve(const cpt_config *cfg) {
    const char *v = cpt_cfg_str(cfg, "weights.transport");
    if (strcmp(v, "auto")) return v;
    return cpt_transport_pick(v, cpt_device_resolve(cfg, "train.device"), cpt_device_resolve(cfg, "rollout.device"), 0,
                              !strcmp(cpt_cfg_str(cfg, "model.init"), "random"));
}
