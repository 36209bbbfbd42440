/* quant_util.h — helpers shared by the scalar reference quantizers (src/kernels/ref/quant_*.c). */
#ifndef RP_KERNELS_REF_QUANT_UTIL_H
#define RP_KERNELS_REF_QUANT_UTIL_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "kernels/types.h"

/* Every file including this must forbid FMA contraction (see quant_ref.c):
 * the quantizers reproduce ggml's bytes only with one rounding per +, -, *, /. */

/* ggml treats a group whose largest |x| is below this as all zero. */
#define RP_GROUP_MAX_EPS 1e-15f

/* Round to nearest, ties to even, for |f| <= 2^22 - 1 (ggml's nearest_int):
 * adding 1.5 * 2^23 leaves the rounded integer in the low mantissa bits.
 * Used instead of lrintf because it is what ggml's quantizers use, so ties
 * resolve identically; outside the range the result is garbage, not UB. */
static inline int rp_nearest_int(float f) {
    const float v = f + 12582912.f;
    int32_t i;
    memcpy(&i, &v, sizeof i);
    return (i & 0x007fffff) - 0x00400000;
}

static inline int rp_clampi(int v, int lo, int hi) {
    return v < lo ? lo : (v > hi ? hi : v);
}

/* Asymmetric fit x ~= scale * L - the_min (ggml's make_qkx2_quants), see
 * quant_ref.c. use_mad: weighted absolute instead of squared error. */
float rp_make_qkx2_quants(int n, int nmax, const float *x, const float *w, uint8_t *L, float *the_min,
                          uint8_t *Laux, float rmin, float rdelta, int nstep, bool use_mad);

/* Per-type quantizers / dequantizers of nb blocks (quant_legacy_ref.c,
 * quant_kq_ref.c); rp_quantize_row / rp_dequantize_row dispatch to them. */
void rp_quantize_q4_1(const float *x, rp_block_q4_1 *y, int64_t nb);
void rp_quantize_q5_0(const float *x, rp_block_q5_0 *y, int64_t nb);
void rp_quantize_q5_1(const float *x, rp_block_q5_1 *y, int64_t nb);
void rp_quantize_iq4_nl(const float *x, rp_block_iq4_nl *y, int64_t nb);
void rp_quantize_iq4_xs(const float *x, rp_block_iq4_xs *y, int64_t nb);
void rp_dequantize_q4_1(const rp_block_q4_1 *x, float *y, int64_t nb);
void rp_dequantize_q5_0(const rp_block_q5_0 *x, float *y, int64_t nb);
void rp_dequantize_q5_1(const rp_block_q5_1 *x, float *y, int64_t nb);
void rp_dequantize_iq4_nl(const rp_block_iq4_nl *x, float *y, int64_t nb);
void rp_dequantize_iq4_xs(const rp_block_iq4_xs *x, float *y, int64_t nb);

void rp_quantize_q2_k(const float *x, rp_block_q2_k *y, int64_t nb);
void rp_quantize_q3_k(const float *x, rp_block_q3_k *y, int64_t nb);
void rp_quantize_q5_k(const float *x, rp_block_q5_k *y, int64_t nb);
void rp_dequantize_q2_k(const rp_block_q2_k *x, float *y, int64_t nb);
void rp_dequantize_q3_k(const rp_block_q3_k *x, float *y, int64_t nb);
void rp_dequantize_q5_k(const rp_block_q5_k *x, float *y, int64_t nb);

#endif /* RP_KERNELS_REF_QUANT_UTIL_H */
