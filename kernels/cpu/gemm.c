/* fp32 GEMM for the CPU backend: c [M, N] (+)= op(a) [M, K] @ op(b) [K, N].
 *
 * Blocked the usual way: C is cut into MC x NC tiles, one OpenMP task per tile (so each element of C is owned by
 * one thread and summed in a fixed k order: bitwise deterministic whatever the thread count). Inside a tile, K is
 * cut into KC slices; the slice of A is packed into MR-row panels and the slice of B into NR-column panels
 * (transposes are absorbed by the packing), and a register-blocked MR x NR micro-kernel multiplies panel pairs.
 * The micro-kernel has an AVX2+FMA version picked at run time and a portable one. */
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu_internal.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CPT_GEMM_X86 1
#endif

#define MR 6
#define NR 16
#define KC 256
#define MC 96  /* multiple of MR */
#define NC 256 /* multiple of NR */

typedef struct {
    const float *p;
    int64_t ld;
    int trans;
} operand;

/* element (row, col) of op(x) */
static inline float at(operand x, int64_t r, int64_t c) { return x.trans ? x.p[c * x.ld + r] : x.p[r * x.ld + c]; }

/* Packs op(a)[i0 .. i0+mc, k0 .. k0+kc] as panels of MR rows: ap[panel][k][i], zero-padded. */
static void pack_a(float *ap, operand a, int64_t i0, int mc, int64_t k0, int kc) {
    for (int p = 0; p < mc; p += MR) {
        float *dst = ap + (size_t)p * kc;
        int rows = mc - p < MR ? mc - p : MR;
        for (int k = 0; k < kc; k++) {
            for (int i = 0; i < rows; i++) dst[k * MR + i] = at(a, i0 + p + i, k0 + k);
            for (int i = rows; i < MR; i++) dst[k * MR + i] = 0.0f;
        }
    }
}

/* Packs op(b)[k0 .. k0+kc, j0 .. j0+nc] as panels of NR columns: bp[panel][k][j], zero-padded. */
static void pack_b(float *bp, operand b, int64_t k0, int kc, int64_t j0, int nc) {
    for (int q = 0; q < nc; q += NR) {
        float *dst = bp + (size_t)q * kc;
        int cols = nc - q < NR ? nc - q : NR;
        for (int k = 0; k < kc; k++) {
            float *row = dst + k * NR;
            if (!b.trans && cols == NR) {
                memcpy(row, b.p + (k0 + k) * b.ld + j0 + q, NR * sizeof(float));
                continue;
            }
            for (int j = 0; j < cols; j++) row[j] = at(b, k0 + k, j0 + q + j);
            for (int j = cols; j < NR; j++) row[j] = 0.0f;
        }
    }
}

/* ct [MR][NR] = sum_k ap[k][i] * bp[k][j] */
static void micro_portable(int kc, const float *ap, const float *bp, float *ct) {
    float acc[MR][NR];
    memset(acc, 0, sizeof acc);
    for (int k = 0; k < kc; k++) {
        const float *b = bp + k * NR;
        for (int i = 0; i < MR; i++) {
            float a = ap[k * MR + i];
            for (int j = 0; j < NR; j++) acc[i][j] += a * b[j];
        }
    }
    memcpy(ct, acc, sizeof acc);
}

#ifdef CPT_GEMM_X86
__attribute__((target("avx2,fma"))) static void micro_avx2(int kc, const float *ap, const float *bp, float *ct) {
    __m256 c00 = _mm256_setzero_ps(), c01 = _mm256_setzero_ps(), c10 = _mm256_setzero_ps(),
           c11 = _mm256_setzero_ps(), c20 = _mm256_setzero_ps(), c21 = _mm256_setzero_ps(),
           c30 = _mm256_setzero_ps(), c31 = _mm256_setzero_ps(), c40 = _mm256_setzero_ps(),
           c41 = _mm256_setzero_ps(), c50 = _mm256_setzero_ps(), c51 = _mm256_setzero_ps();
    for (int k = 0; k < kc; k++) {
        __m256 b0 = _mm256_loadu_ps(bp + k * NR), b1 = _mm256_loadu_ps(bp + k * NR + 8);
        const float *a = ap + k * MR;
        __m256 x;
        x = _mm256_broadcast_ss(a + 0); c00 = _mm256_fmadd_ps(x, b0, c00); c01 = _mm256_fmadd_ps(x, b1, c01);
        x = _mm256_broadcast_ss(a + 1); c10 = _mm256_fmadd_ps(x, b0, c10); c11 = _mm256_fmadd_ps(x, b1, c11);
        x = _mm256_broadcast_ss(a + 2); c20 = _mm256_fmadd_ps(x, b0, c20); c21 = _mm256_fmadd_ps(x, b1, c21);
        x = _mm256_broadcast_ss(a + 3); c30 = _mm256_fmadd_ps(x, b0, c30); c31 = _mm256_fmadd_ps(x, b1, c31);
        x = _mm256_broadcast_ss(a + 4); c40 = _mm256_fmadd_ps(x, b0, c40); c41 = _mm256_fmadd_ps(x, b1, c41);
        x = _mm256_broadcast_ss(a + 5); c50 = _mm256_fmadd_ps(x, b0, c50); c51 = _mm256_fmadd_ps(x, b1, c51);
    }
    _mm256_storeu_ps(ct + 0 * NR, c00); _mm256_storeu_ps(ct + 0 * NR + 8, c01);
    _mm256_storeu_ps(ct + 1 * NR, c10); _mm256_storeu_ps(ct + 1 * NR + 8, c11);
    _mm256_storeu_ps(ct + 2 * NR, c20); _mm256_storeu_ps(ct + 2 * NR + 8, c21);
    _mm256_storeu_ps(ct + 3 * NR, c30); _mm256_storeu_ps(ct + 3 * NR + 8, c31);
    _mm256_storeu_ps(ct + 4 * NR, c40); _mm256_storeu_ps(ct + 4 * NR + 8, c41);
    _mm256_storeu_ps(ct + 5 * NR, c50); _mm256_storeu_ps(ct + 5 * NR + 8, c51);
}
#endif

typedef void (*micro_fn)(int, const float *, const float *, float *);

static micro_fn pick_micro(void) {
#ifdef CPT_GEMM_X86
    if (getenv("CPT_GEMM_PORTABLE") == NULL && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return micro_avx2;
#endif
    return micro_portable;
}

/* One MC x NC tile of C, all of K. */
static void gemm_tile(micro_fn micro, float *c, int64_t ldc, operand a, operand b, int64_t i0, int mc, int64_t j0,
                      int nc, int64_t K, int accumulate, float *ap, float *bp) {
    float ct[MR * NR];
    for (int64_t k0 = 0; k0 < K; k0 += KC) {
        int kc = K - k0 < KC ? (int)(K - k0) : KC;
        pack_a(ap, a, i0, mc, k0, kc);
        pack_b(bp, b, k0, kc, j0, nc);
        int add = accumulate || k0 > 0;
        for (int p = 0; p < mc; p += MR) {
            int rows = mc - p < MR ? mc - p : MR;
            for (int q = 0; q < nc; q += NR) {
                int cols = nc - q < NR ? nc - q : NR;
                micro(kc, ap + (size_t)p * kc, bp + (size_t)q * kc, ct);
                for (int i = 0; i < rows; i++) {
                    float *crow = c + (i0 + p + i) * ldc + j0 + q;
                    if (add)
                        for (int j = 0; j < cols; j++) crow[j] += ct[i * NR + j];
                    else
                        for (int j = 0; j < cols; j++) crow[j] = ct[i * NR + j];
                }
            }
        }
    }
    if (K == 0 && !accumulate)
        for (int i = 0; i < mc; i++) memset(c + (i0 + i) * ldc + j0, 0, (size_t)nc * sizeof(float));
}

/* Packing buffers, one pair per thread, allocated on first use and kept: a fresh 350 KB per call meant fresh
 * pages (page faults) on every matmul. A cache of scratch memory only; no result depends on it. */
static _Thread_local float *tl_pack[2];

static float *pack_buffer(int which) {
    if (!tl_pack[which]) {
        size_t n = which == 0 ? (size_t)MC * KC : (size_t)NC * KC;
        tl_pack[which] = aligned_alloc(64, n * sizeof(float));
        KCHECK(tl_pack[which] != NULL, "gemm", "out of memory for packing buffers");
    }
    return tl_pack[which];
}

static void gemm_raw(float *c, int64_t M, int64_t N, int64_t K, operand a, operand b, int accumulate) {
    micro_fn micro = pick_micro();
    int64_t mt = (M + MC - 1) / MC, nt = (N + NC - 1) / NC, tiles = mt * nt;
#pragma omp parallel if(tiles > 1 && M * N * K >= (1 << 17))
    {
        float *ap = pack_buffer(0), *bp = pack_buffer(1);
#pragma omp for schedule(dynamic, 1)
        for (int64_t t = 0; t < tiles; t++) {
            int64_t i0 = (t / nt) * MC, j0 = (t % nt) * NC;
            int mc = M - i0 < MC ? (int)(M - i0) : MC, nc = N - j0 < NC ? (int)(N - j0) : NC;
            gemm_tile(micro, c, N, a, b, i0, mc, j0, nc, K, accumulate, ap, bp);
        }
    }
}

void cpt_k_gemm(cpt_tensor c, cpt_tensor a, int trans_a, cpt_tensor b, int trans_b, int accumulate) {
    const char *op = "gemm";
    cpt_kcheck_f32(op, "c", c, 2);
    cpt_kcheck_f32(op, "a", a, 2);
    cpt_kcheck_f32(op, "b", b, 2);
    int64_t M = trans_a ? a.shape[1] : a.shape[0], K = trans_a ? a.shape[0] : a.shape[1];
    int64_t Kb = trans_b ? b.shape[1] : b.shape[0], N = trans_b ? b.shape[0] : b.shape[1];
    KCHECK(K == Kb, op, "inner dims differ: %lld vs %lld", (long long)K, (long long)Kb);
    KCHECK(c.shape[0] == M && c.shape[1] == N, op, "c is [%lld, %lld], want [%lld, %lld]", (long long)c.shape[0],
           (long long)c.shape[1], (long long)M, (long long)N);
    if (M == 0 || N == 0) return;
    operand oa = {F(a), a.shape[1], trans_a}, ob = {F(b), b.shape[1], trans_b};
    gemm_raw(F(c), M, N, K, oa, ob, accumulate);
}

void cpt_k_matmul_fwd(cpt_tensor out, cpt_tensor inp, cpt_tensor w, cpt_tensor bias) {
    const char *op = "matmul_fwd";
    cpt_k_gemm(out, inp, 0, w, 1, 0);
    if (!cpt_tensor_present(bias)) return;
    cpt_kcheck_f32(op, "bias", bias, 1);
    int64_t N = out.shape[0], OC = out.shape[1];
    KCHECK(bias.shape[0] == OC, op, "bias has %lld entries, want %lld", (long long)bias.shape[0], (long long)OC);
    float *o = F(out);
    const float *bb = F(bias);
#pragma omp parallel for if(N * OC >= PAR_MIN)
    for (int64_t n = 0; n < N; n++)
        for (int64_t j = 0; j < OC; j++) o[n * OC + j] += bb[j];
}

void cpt_k_matmul_bwd(cpt_tensor dinp, cpt_tensor dw, cpt_tensor dbias, cpt_tensor dout, cpt_tensor inp,
                      cpt_tensor w) {
    const char *op = "matmul_bwd";
    if (cpt_tensor_present(dinp)) cpt_k_gemm(dinp, dout, 0, w, 0, 1);
    if (cpt_tensor_present(dw)) cpt_k_gemm(dw, dout, 1, inp, 0, 1);
    if (!cpt_tensor_present(dbias)) return;
    cpt_kcheck_f32(op, "dbias", dbias, 1);
    cpt_kcheck_f32(op, "dout", dout, 2);
    int64_t N = dout.shape[0], OC = dout.shape[1];
    KCHECK(dbias.shape[0] == OC, op, "dbias has %lld entries, want %lld", (long long)dbias.shape[0], (long long)OC);
    const float *d = F(dout);
    float *db = F(dbias);
    /* column blocks per thread, rows summed in order: deterministic */
    int64_t nb = (OC + 63) / 64;
#pragma omp parallel for schedule(static) if(N * OC >= PAR_MIN)
    for (int64_t blk = 0; blk < nb; blk++) {
        int64_t j0 = blk * 64, j1 = j0 + 64 < OC ? j0 + 64 : OC;
        for (int64_t n = 0; n < N; n++)
            for (int64_t j = j0; j < j1; j++) db[j] += d[n * OC + j];
    }
}
