/* mm_q4_0_avx512.c — Q4_0 matmul kernel family for AVX-512 VNNI: 16-row VNNI packing, vpdpbusd GEMV and register-blocked GEMM. */
#include "kernels/kernels.h"
#include "kernels/x86/q8_0_x86.h"

/* Packed layout and activation layout: see q8_0_x86.h (row_block 16, nibbles
 * kept 4-bit, fp16 scales: 18 bytes per 32 weights as in the GGUF row).
 * Activations carry bias = -8 * sum(q) per block, which folds Q4_0's -8
 * offset into the u8 (nibble) x s8 (activation) vpdpbusd sums. */

static size_t packed_size(int64_t rows, int64_t cols) { return rp_q8x_packed_size(rows, cols, 16, 16); }

static void pack(const void *src, size_t src_row_bytes, int64_t rows, int64_t cols, void *dst, int64_t g0,
                 int64_t g1) {
    rp_q8x_pack_q4_0(src, src_row_bytes, rows, cols, dst, g0, g1, 16);
}

static size_t act_row_size(int64_t cols) { return rp_q8x_act_row_size(cols); }

static void quant_act(const float *x, void *dst, int64_t cols) { rp_q8x_quant_act_avx512(x, dst, cols, -8); }

static void gemm(const void *w, size_t w_row_bytes, int64_t rows, int64_t cols, const void *act, size_t act_stride,
                 int64_t n, int64_t r0, int64_t r1, float *y, int64_t ldy, void *scratch) {
    (void)w_row_bytes;
    (void)scratch;
    rp_q8x_vnni_gemm(1, w, rows, cols, act, act_stride, n, r0, r1, y, ldy);
}

const rp_mm_kernel rp_mm_q4_0_avx512 = {
    "q4_0/avx512", RP_TYPE_Q4_0, RP_CPU_AVX512, RP_TYPE_Q8_0, 16, packed_size, pack, act_row_size, quant_act, NULL, gemm,
};
