/* mm_q4_0_sme.c — Q4_0 matmul kernels for aarch64 SME: SMOPA into ZA over 64-row panels (nibbles split in
 * streaming mode) for prefill, NEON SDOT by lane over the same panels for decode; Q8_0 activations
 * (kernels/arm/q8_sme.h). */
#define QB 16
#define RP_Q8S_Q4
#include "kernels/arm/q8_sme.h"

const rp_mm_kernel rp_mm_q4_0_sme = {
    "q4_0/sme", RP_TYPE_Q4_0, RP_CPU_SME, RP_TYPE_Q8_0, NR, packed_size, pack, act_row_size, quant_act,
    scratch_bytes, gemm,
};
