/* mm_q4_k_neon.c — Q4_K matmul kernels for aarch64 NEON (SMULL + SADALP integer dots): GGUF rows, Q8_K
 * activations (kernels/arm/kq_arm.h). */
#define RP_KQ_TYPE RP_TYPE_Q4_K
#include "kernels/arm/kq_arm.h"

const rp_mm_kernel rp_mm_q4_k_neon = {
    "q4_k/neon", RP_TYPE_Q4_K, RP_CPU_NEON, RP_TYPE_Q8_K, 1, packed_size, pack, act_row_size, quant_act, NULL, gemm,
};
