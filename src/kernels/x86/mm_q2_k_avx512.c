/* mm_q2_k_avx512.c — Q2_K x Q8_K matmul for AVX-512 VNNI (pshufb scale tables + vpdpbusd) on weights packed at load (16-row groups, q2k_pack_x86.h). */
#include <immintrin.h>
#include <string.h>

#include "kernels/x86/q2k_pack_x86.h"

/* The sub-block scale goes into the weight byte, not into a per-sub-block
 * multiply: sc * q <= 15 * 3 = 45 fits a u8, and per 128-bit lane (4 rows)
 * the 16 products sc[row] * q (row 0..3 of the lane, q 0..3) are one pshufb
 * table, indexed by q | 4 * (row in lane). So per K-quad step: shift,
 * and/or (one vpternlog), pshufb, then vpdpbusd against the broadcast
 * activation bytes straight into one int32 sum per row and block (exact:
 * |sum| <= 256 * 45 * 127). The min term sum_j m[j] * bsums[j] is vpdpwssd
 * of (m[2p], m[2p+1]) pairs against the activation's int16 bsums pairs. */

static inline __m512i bcast32(const void *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

/* The pshufb table of sub-block j: lane L, byte 4 rl + q = sc[4L + rl] * q. */
static inline __attribute__((always_inline)) __m512i q2k_table(const uint8_t *wb, int j) {
    const __m128i s = _mm_and_si128(_mm_loadu_si128((const __m128i *)(wb + RP_Q2K_OFF_SC + 16 * j)), _mm_set1_epi8(0x0F));
    const __m512i sidx = _mm512_set_epi8(15, 15, 15, 15, 14, 14, 14, 14, 13, 13, 13, 13, 12, 12, 12, 12,
                                         11, 11, 11, 11, 10, 10, 10, 10, 9, 9, 9, 9, 8, 8, 8, 8,
                                         7, 7, 7, 7, 6, 6, 6, 6, 5, 5, 5, 5, 4, 4, 4, 4,
                                         3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
    const __m512i S = _mm512_shuffle_epi8(_mm512_broadcast_i32x4(s), sidx);
    const __m512i m1 = _mm512_set1_epi32((int)0xFF00FF00u), m2 = _mm512_set1_epi32((int)0xFFFF0000u);
    /* q = byte index & 3: sc * q = (q & 1 ? sc : 0) + (q & 2 ? 2 sc : 0); sc <= 15, so the 16-bit shift is exact */
    return _mm512_add_epi8(_mm512_and_si512(S, m1), _mm512_and_si512(_mm512_slli_epi16(S, 1), m2));
}

/* One group (16 rows) against NB (1..4) activation rows; `k` masks the valid rows. */
static inline __attribute__((always_inline)) void q2k_group(const uint8_t *wg, int64_t nb, const uint8_t *act,
                                                            size_t stride, const int NB, float *y, int64_t ldy,
                                                            __mmask16 k) {
    const __m512i m3 = _mm512_set1_epi8(3);
    /* every byte of dword rl of a lane (row 4L + rl): 4 rl */
    const __m512i ridx = _mm512_broadcast_i32x4(_mm_setr_epi32(0, 0x04040404, 0x08080808, 0x0C0C0C0C));
    __m512 tot[4];
    #pragma GCC unroll 4
    for (int i = 0; i < NB; i++) tot[i] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *wb = wg + b * RP_Q2K_GB;
        __m512i isum[4], ms[4];
        #pragma GCC unroll 4
        for (int i = 0; i < NB; i++) isum[i] = ms[i] = _mm512_setzero_si512();
        #pragma GCC unroll 16
        for (int j = 0; j < 16; j++) {
            const __m512i T = q2k_table(wb, j);
            const __m512i v = _mm512_load_si512((const void *)(wb + 64 * j));
            __m512i W[4];
            #pragma GCC unroll 4
            for (int t = 0; t < 4; t++)
                W[t] = _mm512_shuffle_epi8(T, _mm512_ternarylogic_epi32(_mm512_srli_epi16(v, 2 * t), m3, ridx, 0xEA));
            #pragma GCC unroll 4
            for (int i = 0; i < NB; i++) {
                const uint8_t *aq = act + (size_t)i * stride + b * RP_Q8K_BLOCK + RP_Q8K_QS + 16 * j;
                #pragma GCC unroll 4
                for (int t = 0; t < 4; t++) isum[i] = _mm512_dpbusd_epi32(isum[i], W[t], bcast32(aq + 4 * t));
            }
        }
        #pragma GCC unroll 8
        for (int p = 0; p < 8; p++) {
            const __m512i e = _mm512_srli_epi32(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(wb + RP_Q2K_OFF_SC + 32 * p))), 4);
            const __m512i o = _mm512_srli_epi32(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(wb + RP_Q2K_OFF_SC + 32 * p + 16))), 4);
            const __m512i mp = _mm512_or_si512(e, _mm512_slli_epi32(o, 16));
            #pragma GCC unroll 4
            for (int i = 0; i < NB; i++)
                ms[i] = _mm512_dpwssd_epi32(ms[i], mp, bcast32(act + (size_t)i * stride + b * RP_Q8K_BLOCK + RP_Q8K_BSUMS + 4 * p));
        }
        const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(wb + RP_Q2K_OFF_D)));
        const __m512 dm = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(wb + RP_Q2K_OFF_DMIN)));
        #pragma GCC unroll 4
        for (int i = 0; i < NB; i++) {
            float da;
            memcpy(&da, act + (size_t)i * stride + b * RP_Q8K_BLOCK, sizeof da);
            const __m512 vda = _mm512_set1_ps(da);
            tot[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[i]), _mm512_mul_ps(d, vda), tot[i]);
            tot[i] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(ms[i]), _mm512_mul_ps(dm, vda), tot[i]);
        }
    }
    #pragma GCC unroll 4
    for (int i = 0; i < NB; i++) _mm512_mask_storeu_ps(y + i * ldy, k, tot[i]);
}

static void q2k_gemm_avx512(const void *w, size_t w_row_bytes, int64_t rows, int64_t cols, const void *act,
                            size_t act_stride, int64_t n, int64_t r0, int64_t r1, float *y, int64_t ldy,
                            void *scratch) {
    (void)w_row_bytes; (void)rows; (void)scratch;
    const int64_t nb = cols / RP_QK_K;
    const uint8_t *A = act;
    for (int64_t g = r0 / RP_KQ_ROWS; g * RP_KQ_ROWS < r1; g++) {
        const uint8_t *wg = (const uint8_t *)w + (size_t)(g * nb) * RP_Q2K_GB;
        const int64_t rb = g * RP_KQ_ROWS, cnt = r1 - rb;
        const __mmask16 k = cnt >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << cnt) - 1u);
        float *yg = y + rb;
        int64_t i = 0;
        for (; i + 4 <= n; i += 4) q2k_group(wg, nb, A + i * act_stride, act_stride, 4, yg + i * ldy, ldy, k);
        switch (n - i) {
        case 3: q2k_group(wg, nb, A + i * act_stride, act_stride, 3, yg + i * ldy, ldy, k); break;
        case 2: q2k_group(wg, nb, A + i * act_stride, act_stride, 2, yg + i * ldy, ldy, k); break;
        case 1: q2k_group(wg, nb, A + i * act_stride, act_stride, 1, yg + i * ldy, ldy, k); break;
        default: break;
        }
    }
}

/* Q8_K activations shared with the other K-quant AVX-512 kernels (same function pointers). */
const rp_mm_kernel rp_mm_q2_k_packed_avx512 = {
    "q2_k/avx512-packed", RP_TYPE_Q2_K, RP_CPU_AVX512, RP_TYPE_Q8_K, RP_KQ_ROWS, rp_q2k_packed_size, rp_q2k_pack,
    rp_q8k_x86_act_row_size, rp_q8k_quant_act_avx512, NULL, q2k_gemm_avx512,
};
