/* mm_q4_k_amx.c — Q4_K x Q8_K prefill on AMX tiles (TDPBSSD on exact scale-digit planes); VNNI for small n. */
#include <immintrin.h>
#include <string.h>

#include "kernels/kernels.h"
#include "kernels/quant.h"
#include "kernels/x86/amx.h"
#include "kernels/x86/kquant_x86.h"

/* The B planes of blocks [b0, b0+nblk) of one group (kquant_x86.h, "AMX"):
 * per sub-block j (32 K = tile rows 8(j&1) .. +8 of step 4*bi + j/2), the
 * unpacked u8 quants times s0 = sc & 7 and s1 = sc >> 3 (VPMULLW on words is
 * exact per byte: both products are < 256), and m[r][j] in all 4 bytes. */
static void q4k_build(const uint8_t *wg, int64_t b0, int nblk, uint8_t *planes) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), lo16 = _mm512_set1_epi32(0xFFFF), seven = _mm512_set1_epi32(7);
    for (int bi = 0; bi < nblk; bi++) {
        const uint8_t *wb = wg + (size_t)(b0 + bi) * RP_Q4K_GB;
        #pragma GCC unroll 16
        for (int j = 0; j < 8; j++) {
            uint8_t *t0 = planes + (size_t)((4 * bi + j / 2) * 3) * 1024 + 512 * (j & 1);
            const __m512i sc = _mm512_cvtepu8_epi32(_mm_load_si128((const __m128i *)(wb + RP_Q4K_OFF_SC + 16 * j)));
            __m512i s0 = _mm512_and_si512(sc, seven), s1 = _mm512_srli_epi32(sc, 3);
            s0 = _mm512_or_si512(s0, _mm512_slli_epi32(s0, 16));
            s1 = _mm512_or_si512(s1, _mm512_slli_epi32(s1, 16));
            const __m512i mp = _mm512_cvtepu8_epi16(_mm256_load_si256((const __m256i *)(wb + RP_Q4K_OFF_M + 32 * (j >> 1))));
            const __m512i mj = (j & 1) ? _mm512_srli_epi32(mp, 16) : _mm512_and_si512(mp, lo16);
            const __m512i mb = _mm512_mullo_epi32(mj, _mm512_set1_epi32(0x01010101));
            #pragma GCC unroll 16
            for (int t = 0; t < 4; t++) {
                const __m512i v = _mm512_load_si512((const void *)(wb + 64 * (4 * j + t)));
                const __m512i qa = _mm512_and_si512(v, m4), qb = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
                uint8_t *r = t0 + 128 * t;   /* tile rows 2t, 2t+1 of this sub-block */
                _mm512_store_si512((void *)r, _mm512_mullo_epi16(qa, s0));
                _mm512_store_si512((void *)(r + 64), _mm512_mullo_epi16(qb, s0));
                _mm512_store_si512((void *)(r + 1024), _mm512_mullo_epi16(qa, s1));
                _mm512_store_si512((void *)(r + 1024 + 64), _mm512_mullo_epi16(qb, s1));
                _mm512_store_si512((void *)(r + 2048), mb);
                _mm512_store_si512((void *)(r + 2048 + 64), mb);
            }
        }
    }
}

extern const rp_mm_kernel rp_mm_q4_k_avx512;

/* The AMX planes, and what the VNNI kernel needs for n < 16 or the n % 16
 * leftover rows (they run one after the other, so they share it). Monotone
 * in n: the driver reserves for its largest n and runs smaller ones. */
static size_t q4k_amx_scratch(int64_t cols, int64_t n) {
    const size_t v = rp_mm_q4_k_avx512.scratch_bytes(cols, n < 2 ? n : 2);
    return n >= 16 && v < RP_KQ_AMX_SCRATCH ? RP_KQ_AMX_SCRATCH : v;
}

/* Whole 16-row activation tiles on AMX; the remaining n % 16 rows (and all of
 * n < 16: decode and tiny batches) on the AVX-512 VNNI kernel, same packing. */
static void q4k_gemm_amx(const void *w, size_t w_row_bytes, int64_t rows, int64_t cols, const void *act,
                         size_t act_stride, int64_t n, int64_t r0, int64_t r1, float *y, int64_t ldy, void *scratch) {
    const int64_t ntile = n / 16;
    if (ntile > 0) {
        rp_amx_cfg saved;
        const int changed = rp_kq_amx_enter(&saved);
        rp_kq_amx_gemm(w, RP_Q4K_GB, cols, act, act_stride, ntile, r0, r1, y, ldy, scratch, q4k_build, 0, RP_Q4K_OFF_D,
                       RP_Q4K_OFF_DMIN);
        rp_kq_amx_leave(&saved, changed);
    }
    if (n > 16 * ntile)
        rp_q4_k_gemm_avx512(w, w_row_bytes, rows, cols, (const uint8_t *)act + (size_t)(16 * ntile) * act_stride,
                            act_stride, n - 16 * ntile, r0, r1, y + 16 * ntile * ldy, ldy, scratch);
}

const rp_mm_kernel rp_mm_q4_k_amx = {
    "q4_k/amx", RP_TYPE_Q4_K, RP_CPU_AMX, RP_TYPE_Q8_K, RP_KQ_ROWS, rp_q4_k_x86_packed_size, rp_q4_k_x86_pack,
    rp_q8k_x86_act_row_size, rp_q8k_quant_act_avx512, q4k_amx_scratch, q4k_gemm_amx,
};
