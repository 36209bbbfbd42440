/* mm_q4_0_dotprod.c — Q4_0 matmul kernels for aarch64 DotProd (SDOT integer dots):
 * 4-row groups, Q8_0 activations (kernels/arm/q8_arm.h). */
#define QB 16
#define RP_Q8A_Q4
#include "kernels/arm/q8_arm.h"

const rp_mm_kernel rp_mm_q4_0_dotprod = {
    "q4_0/dotprod", RP_TYPE_Q4_0, RP_CPU_DOTPROD, RP_TYPE_Q8_0, RB, packed_size, pack, act_row_size, quant_act,
    NULL, gemm,
};
