/* ew_avx512.c — element-wise kernels (SwiGLU, F32 <-> F16 rows) for AVX-512, from the template in kernels/float_tmpl.h. */
#define RP_FX_EW 1
#include "kernels/x86/float_x86.h"

const rp_ew_kernel rp_ew_avx512 = {"ew/avx512", RP_CPU_AVX512, rp_fx_swiglu, rp_fx_f32_to_f16, rp_fx_f16_to_f32};
