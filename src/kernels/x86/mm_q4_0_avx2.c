/* mm_q4_0_avx2.c — Q4_0 matmul kernel family for AVX2: 8-row VNNI-order packing, vpmaddubsw GEMV/GEMM. */
#include "kernels/kernels.h"
#include "kernels/x86/q8_0_x86.h"

/* Packed layout (q8_0_x86.h) with row_block 8: per block four 32-byte chunks,
 * chunk c = rows 0..7 x ggml qs[4c .. 4c+3]; low nibbles are K 4c..4c+3, high
 * nibbles K 16+4c..16+4c+3; super-blocks of 4 blocks (512 bytes of quants,
 * then 4 x 8 fp16 scales).
 *
 * Per block and activation row: vpmaddubsw(nibbles u8, activation s8) gives
 * per row two int16 pair sums, each in [-3840, 3810]; the 8 K steps of a
 * block add up in int16 without overflow (8 * 3840 = 30720 < 32768), then one
 * vpmaddwd folds them to int32 and the activation's bias (-8 * sum(q)) undoes
 * the nibble offset exactly. */

#define RB 8
#define QB 16   /* quant bytes per weight row per block */
#include "kernels/x86/q8x_avx2_driver.h"   /* rp_q8x_avx2_store; the driver comes below */

static size_t packed_size(int64_t rows, int64_t cols) { return rp_q8x_packed_size(rows, cols, RB, QB); }

static void pack(const void *src, size_t src_row_bytes, int64_t rows, int64_t cols, void *dst, int64_t g0,
                 int64_t g1) {
    rp_q8x_pack_q4_0(src, src_row_bytes, rows, cols, dst, g0, g1, RB);
}

static size_t act_row_size(int64_t cols) { return rp_q8x_act_row_size(cols); }

static void quant_act(const float *x, void *dst, int64_t cols) { rp_q8x_quant_act_avx2(x, dst, cols, -8); }

/* MR activation rows x NG groups of 8 rows, used as 4 x 1 (GEMM) and 1 x NG
 * (GEMV, NG <= 4): 4 fp32 + 4 int16 accumulators, the weight vectors,
 * broadcasts and constants fit the 16 ymm registers. */
RP_Q8X_INLINE void tile(const int MR, const int NG, const uint8_t *w0, size_t gb, int64_t nb, int64_t cols,
                        const uint8_t *act, size_t astride, float *y, int64_t ldy, int valid, int64_t gs) {
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
    __m256 accf[4][4];
    RP_Q8X_UNROLL for (int m = 0; m < MR; m++) RP_Q8X_UNROLL for (int g = 0; g < NG; g++) accf[m][g] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const size_t qo = rp_q8x_qoff(b, RB, QB), dof = rp_q8x_doff(b, RB, QB);
        __m256i acc[4][4];
        RP_Q8X_UNROLL for (int m = 0; m < MR; m++) RP_Q8X_UNROLL for (int g = 0; g < NG; g++) acc[m][g] = _mm256_setzero_si256();
        RP_Q8X_UNROLL for (int c = 0; c < 4; c++) {
            __m256i lo[4], hi[4];
            RP_Q8X_UNROLL for (int g = 0; g < NG; g++) {
                const __m256i v = _mm256_load_si256((const __m256i *)(const void *)(wq[g] + qo + 32 * c));
                lo[g] = _mm256_and_si256(v, m4);
                hi[g] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
            }
            RP_Q8X_UNROLL for (int m = 0; m < MR; m++) {
                const uint8_t *p = ar[m] + 32 * b + 4 * c;
                const __m256i al = _mm256_set1_epi32(*(const rp_q8x_i32u *)p);
                const __m256i ah = _mm256_set1_epi32(*(const rp_q8x_i32u *)(p + 16));
                RP_Q8X_UNROLL for (int g = 0; g < NG; g++) {
                    acc[m][g] = _mm256_add_epi16(acc[m][g], _mm256_maddubs_epi16(lo[g], al));
                    acc[m][g] = _mm256_add_epi16(acc[m][g], _mm256_maddubs_epi16(hi[g], ah));
                }
            }
        }
        RP_Q8X_UNROLL for (int g = 0; g < NG; g++) {
            const __m256 dw = _mm256_cvtph_ps(_mm_load_si128((const __m128i *)(const void *)(wq[g] + dof)));
            RP_Q8X_UNROLL for (int m = 0; m < MR; m++) {
                const __m256i s = _mm256_add_epi32(_mm256_madd_epi16(acc[m][g], ones), _mm256_set1_epi32(bs[m][b]));
                accf[m][g] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(dw, _mm256_set1_ps(da[m][b])), accf[m][g]);
            }
        }
    }
    rp_q8x_avx2_store(MR, NG, accf, y, ldy, valid, gs);
}

#define RP_Q8X_AVX2_DRIVER_GEMM
#include "kernels/x86/q8x_avx2_driver.h"

const rp_mm_kernel rp_mm_q4_0_avx2 = {
    "q4_0/avx2", RP_TYPE_Q4_0, RP_CPU_AVX2, RP_TYPE_Q8_0, RB, packed_size, pack, act_row_size, quant_act, NULL, gemm,
};
