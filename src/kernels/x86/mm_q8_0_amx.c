/* mm_q8_0_amx.c — Q8_0 matmul kernel family for AMX: avx512 packing, AMX-INT8 tile GEMM for n >= 16, VNNI GEMV below. */
#include "kernels/kernels.h"
#include "kernels/x86/q8_0_x86.h"

#ifndef RP_Q8X_HAVE_AMX_GEMM
#error "build with -mamx-tile -mamx-int8 and the AVX-512 VNNI flags (CMakeLists.txt does for *_amx.c)"
#endif

/* Same packed weights and activations as q8_0/avx512 (q8_0_x86.h): 16-row
 * groups, weights as u8 = q + 128, fp16 scales; activations with bias =
 * -128 * sum(q), used by the VNNI path only (the AMX path flips the weights
 * back to signed int8 in its B scratch and multiplies with TDPBSSD). */

static size_t packed_size(int64_t rows, int64_t cols) { return rp_q8x_packed_size(rows, cols, 16, 32); }

static void pack(const void *src, size_t src_row_bytes, int64_t rows, int64_t cols, void *dst, int64_t g0,
                 int64_t g1) {
    rp_q8x_pack_q8_0(src, src_row_bytes, rows, cols, dst, g0, g1, 16, 1);
}

static size_t act_row_size(int64_t cols) { return rp_q8x_act_row_size(cols); }

static void quant_act(const float *x, void *dst, int64_t cols) { rp_q8x_quant_act_avx512(x, dst, cols, -128); }

static size_t scratch_bytes(int64_t cols, int64_t n) { return rp_q8x_amx_scratch_bytes(cols, n); }

static void gemm(const void *w, size_t w_row_bytes, int64_t rows, int64_t cols, const void *act, size_t act_stride,
                 int64_t n, int64_t r0, int64_t r1, float *y, int64_t ldy, void *scratch) {
    (void)w_row_bytes;
    rp_q8x_amx_gemm(0, w, rows, cols, act, act_stride, n, r0, r1, y, ldy, scratch);
}

const rp_mm_kernel rp_mm_q8_0_amx = {
    "q8_0/amx", RP_TYPE_Q8_0, RP_CPU_AMX, RP_TYPE_Q8_0, 16, packed_size, pack, act_row_size, quant_act, scratch_bytes, gemm,
};
