/* test_attn.c — SIMD attention kernels (F32/F16/Q8_0 caches, GQA groups, prefill and decode patterns, large scores) against rp_attn_ref. */
#include "testutil.h"

#include "kernels/cpu.h"
#include "kernels/kernels.h"
#include "kernels/quant.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *xalloc(size_t bytes) {
    void *p = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
    assert_non_null(p);
    return p;
}

#define HK 4 /* KV heads per cache row (head_dim 8: a Q8_0 block holds all 4) */

/* One attention problem: a cache of n_kv cells, query rows with their
 * extents, the KV head under test and the query-head group size. */
typedef struct {
    rp_type t;
    int32_t D, G, n_rows, kv_head, n_kv;
    int32_t *n_cells;
    float *q;           /* n_rows x (HK*G*D + pad) */
    int64_t q_stride;
    uint8_t *k, *v;     /* n_kv rows */
    size_t row_bytes;
    float *kf, *vf;     /* the cache as the reference sees it (for tolerances) */
    int32_t *c_begin;   /* sliding window: first cell per row (NULL: 0) */
    float softcap;      /* logit soft-capping (0: off) */
} problem;

static void put_row(rp_type t, const float *src, uint8_t *dst, int64_t n) {
    assert_true(rp_quantize_row(t, src, dst, n));
}

static void make_problem(problem *p, rp_type t, int32_t D, int32_t G, int32_t n_rows, const int32_t *n_cells,
                         float qscale, uint64_t seed) {
    rp_test_rng r = {seed * 0x9E3779B97F4A7C15ull + 7};
    memset(p, 0, sizeof *p);
    p->t = t; p->D = D; p->G = G; p->n_rows = n_rows;
    p->kv_head = (int32_t)(seed % HK);
    p->n_cells = xalloc(sizeof(int32_t) * (size_t)n_rows);
    p->n_kv = 0;
    for (int32_t i = 0; i < n_rows; i++) {
        p->n_cells[i] = n_cells[i];
        if (n_cells[i] > p->n_kv) p->n_kv = n_cells[i];
    }
    const int64_t E = (int64_t)HK * D;   /* elements per cache row */
    p->row_bytes = rp_type_row_size(t, E);
    assert_true(p->row_bytes > 0);
    /* exactly n_kv rows: reading past the last cell is an ASan error */
    p->k = xalloc(p->row_bytes * (size_t)p->n_kv);
    p->v = xalloc(p->row_bytes * (size_t)p->n_kv);
    p->kf = xalloc(sizeof(float) * (size_t)(E * p->n_kv));
    p->vf = xalloc(sizeof(float) * (size_t)(E * p->n_kv));
    float *tmp = xalloc(sizeof(float) * (size_t)E);
    for (int32_t c = 0; c < p->n_kv; c++) {
        /* K with a per-cell offset pattern so some cells dominate */
        const float kb = (c % 17 == 3) ? 2.0f : 1.0f;
        for (int64_t e = 0; e < E; e++) tmp[e] = rp_test_rng_gauss(&r) * kb;
        put_row(t, tmp, p->k + (size_t)c * p->row_bytes, E);
        assert_true(rp_dequantize_row(t, p->k + (size_t)c * p->row_bytes, p->kf + c * E, E));
        for (int64_t e = 0; e < E; e++) tmp[e] = rp_test_rng_gauss(&r) + 0.5f;
        put_row(t, tmp, p->v + (size_t)c * p->row_bytes, E);
        assert_true(rp_dequantize_row(t, p->v + (size_t)c * p->row_bytes, p->vf + c * E, E));
    }
    free(tmp);
    p->q_stride = (int64_t)HK * G * D + 3;   /* all query heads of a row, plus padding */
    p->q = xalloc(sizeof(float) * (size_t)(p->q_stride * n_rows));
    for (int64_t i = 0; i < p->q_stride * n_rows; i++) p->q[i] = rp_test_rng_gauss(&r) * qscale;
}

static void free_problem(problem *p) {
    free(p->n_cells); free(p->q); free(p->k); free(p->v); free(p->kf); free(p->vf);
}

static void set_args(rp_attn_args *a, const problem *p, float *out, void *scratch) {
    memset(a, 0, sizeof *a);
    a->q = p->q;
    a->q_stride = p->q_stride;
    a->out = out;
    a->out_stride = p->q_stride;
    a->n_rows = p->n_rows;
    a->n_cells = p->n_cells;
    a->head_begin = p->kv_head * p->G;
    a->n_heads = p->G;
    a->head_dim = p->D;
    a->k = p->k;
    a->v = p->v;
    a->kv_row_bytes = p->row_bytes;
    a->kv_type = p->t;
    a->kv_head = p->kv_head;
    a->scale = 1.0f / sqrtf((float)p->D);
    a->scratch = scratch;
    a->c_begin = p->c_begin;
    a->softcap = p->softcap;
}

/* Worst observed error / tolerance over all runs (printed at the end). */
static double g_worst;

/* Runs kernel k and the reference on p and compares. The tolerance per
 * output: softmax weights move by the score error, |ds| <~ 16 eps * S where
 * S = max_t scale * sum_d |q_d k_d|, and the output (a convex combination of
 * V rows) moves by at most |ds| * 2 max|v| plus float accumulation error of
 * the weighted sums: |err| <= max|v| * (1e-5 + 2e-6 * S). */
static void compare(const rp_attn_kernel *k, const problem *p, const float *out, const float *ref, float sentinel);

/* Runs kernel k on cells [b[r], b[r + 1]) for each of the nb ranges in
 * partial mode (rp_attn_args.ml; cache pointers shifted, row extents clipped,
 * rows with no cell in a range included) and merges them with rp_attn_merge
 * into out (the layout of q). */
static void run_split(const rp_attn_kernel *k, const problem *p, const int32_t *b, int nb, float *out, void *scratch,
                      size_t sb) {
    const int32_t nq = p->n_rows * p->G;
    float *parts = xalloc(sizeof(float) * (size_t)nb * (size_t)nq * (size_t)p->D);
    float *mls = xalloc(sizeof(float) * (size_t)nb * 2 * (size_t)nq);
    int32_t *nc = xalloc(sizeof(int32_t) * (size_t)p->n_rows), *cb = xalloc(sizeof(int32_t) * (size_t)p->n_rows);
    for (int r = 0; r < nb; r++) {
        for (int32_t i = 0; i < p->n_rows; i++) {
            int32_t v = p->n_cells[i] - b[r];
            nc[i] = v < 0 ? 0 : v < b[r + 1] - b[r] ? v : b[r + 1] - b[r];
            if (p->c_begin) {   /* the window within the range, as the forward pass clips it */
                v = p->c_begin[i] - b[r];
                cb[i] = v < 0 ? 0 : v;
                if (cb[i] >= nc[i]) cb[i] = nc[i] = 0;
            }
        }
        rp_attn_args a;
        memset(scratch, 0xFF, sb);
        set_args(&a, p, NULL, scratch);
        a.n_cells = nc;
        if (p->c_begin) a.c_begin = cb;
        a.k += (size_t)b[r] * p->row_bytes;
        a.v += (size_t)b[r] * p->row_bytes;
        a.out = parts + (size_t)r * (size_t)nq * (size_t)p->D - (int64_t)a.head_begin * p->D;
        a.out_stride = (int64_t)p->G * p->D;
        a.ml = mls + (size_t)r * 2 * (size_t)nq;
        k->fn(&a);
    }
    rp_attn_merge(parts, (int64_t)nq * p->D, mls, 2 * nq, nb, nq, p->G, p->D,
                  out + (int64_t)p->kv_head * p->G * p->D, p->q_stride);
    free(parts); free(mls); free(nc); free(cb);
}

static void check_ranges(const rp_attn_kernel *k, const problem *p, const int32_t *bounds, int nb) {
    const size_t osz = (size_t)(p->q_stride * p->n_rows);
    float *out = xalloc(sizeof(float) * osz), *ref = xalloc(sizeof(float) * osz);
    const float sentinel = -777.0f;
    for (size_t i = 0; i < osz; i++) out[i] = ref[i] = sentinel;
    const size_t sb = rp_attn_scratch_bytes(p->D, p->G, p->n_rows);
    uint8_t *scratch = xalloc(sb);
    memset(scratch, 0xFF, sb);   /* NaN pattern: kernels must not read unwritten scratch into results */
    rp_attn_args a;
    set_args(&a, p, ref, scratch);
    rp_attn_ref(&a);
    if (bounds) {
        run_split(k, p, bounds, nb, out, scratch, sb);
    } else {
        memset(scratch, 0xFF, sb);
        set_args(&a, p, out, scratch);
        k->fn(&a);
    }
    compare(k, p, out, ref, sentinel);
    free(out); free(ref); free(scratch);
}

static void check(const rp_attn_kernel *k, const problem *p) { check_ranges(k, p, NULL, 0); }

static void compare(const rp_attn_kernel *k, const problem *p, const float *out, const float *ref, float sentinel) {
    const int64_t E = (int64_t)HK * p->D;
    for (int32_t i = 0; i < p->n_rows; i++)
        for (int32_t hh = 0; hh < HK * p->G; hh++) {
            const int mine = hh >= p->kv_head * p->G && hh < (p->kv_head + 1) * p->G;
            const float *o = out + i * p->q_stride + (int64_t)hh * p->D;
            const float *rf = ref + i * p->q_stride + (int64_t)hh * p->D;
            if (!mine) {
                for (int32_t d = 0; d < p->D; d++)
                    if (o[d] != sentinel) fail_msg("%s: head %d of row %d written (not in the group)", k->name, hh, i);
                continue;
            }
            const float *q = p->q + i * p->q_stride + (int64_t)hh * p->D;
            double S = 0, vmax = 0;
            for (int32_t c = 0; c < p->n_cells[i]; c++) {
                const float *kr = p->kf + c * E + (int64_t)p->kv_head * p->D;
                const float *vr = p->vf + c * E + (int64_t)p->kv_head * p->D;
                double s = 0;
                for (int32_t d = 0; d < p->D; d++) {
                    s += fabs((double)q[d] * kr[d]);
                    if (fabs(vr[d]) > vmax) vmax = fabs(vr[d]);
                }
                s /= sqrt((double)p->D);
                if (s > S) S = s;
            }
            const double tol = vmax * (1e-5 + 2e-6 * S);
            for (int32_t d = 0; d < p->D; d++) {
                const double err = fabs((double)o[d] - (double)rf[d]);
                if (!(err <= tol))
                    fail_msg("%s D=%d G=%d rows=%d row %d (n_cells %d) head %d d %d: %.9g vs ref %.9g (err %.3g > %.3g)",
                             k->name, p->D, p->G, p->n_rows, i, p->n_cells[i], hh, d, (double)o[d], (double)rf[d], err,
                             tol);
                if (err / tol > g_worst) g_worst = err / tol;
            }
        }
}

static int kernels_for(rp_type t, const rp_attn_kernel **out, int cap) {
    const rp_attn_kernel *all[8];
    const int n = rp_attn_kernel_list(t, all, 8);
    int m = 0;
    for (int i = 0; i < n && m < cap; i++)
        if (all[i]->level > RP_CPU_SCALAR && all[i]->level <= rp_cpu_info_get()->best) out[m++] = all[i];
    return m;
}

static const int32_t k_dims[] = {8, 64, 128};
static const int32_t k_groups[] = {1, 2, 4, 8};

/* Prefill runs: n_cells[i] = base + i (a run continuing a sequence), with
 * normal and large query magnitudes. */
static void check_prefill(rp_type t) {
    const rp_attn_kernel *ks[8];
    const int nk = kernels_for(t, ks, 8);
    if (!nk) RP_SKIP("no SIMD attention kernel for this type here\n");
    static const int32_t rows_v[] = {1, 3, 17, 64};
    static const int32_t base_v[] = {1, 60, 130};
    uint64_t seed = 100 + (uint64_t)t;
    int32_t nc[64];
    for (size_t di = 0; di < 3; di++)
        for (size_t gi = 0; gi < 4; gi++)
            for (size_t ri = 0; ri < 4; ri++)
                for (size_t bi = 0; bi < 3; bi++) {
                    const int32_t R = rows_v[ri];
                    for (int32_t i = 0; i < R; i++) nc[i] = base_v[bi] + i;
                    const float qscale = (seed % 3 == 0) ? 30.0f : 1.0f;
                    problem p;
                    make_problem(&p, t, k_dims[di], k_groups[gi], R, nc, qscale, seed++);
                    for (int j = 0; j < nk; j++) check(ks[j], &p);
                    free_problem(&p);
                }
}

/* Decode: one row over long contexts. */
static void check_decode(rp_type t) {
    const rp_attn_kernel *ks[8];
    const int nk = kernels_for(t, ks, 8);
    if (!nk) RP_SKIP("no SIMD attention kernel for this type here\n");
    static const int32_t cells_v[] = {1, 2, 31, 33, 257, 1000, 4095};
    uint64_t seed = 200 + (uint64_t)t;
    for (size_t di = 0; di < 3; di++)
        for (size_t gi = 0; gi < 4; gi++)
            for (size_t ci = 0; ci < 7; ci++) {
                const int32_t nc = cells_v[ci];
                problem p;
                const float qscale = (seed % 2) ? 4.0f : 1.0f;
                make_problem(&p, t, k_dims[di], k_groups[gi], 1, &nc, qscale, seed++);
                for (int j = 0; j < nk; j++) check(ks[j], &p);
                free_problem(&p);
            }
}

/* Rows with arbitrary (non-monotone) extents, several rows ending inside a
 * tile, in the middle of a 64-row run; huge scores (softmax nearly one hot;
 * a naive exp would overflow); and head sizes that are not whole vectors
 * (24, 80: partial last vector, Q8_0 heads cutting through blocks; 20: not a
 * multiple of 8, where AVX2 defers to the reference). */
static void check_irregular(rp_type t) {
    const rp_attn_kernel *ks[8];
    const int nk = kernels_for(t, ks, 8);
    if (!nk) RP_SKIP("no SIMD attention kernel for this type here\n");
    uint64_t seed = 300 + (uint64_t)t;
    rp_test_rng r = {seed};
    int32_t nc[64];
    static const int32_t dims[] = {8, 64, 128, 24, 80, 20};
    const size_t ndims = t == RP_TYPE_Q8_0 ? 5 : 6;   /* 4 heads of 20 are not whole Q8_0 blocks */
    for (int rep = 0; rep < 6; rep++)
        for (size_t di = 0; di < ndims; di++) {
            const int32_t R = 1 + (int32_t)(rp_test_rng_next(&r) % 64), G = k_groups[rp_test_rng_next(&r) % 4];
            for (int32_t i = 0; i < R; i++) nc[i] = 1 + (int32_t)(rp_test_rng_next(&r) % 300);
            const float qscale = rep < 3 ? 300.0f : 1.0f;
            problem p;
            make_problem(&p, t, dims[di], G, R, nc, qscale, seed++);
            for (int j = 0; j < nk; j++) check(ks[j], &p);
            free_problem(&p);
        }
}

/* Flash-decoding: the cells split into KV ranges (whole tiles as the forward
 * pass cuts them, and odd cuts), each range a partial-mode call, merged; every
 * kernel, the reference included, against the one-pass reference. Rows of
 * different extents so some rows have no cell in the later ranges. */
static void check_split(rp_type t) {
    const rp_attn_kernel *listed[8], *all[8];
    const int nl = rp_attn_kernel_list(t, listed, 8);
    int nk = 0;   /* the reference and the SIMD levels this CPU runs */
    for (int i = 0; i < nl; i++)
        if (listed[i]->level <= rp_cpu_info_get()->best) all[nk++] = listed[i];
    assert_true(nk >= 1);
    uint64_t seed = 400 + (uint64_t)t;
    static const int32_t dims[] = {64, 128, 24, 80};
    for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++)
        for (size_t gi = 0; gi < 4; gi++) {
            /* decode (one row), and a short verification run of 3 rows */
            const int32_t one[1] = {1000}, three[3] = {1000, 700, 130};
            for (int shape = 0; shape < 2; shape++) {
                problem p;
                make_problem(&p, t, dims[di], k_groups[gi], shape ? 3 : 1, shape ? three : one,
                             (seed % 2) ? 4.0f : 1.0f, seed);
                seed++;
                static const int32_t tiles[] = {0, 256, 512, 768, 1000};
                static const int32_t odd[] = {0, 1, 77, 500, 999, 1000};
                for (int j = 0; j < nk; j++) {
                    if (all[j]->level > rp_cpu_info_get()->best) continue;   /* not runnable on this CPU */
                    check_ranges(all[j], &p, tiles, 4);
                    check_ranges(all[j], &p, odd, 5);
                }
                free_problem(&p);
            }
        }
}

/* Sliding windows (rp_attn_args.c_begin) and logit soft-capping against the reference: prefill runs whose
 * windows start one cell apart (W = 1, 5, 32, 100: tiles starting mid-run), rows of arbitrary extents and
 * starts (some beyond the first tile of the run), decode rows, soft-capping of huge scores; one-pass and
 * split into ranges (some ranges before a row's window: empty). */
static void check_window(rp_type t) {
    const rp_attn_kernel *ks[8];
    const int nk = kernels_for(t, ks, 8);
    if (!nk) RP_SKIP("no SIMD attention kernel for this type here\n");
    uint64_t seed = 500 + (uint64_t)t;
    rp_test_rng r = {seed};
    static const int32_t dims[] = {64, 24, 80, 128};
    static const int32_t wins[] = {1, 5, 32, 100, 0};
    int32_t nc[64], cb[64];
    for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++)
        for (size_t wi = 0; wi < sizeof wins / sizeof wins[0]; wi++)
            for (int shape = 0; shape < 3; shape++) {
                const int32_t R = shape == 0 ? 1 + (int32_t)(rp_test_rng_next(&r) % 64) : shape == 1 ? 1 : 3;
                const int32_t G = k_groups[rp_test_rng_next(&r) % 4];
                const int32_t base = 1 + (int32_t)(rp_test_rng_next(&r) % 400);
                for (int32_t i = 0; i < R; i++) {
                    nc[i] = base + i;
                    /* W > 0: the window of position nc - 1; W == 0: arbitrary starts, some past the run's first tile */
                    cb[i] = wins[wi] ? (nc[i] - wins[wi] > 0 ? nc[i] - wins[wi] : 0)
                                     : (int32_t)(rp_test_rng_next(&r) % (uint64_t)nc[i]);
                }
                problem p;
                make_problem(&p, t, dims[di], G, R, nc, (seed % 2) ? 30.0f : 1.0f, seed);
                seed++;
                p.c_begin = cb;
                p.softcap = (seed % 3 == 0) ? 50.0f : 0.0f;
                for (int j = 0; j < nk; j++) check(ks[j], &p);
                const int32_t last = nc[R - 1];
                const int32_t cuts[] = {0, last / 3, last / 3 + 64, last};
                if (last > 4 && cuts[2] < last)
                    for (int j = 0; j < nk; j++) check_ranges(ks[j], &p, cuts, 3);
                p.c_begin = NULL;
                free_problem(&p);
            }
}

static void test_attn_f32_window(void **s) { (void)s; check_window(RP_TYPE_F32); }
static void test_attn_f16_window(void **s) { (void)s; check_window(RP_TYPE_F16); }
static void test_attn_q8_0_window(void **s) { (void)s; check_window(RP_TYPE_Q8_0); }

static void test_attn_f32_split(void **s) { (void)s; check_split(RP_TYPE_F32); }
static void test_attn_f16_split(void **s) { (void)s; check_split(RP_TYPE_F16); }
static void test_attn_q8_0_split(void **s) { (void)s; check_split(RP_TYPE_Q8_0); }

static void test_attn_f32_prefill(void **s) { (void)s; check_prefill(RP_TYPE_F32); }
static void test_attn_f16_prefill(void **s) { (void)s; check_prefill(RP_TYPE_F16); }
static void test_attn_q8_0_prefill(void **s) { (void)s; check_prefill(RP_TYPE_Q8_0); }
static void test_attn_f32_decode(void **s) { (void)s; check_decode(RP_TYPE_F32); }
static void test_attn_f16_decode(void **s) { (void)s; check_decode(RP_TYPE_F16); }
static void test_attn_q8_0_decode(void **s) { (void)s; check_decode(RP_TYPE_Q8_0); }
static void test_attn_f32_irregular(void **s) { (void)s; check_irregular(RP_TYPE_F32); }
static void test_attn_f16_irregular(void **s) { (void)s; check_irregular(RP_TYPE_F16); }
static void test_attn_q8_0_irregular(void **s) { (void)s; check_irregular(RP_TYPE_Q8_0); }

/* The scratch bound covers every kernel's layout at the forward pass's sizes. */
static void test_attn_scratch_bound(void **s) {
    (void)s;
    for (int32_t d = 8; d <= 256; d += 8)
        for (int32_t g = 1; g <= 16; g++) {
            const size_t b = rp_attn_scratch_bytes(d, g, RP_ATTN_MAX_ROWS);
            const size_t nq = (size_t)g * RP_ATTN_MAX_ROWS, dp = ((size_t)d + 15) & ~(size_t)15;
            const size_t need = (nq * 68 + 3 * 64 * dp + 8 * 16 + 16) * sizeof(float);
            assert_true(b >= need);
            assert_true(b >= (size_t)d * sizeof(float));
        }
}

static int teardown(void **s) {
    (void)s;
    print_message("worst error / tolerance: %.3f\n", g_worst);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_attn_scratch_bound),
        cmocka_unit_test(test_attn_f32_prefill),
        cmocka_unit_test(test_attn_f16_prefill),
        cmocka_unit_test(test_attn_q8_0_prefill),
        cmocka_unit_test(test_attn_f32_decode),
        cmocka_unit_test(test_attn_f16_decode),
        cmocka_unit_test(test_attn_q8_0_decode),
        cmocka_unit_test(test_attn_f32_irregular),
        cmocka_unit_test(test_attn_f16_irregular),
        cmocka_unit_test(test_attn_q8_0_irregular),
        cmocka_unit_test(test_attn_f32_window),
        cmocka_unit_test(test_attn_f16_window),
        cmocka_unit_test(test_attn_q8_0_window),
        cmocka_unit_test(test_attn_f32_split),
        cmocka_unit_test(test_attn_f16_split),
        cmocka_unit_test(test_attn_q8_0_split),
    };
    return rp_test_main(tests, NULL, teardown);
}
