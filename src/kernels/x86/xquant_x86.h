/* xquant_x86.h — one body for the x86 matmul kernels of Q4_1, Q5_0, Q5_1, IQ4_NL, Q2_K, Q3_K, Q5_K and IQ4_XS, compiled for AVX2 and for AVX-512 VNNI. */
#ifndef RP_KERNELS_X86_XQUANT_X86_H
#define RP_KERNELS_X86_XQUANT_X86_H

/* Included once each by mm_xquant_avx2.c and mm_xquant_avx512.c, which
 * define RP_XQ_SUFFIX (avx2 / avx512) first. Both use 256-bit vectors; the
 * AVX-512 build differs in its u8 x s8 dot (VPDPBUSD on ymm, AVX512-VNNI +
 * VL: one instruction instead of three, no int16 stage) and in having 32 ymm
 * registers, so the per-block decoded weights never spill.
 *
 * These kernels read the GGUF rows in place (pack == NULL, as ggml's CPU
 * kernels do): every block is decoded in registers to signed or unsigned
 * bytes once per weight row and 1..4 activation rows, then dotted with the
 * activation quants with exact int32 sums per group, scaled once per group
 * (integer) and once per block (float), so results equal the scalar
 * reference's integer sums (kernels/ref/dot_ref.c) up to float reassociation.
 *
 * Activations: the 32-element types take the Q8_0 layout of q8_0_x86.h with
 * bias_mul 1 (bias = sum of the block's quants, for the Q4_1 / Q5_1 min
 * term); the 256-element types the Q8_K layout of kquant_x86.h (shared with
 * the Q4_K / Q6_K kernels of the same level, so q/k/v quantize once). */

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "kernels/kernels.h"
#include "kernels/quant.h"
#include "kernels/x86/kquant_x86.h"
#include "kernels/x86/q8_0_x86.h"

#define XQ_INLINE static inline __attribute__((always_inline))
#define XQ_MR 4 /* activation rows per weight-row pass */
#define XQ_RB 16 /* weight rows per band (each band's rows stay in L1/L2 for all activation rows) */

#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
#define XQ_VNNI 1
#else
#define XQ_VNNI 0
#endif

/* acc + per-dword sums of u[4i..4i+3] * s[4i..4i+3], u unsigned (<= 127 so
 * AVX2's int16 pair sums cannot saturate), s signed. */
XQ_INLINE __m256i xq_dot_us(__m256i acc, __m256i u, __m256i s) {
#if XQ_VNNI
    return _mm256_dpbusd_epi32(acc, u, s);
#else
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
#endif
}

/* Signed x signed (|w| <= 128, |a| <= 127: the quantizers never give -128
 * for finite input): w*a = |w| * (a * sign(w)). */
XQ_INLINE __m256i xq_dot_ss(__m256i acc, __m256i w, __m256i a) {
    return xq_dot_us(acc, _mm256_sign_epi8(w, w), _mm256_sign_epi8(a, w));
}

XQ_INLINE float xq_hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

XQ_INLINE float xq_h2f(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

XQ_INLINE float xq_f32(const uint8_t *p) {
    float f;
    memcpy(&f, p, 4);
    return f;
}

/* 32 nibbles of a Q4_0-order block (16 bytes): element j < 16 low nibble
 * of byte j, j >= 16 high nibble of byte j - 16. */
XQ_INLINE __m256i xq_nibbles(const uint8_t *qs) {
    const __m128i v = _mm_loadu_si128((const __m128i *)(const void *)qs);
    const __m128i m = _mm_set1_epi8(0x0F);
    return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), m), _mm_and_si128(v, m));
}

/* The grid values (IQ4_NL / IQ4_XS) of a block's 32 nibbles. */
XQ_INLINE __m256i xq_iq4_values(const uint8_t *qs) {
    const __m128i kv = _mm_loadu_si128((const __m128i *)(const void *)rp_iq4nl_values);
    const __m128i v = _mm_loadu_si128((const __m128i *)(const void *)qs);
    const __m128i m = _mm_set1_epi8(0x0F);
    return _mm256_set_m128i(_mm_shuffle_epi8(kv, _mm_and_si128(_mm_srli_epi16(v, 4), m)),
                            _mm_shuffle_epi8(kv, _mm_and_si128(v, m)));
}

/* Byte j = 0x10 where bit j of the little-endian 32-bit qh is set. */
XQ_INLINE __m256i xq_bit4(const uint8_t *qh) {
    uint32_t x;
    memcpy(&x, qh, 4);
    const __m256i shuf = _mm256_setr_epi64x(0, 0x0101010101010101ll, 0x0202020202020202ll, 0x0303030303030303ll);
    __m256i b = _mm256_shuffle_epi8(_mm256_set1_epi32((int)x), shuf);        /* byte j = byte j/8 of qh */
    b = _mm256_or_si256(b, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfell));        /* all bits but j%8 */
    return _mm256_and_si256(_mm256_cmpeq_epi8(b, _mm256_set1_epi64x(-1)), _mm256_set1_epi8(0x10));
}

/* [s[2k] x4, s[2k+1] x4] as int32 lanes, from 16 scale bytes (signed or not). */
XQ_INLINE __m256i xq_pair_scales(__m128i s16, int k, int is_signed) {
    const __m128i ctl = _mm_add_epi8(_mm_setr_epi8(0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0),
                                     _mm_set1_epi8((char)(2 * k)));
    const __m128i b = _mm_shuffle_epi8(s16, ctl);
    return is_signed ? _mm256_cvtepi8_epi32(b) : _mm256_cvtepu8_epi32(b);
}

/* ------------------------------------------------------ 32-element types */

/* Block b of one weight row against MR activation rows (Q8_0 layout), into acc / macc. */
XQ_INLINE void xq_blk32(const int T, const int MR, const uint8_t *wr, int64_t b, const uint8_t *act, size_t stride,
                        const rp_q8x_f32u *const *da, const rp_q8x_i32u *const *sa, __m256 *acc, float *macc) {
    const size_t bsz = T == RP_TYPE_Q4_1 ? 20 : T == RP_TYPE_Q5_0 ? 22 : T == RP_TYPE_Q5_1 ? 24 : 18;
    const uint8_t *bl = wr + (size_t)b * bsz;
    __m256i w;
    float mw = 0.0f;
    const float dw = xq_h2f(bl);
    const int is_signed = T == RP_TYPE_Q5_0 || T == RP_TYPE_IQ4_NL;
    if (T == RP_TYPE_Q4_1) {
        mw = xq_h2f(bl + 2);
        w = xq_nibbles(bl + 4);
    } else if (T == RP_TYPE_Q5_0) {
        w = _mm256_sub_epi8(_mm256_or_si256(xq_nibbles(bl + 6), xq_bit4(bl + 2)), _mm256_set1_epi8(16));
    } else if (T == RP_TYPE_Q5_1) {
        mw = xq_h2f(bl + 2);
        w = _mm256_or_si256(xq_nibbles(bl + 8), xq_bit4(bl + 4));
    } else {
        w = xq_iq4_values(bl + 2);
    }
    __m256i aw = w;
    if (is_signed) aw = _mm256_sign_epi8(w, w);
    #pragma GCC unroll 4
    for (int m = 0; m < MR; m++) {
        __m256i a = _mm256_loadu_si256((const __m256i *)(const void *)(act + (size_t)m * stride + 32 * b));
        if (is_signed) a = _mm256_sign_epi8(a, w);
        const __m256i p = xq_dot_us(_mm256_setzero_si256(), aw, a);
        const float d = da[m][b];
        acc[m] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(dw * d), acc[m]);
        if (T == RP_TYPE_Q4_1 || T == RP_TYPE_Q5_1) macc[m] += (mw * d) * (float)sa[m][b];
    }
}

/* One weight row (nb blocks) against MR activation rows. Two accumulator
 * sets, even and odd blocks: one chain of dependent FMAs per row would bound
 * decode (MR = 1) by the FMA latency. */
XQ_INLINE void xq_row32(const int T, const int MR, const uint8_t *wr, int64_t nb, int64_t cols, const uint8_t *act,
                        size_t stride, float *out) {
    __m256 acc0[XQ_MR], acc1[XQ_MR];
    float macc0[XQ_MR], macc1[XQ_MR];
    const rp_q8x_f32u *da[XQ_MR];
    const rp_q8x_i32u *sa[XQ_MR];
    #pragma GCC unroll 4
    for (int m = 0; m < MR; m++) {
        acc0[m] = acc1[m] = _mm256_setzero_ps();
        macc0[m] = macc1[m] = 0.0f;
        da[m] = rp_q8x_act_d(act + (size_t)m * stride, cols);
        sa[m] = rp_q8x_act_bias(act + (size_t)m * stride, cols);
    }
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2) {
        xq_blk32(T, MR, wr, b, act, stride, da, sa, acc0, macc0);
        xq_blk32(T, MR, wr, b + 1, act, stride, da, sa, acc1, macc1);
    }
    if (b < nb) xq_blk32(T, MR, wr, b, act, stride, da, sa, acc0, macc0);
    #pragma GCC unroll 4
    for (int m = 0; m < MR; m++) out[m] = xq_hsum(_mm256_add_ps(acc0[m], acc1[m])) + (macc0[m] + macc1[m]);
}

/* ----------------------------------------------------- 256-element types */

/* One weight row against MR activation rows (Q8_K layout, kquant_x86.h). */
XQ_INLINE void xq_row256(const int T, const int MR, const uint8_t *wr, int64_t nb, int64_t cols, const uint8_t *act,
                         size_t stride, float *out) {
    const size_t bsz = T == RP_TYPE_Q2_K ? 84 : T == RP_TYPE_Q3_K ? 110 : T == RP_TYPE_Q5_K ? 176 : 136;
    const size_t s32off = rp_q8k_x86_s32_off(cols);
    __m256 acc[XQ_MR];
    float macc[XQ_MR];
    #pragma GCC unroll 4
    for (int m = 0; m < MR; m++) {
        acc[m] = _mm256_setzero_ps();
        macc[m] = 0.0f;
    }
    const __m256i m3 = _mm256_set1_epi8(3), m1 = _mm256_set1_epi8(1), m4 = _mm256_set1_epi8(0x0F);
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *bl = wr + (size_t)b * bsz;
        /* the block decoded: 8 vectors of 32 quants (u8, or s8 for IQ4_XS) in
         * element order, and the integer scale(s) each vector's sums take */
        __m256i u[8], sc[8];
        __m256i mins16 = _mm256_setzero_si256(), sc16 = _mm256_setzero_si256();
        int32_t scl[8] = {0}, mn[8] = {0};
        float d, dmin = 0.0f;
        if (T == RP_TYPE_Q2_K || T == RP_TYPE_Q3_K) {
            __m128i s16;
            if (T == RP_TYPE_Q2_K) {
                const __m128i v = _mm_loadu_si128((const __m128i *)(const void *)bl);
                s16 = _mm_and_si128(v, _mm_set1_epi8(0x0F));
                mins16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(v, 4), _mm_set1_epi8(0x0F)));
                d = xq_h2f(bl + 80);
                dmin = xq_h2f(bl + 82);
            } else {
                /* the 16 6-bit scales, 4 per 32-bit word: low nibbles from bytes
                 * 0..7, top 2 bits from bytes 8..11 (kernels/types.h) */
                uint32_t aux[3];
                memcpy(aux, bl + 96, 12);
                const uint32_t m4w = 0x0f0f0f0fu, m2w = 0x03030303u;
                const uint32_t a0 = (aux[0] & m4w) | ((aux[2] & m2w) << 4);
                const uint32_t a1 = (aux[1] & m4w) | (((aux[2] >> 2) & m2w) << 4);
                const uint32_t a2 = ((aux[0] >> 4) & m4w) | (((aux[2] >> 4) & m2w) << 4);
                const uint32_t a3 = ((aux[1] >> 4) & m4w) | (((aux[2] >> 6) & m2w) << 4);
                s16 = _mm_sub_epi8(_mm_setr_epi32((int)a0, (int)a1, (int)a2, (int)a3), _mm_set1_epi8(32));
                sc16 = _mm256_cvtepi8_epi16(s16);
                d = xq_h2f(bl + 108);
            }
            const uint8_t *qs = bl + (T == RP_TYPE_Q2_K ? 16 : 32);
            const __m256i hm = _mm256_loadu_si256((const __m256i *)(const void *)bl); /* Q3_K's hmask */
            #pragma GCC unroll 2
            for (int h = 0; h < 2; h++) {
                const __m256i qv = _mm256_loadu_si256((const __m256i *)(const void *)(qs + 32 * h));
                #pragma GCC unroll 4
                for (int p = 0; p < 4; p++) {
                    /* elements 128h + 32p .. +31: groups 8h + 2p, 8h + 2p + 1 */
                    __m256i q = _mm256_and_si256(_mm256_srli_epi16(qv, 2 * p), m3);
                    if (T == RP_TYPE_Q3_K)
                        q = _mm256_or_si256(q, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hm, 4 * h + p), m1), 2));
                    u[4 * h + p] = q;
                    sc[4 * h + p] = xq_pair_scales(s16, 4 * h + p, T == RP_TYPE_Q3_K);
                }
            }
        } else if (T == RP_TYPE_Q5_K) {
            d = xq_h2f(bl);
            dmin = xq_h2f(bl + 2);
            for (int j = 0; j < 8; j++) {
                uint8_t s, m;
                rp_q4_k_scale_min(j, bl + 4, &s, &m);
                scl[j] = s;
                mn[j] = m;
            }
            const __m256i qh = _mm256_loadu_si256((const __m256i *)(const void *)(bl + 16));
            #pragma GCC unroll 4
            for (int p = 0; p < 4; p++) {
                const __m256i qv = _mm256_loadu_si256((const __m256i *)(const void *)(bl + 48 + 32 * p));
                const __m256i h0 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * p), m1), 4);
                const __m256i h1 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * p + 1), m1), 4);
                u[2 * p] = _mm256_or_si256(_mm256_and_si256(qv, m4), h0);
                u[2 * p + 1] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(qv, 4), m4), h1);
                sc[2 * p] = _mm256_set1_epi32(scl[2 * p]);
                sc[2 * p + 1] = _mm256_set1_epi32(scl[2 * p + 1]);
            }
        } else { /* IQ4_XS */
            d = xq_h2f(bl);
            uint16_t sh;
            memcpy(&sh, bl + 2, 2);
            #pragma GCC unroll 8
            for (int ib = 0; ib < 8; ib++) {
                const int ls = ((bl[4 + ib / 2] >> (4 * (ib % 2))) & 0xF) | (((sh >> (2 * ib)) & 3) << 4);
                u[ib] = xq_iq4_values(bl + 8 + 16 * ib);
                sc[ib] = _mm256_set1_epi32(ls - 32);
            }
        }
        #pragma GCC unroll 4
        for (int m = 0; m < MR; m++) {
            const uint8_t *ab = act + (size_t)m * stride + (size_t)b * RP_Q8K_BLOCK;
            const float da = xq_f32(ab);
            __m256i is2[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
            #pragma GCC unroll 8
            for (int k = 0; k < 8; k++) {
                const __m256i a = _mm256_loadu_si256((const __m256i *)(const void *)(ab + RP_Q8K_QS + 32 * k));
                const __m256i p = T == RP_TYPE_IQ4_XS ? xq_dot_ss(_mm256_setzero_si256(), u[k], a)
                                                      : xq_dot_us(_mm256_setzero_si256(), u[k], a);
                is2[k & 1] = _mm256_add_epi32(is2[k & 1], _mm256_mullo_epi32(p, sc[k]));
            }
            __m256i isum = _mm256_add_epi32(is2[0], is2[1]);
            if (T == RP_TYPE_Q3_K) { /* q - 4: subtract 4 * sum_g sc_g * bsum_g */
                const __m256i bs = _mm256_loadu_si256((const __m256i *)(const void *)(ab + RP_Q8K_BSUMS));
                isum = _mm256_sub_epi32(isum, _mm256_slli_epi32(_mm256_madd_epi16(bs, sc16), 2));
            }
            acc[m] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(d * da), acc[m]);
            if (T == RP_TYPE_Q2_K) {
                const __m256i bs = _mm256_loadu_si256((const __m256i *)(const void *)(ab + RP_Q8K_BSUMS));
                acc[m] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(bs, mins16)), _mm256_set1_ps(dmin * da), acc[m]);
            } else if (T == RP_TYPE_Q5_K) {
                const uint8_t *s32 = act + (size_t)m * stride + s32off + 16 * (size_t)b;
                int summs = 0;
                for (int j = 0; j < 8; j++) {
                    int16_t v;
                    memcpy(&v, s32 + 2 * j, 2);
                    summs += mn[j] * v;
                }
                macc[m] -= (dmin * da) * (float)summs;
            }
        }
    }
    #pragma GCC unroll 4
    for (int m = 0; m < MR; m++) out[m] = xq_hsum(acc[m]) + macc[m];
}

/* ------------------------------------------------------------- driver */

XQ_INLINE void xq_row(const int T, const int MR, const uint8_t *wr, int64_t cols, const uint8_t *act, size_t stride,
                      float *out) {
    if (T == RP_TYPE_Q4_1 || T == RP_TYPE_Q5_0 || T == RP_TYPE_Q5_1 || T == RP_TYPE_IQ4_NL)
        xq_row32(T, MR, wr, cols / 32, cols, act, stride, out);
    else
        xq_row256(T, MR, wr, cols / RP_QK_K, cols, act, stride, out);
}

/* Rows [r0, r1) in bands of XQ_RB; each band meets every activation row,
 * XQ_MR at a time (so a band's weights are read from cache n/XQ_MR times,
 * from memory once). */
XQ_INLINE void xq_gemm(const int T, const void *w, size_t w_row_bytes, int64_t cols, const void *act, size_t stride,
                       int64_t n, int64_t r0, int64_t r1, float *y, int64_t ldy) {
    const uint8_t *W = w, *A = act;
    for (int64_t rb = r0; rb < r1; rb += XQ_RB) {
        const int64_t re = rb + XQ_RB < r1 ? rb + XQ_RB : r1;
        for (int64_t i = 0; i < n; i += XQ_MR) {
            const int mr = n - i < XQ_MR ? (int)(n - i) : XQ_MR;
            const uint8_t *ai = A + (size_t)i * stride;
            for (int64_t r = rb; r < re; r++) {
                const uint8_t *wr = W + (size_t)r * w_row_bytes;
                _mm_prefetch((const char *)(wr + XQ_RB * w_row_bytes), _MM_HINT_T0);
                float out[XQ_MR];
                switch (mr) {
                case 4: xq_row(T, 4, wr, cols, ai, stride, out); break;
                case 3: xq_row(T, 3, wr, cols, ai, stride, out); break;
                case 2: xq_row(T, 2, wr, cols, ai, stride, out); break;
                default: xq_row(T, 1, wr, cols, ai, stride, out); break;
                }
                for (int m = 0; m < mr; m++) y[(i + m) * ldy + r] = out[m];
            }
        }
    }
}

#define RP_XQ_CAT2(a, b) a##b
#define RP_XQ_CAT(a, b) RP_XQ_CAT2(a, b)
#define RP_XQ_STR2(x) #x
#define RP_XQ_STR(x) RP_XQ_STR2(x)

/* One kernel family: its gemm and its table entry (rp_mm_<name>_<suffix>). */
#define RP_XQ_FAMILY(NAME, TYPE, ACT, ACTSZ, QUANT)                                                            \
    static void RP_XQ_CAT(gemm_, NAME)(const void *w, size_t w_row_bytes, int64_t rows, int64_t cols,          \
                                       const void *act, size_t act_stride, int64_t n, int64_t r0, int64_t r1,  \
                                       float *y, int64_t ldy, void *scratch) {                                 \
        (void)rows;                                                                                            \
        (void)scratch;                                                                                         \
        xq_gemm(TYPE, w, w_row_bytes, cols, act, act_stride, n, r0, r1, y, ldy);                               \
    }                                                                                                          \
    const rp_mm_kernel RP_XQ_CAT(RP_XQ_CAT(rp_mm_, NAME), RP_XQ_CAT(_, RP_XQ_SUFFIX)) = {                      \
        #NAME "/" RP_XQ_STR(RP_XQ_SUFFIX), TYPE, RP_XQ_LEVEL, ACT, 1, NULL, NULL, ACTSZ, QUANT, NULL,          \
        RP_XQ_CAT(gemm_, NAME)};

#endif /* RP_KERNELS_X86_XQUANT_X86_H */
