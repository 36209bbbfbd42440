/* test_mm_kquants.c — x86 K-quant and other block-quant matmul kernels (Q4_K, Q6_K: avx2, avx512, amx; Q2_K, Q3_K, Q5_K, IQ4_XS, Q4_1, Q5_0, Q5_1, IQ4_NL: avx2, avx512) against the scalar reference; the packed Q5_K and Q3_K AVX2 kernels (q5_k/avx2-packed, q3_k/avx2-packed) come in through rp_mm_kernel_list like the others. */
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
#include "kernels/x86/amx.h"
#endif

/* Kernels above the machine's level are skipped; define RP_TEST_ALL_LEVELS to
 * run them anyway (e.g. the AMX kernel under an instruction emulator). */
static bool level_ok(const rp_mm_kernel *k) {
#ifdef RP_TEST_ALL_LEVELS
    (void)k;
    return true;
#else
    return k->level <= rp_cpu_info_get()->best;
#endif
}

/* Rows of mixed character: gaussian, one-signed (large Q4_K mins), heavy
 * tails, zero runs; scales spanning 1e-3 .. 1e2. */
static void gen_row(rp_test_rng *r, float *x, int64_t n, int kind) {
    const float scale = powf(10.0f, (float)(rp_test_rng_next(r) % 6) - 3.0f);
    for (int64_t i = 0; i < n; i++) {
        const float g = rp_test_rng_gauss(r);
        float v;
        switch (kind % 5) {
        case 0: v = g; break;
        case 1: v = fabsf(g) + 0.3f; break;
        case 2: v = g * g * g; break;
        case 3: v = ((i / 32) % 3 == 1) ? 0.0f : g; break;
        default: v = g - 2.0f; break;
        }
        x[i] = v * scale;
    }
}

static void *xalloc(size_t bytes) {
    void *p = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
    assert_non_null(p);
    return p;
}

/* ------------------------------------------------------------ quant_act */

/* The kernels' activation rows start with exactly rp_quantize_row(Q8_K). */
static void check_quant_act(const rp_mm_kernel *k, rp_test_rng *rng) {
    static const int64_t sizes[] = {256, 512, 2048, 256 * 11};
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        const int64_t cols = sizes[si];
        float *x = xalloc((size_t)cols * sizeof(float));
        const size_t ref_bytes = rp_type_row_size(RP_TYPE_Q8_K, cols);
        uint8_t *ref = xalloc(ref_bytes);
        uint8_t *got = xalloc(k->act_row_size(cols));
        assert_true(k->act_row_size(cols) >= ref_bytes);
        for (int kind = 0; kind < 8; kind++) {
            gen_row(rng, x, cols, kind);
            if (kind == 5 && cols > 256) memset(x + 256, 0, 256 * sizeof(float)); /* an all-zero block */
            if (kind == 6) { x[3] = 1e4f; x[100] = -1e4f; x[200] = 1e4f; }         /* |max| ties: the first wins */
            if (kind == 7) {
                /* max 127 gives iscale -1: every other value is a .5 tie (to even) */
                for (int64_t i = 0; i < cols; i++) x[i] = (float)((int)(i % 254) - 127) + 0.5f;
                x[0] = 127.0f;
                x[1] = -127.0f;
            }
            assert_true(rp_quantize_row(RP_TYPE_Q8_K, x, ref, cols));
            memset(got, 0xA5, k->act_row_size(cols));
            k->quant_act(x, got, cols);
            if (memcmp(ref, got, ref_bytes) != 0) {
                for (size_t i = 0; i < ref_bytes; i++)
                    if (ref[i] != got[i]) {
                        print_message("%s quant_act cols %lld kind %d: byte %zu differs (%u vs %u)\n", k->name,
                                      (long long)cols, kind, i, got[i], ref[i]);
                        break;
                    }
                fail();
            }
        }
        free(x);
        free(ref);
        free(got);
    }
}

static void test_quant_act(void **state) {
    (void)state;
    rp_test_rng rng = {0x9E3779B97F4A7C15ull};
    const rp_type types[] = {RP_TYPE_Q4_K, RP_TYPE_Q6_K, RP_TYPE_Q2_K, RP_TYPE_Q3_K, RP_TYPE_Q5_K, RP_TYPE_IQ4_XS};
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        const rp_mm_kernel *ks[8];
        const int nk = rp_mm_kernel_list(types[t], ks, 8);
        for (int i = 0; i < nk; i++)
            if (ks[i]->level > RP_CPU_SCALAR && level_ok(ks[i])) check_quant_act(ks[i], &rng);
    }
}

/* ------------------------------------------------------------ matmul */

typedef struct {
    rp_type type;
    int64_t rows, cols, n;
    uint8_t *w;          /* GGUF rows */
    size_t row_bytes;
    float *xf;           /* n x cols activations */
    float *ref;          /* n x rows, the reference */
    float *tol;          /* n x rows, allowed |error| */
} problem;

static void problem_make(problem *p, rp_type type, int64_t rows, int64_t cols, int64_t n, rp_test_rng *rng) {
    p->type = type;
    p->rows = rows;
    p->cols = cols;
    p->n = n;
    p->row_bytes = rp_type_row_size(type, cols);
    p->w = xalloc(p->row_bytes * (size_t)rows);
    float *tmp = xalloc((size_t)cols * sizeof(float));
    float *wf = xalloc((size_t)cols * sizeof(float) * (size_t)rows);
    for (int64_t r = 0; r < rows; r++) {
        gen_row(rng, tmp, cols, (int)(rp_test_rng_next(rng) % 5));
        assert_true(rp_quantize_row(type, tmp, p->w + (size_t)r * p->row_bytes, cols));
        assert_true(rp_dequantize_row(type, p->w + (size_t)r * p->row_bytes, wf + (size_t)r * cols, cols));
    }
    p->xf = xalloc((size_t)(n * cols) * sizeof(float));
    for (int64_t i = 0; i < n; i++) gen_row(rng, p->xf + i * cols, cols, (int)(i % 5));
    const rp_type vt = rp_type_vec_dot_type(type);   /* Q8_K, or Q8_0 for the 32-element types */
    const size_t qb = rp_type_row_size(vt, cols);
    uint8_t *q = xalloc(qb);
    float *af = xalloc((size_t)cols * sizeof(float));
    p->ref = xalloc((size_t)(n * rows) * sizeof(float));
    p->tol = xalloc((size_t)(n * rows) * sizeof(float));
    for (int64_t i = 0; i < n; i++) {
        assert_true(rp_quantize_row(vt, p->xf + i * cols, q, cols));
        assert_true(rp_dequantize_row(vt, q, af, cols));
        for (int64_t r = 0; r < rows; r++) {
            p->ref[i * rows + r] = rp_vec_dot_ref(type, cols, p->w + (size_t)r * p->row_bytes, q);
            double s = 0;
            for (int64_t k = 0; k < cols; k++) s += fabs((double)wf[r * cols + k] * af[k]);
            p->tol[i * rows + r] = (float)(1e-5 * s) + 1e-30f;
        }
    }
    free(q);
    free(af);
    free(tmp);
    free(wf);
}

static void problem_free(problem *p) {
    free(p->w);
    free(p->xf);
    free(p->ref);
    free(p->tol);
}

/* Packs (in two group ranges; kernels that read the GGUF rows in place get
 * them as they are), quantizes, runs gemm over [0, rows) and over a split,
 * and checks every output and that nothing outside [r0, r1) is written.
 * Returns the number of failures (it may run on a thread other than cmocka's,
 * so it reports instead of failing). */
static int run_kernel(const rp_mm_kernel *k, const problem *p) {
    int bad = 0;
    const int64_t rows = p->rows, cols = p->cols, n = p->n, rb = k->row_block;
    const int64_t groups = (rows + rb - 1) / rb;
    uint8_t *packed = NULL;
    const uint8_t *wmat = p->w;
    size_t wrb = p->row_bytes;
    if (k->pack) {
        const size_t pbytes = k->packed_size(rows, cols);
        packed = xalloc(pbytes);
        memset(packed, 0xCD, pbytes);   /* pack must write every byte it owns */
        k->pack(p->w, p->row_bytes, rows, cols, packed, 0, groups / 2);
        k->pack(p->w, p->row_bytes, rows, cols, packed, groups / 2, groups);
        wmat = packed;
        wrb = 0;
    }

    const size_t astride = (k->act_row_size(cols) + 63) & ~(size_t)63;
    uint8_t *act = xalloc(astride * (size_t)n);
    for (int64_t i = 0; i < n; i++) k->quant_act(p->xf + i * cols, act + (size_t)i * astride, cols);
    const size_t sbytes = k->scratch_bytes ? k->scratch_bytes(cols, n) : 0;
    void *scratch = sbytes ? xalloc(sbytes) : NULL;

    const int64_t ldy = rows + 5;
    float *y = xalloc((size_t)(n * ldy) * sizeof(float));
    /* ranges: the whole matrix, then a split at a row_block boundary */
    int64_t cuts[4] = {0, rows, rows, rows};
    int ncut = 2;
    if (groups >= 2) {
        cuts[1] = (groups / 2) * rb;
        cuts[2] = rows;
        ncut = 3;
    }
    for (int pass = 0; pass < 2; pass++) {
        for (int64_t i = 0; i < n * ldy; i++) y[i] = NAN;
        if (pass == 0) {
            k->gemm(wmat, wrb, rows, cols, act, astride, n, 0, rows, y, ldy, scratch);
        } else {
            /* later range first: ranges are independent */
            for (int c = ncut - 2; c >= 0; c--)
                k->gemm(wmat, wrb, rows, cols, act, astride, n, cuts[c], cuts[c + 1], y, ldy, scratch);
        }
        for (int64_t i = 0; i < n; i++) {
            for (int64_t r = 0; r < rows; r++) {
                const float got = y[i * ldy + r], want = p->ref[i * rows + r];
                if (!(fabsf(got - want) <= p->tol[i * rows + r])) {
                    print_message("%s rows %lld cols %lld n %lld pass %d: y[%lld][%lld] = %.9g, ref %.9g (tol %.3g)\n",
                                  k->name, (long long)rows, (long long)cols, (long long)n, pass, (long long)i,
                                  (long long)r, got, want, p->tol[i * rows + r]);
                    if (++bad > 4) goto out;
                }
            }
            for (int64_t r = rows; r < ldy; r++)
                if (!isnan(y[i * ldy + r])) {
                    print_message("%s wrote past r1 (row %lld, col %lld)\n", k->name, (long long)i, (long long)r);
                    if (++bad > 4) goto out;
                }
        }
    }
out:
    free(packed);
    free(act);
    free(scratch);
    free(y);
    return bad;
}

/* Every SIMD kernel of `type` against the reference, on rows that are not
 * multiples of any row block or register tile, block counts that are odd
 * (and, for the 32-element types, not multiples of 8), and batch sizes
 * around the kernels' activation-row tiles. */
static void test_type(rp_type type) {
    static const int64_t rows_v[] = {1, 3, 15, 16, 17, 31, 33, 255, 257};
    static const int64_t cols_k[] = {256, 512, 2048, 256 * 11};
    static const int64_t cols_32[] = {32, 96, 224, 32 * 33, 2048};
    static const int64_t n_v[] = {1, 2, 3, 5, 15, 16, 17, 33, 64};
    const bool b32 = rp_type_get_traits(type)->blck_size == 32;
    const int64_t *cols_v = b32 ? cols_32 : cols_k;
    const size_t ncols = b32 ? sizeof cols_32 / sizeof cols_32[0] : sizeof cols_k / sizeof cols_k[0];
    const rp_mm_kernel *all[8], *ks[8];
    const int na = rp_mm_kernel_list(type, all, 8);
    int nk = 0;
    for (int i = 0; i < na; i++)
        if (all[i]->level > RP_CPU_SCALAR && level_ok(all[i])) ks[nk++] = all[i];
#if defined(__x86_64__)
    /* Every level the machine has must have its kernel registered: a
     * family missing from the registry's table (src/kernels/registry.c)
     * silently falls back to the scalar reference. */
    const int top = type == RP_TYPE_Q4_K || type == RP_TYPE_Q6_K ? (int)RP_CPU_AMX : (int)RP_CPU_AVX512;
    for (int lvl = RP_CPU_AVX2; lvl <= (int)rp_cpu_info_get()->best && lvl <= top; lvl++) {
        bool have = false;
        for (int i = 0; i < na; i++) have |= all[i]->level == (rp_cpu_level)lvl;
        if (!have) {
            print_message("no %s %s kernel registered though the CPU has the level (src/kernels/registry.c)\n",
                          rp_type_get_traits(type)->name, rp_cpu_level_name((rp_cpu_level)lvl));
            fail();
        }
    }
#endif
    if (nk == 0) {
        RP_SKIP("no x86 kernel for this type on this machine\n");
    }
    /* the driver reserves scratch for its largest n and runs smaller ones */
    for (int i = 0; i < nk; i++)
        for (size_t ci = 0; ci < ncols; ci++)
            for (int64_t n = 1; ks[i]->scratch_bytes && n < 600; n++)
                assert_true(ks[i]->scratch_bytes(cols_v[ci], n) <= ks[i]->scratch_bytes(cols_v[ci], n + 1));
    rp_test_rng rng = {0x2545F4914F6CDD1Dull ^ (uint64_t)type};
    for (size_t ri = 0; ri < sizeof rows_v / sizeof rows_v[0]; ri++)
        for (size_t ci = 0; ci < ncols; ci++) {
            const int64_t rows = rows_v[ri], cols = cols_v[ci];
            for (size_t ni = 0; ni < sizeof n_v / sizeof n_v[0]; ni++) {
                const int64_t n = n_v[ni];
                problem p;
                problem_make(&p, type, rows, cols, n, &rng);
                for (int i = 0; i < nk; i++) assert_int_equal(run_kernel(ks[i], &p), 0);
                problem_free(&p);
            }
        }
}

static void test_q4_k(void **state) { (void)state; test_type(RP_TYPE_Q4_K); }
static void test_q6_k(void **state) { (void)state; test_type(RP_TYPE_Q6_K); }
static void test_q2_k(void **state) { (void)state; test_type(RP_TYPE_Q2_K); }
static void test_q3_k(void **state) { (void)state; test_type(RP_TYPE_Q3_K); }
static void test_q5_k(void **state) { (void)state; test_type(RP_TYPE_Q5_K); }
static void test_iq4_xs(void **state) { (void)state; test_type(RP_TYPE_IQ4_XS); }
static void test_q4_1(void **state) { (void)state; test_type(RP_TYPE_Q4_1); }
static void test_q5_0(void **state) { (void)state; test_type(RP_TYPE_Q5_0); }
static void test_q5_1(void **state) { (void)state; test_type(RP_TYPE_Q5_1); }
static void test_iq4_nl(void **state) { (void)state; test_type(RP_TYPE_IQ4_NL); }

/* ------------------------------------------------------------ AMX state */

#if defined(__x86_64__)
#ifndef RP_KQ_AMX_STORE_CFG
#define RP_KQ_AMX_STORE_CFG(p) __asm__ volatile("sttilecfg %0" : "=m"(*(struct { char b[64]; } *)(p)) : : "memory")
#endif

typedef struct {
    const rp_mm_kernel *k;
    const problem *p;
    bool other_cfg;
    int bad;
} amx_job;

static void *amx_thread(void *arg) {
    amx_job *j = arg;
    j->bad = run_kernel(j->k, j->p);
    if (j->other_cfg) {
        /* another kernel's tile shapes loaded through the cache of another
         * translation unit: ours must notice, and must leave these in place */
        rp_amx_cfg c, live;
        memset(&c, 0, sizeof c);
        c.palette = 1;
        for (int t = 0; t < 8; t++) rp_amx_cfg_tile(&c, t, 8, 32);
        rp_amx_ensure_cfg(&c);
        j->bad += run_kernel(j->k, j->p);
        RP_KQ_AMX_STORE_CFG(&live);
        if (memcmp(&live, &c, sizeof c) != 0) {
            print_message("%s did not restore the caller's tile config\n", j->k->name);
            j->bad++;
        }
    }
    return NULL;
}
#endif

/* The AMX kernels from a fresh thread (no tile config yet) and from a thread
 * whose last config was someone else's. */
static void test_amx_thread_state(void **state) {
    (void)state;
#if defined(__x86_64__)
    bool ran = false;
    const rp_type types[] = {RP_TYPE_Q4_K, RP_TYPE_Q6_K};
    rp_test_rng rng = {77};
    for (int t = 0; t < 2; t++) {
        const rp_mm_kernel *ks[8];
        const int nk = rp_mm_kernel_list(types[t], ks, 8);
        for (int i = 0; i < nk; i++) {
            if (ks[i]->level != RP_CPU_AMX || !level_ok(ks[i])) continue;
            problem p;
            problem_make(&p, types[t], 40, 512, 35, &rng);
            for (int other = 0; other < 2; other++) {
                amx_job j = {ks[i], &p, other != 0, 0};
                pthread_t th;
                assert_int_equal(pthread_create(&th, NULL, amx_thread, &j), 0);
                assert_int_equal(pthread_join(th, NULL), 0);
                assert_int_equal(j.bad, 0);
            }
            problem_free(&p);
            ran = true;
        }
    }
    if (!ran) {
        RP_SKIP("no AMX on this machine\n");
    }
#else
    RP_SKIP("AMX is x86-64 only\n");
#endif
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_quant_act),
        cmocka_unit_test(test_q4_k),
        cmocka_unit_test(test_q6_k),
        cmocka_unit_test(test_q2_k),
        cmocka_unit_test(test_q3_k),
        cmocka_unit_test(test_q5_k),
        cmocka_unit_test(test_iq4_xs),
        cmocka_unit_test(test_q4_1),
        cmocka_unit_test(test_q5_0),
        cmocka_unit_test(test_q5_1),
        cmocka_unit_test(test_iq4_nl),
        cmocka_unit_test(test_amx_thread_state),
    };
    return rp_test_main(tests, NULL, NULL);
}
