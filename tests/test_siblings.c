/* test_siblings.c — the sorted sibling index against a brute-force scan: longest common prefix, ties, add/remove, many parents. */
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "reuse/siblings.h"

#define MAXT 12

typedef struct node {
    rp_chunk ch;
    rp_token t[MAXT];
    bool in;
} node;

/* Tokens from a tiny alphabet so that long shared prefixes and exact duplicates are common. */
static void fill(node *x, rp_test_rng *r, uint64_t parent, uint64_t *clock) {
    memset(x, 0, sizeof *x);
    x->ch.tokens = x->t;
    x->ch.n_tokens = 1 + (int32_t)(rp_test_rng_next(r) % MAXT);
    for (int32_t i = 0; i < x->ch.n_tokens; i++) x->t[i] = (rp_token)(rp_test_rng_next(r) % 3);
    x->ch.parent_id = parent;
    x->ch.last_used = ++*clock;
}

static int32_t lcp(const rp_chunk *c, const rp_token *q, int32_t n) {
    int32_t k = 0;
    while (k < c->n_tokens && k < n && c->tokens[k] == q[k]) k++;
    return k;
}

/* The old linear scan: longest common prefix, then the most recent. */
static const rp_chunk *brute(const node *v, int n, uint64_t parent, const rp_token *q, int32_t nq, int32_t *k_out) {
    const rp_chunk *best = NULL;
    int32_t bk = 0;
    for (int i = 0; i < n; i++) {
        if (!v[i].in || v[i].ch.parent_id != parent) continue;
        const int32_t k = lcp(&v[i].ch, q, nq);
        if (k > bk || (k == bk && k > 0 && v[i].ch.last_used > best->last_used)) {
            best = &v[i].ch;
            bk = k;
        }
    }
    *k_out = bk;
    return best;
}

static void test_against_brute_force(void **state) {
    (void)state;
    enum { N = 600, PARENTS = 5 };
    node *v = calloc(N, sizeof *v);
    assert_non_null(v);
    rp_siblings *s = NULL;
    assert_int_equal(rp_siblings_create(&s), RP_OK);
    rp_test_rng r = {0x1234567};
    uint64_t clock = 0;
    int32_t counts[PARENTS] = {0};
    for (int step = 0; step < 20000; step++) {
        const int i = (int)(rp_test_rng_next(&r) % N);
        if (!v[i].in) {
            fill(&v[i], &r, rp_test_rng_next(&r) % PARENTS, &clock);
            assert_int_equal(rp_siblings_add(s, &v[i].ch), RP_OK);
            v[i].in = true;
            counts[v[i].ch.parent_id]++;
        } else if (rp_test_rng_next(&r) % 3 == 0) {
            rp_siblings_del(s, &v[i].ch);
            v[i].in = false;
            counts[v[i].ch.parent_id]--;
        }
        /* a query */
        rp_token q[MAXT];
        const int32_t nq = 1 + (int32_t)(rp_test_rng_next(&r) % MAXT);
        for (int32_t t = 0; t < nq; t++) q[t] = (rp_token)(rp_test_rng_next(&r) % 3);
        const uint64_t parent = rp_test_rng_next(&r) % PARENTS;
        int32_t kb = 0, ks = -1;
        const rp_chunk *b = brute(v, N, parent, q, nq, &kb);
        /* a scan over every tie gives the brute force's exact choice */
        const rp_chunk *got = rp_siblings_best(s, parent, q, nq, N, &ks);
        assert_int_equal(ks, kb);
        assert_ptr_equal(got, b);
        /* a bounded tie scan still finds the longest common prefix */
        got = rp_siblings_best(s, parent, q, nq, 2, &ks);
        assert_int_equal(ks, kb);
        if (kb == 0) assert_null(got);
        else assert_int_equal(lcp(got, q, nq), kb);
        if (step % 997 == 0)
            for (int p = 0; p < PARENTS; p++) assert_int_equal(rp_siblings_count(s, (uint64_t)p), counts[p]);
    }
    /* removing everything leaves nothing behind, and removing twice is harmless */
    for (int i = 0; i < N; i++)
        if (v[i].in) {
            rp_siblings_del(s, &v[i].ch);
            rp_siblings_del(s, &v[i].ch);
        }
    for (int p = 0; p < PARENTS; p++) assert_int_equal(rp_siblings_count(s, (uint64_t)p), 0);
    int32_t k = -1;
    rp_token q0 = 0;
    assert_null(rp_siblings_best(s, 0, &q0, 1, 8, &k));
    assert_int_equal(k, 0);
    rp_siblings_free(s);
    free(v);
}

/* Many parents: the open-addressing table grows and shrinks (backward-shift deletion) and keeps every group. */
static void test_many_parents(void **state) {
    (void)state;
    enum { N = 5000 };
    node *v = calloc(N, sizeof *v);
    assert_non_null(v);
    rp_siblings *s = NULL;
    assert_int_equal(rp_siblings_create(&s), RP_OK);
    for (int i = 0; i < N; i++) {
        v[i].ch.tokens = v[i].t;
        v[i].ch.n_tokens = 2;
        v[i].t[0] = 7;
        v[i].t[1] = (rp_token)i;
        v[i].ch.parent_id = (uint64_t)(i % 1700) * 0x10000;   /* clustered keys */
        assert_int_equal(rp_siblings_add(s, &v[i].ch), RP_OK);
    }
    for (int i = 0; i < N; i += 2) rp_siblings_del(s, &v[i].ch);
    for (int i = 1; i < N; i += 2) {
        int32_t k = 0;
        const rp_chunk *b = rp_siblings_best(s, v[i].ch.parent_id, v[i].t, 2, 4, &k);
        assert_int_equal(k, 2);
        assert_ptr_equal(b, &v[i].ch);
    }
    for (int i = 1; i < N; i += 2) rp_siblings_del(s, &v[i].ch);
    for (int p = 0; p < 1700; p++) assert_int_equal(rp_siblings_count(s, (uint64_t)p * 0x10000), 0);
    rp_siblings_free(s);
    free(v);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_against_brute_force),
        cmocka_unit_test(test_many_parents),
    };
    return rp_test_main(tests, NULL, NULL);
}
