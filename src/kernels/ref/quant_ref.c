/* quant_ref.c — scalar reference (de)quantization, bit-identical to ggml's *_ref quantizers. */
#include "kernels/quant.h"
#include "kernels/ref/quant_util.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

/* Bit-identical output requires every float operation to round exactly as in
 * ggml's C source: one rounding per +, -, *, /, in source order. Contracting
 * a*b+c into an FMA (GCC's default in gnu11 mode on targets with FMA, e.g.
 * aarch64 or -march=native) would change quantized bytes, so forbid it here
 * (verified: without this, -march=native builds differ from ggml). An explicit
 * clang -ffp-contract=fast overrides the pragma and must not be used; x87
 * excess precision (i386 without SSE) is likewise not supported. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

/* Contract of every quantizer here: inputs are finite. Non-finite inputs give
 * unspecified bytes but never undefined behaviour (all float->int
 * conversions below are range-guarded or go through rp_nearest_int). */

/* ------------------------------------------------------------------ Q8_0 */

/* d = amax/127 per 32 values, q = roundf(x/d) (half away from zero, as
 * ggml's quantize_row_q8_0_ref). Error bound: |x - q*d| <= d/2 before d is
 * rounded to fp16; the stored fp16 d adds at most 127*|d - fp16(d)|. */
static void rp_quantize_q8_0(const float *x, rp_block_q8_0 *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += RP_QK8_0) {
        float amax = 0.0f;
        for (int j = 0; j < RP_QK8_0; j++) {
            const float a = fabsf(x[j]);
            amax = amax > a ? amax : a;
        }
        const float d = amax / 127;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = rp_fp32_to_fp16(d);
        for (int j = 0; j < RP_QK8_0; j++) {
            /* |x*id| <= 127 (+ a few ulps) for finite x; the guard only
             * keeps non-finite inputs away from an undefined conversion. */
            const float r = roundf(x[j] * id);
            y[i].qs[j] = (int8_t)(r >= 127.0f ? 127 : (r > -128.0f ? (int)r : -128));
        }
    }
}

static void rp_dequantize_q8_0(const rp_block_q8_0 *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, y += RP_QK8_0) {
        const float d = rp_fp16_to_fp32(x[i].d);
        for (int j = 0; j < RP_QK8_0; j++) y[j] = x[i].qs[j] * d;
    }
}

/* ------------------------------------------------------------------ Q4_0 */

/* d = max/-8 where max is the signed value of largest magnitude (first one
 * on ties), q = min(15, trunc(x/d + 8.5)); element j goes to the low nibble
 * of qs[j], element j+16 to the high nibble. Value = (q - 8) * d.
 * Error bound: |x - value| <= |d|/2, except for values of the opposite sign
 * to max with x/d > 7.5, which clamp at q = 15 (error up to |d|); plus the
 * fp16 rounding of d (at most 8*|d - fp16(d)|). */
static inline uint8_t rp_q4_0_code(float v) {
    const float t = v + 8.5f;
    /* trunc of t in [0, 15]; t >= -eps for finite input, NaN maps to 15. */
    return (uint8_t)(t < 15.0f ? (t > 0.0f ? (int)t : 0) : 15);
}

static void rp_quantize_q4_0(const float *x, rp_block_q4_0 *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += RP_QK4_0) {
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < RP_QK4_0; j++) {
            if (amax < fabsf(x[j])) {
                amax = fabsf(x[j]);
                max = x[j];
            }
        }
        const float d = max / -8;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = rp_fp32_to_fp16(d);
        for (int j = 0; j < RP_QK4_0 / 2; j++) {
            const uint8_t lo = rp_q4_0_code(x[j] * id);
            const uint8_t hi = rp_q4_0_code(x[j + RP_QK4_0 / 2] * id);
            y[i].qs[j] = (uint8_t)(lo | (hi << 4));
        }
    }
}

static void rp_dequantize_q4_0(const rp_block_q4_0 *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, y += RP_QK4_0) {
        const float d = rp_fp16_to_fp32(x[i].d);
        for (int j = 0; j < RP_QK4_0 / 2; j++) {
            y[j] = ((x[i].qs[j] & 0x0F) - 8) * d;
            y[j + RP_QK4_0 / 2] = ((x[i].qs[j] >> 4) - 8) * d;
        }
    }
}

/* ------------------------------------------------------------------ Q4_K */

/* Asymmetric 4-bit fit of n values: x ~= scale * L - the_min, L in [0, nmax]
 * (ggml's make_qkx2_quants with squared error). Starts from the min/max
 * grid, then tries nstep+1 grid densities (nmax + rmin + rdelta*is)/(max-min)
 * and for each solves the weighted least-squares (scale, min) for those L,
 * keeping the best. min is clamped to <= 0 (the stored min is subtracted).
 * Float operation order mirrors ggml's exactly. Laux is scratch of n bytes.
 * Shared with Q2_K (use_mad) and Q5_K (quant_kq_ref.c). */
float rp_make_qkx2_quants(int n, int nmax, const float *x, const float *w, uint8_t *L, float *the_min,
                          uint8_t *Laux, float rmin, float rdelta, int nstep, bool use_mad) {
    float min = x[0], max = x[0];
    float sum_w = w[0];
    float sum_x = sum_w * x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    if (min > 0) min = 0;
    if (max == min) {
        memset(L, 0, (size_t)n);
        *the_min = -min;
        return 0.f;
    }
    float iscale = nmax / (max - min);
    float scale = 1 / iscale;
    float best_error = 0;
    for (int i = 0; i < n; i++) {
        const int l = rp_nearest_int(iscale * (x[i] - min));
        L[i] = (uint8_t)rp_clampi(l, 0, nmax);
        float diff = scale * L[i] + min - x[i];
        diff = use_mad ? fabsf(diff) : diff * diff;
        best_error += w[i] * diff;
    }
    if (nstep < 1) {
        *the_min = -min;
        return scale;
    }
    for (int is = 0; is <= nstep; is++) {
        iscale = (rmin + rdelta * is + nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; i++) {
            const int l = rp_clampi(rp_nearest_int(iscale * (x[i] - min)), 0, nmax);
            Laux[i] = (uint8_t)l;
            sum_l += w[i] * l;
            sum_l2 += w[i] * l * l;
            sum_xl += w[i] * l * x[i];
        }
        const float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
            float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            if (this_min > 0) {
                this_min = 0;
                this_scale = sum_xl / sum_l2;
            }
            float cur_error = 0;
            for (int i = 0; i < n; i++) {
                float diff = this_scale * Laux[i] + this_min - x[i];
                diff = use_mad ? fabsf(diff) : diff * diff;
                cur_error += w[i] * diff;
            }
            if (cur_error < best_error) {
                memcpy(L, Laux, (size_t)n);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *the_min = -min;
    return scale;
}

/* Super-block of 256 = 8 sub-blocks of 32. Each sub-block gets a fitted
 * (scale, min); those are quantized to 6 bits against the block maxima
 * (d = max_scale/63, dmin = max_min/63, both fp16), then every value is
 * re-quantized against the stored (d*sc, dmin*m) as in quantize_row_q4_K_ref.
 * Value = d*sc*q - dmin*m, q in [0, 15]. */
static void rp_quantize_q4_k(const float *x, rp_block_q4_k *y, int64_t nb) {
    uint8_t L[RP_QK_K];
    uint8_t Laux[32];
    float weights[32];
    float mins[RP_QK_K / 32];
    float scales[RP_QK_K / 32];

    for (int64_t i = 0; i < nb; i++, x += RP_QK_K) {
        float max_scale = 0; /* the min is subtracted, so scales are >= 0 */
        float max_min = 0;
        for (int j = 0; j < RP_QK_K / 32; j++) {
            const float *xs = x + 32 * j;
            float sum_x2 = 0;
            for (int l = 0; l < 32; l++) sum_x2 += xs[l] * xs[l];
            const float av_x = sqrtf(sum_x2 / 32);
            /* Weight large-magnitude values more: they dominate matmuls. */
            for (int l = 0; l < 32; l++) weights[l] = av_x + fabsf(xs[l]);
            scales[j] = rp_make_qkx2_quants(32, 15, xs, weights, L + 32 * j, &mins[j], Laux,
                                            -1.f, 0.1f, 20, false);
            if (scales[j] > max_scale) max_scale = scales[j];
            if (mins[j] > max_min) max_min = mins[j];
        }

        const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
        const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
        memset(y[i].scales, 0, sizeof y[i].scales);
        for (int j = 0; j < RP_QK_K / 32; j++) {
            /* ggml stores nearest_int into a uint8_t before clamping, so a
             * (never expected) negative wraps and clamps to 63; mirror it. */
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

        const float d_all = rp_fp16_to_fp32(y[i].d);
        const float m_all = rp_fp16_to_fp32(y[i].dmin);
        for (int j = 0; j < RP_QK_K / 32; j++) {
            uint8_t sc, m;
            rp_q4_k_scale_min(j, y[i].scales, &sc, &m);
            const float d = d_all * sc;
            if (d == 0.0f) continue; /* keep the fit's L: every value decodes to -dm */
            const float dm = m_all * m;
            for (int l = 0; l < 32; l++) {
                const int q = rp_nearest_int((x[32 * j + l] + dm) / d);
                L[32 * j + l] = (uint8_t)rp_clampi(q, 0, 15);
            }
        }

        /* Each 32 bytes of qs hold two sub-blocks: low nibbles the first,
         * high nibbles the second. */
        uint8_t *q = y[i].qs;
        for (int j = 0; j < RP_QK_K; j += 64, q += 32) {
            for (int l = 0; l < 32; l++) q[l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 4));
        }
    }
}

static void rp_dequantize_q4_k(const rp_block_q4_k *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        const float d = rp_fp16_to_fp32(x[i].d);
        const float dmin = rp_fp16_to_fp32(x[i].dmin);
        const uint8_t *q = x[i].qs;
        for (int j = 0; j < RP_QK_K / 32; j += 2, q += 32) {
            uint8_t sc, m;
            rp_q4_k_scale_min(j, x[i].scales, &sc, &m);
            const float d1 = d * sc, m1 = dmin * m;
            rp_q4_k_scale_min(j + 1, x[i].scales, &sc, &m);
            const float d2 = d * sc, m2 = dmin * m;
            for (int l = 0; l < 32; l++) *y++ = d1 * (q[l] & 0xF) - m1;
            for (int l = 0; l < 32; l++) *y++ = d2 * (q[l] >> 4) - m2;
        }
    }
}

/* ------------------------------------------------------------------ Q6_K */

/* Symmetric fit of n values to L - nmax, L in [0, 2*nmax - 1], weighted by
 * x^2 (ggml's make_qx_quants with rmse_type 1 and no importance weights).
 * Tries 19 grid scales around nmax/max and keeps the least-squares best.
 * Returns the (signed) scale; L holds the biased codes. */
static float rp_make_qx_quants(int n, int nmax, const float *x, int8_t *L) {
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
    float iscale = -nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        const int l = rp_clampi(rp_nearest_int(iscale * x[i]), -nmax, nmax - 1);
        L[i] = (int8_t)(l + nmax);
        const float w = x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int is = -9; is <= 9; is++) {
        if (is == 0) continue;
        iscale = -(nmax + 0.1f * is) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; i++) {
            const int l = rp_clampi(rp_nearest_int(iscale * x[i]), -nmax, nmax - 1);
            const float w = x[i] * x[i];
            sumlx += w * x[i] * l;
            suml2 += w * l * l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; i++) {
                const int l = rp_clampi(rp_nearest_int(iscale * x[i]), -nmax, nmax - 1);
                L[i] = (int8_t)(l + nmax);
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

/* Super-block of 256 = 16 groups of 16, each with an int8 scale against an
 * fp16 super-scale d (the largest |group scale| maps to -128), values
 * re-quantized to q in [-32, 31] against d*sc as in quantize_row_q6_K_ref.
 * Value = d*sc*q. Layout per 128-element half h: ql[64h + l] holds elements
 * 128h+l (low nibble) and 128h+64+l (high), ql[64h+32+l] holds 128h+32+l and
 * 128h+96+l, and qh[32h + l] holds their top 2 bits at shifts 0, 2, 4, 6. */
static void rp_quantize_q6_k(const float *x, rp_block_q6_k *y, int64_t nb) {
    int8_t L[RP_QK_K];
    float scales[RP_QK_K / 16];

    for (int64_t i = 0; i < nb; i++, x += RP_QK_K) {
        float max_scale = 0, max_abs_scale = 0;
        for (int ib = 0; ib < RP_QK_K / 16; ib++) {
            const float scale = rp_make_qx_quants(16, 32, x + 16 * ib, L + 16 * ib);
            scales[ib] = scale;
            if (fabsf(scale) > max_abs_scale) {
                max_abs_scale = fabsf(scale);
                max_scale = scale;
            }
        }
        if (max_abs_scale < RP_GROUP_MAX_EPS) {
            memset(&y[i], 0, sizeof y[i]); /* d = +0 */
            continue;
        }

        const float iscale = -128.f / max_scale;
        y[i].d = rp_fp32_to_fp16(1 / iscale);
        for (int ib = 0; ib < RP_QK_K / 16; ib++) {
            /* In [-128, 128] by construction; 128 clamps to 127 (ggml's MIN),
             * the lower clamp only guards the int8 conversion. */
            y[i].scales[ib] = (int8_t)rp_clampi(rp_nearest_int(iscale * scales[ib]), -128, 127);
        }

        const float d_all = rp_fp16_to_fp32(y[i].d);
        for (int j = 0; j < RP_QK_K / 16; j++) {
            const float d = d_all * y[i].scales[j];
            if (d == 0.0f) continue; /* keep the fit's L: decodes to 0 anyway */
            for (int l = 0; l < 16; l++) {
                const int q = rp_clampi(rp_nearest_int(x[16 * j + l] / d), -32, 31);
                L[16 * j + l] = (int8_t)(q + 32);
            }
        }

        uint8_t *ql = y[i].ql;
        uint8_t *qh = y[i].qh;
        for (int j = 0; j < RP_QK_K; j += 128, ql += 64, qh += 32) {
            for (int l = 0; l < 32; l++) {
                const uint8_t a = (uint8_t)L[j + l], b = (uint8_t)L[j + l + 32];
                const uint8_t c = (uint8_t)L[j + l + 64], e = (uint8_t)L[j + l + 96];
                ql[l] = (uint8_t)((a & 0xF) | ((c & 0xF) << 4));
                ql[l + 32] = (uint8_t)((b & 0xF) | ((e & 0xF) << 4));
                qh[l] = (uint8_t)((a >> 4) | ((b >> 4) << 2) | ((c >> 4) << 4) | ((e >> 4) << 6));
            }
        }
    }
}

static void rp_dequantize_q6_k(const rp_block_q6_k *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        const float d = rp_fp16_to_fp32(x[i].d);
        const uint8_t *ql = x[i].ql;
        const uint8_t *qh = x[i].qh;
        const int8_t *sc = x[i].scales;
        for (int h = 0; h < RP_QK_K / 128; h++, y += 128, ql += 64, qh += 32, sc += 8) {
            for (int l = 0; l < 32; l++) {
                const int is = l / 16;
                const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
                const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
                const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                y[l] = d * sc[is + 0] * q1;
                y[l + 32] = d * sc[is + 2] * q2;
                y[l + 64] = d * sc[is + 4] * q3;
                y[l + 96] = d * sc[is + 6] * q4;
            }
        }
    }
}

/* ------------------------------------------------------------------ Q8_K */

/* Activation format for K-quant dots: float d = max/-127 per 256 values
 * (max = signed value of largest magnitude), q = nearest_int(x/d) in
 * [-127, 127], plus bsums = sums of each 16 consecutive q (|bsum| <= 2032).
 * Error bound |x - d*q| <= |d|/2 (d stays fp32). An all-zero block is all
 * zero bytes (ggml leaves its bsums unwritten; we define them as 0). */
static void rp_quantize_q8_k(const float *x, rp_block_q8_k *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += RP_QK_K) {
        float max = 0, amax = 0;
        for (int j = 0; j < RP_QK_K; j++) {
            const float ax = fabsf(x[j]);
            if (ax > amax) {
                amax = ax;
                max = x[j];
            }
        }
        if (amax == 0.0f) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        const float iscale = -127.f / max;
        for (int j = 0; j < RP_QK_K; j++) {
            y[i].qs[j] = (int8_t)rp_clampi(rp_nearest_int(iscale * x[j]), -128, 127);
        }
        for (int g = 0; g < RP_QK_K / 16; g++) {
            int sum = 0;
            for (int l = 0; l < 16; l++) sum += y[i].qs[16 * g + l];
            y[i].bsums[g] = (int16_t)sum;
        }
        y[i].d = 1 / iscale;
    }
}

static void rp_dequantize_q8_k(const rp_block_q8_k *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, y += RP_QK_K) {
        for (int j = 0; j < RP_QK_K; j++) y[j] = x[i].d * x[i].qs[j];
    }
}

/* ------------------------------------------------------------- dispatch */

/* Validates (t, k) for a row operation and returns the block count, or -1.
 * Only the types with reference kernels in this file are accepted. */
static int64_t rp_row_blocks(rp_type t, int64_t k) {
    switch (t) {
    case RP_TYPE_F32: case RP_TYPE_F16: case RP_TYPE_BF16:
    case RP_TYPE_Q8_0: case RP_TYPE_Q4_0: case RP_TYPE_Q4_K:
    case RP_TYPE_Q6_K: case RP_TYPE_Q8_K:
    case RP_TYPE_Q4_1: case RP_TYPE_Q5_0: case RP_TYPE_Q5_1: case RP_TYPE_IQ4_NL:
    case RP_TYPE_Q2_K: case RP_TYPE_Q3_K: case RP_TYPE_Q5_K: case RP_TYPE_IQ4_XS:
        break;
    default:
        return -1;
    }
    const rp_type_traits *tr = rp_type_get_traits((int)t);
    if (!tr || k < 0 || k % tr->blck_size != 0) return -1;
    return k / tr->blck_size;
}

bool rp_dequantize_row(rp_type t, const void *src, float *dst, int64_t k) {
    const int64_t nb = rp_row_blocks(t, k);
    if (nb < 0) return false;
    if (nb == 0) return true;
    if (!src || !dst) return false;
    switch (t) {
    case RP_TYPE_F32:
        memmove(dst, src, (size_t)k * sizeof(float));
        return true;
    case RP_TYPE_F16: {
        const uint16_t *s = src;
        for (int64_t i = 0; i < k; i++) dst[i] = rp_fp16_to_fp32(s[i]);
        return true;
    }
    case RP_TYPE_BF16: {
        const uint16_t *s = src;
        for (int64_t i = 0; i < k; i++) dst[i] = rp_bf16_to_fp32(s[i]);
        return true;
    }
    case RP_TYPE_Q8_0: rp_dequantize_q8_0(src, dst, nb); return true;
    case RP_TYPE_Q4_0: rp_dequantize_q4_0(src, dst, nb); return true;
    case RP_TYPE_Q4_K: rp_dequantize_q4_k(src, dst, nb); return true;
    case RP_TYPE_Q6_K: rp_dequantize_q6_k(src, dst, nb); return true;
    case RP_TYPE_Q8_K: rp_dequantize_q8_k(src, dst, nb); return true;
    case RP_TYPE_Q4_1: rp_dequantize_q4_1(src, dst, nb); return true;
    case RP_TYPE_Q5_0: rp_dequantize_q5_0(src, dst, nb); return true;
    case RP_TYPE_Q5_1: rp_dequantize_q5_1(src, dst, nb); return true;
    case RP_TYPE_IQ4_NL: rp_dequantize_iq4_nl(src, dst, nb); return true;
    case RP_TYPE_IQ4_XS: rp_dequantize_iq4_xs(src, dst, nb); return true;
    case RP_TYPE_Q2_K: rp_dequantize_q2_k(src, dst, nb); return true;
    case RP_TYPE_Q3_K: rp_dequantize_q3_k(src, dst, nb); return true;
    case RP_TYPE_Q5_K: rp_dequantize_q5_k(src, dst, nb); return true;
    default: return false;
    }
}

bool rp_quantize_row(rp_type t, const float *src, void *dst, int64_t k) {
    const int64_t nb = rp_row_blocks(t, k);
    if (nb < 0) return false;
    if (nb == 0) return true;
    if (!src || !dst) return false;
    switch (t) {
    case RP_TYPE_F32:
        memmove(dst, src, (size_t)k * sizeof(float));
        return true;
    case RP_TYPE_F16: {
        uint16_t *d = dst;
        for (int64_t i = 0; i < k; i++) d[i] = rp_fp32_to_fp16(src[i]);
        return true;
    }
    case RP_TYPE_BF16: {
        uint16_t *d = dst;
        for (int64_t i = 0; i < k; i++) d[i] = rp_fp32_to_bf16(src[i]);
        return true;
    }
    case RP_TYPE_Q8_0: rp_quantize_q8_0(src, dst, nb); return true;
    case RP_TYPE_Q4_0: rp_quantize_q4_0(src, dst, nb); return true;
    case RP_TYPE_Q4_K: rp_quantize_q4_k(src, dst, nb); return true;
    case RP_TYPE_Q6_K: rp_quantize_q6_k(src, dst, nb); return true;
    case RP_TYPE_Q8_K: rp_quantize_q8_k(src, dst, nb); return true;
    case RP_TYPE_Q4_1: rp_quantize_q4_1(src, dst, nb); return true;
    case RP_TYPE_Q5_0: rp_quantize_q5_0(src, dst, nb); return true;
    case RP_TYPE_Q5_1: rp_quantize_q5_1(src, dst, nb); return true;
    case RP_TYPE_IQ4_NL: rp_quantize_iq4_nl(src, dst, nb); return true;
    case RP_TYPE_IQ4_XS: rp_quantize_iq4_xs(src, dst, nb); return true;
    case RP_TYPE_Q2_K: rp_quantize_q2_k(src, dst, nb); return true;
    case RP_TYPE_Q3_K: rp_quantize_q3_k(src, dst, nb); return true;
    case RP_TYPE_Q5_K: rp_quantize_q5_k(src, dst, nb); return true;
    default: return false;
    }
}

void rp_round_row(rp_type t, const float *src, float *dst, int64_t n) {
    if (t == RP_TYPE_F16)
        for (int64_t i = 0; i < n; i++) dst[i] = rp_fp16_to_fp32(rp_fp32_to_fp16(src[i]));
    else if (t == RP_TYPE_BF16)
        for (int64_t i = 0; i < n; i++) dst[i] = rp_bf16_to_fp32(rp_fp32_to_bf16(src[i]));
    else if (dst != src)
        memmove(dst, src, sizeof(float) * (size_t)n);
}
