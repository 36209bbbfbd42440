/* attn_neon.c — flash-style attention for aarch64 NEON over F32, F16 and Q8_0 KV caches (the attention template
 * of kernels/float_tmpl.h on the layer of kernels/arm/float_arm.h; head_dim a multiple of 8, else the reference). */
#define RP_FX_ATTN 1
#include "kernels/arm/float_arm.h"

const rp_attn_kernel rp_attn_f32_neon = {"attn-f32/neon", RP_CPU_NEON, rp_fx_attn};
const rp_attn_kernel rp_attn_f16_neon = {"attn-f16/neon", RP_CPU_NEON, rp_fx_attn};
const rp_attn_kernel rp_attn_q8_0_neon = {"attn-q8_0/neon", RP_CPU_NEON, rp_fx_attn};
