/* quant_kq_ref.c — scalar reference (de)quantization of the K-quants Q2_K, Q3_K and Q5_K, bit-identical to ggml's *_ref quantizers. */
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

/* Packs 256 2-bit codes as Q2_K / Q3_K store them: byte 32h + l holds
 * elements 128h + l + 32p at bit pair p. */
static void rp_pack_2bit(const uint8_t *L, uint8_t *qs) {
    for (int j = 0; j < RP_QK_K; j += 128)
        for (int l = 0; l < 32; l++)
            qs[j / 4 + l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) | (L[j + l + 96] << 6));
}

static inline int rp_2bit_code(const uint8_t *qs, int j) {
    return (qs[32 * (j / 128) + j % 32] >> (2 * ((j % 128) / 32))) & 3;
}

/* ------------------------------------------------------------------ Q2_K */

/* 16 groups of 16: an asymmetric 2-bit fit per group (make_qkx2_quants with
 * |x| weights and absolute error), the group scales and mins quantized to
 * 4 bits against d = max_scale/15, dmin = max_min/15 (fp16), then every
 * value re-quantized against the stored pair, as quantize_row_q2_K_ref.
 * Value = d*(sc & 15)*q - dmin*(sc >> 4). */
void rp_quantize_q2_k(const float *x, rp_block_q2_k *y, int64_t nb) {
    uint8_t L[RP_QK_K], Laux[16];
    float weights[16], mins[RP_QK_K / 16], scales[RP_QK_K / 16];
    for (int64_t i = 0; i < nb; i++, x += RP_QK_K) {
        float max_scale = 0, max_min = 0;
        for (int j = 0; j < RP_QK_K / 16; j++) {
            for (int l = 0; l < 16; l++) weights[l] = fabsf(x[16 * j + l]);
            scales[j] = rp_make_qkx2_quants(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j], Laux, -0.5f, 0.1f, 15, true);
            if (scales[j] > max_scale) max_scale = scales[j];
            if (mins[j] > max_min) max_min = mins[j];
        }
        if (max_scale > 0) {
            const float iscale = 15.f / max_scale;
            for (int j = 0; j < RP_QK_K / 16; j++) y[i].scales[j] = (uint8_t)rp_nearest_int(iscale * scales[j]);
            y[i].d = rp_fp32_to_fp16(max_scale / 15.f);
        } else {
            memset(y[i].scales, 0, sizeof y[i].scales);
            y[i].d = rp_fp32_to_fp16(0.f);
        }
        if (max_min > 0) {
            const float iscale = 15.f / max_min;
            for (int j = 0; j < RP_QK_K / 16; j++) y[i].scales[j] |= (uint8_t)(rp_nearest_int(iscale * mins[j]) << 4);
            y[i].dmin = rp_fp32_to_fp16(max_min / 15.f);
        } else {
            y[i].dmin = rp_fp32_to_fp16(0.f);
        }
        const float d_all = rp_fp16_to_fp32(y[i].d), m_all = rp_fp16_to_fp32(y[i].dmin);
        for (int j = 0; j < RP_QK_K / 16; j++) {
            const float d = d_all * (y[i].scales[j] & 0xF);
            if (d == 0.0f) continue; /* keep the fit's codes */
            const float dm = m_all * (y[i].scales[j] >> 4);
            for (int l = 0; l < 16; l++) L[16 * j + l] = (uint8_t)rp_clampi(rp_nearest_int((x[16 * j + l] + dm) / d), 0, 3);
        }
        rp_pack_2bit(L, y[i].qs);
    }
}

void rp_dequantize_q2_k(const rp_block_q2_k *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, y += RP_QK_K) {
        const float d = rp_fp16_to_fp32(x[i].d), min = rp_fp16_to_fp32(x[i].dmin);
        for (int g = 0; g < RP_QK_K / 16; g++) {
            const uint8_t sc = x[i].scales[g];
            const float dl = d * (sc & 0xF), ml = min * (sc >> 4);
            for (int l = 0; l < 16; l++) y[16 * g + l] = dl * rp_2bit_code(x[i].qs, 16 * g + l) - ml;
        }
    }
}

/* ------------------------------------------------------------------ Q3_K */

/* Symmetric fit of n values to L - nmax, L in [0, 2*nmax - 1], with x^2
 * weights and up to 5 passes of greedy per-element refinement (ggml's
 * make_q3_quants with do_rmse). Returns the scale. */
static float rp_make_q3_quants(int n, int nmax, const float *x, int8_t *L) {
    float max = 0, amax = 0;
    for (int i = 0; i < n; i++) {
        const float ax = fabsf(x[i]);
        if (ax > amax) {
            amax = ax;
            max = x[i];
        }
    }
    if (amax < RP_GROUP_MAX_EPS) {
        memset(L, 0, (size_t)n);
        return 0.f;
    }
    const float iscale = -nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        const int l = rp_clampi(rp_nearest_int(iscale * x[i]), -nmax, nmax - 1);
        L[i] = (int8_t)l;
        const float w = x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    for (int itry = 0; itry < 5; itry++) {
        int n_changed = 0;
        for (int i = 0; i < n; i++) {
            const float w = x[i] * x[i];
            float slx = sumlx - w * x[i] * L[i];
            if (slx > 0) {
                float sl2 = suml2 - w * L[i] * L[i];
                const int new_l = rp_clampi(rp_nearest_int(x[i] * sl2 / slx), -nmax, nmax - 1);
                if (new_l != L[i]) {
                    slx += w * x[i] * new_l;
                    sl2 += w * new_l * new_l;
                    if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i] = (int8_t)new_l;
                        sumlx = slx;
                        suml2 = sl2;
                        n_changed++;
                    }
                }
            }
        }
        if (!n_changed) break;
    }
    for (int i = 0; i < n; i++) L[i] = (int8_t)(L[i] + nmax);
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

/* The 6-bit scale (0..63, stored biased by 32) of group j from the 12
 * packed bytes. */
static inline int rp_q3_k_scale(const uint8_t *s, int j) {
    const int lo = j < 8 ? (s[j] & 0xF) : (s[j - 8] >> 4);
    return lo | (((s[8 + j % 4] >> (2 * (j / 4))) & 3) << 4);
}

/* 16 groups of 16: a symmetric 3-bit fit per group, the (signed) scales
 * quantized to 6 bits against d = max_scale/-32, then every value re-quantized
 * against d*(sc - 32), as quantize_row_q3_K_ref. Value = d*(sc - 32)*(q - 4). */
void rp_quantize_q3_k(const float *x, rp_block_q3_k *y, int64_t nb) {
    int8_t L[RP_QK_K];
    float scales[RP_QK_K / 16];
    for (int64_t i = 0; i < nb; i++, x += RP_QK_K) {
        float max_scale = 0, amax = 0;
        for (int j = 0; j < RP_QK_K / 16; j++) {
            scales[j] = rp_make_q3_quants(16, 4, x + 16 * j, L + 16 * j);
            if (fabsf(scales[j]) > amax) {
                amax = fabsf(scales[j]);
                max_scale = scales[j];
            }
        }
        memset(y[i].scales, 0, 12);
        if (max_scale != 0.0f) {
            const float iscale = -32.f / max_scale;
            for (int j = 0; j < RP_QK_K / 16; j++) {
                /* |iscale * scale| <= 32, so the int8 ggml stores it in holds it */
                const int l = rp_clampi(rp_nearest_int(iscale * scales[j]), -32, 31) + 32;
                if (j < 8) y[i].scales[j] = (uint8_t)(l & 0xF);
                else y[i].scales[j - 8] |= (uint8_t)((l & 0xF) << 4);
                y[i].scales[j % 4 + 8] |= (uint8_t)((l >> 4) << (2 * (j / 4)));
            }
            y[i].d = rp_fp32_to_fp16(1 / iscale);
        } else {
            y[i].d = rp_fp32_to_fp16(0.f);
        }
        const float d_all = rp_fp16_to_fp32(y[i].d);
        for (int j = 0; j < RP_QK_K / 16; j++) {
            const float d = d_all * (rp_q3_k_scale(y[i].scales, j) - 32);
            if (d == 0.0f) continue; /* keep the fit's codes */
            for (int l = 0; l < 16; l++) L[16 * j + l] = (int8_t)(rp_clampi(rp_nearest_int(x[16 * j + l] / d), -4, 3) + 4);
        }
        /* the high bit of element j goes to bit j/32 of hmask[j % 32] */
        memset(y[i].hmask, 0, sizeof y[i].hmask);
        uint8_t low[RP_QK_K];
        for (int j = 0; j < RP_QK_K; j++) {
            low[j] = (uint8_t)(L[j] & 3);
            if (L[j] > 3) y[i].hmask[j % 32] |= (uint8_t)(1u << (j / 32));
        }
        rp_pack_2bit(low, y[i].qs);
    }
}

void rp_dequantize_q3_k(const rp_block_q3_k *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, y += RP_QK_K) {
        const float d_all = rp_fp16_to_fp32(x[i].d);
        for (int g = 0; g < RP_QK_K / 16; g++) {
            const float dl = d_all * (rp_q3_k_scale(x[i].scales, g) - 32);
            for (int l = 0; l < 16; l++) {
                const int j = 16 * g + l;
                const int h = (x[i].hmask[j % 32] >> (j / 32)) & 1;
                y[j] = dl * (rp_2bit_code(x[i].qs, j) - (h ? 0 : 4));
            }
        }
    }
}

/* ------------------------------------------------------------------ Q5_K */

/* Q4_K's scheme with 5-bit codes (make_qkx2_quants with nmax 31, rmin -0.5,
 * 15 steps), as quantize_row_q5_K_ref. Value = d*sc*q - dmin*m, q in [0, 31]:
 * the low 4 bits as Q4_K's nibbles, bit 4 of element 64p + l (sub-block 2p)
 * in bit 2p of qh[l], of element 64p + 32 + l in bit 2p + 1. */
void rp_quantize_q5_k(const float *x, rp_block_q5_k *y, int64_t nb) {
    uint8_t L[RP_QK_K], Laux[32];
    float mins[RP_QK_K / 32], scales[RP_QK_K / 32], weights[32];
    for (int64_t i = 0; i < nb; i++, x += RP_QK_K) {
        float max_scale = 0, max_min = 0;
        for (int j = 0; j < RP_QK_K / 32; j++) {
            float sum_x2 = 0;
            for (int l = 0; l < 32; l++) sum_x2 += x[32 * j + l] * x[32 * j + l];
            const float av_x = sqrtf(sum_x2 / 32);
            for (int l = 0; l < 32; l++) weights[l] = av_x + fabsf(x[32 * j + l]);
            scales[j] = rp_make_qkx2_quants(32, 31, x + 32 * j, weights, L + 32 * j, &mins[j], Laux, -0.5f, 0.1f, 15, false);
            if (scales[j] > max_scale) max_scale = scales[j];
            if (mins[j] > max_min) max_min = mins[j];
        }
        const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
        const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
        memset(y[i].scales, 0, sizeof y[i].scales);
        for (int j = 0; j < RP_QK_K / 32; j++) {
            uint8_t ls = (uint8_t)rp_nearest_int(inv_scale * scales[j]);
            uint8_t lm = (uint8_t)rp_nearest_int(inv_min * mins[j]);
            if (ls > 63) ls = 63;
            if (lm > 63) lm = 63;
            if (j < 4) {
                y[i].scales[j] = ls;
                y[i].scales[j + 4] = lm;
            } else {
                y[i].scales[j + 4] = (uint8_t)((ls & 0xF) | ((lm & 0xF) << 4));
                y[i].scales[j - 4] |= (uint8_t)((ls >> 4) << 6);
                y[i].scales[j] |= (uint8_t)((lm >> 4) << 6);
            }
        }
        y[i].d = rp_fp32_to_fp16(max_scale / 63.f);
        y[i].dmin = rp_fp32_to_fp16(max_min / 63.f);
        const float d_all = rp_fp16_to_fp32(y[i].d), m_all = rp_fp16_to_fp32(y[i].dmin);
        for (int j = 0; j < RP_QK_K / 32; j++) {
            uint8_t sc, m;
            rp_q4_k_scale_min(j, y[i].scales, &sc, &m);
            const float d = d_all * sc;
            if (d == 0.0f) continue; /* keep the fit's codes */
            const float dm = m_all * m;
            for (int l = 0; l < 32; l++) L[32 * j + l] = (uint8_t)rp_clampi(rp_nearest_int((x[32 * j + l] + dm) / d), 0, 31);
        }
        memset(y[i].qh, 0, sizeof y[i].qh);
        uint8_t *ql = y[i].qs;
        for (int p = 0; p < 4; p++, ql += 32) {
            for (int l = 0; l < 32; l++) {
                const uint8_t a = L[64 * p + l], b = L[64 * p + 32 + l];
                ql[l] = (uint8_t)((a & 0xF) | ((b & 0xF) << 4));
                y[i].qh[l] |= (uint8_t)(((a >> 4) << (2 * p)) | ((b >> 4) << (2 * p + 1)));
            }
        }
    }
}

void rp_dequantize_q5_k(const rp_block_q5_k *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        const float d = rp_fp16_to_fp32(x[i].d), min = rp_fp16_to_fp32(x[i].dmin);
        const uint8_t *ql = x[i].qs;
        for (int p = 0; p < 4; p++, ql += 32) {
            uint8_t sc, m;
            rp_q4_k_scale_min(2 * p, x[i].scales, &sc, &m);
            const float d1 = d * sc, m1 = min * m;
            rp_q4_k_scale_min(2 * p + 1, x[i].scales, &sc, &m);
            const float d2 = d * sc, m2 = min * m;
            for (int l = 0; l < 32; l++) *y++ = d1 * ((ql[l] & 0xF) + ((x[i].qh[l] >> (2 * p)) & 1 ? 16 : 0)) - m1;
            for (int l = 0; l < 32; l++) *y++ = d2 * ((ql[l] >> 4) + ((x[i].qh[l] >> (2 * p + 1)) & 1 ? 16 : 0)) - m2;
        }
    }
}
