/* mm_q4_k_avx2.c — Q4_K x Q8_K matmul for AVX2 (maddubs/madd), the shared x86 Q4_K packing and Q8_K activations. */
#include <immintrin.h>
#include <string.h>

#include "kernels/kernels.h"
#include "kernels/quant.h"
#include "kernels/x86/kquant_x86.h"

/* ------------------------------------------------------------ activations */

size_t rp_q8k_x86_act_row_size(int64_t cols) {
    /* Q8_K blocks, then 8 int16 per-32 sums per block (kquant_x86.h) */
    return (size_t)(cols / RP_QK_K) * (RP_Q8K_BLOCK + 8 * sizeof(int16_t));
}

/* Horizontal max of 8 floats. */
static inline float hmax8(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

/* Bit-exact rp_quantize_row(RP_TYPE_Q8_K): max = the first element of largest
 * magnitude, iscale = -127/max, q = round-half-even(iscale * x) (VCVTPS2DQ under
 * the default MXCSR rounds like ggml's nearest_int for |v| < 2^22), saturated
 * to int8 as the reference clamps; d = 1/iscale. Then the per-32 sums. */
void rp_q8k_quant_act_avx2(const float *x, void *dst, int64_t cols) {
    const int64_t nb = cols / RP_QK_K;
    uint8_t *out = dst;
    int16_t *s32 = (int16_t *)(out + rp_q8k_x86_s32_off(cols));
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    for (int64_t b = 0; b < nb; b++, x += RP_QK_K) {
        uint8_t *blk = out + b * RP_Q8K_BLOCK;
        __m256 mx = _mm256_setzero_ps();
        for (int k = 0; k < RP_QK_K; k += 8) mx = _mm256_max_ps(mx, _mm256_and_ps(_mm256_loadu_ps(x + k), absmask));
        const float amax = hmax8(mx);
        if (!(amax > 0.0f)) {   /* all zero (or NaN: unspecified bytes, no UB) */
            memset(blk, 0, RP_Q8K_BLOCK);
            memset(s32 + 8 * b, 0, 8 * sizeof(int16_t));
            continue;
        }
        float max = x[0];
        for (int k = 0; k < RP_QK_K; k++)
            if (__builtin_fabsf(x[k]) == amax) { max = x[k]; break; }
        const float iscale = -127.f / max;
        const __m256 vs = _mm256_set1_ps(iscale);
        int8_t *qs = (int8_t *)(blk + RP_Q8K_QS);
        for (int k = 0; k < RP_QK_K; k += 32) {
            __m256i i0 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + k), vs));
            __m256i i1 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + k + 8), vs));
            __m256i i2 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + k + 16), vs));
            __m256i i3 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + k + 24), vs));
            __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(i0, i1), _mm256_packs_epi32(i2, i3));
            /* packs work per 128-bit lane: dwords 0,4,1,5,2,6,3,7 -> restore order */
            p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
            _mm256_storeu_si256((__m256i *)(qs + k), p);
        }
        int16_t bs[16];
        const __m256i ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
        #pragma GCC unroll 16
        for (int g = 0; g < 8; g++) {
            /* 32 quants -> 8 dword sums of 4 (dwords 0-3: first 16) -> two sums of 16 */
            __m256i v = _mm256_loadu_si256((const __m256i *)(qs + 32 * g));
            __m256i s = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, v), ones16);
            __m128i lo = _mm256_castsi256_si128(s), hi = _mm256_extracti128_si256(s, 1);
            lo = _mm_hadd_epi32(lo, hi);                /* q0+q1, q2+q3, q4+q5, q6+q7 */
            lo = _mm_hadd_epi32(lo, lo);                /* first 16, second 16 */
            bs[2 * g] = (int16_t)_mm_cvtsi128_si32(lo);
            bs[2 * g + 1] = (int16_t)_mm_extract_epi32(lo, 1);
            s32[8 * b + g] = (int16_t)(bs[2 * g] + bs[2 * g + 1]);
        }
        memcpy(blk + RP_Q8K_BSUMS, bs, sizeof bs);
        const float d = 1 / iscale;
        memcpy(blk, &d, sizeof d);
    }
}

/* ------------------------------------------------------------------ pack */

size_t rp_q4_k_x86_packed_size(int64_t rows, int64_t cols) {
    return (size_t)((rows + RP_KQ_ROWS - 1) / RP_KQ_ROWS) * (size_t)(cols / RP_QK_K) * RP_Q4K_GB;
}

/* GGUF Q4_K rows -> group-blocks (layout in kquant_x86.h). Scalar: runs once
 * at load, in parallel over groups. */
void rp_q4_k_x86_pack(const void *src, size_t src_row_bytes, int64_t rows, int64_t cols, void *dst, int64_t g0,
                      int64_t g1) {
    const int64_t nb = cols / RP_QK_K;
    for (int64_t g = g0; g < g1; g++) {
        for (int64_t b = 0; b < nb; b++) {
            uint8_t *o = (uint8_t *)dst + (size_t)(g * nb + b) * RP_Q4K_GB;
            memset(o, 0, RP_Q4K_GB);
            for (int r = 0; r < RP_KQ_ROWS; r++) {
                const int64_t R = g * RP_KQ_ROWS + r;
                if (R >= rows) break;
                const uint8_t *blk = (const uint8_t *)src + (size_t)R * src_row_bytes + (size_t)b * sizeof(rp_block_q4_k);
                const uint8_t *scales = blk + 4, *qs = blk + 4 + RP_K_SCALE_SIZE;
                uint8_t q[RP_QK_K];
                for (int j = 0; j < 8; j++)
                    for (int l = 0; l < 32; l++) q[32 * j + l] = (qs[32 * (j >> 1) + l] >> (4 * (j & 1))) & 0xF;
                for (int j = 0; j < 8; j++) {
                    uint8_t sc, m;
                    rp_q4_k_scale_min(j, scales, &sc, &m);
                    o[RP_Q4K_OFF_SC + 16 * j + r] = sc;
                    o[RP_Q4K_OFF_M + 32 * (j >> 1) + 2 * r + (j & 1)] = m;
                }
                memcpy(o + RP_Q4K_OFF_D + 2 * r, blk, 2);
                memcpy(o + RP_Q4K_OFF_DMIN + 2 * r, blk + 2, 2);
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

/* Stores the first `cnt` (1..8) floats of v to y. */
static inline void store_part(float *y, __m256 v, int cnt) {
    if (cnt >= 8) {
        _mm256_storeu_ps(y, v);
    } else {
        float t[8];
        _mm256_storeu_ps(t, v);
        memcpy(y, t, (size_t)cnt * sizeof(float));
    }
}

/* One 8-row half `h` of a group against NB activation rows: per sub-block the
 * unpacked quants (8 ymm: 8 rows x 32 K) are reused by each activation row;
 * maddubs gives int16 pair sums (<= 2*15*127), eight of them summed stay below
 * 32767, and madd with the row scale (sc in both words of the dword) lands in
 * int32 with sc applied (|isum| <= 256*15*127*63 < 2^31). */
static inline __attribute__((always_inline)) void q4k_half(const uint8_t *wg, int64_t nb, int h, const uint8_t *act,
                                                           size_t act_stride, int64_t s32off, int NB, float *y,
                                                           int64_t ldy, int cnt) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    __m256 tot[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *wb = wg + b * RP_Q4K_GB;
        __m256i isum[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
        #pragma GCC unroll 16
        for (int j = 0; j < 8; j++) {
            __m256i B[8];
            #pragma GCC unroll 16
            for (int t = 0; t < 4; t++) {
                __m256i v = _mm256_loadu_si256((const __m256i *)(wb + 64 * (4 * j + t) + 32 * h));
                B[2 * t] = _mm256_and_si256(v, m4);
                B[2 * t + 1] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
            }
            __m256i sc = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(wb + RP_Q4K_OFF_SC + 16 * j + 8 * h)));
            sc = _mm256_or_si256(sc, _mm256_slli_epi32(sc, 16));
            #pragma GCC unroll 16
            for (int i = 0; i < NB; i++) {
                const uint8_t *aq = act + (size_t)i * act_stride + b * RP_Q8K_BLOCK + RP_Q8K_QS + 32 * j;
                __m256i s = _mm256_maddubs_epi16(B[0], bcast32(aq));
                #pragma GCC unroll 16
                for (int u = 1; u < 8; u++) s = _mm256_add_epi16(s, _mm256_maddubs_epi16(B[u], bcast32(aq + 4 * u)));
                isum[i] = _mm256_add_epi32(isum[i], _mm256_madd_epi16(s, sc));
            }
        }
        const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(wb + RP_Q4K_OFF_D + 16 * h)));
        const __m256 dm = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(wb + RP_Q4K_OFF_DMIN + 16 * h)));
        __m256i mp[4];
        #pragma GCC unroll 16
        for (int p = 0; p < 4; p++)
            mp[p] = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(wb + RP_Q4K_OFF_M + 32 * p + 16 * h)));
        #pragma GCC unroll 16
        for (int i = 0; i < NB; i++) {
            const uint8_t *ab = act + (size_t)i * act_stride;
            const uint8_t *s32 = ab + s32off + 16 * b;
            __m256i ms = _mm256_madd_epi16(mp[0], bcast32(s32));
            #pragma GCC unroll 16
            for (int p = 1; p < 4; p++) ms = _mm256_add_epi32(ms, _mm256_madd_epi16(mp[p], bcast32(s32 + 4 * p)));
            float da;
            memcpy(&da, ab + b * RP_Q8K_BLOCK, sizeof da);
            const __m256 vda = _mm256_set1_ps(da);
            tot[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[i]), _mm256_mul_ps(d, vda), tot[i]);
            tot[i] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(ms), _mm256_mul_ps(dm, vda), tot[i]);
        }
    }
    #pragma GCC unroll 16
    for (int i = 0; i < NB; i++) store_part(y + i * ldy, tot[i], cnt);
}

/* Prefill: each group is unpacked once per call into scratch (RP_Q4K_WU2
 * bytes per block), so the nibble unpack is not repeated for every pair of
 * activation rows and 4 rows share each sub-block's 8 quant registers:
 *   +0     q    [8 sub-blocks][8 K-quads] x 64 B exact u8 (lane r = row r)
 *   +4096  scw  [8][16] int32: sc | sc << 16 (the madd multiplier)
 *   +4608  d    [16] fp32, +4672 dmin [16] fp32
 *   +4736  mp   [4][16] int16 pairs (m[r][2p], m[r][2p+1]) */
#define RP_Q4K_WU2 4992

static void q4k_unpack2(const uint8_t *wg, int64_t nb, uint8_t *wu) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *wb = wg + b * RP_Q4K_GB;
        uint8_t *o = wu + b * RP_Q4K_WU2;
        for (int l = 0; l < 64; l++) {
            const __m256i v = _mm256_load_si256((const __m256i *)(wb + 32 * l));
            uint8_t *q = o + 128 * (l >> 1) + 32 * (l & 1);   /* line l/2, half l&1 */
            _mm256_store_si256((__m256i *)q, _mm256_and_si256(v, m4));
            _mm256_store_si256((__m256i *)(q + 64), _mm256_and_si256(_mm256_srli_epi16(v, 4), m4));
        }
        for (int j = 0; j < 16; j++) {
            const __m256i sc = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(wb + RP_Q4K_OFF_SC + 8 * j)));
            _mm256_store_si256((__m256i *)(o + 4096 + 32 * j), _mm256_or_si256(sc, _mm256_slli_epi32(sc, 16)));
        }
        for (int h = 0; h < 2; h++) {
            _mm256_store_ps((float *)(o + 4608 + 32 * h), _mm256_cvtph_ps(_mm_load_si128((const __m128i *)(wb + RP_Q4K_OFF_D + 16 * h))));
            _mm256_store_ps((float *)(o + 4672 + 32 * h), _mm256_cvtph_ps(_mm_load_si128((const __m128i *)(wb + RP_Q4K_OFF_DMIN + 16 * h))));
        }
        for (int p = 0; p < 8; p++)
            _mm256_store_si256((__m256i *)(o + 4736 + 32 * p),
                               _mm256_cvtepu8_epi16(_mm_load_si128((const __m128i *)(wb + RP_Q4K_OFF_M + 16 * p))));
    }
}

static inline __attribute__((always_inline)) void q4k_rows2(const uint8_t *wu, int64_t nb, int h, const uint8_t *act,
                                                            size_t stride, int64_t s32off, const int NB, float *y,
                                                            int64_t ldy, int cnt) {
    __m256 tot[4];
    #pragma GCC unroll 4
    for (int i = 0; i < NB; i++) tot[i] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *o = wu + b * RP_Q4K_WU2;
        const uint8_t *ab = act + b * RP_Q8K_BLOCK;
        __m256i isum[4];
        #pragma GCC unroll 4
        for (int i = 0; i < NB; i++) isum[i] = _mm256_setzero_si256();
        for (int j = 0; j < 8; j++) {
            __m256i B[8];
            #pragma GCC unroll 8
            for (int u = 0; u < 8; u++) B[u] = _mm256_load_si256((const __m256i *)(o + 512 * j + 64 * u + 32 * h));
            const __m256i sc = _mm256_load_si256((const __m256i *)(o + 4096 + 64 * j + 32 * h));
            #pragma GCC unroll 4
            for (int i = 0; i < NB; i++) {
                const uint8_t *aq = ab + (size_t)i * stride + RP_Q8K_QS + 32 * j;
                __m256i s = _mm256_maddubs_epi16(B[0], bcast32(aq));
                #pragma GCC unroll 8
                for (int u = 1; u < 8; u++) s = _mm256_add_epi16(s, _mm256_maddubs_epi16(B[u], bcast32(aq + 4 * u)));
                isum[i] = _mm256_add_epi32(isum[i], _mm256_madd_epi16(s, sc));
            }
        }
        const __m256 d = _mm256_load_ps((const float *)(o + 4608 + 32 * h));
        const __m256 dm = _mm256_load_ps((const float *)(o + 4672 + 32 * h));
        #pragma GCC unroll 4
        for (int i = 0; i < NB; i++) {
            const uint8_t *ai = ab + (size_t)i * stride;
            const uint8_t *s32 = act + (size_t)i * stride + s32off + 16 * b;
            __m256i ms = _mm256_madd_epi16(_mm256_load_si256((const __m256i *)(o + 4736 + 32 * h)), bcast32(s32));
            #pragma GCC unroll 4
            for (int p = 1; p < 4; p++)
                ms = _mm256_add_epi32(ms, _mm256_madd_epi16(_mm256_load_si256((const __m256i *)(o + 4736 + 64 * p + 32 * h)),
                                                            bcast32(s32 + 4 * p)));
            float da;
            memcpy(&da, ai, sizeof da);
            const __m256 vda = _mm256_set1_ps(da);
            tot[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[i]), _mm256_mul_ps(d, vda), tot[i]);
            tot[i] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(ms), _mm256_mul_ps(dm, vda), tot[i]);
        }
    }
    #pragma GCC unroll 4
    for (int i = 0; i < NB; i++) store_part(y + i * ldy, tot[i], cnt);
}

static size_t q4k_scratch_avx2(int64_t cols, int64_t n) {
    return n > 1 ? (size_t)(cols / RP_QK_K) * RP_Q4K_WU2 : 0;
}

static void q4k_gemm_avx2(const void *w, size_t w_row_bytes, int64_t rows, int64_t cols, const void *act,
                          size_t act_stride, int64_t n, int64_t r0, int64_t r1, float *y, int64_t ldy, void *scratch) {
    (void)w_row_bytes; (void)rows;
    const int64_t nb = cols / RP_QK_K;
    const int64_t s32off = (int64_t)rp_q8k_x86_s32_off(cols);
    const uint8_t *A = act;
    for (int64_t g = r0 / RP_KQ_ROWS; g * RP_KQ_ROWS < r1; g++) {
        const uint8_t *wg = (const uint8_t *)w + (size_t)(g * nb) * RP_Q4K_GB;
        const int64_t rb = g * RP_KQ_ROWS;
        if (n > 1 && scratch) q4k_unpack2(wg, nb, scratch);
        for (int h = 0; h < 2; h++) {
            const int64_t cnt = r1 - (rb + 8 * h);
            if (cnt <= 0) break;
            const int c = cnt > 8 ? 8 : (int)cnt;
            float *yh = y + rb + 8 * h;
            if (n == 1 || !scratch) {   /* decode: stream the packed nibbles */
                for (int64_t i = 0; i < n; i++)
                    q4k_half(wg, nb, h, A + i * act_stride, act_stride, s32off, 1, yh + i * ldy, ldy, c);
                continue;
            }
            int64_t i = 0;
            for (; i + 4 <= n; i += 4) q4k_rows2(scratch, nb, h, A + i * act_stride, act_stride, s32off, 4, yh + i * ldy, ldy, c);
            switch (n - i) {
            case 3: q4k_rows2(scratch, nb, h, A + i * act_stride, act_stride, s32off, 3, yh + i * ldy, ldy, c); break;
            case 2: q4k_rows2(scratch, nb, h, A + i * act_stride, act_stride, s32off, 2, yh + i * ldy, ldy, c); break;
            case 1: q4k_rows2(scratch, nb, h, A + i * act_stride, act_stride, s32off, 1, yh + i * ldy, ldy, c); break;
            default: break;
            }
        }
    }
}

const rp_mm_kernel rp_mm_q4_k_avx2 = {
    "q4_k/avx2", RP_TYPE_Q4_K, RP_CPU_AVX2, RP_TYPE_Q8_K, RP_KQ_ROWS, rp_q4_k_x86_packed_size, rp_q4_k_x86_pack,
    rp_q8k_x86_act_row_size, rp_q8k_quant_act_avx2, q4k_scratch_avx2, q4k_gemm_avx2,
};
