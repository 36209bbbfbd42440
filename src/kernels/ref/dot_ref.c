/* dot_ref.c — scalar reference dot products of weight rows with activation rows (ggml vec_dot semantics). */
#include "kernels/quant.h"

#include <math.h>
#include <stdint.h>

/* Same reason as quant_ref.c: results should not depend on FMA contraction,
 * so SIMD kernels can be checked against these with tight tolerances. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

rp_type rp_type_vec_dot_type(rp_type t) {
    switch (t) {
    case RP_TYPE_F32:
    case RP_TYPE_F16:
    case RP_TYPE_BF16:
        return RP_TYPE_F32;
    case RP_TYPE_Q4_0:
    case RP_TYPE_Q8_0:
        return RP_TYPE_Q8_0;
    case RP_TYPE_Q4_K:
    case RP_TYPE_Q6_K:
        return RP_TYPE_Q8_K;
    default:
        /* No dot kernel: RP_TYPE_COUNT is not a valid type, so traits lookups
         * and rp_vec_dot_ref on it fail cleanly. */
        return RP_TYPE_COUNT;
    }
}

float rp_dot_f32_ref(int64_t n, const float *a, const float *b) {
    /* Double accumulation: the reference should be more accurate than any
     * SIMD kernel compared against it, never less. */
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) sum += (double)a[i] * (double)b[i];
    return (float)sum;
}

/* Plain-weight rows against fp32 activations (double accumulation). */
static float rp_dot_f16_f32(int64_t n, const uint16_t *w, const float *a) {
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) sum += (double)rp_fp16_to_fp32(w[i]) * (double)a[i];
    return (float)sum;
}

static float rp_dot_bf16_f32(int64_t n, const uint16_t *w, const float *a) {
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) sum += (double)rp_bf16_to_fp32(w[i]) * (double)a[i];
    return (float)sum;
}

/* The quantized dots below follow ggml's scalar vec_dot_*: an exact integer
 * sum per block (no overflow: bounds noted per type), scaled by the product
 * of the two block scales and accumulated in fp32 across blocks. */

/* Q4_0 x Q8_0: |sumi| <= 32 * 8 * 127. sum += sumi * dw * da. */
static float rp_dot_q4_0_q8_0(int64_t nb, const rp_block_q4_0 *w, const rp_block_q8_0 *a) {
    float sumf = 0;
    for (int64_t i = 0; i < nb; i++) {
        int sumi = 0;
        for (int j = 0; j < RP_QK4_0 / 2; j++) {
            sumi += ((w[i].qs[j] & 0x0F) - 8) * a[i].qs[j];
            sumi += ((w[i].qs[j] >> 4) - 8) * a[i].qs[j + RP_QK4_0 / 2];
        }
        sumf += sumi * rp_fp16_to_fp32(w[i].d) * rp_fp16_to_fp32(a[i].d);
    }
    return sumf;
}

/* Q8_0 x Q8_0: |sumi| <= 32 * 128 * 128. sum += sumi * (dw * da). */
static float rp_dot_q8_0_q8_0(int64_t nb, const rp_block_q8_0 *w, const rp_block_q8_0 *a) {
    float sumf = 0;
    for (int64_t i = 0; i < nb; i++) {
        int sumi = 0;
        for (int j = 0; j < RP_QK8_0; j++) sumi += w[i].qs[j] * a[i].qs[j];
        sumf += sumi * (rp_fp16_to_fp32(w[i].d) * rp_fp16_to_fp32(a[i].d));
    }
    return sumf;
}

/* Q4_K x Q8_K: value = d*sc*q - dmin*m, so per block
 *   sum = d*da * sum_j sc_j * <q, a>_j  -  dmin*da * sum_j m_j * sum(a)_j
 * where sum(a) per 32 comes from the activation's bsums (two per sub-block).
 * Bounds: |isum| <= 256 * 15 * 127 * 63, |summs| <= 16 * 2032 * 63. */
static float rp_dot_q4_k_q8_k(int64_t nb, const rp_block_q4_k *w, const rp_block_q8_k *a) {
    float sumf = 0;
    for (int64_t i = 0; i < nb; i++) {
        uint8_t sc[8], mn[8];
        for (int j = 0; j < 8; j++) rp_q4_k_scale_min(j, w[i].scales, &sc[j], &mn[j]);

        int summs = 0;
        for (int g = 0; g < RP_QK_K / 16; g++) summs += a[i].bsums[g] * mn[g / 2];

        int isum = 0;
        const uint8_t *q = w[i].qs;
        const int8_t *q8 = a[i].qs;
        for (int j = 0; j < RP_QK_K / 32; j += 2, q += 32, q8 += 64) {
            int s0 = 0, s1 = 0;
            for (int l = 0; l < 32; l++) {
                s0 += (q[l] & 0xF) * q8[l];
                s1 += (q[l] >> 4) * q8[l + 32];
            }
            isum += sc[j] * s0 + sc[j + 1] * s1;
        }
        const float d = rp_fp16_to_fp32(w[i].d) * a[i].d;
        const float dmin = rp_fp16_to_fp32(w[i].dmin) * a[i].d;
        sumf += d * isum;
        sumf -= dmin * summs;
    }
    return sumf;
}

/* Q6_K x Q8_K: per block sum = d*da * sum_g sc_g * <q, a>_g over 16 groups
 * of 16; q in [-32, 31], |isum| <= 256 * 32 * 127 * 128. */
static float rp_dot_q6_k_q8_k(int64_t nb, const rp_block_q6_k *w, const rp_block_q8_k *a) {
    float sumf = 0;
    for (int64_t i = 0; i < nb; i++) {
        int8_t q6[RP_QK_K];
        const uint8_t *ql = w[i].ql;
        const uint8_t *qh = w[i].qh;
        for (int h = 0; h < RP_QK_K; h += 128, ql += 64, qh += 32) {
            for (int l = 0; l < 32; l++) {
                q6[h + l] = (int8_t)(((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32);
                q6[h + l + 32] = (int8_t)(((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32);
                q6[h + l + 64] = (int8_t)(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
                q6[h + l + 96] = (int8_t)(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
            }
        }
        int isum = 0;
        for (int g = 0; g < RP_QK_K / 16; g++) {
            int s = 0;
            for (int l = 0; l < 16; l++) s += q6[16 * g + l] * a[i].qs[16 * g + l];
            isum += w[i].scales[g] * s;
        }
        sumf += rp_fp16_to_fp32(w[i].d) * a[i].d * isum;
    }
    return sumf;
}

float rp_vec_dot_ref(rp_type t, int64_t n, const void *w, const void *a) {
    const rp_type_traits *tr = rp_type_get_traits((int)t);
    if (!tr || !tr->can_compute || n < 0 || n % tr->blck_size != 0) return NAN;
    if (n > 0 && (!w || !a)) return NAN;
    const int64_t nb = n / tr->blck_size;
    switch (t) {
    case RP_TYPE_F32: return rp_dot_f32_ref(n, w, a);
    case RP_TYPE_F16: return rp_dot_f16_f32(n, w, a);
    case RP_TYPE_BF16: return rp_dot_bf16_f32(n, w, a);
    case RP_TYPE_Q4_0: return rp_dot_q4_0_q8_0(nb, w, a);
    case RP_TYPE_Q8_0: return rp_dot_q8_0_q8_0(nb, w, a);
    case RP_TYPE_Q4_K: return rp_dot_q4_k_q8_k(nb, w, a);
    case RP_TYPE_Q6_K: return rp_dot_q6_k_q8_k(nb, w, a);
    default: return NAN;
    }
}
