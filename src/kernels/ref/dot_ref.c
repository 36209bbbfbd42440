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
    case RP_TYPE_Q4_1:
    case RP_TYPE_Q5_0:
    case RP_TYPE_Q5_1:
    case RP_TYPE_IQ4_NL:
        return RP_TYPE_Q8_0;
    case RP_TYPE_Q4_K:
    case RP_TYPE_Q6_K:
    case RP_TYPE_Q2_K:
    case RP_TYPE_Q3_K:
    case RP_TYPE_Q5_K:
    case RP_TYPE_IQ4_XS:
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

/* ---- the types added for llama.cpp's standard mixes. The 32-element ones
 * take Q8_0 activations (ggml gives Q4_1 / Q5_1 Q8_1 ones, whose fp16 sum
 * d*sum(q) is a rounding ggml adds; here sum(q) stays an exact integer), the
 * 256-element ones Q8_K. Same pattern: exact integer sums per block or
 * group, one float product per block. */

/* The 5th bits of a Q5_0 / Q5_1 block, element j at bit j. */
static inline uint32_t rp_q5_qh(const uint8_t *qh) {
    return (uint32_t)qh[0] | (uint32_t)qh[1] << 8 | (uint32_t)qh[2] << 16 | (uint32_t)qh[3] << 24;
}

/* Code j (0..31) of a 32-element block in Q4_0 nibble order. */
static inline int rp_nib(const uint8_t *qs, int j) { return j < 16 ? (qs[j] & 0xF) : (qs[j - 16] >> 4); }

/* Q4_1 x Q8_0: value = d*q + m, so sum = (dw*da)*sum(q*a) + (m*da)*sum(a). */
static float rp_dot_q4_1_q8_0(int64_t nb, const rp_block_q4_1 *w, const rp_block_q8_0 *a) {
    float sumf = 0;
    for (int64_t i = 0; i < nb; i++) {
        int sumi = 0, suma = 0;
        for (int j = 0; j < 32; j++) {
            sumi += rp_nib(w[i].qs, j) * a[i].qs[j];
            suma += a[i].qs[j];
        }
        const float da = rp_fp16_to_fp32(a[i].d);
        sumf += (rp_fp16_to_fp32(w[i].d) * da) * (float)sumi + (rp_fp16_to_fp32(w[i].m) * da) * (float)suma;
    }
    return sumf;
}

/* Q5_0 x Q8_0: q - 16 in [-16, 15]; |sumi| <= 32 * 16 * 128. */
static float rp_dot_q5_0_q8_0(int64_t nb, const rp_block_q5_0 *w, const rp_block_q8_0 *a) {
    float sumf = 0;
    for (int64_t i = 0; i < nb; i++) {
        const uint32_t qh = rp_q5_qh(w[i].qh);
        int sumi = 0;
        for (int j = 0; j < 32; j++) sumi += ((rp_nib(w[i].qs, j) | (int)((qh >> j) & 1) << 4) - 16) * a[i].qs[j];
        sumf += sumi * (rp_fp16_to_fp32(w[i].d) * rp_fp16_to_fp32(a[i].d));
    }
    return sumf;
}

static float rp_dot_q5_1_q8_0(int64_t nb, const rp_block_q5_1 *w, const rp_block_q8_0 *a) {
    float sumf = 0;
    for (int64_t i = 0; i < nb; i++) {
        const uint32_t qh = rp_q5_qh(w[i].qh);
        int sumi = 0, suma = 0;
        for (int j = 0; j < 32; j++) {
            sumi += (rp_nib(w[i].qs, j) | (int)((qh >> j) & 1) << 4) * a[i].qs[j];
            suma += a[i].qs[j];
        }
        const float da = rp_fp16_to_fp32(a[i].d);
        sumf += (rp_fp16_to_fp32(w[i].d) * da) * (float)sumi + (rp_fp16_to_fp32(w[i].m) * da) * (float)suma;
    }
    return sumf;
}

/* IQ4_NL x Q8_0: grid values in [-127, 113]; |sumi| <= 32 * 127 * 128. */
static float rp_dot_iq4_nl_q8_0(int64_t nb, const rp_block_iq4_nl *w, const rp_block_q8_0 *a) {
    float sumf = 0;
    for (int64_t i = 0; i < nb; i++) {
        int sumi = 0;
        for (int j = 0; j < 32; j++) sumi += rp_iq4nl_values[rp_nib(w[i].qs, j)] * a[i].qs[j];
        sumf += sumi * (rp_fp16_to_fp32(w[i].d) * rp_fp16_to_fp32(a[i].d));
    }
    return sumf;
}

/* Q2_K x Q8_K: value = d*sc_g*q - dmin*m_g over 16 groups of 16:
 *   sum = d*da * sum_g sc_g <q, a>_g  -  dmin*da * sum_g m_g bsum_g.
 * |isum| <= 256 * 3 * 127 * 15. */
static float rp_dot_q2_k_q8_k(int64_t nb, const rp_block_q2_k *w, const rp_block_q8_k *a) {
    float sumf = 0;
    for (int64_t i = 0; i < nb; i++) {
        int isum = 0, summs = 0;
        for (int g = 0; g < 16; g++) {
            int s = 0;
            for (int l = 0; l < 16; l++) {
                const int j = 16 * g + l;
                s += ((w[i].qs[32 * (j / 128) + j % 32] >> (2 * ((j % 128) / 32))) & 3) * a[i].qs[j];
            }
            isum += (w[i].scales[g] & 0xF) * s;
            summs += (w[i].scales[g] >> 4) * a[i].bsums[g];
        }
        const float d = rp_fp16_to_fp32(w[i].d) * a[i].d;
        const float dmin = rp_fp16_to_fp32(w[i].dmin) * a[i].d;
        sumf += d * isum;
        sumf -= dmin * summs;
    }
    return sumf;
}

/* Q3_K x Q8_K: value = d*(sc_g - 32)*(q - 4), q in [0, 7]; |isum| <= 256 * 4 * 128 * 32. */
static float rp_dot_q3_k_q8_k(int64_t nb, const rp_block_q3_k *w, const rp_block_q8_k *a) {
    float sumf = 0;
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *s = w[i].scales;
        int isum = 0;
        for (int g = 0; g < 16; g++) {
            const int sc = ((g < 8 ? (s[g] & 0xF) : (s[g - 8] >> 4)) | (((s[8 + g % 4] >> (2 * (g / 4))) & 3) << 4)) - 32;
            int t = 0;
            for (int l = 0; l < 16; l++) {
                const int j = 16 * g + l;
                const int lo = (w[i].qs[32 * (j / 128) + j % 32] >> (2 * ((j % 128) / 32))) & 3;
                const int hi = (w[i].hmask[j % 32] >> (j / 32)) & 1;
                t += (lo + 4 * hi - 4) * a[i].qs[j];
            }
            isum += sc * t;
        }
        sumf += rp_fp16_to_fp32(w[i].d) * a[i].d * isum;
    }
    return sumf;
}

/* Q5_K x Q8_K: Q4_K's formula with q in [0, 31]. |isum| <= 256 * 31 * 127 * 63. */
static float rp_dot_q5_k_q8_k(int64_t nb, const rp_block_q5_k *w, const rp_block_q8_k *a) {
    float sumf = 0;
    for (int64_t i = 0; i < nb; i++) {
        uint8_t sc[8], mn[8];
        for (int j = 0; j < 8; j++) rp_q4_k_scale_min(j, w[i].scales, &sc[j], &mn[j]);
        int summs = 0;
        for (int g = 0; g < RP_QK_K / 16; g++) summs += a[i].bsums[g] * mn[g / 2];
        int isum = 0;
        for (int j = 0; j < 8; j++) {
            const uint8_t *q = w[i].qs + 32 * (j / 2);
            const int8_t *q8 = a[i].qs + 32 * j;
            int s = 0;
            for (int l = 0; l < 32; l++) {
                const int lo = (j & 1) ? (q[l] >> 4) : (q[l] & 0xF);
                s += (lo | (((w[i].qh[l] >> j) & 1) << 4)) * q8[l];
            }
            isum += sc[j] * s;
        }
        const float d = rp_fp16_to_fp32(w[i].d) * a[i].d;
        const float dmin = rp_fp16_to_fp32(w[i].dmin) * a[i].d;
        sumf += d * isum;
        sumf -= dmin * summs;
    }
    return sumf;
}

/* IQ4_XS x Q8_K: value = d*(ls_j - 32)*grid[q] over 8 groups of 32;
 * |isum| <= 256 * 127 * 128 * 32. */
static float rp_dot_iq4_xs_q8_k(int64_t nb, const rp_block_iq4_xs *w, const rp_block_q8_k *a) {
    float sumf = 0;
    for (int64_t i = 0; i < nb; i++) {
        int isum = 0;
        for (int ib = 0; ib < 8; ib++) {
            const int ls = ((w[i].scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF) | (((w[i].scales_h >> (2 * ib)) & 3) << 4);
            int s = 0;
            for (int j = 0; j < 32; j++) s += rp_iq4nl_values[rp_nib(w[i].qs + 16 * ib, j)] * a[i].qs[32 * ib + j];
            isum += (ls - 32) * s;
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
    case RP_TYPE_Q4_1: return rp_dot_q4_1_q8_0(nb, w, a);
    case RP_TYPE_Q5_0: return rp_dot_q5_0_q8_0(nb, w, a);
    case RP_TYPE_Q5_1: return rp_dot_q5_1_q8_0(nb, w, a);
    case RP_TYPE_IQ4_NL: return rp_dot_iq4_nl_q8_0(nb, w, a);
    case RP_TYPE_Q2_K: return rp_dot_q2_k_q8_k(nb, w, a);
    case RP_TYPE_Q3_K: return rp_dot_q3_k_q8_k(nb, w, a);
    case RP_TYPE_Q5_K: return rp_dot_q5_k_q8_k(nb, w, a);
    case RP_TYPE_IQ4_XS: return rp_dot_iq4_xs_q8_k(nb, w, a);
    default: return NAN;
    }
}
