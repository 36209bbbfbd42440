/* test_spec.c — speculative decoding: the rejection rule's output law (chi-square), prompt lookup, drafters and rollback. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "kernels/cpu.h"
#include "model/forward.h"
#include "model/sampler.h"
#include "sched/spec.h"

#define N_SAMPLES 200000

static rp_sampler *mk_sampler(uint64_t seed, int32_t V) {
    rp_sampler_params p = rp_sampler_default_params();
    p.temp = 1.0f;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0;
    p.seed = seed;
    rp_sampler *s = NULL;
    assert_int_equal(rp_sampler_create(p, V, &s), RP_OK);
    return s;
}

/* Pearson chi-square of counts against probabilities; bins with expected
 * count < 5 are lumped into one. *df gets the degrees of freedom. */
static double chi_square(const long *cnt, const float *p, int32_t V, long n, int *df) {
    double chi = 0, lump_e = 0, lump_o = 0;
    int bins = 0;
    for (int32_t i = 0; i < V; i++) {
        double e = (double)p[i] * (double)n;
        if (e < 5) {
            lump_e += e;
            lump_o += (double)cnt[i];
            continue;
        }
        chi += (cnt[i] - e) * (cnt[i] - e) / e;
        bins++;
    }
    if (lump_e >= 5) {
        chi += (lump_o - lump_e) * (lump_o - lump_e) / lump_e;
        bins++;
    } else {
        /* outcomes with ~no mass must not happen more than a few times */
        assert_true(lump_o <= 10 + 3 * lump_e);
    }
    *df = bins - 1;
    return chi;
}

/* A generous bound: df + 6 sd of the chi-square law (seeds are fixed, so the
 * test is deterministic; a wrong rule exceeds it by orders of magnitude). */
static double chi_bound(int df) { return df + 6.0 * sqrt(2.0 * df); }

static void normalize(float *p, int32_t V) {
    double s = 0;
    for (int32_t i = 0; i < V; i++) s += p[i];
    for (int32_t i = 0; i < V; i++) p[i] = (float)(p[i] / s);
}

/* Runs the rule N times with x ~ q (q == NULL: x = fixed); returns counts and
 * the acceptance rate. */
static double run_rule(const float *p, const float *q, rp_token fixed, int32_t V, long *cnt) {
    rp_sampler *qs = mk_sampler(11, V), *vs = mk_sampler(22, V);
    float *resid = malloc(sizeof(float) * (size_t)V);
    memset(cnt, 0, sizeof(long) * (size_t)V);
    long acc = 0;
    for (long k = 0; k < N_SAMPLES; k++) {
        rp_token x = q ? rp_sampler_draw(qs, q, V) : fixed;
        rp_token out;
        acc += rp_spec_accept(vs, p, q, x, V, resid, &out);
        assert_true(out >= 0 && out < V);
        cnt[out]++;
    }
    free(resid);
    rp_sampler_free(qs);
    rp_sampler_free(vs);
    return (double)acc / N_SAMPLES;
}

static void test_rule_small_vocab(void **state) {
    (void)state;
    enum { V = 8 };
    float p[V] = {0.30f, 0.05f, 0.20f, 0.0f, 0.15f, 0.10f, 0.12f, 0.08f};
    float q[V] = {0.05f, 0.40f, 0.10f, 0.10f, 0.15f, 0.02f, 0.08f, 0.10f};
    normalize(p, V);
    normalize(q, V);
    long cnt[V];
    int df;
    double acc = run_rule(p, q, 0, V, cnt);
    double chi = chi_square(cnt, p, V, N_SAMPLES, &df);
    print_message("  q dist: chi2 %.2f (df %d, bound %.1f), acceptance %.4f\n", chi, df, chi_bound(df), acc);
    assert_true(chi < chi_bound(df));
    assert_int_equal(cnt[3], 0);   /* p(3) = 0 is never output even though q proposes it */
    /* acceptance rate is sum_i min(p_i, q_i) */
    double overlap = 0;
    for (int i = 0; i < V; i++) overlap += fmin(p[i], q[i]);
    assert_true(fabs(acc - overlap) < 0.005);
    /* power: the unverified draft (distributed as q) is far from p, the
     * verified output within sampling noise of it */
    rp_sampler *qs = mk_sampler(33, V);
    long raw[V] = {0};
    for (long k = 0; k < N_SAMPLES; k++) raw[rp_sampler_draw(qs, q, V)]++;
    rp_sampler_free(qs);
    double tv_raw = 0, tv_out = 0;
    for (int i = 0; i < V; i++) {
        tv_raw += fabs((double)raw[i] / N_SAMPLES - p[i]) / 2;
        tv_out += fabs((double)cnt[i] / N_SAMPLES - p[i]) / 2;
    }
    assert_true(tv_raw > 0.4);
    assert_true(tv_out < 0.005);
    /* identical p and q: everything is accepted */
    acc = run_rule(p, p, 0, V, cnt);
    assert_true(acc > 0.999);
}

/* q a point mass (greedy drafts / prompt lookup): accept with p(x). */
static void test_rule_point_mass(void **state) {
    (void)state;
    enum { V = 6 };
    float p[V] = {0.5f, 0.2f, 0.1f, 0.1f, 0.1f, 0.0f};
    const rp_token xs[] = {0, 2, 5};
    for (size_t t = 0; t < 3; t++) {
        long cnt[V];
        int df;
        double acc = run_rule(p, NULL, xs[t], V, cnt);
        double chi = chi_square(cnt, p, V, N_SAMPLES, &df);
        print_message("  point mass at %d: chi2 %.2f (df %d), acceptance %.4f\n", xs[t], chi, df, acc);
        assert_true(chi < chi_bound(df));
        assert_true(fabs(acc - p[xs[t]]) < 0.005);
        assert_int_equal(cnt[5], 0);
    }
    /* greedy target (one-hot p): accepted iff x is the argmax, replaced by it otherwise */
    float oh[V] = {0, 0, 1, 0, 0, 0};
    rp_sampler *vs = mk_sampler(5, V);
    float resid[V];
    rp_token out;
    assert_true(rp_spec_accept(vs, oh, NULL, 2, V, resid, &out));
    assert_int_equal(out, 2);
    assert_false(rp_spec_accept(vs, oh, NULL, 4, V, resid, &out));
    assert_int_equal(out, 2);
    rp_sampler_free(vs);
}

/* Two draft positions with a context-dependent target: the joint law of the
 * first two output tokens equals p1(a) p2(b | a), as the scheduler's verify
 * loop produces it (accept d1 -> verify d2 under p2(. | d1); reject -> the
 * next token comes from a fresh step, sampled from p2(. | replacement)). */
static void test_rule_two_step_chain(void **state) {
    (void)state;
    enum { V = 4 };
    float p1[V] = {0.1f, 0.4f, 0.3f, 0.2f}, q1[V] = {0.4f, 0.3f, 0.2f, 0.1f};
    float p2[V][V], q2[V][V];
    for (int a = 0; a < V; a++)
        for (int b = 0; b < V; b++) {
            p2[a][b] = 1.0f + (float)((a * 3 + b * 5) % 7);
            q2[a][b] = 1.0f + (float)((a + 2 * b) % 4);
        }
    for (int a = 0; a < V; a++) {
        normalize(p2[a], V);
        normalize(q2[a], V);
    }
    rp_sampler *qs = mk_sampler(101, V), *vs = mk_sampler(202, V);
    float resid[V];
    long cnt[V * V] = {0};
    for (long k = 0; k < N_SAMPLES; k++) {
        rp_token d1 = rp_sampler_draw(qs, q1, V), d2 = rp_sampler_draw(qs, q2[d1], V);
        rp_token o1, o2;
        if (rp_spec_accept(vs, p1, q1, d1, V, resid, &o1)) rp_spec_accept(vs, p2[d1], q2[d1], d2, V, resid, &o2);
        else o2 = rp_sampler_draw(vs, p2[o1], V);
        cnt[o1 * V + o2]++;
    }
    rp_sampler_free(qs);
    rp_sampler_free(vs);
    float joint[V * V];
    for (int a = 0; a < V; a++)
        for (int b = 0; b < V; b++) joint[a * V + b] = p1[a] * p2[a][b];
    int df;
    double chi = chi_square(cnt, joint, V * V, N_SAMPLES, &df);
    print_message("  two-step joint: chi2 %.2f (df %d, bound %.1f)\n", chi, df, chi_bound(df));
    assert_true(chi < chi_bound(df));
}

/* stories260K's next-token law at temperature 1 (full vocabulary) with the
 * early-exit (3 of 5 layers) distribution as q. */
static void test_rule_stories_next_token(void **state) {
    (void)state;
    const char *path = rp_test_shared("models/stories260K.gguf");
    RP_REQUIRE_SHARED(path, "models/stories260K.gguf");
    rp_model *m = NULL;
    assert_int_equal(rp_model_load(path, rp_model_default_params(), &m), RP_OK);
    const int32_t V = m->hp.n_vocab;
    rp_ctx_params cp = rp_ctx_default_params();
    cp.n_ctx_max = 64;
    cp.n_threads = 1;
    rp_ctx *c = NULL;
    assert_int_equal(rp_ctx_create(m, cp, &c), RP_OK);
    rp_kv *kv = NULL;
    assert_int_equal(rp_kv_create(m, 64, RP_TYPE_F32, &kv), RP_OK);
    rp_token toks[32];
    size_t n = 0;
    const char *txt = "Once upon a time, there was a little";
    rp_tokenize_opts o = {.add_bos = true};
    assert_int_equal(rp_tokenizer_encode(m->tok, txt, strlen(txt), o, toks, 32, &n), RP_OK);
    rp_batch b;
    assert_int_equal(rp_batch_init(&b, 32), RP_OK);
    for (size_t i = 0; i < n; i++) rp_batch_add(&b, toks[i], 0, (int32_t)i, (int32_t)i, i == n - 1);
    assert_int_equal(rp_forward(c, &b, &kv, 1), RP_OK);
    float *p = malloc(sizeof(float) * (size_t)V), *q = malloc(sizeof(float) * (size_t)V);
    rp_sampler *ds = mk_sampler(1, V);
    rp_sampler_dist(ds, rp_ctx_logits(c, 0), p);
    /* early exit of the same rows */
    rp_kv_clear(kv);
    assert_int_equal(rp_fwd_begin(c, &b, &kv, 1), RP_OK);
    for (int32_t l = 0; l < 3; l++) {
        rp_fwd_qkv(c, &b, l);
        rp_fwd_store(c, &b, &kv, l);
        rp_fwd_attn_ffn(c, &b, &kv, l);
    }
    assert_int_equal(rp_fwd_end(c, &b), RP_OK);
    rp_sampler_dist(ds, rp_ctx_logits(c, 0), q);
    double tv_pq = 0;
    for (int32_t i = 0; i < V; i++) tv_pq += fabs(p[i] - q[i]) / 2;
    long *cnt = calloc((size_t)V, sizeof(long));
    double acc = run_rule(p, q, 0, V, cnt);
    int df;
    double chi = chi_square(cnt, p, V, N_SAMPLES, &df);
    double tv = 0;
    for (int32_t i = 0; i < V; i++) tv += fabs((double)cnt[i] / N_SAMPLES - p[i]) / 2;
    print_message("  stories260K: TV(q, p) %.3f, acceptance %.3f; output chi2 %.1f (df %d, bound %.1f), TV %.4f\n",
                  tv_pq, acc, chi, df, chi_bound(df), tv);
    assert_true(tv_pq > 0.2);   /* q is a poor draft: the rule has work to do */
    assert_true(fabs(acc - (1 - tv_pq)) < 0.01);
    assert_true(chi < chi_bound(df));
    assert_true(tv < 0.02);
    free(cnt);
    free(p);
    free(q);
    rp_sampler_free(ds);
    rp_batch_free(&b);
    rp_kv_free(kv);
    rp_ctx_free(c);
    rp_model_free(m);
}

/* ---- prompt lookup ---- */

static void test_ngram(void **state) {
    (void)state;
    rp_token out[16];
    const rp_token a[] = {1, 2, 3, 4, 1, 2, 3};
    /* suffix [1 2 3] matched at 0: continues 4 1 2 3, then runs on with
     * its own proposal (periodic) */
    assert_int_equal(rp_ngram_draft(a, 7, 1, 3, 5, out), 5);
    const rp_token ea[] = {4, 1, 2, 3, 4};
    assert_memory_equal(out, ea, sizeof ea);
    /* want limits the count */
    assert_int_equal(rp_ngram_draft(a, 7, 1, 3, 2, out), 2);
    /* most recent earlier occurrence wins */
    const rp_token b[] = {5, 9, 7, 5, 8, 7, 5};
    assert_int_equal(rp_ngram_draft(b, 7, 1, 1, 3, out), 3);
    const rp_token eb[] = {8, 7, 5};
    assert_memory_equal(out, eb, sizeof eb);
    /* longest suffix first: [7 5] occurs at 2..3 -> 8 7 5 too; [9 7 5] does not occur */
    assert_int_equal(rp_ngram_draft(b, 7, 2, 3, 3, out), 3);
    assert_memory_equal(out, eb, sizeof eb);
    /* no match */
    const rp_token c[] = {1, 2, 3, 4, 5};
    assert_int_equal(rp_ngram_draft(c, 5, 1, 3, 4, out), 0);
    /* degenerate inputs */
    assert_int_equal(rp_ngram_draft(c, 1, 1, 3, 4, out), 0);
    assert_int_equal(rp_ngram_draft(a, 7, 1, 3, 0, out), 0);
    /* a run of one token extends to the full request */
    const rp_token d[] = {6, 3, 3, 3};
    assert_int_equal(rp_ngram_draft(d, 4, 1, 2, 6, out), 6);
    for (int i = 0; i < 6; i++) assert_int_equal(out[i], 3);
    /* the drafter object wraps the same function */
    rp_drafter *dr = NULL;
    assert_int_equal(rp_drafter_ngram_create(1, 3, &dr), RP_OK);
    rp_draft_req r = {.seq = 0, .toks = a, .n_tok = 7, .want = 5, .out = out};
    int32_t nf = -1;
    assert_int_equal(dr->draft(dr, &r, 1, &nf), RP_OK);
    assert_int_equal(r.got, 5);
    assert_int_equal(nf, 0);
    assert_null(dr->kv(dr, 0));
    rp_drafter_free(dr);
    assert_int_equal(rp_drafter_ngram_create(0, 3, &dr), RP_ERR_INVALID_ARG);
}

/* ---- drafters on stories260K and rollback ---- */

typedef struct {
    rp_model *m, *dm;
    rp_ctx *ctx;
    rp_token toks[64];
    int32_t n;
} mfix;

static bool load_models(mfix *f) {
    const char *path = rp_test_shared("models/stories260K.gguf");
    const char *dpath = rp_test_shared("models/stories260K-q8_0.gguf");
    if (!path || !dpath) return false;
    rp_model_params mp = rp_model_default_params();
    mp.cpu_level = RP_CPU_SCALAR;   /* row-independent kernels: exact comparisons */
    assert_int_equal(rp_model_load(path, mp, &f->m), RP_OK);
    assert_int_equal(rp_model_load(dpath, mp, &f->dm), RP_OK);
    rp_ctx_params cp = rp_ctx_default_params();
    cp.n_ctx_max = 128;
    cp.n_threads = 1;
    assert_int_equal(rp_ctx_create(f->m, cp, &f->ctx), RP_OK);
    const char *txt = "Lily saw a cat. The cat was big. Lily saw a";
    size_t n = 0;
    rp_tokenize_opts o = {.add_bos = true};
    assert_int_equal(rp_tokenizer_encode(f->m->tok, txt, strlen(txt), o, f->toks, 64, &n), RP_OK);
    f->n = (int32_t)n;
    return true;
}

static void free_models(mfix *f) {
    rp_ctx_free(f->ctx);
    rp_model_free(f->m);
    rp_model_free(f->dm);
}

/* Fills kv with toks[0..n-1) (everything but the pending last token). */
static void prefill(mfix *f, rp_kv *kv) {
    rp_batch b;
    assert_int_equal(rp_batch_init(&b, 64), RP_OK);
    for (int32_t i = 0; i < f->n - 1; i++) rp_batch_add(&b, f->toks[i], 0, i, i, false);
    b.logits[b.n - 1] = true;
    rp_kv *kvs[1] = {kv};
    assert_int_equal(rp_forward(f->ctx, &b, kvs, 1), RP_OK);
    rp_batch_free(&b);
}

/* Self-draft writes only cells past the history; truncation rolls them back;
 * a verify over the draft gives the same logits as on a cache that never saw
 * the draft. */
static void test_self_drafter_rollback(void **state) {
    (void)state;
    mfix f = {0};
    if (!load_models(&f)) RP_REQUIRE_SHARED(NULL, "models/stories260K.gguf");
    rp_kv *kv = NULL, *clean = NULL;
    assert_int_equal(rp_kv_create(f.m, 128, RP_TYPE_F32, &kv), RP_OK);
    assert_int_equal(rp_kv_create(f.m, 128, RP_TYPE_F32, &clean), RP_OK);
    prefill(&f, kv);
    prefill(&f, clean);
    const int32_t base = f.n - 1;
    const size_t lb = (size_t)base * kv->row_bytes;
    uint8_t *snap = malloc(lb * (size_t)kv->n_layer), *now = malloc(lb * (size_t)kv->n_layer);
    for (int32_t l = 0; l < kv->n_layer; l++) rp_kv_read_rows(kv, RP_KV_K, l, 0, base, snap + l * lb);
    rp_kv *kvs[1] = {kv};
    rp_drafter *dr = NULL;
    assert_int_equal(rp_drafter_self_create(f.ctx, kvs, 1, 3, &dr), RP_OK);
    rp_token out[8];
    rp_draft_req r = {.seq = 0, .toks = f.toks, .n_tok = f.n, .want = 5, .out = out};
    int32_t nf = 0;
    assert_int_equal(dr->draft(dr, &r, 1, &nf), RP_OK);
    assert_int_equal(r.got, 5);
    assert_int_equal(nf, 5);
    assert_int_equal(kv->n, base + 5);
    for (int32_t l = 0; l < kv->n_layer; l++) rp_kv_read_rows(kv, RP_KV_K, l, 0, base, now + l * lb);
    assert_memory_equal(snap, now, lb * (size_t)kv->n_layer);
    /* verify: pending + drafts on both caches, logits bit-identical */
    rp_batch b;
    assert_int_equal(rp_batch_init(&b, 16), RP_OK);
    rp_batch_add(&b, f.toks[base], 0, base, base, true);
    for (int j = 0; j < 5; j++) rp_batch_add(&b, out[j], 0, base + 1 + j, base + 1 + j, true);
    const int32_t V = f.m->hp.n_vocab;
    float *l1 = malloc(sizeof(float) * 6 * (size_t)V);
    assert_int_equal(rp_forward(f.ctx, &b, kvs, 1), RP_OK);
    for (int j = 0; j < 6; j++) memcpy(l1 + (size_t)j * V, rp_ctx_logits(f.ctx, j), sizeof(float) * (size_t)V);
    rp_kv *ckv[1] = {clean};
    assert_int_equal(rp_forward(f.ctx, &b, ckv, 1), RP_OK);
    for (int j = 0; j < 6; j++) assert_memory_equal(l1 + (size_t)j * V, rp_ctx_logits(f.ctx, j), sizeof(float) * (size_t)V);
    /* rollback after accepting 2 of 5: cells past base + 3 are gone */
    rp_kv_truncate(kv, base + 3);
    assert_int_equal(kv->n, base + 3);
    for (int32_t c = base + 3; c < base + 6; c++) assert_int_equal(kv->pos[c], -1);
    assert_int_equal(kv->pos[base + 2], base + 2);
    free(l1);
    free(snap);
    free(now);
    rp_batch_free(&b);
    rp_drafter_free(dr);
    rp_kv_free(kv);
    rp_kv_free(clean);
    free_models(&f);
}

/* The draft model catches up lazily, proposes what a fresh drafter proposes
 * after a rollback, and its greedy drafts equal its own greedy decoding. */
static void test_model_drafter_rollback(void **state) {
    (void)state;
    mfix f = {0};
    if (!load_models(&f)) RP_REQUIRE_SHARED(NULL, "models/stories260K.gguf");
    rp_drafter_model_params mp = {.max_seq = 2, .n_ctx = 128, .n_batch = 16, .max_draft = 8, .kv_type = RP_TYPE_F32,
                                  .n_threads = 1};
    rp_drafter *dr = NULL;
    assert_int_equal(rp_drafter_model_create(f.dm, mp, &dr), RP_OK);
    assert_int_equal(dr->open(dr, 1), RP_OK);
    rp_token out[8], out2[8];
    rp_draft_req r = {.seq = 1, .toks = f.toks, .n_tok = f.n, .want = 6, .out = out};
    int32_t nf = 0;
    assert_int_equal(dr->draft(dr, &r, 1, &nf), RP_OK);
    assert_int_equal(r.got, 6);
    /* catch-up in n_batch = 16 row chunks, then 5 single-row steps */
    assert_int_equal(nf, (f.n + 15) / 16 + 5);
    rp_kv *dk = dr->kv(dr, 1);
    assert_non_null(dk);
    /* the history (pending token included) and drafts 0..4 fed; draft 5 not */
    assert_int_equal(dk->n, f.n + 5);
    /* the history grows by the first 3 drafts + a different token; rollback
     * to the verified prefix and draft again */
    rp_token hist[64];
    memcpy(hist, f.toks, sizeof(rp_token) * (size_t)f.n);
    memcpy(hist + f.n, out, sizeof(rp_token) * 3);
    hist[f.n + 3] = (out[3] + 1) % f.m->hp.n_vocab;
    const int32_t n2 = f.n + 4;
    dr->rollback(dr, 1, f.n + 3);
    assert_int_equal(dk->n, f.n + 3);
    r = (rp_draft_req){.seq = 1, .toks = hist, .n_tok = n2, .want = 4, .out = out};
    assert_int_equal(dr->draft(dr, &r, 1, &nf), RP_OK);
    /* a fresh drafter over the same history */
    rp_drafter *fresh = NULL;
    assert_int_equal(rp_drafter_model_create(f.dm, mp, &fresh), RP_OK);
    assert_int_equal(fresh->open(fresh, 0), RP_OK);
    rp_draft_req r2 = {.seq = 0, .toks = hist, .n_tok = n2, .want = 4, .out = out2};
    assert_int_equal(fresh->draft(fresh, &r2, 1, &nf), RP_OK);
    assert_int_equal(r.got, 4);
    assert_int_equal(r2.got, 4);
    assert_memory_equal(out, out2, sizeof(rp_token) * 4);
    /* rollback to 0 forgets everything; drafting again recomputes */
    dr->rollback(dr, 1, 0);
    assert_int_equal(dr->kv(dr, 1)->n, 0);
    assert_int_equal(dr->draft(dr, &r, 1, &nf), RP_OK);
    assert_memory_equal(out, out2, sizeof(rp_token) * 4);
    dr->close(dr, 1);
    assert_null(dr->kv(dr, 1));
    rp_drafter_free(dr);
    rp_drafter_free(fresh);
    free_models(&f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rule_small_vocab),
        cmocka_unit_test(test_rule_point_mass),
        cmocka_unit_test(test_rule_two_step_chain),
        cmocka_unit_test(test_rule_stories_next_token),
        cmocka_unit_test(test_ngram),
        cmocka_unit_test(test_self_drafter_rollback),
        cmocka_unit_test(test_model_drafter_rollback),
    };
    return rp_test_main(tests, NULL, NULL);
}
