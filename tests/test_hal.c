/* test_hal.c — HAL draft budget: the allocation formula (sum, floors, largest remainder), the EMA, parameter checks. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "sched/hal.h"

static rp_hal_params params(int32_t M, int32_t lmin, float tau) {
    rp_hal_params p = rp_hal_default_params();
    p.budget = M;
    p.l_min = lmin;
    p.tau = tau;
    return p;
}

static void test_defaults(void **state) {
    (void)state;
    rp_hal_params p = rp_hal_default_params();
    assert_int_equal(p.budget, 16);
    assert_int_equal(p.l_min, 1);
    assert_float_equal(p.gamma, 0.3f, 1e-7);
    assert_float_equal(p.a0, 4.0f, 1e-7);
    assert_int_equal(p.fixed_len, 16);
    assert_int_equal(rp_hal_check(&p), RP_OK);
    p.tau = 0;
    assert_int_equal(rp_hal_check(&p), RP_ERR_INVALID_ARG);
    p = rp_hal_default_params();
    p.gamma = 1.5f;
    assert_int_equal(rp_hal_check(&p), RP_ERR_INVALID_ARG);
    p = rp_hal_default_params();
    p.budget = -1;
    assert_int_equal(rp_hal_check(&p), RP_ERR_INVALID_ARG);
}

/* Hand-computed cases. */
static void test_exact_values(void **state) {
    (void)state;
    int32_t out[8];
    float frac[8];
    /* equal A: R = 13 split 4.33 each -> floors 4,4,4 and the one unit left
     * goes to the lowest index among equal fractions */
    rp_hal_params p = params(16, 1, 1.0f);
    float a3[3] = {4, 4, 4};
    rp_hal_allocate(&p, a3, 3, out, frac);
    assert_int_equal(out[0], 6);
    assert_int_equal(out[1], 5);
    assert_int_equal(out[2], 5);
    /* skewed A = {8, 4, 0.5}, tau 1: softmax ~ {0.98148, 0.01798, 0.00054},
     * shares of 13 = {12.759, 0.234, 0.007}: floors 12,0,0, the remainder
     * unit to the largest fraction (0.759, index 0) */
    float b3[3] = {8, 4, 0.5f};
    rp_hal_allocate(&p, b3, 3, out, frac);
    assert_int_equal(out[0], 14);
    assert_int_equal(out[1], 1);
    assert_int_equal(out[2], 1);
    /* larger tau flattens: tau = 8 -> exp({1, .5, .0625}) = {2.718, 1.649, 1.065},
     * shares of 13 = {6.506, 3.947, 2.547}: floors 6,3,2 (11), the two units
     * go to the largest fractions 0.947 (index 1) and 0.547 (index 2) */
    rp_hal_params p8 = params(16, 1, 8.0f);
    rp_hal_allocate(&p8, b3, 3, out, frac);
    assert_int_equal(out[0], 7);
    assert_int_equal(out[1], 5);
    assert_int_equal(out[2], 4);
    /* largest remainder goes to the largest fraction, not the largest A:
     * M = 10, L_min 0, A = {ln 1, ln 2, ln 7} (tau 1): shares = 10 * {0.1,
     * 0.2, 0.7} = {1, 2, 7} exact -> no remainder */
    rp_hal_params p10 = params(10, 0, 1.0f);
    float c3[3] = {0.0f, logf(2.0f), logf(7.0f)};
    rp_hal_allocate(&p10, c3, 3, out, frac);
    assert_int_equal(out[0] + out[1] + out[2], 10);
    assert_int_equal(out[2], 7);
    /* A = {ln 3, ln 3, ln 4} (shares 3.0, 3.0, 4.0 of 10) but M = 11:
     * 3.3, 3.3, 4.4 -> floors 3,3,4 and the unit goes to the largest
     * fraction, 0.4 at index 2 */
    rp_hal_params p11 = params(11, 0, 1.0f);
    float d3[3] = {logf(3.0f), logf(3.0f), logf(4.0f)};
    rp_hal_allocate(&p11, d3, 3, out, frac);
    assert_int_equal(out[0], 3);
    assert_int_equal(out[1], 3);
    assert_int_equal(out[2], 5);
    /* one session gets the whole budget */
    float one = 0.1f;
    rp_hal_allocate(&p, &one, 1, out, frac);
    assert_int_equal(out[0], 16);
    /* more sessions than the floor allows: M = 4, n = 6, L_min 1 -> 0 each,
     * the 4 units to the 4 highest A */
    float e6[6] = {1, 5, 3, 9, 2, 7};
    rp_hal_params p4 = params(4, 1, 1.0f);
    rp_hal_allocate(&p4, e6, 6, out, frac);
    const int32_t want[6] = {0, 1, 1, 1, 0, 1};   /* A = 9, 7, 5, 3 */
    assert_memory_equal(out, want, sizeof want);
}

/* Random inputs: sum == M, floors respected, monotone in A, and the result
 * matches a direct evaluation of the formula. */
static void test_properties(void **state) {
    (void)state;
    srand(12345);
    int32_t out[32];
    float frac[32], a[32];
    for (int it = 0; it < 20000; it++) {
        int32_t n = 1 + rand() % 16;
        int32_t lmin = rand() % 3;
        int32_t M = n * lmin + rand() % 40;
        float tau = 0.25f + (float)(rand() % 100) / 20.0f;
        for (int32_t i = 0; i < n; i++) a[i] = (float)(rand() % 1000) / 100.0f;
        rp_hal_params p = params(M, lmin, tau);
        rp_hal_allocate(&p, a, n, out, frac);
        int32_t sum = 0;
        for (int32_t i = 0; i < n; i++) {
            assert_true(out[i] >= lmin);
            sum += out[i];
        }
        assert_int_equal(sum, M);
        /* each entry is the formula's floor or floor + 1 */
        double mx = a[0], z = 0;
        for (int32_t i = 1; i < n; i++) mx = a[i] > mx ? a[i] : mx;
        for (int32_t i = 0; i < n; i++) z += exp((a[i] - mx) / tau);
        int32_t R = M - n * lmin, bumped = 0;
        for (int32_t i = 0; i < n; i++) {
            double share = R * exp((a[i] - mx) / tau) / z;
            int32_t fl = (int32_t)floor(share + 1e-9);
            int32_t flo = (int32_t)floor(share - 1e-9);
            assert_true(out[i] - lmin == fl || out[i] - lmin == flo || out[i] - lmin == fl + 1 ||
                        out[i] - lmin == flo + 1);
            bumped += out[i] - lmin > flo;
        }
        assert_true(bumped <= n);
        /* higher A never gets less */
        for (int32_t i = 0; i < n; i++)
            for (int32_t j = 0; j < n; j++)
                if (a[i] > a[j]) assert_true(out[i] >= out[j]);
    }
}

static void test_ema(void **state) {
    (void)state;
    rp_hal_params p = rp_hal_default_params();
    float A = p.a0;
    A = rp_hal_update(A, 10, p.gamma);   /* 0.3 * 10 + 0.7 * 4 */
    assert_float_equal(A, 5.8f, 1e-5);
    A = rp_hal_update(A, 0, p.gamma);    /* 0.7 * 5.8 */
    assert_float_equal(A, 4.06f, 1e-5);
    /* a constant k converges to k */
    for (int i = 0; i < 200; i++) A = rp_hal_update(A, 3, p.gamma);
    assert_float_equal(A, 3.0f, 1e-4);
    /* gamma 1: only the last step; gamma 0: frozen */
    assert_float_equal(rp_hal_update(7.0f, 2, 1.0f), 2.0f, 0);
    assert_float_equal(rp_hal_update(7.0f, 2, 0.0f), 7.0f, 0);
}

/* The uniform baseline: floor(M / n) each, the remainder rotating with the
 * step; equal A_i make HAL's own split the same at turn 0. */
static void test_uniform(void **state) {
    (void)state;
    int32_t out[8], ref[8];
    float a[8], frac[8];
    rp_hal_params p = params(16, 1, 1.0f);
    rp_hal_allocate_uniform(&p, 3, 0, out);
    assert_int_equal(out[0], 6);
    assert_int_equal(out[1], 5);
    assert_int_equal(out[2], 5);
    rp_hal_allocate_uniform(&p, 3, 1, out);
    assert_int_equal(out[0], 5);
    assert_int_equal(out[1], 6);
    assert_int_equal(out[2], 5);
    rp_hal_allocate_uniform(&p, 3, 5, out);   /* 5 mod 3 = 2 */
    assert_int_equal(out[0], 5);
    assert_int_equal(out[1], 5);
    assert_int_equal(out[2], 6);
    rp_hal_allocate_uniform(&p, 4, 7, out);
    for (int i = 0; i < 4; i++) assert_int_equal(out[i], 4);
    p = params(10, 1, 1.0f);
    rp_hal_allocate_uniform(&p, 4, 3, out);   /* 2 each, units to entries 3 and 0 */
    assert_int_equal(out[0], 3);
    assert_int_equal(out[1], 2);
    assert_int_equal(out[2], 2);
    assert_int_equal(out[3], 3);
    /* the same as HAL with a flat softmax (any A, all equal) at turn 0 */
    for (int32_t n = 1; n <= 8; n++)
        for (int32_t M = 0; M <= 40; M++) {
            p = params(M, 1, 0.7f);
            for (int i = 0; i < n; i++) a[i] = 2.5f;
            rp_hal_allocate(&p, a, n, ref, frac);
            rp_hal_allocate_uniform(&p, n, 0, out);
            int sum = 0;
            for (int i = 0; i < n; i++) {
                assert_int_equal(out[i], ref[i]);
                sum += out[i];
            }
            assert_int_equal(sum, M);
        }
    rp_hal_allocate_uniform(&p, 0, 0, out);   /* no sessions: nothing written, no division */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_exact_values),
        cmocka_unit_test(test_properties),
        cmocka_unit_test(test_ema),
        cmocka_unit_test(test_uniform),
    };
    return rp_test_main(tests, NULL, NULL);
}
