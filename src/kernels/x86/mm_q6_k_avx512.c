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

/* The four u8 K-quad lines of sub-block 2s+hh (16 rows x 16 K, q in [0, 63])
 * from ql lines l0 (K-quads 0, 1) and l1 (2, 3) and qh line x (kquant_x86.h):
 * q = lo4 | hi2 << 4, via one VPTERNLOG (A | (B & 0x30)) each. */
static inline __attribute__((always_inline)) void q6k_unpack(__m512i l0, __m512i l1, __m512i x, __m512i *q) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
    q[0] = _mm512_ternarylogic_epi32(_mm512_and_si512(l0, m4), _mm512_slli_epi16(x, 4), m30, 0xF8);
    q[1] = _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi16(l0, 4), m4), _mm512_slli_epi16(x, 2), m30, 0xF8);
    q[2] = _mm512_ternarylogic_epi32(_mm512_and_si512(l1, m4), x, m30, 0xF8);
    q[3] = _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi16(l1, 4), m4), _mm512_srli_epi16(x, 2), m30, 0xF8);
}

/* (sc[r][2p], sc[r][2p+1]) as int16 pairs per lane, from the [g][r] scales. */
static inline __m512i q6k_sc_pair(const uint8_t *wb, int p) {
    const __m128i a = _mm_load_si128((const __m128i *)(wb + RP_Q6K_OFF_SC + 32 * p));
    const __m128i c = _mm_load_si128((const __m128i *)(wb + RP_Q6K_OFF_SC + 32 * p + 16));
    return _mm512_cvtepi8_epi16(_mm256_set_m128i(_mm_unpackhi_epi8(a, c), _mm_unpacklo_epi8(a, c)));
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
        __m512i isum = _mm512_setzero_si512(), isum2 = _mm512_setzero_si512();
        #pragma GCC unroll 16
        for (int s = 0; s < 8; s++) {
            const uint8_t *ws = wb + 384 * s;
            #pragma GCC unroll 16
            for (int hh = 0; hh < 2; hh++) {
                __m512i q[4];
                q6k_unpack(_mm512_load_si512((const void *)(ws + 128 * hh)),
                           _mm512_load_si512((const void *)(ws + 128 * hh + 64)),
                           _mm512_load_si512((const void *)(ws + 256 + 64 * hh)), q);
                const int g = 2 * s + hh;
                const uint8_t *aq = ab + RP_Q8K_QS + 16 * g;
                __m512i acc = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q[0], bc32(aq));
                __m512i acc2 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q[1], bc32(aq + 4));
                acc = _mm512_dpbusd_epi32(acc, q[2], bc32(aq + 8));
                acc2 = _mm512_dpbusd_epi32(acc2, q[3], bc32(aq + 12));
                const __m512i sc = _mm512_cvtepi8_epi32(_mm_load_si128((const __m128i *)(wb + RP_Q6K_OFF_SC + 16 * g)));
                const __m512i v = _mm512_mullo_epi32(_mm512_add_epi32(acc, acc2), sc);
                if (hh) isum2 = _mm512_add_epi32(isum2, v); else isum = _mm512_add_epi32(isum, v);
            }
        }
        __m512i os = _mm512_setzero_si512();
        #pragma GCC unroll 16
        for (int p = 0; p < 8; p++) os = _mm512_dpwssd_epi32(os, q6k_sc_pair(wb, p), bc32(ab + RP_Q8K_BSUMS + 4 * p));
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
        for (int s = 0; s < 8; s++) {
            const uint8_t *ws = wb + 384 * s;
            for (int hh = 0; hh < 2; hh++) {
                __m512i q[4];
                q6k_unpack(_mm512_load_si512((const void *)(ws + 128 * hh)),
                           _mm512_load_si512((const void *)(ws + 128 * hh + 64)),
                           _mm512_load_si512((const void *)(ws + 256 + 64 * hh)), q);
#pragma GCC unroll 4
                for (int u = 0; u < 4; u++) _mm512_store_si512((void *)(o + 256 * (2 * s + hh) + 64 * u), q[u]);
            }
        }
        const __m512 d = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(wb + RP_Q6K_OFF_D)));
        for (int g = 0; g < 16; g++) {
            const __m512i sc = _mm512_cvtepi8_epi32(_mm_load_si128((const __m128i *)(wb + RP_Q6K_OFF_SC + 16 * g)));
            _mm512_store_ps((void *)(o + 4096 + 64 * g), _mm512_mul_ps(d, _mm512_cvtepi32_ps(sc)));
        }
        for (int p = 0; p < 8; p++) _mm512_store_si512((void *)(o + 5120 + 64 * p), q6k_sc_pair(wb, p));
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

static size_t q6k_scratch_avx512(int64_t cols, int64_t n) {
    return n > 1 ? (size_t)(cols / RP_QK_K) * RP_Q6K_WU : 0;
}

void rp_q6_k_gemm_avx512(const void *w, size_t w_row_bytes, int64_t rows, int64_t cols, const void *act,
                         size_t act_stride, int64_t n, int64_t r0, int64_t r1, float *y, int64_t ldy, void *scratch) {
    (void)w_row_bytes; (void)rows;
    const int64_t nb = cols / RP_QK_K;
    const uint8_t *A = act;
    uint8_t *wu = scratch;
    for (int64_t g = r0 / RP_KQ_ROWS; g * RP_KQ_ROWS < r1; g++) {
        const uint8_t *wg = (const uint8_t *)w + (size_t)(g * nb) * RP_Q6K_GB;
        const int64_t rb = g * RP_KQ_ROWS;
        const int64_t cnt = r1 - rb;
        const __mmask16 km = cnt >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << cnt) - 1);
        if (n == 1 || !wu) {   /* decode (no scratch is ever needed for it) */
            for (int64_t i = 0; i < n; i++)
                _mm512_mask_storeu_ps(y + i * ldy + rb, km, q6k_gemv_group(wg, nb, A + i * act_stride));
            continue;
        }
        q6k_unpack_group(wg, nb, wu);
        int64_t i = 0;
        for (; i + Q6K_NB <= n; i += Q6K_NB)
            q6k_gemm_rows(wu, nb, A + i * act_stride, act_stride, Q6K_NB, y + i * ldy + rb, ldy, km);
        const uint8_t *Ai = A + i * act_stride;
        float *yi = y + i * ldy + rb;
        switch (n - i) {
        case 7: q6k_gemm_rows(wu, nb, Ai, act_stride, 7, yi, ldy, km); break;
        case 6: q6k_gemm_rows(wu, nb, Ai, act_stride, 6, yi, ldy, km); break;
        case 5: q6k_gemm_rows(wu, nb, Ai, act_stride, 5, yi, ldy, km); break;
        case 4: q6k_gemm_rows(wu, nb, Ai, act_stride, 4, yi, ldy, km); break;
        case 3: q6k_gemm_rows(wu, nb, Ai, act_stride, 3, yi, ldy, km); break;
        case 2: q6k_gemm_rows(wu, nb, Ai, act_stride, 2, yi, ldy, km); break;
        case 1: q6k_gemm_rows(wu, nb, Ai, act_stride, 1, yi, ldy, km); break;
        default: break;
        }
    }
}

const rp_mm_kernel rp_mm_q6_k_avx512 = {
    "q6_k/avx512", RP_TYPE_Q6_K, RP_CPU_AVX512, RP_TYPE_Q8_K, RP_KQ_ROWS, rp_q6_k_x86_packed_size, rp_q6_k_x86_pack,
    rp_q8k_x86_act_row_size, rp_q8k_quant_act_avx512, q6k_scratch_avx512, rp_q6_k_gemm_avx512,
};
