/* quant_legacy_ref.c — scalar reference (de)quantization of the 32-element types Q4_1, Q5_0, Q5_1, IQ4_NL and of IQ4_XS, bit-identical to ggml. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/quant.h"
#include "kernels/ref/quant_util.h"

/* See quant_ref.c: one rounding per float operation, in ggml's order. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

/* trunc(t) clamped to [0, hi] (ggml converts x + 0.5 with a plain cast,
 * which truncates; the guard keeps non-finite input defined). */
static inline uint8_t rp_trunc_code(float t, int hi) {
    return (uint8_t)(t < (float)hi ? (t > 0.0f ? (int)t : 0) : hi);
}

/* ------------------------------------------------------------------ Q4_1 */

/* d = (max - min)/15, m = min; q = min(15, trunc((x - min)/d + 0.5)), as
 * ggml's quantize_row_q4_1_ref. Value = d*q + m. */
void rp_quantize_q4_1(const float *x, rp_block_q4_1 *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += RP_QK4_1) {
        float min = FLT_MAX, max = -FLT_MAX;
        for (int j = 0; j < RP_QK4_1; j++) {
            if (x[j] < min) min = x[j];
            if (x[j] > max) max = x[j];
        }
        const float d = (max - min) / 15;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = rp_fp32_to_fp16(d);
        y[i].m = rp_fp32_to_fp16(min);
        for (int j = 0; j < RP_QK4_1 / 2; j++) {
            const uint8_t lo = rp_trunc_code((x[j] - min) * id + 0.5f, 15);
            const uint8_t hi = rp_trunc_code((x[j + RP_QK4_1 / 2] - min) * id + 0.5f, 15);
            y[i].qs[j] = (uint8_t)(lo | (hi << 4));
        }
    }
}

void rp_dequantize_q4_1(const rp_block_q4_1 *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, y += RP_QK4_1) {
        const float d = rp_fp16_to_fp32(x[i].d), m = rp_fp16_to_fp32(x[i].m);
        for (int j = 0; j < RP_QK4_1 / 2; j++) {
            y[j] = (x[i].qs[j] & 0x0F) * d + m;
            y[j + RP_QK4_1 / 2] = (x[i].qs[j] >> 4) * d + m;
        }
    }
}

/* ------------------------------------------------------------- Q5_0/Q5_1 */

/* Splits 32 5-bit codes into Q4_0-order nibbles and the qh bit field. */
static void rp_pack_q5(const uint8_t *L, uint8_t *qs, uint8_t *qh_out) {
    uint32_t qh = 0;
    for (int j = 0; j < 16; j++) {
        qs[j] = (uint8_t)((L[j] & 0x0F) | ((L[j + 16] & 0x0F) << 4));
        qh |= (uint32_t)((L[j] & 0x10u) >> 4) << j;
        qh |= (uint32_t)((L[j + 16] & 0x10u) >> 4) << (j + 16);
    }
    memcpy(qh_out, &qh, 4); /* little-endian, as ggml's memcpy on x86 / arm */
}

/* The 5-bit code of element j (0..31). */
static inline int rp_q5_code(const uint8_t *qs, const uint8_t *qh_bytes, int j) {
    uint32_t qh;
    memcpy(&qh, qh_bytes, 4);
    const int lo = j < 16 ? (qs[j] & 0x0F) : (qs[j - 16] >> 4);
    return lo | (int)(((qh >> j) & 1u) << 4);
}

/* d = max/-16 (max: the signed value of largest magnitude, first on ties),
 * q = min(31, trunc(x/d + 16.5)); value = (q - 16)*d (quantize_row_q5_0_ref). */
void rp_quantize_q5_0(const float *x, rp_block_q5_0 *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += RP_QK5_0) {
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < RP_QK5_0; j++) {
            if (amax < fabsf(x[j])) {
                amax = fabsf(x[j]);
                max = x[j];
            }
        }
        const float d = max / -16;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = rp_fp32_to_fp16(d);
        uint8_t L[RP_QK5_0];
        for (int j = 0; j < RP_QK5_0; j++) L[j] = rp_trunc_code(x[j] * id + 16.5f, 31);
        rp_pack_q5(L, y[i].qs, y[i].qh);
    }
}

void rp_dequantize_q5_0(const rp_block_q5_0 *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, y += RP_QK5_0) {
        const float d = rp_fp16_to_fp32(x[i].d);
        for (int j = 0; j < RP_QK5_0; j++) y[j] = (rp_q5_code(x[i].qs, x[i].qh, j) - 16) * d;
    }
}

/* d = (max - min)/31, m = min, q = trunc((x - min)/d + 0.5) (quantize_row_q5_1_ref;
 * the clamp at 31 never binds for finite input, it only keeps the code 5-bit). */
void rp_quantize_q5_1(const float *x, rp_block_q5_1 *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += RP_QK5_1) {
        float min = FLT_MAX, max = -FLT_MAX;
        for (int j = 0; j < RP_QK5_1; j++) {
            if (x[j] < min) min = x[j];
            if (x[j] > max) max = x[j];
        }
        const float d = (max - min) / 31;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = rp_fp32_to_fp16(d);
        y[i].m = rp_fp32_to_fp16(min);
        uint8_t L[RP_QK5_1];
        for (int j = 0; j < RP_QK5_1; j++) L[j] = rp_trunc_code((x[j] - min) * id + 0.5f, 31);
        rp_pack_q5(L, y[i].qs, y[i].qh);
    }
}

void rp_dequantize_q5_1(const rp_block_q5_1 *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, y += RP_QK5_1) {
        const float d = rp_fp16_to_fp32(x[i].d), m = rp_fp16_to_fp32(x[i].m);
        for (int j = 0; j < RP_QK5_1; j++) y[j] = rp_q5_code(x[i].qs, x[i].qh, j) * d + m;
    }
}

/* ------------------------------------------------------------ IQ4_NL/XS */

/* Index of the grid value nearest to v (ggml's best_index_int8: binary
 * search, ties to the upper neighbour). */
static int rp_iq4_best_index(float v) {
    const int8_t *val = rp_iq4nl_values;
    if (v <= val[0]) return 0;
    if (v >= val[15]) return 15;
    int ml = 0, mu = 15;
    while (mu - ml > 1) {
        const int mav = (ml + mu) / 2;
        if (v < val[mav]) mu = mav;
        else ml = mav;
    }
    return v - val[mu - 1] < val[mu] - v ? mu - 1 : mu;
}

/* The scale search of ggml's quantize_row_iq4_nl_impl for one group of 32
 * with no importance matrix (weights x^2) and ntry = 7, as ggml_quantize_chunk
 * runs it: start from d = max/127 (the grid's -127 on the largest value),
 * least-squares refit, then try the 15 grid densities (k - 127)/max and keep
 * the best fit. Returns the group's scale (0 for an all-zero group); the
 * codes are recomputed by the caller against the stored scale. */
static float rp_iq4_group_scale(const float *xb) {
    const int8_t *values = rp_iq4nl_values;
    float weight[32];
    for (int j = 0; j < 32; j++) weight[j] = xb[j] * xb[j];
    float amax = 0, max = 0;
    for (int j = 0; j < 32; j++) {
        const float ax = fabsf(xb[j]);
        if (ax > amax) {
            amax = ax;
            max = xb[j];
        }
    }
    if (amax < RP_GROUP_MAX_EPS) return 0.0f;
    float d = -max / values[0];
    float id = 1 / d;
    float sumqx = 0, sumq2 = 0;
    for (int j = 0; j < 32; j++) {
        const float q = values[rp_iq4_best_index(id * xb[j])];
        const float w = weight[j];
        sumqx += w * q * xb[j];
        sumq2 += w * q * q;
    }
    d = sumq2 > 0 ? sumqx / sumq2 : 0.f;
    float best = d * sumqx;
    for (int itry = -7; itry <= 7; itry++) {
        id = (itry + values[0]) / max;
        sumqx = sumq2 = 0;
        for (int j = 0; j < 32; j++) {
            const float q = values[rp_iq4_best_index(id * xb[j])];
            const float w = weight[j];
            sumqx += w * q * xb[j];
            sumq2 += w * q * q;
        }
        if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
            d = sumqx / sumq2;
            best = d * sumqx;
        }
    }
    return d;
}

/* Codes of a group against scale 1/id, packed as Q4_0 nibbles. */
static void rp_iq4_pack_group(const float *xb, float id, uint8_t *qs) {
    for (int j = 0; j < 16; j++) {
        const int lo = rp_iq4_best_index(id * xb[j]);
        const int hi = rp_iq4_best_index(id * xb[j + 16]);
        qs[j] = (uint8_t)(lo | (hi << 4));
    }
}

/* One group per block: d = the fitted scale (fp16), codes against the fp32
 * scale (as ggml). Value = d * grid[q]. */
void rp_quantize_iq4_nl(const float *x, rp_block_iq4_nl *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += RP_QK4_NL) {
        const float s = rp_iq4_group_scale(x);
        y[i].d = rp_fp32_to_fp16(s);
        rp_iq4_pack_group(x, s != 0.0f ? 1 / s : 0.0f, y[i].qs);
    }
}

void rp_dequantize_iq4_nl(const rp_block_iq4_nl *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, y += RP_QK4_NL) {
        const float d = rp_fp16_to_fp32(x[i].d);
        for (int j = 0; j < 16; j++) {
            y[j] = d * rp_iq4nl_values[x[i].qs[j] & 0xF];
            y[j + 16] = d * rp_iq4nl_values[x[i].qs[j] >> 4];
        }
    }
}

/* Eight groups of 32 per super-block: the group scales are quantized to
 * 6 bits l in [-32, 31] against d = -max_scale/32 (max_scale: the signed
 * group scale of largest magnitude), stored l + 32; codes against d*l. */
void rp_quantize_iq4_xs(const float *x, rp_block_iq4_xs *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += RP_QK_K) {
        float scales[RP_QK_K / 32];
        float max_scale = 0, amax_scale = 0;
        for (int ib = 0; ib < RP_QK_K / 32; ib++) {
            scales[ib] = rp_iq4_group_scale(x + 32 * ib);
            if (fabsf(scales[ib]) > amax_scale) {
                amax_scale = fabsf(scales[ib]);
                max_scale = scales[ib];
            }
        }
        const float d = -max_scale / 32;
        y[i].d = rp_fp32_to_fp16(d);
        const float id = d != 0.0f ? 1 / d : 0.f;
        uint16_t sh = 0;
        memset(y[i].scales_l, 0, sizeof y[i].scales_l);
        for (int ib = 0; ib < RP_QK_K / 32; ib++) {
            const int l = rp_clampi(rp_nearest_int(id * scales[ib]), -32, 31);
            const float dl = d * l;
            rp_iq4_pack_group(x + 32 * ib, dl != 0.0f ? 1 / dl : 0.f, y[i].qs + 16 * ib);
            const int lb = l + 32;
            y[i].scales_l[ib / 2] |= (uint8_t)((lb & 0xF) << (4 * (ib % 2)));
            sh |= (uint16_t)((lb >> 4) << (2 * ib));
        }
        y[i].scales_h = sh;
    }
}

void rp_dequantize_iq4_xs(const rp_block_iq4_xs *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        const float d = rp_fp16_to_fp32(x[i].d);
        const uint8_t *qs = x[i].qs;
        for (int ib = 0; ib < RP_QK_K / 32; ib++, y += 32, qs += 16) {
            const int ls = ((x[i].scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF) | (((x[i].scales_h >> (2 * ib)) & 3) << 4);
            const float dl = d * (ls - 32);
            for (int j = 0; j < 16; j++) {
                y[j] = dl * rp_iq4nl_values[qs[j] & 0xF];
                y[j + 16] = dl * rp_iq4nl_values[qs[j] >> 4];
            }
        }
    }
}
