/* test_mm_float.c — F32/F16/BF16 matmul kernels (packing, activation conversion, GEMM/GEMV over row ranges) against the scalar reference. */
#include "testutil.h"

#include "kernels/cpu.h"
#include "kernels/kernels.h"
#include "kernels/quant.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The AMX BF16 kernel's gemm over a scalar model of the tile instructions
 * (mm_bf16_amx.c), so its layouts are checked on machines without AMX. Weak:
 * a build without that file skips it. */
extern const rp_mm_kernel rp_mm_bf16_amx_emu __attribute__((weak));

static size_t elem_size(rp_type t) { return t == RP_TYPE_F32 ? 4 : 2; }

static size_t round64(size_t x) { return (x + 63) & ~(size_t)63; }

static void *xalloc(size_t bytes) {
    void *p = aligned_alloc(64, round64(bytes ? bytes : 1));
    assert_non_null(p);
    return p;
}

/* One weight type's problem: W (rows x cols, GGUF rows), n activation rows,
 * the reference result and sum |w*a| per output for the tolerance. */
typedef struct {
    rp_type t;
    int64_t rows, cols, n;
    uint8_t *w;            /* GGUF rows */
    float *x;              /* n x cols */
    float *ref, *mag;      /* n x rows */
} problem;

static void make_problem(problem *p, rp_type t, int64_t rows, int64_t cols, int64_t n, uint64_t seed) {
    rp_test_rng r = {seed * 0x9E3779B97F4A7C15ull + 1};
    p->t = t; p->rows = rows; p->cols = cols; p->n = n;
    const size_t es = elem_size(t);
    p->w = xalloc((size_t)rows * (size_t)cols * es);
    p->x = xalloc(sizeof(float) * (size_t)(n * cols));
    p->ref = xalloc(sizeof(float) * (size_t)(n * rows));
    p->mag = xalloc(sizeof(float) * (size_t)(n * rows));
    for (int64_t i = 0; i < rows; i++) {
        /* per-row scale 1e-2 .. 1e2, some rows one-signed */
        const float sc = powf(10.0f, (float)(rp_test_rng_next(&r) % 5) - 2.0f);
        const int pos = rp_test_rng_next(&r) % 4 == 0;
        for (int64_t k = 0; k < cols; k++) {
            float v = rp_test_rng_gauss(&r) * sc;
            if (pos) v = fabsf(v);
            uint8_t *d = p->w + ((size_t)i * (size_t)cols + (size_t)k) * es;
            if (t == RP_TYPE_F32) memcpy(d, &v, 4);
            else {
                uint16_t h = t == RP_TYPE_F16 ? rp_fp32_to_fp16(v) : rp_fp32_to_bf16(v);
                memcpy(d, &h, 2);
            }
        }
    }
    for (int64_t i = 0; i < n * cols; i++) p->x[i] = rp_test_rng_gauss(&r) * (i % 7 == 0 ? 10.0f : 1.0f);
}

/* The reference result and sum |w*a| of every output. */
static void compute_ref(problem *p) {
    const rp_type t = p->t;
    const int64_t rows = p->rows, cols = p->cols, n = p->n;
    const size_t es = elem_size(t);
    const rp_mm_kernel *ref = rp_mm_kernel_select(t, RP_CPU_SCALAR);
    assert_non_null(ref);
    /* F16 weights: the activations rounded to F16 first, as every F16 kernel's quant_act does (ggml's vec_dot_type) */
    if (t == RP_TYPE_F16) rp_round_row(RP_TYPE_F16, p->x, p->x, n * cols);
    ref->gemm(p->w, (size_t)cols * es, rows, cols, p->x, sizeof(float) * (size_t)cols, n, 0, rows, p->ref, rows,
              NULL);
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < rows; j++) {
            double s = 0;
            for (int64_t k = 0; k < cols; k++) {
                const uint8_t *d = p->w + ((size_t)j * (size_t)cols + (size_t)k) * es;
                float wv;
                if (t == RP_TYPE_F32) memcpy(&wv, d, 4);
                else {
                    uint16_t h;
                    memcpy(&h, d, 2);
                    wv = t == RP_TYPE_F16 ? rp_fp16_to_fp32(h) : rp_bf16_to_fp32(h);
                }
                s += fabs((double)wv * p->x[i * cols + k]);
            }
            p->mag[i * rows + j] = (float)s;
        }
}

static void free_problem(problem *p) {
    free(p->w); free(p->x); free(p->ref); free(p->mag);
}

/* Relative tolerance (of sum |w*a|): float accumulation order only. Kernels
 * with BF16 activations (AMX) split each activation into three BF16 pieces
 * (residual <= 2^-24 |a|), so the same bound holds for them. */
static double kernel_tol(const rp_mm_kernel *k) { (void)k; return 1e-5; }

/* Worst error / sum |w*a| seen per kernel (printed per type). */
static struct { const rp_mm_kernel *k; double worst; } g_worst[16];

static void note_err(const rp_mm_kernel *k, double rel) {
    for (int i = 0; i < 16; i++) {
        if (g_worst[i].k == NULL) g_worst[i].k = k;
        if (g_worst[i].k == k) {
            if (rel > g_worst[i].worst) g_worst[i].worst = rel;
            return;
        }
    }
}

/* Runs kernel k on p over the row ranges in `cuts` (r0 = cuts[0] < ... <
 * cuts[nc-1] = r1, each a multiple of row_block except the last) and checks
 * rows [cuts[0], cuts[nc-1]) against the reference; everything else of y must
 * be left alone. */
static void run_check(const rp_mm_kernel *k, const problem *p, const int64_t *cuts, int nc) {
    const size_t es = elem_size(p->t);
    const size_t wrb = (size_t)p->cols * es;
    const void *w = p->w;
    void *packed = NULL;
    if (k->pack) {
        const int64_t rb = k->row_block, groups = (p->rows + rb - 1) / rb;
        const size_t bytes = k->packed_size(p->rows, p->cols);
        packed = xalloc(bytes);
        memset(packed, 0xA5, bytes);
        /* packed in two parallel-style pieces, as the driver may */
        const int64_t mid = groups / 2;
        k->pack(p->w, wrb, p->rows, p->cols, packed, mid, groups);
        k->pack(p->w, wrb, p->rows, p->cols, packed, 0, mid);
        w = packed;
    }
    const size_t stride = round64(k->act_row_size(p->cols));
    uint8_t *act = xalloc(stride * (size_t)p->n + 64);
    for (int64_t i = 0; i < p->n; i++) k->quant_act(p->x + i * p->cols, act + (size_t)i * stride, p->cols);
    const size_t sb = k->scratch_bytes ? k->scratch_bytes(p->cols, p->n) : 0;
    void *scratch = sb ? xalloc(sb) : NULL;
    if (scratch) memset(scratch, 0x5A, sb);

    const int64_t ldy = p->rows + 5;
    float *y = xalloc(sizeof(float) * (size_t)(ldy * p->n));
    const float sentinel = -12345.0f;
    for (int64_t i = 0; i < ldy * p->n; i++) y[i] = sentinel;
    for (int c = 0; c + 1 < nc; c++)
        k->gemm(w, wrb, p->rows, p->cols, act, stride, p->n, cuts[c], cuts[c + 1], y, ldy, scratch);

    const double tol = kernel_tol(k);
    for (int64_t i = 0; i < p->n; i++)
        for (int64_t j = 0; j < ldy; j++) {
            const float got = y[i * ldy + j];
            if (j < cuts[0] || j >= cuts[nc - 1]) {
                if (got != sentinel)
                    fail_msg("%s rows=%lld cols=%lld n=%lld: y[%lld][%lld] outside [%lld,%lld) written", k->name,
                             (long long)p->rows, (long long)p->cols, (long long)p->n, (long long)i, (long long)j,
                             (long long)cuts[0], (long long)cuts[nc - 1]);
                continue;
            }
            const float want = p->ref[i * p->rows + j];
            const double err = fabs((double)got - (double)want);
            const double lim = tol * p->mag[i * p->rows + j] + 1e-30;
            if (p->mag[i * p->rows + j] > 0) note_err(k, err / p->mag[i * p->rows + j]);
            if (!(err <= lim))
                fail_msg("%s rows=%lld cols=%lld n=%lld: y[%lld][%lld] = %.9g, ref %.9g (err %.3g > %.3g)", k->name,
                         (long long)p->rows, (long long)p->cols, (long long)p->n, (long long)i, (long long)j,
                         (double)got, (double)want, err, lim);
        }
    free(y); free(scratch); free(act); free(packed);
}

/* The SIMD kernels of a type this machine can run. */
static int kernels_for(rp_type t, const rp_mm_kernel **out, int cap) {
    const rp_mm_kernel *all[16];
    int n = rp_mm_kernel_list(t, all, 16), m = 0;
    const rp_cpu_level best = rp_cpu_info_get()->best;
    for (int i = 0; i < n && m < cap; i++)
        if (all[i]->level > RP_CPU_SCALAR && all[i]->level <= best) out[m++] = all[i];
    if (t == RP_TYPE_BF16 && &rp_mm_bf16_amx_emu != NULL && best >= rp_mm_bf16_amx_emu.level && m < cap)
        out[m++] = &rp_mm_bf16_amx_emu;
    return m;
}

static void check_type(rp_type t) {
    const rp_mm_kernel *ks[16];
    const int nk = kernels_for(t, ks, 16);
    if (nk == 0) {
        RP_SKIP("no SIMD kernel for %s on this machine\n", rp_type_get_traits(t)->name);
    }
    for (int q = 0; q < nk; q++) print_message("kernel %s\n", ks[q]->name);
    static const int64_t rows_v[] = {1, 3, 15, 16, 17, 31, 33, 255, 257};
    static const int64_t cols_v[] = {1, 7, 8, 24, 33, 64, 96, 2048 + 8};
    static const int64_t n_v[] = {1, 2, 3, 15, 16, 17, 33, 64};
    uint64_t seed = 1 + (uint64_t)t * 1000;
    for (size_t a = 0; a < sizeof rows_v / sizeof rows_v[0]; a++)
        for (size_t b = 0; b < sizeof cols_v / sizeof cols_v[0]; b++)
            for (size_t c = 0; c < sizeof n_v / sizeof n_v[0]; c++) {
                const int64_t rows = rows_v[a], cols = cols_v[b], n = n_v[c];
                /* keep the big cases to a few shapes: the reference is slow */
                if (cols > 1000 && rows > 33 && n > 3 && n != 17) continue;
                problem p;
                make_problem(&p, t, rows, cols, n, seed++);
                compute_ref(&p);
                for (int q = 0; q < nk; q++) {
                    const int64_t rb = ks[q]->row_block, groups = (rows + rb - 1) / rb;
                    const int64_t full[2] = {0, rows};
                    run_check(ks[q], &p, full, 2);
                    if (groups >= 2) {
                        /* split into three ranges at group boundaries */
                        const int64_t g1 = groups / 3 > 0 ? groups / 3 : 1, g2 = (2 * groups) / 3 > g1 ? (2 * groups) / 3 : g1;
                        const int64_t cuts[4] = {0, g1 * rb, g2 * rb, rows};
                        run_check(ks[q], &p, g2 > g1 ? cuts : (const int64_t[]){0, g1 * rb, rows}, g2 > g1 ? 4 : 3);
                        /* a sub-range only: rows outside stay untouched */
                        const int64_t sub[2] = {rb, groups >= 3 ? (groups - 1) * rb : rows};
                        run_check(ks[q], &p, sub, 2);
                    }
                }
                free_problem(&p);
            }
    for (int q = 0; q < 16 && g_worst[q].k; q++)
        if (g_worst[q].k->wtype == t)
            print_message("%s: worst |err| / sum|w*a| = %.3g\n", g_worst[q].k->name, g_worst[q].worst);
}

/* The driver sizes scratch once for its largest n and then runs any n up to
 * it: scratch_bytes must not shrink as n grows. */
static void test_mm_scratch_monotone(void **state) {
    (void)state;
    static const rp_type types[] = {RP_TYPE_F32, RP_TYPE_F16, RP_TYPE_BF16};
    static const int64_t cols_v[] = {1, 8, 100, 512, 513, 4096, 14336};
    for (size_t ti = 0; ti < 3; ti++) {
        const rp_mm_kernel *ks[16];
        const int nk = kernels_for(types[ti], ks, 16);
        for (int q = 0; q < nk; q++) {
            if (!ks[q]->scratch_bytes) continue;
            for (size_t c = 0; c < sizeof cols_v / sizeof cols_v[0]; c++) {
                size_t prev = 0;
                for (int64_t n = 1; n <= 600; n++) {
                    const size_t b = ks[q]->scratch_bytes(cols_v[c], n);
                    if (b < prev)
                        fail_msg("%s cols=%lld: scratch_bytes(n=%lld) = %zu < %zu for n-1", ks[q]->name,
                                 (long long)cols_v[c], (long long)n, b, prev);
                    prev = b;
                }
            }
        }
    }
}

static void test_mm_f32(void **state) { (void)state; check_type(RP_TYPE_F32); }
static void test_mm_f16(void **state) { (void)state; check_type(RP_TYPE_F16); }
static void test_mm_bf16(void **state) { (void)state; check_type(RP_TYPE_BF16); }

/* Large-magnitude and cancelling inputs: the kernels stay within the bound
 * relative to sum |w*a| even when the result itself is near zero. */
static void test_mm_cancellation(void **state) {
    (void)state;
    static const rp_type types[] = {RP_TYPE_F32, RP_TYPE_F16, RP_TYPE_BF16};
    for (size_t ti = 0; ti < 3; ti++) {
        const rp_mm_kernel *ks[16];
        const int nk = kernels_for(types[ti], ks, 16);
        problem p;
        make_problem(&p, types[ti], 64, 512, 4, 77 + ti);
        /* activation rows 1..3: equal neighbours x[k] = x[k+1], against
         * weights w[k+1] = -w[k], so every product cancels its neighbour */
        for (int64_t i = 1; i < p.n; i++)
            for (int64_t k = 0; k < p.cols; k += 2) {
                p.x[i * p.cols + k] *= 1e3f;
                p.x[i * p.cols + k + 1] = p.x[i * p.cols + k];
            }
        const size_t es = elem_size(p.t);
        for (int64_t j = 0; j < p.rows; j++)
            for (int64_t k = 0; k < p.cols; k += 2) {
                uint8_t *d = p.w + ((size_t)j * (size_t)p.cols + (size_t)k) * es;
                uint8_t tmp[4];
                memcpy(tmp, d, es);
                tmp[es - 1] ^= 0x80;   /* w[k+1] = -w[k] */
                memcpy(d + es, tmp, es);
            }
        compute_ref(&p);
        for (int q = 0; q < nk; q++) {
            const int64_t full[2] = {0, p.rows};
            run_check(ks[q], &p, full, 2);
        }
        free_problem(&p);
    }
}

/* Kernels with BF16 activations store x as three BF16 planes: hi =
 * bf16(x), mid = bf16(x - hi), lo = bf16(x - hi - mid), round-to-nearest-even
 * as rp_fp32_to_bf16; the SIMD and scalar parts of the conversion agree,
 * specials included. */
static void test_mm_bf16_act_pair(void **state) {
    (void)state;
    const rp_mm_kernel *ks[16];
    const int nk = kernels_for(RP_TYPE_BF16, ks, 16);
    int tested = 0;
    rp_test_rng r = {99};
    for (int q = 0; q < nk; q++) {
        if (ks[q]->act_type != RP_TYPE_BF16) continue;
        tested++;
        for (int64_t cols = 1; cols <= 70; cols++) {
            float x[70];
            for (int64_t k = 0; k < cols; k++) {
                const uint32_t bits = (uint32_t)rp_test_rng_next(&r);
                switch (rp_test_rng_next(&r) % 8) {
                case 0: memcpy(&x[k], &bits, 4); break;                /* any bit pattern */
                case 1: x[k] = (float)(rp_test_rng_next(&r) % 7) - 3.0f; break; /* exact small ints */
                case 2: x[k] = (k % 2) ? INFINITY : -INFINITY; break;
                case 3: x[k] = 3.3895e38f; break;                       /* rounds up to inf */
                default: x[k] = rp_test_rng_gauss(&r) * 100.0f; break;
                }
            }
            const size_t sz = ks[q]->act_row_size(cols);
            assert_true(sz >= 6 * (size_t)cols);
            uint16_t *d = xalloc(sz);
            ks[q]->quant_act(x, d, cols);
            const int64_t kp = (int64_t)sz / 6;
            for (int64_t k = 0; k < kp; k++) {
                const uint16_t hi = d[k], mid = d[kp + k], lo = d[2 * kp + k];
                if (k >= cols) {
                    assert_int_equal(hi, 0);
                    assert_int_equal(mid, 0);
                    assert_int_equal(lo, 0);
                    continue;
                }
                if (isnan(x[k])) {
                    assert_true(isnan(rp_bf16_to_fp32(hi)));
                    continue;
                }
                assert_int_equal(hi, rp_fp32_to_bf16(x[k]));
                const float hf = rp_bf16_to_fp32(hi);
                if (isfinite(x[k]) && isfinite(hf)) {
                    const float r1 = x[k] - hf;
                    assert_int_equal(mid, rp_fp32_to_bf16(r1));
                    assert_int_equal(lo, rp_fp32_to_bf16(r1 - rp_bf16_to_fp32(mid)));
                    /* the three pieces reproduce x to 2^-24 relative, while
                     * they stay normal (BF16 denormals are coarse) */
                    const double sum = (double)hf + rp_bf16_to_fp32(mid) + rp_bf16_to_fp32(lo);
                    if (fabs(x[k]) >= 0x1p-108f && !(fabs(sum - x[k]) <= 0x1p-24 * fabs(x[k])))
                        fail_msg("x = %a: hi %04x mid %04x lo %04x sum to %a", (double)x[k], hi, mid, lo, sum);
                } else {
                    assert_int_equal(mid, 0);
                    assert_int_equal(lo, 0);
                }
            }
            free(d);
        }
    }
    if (!tested) RP_SKIP("no SIMD kernel ran on this machine\n");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mm_scratch_monotone),
        cmocka_unit_test(test_mm_f32),
        cmocka_unit_test(test_mm_f16),
        cmocka_unit_test(test_mm_bf16),
        cmocka_unit_test(test_mm_cancellation),
        cmocka_unit_test(test_mm_bf16_act_pair),
    };
    return rp_test_main(tests, NULL, NULL);
}
