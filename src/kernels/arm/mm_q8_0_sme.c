/* mm_q8_0_sme.c — Q8_0 matmul kernels for aarch64 SME: SMOPA into ZA over 64-row panels for prefill, NEON SDOT by
 * lane over the same panels for decode; Q8_0 activations (kernels/arm/q8_sme.h). */
#define QB 32
#include "kernels/arm/q8_sme.h"

const rp_mm_kernel rp_mm_q8_0_sme = {
    "q8_0/sme", RP_TYPE_Q8_0, RP_CPU_SME, RP_TYPE_Q8_0, NR, packed_size, pack, act_row_size, quant_act,
    scratch_bytes, gemm,
};
