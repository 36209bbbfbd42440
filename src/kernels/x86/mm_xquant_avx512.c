/* mm_xquant_avx512.c — Q4_1, Q5_0, Q5_1, IQ4_NL, Q2_K, Q3_K, Q5_K, IQ4_XS matmul kernels for AVX-512 VNNI (vpdpbusd on ymm); the body is xquant_x86.h. */
#define RP_XQ_SUFFIX avx512
#define RP_XQ_LEVEL RP_CPU_AVX512
#include "kernels/x86/xquant_x86.h"

/* Q8_0-layout activations with bias = sum(q) (q8_0_x86.h, bias_mul 1). */
static size_t act32_size(int64_t cols) { return rp_q8x_act_row_size(cols); }
static void act32_quant(const float *x, void *dst, int64_t cols) { rp_q8x_quant_act_avx512(x, dst, cols, 1); }

RP_XQ_FAMILY(q4_1, RP_TYPE_Q4_1, RP_TYPE_Q8_0, act32_size, act32_quant)
RP_XQ_FAMILY(q5_0, RP_TYPE_Q5_0, RP_TYPE_Q8_0, act32_size, act32_quant)
RP_XQ_FAMILY(q5_1, RP_TYPE_Q5_1, RP_TYPE_Q8_0, act32_size, act32_quant)
RP_XQ_FAMILY(iq4_nl, RP_TYPE_IQ4_NL, RP_TYPE_Q8_0, act32_size, act32_quant)
RP_XQ_FAMILY(q2_k, RP_TYPE_Q2_K, RP_TYPE_Q8_K, rp_q8k_x86_act_row_size, rp_q8k_quant_act_avx512)
RP_XQ_FAMILY(q3_k, RP_TYPE_Q3_K, RP_TYPE_Q8_K, rp_q8k_x86_act_row_size, rp_q8k_quant_act_avx512)
RP_XQ_FAMILY(q5_k, RP_TYPE_Q5_K, RP_TYPE_Q8_K, rp_q8k_x86_act_row_size, rp_q8k_quant_act_avx512)
RP_XQ_FAMILY(iq4_xs, RP_TYPE_IQ4_XS, RP_TYPE_Q8_K, rp_q8k_x86_act_row_size, rp_q8k_quant_act_avx512)
