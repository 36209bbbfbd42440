/* test_gpu_offload.c — the user-facing GPU offload (gpu/gpu_offload.h through rp_model_params.n_gpu_layers):
 * stories260K (F32, Q8_0, Q4_0) with every layer on the GPU and with a CPU/GPU split (-ngl 2 of 5): the
 * goldens' logits at the last prompt position (a GPU prefill of the whole prompt in one call) and greedy decoding
 * token for token against the CPU's (the same token unless the CPU's top two are closer than the tolerance); a
 * multi-sequence batch equal to its sequences run alone; prefix reuse exact through the engine (chunks exported
 * from and imported into the GPU layers' cells); truncation and fork; blend through GPU layers (r = 1 equals
 * prefill, static equals dynamic, r = 0.25 recomputes a share) with its check layer on either side; self-drafting
 * through GPU layers and a non-F16 KV cache refused by name; lavapipe never picked by default. Skips (77) without a Vulkan device
 * or without ../shared's models. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>

#include "gpu_test.h"
#include "kv/kv.h"
#include "model/forward.h"
#include "model/model.h"
#include "model/session.h"
#include "sched/spec.h"

static char g_dev[16];   /* the fixture's device by index: lavapipe is used only when named */

static rp_model *load(const char *rel, int32_t ngl) {
    GPU_REQUIRE();
    snprintf(g_dev, sizeof g_dev, "%d", rp_gpu_device(gt.g)->index);
    const char *path = rp_test_shared(rel);
    if (!path) return NULL;
    rp_model_params p = rp_model_default_params();
    p.n_gpu_layers = ngl;
    p.gpu_device = ngl ? g_dev : NULL;
    rp_model *m = NULL;
    assert_int_equal(rp_model_load(path, p, &m), RP_OK);
    if (ngl) print_message("  %s\n", rp_model_gpu_notice(m));
    return m;
}

#define LOAD(var, rel, ngl)                    \
    rp_model *var = load(rel, ngl);            \
    RP_REQUIRE_SHARED(var, rel)

static int argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

/* ---- goldens ---- */

typedef struct {
    int n_prompt, n_gen;
    rp_token prompt[64], gen[256];
    float logits[512];
} gcase;

static int load_golden(const char *rel, gcase *cs, int max) {
    const char *path = rp_test_shared(rel);
    assert_non_null(path);
    json_error_t err;
    json_t *root = json_load_file(path, 0, &err);
    assert_non_null(root);
    json_t *arr = json_object_get(root, "cases");
    int n = 0;
    for (size_t i = 0; i < json_array_size(arr) && n < max; i++, n++) {
        json_t *c = json_array_get(arr, i), *pi = json_object_get(c, "prompt_ids"), *gi = json_object_get(c, "gen_ids");
        json_t *lg = json_object_get(c, "logits_last_prompt_pos");
        if (!lg) lg = json_object_get(c, "logits_pos0");
        gcase *g = &cs[n];
        g->n_prompt = (int)json_array_size(pi);
        g->n_gen = (int)json_array_size(gi);
        assert_true(g->n_prompt <= 64 && g->n_gen <= 256 && json_array_size(lg) == 512);
        for (int k = 0; k < g->n_prompt; k++) g->prompt[k] = (rp_token)json_integer_value(json_array_get(pi, (size_t)k));
        for (int k = 0; k < g->n_gen; k++) g->gen[k] = (rp_token)json_integer_value(json_array_get(gi, (size_t)k));
        for (int k = 0; k < 512; k++) g->logits[k] = (float)json_number_value(json_array_get(lg, (size_t)k));
    }
    json_decref(root);
    return n;
}

static rp_type g_kv = RP_TYPE_F16;   /* the goldens' KV cache type, on both sides */

static rp_session *session(rp_ctx *ctx) {
    rp_session_params sp = rp_session_default_params();
    sp.n_ctx = 256;
    sp.kv_type = g_kv;
    sp.sampler.temp = 0;
    rp_session *s = NULL;
    assert_int_equal(rp_session_create(ctx, sp, &s), RP_OK);
    return s;
}

/* golden_tol: |logit - golden| at the last prompt position; rel_tol: the GPU's logits against the CPU's (max
 * |diff| / max |logit|) at every step; min_exact: prompt cases whose greedy text equals the golden. */
static void golden(const char *model_rel, const char *golden_rel, int32_t ngl, float golden_tol, double rel_tol,
                   int min_exact) {
    LOAD(mg, model_rel, ngl);
    rp_model *mc = load(model_rel, 0);
    const int want_gpu = ngl < 0 || ngl > mg->hp.n_layer ? mg->hp.n_layer : ngl;
    assert_int_equal(rp_model_gpu_layers(mg), want_gpu);
    assert_int_equal(rp_model_gpu_layers(mc), 0);
    gcase *cs = calloc(8, sizeof *cs);
    assert_non_null(cs);
    const int n = load_golden(golden_rel, cs, 8);
    assert_true(n >= 5);
    rp_ctx_params cp = rp_ctx_default_params();
    cp.n_ctx_max = 256;
    rp_ctx *cg = NULL, *cc = NULL;
    assert_int_equal(rp_ctx_create(mg, cp, &cg), RP_OK);
    assert_int_equal(rp_ctx_create(mc, cp, &cc), RP_OK);
    const int V = mg->hp.n_vocab;
    int exact = 0;
    double worst = 0;
    for (int i = 0; i < n; i++) {
        const gcase *g = &cs[i];
        rp_session *sg = session(cg), *sc = session(cc);
        assert_int_equal(rp_session_feed(sg, g->prompt, g->n_prompt), RP_OK);   /* one prefill call */
        assert_int_equal(rp_session_feed(sc, g->prompt, g->n_prompt), RP_OK);
        float gerr = 0;
        for (int k = 0; k < V; k++) gerr = fmaxf(gerr, fabsf(rp_session_logits(sg)[k] - g->logits[k]));
        if (gerr > golden_tol) fail_msg("%s case %d: |logit - golden| %.3g > %.3g", model_rel, i, gerr, golden_tol);
        int match = 0, steps = 0;
        bool same_text = true, diverged = false;
        for (int k = 0; k < g->n_gen && !diverged; k++) {
            const float *lg = rp_session_logits(sg), *lc = rp_session_logits(sc);
            double amax = 0, dmax = 0;
            for (int v = 0; v < V; v++) {
                amax = fmax(amax, fabs(lc[v]));
                dmax = fmax(dmax, fabs((double)lg[v] - lc[v]));
            }
            if (dmax > rel_tol * amax)
                fail_msg("%s case %d step %d: GPU logits differ from the CPU's by %.4g (max |logit| %.4g)", model_rel,
                         i, k, dmax, amax);
            worst = fmax(worst, dmax / amax);
            const int a = argmax(lc, V), b = argmax(lg, V);
            if (a != b) {
                if (fabs(lc[a] - lc[b]) > 2 * rel_tol * amax)
                    fail_msg("%s case %d step %d: CPU picks %d (%.5g), GPU %d (%.5g)", model_rel, i, k, a, lc[a], b,
                             lc[b]);
                diverged = true;   /* a near tie: the texts may part from here on */
                same_text = false;
                break;
            }
            steps++;
            if (b == g->gen[k]) match++;
            else same_text = false;
            rp_token t = (rp_token)b;
            if (k + 1 < g->n_gen) {
                assert_int_equal(rp_session_feed(sg, &t, 1), RP_OK);
                assert_int_equal(rp_session_feed(sc, &t, 1), RP_OK);
            }
        }
        print_message("  %s -ngl %d case %d: |logit - golden| %.2e, %d steps equal to the CPU, golden %d/%d\n",
                      model_rel, want_gpu, i, gerr, steps, match, g->n_gen);
        if (i > 0 && same_text) exact++;
        rp_session_free(sg);
        rp_session_free(sc);
    }
    print_message("  worst |GPU - CPU| / max|logit| %.3g; prompt cases equal to the golden: %d\n", worst, exact);
    assert_true(exact >= min_exact);
    rp_ctx_free(cg);
    rp_ctx_free(cc);
    rp_model_free(mg);
    rp_model_free(mc);
    free(cs);
}

/* F32 weights: the KV cache is F16 on both sides; the CPU's F16-KV golden bar (test_model: 2e-2, 3 of 4). */
static void test_golden_f32_all(void **s) { (void)s; golden("models/stories260K.gguf", "models/stories260K.golden.json", -1, 2e-2f, 1e-3, 3); }
static void test_golden_f32_split(void **s) { (void)s; golden("models/stories260K.gguf", "models/stories260K.golden.json", 2, 2e-2f, 1e-3, 3); }
/* Q8_0 / Q4_0: the CPU quantizes activations to Q8_0, the GPU keeps them F32 (test_gpu_forward's 2e-2). Split,
 * the CPU layers quantize and the GPU layers do not, so the run is neither the CPU's nor the GPU's computation:
 * 3e-2 (about 2.0e-2 seen on lavapipe, on the order of the CPU's own quantization error against the golden), and
 * a near tie may part the texts (Q4_0 case 2 at step 38 on lavapipe), so 2 of 4 prompt cases equal the golden. */
static void test_golden_q8_0_all(void **s) { (void)s; golden("models/stories260K-q8_0.gguf", "models/stories260K-q8_0.golden.json", -1, 0.3f, 2e-2, 3); }
static void test_golden_q8_0_split(void **s) { (void)s; golden("models/stories260K-q8_0.gguf", "models/stories260K-q8_0.golden.json", 2, 0.3f, 3e-2, 2); }
static void test_golden_q4_0_all(void **s) { (void)s; golden("models/stories260K-q4_0.gguf", "models/stories260K-q4_0.golden.json", -1, 0.3f, 2e-2, 3); }
static void test_golden_q4_0_split(void **s) { (void)s; golden("models/stories260K-q4_0.gguf", "models/stories260K-q4_0.golden.json", 2, 0.3f, 3e-2, 2); }
/* A Q8_0 KV cache on both sides (the GPU's cells in ggml's Q8_0 blocks, written by kv_store_q8_0): F32 weights, so
 * the cache's rounding is the difference from the F16-cache golden (a loose 1.0: what matters is the next bar), and
 * the GPU against the CPU with the same cache type: the F32 weights' 1e-3 (3e-5 seen on lavapipe: each side rounds
 * its own K / V rows, which differ by float rounding only). */
static void test_golden_q8kv_all(void **s) {
    (void)s;
    g_kv = RP_TYPE_Q8_0;
    golden("models/stories260K.gguf", "models/stories260K.golden.json", -1, 1.0f, 1e-3, 2);
    g_kv = RP_TYPE_F16;
}
static void test_golden_q8kv_split(void **s) {
    (void)s;
    g_kv = RP_TYPE_Q8_0;
    golden("models/stories260K.gguf", "models/stories260K.golden.json", 2, 1.0f, 1e-3, 2);
    g_kv = RP_TYPE_F16;
}

/* ---- a multi-sequence batch ---- */

/* Three sequences prefilled in one batch (runs of 7, 1 and 12 rows, with logits on each run's last row), then a
 * decode step of all three in one batch: the logits equal, bit for bit, the same sequences run alone (each row's
 * matmul and attention are computed independently of the batch). */
static void test_multi_sequence(void **state) {
    (void)state;
    LOAD(m, "models/stories260K.gguf", -1);
    rp_ctx_params cp = rp_ctx_default_params();
    cp.n_ctx_max = 64;
    cp.n_outputs = 8;
    rp_ctx *ctx = NULL;
    assert_int_equal(rp_ctx_create(m, cp, &ctx), RP_OK);
    const int V = m->hp.n_vocab, len[3] = {7, 1, 12};
    rp_kv *kv[3], *solo = NULL;
    for (int s = 0; s < 3; s++) assert_int_equal(rp_kv_create(m, 64, RP_TYPE_F16, &kv[s]), RP_OK);
    assert_int_equal(rp_kv_create(m, 64, RP_TYPE_F16, &solo), RP_OK);
    rp_batch b;
    assert_int_equal(rp_batch_init(&b, 32), RP_OK);
    float *together = malloc(sizeof(float) * 6 * (size_t)V);
    assert_non_null(together);
    for (int s = 0; s < 3; s++)
        for (int i = 0; i < len[s]; i++) rp_batch_add(&b, (rp_token)(1 + (s * 37 + i * 11) % 400), s, i, i, i == len[s] - 1);
    assert_int_equal(rp_forward(ctx, &b, kv, 3), RP_OK);
    assert_int_equal(rp_ctx_n_outputs(ctx), 3);
    for (int s = 0; s < 3; s++) memcpy(together + (size_t)s * V, rp_ctx_logits(ctx, s), sizeof(float) * (size_t)V);
    rp_batch_clear(&b);
    for (int s = 0; s < 3; s++) rp_batch_add(&b, (rp_token)(5 + s), s, len[s], len[s], true);
    assert_int_equal(rp_forward(ctx, &b, kv, 3), RP_OK);
    for (int s = 0; s < 3; s++) memcpy(together + (size_t)(3 + s) * V, rp_ctx_logits(ctx, s), sizeof(float) * (size_t)V);
    for (int s = 0; s < 3; s++) {
        rp_kv_clear(solo);
        rp_batch_clear(&b);
        for (int i = 0; i < len[s]; i++) rp_batch_add(&b, (rp_token)(1 + (s * 37 + i * 11) % 400), 0, i, i, i == len[s] - 1);
        assert_int_equal(rp_forward(ctx, &b, &solo, 1), RP_OK);
        if (memcmp(rp_ctx_logits(ctx, 0), together + (size_t)s * V, sizeof(float) * (size_t)V))
            fail_msg("sequence %d: its prefill in a batch of three differs from alone", s);
        rp_batch_clear(&b);
        rp_batch_add(&b, (rp_token)(5 + s), 0, len[s], len[s], true);
        assert_int_equal(rp_forward(ctx, &b, &solo, 1), RP_OK);
        if (memcmp(rp_ctx_logits(ctx, 0), together + (size_t)(3 + s) * V, sizeof(float) * (size_t)V))
            fail_msg("sequence %d: its decode step in a batch of three differs from alone", s);
        assert_int_equal(solo->n, len[s] + 1);
        assert_int_equal(solo->pos[len[s]], len[s]);
    }
    /* a cache made without the GPU part is refused, naming why */
    rp_kv *plain = NULL;
    assert_int_equal(rp_kv_create_shape(m->hp.n_layer, m->hp.n_head_kv, m->hp.head_dim, 64, RP_TYPE_F16,
                                        RP_CPU_SCALAR, &plain), RP_OK);
    rp_batch_clear(&b);
    rp_batch_add(&b, 1, 0, 0, 0, true);
    assert_int_equal(rp_forward(ctx, &b, &plain, 1), RP_ERR_INVALID_ARG);
    assert_non_null(strstr(rp_last_error(), "no GPU cells"));
    /* the GPU's KV cache is F16 only */
    rp_kv *f32 = NULL;
    assert_int_equal(rp_kv_create(m, 64, RP_TYPE_F32, &f32), RP_ERR_UNSUPPORTED);
    assert_non_null(strstr(rp_last_error(), "f16 or q8_0"));
    rp_kv_free(plain);
    rp_batch_free(&b);
    free(together);
    for (int s = 0; s < 3; s++) rp_kv_free(kv[s]);
    rp_kv_free(solo);
    rp_ctx_free(ctx);
    rp_model_free(m);
}

/* ---- the engine: prefix reuse, truncation, fork, refusals ---- */

static rp_engine *engine(rp_model *m, rp_reuse_mode mode) {
    rp_engine_params ep = rp_engine_default_params();
    ep.n_ctx = 256;
    ep.reuse = mode;
    ep.n_threads = 1;
    rp_engine *e = NULL;
    assert_int_equal(rp_engine_create(m, &ep, &e), RP_OK);
    return e;
}

/* tokens [0, n) in segments of 32 then the rest */
static rp_prompt *prompt(const rp_token *t, int32_t n) {
    rp_prompt *p = NULL;
    assert_int_equal(rp_prompt_create(&p), RP_OK);
    for (int32_t a = 0; a < n;) {
        const int32_t e = a < 64 ? (a + 32 < n ? a + 32 : n) : n;
        assert_int_equal(rp_prompt_add_tokens(p, t + a, e - a, a > 0), RP_OK);
        a = e;
    }
    return p;
}

static void same_logits(const float *a, const float *b, int V, const char *what) {
    if (memcmp(a, b, sizeof(float) * (size_t)V)) {
        double d = 0;
        for (int i = 0; i < V; i++) d = fmax(d, fabs((double)a[i] - b[i]));
        fail_msg("%s: logits differ (max |diff| %.3g)", what, d);
    }
}

static void test_engine(void **state) {
    (void)state;
    LOAD(m, "models/stories260K.gguf", -1);
    const int V = m->hp.n_vocab;
    rp_token toks[120];
    for (int i = 0; i < 120; i++) toks[i] = (rp_token)(i == 0 ? 1 : 3 + (i * 29) % 480);
    rp_engine *pre = engine(m, RP_REUSE_PREFIX), *none = engine(m, RP_REUSE_NONE);
    rp_seq *s = NULL, *t = NULL, *f = NULL;
    assert_int_equal(rp_seq_create(pre, &s), RP_OK);
    assert_int_equal(rp_seq_create(none, &t), RP_OK);
    assert_int_equal(rp_seq_create(pre, &f), RP_OK);
    rp_gen_opts o = rp_gen_default_opts();
    rp_gen_stats st;
    /* 1: cache the first 64 tokens (two segments), exported from the GPU layers' cells */
    rp_prompt *p1 = prompt(toks, 64), *p2 = prompt(toks, 120);
    assert_int_equal(rp_seq_prefill(s, p1, &o, &st), RP_OK);
    assert_int_equal(rp_seq_commit(s), RP_OK);
    /* 2: the extension reuses them (imported into a fresh sequence's GPU cells), exactly */
    assert_int_equal(rp_seq_prefill(s, p2, &o, &st), RP_OK);
    print_message("  prefix reuse on the GPU: %d of %d tokens reused\n", st.reused_prefix, rp_prompt_n_tokens(p2));
    assert_int_equal(st.reused_prefix, 64);
    assert_int_equal(st.reused_prefix_exact, 64);
    float *want = malloc(sizeof(float) * (size_t)V);
    assert_non_null(want);
    assert_int_equal(rp_seq_prefill(t, p2, &o, &st), RP_OK);
    assert_int_equal(st.reused_prefix, 0);
    memcpy(want, rp_seq_logits(t), sizeof(float) * (size_t)V);
    same_logits(rp_seq_logits(s), want, V, "prefix reuse vs a full prefill on the GPU");
    /* truncation (speculative rollback, a re-rendered chat): keep 100 tokens, feed the rest again */
    assert_int_equal(rp_seq_truncate(s, 100), RP_OK);
    assert_int_equal(rp_seq_feed(s, toks + 100, 20), RP_OK);
    same_logits(rp_seq_logits(s), want, V, "truncate + feed vs a full prefill");
    /* fork: the copy's next step equals the source's */
    assert_int_equal(rp_seq_fork(f, s), RP_OK);
    const rp_token next = 42;
    assert_int_equal(rp_seq_feed(s, &next, 1), RP_OK);
    assert_int_equal(rp_seq_feed(f, &next, 1), RP_OK);
    same_logits(rp_seq_logits(f), rp_seq_logits(s), V, "a fork's next step vs its source's");
    rp_prompt_free(p1);
    rp_prompt_free(p2);
    free(want);
    rp_seq_free(s);
    rp_seq_free(t);
    rp_seq_free(f);
    rp_engine_free(pre);
    rp_engine_free(none);
    rp_model_free(m);
}

/* ---- blend through GPU layers ---- */

static rp_engine *blend_engine(rp_model *m, float ratio, bool stat, rp_select_kind sel) {
    rp_engine_params ep = rp_engine_default_params();
    ep.select = sel;
    ep.n_ctx = 256;
    ep.reuse = RP_REUSE_BLEND;
    ep.recompute_ratio = ratio;
    ep.static_mode = stat;
    ep.n_threads = 1;
    rp_engine *e = NULL;
    assert_int_equal(rp_engine_create(m, &ep, &e), RP_OK);
    return e;
}

/* Documents A and B cached alone, then the prompt B A tail: A is reused at a new position (re-rotated) and blend
 * recomputes a share of its rows past the check layer (layer 1). ratio 1 recomputes them all: the logits of a
 * full prefill. *reused: the non-prefix tokens reused. */
static void blend_prompt(rp_engine *e, const rp_token *a, const rp_token *b, float *logits, rp_gen_stats *out) {
    rp_seq *s = NULL;
    assert_int_equal(rp_seq_create(e, &s), RP_OK);
    rp_gen_opts o = rp_gen_default_opts();
    rp_gen_stats st;
    rp_token bos = 1;
    for (int d = 0; d < 2; d++) {   /* each document after BOS, committed */
        rp_prompt *p = NULL;
        assert_int_equal(rp_prompt_create(&p), RP_OK);
        assert_int_equal(rp_prompt_add_tokens(p, &bos, 1, false), RP_OK);
        assert_int_equal(rp_prompt_add_tokens(p, d ? b : a, 48, true), RP_OK);
        assert_int_equal(rp_seq_prefill(s, p, &o, &st), RP_OK);
        assert_int_equal(rp_seq_commit(s), RP_OK);
        rp_prompt_free(p);
    }
    static const rp_token tail[6] = {70, 71, 72, 73, 74, 75};
    rp_prompt *p = NULL;
    assert_int_equal(rp_prompt_create(&p), RP_OK);
    assert_int_equal(rp_prompt_add_tokens(p, &bos, 1, false), RP_OK);
    assert_int_equal(rp_prompt_add_tokens(p, b, 48, true), RP_OK);
    assert_int_equal(rp_prompt_add_tokens(p, a, 48, true), RP_OK);
    assert_int_equal(rp_prompt_add_tokens(p, tail, 6, true), RP_OK);
    assert_int_equal(rp_seq_prefill(s, p, &o, out), RP_OK);
    memcpy(logits, rp_seq_logits(s), sizeof(float) * 512);
    rp_prompt_free(p);
    rp_seq_free(s);
}

static void full_prefill(rp_model *m, const rp_token *a, const rp_token *b, float *logits) {
    rp_engine *none = engine(m, RP_REUSE_NONE);
    rp_seq *s = NULL;
    assert_int_equal(rp_seq_create(none, &s), RP_OK);
    rp_token t[103];
    t[0] = 1;
    memcpy(t + 1, b, sizeof(rp_token) * 48);
    memcpy(t + 49, a, sizeof(rp_token) * 48);
    for (int i = 0; i < 6; i++) t[97 + i] = (rp_token)(70 + i);
    assert_int_equal(rp_seq_feed(s, t, 103), RP_OK);
    memcpy(logits, rp_seq_logits(s), sizeof(float) * 512);
    rp_seq_free(s);
    rp_engine_free(none);
}

static double max_diff(const float *x, const float *y, int n) {
    double d = 0;
    for (int i = 0; i < n; i++) d = fmax(d, fabs((double)x[i] - y[i]));
    return d;
}

/* blend at r = 1 equals a full prefill, static mode equals dynamic, and r = 0.25 recomputes a quarter of the reused
 * rows and gives what the CPU's blend gives (the same rows chosen); with the check layer on the CPU (-ngl 2, 3),
 * and on the GPU (-ngl all and -ngl 4, layer 0 on the CPU: the deviation rule, as the check layer's queries stay on
 * the device — the CPU's blend with select dev is the reference there). */
static void test_blend(void **state) {
    (void)state;
    rp_token a[48], b[48];
    for (int i = 0; i < 48; i++) {
        a[i] = (rp_token)(3 + (i * 37) % 400);
        b[i] = (rp_token)(5 + (i * 53) % 400);
    }
    static const int32_t k_ngl[4] = {-1, 4, 3, 2};
    float *want = malloc(sizeof(float) * 512 * 6), *got = want + 512, *got_s = want + 1024, *got_q = want + 1536;
    float *cpu_dev = want + 2048, *cpu_hyb = want + 2560;
    assert_non_null(want);
    {   /* the CPU's blend at r = 0.25, both rules */
        LOAD(mc, "models/stories260K.gguf", 0);
        rp_gen_stats sc;
        rp_engine *ed = blend_engine(mc, 0.25f, false, RP_SELECT_DEV), *eh = blend_engine(mc, 0.25f, false, RP_SELECT_HYBRID);
        blend_prompt(ed, a, b, cpu_dev, &sc);
        blend_prompt(eh, a, b, cpu_hyb, &sc);
        rp_engine_free(ed);
        rp_engine_free(eh);
        full_prefill(mc, a, b, want);
        print_message("  CPU blend r=0.25 vs prefill: dev %.3g, hybrid %.3g\n", max_diff(cpu_dev, want, 512),
                      max_diff(cpu_hyb, want, 512));
        rp_model_free(mc);
    }
    for (int k = 0; k < 4; k++) {
        LOAD(m, "models/stories260K.gguf", k_ngl[k]);
        assert_int_equal(m->hp.n_vocab, 512);
        full_prefill(m, a, b, want);
        rp_gen_stats st;
        rp_engine *e1 = blend_engine(m, 1.0f, false, RP_SELECT_HYBRID), *es = blend_engine(m, 1.0f, true, RP_SELECT_HYBRID);
        blend_prompt(e1, a, b, got, &st);
        assert_true(st.reused_nonprefix >= 48);
        assert_int_equal(st.recomputed, st.reused_nonprefix);
        rp_gen_stats ss;
        blend_prompt(es, a, b, got_s, &ss);
        assert_true(ss.static_shapes);   /* fixed call shapes, padded, through the GPU layers */
        const double d1 = max_diff(got, want, 512), ds = max_diff(got_s, got, 512);
        rp_engine *eq = blend_engine(m, 0.25f, false, RP_SELECT_HYBRID);
        rp_gen_stats sq;
        blend_prompt(eq, a, b, got_q, &sq);
        const bool check_on_gpu = m->hp.n_layer - rp_model_gpu_layers(m) <= 1;
        const float *ref = check_on_gpu ? cpu_dev : cpu_hyb;
        const double dq = max_diff(got_q, ref, 512), dp = max_diff(got_q, want, 512);
        print_message("  -ngl %d (CPU layers %d): blend r=1 vs prefill %.3g, static vs dynamic %.3g; r=0.25 recomputed "
                      "%d of %d reused, vs the CPU's blend (%s) %.3g, vs prefill %.3g\n",
                      k_ngl[k], m->hp.n_layer - rp_model_gpu_layers(m), d1, ds, sq.recomputed, sq.reused_nonprefix,
                      check_on_gpu ? "dev" : "hybrid", dq, dp);
        assert_true(d1 < 1e-3);
        assert_true(ds < 1e-3);
        assert_true(sq.recomputed > 0 && sq.recomputed < sq.reused_nonprefix);
        assert_true(dq < 0.05);   /* the goldens' GPU-vs-CPU differences are up to ~0.02 (F32 weights) */
        rp_engine_free(e1);
        rp_engine_free(es);
        rp_engine_free(eq);
        rp_model_free(m);
    }
    free(want);
}

/* Self-speculative drafting steps through the first layers on the CPU: refused when they are on the GPU, allowed
 * when the split keeps them on the CPU. */
static void test_self_draft(void **state) {
    (void)state;
    LOAD(m, "models/stories260K.gguf", 2);   /* layers 3-4 on the GPU */
    rp_ctx_params cp = rp_ctx_default_params();
    cp.n_ctx_max = 64;
    rp_ctx *ctx = NULL;
    assert_int_equal(rp_ctx_create(m, cp, &ctx), RP_OK);
    rp_kv *kv = NULL;
    assert_int_equal(rp_kv_create(m, 64, RP_TYPE_F16, &kv), RP_OK);
    rp_drafter *d = NULL;
    assert_int_equal(rp_drafter_self_create(ctx, &kv, 1, 4, &d), RP_ERR_UNSUPPORTED);
    assert_non_null(strstr(rp_last_error(), "GPU"));
    assert_int_equal(rp_drafter_self_create(ctx, &kv, 1, 3, &d), RP_OK);
    rp_drafter_free(d);
    rp_kv_free(kv);
    rp_ctx_free(ctx);
    rp_model_free(m);
}

/* The default (-1, no device named) never picks a CPU-type device: with lavapipe alone the model is CPU only and
 * the notice says why. */
static void test_default_skips_cpu_devices(void **state) {
    (void)state;
    GPU_REQUIRE();
    rp_gpu_desc d[8];
    int32_t n = 0;
    assert_int_equal(rp_gpu_list(d, 8, &n), RP_OK);
    bool only_cpu = n > 0;
    for (int32_t i = 0; i < n && i < 8; i++) only_cpu = only_cpu && !strcmp(d[i].kind, "cpu");
    const char *env = getenv("RP_GPU_DEVICE");
    if (!only_cpu || (env && *env)) RP_SKIP("a non-CPU Vulkan device (or $RP_GPU_DEVICE): the default uses it\n");
    const char *path = rp_test_shared("models/stories260K.gguf");
    RP_REQUIRE_SHARED(path, "models/stories260K.gguf");
    rp_model *m = NULL;
    assert_int_equal(rp_model_load(path, rp_model_default_params(), &m), RP_OK);
    print_message("  default: %s\n", rp_model_gpu_notice(m));
    assert_int_equal(rp_model_gpu_layers(m), 0);
    assert_non_null(strstr(rp_model_gpu_notice(m), "CPU-type"));
    rp_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_golden_f32_all),   cmocka_unit_test(test_golden_f32_split),
        cmocka_unit_test(test_golden_q8_0_all),  cmocka_unit_test(test_golden_q8_0_split),
        cmocka_unit_test(test_golden_q4_0_all),  cmocka_unit_test(test_golden_q4_0_split),
        cmocka_unit_test(test_golden_q8kv_all),  cmocka_unit_test(test_golden_q8kv_split),
        cmocka_unit_test(test_multi_sequence),   cmocka_unit_test(test_engine),
        cmocka_unit_test(test_blend),
        cmocka_unit_test(test_self_draft),       cmocka_unit_test(test_default_skips_cpu_devices),
    };
    return rp_test_main(tests, NULL, gpu_teardown);
}
