/* gpu_test.h — what the GPU tests share: one device for the program (created on first use; the test skips
 * with a clear message, and the program exits 77, when there is no Vulkan device), buffers from host arrays,
 * and closeness checks. */
#ifndef RP_TESTS_GPU_TEST_H
#define RP_TESTS_GPU_TEST_H

#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "gpu/gpu.h"
#include "gpu/gpu_ops.h"

typedef struct {
    rp_gpu *g;
    rp_gpu_ops *ops;
    rp_gpu_rec *rec;
    rp_status st;
    char why[600];
} gpu_fixture;

static gpu_fixture gt;

static int gpu_teardown(void **state) {
    (void)state;
    rp_gpu_rec_free(gt.rec);
    rp_gpu_ops_free(gt.ops);
    rp_gpu_free(gt.g);
    memset(&gt, 0, sizeof gt);
    return 0;
}

/* The device, or a skip naming why there is none. */
#define GPU_REQUIRE()                                                                               \
    do {                                                                                            \
        if (!gt.g && gt.st == RP_OK) {                                                              \
            rp_gpu_params p = rp_gpu_default_params();                                              \
            gt.st = rp_gpu_create(&p, &gt.g);                                                       \
            if (gt.st == RP_OK) gt.st = rp_gpu_ops_create(gt.g, &gt.ops);                           \
            if (gt.st == RP_OK) gt.st = rp_gpu_rec_create(gt.g, 64, &gt.rec);                       \
            if (gt.st != RP_OK) snprintf(gt.why, sizeof gt.why, "%s", rp_last_error());             \
            else print_message("gpu: %s (%s, %s)\n", rp_gpu_device(gt.g)->name,                     \
                               rp_gpu_device(gt.g)->kind, rp_gpu_device(gt.g)->driver);             \
        }                                                                                           \
        if (gt.st == RP_ERR_NOT_FOUND || gt.st == RP_ERR_UNSUPPORTED)                               \
            RP_SKIP("no Vulkan device: %s\n", gt.why);                                              \
        if (gt.st != RP_OK) fail_msg("gpu setup failed: %s", gt.why);                               \
    } while (0)

static inline rp_gpu_buf *gbuf(const void *data, size_t bytes) {
    rp_gpu_buf *b = NULL;
    assert_int_equal(rp_gpu_buf_create(gt.g, bytes, RP_GPU_MEM_DEVICE, &b), RP_OK);
    if (data) assert_int_equal(rp_gpu_buf_write(b, 0, data, bytes), RP_OK);
    return b;
}

static inline void gread(rp_gpu_buf *b, void *dst, size_t bytes) {
    assert_int_equal(rp_gpu_buf_read(b, 0, dst, bytes), RP_OK);
}

static inline void rec_begin(void) { assert_int_equal(rp_gpu_rec_begin(gt.rec), RP_OK); }
static inline void rec_run(void) {
    assert_int_equal(rp_gpu_rec_submit(gt.rec, NULL), RP_OK);
    assert_int_equal(rp_gpu_rec_wait(gt.rec), RP_OK);
}

/* |got - want| <= atol + rtol * |want| for every element, else fails naming the first one off */
static inline void expect_near(const char *what, const float *want, const float *got, size_t n, double atol,
                               double rtol) {
    for (size_t i = 0; i < n; i++) {
        const double d = fabs((double)got[i] - (double)want[i]);
        if (!(d <= atol + rtol * fabs((double)want[i])))
            fail_msg("%s: element %zu: want %.9g got %.9g (|diff| %.3g)", what, i, want[i], got[i], d);
    }
}

static inline void fill_gauss(rp_test_rng *r, float *x, size_t n, float scale) {
    for (size_t i = 0; i < n; i++) x[i] = rp_test_rng_gauss(r) * scale;
}

#endif
