/* mm_q6_k_avx2.c — Q6_K x Q8_K matmul for AVX2 (maddubs/madd) and the shared x86 Q6_K packing. */
#include <immintrin.h>
#include <string.h>

#include "kernels/kernels.h"
#include "kernels/quant.h"
#include "kernels/x86/kquant_x86.h"

/* ------------------------------------------------------------------ pack */

size_t rp_q6_k_x86_packed_size(int64_t rows, int64_t cols) {
    return (size_t)((rows + RP_KQ_ROWS - 1) / RP_KQ_ROWS) * (size_t)(cols / RP_QK_K) * RP_Q6K_GB;
}

/* GGUF Q6_K rows -> group-blocks (layout in kquant_x86.h). Scalar, once at load. */
void rp_q6_k_x86_pack(const void *src, size_t src_row_bytes, int64_t rows, int64_t cols, void *dst, int64_t g0,
                      int64_t g1) {
    const int64_t nb = cols / RP_QK_K;
    for (int64_t g = g0; g < g1; g++) {
        for (int64_t b = 0; b < nb; b++) {
            uint8_t *o = (uint8_t *)dst + (size_t)(g * nb + b) * RP_Q6K_GB;
            memset(o, 0, RP_Q6K_GB);
            for (int r = 0; r < RP_KQ_ROWS; r++) {
                const int64_t R = g * RP_KQ_ROWS + r;
                if (R >= rows) break;
                const uint8_t *blk = (const uint8_t *)src + (size_t)R * src_row_bytes + (size_t)b * sizeof(rp_block_q6_k);
                const uint8_t *ql0 = blk, *qh0 = blk + 128;
                const int8_t *scales = (const int8_t *)(blk + 192);
                /* ggml's element order (dequantize_row_q6_K): q in [0, 63] */
                uint8_t q[RP_QK_K];
                #pragma GCC unroll 16
                for (int half = 0; half < 2; half++) {
                    const uint8_t *ql = ql0 + 64 * half, *qh = qh0 + 32 * half;
                    uint8_t *qq = q + 128 * half;
                    #pragma GCC unroll 16
                    for (int l = 0; l < 32; l++) {
                        qq[l] = (uint8_t)((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4));
                        qq[l + 32] = (uint8_t)((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4));
                        qq[l + 64] = (uint8_t)((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4));
                        qq[l + 96] = (uint8_t)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4));
                    }
                }
                #pragma GCC unroll 16
                for (int gg = 0; gg < 16; gg++) o[RP_Q6K_OFF_SC + 16 * gg + r] = (uint8_t)scales[gg];
                memcpy(o + RP_Q6K_OFF_D + 2 * r, blk + 208, 2);
                #pragma GCC unroll 16
                for (int s = 0; s < 8; s++) {
                    uint8_t *os = o + 384 * s;
                    const uint8_t *qs = q + 32 * s;
                    #pragma GCC unroll 16
                    for (int c = 0; c < 4; c++) {
                        #pragma GCC unroll 16
                        for (int t = 0; t < 4; t++)
                            os[64 * t + 4 * r + c] = (uint8_t)((qs[8 * t + c] & 0xF) | ((qs[8 * t + 4 + c] & 0xF) << 4));
                        #pragma GCC unroll 16
                        for (int h = 0; h < 2; h++) {
                            const uint8_t *qh16 = qs + 16 * h;
                            os[256 + 64 * h + 4 * r + c] =
                                (uint8_t)((qh16[c] >> 4) | ((qh16[4 + c] >> 4) << 2) | ((qh16[8 + c] >> 4) << 4) |
                                          ((qh16[12 + c] >> 4) << 6));
                        }
                    }
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

/* One 8-row half `h` of a group against NB activation rows. Per sub-block g
 * (16 K): 4 ymm of u8 q in [0, 63], maddubs pairs (<= 2*63*127), two summed
 * (< 32767), madd with the int8 scale in both words -> int32. q is unsigned;
 * the -32 is applied once per block through the activation's bsums:
 *   sum_g sc_g <q-32, a>_g = sum_g sc_g <q, a>_g - 32 sum_g sc_g bsum_g
 * (|first| <= 256*63*127*128, |second| <= 32*16*128*2032, both < 2^31). */
static inline __attribute__((always_inline)) void q6k_half(const uint8_t *wg, int64_t nb, int h, const uint8_t *act,
                                                           size_t act_stride, int NB, float *y, int64_t ldy, int cnt) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30), lo16 = _mm256_set1_epi32(0xFFFF);
    __m256 tot[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *wb = wg + b * RP_Q6K_GB;
        __m256i isum[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
        #pragma GCC unroll 16
        for (int s = 0; s < 8; s++) {
            const uint8_t *ws = wb + 384 * s + 32 * h;
            #pragma GCC unroll 16
            for (int hh = 0; hh < 2; hh++) {
                const __m256i l0 = _mm256_loadu_si256((const __m256i *)(ws + 128 * hh));
                const __m256i l1 = _mm256_loadu_si256((const __m256i *)(ws + 128 * hh + 64));
                const __m256i x = _mm256_loadu_si256((const __m256i *)(ws + 256 + 64 * hh));
                const __m256i q0 = _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_and_si256(_mm256_slli_epi16(x, 4), m30));
                const __m256i q1 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                                                   _mm256_and_si256(_mm256_slli_epi16(x, 2), m30));
                const __m256i q2 = _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_and_si256(x, m30));
                const __m256i q3 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                                                   _mm256_and_si256(_mm256_srli_epi16(x, 2), m30));
                const int g = 2 * s + hh;
                __m256i sc = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(wb + RP_Q6K_OFF_SC + 16 * g + 8 * h)));
                sc = _mm256_or_si256(_mm256_and_si256(sc, lo16), _mm256_slli_epi32(sc, 16));
                #pragma GCC unroll 16
                for (int i = 0; i < NB; i++) {
                    const uint8_t *aq = act + (size_t)i * act_stride + b * RP_Q8K_BLOCK + RP_Q8K_QS + 16 * g;
                    __m256i s0 = _mm256_add_epi16(_mm256_maddubs_epi16(q0, bcast32(aq)),
                                                  _mm256_maddubs_epi16(q1, bcast32(aq + 4)));
                    __m256i s1 = _mm256_add_epi16(_mm256_maddubs_epi16(q2, bcast32(aq + 8)),
                                                  _mm256_maddubs_epi16(q3, bcast32(aq + 12)));
                    isum[i] = _mm256_add_epi32(isum[i], _mm256_add_epi32(_mm256_madd_epi16(s0, sc), _mm256_madd_epi16(s1, sc)));
                }
            }
        }
        /* sc pairs (sc[r][2p], sc[r][2p+1]) as int16 for the bsums term */
        __m256i sp[8];
        #pragma GCC unroll 16
        for (int p = 0; p < 8; p++) {
            __m128i a = _mm_loadl_epi64((const __m128i *)(wb + RP_Q6K_OFF_SC + 32 * p + 8 * h));
            __m128i c = _mm_loadl_epi64((const __m128i *)(wb + RP_Q6K_OFF_SC + 32 * p + 16 + 8 * h));
            sp[p] = _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(a, c));
        }
        const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(wb + RP_Q6K_OFF_D + 16 * h)));
        #pragma GCC unroll 16
        for (int i = 0; i < NB; i++) {
            const uint8_t *ab = act + (size_t)i * act_stride + b * RP_Q8K_BLOCK;
            __m256i os = _mm256_madd_epi16(sp[0], bcast32(ab + RP_Q8K_BSUMS));
            #pragma GCC unroll 16
            for (int p = 1; p < 8; p++) os = _mm256_add_epi32(os, _mm256_madd_epi16(sp[p], bcast32(ab + RP_Q8K_BSUMS + 4 * p)));
            const __m256i is = _mm256_sub_epi32(isum[i], _mm256_slli_epi32(os, 5));
            float da;
            memcpy(&da, ab, sizeof da);
            tot[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is), _mm256_mul_ps(d, _mm256_set1_ps(da)), tot[i]);
        }
    }
    #pragma GCC unroll 16
    for (int i = 0; i < NB; i++) store_part(y + i * ldy, tot[i], cnt);
}

static void q6k_gemm_avx2(const void *w, size_t w_row_bytes, int64_t rows, int64_t cols, const void *act,
                          size_t act_stride, int64_t n, int64_t r0, int64_t r1, float *y, int64_t ldy, void *scratch) {
    (void)w_row_bytes; (void)rows; (void)scratch;
    const int64_t nb = cols / RP_QK_K;
    for (int64_t g = r0 / RP_KQ_ROWS; g * RP_KQ_ROWS < r1; g++) {
        const uint8_t *wg = (const uint8_t *)w + (size_t)(g * nb) * RP_Q6K_GB;
        const int64_t rb = g * RP_KQ_ROWS;
        #pragma GCC unroll 16
        for (int h = 0; h < 2; h++) {
            const int64_t cnt = r1 - (rb + 8 * h);
            if (cnt <= 0) break;
            const int c = cnt > 8 ? 8 : (int)cnt;
            int64_t i = 0;
            for (; i + 2 <= n; i += 2)
                q6k_half(wg, nb, h, (const uint8_t *)act + i * act_stride, act_stride, 2, y + i * ldy + rb + 8 * h, ldy, c);
            if (i < n)
                q6k_half(wg, nb, h, (const uint8_t *)act + i * act_stride, act_stride, 1, y + i * ldy + rb + 8 * h, ldy, c);
        }
    }
}

const rp_mm_kernel rp_mm_q6_k_avx2 = {
    "q6_k/avx2", RP_TYPE_Q6_K, RP_CPU_AVX2, RP_TYPE_Q8_K, RP_KQ_ROWS, rp_q6_k_x86_packed_size, rp_q6_k_x86_pack,
    rp_q8k_x86_act_row_size, rp_q8k_quant_act_avx2, NULL, q6k_gemm_avx2,
};
