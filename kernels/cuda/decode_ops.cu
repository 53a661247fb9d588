/* Small pieces of the GPU decode engine: embedding gather, the gather of the rows that need logits, the LM head
 * with fp32 logits, device-side random weights (benches), pinned host memory, asynchronous copies and CUDA
 * graphs of the decode step. */
#include <math.h>
#include <string.h>

#include "kernels/cuda/cuda_internal.h"

/* ---- rows -------------------------------------------------------------------------------------------------- */

/* out[i] = wte[tokens[i]], 16 bytes per thread (C a multiple of 8). */
static __global__ void embed_kernel(__nv_bfloat16 *out, const int32_t *tokens, const __nv_bfloat16 *wte, int64_t C) {
    int64_t i = blockIdx.x;
    const uint4 *src = (const uint4 *)(wte + (int64_t)tokens[i] * C);
    uint4 *dst = (uint4 *)(out + i * C);
    for (int64_t c = threadIdx.x; c < C / 8; c += blockDim.x) dst[c] = src[c];
}

void cpt_cuda_embed(cpt_cuda_ctx *ctx, void *out, const int32_t *tokens, const void *wte, int n_rows, int64_t C) {
    CKCHECK(out && tokens && wte && C % 8 == 0, "embed", "missing operand or hidden size %lld not a multiple of 8",
            (long long)C);
    if (n_rows == 0) return;
    embed_kernel<<<(unsigned)n_rows, 128, 0, ctx->stream>>>((__nv_bfloat16 *)out, tokens, (const __nv_bfloat16 *)wte,
                                                            C);
    LAUNCH_OK("embed_kernel");
}

/* out[s] = bf16(a[idx[s]] + b[idx[s]]) (b optional): the residual of the rows whose logits are wanted. */
static __global__ void gather_add_kernel(__nv_bfloat16 *out, const __nv_bfloat16 *a, const __nv_bfloat16 *b,
                                  const int32_t *idx, int64_t C) {
    int64_t s = blockIdx.x, r = idx[s];
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
        float v = __bfloat162float(a[r * C + c]);
        if (b) v += __bfloat162float(b[r * C + c]);
        out[s * C + c] = __float2bfloat16(v);
    }
}

void cpt_cuda_gather_add(cpt_cuda_ctx *ctx, void *out, const void *a, const void *b, const int32_t *idx, int n_out,
                         int64_t C) {
    CKCHECK(out && a && idx, "gather_add", "missing operand");
    if (n_out == 0) return;
    gather_add_kernel<<<(unsigned)n_out, 256, 0, ctx->stream>>>((__nv_bfloat16 *)out, (const __nv_bfloat16 *)a,
                                                                (const __nv_bfloat16 *)b, idx, C);
    LAUNCH_OK("gather_add_kernel");
}

/* ---- LM head: fp32 logits ------------------------------------------------------------------------------------ */

#define LT(call)                                                                                               \
    do {                                                                                                       \
        cublasStatus_t s_ = (call);                                                                            \
        CKCHECK(s_ == CUBLAS_STATUS_SUCCESS, "matmul_f32out", "%s: cuBLAS status %d", #call, (int)s_);         \
    } while (0)

void cpt_cuda_matmul_f32out(cpt_cuda_ctx *ctx, float *out, const void *inp, const void *w, int64_t N, int64_t C,
                            int64_t OC) {
    CKCHECK(out && inp && w, "matmul_f32out", "missing operand");
    if (N == 0) return;
    cpt_cublaslt_api *lt = &ctx->lt;
    cublasLtMatmulDesc_t desc = NULL;
    cublasLtMatrixLayout_t la = NULL, lb = NULL, ld = NULL;
    cublasLtMatmulPreference_t pref = NULL;
    LT(lt->desc_create(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    LT(lt->desc_set(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    LT(lt->desc_set(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    /* out^T [OC, N] = (w stored [C, OC] col-major)^T @ (inp stored [C, N]) */
    LT(lt->layout_create(&la, CUDA_R_16BF, (uint64_t)C, (uint64_t)OC, C));
    LT(lt->layout_create(&lb, CUDA_R_16BF, (uint64_t)C, (uint64_t)N, C));
    LT(lt->layout_create(&ld, CUDA_R_32F, (uint64_t)OC, (uint64_t)N, OC));
    LT(lt->pref_create(&pref));
    size_t ws = ctx->lt_workspace_bytes;
    LT(lt->pref_set(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    cublasLtMatmulHeuristicResult_t heur;
    int found = 0;
    LT(lt->heuristic(ctx->lt_handle, desc, la, lb, ld, ld, pref, 1, &heur, &found));
    CKCHECK(found > 0, "matmul_f32out", "cuBLASLt has no algorithm for N=%lld C=%lld OC=%lld", (long long)N,
            (long long)C, (long long)OC);
    float alpha = 1.0f, beta = 0.0f;
    LT(lt->matmul(ctx->lt_handle, desc, &alpha, w, la, inp, lb, &beta, out, ld, out, ld, &heur.algo,
                  ctx->lt_workspace, ws, ctx->stream));
    lt->pref_destroy(pref);
    lt->layout_destroy(ld);
    lt->layout_destroy(lb);
    lt->layout_destroy(la);
    lt->desc_destroy(desc);
}

/* ---- device-side random weights --------------------------------------------------------------------------- */

static __device__ inline uint64_t splitmix(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* value = mean + std * normal (Box-Muller on a hash of (seed, index)); std 0 fills with mean. */
static __global__ void fill_normal_kernel(__nv_bfloat16 *p, int64_t n, float mean, float std, uint64_t seed) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        float v = mean;
        if (std != 0.0f) {
            uint64_t h = splitmix(seed ^ splitmix((uint64_t)i));
            float u1 = ((float)(h >> 40) + 0.5f) * (1.0f / 16777216.0f);
            float u2 = (float)((h >> 16) & 0xFFFFFF) * (1.0f / 16777216.0f);
            v += std * sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2);
        }
        p[i] = __float2bfloat16(v);
    }
}

void cpt_cuda_fill_normal_bf16(cpt_cuda_ctx *ctx, void *p, size_t n, float mean, float std, uint64_t seed) {
    if (n == 0) return;
    unsigned blocks = (unsigned)(n / 256 + 1 < 65536 ? n / 256 + 1 : 65536);
    fill_normal_kernel<<<blocks, 256, 0, ctx->stream>>>((__nv_bfloat16 *)p, (int64_t)n, mean, std, seed);
    LAUNCH_OK("fill_normal_kernel");
}

/* ---- host memory, copies, memory info ------------------------------------------------------------------- */

void *cpt_cuda_host_alloc(size_t bytes, const char *what, cpt_err *err) {
    void *p = NULL;
    cudaError_t e = cudaMallocHost(&p, bytes ? bytes : 1);
    if (e != cudaSuccess) {
        cpt_cuda_err(err, "cudaMallocHost of %zu bytes for %s failed: %s", bytes, what, cudaGetErrorString(e));
        cudaGetLastError();
        return NULL;
    }
    return p;
}

void cpt_cuda_host_free(void *p) {
    if (p) cudaFreeHost(p);
}

int cpt_cuda_memcpy_h2d_async(cpt_cuda_ctx *ctx, void *dst, const void *src, size_t bytes, cpt_err *err) {
    CUDA_OR_ERR(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, ctx->stream), "an async host-to-device copy");
    return 0;
}

int cpt_cuda_memcpy_d2h_async(cpt_cuda_ctx *ctx, void *dst, const void *src, size_t bytes, cpt_err *err) {
    CUDA_OR_ERR(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, ctx->stream), "an async device-to-host copy");
    return 0;
}

int cpt_cuda_mem_info(size_t *free_bytes, size_t *total_bytes, cpt_err *err) {
    CUDA_OR_ERR(cudaMemGetInfo(free_bytes, total_bytes), "device memory info");
    return 0;
}

int cpt_cuda_num_sms(const cpt_cuda_ctx *ctx) { return ctx->num_sms; }

/* ---- graphs ----------------------------------------------------------------------------------------------- */

struct cpt_cuda_graph {
    cudaGraph_t graph;
    cudaGraphExec_t exec;
};

int cpt_cuda_graph_begin(cpt_cuda_ctx *ctx, cpt_err *err) {
    CUDA_OR_ERR(cudaStreamBeginCapture(ctx->stream, cudaStreamCaptureModeThreadLocal), "the decode graph capture");
    return 0;
}

cpt_cuda_graph *cpt_cuda_graph_end(cpt_cuda_ctx *ctx, cpt_err *err) {
    cpt_cuda_graph *g = (cpt_cuda_graph *)calloc(1, sizeof *g);
    cudaError_t e = cudaStreamEndCapture(ctx->stream, g ? &g->graph : NULL);
    if (!g || e != cudaSuccess) {
        cpt_cuda_err(err, "cudaStreamEndCapture failed: %s", g ? cudaGetErrorString(e) : "out of memory");
        free(g);
        cudaGetLastError();
        return NULL;
    }
    e = cudaGraphInstantiate(&g->exec, g->graph, 0);
    if (e != cudaSuccess) {
        cpt_cuda_err(err, "cudaGraphInstantiate failed: %s", cudaGetErrorString(e));
        cudaGraphDestroy(g->graph);
        free(g);
        cudaGetLastError();
        return NULL;
    }
    return g;
}

int cpt_cuda_graph_launch(cpt_cuda_ctx *ctx, cpt_cuda_graph *g, cpt_err *err) {
    CUDA_OR_ERR(cudaGraphLaunch(g->exec, ctx->stream), "a decode graph launch");
    return 0;
}

void cpt_cuda_graph_free(cpt_cuda_graph *g) {
    if (!g) return;
    cudaGraphExecDestroy(g->exec);
    cudaGraphDestroy(g->graph);
    free(g);
}

/* ---- skinny products: decode steps of a few rows ------------------------------------------------------------ */

/* cuBLASLt tiles the output in blocks of 64-128 columns, so a product of a few rows with 896 or 1152 output columns
 * runs on a handful of multiprocessors. Here one warp streams one weight row (16-byte loads, four in flight per
 * lane) against all N input rows (read through L1/L2, they are small); when there are fewer weight rows than warps
 * to fill the device, gridDim.y splits K and a second kernel sums the splits in order (deterministic). */
#define SKINNY_WARPS 8
#define SKINNY_MAX_SPLIT 8

template <int MAXN>
static __global__ void __launch_bounds__(SKINNY_WARPS * 32)
    skinny_kernel(__nv_bfloat16 *__restrict__ out, float *__restrict__ part, const __nv_bfloat16 *__restrict__ inp,
                  const __nv_bfloat16 *__restrict__ w, const __nv_bfloat16 *__restrict__ bias, int N, int64_t C,
                  int64_t OC, int vec_per_split) {
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int64_t oc = (int64_t)blockIdx.x * SKINNY_WARPS + warp;
    if (oc >= OC) return;
    int64_t nvec = C / 8, v0 = (int64_t)blockIdx.y * vec_per_split;
    int64_t v1 = v0 + vec_per_split < nvec ? v0 + vec_per_split : nvec;
    const uint4 *wr = (const uint4 *)(w + oc * C);
    float acc[MAXN];
#pragma unroll
    for (int n = 0; n < MAXN; n++) acc[n] = 0.0f;
    for (int64_t v = v0 + lane; v < v1; v += 128) {
        uint4 wv[4]; /* four independent 16-byte loads in flight per lane before any use */
#pragma unroll
        for (int u = 0; u < 4; u++) wv[u] = v + 32 * u < v1 ? __ldg(wr + v + 32 * u) : make_uint4(0, 0, 0, 0);
#pragma unroll
        for (int u = 0; u < 4; u++) {
            int64_t vv = v + 32 * u;
            if (vv >= v1) break;
            const __nv_bfloat162 *w2 = (const __nv_bfloat162 *)&wv[u];
            float2 wf[4];
#pragma unroll
            for (int k = 0; k < 4; k++) wf[k] = __bfloat1622float2(w2[k]);
#pragma unroll
            for (int n = 0; n < MAXN; n++) {
                if (n < N) {
                    uint4 xv = __ldg((const uint4 *)(inp + (int64_t)n * C) + vv);
                    const __nv_bfloat162 *x2 = (const __nv_bfloat162 *)&xv;
#pragma unroll
                    for (int k = 0; k < 4; k++) {
                        float2 xf = __bfloat1622float2(x2[k]);
                        acc[n] += wf[k].x * xf.x + wf[k].y * xf.y;
                    }
                }
            }
        }
    }
#pragma unroll
    for (int n = 0; n < MAXN; n++) {
        float a = acc[n];
        for (int o = 16; o > 0; o >>= 1) a += __shfl_xor_sync(0xffffffffu, a, o);
        acc[n] = a;
    }
    if (lane != 0) return;
    for (int n = 0; n < N && n < MAXN; n++) {
        if (gridDim.y > 1) {
            part[((int64_t)blockIdx.y * N + n) * OC + oc] = acc[n];
        } else {
            float r = acc[n] + (bias ? __bfloat162float(bias[oc]) : 0.0f);
            out[(int64_t)n * OC + oc] = __float2bfloat16(r);
        }
    }
}

static __global__ void skinny_sum_kernel(__nv_bfloat16 *out, const float *part, const __nv_bfloat16 *bias, int N,
                                         int64_t OC, int splits) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (int64_t)N * OC) return;
    float r = 0.0f;
    for (int s = 0; s < splits; s++) r += part[(int64_t)s * N * OC + i];
    if (bias) r += __bfloat162float(bias[i % OC]);
    out[i] = __float2bfloat16(r);
}

size_t cpt_cuda_matmul_skinny_scratch_floats(int n_rows, int64_t OC) {
    return (size_t)SKINNY_MAX_SPLIT * (size_t)n_rows * (size_t)OC;
}

void cpt_cuda_matmul_skinny(cpt_cuda_ctx *ctx, void *out, const void *inp, const void *w, const void *bias, int N,
                            int64_t C, int64_t OC, float *scratch) {
    const char *op = "matmul_skinny";
    CKCHECK(out && inp && w && N >= 1 && N <= CPT_CUDA_SKINNY_MAX_ROWS && C % 8 == 0 && OC > 0, op,
            "N %d (1..%d), C %lld (a multiple of 8), OC %lld", N, CPT_CUDA_SKINNY_MAX_ROWS, (long long)C,
            (long long)OC);
    int64_t nvec = C / 8, blocks = (OC + SKINNY_WARPS - 1) / SKINNY_WARPS;
    /* enough warps for ~32 per multiprocessor, each lane keeping at least two 16-byte loads */
    int64_t want = (32LL * ctx->num_sms + OC - 1) / OC;
    int64_t most = nvec / 64 > 0 ? nvec / 64 : 1;
    int splits = (int)(want < most ? want : most);
    if (splits > SKINNY_MAX_SPLIT) splits = SKINNY_MAX_SPLIT;
    if (splits < 1 || !scratch) splits = 1;
    int vps = (int)((nvec + splits - 1) / splits);
    dim3 grid((unsigned)blocks, (unsigned)splits);
    const __nv_bfloat16 *b = (const __nv_bfloat16 *)bias;
#define SKINNY(MAXN)                                                                                              \
    skinny_kernel<MAXN><<<grid, SKINNY_WARPS * 32, 0, ctx->stream>>>(                                             \
        (__nv_bfloat16 *)out, scratch, (const __nv_bfloat16 *)inp, (const __nv_bfloat16 *)w, b, N, C, OC, vps)
    if (N == 1) SKINNY(1);
    else if (N == 2) SKINNY(2);
    else if (N <= 4) SKINNY(4);
    else SKINNY(8);
#undef SKINNY
    LAUNCH_OK("skinny_kernel");
    if (splits > 1) {
        skinny_sum_kernel<<<cdiv((int64_t)N * OC, 256), 256, 0, ctx->stream>>>((__nv_bfloat16 *)out, scratch, b, N,
                                                                               OC, splits);
        LAUNCH_OK("skinny_sum_kernel");
    }
}
