/* mm_q6_k_avx2.c — Q6_K x Q8_K matmul for AVX2 (maddubs/madd), the shared x86 Q6_K packing and Q3_K's packing into it. */
#include <immintrin.h>
#include <string.h>

#include "kernels/kernels.h"
#include "kernels/quant.h"
#include "kernels/x86/kquant_x86.h"

/* ------------------------------------------------------------------ pack */

size_t rp_q6_k_x86_packed_size(int64_t rows, int64_t cols) {
    return (size_t)((rows + RP_KQ_ROWS - 1) / RP_KQ_ROWS) * (size_t)(cols / RP_QK_K) * RP_Q6K_GB;
}

/* Row r of a group-block from its 256 values q in [0, 63] (the weight is
 * q - 32, in ggml's element order), its 16 int8 scales and fp16 d. */
static void q6k_put_row(uint8_t *o, int r, const uint8_t q[RP_QK_K], const int8_t scales[16], const void *d) {
    for (int g = 0; g < 16; g++) o[RP_Q6K_OFF_SC + 32 * (g >> 1) + 2 * r + (g & 1)] = (uint8_t)scales[g];
    memcpy(o + RP_Q6K_OFF_D + 2 * r, d, 2);
    for (int g = 0; g < 16; g++) {
        const uint8_t *qg = q + 16 * g;
        for (int i = 0; i < 3; i++)
            for (int c = 0; c < 4; c++)
                o[192 * g + 64 * i + 4 * r + c] = (uint8_t)(qg[4 * i + c] | (((qg[12 + c] >> (2 * i)) & 3) << 6));
    }
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
                /* ggml's element order (dequantize_row_q6_K): q in [0, 63] */
                uint8_t q[RP_QK_K];
                for (int half = 0; half < 2; half++) {
                    const uint8_t *ql = ql0 + 64 * half, *qh = qh0 + 32 * half;
                    uint8_t *qq = q + 128 * half;
                    for (int l = 0; l < 32; l++) {
                        qq[l] = (uint8_t)((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4));
                        qq[l + 32] = (uint8_t)((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4));
                        qq[l + 64] = (uint8_t)((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4));
                        qq[l + 96] = (uint8_t)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4));
                    }
                }
                q6k_put_row(o, r, q, (const int8_t *)(blk + 192), blk + 208);
            }
        }
    }
}

/* GGUF Q3_K rows -> Q6_K group-blocks, exactly: a Q3_K weight is
 * d * (sc - 32) * q3 with q3 in [-4, 3] and sc - 32 in [-32, 31] per 16 K,
 * which is Q6_K's d * sc6 * (q6 - 32) with q6 = q3 + 32 in [28, 35] and
 * sc6 = sc - 32. So every Q6_K kernel computes Q3_K bit for bit like Q6_K,
 * at the cost of 6.625 bits per weight in memory instead of 3.4375. */
void rp_q3_k_x86_pack(const void *src, size_t src_row_bytes, int64_t rows, int64_t cols, void *dst, int64_t g0,
                      int64_t g1) {
    const int64_t nb = cols / RP_QK_K;
    for (int64_t g = g0; g < g1; g++) {
        for (int64_t b = 0; b < nb; b++) {
            uint8_t *o = (uint8_t *)dst + (size_t)(g * nb + b) * RP_Q6K_GB;
            memset(o, 0, RP_Q6K_GB);
            for (int r = 0; r < RP_KQ_ROWS; r++) {
                const int64_t R = g * RP_KQ_ROWS + r;
                if (R >= rows) break;
                const rp_block_q3_k *blk = (const rp_block_q3_k *)((const uint8_t *)src + (size_t)R * src_row_bytes) + b;
                /* ggml's element order (dequantize_row_q3_K) */
                uint8_t q[RP_QK_K];
                for (int j = 0; j < RP_QK_K; j++) {
                    const int lo = (blk->qs[32 * (j / 128) + j % 32] >> (2 * ((j % 128) / 32))) & 3;
                    const int h = (blk->hmask[j % 32] >> (j / 32)) & 1;
                    q[j] = (uint8_t)(lo - (h ? 0 : 4) + 32);
                }
                int8_t sc[16];
                for (int j = 0; j < 16; j++) {
                    const uint8_t *s6 = blk->scales;
                    const int l = j < 8 ? (s6[j] & 0xF) : (s6[j - 8] >> 4);
                    sc[j] = (int8_t)((l | (((s6[8 + j % 4] >> (2 * (j / 4))) & 3) << 4)) - 32);
                }
                q6k_put_row(o, r, q, sc, &blk->d);
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

/* The four u8 K-quad lines (8 rows x 16 K, q in [0, 63]) of a sub-block from
 * its three packed lines (kquant_x86.h): quads 0-2 are the low 6 bits, quad 3
 * gathers the top 2 bits of each line. Byte-exact with 16-bit shifts: every
 * field is masked after its shift. */
static inline __attribute__((always_inline)) void q6k_unpack8(const uint8_t *p, __m256i q[4]) {
    const __m256i m3f = _mm256_set1_epi8(0x3F);
    const __m256i l0 = _mm256_load_si256((const __m256i *)p);
    const __m256i l1 = _mm256_load_si256((const __m256i *)(p + 64));
    const __m256i l2 = _mm256_load_si256((const __m256i *)(p + 128));
    q[0] = _mm256_and_si256(l0, m3f);
    q[1] = _mm256_and_si256(l1, m3f);
    q[2] = _mm256_and_si256(l2, m3f);
    q[3] = _mm256_or_si256(_mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 6), _mm256_set1_epi8(0x03)),
                                           _mm256_and_si256(_mm256_srli_epi16(l1, 4), _mm256_set1_epi8(0x0C))),
                           _mm256_and_si256(_mm256_srli_epi16(l2, 2), _mm256_set1_epi8(0x30)));
}

/* sc of sub-block g in both int16 halves of each row's dword (the madd
 * multiplier), from the pair layout: a byte shuffle duplicates the word. */
static inline __m256i q6k_scw8(const uint8_t *wb, int g, int h) {
    const __m256i x = _mm256_cvtepi8_epi16(_mm_load_si128((const __m128i *)(wb + RP_Q6K_OFF_SC + 32 * (g >> 1) + 16 * h)));
    const __m256i dup = (g & 1) ? _mm256_setr_epi8(2, 3, 2, 3, 6, 7, 6, 7, 10, 11, 10, 11, 14, 15, 14, 15, 2, 3, 2, 3, 6,
                                                   7, 6, 7, 10, 11, 10, 11, 14, 15, 14, 15)
                                : _mm256_setr_epi8(0, 1, 0, 1, 4, 5, 4, 5, 8, 9, 8, 9, 12, 13, 12, 13, 0, 1, 0, 1, 4, 5,
                                                   4, 5, 8, 9, 8, 9, 12, 13, 12, 13);
    return _mm256_shuffle_epi8(x, dup);
}

/* One 8-row half `h` of a group against one activation row (decode). Per
 * sub-block g (16 K): 4 ymm of u8 q in [0, 63], maddubs pairs (<= 2*63*127),
 * two summed (< 32767), madd with the int8 scale in both words -> int32. q
 * is unsigned; the -32 is applied once per block through the bsums:
 *   sum_g sc_g <q-32, a>_g = sum_g sc_g <q, a>_g - 32 sum_g sc_g bsum_g
 * (|first| <= 256*63*127*128, |second| <= 32*16*128*2032, both < 2^31). */
static inline void q6k_half(const uint8_t *wg, int64_t nb, int h, const uint8_t *a, float *y, int cnt) {
    __m256 tot = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *wb = wg + b * RP_Q6K_GB;
        const uint8_t *ab = a + b * RP_Q8K_BLOCK;
        __m256i isum = _mm256_setzero_si256();
        #pragma GCC unroll 16
        for (int g = 0; g < 16; g++) {
            __m256i q[4];
            q6k_unpack8(wb + 192 * g + 32 * h, q);
            const uint8_t *aq = ab + RP_Q8K_QS + 16 * g;
            const __m256i s0 = _mm256_add_epi16(_mm256_maddubs_epi16(q[0], bcast32(aq)), _mm256_maddubs_epi16(q[1], bcast32(aq + 4)));
            const __m256i s1 = _mm256_add_epi16(_mm256_maddubs_epi16(q[2], bcast32(aq + 8)), _mm256_maddubs_epi16(q[3], bcast32(aq + 12)));
            const __m256i sc = q6k_scw8(wb, g, h);
            isum = _mm256_add_epi32(isum, _mm256_add_epi32(_mm256_madd_epi16(s0, sc), _mm256_madd_epi16(s1, sc)));
        }
        __m256i os = _mm256_setzero_si256();
        #pragma GCC unroll 8
        for (int p = 0; p < 8; p++)
            os = _mm256_add_epi32(os, _mm256_madd_epi16(_mm256_cvtepi8_epi16(_mm_load_si128((const __m128i *)(wb + RP_Q6K_OFF_SC + 32 * p + 16 * h))),
                                                        bcast32(ab + RP_Q8K_BSUMS + 4 * p)));
        isum = _mm256_sub_epi32(isum, _mm256_slli_epi32(os, 5));
        float da;
        memcpy(&da, ab, sizeof da);
        const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(wb + RP_Q6K_OFF_D + 16 * h)));
        tot = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(d, _mm256_set1_ps(da)), tot);
    }
    store_part(y, tot, cnt);
}

/* Prefill: each group is unpacked once per call into scratch (RP_Q6K_WU2
 * bytes per block) and 4 activation rows share each sub-block's registers:
 *   +0     q    [16 sub-blocks][4 K-quads] x 64 B u8 q in [0, 63] (lane r = row r)
 *   +4096  scw  [16][16] int32: sc in both int16 halves (the madd multiplier)
 *   +5120  sp   [8][16] int16 pairs (sc[r][2p], sc[r][2p+1])
 *   +5632  d    [16] fp32 */
#define RP_Q6K_WU2 5696

static void q6k_unpack2(const uint8_t *wg, int64_t nb, uint8_t *wu) {
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *wb = wg + b * RP_Q6K_GB;
        uint8_t *o = wu + b * RP_Q6K_WU2;
        for (int g = 0; g < 16; g++) {
            for (int h = 0; h < 2; h++) {
                __m256i q[4];
                q6k_unpack8(wb + 192 * g + 32 * h, q);
                #pragma GCC unroll 4
                for (int u = 0; u < 4; u++) _mm256_store_si256((__m256i *)(o + 256 * g + 64 * u + 32 * h), q[u]);
                _mm256_store_si256((__m256i *)(o + 4096 + 64 * g + 32 * h), q6k_scw8(wb, g, h));
            }
        }
        for (int p = 0; p < 16; p++)   /* pair p/2, rows 8(p&1).. */
            _mm256_store_si256((__m256i *)(o + 5120 + 32 * p),
                               _mm256_cvtepi8_epi16(_mm_load_si128((const __m128i *)(wb + RP_Q6K_OFF_SC + 16 * p))));
        for (int h = 0; h < 2; h++)
            _mm256_store_ps((float *)(o + 5632 + 32 * h), _mm256_cvtph_ps(_mm_load_si128((const __m128i *)(wb + RP_Q6K_OFF_D + 16 * h))));
    }
}

static inline __attribute__((always_inline)) void q6k_rows2(const uint8_t *wu, int64_t nb, int h, const uint8_t *act,
                                                            size_t stride, const int NB, float *y, int64_t ldy, int cnt) {
    __m256 tot[4];
    #pragma GCC unroll 4
    for (int i = 0; i < NB; i++) tot[i] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *o = wu + b * RP_Q6K_WU2;
        const uint8_t *ab = act + b * RP_Q8K_BLOCK;
        __m256i isum[4];
        #pragma GCC unroll 4
        for (int i = 0; i < NB; i++) isum[i] = _mm256_setzero_si256();
        for (int s = 0; s < 8; s++) {
            __m256i B[8];
            #pragma GCC unroll 8
            for (int u = 0; u < 8; u++) B[u] = _mm256_load_si256((const __m256i *)(o + 512 * s + 64 * u + 32 * h));
            const __m256i sc0 = _mm256_load_si256((const __m256i *)(o + 4096 + 128 * s + 32 * h));
            const __m256i sc1 = _mm256_load_si256((const __m256i *)(o + 4096 + 128 * s + 64 + 32 * h));
            #pragma GCC unroll 4
            for (int i = 0; i < NB; i++) {
                const uint8_t *aq = ab + (size_t)i * stride + RP_Q8K_QS + 32 * s;
                const __m256i s0 = _mm256_add_epi16(_mm256_maddubs_epi16(B[0], bcast32(aq)), _mm256_maddubs_epi16(B[1], bcast32(aq + 4)));
                const __m256i s1 = _mm256_add_epi16(_mm256_maddubs_epi16(B[2], bcast32(aq + 8)), _mm256_maddubs_epi16(B[3], bcast32(aq + 12)));
                const __m256i s2 = _mm256_add_epi16(_mm256_maddubs_epi16(B[4], bcast32(aq + 16)), _mm256_maddubs_epi16(B[5], bcast32(aq + 20)));
                const __m256i s3 = _mm256_add_epi16(_mm256_maddubs_epi16(B[6], bcast32(aq + 24)), _mm256_maddubs_epi16(B[7], bcast32(aq + 28)));
                const __m256i t0 = _mm256_add_epi32(_mm256_madd_epi16(s0, sc0), _mm256_madd_epi16(s1, sc0));
                const __m256i t1 = _mm256_add_epi32(_mm256_madd_epi16(s2, sc1), _mm256_madd_epi16(s3, sc1));
                isum[i] = _mm256_add_epi32(isum[i], _mm256_add_epi32(t0, t1));
            }
        }
        const __m256 d = _mm256_load_ps((const float *)(o + 5632 + 32 * h));
        #pragma GCC unroll 4
        for (int i = 0; i < NB; i++) {
            const uint8_t *ai = ab + (size_t)i * stride;
            __m256i os = _mm256_madd_epi16(_mm256_load_si256((const __m256i *)(o + 5120 + 32 * h)), bcast32(ai + RP_Q8K_BSUMS));
            #pragma GCC unroll 8
            for (int p = 1; p < 8; p++)
                os = _mm256_add_epi32(os, _mm256_madd_epi16(_mm256_load_si256((const __m256i *)(o + 5120 + 64 * p + 32 * h)),
                                                            bcast32(ai + RP_Q8K_BSUMS + 4 * p)));
            const __m256i is = _mm256_sub_epi32(isum[i], _mm256_slli_epi32(os, 5));
            float da;
            memcpy(&da, ai, sizeof da);
            tot[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is), _mm256_mul_ps(d, _mm256_set1_ps(da)), tot[i]);
        }
    }
    #pragma GCC unroll 4
    for (int i = 0; i < NB; i++) store_part(y + i * ldy, tot[i], cnt);
}

static size_t q6k_scratch_avx2(int64_t cols, int64_t n) {
    return n > 1 ? (size_t)(cols / RP_QK_K) * RP_Q6K_WU2 : 0;
}

static void q6k_gemm_avx2(const void *w, size_t w_row_bytes, int64_t rows, int64_t cols, const void *act,
                          size_t act_stride, int64_t n, int64_t r0, int64_t r1, float *y, int64_t ldy, void *scratch) {
    (void)w_row_bytes; (void)rows;
    const int64_t nb = cols / RP_QK_K;
    const uint8_t *A = act;
    for (int64_t g = r0 / RP_KQ_ROWS; g * RP_KQ_ROWS < r1; g++) {
        const uint8_t *wg = (const uint8_t *)w + (size_t)(g * nb) * RP_Q6K_GB;
        const int64_t rb = g * RP_KQ_ROWS;
        if (n > 1 && scratch) q6k_unpack2(wg, nb, scratch);
        for (int h = 0; h < 2; h++) {
            const int64_t cnt = r1 - (rb + 8 * h);
            if (cnt <= 0) break;
            const int c = cnt > 8 ? 8 : (int)cnt;
            float *yh = y + rb + 8 * h;
            if (n == 1 || !scratch) {   /* decode: stream the packed bits */
                for (int64_t i = 0; i < n; i++) q6k_half(wg, nb, h, A + i * act_stride, yh + i * ldy, c);
                continue;
            }
            int64_t i = 0;
            for (; i + 4 <= n; i += 4) q6k_rows2(scratch, nb, h, A + i * act_stride, act_stride, 4, yh + i * ldy, ldy, c);
            switch (n - i) {
            case 3: q6k_rows2(scratch, nb, h, A + i * act_stride, act_stride, 3, yh + i * ldy, ldy, c); break;
            case 2: q6k_rows2(scratch, nb, h, A + i * act_stride, act_stride, 2, yh + i * ldy, ldy, c); break;
            case 1: q6k_rows2(scratch, nb, h, A + i * act_stride, act_stride, 1, yh + i * ldy, ldy, c); break;
            default: break;
            }
        }
    }
}

/* Q3_K packed into the Q6_K layout (rp_q3_k_x86_pack), run by the Q6_K kernel. */
const rp_mm_kernel rp_mm_q3_k_packed_avx2 = {
    "q3_k/avx2-packed", RP_TYPE_Q3_K, RP_CPU_AVX2, RP_TYPE_Q8_K, RP_KQ_ROWS, rp_q6_k_x86_packed_size, rp_q3_k_x86_pack,
    rp_q8k_x86_act_row_size, rp_q8k_quant_act_avx2, q6k_scratch_avx2, q6k_gemm_avx2,
};

const rp_mm_kernel rp_mm_q6_k_avx2 = {
    "q6_k/avx2", RP_TYPE_Q6_K, RP_CPU_AVX2, RP_TYPE_Q8_K, RP_KQ_ROWS, rp_q6_k_x86_packed_size, rp_q6_k_x86_pack,
    rp_q8k_x86_act_row_size, rp_q8k_quant_act_avx2, q6k_scratch_avx2, q6k_gemm_avx2,
};
