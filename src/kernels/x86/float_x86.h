/* float_x86.h — float SIMD layer (AVX2 or AVX-512, chosen by the including file's flags) under the F32/F16/BF16
 * matmul, attention and element-wise templates of kernels/float_tmpl.h. */
#ifndef RP_KERNELS_X86_FLOAT_X86_H
#define RP_KERNELS_X86_FLOAT_X86_H

/* Each *_avx2.c / *_avx512.c file is compiled with its level's -m flags, so
 * __AVX512F__ tells which width this translation unit targets. Everything here
 * is static: every including file gets its own copy at its own width.
 *
 * Three templates (kernels/float_tmpl.h) follow the vector layer:
 *   - RP_FX_MM_WT (define to 0 = F32, 1 = F16, 2 = BF16 before including):
 *     packed-weight GEMM/GEMV with F32 activations (rp_fx_mm_* functions);
 *   - RP_FX_EW (define before including): element-wise kernels (SwiGLU, F32 <-> F16 rows);
 *   - RP_FX_ATTN (define before including): flash-style attention over F32,
 *     F16 and Q8_0 caches (rp_fx_attn).
 * Only plain float FMA is used (never the BF16 dot instructions): the
 * reference kernels multiply exact weights by f32 activations, and the AVX512
 * dispatch level does not promise AVX512-BF16. */

#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/float_macros.h"
#include "kernels/kernels.h"
#include "kernels/quant.h"

#if defined(__AVX512F__)
/* ------------------------------------------------------------ AVX-512 */
#define FX_W 16
typedef __m512 fx_v;

RP_FX_INLINE __mmask16 fx_mask(int n) { /* lanes [0, n), n in [0, 16] */
    return (__mmask16)((1u << n) - 1u);
}
RP_FX_INLINE fx_v fx_zero(void) { return _mm512_setzero_ps(); }
RP_FX_INLINE fx_v fx_set1(float x) { return _mm512_set1_ps(x); }
RP_FX_INLINE fx_v fx_load(const float *p) { return _mm512_loadu_ps(p); }
/* lanes >= n read as 0 and their memory is not touched */
RP_FX_INLINE fx_v fx_loadn(const float *p, int n) { return _mm512_maskz_loadu_ps(fx_mask(n), p); }
RP_FX_INLINE void fx_store(float *p, fx_v v) { _mm512_storeu_ps(p, v); }
RP_FX_INLINE void fx_storen(float *p, fx_v v, int n) { _mm512_mask_storeu_ps(p, fx_mask(n), v); }
RP_FX_INLINE fx_v fx_load_f16(const uint16_t *p) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p)); }
RP_FX_INLINE fx_v fx_loadn_f16(const uint16_t *p, int n) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(fx_mask(n), p));
}
/* round to nearest even, as rp_fp32_to_fp16 */
RP_FX_INLINE void fx_store_f16(uint16_t *p, fx_v v) {
    _mm256_storeu_si256((__m256i *)p, _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
RP_FX_INLINE void fx_storen_f16(uint16_t *p, fx_v v, int n) {
    _mm256_mask_storeu_epi16(p, fx_mask(n), _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
RP_FX_INLINE fx_v fx_fma(fx_v a, fx_v b, fx_v c) { return _mm512_fmadd_ps(a, b, c); }
RP_FX_INLINE fx_v fx_add(fx_v a, fx_v b) { return _mm512_add_ps(a, b); }
RP_FX_INLINE fx_v fx_sub(fx_v a, fx_v b) { return _mm512_sub_ps(a, b); }
RP_FX_INLINE fx_v fx_mul(fx_v a, fx_v b) { return _mm512_mul_ps(a, b); }
RP_FX_INLINE fx_v fx_div(fx_v a, fx_v b) { return _mm512_div_ps(a, b); }
RP_FX_INLINE fx_v fx_max(fx_v a, fx_v b) { return _mm512_max_ps(a, b); }
RP_FX_INLINE float fx_hsum(fx_v v) { return _mm512_reduce_add_ps(v); }
RP_FX_INLINE float fx_hmax(fx_v v) { return _mm512_reduce_max_ps(v); }
/* lanes [0, n) of v, the others set to `fill` */
RP_FX_INLINE fx_v fx_keep(fx_v v, int n, float fill) { return _mm512_mask_blend_ps(fx_mask(n), _mm512_set1_ps(fill), v); }

/* BF16 column pair: lane j's low half is row j, its high half row j + FX_W */
RP_FX_INLINE void fx_load_bf16x2(const uint16_t *p, fx_v *w0, fx_v *w1) {
    __m512i x = _mm512_loadu_si512((const void *)p);
    *w0 = _mm512_castsi512_ps(_mm512_slli_epi32(x, 16));
    *w1 = _mm512_castsi512_ps(_mm512_and_si512(x, _mm512_set1_epi32((int)0xffff0000u)));
}
RP_FX_INLINE fx_v fx_load_i8(const int8_t *p) {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)p)));
}

/* e^x, about 1 ulp (Cephes polynomial on |r| <= ln2/2), scaled by 2^n with
 * VSCALEF so underflow goes smoothly to 0; x below -103 gives 0. */
RP_FX_INLINE fx_v fx_exp(fx_v x) {
    x = _mm512_max_ps(_mm512_min_ps(x, _mm512_set1_ps(88.7f)), _mm512_set1_ps(-103.0f));
    fx_v n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                  _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    fx_v r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    fx_v y = _mm512_set1_ps(1.9875691500e-4f);
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.3981999507e-3f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(8.3334519073e-3f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(4.1665795894e-2f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.6666665459e-1f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(5.0000001201e-1f));
    y = _mm512_fmadd_ps(y, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    return _mm512_scalef_ps(y, n);
}

/* In-register transpose of a 16x16 block: r[i] lane j <-> r[j] lane i. */
RP_FX_INLINE void fx_transpose(fx_v r[16]) {
    fx_v t[16];
    FX_UNROLL(8)
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    FX_UNROLL(4)
    for (int i = 0; i < 4; i++) {
        r[4 * i] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
        r[4 * i + 1] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
        r[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
        r[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
    }
    /* r[4i + j], 128-bit lane L, holds element 4L + j of rows 4i..4i+3 */
    FX_UNROLL(4)
    for (int j = 0; j < 4; j++) {
        t[j] = _mm512_shuffle_f32x4(r[j], r[4 + j], 0x88);
        t[4 + j] = _mm512_shuffle_f32x4(r[j], r[4 + j], 0xDD);
        t[8 + j] = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0x88);
        t[12 + j] = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0xDD);
    }
    FX_UNROLL(4)
    for (int j = 0; j < 4; j++) {
        r[j] = _mm512_shuffle_f32x4(t[j], t[8 + j], 0x88);
        r[8 + j] = _mm512_shuffle_f32x4(t[j], t[8 + j], 0xDD);
        r[4 + j] = _mm512_shuffle_f32x4(t[4 + j], t[12 + j], 0x88);
        r[12 + j] = _mm512_shuffle_f32x4(t[4 + j], t[12 + j], 0xDD);
    }
}

/* Lane j of the result = sum of the lanes of v[j] (16 horizontal sums in 45
 * shuffles/adds instead of 16 separate reductions). */
RP_FX_INLINE fx_v fx_reduce_pair(fx_v x, fx_v y) { /* per 128-bit lane: (x0+x2, y0+y2, x1+x3, y1+y3) */
    return _mm512_add_ps(_mm512_unpacklo_ps(x, y), _mm512_unpackhi_ps(x, y));
}
RP_FX_INLINE fx_v fx_reduce_quad(fx_v a, fx_v b) { /* per 128-bit lane: its partial sums of 4 vectors */
    return _mm512_add_ps(_mm512_shuffle_ps(a, b, 0x44), _mm512_shuffle_ps(a, b, 0xEE));
}
/* Straight-line code (no loops over the array): clang keeps the argument
 * array in registers only then. */
RP_FX_INLINE fx_v fx_reduce(const fx_v v[16]) {
    const fx_v c0 = fx_reduce_quad(fx_reduce_pair(v[0], v[1]), fx_reduce_pair(v[2], v[3]));
    const fx_v c1 = fx_reduce_quad(fx_reduce_pair(v[4], v[5]), fx_reduce_pair(v[6], v[7]));
    const fx_v c2 = fx_reduce_quad(fx_reduce_pair(v[8], v[9]), fx_reduce_pair(v[10], v[11]));
    const fx_v c3 = fx_reduce_quad(fx_reduce_pair(v[12], v[13]), fx_reduce_pair(v[14], v[15]));
    /* c[i], 128-bit lane L: lane L's partial sums of v[4i..4i+3] */
    const fx_v e0 = _mm512_add_ps(_mm512_shuffle_f32x4(c0, c1, 0x88), _mm512_shuffle_f32x4(c0, c1, 0xDD));
    const fx_v e1 = _mm512_add_ps(_mm512_shuffle_f32x4(c2, c3, 0x88), _mm512_shuffle_f32x4(c2, c3, 0xDD));
    return _mm512_add_ps(_mm512_shuffle_f32x4(e0, e1, 0x88), _mm512_shuffle_f32x4(e0, e1, 0xDD));
}

#else
/* ------------------------------------------------------------ AVX2 */
#define FX_W 8
typedef __m256 fx_v;

RP_FX_INLINE __m256i fx_maski(int n) { /* all-ones in lanes [0, n) */
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
RP_FX_INLINE fx_v fx_zero(void) { return _mm256_setzero_ps(); }
RP_FX_INLINE fx_v fx_set1(float x) { return _mm256_set1_ps(x); }
RP_FX_INLINE fx_v fx_load(const float *p) { return _mm256_loadu_ps(p); }
/* VMASKMOV does not touch (or fault on) masked-out lanes */
RP_FX_INLINE fx_v fx_loadn(const float *p, int n) { return _mm256_maskload_ps(p, fx_maski(n)); }
RP_FX_INLINE void fx_store(float *p, fx_v v) { _mm256_storeu_ps(p, v); }
RP_FX_INLINE void fx_storen(float *p, fx_v v, int n) { _mm256_maskstore_ps(p, fx_maski(n), v); }
RP_FX_INLINE fx_v fx_load_f16(const uint16_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }
RP_FX_INLINE fx_v fx_loadn_f16(const uint16_t *p, int n) {
    uint16_t t[8] = {0};
    memcpy(t, p, sizeof(uint16_t) * (size_t)n);
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)t));
}
RP_FX_INLINE void fx_store_f16(uint16_t *p, fx_v v) {
    _mm_storeu_si128((__m128i *)p, _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
RP_FX_INLINE void fx_storen_f16(uint16_t *p, fx_v v, int n) {
    uint16_t t[8];
    _mm_storeu_si128((__m128i *)t, _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    memcpy(p, t, sizeof(uint16_t) * (size_t)n);
}
RP_FX_INLINE fx_v fx_fma(fx_v a, fx_v b, fx_v c) { return _mm256_fmadd_ps(a, b, c); }
RP_FX_INLINE fx_v fx_add(fx_v a, fx_v b) { return _mm256_add_ps(a, b); }
RP_FX_INLINE fx_v fx_sub(fx_v a, fx_v b) { return _mm256_sub_ps(a, b); }
RP_FX_INLINE fx_v fx_mul(fx_v a, fx_v b) { return _mm256_mul_ps(a, b); }
RP_FX_INLINE fx_v fx_div(fx_v a, fx_v b) { return _mm256_div_ps(a, b); }
RP_FX_INLINE fx_v fx_max(fx_v a, fx_v b) { return _mm256_max_ps(a, b); }
RP_FX_INLINE float fx_hsum(fx_v v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
RP_FX_INLINE float fx_hmax(fx_v v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
RP_FX_INLINE fx_v fx_keep(fx_v v, int n, float fill) {
    return _mm256_blendv_ps(_mm256_set1_ps(fill), v, _mm256_castsi256_ps(fx_maski(n)));
}

RP_FX_INLINE void fx_load_bf16x2(const uint16_t *p, fx_v *w0, fx_v *w1) {
    __m256i x = _mm256_loadu_si256((const __m256i *)p);
    *w0 = _mm256_castsi256_ps(_mm256_slli_epi32(x, 16));
    *w1 = _mm256_castsi256_ps(_mm256_and_si256(x, _mm256_set1_epi32((int)0xffff0000u)));
}
RP_FX_INLINE fx_v fx_load_i8(const int8_t *p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)p)));
}

/* e^x as in the AVX-512 version; 2^n is built in the exponent field, valid
 * for n >= -126, and x below -87 (n <= -126) gives 0. */
RP_FX_INLINE fx_v fx_exp(fx_v x) {
    const fx_v lo = _mm256_set1_ps(-87.0f);
    fx_v under = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
    x = _mm256_max_ps(_mm256_min_ps(x, _mm256_set1_ps(88.3f)), lo);
    fx_v n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                             _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    fx_v r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    fx_v y = _mm256_set1_ps(1.9875691500e-4f);
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.3981999507e-3f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(8.3334519073e-3f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(4.1665795894e-2f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.6666665459e-1f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(5.0000001201e-1f));
    y = _mm256_fmadd_ps(y, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    y = _mm256_mul_ps(y, _mm256_castsi256_ps(e));
    return _mm256_andnot_ps(under, y);
}

/* In-register transpose of an 8x8 block. */
RP_FX_INLINE void fx_transpose(fx_v r[8]) {
    fx_v t[8], u[8];
    FX_UNROLL(4)
    for (int i = 0; i < 4; i++) {
        t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    FX_UNROLL(2)
    for (int i = 0; i < 2; i++) {
        u[4 * i] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
        u[4 * i + 1] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
        u[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
        u[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
    }
    /* u[4i + j], 128-bit half H, holds element 4H + j of rows 4i..4i+3 */
    FX_UNROLL(4)
    for (int j = 0; j < 4; j++) {
        r[j] = _mm256_permute2f128_ps(u[j], u[4 + j], 0x20);
        r[4 + j] = _mm256_permute2f128_ps(u[j], u[4 + j], 0x31);
    }
}

/* Lane j of the result = sum of the lanes of v[j]. */
RP_FX_INLINE fx_v fx_reduce(const fx_v v[8]) {
    fx_v h0 = _mm256_hadd_ps(v[0], v[1]), h1 = _mm256_hadd_ps(v[2], v[3]);
    fx_v h2 = _mm256_hadd_ps(v[4], v[5]), h3 = _mm256_hadd_ps(v[6], v[7]);
    fx_v k0 = _mm256_hadd_ps(h0, h1), k1 = _mm256_hadd_ps(h2, h3);
    return _mm256_add_ps(_mm256_permute2f128_ps(k0, k1, 0x20), _mm256_permute2f128_ps(k0, k1, 0x31));
}
#endif

RP_FX_INLINE float fx_h2f(uint16_t h) { return _cvtsh_ss(h); }
RP_FX_INLINE void fx_prefetch(const void *p) { _mm_prefetch((const char *)p, _MM_HINT_T0); }
/* the int8 decode QK of the attention template (Q8_0 query x Q8_0 K) */
#define FX_QK8 "kernels/x86/attn_q8_x86.h"

#include "kernels/float_tmpl.h"

#endif /* RP_KERNELS_X86_FLOAT_X86_H */
