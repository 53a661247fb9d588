/* Where the models run and how weight versions travel: train.device, rollout.device and weights.transport, with
 * "auto" (their default) resolved once, by one set of rules, whoever asks.
 *
 *   device auto     cuda when the GPUs seen are more than 0, else cpu. What is seen depends on who resolves: a role
 *                   process counts the GPUs it sees (cpt_gpus_visible: the kernels' device count, 0 in a build
 *                   without CUDA); the launcher under Slurm cannot see the GPUs of the steps it starts, so it goes
 *                   by what each step asks: slurm.trainer_gpus, slurm.rollout_gpus > 0 -> cuda, 0 -> cpu.
 *   transport auto  file when either side is on the CPU (or model.init = random: the GPU transports need the
 *                   worker's model at start); nccl when the rollout workers hold GPUs of their own (under Slurm:
 *                   slurm.rollout_gpus > 0 and slurm.trainer_gpus > 0); cuda_ipc when they share the trainer's GPU
 *                   (a local run; or Slurm with slurm.rollout_gpus = 0 and rollout.device = cuda).
 *
 * The launcher writes the concrete values into RUN_DIR/config.toml (every role reads the same); a role started by
 * hand with "auto" resolves it with what its process sees (cpt_device_resolve, cpt_transport_resolve). */
#ifndef CPT_WEIGHTS_DEVICES_H
#define CPT_WEIGHTS_DEVICES_H

#include "core/config.h"
#include "core/error.h"

/* GPUs this process sees: the CUDA device count, 0 without a driver, a device, or a CUDA build. */
int cpt_gpus_visible(void);

/* A device value ("auto", "cpu", "cuda") given the GPUs seen: "cpu" or "cuda"; NULL for anything else. */
const char *cpt_device_pick(const char *value, int gpus_seen);

/* A transport value ("auto", "file", "cuda_ipc", "nccl") given the resolved devices; own_gpus: the rollout workers
 * hold GPUs of their own; random_init: model.init = random. An explicit value is returned as given (checked by
 * cpt_weights_choice_check); NULL for an unknown one. */
const char *cpt_transport_pick(const char *value, const char *train_dev, const char *rollout_dev, int own_gpus,
                               int random_init);

/* Whether transport can carry weights between these devices in this build; -1 naming the key otherwise. */
int cpt_weights_choice_check(const char *transport, const char *train_dev, const char *rollout_dev, int random_init,
                             cpt_err *err);

/* Who resolves: a local view (GPUs this machine shows), or the launcher of Slurm steps (slurm.*_gpus). */
typedef struct cpt_devices_view {
    int slurm;
    int gpus; /* local: GPUs seen */
} cpt_devices_view;

typedef struct cpt_devices {
    const char *train, *rollout, *reward; /* "cpu" | "cuda" (reward: cuda when one of its models is on the GPU) */
    int teacher_gpu, reward_model_gpu;    /* the OPD teacher (teacher.device), the reward model (reward.model_device) */
    const char *transport;                /* "file" | "cuda_ipc" | "nccl" */
    int train_gpu;                        /* GPU index of the trainer when it is on cuda (train.cuda_device) */
    int rollout_own_gpus;                 /* rollout workers hold GPUs of their own (Slurm: slurm.rollout_gpus) */
    int rollout_shares_gpu;               /* rollout on cuda beside the trainer, on its GPU */
    const char *validation; /* a trainer on cuda with validation.data: where it validates ("cuda" | "cpu"); else NULL */
} cpt_devices;

/* Resolves every "auto" of cfg for the view. -1 with the key named when a value is not one of the choices. */
int cpt_devices_resolve(const cpt_config *cfg, const cpt_devices_view *v, cpt_devices *out, cpt_err *err);

/* One line: "trainer cuda (GPU 0), rollout cuda (beside the trainer), reward cpu; weights over cuda_ipc", and
 * "; validation on the trainer's GPU" (or "on the host") for a GPU trainer that validates; the reward worker's models on
 * the GPU read "reward cuda (the OPD teacher on GPU 0)", "(the reward model ...)" or "(the OPD teacher and the
 * reward model ...)". */
void cpt_devices_describe(const cpt_devices *d, char *out, size_t cap);

/* Role-time: the key's device with "auto" resolved by the GPUs this process sees ("cpu" or "cuda"; a value the
 * config checks let through but that is neither reads as itself). */
const char *cpt_device_resolve(const cpt_config *cfg, const char *key);
/* Role-time: weights.transport with "auto" resolved by what this process sees (no Slurm view: never nccl). */
const char *cpt_transport_resolve(const cpt_config *cfg);

#endif
