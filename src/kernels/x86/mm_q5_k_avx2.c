/* mm_q5_k_avx2.c — Q5_K x Q8_K matmul for AVX2 (maddubs/madd) on weights packed at load (16-row groups). */
#include <immintrin.h>
#include <string.h>

#include "kernels/kernels.h"
#include "kernels/quant.h"
#include "kernels/x86/kquant_x86.h"

/* ------------------------------------------------------------------ pack
 * Q5_K is Q4_K (6-bit sc and m per 32 K, fp16 d and dmin per 256 K) with a
 * fifth bit per quant, so a group-block is the Q4_K group-block (kquant_x86.h,
 * same offsets, low 4 bits of q) followed by a high-bit plane:
 *   +2368  qh  8 lines (sub-block j = 0..7), byte 4r+c, bit 2t (t = 0..3) =
 *              bit 4 of q[r][32j+8t+c], bit 2t+1 = bit 4 of q[r][32j+8t+4+c]
 *              (K-quads 2t and 2t+1 of the low-nibble line 4j+t)
 *   +2880  (zero padding to a 64-byte multiple: 2880 is one already)
 * = 2880 bytes (45 lines): 5.625 bits/weight vs GGUF's 5.5 (+2.3%). */
#define RP_Q5K_GB 2880
#define RP_Q5K_OFF_QH 2368

static size_t q5k_packed_size(int64_t rows, int64_t cols) {
    return (size_t)((rows + RP_KQ_ROWS - 1) / RP_KQ_ROWS) * (size_t)(cols / RP_QK_K) * RP_Q5K_GB;
}

/* GGUF Q5_K rows -> group-blocks. Scalar: once at load, in parallel over groups. */
static void q5k_pack(const void *src, size_t src_row_bytes, int64_t rows, int64_t cols, void *dst, int64_t g0,
                     int64_t g1) {
    const int64_t nb = cols / RP_QK_K;
    for (int64_t g = g0; g < g1; g++) {
        for (int64_t b = 0; b < nb; b++) {
            uint8_t *o = (uint8_t *)dst + (size_t)(g * nb + b) * RP_Q5K_GB;
            memset(o, 0, RP_Q5K_GB);
            for (int r = 0; r < RP_KQ_ROWS; r++) {
                const int64_t R = g * RP_KQ_ROWS + r;
                if (R >= rows) break;
                const rp_block_q5_k *blk =
                    (const rp_block_q5_k *)((const uint8_t *)src + (size_t)R * src_row_bytes) + b;
                /* ggml's element order (dequantize_row_q5_K): q in [0, 31] */
                uint8_t q[RP_QK_K];
                for (int p = 0; p < 4; p++)
                    for (int l = 0; l < 32; l++) {
                        const uint8_t ql = blk->qs[32 * p + l], qh = blk->qh[l];
                        q[64 * p + l] = (uint8_t)((ql & 0xF) | (((qh >> (2 * p)) & 1) << 4));
                        q[64 * p + 32 + l] = (uint8_t)((ql >> 4) | (((qh >> (2 * p + 1)) & 1) << 4));
                    }
                for (int j = 0; j < 8; j++) {
                    uint8_t sc, m;
                    rp_q4_k_scale_min(j, blk->scales, &sc, &m);
                    o[RP_Q4K_OFF_SC + 16 * j + r] = sc;
                    o[RP_Q4K_OFF_M + 32 * (j >> 1) + 2 * r + (j & 1)] = m;
                }
                memcpy(o + RP_Q4K_OFF_D + 2 * r, &blk->d, 2);
                memcpy(o + RP_Q4K_OFF_DMIN + 2 * r, &blk->dmin, 2);
                for (int j = 0; j < 8; j++)
                    for (int t = 0; t < 4; t++)
                        for (int c = 0; c < 4; c++) {
                            const uint8_t lo = q[32 * j + 8 * t + c], hi = q[32 * j + 8 * t + 4 + c];
                            o[64 * (4 * j + t) + 4 * r + c] = (uint8_t)((lo & 0xF) | ((hi & 0xF) << 4));
                            o[RP_Q5K_OFF_QH + 64 * j + 4 * r + c] |= (uint8_t)(((lo >> 4) << (2 * t)) | ((hi >> 4) << (2 * t + 1)));
                        }
            }
        }
    }
}

/* ------------------------------------------------------------------ gemm */

static inline __m256i bcast32(const void *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

static inline void store_part(float *y, __m256 v, int cnt) {
    if (cnt >= 8) {
        _mm256_storeu_ps(y, v);
    } else {
        float t[8];
        _mm256_storeu_ps(t, v);
        memcpy(y, t, (size_t)cnt * sizeof(float));
    }
}

/* Bit `bit` of each byte of hb moved to bit 4 (0x10 or 0). A 16-bit shift is
 * exact here: bit 4 of either byte takes a bit of that same byte for shifts
 * of at most 4 left or 3 right. */
static inline __attribute__((always_inline)) __m256i hbit(__m256i hb, const int bit) {
    const __m256i m = _mm256_set1_epi8(0x10);
    if (bit < 4) return _mm256_and_si256(_mm256_slli_epi16(hb, 4 - bit), m);
    if (bit > 4) return _mm256_and_si256(_mm256_srli_epi16(hb, bit - 4), m);
    return _mm256_and_si256(hb, m);
}

/* The 8 exact u8 K-quad lines (8 rows x 32 K, q in [0, 31]) of sub-block j,
 * half h. */
static inline __attribute__((always_inline)) void q5k_unpack8(const uint8_t *wb, int j, int h, __m256i B[8]) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const __m256i hb = _mm256_load_si256((const __m256i *)(wb + RP_Q5K_OFF_QH + 64 * j + 32 * h));
    #pragma GCC unroll 4
    for (int t = 0; t < 4; t++) {
        const __m256i v = _mm256_load_si256((const __m256i *)(wb + 64 * (4 * j + t) + 32 * h));
        B[2 * t] = _mm256_or_si256(_mm256_and_si256(v, m4), hbit(hb, 2 * t));
        B[2 * t + 1] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v, 4), m4), hbit(hb, 2 * t + 1));
    }
}

/* Dot of sub-block j's 8 quad lines with 32 activation quants, scaled by sc
 * (in both words of each dword). maddubs pair sums are <= 2*31*127; four of
 * them stay below 32767, so the 8 are summed as two halves before the madd
 * (|isum| over a block <= 256*31*127*63 < 2^31). */
static inline __attribute__((always_inline)) __m256i q5k_dot(const __m256i B[8], const uint8_t *aq, __m256i sc) {
    const __m256i s0 = _mm256_add_epi16(_mm256_add_epi16(_mm256_maddubs_epi16(B[0], bcast32(aq)), _mm256_maddubs_epi16(B[1], bcast32(aq + 4))),
                                        _mm256_add_epi16(_mm256_maddubs_epi16(B[2], bcast32(aq + 8)), _mm256_maddubs_epi16(B[3], bcast32(aq + 12))));
    const __m256i s1 = _mm256_add_epi16(_mm256_add_epi16(_mm256_maddubs_epi16(B[4], bcast32(aq + 16)), _mm256_maddubs_epi16(B[5], bcast32(aq + 20))),
                                        _mm256_add_epi16(_mm256_maddubs_epi16(B[6], bcast32(aq + 24)), _mm256_maddubs_epi16(B[7], bcast32(aq + 28))));
    return _mm256_add_epi32(_mm256_madd_epi16(s0, sc), _mm256_madd_epi16(s1, sc));
}

/* The min term of block b: sum_j m[r][j] * s32[j] per row, as int32. */
static inline __attribute__((always_inline)) __m256i q5k_mins(const uint8_t *wb, int h, const uint8_t *s32) {
    __m256i ms = _mm256_setzero_si256();
    #pragma GCC unroll 4
    for (int p = 0; p < 4; p++)
        ms = _mm256_add_epi32(ms, _mm256_madd_epi16(_mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(wb + RP_Q4K_OFF_M + 32 * p + 16 * h))),
                                                    bcast32(s32 + 4 * p)));
    return ms;
}

/* One 8-row half `h` of a group against NB (1..4) activation rows: each
 * sub-block's quants are unpacked once and reused by every activation row. */
static inline __attribute__((always_inline)) void q5k_half(const uint8_t *wg, int64_t nb, int h, const uint8_t *act,
                                                           size_t stride, int64_t s32off, const int NB, float *y,
                                                           int64_t ldy, int cnt) {
    __m256 tot[4];
    #pragma GCC unroll 4
    for (int i = 0; i < NB; i++) tot[i] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *wb = wg + b * RP_Q5K_GB;
        __m256i isum[4];
        #pragma GCC unroll 4
        for (int i = 0; i < NB; i++) isum[i] = _mm256_setzero_si256();
        #pragma GCC unroll 8
        for (int j = 0; j < 8; j++) {
            __m256i B[8];
            q5k_unpack8(wb, j, h, B);
            __m256i sc = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(wb + RP_Q4K_OFF_SC + 16 * j + 8 * h)));
            sc = _mm256_or_si256(sc, _mm256_slli_epi32(sc, 16));
            #pragma GCC unroll 4
            for (int i = 0; i < NB; i++)
                isum[i] = _mm256_add_epi32(isum[i], q5k_dot(B, act + (size_t)i * stride + b * RP_Q8K_BLOCK + RP_Q8K_QS + 32 * j, sc));
        }
        const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(wb + RP_Q4K_OFF_D + 16 * h)));
        const __m256 dm = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(wb + RP_Q4K_OFF_DMIN + 16 * h)));
        #pragma GCC unroll 4
        for (int i = 0; i < NB; i++) {
            const uint8_t *ai = act + (size_t)i * stride;
            const __m256i ms = q5k_mins(wb, h, ai + s32off + 16 * b);
            float da;
            memcpy(&da, ai + b * RP_Q8K_BLOCK, sizeof da);
            const __m256 vda = _mm256_set1_ps(da);
            tot[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[i]), _mm256_mul_ps(d, vda), tot[i]);
            tot[i] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(ms), _mm256_mul_ps(dm, vda), tot[i]);
        }
    }
    #pragma GCC unroll 4
    for (int i = 0; i < NB; i++) store_part(y + i * ldy, tot[i], cnt);
}

static void q5k_gemm_avx2(const void *w, size_t w_row_bytes, int64_t rows, int64_t cols, const void *act,
                          size_t act_stride, int64_t n, int64_t r0, int64_t r1, float *y, int64_t ldy, void *scratch) {
    (void)w_row_bytes; (void)rows; (void)scratch;
    const int64_t nb = cols / RP_QK_K;
    const int64_t s32off = (int64_t)rp_q8k_x86_s32_off(cols);
    const uint8_t *A = act;
    for (int64_t g = r0 / RP_KQ_ROWS; g * RP_KQ_ROWS < r1; g++) {
        const uint8_t *wg = (const uint8_t *)w + (size_t)(g * nb) * RP_Q5K_GB;
        const int64_t rb = g * RP_KQ_ROWS;
        for (int h = 0; h < 2; h++) {
            const int64_t cnt = r1 - (rb + 8 * h);
            if (cnt <= 0) break;
            const int c = cnt > 8 ? 8 : (int)cnt;
            float *yh = y + rb + 8 * h;
            int64_t i = 0;
            for (; i + 4 <= n; i += 4) q5k_half(wg, nb, h, A + i * act_stride, act_stride, s32off, 4, yh + i * ldy, ldy, c);
            switch (n - i) {
            case 3: q5k_half(wg, nb, h, A + i * act_stride, act_stride, s32off, 3, yh + i * ldy, ldy, c); break;
            case 2: q5k_half(wg, nb, h, A + i * act_stride, act_stride, s32off, 2, yh + i * ldy, ldy, c); break;
            case 1: q5k_half(wg, nb, h, A + i * act_stride, act_stride, s32off, 1, yh + i * ldy, ldy, c); break;
            default: break;
            }
        }
    }
}

/* Q8_K activations shared with the Q4_K / Q6_K AVX2 kernels (same function
 * pointers, so q/k/v of mixed K-quants quantize their input once). */
const rp_mm_kernel rp_mm_q5_k_packed_avx2 = {
    "q5_k/avx2-packed", RP_TYPE_Q5_K, RP_CPU_AVX2, RP_TYPE_Q8_K, RP_KQ_ROWS, q5k_packed_size, q5k_pack,
    rp_q8k_x86_act_row_size, rp_q8k_quant_act_avx2, NULL, q5k_gemm_avx2,
};
