/* static_registry.c — linked against libreprise.a (not the objects): at every dispatch level the machine has,
 * the kernel registry returns that level's SIMD kernels, not the scalar ones. An archive contributes only the
 * members something references, so a registry that named its kernel families weakly (as it once did) got none
 * of them here, and every model silently ran the reference kernels. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "kernels/cpu.h"
#include "kernels/kernels.h"

/* The families src/kernels/x86/ (src/kernels/arm/ on aarch64) provides: each type's highest level (the ones
 * below it exist too; RP_CPU_SCALAR: none), and `skip`, levels in between that have none of their own (aarch64:
 * no family has SVE2 kernels yet, so the SVE2 level selects the I8MM ones). */
typedef struct { rp_type type; const char *name; rp_cpu_level top; unsigned skip; } family;
#if defined(__aarch64__)
#define NO_SVE2 (1u << RP_CPU_SVE2)
static const family k_mm[] = {
    {RP_TYPE_Q4_0, "q4_0", RP_CPU_SME, NO_SVE2}, {RP_TYPE_Q8_0, "q8_0", RP_CPU_SME, NO_SVE2},
    {RP_TYPE_Q4_K, "q4_k", RP_CPU_I8MM, 0},      {RP_TYPE_Q6_K, "q6_k", RP_CPU_I8MM, 0},
    {RP_TYPE_BF16, "bf16", RP_CPU_NEON, 0},      {RP_TYPE_F16, "f16", RP_CPU_NEON, 0},
    {RP_TYPE_F32, "f32", RP_CPU_SME, (1u << RP_CPU_DOTPROD) | (1u << RP_CPU_I8MM) | NO_SVE2},
};
static const family k_attn[] = {
    {RP_TYPE_F32, "f32", RP_CPU_NEON, 0}, {RP_TYPE_F16, "f16", RP_CPU_NEON, 0}, {RP_TYPE_Q8_0, "q8_0", RP_CPU_NEON, 0},
};
static const rp_cpu_level k_ew_top = RP_CPU_NEON;
#else
static const family k_mm[] = {
    {RP_TYPE_Q4_0, "q4_0", RP_CPU_AMX, 0},   {RP_TYPE_Q8_0, "q8_0", RP_CPU_AMX, 0}, {RP_TYPE_Q4_K, "q4_k", RP_CPU_AMX, 0},
    {RP_TYPE_Q6_K, "q6_k", RP_CPU_AMX, 0},   {RP_TYPE_BF16, "bf16", RP_CPU_AMX, 0}, {RP_TYPE_F16, "f16", RP_CPU_AVX512, 0},
    {RP_TYPE_F32, "f32", RP_CPU_AVX512, 0},
    {RP_TYPE_Q4_1, "q4_1", RP_CPU_AVX512, 0}, {RP_TYPE_Q5_0, "q5_0", RP_CPU_AVX512, 0}, {RP_TYPE_Q5_1, "q5_1", RP_CPU_AVX512, 0},
    {RP_TYPE_IQ4_NL, "iq4_nl", RP_CPU_AVX512, 0}, {RP_TYPE_Q2_K, "q2_k", RP_CPU_AVX512, 0}, {RP_TYPE_Q3_K, "q3_k", RP_CPU_AVX2, 0},
    {RP_TYPE_Q5_K, "q5_k", RP_CPU_AVX2, 0}, {RP_TYPE_IQ4_XS, "iq4_xs", RP_CPU_AVX2, 0},
};
static const family k_attn[] = {
    {RP_TYPE_F32, "f32", RP_CPU_AVX512, 0}, {RP_TYPE_F16, "f16", RP_CPU_AVX512, 0}, {RP_TYPE_Q8_0, "q8_0", RP_CPU_AVX512, 0},
};
static const rp_cpu_level k_ew_top = RP_CPU_AVX512;
#endif

/* the level of the kernel a family's selection at lvl gives: the highest it has at or below lvl */
static rp_cpu_level expect_skip(rp_cpu_level lvl, rp_cpu_level top, unsigned skip) {
    rp_cpu_level l = lvl < top ? lvl : top;
    while (l > RP_CPU_SCALAR && (skip & (1u << l))) l = (rp_cpu_level)(l - 1);
    return l;
}
static rp_cpu_level expect(rp_cpu_level lvl, rp_cpu_level top) { return expect_skip(lvl, top, 0); }

/* Forces each level the machine supports in turn (rp_cpu_set_level, what RP_CPU= does) and hands it to fn. */
static void each_level(void (*fn)(rp_cpu_level)) {
    const rp_cpu_level best = rp_cpu_info_get()->best;
    if (best == RP_CPU_SCALAR)
        RP_SKIP("no SIMD dispatch level on this CPU (%s): only scalar kernels apply\n", rp_cpu_info_get()->brand);
    for (int l = RP_CPU_SCALAR; l <= (int)best; l++) {
        assert_int_equal(rp_cpu_set_level((rp_cpu_level)l), RP_OK);
        assert_int_equal(rp_cpu_level_active(), l);
        fn((rp_cpu_level)l);
    }
    assert_int_equal(rp_cpu_set_level(best), RP_OK);
}

/* The kernel `got` (name, level) is the one for `lvl`: named "<prefix><level>" ("q4_0/avx2", "attn-f16/ref"). */
static void check(const char *prefix, const char *got, rp_cpu_level got_level, rp_cpu_level lvl) {
    char want[64];
    snprintf(want, sizeof want, "%s%s", prefix, lvl == RP_CPU_SCALAR ? "ref" : rp_cpu_level_name(lvl));
    /* "<want>-packed" is the packed kernel of a type that also has unpacked ones at that level */
    const size_t wl = strlen(want);
    const bool ok = !strcmp(got, want) || (!strncmp(got, want, wl) && !strcmp(got + wl, "-packed"));
    if (!ok) print_message("got kernel %s, want %s\n", got, want);
    assert_true(ok);
    assert_int_equal(got_level, lvl);
}

static void check_mm(rp_cpu_level lvl) {
    for (size_t i = 0; i < sizeof k_mm / sizeof k_mm[0]; i++) {
        const rp_mm_kernel *k = rp_mm_kernel_select(k_mm[i].type, rp_cpu_level_active());
        char prefix[32];
        snprintf(prefix, sizeof prefix, "%s/", k_mm[i].name);
        assert_non_null(k);
        check(prefix, k->name, k->level, expect_skip(lvl, k_mm[i].top, k_mm[i].skip));
    }
}

static void check_attn(rp_cpu_level lvl) {
    for (size_t i = 0; i < sizeof k_attn / sizeof k_attn[0]; i++) {
        const rp_attn_kernel *k = rp_attn_kernel_select(k_attn[i].type, rp_cpu_level_active());
        char prefix[32];
        snprintf(prefix, sizeof prefix, "attn-%s/", k_attn[i].name);
        assert_non_null(k);
        check(prefix, k->name, k->level, expect(lvl, k_attn[i].top));
    }
}

static void check_ew(rp_cpu_level lvl) {
    const rp_ew_kernel *k = rp_ew_kernel_select(rp_cpu_level_active());
    check("ew/", k->name, k->level, expect(lvl, k_ew_top));
}

static void test_mm_kernels(void **state) { (void)state; each_level(check_mm); }
static void test_attn_kernels(void **state) { (void)state; each_level(check_attn); }
static void test_ew_kernels(void **state) { (void)state; each_level(check_ew); }

int main(void) {
    /* the AMX level is opt-in (kernels/cpu.c); selecting its kernels runs none of them, so check them too where
     * the machine has AMX */
    setenv("RP_ENABLE_AMX", "1", 0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mm_kernels),
        cmocka_unit_test(test_attn_kernels),
        cmocka_unit_test(test_ew_kernels),
    };
    printf("cpu: %s, best level %s\n", rp_cpu_info_get()->brand, rp_cpu_level_name(rp_cpu_info_get()->best));
    return rp_test_main(tests, NULL, NULL);
}
