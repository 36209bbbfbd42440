/* kq_i8mm.h — the Q4_K / Q6_K matmul families for aarch64 I8MM (SMMLA), included once per family file
 * (mm_q4_k_i8mm.c, mm_q6_k_i8mm.c; RP_KQ_Q6 for Q6_K), compiled with +i8mm (CMakeLists.txt: *_i8mm.c).
 *
 * SMMLA multiplies a 2 x 8 int8 matrix by the transpose of another 2 x 8 into a 2 x 2 int32 block: a pair of
 * activation rows and a pair of weight rows, 8 values each, give the four dot products (lanes a0w0, a0w1, a1w0,
 * a1w1) at once. Both sides are stored pair-interleaved by 8 values (row 2q's values [8c, 8c + 8) then row
 * 2q + 1's), so each 16-byte load is one SMMLA operand: the weights once at load (pack, the 2 x 8 interleave of
 * llama.cpp's repack and KleidiAI's "x8" RHS packs, our own arrangement), the activations once per call into
 * the scratch (their rows come quantized one by one, rp_quantize_row(Q8_K)).
 *
 * row_block 4: a group is 2 weight pairs; per super-block of 256 values a pair holds
 *   Q4_K (296 bytes, 2 x 144 + 8): d[2], dmin[2] (fp16 as in GGUF), the 8 sub-block scales as (s_r0, s_r1) byte
 *        pairs (16), the 8 mins row by row (16), then the nibbles: per 64-value half-pair k, 4 chunks of
 *        (r0 bytes 8c..8c+7, r1 bytes 8c..8c+7) of GGUF's qs[32k..32k+31] (low nibble: value 64k + l, high:
 *        64k + 32 + l);
 *   Q6_K (420 bytes, 2 x 210): per 128-value half h, 4 chunks each of ql[l], ql[32 + l], qh[l] (l = 8c..8c+7)
 *        interleaved the same way (192 bytes), then the 16 scales as (s_r0, s_r1) pairs (32), then d[2] (fp16).
 * Same bytes as GGUF's rows (Q6_K) or 2.8 % more (Q4_K: the decoded 6-bit scales and mins).
 *
 * Exactness: the integer sums per sub-block (Q4_K: 32 values; Q6_K: 16) are exact int32 SMMLA sums, scaled by
 * the integer sub-block scale in int32 as ggml does, then per super-block d_w * d_a * isum (Q4_K: minus
 * dmin_w * d_a * the mins against the activation's bsums) in float: the reference's arithmetic, float order
 * aside. Decode (one activation row) runs the same kernel with the row's pair being itself twice. */
#ifndef RP_KERNELS_ARM_KQ_I8MM_H
#define RP_KERNELS_ARM_KQ_I8MM_H

#include <arm_neon.h>
#include <string.h>

#include "kernels/kernels.h"
#include "kernels/quant.h"

#if !defined(__ARM_FEATURE_MATMUL_INT8)
#error "kq_i8mm.h needs +i8mm (a *_i8mm.c file)"
#endif

#define RB 4
#if defined(RP_KQ_Q6)
#define PB 420   /* bytes of one weight pair per super-block */
#define KQ_TYPE RP_TYPE_Q6_K
#else
#define PB 296
#define KQ_TYPE RP_TYPE_Q4_K
#endif
#define AB 560   /* bytes of one activation pair per super-block: qs 512, bsums 2 x 8 int16 (32), d[2] (8), pad */

static size_t packed_size(int64_t rows, int64_t cols) {
    return (size_t)((rows + RB - 1) / RB) * (size_t)(cols / RP_QK_K) * 2 * PB;
}

/* 8 bytes of row s (0, 1) of a pair into chunk c of a 16-byte-chunked run at o */
static inline void put8(uint8_t *o, int c, int s, const uint8_t *src) { memcpy(o + 16 * c + 8 * s, src, 8); }

#if !defined(RP_KQ_Q6)
static void pack_pair(uint8_t *o, const rp_block_q4_k *const w[2]) {
    memset(o, 0, PB);
    uint16_t *h = (uint16_t *)(void *)o;
    for (int s = 0; s < 2; s++) {
        if (!w[s]) continue;
        memcpy(&h[s], &w[s]->d, 2);
        memcpy(&h[2 + s], &w[s]->dmin, 2);
        for (int j = 0; j < 8; j++) {
            uint8_t sc, mn;
            rp_q4_k_scale_min(j, w[s]->scales, &sc, &mn);
            o[8 + 2 * j + s] = sc;
            o[24 + 8 * s + j] = mn;
        }
        for (int k = 0; k < 4; k++)
            for (int c = 0; c < 4; c++) put8(o + 40 + 64 * k, c, s, w[s]->qs + 32 * k + 8 * c);
    }
}
#else
static void pack_pair(uint8_t *o, const rp_block_q6_k *const w[2]) {
    memset(o, 0, PB);
    for (int s = 0; s < 2; s++) {
        if (!w[s]) continue;
        for (int hf = 0; hf < 2; hf++) {
            uint8_t *oh = o + 192 * hf;
            const uint8_t *ql = w[s]->ql + 64 * hf, *qh = w[s]->qh + 32 * hf;
            for (int c = 0; c < 4; c++) {
                put8(oh, c, s, ql + 8 * c);
                put8(oh + 64, c, s, ql + 32 + 8 * c);
                put8(oh + 128, c, s, qh + 8 * c);
            }
        }
        for (int g = 0; g < 16; g++) o[384 + 2 * g + s] = (uint8_t)w[s]->scales[g];
        memcpy(o + 416 + 2 * s, &w[s]->d, 2);
    }
}
#endif

static void pack(const void *src, size_t src_row_bytes, int64_t rows, int64_t cols, void *dst, int64_t g0,
                 int64_t g1) {
    const int64_t nb = cols / RP_QK_K;
    for (int64_t g = g0; g < g1; g++) {
        uint8_t *o = (uint8_t *)dst + (size_t)g * (size_t)nb * 2 * PB;
        for (int64_t b = 0; b < nb; b++)
            for (int q = 0; q < 2; q++, o += PB) {
#if defined(RP_KQ_Q6)
                const rp_block_q6_k *w[2];
#else
                const rp_block_q4_k *w[2];
#endif
                for (int s = 0; s < 2; s++) {
                    const int64_t r = g * RB + 2 * q + s;
                    w[s] = r < rows ? (const void *)((const uint8_t *)src + (size_t)r * src_row_bytes) : NULL;
                    if (w[s]) w[s] += b;
                }
                pack_pair(o, w);
            }
    }
}

static size_t act_row_size(int64_t cols) { return rp_type_row_size(RP_TYPE_Q8_K, cols); }
static void quant_act(const float *x, void *dst, int64_t cols) { rp_quantize_row(RP_TYPE_Q8_K, x, dst, cols); }
static size_t scratch_bytes(int64_t cols, int64_t n) { return (size_t)((n + 1) / 2) * (size_t)(cols / RP_QK_K) * AB; }

/* activation rows (i0, i1) (i1 == i0 for a last odd row) into pair-interleaved super-blocks at o */
static void pack_act(uint8_t *o, const rp_block_q8_k *a0, const rp_block_q8_k *a1, int64_t nb) {
    for (int64_t b = 0; b < nb; b++, o += AB) {
        const rp_block_q8_k *a[2] = {a0 + b, a1 + b};
        for (int c = 0; c < 32; c++)
            vst1q_s8((int8_t *)(o + 16 * c), vcombine_s8(vld1_s8(a[0]->qs + 8 * c), vld1_s8(a[1]->qs + 8 * c)));
        for (int s = 0; s < 2; s++) {
            /* the 8 sub-blocks' sums (bsums are per 16 values) */
            const int16x8_t bs = vpaddq_s16(vld1q_s16(a[s]->bsums), vld1q_s16(a[s]->bsums + 8));
            vst1q_s16((int16_t *)(void *)(o + 512 + 16 * s), bs);
            memcpy(o + 544 + 4 * s, &a[s]->d, 4);
        }
        memset(o + 552, 0, AB - 552);
    }
}

/* (s_r0, s_r1) byte pair at p -> int32 lanes (s_r0, s_r1, s_r0, s_r1) */
static inline int32x4_t pair_scale_u8(const uint8_t *p) {
    uint16_t v;
    memcpy(&v, p, 2);
    return vreinterpretq_s32_u32(vmovl_u16(vget_low_u16(vmovl_u8(vreinterpret_u8_u16(vdup_n_u16(v))))));
}
static inline int32x4_t pair_scale_s8(const uint8_t *p) {
    uint16_t v;
    memcpy(&v, p, 2);
    return vmovl_s16(vget_low_s16(vmovl_s8(vreinterpret_s8_u16(vdup_n_u16(v)))));
}

#if !defined(RP_KQ_Q6)
/* one activation pair x one weight pair, one super-block: (isum, summs) lanes a0w0 a0w1 a1w0 a1w1 */
static inline __attribute__((always_inline)) float32x4_t sb_pair(const uint8_t *wp, const uint8_t *ap,
                                                                 float32x4_t da) {
    const uint8x16_t m4 = vdupq_n_u8(0x0F);
    int32x4_t isum = vdupq_n_s32(0);
    _Pragma("GCC unroll 16")
    for (int k = 0; k < 4; k++) {
        int32x4_t slo = vdupq_n_s32(0), shi = vdupq_n_s32(0);
        _Pragma("GCC unroll 16")
        for (int c = 0; c < 4; c++) {
            const uint8x16_t raw = vld1q_u8(wp + 40 + 64 * k + 16 * c);
            slo = vmmlaq_s32(slo, vld1q_s8((const int8_t *)(ap + 16 * (8 * k + c))),
                             vreinterpretq_s8_u8(vandq_u8(raw, m4)));
            shi = vmmlaq_s32(shi, vld1q_s8((const int8_t *)(ap + 16 * (8 * k + 4 + c))),
                             vreinterpretq_s8_u8(vshrq_n_u8(raw, 4)));
        }
        isum = vmlaq_s32(isum, slo, pair_scale_u8(wp + 8 + 4 * k));
        isum = vmlaq_s32(isum, shi, pair_scale_u8(wp + 8 + 4 * k + 2));
    }
    /* mins: sum over sub-blocks j of mn[r][j] * bsum[i][j] for the four (i, r) */
    const uint8x16_t mn = vld1q_u8(wp + 24);
    const int16x8_t m0 = vreinterpretq_s16_u16(vmovl_u8(vget_low_u8(mn)));
    const int16x8_t m1 = vreinterpretq_s16_u16(vmovl_high_u8(mn));
    const int16x8_t b0 = vld1q_s16((const int16_t *)(const void *)(ap + 512));
    const int16x8_t b1 = vld1q_s16((const int16_t *)(const void *)(ap + 528));
#define KQ_D16(b, m) vmlal_high_s16(vmull_s16(vget_low_s16(b), vget_low_s16(m)), b, m)
    const int32x4_t summs =
        vpaddq_s32(vpaddq_s32(KQ_D16(b0, m0), KQ_D16(b0, m1)), vpaddq_s32(KQ_D16(b1, m0), KQ_D16(b1, m1)));
#undef KQ_D16
    const float32x4_t dd = vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16((const uint16_t *)(const void *)wp)));
    const float32x4_t dw = vcombine_f32(vget_low_f32(dd), vget_low_f32(dd));
    const float32x4_t dm = vcombine_f32(vget_high_f32(dd), vget_high_f32(dd));
    return vsubq_f32(vmulq_f32(vmulq_f32(dw, da), vcvtq_f32_s32(isum)),
                     vmulq_f32(vmulq_f32(dm, da), vcvtq_f32_s32(summs)));
}
#else
static inline __attribute__((always_inline)) float32x4_t sb_pair(const uint8_t *wp, const uint8_t *ap,
                                                                 float32x4_t da) {
    const uint8x16_t m4 = vdupq_n_u8(0x0F), m3 = vdupq_n_u8(3);
    const int8x16_t off = vdupq_n_s8(32);
    int32x4_t isum = vdupq_n_s32(0);
    _Pragma("GCC unroll 16")
    for (int hf = 0; hf < 2; hf++) {
        const uint8_t *wh = wp + 192 * hf;
        const uint8_t *ah = ap + 16 * 16 * hf;   /* chunks 16 hf .. 16 hf + 15 */
        _Pragma("GCC unroll 16")
        for (int m = 0; m < 2; m++) {
            int32x4_t s[4] = {vdupq_n_s32(0), vdupq_n_s32(0), vdupq_n_s32(0), vdupq_n_s32(0)};
            _Pragma("GCC unroll 16")
            for (int cc = 0; cc < 2; cc++) {
                const int c = 2 * m + cc;
                const uint8x16_t la = vld1q_u8(wh + 16 * c), lb = vld1q_u8(wh + 64 + 16 * c);
                const uint8x16_t hb = vld1q_u8(wh + 128 + 16 * c);
                int8x16_t v[4];
                v[0] = vreinterpretq_s8_u8(vorrq_u8(vandq_u8(la, m4), vshlq_n_u8(vandq_u8(hb, m3), 4)));
                v[1] = vreinterpretq_s8_u8(vorrq_u8(vandq_u8(lb, m4), vshlq_n_u8(vandq_u8(vshrq_n_u8(hb, 2), m3), 4)));
                v[2] = vreinterpretq_s8_u8(vorrq_u8(vshrq_n_u8(la, 4), vshlq_n_u8(vandq_u8(vshrq_n_u8(hb, 4), m3), 4)));
                v[3] = vreinterpretq_s8_u8(vorrq_u8(vshrq_n_u8(lb, 4), vshlq_n_u8(vshrq_n_u8(hb, 6), 4)));
                /* v[k]: values 128 hf + 32 k + 8 c .. + 7, activation chunk 16 hf + 4 k + c */
                _Pragma("GCC unroll 16")
                for (int k = 0; k < 4; k++)
                    s[k] = vmmlaq_s32(s[k], vld1q_s8((const int8_t *)(ah + 16 * (4 * k + c))), vsubq_s8(v[k], off));
            }
            /* group 8 hf + 2 k + m (16 values: chunks c = 2m, 2m + 1) */
            _Pragma("GCC unroll 16")
            for (int k = 0; k < 4; k++) isum = vmlaq_s32(isum, s[k], pair_scale_s8(wp + 384 + 2 * (8 * hf + 2 * k + m)));
        }
    }
    /* d[2] (4 bytes, the pair's last): lanes (d_r0, d_r1, d_r0, d_r1) */
    uint32_t d2;
    memcpy(&d2, wp + 416, 4);
    const float32x4_t dw = vcvt_f32_f16(vreinterpret_f16_u32(vdup_n_u32(d2)));
    return vmulq_f32(vmulq_f32(dw, da), vcvtq_f32_s32(isum));
}
#endif

static void gemm(const void *w, size_t w_row_bytes, int64_t rows, int64_t cols, const void *act, size_t act_stride,
                 int64_t n, int64_t r0, int64_t r1, float *y, int64_t ldy, void *scratch) {
    (void)w_row_bytes; (void)rows;
    const int64_t nb = cols / RP_QK_K, np = (n + 1) / 2;
    uint8_t *ap = (uint8_t *)scratch;
    for (int64_t p = 0; p < np; p++) {
        const int64_t i0 = 2 * p, i1 = 2 * p + 1 < n ? 2 * p + 1 : 2 * p;
        pack_act(ap + (size_t)p * (size_t)nb * AB,
                 (const rp_block_q8_k *)(const void *)((const uint8_t *)act + (size_t)i0 * act_stride),
                 (const rp_block_q8_k *)(const void *)((const uint8_t *)act + (size_t)i1 * act_stride), nb);
    }
    for (int64_t g = r0 / RB; g * RB < r1; g++) {
        const uint8_t *wg = (const uint8_t *)w + (size_t)g * (size_t)nb * 2 * PB;
        const int valid = r1 - g * RB < RB ? (int)(r1 - g * RB) : RB;
        for (int64_t p = 0; p < np; p++) {
            const uint8_t *a = ap + (size_t)p * (size_t)nb * AB;
            float32x4_t acc[2] = {vdupq_n_f32(0.0f), vdupq_n_f32(0.0f)};
            for (int64_t b = 0; b < nb; b++) {
                const uint8_t *ab = a + (size_t)b * AB;
                float d0, d1;
                memcpy(&d0, ab + 544, 4);
                memcpy(&d1, ab + 548, 4);
                const float32x4_t da = vcombine_f32(vdup_n_f32(d0), vdup_n_f32(d1));
                _Pragma("GCC unroll 16")
                for (int q = 0; q < 2; q++) acc[q] = vaddq_f32(acc[q], sb_pair(wg + (size_t)b * 2 * PB + q * PB, ab, da));
            }
            /* acc[q] lanes (i0 r, i0 r+1, i1 r, i1 r+1) for r = 4g + 2q */
            float out[2][4];
            for (int q = 0; q < 2; q++) {
                out[0][2 * q] = vgetq_lane_f32(acc[q], 0);
                out[0][2 * q + 1] = vgetq_lane_f32(acc[q], 1);
                out[1][2 * q] = vgetq_lane_f32(acc[q], 2);
                out[1][2 * q + 1] = vgetq_lane_f32(acc[q], 3);
            }
            for (int s = 0; s < 2 && 2 * p + s < n; s++) {
                float *o = y + (2 * p + s) * ldy + g * RB;
                for (int j = 0; j < valid; j++) o[j] = out[s][j];
            }
        }
    }
}

#endif /* RP_KERNELS_ARM_KQ_I8MM_H */
