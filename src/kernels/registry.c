/* registry.c — the table of kernel families and their selection by weight type and dispatch level. */
#include "kernels/kernels.h"

/* Reference kernels (always linked). */
extern const rp_mm_kernel rp_mm_ref_f32, rp_mm_ref_f16, rp_mm_ref_bf16, rp_mm_ref_q8_0, rp_mm_ref_q4_0,
    rp_mm_ref_q4_k, rp_mm_ref_q6_k, rp_mm_ref_q4_1, rp_mm_ref_q5_0, rp_mm_ref_q5_1, rp_mm_ref_iq4_nl, rp_mm_ref_q2_k,
    rp_mm_ref_q3_k, rp_mm_ref_q5_k, rp_mm_ref_iq4_xs;

/* SIMD kernels: src/kernels/x86/, one family per file, all compiled on x86-64. Each is named here with a
 * strong reference on purpose: a program linking libreprise.a gets only the archive members that something
 * references, and this table is what references the families (weak references would leave them out, and every
 * model would silently run the scalar kernels; tests/library/static_registry.c checks it). A new family is
 * added here and to that test. */
extern const rp_mm_kernel rp_mm_q4_0_avx2, rp_mm_q4_0_avx512, rp_mm_q4_0_amx;
extern const rp_mm_kernel rp_mm_q8_0_avx2, rp_mm_q8_0_avx512, rp_mm_q8_0_amx;
extern const rp_mm_kernel rp_mm_q4_k_avx2, rp_mm_q4_k_avx512, rp_mm_q4_k_amx;
extern const rp_mm_kernel rp_mm_q6_k_avx2, rp_mm_q6_k_avx512, rp_mm_q6_k_amx;
extern const rp_mm_kernel rp_mm_f16_avx2, rp_mm_f16_avx512;
extern const rp_mm_kernel rp_mm_bf16_avx2, rp_mm_bf16_avx512, rp_mm_bf16_amx;
extern const rp_mm_kernel rp_mm_f32_avx2, rp_mm_f32_avx512;
extern const rp_mm_kernel rp_mm_q4_1_avx2, rp_mm_q4_1_avx512, rp_mm_q5_0_avx2, rp_mm_q5_0_avx512;
extern const rp_mm_kernel rp_mm_q5_1_avx2, rp_mm_q5_1_avx512, rp_mm_iq4_nl_avx2, rp_mm_iq4_nl_avx512;
extern const rp_mm_kernel rp_mm_q2_k_avx2, rp_mm_q2_k_avx512, rp_mm_q3_k_avx2, rp_mm_q3_k_avx512;
extern const rp_mm_kernel rp_mm_q5_k_avx2, rp_mm_q5_k_avx512, rp_mm_iq4_xs_avx2, rp_mm_iq4_xs_avx512;
extern const rp_mm_kernel rp_mm_q5_k_packed_avx2, rp_mm_q3_k_packed_avx2, rp_mm_iq4_xs_packed_avx2;
extern const rp_mm_kernel rp_mm_q4_1_packed_avx512, rp_mm_q5_0_packed_avx512, rp_mm_q5_1_packed_avx512,
    rp_mm_iq4_nl_packed_avx512;
extern const rp_mm_kernel rp_mm_q4_1_packed_avx2, rp_mm_q5_0_packed_avx2, rp_mm_q5_1_packed_avx2,
    rp_mm_iq4_nl_packed_avx2, rp_mm_q2_k_packed_avx2, rp_mm_q2_k_packed_avx512;
extern const rp_attn_kernel rp_attn_f16_avx2, rp_attn_f16_avx512;
extern const rp_attn_kernel rp_attn_q8_0_avx2, rp_attn_q8_0_avx512;
extern const rp_attn_kernel rp_attn_f32_avx2, rp_attn_f32_avx512;
extern const rp_ew_kernel rp_ew_avx2, rp_ew_avx512;
extern const rp_ew_kernel rp_ew_ref;

/* SIMD kernels: src/kernels/arm/, one family per file, all compiled on aarch64 (named strongly, as above). */
extern const rp_mm_kernel rp_mm_q4_0_sme, rp_mm_q4_0_i8mm, rp_mm_q4_0_dotprod, rp_mm_q4_0_neon;
extern const rp_mm_kernel rp_mm_q8_0_sme, rp_mm_q8_0_i8mm, rp_mm_q8_0_dotprod, rp_mm_q8_0_neon;
extern const rp_mm_kernel rp_mm_q4_k_i8mm, rp_mm_q4_k_dotprod, rp_mm_q4_k_neon;
extern const rp_mm_kernel rp_mm_q6_k_i8mm, rp_mm_q6_k_dotprod, rp_mm_q6_k_neon;
extern const rp_mm_kernel rp_mm_f16_neon, rp_mm_bf16_neon, rp_mm_f32_sme, rp_mm_f32_neon;
extern const rp_attn_kernel rp_attn_f16_neon, rp_attn_q8_0_neon, rp_attn_f32_neon;
extern const rp_ew_kernel rp_ew_neon;

/* X86(a, b, ...) / ARM(a, b, ...): table entries present on x86-64 / aarch64 only (the families above exist
 * only there). */
#if defined(__x86_64__)
#define X86(...) __VA_ARGS__,
#else
#define X86(...)
#endif
#if defined(__aarch64__)
#define ARM(...) __VA_ARGS__,
#else
#define ARM(...)
#endif

/* Ordered from most to least specialized within a type (the ARM entries come first: no type has both). */
static const rp_mm_kernel *const k_mm[] = {
    ARM(&rp_mm_q4_0_sme, &rp_mm_q4_0_i8mm, &rp_mm_q4_0_dotprod, &rp_mm_q4_0_neon, &rp_mm_q8_0_sme,
        &rp_mm_q8_0_i8mm, &rp_mm_q8_0_dotprod, &rp_mm_q8_0_neon, &rp_mm_q4_k_i8mm, &rp_mm_q4_k_dotprod,
        &rp_mm_q4_k_neon, &rp_mm_q6_k_i8mm, &rp_mm_q6_k_dotprod, &rp_mm_q6_k_neon, &rp_mm_f16_neon,
        &rp_mm_bf16_neon, &rp_mm_f32_sme, &rp_mm_f32_neon)
    X86(&rp_mm_q4_0_amx, &rp_mm_q4_0_avx512, &rp_mm_q4_0_avx2) &rp_mm_ref_q4_0,
    X86(&rp_mm_q8_0_amx, &rp_mm_q8_0_avx512, &rp_mm_q8_0_avx2) &rp_mm_ref_q8_0,
    X86(&rp_mm_q4_k_amx, &rp_mm_q4_k_avx512, &rp_mm_q4_k_avx2) &rp_mm_ref_q4_k,
    X86(&rp_mm_q6_k_amx, &rp_mm_q6_k_avx512, &rp_mm_q6_k_avx2) &rp_mm_ref_q6_k,
    X86(&rp_mm_f16_avx512, &rp_mm_f16_avx2) &rp_mm_ref_f16,
    X86(&rp_mm_bf16_amx, &rp_mm_bf16_avx512, &rp_mm_bf16_avx2) &rp_mm_ref_bf16,
    X86(&rp_mm_f32_avx512, &rp_mm_f32_avx2) &rp_mm_ref_f32,
    /* packed into the Q4_0 layout (q8x_legacy_pack.h, exact, as large as the GGUF rows; mm_legacy_avx{512,2}.c)
     * before the unpacked ones, which stay listed for the tests and `reprise bench kernels --each` */
    X86(&rp_mm_q4_1_packed_avx512, &rp_mm_q4_1_packed_avx2, &rp_mm_q4_1_avx512, &rp_mm_q4_1_avx2) &rp_mm_ref_q4_1,
    X86(&rp_mm_q5_0_packed_avx512, &rp_mm_q5_0_packed_avx2, &rp_mm_q5_0_avx512, &rp_mm_q5_0_avx2) &rp_mm_ref_q5_0,
    X86(&rp_mm_q5_1_packed_avx512, &rp_mm_q5_1_packed_avx2, &rp_mm_q5_1_avx512, &rp_mm_q5_1_avx2) &rp_mm_ref_q5_1,
    X86(&rp_mm_iq4_nl_packed_avx512, &rp_mm_iq4_nl_packed_avx2, &rp_mm_iq4_nl_avx512, &rp_mm_iq4_nl_avx2)
        &rp_mm_ref_iq4_nl,
    /* packed (q2k_pack_x86.h; mm_q2_k_avx{512,2}.c) before the unpacked ones */
    X86(&rp_mm_q2_k_packed_avx512, &rp_mm_q2_k_packed_avx2, &rp_mm_q2_k_avx512, &rp_mm_q2_k_avx2) &rp_mm_ref_q2_k,
    /* Q3_K packed into the Q6_K layout and run by the Q6_K AVX2 kernel (mm_q6_k_avx2.c: exact int32 per
     * block), before the unpacked ones. Not the AVX-512 Q6_K kernel: its prefill applies the -32 offset in
     * fp32, and Q3_K's q3 + 32 makes both terms ~32x the result (cancellation past the tests' tolerance). */
    X86(&rp_mm_q3_k_packed_avx2, &rp_mm_q3_k_avx512, &rp_mm_q3_k_avx2) &rp_mm_ref_q3_k,
    /* the packed AVX2 kernel (16-row groups, mm_q5_k_avx2.c) before the unpacked AVX-512 one: it is faster
     * on AVX-512 machines too (bench/RESULTS.md, 2026-12-02); the unpacked ones stay listed for the tests
     * and `reprise bench kernels --each` */
    X86(&rp_mm_q5_k_packed_avx2, &rp_mm_q5_k_avx512, &rp_mm_q5_k_avx2) &rp_mm_ref_q5_k,
    /* packed (mm_iq4_xs_avx2.c) before the unpacked ones, as Q5_K */
    X86(&rp_mm_iq4_xs_packed_avx2, &rp_mm_iq4_xs_avx512, &rp_mm_iq4_xs_avx2) &rp_mm_ref_iq4_xs,
};

static const rp_attn_kernel k_attn_ref[3] = {
    {"attn-f32/ref", RP_CPU_SCALAR, rp_attn_ref},
    {"attn-f16/ref", RP_CPU_SCALAR, rp_attn_ref},
    {"attn-q8_0/ref", RP_CPU_SCALAR, rp_attn_ref},
};

typedef struct { rp_type t; const rp_attn_kernel *k; } attn_entry;

static const attn_entry k_attn[] = {
    ARM({RP_TYPE_F16, &rp_attn_f16_neon}, {RP_TYPE_Q8_0, &rp_attn_q8_0_neon}, {RP_TYPE_F32, &rp_attn_f32_neon})
    X86({RP_TYPE_F16, &rp_attn_f16_avx512}, {RP_TYPE_F16, &rp_attn_f16_avx2}) {RP_TYPE_F16, &k_attn_ref[1]},
    X86({RP_TYPE_Q8_0, &rp_attn_q8_0_avx512}, {RP_TYPE_Q8_0, &rp_attn_q8_0_avx2}) {RP_TYPE_Q8_0, &k_attn_ref[2]},
    X86({RP_TYPE_F32, &rp_attn_f32_avx512}, {RP_TYPE_F32, &rp_attn_f32_avx2}) {RP_TYPE_F32, &k_attn_ref[0]},
};

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

const rp_mm_kernel *rp_mm_kernel_select(rp_type wtype, rp_cpu_level level) {
    for (size_t i = 0; i < N_OF(k_mm); i++) {
        const rp_mm_kernel *k = k_mm[i];
        if (k->wtype == wtype && k->level <= level) return k;
    }
    return NULL;
}

int rp_mm_kernel_list(rp_type wtype, const rp_mm_kernel **out, int cap) {
    int n = 0;
    for (size_t i = 0; i < N_OF(k_mm) && n < cap; i++)
        if (k_mm[i]->wtype == wtype) out[n++] = k_mm[i];
    return n;
}

const rp_attn_kernel *rp_attn_kernel_select(rp_type kv_type, rp_cpu_level level) {
    for (size_t i = 0; i < N_OF(k_attn); i++)
        if (k_attn[i].t == kv_type && k_attn[i].k->level <= level) return k_attn[i].k;
    return NULL;
}

int rp_attn_kernel_list(rp_type kv_type, const rp_attn_kernel **out, int cap) {
    int n = 0;
    for (size_t i = 0; i < N_OF(k_attn) && n < cap; i++)
        if (k_attn[i].t == kv_type) out[n++] = k_attn[i].k;
    return n;
}

static const rp_ew_kernel *const k_ew[] = {ARM(&rp_ew_neon) X86(&rp_ew_avx512, &rp_ew_avx2) &rp_ew_ref};

const rp_ew_kernel *rp_ew_kernel_select(rp_cpu_level level) {
    for (size_t i = 0; i < N_OF(k_ew); i++)
        if (k_ew[i]->level <= level) return k_ew[i];
    return &rp_ew_ref;
}

int rp_ew_kernel_list(const rp_ew_kernel **out, int cap) {
    int n = 0;
    for (size_t i = 0; i < N_OF(k_ew) && n < cap; i++)
        out[n++] = k_ew[i];
    return n;
}
