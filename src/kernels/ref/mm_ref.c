/* mm_ref.c — scalar reference matmul kernels: GGUF rows read in place, ggml's integer dot products. */
#include <string.h>

#include "kernels/kernels.h"
#include "kernels/quant.h"

static size_t act_q8_0(int64_t cols) { return rp_type_row_size(RP_TYPE_Q8_0, cols); }
static size_t act_q8_k(int64_t cols) { return rp_type_row_size(RP_TYPE_Q8_K, cols); }
static size_t act_f32(int64_t cols) { return (size_t)cols * sizeof(float); }
static void quant_q8_0(const float *x, void *dst, int64_t cols) { rp_quantize_row(RP_TYPE_Q8_0, x, dst, cols); }
static void quant_q8_k(const float *x, void *dst, int64_t cols) { rp_quantize_row(RP_TYPE_Q8_K, x, dst, cols); }
static void copy_f32(const float *x, void *dst, int64_t cols) { memcpy(dst, x, (size_t)cols * sizeof(float)); }
/* F16 weights: activations rounded to F16 (ggml's vec_dot_type for F16), kept as floats */
static void round_f16(const float *x, void *dst, int64_t cols) { rp_round_row(RP_TYPE_F16, x, dst, cols); }

#define REF_GEMM(NAME, TYPE)                                                                                     \
    static void NAME(const void *w, size_t w_row_bytes, int64_t rows, int64_t cols, const void *act,            \
                     size_t act_stride, int64_t n, int64_t r0, int64_t r1, float *y, int64_t ldy, void *scratch) { \
        (void)rows; (void)scratch;                                                                               \
        for (int64_t r = r0; r < r1; r++) {                                                                      \
            const uint8_t *wr = (const uint8_t *)w + (size_t)r * w_row_bytes;                                    \
            for (int64_t i = 0; i < n; i++)                                                                      \
                y[i * ldy + r] = rp_vec_dot_ref(TYPE, cols, wr, (const uint8_t *)act + (size_t)i * act_stride);  \
        }                                                                                                        \
    }

REF_GEMM(gemm_f32, RP_TYPE_F32)
REF_GEMM(gemm_f16, RP_TYPE_F16)
REF_GEMM(gemm_bf16, RP_TYPE_BF16)
REF_GEMM(gemm_q8_0, RP_TYPE_Q8_0)
REF_GEMM(gemm_q4_0, RP_TYPE_Q4_0)
REF_GEMM(gemm_q4_k, RP_TYPE_Q4_K)
REF_GEMM(gemm_q6_k, RP_TYPE_Q6_K)
REF_GEMM(gemm_q4_1, RP_TYPE_Q4_1)
REF_GEMM(gemm_q5_0, RP_TYPE_Q5_0)
REF_GEMM(gemm_q5_1, RP_TYPE_Q5_1)
REF_GEMM(gemm_iq4_nl, RP_TYPE_IQ4_NL)
REF_GEMM(gemm_q2_k, RP_TYPE_Q2_K)
REF_GEMM(gemm_q3_k, RP_TYPE_Q3_K)
REF_GEMM(gemm_q5_k, RP_TYPE_Q5_K)
REF_GEMM(gemm_iq4_xs, RP_TYPE_IQ4_XS)

#define REF_KERNEL(VAR, NAME, WT, AT, ACTSZ, QUANT, GEMM) \
    const rp_mm_kernel VAR = {NAME, WT, RP_CPU_SCALAR, AT, 1, NULL, NULL, ACTSZ, QUANT, NULL, GEMM}

REF_KERNEL(rp_mm_ref_f32, "f32/ref", RP_TYPE_F32, RP_TYPE_F32, act_f32, copy_f32, gemm_f32);
REF_KERNEL(rp_mm_ref_f16, "f16/ref", RP_TYPE_F16, RP_TYPE_F32, act_f32, round_f16, gemm_f16);
REF_KERNEL(rp_mm_ref_bf16, "bf16/ref", RP_TYPE_BF16, RP_TYPE_F32, act_f32, copy_f32, gemm_bf16);
REF_KERNEL(rp_mm_ref_q8_0, "q8_0/ref", RP_TYPE_Q8_0, RP_TYPE_Q8_0, act_q8_0, quant_q8_0, gemm_q8_0);
REF_KERNEL(rp_mm_ref_q4_0, "q4_0/ref", RP_TYPE_Q4_0, RP_TYPE_Q8_0, act_q8_0, quant_q8_0, gemm_q4_0);
REF_KERNEL(rp_mm_ref_q4_k, "q4_k/ref", RP_TYPE_Q4_K, RP_TYPE_Q8_K, act_q8_k, quant_q8_k, gemm_q4_k);
REF_KERNEL(rp_mm_ref_q6_k, "q6_k/ref", RP_TYPE_Q6_K, RP_TYPE_Q8_K, act_q8_k, quant_q8_k, gemm_q6_k);
REF_KERNEL(rp_mm_ref_q4_1, "q4_1/ref", RP_TYPE_Q4_1, RP_TYPE_Q8_0, act_q8_0, quant_q8_0, gemm_q4_1);
REF_KERNEL(rp_mm_ref_q5_0, "q5_0/ref", RP_TYPE_Q5_0, RP_TYPE_Q8_0, act_q8_0, quant_q8_0, gemm_q5_0);
REF_KERNEL(rp_mm_ref_q5_1, "q5_1/ref", RP_TYPE_Q5_1, RP_TYPE_Q8_0, act_q8_0, quant_q8_0, gemm_q5_1);
REF_KERNEL(rp_mm_ref_iq4_nl, "iq4_nl/ref", RP_TYPE_IQ4_NL, RP_TYPE_Q8_0, act_q8_0, quant_q8_0, gemm_iq4_nl);
REF_KERNEL(rp_mm_ref_q2_k, "q2_k/ref", RP_TYPE_Q2_K, RP_TYPE_Q8_K, act_q8_k, quant_q8_k, gemm_q2_k);
REF_KERNEL(rp_mm_ref_q3_k, "q3_k/ref", RP_TYPE_Q3_K, RP_TYPE_Q8_K, act_q8_k, quant_q8_k, gemm_q3_k);
REF_KERNEL(rp_mm_ref_q5_k, "q5_k/ref", RP_TYPE_Q5_K, RP_TYPE_Q8_K, act_q8_k, quant_q8_k, gemm_q5_k);
REF_KERNEL(rp_mm_ref_iq4_xs, "iq4_xs/ref", RP_TYPE_IQ4_XS, RP_TYPE_Q8_K, act_q8_k, quant_q8_k, gemm_iq4_xs);
