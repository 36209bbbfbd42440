/* mm_iq4_xs_avx2.c — IQ4_XS x Q8_K matmul for AVX2 (pshufb codebook + sign/maddubs/madd) on weights packed at load (16-row groups). */
#include <immintrin.h>
#include <string.h>

#include "kernels/kernels.h"
#include "kernels/quant.h"
#include "kernels/x86/kquant_x86.h"

/* ------------------------------------------------------------------ pack
 * IQ4_XS: value = d * (ls - 32) * rp_iq4nl_values[q], q a 4-bit code, ls
 * 6-bit per 32 K, fp16 d per 256 K. One group-block = 16 rows x 256 K:
 *   +0     qs  32 lines as Q4_K's (kquant_x86.h): line 4j+t, byte 4r+c =
 *              code[r][32j+8t+c] | code[r][32j+8t+4+c] << 4
 *   +2048  sc  [8][16] int8: ls - 32 of sub-block j, row r
 *   +2176  d   [16] fp16 per row, then zero padding
 *   = 2240 bytes (35 lines): 4.375 bits/weight vs GGUF's 4.25 (+2.9%). */
#define RP_IQ4XS_GB 2240
#define RP_IQ4XS_OFF_SC 2048
#define RP_IQ4XS_OFF_D 2176

static size_t iq4xs_packed_size(int64_t rows, int64_t cols) {
    return (size_t)((rows + RP_KQ_ROWS - 1) / RP_KQ_ROWS) * (size_t)(cols / RP_QK_K) * RP_IQ4XS_GB;
}

static void iq4xs_pack(const void *src, size_t src_row_bytes, int64_t rows, int64_t cols, void *dst, int64_t g0,
                       int64_t g1) {
    const int64_t nb = cols / RP_QK_K;
    for (int64_t g = g0; g < g1; g++) {
        for (int64_t b = 0; b < nb; b++) {
            uint8_t *o = (uint8_t *)dst + (size_t)(g * nb + b) * RP_IQ4XS_GB;
            memset(o, 0, RP_IQ4XS_GB);
            for (int r = 0; r < RP_KQ_ROWS; r++) {
                const int64_t R = g * RP_KQ_ROWS + r;
                if (R >= rows) break;
                const rp_block_iq4_xs *blk =
                    (const rp_block_iq4_xs *)((const uint8_t *)src + (size_t)R * src_row_bytes) + b;
                /* ggml's element order (dequantize_row_iq4_xs): codes in [0, 15] */
                uint8_t q[RP_QK_K];
                for (int j = 0; j < 8; j++) {
                    for (int l = 0; l < 16; l++) {
                        q[32 * j + l] = blk->qs[16 * j + l] & 0xF;
                        q[32 * j + 16 + l] = blk->qs[16 * j + l] >> 4;
                    }
                    const int ls = ((blk->scales_l[j / 2] >> (4 * (j % 2))) & 0xF) | (((blk->scales_h >> (2 * j)) & 3) << 4);
                    o[RP_IQ4XS_OFF_SC + 16 * j + r] = (uint8_t)(int8_t)(ls - 32);
                }
                memcpy(o + RP_IQ4XS_OFF_D + 2 * r, &blk->d, 2);
                for (int j = 0; j < 8; j++)
                    for (int t = 0; t < 4; t++)
                        for (int c = 0; c < 4; c++)
                            o[64 * (4 * j + t) + 4 * r + c] =
                                (uint8_t)(q[32 * j + 8 * t + c] | (q[32 * j + 8 * t + 4 + c] << 4));
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

/* One 8-row half `h` of a group against NB (1..4) activation rows. Per
 * sub-block the 8 K-quad lines of int8 weights w = values[code] (a pshufb)
 * are split as |w| (u8) and the activation's sign flipped by w's, so maddubs
 * pairs are <= 2*127*127 (no saturation); each goes through madd with the
 * signed scale (|isum| over a block <= 256*127*127*32 < 2^31). */
static inline __attribute__((always_inline)) void iq4xs_half(const uint8_t *wg, int64_t nb, int h, const uint8_t *act,
                                                             size_t stride, const int NB, float *y, int64_t ldy,
                                                             int cnt) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const __m256i tab = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)rp_iq4nl_values));
    __m256 tot[4];
    #pragma GCC unroll 4
    for (int i = 0; i < NB; i++) tot[i] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *wb = wg + b * RP_IQ4XS_GB;
        __m256i isum[4];
        #pragma GCC unroll 4
        for (int i = 0; i < NB; i++) isum[i] = _mm256_setzero_si256();
        #pragma GCC unroll 8
        for (int j = 0; j < 8; j++) {
            __m256i W[8];
            #pragma GCC unroll 4
            for (int t = 0; t < 4; t++) {
                const __m256i v = _mm256_load_si256((const __m256i *)(wb + 64 * (4 * j + t) + 32 * h));
                W[2 * t] = _mm256_shuffle_epi8(tab, _mm256_and_si256(v, m4));
                W[2 * t + 1] = _mm256_shuffle_epi8(tab, _mm256_and_si256(_mm256_srli_epi16(v, 4), m4));
            }
            __m256i A[8];
            #pragma GCC unroll 8
            for (int u = 0; u < 8; u++) A[u] = _mm256_abs_epi8(W[u]);
            const __m256i s32 = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(wb + RP_IQ4XS_OFF_SC + 16 * j + 8 * h)));
            const __m256i sc = _mm256_or_si256(_mm256_and_si256(s32, _mm256_set1_epi32(0xFFFF)), _mm256_slli_epi32(s32, 16));
            #pragma GCC unroll 4
            for (int i = 0; i < NB; i++) {
                const uint8_t *aq = act + (size_t)i * stride + b * RP_Q8K_BLOCK + RP_Q8K_QS + 32 * j;
                __m256i acc = _mm256_setzero_si256();
                #pragma GCC unroll 8
                for (int u = 0; u < 8; u++)
                    acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(A[u], _mm256_sign_epi8(bcast32(aq + 4 * u), W[u])), sc));
                isum[i] = _mm256_add_epi32(isum[i], acc);
            }
        }
        const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(wb + RP_IQ4XS_OFF_D + 16 * h)));
        #pragma GCC unroll 4
        for (int i = 0; i < NB; i++) {
            float da;
            memcpy(&da, act + (size_t)i * stride + b * RP_Q8K_BLOCK, sizeof da);
            tot[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[i]), _mm256_mul_ps(d, _mm256_set1_ps(da)), tot[i]);
        }
    }
    #pragma GCC unroll 4
    for (int i = 0; i < NB; i++) store_part(y + i * ldy, tot[i], cnt);
}

static void iq4xs_gemm_avx2(const void *w, size_t w_row_bytes, int64_t rows, int64_t cols, const void *act,
                            size_t act_stride, int64_t n, int64_t r0, int64_t r1, float *y, int64_t ldy, void *scratch) {
    (void)w_row_bytes; (void)rows; (void)scratch;
    const int64_t nb = cols / RP_QK_K;
    const uint8_t *A = act;
    for (int64_t g = r0 / RP_KQ_ROWS; g * RP_KQ_ROWS < r1; g++) {
        const uint8_t *wg = (const uint8_t *)w + (size_t)(g * nb) * RP_IQ4XS_GB;
        const int64_t rb = g * RP_KQ_ROWS;
        for (int h = 0; h < 2; h++) {
            const int64_t cnt = r1 - (rb + 8 * h);
            if (cnt <= 0) break;
            const int c = cnt > 8 ? 8 : (int)cnt;
            float *yh = y + rb + 8 * h;
            int64_t i = 0;
            for (; i + 4 <= n; i += 4) iq4xs_half(wg, nb, h, A + i * act_stride, act_stride, 4, yh + i * ldy, ldy, c);
            switch (n - i) {
            case 3: iq4xs_half(wg, nb, h, A + i * act_stride, act_stride, 3, yh + i * ldy, ldy, c); break;
            case 2: iq4xs_half(wg, nb, h, A + i * act_stride, act_stride, 2, yh + i * ldy, ldy, c); break;
            case 1: iq4xs_half(wg, nb, h, A + i * act_stride, act_stride, 1, yh + i * ldy, ldy, c); break;
            default: break;
            }
        }
    }
}

/* Q8_K activations shared with the other K-quant AVX2 kernels (same function pointers). */
const rp_mm_kernel rp_mm_iq4_xs_packed_avx2 = {
    "iq4_xs/avx2-packed", RP_TYPE_IQ4_XS, RP_CPU_AVX2, RP_TYPE_Q8_K, RP_KQ_ROWS, iq4xs_packed_size, iq4xs_pack,
    rp_q8k_x86_act_row_size, rp_q8k_quant_act_avx2, NULL, iq4xs_gemm_avx2,
};
