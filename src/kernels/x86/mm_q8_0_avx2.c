/* mm_q8_0_avx2.c — Q8_0 matmul kernel family for AVX2: 8-row VNNI-order packing, sign-trick vpmaddubsw GEMV/GEMM. */
#include "kernels/kernels.h"
#include "kernels/x86/q8_0_x86.h"

/* Packed layout (q8_0_x86.h) with row_block 8 and signed bytes: per block
 * eight 32-byte chunks, chunk j = rows 0..7 x ggml qs[4j .. 4j+3];
 * super-blocks of 4 blocks (1024 bytes of quants, then 4 x 8 fp16 scales).
 *
 * AVX2 has no u8 x s8 dot with 32-bit sums, and vpmaddubsw saturates its
 * int16 pair sums, so weights stay signed and ggml's sign trick is used:
 * w * a = |w| * (a * sign(w)), with |w| <= 128 as u8 and |a| <= 127 (our
 * quantizer never yields -128 for finite input), so a pair sum is at most
 * 2 * 128 * 127 = 32512: no saturation. Each step is widened to int32 at
 * once (two steps could overflow int16). The activation bias is not used. */

#define RB 8
#define QB 32   /* quant bytes per weight row per block */
#include "kernels/x86/q8x_avx2_driver.h"   /* rp_q8x_avx2_store; the driver comes below */

static size_t packed_size(int64_t rows, int64_t cols) { return rp_q8x_packed_size(rows, cols, RB, QB); }

static void pack(const void *src, size_t src_row_bytes, int64_t rows, int64_t cols, void *dst, int64_t g0,
                 int64_t g1) {
    rp_q8x_pack_q8_0(src, src_row_bytes, rows, cols, dst, g0, g1, RB, 0);
}

static size_t act_row_size(int64_t cols) { return rp_q8x_act_row_size(cols); }

static void quant_act(const float *x, void *dst, int64_t cols) { rp_q8x_quant_act_avx2(x, dst, cols, 0); }

/* MR activation rows x NG groups of 8 rows, used as 4 x 1 (GEMM) and 1 x NG
 * (GEMV, NG <= 4), sized for the 16 ymm registers. */
RP_Q8X_INLINE void tile(const int MR, const int NG, const uint8_t *w0, size_t gb, int64_t nb, int64_t cols,
                        const uint8_t *act, size_t astride, float *y, int64_t ldy, int valid, int64_t gs) {
    const uint8_t *wq[4];
    RP_Q8X_UNROLL for (int g = 0; g < NG; g++) wq[g] = w0 + (size_t)(g * gs) * gb;   /* groups gs apart */
    const uint8_t *ar[4];
    const rp_q8x_f32u *da[4];
    RP_Q8X_UNROLL for (int m = 0; m < MR; m++) {
        ar[m] = act + (size_t)m * astride;
        da[m] = rp_q8x_act_d(ar[m], cols);
    }
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 accf[4][4];
    RP_Q8X_UNROLL for (int m = 0; m < MR; m++) RP_Q8X_UNROLL for (int g = 0; g < NG; g++) accf[m][g] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const size_t qo = rp_q8x_qoff(b, RB, QB), dof = rp_q8x_doff(b, RB, QB);
        __m256i acc[4][4];
        RP_Q8X_UNROLL for (int m = 0; m < MR; m++) RP_Q8X_UNROLL for (int g = 0; g < NG; g++) acc[m][g] = _mm256_setzero_si256();
        RP_Q8X_UNROLL for (int j = 0; j < 8; j++) {
            __m256i v[4], av[4];
            RP_Q8X_UNROLL for (int g = 0; g < NG; g++) {
                v[g] = _mm256_load_si256((const __m256i *)(const void *)(wq[g] + qo + 32 * j));
                av[g] = _mm256_sign_epi8(v[g], v[g]);   /* |w| as u8 (-128 -> 128) */
            }
            RP_Q8X_UNROLL for (int m = 0; m < MR; m++) {
                const __m256i a = _mm256_set1_epi32(*(const rp_q8x_i32u *)(ar[m] + 32 * b + 4 * j));
                RP_Q8X_UNROLL for (int g = 0; g < NG; g++) {
                    const __m256i p = _mm256_maddubs_epi16(av[g], _mm256_sign_epi8(a, v[g]));
                    acc[m][g] = _mm256_add_epi32(acc[m][g], _mm256_madd_epi16(p, ones));
                }
            }
        }
        RP_Q8X_UNROLL for (int g = 0; g < NG; g++) {
            const __m256 dw = _mm256_cvtph_ps(_mm_load_si128((const __m128i *)(const void *)(wq[g] + dof)));
            RP_Q8X_UNROLL for (int m = 0; m < MR; m++)
                accf[m][g] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[m][g]), _mm256_mul_ps(dw, _mm256_set1_ps(da[m][b])), accf[m][g]);
        }
    }
    rp_q8x_avx2_store(MR, NG, accf, y, ldy, valid, gs);
}

#define RP_Q8X_AVX2_DRIVER_GEMM
#include "kernels/x86/q8x_avx2_driver.h"

const rp_mm_kernel rp_mm_q8_0_avx2 = {
    "q8_0/avx2", RP_TYPE_Q8_0, RP_CPU_AVX2, RP_TYPE_Q8_0, RB, packed_size, pack, act_row_size, quant_act, NULL, gemm,
};
