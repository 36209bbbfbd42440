/* mm_legacy_avx2.c — packed Q4_1, Q5_0, Q5_1 and IQ4_NL matmul kernels for AVX2: the Q4_0 AVX2 kernel's 8-row layout and driver (q8x_avx2_driver.h) with each type's decode. */
#include "kernels/kernels.h"
#include "kernels/x86/q8_0_x86.h"
#include "kernels/x86/q8x_legacy_pack.h"

/* Layouts: q8x_legacy_pack.h with row_block 8 (as large as the GGUF rows).
 *
 * Q4_1, Q5_0, Q5_1: u8 quants (q <= 15 or 31) x s8 activations by
 * vpmaddubsw. Its int16 pair sums are <= 2 * 31 * 128 = 7936 for 5-bit q, so
 * four of them (two chunks: low and high nibble steps) add up in int16 before
 * a vpmaddwd widens them (4 * 7936 < 32768); 4-bit q allow all eight (as
 * Q4_0). Q5_0's -16 is folded into the activation bias (bias_mul -16); Q4_1 /
 * Q5_1 take bias = sum(a) for the fp32 min term m * d_a * sum(a).
 *
 * IQ4_NL: the codebook values are signed (-127..113), so ggml's sign trick
 * (|w| x a * sign(w), pair sums <= 2 * 127 * 127) with each step widened at
 * once, as the Q8_0 AVX2 kernel; no bias (bias_mul 0). */

#define RB 8
#include "kernels/x86/q8x_avx2_driver.h"   /* rp_q8x_avx2_store */

RP_Q8X_INLINE __m256i hbit256(__m256i hb, const int s) {
    const __m256i m = _mm256_set1_epi8(0x10);
    if (s < 4) return _mm256_and_si256(_mm256_slli_epi16(hb, 4 - s), m);
    if (s > 4) return _mm256_and_si256(_mm256_srli_epi16(hb, s - 4), m);
    return _mm256_and_si256(hb, m);
}

RP_Q8X_INLINE void tile_k(const int K, const int MR, const int NG, const uint8_t *w0, size_t gb, int64_t nb,
                          int64_t cols, const uint8_t *act, size_t astride, float *y, int64_t ldy, int valid,
                          int64_t gs) {
    const int QB = RP_Q8X_KIND_QB(K), NSK = RP_Q8X_KIND_NS(K), MIN = NSK == 2;
    const int Q5 = K == RP_Q8X_Q5_0 || K == RP_Q8X_Q5_1;
    const uint8_t *wq[4];
    RP_Q8X_UNROLL for (int g = 0; g < NG; g++) wq[g] = w0 + (size_t)(g * gs) * gb;   /* groups gs apart */
    const uint8_t *ar[4];
    const rp_q8x_f32u *da[4];
    const rp_q8x_i32u *bs[4];
    RP_Q8X_UNROLL for (int m = 0; m < MR; m++) {
        ar[m] = act + (size_t)m * astride;
        da[m] = rp_q8x_act_d(ar[m], cols);
        bs[m] = rp_q8x_act_bias(ar[m], cols);
    }
    const __m256i m4 = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
    const __m256i tab = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)rp_iq4nl_values));
    __m256 accf[4][4];
    RP_Q8X_UNROLL for (int m = 0; m < MR; m++) RP_Q8X_UNROLL for (int g = 0; g < NG; g++) accf[m][g] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const size_t qo = rp_q8x_qoff_ns(b, RB, QB, NSK), dof = rp_q8x_doff_ns(b, RB, QB, NSK);
        __m256i acc[4][4], a16[4][4];
        RP_Q8X_UNROLL for (int m = 0; m < MR; m++) RP_Q8X_UNROLL for (int g = 0; g < NG; g++) {
            acc[m][g] = MIN || K == RP_Q8X_IQ4_NL ? _mm256_setzero_si256() : _mm256_set1_epi32(bs[m][b]);
            a16[m][g] = _mm256_setzero_si256();
        }
        RP_Q8X_UNROLL for (int c = 0; c < 4; c++) {
            __m256i lo[4], hi[4];
            RP_Q8X_UNROLL for (int g = 0; g < NG; g++) {
                const __m256i v = _mm256_load_si256((const __m256i *)(const void *)(wq[g] + qo + 32 * c));
                lo[g] = _mm256_and_si256(v, m4);
                hi[g] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
                if (Q5) {
                    const __m256i hb = _mm256_load_si256((const __m256i *)(const void *)(wq[g] + qo + 16 * RB));
                    lo[g] = _mm256_or_si256(lo[g], hbit256(hb, c));
                    hi[g] = _mm256_or_si256(hi[g], hbit256(hb, 4 + c));
                } else if (K == RP_Q8X_IQ4_NL) {
                    lo[g] = _mm256_shuffle_epi8(tab, lo[g]);
                    hi[g] = _mm256_shuffle_epi8(tab, hi[g]);
                }
            }
            RP_Q8X_UNROLL for (int m = 0; m < MR; m++) {
                const uint8_t *p = ar[m] + 32 * b + 4 * c;
                const __m256i al = _mm256_set1_epi32(*(const rp_q8x_i32u *)p);
                const __m256i ah = _mm256_set1_epi32(*(const rp_q8x_i32u *)(p + 16));
                RP_Q8X_UNROLL for (int g = 0; g < NG; g++) {
                    if (K == RP_Q8X_IQ4_NL) {
                        const __m256i pl = _mm256_maddubs_epi16(_mm256_sign_epi8(lo[g], lo[g]), _mm256_sign_epi8(al, lo[g]));
                        const __m256i ph = _mm256_maddubs_epi16(_mm256_sign_epi8(hi[g], hi[g]), _mm256_sign_epi8(ah, hi[g]));
                        acc[m][g] = _mm256_add_epi32(acc[m][g], _mm256_add_epi32(_mm256_madd_epi16(pl, ones), _mm256_madd_epi16(ph, ones)));
                    } else {
                        a16[m][g] = _mm256_add_epi16(a16[m][g], _mm256_maddubs_epi16(lo[g], al));
                        a16[m][g] = _mm256_add_epi16(a16[m][g], _mm256_maddubs_epi16(hi[g], ah));
                        if (c == 3 || (Q5 && c == 1)) {
                            acc[m][g] = _mm256_add_epi32(acc[m][g], _mm256_madd_epi16(a16[m][g], ones));
                            a16[m][g] = _mm256_setzero_si256();
                        }
                    }
                }
            }
        }
        RP_Q8X_UNROLL for (int g = 0; g < NG; g++) {
            const __m256 dw = _mm256_cvtph_ps(_mm_load_si128((const __m128i *)(const void *)(wq[g] + dof)));
            const __m256 mw = MIN ? _mm256_cvtph_ps(_mm_load_si128((const __m128i *)(const void *)(wq[g] + dof + 64)))
                                  : _mm256_setzero_ps();
            RP_Q8X_UNROLL for (int m = 0; m < MR; m++) {
                accf[m][g] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[m][g]), _mm256_mul_ps(dw, _mm256_set1_ps(da[m][b])), accf[m][g]);
                if (MIN) accf[m][g] = _mm256_fmadd_ps(mw, _mm256_set1_ps(da[m][b] * (float)bs[m][b]), accf[m][g]);
            }
        }
    }
    rp_q8x_avx2_store(MR, NG, accf, y, ldy, valid, gs);
}

static size_t act_row_size(int64_t cols) { return rp_q8x_act_row_size(cols); }

/* One family per type: tile and gemm renamed so the driver can be included once per type. */
#define RP_LEGACY_AVX2(NAME, TYPE, KIND, BIAS)                                                                    \
    RP_Q8X_INLINE void tile_##NAME(const int MR, const int NG, const uint8_t *w0, size_t gb, int64_t nb,          \
                                   int64_t cols, const uint8_t *act, size_t astride, float *y, int64_t ldy,       \
                                   int valid, int64_t gs) {                                                       \
        tile_k(KIND, MR, NG, w0, gb, nb, cols, act, astride, y, ldy, valid, gs);                                  \
    }                                                                                                             \
    static size_t NAME##_packed_size(int64_t rows, int64_t cols) {                                               \
        return rp_q8x_packed_size_ns(rows, cols, RB, RP_Q8X_KIND_QB(KIND), RP_Q8X_KIND_NS(KIND));                 \
    }                                                                                                             \
    static void NAME##_pack(const void *src, size_t src_row_bytes, int64_t rows, int64_t cols, void *dst,         \
                            int64_t g0, int64_t g1) {                                                             \
        rp_q8x_pack_legacy(KIND, src, src_row_bytes, rows, cols, dst, g0, g1, RB);                                \
    }                                                                                                             \
    static void NAME##_quant_act(const float *x, void *dst, int64_t cols) {                                      \
        rp_q8x_quant_act_avx2(x, dst, cols, BIAS);                                                                \
    }

RP_LEGACY_AVX2(q4_1, RP_TYPE_Q4_1, RP_Q8X_Q4_1, 1)
RP_LEGACY_AVX2(q5_0, RP_TYPE_Q5_0, RP_Q8X_Q5_0, -16)
RP_LEGACY_AVX2(q5_1, RP_TYPE_Q5_1, RP_Q8X_Q5_1, 1)
RP_LEGACY_AVX2(iq4_nl, RP_TYPE_IQ4_NL, RP_Q8X_IQ4_NL, 0)

#define RP_Q8X_AVX2_DRIVER_GEMM
#define QB 16
#define NS 2
#define tile tile_q4_1
#define gemm gemm_q4_1
#include "kernels/x86/q8x_avx2_driver.h"
#undef QB
#undef NS
#undef tile
#undef gemm
#define QB 20
#define NS 1
#define tile tile_q5_0
#define gemm gemm_q5_0
#include "kernels/x86/q8x_avx2_driver.h"
#undef QB
#undef NS
#undef tile
#undef gemm
#define QB 20
#define NS 2
#define tile tile_q5_1
#define gemm gemm_q5_1
#include "kernels/x86/q8x_avx2_driver.h"
#undef QB
#undef NS
#undef tile
#undef gemm
#define QB 16
#define NS 1
#define tile tile_iq4_nl
#define gemm gemm_iq4_nl
#include "kernels/x86/q8x_avx2_driver.h"
#undef QB
#undef NS
#undef tile
#undef gemm

#define RP_LEGACY_AVX2_KERNEL(NAME, TYPE)                                                                         \
    const rp_mm_kernel rp_mm_##NAME##_packed_avx2 = {                                                             \
        #NAME "/avx2-packed", TYPE, RP_CPU_AVX2, RP_TYPE_Q8_0, RB, NAME##_packed_size, NAME##_pack,              \
        act_row_size, NAME##_quant_act, NULL, gemm_##NAME,                                                        \
    };
RP_LEGACY_AVX2_KERNEL(q4_1, RP_TYPE_Q4_1)
RP_LEGACY_AVX2_KERNEL(q5_0, RP_TYPE_Q5_0)
RP_LEGACY_AVX2_KERNEL(q5_1, RP_TYPE_Q5_1)
RP_LEGACY_AVX2_KERNEL(iq4_nl, RP_TYPE_IQ4_NL)
