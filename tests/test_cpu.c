/* test_cpu.c — dispatch levels: names and parsing per architecture, forcing levels, the public calls, the level
 * the CPU is expected to have (RP_TEST_EXPECT_CPU, set by scripts/arm_test.sh per emulated CPU model). The kernels
 * each level selects: tests/library/static_registry.c. */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reprise.h"
#include "kernels/cpu.h"

static void test_level_names(void **state) {
    (void)state;
    const int top = (int)rp_cpu_level_top();
    assert_true(top >= 0 && top < RP_CPU_LEVEL_COUNT);
    for (int l = 0; l <= top; l++) assert_int_equal(rp_cpu_level_parse(rp_cpu_level_name((rp_cpu_level)l)), l);
    assert_string_equal(rp_cpu_level_name((rp_cpu_level)(top + 1)), "?");
    assert_int_equal(rp_cpu_level_parse("ref"), RP_CPU_SCALAR);
    assert_int_equal(rp_cpu_level_parse("scalar"), RP_CPU_SCALAR);
    assert_int_equal(rp_cpu_level_parse("bogus"), -1);
#if defined(__aarch64__)
    assert_int_equal(top, RP_CPU_SME);
    assert_int_equal(rp_cpu_level_parse("neon"), RP_CPU_NEON);
    assert_int_equal(rp_cpu_level_parse("dotprod"), RP_CPU_DOTPROD);
    assert_int_equal(rp_cpu_level_parse("i8mm"), RP_CPU_I8MM);
    assert_int_equal(rp_cpu_level_parse("sve2"), RP_CPU_SVE2);
    assert_int_equal(rp_cpu_level_parse("sme"), RP_CPU_SME);
    assert_int_equal(rp_cpu_level_parse("avx2"), -1);   /* another architecture's level */
    assert_int_equal(rp_cpu_level_parse("amx"), -1);
    assert_true(rp_cpu_info_get()->neon);               /* architectural on AArch64 */
    assert_true(rp_cpu_info_get()->best >= RP_CPU_NEON);
#elif defined(__x86_64__)
    assert_int_equal(top, RP_CPU_AMX);
    assert_int_equal(rp_cpu_level_parse("avx512"), RP_CPU_AVX512);
    assert_int_equal(rp_cpu_level_parse("neon"), -1);
#else
    assert_int_equal(top, RP_CPU_SCALAR);
    assert_int_equal(rp_cpu_info_get()->best, RP_CPU_SCALAR);
#endif
}

static void test_set_level(void **state) {
    (void)state;
    const rp_cpu_level best = rp_cpu_info_get()->best, was = rp_cpu_level_active();
    assert_int_equal(rp_cpu_set_level((rp_cpu_level)(rp_cpu_level_top() + 1)), RP_ERR_INVALID_ARG);
    if (best < rp_cpu_level_top()) assert_int_equal(rp_cpu_set_level((rp_cpu_level)(best + 1)), RP_ERR_UNSUPPORTED);
    for (int l = 0; l <= (int)best; l++) {
        assert_int_equal(rp_cpu_set_level((rp_cpu_level)l), RP_OK);
        assert_int_equal(rp_cpu_level_active(), l);
    }
    assert_int_equal(rp_cpu_set_level(was), RP_OK);
}

static void test_public_calls(void **state) {
    (void)state;
    const rp_cpu_level was = rp_cpu_level_active();
    const char *best = rp_cpu_level_name(rp_cpu_info_get()->best);
    assert_int_equal(rp_cpu_select("auto"), RP_OK);
    assert_string_equal(rp_cpu_active(), best);
    assert_int_equal(rp_cpu_select("scalar"), RP_OK);
    assert_string_equal(rp_cpu_active(), "scalar");
#if defined(__aarch64__)
    assert_int_equal(rp_cpu_select("avx512"), RP_ERR_INVALID_ARG);
#else
    assert_int_equal(rp_cpu_select("dotprod"), RP_ERR_INVALID_ARG);
#endif
    assert_non_null(strstr(rp_last_error(), "unknown here"));
    assert_non_null(strstr(rp_last_error(), rp_cpu_level_names()));
    char buf[512], want[64];
    assert_true(rp_system_info(buf, sizeof buf) < sizeof buf);
    snprintf(want, sizeof want, "best %s,", best);
    assert_non_null(strstr(buf, want));
    assert_non_null(strstr(buf, rp_cpu_level_names()));
    assert_int_equal(rp_cpu_set_level(was), RP_OK);
}

/* The emulated CPU model's level (scripts/arm_test.sh: cortex-a72 -> neon, neoverse-n1 -> dotprod, ...). */
static void test_expected_level(void **state) {
    (void)state;
    const char *want = getenv("RP_TEST_EXPECT_CPU");
    if (!want || !want[0]) RP_SKIP("RP_TEST_EXPECT_CPU not set (the emulated runs set it)\n");
    assert_string_equal(rp_cpu_level_name(rp_cpu_info_get()->best), want);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_level_names),       cmocka_unit_test(test_set_level),
        cmocka_unit_test(test_public_calls),      cmocka_unit_test(test_expected_level),
    };
    return rp_test_main(tests, NULL, NULL);
}
