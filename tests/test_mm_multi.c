/* test_mm_multi.c — rp_mm_run_multi (q/k/v and gate/up in one parallel loop) equals separate rp_mm_run calls bit for bit. */
#include "testutil.h"

#include "core/threadpool.h"
#include "kernels/cpu.h"
#include "kernels/matmul.h"
#include "kernels/quant.h"
#include "kernels/types.h"

#include <stdlib.h>
#include <string.h>

#define MAXW 6

typedef struct {
    int nw;
    rp_weight w[MAXW];
    uint8_t *data[MAXW];
} wset;

static void make_set(wset *s, rp_type t, const int64_t *rows, int nw, int64_t cols, rp_cpu_level lvl, rp_pool *pool,
                     uint64_t seed) {
    rp_test_rng r = {seed * 0x9E3779B97F4A7C15ull + 3};
    float *row = malloc(sizeof(float) * (size_t)cols);
    assert_non_null(row);
    s->nw = nw;
    for (int i = 0; i < nw; i++) {
        const size_t rb = rp_type_row_size(t, cols);
        s->data[i] = malloc(rb * (size_t)rows[i]);
        assert_non_null(s->data[i]);
        for (int64_t q = 0; q < rows[i]; q++) {
            for (int64_t c = 0; c < cols; c++) row[c] = rp_test_rng_gauss(&r) * 0.1f;
            rp_quantize_row(t, row, s->data[i] + (size_t)q * rb, cols);
        }
        s->w[i] = (rp_weight){.data = s->data[i], .type = t, .rows = rows[i], .cols = cols, .row_bytes = rb};
        assert_int_equal(rp_weight_prepare(&s->w[i], lvl, pool, false), RP_OK);
    }
    free(row);
}

static void free_set(wset *s) {
    for (int i = 0; i < s->nw; i++) {
        rp_weight_release(&s->w[i]);
        free(s->data[i]);
    }
}

/* Runs the set both ways on n activation rows and compares every output. */
static void check(rp_type t, const int64_t *rows, int nw, int64_t cols, int64_t n, rp_cpu_level lvl, int threads) {
    rp_pool *pool = NULL;
    assert_int_equal(rp_pool_create(threads, &pool), RP_OK);
    wset s;
    make_set(&s, t, rows, nw, cols, lvl, pool, (uint64_t)(cols * 131 + n * 7 + nw));
    rp_mm_scratch sc = {0};
    for (int i = 0; i < nw; i++) assert_int_equal(rp_mm_scratch_reserve(&sc, threads, &s.w[i], n), RP_OK);
    float *x = malloc(sizeof(float) * (size_t)(n * cols));
    assert_non_null(x);
    rp_test_rng r = {77 + (uint64_t)n};
    for (int64_t i = 0; i < n * cols; i++) x[i] = rp_test_rng_gauss(&r);
    float *ya[MAXW], *yb[MAXW];
    int64_t ld[MAXW];
    const rp_weight *wp[MAXW];
    for (int i = 0; i < nw; i++) {
        ld[i] = rows[i] + 3;   /* a stride wider than the rows: nothing past a row's end is written */
        ya[i] = malloc(sizeof(float) * (size_t)(n * ld[i]));
        yb[i] = malloc(sizeof(float) * (size_t)(n * ld[i]));
        assert_true(ya[i] && yb[i]);
        for (int64_t q = 0; q < n * ld[i]; q++) ya[i][q] = yb[i][q] = -12345.0f;
        wp[i] = &s.w[i];
        if (i) assert_true(rp_mm_same_act(&s.w[0], &s.w[i]));
    }
    const size_t st = rp_mm_quantize(pool, &s.w[0], x, n, cols, &sc);
    for (int i = 0; i < nw; i++) rp_mm_run(pool, &s.w[i], 0, rows[i], n, st, ya[i], ld[i], &sc);
    rp_mm_run_multi(pool, wp, nw, n, st, yb, ld, &sc);
    for (int i = 0; i < nw; i++)
        for (int64_t m = 0; m < n; m++)
            for (int64_t q = 0; q < ld[i]; q++) {
                const float a = ya[i][m * ld[i] + q], b = yb[i][m * ld[i] + q];
                if (memcmp(&a, &b, sizeof a) != 0)
                    fail_msg("%s/%s nw=%d cols=%lld n=%lld T=%d: weight %d row %lld out %lld: %.9g vs %.9g",
                             s.w[i].k->name, rp_cpu_level_name(lvl), nw, (long long)cols, (long long)n, threads, i,
                             (long long)m, (long long)q, a, b);
                if (q >= rows[i]) assert_true(b == -12345.0f);
            }
    for (int i = 0; i < nw; i++) { free(ya[i]); free(yb[i]); }
    free(x);
    rp_mm_scratch_free(&sc);
    free_set(&s);
    rp_pool_free(pool);
}

static void check_type(rp_type t, int64_t cols) {
    /* q/k/v-like (GQA: small k, v), gate/up-like, odd row counts, and more
     * weights than RP_MM_MULTI_MAX (the fallback) */
    static const int64_t qkv[] = {160, 40, 40}, odd[] = {17, 1, 33, 5}, gu[] = {96, 96}, many[] = {16, 3, 31, 8, 2};
    static const int64_t ns[] = {1, 3, 5, 37};
    for (int lv = 0; lv <= (int)rp_cpu_info_get()->best && lv < RP_CPU_AMX; lv++) {
        const rp_cpu_level lvl = (rp_cpu_level)lv;
        for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
            check(t, qkv, 3, cols, ns[k], lvl, 2);
            check(t, gu, 2, cols, ns[k], lvl, 3);
        }
        check(t, odd, 4, cols, 3, lvl, 2);
        check(t, many, 5, cols, 1, lvl, 2);
        check(t, qkv, 3, cols, 1, lvl, 1);
    }
}

static void test_multi_q4_0(void **state) { (void)state; check_type(RP_TYPE_Q4_0, 4096); check_type(RP_TYPE_Q4_0, 96); }
static void test_multi_q8_0(void **state) { (void)state; check_type(RP_TYPE_Q8_0, 2048); }
static void test_multi_q4_k(void **state) { (void)state; check_type(RP_TYPE_Q4_K, 2048); }
static void test_multi_q6_k(void **state) { (void)state; check_type(RP_TYPE_Q6_K, 512); }
static void test_multi_f16(void **state) { (void)state; check_type(RP_TYPE_F16, 1000); }

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_multi_q4_0), cmocka_unit_test(test_multi_q8_0), cmocka_unit_test(test_multi_q4_k),
        cmocka_unit_test(test_multi_q6_k), cmocka_unit_test(test_multi_f16),
    };
    return rp_test_main(tests, NULL, NULL);
}
