/* q8_arm.h — the Q4_0 / Q8_0 matmul families for aarch64 (NEON, DotProd and I8MM), included once per family file.
 *
 * The including file defines QB (quant bytes per weight row per 32-value block: 32 for Q8_0, 16 for Q4_0),
 * RP_Q8A_Q4 for Q4_0, and is compiled with or without DotProd / I8MM (CMakeLists.txt: *_dotprod.c, *_i8mm.c),
 * which picks the integer dot below: SDOT, or SMULL + SADALP on plain NEON (the same exact int32 sums either
 * way), and with I8MM the SMMLA tile for two or more activation rows.
 *
 * Packed weights, row_block 4: a group is 4 consecutive rows; per 32-value block it holds the 4 rows' quants
 * (row j at j * QB: Q8_0 bytes as in GGUF, Q4_0 nibbles as in GGUF; the I8MM family interleaves
 * the rows of each pair by 8 bytes instead, put_row below) then their 4 scales as float32 (converted
 * once at pack). One block of a group is one 16-byte-aligned unit of 4 * QB + 16 bytes, read front to back.
 *
 * Activations: the Q8_0 quants of the row (cols bytes, GGUF order), then one float32 scale per block (the fp16
 * scale of rp_quantize_row(Q8_0), widened), then one int32 per block that is always 0 (the layout the x86 families
 * use, where it carries a bias; SDOT multiplies signed by signed, so none is needed here).
 *
 * The tile: MR <= 4 activation rows x the 4 rows of a group. Per block and activation row, 8 dots give four
 * int32x4 partial sums, two pairwise adds reduce them to the 4 rows' exact block sums, and one FMA adds them,
 * scaled by dw * da, to a float32x4 accumulator: ggml's per-block integer sum, as the reference. */
#ifndef RP_KERNELS_ARM_Q8_ARM_H
#define RP_KERNELS_ARM_Q8_ARM_H

#include <arm_neon.h>
#include <string.h>

#include "kernels/kernels.h"
#include "kernels/quant.h"

#define RB 4
#define BB (4 * QB + 16)   /* bytes per block of a group */

#if defined(__ARM_FEATURE_DOTPROD)
static inline int32x4_t q8a_dot(int32x4_t acc, int8x16_t a, int8x16_t b) { return vdotq_s32(acc, a, b); }
#else
static inline int32x4_t q8a_dot(int32x4_t acc, int8x16_t a, int8x16_t b) {
    acc = vpadalq_s16(acc, vmull_s8(vget_low_s8(a), vget_low_s8(b)));
    return vpadalq_s16(acc, vmull_high_s8(a, b));
}
#endif

static size_t packed_size(int64_t rows, int64_t cols) {
    return (size_t)((rows + RB - 1) / RB) * (size_t)(cols / 32) * BB;
}

#if defined(__ARM_FEATURE_MATMUL_INT8)
/* I8MM layout (the 2 x 8 interleave of llama.cpp's repack and KleidiAI's "4x8" packs, our own arrangement): per
 * block, the rows of each pair (0, 1), (2, 3) interleaved by 8 bytes, row 2q's bytes [8c, 8c + 8) then row
 * 2q + 1's, so one 16-byte load is the SMMLA operand of the pair with no ZIP at run time. Q8_0: pair q at
 * 2 * QB * q, chunks c = 0..3 (values 8c .. 8c + 7). Q4_0: chunks c = 0, 1 of the GGUF nibble bytes, whose low
 * nibbles are values 8c .. 8c + 7 and high nibbles 16 + 8c .. 16 + 8c + 7. Same size as the plain layout. */
static void put_row(uint8_t *o, int j, const void *qs) {
    const int q = j / 2, s = j % 2;
    for (int c = 0; c < QB / 8; c++) memcpy(o + 2 * QB * q + 16 * c + 8 * s, (const uint8_t *)qs + 8 * c, 8);
}
static void zero_row(uint8_t *o, int j) {
    const int q = j / 2, s = j % 2;
    for (int c = 0; c < QB / 8; c++) memset(o + 2 * QB * q + 16 * c + 8 * s, 0, 8);
}
#else
static void put_row(uint8_t *o, int j, const void *qs) { memcpy(o + j * QB, qs, QB); }
static void zero_row(uint8_t *o, int j) { memset(o + j * QB, 0, QB); }
#endif

static void pack(const void *src, size_t src_row_bytes, int64_t rows, int64_t cols, void *dst, int64_t g0,
                 int64_t g1) {
    const int64_t nb = cols / 32;
    for (int64_t g = g0; g < g1; g++) {
        uint8_t *o = (uint8_t *)dst + (size_t)g * (size_t)nb * BB;
        for (int64_t b = 0; b < nb; b++, o += BB) {
            float d[RB];
            for (int j = 0; j < RB; j++) {
                const int64_t r = g * RB + j;
                if (r >= rows) {
                    zero_row(o, j);
                    d[j] = 0.0f;
                    continue;
                }
                const uint8_t *row = (const uint8_t *)src + (size_t)r * src_row_bytes;
#if defined(RP_Q8A_Q4)
                const rp_block_q4_0 *blk = (const rp_block_q4_0 *)(const void *)row + b;
#else
                const rp_block_q8_0 *blk = (const rp_block_q8_0 *)(const void *)row + b;
#endif
                uint16_t h;
                memcpy(&h, &blk->d, 2);
                put_row(o, j, blk->qs);
                d[j] = rp_fp16_to_fp32(h);
            }
            memcpy(o + 4 * QB, d, sizeof d);
        }
    }
}

static size_t act_row_size(int64_t cols) { return (size_t)cols + (size_t)(cols / 32) * 8; }

/* rp_quantize_row(Q8_0)'s quants and scales exactly: the same amax, d = amax / 127, id = 1 / d, and
 * roundf(x * id) (FCVTAS rounds ties away, as roundf), saturated to int8 with NaN -> -128 as the reference. */
static void quant_act(const float *x, void *dst, int64_t cols) {
    const int64_t nb = cols / 32;
    int8_t *qs = (int8_t *)dst;
    uint8_t *dd = (uint8_t *)dst + cols, *bias = (uint8_t *)dst + cols + 4 * nb;
    const float32x4_t nan_to = vdupq_n_f32(-128.0f);
    for (int64_t b = 0; b < nb; b++, x += 32) {
        float32x4_t v[8];
        float32x4_t m = vdupq_n_f32(0.0f);
        for (int i = 0; i < 8; i++) {
            v[i] = vld1q_f32(x + 4 * i);
            m = vmaxq_f32(m, vabsq_f32(v[i]));
        }
        const float amax = vmaxvq_f32(m);
        const float d = amax / 127;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        const float dq = vgetq_lane_f32(vcvt_f32_f16(vcvt_f16_f32(vdupq_n_f32(d))), 0);
        memcpy(dd + 4 * b, &dq, 4);
        int16x8_t h[4];
        for (int i = 0; i < 4; i++) {
            float32x4_t p0 = vmulq_n_f32(v[2 * i], id), p1 = vmulq_n_f32(v[2 * i + 1], id);
            p0 = vbslq_f32(vceqq_f32(p0, p0), p0, nan_to);
            p1 = vbslq_f32(vceqq_f32(p1, p1), p1, nan_to);
            h[i] = vcombine_s16(vqmovn_s32(vcvtaq_s32_f32(p0)), vqmovn_s32(vcvtaq_s32_f32(p1)));
        }
        vst1q_s8(qs + 32 * b, vcombine_s8(vqmovn_s16(h[0]), vqmovn_s16(h[1])));
        vst1q_s8(qs + 32 * b + 16, vcombine_s8(vqmovn_s16(h[2]), vqmovn_s16(h[3])));
        memset(bias + 4 * b, 0, 4);
    }
}

#if !defined(__ARM_FEATURE_MATMUL_INT8)
static inline __attribute__((always_inline)) void tile(const int MR, const uint8_t *wg, int64_t nb,
                                                       const uint8_t *act, size_t astride, int64_t cols, float *y,
                                                       int64_t ldy, int valid) {
    float32x4_t acc[4] = {vdupq_n_f32(0.0f), vdupq_n_f32(0.0f), vdupq_n_f32(0.0f), vdupq_n_f32(0.0f)};
    const int32x4_t z = vdupq_n_s32(0);
#if defined(RP_Q8A_Q4)
    const uint8x16_t m4 = vdupq_n_u8(0x0F);
    const int8x16_t eight = vdupq_n_s8(8);
#endif
    for (int64_t b = 0; b < nb; b++, wg += BB) {
        int8x16_t w[4][2];
        _Pragma("GCC unroll 16")
        for (int j = 0; j < 4; j++) {
#if defined(RP_Q8A_Q4)
            const uint8x16_t raw = vld1q_u8(wg + QB * j);
            w[j][0] = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(raw, m4)), eight);   /* elements 0..15 */
            w[j][1] = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(raw, 4)), eight);  /* elements 16..31 */
#else
            w[j][0] = vld1q_s8((const int8_t *)(wg + QB * j));
            w[j][1] = vld1q_s8((const int8_t *)(wg + QB * j + 16));
#endif
        }
        const float32x4_t dw = vld1q_f32((const float *)(const void *)(wg + 4 * QB));
        _Pragma("GCC unroll 16")
        for (int m = 0; m < MR; m++) {
            const uint8_t *ar = act + (size_t)m * astride;
            const int8x16_t a0 = vld1q_s8((const int8_t *)(ar + 32 * b)), a1 = vld1q_s8((const int8_t *)(ar + 32 * b + 16));
            float da;
            memcpy(&da, ar + cols + 4 * b, 4);
            int32x4_t s[4];
            _Pragma("GCC unroll 16")
            for (int j = 0; j < 4; j++) s[j] = q8a_dot(q8a_dot(z, w[j][0], a0), w[j][1], a1);
            const int32x4_t sum = vpaddq_s32(vpaddq_s32(s[0], s[1]), vpaddq_s32(s[2], s[3]));
            acc[m] = vfmaq_f32(acc[m], vcvtq_f32_s32(sum), vmulq_n_f32(dw, da));
        }
    }
    for (int m = 0; m < MR; m++) {
        float *o = y + (int64_t)m * ldy;
        if (valid == 4) {
            vst1q_f32(o, acc[m]);
        } else {
            float t[4];
            vst1q_f32(t, acc[m]);
            for (int j = 0; j < valid; j++) o[j] = t[j];
        }
    }
}
#endif

#if defined(__ARM_FEATURE_MATMUL_INT8)
/* I8MM (SMMLA): 2P activation rows (P pairs) x the 4 rows of a group. SMMLA multiplies a 2 x 8 int8 matrix by
 * the transpose of another into a 2 x 2 int32 block, so a pair of activation rows and a pair of weight rows, 8
 * values of k each, interleaved (the weights at pack, see put_row; the activations here, ZIP1 / ZIP2 of 64-bit
 * halves, once per block and pair for both weight pairs), give the four exact dot products of the pair at once:
 * per block 4 SMMLA per (activation pair, weight pair) instead of 8 SDOT per activation row. Decode (one row)
 * runs it too, its pair being the row twice (the same SMMLA count as the SDOT tile's). */
static inline int8x16_t q8a_zip1(int8x16_t a, int8x16_t b) {
    return vreinterpretq_s8_s64(vzip1q_s64(vreinterpretq_s64_s8(a), vreinterpretq_s64_s8(b)));
}
static inline int8x16_t q8a_zip2(int8x16_t a, int8x16_t b) {
    return vreinterpretq_s8_s64(vzip2q_s64(vreinterpretq_s64_s8(a), vreinterpretq_s64_s8(b)));
}

/* rows (m0, m1) of the activations; m1 == m0 for a last odd row (its second results are dropped) */
static inline __attribute__((always_inline)) void tile_mmla(const int P, const uint8_t *wg, int64_t nb,
                                                            const uint8_t *const *ar, int64_t cols, float *const *yr,
                                                            int valid) {
    float32x4_t acc[2][2];   /* [pair][weight pair]: (m0 r, m0 r+1, m1 r, m1 r+1) */
    for (int p = 0; p < P; p++) acc[p][0] = acc[p][1] = vdupq_n_f32(0.0f);
#if defined(RP_Q8A_Q4)
    const uint8x16_t m4 = vdupq_n_u8(0x0F);
    const int8x16_t eight = vdupq_n_s8(8);
#endif
    for (int64_t b = 0; b < nb; b++, wg += BB) {
        /* wp[q][c]: weight rows 2q, 2q + 1, values 8c .. 8c + 7: one load each (the packed interleave) */
        int8x16_t wp[2][4];
        _Pragma("GCC unroll 16")
        for (int q = 0; q < 2; q++) {
#if defined(RP_Q8A_Q4)
            for (int h = 0; h < 2; h++) {
                const uint8x16_t raw = vld1q_u8(wg + 2 * QB * q + 16 * h);
                wp[q][h] = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(raw, m4)), eight);
                wp[q][2 + h] = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(raw, 4)), eight);
            }
#else
            _Pragma("GCC unroll 16")
            for (int c = 0; c < 4; c++) wp[q][c] = vld1q_s8((const int8_t *)(wg + 2 * QB * q + 16 * c));
#endif
        }
        const float32x4_t dw = vld1q_f32((const float *)(const void *)(wg + 4 * QB));
        const float32x4_t dlo = vcombine_f32(vget_low_f32(dw), vget_low_f32(dw));
        const float32x4_t dhi = vcombine_f32(vget_high_f32(dw), vget_high_f32(dw));
        _Pragma("GCC unroll 16")
        for (int p = 0; p < P; p++) {
            const uint8_t *x0 = ar[2 * p] + 32 * b, *x1 = ar[2 * p + 1] + 32 * b;
            const int8x16_t a00 = vld1q_s8((const int8_t *)x0), a01 = vld1q_s8((const int8_t *)(x0 + 16));
            const int8x16_t a10 = vld1q_s8((const int8_t *)x1), a11 = vld1q_s8((const int8_t *)(x1 + 16));
            const int8x16_t ap[4] = {q8a_zip1(a00, a10), q8a_zip2(a00, a10), q8a_zip1(a01, a11), q8a_zip2(a01, a11)};
            int32x4_t s0 = vdupq_n_s32(0), s1 = vdupq_n_s32(0);
            _Pragma("GCC unroll 16")
            for (int c = 0; c < 4; c++) {
                s0 = vmmlaq_s32(s0, ap[c], wp[0][c]);
                s1 = vmmlaq_s32(s1, ap[c], wp[1][c]);
            }
            float da0, da1;
            memcpy(&da0, ar[2 * p] + cols + 4 * b, 4);
            memcpy(&da1, ar[2 * p + 1] + cols + 4 * b, 4);
            const float32x4_t da = vcombine_f32(vdup_n_f32(da0), vdup_n_f32(da1));
            acc[p][0] = vfmaq_f32(acc[p][0], vcvtq_f32_s32(s0), vmulq_f32(dlo, da));
            acc[p][1] = vfmaq_f32(acc[p][1], vcvtq_f32_s32(s1), vmulq_f32(dhi, da));
        }
    }
    for (int p = 0; p < P; p++) {
        const float32x4_t r[2] = {
            vreinterpretq_f32_f64(vzip1q_f64(vreinterpretq_f64_f32(acc[p][0]), vreinterpretq_f64_f32(acc[p][1]))),
            vreinterpretq_f32_f64(vzip2q_f64(vreinterpretq_f64_f32(acc[p][0]), vreinterpretq_f64_f32(acc[p][1]))),
        };
        for (int m = 0; m < 2; m++) {
            float *o = yr[2 * p + m];
            if (!o) continue;
            if (valid == 4) {
                vst1q_f32(o, r[m]);
            } else {
                float t[4];
                vst1q_f32(t, r[m]);
                for (int j = 0; j < valid; j++) o[j] = t[j];
            }
        }
    }
}
#endif

static void gemm(const void *w, size_t w_row_bytes, int64_t rows, int64_t cols, const void *act, size_t act_stride,
                 int64_t n, int64_t r0, int64_t r1, float *y, int64_t ldy, void *scratch) {
    (void)w_row_bytes; (void)rows; (void)scratch;
    const int64_t nb = cols / 32;
    const uint8_t *a = (const uint8_t *)act;
    for (int64_t g = r0 / RB; g * RB < r1; g++) {
        const uint8_t *wg = (const uint8_t *)w + (size_t)g * (size_t)nb * BB;
        const int valid = r1 - g * RB < RB ? (int)(r1 - g * RB) : RB;
        float *yg = y + g * RB;
        int64_t i = 0;
#if defined(__ARM_FEATURE_MATMUL_INT8)
        {   /* every n, decode too: the packed interleave is SMMLA's (one row: its pair repeats it) */
            for (; i < n; i += 4) {
                const uint8_t *ar[4];
                float *yr[4];
                for (int m = 0; m < 4; m++) {
                    const int64_t im = i + m < n ? i + m : n - 1;   /* a missing row repeats the last; dropped */
                    ar[m] = a + (size_t)im * act_stride;
                    yr[m] = i + m < n ? yg + (i + m) * ldy : NULL;
                }
                if (n - i > 2) tile_mmla(2, wg, nb, ar, cols, yr, valid);
                else tile_mmla(1, wg, nb, ar, cols, yr, valid);
            }
        }
#else
        for (; i + 4 <= n; i += 4) tile(4, wg, nb, a + (size_t)i * act_stride, act_stride, cols, yg + i * ldy, ldy, valid);
        switch (n - i) {
        case 3: tile(3, wg, nb, a + (size_t)i * act_stride, act_stride, cols, yg + i * ldy, ldy, valid); break;
        case 2: tile(2, wg, nb, a + (size_t)i * act_stride, act_stride, cols, yg + i * ldy, ldy, valid); break;
        case 1: tile(1, wg, nb, a + (size_t)i * act_stride, act_stride, cols, yg + i * ldy, ldy, valid); break;
        default: break;
        }
#endif
    }
}

#endif /* RP_KERNELS_ARM_Q8_ARM_H */
