/* CUDA train-step throughput of the cpt model: one full step (forward with activations kept, the SFT
 * cross-entropy gradient d_logprob = -1 / n_targets, backward, AdamW on the device) of a random Qwen2.5-shaped
 * model on GPU 0, B packed sequences of T random tokens. bench/cuda_train_bench.py runs the same step in PyTorch;
 * bench/cuda_train_bench.sh runs both and prints them side by side.
 *
 * Timing: host clock around each step, which ends with cudaDeviceSynchronize (the forward already waits for its
 * logprobs), median of --steps after --warmup. MFU uses the formula of cuda_train_bench.py:
 * (6 * N * tokens + 6 * layers * heads * head_dim * T^2 * B) / step_time / 989e12, N = parameters with the tied
 * embedding counted once. Memory: device memory in use (cudaMemGetInfo: total - free) sampled after the forward,
 * the backward and the optimizer of every step, minus what was in use before the model was placed (the CUDA
 * context itself); the maximum is printed.
 *
 * usage: cuda_train_bench [--shape 0.5b|1.5b|3b|7b] [--batch B] [--seq 2048] [--steps 10] [--warmup 3]
 *                         [--offload] [--recompute] [--wait-file F]
 * Shapes: Qwen2.5-0.5B, -1.5B, -3B (hidden 2048, 36 layers, 16/2 heads, MLP 11008, tied, vocab 151936) and -7B
 * (hidden 3584, 28 layers, 28/4 heads, MLP 18944, untied, vocab 152064). 3b and 7b fill their weights with a
 * counter-based uniform draw of std 0.02 over all cores (the serial normal init of 7.6B floats takes minutes).
 * --offload: train.optimizer_offload (fp32 master weights and AdamW moments in pinned host memory, streamed through
 * the GPU at each step; the optimizer phase then is that stream). --recompute: train.recompute.
 * --wait-file: build the random model on the host, then wait until F exists before touching the GPU (the host
 * init of 1.5B weights takes tens of seconds; the script overlaps it with the PyTorch runs).
 * prints one line: cpt shape=... step_ms=... tokens_per_s=... mfu=... peak_gib=... */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef CPT_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#include "bench/train_batch.h"
#include "core/fs.h"
#include "model/model.h"
#include "trainer/optim.h"

#define PEAK_FLOPS 989e12

static const char *arg_str(int argc, char **argv, const char *name, const char *dflt) {
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], name)) return argv[i + 1];
    return dflt;
}

static int has_flag(int argc, char **argv, const char *name) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], name)) return 1;
    return 0;
}

/* Weights of std 0.02 (uniform, from a hash of the position: parallel and deterministic), norms 1, biases 0. */
static void fast_init(cpt_model *m) {
    for (size_t i = 0; i < cpt_model_num_params(m); i++) {
        cpt_param *p = cpt_model_param(m, i);
        size_t len = strlen(p->name);
        float fill = len > 11 && !strcmp(p->name + len - 11, "norm.weight") ? 1.0f : 0.0f;
        long long n = (long long)p->numel;
        float *w = p->data;
        if (p->ndim == 1) {
            for (long long j = 0; j < n; j++) w[j] = fill;
            continue;
        }
#pragma omp parallel for schedule(static)
        for (long long j = 0; j < n; j++) {
            uint64_t z = ((uint64_t)i << 40) + (uint64_t)j + 0x9E3779B97F4A7C15ull;
            z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
            z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
            z ^= z >> 31;
            w[j] = (float)(((double)(z >> 11) / 9007199254740992.0 - 0.5) * 2.0 * 0.0346410161514); /* 0.02 sqrt 3 */
        }
    }
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void die(const char *what, const cpt_err *err) {
    fprintf(stderr, "cuda_train_bench: %s: %s\n", what, err->msg);
    exit(1);
}

#ifdef CPT_HAVE_CUDA
static double used_gib(void) {
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) return -1;
    return (double)(total_b - free_b) / (1024.0 * 1024.0 * 1024.0);
}
static int device_sync(cpt_err *err) {
    cudaError_t e = cudaDeviceSynchronize();
    return e == cudaSuccess ? 0 : cpt_errf(err, "cudaDeviceSynchronize: %s", cudaGetErrorString(e));
}
#endif

int main(int argc, char **argv) {
#ifndef CPT_HAVE_CUDA
    (void)argc, (void)argv;
    fprintf(stderr, "cuda_train_bench: cpt was built without CUDA\n");
    return 1;
#else
    const char *shape = arg_str(argc, argv, "--shape", "0.5b");
    cpt_model_config c;
    memset(&c, 0, sizeof c);
    c.arch = CPT_ARCH_QWEN2;
    c.vocab_size = 151936, c.num_kv_heads = 2;
    if (!strcmp(shape, "0.5b")) {
        c.hidden_size = 896, c.num_layers = 24, c.num_heads = 14, c.intermediate_size = 4864;
    } else if (!strcmp(shape, "1.5b")) {
        c.hidden_size = 1536, c.num_layers = 28, c.num_heads = 12, c.intermediate_size = 8960;
    } else if (!strcmp(shape, "3b")) {
        c.hidden_size = 2048, c.num_layers = 36, c.num_heads = 16, c.intermediate_size = 11008;
    } else if (!strcmp(shape, "7b")) {
        c.hidden_size = 3584, c.num_layers = 28, c.num_heads = 28, c.num_kv_heads = 4, c.intermediate_size = 18944;
        c.vocab_size = 152064;
    } else {
        fprintf(stderr, "cuda_train_bench: --shape %s: expected 0.5b, 1.5b, 3b or 7b\n", shape);
        return 2;
    }
    int big = !strcmp(shape, "3b") || !strcmp(shape, "7b");
    int offload = has_flag(argc, argv, "--offload"), recompute = has_flag(argc, argv, "--recompute");
    c.head_dim = c.hidden_size / c.num_heads;
    c.rms_norm_eps = 1e-6f, c.rope_theta = 1000000.0f, c.qkv_bias = 1, c.tie_word_embeddings = strcmp(shape, "7b") != 0;
    c.max_position_embeddings = 32768, c.bos_token_id = -1, c.eos_token_id = -1;
    int B = atoi(arg_str(argc, argv, "--batch", !strcmp(shape, "0.5b") ? "8" : !big ? "4" : "1"));
    int T = atoi(arg_str(argc, argv, "--seq", "2048"));
    int steps = atoi(arg_str(argc, argv, "--steps", "10")), warmup = atoi(arg_str(argc, argv, "--warmup", "3"));
    if (B < 1 || T < 2 || steps < 1 || warmup < 0) {
        fprintf(stderr, "cuda_train_bench: bad --batch/--seq/--steps/--warmup\n");
        return 2;
    }
    cpt_err err;
    double t0 = cpt_now();
    cpt_model *m = big ? cpt_model_new_zeros(&c, &err) : cpt_model_new_random(&c, 1, &err);
    if (!m) die("random model", &err);
    if (big) fast_init(m);
    double t_init = cpt_now() - t0;
    const char *wait_file = arg_str(argc, argv, "--wait-file", NULL);
    while (wait_file && !cpt_path_exists(wait_file)) {
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    t0 = cpt_now();
    double base = used_gib(); /* the CUDA context alone (cudaMemGetInfo creates it) */
    if (cpt_model_set_host_master(m, offload, &err) || cpt_model_use_cuda(m, 0, &err)) die("cpt_model_use_cuda", &err);
    cpt_model_set_recompute(m, recompute);
    double t_place = cpt_now() - t0;
    size_t np = 0;
    cpt_param **params = cpt_model_param_list(m, &np, &err);
    if (!params) die("param list", &err);
    cpt_adamw_hparams hp = {0.9, 0.95, 1e-8, 0.1};
    cpt_adamw *opt = cpt_adamw_new(params, np, &hp, &err);
    if (!opt) die("AdamW", &err);
    if (cpt_adamw_offloaded(opt) != offload) {
        fprintf(stderr, "cuda_train_bench: --offload %d but the optimizer is %s\n", offload,
                cpt_adamw_offloaded(opt) ? "offloaded" : "on the device");
        return 1;
    }

    train_batch tb;
    double *times = malloc(sizeof(double) * steps);
    if (!times || train_batch_init(&tb, B, T, c.vocab_size)) {
        fprintf(stderr, "cuda_train_bench: out of memory\n");
        return 1;
    }
    int N = tb.batch.n_tokens, count = tb.count;
    cpt_forward_out out = {tb.lp, NULL, NULL, NULL};
    double peak = 0, loss = 0, first_loss = 0;
    double ph_fwd = 0, ph_bwd = 0, ph_opt = 0; /* phase sums over the timed steps (a sync ends each phase) */
    for (int s = 0; s < warmup + steps; s++) {
        double ts = cpt_now();
        cpt_model_zero_grad(m);
        if (cpt_model_forward(m, &tb.batch, &out, 1, &err)) die("forward", &err);
        if (device_sync(&err)) die("forward", &err);
        double tf = cpt_now();
        double u = used_gib();
        if (u - base > peak) peak = u - base;
        if (cpt_model_backward(m, &tb.batch, tb.d, NULL, NULL, &err)) die("backward", &err);
        if (device_sync(&err)) die("backward", &err);
        double tbw = cpt_now();
        u = used_gib();
        if (u - base > peak) peak = u - base;
        cpt_adamw_step(opt, 1e-5);
        if (device_sync(&err)) die("step", &err);
        double te = cpt_now();
        u = used_gib();
        if (u - base > peak) peak = u - base;
        if (s >= warmup) {
            times[s - warmup] = te - ts;
            ph_fwd += tf - ts, ph_bwd += tbw - tf, ph_opt += te - tbw;
        }
        loss = train_batch_nll(&tb) / count;
        if (s == 0) first_loss = loss;
    }
    qsort(times, (size_t)steps, sizeof *times, cmp_double);
    double dt = steps % 2 ? times[steps / 2] : 0.5 * (times[steps / 2 - 1] + times[steps / 2]);
    size_t n_params = cpt_model_numel(m);
    double flops = 6.0 * (double)n_params * N + 6.0 * c.num_layers * c.num_heads * c.head_dim * (double)T * T * B;
    printf("cpt shape=%s offload=%d recompute=%d host_state_gib=%.1f\n", shape, offload, recompute,
           offload ? 12.0 * (double)cpt_model_numel(m) / (1 << 30) : 4.0 * (double)cpt_model_numel(m) / (1 << 30));
    printf("cpt shape=%s params=%zu batch=%dx%d step_ms=%.1f (min %.1f max %.1f) tokens_per_s=%.0f mfu=%.3f "
           "peak_gib=%.2f loss_first=%.4f loss_last=%.4f init_s=%.1f place_s=%.1f\n",
           shape, n_params, B, T, dt * 1e3, times[0] * 1e3, times[steps - 1] * 1e3, N / dt, flops / dt / PEAK_FLOPS,
           peak, first_loss, loss, t_init, t_place);
    printf("cpt shape=%s phases_ms forward=%.1f backward=%.1f optimizer=%.1f (means)\n", shape, ph_fwd * 1e3 / steps,
           ph_bwd * 1e3 / steps, ph_opt * 1e3 / steps);
    cpt_adamw_free(opt);
    free(params);
    cpt_model_free(m);
    train_batch_free(&tb);
    free(times);
    return 0;
#endif
}
