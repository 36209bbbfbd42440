/* mm_legacy_avx512.c — packed Q4_1, Q5_0, Q5_1 and IQ4_NL matmul kernels for AVX-512 VNNI: the Q4_0 kernel's 16-row layout and vpdpbusd GEMV/GEMM (q8_0_x86.h) with each type's decode. */
#include "kernels/kernels.h"
#include "kernels/x86/q8_0_x86.h"
#include "kernels/x86/q8x_legacy_pack.h"

/* Layouts: q8x_legacy_pack.h (row_block 16, as large as the GGUF rows).
 * Weights are u8 for vpdpbusd (u8 x s8): Q4_1 / Q5_1 quants q as they are,
 * Q5_0 q in [0, 31] and IQ4_NL value + 128, the offsets folded into the
 * activation's bias (bias_mul -16 / -128: exact int32 block sums). Q4_1 /
 * Q5_1 take bias = sum(a) (bias_mul 1) for the min term, added per block in
 * fp32 as m * d_a * sum(a), as the reference does. */

#define RP_LEGACY_FAMILY(NAME, TYPE, K, BIAS)                                                                     \
    static size_t NAME##_packed_size(int64_t rows, int64_t cols) {                                               \
        return rp_q8x_packed_size_ns(rows, cols, 16, RP_Q8X_KIND_QB(K), RP_Q8X_KIND_NS(K));                       \
    }                                                                                                             \
    static void NAME##_pack(const void *src, size_t src_row_bytes, int64_t rows, int64_t cols, void *dst,         \
                            int64_t g0, int64_t g1) {                                                             \
        rp_q8x_pack_legacy(K, src, src_row_bytes, rows, cols, dst, g0, g1, 16);                                   \
    }                                                                                                             \
    static void NAME##_quant_act(const float *x, void *dst, int64_t cols) {                                      \
        rp_q8x_quant_act_avx512(x, dst, cols, BIAS);                                                              \
    }                                                                                                             \
    static void NAME##_gemm(const void *w, size_t w_row_bytes, int64_t rows, int64_t cols, const void *act,       \
                            size_t act_stride, int64_t n, int64_t r0, int64_t r1, float *y, int64_t ldy,          \
                            void *scratch) {                                                                      \
        (void)w_row_bytes;                                                                                        \
        (void)scratch;                                                                                            \
        rp_q8x_vnni_gemm(K, w, rows, cols, act, act_stride, n, r0, r1, y, ldy);                                   \
    }                                                                                                             \
    const rp_mm_kernel rp_mm_##NAME##_packed_avx512 = {                                                           \
        #NAME "/avx512-packed", TYPE, RP_CPU_AVX512, RP_TYPE_Q8_0, 16, NAME##_packed_size, NAME##_pack,          \
        rp_q8x_act_row_size, NAME##_quant_act, NULL, NAME##_gemm,                                                 \
    };

RP_LEGACY_FAMILY(q4_1, RP_TYPE_Q4_1, RP_Q8X_Q4_1, 1)
RP_LEGACY_FAMILY(q5_0, RP_TYPE_Q5_0, RP_Q8X_Q5_0, -16)
RP_LEGACY_FAMILY(q5_1, RP_TYPE_Q5_1, RP_Q8X_Q5_1, 1)
RP_LEGACY_FAMILY(iq4_nl, RP_TYPE_IQ4_NL, RP_Q8X_IQ4_NL, -128)
