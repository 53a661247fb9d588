/* Log-softmax statistics from bf16 logits without an fp32 copy: one block per row streams the vocabulary once,
 * each thread keeping an online (max m, s = sum e^(z-m), w = sum e^(z-m) (z-m)), merged across the block in a
 * fixed tree order. Then lse = m + log s and entropy = log s - w / s. */
#include <math.h>

#include "kernels/cuda/cuda_internal.h"

#define STATS_THREADS 512

struct online_t {
    float m, s, w;
};

/* Rescale (m, s, w) to a larger max M: e^(z-M) = e^(m-M) e^(z-m), (z-M) = (z-m) + (m-M). */
__device__ inline online_t online_merge(online_t a, online_t b) {
    if (a.m == -INFINITY) return b;
    if (b.m == -INFINITY) return a;
    float M = fmaxf(a.m, b.m);
    float da = a.m - M, db = b.m - M, ea = expf(da), eb = expf(db);
    online_t r;
    r.m = M;
    r.s = a.s * ea + b.s * eb;
    r.w = ea * (a.w + a.s * da) + eb * (b.w + b.s * db);
    return r;
}

/* Adds x[0..W) to the running (m, s, w): one rescale per W elements, to their max. Elements equal to -inf (masked)
 * add nothing, also while everything seen so far is -inf. */
template <int W>
__device__ inline void online_add(online_t &st, const float *x) {
    float mx = x[0];
#pragma unroll
    for (int k = 1; k < W; k++) mx = fmaxf(mx, x[k]);
    if (mx > st.m) {
        if (st.m != -INFINITY) {
            float d = st.m - mx, e = expf(d);
            st.w = e * (st.w + st.s * d);
            st.s *= e;
        }
        st.m = mx;
    }
    if (st.m == -INFINITY) return;
#pragma unroll
    for (int k = 0; k < W; k++) {
        float d = x[k] - st.m, e = expf(d);
        st.s += e;
        st.w += e > 0.0f ? e * d : 0.0f;
    }
}

/* One block per row, W logits per load (8: vec8_ok rows; 1: any V). */
template <int W>
__global__ void token_stats_fwd_kernel(float *logprob, float *entropy, float *lse, const __nv_bfloat16 *logits,
                                       const int32_t *targets, int64_t V) {
    __shared__ online_t red[32];
    int64_t r = blockIdx.x;
    const __nv_bfloat16 *z = logits + r * V;
    online_t st = {-INFINITY, 0.0f, 0.0f};
    for (int64_t v = (int64_t)threadIdx.x * W; v < V; v += (int64_t)blockDim.x * W) {
        float x[W];
        load_bf16<W>(z + v, x);
        online_add<W>(st, x);
    }
    for (int o = 16; o > 0; o >>= 1) {
        online_t other = {__shfl_xor_sync(0xffffffffu, st.m, o), __shfl_xor_sync(0xffffffffu, st.s, o),
                          __shfl_xor_sync(0xffffffffu, st.w, o)};
        st = online_merge(st, other);
    }
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    if (lane == 0) red[wid] = st;
    __syncthreads();
    if (wid != 0) return;
    st = lane < nw ? red[lane] : online_t{-INFINITY, 0.0f, 0.0f};
    for (int o = 16; o > 0; o >>= 1) {
        online_t other = {__shfl_xor_sync(0xffffffffu, st.m, o), __shfl_xor_sync(0xffffffffu, st.s, o),
                          __shfl_xor_sync(0xffffffffu, st.w, o)};
        st = online_merge(st, other);
    }
    if (lane != 0) return;
    float ls = logf(st.s), l = st.m + ls;
    lse[r] = l;
    if (entropy) entropy[r] = ls - st.w / st.s;
    if (logprob) {
        int32_t t = targets[r];
        logprob[r] = t >= 0 ? __bfloat162float(z[t]) - l : 0.0f;
    }
}

void cpt_cuda_token_stats_fwd(cpt_cuda_ctx *ctx, cpt_tensor logprob, cpt_tensor entropy, cpt_tensor lse,
                              cpt_tensor logits, cpt_tensor targets) {
    const char *op = "token_stats_fwd";
    cpt_cuda_check(op, "logits", logits, CPT_DT_BF16, 2);
    cpt_cuda_check(op, "lse", lse, CPT_DT_F32, 1);
    int64_t n = logits.shape[0], V = logits.shape[1];
    CKCHECK(lse.shape[0] == n, op, "lse has %lld rows, want %lld", (long long)lse.shape[0], (long long)n);
    if (cpt_tensor_present(logprob)) {
        cpt_cuda_check(op, "logprob", logprob, CPT_DT_F32, 1);
        CKCHECK(logprob.shape[0] == n, op, "logprob has %lld rows, want %lld", (long long)logprob.shape[0],
                (long long)n);
        CKCHECK(cpt_tensor_present(targets), op, "logprob needs targets");
    }
    if (cpt_tensor_present(entropy)) {
        cpt_cuda_check(op, "entropy", entropy, CPT_DT_F32, 1);
        CKCHECK(entropy.shape[0] == n, op, "entropy has %lld rows, want %lld", (long long)entropy.shape[0],
                (long long)n);
    }
    if (cpt_tensor_present(targets)) {
        cpt_cuda_check(op, "targets", targets, CPT_DT_I32, 1);
        CKCHECK(targets.shape[0] == n, op, "targets has %lld rows, want %lld", (long long)targets.shape[0],
                (long long)n);
        /* targets live on the device, so their range (< V) is the caller's contract, checked where they are
         * made from outside input */
    }
    CKCHECK(V > 0, op, "empty vocabulary");
    if (n == 0) return;
    float *lp = cpt_tensor_present(logprob) ? FP(logprob) : NULL, *ent = cpt_tensor_present(entropy) ? FP(entropy) : NULL;
    const int32_t *tg = cpt_tensor_present(targets) ? IP(targets) : NULL;
    if (vec8_ok(V, {logits.data}))
        token_stats_fwd_kernel<8><<<(unsigned)n, STATS_THREADS, 0, ctx->stream>>>(lp, ent, FP(lse), BF(logits), tg, V);
    else
        token_stats_fwd_kernel<1><<<(unsigned)n, STATS_THREADS, 0, ctx->stream>>>(lp, ent, FP(lse), BF(logits), tg, V);
    LAUNCH_OK("token_stats_fwd_kernel");
}

/* grid.y = row, grid.x * blockDim.x * W covers the vocabulary; W = 8 needs V % 8 == 0 and aligned rows */
template <int W>
__global__ void token_stats_bwd_kernel(__nv_bfloat16 *logits, const float *lse, const float *entropy,
                                       const int32_t *targets, const float *d_logprob, const float *d_entropy,
                                       int64_t V) {
    int64_t r = blockIdx.y, v0 = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * W;
    if (v0 >= V) return;
    float l = lse[r];
    int32_t t = targets ? targets[r] : -1;
    float dl = (d_logprob && t >= 0) ? d_logprob[r] : 0.0f;
    float de = d_entropy ? d_entropy[r] : 0.0f;
    float H = de != 0.0f ? entropy[r] : 0.0f;
    __nv_bfloat16 *z = logits + r * V + v0;
    float x[W];
    load_bf16<W>(z, x);
#pragma unroll
    for (int k = 0; k < W; k++) {
        float lp = x[k] - l, p = expf(lp);
        float g = -dl * p - de * p * (lp + H);
        if (v0 + k == t) g += dl;
        x[k] = g;
    }
    store_bf16<W>(z, x);
}

void cpt_cuda_token_stats_bwd(cpt_cuda_ctx *ctx, cpt_tensor logits, cpt_tensor lse, cpt_tensor entropy,
                              cpt_tensor targets, cpt_tensor d_logprob, cpt_tensor d_entropy) {
    const char *op = "token_stats_bwd";
    cpt_cuda_check(op, "logits", logits, CPT_DT_BF16, 2);
    cpt_cuda_check(op, "lse", lse, CPT_DT_F32, 1);
    int64_t n = logits.shape[0], V = logits.shape[1];
    CKCHECK(lse.shape[0] == n, op, "lse has %lld rows, want %lld", (long long)lse.shape[0], (long long)n);
    const cpt_tensor rows[4] = {targets, d_logprob, d_entropy, entropy};
    const char *names[4] = {"targets", "d_logprob", "d_entropy", "entropy"};
    for (int i = 0; i < 4; i++) {
        if (!cpt_tensor_present(rows[i])) continue;
        cpt_cuda_check(op, names[i], rows[i], i == 0 ? CPT_DT_I32 : CPT_DT_F32, 1);
        CKCHECK(rows[i].shape[0] == n, op, "%s has %lld rows, want %lld", names[i], (long long)rows[i].shape[0],
                (long long)n);
    }
    CKCHECK(!cpt_tensor_present(d_logprob) || cpt_tensor_present(targets), op, "d_logprob needs targets");
    CKCHECK(!cpt_tensor_present(d_entropy) || cpt_tensor_present(entropy), op, "d_entropy needs the entropy");
    CKCHECK(n <= 65535, op, "%lld rows in one chunk; at most 65535", (long long)n);
    if (n == 0 || V == 0) return;
    const float *ent = cpt_tensor_present(entropy) ? FP(entropy) : NULL;
    const int32_t *tg = cpt_tensor_present(targets) ? IP(targets) : NULL;
    const float *dlp = cpt_tensor_present(d_logprob) ? FP(d_logprob) : NULL;
    const float *dent = cpt_tensor_present(d_entropy) ? FP(d_entropy) : NULL;
    if (vec8_ok(V, {logits.data})) {
        dim3 grid(cdiv(V / 8, 256), (unsigned)n);
        token_stats_bwd_kernel<8><<<grid, 256, 0, ctx->stream>>>(BF(logits), FP(lse), ent, tg, dlp, dent, V);
    } else {
        dim3 grid(cdiv(V, 256), (unsigned)n);
        token_stats_bwd_kernel<1><<<grid, 256, 0, ctx->stream>>>(BF(logits), FP(lse), ent, tg, dlp, dent, V);
    }
    LAUNCH_OK("token_stats_bwd_kernel");
}
