/* mm_q4_k_dotprod.c — Q4_K matmul kernels for aarch64 DotProd (SDOT integer dots): GGUF rows, Q8_K
 * activations (kernels/arm/kq_arm.h). */
#define RP_KQ_TYPE RP_TYPE_Q4_K
#include "kernels/arm/kq_arm.h"

const rp_mm_kernel rp_mm_q4_k_dotprod = {
    "q4_k/dotprod", RP_TYPE_Q4_K, RP_CPU_DOTPROD, RP_TYPE_Q8_K, 1, packed_size, pack, act_row_size, quant_act, NULL, gemm,
};
