/* test_plan.c — static-shape planning: DP scheduler vs paper variant, naive and brute force; calibration turning point and file round trip. */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "testutil.h"
#include "reuse/plan.h"

/* Defined in plan.c (the paper's max-packing-only recurrence); not (yet)
 * declared in plan.h. */
rp_status rp_plan_dp_paper(const rp_segment *segs, int32_t n_segs, const rp_static_cfg *cfg, rp_call *calls,
                           int32_t cap, int32_t *n_calls, double *total_ms);

int32_t rp_static_k(const rp_static_cfg *cfg);

typedef rp_status (*plan_fn)(const rp_segment *, int32_t, const rp_static_cfg *, rp_call *, int32_t, int32_t *,
                             double *);

/* ---- helpers -------------------------------------------------------------- */

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(void) { /* xorshift64*: deterministic across libcs */
    g_rng ^= g_rng >> 12;
    g_rng ^= g_rng << 25;
    g_rng ^= g_rng >> 27;
    return (uint32_t)((g_rng * 2685821657736338717ull) >> 32);
}
static int rnd_in(int lo, int hi) { return lo + (int)(rnd() % (uint32_t)(hi - lo + 1)); }
static double rnd_unit(void) { return rnd() / 4294967296.0; }

/* Builds contiguous segments from (kind, len) pairs; returns the count. */
static int32_t mk_segs(rp_segment *out, const int *kinds, const int *lens, int n) {
    int32_t pos = 0;
    for (int i = 0; i < n; i++) {
        out[i].kind = (rp_seg_kind)kinds[i];
        out[i].begin = pos;
        out[i].len = lens[i];
        pos += lens[i];
    }
    return n;
}

/* The test's own k (independent of plan.c's formula; exact for the ratios used). */
static int64_t test_k(const rp_static_cfg *c) { return (int64_t)floor((double)c->r * c->L_S + 1e-6); }

static bool rs_feasible(const rp_static_cfg *c, int64_t n_new, int64_t n_reuse) {
    int64_t k = test_k(c), L = c->L_S;
    return n_new + n_reuse <= L && n_new * L + n_reuse * k <= k * L;
}

static int32_t seg_total(const rp_segment *s, int32_t n, int32_t *p_end) {
    int32_t N = 0, P = 0;
    bool pre = true;
    for (int32_t i = 0; i < n; i++) {
        N += s[i].len;
        if (s[i].kind != RP_SEG_PREFIX) pre = false;
        if (pre) P = N;
    }
    if (p_end) *p_end = P;
    return N;
}

/* Per-token kinds (malloc'd). */
static uint8_t *token_kinds(const rp_segment *s, int32_t n, int32_t N) {
    uint8_t *k = malloc((size_t)N + 1);
    assert_non_null(k);
    for (int32_t i = 0; i < n; i++)
        for (int32_t t = 0; t < s[i].len; t++) k[s[i].begin + t] = (uint8_t)s[i].kind;
    return k;
}

/* Every non-prefix token covered once, in order; per-call counts and shape
 * constraints hold; total equals the count-weighted latency. */
static void check_plan(const rp_segment *s, int32_t n, const rp_static_cfg *c, const rp_call *calls, int32_t nc,
                       double total) {
    int32_t P = 0, N = seg_total(s, n, &P);
    uint8_t *kind = token_kinds(s, n, N);
    int32_t at = P, np = 0, ns = 0;
    for (int32_t i = 0; i < nc; i++) {
        const rp_call *o = &calls[i];
        assert_int_equal(o->begin, at);
        assert_true(o->end > o->begin);
        int32_t nn = 0, nr = 0;
        for (int32_t t = o->begin; t < o->end; t++) {
            assert_int_not_equal(kind[t], RP_SEG_PREFIX);
            if (kind[t] == RP_SEG_NEW) nn++;
            else nr++;
        }
        assert_int_equal(o->n_new, nn);
        assert_int_equal(o->n_reuse, nr);
        if (o->kind == RP_CALL_PREFILL) {
            assert_true(o->end - o->begin <= c->L_P);
            np++;
        } else {
            assert_int_equal(o->kind, RP_CALL_RECOMPUTE);
            assert_true(rs_feasible(c, nn, nr));
            ns++;
        }
        at = o->end;
    }
    assert_int_equal(at, N);
    double want = np * c->lat_P_ms + ns * c->lat_S_ms;
    assert_true(fabs(total - want) <= 1e-9 * (1.0 + want));
    free(kind);
}

static void count_kinds(const rp_call *c, int32_t n, int *np, int *ns) {
    *np = *ns = 0;
    for (int32_t i = 0; i < n; i++) (c[i].kind == RP_CALL_PREFILL ? (*np)++ : (*ns)++);
}

/* Runs a planner with an exactly sized buffer (size query with cap 0 first). */
static rp_call *run_plan(plan_fn f, const rp_segment *s, int32_t n, const rp_static_cfg *c, int32_t *nc,
                         double *total) {
    int32_t need = -1;
    double t0 = -1;
    rp_status st = f(s, n, c, NULL, 0, &need, &t0);
    assert_true(st == RP_OK || st == RP_ERR_FULL);
    if (st == RP_OK) assert_int_equal(need, 0);
    rp_call *calls = calloc((size_t)need + 1, sizeof *calls);
    assert_non_null(calls);
    assert_int_equal(f(s, n, c, calls, need, nc, total), RP_OK);
    assert_int_equal(*nc, need);
    assert_true(*total == t0);
    check_plan(s, n, c, calls, *nc, *total);
    return calls;
}

/* ---- brute force: enumerate every call sequence over [P, N) ---------------- */

typedef struct bf_ctx {
    const rp_static_cfg *c;
    const uint8_t *kind;
    int32_t N;
    double best;
    int best_calls;
    long nodes;
} bf_ctx;

static void bf_rec(bf_ctx *b, int32_t at, int np, int ns) {
    b->nodes++;
    double cost = np * b->c->lat_P_ms + ns * b->c->lat_S_ms;
    if (at == b->N) {
        if (cost < b->best || (cost == b->best && np + ns < b->best_calls)) {
            b->best = cost;
            b->best_calls = np + ns;
        }
        return;
    }
    if (cost > b->best) return; /* prune: latencies are > 0 in these tests */
    int32_t maxl = b->c->L_P > b->c->L_S ? b->c->L_P : b->c->L_S;
    int nn = 0, nr = 0;
    for (int32_t l = 1; l <= maxl && at + l <= b->N; l++) {
        if (b->kind[at + l - 1] == RP_SEG_NEW) nn++;
        else nr++;
        if (l <= b->c->L_P) bf_rec(b, at + l, np + 1, ns);
        if (rs_feasible(b->c, nn, nr)) bf_rec(b, at + l, np, ns + 1);
    }
}

/* ---- tests ---------------------------------------------------------------- */

static void test_default_cfg(void **state) {
    (void)state;
    rp_static_cfg c = rp_static_default_cfg();
    assert_int_equal(c.L_P, 128);
    assert_int_equal(c.L_S, 512);
    assert_true(c.r == 0.25f);
    assert_true(c.lat_P_ms > 0 && c.lat_S_ms > 0);
    /* recompute is cheaper per reusable token than prefill (paper: 2-3x) */
    assert_true(c.lat_S_ms / c.L_S < c.lat_P_ms / c.L_P);
    assert_int_equal(rp_static_k(&c), 128);
    rp_static_cfg d = {.L_P = 4, .L_S = 10, .r = 0.7f};
    assert_int_equal(rp_static_k(&d), 7); /* 0.7f * 10 = 6.99999988 */
    d.r = 0.3f;
    assert_int_equal(rp_static_k(&d), 3);
    d.r = 0.05f;
    assert_int_equal(rp_static_k(&d), 0);
    assert_int_equal(rp_static_k(NULL), 0);
}

/* Paper Fig. 8: recompute graph of 4 tokens, prefill graph of 2, r = 50% (k =
 * 2: a recompute call holds <= 4 reusable, or 1 new + <= 2 reusable, or 2 new).
 * New tokens 12, 15 and 20 go into adjacent recompute calls and prefill calls
 * drop from 4 to 2 (8 -> 6 calls, -25% with equal call latencies). */
static void test_toy_figure8(void **state) {
    (void)state;
    rp_static_cfg c = {.L_P = 2, .L_S = 4, .r = 0.5f, .lat_P_ms = 1.0, .lat_S_ms = 1.0};
    const int kinds[] = {RP_SEG_PREFIX, RP_SEG_REUSE, RP_SEG_NEW, RP_SEG_REUSE, RP_SEG_NEW,
                         RP_SEG_REUSE,  RP_SEG_NEW,   RP_SEG_REUSE};
    const int lens[] = {10, 2, 4, 1, 2, 1, 1, 3}; /* P[0,10) R[10,12) N[12,16) R16 N[17,19) R19 N20 R[21,24) */
    rp_segment s[8];
    int32_t n = mk_segs(s, kinds, lens, 8);
    int32_t nn, nd, npp;
    double tn, td, tp;
    rp_call *cn = run_plan(rp_plan_naive, s, n, &c, &nn, &tn);
    rp_call *cd = run_plan(rp_plan_dp, s, n, &c, &nd, &td);
    rp_call *cp = run_plan(rp_plan_dp_paper, s, n, &c, &npp, &tp);
    int a, b;
    count_kinds(cn, nn, &a, &b);
    assert_int_equal(a, 4);
    assert_int_equal(b, 4);
    count_kinds(cd, nd, &a, &b);
    assert_int_equal(a, 2);
    assert_int_equal(b, 4);
    assert_true(td == 6.0 && tn == 8.0 && tp == td);
    /* 12, 15, 20 are the new tokens merged into recompute calls */
    int merged = 0;
    for (int32_t i = 0; i < nd; i++) {
        if (cd[i].kind != RP_CALL_RECOMPUTE) continue;
        merged += cd[i].n_new;
        for (int tok = 12; tok <= 20; tok++) {
            bool in = tok >= cd[i].begin && tok < cd[i].end;
            bool is_new = (tok >= 12 && tok < 16) || tok == 17 || tok == 18 || tok == 20;
            if (in && is_new) assert_true(tok == 12 || tok == 15 || tok == 20);
        }
    }
    assert_int_equal(merged, 3);
    free(cn);
    free(cd);
    free(cp);
}

static void test_all_prefix_and_empty(void **state) {
    (void)state;
    rp_static_cfg c = rp_static_default_cfg();
    const int kinds[] = {RP_SEG_PREFIX, RP_SEG_PREFIX};
    const int lens[] = {700, 33};
    rp_segment s[2];
    mk_segs(s, kinds, lens, 2);
    plan_fn fs[] = {rp_plan_dp, rp_plan_dp_paper, rp_plan_naive};
    for (int f = 0; f < 3; f++) {
        int32_t nc = -1;
        double t = -1;
        rp_call one;
        assert_int_equal(fs[f](s, 2, &c, &one, 1, &nc, &t), RP_OK);
        assert_int_equal(nc, 0);
        assert_true(t == 0.0);
        assert_int_equal(fs[f](NULL, 0, &c, NULL, 0, &nc, &t), RP_OK); /* empty prompt */
        assert_int_equal(nc, 0);
        assert_true(t == 0.0);
    }
}

/* All-new prompts: prefill calls when prefill is cheaper per token, recompute
 * calls (k new tokens each) when those are. N is a multiple of L_P and k. */
static void test_all_new_latency_choice(void **state) {
    (void)state;
    struct { int32_t L_P, L_S; float r; double lp, ls; } cases[] = {
        {128, 512, 0.25f, 1.0, 1.6}, {128, 512, 0.25f, 1.6, 1.0}, {64, 512, 0.25f, 1.0, 1.5},
        {64, 512, 0.25f, 1.0, 2.5},  {128, 256, 1.0f, 1.0, 1.9},  {128, 256, 1.0f, 1.0, 2.1},
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        rp_static_cfg c = {cases[ci].L_P, cases[ci].L_S, cases[ci].r, cases[ci].lp, cases[ci].ls};
        int32_t k = (int32_t)test_k(&c);
        int32_t N = 2048; /* multiple of every L_P and k above */
        rp_segment s = {RP_SEG_NEW, 0, N};
        int32_t nc;
        double t;
        rp_call *calls = run_plan(rp_plan_dp, &s, 1, &c, &nc, &t);
        int np, ns;
        count_kinds(calls, nc, &np, &ns);
        bool prefill_cheaper = c.lat_P_ms / c.L_P < c.lat_S_ms / k;
        if (prefill_cheaper) {
            assert_int_equal(np, (N + c.L_P - 1) / c.L_P);
            assert_int_equal(ns, 0);
        } else {
            assert_int_equal(ns, N / k);
            assert_int_equal(np, 0);
            for (int32_t i = 0; i < nc; i++) assert_int_equal(calls[i].n_new, k);
        }
        /* naive is always the prefill plan for new tokens */
        int32_t nn;
        double tn;
        rp_call *cn = run_plan(rp_plan_naive, &s, 1, &c, &nn, &tn);
        assert_int_equal(nn, N / c.L_P);
        assert_true(t <= tn + 1e-12);
        free(cn);
        free(calls);
    }
}

static void random_cfg(rp_static_cfg *c) {
    static const int32_t lps[] = {32, 64, 128, 256};
    static const int32_t lss[] = {128, 256, 512, 1024};
    static const float rs[] = {0.125f, 0.25f, 0.3f, 0.5f, 0.7f, 1.0f};
    c->L_P = lps[rnd() % 4];
    c->L_S = lss[rnd() % 4];
    c->r = rs[rnd() % 6];
    c->lat_P_ms = 0.05 + 5.0 * rnd_unit();
    c->lat_S_ms = 0.05 + 5.0 * rnd_unit();
}

static int32_t random_segs(rp_segment *s, int max_segs, int max_len) {
    int n = rnd_in(1, max_segs);
    int32_t pos = 0, out = 0;
    bool prefix_ok = rnd() % 3 == 0;
    for (int i = 0; i < n; i++) {
        int kind = prefix_ok && rnd() % 2 ? RP_SEG_PREFIX : rnd_in(RP_SEG_REUSE, RP_SEG_NEW);
        if (kind != RP_SEG_PREFIX) prefix_ok = false;
        int len = rnd_in(1, max_len);
        s[out++] = (rp_segment){(rp_seg_kind)kind, pos, len};
        pos += len;
    }
    return out;
}

/* 2000 random prompts: DP <= naive; DP <= paper variant; all plans valid. */
static void test_random_dp_vs_naive(void **state) {
    (void)state;
    g_rng = 12345;
    int better = 0, dp_beats_paper = 0, fewer_calls_than_paper = 0;
    double sum_ratio = 0;
    for (int it = 0; it < 2000; it++) {
        rp_static_cfg c;
        random_cfg(&c);
        rp_segment s[16];
        int32_t n = random_segs(s, 12, 700);
        int32_t nd, np, nn;
        double td, tp, tn;
        rp_call *cd = run_plan(rp_plan_dp, s, n, &c, &nd, &td);
        rp_call *cp = run_plan(rp_plan_dp_paper, s, n, &c, &np, &tp);
        rp_call *cn = run_plan(rp_plan_naive, s, n, &c, &nn, &tn);
        assert_true(td <= tn * (1 + 1e-12) + 1e-12);
        assert_true(td <= tp * (1 + 1e-12) + 1e-12);
        if (td < tn * (1 - 1e-9)) better++;
        if (td < tp * (1 - 1e-9)) dp_beats_paper++;
        if (fabs(td - tp) <= 1e-9 * tp && nd < np) fewer_calls_than_paper++;
        if (tn > 0) sum_ratio += td / tn;
        free(cd);
        free(cp);
        free(cn);
    }
    print_message("random 2000: DP strictly better than naive in %d, mean DP/naive latency %.3f; "
                  "DP strictly better than paper variant in %d, same latency with fewer calls in %d\n",
                  better, sum_ratio / 2000, dp_beats_paper, fewer_calls_than_paper);
    assert_true(better > 0);
}

/* Small random cases against exhaustive enumeration of every call sequence:
 * exact (latency, calls) with integer latencies, latency within 1e-9 with
 * real ones. */
static void test_bruteforce_small(void **state) {
    (void)state;
    g_rng = 777;
    static const float rs[] = {0.25f, 0.34f, 0.5f, 0.67f, 0.75f, 1.0f};
    long nodes = 0;
    int cases = 0;
    for (int it = 0; it < 600; it++) {
        rp_static_cfg c;
        c.L_P = rnd_in(1, 4);
        c.L_S = rnd_in(1, 6);
        c.r = rs[rnd() % 6];
        if (test_k(&c) < 1) continue;
        bool integer = it % 2 == 0;
        c.lat_P_ms = integer ? rnd_in(1, 6) : 0.1 + 3 * rnd_unit();
        c.lat_S_ms = integer ? rnd_in(1, 6) : 0.1 + 3 * rnd_unit();
        rp_segment s[24];
        int32_t n = random_segs(s, 8, 5);
        int32_t P, N = seg_total(s, n, &P);
        if (N > 24) continue;
        cases++;
        uint8_t *kind = token_kinds(s, n, N);
        int32_t nn;
        double tn;
        rp_call *cn = run_plan(rp_plan_naive, s, n, &c, &nn, &tn);
        bf_ctx b = {.c = &c, .kind = kind, .N = N, .best = tn, .best_calls = nn, .nodes = 0};
        bf_rec(&b, P, 0, 0);
        nodes += b.nodes;
        plan_fn fs[] = {rp_plan_dp, rp_plan_dp_paper};
        for (int f = 0; f < 2; f++) {
            int32_t nd;
            double td;
            rp_call *cd = run_plan(fs[f], s, n, &c, &nd, &td);
            if (integer) {
                assert_true(td == b.best);
                assert_int_equal(nd, b.best_calls);
            } else {
                assert_true(fabs(td - b.best) <= 1e-9 * (1 + b.best));
            }
            free(cd);
        }
        free(cn);
        free(kind);
    }
    print_message("brute force: %d cases (N <= 24), %ld search nodes, DP and DP-paper optimal in all\n", cases,
                  nodes);
    assert_true(cases > 200);
}

static void expect_invalid(const rp_segment *s, int32_t n, const rp_static_cfg *c, const char *needle) {
    plan_fn fs[] = {rp_plan_dp, rp_plan_dp_paper, rp_plan_naive};
    for (int f = 0; f < 3; f++) {
        rp_call calls[8];
        int32_t nc;
        double t;
        assert_int_equal(fs[f](s, n, c, calls, 8, &nc, &t), RP_ERR_INVALID_ARG);
        if (needle && !strstr(rp_last_error(), needle)) {
            print_message("error '%s' lacks '%s'\n", rp_last_error(), needle);
            fail();
        }
    }
}

static void test_invalid_inputs(void **state) {
    (void)state;
    rp_static_cfg c = rp_static_default_cfg();
    const int kinds[] = {RP_SEG_PREFIX, RP_SEG_REUSE, RP_SEG_NEW};
    const int lens[] = {5, 6, 7};
    rp_segment s[3];
    mk_segs(s, kinds, lens, 3);

    rp_segment b[3];
    memcpy(b, s, sizeof b);
    b[2].begin = 12; /* gap */
    expect_invalid(b, 3, &c, "segment 2");
    memcpy(b, s, sizeof b);
    b[0].begin = 1; /* not from 0 */
    expect_invalid(b, 3, &c, "segment 0");
    memcpy(b, s, sizeof b);
    b[1].len = 0;
    expect_invalid(b, 3, &c, "segment 1");
    memcpy(b, s, sizeof b);
    b[2].kind = RP_SEG_PREFIX; /* prefix after non-prefix */
    expect_invalid(b, 3, &c, "segment 2");
    memcpy(b, s, sizeof b);
    b[1].kind = (rp_seg_kind)7;
    expect_invalid(b, 3, &c, "segment 1");
    memcpy(b, s, sizeof b);
    b[1].len = -3;
    expect_invalid(b, 3, &c, "segment 1");
    expect_invalid(s, -1, &c, "n_segs");
    expect_invalid(NULL, 3, &c, "segs");
    expect_invalid(s, 3, NULL, "cfg");

    rp_static_cfg bad;
    bad = c, bad.L_P = 0;
    expect_invalid(s, 3, &bad, "L_P");
    bad = c, bad.L_S = -4;
    expect_invalid(s, 3, &bad, "L_S");
    bad = c, bad.r = 0.0f;
    expect_invalid(s, 3, &bad, "r =");
    bad = c, bad.r = 1.5f;
    expect_invalid(s, 3, &bad, "r =");
    bad = c, bad.r = NAN;
    expect_invalid(s, 3, &bad, "r =");
    bad = c, bad.L_S = 3, bad.r = 0.25f; /* floor(0.75) = 0 recompute slots */
    expect_invalid(s, 3, &bad, "recompute slot");
    bad = c, bad.lat_P_ms = -1;
    expect_invalid(s, 3, &bad, "lat_P_ms");
    bad = c, bad.lat_S_ms = INFINITY;
    expect_invalid(s, 3, &bad, "lat_S_ms");

    rp_call calls[4];
    int32_t nc;
    double t;
    assert_int_equal(rp_plan_dp(s, 3, &c, calls, 4, NULL, &t), RP_ERR_INVALID_ARG);
    assert_int_equal(rp_plan_dp(s, 3, &c, calls, 4, &nc, NULL), RP_ERR_INVALID_ARG);
    assert_int_equal(rp_plan_dp(s, 3, &c, NULL, 4, &nc, &t), RP_ERR_INVALID_ARG);
    assert_int_equal(rp_plan_naive(s, 3, &c, calls, -1, &nc, &t), RP_ERR_INVALID_ARG);
}

static void test_full_contract(void **state) {
    (void)state;
    rp_static_cfg c = rp_static_default_cfg();
    const int kinds[] = {RP_SEG_PREFIX, RP_SEG_REUSE, RP_SEG_NEW, RP_SEG_REUSE, RP_SEG_NEW};
    const int lens[] = {100, 1300, 300, 700, 50};
    rp_segment s[5];
    mk_segs(s, kinds, lens, 5);
    plan_fn fs[] = {rp_plan_dp, rp_plan_dp_paper, rp_plan_naive};
    for (int f = 0; f < 3; f++) {
        int32_t need = -1;
        double t0;
        assert_int_equal(fs[f](s, 5, &c, NULL, 0, &need, &t0), RP_ERR_FULL);
        assert_true(need > 1);
        rp_call *calls = calloc((size_t)need, sizeof *calls);
        int32_t nc = -1;
        double t = -1;
        assert_int_equal(fs[f](s, 5, &c, calls, need - 1, &nc, &t), RP_ERR_FULL);
        assert_int_equal(nc, need);
        assert_true(t == t0);
        assert_int_equal(fs[f](s, 5, &c, calls, need, &nc, &t), RP_OK);
        assert_int_equal(nc, need);
        check_plan(s, 5, &c, calls, nc, t);
        free(calls);
    }
}

/* The l_s rule at its boundaries (defaults: L_S = 512, k = 128). */
static void test_recompute_rule_boundaries(void **state) {
    (void)state;
    rp_static_cfg c = rp_static_default_cfg();
    c.lat_P_ms = 100.0; /* make prefill unattractive so packing is visible */
    c.lat_S_ms = 1.0;
    /* 384 reusable + 32 new: 32*512 + 384*128 = 65536 = k*L_S -> one call */
    {
        const int kinds[] = {RP_SEG_REUSE, RP_SEG_NEW};
        const int lens[] = {384, 32};
        rp_segment s[2];
        mk_segs(s, kinds, lens, 2);
        int32_t nc;
        double t;
        rp_call *calls = run_plan(rp_plan_dp, s, 2, &c, &nc, &t);
        assert_int_equal(nc, 1);
        free(calls);
    }
    /* one more new token does not fit: two calls */
    {
        const int kinds[] = {RP_SEG_REUSE, RP_SEG_NEW};
        const int lens[] = {384, 33};
        rp_segment s[2];
        mk_segs(s, kinds, lens, 2);
        int32_t nc;
        double t;
        rp_call *calls = run_plan(rp_plan_dp, s, 2, &c, &nc, &t);
        assert_int_equal(nc, 2);
        free(calls);
    }
    /* non-integer r * L_S (0.3 * 10 -> k = 3; 0.7 * 10 -> k = 7): a full call
     * of L_S reusable tokens stays feasible */
    float rs[] = {0.3f, 0.7f};
    for (int i = 0; i < 2; i++) {
        rp_static_cfg d = {.L_P = 4, .L_S = 10, .r = rs[i], .lat_P_ms = 100, .lat_S_ms = 1};
        rp_segment s = {RP_SEG_REUSE, 0, 30};
        int32_t nc;
        double t;
        rp_call *calls = run_plan(rp_plan_dp, &s, 1, &d, &nc, &t);
        assert_int_equal(nc, 3);
        free(calls);
        rp_segment sn = {RP_SEG_NEW, 0, 30}; /* all new: k per call */
        calls = run_plan(rp_plan_dp, &sn, 1, &d, &nc, &t);
        assert_int_equal(nc, (30 + test_k(&d) - 1) / test_k(&d));
        free(calls);
    }
}

/* ---- calibration ---------------------------------------------------------- */

/* Shape choice on a calibration measured on this project's 2-core Zen 4 box
 * (Llama-3.2-1B shape, Q4_0, 2 threads): the turning point alone gives
 * L_P = 64, L_S = 256; the layout-aware choice keeps L_P = 64 and takes
 * L_S = 384, whose plans pad less across the layout family. */
static void test_choose_shapes(void **state) {
    (void)state;
    const int32_t sizes[10] = {32, 64, 96, 128, 192, 256, 384, 512, 768, 1024};
    const double pre[10] = {138.07, 254.44, 367.97, 480.17, 719.06, 937.17, 1420.73, 1898.48, 2976.30, 4089.94};
    const double rec[10] = {60.50, 92.63, 128.20, 166.75, 235.38, 311.12, 440.17, 593.36, 917.77, 1287.06};
    rp_static_cfg c = rp_static_default_cfg();
    assert_int_equal(rp_calib_choose_shapes(sizes, pre, rec, 10, 0.15, &c), RP_OK);
    assert_int_equal(c.L_P, 64);
    assert_int_equal(c.L_S, 384);
    assert_true(fabs(c.lat_P_ms - 254.44) < 1e-9);
    assert_true(fabs(c.lat_S_ms - 440.17) < 1e-9);
    assert_true(fabs(c.r - 0.25f) < 1e-9);
    /* with zero tolerance only the per-token optimum of each curve is a candidate */
    c = rp_static_default_cfg();
    assert_int_equal(rp_calib_choose_shapes(sizes, pre, rec, 10, 0.0, &c), RP_OK);
    assert_int_equal(c.L_P, 256);   /* 3.661 ms/token */
    assert_int_equal(c.L_S, 384);   /* 1.146 ms/token */
    /* a flat prefill curve (no batching gain) makes the smallest prefill shape
     * best: it only ever adds padding */
    double flat[10];
    for (int i = 0; i < 10; i++) flat[i] = 4.0 * sizes[i];
    c = rp_static_default_cfg();
    assert_int_equal(rp_calib_choose_shapes(sizes, flat, rec, 10, 0.15, &c), RP_OK);
    assert_int_equal(c.L_P, 32);
    /* bad input */
    assert_int_equal(rp_calib_choose_shapes(sizes, pre, rec, 0, 0.15, &c), RP_ERR_INVALID_ARG);
    assert_int_equal(rp_calib_choose_shapes(sizes, pre, rec, 10, 0.15, NULL), RP_ERR_INVALID_ARG);
}

static void test_turning_point(void **state) {
    (void)state;
    int32_t sizes[32];
    double lat[32];
    /* per-token latency falls linearly to a flat floor at 256 */
    for (int i = 0; i < 32; i++) {
        sizes[i] = 32 * (i + 1);
        double q = 0.01 + (sizes[i] < 256 ? 0.5 * (256 - sizes[i]) / 256.0 : 0.0);
        lat[i] = q * sizes[i];
    }
    assert_int_equal(rp_calib_turning_point(sizes, lat, 32, 0.05), 256);
    assert_int_equal(rp_calib_turning_point(sizes, lat, 32, 1e-9), 256); /* flat floor: q*s/s rounds */
    /* decreasing then slowly rising (padding waste at larger sizes): knee at 512 */
    for (int i = 0; i < 32; i++) {
        double s = sizes[i];
        double q = s < 512 ? 0.002 + 0.004 * (512 - s) / 512 : 0.002 * (1 + (s - 512) / 4096);
        lat[i] = q * s;
    }
    assert_int_equal(rp_calib_turning_point(sizes, lat, 32, 0.0), 512);
    /* with 5% tolerance the first size within 5% of best: 0.004*(512-s)/512 <= 1e-4 -> s >= 499.2 -> 512 */
    assert_int_equal(rp_calib_turning_point(sizes, lat, 32, 0.05), 512);
    /* smooth curve q = 1 + 64/s: best at 1024 (1.0625); within 10%: 64/s <= 0.16875 -> s >= 379.3 -> 384 */
    for (int i = 0; i < 32; i++) lat[i] = (1.0 + 64.0 / sizes[i]) * sizes[i];
    assert_int_equal(rp_calib_turning_point(sizes, lat, 32, 0.10), 384);
    assert_int_equal(rp_calib_turning_point(sizes, lat, 32, 0.0), 1024);
    /* bad input */
    assert_int_equal(rp_calib_turning_point(NULL, lat, 32, 0.05), -1);
    assert_int_equal(rp_calib_turning_point(sizes, lat, 0, 0.05), -1);
    assert_int_equal(rp_calib_turning_point(sizes, lat, 32, -0.1), -1);
    lat[3] = NAN;
    assert_int_equal(rp_calib_turning_point(sizes, lat, 32, 0.05), -1);
}

static void fill_calib(rp_calib *c) {
    memset(c, 0, sizeof *c);
    c->model_fingerprint = 0xfedcba9876543210ull;
    snprintf(c->machine, sizeof c->machine, "Intel(R) Xeon(R) test CPU avx2 t8");
    c->cfg = rp_static_default_cfg();
    c->cfg.lat_P_ms = 12.345678901234567;
    c->cfg.lat_S_ms = 19.75;
    c->n_points = 5;
    for (int i = 0; i < 5; i++) {
        c->sizes[i] = 32 * (i + 1);
        c->prefill_ms[i] = 1.0 / 3.0 * (i + 1);
        c->recompute_ms[i] = 0.1 + i * 0.7;
    }
}

static void path_in_tmp(char *buf, size_t n, const char *name) {
    snprintf(buf, n, "%s/%s", rp_test_tmpdir(), name);
}

static void test_calib_roundtrip(void **state) {
    (void)state;
    char path[4096];
    path_in_tmp(path, sizeof path, "calib_rt.txt");
    unlink(path);
    rp_calib c, d;
    assert_int_equal(rp_calib_load(path, &d), RP_ERR_NOT_FOUND);
    fill_calib(&c);
    mode_t old = umask(0); /* the 0600 mode must not depend on the umask */
    rp_status st = rp_calib_save(&c, path);
    umask(old);
    assert_int_equal(st, RP_OK);
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    assert_int_equal(sb.st_mode & 0777, 0600);
    assert_int_equal(rp_calib_load(path, &d), RP_OK);
    assert_true(d.model_fingerprint == c.model_fingerprint);
    assert_string_equal(d.machine, c.machine);
    assert_int_equal(d.cfg.L_P, c.cfg.L_P);
    assert_int_equal(d.cfg.L_S, c.cfg.L_S);
    assert_true(d.cfg.r == c.cfg.r);
    assert_true(d.cfg.lat_P_ms == c.cfg.lat_P_ms);
    assert_true(d.cfg.lat_S_ms == c.cfg.lat_S_ms);
    assert_int_equal(d.n_points, c.n_points);
    for (int i = 0; i < c.n_points; i++) {
        assert_int_equal(d.sizes[i], c.sizes[i]);
        assert_true(d.prefill_ms[i] == c.prefill_ms[i]);
        assert_true(d.recompute_ms[i] == c.recompute_ms[i]);
    }
    /* overwrite in place; no temp files left behind */
    c.cfg.L_P = 256;
    assert_int_equal(rp_calib_save(&c, path), RP_OK);
    assert_int_equal(rp_calib_load(path, &d), RP_OK);
    assert_int_equal(d.cfg.L_P, 256);
    DIR *dir = opendir(rp_test_tmpdir());
    assert_non_null(dir);
    for (struct dirent *e; (e = readdir(dir)) != NULL;) assert_null(strstr(e->d_name, ".tmp"));
    closedir(dir);
    /* invalid records are refused */
    c.machine[0] = '\n';
    assert_int_equal(rp_calib_save(&c, path), RP_ERR_INVALID_ARG);
    fill_calib(&c);
    c.n_points = 65;
    assert_int_equal(rp_calib_save(&c, path), RP_ERR_INVALID_ARG);
    assert_int_equal(rp_calib_save(NULL, path), RP_ERR_INVALID_ARG);
    unlink(path);
}

/* Writes the saved file with line `line_no` (1-based) replaced by `repl`
 * (NULL: deleted), plus an optional extra line appended. */
static void write_variant(const char *src, const char *dst, int line_no, const char *repl, const char *extra) {
    char *text = rp_test_read_file(src, NULL);
    assert_non_null(text);
    FILE *f = fopen(dst, "w");
    assert_non_null(f);
    int ln = 1;
    for (char *p = text; *p;) {
        char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p + 1) : strlen(p);
        if (ln == line_no) {
            if (repl) fprintf(f, "%s\n", repl);
        } else {
            fwrite(p, 1, len, f);
        }
        p += len;
        ln++;
    }
    if (extra) fputs(extra, f);
    fclose(f);
    free(text);
}

static int find_line(const char *path, const char *key) {
    char *text = rp_test_read_file(path, NULL);
    assert_non_null(text);
    int ln = 1, found = -1;
    size_t kl = strlen(key);
    for (char *p = text; *p; ln++) {
        if (strncmp(p, key, kl) == 0 && p[kl] == ' ' && found < 0) found = ln;
        char *nl = strchr(p, '\n');
        if (!nl) break;
        p = nl + 1;
    }
    free(text);
    return found;
}

static void expect_load(const char *path, rp_status want, int line) {
    rp_calib d;
    rp_status st = rp_calib_load(path, &d);
    if (st != want) {
        print_message("load: got %s (%s), want %s\n", rp_strerror(st), rp_last_error(), rp_strerror(want));
        fail();
    }
    if (line > 0) {
        char tag[32];
        snprintf(tag, sizeof tag, ":%d:", line);
        if (!strstr(rp_last_error(), tag)) {
            print_message("error '%s' does not name line %d\n", rp_last_error(), line);
            fail();
        }
    }
}

static void test_calib_corruption(void **state) {
    (void)state;
    char good[4096], bad[4096];
    path_in_tmp(good, sizeof good, "calib_good.txt");
    path_in_tmp(bad, sizeof bad, "calib_bad.txt");
    rp_calib c;
    fill_calib(&c);
    assert_int_equal(rp_calib_save(&c, good), RP_OK);

    struct { const char *key, *repl; rp_status want; } cases[] = {
        {"L_P", "L_P abc", RP_ERR_FORMAT},
        {"L_P", "L_P 0", RP_ERR_FORMAT},
        {"L_S", "L_S 12x", RP_ERR_FORMAT},
        {"L_S", "L_S 99999999999", RP_ERR_FORMAT},
        {"r", "r 1.5", RP_ERR_FORMAT},
        {"r", "r nan", RP_ERR_FORMAT},
        {"r", "r", RP_ERR_FORMAT},
        {"lat_P_ms", "lat_P_ms -3", RP_ERR_FORMAT},
        {"lat_S_ms", "lat_S_ms inf", RP_ERR_FORMAT},
        {"lat_S_ms", "lat_S_ms 1.0 2.0", RP_ERR_FORMAT},
        {"fingerprint", "fingerprint 0xZZ", RP_ERR_FORMAT},
        {"fingerprint", "fingerprint 0123456789abcdef0", RP_ERR_FORMAT},
        {"n_points", "n_points 65", RP_ERR_FORMAT},
        {"version", "version two", RP_ERR_FORMAT},
        {"version", "version 2", RP_ERR_UNSUPPORTED},
        {"point", "point 32 1.0", RP_ERR_FORMAT},
        {"point", "point -32 1.0 2.0", RP_ERR_FORMAT},
        {"point", "point 32 1.0 x", RP_ERR_FORMAT},
        {"point", "point 32 1.0 2.0 3.0", RP_ERR_FORMAT},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int ln = find_line(good, cases[i].key);
        assert_true(ln > 0);
        write_variant(good, bad, ln, cases[i].repl, NULL);
        expect_load(bad, cases[i].want, ln);
    }
    /* duplicate key: named at the second occurrence (the appended last line) */
    int total_lines = find_line(good, "point") + c.n_points - 1;
    write_variant(good, bad, -1, NULL, "L_P 64\n");
    expect_load(bad, RP_ERR_FORMAT, total_lines + 1);
    /* missing required key / fewer points than n_points */
    write_variant(good, bad, find_line(good, "lat_S_ms"), NULL, NULL);
    expect_load(bad, RP_ERR_FORMAT, 0);
    assert_non_null(strstr(rp_last_error(), "lat_S_ms"));
    write_variant(good, bad, find_line(good, "point"), NULL, NULL);
    expect_load(bad, RP_ERR_FORMAT, 0);
    assert_non_null(strstr(rp_last_error(), "n_points"));
    /* unknown keys, comments, blank lines and CRLF are fine */
    write_variant(good, bad, -1, NULL, "future_key 1 2 3\n# note\n\nthreads 8\r\n");
    expect_load(bad, RP_OK, 0);
    /* a NUL byte inside a line */
    FILE *f = fopen(bad, "w");
    fputs("version 1\n", f);
    fwrite("L_P 12\0junk\n", 1, 12, f);
    fclose(f);
    expect_load(bad, RP_ERR_FORMAT, 2);
    /* missing file */
    unlink(bad);
    expect_load(bad, RP_ERR_NOT_FOUND, 0);
    unlink(good);
}

/* ---- comparison table ------------------------------------------------------ */

static void table_row(const char *name, const rp_segment *s, int32_t n, const rp_static_cfg *c) {
    plan_fn fs[] = {rp_plan_dp, rp_plan_dp_paper, rp_plan_naive};
    double t[3];
    int np[3], ns[3];
    for (int f = 0; f < 3; f++) {
        int32_t nc;
        rp_call *calls = run_plan(fs[f], s, n, c, &nc, &t[f]);
        count_kinds(calls, nc, &np[f], &ns[f]);
        free(calls);
    }
    int32_t P, N = seg_total(s, n, &P);
    print_message("%-34s %6d %6d | %7.2f %2dP+%2dS | %7.2f %2dP+%2dS | %7.2f %2dP+%2dS | %5.1f%%\n", name, N, N - P,
                  t[0], np[0], ns[0], t[1], np[1], ns[1], t[2], np[2], ns[2], 100.0 * (1.0 - t[0] / t[2]));
    assert_true(t[0] <= t[2] + 1e-12);
}

static void test_comparison_table(void **state) {
    (void)state;
    rp_static_cfg c = rp_static_default_cfg();
    print_message("cfg: L_P=%d L_S=%d r=%.2f lat_P=%.2f ms lat_S=%.2f ms\n", c.L_P, c.L_S, (double)c.r, c.lat_P_ms,
                  c.lat_S_ms);
    print_message("%-34s %6s %6s | %-17s | %-17s | %-17s | %s\n", "pattern", "N", "todo", "DP ms  calls",
                  "DP-paper", "naive", "DP gain");
    rp_segment s[32];
    int n;
    { /* 6 reusable documents in a new order + 40-token question */
        const int k[] = {1, 1, 1, 1, 1, 1, 2};
        const int l[] = {310, 287, 295, 302, 276, 318, 40};
        n = mk_segs(s, k, l, 7);
        table_row("6 docs ~300 + 40 new tail", s, n, &c);
    }
    { /* same, each document behind a 12-token new header */
        const int k[] = {2, 1, 2, 1, 2, 1, 2, 1, 2, 1, 2, 1, 2};
        const int l[] = {12, 310, 12, 287, 12, 295, 12, 302, 12, 276, 12, 318, 40};
        n = mk_segs(s, k, l, 13);
        table_row("6 x (12 new hdr + doc) + 40 new", s, n, &c);
    }
    { /* prefix 500 + mixed */
        const int k[] = {0, 1, 2, 1, 2, 1, 2};
        const int l[] = {500, 300, 20, 450, 60, 200, 35};
        n = mk_segs(s, k, l, 7);
        table_row("prefix 500 + mixed", s, n, &c);
    }
    { /* system prompt prefix + chat history reused out of order + new turn */
        const int k[] = {0, 1, 2, 1, 2, 1, 2};
        const int l[] = {1200, 900, 5, 640, 5, 1500, 180};
        n = mk_segs(s, k, l, 7);
        table_row("prefix 1200 + 3 reused turns + new", s, n, &c);
    }
    { /* many small chunks (RAG with 64-token chunks) */
        int kk[30], ll[30];
        for (int i = 0; i < 30; i++) {
            kk[i] = i % 2 ? RP_SEG_NEW : RP_SEG_REUSE;
            ll[i] = i % 2 ? 3 : 64;
        }
        n = mk_segs(s, kk, ll, 30);
        table_row("15 x (64 reuse + 3 new)", s, n, &c);
    }
    { /* all new */
        const int k[] = {2};
        const int l[] = {1000};
        n = mk_segs(s, k, l, 1);
        table_row("all new 1000", s, n, &c);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_default_cfg),
        cmocka_unit_test(test_toy_figure8),
        cmocka_unit_test(test_all_prefix_and_empty),
        cmocka_unit_test(test_all_new_latency_choice),
        cmocka_unit_test(test_random_dp_vs_naive),
        cmocka_unit_test(test_bruteforce_small),
        cmocka_unit_test(test_invalid_inputs),
        cmocka_unit_test(test_full_contract),
        cmocka_unit_test(test_recompute_rule_boundaries),
        cmocka_unit_test(test_turning_point),
        cmocka_unit_test(test_choose_shapes),
        cmocka_unit_test(test_calib_roundtrip),
        cmocka_unit_test(test_calib_corruption),
        cmocka_unit_test(test_comparison_table),
    };
    return rp_test_main(tests, NULL, NULL);
}
