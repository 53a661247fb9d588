/* CPU train-step throughput of the cpt model: forward + backward of mean next-token cross entropy on B sequences
 * of T tokens (packed), for a random qwen2-style model, at the thread count OpenMP is given (OMP_NUM_THREADS).
 * bench/cpu_train_bench.py runs the same step in PyTorch; bench/cpu_train_bench.sh runs both.
 *
 * usage: cpu_train_bench [--hidden 256] [--layers 4] [--vocab 1024] [--heads 8] [--kv-heads 4]
 *                        [--intermediate 768] [--batch 4] [--seq 256] [--steps 10] [--warmup 2]
 * prints one line: cpt threads=N tokens_per_step=... step_ms=... tokens_per_s=... */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fs.h"
#include "model/model.h"

static int arg_int(int argc, char **argv, const char *name, int dflt) {
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], name)) return atoi(argv[i + 1]);
    return dflt;
}

int main(int argc, char **argv) {
    cpt_model_config c;
    memset(&c, 0, sizeof c);
    c.arch = CPT_ARCH_QWEN2;
    c.hidden_size = arg_int(argc, argv, "--hidden", 256);
    c.num_layers = arg_int(argc, argv, "--layers", 4);
    c.vocab_size = arg_int(argc, argv, "--vocab", 1024);
    c.num_heads = arg_int(argc, argv, "--heads", 8);
    c.num_kv_heads = arg_int(argc, argv, "--kv-heads", 4);
    c.intermediate_size = arg_int(argc, argv, "--intermediate", 768);
    c.head_dim = c.hidden_size / c.num_heads;
    c.rms_norm_eps = 1e-6f, c.rope_theta = 10000.0f, c.qkv_bias = 1, c.max_position_embeddings = 4096;
    c.bos_token_id = c.eos_token_id = -1;
    int B = arg_int(argc, argv, "--batch", 4), T = arg_int(argc, argv, "--seq", 256);
    int steps = arg_int(argc, argv, "--steps", 10), warmup = arg_int(argc, argv, "--warmup", 2);
    cpt_err err;
    cpt_model *m = cpt_model_new_random(&c, 1, &err);
    if (!m) {
        fprintf(stderr, "cpu_train_bench: %s\n", err.msg);
        return 1;
    }
    int N = B * T;
    int32_t *tok = malloc(sizeof(int32_t) * N), *tgt = malloc(sizeof(int32_t) * N),
            *ss = malloc(sizeof(int32_t) * (B + 1));
    float *lp = malloc(sizeof(float) * N), *d = malloc(sizeof(float) * N);
    uint64_t x = 12345;
    for (int i = 0; i < N; i++) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        tok[i] = (int32_t)((x >> 33) % (uint64_t)c.vocab_size);
    }
    for (int b = 0; b <= B; b++) ss[b] = b * T;
    for (int i = 0; i < N; i++) tgt[i] = (i % T) + 1 < T ? tok[i + 1] : -1;
    int count = B * (T - 1);
    for (int i = 0; i < N; i++) d[i] = tgt[i] >= 0 ? -1.0f / count : 0.0f;
    cpt_batch batch = {N, B, tok, ss, tgt};
    cpt_forward_out out = {lp, NULL, NULL, NULL};
    double t0 = 0, loss = 0;
    for (int s = 0; s < warmup + steps; s++) {
        if (s == warmup) t0 = cpt_now();
        cpt_model_zero_grad(m);
        if (cpt_model_forward(m, &batch, &out, 1, &err) || cpt_model_backward(m, &batch, d, NULL, NULL, &err)) {
            fprintf(stderr, "cpu_train_bench: %s\n", err.msg);
            return 1;
        }
        loss = 0;
        for (int i = 0; i < N; i++) loss -= tgt[i] >= 0 ? lp[i] : 0;
    }
    double dt = (cpt_now() - t0) / steps;
    printf("cpt threads=%d params=%zu tokens_per_step=%d step_ms=%.1f tokens_per_s=%.0f loss=%.4f\n",
           omp_get_max_threads(), cpt_model_numel(m), N, dt * 1e3, N / dt, loss / count);
    cpt_model_free(m);
    free(tok), free(tgt), free(ss), free(lp), free(d);
    return 0;
}
