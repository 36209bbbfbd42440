/* mm_f16_neon.c — F16-weight matmul for aarch64 NEON: 16-row column-interleaved panels, FMA against F32
 * activations (the matmul template of kernels/float_tmpl.h on the layer of kernels/arm/float_arm.h). */
#define RP_FX_MM_WT 1
#include "kernels/arm/float_arm.h"

const rp_mm_kernel rp_mm_f16_neon = {
    .name = "f16/neon",
    .wtype = RP_TYPE_F16,
    .level = RP_CPU_NEON,
    .act_type = RP_TYPE_F32,
    .row_block = RP_FX_RB,
    .packed_size = rp_fx_mm_packed_size,
    .pack = rp_fx_mm_pack,
    .act_row_size = rp_fx_mm_act_size,
    .quant_act = rp_fx_mm_act_copy,
    .scratch_bytes = rp_fx_mm_scratch,
    .gemm = rp_fx_mm_gemm,
};
