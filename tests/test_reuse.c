/* test_reuse.c — KV reuse correctness: exact prefix reuse, re-rotation, r = 1 equals prefill, static mode and pad masking, sub-chunk reuse, salt. */
#define _GNU_SOURCE   /* memmem */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "testfix.h"
#include "model/forward.h"
#include "model/model.h"
#include "gguf/gguf.h"
#include "model/synth.h"
#include "reuse/blend.h"
#include "reuse/engine.h"
#include "reuse/rerotate.h"
#include "store/store.h"

/* The prologue of every stories260K test: skips when ../shared is absent,
 * else opens fixture `f` (1024 cells of KV type `kv_type`); `mp` is the path. */
#define OPEN_STORIES(f, kv_type)                           \
    const char *mp = stories();                            \
    RP_REQUIRE_SHARED(mp, "models/stories260K.gguf");      \
    rp_test_fixture f;                                     \
    assert_true(rp_test_fixture_open(&f, mp, kv_type, 1024))

/* KL(p || q) of the softmax distributions of two logit vectors, in nats. */
/* blend r = 0.25 vs exact prefill on the reordered prompt (measured: see test_blend_accounting) */
#define KL_BOUND 0.05   /* measured 1.7e-2 (dynamic) and 1.8e-2 (static) */

static double kl_logits(const float *lp, const float *lq, int32_t n) {
    double mp = -INFINITY, mq = -INFINITY, zp = 0, zq = 0, kl = 0;
    for (int32_t i = 0; i < n; i++) { mp = fmax(mp, lp[i]); mq = fmax(mq, lq[i]); }
    for (int32_t i = 0; i < n; i++) { zp += exp(lp[i] - mp); zq += exp(lq[i] - mq); }
    for (int32_t i = 0; i < n; i++) {
        double a = lp[i] - mp - log(zp), b = lq[i] - mq - log(zq);
        kl += exp(a) * (a - b);
    }
    return kl;
}

/* The prompt most non-prefix tests reuse: BOS, documents 4, 1, 5, 0, 3 (one
 * caller segment each, out of the order rp_test_cache_docs stored them in) and a
 * 4-token question. */
typedef struct {
    rp_token docs[6][40], p[512];
    int32_t bnd[16], nb, n;
} reordered_prompt;

static void make_reordered(reordered_prompt *r) {
    static const int order[] = {4, 1, 5, 0, 3};
    static const rp_token tail[] = {300, 301, 302, 303};
    rp_test_make_docs(r->docs, 6, 12345);
    r->n = rp_test_build(r->docs, order, 5, tail, 4, r->p, r->bnd, &r->nb);
}

/* Two prompts where the second extends the first: BOS + documents 0-2, then
 * BOS + documents 0-3 + a 3-token tail. */
typedef struct {
    rp_token docs[6][40], p1[512], p2[512];
    int32_t b1[16], b2[16], nb1, nb2, n1, n2;
} extending_pair;

static void make_extending(extending_pair *x) {
    static const int o1[] = {0, 1, 2}, o2[] = {0, 1, 2, 3};
    static const rp_token tail[] = {300, 301, 302};
    rp_test_make_docs(x->docs, 6, 12345);
    x->n1 = rp_test_build(x->docs, o1, 3, NULL, 0, x->p1, x->b1, &x->nb1);
    x->n2 = rp_test_build(x->docs, o2, 4, tail, 3, x->p2, x->b2, &x->nb2);
}

static const char *stories(void) {
    static char path[4096];
    const char *p = rp_test_shared("models/stories260K.gguf");
    if (!p) return NULL;
    snprintf(path, sizeof path, "%s", p);
    return path;
}

/* Prefix reuse is exact: the same logits as a full prefill (F16 KV), for a
 * prompt extending a cached one and for a 100% hit. */
static void test_prefix_exact(void **state) {
    (void)state;
    OPEN_STORIES(f, RP_TYPE_F16);
    extending_pair x;
    make_extending(&x);
    rp_reuse *none = rp_test_engine(&f, RP_REUSE_NONE, 0, false), *pre = rp_test_engine(&f, RP_REUSE_PREFIX, 0, false);
    rp_reuse_stats st;
    assert_int_equal(rp_reuse_prefill(pre, f.ctx, f.kv, x.p1, x.n1, x.b1, x.nb1, f.lg_a, &st), RP_OK);
    assert_int_equal(rp_reuse_commit(pre, f.kv), RP_OK);
    assert_int_equal(st.n_prefix, 0);
    assert_int_equal(rp_reuse_prefill(pre, f.ctx, f.kv, x.p2, x.n2, x.b2, x.nb2, f.lg_a, &st), RP_OK);
    print_message("  extension: prefix-reused %d of %d tokens\n", st.n_prefix, st.n_prompt);
    assert_int_equal(st.n_prefix, x.n1);
    assert_int_equal(st.n_new, x.n2 - x.n1);
    assert_int_equal(rp_reuse_prefill(none, f.ctx, f.kv, x.p2, x.n2, x.b2, x.nb2, f.lg_b, &st), RP_OK);
    float d = rp_test_max_diff(f.lg_a, f.lg_b, f.V);
    print_message("  prefix reuse vs full prefill: max |logit diff| %g\n", d);
    assert_true(d <= 1e-5f);
    /* 100% hit: everything but the last token comes from the cache */
    assert_int_equal(rp_reuse_prefill(pre, f.ctx, f.kv, x.p2, x.n2, x.b2, x.nb2, f.lg_a, &st), RP_OK);
    assert_int_equal(rp_reuse_commit(pre, f.kv), RP_OK);
    assert_int_equal(rp_reuse_prefill(pre, f.ctx, f.kv, x.p2, x.n2, x.b2, x.nb2, f.lg_a, &st), RP_OK);
    assert_int_equal(st.n_prefix, x.n2 - 1);
    assert_int_equal(st.n_computed_rows, 1);
    assert_true(rp_test_max_diff(f.lg_a, f.lg_b, f.V) <= 1e-5f);
    /* a prompt diverging mid-chunk reuses the common head of the cached chunk */
    x.p2[1 + 40 + 20] = 7;
    assert_int_equal(rp_reuse_prefill(pre, f.ctx, f.kv, x.p2, x.n2, x.b2, x.nb2, f.lg_a, &st), RP_OK);
    assert_int_equal(st.n_prefix, 1 + 40 + 20);
    assert_int_equal(rp_reuse_prefill(none, f.ctx, f.kv, x.p2, x.n2, x.b2, x.nb2, f.lg_b, &st), RP_OK);
    assert_true(rp_test_max_diff(f.lg_a, f.lg_b, f.V) <= 1e-5f);
    rp_reuse_free(none);
    rp_reuse_free(pre);
    rp_test_fixture_close(&f);
}

/* RoPE re-rotation composes exactly: rotating by a then by d equals rotating
 * by a + d, within 1e-3 relative, for plain and llama3-scaled frequencies,
 * NORM and NEOX pairing, up to positions of 100k. */
static void test_rerotation_math(void **state) {
    (void)state;
    for (int variant = 0; variant < 4; variant++) {
        rp_model m;
        memset(&m, 0, sizeof m);
        m.hp.n_head_kv = 2;
        m.hp.head_dim = 64;
        m.hp.n_rot = 64;
        m.hp.rope_kind = variant & 1 ? RP_ROPE_NEOX : RP_ROPE_NORM;
        float inv[32];
        for (int i = 0; i < 32; i++) {
            double f = pow(500000.0, -2.0 * i / 64);
            if (variant & 2) {   /* llama3 scaling: factor 32, low 1, high 4, original context 8192 */
                double wl = 2 * M_PI / f;
                if (wl > 8192.0) f /= 32;
                else if (wl >= 2048.0) {
                    double sm = (8192.0 / wl - 1) / 3;
                    f = (1 - sm) * f / 32 + sm * f;
                }
            }
            inv[i] = (float)f;
        }
        m.rope_inv_freq = inv;
        float v0[128], a[128], c[128], cs[64];
        uint64_t s = 7;
        for (int i = 0; i < 128; i++) {
            s = s * 6364136223846793005ULL + 1;
            v0[i] = (float)((int64_t)(s >> 40) - (1 << 23)) / (float)(1 << 23);
        }
        const int32_t cases[][2] = {{0, 5}, {37, 1000}, {1000, -900}, {100000, 3000}, {5, 130000}};
        for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
            memcpy(a, v0, sizeof a);
            memcpy(c, v0, sizeof c);
            rp_rerotate_table(&m, cases[k][0], cs, cs + 32);
            rp_rerotate_row(&m, a, cs, cs + 32);
            rp_rerotate_table(&m, cases[k][1], cs, cs + 32);
            rp_rerotate_row(&m, a, cs, cs + 32);
            rp_rerotate_table(&m, cases[k][0] + cases[k][1], cs, cs + 32);
            rp_rerotate_row(&m, c, cs, cs + 32);
            double num = 0, den = 0;
            for (int i = 0; i < 128; i++) { num += (a[i] - c[i]) * (a[i] - c[i]); den += c[i] * c[i]; }
            assert_true(sqrt(num / den) < 1e-3);
        }
    }
}

/* Model level: layer-0 K does not depend on context, so a chunk's cached K
 * re-rotated to new positions must equal K computed there (F32 KV). */
static void check_model_rerotation(const char *path) {
    rp_test_fixture f;
    assert_true(rp_test_fixture_open(&f, path, RP_TYPE_F32, 512));
    rp_token docs[3][40], p[256];
    int32_t bnd[8], nb;
    rp_test_make_docs(docs, 3, 12345);
    const int o1[] = {2}, o2[] = {0, 1, 2};
    rp_reuse *none = rp_test_engine(&f, RP_REUSE_NONE, 0, false);
    rp_reuse *full = rp_test_engine(&f, RP_REUSE_FULL, 0, false);
    rp_reuse_stats st;
    /* cache doc 2 at position 1 */
    int32_t n = rp_test_build(docs, o1, 1, NULL, 0, p, bnd, &nb);
    rp_reuse_params *fp = rp_reuse_get_params(full);
    fp->mode = RP_REUSE_PREFIX;
    assert_int_equal(rp_reuse_prefill(full, f.ctx, f.kv, p, n, bnd, nb, f.lg_a, &st), RP_OK);
    assert_int_equal(rp_reuse_commit(full, f.kv), RP_OK);
    fp->mode = RP_REUSE_FULL;
    /* now doc 2 at position 81: reused by content, re-rotated */
    n = rp_test_build(docs, o2, 3, NULL, 0, p, bnd, &nb);
    assert_int_equal(rp_reuse_prefill(full, f.ctx, f.kv, p, n, bnd, nb, f.lg_a, &st), RP_OK);
    assert_int_equal(st.n_nonprefix, 40);
    /* the last token is recomputed; compare the others */
    const double worst = rp_test_k_rel_error(&f, none, p, n, bnd, nb, 0, 81, 39);
    print_message("  %s: re-rotated vs recomputed layer-0 K, worst relative error %.2e\n", path, worst);
    assert_true(worst < 1e-3);
    rp_reuse_free(none);
    rp_reuse_free(full);
    rp_test_fixture_close(&f);
}

static void test_rerotation_model(void **state) {
    (void)state;
    const char *mp = stories();
    RP_REQUIRE_SHARED(mp, "models/stories260K.gguf");
    check_model_rerotation(mp);   /* NORM pairing */
    char q[512];
    snprintf(q, sizeof q, "%s/qwen-tiny.gguf", rp_test_tmpdir());
    rp_synth_params sp = rp_synth_default_params();
    sp.arch = RP_ARCH_QWEN3;
    sp.type = "f32";
    assert_int_equal(rp_synth_write(&sp, q), RP_OK);
    check_model_rerotation(q);   /* NEOX pairing + q/k norms */
    remove(q);
    /* Llama 3 RoPE: base 500000 with llama3 scaling stored as rope_freqs.weight */
    snprintf(q, sizeof q, "%s/llama3-tiny.gguf", rp_test_tmpdir());
    sp = rp_synth_default_params();
    sp.preset = "tiny-llama3";
    sp.type = "f32";
    assert_int_equal(rp_synth_write(&sp, q), RP_OK);
    rp_model *m = NULL;
    assert_int_equal(rp_model_load(q, rp_model_default_params(), &m), RP_OK);
    int n_scaled = 0;   /* the scaling is really in effect: low frequencies divided by up to 32 */
    for (int i = 0; i < m->hp.n_rot / 2; i++)
        n_scaled += m->rope_inv_freq[i] < 0.9 * pow(500000.0, -2.0 * i / m->hp.n_rot);
    print_message("  llama3-tiny: %d of %d RoPE frequencies scaled\n", n_scaled, m->hp.n_rot / 2);
    assert_true(n_scaled >= 4);
    rp_model_free(m);
    check_model_rerotation(q);   /* NORM pairing, llama3-scaled frequencies */
    remove(q);
}

/* full and blend with r = 1 recompute every reused token: equal to prefill. */
static void test_ratio_one_equals_prefill(void **state) {
    (void)state;
    OPEN_STORIES(f, RP_TYPE_F32);
    reordered_prompt r;
    make_reordered(&r);
    rp_reuse *none = rp_test_engine(&f, RP_REUSE_NONE, 0, false);
    const struct { rp_reuse_mode m; bool stat; } cfgs[] = {{RP_REUSE_BLEND, false}, {RP_REUSE_FULL, false}, {RP_REUSE_BLEND, true},
                                                             {RP_REUSE_FULL, true}};
    for (size_t k = 0; k < sizeof cfgs / sizeof cfgs[0]; k++) {
        rp_reuse *e = rp_test_engine(&f, cfgs[k].m, 1.0f, cfgs[k].stat);
        rp_reuse_stats st;
        rp_test_cache_docs(&f, e, r.docs, f.lg_a);   /* cache each document after BOS */
        assert_int_equal(rp_reuse_prefill(e, f.ctx, f.kv, r.p, r.n, r.bnd, r.nb, f.lg_a, &st), RP_OK);
        assert_int_equal(st.n_nonprefix, 160);   /* docs 1, 5, 0, 3 by content; doc 4 follows BOS: prefix */
        assert_int_equal(st.n_prefix, 41);
        assert_int_equal(rp_reuse_prefill(none, f.ctx, f.kv, r.p, r.n, r.bnd, r.nb, f.lg_b, &st), RP_OK);
        float d = rp_test_max_diff(f.lg_a, f.lg_b, f.V);
        print_message("  %s%s r=1 vs prefill: max |logit diff| %g\n", rp_reuse_mode_name(cfgs[k].m),
                      cfgs[k].stat ? " (static)" : "", d);
        assert_true(d <= 1e-4f);
        rp_reuse_free(e);
    }
    /* a cache that already holds approximate chunks of this very prompt (a
     * blend run at r = 0.25 committed them): r = 1 must not take them as an
     * exact prefix, or it would repeat the earlier approximation */
    rp_reuse *e = rp_test_engine(&f, RP_REUSE_BLEND, 0.25f, false);
    rp_reuse_stats st;
    rp_test_cache_docs(&f, e, r.docs, f.lg_a);
    assert_int_equal(rp_reuse_prefill(e, f.ctx, f.kv, r.p, r.n, r.bnd, r.nb, f.lg_a, &st), RP_OK);
    assert_true(st.n_recomputed < st.n_nonprefix);   /* approximate KV ... */
    assert_int_equal(rp_reuse_commit(e, f.kv), RP_OK);   /* ... goes into the cache */
    assert_int_equal(rp_reuse_prefill(e, f.ctx, f.kv, r.p, r.n, r.bnd, r.nb, f.lg_a, &st), RP_OK);
    assert_true(st.n_prefix > 41);                    /* at r < 1 the approximate path is reused */
    rp_reuse_get_params(e)->ratio = 1.0f;
    assert_int_equal(rp_reuse_prefill(e, f.ctx, f.kv, r.p, r.n, r.bnd, r.nb, f.lg_a, &st), RP_OK);
    assert_int_equal(rp_reuse_prefill(none, f.ctx, f.kv, r.p, r.n, r.bnd, r.nb, f.lg_b, &st), RP_OK);
    float d = rp_test_max_diff(f.lg_a, f.lg_b, f.V);
    print_message("  blend r=1 over a cache of approximate chunks vs prefill: max |logit diff| %g\n", d);
    assert_true(d <= 1e-4f);
    rp_reuse_free(e);
    rp_reuse_free(none);
    rp_test_fixture_close(&f);
}

/* Blend at r < 1 recomputes about r of the reused tokens, the final token
 * always, and its output stays close to exact (KL against a full prefill
 * under a fixed bound, same greedy token); full recomputes none. */
/* Static blend (L_P = 32, L_S = 64, r = 0.25: k = floor(r * L_S) = 16) against the DP plan the prompt gets
 * (rp_reuse_analyze resolves the same chunks the prefill will): the prefill runs exactly the planned calls,
 * every call has its full shape (L_P rows per prefill call, L_S per recompute call, the rest padding),
 * and each recompute call carries k rows past the check layer: its forced rows (new tokens, the final one)
 * plus min(k - forced, its other reused tokens) selected ones, which the selection trace marks; prefill
 * calls compute their tokens whole (nothing selected, but their reused tokens count as recomputed).
 * Returns how many prefill calls the plan has. */
static int32_t check_static_accounting(rp_test_fixture *f, rp_reuse *e, const rp_token *p, int32_t n,
                                       const int32_t *bnd, int32_t nb, rp_reuse_stats *st, uint8_t *mark) {
    const rp_static_cfg *sc = &rp_reuse_get_params(e)->static_cfg;
    assert_int_equal(sc->L_P, 32);
    assert_int_equal(sc->L_S, 64);
    const int32_t k = rp_static_k(sc);
    assert_int_equal(k, 16);
    rp_reuse_analysis an;
    assert_int_equal(rp_reuse_analyze(e, p, n, bnd, nb, &an), RP_OK);
    enum { MAXC = 64 };
    rp_call calls[MAXC];
    uint8_t kind[512];
    const int32_t nc = an.n_dp_calls, n_prefix = an.n_prefix;
    assert_true(nc > 0 && nc <= MAXC && n <= 512);
    memcpy(calls, an.dp_calls, sizeof calls[0] * (size_t)nc);
    memcpy(kind, an.tok_kind, (size_t)n);
    memset(mark, 7, (size_t)n);
    rp_reuse_trace_selection(e, mark);
    assert_int_equal(rp_reuse_prefill(e, f->ctx, f->kv, p, n, bnd, nb, f->lg_a, st), RP_OK);
    rp_reuse_trace_selection(e, NULL);
    assert_int_equal(st->n_prefix, n_prefix);
    assert_int_equal(st->n_calls, nc);
    int32_t rows = 0, pads = 0, recomputed = 0, n_prefill = 0, reuse_in_prefill = 0, at = n_prefix;
    for (int32_t i = 0; i < nc; i++) {
        const rp_call *c = &calls[i];
        assert_int_equal(c->begin, at);   /* in prompt order, every non-prefix token exactly once */
        at = c->end;
        const bool pre = c->kind == RP_CALL_PREFILL;
        const int32_t cap = pre ? sc->L_P : sc->L_S, len = c->end - c->begin;
        assert_true(len > 0 && len <= cap);
        rows += cap;
        pads += cap - len;
        int32_t forced = 0, cand = 0, marked = 0;
        for (int32_t t = c->begin; t < c->end; t++) {
            if (kind[t] == RP_ROW_NEW || t == n - 1) forced++;
            else cand++;
            marked += mark[t];
        }
        if (pre) {
            n_prefill++;
            reuse_in_prefill += cand;
            assert_int_equal(marked, 0);
            print_message("  static call %d: prefill   [%d, %d) %d rows, %d padding, %d reused tokens computed whole\n", i,
                          c->begin, c->end, cap, cap - len, cand);
        } else {
            assert_true(forced <= k);   /* the plan keeps new tokens within a call's k rows */
            const int32_t take = k - forced < cand ? k - forced : cand;
            assert_int_equal(marked, take);
            recomputed += take;
            print_message("  static call %d: recompute [%d, %d) %d rows, %d padding, %d forced + %d selected of %d\n", i,
                          c->begin, c->end, cap, cap - len, forced, take, cand);
        }
    }
    assert_int_equal(at, n);
    assert_int_equal(st->n_computed_rows, rows);
    assert_int_equal(st->n_pad, pads);
    assert_int_equal(st->n_recomputed, recomputed + reuse_in_prefill);
    for (int32_t t = 0; t < n; t++) assert_true(mark[t] <= 1);
    assert_int_equal(f->kv->n, n);   /* padding cells were released */
    return n_prefill;
}

static void test_blend_accounting(void **state) {
    (void)state;
    OPEN_STORIES(f, RP_TYPE_F16);
    reordered_prompt r;
    make_reordered(&r);
    float *exact = malloc(sizeof(float) * (size_t)f.V);
    rp_reuse *none = rp_test_engine(&f, RP_REUSE_NONE, 0, false);
    rp_reuse_stats st;
    assert_int_equal(rp_reuse_prefill(none, f.ctx, f.kv, r.p, r.n, r.bnd, r.nb, exact, &st), RP_OK);
    rp_reuse_free(none);
    rp_reuse *full = rp_test_engine(&f, RP_REUSE_FULL, 0.25f, false);
    rp_test_cache_docs(&f, full, r.docs, f.lg_a);
    assert_int_equal(rp_reuse_prefill(full, f.ctx, f.kv, r.p, r.n, r.bnd, r.nb, f.lg_a, &st), RP_OK);
    assert_int_equal(st.n_recomputed, 0);   /* the final token is new */
    print_message("  full: KL vs exact %.2e\n", kl_logits(exact, f.lg_a, f.V));
    rp_reuse_free(full);
    /* static full: the same computation in padded calls of L_P rows */
    full = rp_test_engine(&f, RP_REUSE_FULL, 0.25f, true);
    rp_test_cache_docs(&f, full, r.docs, f.lg_b);
    assert_int_equal(rp_reuse_prefill(full, f.ctx, f.kv, r.p, r.n, r.bnd, r.nb, f.lg_b, &st), RP_OK);
    print_message("  full (static): calls %d, pad rows %d, max |logit diff| vs dynamic %g\n", st.n_calls, st.n_pad,
                  rp_test_max_diff(f.lg_a, f.lg_b, f.V));
    assert_int_equal(st.n_calls, 1);
    assert_int_equal(st.n_pad, 32 - 4);   /* the 4 new tail tokens in one L_P = 32 call */
    assert_int_equal(f.kv->n, r.n);
    assert_true(rp_test_max_diff(f.lg_a, f.lg_b, f.V) <= 1e-4f);
    rp_reuse_free(full);
    for (int stat = 0; stat < 2; stat++) {
        rp_reuse *e = rp_test_engine(&f, RP_REUSE_BLEND, 0.25f, stat);
        rp_test_cache_docs(&f, e, r.docs, f.lg_a);
        uint8_t mark[512];
        memset(mark, 7, sizeof mark);
        if (stat) check_static_accounting(&f, e, r.p, r.n, r.bnd, r.nb, &st, mark);
        else {
            rp_reuse_trace_selection(e, mark);
            assert_int_equal(rp_reuse_prefill(e, f.ctx, f.kv, r.p, r.n, r.bnd, r.nb, f.lg_a, &st), RP_OK);
            rp_reuse_trace_selection(e, NULL);
        }
        /* the traced selection: exactly the recomputed reused tokens, none in the prefix or the new tail */
        int32_t n_marked = 0;
        for (int32_t t = 0; t < r.n; t++) {
            assert_true(mark[t] <= 1);
            n_marked += mark[t];
            if (t < st.n_prefix || t >= r.n - 4) assert_int_equal(mark[t], 0);
        }
        assert_int_equal(n_marked, st.n_recomputed);
        const double kl = kl_logits(exact, f.lg_a, f.V);
        print_message("  blend%s: prefix %d, non-prefix %d, recomputed %d, new %d, calls %d, pad rows %d, KL vs exact %.2e, "
                      "max |logit diff| %g\n", stat ? " (static)" : "", st.n_prefix, st.n_nonprefix, st.n_recomputed,
                      st.n_new, st.n_calls, st.n_pad, kl, rp_test_max_diff(exact, f.lg_a, f.V));
        assert_int_equal(st.n_new, 4);
        assert_int_equal(st.n_nonprefix, 160);
        if (!stat) assert_int_equal(st.n_recomputed, 40);   /* ceil(0.25 * 160) */
        else assert_int_equal(st.n_recomputed, 44);   /* 3 recompute calls of k = 16 rows: 16 + 16 + (16 - 4 new) */
        assert_int_equal(f.kv->n, r.n);   /* padding cells were released */
        /* close to exact: about 3x the KL measured here. Not compared with full's
         * (1.3e-2 on this one next token; blend's advantage is an average over
         * many prompts and tokens, which bench fidelity measures) */
        assert_true(kl < KL_BOUND);
        assert_int_equal(rp_test_argmax(f.lg_a, f.V), rp_test_argmax(exact, f.V));
        rp_reuse_free(e);
    }
    /* static, a prompt ending in 70 new tokens (more than recompute calls can carry): prefill calls join in */
    rp_reuse *e = rp_test_engine(&f, RP_REUSE_BLEND, 0.25f, true);
    rp_test_cache_docs(&f, e, r.docs, f.lg_a);
    rp_token p2[512];
    int32_t b2[16], nb2;
    rp_token tail[70];
    for (int i = 0; i < 70; i++) tail[i] = 259 + (rp_token)((i * 37) % 250);   /* stories vocab: 512 */
    static const int order2[] = {4, 1, 5};
    const int32_t n2 = rp_test_build(r.docs, order2, 3, tail, 70, p2, b2, &nb2);
    uint8_t mark[512];
    const int32_t np = check_static_accounting(&f, e, p2, n2, b2, nb2, &st, mark);
    assert_true(np > 0);
    assert_int_equal(st.n_new, 70);
    /* the cached prefix and the 70 new tokens only: three prefill calls, the last one padded (70 = 32 + 32 + 6) */
    static const int order3[] = {4};
    const int32_t n3 = rp_test_build(r.docs, order3, 1, tail, 70, p2, b2, &nb2);
    assert_int_equal(check_static_accounting(&f, e, p2, n3, b2, nb2, &st, mark), 3);
    assert_int_equal(st.n_pad, 32 - 6);
    assert_int_equal(st.n_recomputed, 0);
    rp_reuse_free(e);
    free(exact);
    rp_test_fixture_close(&f);
}

/* Chunk-pad-mask (static selective recompute): with a budget of 2, padding
 * rows whose cells hold large garbage (they would top any ranking) are never
 * selected, the final row (a REUSED token) always is, the two perturbed rows
 * are the ones picked, and with fixed_rows the call is topped up with padding
 * to exactly that many rows without changing the final logits. */
static void test_static_pad_mask(void **state) {
    (void)state;
    OPEN_STORIES(f, RP_TYPE_F32);
    enum { N = 48, A = 8, PADS = 24, BUDGET = 2, FIXED = 8 };
    rp_token docs[1][40], p[N];
    rp_test_make_docs(docs, 1, 12345);
    p[0] = 1;
    for (int i = 1; i < N; i++) p[i] = docs[0][(i - 1) % 40];
    rp_reuse *none = rp_test_engine(&f, RP_REUSE_NONE, 0, false);
    rp_batch b;
    assert_int_equal(rp_batch_init(&b, N + PADS), RP_OK);
    uint8_t kinds[N + PADS];
    const int32_t kd = f.kv->kv_dim, nl = f.m->hp.n_layer;
    float *row = malloc(sizeof(float) * (size_t)kd);
    int32_t kept_real[2][N];
    int32_t n_kept_real[2] = {0, 0};
    /* every selection rule keeps padding out and the final row in; the
     * deviation-only rule (CacheBlend's) must pick exactly the nudged rows */
    const rp_select_kind sels[3] = {RP_SELECT_DEV, RP_SELECT_ATTN, RP_SELECT_HYBRID};
    for (int si = 0; si < 3; si++)
    for (int fixed = 0; fixed < 2; fixed++) {
        n_kept_real[fixed] = 0;
        rp_reuse_stats rst;
        /* exact KV in cells 0..N-1: every reuse row deviates ~0 ... */
        assert_int_equal(rp_reuse_prefill(none, f.ctx, f.kv, p, N, NULL, 0, f.lg_a, &rst), RP_OK);
        assert_int_equal(f.kv->n, N);
        /* ... except cells 13 and 29, nudged at the check layer (1) */
        const int32_t nudged[2] = {13, 29};
        for (int k = 0; k < 2; k++) {
            rp_kv_load_row(f.kv, RP_KV_K, 1, nudged[k], row);
            for (int32_t i = 0; i < kd; i++) row[i] += 0.5f * (float)((i % 7) - 3);
            rp_kv_store_row(f.kv, RP_KV_K, 1, nudged[k], row);
        }
        /* padding cells past the prompt: garbage of huge deviation at every layer */
        for (int32_t c = N; c < N + PADS; c++)
            for (int32_t l = 0; l < nl; l++) {
                for (int32_t i = 0; i < kd; i++) row[i] = (float)(1000 * ((c + i + l) % 5) - 2000);
                rp_kv_store_row(f.kv, RP_KV_K, l, c, row);
                rp_kv_store_row(f.kv, RP_KV_V, l, c, row);
            }
        rp_batch_clear(&b);
        for (int32_t t = A; t < N; t++) {
            kinds[b.n] = RP_ROW_REUSE;   /* the final token too */
            assert_int_equal(rp_batch_add(&b, p[t], 0, t, t, t == N - 1), RP_OK);
        }
        for (int32_t j = 0; j < PADS; j++) {
            kinds[b.n] = RP_ROW_PAD;
            assert_int_equal(rp_batch_add(&b, 0, 0, N + j, N + j, false), RP_OK);
        }
        rp_blend_params bp = rp_blend_default_params();
        bp.fixed_rows = fixed ? FIXED : 0;
        bp.select = sels[si];
        rp_blend_ws ws;
        assert_int_equal(rp_blend_ws_init(&ws, N + PADS, N + PADS, f.m->hp.n_head, kd), RP_OK);
        rp_blend_stats bs;
        assert_int_equal(rp_blend_run(f.ctx, f.kv, &b, kinds, BUDGET, &bp, &ws, &bs), RP_OK);
        rp_kv_truncate(f.kv, N);
        rp_blend_ws_free(&ws);
        assert_int_equal(bs.n_pad, PADS);
        assert_int_equal(bs.n_selected, BUDGET);
        assert_int_equal(bs.n_forced, 1);   /* the final (reused) token */
        /* survivors, in row order: the two nudged cells, the final one, then filler padding */
        int32_t n_pad_rows = 0;
        for (int32_t i = 0; i < b.n; i++) {
            if (b.cell[i] >= N) n_pad_rows++;
            else kept_real[fixed][n_kept_real[fixed]++] = b.cell[i];
        }
        assert_int_equal(n_kept_real[fixed], BUDGET + 1);
        if (sels[si] == RP_SELECT_DEV) {
            assert_int_equal(kept_real[fixed][0], 13);
            assert_int_equal(kept_real[fixed][1], 29);
        }
        assert_true(kept_real[fixed][1] < N - 1);
        assert_int_equal(kept_real[fixed][2], N - 1);
        assert_true(b.logits[BUDGET]);
        assert_int_equal(n_pad_rows, fixed ? FIXED - BUDGET - 1 : 0);
        assert_int_equal(bs.n_pad_kept, n_pad_rows);
        assert_int_equal(b.n, fixed ? FIXED : BUDGET + 1);
        memcpy(fixed ? f.lg_b : f.lg_a, rp_ctx_logits(f.ctx, 0), sizeof(float) * (size_t)f.V);
        /* filler padding sits past every real position: the final logits do not move */
        if (fixed) assert_memory_equal(f.lg_a, f.lg_b, sizeof(float) * (size_t)f.V);
    }
    for (int32_t i = 0; i < f.V; i++) assert_true(isfinite(f.lg_a[i]));
    free(row);
    rp_batch_free(&b);
    rp_reuse_free(none);
    rp_test_fixture_close(&f);
}

/* An engine with params `rp` whose cache has the persistent store in `dir`
 * (opened with `sp`) attached as the flash tier of a pool with params `pp`. */
static rp_reuse *engine_on_store(rp_test_fixture *f, rp_reuse_params rp, const rp_store_params *sp,
                                 const rp_pool_params *pp, const char *dir) {
    rp_reuse *e = NULL;
    assert_int_equal(rp_reuse_create(f->m, f->kv->type, 1024, rp, &e), RP_OK);
    rp_store *store = NULL;
    assert_int_equal(rp_store_open(dir, sp, &store), RP_OK);
    assert_int_equal(rp_chunk_cache_attach_store(rp_reuse_cache(e), store, rp_reuse_salt(e), "stories", pp), RP_OK);
    return e;
}

/* An engine (blend, ratio r, sub-chunk search from `subchunk_min` tokens; 0:
 * off) whose cache has a persistent store in `dir` attached. */
static rp_reuse *store_engine(rp_test_fixture *f, float r, int32_t subchunk_min, const char *dir) {
    rp_reuse_params rp = rp_reuse_default_params();
    rp.ratio = r;
    rp.subchunk_min = subchunk_min;
    const rp_store_params sp = rp_store_default_params();
    const rp_pool_params pp = rp_pool_default_params();
    return engine_on_store(f, rp, &sp, &pp, dir);
}

static void remove_dir(const char *dir) {
    char cmd[1100];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

/* The caller's dense vectors through the engine: a document cached on flash
 * gets its vector (rp_reuse_put_vector); a prompt sharing only a short run of
 * it (12 tokens, search minimum 10) finds that run once the query vector
 * points at the document (rp_reuse_set_query_vector), and the result at r = 1
 * still equals prefill. Unknown tokens are NOT_FOUND. */
static void test_query_vector(void **state) {
    (void)state;
    OPEN_STORIES(f, RP_TYPE_F32);
    rp_token docs[6][40], p[512];
    int32_t bnd[16], nb;
    rp_test_make_docs(docs, 6, 12345);
    char dir[] = "/tmp/rp-qvec-XXXXXX";
    assert_non_null(mkdtemp(dir));
    rp_reuse *none = rp_test_engine(&f, RP_REUSE_NONE, 0, false), *e = store_engine(&f, 1.0f, 10, dir);
    rp_reuse_stats st;
    const int one[] = {2};
    int32_t n = rp_test_build(docs, one, 1, NULL, 0, p, bnd, &nb);
    assert_int_equal(rp_reuse_prefill(e, f.ctx, f.kv, p, n, bnd, nb, f.lg_a, &st), RP_OK);
    assert_int_equal(rp_reuse_commit(e, f.kv), RP_OK);
    const float vdoc[4] = {0, 1, 0, 0}, vq[4] = {0.1f, 1, 0, 0};
    assert_int_equal(rp_reuse_put_vector(e, docs[2], 40, vdoc, 4), RP_OK);
    assert_int_equal(rp_reuse_put_vector(e, docs[3], 40, vdoc, 4), RP_ERR_NOT_FOUND);
    assert_int_equal(rp_chunk_cache_flush(rp_reuse_cache(e)), RP_OK);
    /* BOS + one segment: 30 tokens of doc 0, 12 of doc 2, 6 more. The 12 are a run of doc 2 that shares no
     * keyword with the stored chunk: keywords are salted per model (its fingerprint), so which runs share one
     * changes with the model; the first offset whose run the keyword search alone misses is taken. */
    int32_t b1[1] = {1};
    int32_t found[2] = {-1, -1}, off = -1;
    for (int32_t o = 0; o + 12 <= 40 && off < 0; o++) {
        n = 0;
        p[n++] = 1;
        memcpy(p + n, docs[0], sizeof(rp_token) * 30);
        n += 30;
        memcpy(p + n, docs[2] + o, sizeof(rp_token) * 12);
        n += 12;
        for (int i = 0; i < 6; i++) p[n++] = (rp_token)(300 + i);
        rp_reuse_set_query_vector(e, NULL, 4);
        assert_int_equal(rp_reuse_prefill(e, f.ctx, f.kv, p, n, b1, 1, f.lg_a, &st), RP_OK);
        if (st.n_subchunk == 0) off = o;
    }
    assert_true(off >= 0);   /* else every run of doc 2 shares a keyword: the test proves nothing */
    for (int with = 0; with < 2; with++) {
        rp_reuse_set_query_vector(e, with ? vq : NULL, 4);
        assert_int_equal(rp_reuse_prefill(e, f.ctx, f.kv, p, n, b1, 1, f.lg_a, &st), RP_OK);
        found[with] = st.n_subchunk;
        print_message("  query vector %s: sub-chunk tokens reused %d (doc 2's run at %d)\n", with ? "set" : "unset",
                      st.n_subchunk, off);
    }
    assert_int_equal(found[0], 0);    /* keywords alone miss it */
    assert_int_equal(found[1], 12);   /* the vector brings the document in, the LCS pass finds the run */
    assert_int_equal(rp_reuse_prefill(none, f.ctx, f.kv, p, n, b1, 1, f.lg_b, &st), RP_OK);
    assert_true(rp_test_max_diff(f.lg_a, f.lg_b, f.V) <= 1e-4f);
    rp_reuse_free(e);
    rp_reuse_free(none);
    remove_dir(dir);
    rp_test_fixture_close(&f);
}

/* A call with no row that attends (no new row, no final row: an early window
 * of a long prompt) gives the attention-weighted rules nothing to weigh by:
 * they must fall back to the deviation ranking, not to row order. And with a
 * query row present, the attention-weighted rule must rank differently from
 * the deviation rule on a real prompt (else the weighting would be inert). */
static void test_select_fallback(void **state) {
    (void)state;
    OPEN_STORIES(f, RP_TYPE_F32);
    enum { N = 96, A = 8, BUDGET = 12 };
    rp_token docs[1][40], p[N];
    rp_test_make_docs(docs, 1, 12345);
    p[0] = 1;
    for (int i = 1; i < N; i++) p[i] = docs[0][(i * 7) % 40];
    rp_reuse *none = rp_test_engine(&f, RP_REUSE_NONE, 0, false);
    rp_batch b;
    assert_int_equal(rp_batch_init(&b, N), RP_OK);
    uint8_t kinds[N];
    const int32_t kd = f.kv->kv_dim;
    float *row = malloc(sizeof(float) * (size_t)kd);
    int32_t kept[2][3][N];   /* [with final row][rule][cells] */
    const rp_select_kind sels[3] = {RP_SELECT_DEV, RP_SELECT_ATTN, RP_SELECT_HYBRID};
    for (int with_final = 0; with_final < 2; with_final++)
        for (int si = 0; si < 3; si++) {
            rp_reuse_stats rst;
            assert_int_equal(rp_reuse_prefill(none, f.ctx, f.kv, p, N, NULL, 0, f.lg_a, &rst), RP_OK);
            /* stale KV at the check layer: a different, deterministic nudge per cell */
            for (int32_t t = A; t < N; t++) {
                rp_kv_load_row(f.kv, RP_KV_K, 1, t, row);
                for (int32_t i = 0; i < kd; i++) row[i] += 0.05f * (float)(((t * 31 + i * 7) % 11) - 5);
                rp_kv_store_row(f.kv, RP_KV_K, 1, t, row);
            }
            rp_batch_clear(&b);
            for (int32_t t = A; t < N; t++) {
                kinds[b.n] = RP_ROW_REUSE;
                assert_int_equal(rp_batch_add(&b, p[t], 0, t, t, with_final && t == N - 1), RP_OK);
            }
            rp_blend_params bp = rp_blend_default_params();
            bp.select = sels[si];
            rp_blend_ws ws;
            assert_int_equal(rp_blend_ws_init(&ws, N, N, f.m->hp.n_head, kd), RP_OK);
            rp_blend_stats bs;
            assert_int_equal(rp_blend_run(f.ctx, f.kv, &b, kinds, BUDGET, &bp, &ws, &bs), RP_OK);
            rp_blend_ws_free(&ws);
            assert_int_equal(bs.n_selected, BUDGET);
            assert_int_equal(b.n, BUDGET + with_final);
            for (int32_t i = 0; i < N; i++) kept[with_final][si][i] = 0;
            for (int32_t i = 0; i < b.n; i++) kept[with_final][si][b.cell[i]] = 1;
        }
    /* no query row: every rule picks what the deviation rule picks */
    assert_memory_equal(kept[0][0], kept[0][1], sizeof kept[0][0]);
    assert_memory_equal(kept[0][0], kept[0][2], sizeof kept[0][0]);
    /* with the final row attending: the weighted rules choose differently */
    assert_memory_not_equal(kept[1][0], kept[1][1], sizeof kept[1][0]);
    free(row);
    rp_batch_free(&b);
    rp_reuse_free(none);
    rp_test_fixture_close(&f);
}

/* Sub-chunk reuse: a document cached on flash as one chunk is found inside a
 * prompt chunk that also holds other text (keywords + LCS), confirmed token by
 * token and reused re-rotated; at r = 1 the result equals exact prefill, and
 * with the search off nothing is reused. */
static void test_subchunk_reuse(void **state) {
    (void)state;
    OPEN_STORIES(f, RP_TYPE_F32);
    rp_token docs[6][40], p[512];
    int32_t bnd[16], nb;
    rp_test_make_docs(docs, 6, 12345);
    char dir[] = "/tmp/rp-subchunk-XXXXXX";
    assert_non_null(mkdtemp(dir));
    rp_reuse *none = rp_test_engine(&f, RP_REUSE_NONE, 0, false);
    for (int on = 1; on >= 0; on--) {
        rp_reuse *e = store_engine(&f, 1.0f, on ? 24 : 0, dir);
        rp_reuse_stats st;
        if (on) {   /* cache doc 2 after BOS as its own chunk, then persist it */
            const int one[] = {2};
            int32_t n = rp_test_build(docs, one, 1, NULL, 0, p, bnd, &nb);
            assert_int_equal(rp_reuse_prefill(e, f.ctx, f.kv, p, n, bnd, nb, f.lg_a, &st), RP_OK);
            assert_int_equal(rp_reuse_commit(e, f.kv), RP_OK);
            assert_int_equal(rp_chunk_cache_flush(rp_reuse_cache(e)), RP_OK);
        }
        /* BOS + one caller segment holding 12 tokens of doc 0 then all of doc 2 then a tail:
         * no whole chunk matches, but doc 2's 40 tokens sit inside the prompt's chunk */
        int32_t n = 0;
        p[n++] = 1;
        memcpy(p + n, docs[0], sizeof(rp_token) * 12);
        n += 12;
        memcpy(p + n, docs[2], sizeof(rp_token) * 40);
        n += 40;
        for (int i = 0; i < 6; i++) p[n++] = (rp_token)(300 + i);
        int32_t b1[1] = {1};
        assert_int_equal(rp_reuse_prefill(e, f.ctx, f.kv, p, n, b1, 1, f.lg_a, &st), RP_OK);
        print_message("  sub-chunk search %s: non-prefix %d (sub-chunk %d), new %d\n", on ? "on" : "off", st.n_nonprefix,
                      st.n_subchunk, st.n_new);
        if (on) {
            assert_int_equal(st.n_subchunk, 40);
            assert_int_equal(st.n_nonprefix, 40);
            assert_int_equal(st.n_new, n - 1 - 40);
        } else {
            assert_int_equal(st.n_subchunk, 0);
        }
        assert_int_equal(rp_reuse_prefill(none, f.ctx, f.kv, p, n, b1, 1, f.lg_b, &st), RP_OK);
        float d = rp_test_max_diff(f.lg_a, f.lg_b, f.V);
        print_message("  r=1 with sub-chunk reuse vs prefill: max |logit diff| %g\n", d);
        assert_true(d <= 1e-4f);
        rp_reuse_free(e);
    }
    rp_reuse_free(none);
    remove_dir(dir);
    rp_test_fixture_close(&f);
}

/* The load pipeline (loader thread placing KV layer by layer while compute
 * runs) gives bit-identical results to placing everything first. */
static void test_pipeline_equivalence(void **state) {
    (void)state;
    OPEN_STORIES(f, RP_TYPE_F16);
    reordered_prompt r;
    make_reordered(&r);
    float *out[2] = {f.lg_a, f.lg_b};
    for (int pipe = 0; pipe < 2; pipe++) {
        rp_reuse_params pp = rp_reuse_default_params();
        pp.pipeline = pipe;
        rp_reuse *e = NULL;
        assert_int_equal(rp_reuse_create(f.m, f.kv->type, 1024, pp, &e), RP_OK);
        rp_reuse_stats st;
        rp_test_cache_docs(&f, e, r.docs, out[pipe]);
        assert_int_equal(rp_reuse_prefill(e, f.ctx, f.kv, r.p, r.n, r.bnd, r.nb, out[pipe], &st), RP_OK);
        print_message("  pipeline %s: %llu bytes placed, load %.3f ms, exposed %.3f ms\n", pipe ? "on" : "off",
                      (unsigned long long)st.bytes_loaded, st.load_ms, st.load_exposed_ms);
        assert_true(st.bytes_loaded > 0);
        rp_reuse_free(e);
    }
    assert_memory_equal(f.lg_a, f.lg_b, sizeof(float) * (size_t)f.V);
    rp_test_fixture_close(&f);
}

/* The load pipeline overlaps placing cached KV with compute: the engine's
 * loader places every chunk's layer l before any layer l + 1, and compute at
 * layer l waits only for layer l (rp_reuse_stats: load_ms = the loader's busy
 * time, load_exposed_ms = compute's wait for it). Checked without timing: the
 * loader is held after layer 0 (on_layer_placed) until compute has begun
 * layer 1 — which it can only do if layer 0 alone let it through — with a
 * 20 s limit that a pipeline placing all layers before compute starts would
 * hit. Without the pipeline all of the load is exposed (exposed == load,
 * exactly); with it the same bytes are placed and the logits are
 * bit-identical. 520 reused tokens of a synthetic 4-layer model come from
 * flash (a cold pool read layer by layer, as `reprise run --cache-dir` does).
 * How much a pipeline hides is a benchmark's job: the "81 % hidden" of
 * bench/RESULTS.md is `bench ablation`'s full vs no-pipeline rows. */
typedef struct overlap_probe {
    rp_reuse *e;
    bool armed;
    int held;         /* times layer 0 was held until compute began layer 1 */
    int overtaken;    /* ... and compute did */
} overlap_probe;

static void probe_layer_placed(void *user, int32_t layer) {
    overlap_probe *pr = user;
    if (!pr->armed || layer != 0) return;
    pr->held++;
    const struct timespec nap = {0, 200000};
    for (int i = 0; i < 100000 && rp_reuse_compute_layer(pr->e) < 1; i++) nanosleep(&nap, NULL);
    pr->overtaken += rp_reuse_compute_layer(pr->e) >= 1;
}

/* A fresh engine over the store in `dir` whose RAM pool starts cold (no
 * prefetch), so every reused chunk is a flash hit read layer by layer by the
 * pool's loader thread (async_load, as `reprise run` / `serve` do). */
static rp_reuse *cold_store_engine(rp_test_fixture *f, const char *dir, bool pipeline, void *probe) {
    rp_reuse_params rp = rp_reuse_default_params();
    rp.pipeline = pipeline;
    if (probe) {
        rp.on_layer_placed = probe_layer_placed;
        rp.on_layer_placed_user = probe;
    }
    const rp_store_params sp = rp_store_default_params();
    rp_pool_params pp = rp_pool_default_params();
    pp.async_load = true;
    pp.no_prefetch = true;
    return engine_on_store(f, rp, &sp, &pp, dir);
}

static void test_pipeline_flash(void **state) {
    (void)state;
    char q[512], dir[512];
    snprintf(q, sizeof q, "%s/pipe-tiny.gguf", rp_test_tmpdir());
    snprintf(dir, sizeof dir, "%s/pipe-store", rp_test_tmpdir());
    rp_synth_params sp = rp_synth_default_params();   /* llama "tiny": 4 layers, KV rows 128 wide */
    assert_int_equal(rp_synth_write(&sp, q), RP_OK);
    rp_test_fixture f;
    assert_true(rp_test_fixture_open(&f, q, RP_TYPE_F16, 1024));
    rp_token docs[6][40];
    rp_test_make_docs(docs, 6, 12345);
    enum { ND = 14 };
    rp_token p[1024];
    int32_t bnd[64], nb;
    int order[ND];
    for (int i = 0; i < ND; i++) order[i] = 1 + i % 5;   /* the first document is a cached prefix, the rest re-rotated */
    static const rp_token tail[] = {300, 301, 302, 303};
    const int32_t n = rp_test_build(docs, order, ND, tail, 4, p, bnd, &nb);
    overlap_probe pr = {0};
    rp_reuse *w = cold_store_engine(&f, dir, true, NULL);   /* the documents, on flash */
    rp_test_cache_docs(&f, w, docs, f.lg_a);
    assert_int_equal(rp_chunk_cache_flush(rp_reuse_cache(w)), RP_OK);
    rp_reuse_free(w);
    rp_reuse_stats st[2];
    for (int pipe = 0; pipe < 2; pipe++) {
        rp_reuse *e = cold_store_engine(&f, dir, pipe, &pr);
        pr.e = e;
        pr.armed = true;
        assert_int_equal(rp_reuse_prefill(e, f.ctx, f.kv, p, n, bnd, nb, pipe ? f.lg_b : f.lg_a, &st[pipe]), RP_OK);
        pr.armed = false;
        rp_reuse_free(e);
        const rp_reuse_stats *s = &st[pipe];
        print_message("  pipeline %s: %llu bytes placed, load %.3f ms, exposed %.3f ms, compute %.3f ms\n",
                      pipe ? "on" : "off", (unsigned long long)s->bytes_loaded, s->load_ms, s->load_exposed_ms,
                      s->compute_ms);
        assert_int_equal(s->n_nonprefix, (ND - 1) * 40);
        assert_true(s->bytes_loaded > 0 && s->load_ms > 0);
        if (!pipe) assert_true(s->load_exposed_ms == s->load_ms);   /* nothing overlaps: every load is waited for */
    }
    assert_int_equal(pr.held, 1);       /* the pipelined prefill's loader, once */
    assert_int_equal(pr.overtaken, 1);  /* compute ran layer 0 while layers 1.. were not placed */
    assert_true(st[0].bytes_loaded == st[1].bytes_loaded);
    assert_memory_equal(f.lg_a, f.lg_b, sizeof(float) * (size_t)f.V);
    rp_test_fixture_close(&f);
    remove(q);
    remove_dir(dir);
}


/* A prompt computed elsewhere (a plain forward, as the scheduler's batch
 * does) and cached with rp_reuse_commit_computed: exact chunks serve prefix
 * reuse with the logits of a full prefill; chunks marked approximate serve
 * full / blend but never prefix mode; an already cached path is not duplicated. */
static void test_commit_computed(void **state) {
    (void)state;
    OPEN_STORIES(f, RP_TYPE_F16);
    extending_pair x;
    make_extending(&x);
    rp_batch b;
    assert_int_equal(rp_batch_init(&b, 512), RP_OK);
    for (int pass = 0; pass < 2; pass++) {
        const bool exact = pass == 0;
        rp_reuse *pre = rp_test_engine(&f, RP_REUSE_PREFIX, 0, false);
        rp_reuse *none = rp_test_engine(&f, RP_REUSE_NONE, 0, false);
        rp_reuse *full = rp_test_engine(&f, RP_REUSE_FULL, 0, false);
        /* x.p1 computed by a plain forward, then cached from the KV it left */
        rp_kv_clear(f.kv);
        rp_batch_clear(&b);
        for (int32_t i = 0; i < x.n1; i++) assert_int_equal(rp_batch_add(&b, x.p1[i], 0, i, i, i == x.n1 - 1), RP_OK);
        assert_int_equal(rp_forward(f.ctx, &b, &f.kv, 1), RP_OK);
        assert_int_equal(rp_reuse_commit_computed(pre, f.kv, x.p1, x.n1, x.b1, x.nb1, exact), RP_OK);
        assert_int_equal(rp_reuse_commit_computed(full, f.kv, x.p1, x.n1, x.b1, x.nb1, exact), RP_OK);
        const uint64_t inserted = rp_chunk_cache_stats(rp_reuse_cache(pre)).inserts;
        assert_true(inserted >= 3);
        /* again: the path is refreshed, nothing inserted twice */
        assert_int_equal(rp_reuse_commit_computed(pre, f.kv, x.p1, x.n1, x.b1, x.nb1, exact), RP_OK);
        assert_int_equal(rp_chunk_cache_stats(rp_reuse_cache(pre)).inserts, inserted);
        /* mode none never writes the cache */
        assert_int_equal(rp_reuse_commit_computed(none, f.kv, x.p1, x.n1, x.b1, x.nb1, exact), RP_OK);
        assert_int_equal(rp_chunk_cache_stats(rp_reuse_cache(none)).inserts, 0);
        /* a prompt extending x.p1 */
        rp_reuse_stats st;
        assert_int_equal(rp_reuse_prefill(none, f.ctx, f.kv, x.p2, x.n2, x.b2, x.nb2, f.lg_b, &st), RP_OK);
        assert_int_equal(rp_reuse_prefill(pre, f.ctx, f.kv, x.p2, x.n2, x.b2, x.nb2, f.lg_a, &st), RP_OK);
        print_message("  commit_computed (%s): prefix mode reused %d of %d tokens\n", exact ? "exact" : "approximate",
                      st.n_prefix, x.n2);
        if (exact) {
            assert_int_equal(st.n_prefix, x.n1);
            assert_true(rp_test_max_diff(f.lg_a, f.lg_b, f.V) <= 1e-5f);
        } else {
            assert_true(st.n_prefix <= 1);   /* approximate chunks are not prefix-reusable (BOS may be exact) */
        }
        assert_int_equal(rp_reuse_prefill(full, f.ctx, f.kv, x.p2, x.n2, x.b2, x.nb2, f.lg_a, &st), RP_OK);
        assert_true(st.n_prefix + st.n_nonprefix >= x.n1 - 1);   /* full takes either kind */
        /* more tokens than the KV holds: refused */
        rp_kv_truncate(f.kv, 10);
        assert_int_equal(rp_reuse_commit_computed(pre, f.kv, x.p1, x.n1, x.b1, x.nb1, exact), RP_ERR_RANGE);
        rp_reuse_free(pre);
        rp_reuse_free(none);
        rp_reuse_free(full);
    }
    rp_batch_free(&b);
    rp_test_fixture_close(&f);
}

/* Copies file `src` to `dst`, then overwrites the bytes at the first
 * occurrence of `find` (n_find bytes) + skip with `with` (n_with bytes). */
static void patch_copy(const char *src, const char *dst, const void *find, size_t n_find, size_t skip, const void *with,
                       size_t n_with) {
    size_t len = 0;
    char *buf = rp_test_read_file(src, &len);
    assert_non_null(buf);
    char *at = memmem(buf, len, find, n_find);
    assert_non_null(at);
    assert_true((size_t)(at - buf) + skip + n_with <= len);
    memcpy(at + skip, with, n_with);
    FILE *f = fopen(dst, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(buf, 1, len, f), len);
    fclose(f);
    free(buf);
}

static uint64_t salt_of(const char *path, rp_type kv_type) {
    rp_model *m = NULL;
    assert_int_equal(rp_model_load(path, rp_model_default_params(), &m), RP_OK);
    rp_reuse *e = NULL;
    assert_int_equal(rp_reuse_create(m, kv_type, 64, rp_reuse_default_params(), &e), RP_OK);
    const uint64_t s = rp_reuse_salt(e);
    rp_reuse_free(e);
    rp_model_free(m);
    return s;
}

/* The reuse salt (chunk hashes, cache keys) is the model fingerprint and the
 * KV type: equal for an identical model file, different for another KV type,
 * another RoPE theta, another llama3 scaling factor, and one changed weight
 * byte anywhere (the digest covers every weight byte, not a sample). */
static void test_salt(void **state) {
    (void)state;
    char a[512], b[512], c[512];
    snprintf(a, sizeof a, "%s/salt-a.gguf", rp_test_tmpdir());
    snprintf(b, sizeof b, "%s/salt-b.gguf", rp_test_tmpdir());
    snprintf(c, sizeof c, "%s/salt-c.gguf", rp_test_tmpdir());
    rp_synth_params sp = rp_synth_default_params();
    sp.preset = "tiny-llama3";
    sp.type = "q8_0";
    assert_int_equal(rp_synth_write(&sp, a), RP_OK);
    assert_int_equal(rp_synth_write(&sp, b), RP_OK);
    const uint64_t s0 = salt_of(a, RP_TYPE_F16);
    assert_int_equal(salt_of(b, RP_TYPE_F16), s0);        /* an identical model */
    assert_int_equal(salt_of(a, RP_TYPE_F16), s0);        /* and a reload */
    assert_true(salt_of(a, RP_TYPE_Q8_0) != s0);          /* KV type */
    assert_true(salt_of(a, RP_TYPE_F32) != s0);
    /* RoPE theta: llama.rope.freq_base's f32 value follows the key and a u32 type tag */
    const char key[] = "llama.rope.freq_base";
    const float theta = 250000.0f;
    patch_copy(a, c, key, sizeof key - 1, sizeof key - 1 + 4, &theta, sizeof theta);
    assert_true(salt_of(c, RP_TYPE_F16) != s0);
    /* located through the loaded model: rope_freqs (llama3 scaling factors), a weight in the middle of a tensor */
    rp_model *m = NULL;
    assert_int_equal(rp_model_load(a, rp_model_default_params(), &m), RP_OK);
    const rp_gguf_tensor *rf = rp_gguf_find_tensor(m->gguf, "rope_freqs.weight");
    const rp_gguf_tensor *wq = rp_gguf_find_tensor(m->gguf, "blk.2.attn_q.weight");
    assert_non_null(rf);
    assert_non_null(wq);
    unsigned char rf_head[64], wq_mid[64];
    memcpy(rf_head, rf->data, sizeof rf_head);
    const size_t mid = (size_t)(wq->nbytes / 2) + 1000;   /* away from any 4 KiB-per-MiB sample window */
    memcpy(wq_mid, (const unsigned char *)wq->data + mid, sizeof wq_mid);
    rp_model_free(m);
    float factors[16];   /* a different scaling: every factor halved */
    memcpy(factors, rf_head, sizeof factors);
    for (int i = 0; i < 16; i++) factors[i] *= 0.5f;
    patch_copy(a, c, rf_head, sizeof rf_head, 0, factors, sizeof factors);
    assert_true(salt_of(c, RP_TYPE_F16) != s0);
    unsigned char one = wq_mid[37] ^ 0x01;   /* one quant byte, one bit */
    patch_copy(a, c, wq_mid, sizeof wq_mid, 37, &one, 1);
    assert_true(salt_of(c, RP_TYPE_F16) != s0);
    remove(a);
    remove(b);
    remove(c);
}

/* Payloads that fail to load are never used. Five prompts share their first
 * 24 tokens (one chunk each, then two more); after their payload files are
 * deleted, prefix reuse of the first meets its own chunks failing, then, one
 * attempt after another, each sibling the partial-match lookup offers (their
 * heads match the prompt's). Every failed attempt is thrown away and excludes
 * the chunk that failed; the last one computes with no lookups. The logits
 * equal a plain prefill's, the failures are counted, the failed rows are gone
 * from the store, and the recomputed chunks are cached and reused exactly
 * (KV from a batch of 90 rows and the last row alone differ in summation
 * order only: <= 1.4e-5 at AVX-512; a damaged chunk would be off by ~1). */
static void test_damaged_payloads(void **state) {
    (void)state;
    OPEN_STORIES(f, RP_TYPE_F16);
    char dir[200];
    snprintf(dir, sizeof dir, "%.150s/damaged-store", rp_test_tmpdir());
    remove_dir(dir);
    enum { NS = 5, LEN = 90 };
    rp_token p[NS][LEN];
    const int32_t bnd[2] = {30, 60};
    for (int k = 0; k < NS; k++)
        for (int32_t t = 0; t < LEN; t++) p[k][t] = (rp_token)(t == 0 ? 1 : t < 24 ? 100 + t : 200 + (t * 7 + k * 31) % 250);
    rp_reuse_params rp = rp_reuse_default_params();
    rp.mode = RP_REUSE_PREFIX;
    rp_pool_params pp = rp_pool_default_params();
    pp.async_load = true;   /* loads run beside compute: failures surface while the prefill places the KV */
    pp.no_prefetch = true;  /* no warm start: the engine meets the damage itself */
    rp_store_params sp = rp_store_default_params();
    sp.payload = RP_PAYLOAD_FILE;
    rp_reuse_stats st;
    for (int round = 0; round < 2; round++) {
        rp_reuse *e = engine_on_store(&f, rp, &sp, &pp, dir);
        if (round == 0) {   /* the siblings, most recent last: prompt 0 is the oldest */
            for (int k = NS - 1; k >= 0; k--) {
                assert_int_equal(rp_reuse_prefill(e, f.ctx, f.kv, p[k], LEN, bnd, 2, f.lg_a, &st), RP_OK);
                assert_int_equal(rp_reuse_commit(e, f.kv), RP_OK);
            }
        } else {
            rp_reuse *none = rp_test_engine(&f, RP_REUSE_NONE, 0, false);
            assert_int_equal(rp_reuse_prefill(none, f.ctx, f.kv, p[0], LEN, bnd, 2, f.lg_b, &st), RP_OK);
            rp_reuse_free(none);
            assert_int_equal(rp_reuse_prefill(e, f.ctx, f.kv, p[0], LEN, bnd, 2, f.lg_a, &st), RP_OK);
            print_message("  damaged store: %d failed loads over %d attempts, %d prefix tokens reused\n", st.n_load_failed,
                          st.n_attempts, st.n_prefix);
            assert_true(rp_test_max_diff(f.lg_a, f.lg_b, f.V) == 0.0f);   /* both a plain prefill of the same batch */
            assert_true(st.n_load_failed >= NS);            /* its own chunk, then each sibling's head */
            assert_int_equal(st.n_attempts, 5);             /* 4 with lookups, the last without */
            assert_int_equal(st.n_prefix, 0);
            assert_int_equal(rp_reuse_commit(e, f.kv), RP_OK);
            const rp_cache_stats cs = rp_chunk_cache_stats(rp_reuse_cache(e));
            assert_true(cs.load_failures >= (uint64_t)NS);
            assert_true(cs.known_bad >= (uint64_t)NS);
            assert_int_equal(rp_chunk_cache_flush(rp_reuse_cache(e)), RP_OK);
            /* the recomputed prompt is cached again, exactly */
            rp_chunk_cache_clear(rp_reuse_cache(e));
            assert_int_equal(rp_reuse_prefill(e, f.ctx, f.kv, p[0], LEN, bnd, 2, f.lg_a, &st), RP_OK);
            assert_int_equal(st.n_load_failed, 0);
            assert_int_equal(st.n_attempts, 1);
            assert_int_equal(st.n_prefix, LEN - 1);
            assert_int_equal(st.n_prefix_exact, LEN - 1);
            print_message("  reused again: max |logit diff| vs prefill %g\n", rp_test_max_diff(f.lg_a, f.lg_b, f.V));
            assert_true(rp_test_max_diff(f.lg_a, f.lg_b, f.V) <= 5e-5f);
        }
        rp_reuse_free(e);   /* detaches: flushes and closes the store */
        if (round == 0) {
            char cmd[700];
            snprintf(cmd, sizeof cmd, "find '%s/kv' -name '*.kv' -delete", dir);
            assert_int_equal(system(cmd), 0);
        }
    }
    /* the rows that failed were deleted: what is left verifies */
    rp_store_params rsp = rp_store_default_params();
    rsp.read_only = true;
    rp_store *s = NULL;
    assert_int_equal(rp_store_open(dir, &rsp, &s), RP_OK);
    uint64_t ok = 0, bad = 0;
    assert_int_equal(rp_store_verify(s, false, NULL, NULL, &ok, &bad), RP_OK);
    print_message("  afterwards: %llu rows verify, %llu corrupt (siblings never offered)\n", (unsigned long long)ok,
                  (unsigned long long)bad);
    assert_true(ok >= 3);
    rp_store_close(s);
    remove_dir(dir);
    rp_test_fixture_close(&f);
}

/* Cache namespaces (rp_reuse_opts.ns): a prompt cached under one namespace
 * is invisible to calls under another — prefix, content, partial and
 * sub-chunk lookups alike — and fully reused under its own. */
static void test_namespaces(void **state) {
    (void)state;
    OPEN_STORIES(f, RP_TYPE_F32);
    char dir[200];
    snprintf(dir, sizeof dir, "%.150s/ns-store", rp_test_tmpdir());
    remove_dir(dir);
    rp_reuse *e = store_engine(&f, 0.25f, 16, dir);
    rp_token docs[6][40], p[512], q[512];
    rp_test_make_docs(docs, 6, 12345);
    const int order[] = {3, 1, 4};
    int32_t bnd[8], nb;
    const rp_token tail[4] = {300, 301, 302, 303};
    const int32_t n = rp_test_build(docs, order, 3, tail, 4, p, bnd, &nb);
    rp_reuse_opts a = rp_reuse_default_opts(), b = rp_reuse_default_opts(), shared = rp_reuse_default_opts();
    a.ns = 0x1111;
    b.ns = 0x2222;
    rp_reuse_stats st;
    assert_int_equal(rp_reuse_prefill_opts(e, &a, f.ctx, f.kv, p, n, bnd, nb, f.lg_a, &st), RP_OK);
    assert_int_equal(rp_reuse_commit(e, f.kv), RP_OK);
    assert_int_equal(rp_chunk_cache_flush(rp_reuse_cache(e)), RP_OK);   /* on flash: the sub-chunk search sees it */
    /* the same prompt, the documents reordered, and one document inside a longer segment (sub-chunk candidate) */
    const int reorder[] = {4, 3, 1};
    const int32_t n2 = rp_test_build(docs, reorder, 3, tail, 4, q, bnd, &nb);
    int32_t n3 = 0;
    rp_token r[128];
    r[n3++] = 1;
    memcpy(r + n3, docs[5], sizeof(rp_token) * 12);
    n3 += 12;
    memcpy(r + n3, docs[1], sizeof(rp_token) * 40);
    n3 += 40;
    r[n3++] = 300;
    r[n3++] = 301;
    const int32_t b3[1] = {1};
    const rp_reuse_opts *other[2] = {&b, &shared};
    for (int k = 0; k < 2; k++) {
        assert_int_equal(rp_reuse_prefill_opts(e, other[k], f.ctx, f.kv, p, n, bnd, 0, f.lg_b, &st), RP_OK);
        assert_int_equal(st.n_prefix + st.n_nonprefix, 0);
        /* a partial head of the cached root chunk: same tokens up to a change mid-chunk */
        memcpy(q, p, sizeof(rp_token) * (size_t)n);
        q[30] ^= 1;
        assert_int_equal(rp_reuse_prefill_opts(e, other[k], f.ctx, f.kv, q, n, NULL, 0, f.lg_b, &st), RP_OK);
        assert_int_equal(st.n_prefix + st.n_nonprefix, 0);
        const int32_t m2 = rp_test_build(docs, reorder, 3, tail, 4, q, bnd, &nb);
        assert_int_equal(rp_reuse_prefill_opts(e, other[k], f.ctx, f.kv, q, m2, bnd, nb, f.lg_b, &st), RP_OK);
        assert_int_equal(st.n_prefix + st.n_nonprefix, 0);
        assert_int_equal(rp_reuse_prefill_opts(e, other[k], f.ctx, f.kv, r, n3, b3, 1, f.lg_b, &st), RP_OK);
        assert_int_equal(st.n_subchunk + st.n_nonprefix + st.n_prefix, 0);
    }
    /* its own namespace sees everything: the whole prefix, the reordered documents, the sub-chunk */
    rp_test_build(docs, order, 3, tail, 4, p, bnd, &nb);
    assert_int_equal(rp_reuse_prefill_opts(e, &a, f.ctx, f.kv, p, n, bnd, nb, f.lg_b, &st), RP_OK);
    assert_int_equal(st.n_prefix, n - 1);
    assert_true(rp_test_max_diff(f.lg_a, f.lg_b, f.V) <= 1e-5f);
    rp_test_build(docs, reorder, 3, tail, 4, q, bnd, &nb);
    assert_int_equal(rp_reuse_prefill_opts(e, &a, f.ctx, f.kv, q, n2, bnd, nb, f.lg_b, &st), RP_OK);
    assert_true(st.n_nonprefix >= 120 - 1 - 40);
    assert_int_equal(rp_reuse_prefill_opts(e, &a, f.ctx, f.kv, r, n3, b3, 1, f.lg_b, &st), RP_OK);
    assert_int_equal(st.n_subchunk, 40);
    print_message("  namespaces: other namespaces reuse nothing of a cached prompt; its own reuses %d sub-chunk tokens\n",
                  st.n_subchunk);
    rp_reuse_opts bad = rp_reuse_default_opts();
    bad.ratio = 1.5f;
    assert_int_equal(rp_reuse_prefill_opts(e, &bad, f.ctx, f.kv, p, n, bnd, nb, f.lg_b, &st), RP_ERR_INVALID_ARG);
    rp_reuse_free(e);
    remove_dir(dir);
    rp_test_fixture_close(&f);
}

/* Context shift: after dropping tokens [20, 60) of a 120-token cache, the
 * moved cells' layer-0 K (re-rotated) and V equal what a plain prefill of the
 * remaining 80 tokens computes (layer 0 sees only its own token and
 * position), positions run 0..79, and the cache holds 80 cells. */
static void test_context_shift(void **state) {
    (void)state;
    OPEN_STORIES(f, RP_TYPE_F32);
    rp_reuse *none = rp_test_engine(&f, RP_REUSE_NONE, 0, false);
    rp_token all[120], kept[80];
    for (int i = 0; i < 120; i++) all[i] = 1 + (i * 37 + 11) % (f.V - 1);
    for (int i = 0; i < 20; i++) kept[i] = all[i];
    for (int i = 60; i < 120; i++) kept[i - 40] = all[i];
    rp_reuse_stats st;
    assert_int_equal(rp_reuse_prefill(none, f.ctx, f.kv, all, 120, NULL, 0, f.lg_a, &st), RP_OK);
    assert_int_equal(rp_rerotate_shift(f.m, f.kv, 20, 0), RP_ERR_RANGE);
    assert_int_equal(rp_rerotate_shift(f.m, f.kv, 100, 21), RP_ERR_RANGE);
    assert_int_equal(rp_rerotate_shift(f.m, f.kv, 20, 40), RP_OK);
    assert_int_equal(f.kv->n, 80);
    for (int i = 0; i < 80; i++) assert_int_equal(f.kv->pos[i], i);
    assert_int_equal(f.kv->pos[80], -1);
    const int32_t kd = f.kv->kv_dim;
    float *k = malloc(sizeof(float) * (size_t)kd * 80), *v = malloc(sizeof(float) * (size_t)kd * 80);
    float *ek = malloc(sizeof(float) * (size_t)kd), *ev = malloc(sizeof(float) * (size_t)kd);
    for (int t = 0; t < 80; t++) {
        rp_kv_load_row(f.kv, RP_KV_K, 0, t, k + t * kd);
        rp_kv_load_row(f.kv, RP_KV_V, 0, t, v + t * kd);
    }
    assert_int_equal(rp_reuse_prefill(none, f.ctx, f.kv, kept, 80, NULL, 0, f.lg_b, &st), RP_OK);
    double worst_k = 0, worst_v = 0;
    for (int t = 0; t < 80; t++) {
        rp_kv_load_row(f.kv, RP_KV_K, 0, t, ek);
        rp_kv_load_row(f.kv, RP_KV_V, 0, t, ev);
        for (int i = 0; i < kd; i++) {
            const double dk = fabs(k[t * kd + i] - ek[i]), dv = fabs(v[t * kd + i] - ev[i]);
            if (dk > worst_k) worst_k = dk;
            if (dv > worst_v) worst_v = dv;
        }
    }
    print_message("  shift: layer-0 K max |diff| %.2e, V %.2e\n", worst_k, worst_v);
    assert_true(worst_k < 1e-4);
    assert_true(worst_v == 0);   /* V moves as is */
    free(k);
    free(v);
    free(ek);
    free(ev);
    rp_reuse_free(none);
    rp_test_fixture_close(&f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_namespaces),
        cmocka_unit_test(test_damaged_payloads),
        cmocka_unit_test(test_prefix_exact),
        cmocka_unit_test(test_commit_computed),
        cmocka_unit_test(test_rerotation_math),
        cmocka_unit_test(test_rerotation_model),
        cmocka_unit_test(test_ratio_one_equals_prefill),
        cmocka_unit_test(test_pipeline_flash),
        cmocka_unit_test(test_blend_accounting),
        cmocka_unit_test(test_static_pad_mask),
        cmocka_unit_test(test_select_fallback),
        cmocka_unit_test(test_query_vector),
        cmocka_unit_test(test_pipeline_equivalence),
        cmocka_unit_test(test_subchunk_reuse),
        cmocka_unit_test(test_salt),
        cmocka_unit_test(test_context_shift),
    };
    return rp_test_main(tests, NULL, NULL);
}
