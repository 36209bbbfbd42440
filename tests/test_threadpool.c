/* test_threadpool.c — the work-stealing pool: every item exactly once, claim sizes, absent and slow workers, run-time thread count. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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

/* Guided claims: every claim of a loop with n > min has at least `min` items
 * (the last one of a share may be shorter), claims cover [0, n) exactly once,
 * and claims shrink: the largest is long (a quarter-share or more), the last
 * ones are the minimum. */
typedef struct { atomic_int n_claims; int64_t begin[4096], end[4096]; } claim_log;

static void claim_body(void *vp, int64_t b, int64_t e, int tid) {
    (void)tid;
    claim_log *l = vp;
    int i = atomic_fetch_add(&l->n_claims, 1);
    if (i < 4096) { l->begin[i] = b; l->end[i] = e; }
}

static int cmp_begin(const void *a, const void *b) {
    const int64_t *x = a, *y = b;
    return x[0] < y[0] ? -1 : x[0] > y[0];
}

static void test_pool_guided_claims(void **state) {
    (void)state;
    claim_log *l = calloc(1, sizeof *l);
    int64_t (*pairs)[2] = calloc(4096, sizeof *pairs);
    assert_non_null(l);
    assert_non_null(pairs);
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
                int64_t largest = 0, short_ones = 0;
                for (int i = 0; i < k; i++) {
                    pairs[i][0] = l->begin[i];
                    pairs[i][1] = l->end[i];
                    const int64_t len = l->end[i] - l->begin[i];
                    assert_true(len >= 1);
                    if (len > largest) largest = len;
                    if (len < mn) short_ones++;
                }
                /* exact cover, no overlap */
                qsort(pairs, (size_t)k, sizeof *pairs, cmp_begin);
                int64_t at = 0;
                for (int i = 0; i < k; i++) {
                    if (pairs[i][0] != at) fail_msg("n=%lld min=%lld T=%d: gap or overlap at %lld", (long long)n, (long long)mn, nt, (long long)at);
                    at = pairs[i][1];
                }
                assert_int_equal(at, n);
                /* only a share's last claim (one per worker share, plus stolen tails) is below the minimum */
                if (k > 1) assert_true(short_ones <= 2 * nt);
                if (n >= 8 * nt * mn) assert_true(largest >= n / nt / 4 - mn);
            }
        rp_pool_free(p);
    }
    free(pairs);
    free(l);
}

/* A worker that does not show up (descheduled by another process, simulated
 * with a stall before it looks at the loop) does not hold the loop up: the
 * caller takes its whole share, the loop returns long before the stall ends,
 * and every item runs exactly once. The old pool waited for every worker to
 * enter and leave each loop. */
typedef struct { atomic_int *hits; atomic_int by_tid[8]; } who_arg;

static void who_body(void *vp, int64_t b, int64_t e, int tid) {
    who_arg *a = vp;
    for (int64_t i = b; i < e; i++) atomic_fetch_add(&a->hits[i], 1);
    atomic_fetch_add(&a->by_tid[tid], (int)(e - b));
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void test_pool_absent_worker(void **state) {
    (void)state;
    rp_pool *p = NULL;
    assert_int_equal(rp_pool_create(2, &p), RP_OK);
    enum { N = 4096 };
    atomic_int *hits = calloc(N, sizeof *hits);
    /* let the worker go to sleep on its condition variable first, as an idle worker does */
    struct timespec ts = {0, 50 * 1000 * 1000};
    nanosleep(&ts, NULL);
    rp_pool_debug_stall(p, 1, 2000 * 1000);   /* 2 s */
    who_arg a = {hits, {0}};
    const double t0 = now_s();
    rp_pool_parallel_for(p, N, 16, who_body, &a);
    const double dt = now_s() - t0;
    for (int i = 0; i < N; i++) assert_int_equal(atomic_load(&hits[i]), 1);
    assert_int_equal(atomic_load(&a.by_tid[0]), N);   /* the caller did the absent worker's share */
    if (dt > 1.0) fail_msg("the loop waited %.2f s for a worker that never came", dt);
    /* back-to-back loops go on without it too, and each item still runs once */
    for (int rep = 0; rep < 50; rep++) {
        for (int i = 0; i < N; i++) atomic_store(&hits[i], 0);
        rp_pool_parallel_for_guided(p, N, 8, who_body, &a);
        for (int i = 0; i < N; i++) assert_int_equal(atomic_load(&hits[i]), 1);
    }
    rp_pool_free(p);   /* joins the stalled worker once it wakes */
    free(hits);
}

/* A worker that is slow inside its claim (here: every claim it makes sleeps)
 * loses the rest of its share to the others: it runs few items, the loop
 * still covers every item once. */
typedef struct { atomic_int *hits; atomic_int by_tid[8]; } slow_arg;

static void slow_body(void *vp, int64_t b, int64_t e, int tid) {
    slow_arg *a = vp;
    if (tid == 1) {
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    } else {
        volatile double x = 0;   /* a few microseconds of work per item */
        for (int64_t i = b; i < e; i++)
            for (int j = 0; j < 2000; j++) x += j;
    }
    for (int64_t i = b; i < e; i++) atomic_fetch_add(&a->hits[i], 1);
    atomic_fetch_add(&a->by_tid[tid], (int)(e - b));
}

static void test_pool_slow_worker(void **state) {
    (void)state;
    for (int nt = 2; nt <= 3; nt++) {
        rp_pool *p = NULL;
        assert_int_equal(rp_pool_create(nt, &p), RP_OK);
        enum { N = 2000 };
        atomic_int *hits = calloc(N, sizeof *hits);
        slow_arg a = {hits, {0}};
        rp_pool_parallel_for(p, N, 4, slow_body, &a);
        for (int i = 0; i < N; i++) assert_int_equal(atomic_load(&hits[i]), 1);
        const int slow = atomic_load(&a.by_tid[1]);
        /* its share was N / nt items; a handful of claims of 4 at most ran there */
        if (slow > N / nt / 4) fail_msg("T=%d: the slow worker ran %d of its %d items", nt, slow, N / nt);
        int sum = 0;
        for (int t = 0; t < nt; t++) sum += atomic_load(&a.by_tid[t]);
        assert_int_equal(sum, N);
        rp_pool_free(p);
        free(hits);
    }
}

/* The thread count is adjustable at run time up to the creation bound:
 * workers beyond it take no items. */
static void test_pool_set_active(void **state) {
    (void)state;
    rp_pool *p = NULL;
    assert_int_equal(rp_pool_create(4, &p), RP_OK);
    assert_int_equal(rp_pool_active(p), 4);
    enum { N = 3000 };
    atomic_int *hits = calloc(N, sizeof *hits);
    for (int act = 1; act <= 4; act++) {
        rp_pool_set_active(p, act);
        assert_int_equal(rp_pool_active(p), act);
        for (int rep = 0; rep < 20; rep++) {
            who_arg a = {hits, {0}};
            for (int i = 0; i < N; i++) atomic_store(&hits[i], 0);
            rp_pool_parallel_for(p, N, 3, who_body, &a);
            for (int i = 0; i < N; i++) assert_int_equal(atomic_load(&hits[i]), 1);
            for (int t = act; t < 4; t++) assert_int_equal(atomic_load(&a.by_tid[t]), 0);
        }
    }
    rp_pool_set_active(p, 0);
    assert_int_equal(rp_pool_active(p), 1);
    rp_pool_set_active(p, 99);
    assert_int_equal(rp_pool_active(p), 4);
    rp_pool_free(p);
    free(hits);
}

static double proc_cpu_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* The spin knob: a worker waiting for the next loop spins (a core busy),
 * yields, then sleeps. With a huge spin count the idle worker burns CPU while
 * the caller sleeps; with 0 it yields and sleeps at once, so the process uses
 * almost no CPU while idle; loops run exactly once either way. */
static void test_pool_spin_knob(void **state) {
    (void)state;
    rp_pool *p = NULL;
    assert_int_equal(rp_pool_create(2, &p), RP_OK);
    assert_true(rp_pool_spin(p) >= 0);
    enum { N = 500 };
    atomic_int *hits = calloc(N, sizeof *hits);
    const int spins[2] = {100000000, 0};
    double idle_cpu[2];
    for (int k = 0; k < 2; k++) {
        rp_pool_set_spin(p, spins[k]);
        assert_int_equal(rp_pool_spin(p), spins[k]);
        for (int rep = 0; rep < 50; rep++) {
            pool_arg a = {hits, N, 0, 2};
            for (int i = 0; i < N; i++) atomic_store(&hits[i], 0);
            rp_pool_parallel_for(p, N, 1 + rep % 3, pool_body, &a);
            for (int i = 0; i < N; i++) assert_int_equal(atomic_load(&hits[i]), 1);
        }
        /* the worker now waits for a loop that does not come */
        const double c0 = proc_cpu_s();
        struct timespec ts = {0, 200 * 1000 * 1000};
        nanosleep(&ts, NULL);
        idle_cpu[k] = proc_cpu_s() - c0;
    }
    print_message("idle CPU over 200 ms: spin 1e8 %.3f s, spin 0 %.3f s\n", idle_cpu[0], idle_cpu[1]);
    assert_true(idle_cpu[1] < 0.05);
    /* a spinning worker takes most of a core while it spins (less when the
     * machine is loaded and the OS gives the core to others) */
    assert_true(idle_cpu[0] > idle_cpu[1] + 0.01);
    rp_pool_set_spin(p, -5);
    assert_int_equal(rp_pool_spin(p), 0);
    rp_pool_free(p);
    free(hits);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pool_exactly_once),
        cmocka_unit_test(test_pool_guided_claims),
        cmocka_unit_test(test_pool_absent_worker),
        cmocka_unit_test(test_pool_slow_worker),
        cmocka_unit_test(test_pool_set_active),
        cmocka_unit_test(test_pool_spin_knob),
    };
    return rp_test_main(tests, NULL, NULL);
}
