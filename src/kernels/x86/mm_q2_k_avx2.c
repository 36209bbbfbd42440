/* mm_q2_k_avx2.c — Q2_K x Q8_K matmul for AVX2 (maddubs/madd) on weights packed at load (16-row groups). */
#include <immintrin.h>
#include <string.h>

#include "kernels/kernels.h"
#include "kernels/quant.h"
#include "kernels/x86/kquant_x86.h"

/* Layout and packing: q2k_pack_x86.h. */
#include "kernels/x86/q2k_pack_x86.h"

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

/* 8 rows' scale bytes of sub-block j, half h, widened to dwords. */
static inline __attribute__((always_inline)) __m256i q2k_sb(const uint8_t *wb, int j, int h) {
    return _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(wb + RP_Q2K_OFF_SC + 16 * j + 8 * h)));
}

/* One 8-row half `h` of a group against NB (1..4) activation rows. Per
 * sub-block: 4 u8 K-quad vectors (q <= 3) by maddubs against the activation
 * (pair sums <= 2*3*128, four of them <= 3072: no int16 saturation), then
 * one madd with the 4-bit scale (|isum| over a block <= 256*3*127*15). The
 * min term is sum_j m[j] * bsums[j] per row, by madd of (m[2p], m[2p+1])
 * pairs against the activation's int16 bsums pairs. */
static inline __attribute__((always_inline)) void q2k_half(const uint8_t *wg, int64_t nb, int h, const uint8_t *act,
                                                           size_t stride, const int NB, float *y, int64_t ldy,
                                                           int cnt) {
    const __m256i m3 = _mm256_set1_epi8(3), m4d = _mm256_set1_epi32(0xF);
    __m256 tot[4];
    #pragma GCC unroll 4
    for (int i = 0; i < NB; i++) tot[i] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *wb = wg + b * RP_Q2K_GB;
        __m256i isum[4], ms[4];
        #pragma GCC unroll 4
        for (int i = 0; i < NB; i++) isum[i] = ms[i] = _mm256_setzero_si256();
        #pragma GCC unroll 16
        for (int j = 0; j < 16; j++) {
            const __m256i v = _mm256_load_si256((const __m256i *)(wb + 64 * j + 32 * h));
            const __m256i B0 = _mm256_and_si256(v, m3), B1 = _mm256_and_si256(_mm256_srli_epi16(v, 2), m3);
            const __m256i B2 = _mm256_and_si256(_mm256_srli_epi16(v, 4), m3), B3 = _mm256_and_si256(_mm256_srli_epi16(v, 6), m3);
            __m256i sc = _mm256_and_si256(q2k_sb(wb, j, h), m4d);
            sc = _mm256_or_si256(sc, _mm256_slli_epi32(sc, 16));
            #pragma GCC unroll 4
            for (int i = 0; i < NB; i++) {
                const uint8_t *aq = act + (size_t)i * stride + b * RP_Q8K_BLOCK + RP_Q8K_QS + 16 * j;
                const __m256i s = _mm256_add_epi16(_mm256_add_epi16(_mm256_maddubs_epi16(B0, bcast32(aq)), _mm256_maddubs_epi16(B1, bcast32(aq + 4))),
                                                   _mm256_add_epi16(_mm256_maddubs_epi16(B2, bcast32(aq + 8)), _mm256_maddubs_epi16(B3, bcast32(aq + 12))));
                isum[i] = _mm256_add_epi32(isum[i], _mm256_madd_epi16(s, sc));
            }
        }
        #pragma GCC unroll 8
        for (int p = 0; p < 8; p++) {
            const __m256i mp = _mm256_or_si256(_mm256_srli_epi32(q2k_sb(wb, 2 * p, h), 4),
                                               _mm256_slli_epi32(_mm256_srli_epi32(q2k_sb(wb, 2 * p + 1, h), 4), 16));
            #pragma GCC unroll 4
            for (int i = 0; i < NB; i++)
                ms[i] = _mm256_add_epi32(ms[i], _mm256_madd_epi16(mp, bcast32(act + (size_t)i * stride + b * RP_Q8K_BLOCK + RP_Q8K_BSUMS + 4 * p)));
        }
        const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(wb + RP_Q2K_OFF_D + 16 * h)));
        const __m256 dm = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(wb + RP_Q2K_OFF_DMIN + 16 * h)));
        #pragma GCC unroll 4
        for (int i = 0; i < NB; i++) {
            float da;
            memcpy(&da, act + (size_t)i * stride + b * RP_Q8K_BLOCK, sizeof da);
            const __m256 vda = _mm256_set1_ps(da);
            tot[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[i]), _mm256_mul_ps(d, vda), tot[i]);
            tot[i] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(ms[i]), _mm256_mul_ps(dm, vda), tot[i]);
        }
    }
    #pragma GCC unroll 4
    for (int i = 0; i < NB; i++) store_part(y + i * ldy, tot[i], cnt);
}

static void q2k_gemm_avx2(const void *w, size_t w_row_bytes, int64_t rows, int64_t cols, const void *act,
                          size_t act_stride, int64_t n, int64_t r0, int64_t r1, float *y, int64_t ldy, void *scratch) {
    (void)w_row_bytes; (void)rows; (void)scratch;
    const int64_t nb = cols / RP_QK_K;
    const uint8_t *A = act;
    for (int64_t g = r0 / RP_KQ_ROWS; g * RP_KQ_ROWS < r1; g++) {
        const uint8_t *wg = (const uint8_t *)w + (size_t)(g * nb) * RP_Q2K_GB;
        const int64_t rb = g * RP_KQ_ROWS;
        for (int h = 0; h < 2; h++) {
            const int64_t cnt = r1 - (rb + 8 * h);
            if (cnt <= 0) break;
            const int c = cnt > 8 ? 8 : (int)cnt;
            float *yh = y + rb + 8 * h;
            int64_t i = 0;
            for (; i + 4 <= n; i += 4) q2k_half(wg, nb, h, A + i * act_stride, act_stride, 4, yh + i * ldy, ldy, c);
            switch (n - i) {
            case 3: q2k_half(wg, nb, h, A + i * act_stride, act_stride, 3, yh + i * ldy, ldy, c); break;
            case 2: q2k_half(wg, nb, h, A + i * act_stride, act_stride, 2, yh + i * ldy, ldy, c); break;
            case 1: q2k_half(wg, nb, h, A + i * act_stride, act_stride, 1, yh + i * ldy, ldy, c); break;
            default: break;
            }
        }
    }
}

/* Q8_K activations shared with the other K-quant AVX2 kernels (same function pointers). */
const rp_mm_kernel rp_mm_q2_k_packed_avx2 = {
    "q2_k/avx2-packed", RP_TYPE_Q2_K, RP_CPU_AVX2, RP_TYPE_Q8_K, RP_KQ_ROWS, rp_q2k_packed_size, rp_q2k_pack,
    rp_q8k_x86_act_row_size, rp_q8k_quant_act_avx2, NULL, q2k_gemm_avx2,
};
