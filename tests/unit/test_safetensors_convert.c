/* bf16/f16 <-> f32 conversions: exhaustive round trips over every 16-bit pattern, hand-checked rounding edges,
 * and f32 -> f16 against an independent nearest-value search (ties to even) over random and midpoint inputs. */
#include <float.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/safetensors.h"
#include "tests/check.h"

static float from_bits(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static uint32_t to_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

/* The exact value of a finite f16 pattern, computed with ldexp (a different route than the code under test). */
static double f16_value(uint16_t h) {
    int e = (h >> 10) & 31, m = h & 1023;
    double v = e == 0 ? ldexp(m, -24) : ldexp(1024 + m, e - 25);
    return (h & 0x8000) ? -v : v;
}

/* Reference f32 -> f16: binary search for the neighbours, pick the nearer, ties to the even pattern. */
static uint16_t ref_f32_to_f16(float x) {
    uint16_t sign = signbit(x) ? 0x8000 : 0;
    double a = fabs((double)x);
    if (isinf(x) || a >= 65520.0) return sign | 0x7c00;
    unsigned lo = 0, hi = 0x7bff; /* largest pattern with value <= a */
    while (lo < hi) {
        unsigned mid = (lo + hi + 1) / 2;
        if (f16_value((uint16_t)mid) <= a) lo = mid;
        else hi = mid - 1;
    }
    double below = f16_value((uint16_t)lo), above = lo == 0x7bff ? 65536.0 : f16_value((uint16_t)(lo + 1));
    unsigned r;
    if (a - below < above - a) r = lo;
    else if (a - below > above - a) r = lo + 1;
    else r = (lo & 1) ? lo + 1 : lo;
    return sign | (uint16_t)r;
}

static uint64_t rng_state = 0x9E3779B97F4A7C15ULL;
static uint32_t rnd32(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 16);
}

int main(void) {
    /* bf16 -> f32 -> bf16 is the identity on every non-NaN pattern; NaN stays NaN with its sign. */
    int bad_bf16 = 0, bad_f16 = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = cpt_bf16_to_f32((uint16_t)h);
        if (to_bits(f) != h << 16) bad_bf16++;
        uint16_t back = cpt_f32_to_bf16(f);
        int is_nan = (h & 0x7f80) == 0x7f80 && (h & 0x7f);
        if (is_nan ? !((back & 0x7f80) == 0x7f80 && (back & 0x7f) && (back & 0x8000) == (h & 0x8000)) : back != h)
            bad_bf16++;
        /* f16: decode equals the ldexp value; encode of the decode is the identity (NaN: stays NaN) */
        float g = cpt_f16_to_f32((uint16_t)h);
        int f16_nan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff);
        if (f16_nan) {
            if (!isnan(g)) bad_f16++;
            uint16_t b = cpt_f32_to_f16(g);
            if (!((b & 0x7c00) == 0x7c00 && (b & 0x3ff) && (b & 0x8000) == (h & 0x8000))) bad_f16++;
        } else {
            double want = (h & 0x7c00) == 0x7c00 ? ((h & 0x8000) ? -INFINITY : INFINITY) : f16_value((uint16_t)h);
            if ((double)g != want || !signbit(g) != !signbit(want)) bad_f16++;
            if (cpt_f32_to_f16(g) != h) bad_f16++;
        }
    }
    CHECK_EQ_INT(bad_bf16, 0);
    CHECK_EQ_INT(bad_f16, 0);

    /* bf16 rounding edges (bf16 keeps 7 fraction bits: near 1.0 the ulp is 2^-7). */
    CHECK_EQ_INT(cpt_f32_to_bf16(1.0f), 0x3f80);
    CHECK_EQ_INT(cpt_f32_to_bf16(1.0f + 0x1p-8f), 0x3f80);                /* tie, to even */
    CHECK_EQ_INT(cpt_f32_to_bf16(1.0f + 0x1p-7f + 0x1p-8f), 0x3f82);      /* tie from odd, up */
    CHECK_EQ_INT(cpt_f32_to_bf16(1.0f + 0x1p-8f + 0x1p-20f), 0x3f81);     /* just past the tie */
    CHECK_EQ_INT(cpt_f32_to_bf16(-1.0f - 0x1p-8f - 0x1p-20f), 0xbf81);
    CHECK_EQ_INT(cpt_f32_to_bf16(FLT_MAX), 0x7f80);                       /* rounds past the largest: inf */
    CHECK_EQ_INT(cpt_f32_to_bf16(from_bits(0x7f7f7fff)), 0x7f7f);
    CHECK_EQ_INT(cpt_f32_to_bf16(from_bits(0x7f7f8000)), 0x7f80);          /* tie from odd 0x7f7f: inf */
    CHECK_EQ_INT(cpt_f32_to_bf16(INFINITY), 0x7f80);
    CHECK_EQ_INT(cpt_f32_to_bf16(-INFINITY), 0xff80);
    CHECK_EQ_INT(cpt_f32_to_bf16(-0.0f), 0x8000);
    CHECK_EQ_INT(cpt_f32_to_bf16(from_bits(0x00008000)), 0x0000);          /* subnormal tie to even */
    CHECK_EQ_INT(cpt_f32_to_bf16(from_bits(0x00018000)), 0x0002);
    CHECK_EQ_INT(cpt_f32_to_bf16(from_bits(0x7fc00000)), 0x7fc0);
    CHECK_EQ_INT(cpt_f32_to_bf16(from_bits(0x7f800001)), 0x7fc0);          /* signalling NaN: quiet, not inf */
    CHECK_EQ_INT(cpt_f32_to_bf16(from_bits(0xffffffff)) & 0xffc0, 0xffc0);

    /* f16 edges. */
    CHECK_EQ_INT(cpt_f32_to_f16(1.0f), 0x3c00);
    CHECK_EQ_INT(cpt_f32_to_f16(65504.0f), 0x7bff);
    CHECK_EQ_INT(cpt_f32_to_f16(65519.996f), 0x7bff);
    CHECK_EQ_INT(cpt_f32_to_f16(65520.0f), 0x7c00);                       /* tie from odd 0x7bff: inf */
    CHECK_EQ_INT(cpt_f32_to_f16(-1e10f), 0xfc00);
    CHECK_EQ_INT(cpt_f32_to_f16(0x1p-24f), 0x0001);                       /* smallest subnormal */
    CHECK_EQ_INT(cpt_f32_to_f16(0x1p-25f), 0x0000);                       /* half of it: tie to even 0 */
    CHECK_EQ_INT(cpt_f32_to_f16(0x1.000002p-25f), 0x0001);                /* just above half */
    CHECK_EQ_INT(cpt_f32_to_f16(0x3p-25f), 0x0002);                       /* 1.5 ulp: tie from odd, up */
    CHECK_EQ_INT(cpt_f32_to_f16(0x1p-14f), 0x0400);                       /* smallest normal */
    CHECK_EQ_INT(cpt_f32_to_f16(0x1p-14f - 0x1p-25f), 0x0400);            /* tie 0x3ff/0x400: even is 0x400 */
    CHECK_EQ_INT(cpt_f32_to_f16(-0.0f), 0x8000);
    CHECK_EQ_INT(cpt_f32_to_f16(1e-30f), 0x0000);
    CHECK_EQ_INT(cpt_f32_to_f16(from_bits(0x7f800001)) & 0x7e00, 0x7e00); /* NaN, quiet */
    CHECK(cpt_f16_to_f32(0x0001) == 0x1p-24f);
    CHECK(cpt_f16_to_f32(0x03ff) == 0x3ffp-24f);
    CHECK(cpt_f16_to_f32(0x7bff) == 65504.0f);
    CHECK(isinf(cpt_f16_to_f32(0xfc00)) && cpt_f16_to_f32(0xfc00) < 0);
    CHECK(to_bits(cpt_f16_to_f32(0x8000)) == 0x80000000u);

    /* f32 -> f16 against the reference search: every midpoint between neighbouring f16 values (and the
     * floats one ulp either side of it), plus random floats over the f16 range. */
    int mismatches = 0, tested = 0;
    for (uint32_t h = 0; h < 0x7bff; h++) {
        float mid = (float)((f16_value((uint16_t)h) + f16_value((uint16_t)(h + 1))) / 2);
        float cases[3] = {mid, nextafterf(mid, 0), nextafterf(mid, INFINITY)};
        for (int k = 0; k < 3; k++) {
            for (int s = 0; s < 2; s++) {
                float x = s ? -cases[k] : cases[k];
                tested++;
                if (cpt_f32_to_f16(x) != ref_f32_to_f16(x)) {
                    if (mismatches++ < 5) fprintf(stderr, "f16 mismatch at %a: %04x vs %04x\n", (double)x,
                                                  cpt_f32_to_f16(x), ref_f32_to_f16(x));
                }
            }
        }
    }
    for (int i = 0; i < 300000; i++) {
        /* exponents -30..17 cover underflow, subnormals, normals and overflow */
        float x = from_bits(((uint32_t)(97 + rnd32() % 48) << 23) | (rnd32() & 0x7fffff) | (rnd32() & 1u) << 31);
        tested++;
        if (cpt_f32_to_f16(x) != ref_f32_to_f16(x) && mismatches++ < 10)
            fprintf(stderr, "f16 mismatch at %a\n", (double)x);
    }
    CHECK_EQ_INT(mismatches, 0);
    CHECK(tested > 400000);

    /* Bulk forms equal the scalar ones, from an unaligned source. */
    unsigned char raw[2 * 257 + 1];
    uint16_t hs[257];
    for (int i = 0; i < 257; i++) hs[i] = (uint16_t)(rnd32() & 0x7bff);
    memcpy(raw + 1, hs, sizeof hs);
    float a[257], b[257];
    cpt_bf16_to_f32_n(raw + 1, a, 257);
    cpt_f16_to_f32_n(raw + 1, b, 257);
    int bulk_bad = 0;
    for (int i = 0; i < 257; i++)
        bulk_bad += to_bits(a[i]) != to_bits(cpt_bf16_to_f32(hs[i])) || to_bits(b[i]) != to_bits(cpt_f16_to_f32(hs[i]));
    uint16_t o1[257], o2[257];
    cpt_f32_to_bf16_n(b, o1, 257);
    cpt_f32_to_f16_n(b, o2, 257);
    for (int i = 0; i < 257; i++) bulk_bad += o1[i] != cpt_f32_to_bf16(b[i]) || o2[i] != hs[i];
    CHECK_EQ_INT(bulk_bad, 0);

    /* dtype table */
    cpt_dtype dt;
    CHECK(cpt_dtype_from_name("BF16", &dt) == 0 && dt == CPT_DT_BF16);
    CHECK(cpt_dtype_from_name("bf16", &dt) == -1);
    CHECK_EQ_STR(cpt_dtype_name(CPT_DT_F64), "F64");
    CHECK_EQ_INT(cpt_dtype_size(CPT_DT_I64), 8);
    CHECK_EQ_INT(cpt_dtype_size(CPT_DT_U8), 1);
    return check_summary("test_safetensors_convert");
}
