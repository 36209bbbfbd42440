/* q8x_avx2_driver.h — the AVX2 tile store and GEMV/GEMM driver shared by the Q4_0 and Q8_0 AVX2 kernel families. */
#ifndef RP_Q8X_AVX2_DRIVER_H
#define RP_Q8X_AVX2_DRIVER_H

/* A template, included once by mm_q4_0_avx2.c and mm_q8_0_avx2.c after they
 * define RB (rows per group, 8), QB (quant bytes per row per block) and
 *   RP_Q8X_INLINE void tile(int MR, int NG, const uint8_t *w0, size_t gb, int64_t nb, int64_t cols,
 *                           const uint8_t *act, size_t astride, float *y, int64_t ldy, int valid, int64_t gs);
 * (MR activation rows x NG groups gs groups apart, ending with rp_q8x_avx2_store)
 * and optionally NS (default 1).
 * The two families differ only in how a block's dot products are formed;
 * tile shapes, the GEMV/GEMM split and partial-group stores are common. */

/* Stores MR x NG accumulators of 8 rows each; only the last group may hold
 * fewer than RB valid rows (masked store). */
RP_Q8X_INLINE void rp_q8x_avx2_store(const int MR, const int NG, __m256 accf[4][4], float *y, int64_t ldy, int valid,
                                     int64_t gs) {
    RP_Q8X_UNROLL for (int g = 0; g < NG; g++) {
        const int v = g + 1 < NG ? RB : valid;
        if (v == RB) {
            RP_Q8X_UNROLL for (int m = 0; m < MR; m++) _mm256_storeu_ps(y + m * ldy + g * gs * RB, accf[m][g]);
        } else {
            const __m256i k = _mm256_cmpgt_epi32(_mm256_set1_epi32(v), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
            RP_Q8X_UNROLL for (int m = 0; m < MR; m++) _mm256_maskstore_ps(y + m * ldy + g * gs * RB, k, accf[m][g]);
        }
    }
}

#endif /* RP_Q8X_AVX2_DRIVER_H */

#ifdef RP_Q8X_AVX2_DRIVER_GEMM
/* NS: fp16 arrays per super-block (q8_0_x86.h; 2 for the min types of
 * mm_legacy_avx2.c, which also rename tile and gemm per type) */
#ifndef NS
#define NS 1
#endif
static void gemm(const void *w, size_t w_row_bytes, int64_t rows, int64_t cols, const void *act, size_t act_stride,
                 int64_t n, int64_t r0, int64_t r1, float *y, int64_t ldy, void *scratch) {
    (void)w_row_bytes;
    (void)scratch;
    const int64_t nb = cols / 32, ga = r0 / RB, gz = (r1 + RB - 1) / RB;
    const size_t gb = rp_q8x_group_bytes_ns(cols, RB, QB, NS);
    const uint8_t *a8 = act;
#define GROUP_ARGS(g) (const uint8_t *)w + (size_t)(g) * gb, gb, nb, cols
#define VALID(g) (rows - (g) * RB >= RB ? RB : (int)(rows - (g) * RB))
    if (n == 1) {
        /* GEMV: 4 groups (32 rows) in flight, for memory-level parallelism,
         * taken from 4 contiguous quarters of the range so each stream runs
         * on across groups (see rp_q8x_vnni_gemm) */
        const int64_t q = (gz - ga) / 4;
        for (int64_t i = 0; i < q; i++)
            tile(1, 4, GROUP_ARGS(ga + i), a8, act_stride, y + (ga + i) * RB, ldy, VALID(ga + i + 3 * q), q);
        const int64_t g = ga + 4 * q;
        switch (gz - g) {
        case 3: tile(1, 3, GROUP_ARGS(g), a8, act_stride, y + g * RB, ldy, VALID(g + 2), 1); break;
        case 2: tile(1, 2, GROUP_ARGS(g), a8, act_stride, y + g * RB, ldy, VALID(g + 1), 1); break;
        case 1: tile(1, 1, GROUP_ARGS(g), a8, act_stride, y + g * RB, ldy, VALID(g), 1); break;
        default: break;
        }
        return;
    }
    /* activation rows in L2-resident chunks (~256 KB, a multiple of 4 rows)
     * while the groups of the range stream past them */
    int64_t mc = (int64_t)((256 * 1024) / rp_q8x_act_row_size(cols)) & ~(int64_t)3;
    if (mc < 4) mc = 4;
    for (int64_t m0 = 0; m0 < n; m0 += mc) {
        const int64_t m1 = m0 + mc < n ? m0 + mc : n;
        for (int64_t g = ga; g < gz; g++) {
            const int valid = VALID(g);
            float *yg = y + g * RB;
            int64_t m = m0;
            for (; m + 4 <= m1; m += 4)
                tile(4, 1, GROUP_ARGS(g), a8 + (size_t)m * act_stride, act_stride, yg + m * ldy, ldy, valid, 1);
            switch (m1 - m) {
            case 3: tile(3, 1, GROUP_ARGS(g), a8 + (size_t)m * act_stride, act_stride, yg + m * ldy, ldy, valid, 1); break;
            case 2: tile(2, 1, GROUP_ARGS(g), a8 + (size_t)m * act_stride, act_stride, yg + m * ldy, ldy, valid, 1); break;
            case 1: tile(1, 1, GROUP_ARGS(g), a8 + (size_t)m * act_stride, act_stride, yg + m * ldy, ldy, valid, 1); break;
            default: break;
            }
        }
    }
#undef GROUP_ARGS
#undef VALID
}
#endif /* RP_Q8X_AVX2_DRIVER_GEMM */
