/* test_threadpool.c — the persistent pool: every item exactly once (fixed and guided claims), guided claim sizes, arguments. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "core/threadpool.h"

typedef struct { atomic_int *hits; int64_t n; atomic_int bad_tid; int nt; } pool_arg;

static void pool_body(void *vp, int64_t b, int64_t e, int tid) {
    pool_arg *a = vp;
    if (tid < 0 || tid >= a->nt) atomic_fetch_add(&a->bad_tid, 1);
    for (int64_t i = b; i < e; i++) atomic_fetch_add(&a->hits[i], 1);
}

/* Every item is processed exactly once, for many sizes and chunkings, over
 * thousands of back-to-back jobs (the decode pattern), with fixed and guided
 * claims interleaved. */
static void test_pool_exactly_once(void **state) {
    (void)state;
    for (int nt = 1; nt <= 4; nt++) {
        rp_pool *p = NULL;
        assert_int_equal(rp_pool_create(nt, &p), RP_OK);
        const int64_t sizes[] = {1, 3, 31, 33, 255, 257, 1000};
        atomic_int *hits = calloc(1000, sizeof *hits);
        for (int rep = 0; rep < 600; rep++) {
            int64_t n = sizes[rep % 7], chunk = 1 + rep % 5;
            for (int64_t i = 0; i < n; i++) atomic_store(&hits[i], 0);
            pool_arg a = {hits, n, 0, nt};
            if (rep % 2) rp_pool_parallel_for_guided(p, n, chunk, pool_body, &a);
            else rp_pool_parallel_for(p, n, chunk, pool_body, &a);
            for (int64_t i = 0; i < n; i++) assert_int_equal(atomic_load(&hits[i]), 1);
            assert_int_equal(atomic_load(&a.bad_tid), 0);
        }
        free(hits);
        rp_pool_free(p);
    }
    rp_pool *p = NULL;
    assert_int_equal(rp_pool_create(0, &p), RP_ERR_INVALID_ARG);
    assert_int_equal(rp_pool_create(1000, &p), RP_ERR_INVALID_ARG);
}

/* Guided claims: a claim starting at b has max(min, (n - b) / (2T)) items
 * (the last one cut at n), so claims shrink to the minimum at the end. */
typedef struct { atomic_int n_claims; int64_t begin[4096], end[4096]; } claim_log;

static void claim_body(void *vp, int64_t b, int64_t e, int tid) {
    (void)tid;
    claim_log *l = vp;
    int i = atomic_fetch_add(&l->n_claims, 1);
    if (i < 4096) { l->begin[i] = b; l->end[i] = e; }
}

static void test_pool_guided_claims(void **state) {
    (void)state;
    claim_log *l = calloc(1, sizeof *l);
    assert_non_null(l);
    for (int nt = 2; nt <= 4; nt++) {
        rp_pool *p = NULL;
        assert_int_equal(rp_pool_create(nt, &p), RP_OK);
        const int64_t ns[] = {9, 64, 128, 1000, 1024 + 7};
        const int64_t mins[] = {1, 8};
        for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++)
            for (size_t m = 0; m < 2; m++) {
                const int64_t n = ns[a], mn = mins[m];
                atomic_store(&l->n_claims, 0);
                rp_pool_parallel_for_guided(p, n, mn, claim_body, l);
                const int k = atomic_load(&l->n_claims);
                assert_true(k >= 1 && k < 4096);
                int64_t covered = 0, smallest = n, largest = 0;
                for (int i = 0; i < k; i++) {
                    const int64_t b = l->begin[i], e = l->end[i];
                    int64_t want = (n - b) / (2 * nt);
                    if (want < mn) want = mn;
                    if (b + want > n) want = n - b;
                    if (n > mn && e - b != want)
                        fail_msg("n=%lld min=%lld T=%d: claim [%lld, %lld) has %lld items, want %lld", (long long)n,
                                 (long long)mn, nt, (long long)b, (long long)e, (long long)(e - b), (long long)want);
                    covered += e - b;
                    if (e - b < smallest) smallest = e - b;
                    if (e - b > largest) largest = e - b;
                }
                assert_int_equal(covered, n);
                if (n >= 4 * nt * mn) {
                    /* long claims first, the minimum at the end */
                    assert_int_equal(largest, n / (2 * nt));
                    assert_true(smallest <= mn);
                }
            }
        rp_pool_free(p);
    }
    free(l);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pool_exactly_once),
        cmocka_unit_test(test_pool_guided_claims),
    };
    return rp_test_main(tests, NULL, NULL);
}
