/* attn_avx2.c — flash-style attention for AVX2 over F32, F16 and Q8_0 KV caches (tiled online softmax, GQA heads together). */
#define RP_FX_ATTN 1
#include "kernels/x86/float_x86.h"

/* Algorithm, tiling and scratch layout: see the attention template in kernels/float_tmpl.h. */
const rp_attn_kernel rp_attn_f32_avx2 = {"attn-f32/avx2", RP_CPU_AVX2, rp_fx_attn};
const rp_attn_kernel rp_attn_f16_avx2 = {"attn-f16/avx2", RP_CPU_AVX2, rp_fx_attn};
const rp_attn_kernel rp_attn_q8_0_avx2 = {"attn-q8_0/avx2", RP_CPU_AVX2, rp_fx_attn};
