/* test_chunk.c — chunking: determinism, caller boundaries, min/max, content-defined cuts, hashes, error contracts, separators. */
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "reuse/chunk.h"

/* xorshift64*: a fixed, platform-independent token stream */
static uint64_t rng_next(uint64_t *s) {
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545f4914f6cdd1dull;
}

static void random_tokens(rp_token *t, int32_t n, uint64_t seed) {
    uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
    for (int32_t i = 0; i < n; i++) t[i] = (rp_token)(rng_next(&s) % 50000);
}

/* Splits into a malloc'd array (via the RP_ERR_FULL protocol). */
static rp_chunk_span *split_alloc(const rp_token *t, int32_t n, const int32_t *b, int32_t nb, rp_chunk_params p,
                                  uint64_t salt, int32_t *n_out) {
    int32_t need = 0;
    rp_status st = rp_chunk_split(t, n, b, nb, p, salt, NULL, 0, &need);
    if (n == 0) {
        assert_int_equal(st, RP_OK);
        assert_int_equal(need, 0);
    } else {
        assert_int_equal(st, RP_ERR_FULL);
    }
    rp_chunk_span *s = malloc(sizeof *s * (size_t)(need + 1));
    assert_non_null(s);
    int32_t got = -1;
    assert_int_equal(rp_chunk_split(t, n, b, nb, p, salt, s, need, &got), RP_OK);
    assert_int_equal(got, need);
    *n_out = got;
    return s;
}

/* Spans tile [0, n) in order, respect max_len, and are at least min_len long
 * unless they end at a caller boundary or at n. Hashes match rp_chunk_hash. */
static void check_tiling(const rp_token *t, int32_t n, const int32_t *b, int32_t nb, rp_chunk_params p, uint64_t salt,
                         const rp_chunk_span *s, int32_t ns) {
    int32_t off = 0, bi = 0;
    for (int32_t i = 0; i < ns; i++) {
        assert_int_equal(s[i].begin, off);
        assert_true(s[i].len > 0);
        assert_true(s[i].len <= p.max_len);
        const int32_t end = off + s[i].len;
        /* never crosses a bound; starts at one iff at_boundary */
        while (bi < nb && b[bi] < off) bi++;
        const bool starts_at_bound = off == 0 || (bi < nb && b[bi] == off);
        assert_int_equal(s[i].at_boundary, starts_at_bound);
        int32_t next_b = n;
        for (int32_t k = 0; k < nb; k++)
            if (b[k] > off) {
                next_b = b[k];
                break;
            }
        assert_true(end <= next_b);
        if (s[i].len < p.min_len) assert_int_equal(end, next_b);
        assert_true(s[i].hash == rp_chunk_hash(t + off, s[i].len, salt));
        off = end;
    }
    assert_int_equal(off, n);
}

static void test_default_params(void **state) {
    (void)state;
    rp_chunk_params p = rp_chunk_default_params();
    assert_int_equal(p.min_len, 64);
    assert_int_equal(p.avg_len, 256);
    assert_int_equal(p.max_len, 1024);
}

static void test_determinism(void **state) {
    (void)state;
    const int32_t n = 20000;
    rp_token *t = malloc(sizeof *t * n);
    random_tokens(t, n, 1);
    rp_chunk_params p = rp_chunk_default_params();
    int32_t n1, n2;
    rp_chunk_span *a = split_alloc(t, n, NULL, 0, p, 7, &n1);
    rp_chunk_span *b = split_alloc(t, n, NULL, 0, p, 7, &n2);
    assert_int_equal(n1, n2);
    assert_true(n1 > 1);
    for (int32_t i = 0; i < n1; i++) {
        assert_int_equal(a[i].begin, b[i].begin);
        assert_int_equal(a[i].len, b[i].len);
        assert_true(a[i].hash == b[i].hash);
        assert_int_equal(a[i].at_boundary, b[i].at_boundary);
    }
    check_tiling(t, n, NULL, 0, p, 7, a, n1);
    free(a);
    free(b);
    free(t);
}

static void test_caller_boundaries(void **state) {
    (void)state;
    const int32_t n = 8000;
    rp_token *t = malloc(sizeof *t * n);
    random_tokens(t, n, 2);
    rp_chunk_params p = rp_chunk_default_params();
    /* a mix of tiny and long segments, including bounds 1 apart */
    const int32_t b[] = {1, 2, 3, 40, 100, 101, 700, 2000, 2063, 2064, 5000, 7999};
    const int32_t nb = (int32_t)(sizeof b / sizeof b[0]);
    int32_t ns;
    rp_chunk_span *s = split_alloc(t, n, b, nb, p, 3, &ns);
    check_tiling(t, n, b, nb, p, 3, s, ns);
    /* every bound begins a span */
    for (int32_t k = 0; k < nb; k++) {
        bool found = false;
        for (int32_t i = 0; i < ns; i++) found |= s[i].begin == b[k];
        assert_true(found);
    }
    /* the segment [5000, 7999) is chunked as if it were a whole prompt of its own */
    int32_t ns2;
    rp_chunk_span *s2 = split_alloc(t + 5000, 2999, NULL, 0, p, 3, &ns2);
    int32_t first = -1;
    for (int32_t i = 0; i < ns; i++)
        if (s[i].begin == 5000) first = i;
    assert_true(first >= 0);
    for (int32_t i = 0; i < ns2; i++) {
        assert_int_equal(s[first + i].begin, s2[i].begin + 5000);
        assert_int_equal(s[first + i].len, s2[i].len);
        assert_true(s[first + i].hash == s2[i].hash);
    }
    assert_int_equal(s[first + ns2].begin, 7999);
    free(s2);
    free(s);
    free(t);
}

static void test_min_max(void **state) {
    (void)state;
    const int32_t n = 30000;
    rp_token *t = malloc(sizeof *t * n);
    random_tokens(t, n, 3);
    const rp_chunk_params ps[] = {{16, 32, 48}, {8, 8, 8}, {1, 2, 3}, {64, 256, 1024}, {100, 900, 1000}, {5, 5, 50}};
    for (size_t k = 0; k < sizeof ps / sizeof ps[0]; k++) {
        int32_t ns;
        rp_chunk_span *s = split_alloc(t, n, NULL, 0, ps[k], 1, &ns);
        check_tiling(t, n, NULL, 0, ps[k], 1, s, ns);
        if (ps[k].min_len == ps[k].max_len)
            for (int32_t i = 0; i + 1 < ns; i++) assert_int_equal(s[i].len, ps[k].min_len);
        free(s);
    }
    /* a single repeated token: the gear hash reaches a fixed point, so cuts
     * are periodic (every min_len or every max_len), still within bounds */
    for (int32_t i = 0; i < n; i++) t[i] = 42;
    rp_chunk_params p = rp_chunk_default_params();
    int32_t ns;
    rp_chunk_span *s = split_alloc(t, n, NULL, 0, p, 1, &ns);
    check_tiling(t, n, NULL, 0, p, 1, s, ns);
    free(s);
    free(t);
}

/* The run's spans inside each embedding (run-relative offsets) compared with
 * the run chunked on its own; returns the smaller of the two match fractions
 * (embedding spans found in the reference, reference spans found in the
 * embedding), over all prefix lengths. */
static double content_defined_fraction(rp_chunk_params p, int32_t run_len, const int32_t *plens, int n_plens,
                                       uint64_t seed) {
    rp_token *run = malloc(sizeof *run * (size_t)run_len);
    random_tokens(run, run_len, seed);
    int32_t nref;
    rp_chunk_span *ref = split_alloc(run, run_len, NULL, 0, p, 5, &nref);
    int total = 0, same = 0, ref_total = 0, ref_same = 0;
    for (int k = 0; k < n_plens; k++) {
        const int32_t pl = plens[k], n = pl + run_len;
        rp_token *t = malloc(sizeof *t * (size_t)n);
        random_tokens(t, pl, seed * 1000 + (uint64_t)k + 17);
        memcpy(t + pl, run, sizeof *t * (size_t)run_len);
        int32_t ns;
        rp_chunk_span *s = split_alloc(t, n, NULL, 0, p, 5, &ns);
        check_tiling(t, n, NULL, 0, p, 5, s, ns);
        /* spans after the first cut inside the run: the span that starts at
         * that cut is excluded, since its start depends on the prefix (the
         * run's own first span starts at 0, which is no cut in the embedding) */
        int32_t first_cut = -1;
        for (int32_t i = 0; i < ns; i++) {
            if (s[i].begin < pl) continue;
            if (first_cut < 0) {
                first_cut = s[i].begin;
                continue;
            }
            total++;
            for (int32_t j = 0; j < nref; j++)
                if (ref[j].begin == s[i].begin - pl && ref[j].len == s[i].len && ref[j].hash == s[i].hash) {
                    same++;
                    break;
                }
        }
        /* and the converse: the run's own chunks that lie after that cut are
         * reproduced in the embedding */
        for (int32_t j = 0; j < nref && first_cut >= 0; j++) {
            if (ref[j].begin + pl <= first_cut) continue;
            ref_total++;
            for (int32_t i = 0; i < ns; i++)
                if (s[i].begin == ref[j].begin + pl && s[i].len == ref[j].len && s[i].hash == ref[j].hash) {
                    ref_same++;
                    break;
                }
        }
        free(s);
        free(t);
    }
    free(ref);
    free(run);
    const double a = total ? (double)same / total : 0.0, b = ref_total ? (double)ref_same / ref_total : 0.0;
    return a < b ? a : b;
}

static void test_content_defined(void **state) {
    (void)state;
    const int32_t plens[] = {1, 2, 7, 31, 64, 65, 100, 255, 333, 700, 1000, 1023, 2500, 4096};
    const int np = (int)(sizeof plens / sizeof plens[0]);
    const rp_chunk_params ps[] = {{64, 256, 1024}, {16, 64, 256}, {32, 128, 512}};
    for (size_t k = 0; k < sizeof ps / sizeof ps[0]; k++) {
        for (uint64_t seed = 1; seed <= 4; seed++) {
            double f = content_defined_fraction(ps[k], 2000, plens, np, seed);
            if (getenv("RP_TEST_VERBOSE") || f < 0.9) print_message("params %zu seed %llu: identical fraction %.3f\n", k, (unsigned long long)seed, f);
            assert_true(f >= 0.9);
        }
    }
}

static void test_average_length(void **state) {
    (void)state;
    const int32_t n = 400000;
    rp_token *t = malloc(sizeof *t * n);
    random_tokens(t, n, 9);
    const rp_chunk_params ps[] = {{64, 256, 1024}, {32, 128, 512}, {16, 64, 256}, {100, 1000, 4000}};
    for (size_t k = 0; k < sizeof ps / sizeof ps[0]; k++) {
        int32_t ns;
        rp_chunk_span *s = split_alloc(t, n, NULL, 0, ps[k], 2, &ns);
        const double mean = (double)n / ns;
        assert_true(mean >= ps[k].avg_len / 1.5);
        assert_true(mean <= ps[k].avg_len * 1.5);
        free(s);
    }
    free(t);
}

static void test_hashes(void **state) {
    (void)state;
    const int32_t n = 3000;
    rp_token *t = malloc(sizeof *t * n);
    random_tokens(t, n, 4);
    rp_chunk_params p = rp_chunk_default_params();
    int32_t n1, n2;
    rp_chunk_span *a = split_alloc(t, n, NULL, 0, p, 1, &n1);
    rp_chunk_span *b = split_alloc(t, n, NULL, 0, p, 2, &n2);
    /* the salt changes hashes, not cut positions */
    assert_int_equal(n1, n2);
    for (int32_t i = 0; i < n1; i++) {
        assert_int_equal(a[i].begin, b[i].begin);
        assert_int_equal(a[i].len, b[i].len);
        assert_true(a[i].hash != b[i].hash);
    }
    assert_true(rp_chunk_hash(t, 100, 1) != rp_chunk_hash(t, 100, 2));
    assert_true(rp_chunk_hash(t, 100, 1) != rp_chunk_hash(t, 99, 1));
    assert_true(rp_chunk_hash(t, 100, 1) != rp_chunk_hash(t + 1, 100, 1));
    assert_true(rp_chunk_hash(t, 100, 1) == rp_chunk_hash(t, 100, 1));
    /* token ids are hashed as little-endian int32 bytes: fixed reference value
     * agrees with hashing the bytes explicitly */
    const rp_token small[3] = {1, 256, -1};
    const uint8_t bytes[12] = {1, 0, 0, 0, 0, 1, 0, 0, 0xff, 0xff, 0xff, 0xff};
    rp_token from_bytes[3];
    for (int i = 0; i < 3; i++)
        from_bytes[i] = (rp_token)((uint32_t)bytes[4 * i] | (uint32_t)bytes[4 * i + 1] << 8 |
                                   (uint32_t)bytes[4 * i + 2] << 16 | (uint32_t)bytes[4 * i + 3] << 24);
    assert_true(rp_chunk_hash(small, 3, 5) == rp_chunk_hash(from_bytes, 3, 5));
    /* chains: depend on both inputs and on order; chain(0, h) != h */
    const uint64_t h1 = rp_chunk_hash(t, 10, 1), h2 = rp_chunk_hash(t + 10, 10, 1);
    assert_true(rp_chunk_chain(0, h1) != h1);
    assert_true(rp_chunk_chain(0, h1) != rp_chunk_chain(0, h2));
    assert_true(rp_chunk_chain(rp_chunk_chain(0, h1), h2) != rp_chunk_chain(rp_chunk_chain(0, h2), h1));
    assert_true(rp_chunk_chain(5, h1) == rp_chunk_chain(5, h1));
    free(a);
    free(b);
    free(t);
}

static void test_invalid_args(void **state) {
    (void)state;
    rp_token t[100];
    random_tokens(t, 100, 5);
    rp_chunk_span s[100];
    int32_t ns = 0;
    rp_chunk_params p = rp_chunk_default_params();
    const rp_chunk_params bad[] = {{0, 10, 20}, {-1, 10, 20}, {10, 9, 20}, {10, 20, 19}, {10, 10, 9}};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++)
        assert_int_equal(rp_chunk_split(t, 100, NULL, 0, bad[k], 0, s, 100, &ns), RP_ERR_INVALID_ARG);
    const int32_t b_zero[] = {0}, b_n[] = {100}, b_big[] = {101}, b_eq[] = {5, 5}, b_dec[] = {10, 5}, b_neg[] = {-3};
    assert_int_equal(rp_chunk_split(t, 100, b_zero, 1, p, 0, s, 100, &ns), RP_ERR_INVALID_ARG);
    assert_int_equal(rp_chunk_split(t, 100, b_n, 1, p, 0, s, 100, &ns), RP_ERR_INVALID_ARG);
    assert_int_equal(rp_chunk_split(t, 100, b_big, 1, p, 0, s, 100, &ns), RP_ERR_INVALID_ARG);
    assert_int_equal(rp_chunk_split(t, 100, b_eq, 2, p, 0, s, 100, &ns), RP_ERR_INVALID_ARG);
    assert_int_equal(rp_chunk_split(t, 100, b_dec, 2, p, 0, s, 100, &ns), RP_ERR_INVALID_ARG);
    assert_int_equal(rp_chunk_split(t, 100, b_neg, 1, p, 0, s, 100, &ns), RP_ERR_INVALID_ARG);
    assert_int_equal(rp_chunk_split(t, 100, NULL, 1, p, 0, s, 100, &ns), RP_ERR_INVALID_ARG);
    assert_int_equal(rp_chunk_split(t, -1, NULL, 0, p, 0, s, 100, &ns), RP_ERR_INVALID_ARG);
    assert_int_equal(rp_chunk_split(NULL, 100, NULL, 0, p, 0, s, 100, &ns), RP_ERR_INVALID_ARG);
    assert_int_equal(rp_chunk_split(t, 100, NULL, 0, p, 0, NULL, 100, &ns), RP_ERR_INVALID_ARG);
    assert_int_equal(rp_chunk_split(t, 100, NULL, 0, p, 0, s, 100, NULL), RP_ERR_INVALID_ARG);
    /* n == 0: no spans (bounds must then be empty: none fits in (0, 0)) */
    ns = 7;
    assert_int_equal(rp_chunk_split(t, 0, NULL, 0, p, 0, s, 100, &ns), RP_OK);
    assert_int_equal(ns, 0);
    assert_int_equal(rp_chunk_split(NULL, 0, NULL, 0, p, 0, NULL, 0, &ns), RP_OK);
    assert_int_equal(ns, 0);
    assert_int_equal(rp_chunk_split(t, 0, b_zero, 1, p, 0, s, 100, &ns), RP_ERR_INVALID_ARG);
}

static void test_full_contract(void **state) {
    (void)state;
    const int32_t n = 5000;
    rp_token *t = malloc(sizeof *t * n);
    random_tokens(t, n, 6);
    const int32_t b[] = {1000, 1001, 3000};
    rp_chunk_params p = {16, 64, 256};
    int32_t need = -1;
    assert_int_equal(rp_chunk_split(t, n, b, 3, p, 0, NULL, 0, &need), RP_ERR_FULL);
    assert_true(need > 4);
    rp_chunk_span *all = malloc(sizeof *all * (size_t)need);
    int32_t got = -1;
    assert_int_equal(rp_chunk_split(t, n, b, 3, p, 0, all, need, &got), RP_OK);
    assert_int_equal(got, need);
    /* a short buffer: RP_ERR_FULL, *n_out = needed, the first cap spans written
     * and nothing beyond cap touched */
    rp_chunk_span part[5];
    memset(part, 0xab, sizeof part);
    got = -1;
    assert_int_equal(rp_chunk_split(t, n, b, 3, p, 0, part, 4, &got), RP_ERR_FULL);
    assert_int_equal(got, need);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(part[i].begin, all[i].begin);
        assert_int_equal(part[i].len, all[i].len);
        assert_true(part[i].hash == all[i].hash);
    }
    const uint8_t *guard = (const uint8_t *)&part[4];
    for (size_t i = 0; i < sizeof part[4]; i++) assert_int_equal(guard[i], 0xab);
    /* exactly enough is OK; one less is FULL */
    assert_int_equal(rp_chunk_split(t, n, b, 3, p, 0, all, need - 1, &got), RP_ERR_FULL);
    assert_int_equal(got, need);
    free(all);
    free(t);
}

static void test_find_separators(void **state) {
    (void)state;
    int32_t b[16];
    const rp_token sep[] = {13, 10};
    {   /* two occurrences; the second ends at n and gives no bound */
        const rp_token t[] = {1, 2, 13, 10, 3, 4, 5, 13, 10};
        assert_int_equal(rp_chunk_find_separators(t, 9, sep, 2, b, 16), 1);
        assert_int_equal(b[0], 4);
    }
    {   /* at the start; back to back; a partial match (13 13 10) */
        const rp_token t[] = {13, 10, 13, 10, 7, 13, 13, 10, 8};
        assert_int_equal(rp_chunk_find_separators(t, 9, sep, 2, b, 16), 3);
        assert_int_equal(b[0], 2);
        assert_int_equal(b[1], 4);
        assert_int_equal(b[2], 8);
    }
    {   /* non-overlapping, left to right */
        const rp_token s2[] = {5, 5};
        const rp_token t[] = {5, 5, 5, 5, 5, 1};
        assert_int_equal(rp_chunk_find_separators(t, 6, s2, 2, b, 16), 2);
        assert_int_equal(b[0], 2);
        assert_int_equal(b[1], 4);
        /* cap limits the count */
        assert_int_equal(rp_chunk_find_separators(t, 6, s2, 2, b, 1), 1);
        assert_int_equal(b[0], 2);
    }
    {   /* single-token separator, none present, degenerate inputs */
        const rp_token s1[] = {9};
        const rp_token t[] = {1, 9, 2, 9, 9};
        assert_int_equal(rp_chunk_find_separators(t, 5, s1, 1, b, 16), 2);   /* the 9 at the end gives none */
        assert_int_equal(b[0], 2);
        assert_int_equal(b[1], 4);
        const rp_token none[] = {77};
        assert_int_equal(rp_chunk_find_separators(t, 5, none, 1, b, 16), 0);
        assert_int_equal(rp_chunk_find_separators(t, 5, s1, 0, b, 16), 0);
        assert_int_equal(rp_chunk_find_separators(t, 0, s1, 1, b, 16), 0);
        assert_int_equal(rp_chunk_find_separators(t, 5, s1, 1, b, 0), 0);
        const rp_token longsep[] = {1, 9, 2, 9, 9, 9};
        assert_int_equal(rp_chunk_find_separators(t, 5, longsep, 6, b, 16), 0);
    }
    {   /* output is valid rp_chunk_split bounds */
        rp_token t[600];
        random_tokens(t, 600, 8);
        for (int i = 0; i < 600; i++)
            if (t[i] == 13) t[i] = 14;
        const int32_t at[] = {0, 50, 52, 300, 598};
        for (int k = 0; k < 5; k++) {
            t[at[k]] = 13;
            t[at[k] + 1] = 10;
        }
        int32_t nb = rp_chunk_find_separators(t, 600, sep, 2, b, 16);
        assert_int_equal(nb, 4);   /* the one ending at 600 gives no bound */
        rp_chunk_span s[64];
        int32_t ns;
        assert_int_equal(rp_chunk_split(t, 600, b, nb, rp_chunk_default_params(), 0, s, 64, &ns), RP_OK);
        check_tiling(t, 600, b, nb, rp_chunk_default_params(), 0, s, ns);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_default_params),  cmocka_unit_test(test_determinism),
        cmocka_unit_test(test_caller_boundaries), cmocka_unit_test(test_min_max),
        cmocka_unit_test(test_content_defined), cmocka_unit_test(test_average_length),
        cmocka_unit_test(test_hashes),          cmocka_unit_test(test_invalid_args),
        cmocka_unit_test(test_full_contract),   cmocka_unit_test(test_find_separators),
    };
    return rp_test_main(tests, NULL, NULL);
}
