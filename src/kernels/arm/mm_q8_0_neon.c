/* mm_q8_0_neon.c — Q8_0 matmul kernels for aarch64 NEON (SMULL + SADALP
 * integer dots): 4-row groups, Q8_0 activations (kernels/arm/q8_arm.h). */
#define QB 32
#include "kernels/arm/q8_arm.h"

const rp_mm_kernel rp_mm_q8_0_neon = {
    "q8_0/neon", RP_TYPE_Q8_0, RP_CPU_NEON, RP_TYPE_Q8_0, RB, packed_size, pack, act_row_size, quant_act,
    NULL, gemm,
};
