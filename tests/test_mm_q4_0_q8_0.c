/* test_mm_q4_0_q8_0.c — Q4_0/Q8_0 matmul kernels (x86: avx2, avx512, amx; aarch64: neon, dotprod, i8mm) against the
 * scalar reference. */
#include "testutil.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu.h"
#include "kernels/kernels.h"
#include "kernels/quant.h"
#include "kernels/types.h"
#if defined(__x86_64__)
#include "kernels/x86/q8_0_x86.h"
#endif

/* Built with -DRP_AMX_EMULATE (and the amx kernel files likewise), the AMX
 * kernels run on the scalar tile emulator, so they are tested wherever
 * AVX-512 VNNI exists. */
#if defined(RP_AMX_EMULATE)
#define AMX_NEEDS RP_CPU_AVX512
#else
#define AMX_NEEDS RP_CPU_AMX
#endif

/* ------------------------------------------------------------ helpers */

/* Rows of varied shape: gaussian, heavy-tailed, one-signed, zero blocks. */
static void gen(rp_test_rng *r, float *x, int64_t n, int kind) {
    const float scale = powf(10.0f, (float)(rp_test_rng_next(r) % 5) - 2.0f);
    for (int64_t i = 0; i < n; i++) {
        const float g = rp_test_rng_gauss(r);
        switch (kind % 5) {
        case 0: x[i] = g; break;
        case 1: x[i] = g * g * g; break;
        case 2: x[i] = fabsf(g) + 0.25f; break;
        case 3: x[i] = ((i / 32) % 3 == 1) ? 0.0f : g; break;
        default: x[i] = 2.0f * rp_test_rng_uniform(r) - 1.0f; break;
        }
        x[i] *= scale;
    }
}

static void *xalloc(size_t n) {
    void *p = aligned_alloc(64, ((n + 63) & ~(size_t)63) + 64);
    assert_non_null(p);
    return p;
}

/* Kernels of this family that can run here (the reference is skipped). */
static int usable(rp_type t, const rp_mm_kernel **out) {
    const rp_mm_kernel *all[16];
    const int na = rp_mm_kernel_list(t, all, 16);
    const rp_cpu_level best = rp_cpu_info_get()->best;
    int n = 0;
    for (int i = 0; i < na; i++) {
        const rp_mm_kernel *k = all[i];
        if (k->level == RP_CPU_SCALAR) continue;
        const rp_cpu_level need = k->level == RP_CPU_AMX ? AMX_NEEDS : k->level;
        if (need > best) {
            print_message("SKIP %s: needs %s, machine has %s\n", k->name, rp_cpu_level_name(k->level),
                          rp_cpu_level_name(best));
            continue;
        }
        out[n++] = k;
    }
    return n;
}

static int32_t bias_mul_of(const rp_mm_kernel *k) {
#if defined(__aarch64__)
    (void)k;
    return 0;   /* signed x signed dots (SDOT / SMULL): no bias */
#else
    if (k->wtype == RP_TYPE_Q4_0) return -8;
    return k->level == RP_CPU_AVX2 ? 0 : -128;
#endif
}

/* One weight matrix with its references for a set of activations. */
typedef struct {
    rp_type t;
    int64_t rows, cols, n;
    size_t wrow;         /* GGUF row bytes */
    uint8_t *wq;         /* GGUF rows */
    float *x;            /* n x cols activations (float) */
    float *ref;          /* n x rows reference outputs */
    float *mag;          /* n x rows: sum |w * a| of the dequantized values */
} problem;

static void problem_make(problem *p, rp_type t, int64_t rows, int64_t cols, int64_t n, rp_test_rng *r) {
    p->t = t;
    p->rows = rows;
    p->cols = cols;
    p->n = n;
    p->wrow = rp_type_row_size(t, cols);
    p->wq = xalloc(p->wrow * (size_t)rows);
    p->x = xalloc(sizeof(float) * (size_t)(n * cols));
    p->ref = xalloc(sizeof(float) * (size_t)(n * rows));
    p->mag = xalloc(sizeof(float) * (size_t)(n * rows));
    float *wf = xalloc(sizeof(float) * (size_t)(rows * cols));
    float *wd = xalloc(sizeof(float) * (size_t)(rows * cols));
    for (int64_t i = 0; i < rows; i++) {
        gen(r, wf + i * cols, cols, (int)(rp_test_rng_next(r) % 5));
        assert_true(rp_quantize_row(t, wf + i * cols, p->wq + (size_t)i * p->wrow, cols));
        assert_true(rp_dequantize_row(t, p->wq + (size_t)i * p->wrow, wd + i * cols, cols));
    }
    const size_t arow = rp_type_row_size(RP_TYPE_Q8_0, cols);
    uint8_t *aq = xalloc(arow);
    float *ad = xalloc(sizeof(float) * (size_t)cols);
    for (int64_t i = 0; i < n; i++) {
        gen(r, p->x + i * cols, cols, (int)(rp_test_rng_next(r) % 5));
        assert_true(rp_quantize_row(RP_TYPE_Q8_0, p->x + i * cols, aq, cols));
        assert_true(rp_dequantize_row(RP_TYPE_Q8_0, aq, ad, cols));
        for (int64_t j = 0; j < rows; j++) {
            p->ref[i * rows + j] = rp_vec_dot_ref(t, cols, p->wq + (size_t)j * p->wrow, aq);
            double m = 0;
            for (int64_t c = 0; c < cols; c++) m += fabs((double)wd[j * cols + c] * (double)ad[c]);
            p->mag[i * rows + j] = (float)m;
        }
    }
    free(aq);
    free(ad);
    free(wf);
    free(wd);
}

static void problem_free(problem *p) {
    free(p->wq);
    free(p->x);
    free(p->ref);
    free(p->mag);
}

/* Packed weights and quantized activations of a problem for one kernel. */
typedef struct {
    const rp_mm_kernel *k;
    uint8_t *packed, *act;
    size_t astride;
    void *scratch;
} prepared;

static void prepare(prepared *q, const rp_mm_kernel *k, const problem *p) {
    q->k = k;
    const int64_t groups = (p->rows + k->row_block - 1) / k->row_block;
    const size_t pb = k->packed_size(p->rows, p->cols);
    q->packed = xalloc(pb);
    memset(q->packed, 0xA5, pb);   /* pack must write every byte it reads back */
    /* in two calls, as the driver's parallel packing splits groups */
    k->pack(p->wq, p->wrow, p->rows, p->cols, q->packed, 0, groups / 2);
    k->pack(p->wq, p->wrow, p->rows, p->cols, q->packed, groups / 2, groups);
    q->astride = (k->act_row_size(p->cols) + 63) & ~(size_t)63;
    q->act = xalloc(q->astride * (size_t)p->n);
    for (int64_t i = 0; i < p->n; i++) k->quant_act(p->x + i * p->cols, q->act + (size_t)i * q->astride, p->cols);
    const size_t sb = k->scratch_bytes ? k->scratch_bytes(p->cols, p->n) : 0;
    q->scratch = sb ? xalloc(sb) : NULL;
}

static void prepared_free(prepared *q) {
    free(q->packed);
    free(q->act);
    free(q->scratch);
}

#define PAD 3   /* extra floats per output row: must stay untouched */

/* Runs gemm over [r0, r1) into a NaN-poisoned y and checks outputs in that
 * range against the reference and everything else untouched. */
static int check_range(const prepared *q, const problem *p, const int64_t *cuts, int ncuts, const char *what) {
    const int64_t ldy = p->rows + PAD;
    float *y = xalloc(sizeof(float) * (size_t)(ldy * p->n));
    for (int64_t i = 0; i < ldy * p->n; i++) y[i] = NAN;
    int64_t lo = cuts[0], hi = cuts[ncuts - 1];
    for (int c = 0; c + 1 < ncuts; c++)
        q->k->gemm(q->packed, 0, p->rows, p->cols, q->act, q->astride, p->n, cuts[c], cuts[c + 1], y, ldy, q->scratch);
    int bad = 0;
    for (int64_t i = 0; i < p->n && bad < 5; i++)
        for (int64_t r = 0; r < ldy && bad < 5; r++) {
            const float v = y[i * ldy + r];
            if (r < lo || r >= hi) {
                if (!isnan(v)) {
                    print_message("%s %s rows=%lld cols=%lld n=%lld: y[%lld][%lld] written outside range\n",
                                  q->k->name, what, (long long)p->rows, (long long)p->cols, (long long)p->n,
                                  (long long)i, (long long)r);
                    bad++;
                }
                continue;
            }
            const float ref = p->ref[i * p->rows + r];
            const float tol = 1e-5f * p->mag[i * p->rows + r] + 1e-30f;
            if (!(fabsf(v - ref) <= tol)) {
                print_message("%s %s rows=%lld cols=%lld n=%lld: y[%lld][%lld] = %.9g, ref %.9g (tol %.3g)\n",
                              q->k->name, what, (long long)p->rows, (long long)p->cols, (long long)p->n,
                              (long long)i, (long long)r, v, ref, tol);
                bad++;
            }
        }
    free(y);
    return bad;
}

static int check_full_and_split(const prepared *q, const problem *p) {
    const int64_t all[2] = {0, p->rows};
    int bad = check_range(q, p, all, 2, "full");
    const int64_t rb = q->k->row_block, groups = (p->rows + rb - 1) / rb;
    if (groups >= 2) {
        const int64_t r = rb * (groups / 2);
        const int64_t split[3] = {0, r, p->rows};
        bad += check_range(q, p, split, 3, "split");
        /* one group alone, the last (partial) one */
        const int64_t last[2] = {rb * (groups - 1), p->rows};
        bad += check_range(q, p, last, 2, "last-group");
    }
    return bad;
}

/* ------------------------------------------------------------ tests */

static const int64_t k_rows[] = {1, 3, 15, 16, 17, 31, 33, 255, 257};
static const int64_t k_cols[] = {32, 64, 96, 2048 + 32};
static const int64_t k_n[] = {1, 2, 3, 15, 16, 17, 33, 64};
#define N_OF(a) ((int)(sizeof(a) / sizeof((a)[0])))

static void run_type(rp_type t, uint64_t seed) {
    const rp_mm_kernel *ks[8];
    const int nk = usable(t, ks);
    if (nk == 0) {
        RP_SKIP("no SIMD kernel for this type runs here\n");
    }
    rp_test_rng r = {seed};
    int bad = 0, runs = 0;
    for (int ci = 0; ci < N_OF(k_cols); ci++)
        for (int ri = 0; ri < N_OF(k_rows); ri++)
            for (int ni = 0; ni < N_OF(k_n); ni++) {
                problem p;
                problem_make(&p, t, k_rows[ri], k_cols[ci], k_n[ni], &r);
                for (int k = 0; k < nk; k++) {
                    prepared q;
                    prepare(&q, ks[k], &p);
                    bad += check_full_and_split(&q, &p);
                    runs++;
                    prepared_free(&q);
                }
                problem_free(&p);
                if (bad) fail_msg("%d mismatches", bad);
            }
    print_message("%d kernel runs checked\n", runs);
}

static void test_q4_0_kernels(void **state) {
    (void)state;
    run_type(RP_TYPE_Q4_0, 0x1234567u);
}

static void test_q8_0_kernels(void **state) {
    (void)state;
    run_type(RP_TYPE_Q8_0, 0x7654321u);
}

/* quant_act must give rp_quantize_row(Q8_0)'s bytes and scales exactly. */
static void check_quant(const rp_mm_kernel *k, const float *x, int64_t cols) {
    const int64_t nb = cols / 32;
    rp_block_q8_0 *ref = xalloc(sizeof(rp_block_q8_0) * (size_t)nb);
    assert_true(rp_quantize_row(RP_TYPE_Q8_0, x, ref, cols));
    uint8_t *a = xalloc(k->act_row_size(cols));
    memset(a, 0x5A, k->act_row_size(cols));
    k->quant_act(x, a, cols);
    const int32_t bm = bias_mul_of(k);
    for (int64_t b = 0; b < nb; b++) {
        int sum = 0;
        for (int j = 0; j < 32; j++) {
            const int8_t v = (int8_t)a[32 * b + j];
            if (v != ref[b].qs[j])
                fail_msg("%s cols=%lld block %lld elem %d: %d, ref %d (x = %.9g)", k->name, (long long)cols,
                         (long long)b, j, v, ref[b].qs[j], x[32 * b + j]);
            sum += v;
        }
        float d;
        int32_t bias;
        memcpy(&d, a + cols + 4 * b, 4);
        memcpy(&bias, a + cols + 4 * nb + 4 * b, 4);
        const float rd = rp_fp16_to_fp32(ref[b].d);
        if (memcmp(&d, &rd, 4) != 0)
            fail_msg("%s cols=%lld block %lld: scale %.9g, ref %.9g", k->name, (long long)cols, (long long)b, d, rd);
        if (bias != bm * sum) fail_msg("%s block %lld: bias %d, want %d", k->name, (long long)b, bias, bm * sum);
    }
    free(ref);
    free(a);
}

static void test_quant_act_exact(void **state) {
    (void)state;
    const rp_mm_kernel *ks[16];
    int nk = usable(RP_TYPE_Q4_0, ks);
    nk += usable(RP_TYPE_Q8_0, ks + nk);
    if (nk == 0) RP_SKIP("no SIMD Q4_0 / Q8_0 kernel runs here\n");
    rp_test_rng r = {42};
    static const int64_t blocks[] = {1, 3, 5, 7, 63, 65};
    for (int bi = 0; bi < N_OF(blocks); bi++) {
        const int64_t cols = 32 * blocks[bi];
        float *x = xalloc(sizeof(float) * (size_t)cols);
        for (int rep = 0; rep < 20; rep++) {
            gen(&r, x, cols, rep);
            if (rep == 5) {
                /* exact ties: amax 127 gives d = 1, so x * id = k + 0.5 */
                for (int64_t i = 0; i < cols; i++) x[i] = (float)((int)(i % 64) - 32) + 0.5f;
                x[0] = 127.0f;
                if (cols > 32) x[32] = -127.0f;
            }
            if (rep == 6)
                for (int64_t i = 0; i < cols; i++) x[i] = (i / 32) % 2 ? 0.0f : -0.0f;   /* d = 0 */
            if (rep == 7)
                for (int64_t i = 0; i < cols; i++) x[i] *= 1e-9f;   /* subnormal fp16 scales */
            if (rep == 8)
                for (int64_t i = 0; i < cols; i++) x[i] = (float)(i % 7) * 1e4f - 3e4f;   /* large */
            if (rep == 9) {
                /* values just below and at half steps after scaling */
                for (int64_t i = 0; i < cols; i++) x[i] = nextafterf((float)(i % 40) - 20.5f, 0.0f);
                for (int64_t b = 0; b < cols / 32; b++) x[32 * b + 5] = 127.0f;
            }
            if (rep == 10)
                /* subnormal inputs: d = amax / 127 is a tiny subnormal, 1 / d
                 * overflows to inf, x * id is +-inf or NaN (x = 0), which the
                 * reference maps to 127 / -128 / -128 */
                for (int64_t i = 0; i < cols; i++) x[i] = (float)((int)(i % 5) - 2) * 1e-39f;
            for (int k = 0; k < nk; k++) check_quant(ks[k], x, cols);
        }
        free(x);
    }
}

/* ------------------------------------------------ AMX: threads and configs */

static const rp_mm_kernel *amx_kernel(rp_type t) {
#if !defined(__x86_64__)
    (void)t;
    return NULL;   /* (level 3 elsewhere is not AMX: aarch64's I8MM) */
#endif
    const rp_mm_kernel *ks[8];
    const int nk = usable(t, ks);
    for (int i = 0; i < nk; i++)
        if (ks[i]->level == RP_CPU_AMX) return ks[i];
    return NULL;
}

typedef struct {
    const rp_mm_kernel *k;
    const problem *p;
    int bad;
} thread_job;

static void *thread_body(void *vp) {
    thread_job *j = vp;
    prepared q;
    prepare(&q, j->k, j->p);
    j->bad = check_full_and_split(&q, j->p);
    prepared_free(&q);
    return NULL;
}

/* Tile config is per thread: a fresh thread has none, and the kernel must
 * load its own there. */
static void test_amx_fresh_thread(void **state) {
    (void)state;
    int ran = 0;
    for (int ti = 0; ti < 2; ti++) {
        const rp_type t = ti ? RP_TYPE_Q8_0 : RP_TYPE_Q4_0;
        const rp_mm_kernel *k = amx_kernel(t);
        if (!k) continue;
        rp_test_rng r = {99 + (uint64_t)ti};
        problem p;
        problem_make(&p, t, 48, 256, 37, &r);
        for (int rep = 0; rep < 2; rep++) {
            thread_job j = {k, &p, 0};
            pthread_t th;
            assert_int_equal(pthread_create(&th, NULL, thread_body, &j), 0);
            assert_int_equal(pthread_join(th, NULL), 0);
            assert_int_equal(j.bad, 0);
        }
        problem_free(&p);
        ran++;
    }
    if (!ran) RP_SKIP("no kernel of this kind runs here\n");
}

#if defined(__x86_64__)
/* Another family's config is live when we are called: the kernel must not
 * trust any cache, must compute correctly, and must leave that config in
 * place (other families cache what they loaded). */
static void test_amx_foreign_config(void **state) {
    (void)state;
    int ran = 0;
    for (int ti = 0; ti < 2; ti++) {
        const rp_type t = ti ? RP_TYPE_Q8_0 : RP_TYPE_Q4_0;
        const rp_mm_kernel *k = amx_kernel(t);
        if (!k) continue;
        rp_test_rng r = {7 + (uint64_t)ti};
        problem p;
        problem_make(&p, t, 40, 320, 18, &r);
        prepared q;
        prepare(&q, k, &p);
        /* the kernel's own config first (so a per-file cache would be "warm"),
         * then a foreign one of different shapes */
        assert_int_equal(check_full_and_split(&q, &p), 0);
        rp_amx_cfg other;
        memset(&other, 0, sizeof other);
        other.palette = 1;
        for (int i = 0; i < 8; i++) rp_amx_cfg_tile(&other, i, 4 + i, 8 * (i + 1));
        rp_q8x_amx_ldcfg(&other);
        assert_int_equal(check_full_and_split(&q, &p), 0);
        rp_amx_cfg now;
        rp_q8x_amx_stcfg(&now);
        assert_memory_equal(&now, &other, sizeof now);
        /* and after a release (tiles back in INIT state) */
        rp_q8x_amx_release();
        assert_int_equal(check_full_and_split(&q, &p), 0);
        prepared_free(&q);
        problem_free(&p);
        ran++;
    }
    if (!ran) RP_SKIP("no kernel of this kind runs here\n");
}
#endif

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_quant_act_exact),
        cmocka_unit_test(test_q4_0_kernels),
        cmocka_unit_test(test_q8_0_kernels),
        cmocka_unit_test(test_amx_fresh_thread),
#if defined(__x86_64__)
        cmocka_unit_test(test_amx_foreign_config),
#endif
    };
    return rp_test_main(tests, NULL, NULL);
}
