/* mm_q6_k_amx.c — Q6_K x Q8_K prefill on AMX tiles (TDPBSSD on exact scale-digit planes); VNNI for small n. */
#include <immintrin.h>
#include <string.h>

#include "kernels/kernels.h"
#include "kernels/quant.h"
#include "kernels/x86/amx.h"
#include "kernels/x86/kquant_x86.h"

/* Per-byte product of int8 x (in -32..31) and a per-lane digit e (in -3..4,
 * replicated in both words of the dword) with e*x in int8 range. VPMULLW of
 * the word gives the low byte's product mod 256 exactly; the high byte's comes
 * from the word with its low byte cleared. */
static inline __m512i mul_digit(__m512i x, __m512i xhi, __m512i e) {
    const __m512i plo = _mm512_mullo_epi16(x, e), phi = _mm512_mullo_epi16(xhi, e);
    return _mm512_ternarylogic_epi32(plo, phi, _mm512_set1_epi16(0x00FF), 0xE4);   /* C ? A : B */
}

/* Balanced base-8 digits of sc in -128..127: sc = e0 + 8 e1 + 64 e2, each in
 * -3..4, replicated into both 16-bit halves of the lane. */
static inline void digits(__m512i sc, __m512i e[3]) {
    const __m512i three = _mm512_set1_epi32(3), seven = _mm512_set1_epi32(7), lo16 = _mm512_set1_epi32(0xFFFF);
    __m512i r = sc;
    #pragma GCC unroll 16
    for (int k = 0; k < 3; k++) {
        const __m512i d = _mm512_sub_epi32(_mm512_and_si512(_mm512_add_epi32(r, three), seven), three);
        r = _mm512_srai_epi32(_mm512_sub_epi32(r, d), 3);
        e[k] = _mm512_or_si512(_mm512_and_si512(d, lo16), _mm512_slli_epi32(d, 16));
    }
}

/* The B planes of blocks [b0, b0+nblk) of one group: sub-block g (16 K) is
 * tile rows 4(g&3) .. +4 of step 4*bi + g/4; x = q - 32 times each digit of
 * sc_g. */
static void q6k_build(const uint8_t *wg, int64_t b0, int nblk, uint8_t *planes) {
    const __m512i c32 = _mm512_set1_epi8(32), hib = _mm512_set1_epi16((short)0xFF00);
    for (int bi = 0; bi < nblk; bi++) {
        const uint8_t *wb = wg + (size_t)(b0 + bi) * RP_Q6K_GB;
        for (int p = 0; p < 8; p++) {
            const __m512i sp = rp_q6k_sc_pair(wb, p);
            for (int e = 0; e < 2; e++) {
                const int g = 2 * p + e;
                __m512i q[4], dg[3];
                rp_q6k_unpack(wb + 192 * g, q);
                digits(e ? rp_q6k_sc_odd(sp) : rp_q6k_sc_even(sp), dg);
                uint8_t *r = planes + (size_t)((4 * bi + g / 4) * 3) * 1024 + 256 * (g & 3);
                #pragma GCC unroll 4
                for (int u = 0; u < 4; u++) {
                    const __m512i xs = _mm512_sub_epi8(q[u], c32), xh = _mm512_and_si512(xs, hib);
                    #pragma GCC unroll 3
                    for (int k = 0; k < 3; k++) _mm512_store_si512((void *)(r + 64 * u + 1024 * k), mul_digit(xs, xh, dg[k]));
                }
            }
        }
    }
}

extern const rp_mm_kernel rp_mm_q6_k_avx512;

/* The AMX planes, and what the VNNI kernel needs for n < 16 or the n % 16
 * leftover rows (they run one after the other, so they share it). Monotone
 * in n: the driver reserves for its largest n and runs smaller ones. */
static size_t q6k_amx_scratch(int64_t cols, int64_t n) {
    const size_t v = rp_mm_q6_k_avx512.scratch_bytes(cols, n < 2 ? n : 2);
    return n >= 16 && v < RP_KQ_AMX_SCRATCH ? RP_KQ_AMX_SCRATCH : v;
}

/* Whole 16-row activation tiles on AMX; the remaining n % 16 rows (and all of
 * n < 16) on the AVX-512 VNNI kernel, same packing. */
static void q6k_gemm_amx(const void *w, size_t w_row_bytes, int64_t rows, int64_t cols, const void *act,
                         size_t act_stride, int64_t n, int64_t r0, int64_t r1, float *y, int64_t ldy, void *scratch) {
    const int64_t ntile = n / 16;
    if (ntile > 0) {
        rp_amx_cfg saved;
        const int changed = rp_kq_amx_enter(&saved);
        rp_kq_amx_gemm(w, RP_Q6K_GB, cols, act, act_stride, ntile, r0, r1, y, ldy, scratch, q6k_build, 1, RP_Q6K_OFF_D,
                       RP_Q6K_OFF_D);
        rp_kq_amx_leave(&saved, changed);
    }
    if (n > 16 * ntile)
        rp_q6_k_gemm_avx512(w, w_row_bytes, rows, cols, (const uint8_t *)act + (size_t)(16 * ntile) * act_stride,
                            act_stride, n - 16 * ntile, r0, r1, y + 16 * ntile * ldy, ldy, scratch);
}

const rp_mm_kernel rp_mm_q6_k_amx = {
    "q6_k/amx", RP_TYPE_Q6_K, RP_CPU_AMX, RP_TYPE_Q8_K, RP_KQ_ROWS, rp_q6_k_x86_packed_size, rp_q6_k_x86_pack,
    rp_q8k_x86_act_row_size, rp_q8k_quant_act_avx512, q6k_amx_scratch, q6k_gemm_amx,
};
