/* Next-token sampling on the GPU, the distribution of rollout/sampling.h: p = softmax(logits / T) restricted to the
 * kept set (top-k, then top-p within it, then min-p), renormalised; T = 0 is greedy (first argmax, logprob at T 1).
 *
 * One block per sample row streams its fp32 logits row a few times:
 *  - max and first argmax; greedy rows then only need the log-sum-exp.
 *  - Truncation finds the kept set as a prefix of the order (p descending, token id ascending), the CPU's sort
 *    order: a radix select over the 32-bit pattern of p (monotone for p >= 0), 8 bits per pass, with integer
 *    histograms (counts for top-k, fixed-point masses in units of 2^-40 for top-p) so shared-memory atomics stay
 *    exact and the result deterministic; ties at the threshold value are cut by token id with a block scan.
 *  - The token is drawn by the Gumbel-max trick over the kept set: argmax (log p_i + g_i), g_i = -log(-log u_i),
 *    u_i from Philox4x32-10 keyed by the request seed with counter (token / 4, step, sample): one pass, no prefix
 *    sum, and a draw that depends only on (seed, sample, step), never on the batch.
 * The behaviour logprob is log p_tok - log(sum of kept p), in fp32 with fixed-order block reductions. */
#include <math.h>

#include "kernels/cuda/cuda_internal.h"

#define SAMPLE_THREADS 512
#define NW (SAMPLE_THREADS / 32)

/* ---- Philox4x32-10 ---------------------------------------------------------------------------------------- */

static __host__ __device__ inline uint4 philox4x32(uint4 c, uint2 k) {
    for (int r = 0; r < 10; r++) {
        uint32_t lo0 = 0xD2511F53u * c.x, hi0 = (uint32_t)(((uint64_t)0xD2511F53u * c.x) >> 32);
        uint32_t lo1 = 0xCD9E8D57u * c.z, hi1 = (uint32_t)(((uint64_t)0xCD9E8D57u * c.z) >> 32);
        c = make_uint4(hi1 ^ c.y ^ k.x, lo1, hi0 ^ c.w ^ k.y, lo0);
        k.x += 0x9E3779B9u;
        k.y += 0xBB67AE85u;
    }
    return c;
}

/* Uniform in (0, 1) from 24 bits. */
/* (0, 1): the top 24 bits, centred. The largest rounds to 1.0 in float (16777215.5 is not representable), which
 * would make -log(-log u) infinite and force that token whatever its probability: it takes the float below 1. */
static __device__ inline float u01(uint32_t x) {
    float u = ((float)(x >> 8) + 0.5f) * (1.0f / 16777216.0f);
    return u < 1.0f ? u : 0x1.fffffep-1f;
}

static __device__ inline uint4 draw4(const cpt_cuda_sample_row &r, int64_t quad) {
    return philox4x32(make_uint4((uint32_t)quad, r.step, r.sample, (uint32_t)(quad >> 32)),
                      make_uint2((uint32_t)r.seed, (uint32_t)(r.seed >> 32)));
}

/* ---- block reductions (fixed order: per-thread sums, then a shuffle tree, then warps in order) ------------- */

struct maxarg {
    float v;
    int i;
};

static __device__ inline maxarg better(maxarg a, maxarg b) { /* larger value, then lower index */
    if (b.v > a.v || (b.v == a.v && b.i < a.i)) return b;
    return a;
}

static __device__ maxarg block_maxarg(maxarg x, maxarg *sh) {
    for (int o = 16; o > 0; o >>= 1) {
        maxarg y = {__shfl_xor_sync(0xffffffffu, x.v, o), __shfl_xor_sync(0xffffffffu, x.i, o)};
        x = better(x, y);
    }
    __syncthreads();
    if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = x;
    __syncthreads();
    maxarg r = sh[0];
    for (int w = 1; w < (int)(blockDim.x >> 5); w++) r = better(r, sh[w]);
    return r;
}

static __device__ float block_sumf(float x, float *sh) {
    for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    __syncthreads();
    if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = x;
    __syncthreads();
    float r = 0.0f;
    for (int w = 0; w < (int)(blockDim.x >> 5); w++) r += sh[w];
    return r;
}

static __device__ unsigned long long block_sumu(unsigned long long x, unsigned long long *sh) {
    for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    __syncthreads();
    if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = x;
    __syncthreads();
    unsigned long long r = 0;
    for (int w = 0; w < (int)(blockDim.x >> 5); w++) r += sh[w];
    return r;
}

/* ---- the kept set ------------------------------------------------------------------------------------------ */

/* p of one logit (unnormalised: the max has p = 1); the one expression used by every pass, so passes agree. */
static __device__ __forceinline__ float prob(float l, float mx, float inv_t) { return expf((l - mx) * inv_t); }
static __device__ __forceinline__ unsigned long long fixq(float p) { return __float2ull_rz(p * 1099511627776.0f); }

/* Token i (with p's bit pattern k) is kept iff k > thr or (k == thr and i <= cut). */
struct keep_t {
    uint32_t thr;
    int cut;
};
static __device__ __forceinline__ bool kept(keep_t s, uint32_t k, int i) { return k > s.thr || (k == s.thr && i <= s.cut); }

struct sample_shared {
    unsigned long long hist[256];
    unsigned long long u[NW];
    float f[NW];
    maxarg ma[NW];
    int counts[SAMPLE_THREADS];
    uint32_t prefix;
    unsigned long long remaining, tie_q;
    int cut;
};

/* The prefix of the kept set `in` (in its order) holding the first `target` tokens (mass == 0) or the first tokens
 * whose fixed-point mass reaches target (mass == 1). */
static __device__ keep_t select_prefix(const float *l, int V, float mx, float inv_t, keep_t in, int mass,
                                unsigned long long target, sample_shared *sh) {
    int tid = threadIdx.x;
    if (tid == 0) {
        sh->prefix = 0;
        sh->remaining = target;
    }
    uint32_t mask = 0;
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (int b = tid; b < 256; b += blockDim.x) sh->hist[b] = 0;
        __syncthreads();
        uint32_t prefix = sh->prefix;
        for (int i = tid; i < V; i += blockDim.x) {
            float p = prob(l[i], mx, inv_t);
            uint32_t k = __float_as_uint(p);
            if ((k & mask) != prefix || !kept(in, k, i)) continue;
            atomicAdd(&sh->hist[(k >> shift) & 255u], mass ? fixq(p) : 1ull);
        }
        __syncthreads();
        if (tid == 0) {
            unsigned long long acc = 0, rem = sh->remaining;
            int chosen = 0;
            for (int b = 255; b >= 0; b--) {
                if (acc + sh->hist[b] >= rem) {
                    chosen = b;
                    break;
                }
                acc += sh->hist[b];
            }
            sh->prefix = prefix | ((uint32_t)chosen << shift);
            sh->remaining = rem - acc;
            sh->tie_q = sh->hist[chosen];
        }
        mask |= 255u << shift;
        __syncthreads();
    }
    /* tokens at exactly the threshold value: how many of them (lowest ids first) complete the target */
    uint32_t thr = sh->prefix;
    unsigned long long rem = sh->remaining, at = sh->tie_q;
    long long need, ties;
    if (mass) {
        unsigned long long q = fixq(__uint_as_float(thr));
        ties = q ? (long long)(at / q) : 1;
        need = q ? (long long)((rem + q - 1) / q) : 1;
    } else {
        ties = (long long)at;
        need = (long long)rem;
    }
    if (need < 1) need = 1;
    keep_t out = {thr, in.cut};
    if (need >= ties) return out; /* all ties stay (as many as `in` keeps) */
    /* the need-th kept tie in id order: per-thread counts over contiguous ranges, scanned in thread order */
    int chunk = (V + blockDim.x - 1) / blockDim.x, lo = tid * chunk, hi = min(V, lo + chunk), c = 0;
    for (int i = lo; i < hi; i++) {
        uint32_t k = __float_as_uint(prob(l[i], mx, inv_t));
        c += k == thr && kept(in, k, i);
    }
    sh->counts[tid] = c;
    if (tid == 0) sh->cut = in.cut; /* unchanged if the scan found nothing (it always should) */
    __syncthreads();
    if (tid == 0) {
        long long acc = 0;
        int t = 0;
        for (; t < (int)blockDim.x && acc + sh->counts[t] < need; t++) acc += sh->counts[t];
        sh->counts[0] = t;
        sh->remaining = (unsigned long long)(need - acc);
    }
    __syncthreads();
    if (tid == (int)sh->counts[0]) {
        long long left = (long long)sh->remaining;
        for (int i = lo; i < hi; i++) {
            uint32_t k = __float_as_uint(prob(l[i], mx, inv_t));
            if (k == thr && kept(in, k, i) && --left == 0) {
                sh->cut = i;
                break;
            }
        }
    }
    __syncthreads();
    out.cut = sh->cut;
    __syncthreads();
    return out;
}

/* ---- the first pass split over blocks ------------------------------------------------------------------------
 *
 * One block streams ~V / 512 logits a thread per pass: at a few rows the sampler alone took longer than the whole
 * model forward (175 us at V = 151,936 on the H200). Block (row, c) takes chunk c of SAMPLE_CHUNKS: its max and
 * first argmax, and the sum of e^(l - its max); the sampler merges the chunks in chunk order (the same max and
 * argmax as one pass; the greedy log-sum-exp in a different summation order). */
#define SAMPLE_CHUNKS 32
#define PART_THREADS 256

static __global__ void __launch_bounds__(PART_THREADS) sample_partial_kernel(float4 *part, const float *logits, int64_t V,
                                                                           const cpt_cuda_sample_row *rows) {
    __shared__ maxarg ma[PART_THREADS / 32];
    __shared__ float fs[PART_THREADS / 32];
    pdl_trigger();
    pdl_wait();
    const float *l = logits + (int64_t)rows[blockIdx.x].logits_row * V;
    int n = (int)V, c = blockIdx.y, lo = (int)((int64_t)n * c / SAMPLE_CHUNKS), hi = (int)((int64_t)n * (c + 1) / SAMPLE_CHUNKS);
    maxarg best = {-INFINITY, n};
    for (int i = lo + threadIdx.x; i < hi; i += PART_THREADS) best = better(best, maxarg{l[i], i});
    best = block_maxarg(best, ma);
    float s = 0.0f;
    if (best.v > -INFINITY)
        for (int i = lo + threadIdx.x; i < hi; i += PART_THREADS) s += expf(l[i] - best.v);
    s = block_sumf(s, fs);
    if (threadIdx.x == 0)
        part[(int64_t)blockIdx.x * SAMPLE_CHUNKS + c] = make_float4(best.v, s, __int_as_float(best.i), 0.0f);
}

static __global__ void __launch_bounds__(SAMPLE_THREADS) sample_kernel(int32_t *tok_out, float *lp_out, const float *logits,
                                                                int64_t V, const cpt_cuda_sample_row *rows,
                                                                const float4 *part) {
    __shared__ sample_shared sh;
    pdl_trigger();
    pdl_wait();
    const cpt_cuda_sample_row r = rows[blockIdx.x];
    const float *l = logits + (int64_t)r.logits_row * V;
    int tid = threadIdx.x, n = (int)V;
    maxarg best = {-INFINITY, n};
    if (part) { /* the chunks' maxima in chunk order */
        const float4 *pp = part + (int64_t)blockIdx.x * SAMPLE_CHUNKS;
        for (int c = 0; c < SAMPLE_CHUNKS; c++) best = better(best, maxarg{pp[c].x, __float_as_int(pp[c].z)});
        if (!(r.temperature > 0.0f)) {
            if (tid == 0) {
                float s = 0.0f;
                for (int c = 0; c < SAMPLE_CHUNKS; c++)
                    if (pp[c].x > -INFINITY) s += pp[c].y * expf(pp[c].x - best.v);
                tok_out[blockIdx.x] = best.i;
                lp_out[blockIdx.x] = -logf(s);
            }
            return;
        }
    } else {
        for (int i = tid; i < n; i += blockDim.x) best = better(best, maxarg{l[i], i});
        best = block_maxarg(best, sh.ma);
    }
    float mx = best.v;
    if (!(r.temperature > 0.0f)) {
        float s = 0.0f;
        for (int i = tid; i < n; i += blockDim.x) s += expf(l[i] - mx);
        s = block_sumf(s, sh.f);
        if (tid == 0) {
            tok_out[blockIdx.x] = best.i;
            lp_out[blockIdx.x] = -logf(s);
        }
        return;
    }
    float inv_t = 1.0f / r.temperature;
    keep_t ks = {0u, n - 1}; /* everything */
    if (r.top_k > 0 && r.top_k < n) ks = select_prefix(l, n, mx, inv_t, ks, 0, (unsigned long long)r.top_k, &sh);
    if (r.top_p < 1.0f) {
        unsigned long long tot = 0;
        for (int i = tid; i < n; i += blockDim.x) {
            float p = prob(l[i], mx, inv_t);
            if (kept(ks, __float_as_uint(p), i)) tot += fixq(p);
        }
        tot = block_sumu(tot, sh.u);
        unsigned long long target = (unsigned long long)ceil((double)r.top_p * (double)tot);
        if (target < 1) target = 1;
        ks = select_prefix(l, n, mx, inv_t, ks, 1, target, &sh);
    }
    float floor_p = r.min_p; /* min_p * the max p, which is 1 here */
    /* the draw: Gumbel-max over the kept set, and the kept mass */
    maxarg pick = {-INFINITY, n};
    float w = 0.0f;
    for (int64_t quad = tid; quad * 4 < V; quad += blockDim.x) {
        uint4 u = draw4(r, quad);
        uint32_t us[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
        for (int k = 0; k < 4; k++) {
            int i = (int)(quad * 4 + k);
            if (i >= n) break;
            float p = prob(l[i], mx, inv_t);
            if (!kept(ks, __float_as_uint(p), i) || p < floor_p) continue;
            w += p;
            float g = (l[i] - mx) * inv_t - logf(-logf(u01(us[k])));
            pick = better(pick, maxarg{g, i});
        }
    }
    w = block_sumf(w, sh.f);
    pick = block_maxarg(pick, sh.ma);
    if (tid == 0) {
        int t = pick.i < n ? pick.i : best.i;
        tok_out[blockIdx.x] = t;
        lp_out[blockIdx.x] = (l[t] - mx) * inv_t - logf(w);
    }
}

size_t cpt_cuda_sample_partials_bytes(int n_rows) { return sizeof(float4) * SAMPLE_CHUNKS * (size_t)n_rows; }

void cpt_cuda_sample_ex(cpt_cuda_ctx *ctx, int32_t *tokens, float *logprobs, const float *logits, int64_t V,
                        const cpt_cuda_sample_row *rows, int n_rows, void *partials) {
    CKCHECK(tokens && logprobs && logits && rows && V > 0 && V < (1ll << 31), "sample", "bad operands (V %lld)",
            (long long)V);
    CKCHECK(((uintptr_t)partials & 15) == 0, "sample", "partials must be 16-byte aligned");
    if (n_rows == 0) return;
    float4 *part = (float4 *)partials;
    if (part) {
        launch_k(ctx, sample_partial_kernel, dim3((unsigned)n_rows, SAMPLE_CHUNKS), dim3(PART_THREADS), 0, part,
                 logits, V, rows);
        LAUNCH_OK("sample_partial_kernel");
    }
    launch_k(ctx, sample_kernel, dim3((unsigned)n_rows), dim3(SAMPLE_THREADS), 0, tokens, logprobs, logits, V, rows,
             (const float4 *)part);
    LAUNCH_OK("sample_kernel");
}

void cpt_cuda_sample(cpt_cuda_ctx *ctx, int32_t *tokens, float *logprobs, const float *logits, int64_t V,
                     const cpt_cuda_sample_row *rows, int n_rows) {
    cpt_cuda_sample_ex(ctx, tokens, logprobs, logits, V, rows, n_rows, NULL);
}

void cpt_cuda_philox4x32(uint32_t out[4], uint64_t seed, uint32_t sample, uint32_t step, uint64_t quad) {
    uint4 c = philox4x32(make_uint4((uint32_t)quad, step, sample, (uint32_t)(quad >> 32)),
                         make_uint2((uint32_t)seed, (uint32_t)(seed >> 32)));
    out[0] = c.x, out[1] = c.y, out[2] = c.z, out[3] = c.w;
}
