/* test_gpu_core.c — the Vulkan backend's core: device listing and selection, buffers (mapped in place on a
 * shared-memory device, staged otherwise), the recorder (many dispatches in one command buffer, reuse, limits)
 * and timeline tickets, replayable recordings. Skips (77) when there is no Vulkan device. */
#include <stdio.h>

#include "gpu_test.h"
#include "kernels/kernels.h"

static void test_list_devices(void **state) {
    (void)state;
    GPU_REQUIRE();
    rp_gpu_desc d[8];
    int32_t n = -1;
    assert_int_equal(rp_gpu_list(d, 8, &n), RP_OK);
    assert_true(n >= 1);
    bool found = false;
    for (int32_t i = 0; i < n && i < 8; i++) {
        assert_int_equal(d[i].index, i);
        assert_true(d[i].name[0] != '\0');
        assert_non_null(d[i].kind);
        assert_true(d[i].n_mem_types >= 1);
        bool dl = false;
        for (int32_t m = 0; m < d[i].n_mem_types; m++) dl |= d[i].mem_types[m].device_local;
        assert_true(dl);   /* every Vulkan device has a device-local type */
        if (!strcmp(d[i].name, rp_gpu_device(gt.g)->name)) found = true;
    }
    assert_true(found);
    assert_true(rp_gpu_device(gt.g)->usable);
    assert_true(rp_gpu_device(gt.g)->subgroup_size >= 1);
    /* cap 0 counts only */
    int32_t n2 = -1;
    assert_int_equal(rp_gpu_list(NULL, 0, &n2), RP_OK);
    assert_int_equal(n2, n);
}

static void test_select_device(void **state) {
    (void)state;
    GPU_REQUIRE();
    const rp_gpu_desc *cur = rp_gpu_device(gt.g);
    char idx[16];
    snprintf(idx, sizeof idx, "%d", cur->index);
    rp_gpu *g = NULL;
    rp_gpu_params p = rp_gpu_default_params();
    p.device = idx;
    assert_int_equal(rp_gpu_create(&p, &g), RP_OK);
    assert_string_equal(rp_gpu_device(g)->name, cur->name);
    rp_gpu_free(g);
    /* a case-insensitive piece of the name */
    char piece[8] = {0};
    for (int i = 0; i < 3 && cur->name[i]; i++) piece[i] = (char)((cur->name[i] >= 'a' && cur->name[i] <= 'z')
                                                                  ? cur->name[i] - 32 : cur->name[i]);
    p.device = piece;
    assert_int_equal(rp_gpu_create(&p, &g), RP_OK);
    rp_gpu_free(g);
    p.device = "no-such-gpu-xyz";
    assert_int_equal(rp_gpu_create(&p, &g), RP_ERR_NOT_FOUND);
    assert_null(g);
    assert_non_null(strstr(rp_last_error(), "no-such-gpu-xyz"));
    p.device = "99";
    assert_int_equal(rp_gpu_create(&p, &g), RP_ERR_NOT_FOUND);
}

static void test_buffers(void **state) {
    (void)state;
    GPU_REQUIRE();
    rp_gpu_buf *b = NULL;
    assert_int_equal(rp_gpu_buf_create(gt.g, 1001, RP_GPU_MEM_DEVICE, &b), RP_OK);
    assert_int_equal(rp_gpu_buf_size(b), 1004);   /* rounded up to words */
    uint8_t zero[1004], in[1001], out[1001];
    memset(zero, 0xAB, sizeof zero);
    assert_int_equal(rp_gpu_buf_read(b, 0, zero, sizeof zero), RP_OK);
    for (size_t i = 0; i < sizeof zero; i++) assert_int_equal(zero[i], 0);   /* created zeroed */
    for (size_t i = 0; i < sizeof in; i++) in[i] = (uint8_t)(i * 7 + 3);
    assert_int_equal(rp_gpu_buf_write(b, 0, in, sizeof in), RP_OK);
    assert_int_equal(rp_gpu_buf_read(b, 0, out, sizeof out), RP_OK);
    assert_memory_equal(in, out, sizeof in);
    assert_int_equal(rp_gpu_buf_write(b, 1000, in, 5), RP_ERR_RANGE);
    assert_int_equal(rp_gpu_buf_read(b, 2000, out, 1), RP_ERR_RANGE);
    const char *stg = getenv("RP_GPU_STAGING");
    const bool staging = stg && *stg && strcmp(stg, "0");
    if (rp_gpu_device(gt.g)->shared_memory && !staging) {
        /* used in place: the map is the buffer */
        uint8_t *m = rp_gpu_buf_map(b);
        assert_non_null(m);
        assert_memory_equal(m, in, sizeof in);
    }
    if (staging) assert_null(rp_gpu_buf_map(b));
    /* a copy between buffers in a recording */
    rp_gpu_buf *c = NULL;
    assert_int_equal(rp_gpu_buf_create(gt.g, 1001, RP_GPU_MEM_HOST, &c), RP_OK);
    assert_non_null(rp_gpu_buf_map(c));
    rec_begin();
    assert_int_equal(rp_gpu_rec_copy(gt.rec, b, 1, c, 0, 1000), RP_OK);
    assert_int_equal(rp_gpu_rec_copy(gt.rec, b, 1, c, 0, 2000), RP_ERR_RANGE);
    rec_run();
    assert_memory_equal(rp_gpu_buf_map(c), in + 1, 1000);
    rp_gpu_buf_free(c);
    rp_gpu_buf_free(b);
}

/* 40 dependent dispatches in one command buffer: x = silu(x) * 1 forty times, each reading the previous one's
 * output (the barriers order them); against the CPU applying the reference 40 times. Then the recorder is
 * reused, and its limit holds. */
static void test_recorder_chain(void **state) {
    (void)state;
    GPU_REQUIRE();
    enum { N = 1037, STEPS = 40 };
    float x[N], ones[N], got[N];
    rp_test_rng r = {7};
    fill_gauss(&r, x, N, 3.0f);
    for (int i = 0; i < N; i++) ones[i] = 1.0f;
    rp_gpu_buf *bx = gbuf(x, sizeof x), *bu = gbuf(ones, sizeof ones);
    extern const rp_ew_kernel rp_ew_ref;
    uint64_t t1 = 0, t2 = 0;
    for (int round = 0; round < 2; round++) {
        rec_begin();
        for (int s = 0; s < STEPS; s++) assert_int_equal(rp_gpu_op_swiglu(gt.ops, gt.rec, bx, bu, N), RP_OK);
        assert_int_equal(rp_gpu_rec_submit(gt.rec, round ? &t2 : &t1), RP_OK);
        assert_int_equal(rp_gpu_wait(gt.g, round ? t2 : t1), RP_OK);
        for (int s = 0; s < STEPS; s++) rp_ew_ref.swiglu(x, ones, N);
        gread(bx, got, sizeof got);
        expect_near("chain", x, got, N, 1e-6, 1e-4);
    }
    assert_true(t2 > t1);   /* the timeline moves on */
    /* the recorder's capacity (64 here) */
    rec_begin();
    rp_status st = RP_OK;
    int n = 0;
    while ((st = rp_gpu_op_swiglu(gt.ops, gt.rec, bx, bu, N)) == RP_OK) n++;
    assert_int_equal(st, RP_ERR_FULL);
    assert_int_equal(n, 64);
    rec_run();
    /* no dispatch outside a recording, none with a zero grid */
    assert_int_equal(rp_gpu_op_swiglu(gt.ops, gt.rec, bx, bu, N), RP_ERR_INVALID_ARG);
    /* a one-time recording cannot be replayed */
    assert_int_equal(rp_gpu_rec_replay(gt.rec, NULL), RP_ERR_INVALID_ARG);
    /* a replayable one: recorded once (3 steps), submitted 4 times, each continuing from the last one's output */
    gread(bx, x, sizeof x);
    assert_int_equal(rp_gpu_rec_begin_replayable(gt.rec), RP_OK);
    for (int s = 0; s < 3; s++) assert_int_equal(rp_gpu_op_swiglu(gt.ops, gt.rec, bx, bu, N), RP_OK);
    assert_int_equal(rp_gpu_rec_replay(gt.rec, NULL), RP_ERR_INVALID_ARG);   /* still open */
    rec_run();
    for (int k = 0; k < 3; k++) {
        assert_int_equal(rp_gpu_rec_replay(gt.rec, NULL), RP_OK);
        assert_int_equal(rp_gpu_rec_wait(gt.rec), RP_OK);
    }
    for (int s = 0; s < 12; s++) rp_ew_ref.swiglu(x, ones, N);
    gread(bx, got, sizeof got);
    expect_near("replayed chain", x, got, N, 1e-6, 1e-4);
    rp_gpu_buf_free(bx);
    rp_gpu_buf_free(bu);
}

static void test_unknown_shader(void **state) {
    (void)state;
    GPU_REQUIRE();
    rp_gpu_kernel *k = NULL;
    const uint32_t wg = 64;
    assert_int_equal(rp_gpu_kernel_create(gt.g, "no_such_shader", 1, 0, &wg, 1, &k), RP_ERR_NOT_FOUND);
    assert_null(k);
    assert_int_equal(rp_gpu_kernel_create(gt.g, "swiglu", 0, 4, &wg, 1, &k), RP_ERR_INVALID_ARG);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_list_devices),   cmocka_unit_test(test_select_device),
        cmocka_unit_test(test_buffers),        cmocka_unit_test(test_recorder_chain),
        cmocka_unit_test(test_unknown_shader),
    };
    return rp_test_main(tests, NULL, gpu_teardown);
}
