/* test_swa.c — sliding-window KV caches (rp_kv_create_swa): Gemma 2 / 3's local layers holding only their window
 * + the batch size of cells must give the logits a full cache gives (within 1e-5), at positions several windows
 * past the start, for a prefill in one batch, in chunks and token by token, after a speculative rollback, after
 * a fork (cache copy), a context shift and a demotion round trip, through the scheduler's speculative decoding,
 * the reuse engine (prefix reuse, blend and full at r = 1 with chunks re-rotated to new positions, a flash-store
 * round trip) and the public engine (--swa-full off and on); the KV memory is smaller by exactly the cells not
 * held; a rollback past the window is refused or recomputed. The models are synth's "tiny" gemma shapes
 * (window 32). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testfix.h"
#include "model/forward.h"
#include "model/model.h"
#include "model/synth.h"
#include "reuse/engine.h"
#include "reuse/rerotate.h"
#include "sched/sched_internal.h"
#include "store/store.h"

#define TOL 1e-5f

static const char *synth(rp_arch arch) {
    static char path[2][512];
    const int k = arch == RP_ARCH_GEMMA2 ? 0 : 1;
    snprintf(path[k], sizeof path[k], "%s/swa-%s-tiny.gguf", rp_test_tmpdir(), rp_arch_name(arch));
    rp_synth_params sp = rp_synth_default_params();
    sp.arch = arch;
    sp.type = "f32";
    assert_int_equal(rp_synth_write(&sp, path[k]), RP_OK);
    return path[k];
}

static rp_model *load(rp_arch arch) {
    rp_model *m = NULL;
    assert_int_equal(rp_model_load(synth(arch), rp_model_default_params(), &m), RP_OK);
    assert_int_equal(m->hp.n_swa, 32);
    return m;
}

/* A pseudo-random prompt: BOS, then ids in [259, 509). */
static void tokens(rp_token *t, int32_t n, uint64_t seed) {
    uint64_t s = seed;
    t[0] = 1;
    for (int32_t i = 1; i < n; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        t[i] = 259 + (rp_token)((s >> 33) % 250);
    }
}

static rp_ctx *make_ctx(const rp_model *m, int32_t n_batch, int32_t n_outputs, int32_t n_ctx) {
    rp_ctx_params cp = rp_ctx_default_params();
    cp.n_batch = n_batch;
    cp.n_outputs = n_outputs;
    cp.n_ctx_max = n_ctx;
    rp_ctx *c = NULL;
    assert_int_equal(rp_ctx_create(m, cp, &c), RP_OK);
    return c;
}

static rp_kv *ring_kv(const rp_model *m, int32_t n_ctx, rp_type t, int32_t n_batch) {
    rp_kv *kv = NULL;
    assert_int_equal(rp_kv_create_swa(m, n_ctx, t, rp_kv_swa_cells(m, n_batch), &kv), RP_OK);
    assert_true(kv->n_ring > 0 && kv->swa_cells == m->hp.n_swa + n_batch);
    return kv;
}

/* Rows toks[p0 .. p0 + n) at cells == positions, in calls of `chunk` rows; every row's logits into lg (row-major,
 * indexed from p0) when lg is not NULL. Returns the first failing status. */
static rp_status run(rp_ctx *c, rp_kv *kv, const rp_token *toks, int32_t p0, int32_t n, int32_t chunk, float *lg) {
    const int32_t V = rp_ctx_model(c)->hp.n_vocab;
    rp_batch b;
    assert_int_equal(rp_batch_init(&b, chunk), RP_OK);
    rp_status st = RP_OK;
    for (int32_t i0 = 0; i0 < n && st == RP_OK; i0 += chunk) {
        rp_batch_clear(&b);
        for (int32_t i = i0; i < n && i < i0 + chunk; i++)
            assert_int_equal(rp_batch_add(&b, toks[p0 + i], 0, p0 + i, p0 + i, lg != NULL), RP_OK);
        st = rp_forward(c, &b, &kv, 1);
        for (int32_t i = 0; st == RP_OK && lg && i < b.n; i++)
            memcpy(lg + (size_t)(i0 + i) * V, rp_ctx_logits(c, i), sizeof(float) * (size_t)V);
    }
    rp_batch_free(&b);
    return st;
}

/* ---- the cache alone: rows written past the held range slide it; reads of cells it no longer holds are
 * zero rows, of the ones it holds what was written; a slide keeps the cells after the new base ---- */
static void test_ring_rows(void **state) {
    (void)state;
    const int32_t L = 3, HK = 2, HD = 8, NC = 256, CAP = 40;
    const int32_t windows[3] = {16, 0, 16};
    rp_kv *kv = NULL;
    assert_int_equal(rp_kv_create_shape_swa(L, HK, HD, NC, RP_TYPE_F32, RP_CPU_SCALAR, windows, CAP, &kv), RP_OK);
    assert_int_equal(kv->n_ring, 2);
    assert_true(kv->ring[0] && !kv->ring[1] && kv->ring[2]);
    assert_int_equal(rp_kv_layer_cap(kv, 0), CAP);
    assert_int_equal(rp_kv_layer_cap(kv, 1), NC);
    assert_int_equal(rp_kv_bytes(kv), 2 * (size_t)(2 * CAP + NC) * kv->row_bytes);
    const size_t rb = kv->row_bytes;
    uint8_t *src = malloc(rb * NC), *got = malloc(rb * NC), *zero = calloc(1, rb);
    for (size_t i = 0; i < rb * NC; i++) src[i] = (uint8_t)(i * 131 + 7);
    /* 100 cells in pieces of 13: the ring layers keep the last 40 */
    for (int32_t c0 = 0; c0 < 100; c0 += 13) {
        const int32_t n = 100 - c0 < 13 ? 100 - c0 : 13;
        for (int32_t l = 0; l < L; l++)
            for (int p = 0; p < 2; p++) rp_kv_write_rows(kv, (rp_kv_part)p, l, c0, n, src + (size_t)c0 * rb);
    }
    kv->n = 100;
    assert_int_equal(rp_kv_held_lo(kv), 60);
    assert_true(rp_kv_holds(kv, 0, 60) && !rp_kv_holds(kv, 0, 59) && rp_kv_holds(kv, 1, 0));
    for (int32_t l = 0; l < L; l++) {
        rp_kv_read_rows(kv, RP_KV_V, l, 0, 100, got);
        for (int32_t c = 0; c < 100; c++) {
            const bool held = !kv->ring[l] || c >= 60;
            assert_memory_equal(got + (size_t)c * rb, held ? src + (size_t)c * rb : zero, rb);
        }
    }
    /* can resume at 100 (needs 85..99), not after a cut to 70 (needs 55..69) */
    assert_true(rp_kv_can_resume(kv, 100));
    assert_true(rp_kv_can_resume(kv, 75));
    assert_false(rp_kv_can_resume(kv, 70));
    /* a slide to 80 keeps 80..99 */
    rp_kv_slide(kv, 0, 80);
    rp_kv_read_rows(kv, RP_KV_K, 0, 80, 20, got);
    assert_memory_equal(got, src + (size_t)80 * rb, 20 * rb);
    rp_kv_read_rows(kv, RP_KV_K, 0, 79, 1, got);
    assert_memory_equal(got, zero, rb);
    /* a store to a cell not held is dropped; a load of one gives zeros */
    float row[16], back[16];
    for (int i = 0; i < 16; i++) row[i] = (float)i + 0.5f;
    rp_kv_store_row(kv, RP_KV_K, 0, 10, row);
    rp_kv_load_row(kv, RP_KV_K, 0, 10, back);
    for (int i = 0; i < 16; i++) assert_true(back[i] == 0.0f);
    rp_kv_store_row(kv, RP_KV_K, 0, 90, row);
    rp_kv_load_row(kv, RP_KV_K, 0, 90, back);
    assert_memory_equal(back, row, sizeof row);
    /* clear: the rings start again at 0 */
    rp_kv_clear(kv);
    assert_int_equal(rp_kv_held_lo(kv), 0);
    assert_true(rp_kv_holds(kv, 0, 0));
    rp_kv_free(kv);
    free(src);
    free(got);
    free(zero);
}

/* ---- memory: ring layers hold window + n_batch cells, the estimate says so ---- */
static void check_bytes(rp_arch arch) {
    rp_model *m = load(arch);
    const int32_t n_ctx = 1024, nb = 64, cap = m->hp.n_swa + nb;
    int32_t n_local = 0;
    for (int32_t l = 0; l < m->hp.n_layer; l++) n_local += m->layers[l].window > 0;
    assert_true(n_local > 0 && n_local < m->hp.n_layer);
    rp_kv *full = NULL, *ring = ring_kv(m, n_ctx, RP_TYPE_F16, nb);
    assert_int_equal(rp_kv_create(m, n_ctx, RP_TYPE_F16, &full), RP_OK);
    assert_int_equal(full->n_ring, 0);
    assert_int_equal(ring->n_ring, n_local);
    const size_t saved = 2 * (size_t)n_local * (size_t)(n_ctx - cap) * full->row_bytes;
    assert_int_equal(rp_kv_bytes(full), 2 * (size_t)m->hp.n_layer * n_ctx * full->row_bytes);
    assert_int_equal(rp_kv_bytes(full) - rp_kv_bytes(ring), saved);
    uint64_t e_ring = 0, e_full = 0, e_def = 0;
    assert_int_equal(rp_kv_estimate_ex(m, n_ctx, RP_KV_F16, nb, false, &e_ring), RP_OK);
    assert_int_equal(rp_kv_estimate_ex(m, n_ctx, RP_KV_F16, nb, true, &e_full), RP_OK);
    assert_int_equal(e_ring, rp_kv_bytes(ring));
    assert_int_equal(e_full, rp_kv_bytes(full));
    /* the default estimate: window + 512; a context within that holds everything */
    assert_int_equal(rp_kv_estimate(m, 4096, RP_KV_F16, &e_def), RP_OK);
    assert_int_equal(e_def, rp_kv_bytes_per_token(m, RP_KV_F16) / (uint64_t)m->hp.n_layer *
                                ((uint64_t)(m->hp.n_layer - n_local) * 4096 + (uint64_t)n_local * (32 + 512)));
    assert_int_equal(rp_kv_estimate_ex(m, 64, RP_KV_F16, nb, false, &e_ring), RP_OK);
    assert_int_equal(e_ring, rp_kv_bytes_per_token(m, RP_KV_F16) * 64);
    assert_int_equal(rp_kv_estimate_ex(m, 64, RP_KV_F16, 0, false, &e_ring), RP_ERR_RANGE);
    rp_model_desc d = rp_model_describe(m);
    assert_int_equal(d.n_swa, 32);
    assert_int_equal(d.n_swa_layers, n_local);
    print_message("  %s: %d of %d layers local; KV at %d cells: full %zu bytes, ring %zu (saves %zu)\n",
                  rp_arch_name(arch), n_local, m->hp.n_layer, n_ctx, rp_kv_bytes(full), rp_kv_bytes(ring), saved);
    rp_kv_free(full);
    rp_kv_free(ring);
    rp_model_free(m);
}

/* The README's figures, from the shapes alone: Gemma 3 4B (34 layers, local unless l % 6 == 5, window 1024,
 * 4 KV heads of 256, F16 rows of 2 KiB) and Gemma 2 2B (26 layers, even ones local, window 4096), batch 512. */
static void test_readme_figures(void **state) {
    (void)state;
    int32_t w3[34], w2[26];
    for (int l = 0; l < 34; l++) w3[l] = l % 6 < 5 ? 1024 : 0;
    for (int l = 0; l < 26; l++) w2[l] = l % 2 < 1 ? 4096 : 0;
    const size_t row = 4 * 256 * 2;
    const uint64_t g3_32k = rp_kv_shape_bytes(34, w3, row, 32768, 1024 + 512);
    const uint64_t g3_32k_full = rp_kv_shape_bytes(34, w3, row, 32768, 0);
    const uint64_t g3_128k = rp_kv_shape_bytes(34, w3, row, 131072, 1024 + 512);
    const uint64_t g3_128k_full = rp_kv_shape_bytes(34, w3, row, 131072, 0);
    const uint64_t g2_8k = rp_kv_shape_bytes(26, w2, row, 8192, 4096 + 512);
    const uint64_t g2_8k_full = rp_kv_shape_bytes(26, w2, row, 8192, 0);
    print_message("  gemma3-4b f16: 32k %.1f MiB (full %.2f GiB), 128k %.2f GiB (full %.1f GiB); gemma2-2b 8k: %.1f MiB "
                  "(full %.1f MiB)\n", g3_32k / 1048576.0, g3_32k_full / 1073741824.0, g3_128k / 1073741824.0,
                  g3_128k_full / 1073741824.0, g2_8k / 1048576.0, g2_8k_full / 1048576.0);
    /* 5 global layers at every cell, 29 local at 1536, 4 KiB of K + V per cell and layer */
    assert_int_equal(g3_32k, (5ull * 32768 + 29ull * 1536) * 2 * row);
    assert_int_equal(g3_32k_full, 34ull * 32768 * 2 * row);
    assert_true(fabs(g3_32k / 1048576.0 - 814.0) < 0.05 && fabs(g3_32k_full / 1073741824.0 - 4.25) < 0.005);
    assert_true(fabs(g3_128k / 1073741824.0 - 2.67) < 0.005 && fabs(g3_128k_full / 1073741824.0 - 17.0) < 0.05);
    assert_true(fabs(g2_8k / 1048576.0 - 650.0) < 0.05 && fabs(g2_8k_full / 1048576.0 - 832.0) < 0.05);
    /* a context within window + batch: everything held, nothing saved */
    assert_int_equal(rp_kv_shape_bytes(34, w3, row, 1024, 1536), rp_kv_shape_bytes(34, w3, row, 1024, 0));
}

static void test_bytes(void **state) {
    (void)state;
    check_bytes(RP_ARCH_GEMMA2);
    check_bytes(RP_ARCH_GEMMA3);
}

/* ---- the forward: ring logits equal full logits ---- */
#define N 300   /* ~9 windows */

static void check_forward(rp_arch arch, rp_type kv_type) {
    rp_model *m = load(arch);
    const int32_t V = m->hp.n_vocab;
    rp_token toks[N];
    tokens(toks, N, 4242);
    float *a = malloc(sizeof(float) * (size_t)N * V), *b = malloc(sizeof(float) * (size_t)N * V);
    /* one batch of all rows (a ring of window + 300 cells), 37-row chunks and one row at a time (a ring of
     * window + 64 cells: it slides every 33 cells) */
    const int32_t chunks[] = {N, 37, 1}, nbs[] = {N, 64, 64};
    for (int k = 0; k < 3; k++) {
        rp_ctx *c = make_ctx(m, nbs[k], nbs[k], 512);
        rp_kv *full = NULL, *ring = ring_kv(m, 512, kv_type, nbs[k]);
        assert_int_equal(rp_kv_create(m, 512, kv_type, &full), RP_OK);
        assert_int_equal(run(c, full, toks, 0, N, chunks[k], a), RP_OK);
        assert_int_equal(run(c, ring, toks, 0, N, chunks[k], b), RP_OK);
        assert_int_equal(ring->n, N);
        if (k > 0) assert_true(rp_kv_held_lo(ring) > 0);   /* it slid */
        float d = rp_test_max_diff(a, b, N * V), d_tail = rp_test_max_diff(a + (size_t)200 * V, b + (size_t)200 * V, 100 * V);
        print_message("  %s (%s KV): chunks of %d: ring (%d cells, from cell %d) vs full: max |logit diff| %g "
                      "(positions 200..299: %g)\n", rp_arch_name(arch), kv_type == RP_TYPE_F32 ? "f32" : "f16",
                      chunks[k], ring->swa_cells, rp_kv_held_lo(ring), d, d_tail);
        assert_true(d <= TOL);
        rp_kv_free(full);
        rp_kv_free(ring);
        rp_ctx_free(c);
    }
    free(a);
    free(b);
    rp_model_free(m);
}

static void test_forward(void **state) {
    (void)state;
    check_forward(RP_ARCH_GEMMA2, RP_TYPE_F32);
    check_forward(RP_ARCH_GEMMA3, RP_TYPE_F32);
    check_forward(RP_ARCH_GEMMA3, RP_TYPE_F16);
}

/* ---- rollback, fork, context shift, demotion ---- */
typedef struct pair {
    rp_model *m;
    rp_ctx *c;
    rp_kv *full, *ring;
    int32_t V;
    float *a, *b;
} pair;

static void pair_open(pair *p, rp_arch arch, const rp_token *toks, int32_t n) {
    p->m = load(arch);
    p->V = p->m->hp.n_vocab;
    p->c = make_ctx(p->m, 64, 64, 512);
    p->full = NULL;
    assert_int_equal(rp_kv_create(p->m, 512, RP_TYPE_F32, &p->full), RP_OK);
    p->ring = ring_kv(p->m, 512, RP_TYPE_F32, 64);
    p->a = malloc(sizeof(float) * 64 * (size_t)p->V);
    p->b = malloc(sizeof(float) * 64 * (size_t)p->V);
    assert_int_equal(run(p->c, p->full, toks, 0, n, 64, NULL), RP_OK);
    assert_int_equal(run(p->c, p->ring, toks, 0, n, 64, NULL), RP_OK);
}

static void pair_close(pair *p) {
    rp_kv_free(p->full);
    rp_kv_free(p->ring);
    rp_ctx_free(p->c);
    rp_model_free(p->m);
    free(p->a);
    free(p->b);
}

/* rows toks[p0 .. p0 + n) on both caches (kv_a, kv_b): their logits agree within TOL */
static float both(pair *p, rp_kv *kv_a, rp_kv *kv_b, const rp_token *toks, int32_t p0, int32_t n, int32_t chunk) {
    assert_int_equal(run(p->c, kv_a, toks, p0, n, chunk, p->a), RP_OK);
    assert_int_equal(run(p->c, kv_b, toks, p0, n, chunk, p->b), RP_OK);
    const float d = rp_test_max_diff(p->a, p->b, n * p->V);
    assert_true(d <= TOL);
    return d;
}

static void check_rollback(rp_arch arch) {
    rp_token toks[400], draft[400];
    tokens(toks, 400, 99);
    tokens(draft, 400, 1234);   /* "rejected drafts": other tokens at the same cells */
    pair p;
    pair_open(&p, arch, toks, 200);
    /* a verify batch of 8 drafts at cells 200..207, 3 accepted: roll back to 203 and go on with the true tokens */
    assert_int_equal(run(p.c, p.full, draft, 200, 8, 8, NULL), RP_OK);
    assert_int_equal(run(p.c, p.ring, draft, 200, 8, 8, NULL), RP_OK);
    rp_kv_truncate(p.full, 203);
    rp_kv_truncate(p.ring, 203);
    assert_true(rp_kv_can_resume(p.ring, 203));
    const float d1 = both(&p, p.full, p.ring, toks, 203, 8, 8);
    /* a rollback of a whole n_batch: 64 rows at 211..274 (the ring slides to hold them), all rejected */
    assert_int_equal(run(p.c, p.full, draft, 211, 64, 64, NULL), RP_OK);
    assert_int_equal(run(p.c, p.ring, draft, 211, 64, 64, NULL), RP_OK);
    rp_kv_truncate(p.full, 211);
    rp_kv_truncate(p.ring, 211);
    assert_true(rp_kv_can_resume(p.ring, 211));
    const float d2 = both(&p, p.full, p.ring, toks, 211, 40, 1);   /* then token by token past several windows */
    /* past the window: the ring cannot resume; a forward there is refused, naming --swa-full */
    rp_kv_truncate(p.ring, 100);
    assert_false(rp_kv_can_resume(p.ring, 100));
    assert_int_equal(run(p.c, p.ring, toks, 100, 1, 1, NULL), RP_ERR_RANGE);
    assert_non_null(strstr(rp_last_error(), "--swa-full"));
    rp_kv_clear(p.ring);   /* recompute from the start: exact again */
    assert_true(rp_kv_can_resume(p.ring, 0));
    assert_int_equal(run(p.c, p.ring, toks, 0, 100, 64, NULL), RP_OK);
    rp_kv_truncate(p.full, 100);
    const float d3 = both(&p, p.full, p.ring, toks, 100, 20, 7);
    print_message("  %s: rollback of 5 drafts: %g; of 64 rows, then decode: %g; recomputed after a cut past the "
                  "window: %g\n", rp_arch_name(arch), d1, d2, d3);
    pair_close(&p);
}

static void test_rollback(void **state) {
    (void)state;
    check_rollback(RP_ARCH_GEMMA2);
    check_rollback(RP_ARCH_GEMMA3);
}

static void check_fork_shift_demote(rp_arch arch) {
    rp_token toks[400];
    tokens(toks, 400, 7);
    pair p;
    pair_open(&p, arch, toks, 200);
    /* fork: a copy of the ring goes on like the full cache */
    rp_kv *copy = ring_kv(p.m, 512, RP_TYPE_F32, 64), *fcopy = NULL;
    assert_int_equal(rp_kv_copy(copy, p.ring), RP_OK);
    assert_int_equal(rp_kv_held_lo(copy), rp_kv_held_lo(p.ring));
    assert_int_equal(rp_kv_create(p.m, 512, RP_TYPE_F32, &fcopy), RP_OK);
    assert_int_equal(rp_kv_copy(fcopy, p.ring), RP_ERR_INVALID_ARG);   /* another layout */
    const float d_fork = both(&p, p.full, copy, toks, 200, 50, 1);
    /* the original is untouched by the copy's decode */
    rp_kv_truncate(p.full, 200);
    const float d_orig = both(&p, p.full, p.ring, toks, 200, 10, 10);

    /* context shift: the three ways the dropped range sits against the held cells (before them, across their
     * start, inside them), each from the same 200-cell state */
    const int32_t shifts[4][2] = {{4, 50}, {140, 25}, {185, 5}, {150, 20}};
    float d_shift[3];
    for (int k = 0; k < 4; k++) {
        rp_kv_clear(p.full);
        rp_kv_clear(copy);
        assert_int_equal(run(p.c, p.full, toks, 0, 200, 64, NULL), RP_OK);
        assert_int_equal(run(p.c, copy, toks, 0, 200, 64, NULL), RP_OK);
        const int32_t lo = rp_kv_held_lo(copy);
        assert_int_equal(rp_rerotate_shift(p.m, p.full, shifts[k][0], shifts[k][1]), RP_OK);
        assert_int_equal(rp_rerotate_shift(p.m, copy, shifts[k][0], shifts[k][1]), RP_OK);
        assert_int_equal(copy->n, 200 - shifts[k][1]);
        if (k == 3) {   /* the window after the shift reaches kept cells the ring no longer holds: refused */
            assert_int_equal(lo, 161);
            assert_false(rp_kv_can_resume(copy, copy->n));
            assert_int_equal(run(p.c, copy, toks + 20, 180, 1, 1, NULL), RP_ERR_RANGE);
            continue;
        }
        assert_true(rp_kv_can_resume(copy, copy->n));
        /* the new tokens go on at the shifted cells (positions follow the cells again) */
        d_shift[k] = both(&p, p.full, copy, toks + shifts[k][1], 200 - shifts[k][1], 40, 8);
        print_message("  %s: context shift keep %d drop %d (ring held from %d): max |logit diff| %g\n",
                      rp_arch_name(arch), shifts[k][0], shifts[k][1], lo, d_shift[k]);
    }

    /* demotion (the scheduler's compressed blob) and back */
    rp_kv_clear(p.full);
    rp_kv_clear(p.ring);
    assert_int_equal(run(p.c, p.full, toks, 0, 230, 64, NULL), RP_OK);
    assert_int_equal(run(p.c, p.ring, toks, 0, 230, 64, NULL), RP_OK);
    void *blob = NULL;
    size_t len = 0;
    assert_int_equal(rp_kv_blob_write(&p.ring, 1, &blob, &len), RP_OK);
    rp_kv_clear(copy);
    assert_int_equal(rp_kv_blob_read(blob, len, &copy, 1), RP_OK);
    assert_int_equal(copy->n, 230);
    assert_int_equal(rp_kv_held_lo(copy), rp_kv_held_lo(p.ring));
    free(blob);
    const float d_demote = both(&p, p.full, copy, toks, 230, 30, 1);
    print_message("  %s: fork then decode: %g (original after: %g); demoted and restored, then decode: %g\n",
                  rp_arch_name(arch), d_fork, d_orig, d_demote);
    rp_kv_free(copy);
    rp_kv_free(fcopy);
    pair_close(&p);
}

static void test_fork_shift_demote(void **state) {
    (void)state;
    check_fork_shift_demote(RP_ARCH_GEMMA2);
    check_fork_shift_demote(RP_ARCH_GEMMA3);
}

/* ---- the scheduler's speculative decoding (n-gram drafts, rejected ones rolled back) on ring caches: the
 * same greedy histories as on full caches, generated well past several windows; then a truncate far back
 * (the ring recomputes) and a fork, each followed by another turn ---- */
#define SCHED_N 3
static void sched_run(rp_model *m, int32_t swa_cells, rp_token hist[SCHED_N][512], int32_t n_hist[SCHED_N],
                      uint64_t *drafted, uint64_t *accepted) {
    rp_sched_params p = rp_sched_default_params();
    p.max_sessions = SCHED_N + 1;
    p.n_ctx = 512;
    p.n_batch = 32;
    p.kv_type = RP_TYPE_F32;
    p.n_threads = 1;
    p.policy = RP_POLICY_HAL_YIELD;
    p.drafter = RP_DRAFTER_NGRAM;
    p.swa_cells = swa_cells;
    rp_sched *s = NULL;
    assert_int_equal(rp_sched_create(m, NULL, p, &s), RP_OK);
    rp_sched_id ids[SCHED_N + 1];
    rp_token prompt[64];
    rp_gen_params g = rp_gen_default_params();
    g.sampler.temp = 0;
    g.stop_at_eog = false;
    for (int i = 0; i < SCHED_N; i++) {
        /* a short repeating motif: the n-gram drafter proposes, the model accepts some */
        prompt[0] = 1;
        for (int t = 1; t < 40; t++) prompt[t] = 300 + (rp_token)((t * (i + 2)) % 7);
        assert_int_equal(rp_sched_session_create(s, &ids[i]), RP_OK);
        g.max_tokens = 150 + 20 * i;
        assert_int_equal(rp_sched_submit(s, ids[i], prompt, 40, &g), RP_OK);
    }
    /* turn 1 for all; then session 0 truncated to 60 (past the window), session 1 forked at 100 into a new
     * session; turn 2 on sessions 0 and the fork */
    for (int phase = 0; phase < 2; phase++) {
        for (int steps = 0;; steps++) {
            assert_true(steps < 4000);
            rp_sched_step_info info;
            assert_int_equal(rp_sched_step(s, &info), RP_OK);
            bool busy = false;
            for (int i = 0; i < SCHED_N; i++) {
                rp_sched_session_info si;
                assert_int_equal(rp_sched_session_info_get(s, ids[i], &si), RP_OK);
                busy = busy || si.state != RP_SESS_IDLE;
            }
            if (!busy) break;
        }
        if (phase == 1) break;
        const rp_token more[5] = {301, 302, 303, 304, 305};
        assert_int_equal(rp_sched_truncate(s, ids[0], 60), RP_OK);
        g.max_tokens = 100;
        assert_int_equal(rp_sched_submit(s, ids[0], more, 5, &g), RP_OK);
        assert_int_equal(rp_sched_session_create(s, &ids[SCHED_N]), RP_OK);
        assert_int_equal(rp_sched_fork(s, ids[SCHED_N], ids[1], 100), RP_OK);
        (void)rp_sched_session_free(s, ids[1]);   /* the fork's turn replaces session 1's in the comparison */
        ids[1] = ids[SCHED_N];
        assert_int_equal(rp_sched_submit(s, ids[1], more, 5, &g), RP_OK);
    }
    for (int i = 0; i < SCHED_N; i++)
        assert_int_equal(rp_sched_session_tokens(s, ids[i], 0, hist[i], 512, &n_hist[i]), RP_OK);
    rp_sched_stats st;
    rp_sched_stats_get(s, &st);
    *drafted = st.drafted;
    *accepted = st.accepted;
    rp_sched_free(s);
}

static void check_sched(rp_arch arch) {
    rp_model *m = load(arch);
    static rp_token ring[SCHED_N][512], full[SCHED_N][512];
    int32_t nr[SCHED_N], nf[SCHED_N];
    uint64_t dr, ar, df, af;
    sched_run(m, rp_kv_swa_cells(m, 32), ring, nr, &dr, &ar);
    sched_run(m, 0, full, nf, &df, &af);
    print_message("  %s scheduler: drafted %llu, accepted %llu (full: %llu, %llu); histories %d, %d, %d tokens\n",
                  rp_arch_name(arch), (unsigned long long)dr, (unsigned long long)ar, (unsigned long long)df,
                  (unsigned long long)af, nr[0], nr[1], nr[2]);
    assert_true(dr > ar && ar > 0);   /* drafts were accepted and rejected (rolled back) */
    for (int i = 0; i < SCHED_N; i++) {
        assert_int_equal(nr[i], nf[i]);
        assert_true(nr[i] > 3 * 32);
        assert_memory_equal(ring[i], full[i], sizeof(rp_token) * (size_t)nr[i]);
    }
    rp_model_free(m);
}

static void test_sched(void **state) {
    (void)state;
    check_sched(RP_ARCH_GEMMA2);
    check_sched(RP_ARCH_GEMMA3);
}

/* ---- the reuse engine on a ring cache: BOS + 6 documents of 40 tokens (241 tokens, ~2.5 rings of 96 cells) ---- */
static rp_reuse_opts persist_opts(void) {
    rp_reuse_opts o = rp_reuse_default_opts();
    o.persist = 1;
    return o;
}

static void check_reuse(rp_arch arch) {
    rp_test_fixture f;   /* its kv: a full cache of 1024 cells (the reference prefills) */
    assert_true(rp_test_fixture_open(&f, synth(arch), RP_TYPE_F32, 1024));
    rp_ctx *c = make_ctx(f.m, 64, 1, 1024);
    rp_kv *ring = ring_kv(f.m, 1024, RP_TYPE_F32, 64);
    rp_token docs[7][40], p1[512], p2[512];
    int32_t b1[16], b2[16], nb1, nb2;
    rp_test_make_docs(docs, 7, 31337);
    static const rp_token tail[] = {300, 301, 302, 303};
    static const int o1[] = {0, 1, 2, 3, 4, 5}, o2[] = {0, 1, 2, 3, 4, 5, 6};
    const int32_t n1 = rp_test_build(docs, o1, 6, NULL, 0, p1, b1, &nb1);
    const int32_t n2 = rp_test_build(docs, o2, 7, tail, 4, p2, b2, &nb2);
    rp_reuse_stats st;
    rp_reuse *none = rp_test_engine(&f, RP_REUSE_NONE, 0, false);
    assert_int_equal(rp_reuse_prefill(none, f.ctx, f.kv, p2, n2, b2, nb2, f.lg_b, &st), RP_OK);   /* reference */
    const rp_reuse_opts po = persist_opts();

    /* prefix reuse: the first prompt's chunks are committed as the prefill completes them (the ring keeps only
     * the last 96 cells), so the whole of it is found again */
    rp_reuse *pre = rp_test_engine(&f, RP_REUSE_PREFIX, 0, false);
    assert_int_equal(rp_reuse_prefill_opts(pre, &po, c, ring, p1, n1, b1, nb1, f.lg_a, &st), RP_OK);
    assert_int_equal(rp_reuse_commit(pre, ring), RP_OK);
    assert_int_equal(rp_reuse_prefill_opts(pre, &po, c, ring, p2, n2, b2, nb2, f.lg_a, &st), RP_OK);
    assert_int_equal(st.n_prefix, n1);
    float d_pre = rp_test_max_diff(f.lg_a, f.lg_b, f.V);
    assert_true(d_pre <= TOL);
    rp_reuse_free(pre);
    /* without persist nothing is committed early: only what the ring still holds at the commit, which cannot
     * hang off the prefix path, so the next prompt finds nothing (and is computed exactly) */
    pre = rp_test_engine(&f, RP_REUSE_PREFIX, 0, false);
    assert_int_equal(rp_reuse_prefill(pre, c, ring, p1, n1, b1, nb1, f.lg_a, &st), RP_OK);
    assert_int_equal(rp_reuse_commit(pre, ring), RP_OK);
    assert_int_equal(rp_reuse_prefill(pre, c, ring, p2, n2, b2, nb2, f.lg_a, &st), RP_OK);
    assert_true(st.n_prefix < n1);
    assert_true(rp_test_max_diff(f.lg_a, f.lg_b, f.V) <= TOL);
    rp_reuse_free(pre);

    /* blend and full at r = 1 with the documents cached alone (from the full cache) and reused at new
     * positions: the ring layers are placed window by window, and the result is the prefill's (the bar of
     * test_gemma's reuse check, 1e-4); full at r < 1 and blend at r = 0.25 run on the ring too */
    static const int o3[] = {4, 1, 5, 0, 3, 2};
    rp_token p3[512];
    int32_t b3[16], nb3;
    const int32_t n3 = rp_test_build(docs, o3, 6, tail, 4, p3, b3, &nb3);
    float *ref3 = malloc(sizeof(float) * (size_t)f.V);
    assert_int_equal(rp_reuse_prefill(none, f.ctx, f.kv, p3, n3, b3, nb3, ref3, &st), RP_OK);
    static const rp_reuse_mode modes[] = {RP_REUSE_BLEND, RP_REUSE_FULL, RP_REUSE_FULL, RP_REUSE_BLEND};
    static const float ratios[] = {1.0f, 1.0f, 0.0f, 0.25f};
    float d_blend[4];
    for (int k = 0; k < 4; k++) {
        rp_reuse *e = rp_test_engine(&f, modes[k], ratios[k], false);
        rp_test_cache_docs(&f, e, docs, f.lg_a);
        assert_int_equal(rp_reuse_prefill_opts(e, &po, c, ring, p3, n3, b3, nb3, f.lg_a, &st), RP_OK);
        assert_int_equal(st.n_prefix, 41);      /* BOS + document 4, cached as such */
        assert_int_equal(st.n_nonprefix, 200);  /* the other five, re-rotated */
        d_blend[k] = rp_test_max_diff(f.lg_a, ref3, f.V);
        for (int32_t t = 0; t < f.V; t++) assert_true(isfinite(f.lg_a[t]));
        if (ratios[k] == 1.0f) assert_true(d_blend[k] <= 1e-4f);
        /* the same on a full cache: the ring gives what it gives (r = 1: both the prefill) */
        float *full_lg = malloc(sizeof(float) * (size_t)f.V);
        rp_kv *fk = NULL;
        assert_int_equal(rp_kv_create(f.m, 1024, RP_TYPE_F32, &fk), RP_OK);
        rp_reuse *e2 = rp_test_engine(&f, modes[k], ratios[k], false);   /* its cache: only the documents */
        rp_test_cache_docs(&f, e2, docs, full_lg);
        assert_int_equal(rp_reuse_prefill(e2, c, fk, p3, n3, b3, nb3, full_lg, &st), RP_OK);
        assert_int_equal(st.n_nonprefix, 200);
        rp_reuse_free(e2);
        const float d_rf = rp_test_max_diff(f.lg_a, full_lg, f.V);
        print_message("  %s: %s r=%g on the ring vs prefill: %g; vs the same on a full cache: %g\n", rp_arch_name(arch),
                      rp_reuse_mode_name(modes[k]), (double)ratios[k], d_blend[k], d_rf);
        /* r = 1: both recompute everything; full r = 0: the same new rows over the same cached KV (the ring's
         * calls are cut at chunk ends). Blend r = 0.25 ranks per window, and the ring's windows end at chunk
         * ends: another selection, so only finite logits are asked of it. */
        if (k < 3) assert_true(d_rf <= 1e-4f);
        rp_kv_free(fk);
        free(full_lg);
        rp_reuse_free(e);
    }
    free(ref3);

    /* the flash store: committed from the ring, flushed, found by a new engine on the same store */
    char dir[] = "/tmp/rp-swa-XXXXXX";
    assert_non_null(mkdtemp(dir));
    const rp_store_params sp = rp_store_default_params();
    const rp_pool_params pp = rp_pool_default_params();
    rp_reuse_params rp = rp_reuse_default_params();
    rp.mode = RP_REUSE_PREFIX;
    float d_store = 0;
    for (int round = 0; round < 2; round++) {
        rp_reuse *e = NULL;
        rp_store *store = NULL;
        assert_int_equal(rp_reuse_create(f.m, RP_TYPE_F32, 1024, rp, &e), RP_OK);
        assert_int_equal(rp_store_open(dir, &sp, &store), RP_OK);
        assert_int_equal(rp_chunk_cache_attach_store(rp_reuse_cache(e), store, rp_reuse_salt(e), "swa", &pp), RP_OK);
        if (round == 0) {
            assert_int_equal(rp_reuse_prefill_opts(e, &po, c, ring, p1, n1, b1, nb1, f.lg_a, &st), RP_OK);
            assert_int_equal(rp_reuse_commit(e, ring), RP_OK);
            assert_int_equal(rp_chunk_cache_flush(rp_reuse_cache(e)), RP_OK);
        } else {
            assert_int_equal(rp_reuse_prefill_opts(e, &po, c, ring, p2, n2, b2, nb2, f.lg_a, &st), RP_OK);
            assert_int_equal(st.n_prefix, n1);
            d_store = rp_test_max_diff(f.lg_a, f.lg_b, f.V);
            assert_true(d_store <= TOL);
        }
        rp_reuse_free(e);   /* detaches and closes the store */
    }
    char cmd[1100];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
    print_message("  %s: on a ring of %d cells, %d tokens: prefix reuse of %d: %g; via the store: %g\n",
                  rp_arch_name(arch), ring->swa_cells, n2, n1, d_pre, d_store);
    rp_reuse_free(none);
    rp_kv_free(ring);
    rp_ctx_free(c);
    rp_test_fixture_close(&f);
}

static void test_reuse(void **state) {
    (void)state;
    check_reuse(RP_ARCH_GEMMA2);
    check_reuse(RP_ARCH_GEMMA3);
}

/* ---- the public engine: swa_full off (default) and on ---- */
static rp_engine *engine(rp_model *m, bool swa_full) {
    rp_engine_params ep = rp_engine_default_params();
    ep.n_ctx = 1024;
    ep.n_batch = 64;
    ep.kv_type = RP_KV_F32;
    ep.swa_full = swa_full;
    ep.n_seq_max = 0;
    rp_engine *e = NULL;
    assert_int_equal(rp_engine_create(m, &ep, &e), RP_OK);
    return e;
}

static void check_engine(rp_arch arch) {
    rp_model *m = load(arch);
    const int32_t V = m->hp.n_vocab;
    rp_engine *er = engine(m, false), *ef = engine(m, true);
    uint64_t want = 0;
    const int32_t nc = rp_engine_n_ctx(er);   /* 1024, or the model's training context if shorter */
    assert_true(nc > 3 * (m->hp.n_swa + 64) && nc == rp_engine_n_ctx(ef));
    assert_int_equal(rp_kv_estimate_ex(m, nc, RP_KV_F32, 64, false, &want), RP_OK);
    assert_int_equal(rp_engine_kv_bytes(er), want);
    assert_int_equal(rp_engine_kv_bytes(ef), rp_kv_bytes_per_token(m, RP_KV_F32) * (uint64_t)nc);
    assert_true(rp_engine_kv_bytes(er) < rp_engine_kv_bytes(ef));
    rp_token toks[400];
    tokens(toks, 400, 555);
    rp_seq *sr = NULL, *sf = NULL, *kr = NULL, *kf = NULL;
    assert_int_equal(rp_seq_create(er, &sr), RP_OK);
    assert_int_equal(rp_seq_create(ef, &sf), RP_OK);
    assert_int_equal(rp_seq_create(er, &kr), RP_OK);
    assert_int_equal(rp_seq_create(ef, &kf), RP_OK);
    /* a prefill through the reuse engine (reuse off: the same n_batch pieces on both, so the logits compare at
     * 1e-5; the reuse modes on a ring are test_reuse's), then feeding */
    rp_prompt *pr = NULL;
    assert_int_equal(rp_prompt_create(&pr), RP_OK);
    assert_int_equal(rp_prompt_add_tokens(pr, toks, 250, true), RP_OK);
    rp_gen_opts go = rp_gen_default_opts();
    go.reuse = RP_REUSE_NONE;
    assert_int_equal(rp_seq_prefill(sr, pr, &go, NULL), RP_OK);
    assert_int_equal(rp_seq_prefill(sf, pr, &go, NULL), RP_OK);
    float d_pre = rp_test_max_diff(rp_seq_logits(sr), rp_seq_logits(sf), V);
    assert_true(d_pre <= TOL);
    assert_int_equal(rp_seq_feed(sr, toks + 250, 60), RP_OK);
    assert_int_equal(rp_seq_feed(sf, toks + 250, 60), RP_OK);
    float d_feed = rp_test_max_diff(rp_seq_logits(sr), rp_seq_logits(sf), V);
    assert_true(d_feed <= TOL);
    /* fork, then both go on */
    assert_int_equal(rp_seq_fork(kr, sr), RP_OK);
    assert_int_equal(rp_seq_fork(kf, sf), RP_OK);
    assert_int_equal(rp_seq_feed(kr, toks + 310, 20), RP_OK);
    assert_int_equal(rp_seq_feed(kf, toks + 310, 20), RP_OK);
    float d_fork = rp_test_max_diff(rp_seq_logits(kr), rp_seq_logits(kf), V);
    assert_true(d_fork <= TOL);
    /* truncate within the slack, and far back (the ring recomputes the history), then feed on */
    const int32_t cuts[] = {300, 120};
    float d_cut[2];
    for (int k = 0; k < 2; k++) {
        assert_int_equal(rp_seq_truncate(sr, cuts[k]), RP_OK);
        assert_int_equal(rp_seq_truncate(sf, cuts[k]), RP_OK);
        assert_int_equal(rp_seq_n_past(sr), cuts[k]);
        assert_int_equal(rp_seq_feed(sr, toks + cuts[k], 30), RP_OK);
        assert_int_equal(rp_seq_feed(sf, toks + cuts[k], 30), RP_OK);
        d_cut[k] = rp_test_max_diff(rp_seq_logits(sr), rp_seq_logits(sf), V);
        assert_true(d_cut[k] <= TOL);
    }
    print_message("  %s engine: KV %llu bytes (swa_full: %llu); prefill: %g, feed: %g, fork: %g, truncate to 300: "
                  "%g, to 120: %g\n", rp_arch_name(arch), (unsigned long long)rp_engine_kv_bytes(er),
                  (unsigned long long)rp_engine_kv_bytes(ef), d_pre, d_feed, d_fork, d_cut[0], d_cut[1]);
    rp_prompt_free(pr);
    rp_seq_free(sr);
    rp_seq_free(sf);
    rp_seq_free(kr);
    rp_seq_free(kf);
    rp_engine_free(er);
    rp_engine_free(ef);
    rp_model_free(m);
}

static void test_engine(void **state) {
    (void)state;
    check_engine(RP_ARCH_GEMMA2);
    check_engine(RP_ARCH_GEMMA3);
}

/* ---- a model without sliding-window layers: rp_kv_create_swa makes the full cache ---- */
static void test_no_window(void **state) {
    (void)state;
    char path[512];
    snprintf(path, sizeof path, "%s/swa-llama-tiny.gguf", rp_test_tmpdir());
    rp_synth_params sp = rp_synth_default_params();
    sp.type = "f32";
    assert_int_equal(rp_synth_write(&sp, path), RP_OK);
    rp_model *m = NULL;
    assert_int_equal(rp_model_load(path, rp_model_default_params(), &m), RP_OK);
    assert_int_equal(rp_kv_swa_cells(m, 64), 0);
    rp_kv *kv = NULL;
    assert_int_equal(rp_kv_create_swa(m, 256, RP_TYPE_F32, 96, &kv), RP_OK);
    assert_int_equal(kv->n_ring, 0);
    assert_int_equal(kv->swa_cells, 256);
    assert_int_equal(rp_kv_bytes(kv), 2 * (size_t)m->hp.n_layer * 256 * kv->row_bytes);
    assert_true(rp_kv_can_resume(kv, 0) && rp_kv_can_resume(kv, 200));
    assert_int_equal(rp_kv_held_lo(kv), 0);
    uint64_t a = 0, b = 0;
    assert_int_equal(rp_kv_estimate_ex(m, 256, RP_KV_F32, 64, false, &a), RP_OK);
    assert_int_equal(rp_kv_estimate_ex(m, 256, RP_KV_F32, 64, true, &b), RP_OK);
    assert_int_equal(a, b);
    assert_int_equal(a, rp_kv_bytes(kv));
    rp_kv_free(kv);
    rp_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ring_rows),
        cmocka_unit_test(test_bytes),
        cmocka_unit_test(test_readme_figures),
        cmocka_unit_test(test_forward),
        cmocka_unit_test(test_rollback),
        cmocka_unit_test(test_fork_shift_demote),
        cmocka_unit_test(test_sched),
        cmocka_unit_test(test_reuse),
        cmocka_unit_test(test_engine),
        cmocka_unit_test(test_no_window),
    };
    return rp_test_main(tests, NULL, NULL);
}
