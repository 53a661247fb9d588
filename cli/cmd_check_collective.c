/* cpt check-collective: proves the data-parallel collectives work where a job runs, through the real library
 * (`mpirun -n N cpt check-collective` or `srun --mpi=pmix -n N cpt check-collective` for CPU ranks over Open MPI;
 * --device cuda for GPU ranks over NCCL). Every rank checks, against values it computes by hand:
 *   sum_floats of 1 and of 1e6 floats (rank r adds (r + 1) x a pattern: the sum is exact in fp32),
 *   bcast_bytes of a header then a payload from rank 0,
 *   allreduce_model_grads and finish on a tiny random model: each rank's own backward (its own tokens), averaged,
 *   against the average of every rank's backward that each rank also runs locally,
 * prints one line, and exits 1 when anything is off. --fail-rank K: rank K fails before the collectives (the others
 * wait in the first one) and ends the group with cpt_dp_abort. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "model/model.h"
#include "trainer/dp.h"
#ifdef CPT_HAVE_CUDA
#include "kernels/cuda/cuda_ops.h"
#endif

#define SEQ 12

static cpt_model_config tiny_config(void) {
    cpt_model_config c;
    memset(&c, 0, sizeof c);
    c.arch = CPT_ARCH_QWEN2;
    c.vocab_size = 64, c.hidden_size = 32, c.intermediate_size = 64, c.num_layers = 2;
    c.num_heads = 4, c.num_kv_heads = 2, c.head_dim = 8;
    c.rms_norm_eps = 1e-6f, c.rope_theta = 10000.0f;
    c.tie_word_embeddings = 1, c.qkv_bias = 1;
    c.max_position_embeddings = 64, c.bos_token_id = -1, c.eos_token_id = -1;
    return c;
}

/* Rank k's micro-batch: one sequence of SEQ tokens, mean NLL; grads accumulate into the model's buffer. */
static int backward_of(cpt_model *m, int k, cpt_err *err) {
    int32_t tok[SEQ], tgt[SEQ], start[2] = {0, SEQ};
    float d[SEQ];
    for (int i = 0; i < SEQ; i++) tok[i] = (int32_t)((k * 17 + i * 5 + 3) % 64);
    for (int i = 0; i < SEQ; i++) tgt[i] = i + 1 < SEQ ? tok[i + 1] : -1;
    for (int i = 0; i < SEQ; i++) d[i] = i + 1 < SEQ ? -1.0f / (SEQ - 1) : 0.0f;
    cpt_batch b = {.n_tokens = SEQ, .n_seqs = 1, .tokens = tok, .seq_start = start, .targets = tgt};
    cpt_forward_out out = {0};
    float lp[SEQ];
    out.logprobs = lp;
    if (cpt_model_forward(m, &b, &out, 1, err)) return -1;
    return cpt_model_backward(m, &b, d, NULL, NULL, err);
}

/* max |a - b| / max |b| */
static double rel_diff(const float *a, const double *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        num = fmax(num, fabs((double)a[i] - b[i]));
        den = fmax(den, fabs(b[i]));
    }
    return den > 0 ? num / den : num;
}

static int grads_to_host(cpt_model *m, cpt_err *err) { return cpt_model_on_cuda(m) ? cpt_model_sync_to_host(m, err) : 0; }

int cmd_check_collective(int argc, char **argv) {
    const char *backend = "auto", *device = "cpu";
    int fail_rank = -1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--backend") && i + 1 < argc) backend = argv[++i];
        else if (!strcmp(argv[i], "--device") && i + 1 < argc) device = argv[++i];
        else if (!strcmp(argv[i], "--fail-rank") && i + 1 < argc) fail_rank = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: cpt check-collective [--backend auto|mpi|nccl] [--device cpu|cuda] "
                            "[--fail-rank K]\n");
            return 2;
        }
    }
    cpt_err err;
    cpt_err_clear(&err);
    cpt_dp_opts o = {.backend = backend};
    cpt_dp *dp = cpt_dp_new(&o, &err);
    if (!dp) cpt_die(&err);
    int r = cpt_dp_rank(dp), w = cpt_dp_size(dp);
    cpt_model_config mc = tiny_config();
    cpt_model *m = cpt_model_new_random(&mc, 11, &err);
    if (!m) cpt_die(&err);
    if (!strcmp(device, "cuda")) {
        int dev = 0;
#ifdef CPT_HAVE_CUDA
        dev = cpt_dp_device(dp, cpt_cuda_device_count());
#endif
        if (cpt_model_use_cuda(m, dev, &err)) cpt_die(&err);
    }
    if (cpt_dp_attach_model(dp, m, &err)) cpt_die(&err);
    if (r == fail_rank) { /* a rank failing while the others enter a collective: it must end the job, not hang it */
        cpt_errf(&err, "rank %d: failing on purpose (--fail-rank)", r);
        cpt_dp_abort(dp, 1, &err);
        cpt_model_free(m);
        cpt_dp_free(dp);
        fprintf(stderr, "cpt check-collective: %s\n", err.msg);
        return 1;
    }
    int bad = 0;
    double tri = (double)w * (w + 1) / 2; /* the sum of (r + 1) over the ranks */

    /* sums: one float, then a million */
    float one = (float)(r + 1);
    if (cpt_dp_sum_floats(dp, &one, 1, &err)) cpt_die(&err);
    bad |= one != (float)tri;
    size_t big = 1000000;
    float *v = malloc(big * sizeof *v);
    if (!v) return 1;
    for (size_t i = 0; i < big; i++) v[i] = (float)(r + 1) * (float)(i % 1000) * 0.5f;
    if (cpt_dp_sum_floats(dp, v, big, &err)) cpt_die(&err);
    double sum_err = 0;
    for (size_t i = 0; i < big; i++) sum_err = fmax(sum_err, fabs(v[i] - tri * (double)(i % 1000) * 0.5));
    bad |= sum_err != 0;
    free(v);

    /* broadcast: a fixed-size header with the payload's length, then the payload */
    uint64_t len = r == 0 ? 1000 + 3 : 0;
    if (cpt_dp_bcast_bytes(dp, &len, sizeof len, &err)) cpt_die(&err);
    unsigned char *pay = calloc(len ? len : 1, 1);
    if (!pay) return 1;
    if (r == 0)
        for (uint64_t i = 0; i < len; i++) pay[i] = (unsigned char)(i * 7 + 3);
    if (cpt_dp_bcast_bytes(dp, pay, len, &err)) cpt_die(&err);
    int bcast_ok = len == 1003;
    for (uint64_t i = 0; bcast_ok && i < len; i++) bcast_ok = pay[i] == (unsigned char)(i * 7 + 3);
    bad |= !bcast_ok;
    free(pay);

    /* ZeRO's pair on host buffers (CPU ranks, one rank): an odd length padded to the world size, reduce-scatter
     * (average) of (r + 1) * i, then all-gather of each rank's slice back: every float is tri / w * i (to float rounding) */
    const char *zero_ok = "n/a";
    if (cpt_dp_backend(dp) != CPT_DP_BACKEND_NCCL) {
        size_t zn = 1001, shard = cpt_dp_shard_floats(dp, zn), pad = shard * (size_t)w;
        float *full = calloc(pad, sizeof *full), *mine = calloc(shard, sizeof *mine);
        if (!full || !mine) return 1;
        for (size_t i = 0; i < zn; i++) full[i] = (float)(r + 1) * (float)i;
        if (cpt_dp_reduce_scatter(dp, full, mine, shard, 1, &err)) cpt_die(&err);
        int ok = 1;
        for (size_t i = 0; i < shard; i++) {
            size_t g = (size_t)r * shard + i;
            ok &= fabs(mine[i] - (g < zn ? tri / w * (double)g : 0.0)) <= 1e-6 * (double)g;
        }
        memset(full, 0, pad * sizeof *full);
        if (cpt_dp_all_gather(dp, mine, full, shard, &err)) cpt_die(&err);
        for (size_t i = 0; i < zn; i++) ok &= fabs(full[i] - tri / w * (double)i) <= 1e-6 * (double)i;
        zero_ok = ok ? "ok" : "WRONG";
        bad |= !ok;
        free(full);
        free(mine);
    }

    /* gradients: the average of every rank's backward, by hand, in double */
    size_t n = cpt_model_numel(m);
    double *want = calloc(n, sizeof *want);
    float *own = malloc(n * sizeof *own);
    if (!want || !own) return 1;
    for (int k = 0; k < w; k++) {
        cpt_model_zero_grad(m);
        if (backward_of(m, k, &err) || grads_to_host(m, &err)) cpt_die(&err);
        const float *g = cpt_model_grads(m);
        for (size_t i = 0; i < n; i++) want[i] += (double)g[i] / w;
    }
    cpt_model_zero_grad(m);
    if (backward_of(m, r, &err) || grads_to_host(m, &err)) cpt_die(&err);
    memcpy(own, cpt_model_grads(m), n * sizeof *own);
    double before = rel_diff(own, want, n); /* > 0 with two ranks: the check below is not vacuous */
    if (cpt_dp_allreduce_model_grads(dp, m, &err) || grads_to_host(m, &err)) cpt_die(&err);
    double after = rel_diff(cpt_model_grads(m), want, n);
    bad |= !(after < 1e-6);
    /* the same through the step's path (finish after the backward) */
    cpt_model_zero_grad(m);
    if (backward_of(m, r, &err) || cpt_dp_finish(dp, &err) || grads_to_host(m, &err)) cpt_die(&err);
    double fin = rel_diff(cpt_model_grads(m), want, n);
    bad |= !(fin < 1e-6);

    const char *names[] = {"none", "mpi", "nccl"};
    printf("rank %d/%d backend %s sum1 %g (want %g) sum1e6 maxerr %g bcast %s grads before %.3g after %.3g "
           "finish %.3g params %zu zero %s: %s\n",
           r, w, names[cpt_dp_backend(dp)], one, tri, sum_err, bcast_ok ? "ok" : "WRONG", before, after, fin, n,
           zero_ok, bad ? "FAIL" : "ok");
    fflush(stdout);
    free(want);
    free(own);
    cpt_model_free(m);
    cpt_dp_free(dp);
    return bad ? 1 : 0;
}
