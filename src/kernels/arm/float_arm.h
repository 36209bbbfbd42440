/* float_arm.h — the float vector layer for aarch64 NEON under the F32/F16/BF16 matmul, attention and element-wise
 * templates of kernels/float_tmpl.h.
 *
 * A vector is a pair of 128-bit registers (8 lanes, FX_W = 8), so the templates take their 8-lane shapes, the
 * ones AVX2 runs: 16-row weight panels, 6 x 2 GEMM accumulators (24 of the 32 NEON registers), 8 x 8
 * transposes. F16 conversions are FCVTL / FCVTN (round to nearest even, subnormals and NaN payloads kept, as
 * rp_fp32_to_fp16 / rp_fp16_to_fp32: Linux runs with FPCR.FZ = FZ16 = DN = 0). */
#ifndef RP_KERNELS_ARM_FLOAT_ARM_H
#define RP_KERNELS_ARM_FLOAT_ARM_H

#include <arm_neon.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/float_macros.h"
#include "kernels/kernels.h"
#include "kernels/quant.h"

#define FX_W 8
typedef struct { float32x4_t lo, hi; } fx_v;

RP_FX_INLINE fx_v fx_pair(float32x4_t lo, float32x4_t hi) { fx_v v = {lo, hi}; return v; }
RP_FX_INLINE fx_v fx_zero(void) { return fx_pair(vdupq_n_f32(0.0f), vdupq_n_f32(0.0f)); }
RP_FX_INLINE fx_v fx_set1(float x) { return fx_pair(vdupq_n_f32(x), vdupq_n_f32(x)); }
RP_FX_INLINE fx_v fx_load(const float *p) { return fx_pair(vld1q_f32(p), vld1q_f32(p + 4)); }
RP_FX_INLINE void fx_store(float *p, fx_v v) { vst1q_f32(p, v.lo); vst1q_f32(p + 4, v.hi); }
/* lanes >= n read as 0; only [p, p + n) is touched */
RP_FX_INLINE fx_v fx_loadn(const float *p, int n) {
    float t[8] = {0};
    memcpy(t, p, sizeof(float) * (size_t)n);
    return fx_load(t);
}
RP_FX_INLINE void fx_storen(float *p, fx_v v, int n) {
    float t[8];
    fx_store(t, v);
    memcpy(p, t, sizeof(float) * (size_t)n);
}
RP_FX_INLINE fx_v fx_load_f16(const uint16_t *p) {
    const uint16x8_t h = vld1q_u16(p);
    return fx_pair(vcvt_f32_f16(vreinterpret_f16_u16(vget_low_u16(h))), vcvt_high_f32_f16(vreinterpretq_f16_u16(h)));
}
RP_FX_INLINE fx_v fx_loadn_f16(const uint16_t *p, int n) {
    uint16_t t[8] = {0};
    memcpy(t, p, sizeof(uint16_t) * (size_t)n);
    return fx_load_f16(t);
}
RP_FX_INLINE void fx_store_f16(uint16_t *p, fx_v v) {
    vst1q_u16(p, vreinterpretq_u16_f16(vcvt_high_f16_f32(vcvt_f16_f32(v.lo), v.hi)));
}
RP_FX_INLINE void fx_storen_f16(uint16_t *p, fx_v v, int n) {
    uint16_t t[8];
    fx_store_f16(t, v);
    memcpy(p, t, sizeof(uint16_t) * (size_t)n);
}
/* a * b + c, fused */
RP_FX_INLINE fx_v fx_fma(fx_v a, fx_v b, fx_v c) { return fx_pair(vfmaq_f32(c.lo, a.lo, b.lo), vfmaq_f32(c.hi, a.hi, b.hi)); }
RP_FX_INLINE fx_v fx_add(fx_v a, fx_v b) { return fx_pair(vaddq_f32(a.lo, b.lo), vaddq_f32(a.hi, b.hi)); }
RP_FX_INLINE fx_v fx_sub(fx_v a, fx_v b) { return fx_pair(vsubq_f32(a.lo, b.lo), vsubq_f32(a.hi, b.hi)); }
RP_FX_INLINE fx_v fx_mul(fx_v a, fx_v b) { return fx_pair(vmulq_f32(a.lo, b.lo), vmulq_f32(a.hi, b.hi)); }
RP_FX_INLINE fx_v fx_div(fx_v a, fx_v b) { return fx_pair(vdivq_f32(a.lo, b.lo), vdivq_f32(a.hi, b.hi)); }
RP_FX_INLINE fx_v fx_max(fx_v a, fx_v b) { return fx_pair(vmaxq_f32(a.lo, b.lo), vmaxq_f32(a.hi, b.hi)); }
RP_FX_INLINE float fx_hsum(fx_v v) { return vaddvq_f32(vaddq_f32(v.lo, v.hi)); }
RP_FX_INLINE float fx_hmax(fx_v v) { return vmaxvq_f32(vmaxq_f32(v.lo, v.hi)); }
/* lanes [0, n) of v, the others set to `fill` */
RP_FX_INLINE fx_v fx_keep(fx_v v, int n, float fill) {
    static const uint32_t idx[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    const uint32x4_t nn = vdupq_n_u32((uint32_t)n);
    const float32x4_t f = vdupq_n_f32(fill);
    return fx_pair(vbslq_f32(vcltq_u32(vld1q_u32(idx), nn), v.lo, f),
                   vbslq_f32(vcltq_u32(vld1q_u32(idx + 4), nn), v.hi, f));
}

/* e^x as the x86 layers compute it (Cephes polynomial on |r| <= ln2/2, about 1 ulp); 2^n is built in the
 * exponent field, valid for n >= -126, and x below -87 gives 0. */
RP_FX_INLINE float32x4_t fx_exp4(float32x4_t x) {
    const float32x4_t lo = vdupq_n_f32(-87.0f);
    const uint32x4_t under = vcltq_f32(x, lo);
    x = vmaxq_f32(vminq_f32(x, vdupq_n_f32(88.3f)), lo);
    const float32x4_t n = vrndnq_f32(vmulq_f32(x, vdupq_n_f32(1.44269504088896341f)));
    float32x4_t r = vfmsq_f32(x, n, vdupq_n_f32(0.693359375f));
    r = vfmsq_f32(r, n, vdupq_n_f32(-2.12194440e-4f));
    float32x4_t y = vdupq_n_f32(1.9875691500e-4f);
    y = vfmaq_f32(vdupq_n_f32(1.3981999507e-3f), y, r);
    y = vfmaq_f32(vdupq_n_f32(8.3334519073e-3f), y, r);
    y = vfmaq_f32(vdupq_n_f32(4.1665795894e-2f), y, r);
    y = vfmaq_f32(vdupq_n_f32(1.6666665459e-1f), y, r);
    y = vfmaq_f32(vdupq_n_f32(5.0000001201e-1f), y, r);
    y = vfmaq_f32(vaddq_f32(r, vdupq_n_f32(1.0f)), y, vmulq_f32(r, r));
    const int32x4_t e = vshlq_n_s32(vaddq_s32(vcvtq_s32_f32(n), vdupq_n_s32(127)), 23);
    y = vmulq_f32(y, vreinterpretq_f32_s32(e));
    return vbslq_f32(under, vdupq_n_f32(0.0f), y);
}
RP_FX_INLINE fx_v fx_exp(fx_v x) { return fx_pair(fx_exp4(x.lo), fx_exp4(x.hi)); }

/* 4 x 4 transpose of a[0..3] */
RP_FX_INLINE void fx_t4(float32x4_t a[4]) {
    const float32x4_t t0 = vtrn1q_f32(a[0], a[1]), t1 = vtrn2q_f32(a[0], a[1]);
    const float32x4_t t2 = vtrn1q_f32(a[2], a[3]), t3 = vtrn2q_f32(a[2], a[3]);
    a[0] = vreinterpretq_f32_f64(vtrn1q_f64(vreinterpretq_f64_f32(t0), vreinterpretq_f64_f32(t2)));
    a[1] = vreinterpretq_f32_f64(vtrn1q_f64(vreinterpretq_f64_f32(t1), vreinterpretq_f64_f32(t3)));
    a[2] = vreinterpretq_f32_f64(vtrn2q_f64(vreinterpretq_f64_f32(t0), vreinterpretq_f64_f32(t2)));
    a[3] = vreinterpretq_f32_f64(vtrn2q_f64(vreinterpretq_f64_f32(t1), vreinterpretq_f64_f32(t3)));
}

/* In-register transpose of an 8x8 block: four 4 x 4 ones, the off-diagonal blocks swapped. */
RP_FX_INLINE void fx_transpose(fx_v r[8]) {
    float32x4_t a[4], b[4], c[4], d[4];
    FX_UNROLL(4)
    for (int i = 0; i < 4; i++) {
        a[i] = r[i].lo;
        b[i] = r[i].hi;
        c[i] = r[4 + i].lo;
        d[i] = r[4 + i].hi;
    }
    fx_t4(a);
    fx_t4(b);
    fx_t4(c);
    fx_t4(d);
    FX_UNROLL(4)
    for (int i = 0; i < 4; i++) {
        r[i] = fx_pair(a[i], c[i]);
        r[4 + i] = fx_pair(b[i], d[i]);
    }
}

/* Lane j of the result = sum of the lanes of v[j]. */
RP_FX_INLINE fx_v fx_reduce(const fx_v v[8]) {
    float32x4_t s[8];
    FX_UNROLL(8)
    for (int j = 0; j < 8; j++) s[j] = vaddq_f32(v[j].lo, v[j].hi);
    return fx_pair(vpaddq_f32(vpaddq_f32(s[0], s[1]), vpaddq_f32(s[2], s[3])),
                   vpaddq_f32(vpaddq_f32(s[4], s[5]), vpaddq_f32(s[6], s[7])));
}

/* BF16 column pair: lane j's low half is row j, its high half row j + FX_W */
RP_FX_INLINE void fx_load_bf16x2(const uint16_t *p, fx_v *w0, fx_v *w1) {
    const uint32x4_t x0 = vld1q_u32((const uint32_t *)(const void *)p);
    const uint32x4_t x1 = vld1q_u32((const uint32_t *)(const void *)(p + 8));
    const uint32x4_t m = vdupq_n_u32(0xffff0000u);
    *w0 = fx_pair(vreinterpretq_f32_u32(vshlq_n_u32(x0, 16)), vreinterpretq_f32_u32(vshlq_n_u32(x1, 16)));
    *w1 = fx_pair(vreinterpretq_f32_u32(vandq_u32(x0, m)), vreinterpretq_f32_u32(vandq_u32(x1, m)));
}
RP_FX_INLINE fx_v fx_load_i8(const int8_t *p) {
    const int16x8_t h = vmovl_s8(vld1_s8(p));
    return fx_pair(vcvtq_f32_s32(vmovl_s16(vget_low_s16(h))), vcvtq_f32_s32(vmovl_high_s16(h)));
}
RP_FX_INLINE float fx_h2f(uint16_t h) {
    return vgetq_lane_f32(vcvt_f32_f16(vreinterpret_f16_u16(vdup_n_u16(h))), 0);
}
RP_FX_INLINE void fx_prefetch(const void *p) { __builtin_prefetch(p, 0, 3); }

#include "kernels/float_tmpl.h"

#endif /* RP_KERNELS_ARM_FLOAT_ARM_H */
