/* mm_q4_0_i8mm.c — Q4_0 matmul kernels for aarch64 I8MM: SMMLA tiles of 2 activation rows x 2 weight rows for
 * prefill, the SDOT tile for decode; 4-row groups, Q8_0 activations (kernels/arm/q8_arm.h). */
#define QB 16
#define RP_Q8A_Q4
#include "kernels/arm/q8_arm.h"

const rp_mm_kernel rp_mm_q4_0_i8mm = {
    "q4_0/i8mm", RP_TYPE_Q4_0, RP_CPU_I8MM, RP_TYPE_Q8_0, RB, packed_size, pack, act_row_size, quant_act,
    NULL, gemm,
};
