/* ew_ref.c — scalar reference of the element-wise forward-pass kernels (SwiGLU). */
#include <math.h>

#include "kernels/kernels.h"

static void swiglu_ref(float *g, const float *u, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        const float x = g[i];
        g[i] = x / (1.0f + expf(-x)) * u[i];
    }
}

const rp_ew_kernel rp_ew_ref = {"ew/ref", RP_CPU_SCALAR, swiglu_ref};
