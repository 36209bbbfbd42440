/* quant.h — scalar reference conversion, (de)quantization and dot products per weight type. */
#ifndef RP_KERNELS_QUANT_H
#define RP_KERNELS_QUANT_H

#include "kernels/types.h"

/* IEEE half and bfloat16 conversions (round-to-nearest-even, NaN kept). */
float rp_fp16_to_fp32(uint16_t h);
uint16_t rp_fp32_to_fp16(float f);
float rp_bf16_to_fp32(uint16_t h);
uint16_t rp_fp32_to_bf16(float f);

/* Dequantize k elements (k a multiple of the type's block size) of type `t`
 * from `src` into `dst`. Supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0,
 * Q5_1, IQ4_NL, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS, Q8_K. Returns false for
 * other types (dst untouched). */
bool rp_dequantize_row(rp_type t, const void *src, float *dst, int64_t k);

/* Quantize k floats into `dst` (row_size(t, k) bytes) with ggml's reference
 * rounding, so our files are bit-identical to ggml's quantize of the same data.
 * (For IQ4_NL / IQ4_XS: ggml_quantize_chunk's, which llama.cpp's quantize uses.)
 * Supported: the types rp_dequantize_row supports. */
bool rp_quantize_row(rp_type t, const float *src, void *dst, int64_t k);

/* dst[i] = src[i] rounded to F16 (t RP_TYPE_F16) or BF16 (RP_TYPE_BF16), round to nearest even, kept as floats (in
 * place allowed): e.g. the activations of F16 weights, which ggml rounds to its vec_dot_type (F16) before the dot
 * product; any other t copies. */
void rp_round_row(rp_type t, const float *src, float *dst, int64_t n);

/* The activation type a weight type's integer dot product consumes
 * (ggml's vec_dot_type, except Q8_0 for Q4_1/Q5_1 where ggml uses Q8_1): Q8_0
 * for the 32-element types, Q8_K for the 256-element ones, F32 for
 * F32/F16/BF16. */
rp_type rp_type_vec_dot_type(rp_type t);

/* Reference dot product of one weight row `w` (type t, n elements) with one
 * activation row `a` already in rp_type_vec_dot_type(t) layout. n is a
 * multiple of the block size. Returns NaN for unsupported types. */
float rp_vec_dot_ref(rp_type t, int64_t n, const void *w, const void *a);

/* Plain float dot product (reference). */
float rp_dot_f32_ref(int64_t n, const float *a, const float *b);

/* Unpacks the 6-bit scale and 6-bit min of sub-block j (0..7, 32 elements
 * each) from a Q4_K block's 12-byte `scales` field (ggml's get_scale_min_k4):
 * for j < 4 they are the low 6 bits of bytes j and j+4; for j >= 4 the low 4
 * bits come from the nibbles of byte j+4 and the high 2 bits from the top
 * bits of bytes j-4 (scale) and j (min). Inline so SIMD kernels share it. */
static inline void rp_q4_k_scale_min(int j, const uint8_t *scales, uint8_t *sc, uint8_t *m) {
    if (j < 4) {
        *sc = scales[j] & 63;
        *m = scales[j + 4] & 63;
    } else {
        *sc = (uint8_t)((scales[j + 4] & 0xF) | ((scales[j - 4] >> 6) << 4));
        *m = (uint8_t)((scales[j + 4] >> 4) | ((scales[j] >> 6) << 4));
    }
}

#endif /* RP_KERNELS_QUANT_H */
