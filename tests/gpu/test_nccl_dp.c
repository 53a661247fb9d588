/* Data parallel on the GPU (trainer/dp.h, kernels/cuda/nccl_dp.h).
 *
 *  1. one rank, NCCL off: the step is bookkeeping only, the gradients are untouched and libnccl is never loaded;
 *  2. one rank with a real NCCL communicator (force_nccl): the averaged buckets equal the known input, bit for
 *     bit, and a simulated backward (Qwen2.5-0.5B's parameter list, matmuls per layer) shows each bucket's
 *     all-reduce running on the comm stream while later layers still compute (CUDA events on both streams);
 *  3. the NCCL init timeout: rank 0 of a group of 2 whose rank 1 never starts fails after the timeout with an error
 *     naming the rank and the bootstrap;
 *  4. N ranks as child processes (file bootstrap), one per GPU, rank r adding r to known values: every rank gets
 *     the exact average. With one GPU both ranks share it; NCCL normally refuses that, and the error is printed
 *     and recorded, not counted as a failure (one GPU cannot test N > 1).
 *  5. the host collectives over NCCL at one rank (force_nccl) with a tiny model on the GPU: sum_floats (1 and 1e6
 *     floats) and bcast_bytes come back unchanged through the device staging buffer, allreduce_model_grads leaves
 *     a real backward's gradients as they were, backend() says nccl; before attach they refuse with a reason.
 *
 * usage: test_nccl_dp                     all of the above
 *        test_nccl_dp --rank-child DIR    one rank of part 3/4 (CPT_RANK, CPT_WORLD_SIZE, CPT_DP_TIMEOUT from env) */
#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/fs.h"
#include "model/model.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/nccl_dp.h"
#include "tests/check.h"
#include "tests/gpu/gpu_check.h"
#include "tests/gpu/tiny_qwen2.h"
#include "trainer/dp.h"

/* ---- a Qwen2.5-0.5B-shaped parameter list (cpt_model_param order, tied embeddings) ---- */

enum { V = 151936, C = 896, I = 4864, H = 14, KV = 2, D = 64, L = 24, PER_LAYER = 12 };

static size_t build_params(size_t *numel) {
    size_t n = 0;
    numel[n++] = (size_t)V * C;
    for (int l = 0; l < L; l++) {
        size_t layer[PER_LAYER] = {C, (size_t)H * D * C, (size_t)KV * D * C, (size_t)KV * D * C, (size_t)H * D,
                                   (size_t)KV * D, (size_t)KV * D, (size_t)C * H * D, C, (size_t)I * C,
                                   (size_t)I * C, (size_t)C * I};
        for (int j = 0; j < PER_LAYER; j++) numel[n++] = layer[j];
    }
    numel[n++] = C; /* model.norm.weight */
    return n;
}

static size_t total_of(const size_t *numel, size_t n) {
    size_t t = 0;
    for (size_t i = 0; i < n; i++) t += numel[i];
    return t;
}

/* Exactly representable, distinct per element and rank: the average over ranks is exact in fp32. */
static float value_at(size_t i, int rank) { return (float)(i % 4093) * 0.25f - 300.0f + (float)rank; }

static int nccl_loaded(void) {
    const char *env = getenv("CPT_NCCL_LIB");
    if (env && *env && dlopen(env, RTLD_NOW | RTLD_NOLOAD)) return 1;
    return dlopen("libnccl.so.2", RTLD_NOW | RTLD_NOLOAD) != NULL;
}

static float *host_values(size_t n, int rank) {
    float *h = hbuf(n);
    for (size_t i = 0; i < n; i++) h[i] = value_at(i, rank);
    return h;
}

/* ---- part 1: one rank, no NCCL ---- */

static void test_world1_no_nccl(cpt_cuda_ctx *ctx) {
    size_t numel[1 + L * PER_LAYER + 1];
    size_t n = build_params(numel), total;
    /* A small buffer (params scaled down) and small buckets: the bookkeeping does not depend on sizes. */
    for (size_t i = 0; i < n; i++) numel[i] = numel[i] % 997 + 1;
    total = total_of(numel, n);
    float *d = cpt_cuda_malloc(total * 4, "grads", &err);
    OK(d == NULL);
    float *h = host_values(total, 0), *back = malloc(total * 4);
    OK(cpt_cuda_memcpy_h2d(ctx, d, h, total * 4, &err));
    cpt_dp_opts o = {.bootstrap = "file", .bucket_bytes = 64 << 10};
    cpt_dp *dp = cpt_dp_new(&o, &err);
    OK(dp == NULL);
    CHECK_EQ_INT(cpt_dp_size(dp), 1);
    CHECK_EQ_INT(cpt_dp_uses_nccl(dp), 0);
    OK(cpt_dp_attach(dp, ctx, d, numel, NULL, n, &err));
    for (int step = 0; step < 2; step++) {
        for (size_t p = n; p-- > 0;) OK(cpt_dp_grads_ready(dp, p, p, &err));
        OK(cpt_dp_finish(dp, &err));
    }
    OK(cpt_cuda_memcpy_d2h(ctx, back, d, total * 4, &err));
    OK(cpt_cuda_sync(ctx, &err));
    CHECK(memcmp(back, h, total * 4) == 0);
    CHECK_MSG(!nccl_loaded(), "libnccl.so.2 was loaded by a one-rank group without force_nccl");
    CHECK(cpt_dp_nccl(dp) == NULL);
    CHECK_EQ_INT(cpt_dp_backend(dp), CPT_DP_BACKEND_NONE);
    float keep[3] = {1.5f, -2.0f, 7.0f};
    OK(cpt_dp_sum_floats(dp, keep, 3, &err));
    OK(cpt_dp_bcast_bytes(dp, keep, sizeof keep, &err));
    CHECK(keep[0] == 1.5f && keep[1] == -2.0f && keep[2] == 7.0f);
    printf("world 1, no NCCL: %zu params in %zu buckets, grads untouched, libnccl loaded: %s\n", n,
           cpt_dp_get_plan(dp)->n_buckets, nccl_loaded() ? "yes" : "no");
    cpt_dp_free(dp);
    cpt_cuda_free(d);
    free(h), free(back);
}

/* ---- part 2: one rank, real communicator, overlap ---- */

static void fill_random_bf16(cpt_cuda_ctx *ctx, void *d, size_t n, uint64_t seed) {
    float *h = malloc(n * sizeof *h);
    uint64_t x = seed;
    for (size_t i = 0; i < n; i++) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        h[i] = ((float)(x >> 40) / (float)(1 << 24) - 0.5f) * 0.1f;
    }
    OK(cpt_cuda_upload_bf16(ctx, d, h, n, &err));
    free(h);
}

typedef struct compute_sim {
    void *x, *w, *out;
    int64_t rows;
} compute_sim;

/* Stand-in for one layer's backward: `k` matmuls of [rows, C] x [I, C]^T on the compute stream. */
static void layer_work(cpt_cuda_ctx *ctx, const compute_sim *s, int k) {
    for (int i = 0; i < k; i++)
        cpt_cuda_matmul_fwd(ctx, cpt_cuda_tensor(s->out, CPT_DT_BF16, 2, s->rows, I),
                            cpt_cuda_tensor(s->x, CPT_DT_BF16, 2, s->rows, C),
                            cpt_cuda_tensor(s->w, CPT_DT_BF16, 2, I, C), cpt_tensor_none());
}

static void test_world1_nccl(cpt_cuda_ctx *ctx) {
    size_t numel[1 + L * PER_LAYER + 1];
    size_t n = build_params(numel), total = total_of(numel, n);
    float *d = cpt_cuda_malloc(total * 4, "grads", &err);
    OK(d == NULL);
    float *h = host_values(total, 0), *back = malloc(total * 4);
    OK(back == NULL);
    cpt_dp_opts o = {.bootstrap = "file", .force_nccl = 1, .timeout_s = 60};
    double t0 = cpt_now();
    cpt_dp *dp = cpt_dp_new(&o, &err);
    OK(dp == NULL);
    CHECK_EQ_INT(cpt_dp_uses_nccl(dp), 1);
    OK(cpt_dp_attach(dp, ctx, d, numel, NULL, n, &err));
    double t_init = cpt_now() - t0;
    const cpt_dp_plan *plan = cpt_dp_get_plan(dp);
    cpt_nccl *nc = cpt_dp_nccl(dp);
    CHECK(nc != NULL);
    CHECK(nccl_loaded());
    int version = cpt_nccl_version(&err);
    printf("world 1, forced NCCL %d: communicator in %.2f s, %zu params (%.2f GB of fp32 grads) in %zu buckets of "
           "~%u MiB\n", version, t_init, n, total * 4e-9, plan->n_buckets, CPT_DP_BUCKET_BYTES_DEFAULT >> 20);

    compute_sim s = {0};
    s.rows = 16384; /* 8 x 2048 tokens */
    s.x = cpt_cuda_malloc((size_t)s.rows * C * 2, "x", &err);
    s.w = cpt_cuda_malloc((size_t)I * C * 2, "w", &err);
    s.out = cpt_cuda_malloc((size_t)s.rows * I * 2, "out", &err);
    OK(!s.x || !s.w || !s.out);
    fill_random_bf16(ctx, s.x, (size_t)s.rows * C, 1);
    fill_random_bf16(ctx, s.w, (size_t)I * C, 2);

    /* Step = head, layers L-1..0, embedding, each followed by its grads_ready. Three steps: the first warms up. */
    int work_per_layer = 6;
    float comm_ms = 0, comm_in_window_ms = 0, compute_ms = 0;
    size_t overlapped_buckets = 0, ended_before = 0;
    for (int step = 0; step < 3; step++) {
        OK(cpt_cuda_memcpy_h2d(ctx, d, h, total * 4, &err)); /* known values, on the compute stream */
        OK(cpt_nccl_timing(nc, 1, 4 * (int)plan->n_buckets + 8, &err));
        cpt_nccl_stamp(nc); /* stamp 0: the step starts */
        layer_work(ctx, &s, 2); /* lm head + final norm */
        OK(cpt_dp_grads_ready(dp, n - 1, n - 1, &err));
        for (int l = L - 1; l >= 0; l--) {
            layer_work(ctx, &s, work_per_layer);
            OK(cpt_dp_grads_ready(dp, 1 + (size_t)l * PER_LAYER, (size_t)l * PER_LAYER + PER_LAYER, &err));
        }
        layer_work(ctx, &s, 2); /* embedding backward (the tied head's part is already in) */
        int st_end = cpt_nccl_stamp(nc);
        OK(cpt_dp_grads_ready(dp, 0, 0, &err));
        OK(cpt_dp_finish(dp, &err));
        OK(cpt_cuda_memcpy_d2h(ctx, back, d, total * 4, &err)); /* after finish: sees the averaged values */
        OK(cpt_cuda_sync(ctx, &err));
        OK(cpt_nccl_sync(nc, &err));
        CHECK_MSG(memcmp(back, h, total * 4) == 0, "step %d: the average over one rank changed the gradients", step);
        float t_end = cpt_nccl_stamp_ms(nc, st_end);
        float busy = 0, in_window = 0;
        size_t before = 0;
        int k = cpt_nccl_timed_ops(nc);
        CHECK_EQ_INT(k, (long long)plan->n_buckets);
        for (int i = 0; i < k; i++) {
            int sa, sb;
            cpt_nccl_op_stamps(nc, i, &sa, &sb);
            float a = cpt_nccl_stamp_ms(nc, sa), b = cpt_nccl_stamp_ms(nc, sb);
            CHECK(a >= 0 && b >= a);
            busy += b - a;
            if (a < t_end) in_window += (b < t_end ? b : t_end) - a;
            if (b <= t_end) before++;
            if (step == 2 && (i < 3 || i + 2 >= k))
                printf("  bucket %2d: params %3zu..%3zu, %7.1f MB, all-reduce %.3f .. %.3f ms (backward ends %.3f)\n",
                       i, plan->buckets[i].first_param, plan->buckets[i].last_param, plan->buckets[i].count * 4e-6,
                       a, b, t_end);
        }
        if (step > 0) {
            comm_ms += busy, comm_in_window_ms += in_window, compute_ms += t_end;
            overlapped_buckets += cpt_dp_buckets_overlapped(dp);
            ended_before += before;
        }
    }
    size_t nb = plan->n_buckets;
    printf("overlap (mean of 2 steps): compute %.2f ms; %zu of %zu buckets launched from grads_ready before finish; "
           "%zu of %zu all-reduces ended while the backward still ran; comm busy %.3f ms, %.0f%% inside the "
           "compute window\n", compute_ms / 2, overlapped_buckets / 2, nb, ended_before / 2, nb, comm_ms / 2,
           comm_ms > 0 ? 100.0 * comm_in_window_ms / comm_ms : 0.0);
    /* Every bucket is launched from grads_ready (the embedding's by the last call), and all but the embedding's
     * (ready only after the backward) and at most one more finish while layers still compute. */
    CHECK_EQ_INT(overlapped_buckets / 2, nb);
    CHECK_MSG(ended_before / 2 + 2 >= nb, "only %zu of %zu all-reduces ended before the backward did",
              ended_before / 2, nb);
    cpt_dp_free(dp);
    cpt_cuda_free(d), cpt_cuda_free(s.x), cpt_cuda_free(s.w), cpt_cuda_free(s.out);
    free(h), free(back);
}

/* ---- parts 3 and 4: ranks as child processes ---- */

static int rank_child(const char *dir) {
    const char *rs = getenv("CPT_RANK"), *ts = getenv("CPT_DP_TIMEOUT");
    int rank = rs ? atoi(rs) : 0;
    cpt_dp_opts o = {.bootstrap = "file", .boot_dir = dir, .timeout_s = ts ? atof(ts) : 60};
    cpt_dp *dp = cpt_dp_new(&o, &err);
    if (!dp) {
        printf("rank %d: %s\n", rank, err.msg);
        return 3;
    }
    const char *nd = getenv("CPT_TEST_NDEV");
    int dev = cpt_dp_device(dp, nd ? atoi(nd) : 1);
    cpt_cuda_ctx *ctx = cpt_cuda_ctx_new(dev, &err);
    if (!ctx) {
        printf("rank %d: %s\n", rank, err.msg);
        return 1;
    }
    size_t numel[4] = {3000000, 5000, 7000000, 12345}, total = total_of(numel, 4);
    float *d = cpt_cuda_malloc(total * 4, "grads", &err);
    float *h = host_values(total, rank), *back = malloc(total * 4);
    if (!d || cpt_cuda_memcpy_h2d(ctx, d, h, total * 4, &err)) {
        printf("rank %d: %s\n", rank, err.msg);
        return 1;
    }
    double t0 = cpt_now();
    if (cpt_dp_attach(dp, ctx, d, numel, NULL, 4, &err)) {
        printf("rank %d (device %d) after %.1f s: %s\n", rank, dev, cpt_now() - t0, err.msg);
        fflush(stdout);
        cpt_dp_free(dp);
        return 3;
    }
    for (size_t p = 4; p-- > 0;) OK(cpt_dp_grads_ready(dp, p, p, &err));
    OK(cpt_dp_finish(dp, &err));
    OK(cpt_cuda_memcpy_d2h(ctx, back, d, total * 4, &err));
    OK(cpt_cuda_sync(ctx, &err));
    int size = cpt_dp_size(dp);
    size_t bad = 0;
    for (size_t i = 0; i < total; i++) {
        float want = value_at(i, 0) + (float)(size - 1) / 2.0f;
        if (back[i] != want && bad++ < 3) printf("rank %d: element %zu = %g, want %g\n", rank, i, back[i], want);
    }
    printf("rank %d/%d on device %d: all-reduce of %zu floats in %zu buckets: %s\n", rank, size, dev, total,
           cpt_dp_get_plan(dp)->n_buckets, bad ? "WRONG" : "exact average");
    cpt_dp_free(dp);
    return bad ? 1 : 0;
}

/* Starts n ranks of a group of `size` (ranks 0..n-1), waits up to wait_s; returns the worst exit status. */
static int spawn_ranks(int n, int size, const char *dir, const char *timeout, double wait_s) {
    pid_t pids[16];
    for (int r = 0; r < n; r++) {
        pid_t pid = fork();
        if (pid == 0) {
            char rs[16], ws[16];
            snprintf(rs, sizeof rs, "%d", r);
            snprintf(ws, sizeof ws, "%d", size);
            setenv("CPT_RANK", rs, 1);
            setenv("CPT_WORLD_SIZE", ws, 1);
            setenv("CPT_DP_TIMEOUT", timeout, 1);
            unsetenv("SLURM_LOCALID");
            unsetenv("CPT_LOCAL_RANK");
            execl("/proc/self/exe", "test_nccl_dp", "--rank-child", dir, (char *)NULL);
            _exit(127);
        }
        pids[r] = pid;
    }
    int worst = 0;
    double deadline = cpt_now() + wait_s;
    for (int r = 0; r < n; r++) {
        int st = 0;
        for (;;) {
            pid_t got = waitpid(pids[r], &st, WNOHANG);
            if (got == pids[r]) break;
            if (cpt_now() > deadline) {
                printf("rank %d: still running after %.0f s, killed\n", r, wait_s);
                kill(pids[r], SIGKILL);
                waitpid(pids[r], &st, 0);
                st = 124 << 8;
                break;
            }
            usleep(20000);
        }
        int code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        if (code > worst) worst = code;
    }
    return worst;
}

static int count_devices(void) {
    /* cpt_cuda_ctx_new fails at once for an index past the device count. */
    int n = 0;
    for (; n < 16; n++) {
        cpt_err e2;
        cpt_cuda_ctx *p = cpt_cuda_ctx_new(n, &e2);
        if (!p) break;
        cpt_cuda_ctx_free(p);
    }
    return n;
}

/* ---- part 5: the host collectives and a model's gradients over NCCL, one rank ---- */

static void test_host_collectives_nccl(void) {
    cpt_dp_opts o = {.bootstrap = "file", .force_nccl = 1, .timeout_s = 60};
    cpt_dp *dp = cpt_dp_new(&o, &err);
    OK(dp == NULL);
    CHECK_EQ_INT(cpt_dp_backend(dp), CPT_DP_BACKEND_NCCL);
    float early = 1.0f;
    cpt_err e;
    CHECK(cpt_dp_sum_floats(dp, &early, 1, &e) != 0 && strstr(e.msg, "attach"));
    cpt_model_config c;
    tiny_qwen2_config(&c);
    cpt_model *m = cpt_model_new_random(&c, 5, &err);
    OK(m == NULL);
    OK(cpt_model_use_cuda(m, 0, &err));
    OK(cpt_dp_attach_model(dp, m, &err));

    float one = 3.5f;
    OK(cpt_dp_sum_floats(dp, &one, 1, &err));
    CHECK(one == 3.5f);
    size_t big = 1000000;
    float *v = malloc(big * sizeof *v);
    OK(v == NULL);
    for (size_t i = 0; i < big; i++) v[i] = value_at(i, 0);
    OK(cpt_dp_sum_floats(dp, v, big, &err));
    size_t wrong = 0;
    for (size_t i = 0; i < big; i++) wrong += v[i] != value_at(i, 0);
    CHECK_EQ_INT(wrong, 0);
    unsigned char bytes[1003];
    for (size_t i = 0; i < sizeof bytes; i++) bytes[i] = (unsigned char)(i * 7 + 3);
    OK(cpt_dp_bcast_bytes(dp, bytes, sizeof bytes, &err));
    wrong = 0;
    for (size_t i = 0; i < sizeof bytes; i++) wrong += bytes[i] != (unsigned char)(i * 7 + 3);
    CHECK_EQ_INT(wrong, 0);

    int32_t tok[10], tgt[10], start[2] = {0, 10};
    float d[10];
    for (int i = 0; i < 10; i++) tok[i] = (i * 5 + 3) % 64, d[i] = i < 9 ? -1.0f / 9 : 0.0f;
    for (int i = 0; i < 10; i++) tgt[i] = i < 9 ? tok[i + 1] : -1;
    cpt_batch b = {.n_tokens = 10, .n_seqs = 1, .tokens = tok, .seq_start = start, .targets = tgt};
    float lp[10];
    cpt_forward_out out = {.logprobs = lp};
    cpt_model_zero_grad(m);
    OK(cpt_model_forward(m, &b, &out, 1, &err));
    OK(cpt_model_backward(m, &b, d, NULL, NULL, &err));
    OK(cpt_model_sync_to_host(m, &err));
    size_t n = cpt_model_numel(m);
    float *before = malloc(n * sizeof *before);
    OK(before == NULL);
    memcpy(before, cpt_model_grads(m), n * sizeof *before);
    OK(cpt_dp_allreduce_model_grads(dp, m, &err));
    OK(cpt_model_sync_to_host(m, &err));
    wrong = 0;
    double norm = 0;
    for (size_t i = 0; i < n; i++) wrong += cpt_model_grads(m)[i] != before[i], norm += fabs(before[i]);
    CHECK_EQ_INT(wrong, 0);
    CHECK_MSG(norm > 0, "the backward produced no gradient: the check is vacuous");
    printf("host collectives over nccl, one rank: sum 1 and 1e6 floats, bcast 1003 bytes, %zu model gradients: %s\n",
           n, wrong ? "WRONG" : "unchanged");
    free(v), free(before);
    cpt_model_free(m);
    cpt_dp_free(dp);
}

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "--rank-child")) return rank_child(argv[2]);
    unsetenv("CPT_RANK");
    unsetenv("CPT_WORLD_SIZE");
    unsetenv("PMIX_RANK");
    unsetenv("PMIX_NAMESPACE");
    fflush(stdout);
    /* Parts 3 and 4 first: children start from a parent that has not touched CUDA or NCCL yet. */
    char dir3[] = "/tmp/cpt-dp-XXXXXX", dir4[] = "/tmp/cpt-dp-XXXXXX";
    OK(mkdtemp(dir3) == NULL);
    OK(mkdtemp(dir4) == NULL);
    double t0 = cpt_now();
    int rc3 = spawn_ranks(1, 2, dir3, "5", 40);
    double t3 = cpt_now() - t0;
    CHECK_MSG(rc3 == 3, "rank 0 of 2 alone exited %d, want 3 (init timed out with an error)", rc3);
    CHECK_MSG(t3 < 30, "the 5 s init timeout took %.1f s", t3);
    printf("init timeout: rank 0 of 2 alone gave up after %.1f s (exit %d)\n", t3, rc3);

    int ndev = count_devices();
    char nds[16];
    snprintf(nds, sizeof nds, "%d", ndev);
    setenv("CPT_TEST_NDEV", nds, 1);
    cpt_cuda_ctx *ctx = ctx_or_exit("test_nccl_dp"); /* last, so device 0 is the current one */
    int nranks = ndev >= 2 ? ndev : 2;
    fflush(stdout);
    int rc4 = spawn_ranks(nranks, nranks, dir4, "60", 120);
    if (ndev >= 2) {
        CHECK_MSG(rc4 == 0, "%d ranks on %d GPUs exited %d", nranks, ndev, rc4);
        printf("%d ranks on %d GPUs: %s\n", nranks, ndev, rc4 == 0 ? "exact average" : "FAILED");
    } else {
        printf("2 ranks on 1 GPU: %s (exit %d; the error above is NCCL's answer)\n",
               rc4 == 0 ? "worked" : "refused", rc4);
    }

    test_world1_no_nccl(ctx);
    test_world1_nccl(ctx);
    test_host_collectives_nccl();
    cpt_cuda_ctx_free(ctx);
    printf("%d checks, %d failed\n", check_count, check_failures);
    return check_failures ? 1 : 0;
}
