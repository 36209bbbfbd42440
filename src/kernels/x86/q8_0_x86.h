/* q8_0_x86.h — shared internals of the x86 Q4_0/Q8_0 matmul kernels: activation layout and quantizer, weight packing, VNNI and AMX micro-kernels. */
#ifndef RP_KERNELS_X86_Q8_0_X86_H
#define RP_KERNELS_X86_Q8_0_X86_H

/* Included only by src/kernels/x86/mm_q{4,8}_0_{avx2,avx512,amx}.c (and the
 * kernel test). Each section is guarded by the ISA its intrinsics need, so a
 * file compiled for a lower level sees only what it can use:
 *   always        activation layout, packed layouts, packing (plain C)
 *   __AVX2__      activation quantizer (ymm)
 *   AVX-512 VNNI  activation quantizer (zmm), VNNI GEMM/GEMV (avx512 + amx files)
 *   AMX-INT8      tile wrappers, tile-config save/restore, AMX GEMM (amx files)
 *                 (or RP_AMX_EMULATE: the same code on a scalar tile emulator,
 *                 for checking the AMX path on machines without AMX) */

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/types.h"

#if defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

#define RP_Q8X_INLINE static inline __attribute__((always_inline))
/* Full unrolling of the small constant loops over activation rows / row
 * groups, so the accumulator arrays live in registers. */
#define RP_Q8X_UNROLL _Pragma("GCC unroll 16")

/* Unaligned, aliasing-safe scalar views (the compiler folds them into
 * broadcast loads). */
typedef int32_t rp_q8x_i32u __attribute__((may_alias, aligned(1)));
typedef float rp_q8x_f32u __attribute__((may_alias, aligned(1)));

/* ===========================================================================
 * Activation row layout (all six kernels), for a row of K = cols elements,
 * nb = K / 32 blocks, quantized with Q8_0 semantics (bit-identical to
 * rp_quantize_row(RP_TYPE_Q8_0): q = roundf(x / d), d = fp16(amax / 127)):
 *
 *   offset 0        int8  qs[K]      block b = qs[32b .. 32b+31], element order kept
 *   offset K        float d[nb]      fp16 scale of block b, widened (exact)
 *   offset K + 4nb  int32 bias[nb]   bias_mul * sum(qs of block b)
 *
 * bias folds the unsigned weight encodings into the integer sum: VNNI's
 * vpdpbusd multiplies u8 by s8, so weights are stored unsigned (Q4_0 nibble
 * q in [0, 15], Q8_0 w + 128) and sum_j (u_j - o) a_j = sum_j u_j a_j - o *
 * sum_j a_j, with o = 8 (Q4_0) or 128 (Q8_0): bias_mul = -o. Seeding the
 * int32 accumulator with bias makes the block sum exact. |bias| <= 128 * 32 *
 * 128. The AVX2 Q8_0 kernel (sign trick, signed weights) uses bias_mul = 0.
 * ========================================================================= */
static inline size_t rp_q8x_act_row_size(int64_t cols) {
    return (size_t)cols + (size_t)(cols / 32) * 8;
}
static inline const rp_q8x_f32u *rp_q8x_act_d(const uint8_t *row, int64_t cols) {
    return (const rp_q8x_f32u *)(const void *)(row + cols);
}
static inline const rp_q8x_i32u *rp_q8x_act_bias(const uint8_t *row, int64_t cols) {
    return (const rp_q8x_i32u *)(const void *)(row + cols + (cols / 32) * 4);
}

/* ===========================================================================
 * Packed weights: row groups of RB rows (RB = 16 for avx512/amx, 8 for avx2);
 * rows past `rows` are zero. Group g (rows RB*g .. RB*g+RB-1) of nb blocks:
 *
 *   qs: nb blocks of RB * QB bytes (QB = 16 for Q4_0, 32 for Q8_0)
 *   d:  nb * RB fp16 weight scales: block b, row r at d[b * RB + r]
 *   padding up to a multiple of 64 bytes (group_bytes)
 *
 * Inside a block the bytes are the "VNNI layout": 4 consecutive K-bytes of
 * each row side by side, so one 64-byte vector (RB = 16) or 32-byte vector
 * (RB = 8) covers all RB rows for 4 K values, and row r of the vector pairs
 * with a broadcast of 4 activation bytes. For RB = 16 this is exactly the
 * row of an AMX B tile.
 *
 * Q4_0, chunk c = 0..3 of RB * 4 bytes (ggml qs[j] holds element j in its low
 * nibble and element j + 16 in its high nibble, kept as is: 4.5 bits/weight):
 *
 *          row 0           row 1                 row RB-1
 *   c=0 | qs0[0..3]    | qs1[0..3]    | ... | qs15[0..3]    |   lo nibbles: K 0..3,   hi: K 16..19
 *   c=1 | qs0[4..7]    | qs1[4..7]    | ... | qs15[4..7]    |   lo nibbles: K 4..7,   hi: K 20..23
 *   c=2 | qs0[8..11]   | ...                                |   lo: K 8..11,  hi: K 24..27
 *   c=3 | qs0[12..15]  | ...                                |   lo: K 12..15, hi: K 28..31
 *
 *   So (v & 0xF) of chunk c is K step j = c and (v >> 4) & 0xF is step
 *   j = 4 + c; step j always meets activation bytes 4j .. 4j+3 of the block.
 *
 * Q8_0, chunk j = 0..7 of RB * 4 bytes: row r's qs[4j .. 4j+3], stored as
 * u8 = q ^ 0x80 (= q + 128) when `flip` (VNNI kernels: u8 x s8 vpdpbusd),
 * as the original signed bytes otherwise (AVX2 sign trick). 34 bytes per 32
 * weights, the same as the GGUF row.
 * ========================================================================= */
static inline size_t rp_q8x_group_bytes(int64_t cols, int rb, int qb) {
    const size_t nb = (size_t)(cols / 32);
    return (nb * (size_t)rb * (size_t)qb + nb * (size_t)rb * 2 + 63) & ~(size_t)63;
}
static inline size_t rp_q8x_packed_size(int64_t rows, int64_t cols, int rb, int qb) {
    const size_t groups = (size_t)((rows + rb - 1) / rb);
    return groups * rp_q8x_group_bytes(cols, rb, qb);
}

static inline void rp_q8x_pack_q4_0(const void *src, size_t src_row_bytes, int64_t rows, int64_t cols, void *dst,
                                    int64_t g0, int64_t g1, int rb) {
    const int64_t nb = cols / 32;
    const size_t gb = rp_q8x_group_bytes(cols, rb, 16);
    for (int64_t g = g0; g < g1; g++) {
        uint8_t *out = (uint8_t *)dst + (size_t)g * gb;
        uint16_t *od = (uint16_t *)(void *)(out + (size_t)nb * (size_t)rb * 16);
        memset(out, 0, gb);
        for (int r = 0; r < rb; r++) {
            const int64_t row = g * rb + r;
            if (row >= rows) break;
            const rp_block_q4_0 *bl = (const rp_block_q4_0 *)(const void *)((const uint8_t *)src + (size_t)row * src_row_bytes);
            for (int64_t b = 0; b < nb; b++) {
                uint8_t *o = out + (size_t)b * (size_t)rb * 16 + (size_t)r * 4;
                for (int c = 0; c < 4; c++) memcpy(o + (size_t)c * (size_t)rb * 4, bl[b].qs + 4 * c, 4);
                memcpy(&od[b * rb + r], &bl[b].d, 2);
            }
        }
    }
}

static inline void rp_q8x_pack_q8_0(const void *src, size_t src_row_bytes, int64_t rows, int64_t cols, void *dst,
                                    int64_t g0, int64_t g1, int rb, int flip) {
    const int64_t nb = cols / 32;
    const size_t gb = rp_q8x_group_bytes(cols, rb, 32);
    const uint32_t x = flip ? 0x80808080u : 0u;
    for (int64_t g = g0; g < g1; g++) {
        uint8_t *out = (uint8_t *)dst + (size_t)g * gb;
        uint16_t *od = (uint16_t *)(void *)(out + (size_t)nb * (size_t)rb * 32);
        /* padded rows: q = 0, i.e. 0x80 when flipped, and d = 0 */
        memset(out, flip ? 0x80 : 0, (size_t)nb * (size_t)rb * 32);
        memset(out + (size_t)nb * (size_t)rb * 32, 0, gb - (size_t)nb * (size_t)rb * 32);
        for (int r = 0; r < rb; r++) {
            const int64_t row = g * rb + r;
            if (row >= rows) break;
            const rp_block_q8_0 *bl = (const rp_block_q8_0 *)(const void *)((const uint8_t *)src + (size_t)row * src_row_bytes);
            for (int64_t b = 0; b < nb; b++) {
                uint8_t *o = out + (size_t)b * (size_t)rb * 32 + (size_t)r * 4;
                for (int j = 0; j < 8; j++) {
                    uint32_t v;
                    memcpy(&v, bl[b].qs + 4 * j, 4);
                    v ^= x;
                    memcpy(o + (size_t)j * (size_t)rb * 4, &v, 4);
                }
                memcpy(&od[b * rb + r], &bl[b].d, 2);
            }
        }
    }
}

/* ===========================================================================
 * Activation quantizers. Bit-exactness with quantize_row_q8_0_ref:
 *   amax = max |x| (scalar reduction of exact values), d = amax / 127 and
 *   id = 1 / d as scalar divisions, x * id as one IEEE multiply per lane (no
 *   contraction possible), the fp16 rounding of d by F16C (RNE, the same as
 *   rp_fp32_to_fp16), and roundf (half away from zero), which SIMD has no
 *   mode for: t = trunc(v) and v - t are exact for |v| < 2^23, so
 *   round(v) = t + (|v - t| >= 0.5 ? sign(v) : 0) is exact. Then the clamp to
 *   [-128, 127] as in the reference (NaN lands on -128 like it).
 * ========================================================================= */
#if defined(__AVX2__)
static inline void rp_q8x_quant_act_avx2(const float *x, void *dst, int64_t cols, int32_t bias_mul) {
    const int64_t nb = cols / 32;
    int8_t *qs = (int8_t *)dst;
    float *dd = (float *)(void *)((uint8_t *)dst + cols);
    int32_t *bias = (int32_t *)(void *)((uint8_t *)dst + cols + nb * 4);
    const __m256 sgn = _mm256_set1_ps(-0.0f), half = _mm256_set1_ps(0.5f), one = _mm256_set1_ps(1.0f);
    const __m256 lo = _mm256_set1_ps(-128.0f), hi = _mm256_set1_ps(127.0f);
    for (int64_t b = 0; b < nb; b++, x += 32) {
        __m256 v[4];
        __m256 m = _mm256_setzero_ps();
        for (int i = 0; i < 4; i++) {
            v[i] = _mm256_loadu_ps(x + 8 * i);
            m = _mm256_max_ps(m, _mm256_andnot_ps(sgn, v[i]));
        }
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1));
        const float amax = _mm_cvtss_f32(m4);
        const float d = amax / 127;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        const unsigned short h = _cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT);
        dd[b] = _cvtsh_ss(h);
        const __m256 vid = _mm256_set1_ps(id);
        __m256i q[4];
        for (int i = 0; i < 4; i++) {
            const __m256 p = _mm256_mul_ps(v[i], vid);
            const __m256 t = _mm256_round_ps(p, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
            const __m256 fr = _mm256_andnot_ps(sgn, _mm256_sub_ps(p, t));
            const __m256 step = _mm256_and_ps(_mm256_cmp_ps(fr, half, _CMP_GE_OQ), _mm256_or_ps(one, _mm256_and_ps(sgn, p)));
            __m256 r = _mm256_add_ps(t, step);
            r = _mm256_min_ps(_mm256_max_ps(r, lo), hi);   /* max first: NaN -> -128 */
            q[i] = _mm256_cvttps_epi32(r);
        }
        /* int32 -> int8 (values already in range), element order restored
         * after the lane-wise packs */
        const __m256i p01 = _mm256_packs_epi32(q[0], q[1]), p23 = _mm256_packs_epi32(q[2], q[3]);
        __m256i p = _mm256_packs_epi16(p01, p23);
        p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256((__m256i *)(void *)(qs + 32 * b), p);
        __m256i s = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
        __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
        s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4e));
        s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xb1));
        bias[b] = bias_mul * _mm_cvtsi128_si32(s4);
    }
}
#endif /* __AVX2__ */

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)
static inline void rp_q8x_quant_act_avx512(const float *x, void *dst, int64_t cols, int32_t bias_mul) {
    const int64_t nb = cols / 32;
    int8_t *qs = (int8_t *)dst;
    float *dd = (float *)(void *)((uint8_t *)dst + cols);
    int32_t *bias = (int32_t *)(void *)((uint8_t *)dst + cols + nb * 4);
    const __m512i absm = _mm512_set1_epi32(0x7fffffff), sgnm = _mm512_set1_epi32((int32_t)0x80000000u);
    const __m512 half = _mm512_set1_ps(0.5f), one = _mm512_set1_ps(1.0f);
    const __m512 lo = _mm512_set1_ps(-128.0f), hi = _mm512_set1_ps(127.0f);
    for (int64_t b = 0; b < nb; b++, x += 32) {
        const __m512 v0 = _mm512_loadu_ps(x), v1 = _mm512_loadu_ps(x + 16);
        const __m512 a = _mm512_max_ps(_mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(v0), absm)),
                                       _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(v1), absm)));
        const float amax = _mm512_reduce_max_ps(a);
        const float d = amax / 127;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        const unsigned short h = _cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT);
        dd[b] = _cvtsh_ss(h);
        const __m512 vid = _mm512_set1_ps(id);
        __m512i q[2];
        for (int i = 0; i < 2; i++) {
            const __m512 p = _mm512_mul_ps(i ? v1 : v0, vid);
            const __m512 t = _mm512_roundscale_ps(p, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
            const __m512 fr = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(_mm512_sub_ps(p, t)), absm));
            const __mmask16 up = _mm512_cmp_ps_mask(fr, half, _CMP_GE_OQ);
            const __m512 s1 = _mm512_castsi512_ps(
                _mm512_or_si512(_mm512_castps_si512(one), _mm512_and_si512(_mm512_castps_si512(p), sgnm)));
            __m512 r = _mm512_mask_add_ps(t, up, t, s1);
            r = _mm512_min_ps(_mm512_max_ps(r, lo), hi);   /* max first: NaN -> -128 */
            q[i] = _mm512_cvttps_epi32(r);
            _mm_storeu_si128((__m128i *)(void *)(qs + 32 * b + 16 * i), _mm512_cvtsepi32_epi8(q[i]));
        }
        bias[b] = bias_mul * _mm512_reduce_add_epi32(_mm512_add_epi32(q[0], q[1]));
    }
}

/* ===========================================================================
 * VNNI GEMM on the RB = 16 packed layout: MR activation rows (1..4) x NG row
 * groups (1..2) per register tile. Per block b: the int32 accumulators start
 * at the activation's bias, take 8 vpdpbusd (16 rows x 4 K-bytes each, the
 * activation's 4 bytes broadcast), and are then converted and added to fp32
 * accumulators with weight scale x activation scale:
 *     accf[m][g] += float(acc[m][g]) * (dw[g][0..15] * da[m][b])
 * Integer sums are exact (|sum| <= 32 * 255 * 128 + |bias| < 2^31); only the
 * fp32 accumulation order differs from the reference.
 * Registers at MR = 4, NG = 2: 8 int + 8 fp32 accumulators, 4 weight vectors,
 * 2 broadcasts, 2 scales.
 * ========================================================================= */
typedef struct rp_q8x_args {
    const uint8_t *w;     /* packed matrix */
    int64_t rows, cols, nb;
    size_t gbytes;        /* bytes per group */
    const uint8_t *act;
    size_t astride;
    float *y;
    int64_t ldy;
} rp_q8x_args;

/* valid-row mask of group g (rows past `rows` are padding, never stored) */
static inline __mmask16 rp_q8x_row_mask(const rp_q8x_args *A, int64_t g) {
    const int64_t left = A->rows - g * 16;
    return left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1u);
}

RP_Q8X_INLINE void rp_q8x_vnni_tile(const int Q4, const int MR, const int NG, const rp_q8x_args *A, int64_t m0,
                                    int64_t g0) {
    const int64_t nb = A->nb, cols = A->cols;
    const size_t qbytes = Q4 ? 256 : 512;   /* per block per group */
    const uint8_t *wq[2];
    const uint16_t *wd[2];
    const uint8_t *ar[4];
    const rp_q8x_f32u *da[4];
    const rp_q8x_i32u *bs[4];
    RP_Q8X_UNROLL for (int g = 0; g < NG; g++) {
        wq[g] = A->w + (size_t)(g0 + g) * A->gbytes;
        wd[g] = (const uint16_t *)(const void *)(wq[g] + (size_t)nb * qbytes);
    }
    RP_Q8X_UNROLL for (int m = 0; m < MR; m++) {
        ar[m] = A->act + (size_t)(m0 + m) * A->astride;
        da[m] = rp_q8x_act_d(ar[m], cols);
        bs[m] = rp_q8x_act_bias(ar[m], cols);
    }
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    __m512 accf[4][2];
    RP_Q8X_UNROLL for (int m = 0; m < MR; m++) RP_Q8X_UNROLL for (int g = 0; g < NG; g++) accf[m][g] = _mm512_setzero_ps();

    for (int64_t b = 0; b < nb; b++) {
        __m512i acc[4][2];
        RP_Q8X_UNROLL for (int m = 0; m < MR; m++) {
            const __m512i bv = _mm512_set1_epi32(bs[m][b]);
            RP_Q8X_UNROLL for (int g = 0; g < NG; g++) acc[m][g] = bv;
        }
        if (Q4) {
            RP_Q8X_UNROLL for (int c = 0; c < 4; c++) {
                __m512i lo[2], hi[2];
                RP_Q8X_UNROLL for (int g = 0; g < NG; g++) {
                    const __m512i v = _mm512_load_si512((const void *)(wq[g] + (size_t)b * 256 + 64 * c));
                    lo[g] = _mm512_and_si512(v, m4);
                    hi[g] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
                }
                RP_Q8X_UNROLL for (int m = 0; m < MR; m++) {
                    const uint8_t *p = ar[m] + 32 * b + 4 * c;
                    const __m512i al = _mm512_set1_epi32(*(const rp_q8x_i32u *)p);
                    const __m512i ah = _mm512_set1_epi32(*(const rp_q8x_i32u *)(p + 16));
                    RP_Q8X_UNROLL for (int g = 0; g < NG; g++) {
                        acc[m][g] = _mm512_dpbusd_epi32(acc[m][g], lo[g], al);
                        acc[m][g] = _mm512_dpbusd_epi32(acc[m][g], hi[g], ah);
                    }
                }
            }
        } else {
            RP_Q8X_UNROLL for (int j = 0; j < 8; j++) {
                __m512i wv[2];
                RP_Q8X_UNROLL for (int g = 0; g < NG; g++)
                    wv[g] = _mm512_load_si512((const void *)(wq[g] + (size_t)b * 512 + 64 * j));
                RP_Q8X_UNROLL for (int m = 0; m < MR; m++) {
                    const __m512i av = _mm512_set1_epi32(*(const rp_q8x_i32u *)(ar[m] + 32 * b + 4 * j));
                    RP_Q8X_UNROLL for (int g = 0; g < NG; g++) acc[m][g] = _mm512_dpbusd_epi32(acc[m][g], wv[g], av);
                }
            }
        }
        __m512 dw[2];
        RP_Q8X_UNROLL for (int g = 0; g < NG; g++)
            dw[g] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(wd[g] + 16 * b)));
        RP_Q8X_UNROLL for (int m = 0; m < MR; m++) {
            const __m512 dav = _mm512_set1_ps(da[m][b]);
            RP_Q8X_UNROLL for (int g = 0; g < NG; g++)
                accf[m][g] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[m][g]), _mm512_mul_ps(dw[g], dav), accf[m][g]);
        }
    }
    RP_Q8X_UNROLL for (int g = 0; g < NG; g++) {
        const __mmask16 k = rp_q8x_row_mask(A, g0 + g);
        RP_Q8X_UNROLL for (int m = 0; m < MR; m++)
            _mm512_mask_storeu_ps(A->y + (m0 + m) * A->ldy + (g0 + g) * 16, k, accf[m][g]);
    }
}

/* GEMV, one activation row: 4 groups (64 rows) in flight, lo and hi nibble
 * steps on separate int32 chains so the vpdpbusd latency is hidden, and a
 * prefetch a few blocks ahead of each group's stream. */
RP_Q8X_INLINE void rp_q8x_vnni_gemv(const int Q4, const int NG, const rp_q8x_args *A, int64_t g0) {
    const int64_t nb = A->nb, cols = A->cols;
    const size_t qbytes = Q4 ? 256 : 512;
    const uint8_t *wq[4];
    const uint16_t *wd[4];
    RP_Q8X_UNROLL for (int g = 0; g < NG; g++) {
        wq[g] = A->w + (size_t)(g0 + g) * A->gbytes;
        wd[g] = (const uint16_t *)(const void *)(wq[g] + (size_t)nb * qbytes);
    }
    const uint8_t *ar = A->act;
    const rp_q8x_f32u *da = rp_q8x_act_d(ar, cols);
    const rp_q8x_i32u *bs = rp_q8x_act_bias(ar, cols);
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    __m512 accf[4];
    RP_Q8X_UNROLL for (int g = 0; g < NG; g++) accf[g] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        __m512i a0[4], a1[4];
        const __m512i bv = _mm512_set1_epi32(bs[b]);
        RP_Q8X_UNROLL for (int g = 0; g < NG; g++) {
            a0[g] = bv;
            a1[g] = _mm512_setzero_si512();
#ifndef RP_Q8X_PF
#define RP_Q8X_PF 1024
#endif
            if (RP_Q8X_PF)
                RP_Q8X_UNROLL for (size_t o = 0; o < qbytes; o += 64)
                    _mm_prefetch((const char *)(wq[g] + (size_t)b * qbytes + RP_Q8X_PF + o), _MM_HINT_T0);
        }
        if (Q4) {
            RP_Q8X_UNROLL for (int c = 0; c < 4; c++) {
                const __m512i al = _mm512_set1_epi32(*(const rp_q8x_i32u *)(ar + 32 * b + 4 * c));
                const __m512i ah = _mm512_set1_epi32(*(const rp_q8x_i32u *)(ar + 32 * b + 16 + 4 * c));
                RP_Q8X_UNROLL for (int g = 0; g < NG; g++) {
                    const __m512i v = _mm512_load_si512((const void *)(wq[g] + (size_t)b * 256 + 64 * c));
                    a0[g] = _mm512_dpbusd_epi32(a0[g], _mm512_and_si512(v, m4), al);
                    a1[g] = _mm512_dpbusd_epi32(a1[g], _mm512_and_si512(_mm512_srli_epi16(v, 4), m4), ah);
                }
            }
        } else {
            RP_Q8X_UNROLL for (int j = 0; j < 8; j += 2) {
                const __m512i x0 = _mm512_set1_epi32(*(const rp_q8x_i32u *)(ar + 32 * b + 4 * j));
                const __m512i x1 = _mm512_set1_epi32(*(const rp_q8x_i32u *)(ar + 32 * b + 4 * j + 4));
                RP_Q8X_UNROLL for (int g = 0; g < NG; g++) {
                    const uint8_t *p = wq[g] + (size_t)b * 512 + 64 * j;
                    a0[g] = _mm512_dpbusd_epi32(a0[g], _mm512_load_si512((const void *)p), x0);
                    a1[g] = _mm512_dpbusd_epi32(a1[g], _mm512_load_si512((const void *)(p + 64)), x1);
                }
            }
        }
        const __m512 dav = _mm512_set1_ps(da[b]);
        RP_Q8X_UNROLL for (int g = 0; g < NG; g++) {
            const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(wd[g] + 16 * b)));
            accf[g] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(a0[g], a1[g])), _mm512_mul_ps(dw, dav), accf[g]);
        }
    }
    RP_Q8X_UNROLL for (int g = 0; g < NG; g++)
        _mm512_mask_storeu_ps(A->y + (g0 + g) * 16, rp_q8x_row_mask(A, g0 + g), accf[g]);
}

static inline void rp_q8x_vnni_gemm(const int Q4, const uint8_t *w, int64_t rows, int64_t cols, const uint8_t *act,
                                    size_t astride, int64_t n, int64_t r0, int64_t r1, float *y, int64_t ldy) {
    if (r1 <= r0 || n <= 0) return;
    const rp_q8x_args A = {w, rows, cols, cols / 32, rp_q8x_group_bytes(cols, 16, Q4 ? 16 : 32), act, astride, y, ldy};
    const int64_t ga = r0 / 16, gz = (r1 + 15) / 16;
    if (n == 1) {
        int64_t g = ga;
        for (; g + 4 <= gz; g += 4) rp_q8x_vnni_gemv(Q4, 4, &A, g);
        for (; g < gz; g++) rp_q8x_vnni_gemv(Q4, 1, &A, g);
        return;
    }
    for (int64_t g = ga; g < gz; g += 2) {
        const int ng = gz - g >= 2 ? 2 : 1;
        int64_t m = 0;
        if (ng == 2) {
            for (; m + 4 <= n; m += 4) rp_q8x_vnni_tile(Q4, 4, 2, &A, m, g);
            switch (n - m) {
            case 3: rp_q8x_vnni_tile(Q4, 3, 2, &A, m, g); break;
            case 2: rp_q8x_vnni_tile(Q4, 2, 2, &A, m, g); break;
            case 1: rp_q8x_vnni_tile(Q4, 1, 2, &A, m, g); break;
            default: break;
            }
        } else {
            for (; m + 4 <= n; m += 4) rp_q8x_vnni_tile(Q4, 4, 1, &A, m, g);
            switch (n - m) {
            case 3: rp_q8x_vnni_tile(Q4, 3, 1, &A, m, g); break;
            case 2: rp_q8x_vnni_tile(Q4, 2, 1, &A, m, g); break;
            case 1: rp_q8x_vnni_tile(Q4, 1, 1, &A, m, g); break;
            default: break;
            }
        }
    }
}
#endif /* AVX-512 VNNI */


/* ===========================================================================
 * AMX. Tile configuration is per thread and shared by every kernel family
 * running on it; amx.h's rp_amx_ensure_cfg caches the last config in a
 * static _Thread_local, one copy per translation unit, so it cannot see a
 * config loaded from another file. Our AMX gemm therefore reads the live
 * config (STTILECFG), loads its own only when it differs, and on exit puts
 * back a config that someone else had loaded: the thread's tile config is
 * the same before and after our call, so no other family's cache goes
 * stale. The loads go through rp_amx_load_cfg (inline asm whose operand
 * covers the whole struct: immune to gcc 12 dropping the config stores).
 *
 * RP_AMX_EMULATE swaps the tile instructions for a scalar emulator (per
 * thread state, #UD on unconfigured use turned into abort), so the AMX code
 * paths run and are tested on machines without AMX.
 * ========================================================================= */
#include "kernels/x86/amx.h"

#if defined(RP_AMX_EMULATE)
#include <stdio.h>

typedef struct rp_q8x_emu {
    rp_amx_cfg cfg;
    int on;
    uint8_t t[8][16][64];
} rp_q8x_emu;

/* one emulated tile state per thread, shared by every file that includes us */
__attribute__((weak)) _Thread_local rp_q8x_emu rp_q8x_emu_tls;

static inline void rp_q8x_emu_fault(const char *what) {
    fprintf(stderr, "AMX emulator: %s\n", what);
    abort();
}
static inline void rp_q8x_amx_ldcfg(const rp_amx_cfg *c) {
    rp_q8x_emu *e = &rp_q8x_emu_tls;
    if (c->palette == 0) { memset(e, 0, sizeof *e); return; }
    if (c->palette != 1) rp_q8x_emu_fault("palette != 1 (#GP)");
    for (int i = 0; i < 16; i++) {
        if (i >= 8 && (c->rows[i] || c->colsb[i])) rp_q8x_emu_fault("tile >= 8 configured (#GP)");
        if (c->rows[i] > 16 || c->colsb[i] > 64 || (c->colsb[i] & 3)) rp_q8x_emu_fault("bad tile shape (#GP)");
        if ((c->rows[i] == 0) != (c->colsb[i] == 0)) rp_q8x_emu_fault("half-configured tile (#GP)");
    }
    e->cfg = *c;
    e->on = 1;
    memset(e->t, 0, sizeof e->t);
}
static inline void rp_q8x_amx_stcfg(rp_amx_cfg *c) {
    const rp_q8x_emu *e = &rp_q8x_emu_tls;
    if (e->on) *c = e->cfg;
    else memset(c, 0, sizeof *c);
}
static inline void rp_q8x_amx_release(void) { memset(&rp_q8x_emu_tls, 0, sizeof rp_q8x_emu_tls); }
static inline void rp_q8x_emu_check(int t) {
    const rp_q8x_emu *e = &rp_q8x_emu_tls;
    if (!e->on) rp_q8x_emu_fault("tile instruction without a loaded config (#UD)");
    if (!e->cfg.rows[t]) rp_q8x_emu_fault("tile not configured (#UD)");
}
static inline void rp_q8x_emu_load(int t, const void *base, long stride) {
    rp_q8x_emu *e = &rp_q8x_emu_tls;
    rp_q8x_emu_check(t);
    memset(e->t[t], 0, sizeof e->t[t]);
    for (int r = 0; r < e->cfg.rows[t]; r++) memcpy(e->t[t][r], (const uint8_t *)base + r * stride, e->cfg.colsb[t]);
}
static inline void rp_q8x_emu_store(int t, void *base, long stride) {
    const rp_q8x_emu *e = &rp_q8x_emu_tls;
    rp_q8x_emu_check(t);
    for (int r = 0; r < e->cfg.rows[t]; r++) memcpy((uint8_t *)base + r * stride, e->t[t][r], e->cfg.colsb[t]);
}
static inline void rp_q8x_emu_zero(int t) {
    rp_q8x_emu_check(t);
    memset(rp_q8x_emu_tls.t[t], 0, sizeof rp_q8x_emu_tls.t[t]);
}
/* TDPBSSD: C[m][n] += sum_k sum_i A[m][4k+i] * B[k][4n+i], all signed bytes */
static inline void rp_q8x_emu_dpbssd(int c, int a, int b) {
    rp_q8x_emu *e = &rp_q8x_emu_tls;
    rp_q8x_emu_check(c), rp_q8x_emu_check(a), rp_q8x_emu_check(b);
    const rp_amx_cfg *k = &e->cfg;
    if (k->rows[a] != k->rows[c] || k->colsb[a] != 4 * k->rows[b] || k->colsb[b] != k->colsb[c])
        rp_q8x_emu_fault("TDPBSSD shape mismatch (#UD)");
    for (int m = 0; m < k->rows[c]; m++)
        for (int n = 0; n < k->colsb[c] / 4; n++) {
            uint32_t s;
            memcpy(&s, &e->t[c][m][4 * n], 4);
            for (int kk = 0; kk < k->rows[b]; kk++)
                for (int i = 0; i < 4; i++)
                    s += (uint32_t)((int32_t)(int8_t)e->t[a][m][4 * kk + i] * (int32_t)(int8_t)e->t[b][kk][4 * n + i]);
            memcpy(&e->t[c][m][4 * n], &s, 4);
        }
}
#define RP_Q8X_TLOAD(t, base, stride) rp_q8x_emu_load(t, base, (long)(stride))
#define RP_Q8X_TSTORE(t, base, stride) rp_q8x_emu_store(t, base, (long)(stride))
#define RP_Q8X_TZERO(t) rp_q8x_emu_zero(t)
#define RP_Q8X_TDPBSSD(c, a, b) rp_q8x_emu_dpbssd(c, a, b)

#else /* real AMX */

static inline void rp_q8x_amx_ldcfg(const rp_amx_cfg *c) { rp_amx_load_cfg(c); }
/* STTILECFG: 64 zero bytes when the tiles are not configured. The "=m"
 * operand spans the struct, so the compiler reads it only afterwards. */
static inline void rp_q8x_amx_stcfg(rp_amx_cfg *c) {
    __asm__ volatile("sttilecfg %0" : "=m"(*(struct { char b[64]; } *)c) : : "memory");
}
static inline void rp_q8x_amx_release(void) { rp_amx_release(); }
/* Own asm instead of the <immintrin.h> macros: gcc 12's tile load/store asm
 * has no memory operand or clobber, so the compiler may move our scratch
 * stores past a tile load or our loads of C before the tile store. The
 * "memory" clobbers order them; the accumulators are register variables and
 * unaffected. {AT&T|Intel} alternatives as in gcc's own headers. */
#define RP_Q8X_TLOAD(t, base, stride)                                                                   \
    __asm__ volatile("{tileloadd\t(%0,%1,1), %%tmm" #t "|tileloadd\t%%tmm" #t ", [%0+%1*1]}"            \
                     : : "r"((const void *)(base)), "r"((long)(stride)) : "memory")
#define RP_Q8X_TSTORE(t, base, stride)                                                                  \
    __asm__ volatile("{tilestored\t%%tmm" #t ", (%0,%1,1)|tilestored\t[%0+%1*1], %%tmm" #t "}"          \
                     : : "r"((void *)(base)), "r"((long)(stride)) : "memory")
#define RP_Q8X_TZERO(t) __asm__ volatile("tilezero\t%%tmm" #t ::)
#define RP_Q8X_TDPBSSD(c, a, b)                                                                         \
    __asm__ volatile("{tdpbssd\t%%tmm" #b ", %%tmm" #a ", %%tmm" #c "|tdpbssd\t%%tmm" #c ", %%tmm" #a ", %%tmm" #b "}" ::)
#endif /* RP_AMX_EMULATE */

/* Makes `mine` the live config; returns whether a foreign config must be put
 * back by rp_q8x_amx_leave. A thread with no config (INIT state) keeps ours
 * afterwards: nobody can be relying on a config it does not have. */
static inline int rp_q8x_amx_enter(const rp_amx_cfg *mine, rp_amx_cfg *saved) {
    rp_q8x_amx_stcfg(saved);
    if (memcmp(saved, mine, sizeof *saved) == 0) return 0;
    rp_q8x_amx_ldcfg(mine);
    return saved->palette != 0;
}
static inline void rp_q8x_amx_leave(int restore, const rp_amx_cfg *saved) {
    if (restore) rp_q8x_amx_ldcfg(saved);
}

/* gcc spells the AMX-INT8 macro __AMX_INT8__, clang __AMXINT8__ */
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__) && \
    (defined(__AMX_INT8__) || defined(__AMXINT8__) || defined(RP_AMX_EMULATE))
#define RP_Q8X_HAVE_AMX_GEMM 1
/* ---------------------------------------------------------------------------
 * AMX GEMM (n >= RP_Q8X_AMX_MIN_N activation rows; fewer go to the VNNI
 * kernel on the same packing). Per-32 block scales forbid summing blocks in
 * an int32 tile, so each TDPBSSD covers one block (K = 32):
 *
 *   A tile (tmm2/3): 16 activation rows x 32 bytes, straight from the
 *                    activation rows (stride = their stride)
 *   B tile (tmm4/5): 8 rows x 64 bytes = the block's 16 weight rows in VNNI
 *                    order as signed int8: Q4_0 nibble - 8 (B row c = low
 *                    nibbles of chunk c, row 4+c = high nibbles: K 4c and
 *                    16+4c, matching A's byte order), Q8_0 u8 ^ 0x80
 *   C tile (tmm0/1): 16 x 16 int32, C[m][r] = sum_k a[m][k] * w[r][k]
 *
 * Tiles alternate by block parity so block b+1's TDPBSSD runs while block
 * b's C is converted: accf[m] += float(C[m]) * (dw[0..15] * da[m]), with the
 * 16 fp32 accumulators (one per activation row of the M tile) in zmm.
 *
 * Loop order per call (rows [r0, r1) = groups ga..gz):
 *   for each K chunk of up to KC blocks:
 *     for each group g: unpack its B tiles for the chunk into scratch once
 *       for each M tile of 16 activation rows: run the chunk, add into y
 * The unpacked B (KC * 512 bytes = 32 KB) is reused by every M tile. The
 * last M tile, when n % 16 != 0, reads a zero-padded copy of the remaining
 * activation rows in scratch (results for pad rows are never stored).
 *
 * Scratch: [C: 2 x 1 KB][B: KC x 512 B][A tail: 16 x tail stride] + 64 to
 * align.
 * ------------------------------------------------------------------------- */
#define RP_Q8X_AMX_MIN_N 16
#define RP_Q8X_AMX_KC 64

static inline size_t rp_q8x_amx_tail_stride(int64_t cols) { return (rp_q8x_act_row_size(cols) + 63) & ~(size_t)63; }

static inline size_t rp_q8x_amx_scratch_bytes(int64_t cols, int64_t n) {
    if (n < RP_Q8X_AMX_MIN_N) return 0;
    const int64_t nb = cols / 32, kc = nb < RP_Q8X_AMX_KC ? nb : RP_Q8X_AMX_KC;
    return 64 + 2048 + (size_t)kc * 512 + 16 * rp_q8x_amx_tail_stride(cols);
}

/* One (M tile, group) over blocks [kb0, kb1): B tiles at bb (512 B per
 * block), activation rows at ab (stride as), weight scales wd; adds into the
 * mv x 16 outputs at y (rows masked by rmask) unless first, which stores. */
RP_Q8X_INLINE void rp_q8x_amx_tile(const uint8_t *ab, size_t as, int64_t cols, const int8_t *bb, const uint16_t *wd,
                                   int64_t kb0, int64_t kb1, float *y, int64_t ldy, int mv, __mmask16 rmask,
                                   int32_t *cb, int first) {
    __m512 acc[16];
    const rp_q8x_f32u *da[16];
    RP_Q8X_UNROLL for (int m = 0; m < 16; m++) {
        da[m] = rp_q8x_act_d(ab + (size_t)m * as, cols);
        acc[m] = (!first && m < mv) ? _mm512_maskz_loadu_ps(rmask, y + m * ldy) : _mm512_setzero_ps();
    }
    /* tile numbers must be literals (they are pasted into the asm) */
#define RP_Q8X_AMX_STEP(C, TA, TB, bk)                                    \
    do {                                                                  \
        RP_Q8X_TLOAD(TA, ab + 32 * (bk), as);                             \
        RP_Q8X_TLOAD(TB, bb + ((bk) - kb0) * 512, 64);                    \
        RP_Q8X_TZERO(C);                                                  \
        RP_Q8X_TDPBSSD(C, TA, TB);                                        \
        RP_Q8X_TSTORE(C, cb + 256 * C, 64);                               \
    } while (0)
#define RP_Q8X_AMX_EPI(P, bk)                                                                                   \
    do {                                                                                                        \
        const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(wd + 16 * (bk)))); \
        RP_Q8X_UNROLL for (int m = 0; m < 16; m++) {                                                            \
            const __m512 c = _mm512_cvtepi32_ps(_mm512_load_si512((const void *)(cb + 256 * P + 16 * m)));     \
            acc[m] = _mm512_fmadd_ps(c, _mm512_mul_ps(dw, _mm512_set1_ps(da[m][bk])), acc[m]);                  \
        }                                                                                                       \
    } while (0)
    RP_Q8X_AMX_STEP(0, 2, 4, kb0);
    for (int64_t b = kb0; b < kb1; b += 2) {
        if (b + 1 < kb1) RP_Q8X_AMX_STEP(1, 3, 5, b + 1);
        RP_Q8X_AMX_EPI(0, b);
        if (b + 1 < kb1) {
            if (b + 2 < kb1) RP_Q8X_AMX_STEP(0, 2, 4, b + 2);
            RP_Q8X_AMX_EPI(1, b + 1);
        }
    }
#undef RP_Q8X_AMX_STEP
#undef RP_Q8X_AMX_EPI
    RP_Q8X_UNROLL for (int m = 0; m < 16; m++) if (m < mv) _mm512_mask_storeu_ps(y + m * ldy, rmask, acc[m]);
}

static inline void rp_q8x_amx_gemm(const int Q4, const uint8_t *w, int64_t rows, int64_t cols, const uint8_t *act,
                                   size_t astride, int64_t n, int64_t r0, int64_t r1, float *y, int64_t ldy,
                                   void *scratch) {
    if (r1 <= r0 || n <= 0) return;
    if (n < RP_Q8X_AMX_MIN_N || !scratch) {
        rp_q8x_vnni_gemm(Q4, w, rows, cols, act, astride, n, r0, r1, y, ldy);
        return;
    }
    const int64_t nb = cols / 32;
    const size_t qbytes = Q4 ? 256 : 512, gb = rp_q8x_group_bytes(cols, 16, Q4 ? 16 : 32);
    const int64_t kc = nb < RP_Q8X_AMX_KC ? nb : RP_Q8X_AMX_KC;
    uint8_t *sp = (uint8_t *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
    int32_t *cb = (int32_t *)(void *)sp;
    int8_t *bb = (int8_t *)(sp + 2048);
    uint8_t *tail = sp + 2048 + (size_t)kc * 512;
    const size_t ts = rp_q8x_amx_tail_stride(cols), arow = rp_q8x_act_row_size(cols);
    const int64_t nfull = n / 16;
    const int rem = (int)(n % 16);
    if (rem)
        for (int m = 0; m < 16; m++) {
            if (m < rem) memcpy(tail + (size_t)m * ts, act + (size_t)(nfull * 16 + m) * astride, arow);
            else memset(tail + (size_t)m * ts, 0, arow);
        }
    rp_amx_cfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    rp_amx_cfg_tile(&cfg, 0, 16, 64);   /* C, even blocks */
    rp_amx_cfg_tile(&cfg, 1, 16, 64);   /* C, odd blocks */
    rp_amx_cfg_tile(&cfg, 2, 16, 32);   /* A */
    rp_amx_cfg_tile(&cfg, 3, 16, 32);
    rp_amx_cfg_tile(&cfg, 4, 8, 64);    /* B */
    rp_amx_cfg_tile(&cfg, 5, 8, 64);
    rp_amx_cfg saved;
    const int restore = rp_q8x_amx_enter(&cfg, &saved);

    const __m512i m4 = _mm512_set1_epi8(0x0F), e8 = _mm512_set1_epi8(8), x80 = _mm512_set1_epi8((char)0x80);
    const int64_t ga = r0 / 16, gz = (r1 + 15) / 16;
    for (int64_t kb0 = 0; kb0 < nb; kb0 += kc) {
        const int64_t kb1 = kb0 + kc < nb ? kb0 + kc : nb;
        for (int64_t g = ga; g < gz; g++) {
            const uint8_t *wq = w + (size_t)g * gb;
            const uint16_t *wd = (const uint16_t *)(const void *)(wq + (size_t)nb * qbytes);
            for (int64_t b = kb0; b < kb1; b++) {
                int8_t *o = bb + (b - kb0) * 512;
                if (Q4) {
                    for (int c = 0; c < 4; c++) {
                        const __m512i v = _mm512_load_si512((const void *)(wq + (size_t)b * 256 + 64 * c));
                        _mm512_store_si512((void *)(o + 64 * c), _mm512_sub_epi8(_mm512_and_si512(v, m4), e8));
                        _mm512_store_si512((void *)(o + 64 * (4 + c)),
                                           _mm512_sub_epi8(_mm512_and_si512(_mm512_srli_epi16(v, 4), m4), e8));
                    }
                } else {
                    for (int j = 0; j < 8; j++)
                        _mm512_store_si512((void *)(o + 64 * j),
                                           _mm512_xor_si512(_mm512_load_si512((const void *)(wq + (size_t)b * 512 + 64 * j)), x80));
                }
            }
            const int64_t left = rows - g * 16;
            const __mmask16 rmask = left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1u);
            for (int64_t mt = 0; mt < nfull; mt++)
                rp_q8x_amx_tile(act + (size_t)(mt * 16) * astride, astride, cols, bb, wd, kb0, kb1,
                                y + mt * 16 * ldy + g * 16, ldy, 16, rmask, cb, kb0 == 0);
            if (rem)
                rp_q8x_amx_tile(tail, ts, cols, bb, wd, kb0, kb1, y + nfull * 16 * ldy + g * 16, ldy, rem, rmask, cb,
                                kb0 == 0);
        }
    }
    rp_q8x_amx_leave(restore, &saved);
}
#endif /* AVX-512 VNNI && (AMX-INT8 || RP_AMX_EMULATE) */

#endif /* RP_KERNELS_X86_Q8_0_X86_H */
