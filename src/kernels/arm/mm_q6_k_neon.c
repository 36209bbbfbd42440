/* mm_q6_k_neon.c — Q6_K matmul kernels for aarch64 NEON (SMULL + SADALP integer dots): GGUF rows, Q8_K
 * activations (kernels/arm/kq_arm.h). */
#define RP_KQ_TYPE RP_TYPE_Q6_K
#define RP_KQ_Q6
#include "kernels/arm/kq_arm.h"

const rp_mm_kernel rp_mm_q6_k_neon = {
    "q6_k/neon", RP_TYPE_Q6_K, RP_CPU_NEON, RP_TYPE_Q8_K, 1, packed_size, pack, act_row_size, quant_act, NULL, gemm,
};
