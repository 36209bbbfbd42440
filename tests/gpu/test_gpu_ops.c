/* test_gpu_ops.c — every GPU kernel (src/gpu/shaders) against the CPU reference on odd shapes: matmul over every
 * weight type the CPU computes (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, Q2_K, Q3_K, Q4_K, Q5_K,
 * Q6_K, IQ4_XS) in ggml's block layouts (decode n = 1 and prefill n > 1, offsets and strides), embedding lookup of
 * each, RMSNorm (with the residual add), RoPE (NORM and NEOX, llama3-scaled frequencies,
 * partial rotation), SwiGLU, softmax, F16 KV cache writes and attention over an F16 cache with GQA (one row and
 * several, tiles crossed). Skips (77) when there is no Vulkan device. */
#include <stdio.h>

#include "gpu_test.h"
#include "kernels/kernels.h"
#include "kernels/quant.h"

/* a rows x cols matrix of type t from gaussian floats: the GGUF bytes (at byte `pad` of the buffer) and the
 * reference's dequantized floats */
typedef struct {
    uint8_t *bytes;
    float *deq;
    size_t row_bytes, total;
} wmat;

static wmat make_w(rp_test_rng *r, rp_type t, int64_t rows, int64_t cols, size_t pad) {
    wmat m;
    m.row_bytes = rp_type_row_size(t, cols);
    assert_true(m.row_bytes > 0);
    m.total = pad + m.row_bytes * (size_t)rows;
    m.bytes = calloc(1, m.total + 4);
    m.deq = malloc(sizeof(float) * (size_t)(rows * cols));
    float *src = malloc(sizeof(float) * (size_t)cols);
    assert_true(m.bytes && m.deq && src);
    for (int64_t i = 0; i < rows; i++) {
        fill_gauss(r, src, (size_t)cols, 0.5f);
        assert_true(rp_quantize_row(t, src, m.bytes + pad + (size_t)i * m.row_bytes, cols));
        assert_true(rp_dequantize_row(t, m.bytes + pad + (size_t)i * m.row_bytes, m.deq + i * cols, cols));
    }
    free(src);
    return m;
}

static void free_w(wmat *m) {
    free(m->bytes);
    free(m->deq);
}

typedef struct { uint32_t rows, cols, n; } mm_shape;

/* every weight type the GPU kernels take, and that make_w can quantize */
static const rp_type wtypes_all[] = {RP_TYPE_F32,  RP_TYPE_F16,  RP_TYPE_BF16, RP_TYPE_Q8_0,   RP_TYPE_Q4_0,
                                     RP_TYPE_Q4_1, RP_TYPE_Q5_0, RP_TYPE_Q5_1, RP_TYPE_IQ4_NL, RP_TYPE_Q2_K,
                                     RP_TYPE_Q3_K, RP_TYPE_Q4_K, RP_TYPE_Q5_K, RP_TYPE_Q6_K,   RP_TYPE_IQ4_XS};

static void mm_case(rp_type t, mm_shape s, rp_test_rng *r) {
    const uint32_t pad = 6, x_off = 3, ldx = s.cols + 5, y_off = 2, ldy = s.rows + 3;
    wmat w = make_w(r, t, s.rows, s.cols, pad);
    const size_t nx = x_off + (size_t)s.n * ldx, ny = y_off + (size_t)s.n * ldy;
    float *x = malloc(sizeof(float) * nx), *y = malloc(sizeof(float) * ny), *want = malloc(sizeof(float) * ny);
    double *tol = malloc(sizeof(double) * ny);
    assert_true(x && y && want && tol);
    fill_gauss(r, x, nx, 1.0f);
    for (size_t i = 0; i < ny; i++) want[i] = -7.0f, tol[i] = 0;   /* untouched outside the outputs */
    for (uint32_t j = 0; j < s.n; j++)
        for (uint32_t o = 0; o < s.rows; o++) {
            double acc = 0, mag = 0;
            for (uint32_t c = 0; c < s.cols; c++) {
                const double p = (double)w.deq[(size_t)o * s.cols + c] * x[x_off + j * ldx + c];
                acc += p;
                mag += fabs(p);
            }
            want[y_off + j * ldy + o] = (float)acc;
            tol[y_off + j * ldy + o] = 1e-6 + 2e-6 * mag;
        }
    rp_gpu_buf *bw = gbuf(w.bytes, w.total), *bx = gbuf(x, sizeof(float) * nx), *by = gbuf(NULL, sizeof(float) * ny);
    for (size_t i = 0; i < ny; i++) y[i] = -7.0f;
    assert_int_equal(rp_gpu_buf_write(by, 0, y, sizeof(float) * ny), RP_OK);
    rp_gpu_mm a = {.w = bw, .x = bx, .y = by, .wtype = t, .rows = s.rows, .cols = s.cols, .n = s.n, .w_off = pad,
                   .row_bytes = (uint32_t)w.row_bytes, .x_off = x_off, .ldx = ldx, .y_off = y_off, .ldy = ldy};
    rec_begin();
    assert_int_equal(rp_gpu_op_mul_mat(gt.ops, gt.rec, &a), RP_OK);
    rec_run();
    gread(by, y, sizeof(float) * ny);
    for (size_t i = 0; i < ny; i++)
        if (!(fabs((double)y[i] - want[i]) <= tol[i]))
            fail_msg("mul_mat %s %ux%u n=%u: y[%zu] want %.7g got %.7g", rp_type_get_traits((int)t)->name, s.rows,
                     s.cols, s.n, i, want[i], y[i]);
    rp_gpu_buf_free(bw);
    rp_gpu_buf_free(bx);
    rp_gpu_buf_free(by);
    free(x); free(y); free(want); free(tol);
    free_w(&w);
}

static void test_mul_mat(void **state) {
    (void)state;
    GPU_REQUIRE();
    rp_test_rng r = {11};
    static const mm_shape plain[] = {{7, 37, 1}, {33, 129, 3}, {65, 255, 5}, {3, 1, 2}, {1, 64, 9}};
    static const mm_shape q32[] = {{1, 32, 1}, {7, 96, 1}, {33, 288, 3}, {67, 160, 5}, {13, 64, 9}};
    static const mm_shape qk[] = {{1, 256, 1}, {9, 512, 1}, {17, 768, 3}, {5, 256, 6}};
    for (size_t ti = 0; ti < sizeof wtypes_all / sizeof wtypes_all[0]; ti++) {
        const rp_type t = wtypes_all[ti];
        const int64_t bs = rp_type_get_traits((int)t)->blck_size;
        const mm_shape *sh = bs == 1 ? plain : bs == 256 ? qk : q32;
        const size_t ns = bs == 256 ? 4 : 5;
        for (size_t i = 0; i < ns; i++) mm_case(t, sh[i], &r);
    }
    /* more rows than one grid dimension holds (32768 per dimension here) */
    mm_case(RP_TYPE_F16, (mm_shape){32771, 8, 1}, &r);
}

static void test_mul_mat_rejects(void **state) {
    (void)state;
    GPU_REQUIRE();
    rp_gpu_buf *b = gbuf(NULL, 4096);
    rec_begin();
    rp_gpu_mm a = {.w = b, .x = b, .y = b, .wtype = RP_TYPE_Q4_0, .rows = 2, .cols = 48, .n = 1, .row_bytes = 27,
                   .ldx = 48, .ldy = 2};
    assert_int_equal(rp_gpu_op_mul_mat(gt.ops, gt.rec, &a), RP_ERR_INVALID_ARG);   /* 48 is not a block multiple */
    a.cols = 64, a.row_bytes = 36, a.ldx = 64, a.rows = 200;
    assert_int_equal(rp_gpu_op_mul_mat(gt.ops, gt.rec, &a), RP_ERR_RANGE);   /* the buffer is too small */
    a.wtype = RP_TYPE_IQ2_XXS;   /* a type the CPU does not compute either */
    assert_int_equal(rp_gpu_op_mul_mat(gt.ops, gt.rec, &a), RP_ERR_UNSUPPORTED);
    rec_run();
    rp_gpu_buf_free(b);
}

static void test_get_rows(void **state) {
    (void)state;
    GPU_REQUIRE();
    rp_test_rng r = {12};
    for (size_t ti = 0; ti < sizeof wtypes_all / sizeof wtypes_all[0]; ti++) {
        const rp_type t = wtypes_all[ti];
        const int64_t bs = rp_type_get_traits((int)t)->blck_size;
        const uint32_t rows = 19, cols = bs == 1 ? 75 : bs == 256 ? 512 : 96;
        wmat w = make_w(&r, t, rows, cols, 2);
        const int32_t ids[5] = {5, 0, 18, 5, 11};
        const uint32_t ldy = cols + 1;
        float *y = malloc(sizeof(float) * 5 * ldy), *want = malloc(sizeof(float) * 5 * ldy);
        assert_true(y && want);
        for (int i = 0; i < 5; i++)
            for (uint32_t c = 0; c < ldy; c++) want[i * ldy + c] = c < cols ? w.deq[(size_t)ids[i] * cols + c] : 0.0f;
        rp_gpu_buf *bw = gbuf(w.bytes, w.total), *bi = gbuf(ids, sizeof ids), *by = gbuf(NULL, sizeof(float) * 5 * ldy);
        rec_begin();
        assert_int_equal(rp_gpu_op_get_rows(gt.ops, gt.rec, bw, t, 2, (uint32_t)w.row_bytes, cols, bi, 5, by, 0, ldy),
                         RP_OK);
        rec_run();
        gread(by, y, sizeof(float) * 5 * ldy);
        char what[64];
        snprintf(what, sizeof what, "get_rows %s", rp_type_get_traits((int)t)->name);
        expect_near(what, want, y, 5 * (size_t)ldy, 1e-7, 1e-6);
        rp_gpu_buf_free(bw); rp_gpu_buf_free(bi); rp_gpu_buf_free(by);
        free(y); free(want);
        free_w(&w);
    }
}

static void test_rmsnorm(void **state) {
    (void)state;
    GPU_REQUIRE();
    rp_test_rng r = {13};
    static const uint32_t ns[] = {1, 7, 64, 100, 4097};
    for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++)
        for (int add = 0; add < 2; add++) {
            const uint32_t n = ns[k], rows = 3, ldx = n + 2, ldo = n + 1;
            float *x = malloc(sizeof(float) * rows * ldx), *res = malloc(sizeof(float) * rows * ldx);
            float *w = malloc(sizeof(float) * n), *want = calloc(rows * ldo, sizeof(float));
            float *got = malloc(sizeof(float) * rows * ldo), *xgot = malloc(sizeof(float) * rows * ldx);
            assert_true(x && res && w && want && got && xgot);
            fill_gauss(&r, x, rows * ldx, 2.0f);
            fill_gauss(&r, res, rows * ldx, 1.0f);
            fill_gauss(&r, w, n, 1.0f);
            rp_gpu_buf *bx = gbuf(x, sizeof(float) * rows * ldx), *br = gbuf(res, sizeof(float) * rows * ldx);
            rp_gpu_buf *bw = gbuf(w, sizeof(float) * n), *bo = gbuf(NULL, sizeof(float) * rows * ldo);
            for (uint32_t i = 0; i < rows; i++) {
                if (add)
                    for (uint32_t e = 0; e < n; e++) x[i * ldx + e] += res[i * ldx + e];
                rp_rmsnorm_ref(want + i * ldo, x + i * ldx, w, n, 1e-5f);
            }
            rec_begin();
            assert_int_equal(rp_gpu_op_rmsnorm(gt.ops, gt.rec, bx, add ? br : NULL, bw, bo, n, rows, ldx, ldo, 1e-5f),
                             RP_OK);
            rec_run();
            gread(bo, got, sizeof(float) * rows * ldo);
            expect_near(add ? "rmsnorm+add" : "rmsnorm", want, got, rows * ldo, 1e-6, 2e-5);
            if (add) {
                gread(bx, xgot, sizeof(float) * rows * ldx);
                for (uint32_t i = 0; i < rows; i++)
                    expect_near("rmsnorm residual", x + i * ldx, xgot + i * ldx, n, 0, 0);
            }
            rp_gpu_buf_free(bx); rp_gpu_buf_free(br); rp_gpu_buf_free(bw); rp_gpu_buf_free(bo);
            free(x); free(res); free(w); free(want); free(got); free(xgot);
        }
}

/* Llama 3.1's frequencies (base 500000, factor 8, low 1, high 4, original context 8192), as model.c builds them */
static void llama3_inv_freq(float *f, int32_t n_rot) {
    for (int i = 0; i < n_rot / 2; i++) {
        double v = pow(500000.0, -2.0 * i / n_rot);
        const double wl = 2.0 * M_PI / v, lo = 8192 / 1.0, hi = 8192 / 4.0;
        if (wl > lo) v /= 8.0;
        else if (wl >= hi) {
            const double sm = (8192 / wl - 1.0) / (4.0 - 1.0);
            v = (1.0 - sm) * v / 8.0 + sm * v;
        }
        f[i] = (float)v;
    }
}

static void rope_case(uint32_t rows, uint32_t heads, uint32_t hd, uint32_t n_rot, bool neox, rp_test_rng *r) {
    const uint32_t ldx = heads * hd + 3, x_off = 1;
    const size_t nx = x_off + (size_t)rows * ldx;
    float *x = malloc(sizeof(float) * nx), *got = malloc(sizeof(float) * nx);
    float *cs = malloc(sizeof(float) * rows * n_rot);
    float inv[256];
    assert_true(x && got && cs);
    fill_gauss(r, x, nx, 1.0f);
    llama3_inv_freq(inv, (int32_t)n_rot);
    for (uint32_t i = 0; i < rows; i++) {
        const int32_t pos = (int32_t)(i * 997 + 3);   /* far positions too */
        for (uint32_t f = 0; f < n_rot / 2; f++) {
            cs[i * n_rot + f] = (float)cos((double)pos * inv[f]);
            cs[i * n_rot + n_rot / 2 + f] = (float)sin((double)pos * inv[f]);
        }
    }
    rp_gpu_buf *bx = gbuf(x, sizeof(float) * nx), *bc = gbuf(cs, sizeof(float) * rows * n_rot);
    for (uint32_t i = 0; i < rows; i++)
        for (uint32_t h = 0; h < heads; h++)
            rp_rope_ref(x + x_off + i * ldx + h * hd, cs + i * n_rot, cs + i * n_rot + n_rot / 2, (int32_t)n_rot, neox);
    rec_begin();
    assert_int_equal(rp_gpu_op_rope(gt.ops, gt.rec, bx, x_off, ldx, rows, heads, hd, n_rot, neox, bc), RP_OK);
    rec_run();
    gread(bx, got, sizeof(float) * nx);
    expect_near(neox ? "rope neox" : "rope norm", x, got, nx, 1e-6, 1e-6);
    rp_gpu_buf_free(bx); rp_gpu_buf_free(bc);
    free(x); free(got); free(cs);
}

static void test_rope(void **state) {
    (void)state;
    GPU_REQUIRE();
    rp_test_rng r = {14};
    for (int neox = 0; neox < 2; neox++) {
        rope_case(5, 3, 64, 64, neox, &r);
        rope_case(7, 5, 96, 32, neox, &r);   /* partial rotation: dims 32..95 untouched */
        rope_case(1, 32, 128, 128, neox, &r);
        rope_case(3, 2, 6, 2, neox, &r);
    }
}

static void test_swiglu(void **state) {
    (void)state;
    GPU_REQUIRE();
    rp_test_rng r = {15};
    static const uint32_t ns[] = {1, 3, 63, 64, 65, 1000, 100003};
    extern const rp_ew_kernel rp_ew_ref;
    for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
        const uint32_t n = ns[k];
        float *g = malloc(sizeof(float) * (n + 1)), *u = malloc(sizeof(float) * n);
        float *got = malloc(sizeof(float) * (n + 1));
        assert_true(g && u && got);
        fill_gauss(&r, g, n, 4.0f);
        fill_gauss(&r, u, n, 1.0f);
        g[n] = 1234.5f;   /* past n: untouched */
        rp_gpu_buf *bg = gbuf(g, sizeof(float) * (n + 1)), *bu = gbuf(u, sizeof(float) * n);
        rp_ew_ref.swiglu(g, u, n);
        rec_begin();
        assert_int_equal(rp_gpu_op_swiglu(gt.ops, gt.rec, bg, bu, n), RP_OK);
        rec_run();
        gread(bg, got, sizeof(float) * (n + 1));
        expect_near("swiglu", g, got, n + 1, 1e-7, 1e-5);
        rp_gpu_buf_free(bg); rp_gpu_buf_free(bu);
        free(g); free(u); free(got);
    }
}

static void test_softmax(void **state) {
    (void)state;
    GPU_REQUIRE();
    rp_test_rng r = {16};
    static const uint32_t ns[] = {1, 5, 63, 1000, 32001};
    for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
        const uint32_t n = ns[k], rows = 3, ldx = n + 1;
        float *x = malloc(sizeof(float) * rows * ldx), *got = malloc(sizeof(float) * rows * ldx);
        assert_true(x && got);
        fill_gauss(&r, x, rows * ldx, 10.0f);
        x[1] = 80.0f;   /* large logits: e^x would overflow without the max */
        rp_gpu_buf *bx = gbuf(x, sizeof(float) * rows * ldx);
        for (uint32_t i = 0; i < rows; i++) {
            float *row = x + i * ldx;
            double m = -INFINITY, s = 0;
            for (uint32_t e = 0; e < n; e++) m = row[e] > m ? row[e] : m;
            for (uint32_t e = 0; e < n; e++) s += exp((double)row[e] - m);
            for (uint32_t e = 0; e < n; e++) row[e] = (float)(exp((double)row[e] - m) / s);
        }
        rec_begin();
        assert_int_equal(rp_gpu_op_softmax(gt.ops, gt.rec, bx, n, rows, ldx), RP_OK);
        rec_run();
        gread(bx, got, sizeof(float) * rows * ldx);
        expect_near("softmax", x, got, rows * ldx, 1e-7, 1e-4);
        rp_gpu_buf_free(bx);
        free(x); free(got);
    }
}

static void test_kv_store_f16(void **state) {
    (void)state;
    GPU_REQUIRE();
    rp_test_rng r = {17};
    const uint32_t kd = 6 * 18, n = 5, ldx = kd + 4, n_cells = 11, k_off = 2;
    float x[5 * (6 * 18 + 4)];
    fill_gauss(&r, x, sizeof x / sizeof x[0], 3.0f);
    x[0] = 65519.0f, x[1] = -1e-7f, x[2] = 70000.0f, x[3] = 1e-5f;   /* rounding, subnormal, overflow */
    const int32_t cells[5] = {10, 0, 3, 4, 7};
    uint16_t *want = calloc(k_off + n_cells * kd, 2), *got = calloc(k_off + n_cells * kd, 2);
    assert_true(want && got);
    for (uint32_t i = 0; i < n; i++)
        for (uint32_t e = 0; e < kd; e++) want[k_off + (uint32_t)cells[i] * kd + e] = rp_fp32_to_fp16(x[i * ldx + e]);
    rp_gpu_buf *bx = gbuf(x, sizeof x), *bc = gbuf(cells, sizeof cells), *bk = gbuf(NULL, 2 * (k_off + n_cells * kd));
    rec_begin();
    assert_int_equal(rp_gpu_op_kv_store_f16(gt.ops, gt.rec, bx, 0, ldx, n, kd, bc, bk, k_off), RP_OK);
    rec_run();
    gread(bk, got, 2 * (k_off + n_cells * kd));
    for (uint32_t i = 0; i < k_off + n_cells * kd; i++)
        if (want[i] != got[i]) fail_msg("kv_store_f16: half %u: want 0x%04x got 0x%04x", i, want[i], got[i]);
    /* the same rows as runs (a multi-sequence batch's): rows [0, 2) and [2, 5) by r0, into a fresh cache */
    rp_gpu_buf *bk2 = gbuf(NULL, 2 * (k_off + n_cells * kd));
    rec_begin();
    assert_int_equal(rp_gpu_op_kv_store_f16_rows(gt.ops, gt.rec, bx, 0, ldx, 0, 2, kd, bc, bk2, k_off), RP_OK);
    assert_int_equal(rp_gpu_op_kv_store_f16_rows(gt.ops, gt.rec, bx, 0, ldx, 2, 3, kd, bc, bk2, k_off), RP_OK);
    rec_run();
    gread(bk2, got, 2 * (k_off + n_cells * kd));
    for (uint32_t i = 0; i < k_off + n_cells * kd; i++)
        if (want[i] != got[i]) fail_msg("kv_store_f16 by runs: half %u: want 0x%04x got 0x%04x", i, want[i], got[i]);
    /* a run past the rows given is refused */
    rec_begin();
    assert_int_equal(rp_gpu_op_kv_store_f16_rows(gt.ops, gt.rec, bx, 0, ldx, 3, 3, kd, bc, bk2, k_off), RP_ERR_RANGE);
    rec_run();
    rp_gpu_buf_free(bk2);
    rp_gpu_buf_free(bx); rp_gpu_buf_free(bc); rp_gpu_buf_free(bk);
    free(want); free(got);
}

/* kv_store_q8_0: ggml's Q8_0 blocks of each row, byte for byte as rp_quantize_row (runs too) */
static void test_kv_store_q8_0(void **state) {
    (void)state;
    GPU_REQUIRE();
    rp_test_rng r = {19};
    const uint32_t kd = 3 * 64, n = 5, ldx = kd + 3, n_cells = 9, k_off = 8, rb = kd / 32 * 34;
    float x[5 * (3 * 64 + 3)];
    fill_gauss(&r, x, sizeof x / sizeof x[0], 2.0f);
    for (uint32_t e = 0; e < 32; e++) x[ldx + e] = 0.0f;   /* an all-zero block: d = 0 */
    x[2 * ldx + 5] = 300.0f;                                /* a block dominated by one value */
    const int32_t cells[5] = {8, 0, 3, 4, 6};
    const size_t bytes = k_off + (size_t)n_cells * rb;
    uint8_t *want = calloc(bytes, 1), *got = calloc(bytes, 1);
    assert_true(want && got);
    for (uint32_t i = 0; i < n; i++) assert_true(rp_quantize_row(RP_TYPE_Q8_0, x + i * ldx, want + k_off + (size_t)cells[i] * rb, kd));
    rp_gpu_buf *bx = gbuf(x, sizeof x), *bc = gbuf(cells, sizeof cells), *bk = gbuf(NULL, bytes);
    rec_begin();
    assert_int_equal(rp_gpu_op_kv_store_q8_0_rows(gt.ops, gt.rec, bx, 0, ldx, 0, 2, kd, bc, bk, k_off), RP_OK);
    assert_int_equal(rp_gpu_op_kv_store_q8_0_rows(gt.ops, gt.rec, bx, 0, ldx, 2, 3, kd, bc, bk, k_off), RP_OK);
    rec_run();
    gread(bk, got, bytes);
    for (size_t i = 0; i < bytes; i++)
        if (want[i] != got[i]) fail_msg("kv_store_q8_0: byte %zu: want 0x%02x got 0x%02x", i, want[i], got[i]);
    /* rows of an odd number of blocks (34 bytes: not word-aligned, neighbours share words) at an odd k_off / 2,
     * every cell written at once: the shared words' bytes from both rows */
    const uint32_t kd1 = 32, rb1 = 34, n1 = 9;
    int32_t all[9];
    for (uint32_t c = 0; c < n1; c++) all[c] = (int32_t)((c * 4) % n1);
    const size_t bytes1 = 6 + (size_t)n1 * rb1;
    memset(want, 0xA5, bytes1);   /* the bytes before the first row stay as they were */
    for (uint32_t i = 0; i < n1; i++) assert_true(rp_quantize_row(RP_TYPE_Q8_0, x + i * 33, want + 6 + (size_t)all[i] * rb1, kd1));
    rp_gpu_buf *bc1 = gbuf(all, sizeof all), *bk1 = gbuf(want, bytes1);   /* prefilled: the prefix bytes */
    rec_begin();
    assert_int_equal(rp_gpu_op_kv_store_q8_0_rows(gt.ops, gt.rec, bx, 0, 33, 0, n1, kd1, bc1, bk1, 6), RP_OK);
    rec_run();
    gread(bk1, got, bytes1);
    for (size_t i = 0; i < bytes1; i++)
        if (want[i] != got[i]) fail_msg("kv_store_q8_0 (unaligned rows): byte %zu: want 0x%02x got 0x%02x", i, want[i], got[i]);
    rec_begin();   /* shapes it cannot take: kd not whole blocks, an odd offset */
    assert_int_equal(rp_gpu_op_kv_store_q8_0_rows(gt.ops, gt.rec, bx, 0, ldx, 0, 2, 48, bc, bk, k_off), RP_ERR_INVALID_ARG);
    assert_int_equal(rp_gpu_op_kv_store_q8_0_rows(gt.ops, gt.rec, bx, 0, ldx, 0, 2, kd, bc, bk, 3), RP_ERR_INVALID_ARG);
    rec_run();
    rp_gpu_buf_free(bx); rp_gpu_buf_free(bc); rp_gpu_buf_free(bk); rp_gpu_buf_free(bc1); rp_gpu_buf_free(bk1);
    free(want); free(got);
}

typedef struct { uint32_t n_rows, H, HK, D, n_ctx; } attn_shape;

/* attention over a Q8_0 cache (each cell's row ggml's Q8_0 blocks) against rp_attn_ref on the same bytes */
static void attn_q8_case(attn_shape s, const int32_t *n_cells, rp_test_rng *r) {
    const uint32_t KD = s.HK * s.D, QD = s.H * s.D, G = s.H / s.HK, rb = KD / 32 * 34;
    const size_t nkv = (size_t)s.n_ctx * KD;
    float *q = malloc(sizeof(float) * s.n_rows * QD), *want = malloc(sizeof(float) * s.n_rows * QD);
    float *got = malloc(sizeof(float) * s.n_rows * QD), *tmp = malloc(sizeof(float) * nkv);
    uint8_t *k = malloc((size_t)s.n_ctx * rb), *v = malloc((size_t)s.n_ctx * rb);
    assert_true(q && want && got && tmp && k && v);
    fill_gauss(r, q, s.n_rows * QD, 1.0f);
    fill_gauss(r, tmp, nkv, 1.5f);
    for (uint32_t c = 0; c < s.n_ctx; c++) assert_true(rp_quantize_row(RP_TYPE_Q8_0, tmp + (size_t)c * KD, k + (size_t)c * rb, KD));
    fill_gauss(r, tmp, nkv, 1.0f);
    for (uint32_t c = 0; c < s.n_ctx; c++) assert_true(rp_quantize_row(RP_TYPE_Q8_0, tmp + (size_t)c * KD, v + (size_t)c * rb, KD));
    void *scratch = malloc(rp_attn_scratch_bytes((int32_t)s.D, (int32_t)G, (int32_t)s.n_rows));
    assert_non_null(scratch);
    const float scale = 1.0f / sqrtf((float)s.D);
    /* the whole row as one group of HK heads: head hk at element hk * D (whole blocks) */
    for (uint32_t hk = 0; hk < s.HK; hk++) {
        rp_attn_args a = {.q = q, .q_stride = QD, .out = want, .out_stride = QD, .n_rows = (int32_t)s.n_rows,
                          .n_cells = n_cells, .head_begin = (int32_t)(hk * G), .n_heads = (int32_t)G,
                          .head_dim = (int32_t)s.D, .k = k, .v = v, .kv_row_bytes = rb, .kv_type = RP_TYPE_Q8_0,
                          .kv_head = (int32_t)hk, .scale = scale, .scratch = scratch};
        rp_attn_ref(&a);
    }
    rp_gpu_buf *bq = gbuf(q, sizeof(float) * s.n_rows * QD), *bk = gbuf(k, (size_t)s.n_ctx * rb);
    rp_gpu_buf *bv = gbuf(v, (size_t)s.n_ctx * rb), *bn = gbuf(n_cells, 4 * s.n_rows);
    rp_gpu_buf *bo = gbuf(NULL, sizeof(float) * s.n_rows * QD);
    rp_gpu_attn a = {.q = bq, .k = bk, .v = bv, .n_cells = bn, .out = bo, .n_rows = s.n_rows, .n_head = s.H,
                     .n_head_kv = s.HK, .head_dim = s.D, .ldq = QD, .ldo = QD, .scale = scale};
    rec_begin();
    assert_int_equal(rp_gpu_op_attn_q8_0(gt.ops, gt.rec, &a), RP_OK);
    rec_run();
    gread(bo, got, sizeof(float) * s.n_rows * QD);
    char what[96];
    snprintf(what, sizeof what, "attention (q8_0 cache) rows %u heads %u/%u dim %u", s.n_rows, s.H, s.HK, s.D);
    expect_near(what, want, got, s.n_rows * QD, 2e-5, 1e-4);
    rp_gpu_buf_free(bq); rp_gpu_buf_free(bk); rp_gpu_buf_free(bv); rp_gpu_buf_free(bn); rp_gpu_buf_free(bo);
    free(q); free(want); free(got); free(tmp); free(k); free(v); free(scratch);
}

static void attn_case(attn_shape s, const int32_t *n_cells, rp_test_rng *r) {
    const uint32_t KD = s.HK * s.D, QD = s.H * s.D, G = s.H / s.HK;
    const size_t nkv = (size_t)s.n_ctx * KD;
    float *q = malloc(sizeof(float) * s.n_rows * QD), *want = malloc(sizeof(float) * s.n_rows * QD);
    float *got = malloc(sizeof(float) * s.n_rows * QD), *tmp = malloc(sizeof(float) * nkv);
    uint16_t *k = malloc(2 * nkv), *v = malloc(2 * nkv);
    assert_true(q && want && got && tmp && k && v);
    fill_gauss(r, q, s.n_rows * QD, 1.0f);
    fill_gauss(r, tmp, nkv, 1.5f);
    for (size_t i = 0; i < nkv; i++) k[i] = rp_fp32_to_fp16(tmp[i]);
    fill_gauss(r, tmp, nkv, 1.0f);
    for (size_t i = 0; i < nkv; i++) v[i] = rp_fp32_to_fp16(tmp[i]);
    void *scratch = malloc(rp_attn_scratch_bytes((int32_t)s.D, (int32_t)G, (int32_t)s.n_rows));
    assert_non_null(scratch);
    const float scale = 1.0f / sqrtf((float)s.D);
    for (uint32_t hk = 0; hk < s.HK; hk++) {
        rp_attn_args a = {.q = q, .q_stride = QD, .out = want, .out_stride = QD, .n_rows = (int32_t)s.n_rows,
                          .n_cells = n_cells, .head_begin = (int32_t)(hk * G), .n_heads = (int32_t)G,
                          .head_dim = (int32_t)s.D, .k = (const uint8_t *)k, .v = (const uint8_t *)v,
                          .kv_row_bytes = 2 * KD, .kv_type = RP_TYPE_F16, .kv_head = (int32_t)hk, .scale = scale,
                          .scratch = scratch};
        rp_attn_ref(&a);
    }
    rp_gpu_buf *bq = gbuf(q, sizeof(float) * s.n_rows * QD), *bk = gbuf(k, 2 * nkv), *bv = gbuf(v, 2 * nkv);
    rp_gpu_buf *bn = gbuf(n_cells, 4 * s.n_rows), *bo = gbuf(NULL, sizeof(float) * s.n_rows * QD);
    rp_gpu_attn a = {.q = bq, .k = bk, .v = bv, .n_cells = bn, .out = bo, .n_rows = s.n_rows, .n_head = s.H,
                     .n_head_kv = s.HK, .head_dim = s.D, .ldq = QD, .ldo = QD, .scale = scale};
    rec_begin();
    assert_int_equal(rp_gpu_op_attn_f16(gt.ops, gt.rec, &a), RP_OK);
    rec_run();
    gread(bo, got, sizeof(float) * s.n_rows * QD);
    char what[96];
    snprintf(what, sizeof what, "attention rows %u heads %u/%u dim %u", s.n_rows, s.H, s.HK, s.D);
    expect_near(what, want, got, s.n_rows * QD, 2e-5, 1e-4);
    if (s.n_rows > 1) {   /* as runs (r0): the first row alone, then the rest: the same bits as one dispatch */
        float *got2 = malloc(sizeof(float) * s.n_rows * QD);
        assert_non_null(got2);
        rp_gpu_buf *bo2 = gbuf(NULL, sizeof(float) * s.n_rows * QD);
        rp_gpu_attn a1 = a, a2 = a;
        a1.out = a2.out = bo2;
        a1.n_rows = 1;
        a2.r0 = 1;
        a2.n_rows = s.n_rows - 1;
        rec_begin();
        assert_int_equal(rp_gpu_op_attn_f16(gt.ops, gt.rec, &a2), RP_OK);
        assert_int_equal(rp_gpu_op_attn_f16(gt.ops, gt.rec, &a1), RP_OK);
        rec_run();
        gread(bo2, got2, sizeof(float) * s.n_rows * QD);
        if (memcmp(got, got2, sizeof(float) * s.n_rows * QD)) fail_msg("%s: by runs (r0) differs from one dispatch", what);
        a2.n_rows = s.n_rows;   /* past the rows */
        rec_begin();
        assert_int_equal(rp_gpu_op_attn_f16(gt.ops, gt.rec, &a2), RP_ERR_RANGE);
        rec_run();
        rp_gpu_buf_free(bo2);
        free(got2);
    }
    rp_gpu_buf_free(bq); rp_gpu_buf_free(bk); rp_gpu_buf_free(bv); rp_gpu_buf_free(bn); rp_gpu_buf_free(bo);
    free(q); free(want); free(got); free(tmp); free(k); free(v); free(scratch);
}

static void test_attention(void **state) {
    (void)state;
    GPU_REQUIRE();
    rp_test_rng r = {18};
    const int32_t one[1] = {1}, dec[1] = {130}, few[4] = {37, 38, 39, 40}, span[3] = {64, 65, 200};
    attn_case((attn_shape){1, 6, 2, 64, 1}, one, &r);        /* a single cell */
    attn_case((attn_shape){1, 6, 2, 64, 130}, dec, &r);      /* decode, tiles crossed, GQA 3 */
    attn_case((attn_shape){4, 8, 8, 80, 40}, few, &r);       /* a few causal rows, no grouping */
    attn_case((attn_shape){3, 32, 8, 128, 200}, span, &r);   /* llama-shaped heads, GQA 4 */
    attn_case((attn_shape){2, 4, 1, 6, 65}, span, &r);       /* tiny heads, multi-query */
    attn_q8_case((attn_shape){1, 6, 2, 64, 1}, one, &r);
    attn_q8_case((attn_shape){1, 6, 2, 64, 130}, dec, &r);
    attn_q8_case((attn_shape){4, 8, 8, 96, 40}, few, &r);
    attn_q8_case((attn_shape){3, 32, 8, 128, 200}, span, &r);
    attn_q8_case((attn_shape){2, 4, 1, 256, 65}, span, &r);   /* 256-wide heads (gemma's), multi-query */
    attn_q8_case((attn_shape){2, 8, 4, 8, 65}, span, &r);     /* stories260K's: 4 heads of 8 in one block, odd cells */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mul_mat),  cmocka_unit_test(test_mul_mat_rejects), cmocka_unit_test(test_get_rows),
        cmocka_unit_test(test_rmsnorm),  cmocka_unit_test(test_rope),            cmocka_unit_test(test_swiglu),
        cmocka_unit_test(test_softmax),  cmocka_unit_test(test_kv_store_f16),    cmocka_unit_test(test_attention),
        cmocka_unit_test(test_kv_store_q8_0),
    };
    return rp_test_main(tests, NULL, gpu_teardown);
}
