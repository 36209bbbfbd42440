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
 * groups, so the accumulator arrays live in registers (clang 14 ignores the
 * GCC spelling's count here and kept them in memory: 3x slower). */
#if defined(__clang__)
#define RP_Q8X_UNROLL _Pragma("clang loop unroll(full)")
#else
#define RP_Q8X_UNROLL _Pragma("GCC unroll 16")
#endif

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
 * Packed weights: row groups of RB rows (RB = 16 for avx512/amx, 8 for avx2),
 * groups back to back. Group g holds rows RB*g .. RB*g+RB-1 of nb = K / 32
 * blocks as one sequential stream of super-blocks of SB = 32 / RB blocks
 * (so a super-block covers 32 row-blocks whatever RB), quants then scales:
 *
 *   | qs blk 0 | .. | qs blk SB-1 | d blk 0 | .. | d blk SB-1 | qs blk SB | ...
 *     RB*QB bytes each              RB fp16 each
 *   super-block = 32*QB + 64 bytes: 576 (Q4_0, QB = 16), 1088 (Q8_0, QB = 32),
 *   a multiple of 64, so every block's quants stay 64-byte aligned.
 *
 * One stream per group (scales interleaved, not a second array) because
 * decode reads several groups at once and each stream restart costs the
 * hardware prefetcher a ramp-up. The last super-block of a group is padded
 * when SB does not divide nb (never for K a multiple of 128); rows past
 * `rows` (last group only) are zero bytes with d = 0. Neither is ever read
 * into a stored result.
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
/* Weight encodings of the packed layout (the VNNI kernels' K parameter):
 * Q8_0 and Q4_0 as above; IQ4_NL is Q4_0's layout (same block, same nibble
 * order) with codebook nibbles; Q4_1 / Q5_0 / Q5_1 add a min array and/or a
 * fifth-bit plane (q8x_legacy_pack.h). */
enum { RP_Q8X_Q8_0 = 0, RP_Q8X_Q4_0 = 1, RP_Q8X_IQ4_NL = 2, RP_Q8X_Q4_1 = 3, RP_Q8X_Q5_0 = 4, RP_Q8X_Q5_1 = 5 };
/* quant bytes per row per block, and fp16 arrays per super-block (1: d; 2: d then m) */
#define RP_Q8X_KIND_QB(K) ((K) == RP_Q8X_Q8_0 ? 32 : (K) == RP_Q8X_Q5_0 || (K) == RP_Q8X_Q5_1 ? 20 : 16)
#define RP_Q8X_KIND_NS(K) ((K) == RP_Q8X_Q4_1 || (K) == RP_Q8X_Q5_1 ? 2 : 1)

/* The general form: a super-block is 32*qb bytes of quants then ns arrays of
 * 32 fp16 (64 bytes each); ns = 1 everywhere above. */
static inline size_t rp_q8x_sb_bytes(int qb, int ns) { return (size_t)(32 * qb + 64 * ns); }
static inline size_t rp_q8x_group_bytes_ns(int64_t cols, int rb, int qb, int ns) {
    const int64_t nb = cols / 32, sb = 32 / rb;
    return (size_t)((nb + sb - 1) / sb) * rp_q8x_sb_bytes(qb, ns);
}
static inline size_t rp_q8x_packed_size_ns(int64_t rows, int64_t cols, int rb, int qb, int ns) {
    const size_t groups = (size_t)((rows + rb - 1) / rb);
    return groups * rp_q8x_group_bytes_ns(cols, rb, qb, ns);
}
static inline size_t rp_q8x_qoff_ns(int64_t b, int rb, int qb, int ns) {
    const int64_t sb = 32 / rb;
    return (size_t)(b / sb) * rp_q8x_sb_bytes(qb, ns) + (size_t)(b % sb) * (size_t)(rb * qb);
}
/* block b's RB scales d; its RB mins m (ns = 2) are 64 bytes further */
static inline size_t rp_q8x_doff_ns(int64_t b, int rb, int qb, int ns) {
    const int64_t sb = 32 / rb;
    return (size_t)(b / sb) * rp_q8x_sb_bytes(qb, ns) + (size_t)(32 * qb) + (size_t)(b % sb) * (size_t)(rb * 2);
}
static inline size_t rp_q8x_group_bytes(int64_t cols, int rb, int qb) { return rp_q8x_group_bytes_ns(cols, rb, qb, 1); }
static inline size_t rp_q8x_packed_size(int64_t rows, int64_t cols, int rb, int qb) {
    return rp_q8x_packed_size_ns(rows, cols, rb, qb, 1);
}
/* byte offsets, inside a group, of block b's quants and of its RB scales */
static inline size_t rp_q8x_qoff(int64_t b, int rb, int qb) { return rp_q8x_qoff_ns(b, rb, qb, 1); }
static inline size_t rp_q8x_doff(int64_t b, int rb, int qb) { return rp_q8x_doff_ns(b, rb, qb, 1); }

static inline void rp_q8x_pack_q4_0(const void *src, size_t src_row_bytes, int64_t rows, int64_t cols, void *dst,
                                    int64_t g0, int64_t g1, int rb) {
    const int64_t nb = cols / 32;
    const size_t gb = rp_q8x_group_bytes(cols, rb, 16);
    for (int64_t g = g0; g < g1; g++) {
        uint8_t *out = (uint8_t *)dst + (size_t)g * gb;
        const int nr = rows - g * rb < rb ? (int)(rows - g * rb) : rb;
        if (nr < rb || nb % (32 / rb)) memset(out, 0, gb);   /* padded rows or blocks */
        const uint8_t *in = (const uint8_t *)src + (size_t)(g * rb) * src_row_bytes;
        for (int64_t b = 0; b < nb; b++) {
            uint8_t *o = out + rp_q8x_qoff(b, rb, 16);
            uint8_t *od = out + rp_q8x_doff(b, rb, 16);
            for (int r = 0; r < nr; r++) {
                const rp_block_q4_0 *bl = (const rp_block_q4_0 *)(const void *)(in + (size_t)r * src_row_bytes) + b;
                for (int c = 0; c < 4; c++) memcpy(o + (size_t)(c * rb + r) * 4, bl->qs + 4 * c, 4);
                memcpy(od + 2 * r, &bl->d, 2);
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
        const int nr = rows - g * rb < rb ? (int)(rows - g * rb) : rb;
        if (nr < rb || nb % (32 / rb)) memset(out, 0, gb);   /* padded rows or blocks */
        const uint8_t *in = (const uint8_t *)src + (size_t)(g * rb) * src_row_bytes;
        for (int64_t b = 0; b < nb; b++) {
            uint8_t *o = out + rp_q8x_qoff(b, rb, 32);
            uint8_t *od = out + rp_q8x_doff(b, rb, 32);
            for (int r = 0; r < nr; r++) {
                const rp_block_q8_0 *bl = (const rp_block_q8_0 *)(const void *)(in + (size_t)r * src_row_bytes) + b;
                for (int j = 0; j < 8; j++) {
                    uint32_t v;
                    memcpy(&v, bl->qs + 4 * j, 4);
                    v ^= x;
                    memcpy(o + (size_t)(j * rb + r) * 4, &v, 4);
                }
                memcpy(od + 2 * r, &bl->d, 2);
            }
        }
    }
}

/* ===========================================================================
 * Activation quantizers. Bit-exactness with quantize_row_q8_0_ref:
 *   amax = max |x| (max is exact in any order), d = amax / 127 and
 *   id = d ? 1 / d : 0 as IEEE divisions (scalar or per lane: the same
 *   results), the fp16 rounding of d by F16C (RNE, identical to
 *   rp_fp32_to_fp16), x * id as one IEEE multiply per lane (no contraction
 *   possible), then roundf (half away from zero), which SIMD has no mode for:
 *       roundf(p) == trunc(p + copysign(0.5f - 2^-25, p))
 *   checked exhaustively for every float |p| <= 2^23 (larger floats are
 *   integers, which the addition leaves unchanged). The clamp to
 *   [-128, 127] happens in float before the truncating conversion, so +inf
 *   (x * id overflows when d is a tiny subnormal) gives 127 and NaN gives
 *   -128, as in the reference.
 * ========================================================================= */
#define RP_Q8X_HALF_DOWN (0.5f - 0x1p-25f)

#if defined(__AVX2__)
static inline void rp_q8x_quant_act_avx2(const float *x, void *dst, int64_t cols, int32_t bias_mul) {
    const int64_t nb = cols / 32;
    int8_t *qs = (int8_t *)dst;
    float *dd = (float *)(void *)((uint8_t *)dst + cols);
    int32_t *bias = (int32_t *)(void *)((uint8_t *)dst + cols + nb * 4);
    const __m256 sgn = _mm256_set1_ps(-0.0f);
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
        const __m256 hd = _mm256_set1_ps(RP_Q8X_HALF_DOWN);
        __m256i q[4];
        for (int i = 0; i < 4; i++) {
            const __m256 p = _mm256_mul_ps(v[i], vid);
            __m256 r = _mm256_add_ps(p, _mm256_or_ps(hd, _mm256_and_ps(sgn, p)));
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
/* Reduces 16 vectors at once: lane i of the result is op over all lanes of
 * a[i] (op = max of floats, or sum of int32 when `add`). Four shuffle+op
 * levels (256-, 128-, 64-bit halves, then 32-bit pairs) and one permute:
 * 46 instructions for 16 reductions instead of ~8 each. */
RP_Q8X_INLINE __m512 rp_q8x_reduce16(__m512 *a, const int add) {
#define RP_Q8X_OP(x, y) (add ? _mm512_castsi512_ps(_mm512_add_epi32(_mm512_castps_si512(x), _mm512_castps_si512(y))) \
                             : _mm512_max_ps(x, y))
    __m512 b[8], c[4], d[2];
    RP_Q8X_UNROLL for (int k = 0; k < 8; k++)   /* [a2k half | a2k+1 half] */
        b[k] = RP_Q8X_OP(_mm512_shuffle_f32x4(a[2 * k], a[2 * k + 1], 0x44), _mm512_shuffle_f32x4(a[2 * k], a[2 * k + 1], 0xEE));
    RP_Q8X_UNROLL for (int k = 0; k < 4; k++)   /* quarter j: 4 partials of a[4k+j] */
        c[k] = RP_Q8X_OP(_mm512_shuffle_f32x4(b[2 * k], b[2 * k + 1], 0x88), _mm512_shuffle_f32x4(b[2 * k], b[2 * k + 1], 0xDD));
    RP_Q8X_UNROLL for (int k = 0; k < 2; k++)   /* quarter j: 2 of a[8k+j], 2 of a[8k+4+j] */
        d[k] = RP_Q8X_OP(_mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(c[2 * k]), _mm512_castps_pd(c[2 * k + 1]))),
                         _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(c[2 * k]), _mm512_castps_pd(c[2 * k + 1]))));
    /* quarter j: a[j], a[4+j], a[8+j], a[12+j]: lane 4j+t holds a[4t+j] */
    const __m512 e = RP_Q8X_OP(_mm512_shuffle_ps(d[0], d[1], 0x88), _mm512_shuffle_ps(d[0], d[1], 0xDD));
#undef RP_Q8X_OP
    return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), e);
}

/* 16 blocks at a time: amax, d, id and the int sums as 16-lane vectors. */
static inline void rp_q8x_quant_act_avx512(const float *x, void *dst, int64_t cols, int32_t bias_mul) {
    const int64_t nb = cols / 32;
    int8_t *qs = (int8_t *)dst;
    float *dd = (float *)(void *)((uint8_t *)dst + cols);
    int32_t *bias = (int32_t *)(void *)((uint8_t *)dst + cols + nb * 4);
    const __m512 hd = _mm512_set1_ps(RP_Q8X_HALF_DOWN), lo = _mm512_set1_ps(-128.0f), hi = _mm512_set1_ps(127.0f);
    const __m512i sgn = _mm512_set1_epi32((int32_t)0x80000000u);
    for (int64_t b0 = 0; b0 < nb; b0 += 16) {
        const int nk = nb - b0 < 16 ? (int)(nb - b0) : 16;
        const __mmask16 km = (__mmask16)((1u << nk) - 1u);
        const float *xb = x + 32 * b0;
        __m512 a[16];
        RP_Q8X_UNROLL for (int i = 0; i < 16; i++)
            a[i] = i < nk ? _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(xb + 32 * i)), _mm512_abs_ps(_mm512_loadu_ps(xb + 32 * i + 16)))
                          : _mm512_setzero_ps();
        const __m512 amax = rp_q8x_reduce16(a, 0);
        const __m512 d = _mm512_div_ps(amax, _mm512_set1_ps(127.0f));
        const __m512 id = _mm512_maskz_div_ps(_mm512_cmp_ps_mask(d, _mm512_setzero_ps(), _CMP_NEQ_UQ), _mm512_set1_ps(1.0f), d);
        _mm512_mask_storeu_ps(dd + b0, km, _mm512_cvtph_ps(_mm512_cvtps_ph(d, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)));
        float idv[16];
        _mm512_storeu_ps(idv, id);
        RP_Q8X_UNROLL for (int i = 0; i < 16; i++) {
            if (i < nk) {
                const __m512 vid = _mm512_set1_ps(idv[i]);
                __m512i q[2];
                RP_Q8X_UNROLL for (int h = 0; h < 2; h++) {
                    const __m512 p = _mm512_mul_ps(_mm512_loadu_ps(xb + 32 * i + 16 * h), vid);
                    /* p + copysign(HALF_DOWN, p): ternary logic (p & sign) | hd */
                    const __m512 cs = _mm512_castsi512_ps(
                        _mm512_ternarylogic_epi32(_mm512_castps_si512(p), sgn, _mm512_castps_si512(hd), 0xEA));
                    const __m512 r = _mm512_min_ps(_mm512_max_ps(_mm512_add_ps(p, cs), lo), hi);   /* NaN -> -128 */
                    q[h] = _mm512_cvttps_epi32(r);
                    _mm_storeu_si128((__m128i *)(void *)(qs + 32 * (b0 + i) + 16 * h), _mm512_cvtepi32_epi8(q[h]));
                }
                a[i] = _mm512_castsi512_ps(_mm512_add_epi32(q[0], q[1]));
            } else {
                a[i] = _mm512_setzero_ps();
            }
        }
        const __m512i sum = _mm512_castps_si512(rp_q8x_reduce16(a, 1));
        _mm512_mask_storeu_epi32(bias + b0, km, _mm512_mullo_epi32(sum, _mm512_set1_epi32(bias_mul)));
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

/* The 4-bit kinds' decoded step vectors of chunk c (K steps c and 4 + c):
 * nibbles, codebook bytes (IQ4_NL: value + 128, u8, with bias -128 * sum(a))
 * or 5-bit q (fifth bits from the block's plane, q8x_legacy_pack.h). */
RP_Q8X_INLINE __m512i rp_q8x_hbit512(__m512i hb, const int s) {
    const __m512i m = _mm512_set1_epi8(0x10);
    if (s < 4) return _mm512_and_si512(_mm512_slli_epi16(hb, 4 - s), m);
    if (s > 4) return _mm512_and_si512(_mm512_srli_epi16(hb, s - 4), m);
    return _mm512_and_si512(hb, m);
}
RP_Q8X_INLINE void rp_q8x_decode4(const int K, const uint8_t *wqb, const int c, __m512i *lo, __m512i *hi) {
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    const __m512i v = _mm512_load_si512((const void *)(wqb + 64 * c));
    *lo = _mm512_and_si512(v, m4);
    *hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
    if (K == RP_Q8X_IQ4_NL) {
        const __m512i tab = _mm512_broadcast_i32x4(_mm_xor_si128(_mm_loadu_si128((const __m128i *)(const void *)rp_iq4nl_values),
                                                                 _mm_set1_epi8((char)0x80)));
        *lo = _mm512_shuffle_epi8(tab, *lo);
        *hi = _mm512_shuffle_epi8(tab, *hi);
    } else if (K == RP_Q8X_Q5_0 || K == RP_Q8X_Q5_1) {
        const __m512i hb = _mm512_load_si512((const void *)(wqb + 256));
        *lo = _mm512_or_si512(*lo, rp_q8x_hbit512(hb, c));
        *hi = _mm512_or_si512(*hi, rp_q8x_hbit512(hb, 4 + c));
    }
}

RP_Q8X_INLINE void rp_q8x_vnni_tile(const int K, const int MR, const int NG, const rp_q8x_args *A, int64_t m0,
                                    int64_t g0) {
    const int64_t nb = A->nb, cols = A->cols;
    const int QB = RP_Q8X_KIND_QB(K), NS = RP_Q8X_KIND_NS(K), MIN = NS == 2;
    const uint8_t *wq[2];
    const uint8_t *ar[4];
    const rp_q8x_f32u *da[4];
    const rp_q8x_i32u *bs[4];
    RP_Q8X_UNROLL for (int g = 0; g < NG; g++) wq[g] = A->w + (size_t)(g0 + g) * A->gbytes;
    RP_Q8X_UNROLL for (int m = 0; m < MR; m++) {
        ar[m] = A->act + (size_t)(m0 + m) * A->astride;
        da[m] = rp_q8x_act_d(ar[m], cols);
        bs[m] = rp_q8x_act_bias(ar[m], cols);
    }
    __m512 accf[4][2];
    RP_Q8X_UNROLL for (int m = 0; m < MR; m++) RP_Q8X_UNROLL for (int g = 0; g < NG; g++) accf[m][g] = _mm512_setzero_ps();

    for (int64_t b = 0; b < nb; b++) {
        const size_t qo = rp_q8x_qoff_ns(b, 16, QB, NS), dof = rp_q8x_doff_ns(b, 16, QB, NS);
        __m512i acc[4][2];
        RP_Q8X_UNROLL for (int m = 0; m < MR; m++) {
            /* the min kinds take sum(a) as a float term below, not as the seed */
            const __m512i bv = MIN ? _mm512_setzero_si512() : _mm512_set1_epi32(bs[m][b]);
            RP_Q8X_UNROLL for (int g = 0; g < NG; g++) acc[m][g] = bv;
        }
        if (K != RP_Q8X_Q8_0) {
            RP_Q8X_UNROLL for (int c = 0; c < 4; c++) {
                __m512i lo[2], hi[2];
                RP_Q8X_UNROLL for (int g = 0; g < NG; g++) rp_q8x_decode4(K, wq[g] + qo, c, &lo[g], &hi[g]);
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
                    wv[g] = _mm512_load_si512((const void *)(wq[g] + qo + 64 * j));
                RP_Q8X_UNROLL for (int m = 0; m < MR; m++) {
                    const __m512i av = _mm512_set1_epi32(*(const rp_q8x_i32u *)(ar[m] + 32 * b + 4 * j));
                    RP_Q8X_UNROLL for (int g = 0; g < NG; g++) acc[m][g] = _mm512_dpbusd_epi32(acc[m][g], wv[g], av);
                }
            }
        }
        __m512 dw[2], mw[2];
        RP_Q8X_UNROLL for (int g = 0; g < NG; g++) {
            dw[g] = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(const void *)(wq[g] + dof)));
            if (MIN) mw[g] = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(const void *)(wq[g] + dof + 64)));
        }
        RP_Q8X_UNROLL for (int m = 0; m < MR; m++) {
            const __m512 dav = _mm512_set1_ps(da[m][b]);
            RP_Q8X_UNROLL for (int g = 0; g < NG; g++)
                accf[m][g] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[m][g]), _mm512_mul_ps(dw[g], dav), accf[m][g]);
            if (MIN) {
                const __m512 sav = _mm512_set1_ps(da[m][b] * (float)bs[m][b]);
                RP_Q8X_UNROLL for (int g = 0; g < NG; g++) accf[m][g] = _mm512_fmadd_ps(mw[g], sav, accf[m][g]);
            }
        }
    }
    RP_Q8X_UNROLL for (int g = 0; g < NG; g++) {
        const __mmask16 k = rp_q8x_row_mask(A, g0 + g);
        RP_Q8X_UNROLL for (int m = 0; m < MR; m++)
            _mm512_mask_storeu_ps(A->y + (m0 + m) * A->ldy + (g0 + g) * 16, k, accf[m][g]);
    }
}

/* GEMV, one activation row: NG groups (up to 4 = 64 rows) in flight, i.e.
 * NG sequential streams, which the hardware prefetchers follow; two int32
 * chains per group (Q4_0: low nibbles, and high nibbles kept in place as
 * 16 * hi, which saves the shift; Q8_0: even and odd K steps) hide the
 * vpdpbusd latency. Decode is bound by how many bytes one core keeps in
 * flight: measured on Zen 4 (one thread, DRAM) 4 groups read Q4_0 at 24 GB/s
 * where 2 groups read 19 and 1 group 16; taking the 4 groups from 4
 * contiguous quarters of the range (streams run on across groups) gave 26,
 * and one stream per group (scales inside the super-blocks instead of a
 * second array) 29-31, against 31-35 GB/s for a plain streaming read.
 * Software prefetching (T0, 1-4 KB ahead) made every variant slower. */
RP_Q8X_INLINE void rp_q8x_vnni_gemv(const int K, const int NG, const rp_q8x_args *A, int64_t g0, int64_t gs) {
    const int64_t nb = A->nb, cols = A->cols;
    const int QB = RP_Q8X_KIND_QB(K), NS = RP_Q8X_KIND_NS(K), MIN = NS == 2;
    const uint8_t *wq[4];
    RP_Q8X_UNROLL for (int g = 0; g < NG; g++) wq[g] = A->w + (size_t)(g0 + g * gs) * A->gbytes;
    const uint8_t *ar = A->act;
    const rp_q8x_f32u *da = rp_q8x_act_d(ar, cols);
    const rp_q8x_i32u *bs = rp_q8x_act_bias(ar, cols);
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    __m512 accf[4];
    RP_Q8X_UNROLL for (int g = 0; g < NG; g++) accf[g] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const size_t qo = rp_q8x_qoff_ns(b, 16, QB, NS), dof = rp_q8x_doff_ns(b, 16, QB, NS);
        __m512i a0[4], a1[4];
        const __m512i bv = MIN ? _mm512_setzero_si512() : _mm512_set1_epi32(bs[b]);
        RP_Q8X_UNROLL for (int g = 0; g < NG; g++) {
            a0[g] = bv;
            a1[g] = _mm512_setzero_si512();
        }
        if (K == RP_Q8X_Q4_0) {
            RP_Q8X_UNROLL for (int c = 0; c < 4; c++) {
                const __m512i al = _mm512_set1_epi32(*(const rp_q8x_i32u *)(ar + 32 * b + 4 * c));
                const __m512i ah = _mm512_set1_epi32(*(const rp_q8x_i32u *)(ar + 32 * b + 16 + 4 * c));
                RP_Q8X_UNROLL for (int g = 0; g < NG; g++) {
                    const __m512i v = _mm512_load_si512((const void *)(wq[g] + qo + 64 * c));
                    a0[g] = _mm512_dpbusd_epi32(a0[g], _mm512_and_si512(v, m4), al);
                    a1[g] = _mm512_dpbusd_epi32(a1[g], _mm512_andnot_si512(m4, v), ah);   /* 16 * hi */
                }
            }
        } else if (K != RP_Q8X_Q8_0) {
            RP_Q8X_UNROLL for (int c = 0; c < 4; c++) {
                const __m512i al = _mm512_set1_epi32(*(const rp_q8x_i32u *)(ar + 32 * b + 4 * c));
                const __m512i ah = _mm512_set1_epi32(*(const rp_q8x_i32u *)(ar + 32 * b + 16 + 4 * c));
                RP_Q8X_UNROLL for (int g = 0; g < NG; g++) {
                    __m512i lo, hi;
                    rp_q8x_decode4(K, wq[g] + qo, c, &lo, &hi);
                    a0[g] = _mm512_dpbusd_epi32(a0[g], lo, al);
                    a1[g] = _mm512_dpbusd_epi32(a1[g], hi, ah);
                }
            }
        } else {
            RP_Q8X_UNROLL for (int j = 0; j < 8; j += 2) {
                const __m512i x0 = _mm512_set1_epi32(*(const rp_q8x_i32u *)(ar + 32 * b + 4 * j));
                const __m512i x1 = _mm512_set1_epi32(*(const rp_q8x_i32u *)(ar + 32 * b + 4 * j + 4));
                RP_Q8X_UNROLL for (int g = 0; g < NG; g++) {
                    const uint8_t *p = wq[g] + qo + 64 * j;
                    a0[g] = _mm512_dpbusd_epi32(a0[g], _mm512_load_si512((const void *)p), x0);
                    a1[g] = _mm512_dpbusd_epi32(a1[g], _mm512_load_si512((const void *)(p + 64)), x1);
                }
            }
        }
        const __m512 dav = _mm512_set1_ps(da[b]);
        const __m512 sav = _mm512_set1_ps(MIN ? da[b] * (float)bs[b] : 0.0f);
        RP_Q8X_UNROLL for (int g = 0; g < NG; g++) {
            const __m512 dw = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(const void *)(wq[g] + dof)));
            /* Q4_0: a1 sums the high nibbles in place (16 * hi, exact: 16 products of at most 240 * 128) */
            const __m512i s = _mm512_add_epi32(a0[g], K == RP_Q8X_Q4_0 ? _mm512_srai_epi32(a1[g], 4) : a1[g]);
            accf[g] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(dw, dav), accf[g]);
            if (MIN)
                accf[g] = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(const void *)(wq[g] + dof + 64))),
                                          sav, accf[g]);
        }
    }
    RP_Q8X_UNROLL for (int g = 0; g < NG; g++)
        _mm512_mask_storeu_ps(A->y + (g0 + g * gs) * 16, rp_q8x_row_mask(A, g0 + g * gs), accf[g]);
}

/* activation bytes per L2-resident chunk of the GEMM: 256 KB leaves room in
 * a 1-2 MB L2 for a group pair's weights (up to 2 x 272 KB at K = 8192) */
#define RP_Q8X_MC_BYTES (256 * 1024)

/* K: RP_Q8X_Q8_0 .. RP_Q8X_Q5_1 (the old Q4 flag: 0 = Q8_0, 1 = Q4_0) */
static inline void rp_q8x_vnni_gemm(const int K, const uint8_t *w, int64_t rows, int64_t cols, const uint8_t *act,
                                    size_t astride, int64_t n, int64_t r0, int64_t r1, float *y, int64_t ldy) {
    if (r1 <= r0 || n <= 0) return;
    const rp_q8x_args A = {w, rows, cols, cols / 32, rp_q8x_group_bytes_ns(cols, 16, RP_Q8X_KIND_QB(K), RP_Q8X_KIND_NS(K)),
                           act, astride, y, ldy};
    const int64_t ga = r0 / 16, gz = (r1 + 15) / 16;
    if (n == 1) {
        /* the 4 groups in flight come from 4 contiguous quarters of the
         * range, so each stream runs on through consecutive groups (group
         * g ends where group g+1 begins) instead of all four restarting
         * every 4 groups */
        const int64_t q = (gz - ga) / 4;
        for (int64_t i = 0; i < q; i++) rp_q8x_vnni_gemv(K, 4, &A, ga + i, q);
        const int64_t g = ga + 4 * q;
        switch (gz - g) {
        case 3: rp_q8x_vnni_gemv(K, 3, &A, g, 1); break;
        case 2: rp_q8x_vnni_gemv(K, 2, &A, g, 1); break;
        case 1: rp_q8x_vnni_gemv(K, 1, &A, g, 1); break;
        default: break;
        }
        return;
    }
    /* Activation rows in chunks (a multiple of 4 rows, ~RP_Q8X_MC_BYTES) that
     * stay in L2 while every group pair of the range streams past them (a
     * pair's weights stay in L1/L2 across the chunk's 4-row tiles). */
    int64_t mc = (int64_t)(RP_Q8X_MC_BYTES / rp_q8x_act_row_size(cols)) & ~(int64_t)3;
    if (mc < 4) mc = 4;
    for (int64_t m0 = 0; m0 < n; m0 += mc) {
        const int64_t m1 = m0 + mc < n ? m0 + mc : n;
        for (int64_t g = ga; g < gz; g += 2) {
            const int ng = gz - g >= 2 ? 2 : 1;
            int64_t m = m0;
            if (ng == 2) {
                for (; m + 4 <= m1; m += 4) rp_q8x_vnni_tile(K, 4, 2, &A, m, g);
                switch (m1 - m) {
                case 3: rp_q8x_vnni_tile(K, 3, 2, &A, m, g); break;
                case 2: rp_q8x_vnni_tile(K, 2, 2, &A, m, g); break;
                case 1: rp_q8x_vnni_tile(K, 1, 2, &A, m, g); break;
                default: break;
                }
            } else {
                for (; m + 4 <= m1; m += 4) rp_q8x_vnni_tile(K, 4, 1, &A, m, g);
                switch (m1 - m) {
                case 3: rp_q8x_vnni_tile(K, 3, 1, &A, m, g); break;
                case 2: rp_q8x_vnni_tile(K, 2, 1, &A, m, g); break;
                case 1: rp_q8x_vnni_tile(K, 1, 1, &A, m, g); break;
                default: break;
                }
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
 * block), activation rows at ab (stride as), group base wq (its scales); adds into the
 * mv x 16 outputs at y (rows masked by rmask) unless first, which stores. */
RP_Q8X_INLINE void rp_q8x_amx_tile(const int QB, const uint8_t *ab, size_t as, int64_t cols, const int8_t *bb, const uint8_t *wq,
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
        const __m512 dw = _mm512_cvtph_ps(                                                                      \
            _mm256_load_si256((const __m256i *)(const void *)(wq + rp_q8x_doff(bk, 16, QB))));                  \
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
    const int QB = Q4 ? 16 : 32;
    const size_t gb = rp_q8x_group_bytes(cols, 16, QB);
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
            for (int64_t b = kb0; b < kb1; b++) {
                int8_t *o = bb + (b - kb0) * 512;
                if (Q4) {
                    for (int c = 0; c < 4; c++) {
                        const __m512i v = _mm512_load_si512((const void *)(wq + rp_q8x_qoff(b, 16, QB) + 64 * c));
                        _mm512_store_si512((void *)(o + 64 * c), _mm512_sub_epi8(_mm512_and_si512(v, m4), e8));
                        _mm512_store_si512((void *)(o + 64 * (4 + c)),
                                           _mm512_sub_epi8(_mm512_and_si512(_mm512_srli_epi16(v, 4), m4), e8));
                    }
                } else {
                    for (int j = 0; j < 8; j++)
                        _mm512_store_si512((void *)(o + 64 * j),
                                           _mm512_xor_si512(_mm512_load_si512((const void *)(wq + rp_q8x_qoff(b, 16, QB) + 64 * j)), x80));
                }
            }
            const int64_t left = rows - g * 16;
            const __mmask16 rmask = left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1u);
            for (int64_t mt = 0; mt < nfull; mt++)
                rp_q8x_amx_tile(QB, act + (size_t)(mt * 16) * astride, astride, cols, bb, wq, kb0, kb1,
                                y + mt * 16 * ldy + g * 16, ldy, 16, rmask, cb, kb0 == 0);
            if (rem)
                rp_q8x_amx_tile(QB, tail, ts, cols, bb, wq, kb0, kb1, y + nfull * 16 * ldy + g * 16, ldy, rem, rmask, cb,
                                kb0 == 0);
        }
    }
    rp_q8x_amx_leave(restore, &saved);
}
#endif /* AVX-512 VNNI && (AMX-INT8 || RP_AMX_EMULATE) */

#endif /* RP_KERNELS_X86_Q8_0_X86_H */
