/* ew_avx2.c — element-wise forward-pass kernels (SwiGLU) for AVX2, on the float SIMD layer. */
#include "kernels/x86/float_x86.h"

/* g = g / (1 + e^-g) * u, FX_W lanes at a time; the tail through masked
 * loads and stores (no read or write past n). fx_exp clamps its argument, so
 * large |g| gives g (g > 0) or -0 (g < 0) as the reference does. */
static void swiglu(float *g, const float *u, int64_t n) {
    const fx_v one = fx_set1(1.0f), zero = fx_zero();
    int64_t i = 0;
    for (; i + FX_W <= n; i += FX_W) {
        const fx_v x = fx_load(g + i);
        const fx_v d = fx_add(one, fx_exp(fx_sub(zero, x)));
        fx_store(g + i, fx_mul(fx_div(x, d), fx_load(u + i)));
    }
    if (i < n) {
        const int r = (int)(n - i);
        const fx_v x = fx_loadn(g + i, r);
        const fx_v d = fx_add(one, fx_exp(fx_sub(zero, x)));
        fx_storen(g + i, fx_mul(fx_div(x, d), fx_loadn(u + i, r)), r);
    }
}

const rp_ew_kernel rp_ew_avx2 = {"ew/avx2", RP_CPU_AVX2, swiglu};
