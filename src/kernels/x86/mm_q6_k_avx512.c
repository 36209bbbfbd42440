/* mm_q6_k_avx512.c — Q6_K x Q8_K matmul for AVX-512 VNNI: VPDPBUSD GEMV and register-blocked GEMM. */
#include <immintrin.h>
#include <string.h>

#include "kernels/kernels.h"
#include "kernels/quant.h"
#include "kernels/x86/kquant_x86.h"

static inline __m512i bc32(const uint8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);   /* folds into the {1to16} memory operand */
}

/* Decode, n = 1: per sub-block g (16 K) 4 VPDPBUSD of u8 q against the
 * activation quads, times sc_g (int32 lanes); the -32 offset once per block
 * through the bsums: isum - 32 * sum_g sc_g bsum_g (8 VPDPWSSD).
 * |isum| <= 256*63*127*128 and |offset| <= 32*16*2032*128, both < 2^31. */
static inline __m512 q6k_gemv_group(const uint8_t *wg, int64_t nb, const uint8_t *a) {
    __m512 tot = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *wb = wg + b * RP_Q6K_GB;
        const uint8_t *ab = a + b * RP_Q8K_BLOCK;
        _mm_prefetch((const char *)(wb + 3 * RP_Q6K_GB), _MM_HINT_T0);
        __m512i isum = _mm512_setzero_si512(), isum2 = _mm512_setzero_si512(), os = _mm512_setzero_si512();
        #pragma GCC unroll 8
        for (int p = 0; p < 8; p++) {
            const __m512i sp = rp_q6k_sc_pair(wb, p);
            os = _mm512_dpwssd_epi32(os, sp, bc32(ab + RP_Q8K_BSUMS + 4 * p));
            #pragma GCC unroll 2
            for (int e = 0; e < 2; e++) {
                const int g = 2 * p + e;
                __m512i q[4];
                rp_q6k_unpack(wb + 192 * g, q);
                const uint8_t *aq = ab + RP_Q8K_QS + 16 * g;
                __m512i acc = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q[0], bc32(aq));
                __m512i acc2 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q[1], bc32(aq + 4));
                acc = _mm512_dpbusd_epi32(acc, q[2], bc32(aq + 8));
                acc2 = _mm512_dpbusd_epi32(acc2, q[3], bc32(aq + 12));
                const __m512i v = _mm512_mullo_epi32(_mm512_add_epi32(acc, acc2), e ? rp_q6k_sc_odd(sp) : rp_q6k_sc_even(sp));
                if (e) isum2 = _mm512_add_epi32(isum2, v); else isum = _mm512_add_epi32(isum, v);
            }
        }
        isum = _mm512_sub_epi32(_mm512_add_epi32(isum, isum2), _mm512_slli_epi32(os, 5));
        float da;
        memcpy(&da, ab, sizeof da);
        const __m512 d = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(wb + RP_Q6K_OFF_D)));
        tot = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(d, _mm512_set1_ps(da)), tot);
    }
    return tot;
}

/* Prefill without AMX. Each 16-row group is first unpacked into scratch
 * (RP_Q6K_WU bytes per block), once per call, for all activation rows:
 *   +0     q    [16 sub-blocks][4 K-quads] x 64 B: u8 q in [0, 63], lane r =
 *               row r's 4 K (the VPDPBUSD unsigned operand)
 *   +4096  dsc  [16][16] fp32 d*sc_g per row
 *   +5120  sp   [8][16] int16 pairs (sc[r][2p], sc[r][2p+1]) for the offset
 *   +5632  d32  [16] fp32 32*d
 * Then NB activation rows at a time share a span's 8 quant registers: per row
 * and sub-block 4 VPDPBUSD (|acc| <= 16*63*128) and one convert + FMA with
 * d*sc_g; per row and block the -32 offset, 32*d*sum_g sc_g*bsum_g (8 VPDPWSSD,
 * exact int32), and one FMA with da. */
#define RP_Q6K_WU 5696

static void q6k_unpack_group(const uint8_t *wg, int64_t nb, uint8_t *wu) {
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *wb = wg + b * RP_Q6K_GB;
        uint8_t *o = wu + b * RP_Q6K_WU;
        for (int g = 0; g < 16; g++) {
            __m512i q[4];
            rp_q6k_unpack(wb + 192 * g, q);
            #pragma GCC unroll 4
            for (int u = 0; u < 4; u++) _mm512_store_si512((void *)(o + 256 * g + 64 * u), q[u]);
        }
        const __m512 d = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(wb + RP_Q6K_OFF_D)));
        for (int p = 0; p < 8; p++) {
            const __m512i sp = rp_q6k_sc_pair(wb, p);
            _mm512_store_si512((void *)(o + 5120 + 64 * p), sp);
            _mm512_store_ps((void *)(o + 4096 + 128 * p), _mm512_mul_ps(d, _mm512_cvtepi32_ps(rp_q6k_sc_even(sp))));
            _mm512_store_ps((void *)(o + 4096 + 128 * p + 64), _mm512_mul_ps(d, _mm512_cvtepi32_ps(rp_q6k_sc_odd(sp))));
        }
        _mm512_store_ps((void *)(o + 5632), _mm512_mul_ps(d, _mm512_set1_ps(32.0f)));
    }
}

static inline __attribute__((always_inline)) void q6k_gemm_rows(const uint8_t *wu, int64_t nb, const uint8_t *act,
                                                                size_t stride, const int NB, float *y, int64_t ldy,
                                                                __mmask16 km) {
    __m512 tot[10];
    #pragma GCC unroll 16
    for (int i = 0; i < NB; i++) tot[i] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *o = wu + b * RP_Q6K_WU;
        const uint8_t *ab = act + b * RP_Q8K_BLOCK;
        __m512 bs[10];
        #pragma GCC unroll 16
        for (int i = 0; i < NB; i++) bs[i] = _mm512_setzero_ps();
        for (int s = 0; s < 8; s++) {
            __m512i B[8];
            #pragma GCC unroll 8
            for (int u = 0; u < 8; u++) B[u] = _mm512_load_si512((const void *)(o + 512 * s + 64 * u));
            const __m512 dsc0 = _mm512_load_ps((const void *)(o + 4096 + 128 * s));
            const __m512 dsc1 = _mm512_load_ps((const void *)(o + 4096 + 128 * s + 64));
            #pragma GCC unroll 16
            for (int i = 0; i < NB; i++) {
                const uint8_t *aq = ab + (size_t)i * stride + RP_Q8K_QS + 32 * s;
                __m512i acc0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), B[0], bc32(aq));
                __m512i acc1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), B[4], bc32(aq + 16));
                #pragma GCC unroll 4
                for (int u = 1; u < 4; u++) {
                    acc0 = _mm512_dpbusd_epi32(acc0, B[u], bc32(aq + 4 * u));
                    acc1 = _mm512_dpbusd_epi32(acc1, B[4 + u], bc32(aq + 16 + 4 * u));
                }
                bs[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc0), dsc0, bs[i]);
                bs[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc1), dsc1, bs[i]);
            }
        }
        __m512i sp[8];
        #pragma GCC unroll 8
        for (int p = 0; p < 8; p++) sp[p] = _mm512_load_si512((const void *)(o + 5120 + 64 * p));
        const __m512 d32 = _mm512_load_ps((const void *)(o + 5632));
        #pragma GCC unroll 16
        for (int i = 0; i < NB; i++) {
            const uint8_t *ai = ab + (size_t)i * stride;
            __m512i os = _mm512_dpwssd_epi32(_mm512_setzero_si512(), sp[0], bc32(ai + RP_Q8K_BSUMS));
            #pragma GCC unroll 8
            for (int p = 1; p < 8; p++) os = _mm512_dpwssd_epi32(os, sp[p], bc32(ai + RP_Q8K_BSUMS + 4 * p));
            bs[i] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(os), d32, bs[i]);
            float da;
            memcpy(&da, ai, sizeof da);
            tot[i] = _mm512_fmadd_ps(bs[i], _mm512_set1_ps(da), tot[i]);
        }
    }
    #pragma GCC unroll 16
    for (int i = 0; i < NB; i++) _mm512_mask_storeu_ps(y + i * ldy, km, tot[i]);
}

#define Q6K_NB 8   /* 8 quant zmm + 2 scales + 2 per row + temporaries <= 32 */

/* Groups unpacked per batch: each activation row chunk (hot in L1/L2) is used
 * against up to 4 groups, keeping the unpacked batch within ~256 KB of L2. */
static int q6k_batch(int64_t nb) {
    const int64_t g = (256 << 10) / (nb * RP_Q6K_WU);
    return g < 1 ? 1 : g > 4 ? 4 : (int)g;
}

static size_t q6k_scratch_avx512(int64_t cols, int64_t n) {
    const int64_t nb = cols / RP_QK_K;
    return n > 1 ? (size_t)q6k_batch(nb) * (size_t)nb * RP_Q6K_WU : 0;
}

static void q6k_rows_n(const uint8_t *wu, int64_t nb, const uint8_t *a, size_t stride, int nr, float *y,
                      int64_t ldy, __mmask16 km) {
    switch (nr) {
    case 8: q6k_gemm_rows(wu, nb, a, stride, 8, y, ldy, km); break;
    case 7: q6k_gemm_rows(wu, nb, a, stride, 7, y, ldy, km); break;
    case 6: q6k_gemm_rows(wu, nb, a, stride, 6, y, ldy, km); break;
    case 5: q6k_gemm_rows(wu, nb, a, stride, 5, y, ldy, km); break;
    case 4: q6k_gemm_rows(wu, nb, a, stride, 4, y, ldy, km); break;
    case 3: q6k_gemm_rows(wu, nb, a, stride, 3, y, ldy, km); break;
    case 2: q6k_gemm_rows(wu, nb, a, stride, 2, y, ldy, km); break;
    case 1: q6k_gemm_rows(wu, nb, a, stride, 1, y, ldy, km); break;
    default: break;
    }
}

void rp_q6_k_gemm_avx512(const void *w, size_t w_row_bytes, int64_t rows, int64_t cols, const void *act,
                         size_t act_stride, int64_t n, int64_t r0, int64_t r1, float *y, int64_t ldy, void *scratch) {
    (void)w_row_bytes; (void)rows;
    const int64_t nb = cols / RP_QK_K;
    const uint8_t *A = act;
    uint8_t *wu = scratch;
    const int64_t g0 = r0 / RP_KQ_ROWS, g1 = (r1 + RP_KQ_ROWS - 1) / RP_KQ_ROWS;
    if (n == 1 || !wu) {   /* decode: weights streamed once, no scratch */
        for (int64_t g = g0; g < g1; g++) {
            const uint8_t *wg = (const uint8_t *)w + (size_t)(g * nb) * RP_Q6K_GB;
            const int64_t rb = g * RP_KQ_ROWS, cnt = r1 - rb;
            const __mmask16 km = cnt >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << cnt) - 1);
            for (int64_t i = 0; i < n; i++) _mm512_mask_storeu_ps(y + i * ldy + rb, km, q6k_gemv_group(wg, nb, A + i * act_stride));
        }
        return;
    }
    const int batch = q6k_batch(nb);
    for (int64_t gb = g0; gb < g1; gb += batch) {
        const int ng = g1 - gb < batch ? (int)(g1 - gb) : batch;
        for (int gi = 0; gi < ng; gi++)
            q6k_unpack_group((const uint8_t *)w + (size_t)((gb + gi) * nb) * RP_Q6K_GB, nb, wu + (size_t)(gi * nb) * RP_Q6K_WU);
        for (int64_t i = 0; i < n; i += Q6K_NB) {
            const int nr = n - i < Q6K_NB ? (int)(n - i) : Q6K_NB;
            for (int gi = 0; gi < ng; gi++) {
                const int64_t rb = (gb + gi) * RP_KQ_ROWS, cnt = r1 - rb;
                const __mmask16 km = cnt >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << cnt) - 1);
                q6k_rows_n(wu + (size_t)(gi * nb) * RP_Q6K_WU, nb, A + i * act_stride, act_stride, nr, y + i * ldy + rb, ldy, km);
            }
        }
    }
}

const rp_mm_kernel rp_mm_q6_k_avx512 = {
    "q6_k/avx512", RP_TYPE_Q6_K, RP_CPU_AVX512, RP_TYPE_Q8_K, RP_KQ_ROWS, rp_q6_k_x86_packed_size, rp_q6_k_x86_pack,
    rp_q8k_x86_act_row_size, rp_q8k_quant_act_avx512, q6k_scratch_avx512, rp_q6_k_gemm_avx512,
};
