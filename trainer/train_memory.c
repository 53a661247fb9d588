/* The trainer's memory arithmetic (trainer/train_memory.h). */
#include "trainer/train_memory.h"

#include <stdio.h>
#include <string.h>

#include "trainer/optim.h"

#define GIB(x) ((double)(x) / (double)(1ull << 30))

void cpt_train_memory_estimate(uint64_t params, int offload, int zero_world, cpt_train_memory *out) {
    memset(out, 0, sizeof *out);
    if (zero_world < 1) zero_world = 1;
    out->params = params, out->offload = offload != 0, out->zero_world = zero_world;
    out->weights_bf16 = 2 * params;
    out->grads = 4 * params;
    if (offload) {
        out->master_host = 4 * params;
        out->moments_host = 8 * params;
        out->staging = 2 * 3 * CPT_ADAMW_OFFLOAD_CHUNK * sizeof(float); /* two buffers of master | m | v */
    } else {
        out->master_gpu = 4 * params;
        out->moments_gpu = 8 * ((params + (uint64_t)zero_world - 1) / (uint64_t)zero_world);
        out->master_host = 4 * params; /* the host mirror of the weights */
    }
    out->gpu_total = out->weights_bf16 + out->grads + out->master_gpu + out->moments_gpu + out->staging;
    out->host_total = out->master_host + out->moments_host;
}

cpt_mem_verdict cpt_train_memory_check(const cpt_train_memory *m, uint64_t gpu_bytes, uint64_t host_bytes, char *msg,
                                       size_t cap) {
    cpt_train_memory off;
    cpt_train_memory_estimate(m->params, 1, 1, &off);
    int off_fits = (!gpu_bytes || off.gpu_total <= gpu_bytes * 0.85) && (!host_bytes || off.host_total <= host_bytes * 0.9);
    char hint[256];
    if (m->zero_world > 1) /* offload and train.zero = 1 do not go together (preflight and the trainer refuse it) */
        snprintf(hint, sizeof hint, "more trainer ranks share the moments (train.zero = 1, slurm.trainer_tasks), or, "
                 "at train.zero = 0, train.optimizer_offload = true%s", off_fits ? "" : " (which does not fit either)");
    else if (m->offload || !off_fits)
        snprintf(hint, sizeof hint, "no option here makes it fit (a smaller model, or a GPU with more memory)");
    else
        snprintf(hint, sizeof hint, "set train.optimizer_offload = true (GPU %.1f GiB, pinned host %.1f GiB)",
                 GIB(off.gpu_total), GIB(off.host_total));
    if (gpu_bytes && m->gpu_total > gpu_bytes) {
        snprintf(msg, cap, "the model state needs %.1f GiB of GPU memory, the GPU has %.1f GiB: %s", GIB(m->gpu_total),
                 GIB(gpu_bytes), hint);
        return CPT_MEM_NO_FIT;
    }
    if (host_bytes && m->host_total > host_bytes) {
        snprintf(msg, cap, "the model state needs %.1f GiB of host memory%s, the host has %.1f GiB: %s",
                 GIB(m->host_total), m->offload ? " (offloaded, pinned)" : "", GIB(host_bytes),
                 m->offload ? "set train.optimizer_offload = false if the GPU holds the state, else a smaller model"
                            : "a host with more memory, or a smaller model");
        return CPT_MEM_NO_FIT;
    }
    if (gpu_bytes && m->gpu_total > gpu_bytes * 0.85) {
        snprintf(msg, cap, "the model state takes %.1f of the GPU's %.1f GiB (%.0f%%): activations get little room "
                 "(train.recompute = true helps); %s", GIB(m->gpu_total), GIB(gpu_bytes),
                 100.0 * (double)m->gpu_total / (double)gpu_bytes, hint);
        return CPT_MEM_TIGHT;
    }
    if (host_bytes && m->host_total > host_bytes * 0.9) {
        snprintf(msg, cap, "the model state takes %.1f of the host's %.1f GiB of memory (%.0f%%)", GIB(m->host_total),
                 GIB(host_bytes), 100.0 * (double)m->host_total / (double)host_bytes);
        return CPT_MEM_TIGHT;
    }
    /* a size not known here (under Slurm the trainer's node is another process's to read) is said so, not guessed */
    char a[48] = " GiB (the GPU's memory not read here)", b[48] = " GiB (the host's memory not read here)";
    if (gpu_bytes) snprintf(a, sizeof a, " of %.1f GiB", GIB(gpu_bytes));
    if (host_bytes) snprintf(b, sizeof b, " of %.1f GiB", GIB(host_bytes));
    snprintf(msg, cap, "%s: GPU %.1f%s, host %.1f%s", gpu_bytes || host_bytes ? "fits" : "needs", GIB(m->gpu_total), a,
             GIB(m->host_total), b);
    return CPT_MEM_FITS;
}
