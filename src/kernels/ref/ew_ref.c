/* ew_ref.c — scalar reference of the element-wise kernels (SwiGLU, F32 <-> F16 rows). */
#include <math.h>

#include "kernels/kernels.h"
#include "kernels/quant.h"

static void swiglu_ref(float *g, const float *u, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        const float x = g[i];
        g[i] = x / (1.0f + expf(-x)) * u[i];
    }
}

static void f32_to_f16_ref(uint16_t *dst, const float *src, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = rp_fp32_to_fp16(src[i]);
}

static void f16_to_f32_ref(float *dst, const uint16_t *src, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = rp_fp16_to_fp32(src[i]);
}

const rp_ew_kernel rp_ew_ref = {"ew/ref", RP_CPU_SCALAR, swiglu_ref, f32_to_f16_ref, f16_to_f32_ref};
