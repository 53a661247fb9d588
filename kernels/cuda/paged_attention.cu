/* The paged bf16 KV cache of the GPU decoder (model/cuda_decoder.c): appending a row's keys and values (with qwen3's q/k norm and
 * RoPE fused in), attention of one query row over its sequence's blocks (flash-decoding: the positions split over
 * blocks, each keeping an online softmax; a combine kernel merges the splits in split order, so results are
 * deterministic), and block copies for copy-on-write of shared prompt blocks.
 *
 * Row i of a call is the token at position pos[i] of block table tab[i]; it attends to positions 0 .. pos[i] of
 * that table (its own key included: kv_append runs first). A decode step is one row per sequence; a prefill is
 * one row per prompt token (causal by construction). */
#include <math.h>

#include "kernels/cuda/paged_attention_internal.h"

#define ATT_THREADS 128
#define ATT_TILE 128 /* positions scored per pass over shared memory */

/* ---- append: q/k norm (optional), rope, K and V into the pages -------------------------------------------- */

/* One block per row, a warp per head (H query heads, KV key heads, KV value heads). fp32 from the bf16 qkv
 * through norm and rotation, one rounding at the end. */
static __global__ void kv_append_kernel(cpt_cuda_paged_kv kv, int layer, __nv_bfloat16 *qkv, const int32_t *pos,
                                 const int32_t *tab, const __nv_bfloat16 *q_norm, const __nv_bfloat16 *k_norm,
                                 float eps, const float *inv_freq, int H, int KV, int D) {
    pdl_trigger();
    pdl_wait();
    int64_t i = blockIdx.x;
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    int QKV = (H + 2 * KV) * D, half = D / 2;
    __nv_bfloat16 *row = qkv + i * QKV;
    int p = pos[i];
    __nv_bfloat16 *kc = (__nv_bfloat16 *)kv.pool + kv_row(kv, layer, 0, tab[i], p);
    __nv_bfloat16 *vc = (__nv_bfloat16 *)kv.pool + kv_row(kv, layer, 1, tab[i], p);
    for (int hh = warp; hh < H + 2 * KV; hh += nwarps) {
        const __nv_bfloat16 *src = row + (int64_t)hh * D;
        if (hh >= H + KV) { /* value head: a plain copy */
            __nv_bfloat16 *dst = vc + (int64_t)(hh - H - KV) * D;
            for (int d = lane; d < D; d += 32) dst[d] = src[d];
            continue;
        }
        __nv_bfloat16 *dst = hh < H ? row + (int64_t)hh * D : kc + (int64_t)(hh - H) * D;
        norm_rope_head(src, hh < H ? q_norm : k_norm, eps, p, inv_freq, D, lane, [&](int k, float x0, float x1) {
            dst[k] = __float2bfloat16(x0);
            dst[k + half] = __float2bfloat16(x1);
        });
    }
}

void cpt_cuda_kv_append(cpt_cuda_ctx *ctx, const cpt_cuda_paged_kv *kv, int layer, void *qkv, const int32_t *pos,
                        const int32_t *tab, int n_rows, const void *q_norm, const void *k_norm, float eps,
                        const float *inv_freq, cpt_attn_shape s) {
    CKCHECK(kv && qkv && pos && tab && inv_freq, "kv_append", "missing operand");
    CKCHECK(s.head_dim == kv->head_dim && s.n_kv_heads == kv->n_kv_heads && s.head_dim % 2 == 0 &&
                s.n_heads % s.n_kv_heads == 0 && layer >= 0 && layer < kv->n_layers,
            "kv_append", "shape: %d heads, %d kv heads of %d, cache %d x %d, layer %d of %d", s.n_heads,
            s.n_kv_heads, s.head_dim, kv->n_kv_heads, kv->head_dim, layer, kv->n_layers);
    if (n_rows == 0) return;
    /* a warp per head (up to 32): at one row the heads' norm and rotation run side by side */
    int heads = s.n_heads + 2 * s.n_kv_heads, warps = heads < 32 ? heads : 32;
    launch_k(ctx, kv_append_kernel, dim3((unsigned)n_rows), dim3(32 * warps), 0, *kv, layer, (__nv_bfloat16 *)qkv, pos, tab,
             (const __nv_bfloat16 *)q_norm, (const __nv_bfloat16 *)k_norm, eps, inv_freq, s.n_heads, s.n_kv_heads,
             s.head_dim);
    LAUNCH_OK("kv_append_kernel");
}

/* ---- decode attention: pieces shared with the tensor-core kernels ------------------------------------------------------------ */

/* s[g] += q_g . k over the 8 dimensions from c: k the 8 bf16 of raw, q_g at q + g * qstride (each thread scores
 * one position against the group's G query heads) */
template <int MAXG>
static __device__ __forceinline__ void score8(float (&s)[MAXG], const float *q, int qstride, int c, const uint4 &raw,
                                              int G) {
    float kf[8];
    bf16x8_to_f32(raw, kf);
#pragma unroll
    for (int g = 0; g < MAXG; g++) {
        if (g < G) {
            const float *qg = q + g * qstride + c;
#pragma unroll
            for (int u = 0; u < 8; u++) s[g] += qg[u] * kf[u];
        }
    }
}

/* Phase 2 of a tile: one warp per head takes the tile's scores s_s[g][0 .. tn) to e^(s - m_new) in place and
 * updates the running max m_s and sum l_s; a_s = e^(m_old - m_new) rescales the head's accumulators (0 on the
 * first tile). */
static __device__ __forceinline__ void tile_online_softmax(float *s_s, float *m_s, float *l_s, float *a_s, int G,
                                                           int tn, int tid) {
    int lane = tid & 31, warp = tid >> 5;
    for (int g = warp; g < G; g += blockDim.x >> 5) {
        float mx = -INFINITY;
        for (int j = lane; j < tn; j += 32) mx = fmaxf(mx, s_s[g * ATT_TILE + j]);
        for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
        float m_old = m_s[g], m_new = fmaxf(m_old, mx);
        float sum = 0.0f;
        for (int j = lane; j < tn; j += 32) {
            float e = expf(s_s[g * ATT_TILE + j] - m_new);
            s_s[g * ATT_TILE + j] = e;
            sum += e;
        }
        for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
        if (lane == 0) {
            float a = expf(m_old - m_new);
            a_s[g] = a;
            l_s[g] = l_s[g] * a + sum;
            m_s[g] = m_new;
        }
    }
}

static __global__ void attention_combine_kernel(__nv_bfloat16 *out, const float *partial, int n_splits, int H, int D) {
    pdl_trigger();
    pdl_wait();
    merge_heads<0>(out, partial, blockIdx.x, H, blockIdx.y, 1, n_splits, D);
}

size_t cpt_cuda_paged_attention_partial_floats(int n_rows, int n_heads, int head_dim, int n_splits) {
    return n_splits <= 1 ? 0 : (size_t)n_rows * n_heads * n_splits * (head_dim + 2);
}

/* ---- decode attention ---------------------------------------------------------------------------------------
 *
 * Memory-level parallelism: phase 1 (one thread per position) records each position's row offset in shared memory
 * and loads its whole key row before using it; phase 3 gives each thread 4 dimensions of many positions (8-byte V
 * loads, no table lookups, unrolled so several loads are in flight), and the position groups are summed once per
 * head at the end.
 *
 * attend_v2: one (row, kv head, split) block over positions [start, end) of table t. */
template <int MAXG, int MAXD>
static __device__ __forceinline__ void attend_v2(__nv_bfloat16 *out, float *partial, const __nv_bfloat16 *qkv,
                                                 const cpt_cuda_paged_kv &kv, int layer, int t, int start, int end,
                                                 int64_t i, int kvh, int sp, int n_splits, int H, int KV, int D,
                                                 float *sm, const attn_append &ap, int p) {
    const int G = H / KV, tid = threadIdx.x;
    float *q_s = sm;                    /* [G][D] */
    float *s_s = q_s + MAXG * MAXD;     /* [G][ATT_TILE] */
    float *m_s = s_s + MAXG * ATT_TILE; /* [G] */
    float *l_s = m_s + MAXG;            /* [G] */
    float *a_s = l_s + MAXG;            /* [G] */
    float *red = a_s + MAXG;            /* [rows_par][D], at most 4 * ATT_THREADS */
    int64_t *off_s = (int64_t *)(red + 4 * ATT_THREADS); /* [ATT_TILE] key row offsets */
    int QKV = (H + 2 * KV) * D;
    const float scale = rsqrtf((float)D);
    if (!ap.inv_freq) {
        for (int x = tid; x < G * D; x += blockDim.x)
            q_s[(x / D) * MAXD + x % D] = __bfloat162float(qkv[i * QKV + (int64_t)(kvh * G) * D + x]) * scale;
    } else { /* the append fused in: the queries rotated here (rounded as kv_append stores them) */
        int lane = tid & 31, warp = tid >> 5, half = D / 2;
        for (int g = warp; g < G; g += ATT_THREADS / 32)
            norm_rope_head(qkv + i * QKV + (int64_t)(kvh * G + g) * D, ap.q_norm, ap.eps, p, ap.inv_freq, D, lane,
                           [&](int k, float x0, float x1) {
                               q_s[g * MAXD + k] = bf16_round(x0) * scale;
                               q_s[g * MAXD + k + half] = bf16_round(x1) * scale;
                           });
        /* the split holding position p writes its key (rotated) and value into the pages before reading them */
        if (start <= p && p < end) {
            int64_t kr = kv_row(kv, layer, 0, t, p) + (int64_t)kvh * D, vr = kv_row(kv, layer, 1, t, p) + (int64_t)kvh * D;
            __nv_bfloat16 *pool = (__nv_bfloat16 *)kv.pool;
            if (warp == 0)
                norm_rope_head(qkv + i * QKV + (int64_t)(H + kvh) * D, ap.k_norm, ap.eps, p, ap.inv_freq, D, lane,
                               [&](int k, float x0, float x1) {
                                   pool[kr + k] = __float2bfloat16(x0);
                                   pool[kr + k + half] = __float2bfloat16(x1);
                               });
            else if (warp == 1)
                for (int d = lane; d < D; d += 32) pool[vr + d] = qkv[i * QKV + (int64_t)(H + KV + kvh) * D + d];
        }
    }
    if (tid < G) {
        m_s[tid] = -INFINITY;
        l_s[tid] = 0.0f;
    }
    /* phase 3's threads: tpr per position, rows_par positions side by side; where tpr does not divide the block
     * (head_dim 80, 96) the threads past rows_par * tpr have no share and only take part in the barriers */
    const int tpr = D / 4, rows_par = ATT_THREADS / tpr, pr = tid / tpr, dv = (tid % tpr) * 4;
    const bool pv_thread = pr < rows_par;
    float acc[MAXG][4];
#pragma unroll
    for (int g = 0; g < MAXG; g++)
#pragma unroll
        for (int u = 0; u < 4; u++) acc[g][u] = 0.0f;
    const __nv_bfloat16 *pool = (const __nv_bfloat16 *)kv.pool;
    const int64_t vshift = (int64_t)kv.n_blocks * kv.block_size * kv.n_kv_heads * D; /* K -> V of one layer */
    __syncthreads();
    for (int t0 = start; t0 < end; t0 += ATT_TILE) {
        int tn = min(ATT_TILE, end - t0);
        /* phase 1: scores, the whole key row loaded before use */
        for (int j = tid; j < tn; j += blockDim.x) {
            int64_t ko = kv_row(kv, layer, 0, t, t0 + j) + (int64_t)kvh * D;
            off_s[j] = ko;
            const uint4 *k4 = (const uint4 *)(pool + ko);
            uint4 kr[MAXD / 8];
#pragma unroll
            for (int c = 0; c < MAXD / 8; c++)
                if (c * 8 < D) kr[c] = k4[c];
            float s[MAXG];
#pragma unroll
            for (int g = 0; g < MAXG; g++) s[g] = 0.0f;
#pragma unroll
            for (int c = 0; c < MAXD / 8; c++) {
                if (c * 8 >= D) break;
                score8<MAXG>(s, q_s, MAXD, c * 8, kr[c], G);
            }
#pragma unroll
            for (int g = 0; g < MAXG; g++)
                if (g < G) s_s[g * ATT_TILE + j] = s[g];
        }
        __syncthreads();
        /* phase 2: online max / sum per head */
        tile_online_softmax(s_s, m_s, l_s, a_s, G, tn, tid);
        __syncthreads();
        /* phase 3: thread (position group pr, dims dv..dv+3) over the tile's positions pr, pr + rows_par, ... */
#pragma unroll
        for (int g = 0; g < MAXG; g++)
            if (g < G) {
                float a = a_s[g];
#pragma unroll
                for (int u = 0; u < 4; u++) acc[g][u] *= a;
            }
        /* p * v for position j (the same arithmetic in both loops below) */
        auto pv = [&](int j, uint2 raw) {
            float2 v01 = __bfloat1622float2(*(const __nv_bfloat162 *)&raw.x);
            float2 v23 = __bfloat1622float2(*(const __nv_bfloat162 *)&raw.y);
#pragma unroll
            for (int g = 0; g < MAXG; g++) {
                if (g < G) {
                    float p = s_s[g * ATT_TILE + j];
                    acc[g][0] += p * v01.x;
                    acc[g][1] += p * v01.y;
                    acc[g][2] += p * v23.x;
                    acc[g][3] += p * v23.y;
                }
            }
        };
        if (pv_thread)
#pragma unroll 4
            for (int j = pr; j < tn; j += rows_par) pv(j, *(const uint2 *)(pool + off_s[j] + vshift + dv));
        __syncthreads();
    }
    /* per head: the position groups summed in group order, then written */
#pragma unroll
    for (int g = 0; g < MAXG; g++) {
        if (g >= G) break; /* G is the same for the whole block: the barriers below stay uniform */
        if (pv_thread)
#pragma unroll
            for (int u = 0; u < 4; u++) red[pr * D + dv + u] = acc[g][u];
        __syncthreads();
        int h = kvh * G + g;
        for (int x = tid; x < D; x += blockDim.x) {
            float o = 0.0f;
            for (int p = 0; p < rows_par; p++) o += red[p * D + x];
            store_head(out, partial, i, H, h, n_splits, sp, D, x, o, &m_s[g], &l_s[g]);
        }
        __syncthreads();
    }
}

template <int MAXG, int MAXD>
static __global__ void __launch_bounds__(ATT_THREADS) paged_attention_v2_kernel(
    __nv_bfloat16 *out, float *partial, const __nv_bfloat16 *qkv, cpt_cuda_paged_kv kv, int layer,
    const int32_t *pos, const int32_t *tab, const int32_t *split_len_p, int n_splits, int H, int KV, int D,
    int *counters, attn_append ap) {
    extern __shared__ float sm[];
    const int G = H / KV;
    pdl_trigger();
    pdl_wait();
    int64_t i = blockIdx.x;
    int kvh = blockIdx.y, sp = blockIdx.z, tid = threadIdx.x;
    int len = pos[i] + 1, t = tab[i];
    int split_len = n_splits == 1 ? len : split_len_p[i];
    int start = sp * split_len, end = min(len, start + split_len);
    if (start >= end) {
        empty_split_partials(partial, i, H, kvh, G, n_splits, sp, D, tid, blockDim.x);
    } else {
        attend_v2<MAXG, MAXD>(out, partial, qkv, kv, layer, t, start, end, i, kvh, sp, n_splits, H, KV, D, sm, ap,
                              len - 1);
    }
    merge_if_last<0>(out, partial, counters, i, H, KV, kvh, n_splits, D);
}

static void attention_v2(cpt_cuda_ctx *ctx, void *out, float *partial, const void *qkv, const cpt_cuda_paged_kv *kv,
                         int layer, const int32_t *pos, const int32_t *tab, int n_rows, int n_splits,
                         const int32_t *split_len, cpt_attn_shape s, int *counters, attn_append ap, cpt_attn_kind kind) {
    const char *op = "paged_attention_v2";
    CKCHECK(kind == CPT_ATTN_V2 || kind == CPT_ATTN_MMA ||
                (kind == CPT_ATTN_FEW && ap.inv_freq),
            op, "kernel kind %d%s", (int)kind, kind == CPT_ATTN_FEW ? " without the append" : "");
    int H = s.n_heads, KV = s.n_kv_heads, D = s.head_dim;
    CKCHECK(out && qkv && kv && pos && tab, op, "missing operand");
    CKCHECK(D == kv->head_dim && KV == kv->n_kv_heads && H % KV == 0 && D % 8 == 0 && D <= 256 && layer >= 0 &&
                layer < kv->n_layers,
            op, "shape: %d heads, %d kv heads of %d (head_dim: a multiple of 8 up to 256)", H, KV, D);
    CKCHECK(H / KV <= 16, op, "%d query heads per kv head; at most 16 supported", H / KV);
    CKCHECK(n_splits >= 1 && n_splits <= MERGE_MAX_SPLITS && (n_splits == 1 || (partial && split_len)), op,
            "%d splits (at most %d; more than one needs partials)", n_splits, MERGE_MAX_SPLITS);
    if (n_rows == 0) return;
    if (kind == CPT_ATTN_FEW && cpt_cuda_paged_attention_few_ok(s, n_splits)) {
        cpt_paged_attention_few_launch(ctx, (__nv_bfloat16 *)out, (const __nv_bfloat16 *)qkv, kv, layer, pos, tab,
                                       n_rows, n_splits, split_len, H, KV, D, ap);
        return;
    }
    if (kind == CPT_ATTN_FEW) kind = CPT_ATTN_MMA;
    if (kind == CPT_ATTN_MMA && cpt_cuda_paged_attention_mma_ok(s)) {
        cpt_paged_attention_mma_launch(ctx, (__nv_bfloat16 *)out, partial, (const __nv_bfloat16 *)qkv, kv, layer, pos,
                                       tab, n_rows, n_splits, split_len, H, KV, D, counters, ap);
    } else {
        int maxg = H / KV <= 8 ? 8 : 16, maxd = D <= 32 ? 32 : D <= 64 ? 64 : D <= 128 ? 128 : 256;
        size_t shm = sizeof(float) * ((size_t)maxg * maxd + (size_t)maxg * ATT_TILE + 3 * (size_t)maxg +
                                      4 * (size_t)ATT_THREADS) +
                     sizeof(int64_t) * ATT_TILE;
        dim3 grid((unsigned)n_rows, (unsigned)KV, (unsigned)n_splits);
#define V2(G_, D_)                                                                                                 \
    launch_k(ctx, paged_attention_v2_kernel<G_, D_>, grid,                                                          \
             dim3(ATT_THREADS), shm, (__nv_bfloat16 *)out, partial, (const __nv_bfloat16 *)qkv, *kv, layer, pos, tab, \
             split_len, n_splits, H, KV, D, counters, ap)
        if (maxg == 8) {
            if (maxd == 32) V2(8, 32);
            else if (maxd == 64) V2(8, 64);
            else if (maxd == 128) V2(8, 128);
            else V2(8, 256);
        } else {
            if (maxd == 32) V2(16, 32);
            else if (maxd == 64) V2(16, 64);
            else if (maxd == 128) V2(16, 128);
            else V2(16, 256);
        }
#undef V2
        LAUNCH_OK("paged_attention_v2_kernel");
    }
    if (n_splits > 1 && !counters) {
        launch_k(ctx, attention_combine_kernel, dim3((unsigned)n_rows, (unsigned)H), dim3(D < 32 ? 32 : D), 0,
                 (__nv_bfloat16 *)out, (const float *)partial, n_splits, H, D);
        LAUNCH_OK("attention_combine_kernel");
    }
}

void cpt_cuda_paged_attention_v2(cpt_cuda_ctx *ctx, void *out, float *partial, const void *qkv,
                                 const cpt_cuda_paged_kv *kv, int layer, const int32_t *pos, const int32_t *tab,
                                 int n_rows, int n_splits, const int32_t *split_len, cpt_attn_shape s, int *counters,
                                 cpt_attn_kind kind) {
    attention_v2(ctx, out, partial, qkv, kv, layer, pos, tab, n_rows, n_splits, split_len, s, counters,
                 attn_append{NULL, NULL, 0.0f, NULL}, kind);
}

void cpt_cuda_paged_attention_v2_append(cpt_cuda_ctx *ctx, void *out, float *partial, const void *qkv,
                                        const cpt_cuda_paged_kv *kv, int layer, const int32_t *pos,
                                        const int32_t *tab, int n_rows, int n_splits, const int32_t *split_len,
                                        cpt_attn_shape s, int *counters, const void *q_norm, const void *k_norm,
                                        float eps, const float *inv_freq, cpt_attn_kind kind) {
    CKCHECK(inv_freq && s.head_dim % 2 == 0, "paged_attention_v2_append", "inv_freq missing or odd head_dim %d",
            s.head_dim);
    attention_v2(ctx, out, partial, qkv, kv, layer, pos, tab, n_rows, n_splits, split_len, s, counters,
                 attn_append{(const __nv_bfloat16 *)q_norm, (const __nv_bfloat16 *)k_norm, eps, inv_freq}, kind);
}

/* ---- copy-on-write -------------------------------------------------------------------------------------- */

/* Block (pair, layer * 2 + K/V): copies one page of block_size x kv_heads x head_dim bf16 values. */
static __global__ void kv_copy_blocks_kernel(cpt_cuda_paged_kv kv, const int32_t *pairs) {
    int pr = blockIdx.x, lw = blockIdx.y;
    int64_t page = (int64_t)kv.block_size * kv.n_kv_heads * kv.head_dim; /* bf16 values, a multiple of 8 */
    int64_t base = (int64_t)lw * kv.n_blocks;
    const uint4 *src = (const uint4 *)((const __nv_bfloat16 *)kv.pool + (base + pairs[2 * pr]) * page);
    uint4 *dst = (uint4 *)((__nv_bfloat16 *)kv.pool + (base + pairs[2 * pr + 1]) * page);
    for (int64_t x = threadIdx.x; x < page / 8; x += blockDim.x) dst[x] = src[x];
}

void cpt_cuda_kv_copy_blocks(cpt_cuda_ctx *ctx, const cpt_cuda_paged_kv *kv, const int32_t *pairs, int n_pairs) {
    CKCHECK(kv && pairs && kv->head_dim % 8 == 0, "kv_copy_blocks", "missing operand or head_dim not a multiple of 8");
    if (n_pairs == 0) return;
    kv_copy_blocks_kernel<<<dim3((unsigned)n_pairs, (unsigned)(2 * kv->n_layers)), 256, 0, ctx->stream>>>(*kv, pairs);
    LAUNCH_OK("kv_copy_blocks_kernel");
}
