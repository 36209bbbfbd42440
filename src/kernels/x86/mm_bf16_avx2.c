/* mm_bf16_avx2.c — BF16-weight matmul for AVX2: 16-row panels with row pairs in 32-bit lanes, exact shift/mask widening + FMA against F32 activations. */
#define RP_FX_MM_WT 2
#include "kernels/x86/float_x86.h"

/* Layout and blocking: see the matmul template in kernels/float_tmpl.h. */
const rp_mm_kernel rp_mm_bf16_avx2 = {
    .name = "bf16/avx2",
    .wtype = RP_TYPE_BF16,
    .level = RP_CPU_AVX2,
    .act_type = RP_TYPE_F32,
    .row_block = RP_FX_RB,
    .packed_size = rp_fx_mm_packed_size,
    .pack = rp_fx_mm_pack,
    .act_row_size = rp_fx_mm_act_size,
    .quant_act = rp_fx_mm_act_copy,
    .scratch_bytes = rp_fx_mm_scratch,
    .gemm = rp_fx_mm_gemm,
};
