/* fp16.c — IEEE binary16 and bfloat16 <-> binary32 conversions (portable, bit-exact). */
#include "kernels/quant.h"

#include <stdint.h>
#include <string.h>

/* Integer-only conversions: exact, independent of the FPU's rounding mode and
 * of denormal flushing (FTZ/DAZ), and identical to the hardware converters
 * (F16C vcvtph2ps / vcvtps2ph with round-to-nearest-even) on every input,
 * NaN payloads included. */

static inline uint32_t rp_f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float rp_bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

float rp_fp16_to_fp32(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    const uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;

    if (exp == 0x1f) {
        /* Inf stays Inf; NaN keeps its payload (shifted to the top of the
         * fp32 mantissa) and comes out quiet, as VCVTPH2PS makes it. */
        return rp_bits_f32(sign | 0x7f800000u | (mant ? 0x400000u : 0u) | (mant << 13));
    }
    if (exp != 0) {
        /* Normal: rebias the exponent 15 -> 127. */
        return rp_bits_f32(sign | ((exp + 112u) << 23) | (mant << 13));
    }
    if (mant == 0) return rp_bits_f32(sign); /* +-0 */

    /* Subnormal m * 2^-24: normalize. The leading 1 is at bit 10 after at
     * most 10 shifts; 2^-14 has biased fp32 exponent 113. */
    uint32_t e = 113;
    while (!(mant & 0x400u)) {
        mant <<= 1;
        e--;
    }
    return rp_bits_f32(sign | (e << 23) | ((mant & 0x3ffu) << 13));
}

uint16_t rp_fp32_to_fp16(float f) {
    const uint32_t x = rp_f32_bits(f);
    const uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    const uint32_t ax = x & 0x7fffffffu;

    if (ax > 0x7f800000u) {
        /* NaN: keep the top 10 payload bits and force the quiet bit so a
         * signalling NaN whose payload lives in the low bits stays a NaN. */
        return (uint16_t)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
    }
    /* 65520 (0x477ff000) is the midpoint between 65504 (max half, odd
     * mantissa) and 65536: ties-to-even rounds it up, so it and everything
     * above (Inf included) becomes Inf. */
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);

    if (ax >= 0x38800000u) {
        /* Result is a normal half (|f| >= 2^-14 before rounding). Rebias the
         * exponent 127 -> 15 and round the 13 dropped bits to nearest even; a
         * mantissa carry correctly bumps the exponent. */
        uint32_t h = (ax - 0x38000000u) >> 13;
        const uint32_t rem = ax & 0x1fffu;
        if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++;
        return (uint16_t)(sign | h);
    }
    /* |f| <= 2^-25 is at most half the smallest subnormal 2^-24: the tie at
     * exactly 2^-25 goes to the even neighbour, zero. */
    if (ax <= 0x33000000u) return sign;

    /* Subnormal half: value = mant * 2^(e-150) = q * 2^-24 with
     * q = mant >> (126 - e), shift in [14, 24] for e in [102, 112]. Rounding
     * may yield q == 0x400, which is exactly the smallest normal's encoding. */
    const uint32_t e = ax >> 23;
    const uint32_t mant = (ax & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126u - e;
    uint32_t q = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (q & 1u))) q++;
    return (uint16_t)(sign | q);
}

float rp_bf16_to_fp32(uint16_t h) {
    /* bf16 is the top half of an fp32: exact for every pattern (NaN too). */
    return rp_bits_f32((uint32_t)h << 16);
}

uint16_t rp_fp32_to_bf16(float f) {
    const uint32_t x = rp_f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) {
        /* NaN: truncate and force the quiet bit (bit 6 of the bf16), else a
         * NaN with only low payload bits would truncate to Inf. */
        return (uint16_t)((x >> 16) | 0x40u);
    }
    /* Round to nearest even on the 16 dropped bits. Values within half an
     * ulp of the max finite round up to Inf, as IEEE requires; subnormals
     * round like everything else (no flushing). */
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}
