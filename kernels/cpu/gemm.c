/* fp32 GEMM for the CPU backend: c [M, N] (+)= op(a) [M, K] @ op(b) [K, N].
 *
 * Blocked the usual way (GotoBLAS order): for each NC column block and KC slice of K, the B block is packed once
 * into NR-column panels; the rows of C are cut into tiles (up to MC rows) shared among threads, each packing its
 * A block into MR-row panels; a register-blocked MR x NR micro-kernel multiplies panel pairs. Transposes are
 * absorbed by the packing. Each element of C is owned by one thread per slice and the slices run in order, so the
 * result is bitwise the same whatever the thread count. Micro-kernels: AVX-512, AVX2+FMA (picked at run time from
 * the CPU; CPT_GEMM_KERNEL=avx512|avx2|portable forces one) and portable C. */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "core/par.h"
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

/* Packs op(a)[i0 .. i0+mc, k0 .. k0+kc] as panels of MR rows: ap[panel][k][i], zero-padded. Reads run along
 * memory rows in both layouts. */
static void pack_a(float *ap, operand a, int64_t i0, int mc, int64_t k0, int kc) {
    for (int p = 0; p < mc; p += MR) {
        float *dst = ap + (size_t)p * kc;
        int rows = mc - p < MR ? mc - p : MR;
        if (rows < MR) memset(dst, 0, sizeof(float) * (size_t)kc * MR);
        if (!a.trans) {
            for (int i = 0; i < rows; i++) {
                const float *src = a.p + (i0 + p + i) * a.ld + k0;
                for (int k = 0; k < kc; k++) dst[k * MR + i] = src[k];
            }
        } else {
            for (int k = 0; k < kc; k++) {
                const float *src = a.p + (k0 + k) * a.ld + i0 + p;
                for (int i = 0; i < rows; i++) dst[k * MR + i] = src[i];
            }
        }
    }
}

/* Packs op(b)[k0 .. k0+kc, j0 .. j0+nc] as panels of NR columns: bp[panel][k][j], zero-padded. */
static void pack_b(float *bp, operand b, int64_t k0, int kc, int64_t j0, int nc) {
    for (int q = 0; q < nc; q += NR) {
        float *dst = bp + (size_t)q * kc;
        int cols = nc - q < NR ? nc - q : NR;
        if (cols < NR) memset(dst, 0, sizeof(float) * (size_t)kc * NR);
        if (!b.trans) {
            for (int k = 0; k < kc; k++) memcpy(dst + k * NR, b.p + (k0 + k) * b.ld + j0 + q, sizeof(float) * (size_t)cols);
        } else {
            for (int j = 0; j < cols; j++) {
                const float *src = b.p + (j0 + q + j) * b.ld + k0;
                for (int k = 0; k < kc; k++) dst[k * NR + j] = src[k];
            }
        }
    }
}

/* c [MR rows, stride ldc][NR] (+)= sum_k ap[k][i] * bp[k][j] */
static void micro_portable(int kc, const float *ap, const float *bp, float *c, int64_t ldc, int add) {
    float acc[MR][NR];
    memset(acc, 0, sizeof acc);
    for (int k = 0; k < kc; k++) {
        const float *b = bp + k * NR;
        for (int i = 0; i < MR; i++) {
            float a = ap[k * MR + i];
            for (int j = 0; j < NR; j++) acc[i][j] += a * b[j];
        }
    }
    for (int i = 0; i < MR; i++)
        for (int j = 0; j < NR; j++) c[i * ldc + j] = add ? c[i * ldc + j] + acc[i][j] : acc[i][j];
}

#ifdef CPT_GEMM_X86
__attribute__((target("avx2,fma"))) static void micro_avx2(int kc, const float *ap, const float *bp, float *c, int64_t ldc,
                                                            int add) {
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
#define STORE_ROW(i, r0, r1)                                                                          \
    do {                                                                                              \
        float *cr = c + (i) * ldc;                                                                    \
        if (add) {                                                                                    \
            r0 = _mm256_add_ps(_mm256_loadu_ps(cr), r0);                                              \
            r1 = _mm256_add_ps(_mm256_loadu_ps(cr + 8), r1);                                          \
        }                                                                                             \
        _mm256_storeu_ps(cr, r0);                                                                     \
        _mm256_storeu_ps(cr + 8, r1);                                                                 \
    } while (0)
    STORE_ROW(0, c00, c01);
    STORE_ROW(1, c10, c11);
    STORE_ROW(2, c20, c21);
    STORE_ROW(3, c30, c31);
    STORE_ROW(4, c40, c41);
    STORE_ROW(5, c50, c51);
#undef STORE_ROW
}
#endif

#ifdef CPT_GEMM_X86
/* AVX-512: one zmm per row of the 6 x 16 tile; k unrolled by two into two accumulator sets (12 independent FMA
 * chains keep both FMA ports busy), summed at the end in a fixed order. */
__attribute__((target("avx512f"))) static void micro_avx512(int kc, const float *ap, const float *bp, float *c,
                                                             int64_t ldc, int add) {
    __m512 x0 = _mm512_setzero_ps(), x1 = _mm512_setzero_ps(), x2 = _mm512_setzero_ps(), x3 = _mm512_setzero_ps(),
           x4 = _mm512_setzero_ps(), x5 = _mm512_setzero_ps(), y0 = _mm512_setzero_ps(), y1 = _mm512_setzero_ps(),
           y2 = _mm512_setzero_ps(), y3 = _mm512_setzero_ps(), y4 = _mm512_setzero_ps(), y5 = _mm512_setzero_ps();
    int k = 0;
    for (; k + 1 < kc; k += 2) {
        const float *a = ap + k * MR;
        __m512 b0 = _mm512_loadu_ps(bp + k * NR), b1 = _mm512_loadu_ps(bp + (k + 1) * NR);
        x0 = _mm512_fmadd_ps(_mm512_set1_ps(a[0]), b0, x0);
        x1 = _mm512_fmadd_ps(_mm512_set1_ps(a[1]), b0, x1);
        x2 = _mm512_fmadd_ps(_mm512_set1_ps(a[2]), b0, x2);
        x3 = _mm512_fmadd_ps(_mm512_set1_ps(a[3]), b0, x3);
        x4 = _mm512_fmadd_ps(_mm512_set1_ps(a[4]), b0, x4);
        x5 = _mm512_fmadd_ps(_mm512_set1_ps(a[5]), b0, x5);
        y0 = _mm512_fmadd_ps(_mm512_set1_ps(a[MR + 0]), b1, y0);
        y1 = _mm512_fmadd_ps(_mm512_set1_ps(a[MR + 1]), b1, y1);
        y2 = _mm512_fmadd_ps(_mm512_set1_ps(a[MR + 2]), b1, y2);
        y3 = _mm512_fmadd_ps(_mm512_set1_ps(a[MR + 3]), b1, y3);
        y4 = _mm512_fmadd_ps(_mm512_set1_ps(a[MR + 4]), b1, y4);
        y5 = _mm512_fmadd_ps(_mm512_set1_ps(a[MR + 5]), b1, y5);
    }
    if (k < kc) {
        const float *a = ap + k * MR;
        __m512 b0 = _mm512_loadu_ps(bp + k * NR);
        x0 = _mm512_fmadd_ps(_mm512_set1_ps(a[0]), b0, x0);
        x1 = _mm512_fmadd_ps(_mm512_set1_ps(a[1]), b0, x1);
        x2 = _mm512_fmadd_ps(_mm512_set1_ps(a[2]), b0, x2);
        x3 = _mm512_fmadd_ps(_mm512_set1_ps(a[3]), b0, x3);
        x4 = _mm512_fmadd_ps(_mm512_set1_ps(a[4]), b0, x4);
        x5 = _mm512_fmadd_ps(_mm512_set1_ps(a[5]), b0, x5);
    }
    __m512 r[MR] = {_mm512_add_ps(x0, y0), _mm512_add_ps(x1, y1), _mm512_add_ps(x2, y2),
                    _mm512_add_ps(x3, y3), _mm512_add_ps(x4, y4), _mm512_add_ps(x5, y5)};
    for (int i = 0; i < MR; i++) {
        float *cr = c + i * ldc;
        _mm512_storeu_ps(cr, add ? _mm512_add_ps(_mm512_loadu_ps(cr), r[i]) : r[i]);
    }
}
#endif

typedef void (*micro_fn)(int, const float *, const float *, float *, int64_t, int);

static micro_fn pick_micro(void) {
#ifdef CPT_GEMM_X86
    const char *force = getenv("CPT_GEMM_KERNEL"); /* avx512 | avx2 | portable: for tests and comparisons */
    int any = force == NULL || force[0] == 0;
    if ((any || !strcmp(force, "avx512")) && __builtin_cpu_supports("avx512f")) return micro_avx512;
    if ((any || !strcmp(force, "avx2")) && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return micro_avx2;
#endif
    return micro_portable;
}

/* C [mc rows from i0][nc cols from j0] (+)= packed A block x packed B block. */
static void macro_kernel(micro_fn micro, float *c, int64_t ldc, int64_t i0, int mc, int64_t j0, int nc, int kc,
                         const float *ap, const float *bp, int add) {
    float ct[MR * NR];
    for (int q = 0; q < nc; q += NR) {
        int cols = nc - q < NR ? nc - q : NR;
        for (int p = 0; p < mc; p += MR) {
            int rows = mc - p < MR ? mc - p : MR;
            float *cblk = c + (i0 + p) * ldc + j0 + q;
            if (rows == MR && cols == NR) {
                micro(kc, ap + (size_t)p * kc, bp + (size_t)q * kc, cblk, ldc, add);
                continue;
            }
            micro(kc, ap + (size_t)p * kc, bp + (size_t)q * kc, ct, NR, 0);
            for (int i = 0; i < rows; i++)
                for (int j = 0; j < cols; j++) cblk[i * ldc + j] = add ? cblk[i * ldc + j] + ct[i * NR + j] : ct[i * NR + j];
        }
    }
}

/* Packing buffers, allocated on first use per thread and kept: fresh buffers on every call meant fresh pages
 * (page faults) on every matmul. A cache of scratch memory only; no result depends on it. */
static _Thread_local float *tl_pack_a, *tl_pack_b;

static float *cached(float **slot, size_t n) {
    if (!*slot) {
        *slot = aligned_alloc(64, n * sizeof(float));
        KCHECK(*slot != NULL, "gemm", "out of memory for packing buffers");
    }
    return *slot;
}

/* Row tile t of an NC x KC block: A's rows packed into this thread's buffer, then multiplied by the packed B. */
static inline void gemm_tile(float *c, int64_t ldc, int64_t M, int64_t mcb, int64_t t, operand a, int64_t j0, int nc,
                             int64_t k0, int kc, int add, float *ap, const float *bp, micro_fn micro) {
    int64_t i0 = t * mcb;
    int mc = M - i0 < mcb ? (int)(M - i0) : (int)mcb;
    pack_a(ap, a, i0, mc, k0, kc);
    macro_kernel(micro, c, ldc, i0, mc, j0, nc, kc, ap, bp, add);
}

/* One NC x KC block of the GotoBLAS loop: B's block packed once (threads share it), then the MC row tiles, each
 * thread packing its own A block. team: inside a parallel region (the loops are shared out, barrier after each);
 * else the caller's thread does all of it (core/par.h). */
static void gemm_block(float *c, int64_t ldc, int64_t M, int64_t mcb, int64_t mt, operand a, operand b, int64_t j0,
                       int nc, int64_t k0, int kc, int add, float *ap, float *bp, micro_fn micro, int team) {
    if (team) {
#pragma omp for schedule(static)
        for (int q = 0; q < nc; q += NR) pack_b(bp + (size_t)q * kc, b, k0, kc, j0 + q, nc - q < NR ? nc - q : NR);
#pragma omp for schedule(dynamic, 1)
        for (int64_t t = 0; t < mt; t++) gemm_tile(c, ldc, M, mcb, t, a, j0, nc, k0, kc, add, ap, bp, micro);
    } else {
        for (int q = 0; q < nc; q += NR) pack_b(bp + (size_t)q * kc, b, k0, kc, j0 + q, nc - q < NR ? nc - q : NR);
        for (int64_t t = 0; t < mt; t++) gemm_tile(c, ldc, M, mcb, t, a, j0, nc, k0, kc, add, ap, bp, micro);
    }
}

/* The NC column blocks and KC slices in order: every element of C is updated by one thread per slice, slices in
 * order (barrier between them), so the result is the same on any thread count. */
static void gemm_blocks(float *c, int64_t ldc, int64_t M, int64_t N, int64_t K, int64_t mcb, int64_t mt, operand a,
                        operand b, int accumulate, float *bp, micro_fn micro, int team) {
    float *ap = cached(&tl_pack_a, (size_t)MC * KC);
    for (int64_t j0 = 0; j0 < N; j0 += NC) {
        int nc = N - j0 < NC ? (int)(N - j0) : NC;
        for (int64_t k0 = 0; k0 < K; k0 += KC) {
            int kc = K - k0 < KC ? (int)(K - k0) : KC;
            gemm_block(c, ldc, M, mcb, mt, a, b, j0, nc, k0, kc, accumulate || k0 > 0, ap, bp, micro, team);
        }
    }
}

static void gemm_raw(float *c, int64_t ldc, int64_t M, int64_t N, int64_t K, operand a, operand b, int accumulate) {
    micro_fn micro = pick_micro();
    float *bp = cached(&tl_pack_b, (size_t)NC * KC);
    int par = cpt_par(M * N * K, 1 << 17);
    /* Row tiles: MC, or smaller so every thread gets at least two (the sums do not depend on the tiling: each
     * element of C is summed over the same KC slices in the same order whatever the tile height). */
    int64_t mcb = MC, want = par ? 2 * (int64_t)omp_get_max_threads() : 1;
    while (mcb > MR && (M + mcb - 1) / mcb < want) mcb -= MR;
    int64_t mt = (M + mcb - 1) / mcb;
    if (K == 0) {
        if (!accumulate)
            for (int64_t i = 0; i < M; i++) memset(c + i * ldc, 0, (size_t)N * sizeof(float));
        return;
    }
    if (par) {
#pragma omp parallel
        gemm_blocks(c, ldc, M, N, K, mcb, mt, a, b, accumulate, bp, micro, 1);
    } else
        gemm_blocks(c, ldc, M, N, K, mcb, mt, a, b, accumulate, bp, micro, 0);
}

void cpt_cpu_gemm_strided(float *c, int64_t ldc, int64_t M, int64_t N, int64_t K, const float *a, int64_t lda,
                          int trans_a, const float *b, int64_t ldb, int trans_b, int accumulate) {
    if (M == 0 || N == 0) return;
    operand oa = {a, lda, trans_a}, ob = {b, ldb, trans_b};
    gemm_raw(c, ldc, M, N, K, oa, ob, accumulate);
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
    gemm_raw(F(c), N, M, N, K, oa, ob, accumulate);
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
    CPT_PAR_FOR(cpt_par(N * OC, PAR_MIN),
        for (int64_t n = 0; n < N; n++)
            for (int64_t j = 0; j < OC; j++) o[n * OC + j] += bb[j];);
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
    CPT_PAR_FOR(cpt_par(N * OC, PAR_MIN),
        for (int64_t blk = 0; blk < nb; blk++) {
            int64_t j0 = blk * 64, j1 = j0 + 64 < OC ? j0 + 64 : OC;
            for (int64_t n = 0; n < N; n++)
                for (int64_t j = j0; j < j1; j++) db[j] += d[n * OC + j];
        });
}
