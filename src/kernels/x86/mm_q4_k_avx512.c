/* mm_q4_k_avx512.c — Q4_K x Q8_K matmul for AVX-512 VNNI (VPDPBUSD GEMV and register-blocked GEMM), Q8_K activations. */
#include <immintrin.h>
#include <string.h>

#include "kernels/kernels.h"
#include "kernels/quant.h"
#include "kernels/x86/kquant_x86.h"

/* ------------------------------------------------------------ activations */

/* Bit-exact rp_quantize_row(RP_TYPE_Q8_K) (see rp_q8k_quant_act_avx2 for the
 * argument), plus the per-32 sums of kquant_x86.h. */
void rp_q8k_quant_act_avx512(const float *x, void *dst, int64_t cols) {
    const int64_t nb = cols / RP_QK_K;
    uint8_t *out = dst;
    int16_t *s32 = (int16_t *)(out + rp_q8k_x86_s32_off(cols));
    for (int64_t b = 0; b < nb; b++, x += RP_QK_K) {
        uint8_t *blk = out + b * RP_Q8K_BLOCK;
        __m512 mx = _mm512_setzero_ps();
        for (int k = 0; k < RP_QK_K; k += 16) mx = _mm512_max_ps(mx, _mm512_abs_ps(_mm512_loadu_ps(x + k)));
        const float amax = _mm512_reduce_max_ps(mx);
        if (!(amax > 0.0f)) {   /* all zero (or NaN: unspecified bytes, no UB) */
            memset(blk, 0, RP_Q8K_BLOCK);
            memset(s32 + 8 * b, 0, 8 * sizeof(int16_t));
            continue;
        }
        /* the first element of largest magnitude gives the sign, as in the reference */
        float max = x[0];
        const __m512 va = _mm512_set1_ps(amax);
        for (int k = 0; k < RP_QK_K; k += 16) {
            __mmask16 e = _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_loadu_ps(x + k)), va, _CMP_EQ_OQ);
            if (e) { max = x[k + __builtin_ctz(e)]; break; }
        }
        const float iscale = -127.f / max;
        const __m512 vs = _mm512_set1_ps(iscale);
        const __m512i lo = _mm512_set1_epi32(-128), hi = _mm512_set1_epi32(127);
        int8_t *qs = (int8_t *)(blk + RP_Q8K_QS);
        int16_t bs[16];
        #pragma GCC unroll 16
        for (int g = 0; g < 16; g++) {
            __m512i v = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x + 16 * g), vs));
            v = _mm512_min_epi32(_mm512_max_epi32(v, lo), hi);
            _mm_storeu_si128((__m128i *)(qs + 16 * g), _mm512_cvtepi32_epi8(v));
            bs[g] = (int16_t)_mm512_reduce_add_epi32(v);
        }
        #pragma GCC unroll 16
        for (int j = 0; j < 8; j++) s32[8 * b + j] = (int16_t)(bs[2 * j] + bs[2 * j + 1]);
        memcpy(blk + RP_Q8K_BSUMS, bs, sizeof bs);
        const float d = 1 / iscale;
        memcpy(blk, &d, sizeof d);
    }
}

/* ------------------------------------------------------------------ gemm */

static inline __m512i bc32(const uint8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);   /* folds into VPDPBUSD's {1to16} operand */
}

/* Decode, n = 1: one 16-row group streamed once. Per sub-block j, four lines
 * (16 rows x 32 K as nibbles): the low nibbles (v & 0x0F) dot K-quads 2t, the
 * high ones are used in place as 16*q (v & 0xF0, no shift) and the sum is
 * shifted back (exact: it is a multiple of 16, |hi| <= 16*16*15*127). Then
 * isum += dot_j * sc_j per lane (|isum| <= 256*15*127*63 < 2^31), and per
 * block y += d*da*isum - dmin*da*sum_j m_j*s32_j. The weights are read once,
 * so this is bandwidth-bound; the arithmetic is ~200 zmm ops per 2368 bytes. */
static inline __m512 q4k_gemv_group(const uint8_t *wg, int64_t nb, const uint8_t *a, int64_t s32off) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), mf0 = _mm512_set1_epi8((char)0xF0);
    __m512 tot = _mm512_setzero_ps(), tot2 = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *wb = wg + b * RP_Q4K_GB;
        const uint8_t *aq = a + b * RP_Q8K_BLOCK + RP_Q8K_QS;
        _mm_prefetch((const char *)(wb + 4 * RP_Q4K_GB), _MM_HINT_T0);
        __m512i isum = _mm512_setzero_si512();
        #pragma GCC unroll 16
        for (int j = 0; j < 8; j++) {
            __m512i lo = _mm512_setzero_si512(), hi = _mm512_setzero_si512();
            #pragma GCC unroll 16
            for (int t = 0; t < 4; t++) {
                const __m512i v = _mm512_load_si512((const void *)(wb + 64 * (4 * j + t)));
                lo = _mm512_dpbusd_epi32(lo, _mm512_and_si512(v, m4), bc32(aq + 32 * j + 8 * t));
                hi = _mm512_dpbusd_epi32(hi, _mm512_and_si512(v, mf0), bc32(aq + 32 * j + 8 * t + 4));
            }
            const __m512i dot = _mm512_add_epi32(lo, _mm512_srai_epi32(hi, 4));
            const __m512i sc = _mm512_cvtepu8_epi32(_mm_load_si128((const __m128i *)(wb + RP_Q4K_OFF_SC + 16 * j)));
            isum = _mm512_add_epi32(isum, _mm512_mullo_epi32(dot, sc));
        }
        const uint8_t *s32 = a + s32off + 16 * b;
        __m512i ms = _mm512_setzero_si512();
        #pragma GCC unroll 16
        for (int p = 0; p < 4; p++)
            ms = _mm512_dpwssd_epi32(ms, _mm512_cvtepu8_epi16(_mm256_load_si256((const __m256i *)(wb + RP_Q4K_OFF_M + 32 * p))),
                                     bc32(s32 + 4 * p));
        float da;
        memcpy(&da, a + b * RP_Q8K_BLOCK, sizeof da);
        const __m512 vda = _mm512_set1_ps(da);
        const __m512 d = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(wb + RP_Q4K_OFF_D)));
        const __m512 dm = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(wb + RP_Q4K_OFF_DMIN)));
        tot = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(d, vda), tot);
        tot2 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ms), _mm512_mul_ps(dm, vda), tot2);
    }
    return _mm512_sub_ps(tot, tot2);
}

/* Prefill without AMX. Each 16-row group is first unpacked into scratch
 * (RP_Q4K_WU bytes per block), once per call, for all activation rows:
 *   +0     q    [8 sub-blocks][8 K-quads] x 64 B: exact u8 quants, lane r =
 *               row r's 4 K (the VPDPBUSD unsigned operand, loaded, not
 *               re-derived from nibbles for every few activation rows)
 *   +4096  dsc  [8][16] fp32 d*sc_j per row
 *   +4608  dmin [16] fp32
 *   +4672  mp   [4][16] int16 pairs (m[r][2p], m[r][2p+1])
 * Then NB activation rows at a time share each sub-block's 8 quant registers:
 * per row and sub-block 8 VPDPBUSD (exact int32: |acc| <= 32*15*128) and one
 * convert + FMA with d*sc_j; per row and block the min term (4 VPDPWSSD) and
 * one FMA with da. On Zen 4 any zmm op takes about a VPDPBUSD slot, so this is
 * ~10 slots per 8 useful; a VPMULLD integer rescale would cost ~3. */
#define RP_Q4K_WU 4928

static void q4k_unpack_group(const uint8_t *wg, int64_t nb, uint8_t *wu) {
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *wb = wg + b * RP_Q4K_GB;
        uint8_t *o = wu + b * RP_Q4K_WU;
        #pragma GCC unroll 16
        for (int l = 0; l < 32; l++) {
            const __m512i v = _mm512_load_si512((const void *)(wb + 64 * l));
            _mm512_store_si512((void *)(o + 128 * l), _mm512_and_si512(v, m4));
            _mm512_store_si512((void *)(o + 128 * l + 64), _mm512_and_si512(_mm512_srli_epi16(v, 4), m4));
        }
        const __m512 d = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(wb + RP_Q4K_OFF_D)));
        #pragma GCC unroll 16
        for (int j = 0; j < 8; j++) {
            const __m512i sc = _mm512_cvtepu8_epi32(_mm_load_si128((const __m128i *)(wb + RP_Q4K_OFF_SC + 16 * j)));
            _mm512_store_ps((void *)(o + 4096 + 64 * j), _mm512_mul_ps(d, _mm512_cvtepi32_ps(sc)));
        }
        _mm512_store_ps((void *)(o + 4608), _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(wb + RP_Q4K_OFF_DMIN))));
        #pragma GCC unroll 16
        for (int p = 0; p < 4; p++)
            _mm512_store_si512((void *)(o + 4672 + 64 * p),
                               _mm512_cvtepu8_epi16(_mm256_load_si256((const __m256i *)(wb + RP_Q4K_OFF_M + 32 * p))));
    }
}

static inline __attribute__((always_inline)) void q4k_gemm_rows(const uint8_t *wu, int64_t nb, const uint8_t *act,
                                                                size_t stride, int64_t s32off, const int NB, float *y,
                                                                int64_t ldy, __mmask16 km) {
    __m512 tot[10];
    #pragma GCC unroll 16
    for (int i = 0; i < NB; i++) tot[i] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *o = wu + b * RP_Q4K_WU;
        const uint8_t *ab = act + b * RP_Q8K_BLOCK;
        __m512 bs[10];
        #pragma GCC unroll 16
        for (int i = 0; i < NB; i++) bs[i] = _mm512_setzero_ps();
        #pragma GCC unroll 16
        for (int j = 0; j < 8; j++) {
            __m512i B[8];
            #pragma GCC unroll 16
            for (int u = 0; u < 8; u++) B[u] = _mm512_load_si512((const void *)(o + 512 * j + 64 * u));
            const __m512 dsc = _mm512_load_ps((const void *)(o + 4096 + 64 * j));
            #pragma GCC unroll 16
            for (int i = 0; i < NB; i++) {
                const uint8_t *aq = ab + (size_t)i * stride + RP_Q8K_QS + 32 * j;
                __m512i acc = _mm512_dpbusd_epi32(_mm512_setzero_si512(), B[0], bc32(aq));
                __m512i acc2 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), B[1], bc32(aq + 4));
                #pragma GCC unroll 16
                for (int u = 2; u < 8; u += 2) {
                    acc = _mm512_dpbusd_epi32(acc, B[u], bc32(aq + 4 * u));
                    acc2 = _mm512_dpbusd_epi32(acc2, B[u + 1], bc32(aq + 4 * u + 4));
                }
                bs[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(acc, acc2)), dsc, bs[i]);
            }
        }
        __m512i mp[4];
        #pragma GCC unroll 16
        for (int p = 0; p < 4; p++) mp[p] = _mm512_load_si512((const void *)(o + 4672 + 64 * p));
        const __m512 dm = _mm512_load_ps((const void *)(o + 4608));
        #pragma GCC unroll 16
        for (int i = 0; i < NB; i++) {
            const uint8_t *ai = ab + (size_t)i * stride;
            const uint8_t *s32 = act + (size_t)i * stride + s32off + 16 * b;
            __m512i ms = _mm512_dpwssd_epi32(_mm512_setzero_si512(), mp[0], bc32(s32));
            #pragma GCC unroll 16
            for (int p = 1; p < 4; p++) ms = _mm512_dpwssd_epi32(ms, mp[p], bc32(s32 + 4 * p));
            bs[i] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(ms), dm, bs[i]);
            float da;
            memcpy(&da, ai, sizeof da);
            tot[i] = _mm512_fmadd_ps(bs[i], _mm512_set1_ps(da), tot[i]);
        }
    }
    #pragma GCC unroll 16
    for (int i = 0; i < NB; i++) _mm512_mask_storeu_ps(y + i * ldy, km, tot[i]);
}

#define Q4K_NB 8   /* activation rows per register block: 8 quants + 2 per row + temporaries <= 32 zmm */

/* Groups unpacked per batch: each activation row chunk (hot in L1/L2) is used
 * against up to 4 groups, keeping the unpacked batch within ~256 KB of L2. */
static int q4k_batch(int64_t nb) {
    const int64_t g = (256 << 10) / (nb * RP_Q4K_WU);
    return g < 1 ? 1 : g > 4 ? 4 : (int)g;
}

static size_t q4k_scratch_avx512(int64_t cols, int64_t n) {
    const int64_t nb = cols / RP_QK_K;
    return n > 1 ? (size_t)q4k_batch(nb) * (size_t)nb * RP_Q4K_WU : 0;
}

static void q4k_rows_n(const uint8_t *wu, int64_t nb, const uint8_t *a, size_t stride, int64_t s32off, int nr, float *y,
                      int64_t ldy, __mmask16 km) {
    switch (nr) {
    case 8: q4k_gemm_rows(wu, nb, a, stride, s32off, 8, y, ldy, km); break;
    case 7: q4k_gemm_rows(wu, nb, a, stride, s32off, 7, y, ldy, km); break;
    case 6: q4k_gemm_rows(wu, nb, a, stride, s32off, 6, y, ldy, km); break;
    case 5: q4k_gemm_rows(wu, nb, a, stride, s32off, 5, y, ldy, km); break;
    case 4: q4k_gemm_rows(wu, nb, a, stride, s32off, 4, y, ldy, km); break;
    case 3: q4k_gemm_rows(wu, nb, a, stride, s32off, 3, y, ldy, km); break;
    case 2: q4k_gemm_rows(wu, nb, a, stride, s32off, 2, y, ldy, km); break;
    case 1: q4k_gemm_rows(wu, nb, a, stride, s32off, 1, y, ldy, km); break;
    default: break;
    }
}

void rp_q4_k_gemm_avx512(const void *w, size_t w_row_bytes, int64_t rows, int64_t cols, const void *act,
                         size_t act_stride, int64_t n, int64_t r0, int64_t r1, float *y, int64_t ldy, void *scratch) {
    (void)w_row_bytes; (void)rows;
    const int64_t nb = cols / RP_QK_K;
    const int64_t s32off = (int64_t)rp_q8k_x86_s32_off(cols);
    const uint8_t *A = act;
    uint8_t *wu = scratch;
    const int64_t g0 = r0 / RP_KQ_ROWS, g1 = (r1 + RP_KQ_ROWS - 1) / RP_KQ_ROWS;
    if (n == 1 || !wu) {   /* decode: weights streamed once, no scratch */
        for (int64_t g = g0; g < g1; g++) {
            const uint8_t *wg = (const uint8_t *)w + (size_t)(g * nb) * RP_Q4K_GB;
            const int64_t rb = g * RP_KQ_ROWS, cnt = r1 - rb;
            const __mmask16 km = cnt >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << cnt) - 1);
            for (int64_t i = 0; i < n; i++) _mm512_mask_storeu_ps(y + i * ldy + rb, km, q4k_gemv_group(wg, nb, A + i * act_stride, s32off));
        }
        return;
    }
    const int batch = q4k_batch(nb);
    for (int64_t gb = g0; gb < g1; gb += batch) {
        const int ng = g1 - gb < batch ? (int)(g1 - gb) : batch;
        for (int gi = 0; gi < ng; gi++)
            q4k_unpack_group((const uint8_t *)w + (size_t)((gb + gi) * nb) * RP_Q4K_GB, nb, wu + (size_t)(gi * nb) * RP_Q4K_WU);
        for (int64_t i = 0; i < n; i += Q4K_NB) {
            const int nr = n - i < Q4K_NB ? (int)(n - i) : Q4K_NB;
            for (int gi = 0; gi < ng; gi++) {
                const int64_t rb = (gb + gi) * RP_KQ_ROWS, cnt = r1 - rb;
                const __mmask16 km = cnt >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << cnt) - 1);
                q4k_rows_n(wu + (size_t)(gi * nb) * RP_Q4K_WU, nb, A + i * act_stride, act_stride, s32off, nr, y + i * ldy + rb, ldy, km);
            }
        }
    }
}

const rp_mm_kernel rp_mm_q4_k_avx512 = {
    "q4_k/avx512", RP_TYPE_Q4_K, RP_CPU_AVX512, RP_TYPE_Q8_K, RP_KQ_ROWS, rp_q4_k_x86_packed_size, rp_q4_k_x86_pack,
    rp_q8k_x86_act_row_size, rp_q8k_quant_act_avx512, q4k_scratch_avx512, rp_q4_k_gemm_avx512,
};
