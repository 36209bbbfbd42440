/* kq_arm.h — the Q4_K / Q6_K matmul families for aarch64 (NEON and DotProd), included once per family file.
 *
 * The including file defines RP_KQ_TYPE (RP_TYPE_Q4_K, or RP_TYPE_Q6_K with RP_KQ_Q6) and is compiled with or without DotProd
 * (CMakeLists.txt: *_dotprod.c), which picks the integer dot (SDOT, or SMULL + SADALP: the same exact sums).
 * Weights stay in GGUF's block layout, copied row by row at pack (row_block 1: a GEMV reads each row once, front
 * to back); activations are exactly rp_quantize_row(Q8_K). Per super-block of 256 values the kernel forms ggml's
 * exact integer sums (per 32-value sub-block for Q4_K, with the mins through the activation's bsums; per 16-value
 * group for Q6_K), scaled and accumulated in float as the reference. */
#ifndef RP_KERNELS_ARM_KQ_ARM_H
#define RP_KERNELS_ARM_KQ_ARM_H

#include <arm_neon.h>
#include <string.h>

#include "kernels/kernels.h"
#include "kernels/quant.h"

#if defined(__ARM_FEATURE_DOTPROD)
static inline int32x4_t kq_dot(int32x4_t acc, int8x16_t a, int8x16_t b) { return vdotq_s32(acc, a, b); }
#else
static inline int32x4_t kq_dot(int32x4_t acc, int8x16_t a, int8x16_t b) {
    acc = vpadalq_s16(acc, vmull_s8(vget_low_s8(a), vget_low_s8(b)));
    return vpadalq_s16(acc, vmull_high_s8(a, b));
}
#endif

static size_t packed_size(int64_t rows, int64_t cols) { return (size_t)rows * rp_type_row_size(RP_KQ_TYPE, cols); }

static void pack(const void *src, size_t src_row_bytes, int64_t rows, int64_t cols, void *dst, int64_t g0,
                 int64_t g1) {
    const size_t rb = rp_type_row_size(RP_KQ_TYPE, cols);
    for (int64_t r = g0; r < g1 && r < rows; r++)
        memcpy((uint8_t *)dst + (size_t)r * rb, (const uint8_t *)src + (size_t)r * src_row_bytes, rb);
}

static size_t act_row_size(int64_t cols) { return rp_type_row_size(RP_TYPE_Q8_K, cols); }
static void quant_act(const float *x, void *dst, int64_t cols) { rp_quantize_row(RP_TYPE_Q8_K, x, dst, cols); }

#if !defined(RP_KQ_Q6)
static float kq_dot_row(const void *wrow, const rp_block_q8_k *a, int64_t nb) {
    const rp_block_q4_k *w = (const rp_block_q4_k *)wrow;
    const uint8x16_t m4 = vdupq_n_u8(0x0F);
    const int32x4_t z = vdupq_n_s32(0);
    float sumf = 0;
    for (int64_t i = 0; i < nb; i++) {
        uint8_t sc[8], mn[8];
        for (int j = 0; j < 8; j++) rp_q4_k_scale_min(j, w[i].scales, &sc[j], &mn[j]);
        /* mins: sum over the 16 groups of bsums[g] * mn[g / 2] */
        const int16x8_t b0 = vld1q_s16(a[i].bsums), b1 = vld1q_s16(a[i].bsums + 8);
        const int16x8_t bp = vpaddq_s16(b0, b1);   /* the 8 sub-blocks' sums */
        const int16x8_t m = vreinterpretq_s16_u16(vmovl_u8(vld1_u8(mn)));
        const int32_t summs = vaddvq_s32(vmull_s16(vget_low_s16(bp), vget_low_s16(m))) +
                              vaddvq_s32(vmull_high_s16(bp, m));
        int32_t isum = 0;
        const uint8_t *q = w[i].qs;
        const int8_t *q8 = a[i].qs;
        _Pragma("GCC unroll 16")
        for (int j = 0; j < 8; j += 2, q += 32, q8 += 64) {
            const uint8x16_t r0 = vld1q_u8(q), r1 = vld1q_u8(q + 16);
            int32x4_t s0 = kq_dot(z, vreinterpretq_s8_u8(vandq_u8(r0, m4)), vld1q_s8(q8));
            s0 = kq_dot(s0, vreinterpretq_s8_u8(vandq_u8(r1, m4)), vld1q_s8(q8 + 16));
            int32x4_t s1 = kq_dot(z, vreinterpretq_s8_u8(vshrq_n_u8(r0, 4)), vld1q_s8(q8 + 32));
            s1 = kq_dot(s1, vreinterpretq_s8_u8(vshrq_n_u8(r1, 4)), vld1q_s8(q8 + 48));
            isum += sc[j] * vaddvq_s32(s0) + sc[j + 1] * vaddvq_s32(s1);
        }
        const float d = rp_fp16_to_fp32(w[i].d) * a[i].d;
        const float dmin = rp_fp16_to_fp32(w[i].dmin) * a[i].d;
        sumf += d * isum;
        sumf -= dmin * summs;
    }
    return sumf;
}
#else
static float kq_dot_row(const void *wrow, const rp_block_q8_k *a, int64_t nb) {
    const rp_block_q6_k *w = (const rp_block_q6_k *)wrow;
    const uint8x16_t m4 = vdupq_n_u8(0x0F), m3 = vdupq_n_u8(3);
    const int8x16_t off = vdupq_n_s8(32);
    const int32x4_t z = vdupq_n_s32(0);
    float sumf = 0;
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *ql = w[i].ql, *qh = w[i].qh;
        const int8_t *q8 = a[i].qs, *sc = w[i].scales;
        int32_t isum = 0;
        _Pragma("GCC unroll 16")
        for (int h = 0; h < 2; h++, ql += 64, qh += 32, q8 += 128, sc += 8) {
            _Pragma("GCC unroll 16")
            for (int l = 0; l < 32; l += 16) {
                const uint8x16_t lo = vld1q_u8(ql + l), hi = vld1q_u8(ql + l + 32), hb = vld1q_u8(qh + l);
                /* the four 16-value groups at l, l + 32, l + 64, l + 96 of this half */
                int8x16_t v[4];
                v[0] = vreinterpretq_s8_u8(vorrq_u8(vandq_u8(lo, m4), vshlq_n_u8(vandq_u8(hb, m3), 4)));
                v[1] = vreinterpretq_s8_u8(vorrq_u8(vandq_u8(hi, m4), vshlq_n_u8(vandq_u8(vshrq_n_u8(hb, 2), m3), 4)));
                v[2] = vreinterpretq_s8_u8(vorrq_u8(vshrq_n_u8(lo, 4), vshlq_n_u8(vandq_u8(vshrq_n_u8(hb, 4), m3), 4)));
                v[3] = vreinterpretq_s8_u8(vorrq_u8(vshrq_n_u8(hi, 4), vshlq_n_u8(vshrq_n_u8(hb, 6), 4)));
                _Pragma("GCC unroll 16")
                for (int k = 0; k < 4; k++) {
                    const int e = 32 * k + l;   /* element offset in this half; group e / 16 */
                    const int32_t s = vaddvq_s32(kq_dot(z, vsubq_s8(v[k], off), vld1q_s8(q8 + e)));
                    isum += sc[e / 16] * s;
                }
            }
        }
        sumf += rp_fp16_to_fp32(w[i].d) * a[i].d * isum;
    }
    return sumf;
}
#endif

static void gemm(const void *w, size_t w_row_bytes, int64_t rows, int64_t cols, const void *act, size_t act_stride,
                 int64_t n, int64_t r0, int64_t r1, float *y, int64_t ldy, void *scratch) {
    (void)w_row_bytes; (void)rows; (void)scratch;
    const size_t rb = rp_type_row_size(RP_KQ_TYPE, cols);
    const int64_t nb = cols / RP_QK_K;
    for (int64_t r = r0; r < r1; r++) {
        const uint8_t *wr = (const uint8_t *)w + (size_t)r * rb;
        for (int64_t i = 0; i < n; i++)
            y[i * ldy + r] =
                kq_dot_row(wr, (const rp_block_q8_k *)(const void *)((const uint8_t *)act + (size_t)i * act_stride), nb);
    }
}

#endif /* RP_KERNELS_ARM_KQ_ARM_H */
