/* mm_q4_0_avx2.c — Q4_0 matmul kernel family for AVX2: 8-row VNNI-order packing, vpmaddubsw GEMV/GEMM. */
#include "kernels/kernels.h"
#include "kernels/x86/q8_0_x86.h"

/* Packed layout (q8_0_x86.h) with row_block 8: per block four 32-byte chunks,
 * chunk c = rows 0..7 x ggml qs[4c .. 4c+3]; low nibbles are K 4c..4c+3, high
 * nibbles K 16+4c..16+4c+3; then the group's fp16 scales (8 per block).
 *
 * Per block and activation row: vpmaddubsw(nibbles u8, activation s8) gives
 * per row two int16 pair sums, each in [-3840, 3810]; the 8 K steps of a
 * block add up in int16 without overflow (8 * 3840 = 30720 < 32768), then one
 * vpmaddwd folds them to int32 and the activation's bias (-8 * sum(q)) undoes
 * the nibble offset exactly. */

#define RB 8

static size_t packed_size(int64_t rows, int64_t cols) { return rp_q8x_packed_size(rows, cols, RB, 16); }

static void pack(const void *src, size_t src_row_bytes, int64_t rows, int64_t cols, void *dst, int64_t g0,
                 int64_t g1) {
    rp_q8x_pack_q4_0(src, src_row_bytes, rows, cols, dst, g0, g1, RB);
}

static size_t act_row_size(int64_t cols) { return rp_q8x_act_row_size(cols); }

static void quant_act(const float *x, void *dst, int64_t cols) { rp_q8x_quant_act_avx2(x, dst, cols, -8); }

/* MR activation rows (1..4) x one group of 8 rows; 4 fp32 + 4 int16
 * accumulators, 2 nibble vectors, broadcasts and constants: 15 ymm at MR 4. */
RP_Q8X_INLINE void tile(const int MR, const uint8_t *wq, int64_t nb, int64_t cols, const uint8_t *act,
                        size_t astride, float *y, int64_t ldy, int valid) {
    const uint16_t *wd = (const uint16_t *)(const void *)(wq + (size_t)nb * RB * 16);
    const uint8_t *ar[4];
    const rp_q8x_f32u *da[4];
    const rp_q8x_i32u *bs[4];
    RP_Q8X_UNROLL for (int m = 0; m < MR; m++) {
        ar[m] = act + (size_t)m * astride;
        da[m] = rp_q8x_act_d(ar[m], cols);
        bs[m] = rp_q8x_act_bias(ar[m], cols);
    }
    const __m256i m4 = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
    __m256 accf[4];
    RP_Q8X_UNROLL for (int m = 0; m < MR; m++) accf[m] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        __m256i acc[4];
        RP_Q8X_UNROLL for (int m = 0; m < MR; m++) acc[m] = _mm256_setzero_si256();
        if (MR == 1) _mm_prefetch((const char *)(wq + (size_t)b * RB * 16 + 8 * RB * 16), _MM_HINT_T0);
        RP_Q8X_UNROLL for (int c = 0; c < 4; c++) {
            const __m256i v = _mm256_load_si256((const __m256i *)(const void *)(wq + (size_t)b * RB * 16 + 32 * c));
            const __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
            RP_Q8X_UNROLL for (int m = 0; m < MR; m++) {
                const uint8_t *p = ar[m] + 32 * b + 4 * c;
                const __m256i al = _mm256_set1_epi32(*(const rp_q8x_i32u *)p);
                const __m256i ah = _mm256_set1_epi32(*(const rp_q8x_i32u *)(p + 16));
                acc[m] = _mm256_add_epi16(acc[m], _mm256_maddubs_epi16(lo, al));
                acc[m] = _mm256_add_epi16(acc[m], _mm256_maddubs_epi16(hi, ah));
            }
        }
        const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(wd + RB * b)));
        RP_Q8X_UNROLL for (int m = 0; m < MR; m++) {
            const __m256i s = _mm256_add_epi32(_mm256_madd_epi16(acc[m], ones), _mm256_set1_epi32(bs[m][b]));
            accf[m] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(dw, _mm256_set1_ps(da[m][b])), accf[m]);
        }
    }
    if (valid == RB) {
        RP_Q8X_UNROLL for (int m = 0; m < MR; m++) _mm256_storeu_ps(y + m * ldy, accf[m]);
    } else {
        const __m256i k = _mm256_cmpgt_epi32(_mm256_set1_epi32(valid), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        RP_Q8X_UNROLL for (int m = 0; m < MR; m++) _mm256_maskstore_ps(y + m * ldy, k, accf[m]);
    }
}

static void gemm(const void *w, size_t w_row_bytes, int64_t rows, int64_t cols, const void *act, size_t act_stride,
                 int64_t n, int64_t r0, int64_t r1, float *y, int64_t ldy, void *scratch) {
    (void)w_row_bytes;
    (void)scratch;
    const int64_t nb = cols / 32;
    const size_t gb = rp_q8x_group_bytes(cols, RB, 16);
    const uint8_t *a8 = act;
    for (int64_t g = r0 / RB; g < (r1 + RB - 1) / RB; g++) {
        const uint8_t *wq = (const uint8_t *)w + (size_t)g * gb;
        const int valid = rows - g * RB >= RB ? RB : (int)(rows - g * RB);
        float *yg = y + g * RB;
        int64_t m = 0;
        for (; m + 4 <= n; m += 4) tile(4, wq, nb, cols, a8 + (size_t)m * act_stride, act_stride, yg + m * ldy, ldy, valid);
        switch (n - m) {
        case 3: tile(3, wq, nb, cols, a8 + (size_t)m * act_stride, act_stride, yg + m * ldy, ldy, valid); break;
        case 2: tile(2, wq, nb, cols, a8 + (size_t)m * act_stride, act_stride, yg + m * ldy, ldy, valid); break;
        case 1: tile(1, wq, nb, cols, a8 + (size_t)m * act_stride, act_stride, yg + m * ldy, ldy, valid); break;
        default: break;
        }
    }
}

const rp_mm_kernel rp_mm_q4_0_avx2 = {
    "q4_0/avx2", RP_TYPE_Q4_0, RP_CPU_AVX2, RP_TYPE_Q8_0, RB, packed_size, pack, act_row_size, quant_act, NULL, gemm,
};
