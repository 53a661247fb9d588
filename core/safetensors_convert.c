/* dtypes and the bf16/f16 <-> f32 conversions (round to nearest, ties to even; NaN stays NaN, quieted). */
#include <string.h>

#include "core/safetensors.h"

static const struct { cpt_dtype dt; const char *name; size_t size; } dtypes[] = {
    {CPT_DT_F32, "F32", 4}, {CPT_DT_BF16, "BF16", 2}, {CPT_DT_F16, "F16", 2}, {CPT_DT_I32, "I32", 4},
    {CPT_DT_I64, "I64", 8}, {CPT_DT_U8, "U8", 1},     {CPT_DT_F64, "F64", 8},
};
#define NDTYPES (sizeof dtypes / sizeof dtypes[0])

size_t cpt_dtype_size(cpt_dtype dt) {
    for (size_t i = 0; i < NDTYPES; i++)
        if (dtypes[i].dt == dt) return dtypes[i].size;
    return 0;
}

const char *cpt_dtype_name(cpt_dtype dt) {
    for (size_t i = 0; i < NDTYPES; i++)
        if (dtypes[i].dt == dt) return dtypes[i].name;
    return "?";
}

int cpt_dtype_from_name(const char *name, cpt_dtype *out) {
    for (size_t i = 0; i < NDTYPES; i++)
        if (strcmp(dtypes[i].name, name) == 0) { *out = dtypes[i].dt; return 0; }
    return -1;
}

static inline uint32_t f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

float cpt_bf16_to_f32(uint16_t h) { return bits_f32((uint32_t)h << 16); }

uint16_t cpt_f32_to_bf16(float f) {
    uint32_t u = f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u); /* NaN: keep sign, quiet */
    /* Adding 0x7fff plus the lowest kept bit rounds ties to even; a carry into the exponent is the right answer
     * (up to infinity for values past the largest bf16). */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

float cpt_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
    if (exp == 0x1f) return bits_f32(sign | 0x7f800000u | (mant << 13)); /* inf, NaN with its payload */
    if (exp == 0) {
        if (mant == 0) return bits_f32(sign);
        /* Subnormal: mant * 2^-24. Normalise: shift until the implicit bit (0x400) is set. */
        int e = -1;
        do { mant <<= 1; e++; } while (!(mant & 0x400u));
        return bits_f32(sign | (uint32_t)(127 - 15 - e) << 23 | (mant & 0x3ffu) << 13);
    }
    return bits_f32(sign | (exp + 127 - 15) << 23 | mant << 13);
}

uint16_t cpt_f32_to_f16(float f) {
    uint32_t u = f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return sign | 0x7e00u | (uint16_t)((a >> 13) & 0x3ffu); /* NaN, quiet */
    if (a >= 0x477ff000u) return sign | 0x7c00u; /* >= 65520 (half-way past 65504) rounds to inf; inf stays */
    if (a >= 0x38800000u) {                     /* >= 2^-14: a normal f16 */
        a += 0xfffu + ((a >> 13) & 1u);          /* round the 13 dropped bits, ties to even */
        a -= (uint32_t)(127 - 15) << 23;         /* rebias the exponent */
        return sign | (uint16_t)(a >> 13);
    }
    if (a <= 0x33000000u) return sign; /* <= 2^-25: half of the smallest subnormal or less rounds to zero */
    /* Subnormal: result = round(value / 2^-24) with value = m * 2^(e - 150), m the 24-bit significand. */
    uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126 - e; /* 14..24 for e in 102..112 */
    uint32_t r = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1u))) r++; /* may carry into 0x400: the smallest normal, correct */
    return sign | (uint16_t)r;
}

/* Bulk forms: the sources may be unaligned (tensors inside a mapping), so elements are loaded with memcpy,
 * which compilers turn into plain loads. */
void cpt_bf16_to_f32_n(const void *in, float *out, size_t n) {
    const unsigned char *p = in;
    for (size_t i = 0; i < n; i++) { uint16_t h; memcpy(&h, p + 2 * i, 2); out[i] = cpt_bf16_to_f32(h); }
}

void cpt_f16_to_f32_n(const void *in, float *out, size_t n) {
    const unsigned char *p = in;
    for (size_t i = 0; i < n; i++) { uint16_t h; memcpy(&h, p + 2 * i, 2); out[i] = cpt_f16_to_f32(h); }
}

void cpt_f32_to_bf16_n(const float *in, uint16_t *out, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = cpt_f32_to_bf16(in[i]);
}

void cpt_f32_to_f16_n(const float *in, uint16_t *out, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = cpt_f32_to_f16(in[i]);
}
