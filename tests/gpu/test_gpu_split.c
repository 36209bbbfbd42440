/* test_gpu_split.c — the CPU + GPU column-parallel matmul (src/gpu/gpu_split.h) on lavapipe, where the "GPU" is the
 * CPU, so this is about correctness, not speed: for every weight type both devices compute, and cuts at fractions
 * 0, 1/4, 1/2, 3/4, 1 and at odd row blocks, the CPU's columns equal the CPU-only matmul bit for bit and the GPU's
 * columns the GPU-only one, with nothing written outside the output; a stress run with random delays on the CPU
 * side and a busy GPU queue ahead of the GPU side never returns before both halves are written; the calibration
 * picks the same fraction from the same timings; bad cuts are refused. Skips (77) without a Vulkan device. */
#include <math.h>
#include <stdio.h>
#include <time.h>

#include "gpu_test.h"
#include "gpu/gpu_split.h"
#include "kernels/cpu.h"
#include "kernels/quant.h"

static rp_pool *pool;
static rp_split *sp;

static void split_require(void) {
    if (!pool) assert_int_equal(rp_pool_create(2, &pool), RP_OK);
    if (!sp) assert_int_equal(rp_split_create(gt.g, gt.ops, pool, &sp), RP_OK);
}

static int teardown(void **state) {
    rp_split_free(sp);
    sp = NULL;
    rp_pool_free(pool);
    pool = NULL;
    return gpu_teardown(state);
}

#define ROWS 77
#define COLS 256
#define PAD 6

typedef struct {
    uint8_t *bytes;       /* PAD bytes, then the GGUF rows */
    size_t total;
    rp_weight w;          /* the CPU's prepared copy */
    rp_gpu_buf *gw, *x, *y;
    uint32_t n, ldx, ldy, x_off, y_off;
    size_t ny;
    float *want_cpu, *want_gpu;   /* the whole output of each device alone */
} case_t;

static void case_make(case_t *c, rp_type t, uint32_t n, rp_test_rng *r) {
    memset(c, 0, sizeof *c);
    const size_t rb = rp_type_row_size(t, COLS);
    c->total = PAD + rb * ROWS;
    c->bytes = calloc(1, c->total + 4);
    float *row = malloc(sizeof(float) * COLS);
    assert_true(c->bytes && row);
    for (int i = 0; i < ROWS; i++) {
        fill_gauss(r, row, COLS, 0.5f);
        assert_true(rp_quantize_row(t, row, c->bytes + PAD + (size_t)i * rb, COLS));
    }
    free(row);
    c->w = (rp_weight){.data = c->bytes + PAD, .type = t, .rows = ROWS, .cols = COLS, .row_bytes = rb};
    assert_int_equal(rp_weight_prepare(&c->w, rp_cpu_level_active(), pool, false), RP_OK);
    c->gw = gbuf(c->bytes, c->total);
    c->n = n, c->x_off = 3, c->ldx = COLS + 5, c->y_off = 2, c->ldy = ROWS + 3;
    const size_t nx = c->x_off + (size_t)n * c->ldx;
    c->ny = c->y_off + (size_t)n * c->ldy;
    float *x = malloc(sizeof(float) * nx);
    assert_non_null(x);
    fill_gauss(r, x, nx, 1.0f);
    c->x = gbuf(x, sizeof(float) * nx);
    free(x);
    c->y = gbuf(NULL, sizeof(float) * c->ny);
    c->want_cpu = calloc(c->ny, sizeof(float));
    c->want_gpu = calloc(c->ny, sizeof(float));
    assert_true(c->want_cpu && c->want_gpu);
}

static void case_free(case_t *c) {
    rp_weight_release(&c->w);
    rp_gpu_buf_free(c->gw);
    rp_gpu_buf_free(c->x);
    rp_gpu_buf_free(c->y);
    free(c->bytes);
    free(c->want_cpu);
    free(c->want_gpu);
}

static rp_split_mm_args case_args(const case_t *c, int64_t split) {
    return (rp_split_mm_args){.w = &c->w, .gw = c->gw, .gw_off = PAD, .x = c->x, .y = c->y, .x_off = c->x_off,
                              .ldx = c->ldx, .y_off = c->y_off, .ldy = c->ldy, .n = c->n, .split = split};
}

/* y filled with a sentinel, one split call, y read back */
static void run_split(const case_t *c, int64_t split, float *y) {
    float *m = rp_gpu_buf_map(c->y);
    assert_non_null(m);
    for (size_t i = 0; i < c->ny; i++) m[i] = -7.0f;
    rp_split_mm_args a = case_args(c, split);
    assert_int_equal(rp_split_mm(sp, &a, NULL), RP_OK);
    memcpy(y, m, sizeof(float) * c->ny);
}

/* every output element from the device that owns its column; the sentinel elsewhere */
static void check_split(const case_t *c, int64_t split, const float *y, const char *what) {
    for (size_t i = 0; i < c->ny; i++) {
        const int in = i >= c->y_off && (i - c->y_off) % c->ldy < ROWS;
        const size_t col = in ? (i - c->y_off) % c->ldy : 0;
        const float want = !in ? -7.0f : (int64_t)col < split ? c->want_cpu[i] : c->want_gpu[i];
        if (memcmp(&want, &y[i], sizeof want) != 0)
            fail_msg("%s, split %lld: y[%zu] (column %zu) = %.9g, want %.9g", what, (long long)split, i, col,
                     (double)y[i], (double)want);
    }
}

static const rp_type types[] = {RP_TYPE_F32,  RP_TYPE_F16,  RP_TYPE_BF16, RP_TYPE_Q8_0,   RP_TYPE_Q4_0,
                                RP_TYPE_Q4_1, RP_TYPE_Q5_0, RP_TYPE_Q5_1, RP_TYPE_IQ4_NL, RP_TYPE_Q2_K,
                                RP_TYPE_Q3_K, RP_TYPE_Q4_K, RP_TYPE_Q5_K, RP_TYPE_Q6_K,   RP_TYPE_IQ4_XS};

static void test_split_equals_each_device(void **state) {
    (void)state;
    GPU_REQUIRE();
    split_require();
    rp_test_rng r = {21};
    const uint32_t ns[2] = {1, 5};   /* decode and a small prefill */
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++)
        for (int ni = 0; ni < 2; ni++) {
            case_t c;
            case_make(&c, types[ti], ns[ni], &r);
            /* each device alone: all rows on the CPU, all on the GPU */
            run_split(&c, ROWS, c.want_cpu);
            run_split(&c, 0, c.want_gpu);
            /* the CPU-only output is the plain CPU matmul */
            float *ref = calloc(c.ny, sizeof(float));
            assert_non_null(ref);
            for (size_t i = 0; i < c.ny; i++) ref[i] = -7.0f;
            rp_mm_scratch mm = {0};
            assert_int_equal(rp_mm_scratch_reserve(&mm, rp_pool_n_threads(pool), &c.w, c.n), RP_OK);
            rp_matmul(pool, &c.w, (const float *)rp_gpu_buf_map(c.x) + c.x_off, c.n, c.ldx, ref + c.y_off, c.ldy,
                      &mm);
            rp_mm_scratch_free(&mm);
            assert_memory_equal(ref, c.want_cpu, sizeof(float) * c.ny);
            free(ref);
            /* the two devices agree within quantization noise (the CPU rounds activations for quantized types) */
            for (uint32_t j = 0; j < c.n; j++)
                for (int o = 0; o < ROWS; o++) {
                    const size_t i = c.y_off + (size_t)j * c.ldy + (size_t)o;
                    /* a sanity bound (the exact checks are per device below): |y| ~ 0.5 x sqrt(256) = 8, and Q8_K
                     * activations (one scale per 256) put ~0.2 of noise on a Q2_K dot */
                    if (!(fabsf(c.want_cpu[i] - c.want_gpu[i]) <= 0.5f + 0.03f * fabsf(c.want_gpu[i])))
                        fail_msg("%s n=%u: column %d row %u: CPU %.6g, GPU %.6g",
                                 rp_type_get_traits((int)types[ti])->name, c.n, o, j, (double)c.want_cpu[i],
                                 (double)c.want_gpu[i]);
                }
            char what[64];
            snprintf(what, sizeof what, "%s n=%u", rp_type_get_traits((int)types[ti])->name, c.n);
            const int64_t rb = c.w.k->row_block > 0 ? c.w.k->row_block : 1;
            const double fs[5] = {0.0, 0.25, 0.5, 0.75, 1.0};
            float *y = malloc(sizeof(float) * c.ny);
            assert_non_null(y);
            for (int k = 0; k < 5; k++) {
                const int64_t s = rp_split_point(&c.w, fs[k]);
                assert_true(s == 0 || s == ROWS || s % rb == 0);
                run_split(&c, s, y);
                check_split(&c, s, y, what);
            }
            for (int64_t s = rb; s < ROWS; s += 3 * rb) {   /* odd cuts: 1, 4, 7 ... row blocks */
                run_split(&c, s, y);
                check_split(&c, s, y, what);
            }
            free(y);
            case_free(&c);
        }
}

typedef struct {
    rp_test_rng r;
    int calls;
} delay_state;

static void random_delay(void *user) {
    delay_state *d = user;
    d->calls++;
    const unsigned us = (unsigned)(rp_test_rng_next(&d->r) % 400);
    struct timespec ts = {0, (long)us * 1000L};
    nanosleep(&ts, NULL);
}

static void test_split_barrier_stress(void **state) {
    (void)state;
    GPU_REQUIRE();
    split_require();
    rp_test_rng r = {22};
    case_t c;
    case_make(&c, RP_TYPE_Q4_0, 3, &r);
    run_split(&c, ROWS, c.want_cpu);
    run_split(&c, 0, c.want_gpu);
    /* a long GPU job queued ahead of the split's GPU half on another recorder (the same queue), so the GPU side
     * finishes late; the CPU side sleeps at random before its half, so it finishes late in other rounds */
    case_t big;
    case_make(&big, RP_TYPE_F32, 8, &r);
    delay_state d = {{23}, 0};
    rp_split_set_cpu_hook(sp, random_delay, &d);
    const int64_t rb = c.w.k->row_block > 0 ? c.w.k->row_block : 1;
    float *y = malloc(sizeof(float) * c.ny);
    assert_non_null(y);
    int cpu_calls = 0;
    for (int it = 0; it < 60; it++) {
        const int64_t s = (int64_t)(rp_test_rng_next(&r) % (ROWS / rb + 1)) * rb;
        if (it % 2 == 0) {
            assert_int_equal(rp_gpu_rec_begin(gt.rec), RP_OK);
            for (int k = 0; k < 6; k++) {
                rp_gpu_mm m = {.w = big.gw, .x = big.x, .y = big.y, .wtype = RP_TYPE_F32, .rows = ROWS, .cols = COLS,
                               .n = big.n, .w_off = PAD, .row_bytes = (uint32_t)big.w.row_bytes, .x_off = big.x_off,
                               .ldx = big.ldx, .y_off = big.y_off, .ldy = big.ldy};
                assert_int_equal(rp_gpu_op_mul_mat(gt.ops, gt.rec, &m), RP_OK);
            }
            assert_int_equal(rp_gpu_rec_submit(gt.rec, NULL), RP_OK);   /* not waited for here */
        }
        if (s > 0) cpu_calls++;
        run_split(&c, s, y);
        check_split(&c, s, y, "stress");
    }
    assert_int_equal(rp_gpu_rec_wait(gt.rec), RP_OK);
    assert_int_equal(d.calls, cpu_calls);   /* the hook ran once per call with a CPU half */
    rp_split_set_cpu_hook(sp, NULL, NULL);
    free(y);
    case_free(&big);
    case_free(&c);
}

/* a scripted clock: each timed call (two readings) lasts dur[call] seconds */
typedef struct {
    const double *dur;
    int reading;
    double t;
} script_clock;

static double scripted(void *user) {
    script_clock *s = user;
    const int call = s->reading / 2;
    if (s->reading++ % 2 == 1) s->t += s->dur[call];
    return s->t;
}

static void test_split_calibrate(void **state) {
    (void)state;
    GPU_REQUIRE();
    split_require();
    rp_test_rng r = {24};
    case_t c;
    case_make(&c, RP_TYPE_Q8_0, 2, &r);
    const double f[4] = {0.0, 0.25, 0.5, 1.0};
    /* 3 reps per fraction; medians 5, 3, 3, 9: the first of the two lowest (0.25) wins */
    const double dur[12] = {5, 1, 6, 3, 9, 2, 3, 3, 4, 9, 9, 1};
    double med[4], best = -1;
    for (int round = 0; round < 2; round++) {   /* the same timings give the same choice */
        script_clock sc = {dur, 0, 0.0};
        rp_split_mm_args a = case_args(&c, 0);
        assert_int_equal(rp_split_calibrate(sp, &a, f, 4, 3, scripted, &sc, &best, med), RP_OK);
        assert_true(best == 0.25);
        assert_true(med[0] == 5 && med[1] == 3 && med[2] == 3 && med[3] == 9);
        assert_int_equal(sc.reading, 24);
    }
    /* with the real clock it runs and picks one of the candidates */
    rp_split_mm_args a = case_args(&c, 0);
    assert_int_equal(rp_split_calibrate(sp, &a, f, 4, 2, NULL, NULL, &best, NULL), RP_OK);
    assert_true(best == 0.0 || best == 0.25 || best == 0.5 || best == 1.0);
    case_free(&c);
}

static void test_split_rejects(void **state) {
    (void)state;
    GPU_REQUIRE();
    split_require();
    rp_test_rng r = {25};
    case_t c;
    case_make(&c, RP_TYPE_Q4_K, 1, &r);
    rp_split_mm_args a = case_args(&c, ROWS + 1);
    assert_int_equal(rp_split_mm(sp, &a, NULL), RP_ERR_INVALID_ARG);   /* past the rows */
    a.split = -1;
    assert_int_equal(rp_split_mm(sp, &a, NULL), RP_ERR_INVALID_ARG);
    if (c.w.k->row_block > 1) {
        a.split = 1;   /* inside the CPU kernel's first row block */
        assert_int_equal(rp_split_mm(sp, &a, NULL), RP_ERR_INVALID_ARG);
    }
    a = case_args(&c, 0);
    a.ldx = COLS - 1;
    assert_int_equal(rp_split_mm(sp, &a, NULL), RP_ERR_INVALID_ARG);
    a = case_args(&c, 0);
    a.n = 50;   /* y is too small for 50 rows */
    assert_int_equal(rp_split_mm(sp, &a, NULL), RP_ERR_RANGE);
    assert_int_equal(rp_split_point(&c.w, -0.5), 0);
    assert_int_equal(rp_split_point(&c.w, 2.0), ROWS);
    case_free(&c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_split_equals_each_device),
        cmocka_unit_test(test_split_barrier_stress),
        cmocka_unit_test(test_split_calibrate),
        cmocka_unit_test(test_split_rejects),
    };
    return rp_test_main(tests, NULL, teardown);
}
