/* ew_neon.c — element-wise kernels (SwiGLU, F32 <-> F16 rows) for aarch64 NEON, from the template in
 * kernels/float_tmpl.h. */
#define RP_FX_EW 1
#include "kernels/arm/float_arm.h"

const rp_ew_kernel rp_ew_neon = {"ew/neon", RP_CPU_NEON, rp_fx_swiglu, rp_fx_f32_to_f16, rp_fx_f16_to_f32};
