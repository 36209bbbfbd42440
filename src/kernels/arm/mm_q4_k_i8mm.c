/* mm_q4_k_i8mm.c — Q4_K matmul kernels for aarch64 I8MM (SMMLA 2 x 8 x 2 tiles): weight pairs interleaved at
 * load, Q8_K activations interleaved per call (kernels/arm/kq_i8mm.h). */
#include "kernels/arm/kq_i8mm.h"

const rp_mm_kernel rp_mm_q4_k_i8mm = {
    "q4_k/i8mm", RP_TYPE_Q4_K, RP_CPU_I8MM, RP_TYPE_Q8_K, RB, packed_size, pack, act_row_size, quant_act,
    scratch_bytes, gemm,
};
