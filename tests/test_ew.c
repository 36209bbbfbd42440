/* test_ew.c — element-wise kernels (SwiGLU): every SIMD version against the scalar reference on odd sizes and extreme inputs. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "kernels/cpu.h"
#include "kernels/kernels.h"

#define GUARD 8
#define SENTINEL 1234.5f

/* |a - b| within 8 ulp of the reference (the SIMD e^x is ~1 ulp, then a
 * division and a product), or both tiny: for g below about -88 the reference
 * gives -0 (e^-g overflows) and the SIMD kernels a denormal-sized value. */
static void expect_close(const rp_ew_kernel *k, int64_t n, int64_t i, float g, float u, float want, float got) {
    if ((isnan(want) && isnan(got)) || want == got) return;
    const float tol = 8.0f * 1.1920929e-7f * fabsf(want) + 1e-30f;
    if (!(fabsf(want - got) <= tol))
        fail_msg("%s n=%lld i=%lld g=%.9g u=%.9g: ref %.9g got %.9g", k->name, (long long)n, (long long)i, g, u, want,
                 got);
}

static void run_case(const rp_ew_kernel *k, const float *g0, const float *u, int64_t n) {
    float *want = malloc(sizeof(float) * (size_t)(n + GUARD));
    float *got = malloc(sizeof(float) * (size_t)(n + GUARD));
    assert_true(want && got);
    for (int64_t i = 0; i < n + GUARD; i++) want[i] = got[i] = i < n ? g0[i] : SENTINEL;
    extern const rp_ew_kernel rp_ew_ref;
    rp_ew_ref.swiglu(want, u, n);
    k->swiglu(got, u, n);
    for (int64_t i = 0; i < n; i++) expect_close(k, n, i, g0[i], u[i], want[i], got[i]);
    for (int64_t i = n; i < n + GUARD; i++) assert_true(got[i] == SENTINEL);   /* nothing written past n */
    free(want);
    free(got);
}

static void test_swiglu_odd_sizes(void **state) {
    (void)state;
    const rp_ew_kernel *ks[8];
    const int nk = rp_ew_kernel_list(ks, 8);
    assert_true(nk >= 1);
    assert_string_equal(ks[nk - 1]->name, "ew/ref");
    static const int64_t sizes[] = {0, 1, 3, 7, 8, 9, 15, 16, 17, 31, 33, 255, 257, 8192, 8195};
    static const float scales[] = {0.01f, 1.0f, 10.0f, 60.0f};
    rp_test_rng r = {42};
    float *g = malloc(sizeof(float) * 8200), *u = malloc(sizeof(float) * 8200);
    assert_true(g && u);
    for (int q = 0; q < nk; q++) {
        if (ks[q]->level > rp_cpu_info_get()->best) continue;
        for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++)
            for (size_t sc = 0; sc < sizeof scales / sizeof scales[0]; sc++) {
                for (int64_t i = 0; i < sizes[si]; i++) {
                    g[i] = rp_test_rng_gauss(&r) * scales[sc];
                    u[i] = rp_test_rng_gauss(&r);
                }
                run_case(ks[q], g, u, sizes[si]);
            }
    }
    free(g);
    free(u);
}

static void test_swiglu_extremes(void **state) {
    (void)state;
    const float g[] = {0.0f, -0.0f, 1e-30f, -1e-30f, 1.0f, -1.0f, 20.0f, -20.0f, 80.0f, -80.0f, 87.5f, -87.5f,
                       89.0f, 100.0f, 1e6f, 3e38f, NAN, 0.5f, -0.5f};
    const int64_t n = sizeof g / sizeof g[0];
    float u[sizeof g / sizeof g[0]];
    for (int64_t i = 0; i < n; i++) u[i] = (i % 3 == 0) ? -2.0f : 0.75f;
    const rp_ew_kernel *ks[8];
    const int nk = rp_ew_kernel_list(ks, 8);
    for (int q = 0; q < nk; q++) {
        if (ks[q]->level > rp_cpu_info_get()->best) continue;
        run_case(ks[q], g, u, n);
        /* silu(0) = 0 exactly; large positive g passes through: silu(g) * u = g * u */
        float x[3] = {0.0f, 100.0f, 1e6f}, w[3] = {5.0f, 0.75f, -2.0f};
        ks[q]->swiglu(x, w, 3);
        assert_true(x[0] == 0.0f);
        assert_float_equal(x[1], 75.0f, 1e-4);
        assert_float_equal(x[2], -2e6f, 1.0);
    }
}

/* The selection honours the dispatch level: scalar always gets the reference. */
static void test_select(void **state) {
    (void)state;
    assert_string_equal(rp_ew_kernel_select(RP_CPU_SCALAR)->name, "ew/ref");
    const rp_ew_kernel *k = rp_ew_kernel_select(rp_cpu_info_get()->best);
    assert_non_null(k);
    assert_true(k->level <= rp_cpu_info_get()->best);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_swiglu_odd_sizes),
        cmocka_unit_test(test_swiglu_extremes),
        cmocka_unit_test(test_select),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
