/* ew_avx2.c — element-wise forward-pass kernels (SwiGLU) for AVX2, from the template in float_x86.h. */
#define RP_FX_EW 1
#include "kernels/x86/float_x86.h"

const rp_ew_kernel rp_ew_avx2 = {"ew/avx2", RP_CPU_AVX2, rp_fx_swiglu};
