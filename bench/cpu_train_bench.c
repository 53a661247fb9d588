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
#include "bench/train_batch.h"
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
    train_batch tb;
    if (train_batch_init(&tb, B, T, c.vocab_size)) {
        fprintf(stderr, "cpu_train_bench: out of memory\n");
        return 1;
    }
    int N = tb.batch.n_tokens, count = tb.count;
    cpt_forward_out out = {tb.lp, NULL, NULL, NULL};
    double t0 = 0, loss = 0;
    for (int s = 0; s < warmup + steps; s++) {
        if (s == warmup) t0 = cpt_now();
        cpt_model_zero_grad(m);
        if (cpt_model_forward(m, &tb.batch, &out, 1, &err) ||
            cpt_model_backward(m, &tb.batch, tb.d, NULL, NULL, &err)) {
            fprintf(stderr, "cpu_train_bench: %s\n", err.msg);
            return 1;
        }
        loss = train_batch_nll(&tb);
    }
    double dt = (cpt_now() - t0) / steps;
    printf("cpt threads=%d params=%zu tokens_per_step=%d step_ms=%.1f tokens_per_s=%.0f loss=%.4f\n",
           omp_get_max_threads(), cpt_model_numel(m), N, dt * 1e3, N / dt, loss / count);
    cpt_model_free(m);
    train_batch_free(&tb);
    return 0;
}
