/* test_arch.c — the qwen2 and phi3 architectures: binding (biases, fused views, LongRoPE), fused equals unfused,
 * parity with llama.cpp on synthetic files (tests/data/arch, made by bench/peer/arch_golden.sh), and the reuse
 * bars (prefix reuse exact, re-rotation exact, blend / full at r = 1 equal prefill). */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testfix.h"
#include "kernels/cpu.h"
#include "model/forward.h"
#include "model/model.h"
#include "model/synth.h"
#include "reuse/engine.h"

static const char *synth(const char *arch_name, const char *preset, const char *type, uint64_t seed, bool unfused) {
    static char path[8][512];
    static int slot;
    char *p = path[slot++ % 8];
    snprintf(p, sizeof path[0], "%s/%s-%s-%s-%llu%s.gguf", rp_test_tmpdir(), arch_name, preset, type,
             (unsigned long long)seed, unfused ? "-unfused" : "");
    rp_synth_params sp = rp_synth_default_params();
    sp.arch = !strcmp(arch_name, "qwen2") ? RP_ARCH_QWEN2 : !strcmp(arch_name, "phi3") ? RP_ARCH_PHI3
              : !strcmp(arch_name, "qwen3") ? RP_ARCH_QWEN3 : RP_ARCH_LLAMA;
    sp.preset = preset;
    sp.type = type;
    sp.seed = seed;
    sp.unfused = unfused;
    assert_int_equal(rp_synth_write(&sp, p), RP_OK);
    return p;
}

static rp_model *load(const char *path, int cpu_level) {
    rp_model_params mp = rp_model_default_params();
    mp.cpu_level = cpu_level;
    rp_model *m = NULL;
    assert_int_equal(rp_model_load(path, mp, &m), RP_OK);
    return m;
}

/* Prefill of toks[0..n) in one sequence; logits of the rows in want[] (ascending) into out (n_want x V). */
static void prefill(const rp_model *m, const rp_token *toks, int32_t n, const int32_t *want, int n_want, float *out) {
    rp_ctx_params cp = rp_ctx_default_params();
    cp.n_ctx_max = n;
    cp.n_batch = 512;
    cp.n_outputs = n_want > 0 ? n_want : 1;
    rp_ctx *c = NULL;
    rp_kv *kv = NULL;
    assert_int_equal(rp_ctx_create(m, cp, &c), RP_OK);
    assert_int_equal(rp_kv_create(m, n, RP_TYPE_F32, &kv), RP_OK);
    rp_batch b;
    assert_int_equal(rp_batch_init(&b, 512), RP_OK);
    const int32_t V = m->hp.n_vocab;
    int w = 0;
    for (int32_t i0 = 0; i0 < n; i0 += 512) {
        rp_batch_clear(&b);
        int out0 = w;
        for (int32_t i = i0; i < n && i < i0 + 512; i++) {
            bool lg = w < n_want && want[w] == i;
            if (lg) w++;
            assert_int_equal(rp_batch_add(&b, toks[i], 0, i, i, lg), RP_OK);
        }
        assert_int_equal(rp_forward(c, &b, &kv, 1), RP_OK);
        for (int k = out0; k < w; k++) memcpy(out + (size_t)k * V, rp_ctx_logits(c, k - out0), sizeof(float) * (size_t)V);
    }
    assert_int_equal(w, n_want);
    rp_batch_free(&b);
    rp_kv_free(kv);
    rp_ctx_free(c);
}

/* bench model's / arch_logits.mjs's pseudo-random prompt: xorshift64 from 0x9e3779b97f4a7c15, id = x % V */
static void prompt_tokens(rp_token *out, int32_t n, int32_t V) {
    uint64_t x = 0x9e3779b97f4a7c15ULL;
    for (int32_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out[i] = (rp_token)(x % (uint64_t)V);
    }
}

/* ---- binding ---- */

static void test_bind(void **state) {
    (void)state;
    rp_model *m = load(synth("qwen2", "tiny", "q8_0", 1, false), -1);
    assert_int_equal(m->hp.arch, RP_ARCH_QWEN2);
    assert_string_equal(rp_arch_name(m->hp.arch), "qwen2");
    assert_int_equal(m->hp.rope_kind, RP_ROPE_NEOX);
    for (int l = 0; l < m->hp.n_layer; l++) {
        assert_non_null(m->layers[l].bq);
        assert_non_null(m->layers[l].bk);
        assert_non_null(m->layers[l].bv);
    }
    rp_model_free(m);

    m = load(synth("phi3", "tiny", "q8_0", 1, false), -1);
    assert_int_equal(m->hp.arch, RP_ARCH_PHI3);
    assert_string_equal(rp_arch_name(m->hp.arch), "phi3");
    assert_int_equal(m->hp.rope_kind, RP_ROPE_NEOX);
    assert_false(m->hp.rope_longrope);
    const int64_t QD = (int64_t)m->hp.n_head * m->hp.head_dim, KD = (int64_t)m->hp.n_head_kv * m->hp.head_dim;
    for (int l = 0; l < m->hp.n_layer; l++) {
        const rp_layer *L = &m->layers[l];
        assert_null(L->bq);
        /* views of the fused tensors' rows, no copies: q | k | v and gate | up adjacent in the mapping */
        assert_true((const uint8_t *)L->wk.data == (const uint8_t *)L->wq.data + QD * L->wq.row_bytes);
        assert_true((const uint8_t *)L->wv.data == (const uint8_t *)L->wk.data + KD * L->wk.row_bytes);
        assert_true((const uint8_t *)L->w_up.data == (const uint8_t *)L->w_gate.data + m->hp.n_ff * L->w_gate.row_bytes);
        assert_int_equal(L->wq.rows, QD);
        assert_int_equal(L->wk.rows, KD);
        assert_int_equal(L->w_gate.rows, m->hp.n_ff);
        assert_int_equal(L->w_up.rows, m->hp.n_ff);
    }
    rp_model_free(m);

    /* LongRoPE: Phi-4-mini's partial rotary (48 of 64 dims here), the short and the long factors, the attention
     * factor; the context is the file's (131072): caches past the original length take the long factors */
    m = load(synth("phi3", "tiny-longrope", "f32", 1, false), -1);
    assert_true(m->hp.rope_longrope);
    assert_int_equal(m->hp.n_rot, 48);
    assert_int_equal(m->hp.head_dim, 64);
    assert_int_equal(m->hp.n_ctx_train, 131072);
    assert_int_equal(m->hp.rope_orig_ctx, 4096);
    assert_non_null(m->rope_inv_freq_long);
    assert_false(rp_model_rope_long(m, 4096));
    assert_true(rp_model_rope_long(m, 4097));
    {
        const rp_gguf_tensor *tl = rp_gguf_find_tensor(m->gguf, "rope_factors_long.weight");
        assert_non_null(tl);
        const float *lf = (const float *)tl->data;
        for (int i = 0; i < m->hp.n_rot / 2; i++) {
            double want = pow(10000.0, -2.0 * i / m->hp.n_rot) / lf[i];
            assert_true(fabs(m->rope_inv_freq_long[i] - want) <= 1e-6 * want);
        }
        rp_kv *ks = NULL, *kl = NULL;
        assert_int_equal(rp_kv_create(m, 4096, RP_TYPE_F16, &ks), RP_OK);
        assert_int_equal(rp_kv_create(m, 8192, RP_TYPE_F16, &kl), RP_OK);
        assert_false(ks->rope_long);
        assert_true(kl->rope_long);
        assert_int_equal(rp_kv_copy(kl, ks), RP_ERR_INVALID_ARG);   /* K rotated by other tables */
        rp_kv_free(ks);
        rp_kv_free(kl);
    }
    const double af = sqrt(1.0 + log(131072.0 / 4096.0) / log(4096.0));
    assert_true(fabs(m->hp.rope_attn_factor - af) < 1e-6);
    const rp_gguf_tensor *ts = rp_gguf_find_tensor(m->gguf, "rope_factors_short.weight");
    assert_non_null(ts);
    const float *sf = (const float *)ts->data;
    int n_scaled = 0;
    for (int i = 0; i < m->hp.n_rot / 2; i++) {
        double want = pow(10000.0, -2.0 * i / m->hp.n_rot) / sf[i];
        assert_true(fabs(m->rope_inv_freq[i] - want) <= 1e-6 * want);
        n_scaled += sf[i] > 1.01f;
    }
    assert_true(n_scaled > 4);
    float c[24], s[24];
    rp_model_rope_cs(m, 0, c, s);   /* cos 0 = 1 carries the attention factor */
    assert_true(fabs(c[0] - af) < 1e-6);
    rp_model_free(m);
}

/* ---- the fused tensors split at load equal the separate tensors, at every kernel level ---- */

static void test_fused_equals_unfused(void **state) {
    (void)state;
    const char *types[] = {"f32", "q8_0", "q4_0", "q4_k"};
    rp_token toks[300];
    prompt_tokens(toks, 300, 512);
    const int32_t want[] = {0, 150, 299};
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        const char *fa = synth("phi3", "tiny", types[t], 3, false), *fb = synth("phi3", "tiny", types[t], 3, true);
        for (int lvl = 0; lvl <= (int)rp_cpu_info_get()->best; lvl++) {
            rp_model *a = load(fa, lvl), *b = load(fb, lvl);
            assert_non_null(rp_gguf_find_tensor(a->gguf, "blk.0.attn_qkv.weight"));
            assert_null(rp_gguf_find_tensor(b->gguf, "blk.0.attn_qkv.weight"));
            assert_non_null(rp_gguf_find_tensor(b->gguf, "blk.0.ffn_gate.weight"));
            const int32_t V = a->hp.n_vocab;
            float *la = malloc(sizeof(float) * 3 * (size_t)V), *lb = malloc(sizeof(float) * 3 * (size_t)V);
            prefill(a, toks, 300, want, 3, la);
            prefill(b, toks, 300, want, 3, lb);
            float spread = 0;
            for (int32_t i = 0; i < V; i++) spread = fmaxf(spread, fabsf(la[i]));
            print_message("  phi3 %s at %s: fused vs unfused logits %s (|logit| up to %.1f)\n", types[t],
                          rp_cpu_level_name((rp_cpu_level)lvl), memcmp(la, lb, sizeof(float) * 3 * (size_t)V) ? "DIFFER" : "identical",
                          spread);
            assert_memory_equal(la, lb, sizeof(float) * 3 * (size_t)V);
            assert_true(spread > 1.0f);
            free(la);
            free(lb);
            rp_model_free(a);
            rp_model_free(b);
        }
    }
}

/* A peaked phi3 file (synth --peak: queries scaled) holds the same weights fused and unfused: the q rows of the
 * fused attn_qkv get the same scale as the separate attn_q. */
static void test_fused_equals_unfused_peaked(void **state) {
    (void)state;
    rp_token toks[64];
    prompt_tokens(toks, 64, 512);
    const int32_t want[] = {63};
    char path[2][512];
    for (int u = 0; u < 2; u++) {
        snprintf(path[u], sizeof path[u], "%s/phi3-peak%s.gguf", rp_test_tmpdir(), u ? "-unfused" : "");
        rp_synth_params sp = rp_synth_default_params();
        sp.arch = RP_ARCH_PHI3;
        sp.type = "f32";
        sp.peak = 3;
        sp.unfused = u;
        assert_int_equal(rp_synth_write(&sp, path[u]), RP_OK);
    }
    rp_model *a = load(path[0], (int)rp_cpu_info_get()->best), *b = load(path[1], (int)rp_cpu_info_get()->best);
    const int32_t V = a->hp.n_vocab;
    float *la = malloc(sizeof(float) * (size_t)V), *lb = malloc(sizeof(float) * (size_t)V);
    prefill(a, toks, 64, want, 1, la);
    prefill(b, toks, 64, want, 1, lb);
    assert_memory_equal(la, lb, sizeof(float) * (size_t)V);
    free(la);
    free(lb);
    rp_model_free(a);
    rp_model_free(b);
    remove(path[0]);
    remove(path[1]);
}

/* ---- parity with llama.cpp ---- */

/* log softmax in double */
static void log_softmax(const float *lg, int32_t V, double *out) {
    double mx = -INFINITY, s = 0;
    for (int32_t i = 0; i < V; i++) mx = lg[i] > mx ? lg[i] : mx;
    for (int32_t i = 0; i < V; i++) s += exp(lg[i] - mx);
    const double lse = mx + log(s);
    for (int32_t i = 0; i < V; i++) out[i] = lg[i] - lse;
}

static void check_golden(const char *file) {
    char path[1024];
    if (file[0] == '/') snprintf(path, sizeof path, "%s", file);
    else snprintf(path, sizeof path, "%s/tests/data/arch/%s", RP_SOURCE_DIR, file);
    json_error_t err;
    json_t *j = json_load_file(path, 0, &err);
    if (!j) fail_msg("%s: %s", path, err.text);
    const char *arch_name = json_string_value(json_object_get(j, "arch"));
    const char *preset = json_string_value(json_object_get(j, "preset"));
    const char *type = json_string_value(json_object_get(j, "type"));
    const uint64_t seed = (uint64_t)json_integer_value(json_object_get(j, "seed"));
    json_t *ref = json_object_get(j, "llama_cpp");
    const int32_t n = (int32_t)json_integer_value(json_object_get(ref, "n_tokens"));
    json_t *pos = json_object_get(ref, "positions");
    assert_true(n > 0 && json_array_size(pos) > 0);
    rp_model *m = load(synth(arch_name, preset, type, seed, false), -1);
    const int32_t V = m->hp.n_vocab;
    rp_token *toks = malloc(sizeof(rp_token) * (size_t)n);
    prompt_tokens(toks, n, V);
    const int np = (int)json_array_size(pos);
    int32_t *want = calloc((size_t)np, sizeof(int32_t));
    for (int i = 0; i < np; i++) want[i] = (int32_t)json_integer_value(json_object_get(json_array_get(pos, (size_t)i), "pos"));
    float *lg = malloc(sizeof(float) * (size_t)np * (size_t)V);
    double *lp = malloc(sizeof(double) * (size_t)V);
    prefill(m, toks, n, want, np, lg);
    /* F32 weights: within 0.02 (measured 0.005-0.007, llama included). Q8_0: llama.cpp and Reprise round
     * differently somewhere on the quantized path; the llama control (llama-tiny-q8_0.json, the architecture
     * Reprise started with) shows the same gap as qwen2 / phi3 (0.41-0.45 measured on log probabilities whose
     * top-k spans ~30 units), below what quantizing moves llama.cpp's own log probabilities (its Q8_0 against its
     * F32 goldens of the same weights: 0.55-0.80), so the bar is that gap with a margin, and top-1 must agree. */
    const double tol = strcmp(type, "f32") ? 0.6 : 0.02;
    double worst = 0;
    for (int i = 0; i < np; i++) {
        log_softmax(lg + (size_t)i * V, V, lp);
        json_t *top = json_object_get(json_array_get(pos, (size_t)i), "top");
        const int k = (int)json_array_size(top);
        int32_t mine = 0;
        for (int32_t t = 1; t < V; t++) mine = lp[t] > lp[mine] ? t : mine;
        const int32_t ref1 = (int32_t)json_integer_value(json_array_get(json_array_get(top, 0), 0));
        const double margin = json_real_value(json_array_get(json_array_get(top, 0), 1)) -
                              json_real_value(json_array_get(json_array_get(top, 1), 1));
        double dpos = 0;
        for (int r = 0; r < k; r++) {
            json_t *e = json_array_get(top, (size_t)r);
            const int32_t id = (int32_t)json_integer_value(json_array_get(e, 0));
            const double d = fabs(lp[id] - json_real_value(json_array_get(e, 1)));
            dpos = d > dpos ? d : dpos;
        }
        print_message("  %s pos %4d: top-1 %d (llama.cpp %d, margin %.2f), max |dlogprob| over its top-%d %.4f\n", file,
                      want[i], mine, ref1, margin, k, dpos);
        if (margin > 2 * tol) assert_int_equal(mine, ref1);
        worst = dpos > worst ? dpos : worst;
    }
    print_message("  %s: worst |dlogprob| %.4f (tolerance %.2f)\n", file, worst, tol);
    assert_true(worst <= tol);
    free(lp);
    free(lg);
    free(want);
    free(toks);
    rp_model_free(m);
    json_decref(j);
}

static void test_llama_cpp_golden(void **state) {
    (void)state;
    const char *files[] = {"qwen2-tiny-f32.json", "qwen2-tiny-q8_0.json", "phi3-tiny-f32.json", "phi3-tiny-q8_0.json",
                           "phi3-tiny-longrope-f32.json", "phi3-tiny-longrope-q8_0.json", "llama-tiny-f32.json",
                           /* 4,700 tokens: past the original context 4096, so both engines take the long factors */
                           "phi3-tiny-longrope-f32-long.json"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) check_golden(files[i]);
    check_golden("llama-tiny-q8_0.json");
    /* a golden made by hand for a real-shape preset (too slow to synthesize in every run), same format */
    const char *extra = getenv("RP_ARCH_GOLDEN_EXTRA");
    if (extra && *extra) check_golden(extra);
}

/* ---- the reuse bars ---- */

static void reuse_bars_ctx(const char *path, int32_t n_ctx) {
    rp_test_fixture f;
    rp_token docs[6][40], p[512], p2[512];
    int32_t bnd[16], bnd2[16], nb, nb2;
    rp_test_make_docs(docs, 6, 12345);
    rp_reuse_stats st;

    /* prefix reuse is exact (F16 KV): an extension of a cached prompt equals its full prefill */
    assert_true(rp_test_fixture_open(&f, path, RP_TYPE_F16, n_ctx));
    static const int o1[] = {0, 1, 2}, o2[] = {0, 1, 2, 3};
    static const rp_token tail[] = {300, 301, 302};
    int32_t n1 = rp_test_build(docs, o1, 3, NULL, 0, p, bnd, &nb);
    int32_t n2 = rp_test_build(docs, o2, 4, tail, 3, p2, bnd2, &nb2);
    rp_reuse *none = rp_test_engine(&f, RP_REUSE_NONE, 0, false), *pre = rp_test_engine(&f, RP_REUSE_PREFIX, 0, false);
    assert_int_equal(rp_reuse_prefill(pre, f.ctx, f.kv, p, n1, bnd, nb, f.lg_a, &st), RP_OK);
    assert_int_equal(rp_reuse_commit(pre, f.kv), RP_OK);
    assert_int_equal(rp_reuse_prefill(pre, f.ctx, f.kv, p2, n2, bnd2, nb2, f.lg_a, &st), RP_OK);
    assert_int_equal(st.n_prefix, n1);
    assert_int_equal(rp_reuse_prefill(none, f.ctx, f.kv, p2, n2, bnd2, nb2, f.lg_b, &st), RP_OK);
    float d = rp_test_max_diff(f.lg_a, f.lg_b, f.V), spread = 0;
    for (int32_t i = 0; i < f.V; i++) spread = fmaxf(spread, fabsf(f.lg_b[i]));
    print_message("  %s: prefix reuse vs prefill max |logit diff| %g (|logit| up to %.1f)\n", path, d, spread);
    /* test_reuse's 1e-5 on stories260K's logits of a few units, relative here: these reach ~30 and the
     * llama control gives 1.3e-4 (the extension's rows run in other batch shapes than the full prefill's) */
    assert_true(d <= 1e-5f * fmaxf(spread, 1.0f));
    rp_reuse_free(pre);
    rp_reuse_free(none);
    rp_test_fixture_close(&f);

    /* re-rotation: a document cached at position 1 and reused at 81 has the K a recompute gives there */
    assert_true(rp_test_fixture_open(&f, path, RP_TYPE_F32, n_ctx));
    none = rp_test_engine(&f, RP_REUSE_NONE, 0, false);
    rp_reuse *full = rp_test_engine(&f, RP_REUSE_PREFIX, 0, false);
    static const int oa[] = {2}, ob[] = {0, 1, 2};
    int32_t n = rp_test_build(docs, oa, 1, NULL, 0, p, bnd, &nb);
    assert_int_equal(rp_reuse_prefill(full, f.ctx, f.kv, p, n, bnd, nb, f.lg_a, &st), RP_OK);
    assert_int_equal(rp_reuse_commit(full, f.kv), RP_OK);
    rp_reuse_get_params(full)->mode = RP_REUSE_FULL;
    n = rp_test_build(docs, ob, 3, NULL, 0, p, bnd, &nb);
    assert_int_equal(rp_reuse_prefill(full, f.ctx, f.kv, p, n, bnd, nb, f.lg_a, &st), RP_OK);
    assert_int_equal(st.n_nonprefix, 40);
    const double worst = rp_test_k_rel_error(&f, none, p, n, bnd, nb, 0, 81, 39);
    print_message("  %s: re-rotated vs recomputed layer-0 K, worst relative error %.2e\n", path, worst);
    assert_true(worst < 1e-3);
    rp_reuse_free(full);

    /* blend and full at r = 1 (dynamic and static) recompute every reused token: equal to prefill */
    static const int order[] = {4, 1, 5, 0, 3};
    static const rp_token q[] = {300, 301, 302, 303};
    n = rp_test_build(docs, order, 5, q, 4, p, bnd, &nb);
    const struct { rp_reuse_mode m; bool stat; } cfgs[] = {{RP_REUSE_BLEND, false}, {RP_REUSE_FULL, false},
                                                             {RP_REUSE_BLEND, true}, {RP_REUSE_FULL, true}};
    for (size_t k = 0; k < sizeof cfgs / sizeof cfgs[0]; k++) {
        rp_reuse *e = rp_test_engine(&f, cfgs[k].m, 1.0f, cfgs[k].stat);
        rp_test_cache_docs(&f, e, docs, f.lg_a);   /* each document cached after BOS */
        assert_int_equal(rp_reuse_prefill(e, f.ctx, f.kv, p, n, bnd, nb, f.lg_a, &st), RP_OK);
        assert_int_equal(st.n_nonprefix, 160);
        assert_int_equal(rp_reuse_prefill(none, f.ctx, f.kv, p, n, bnd, nb, f.lg_b, &st), RP_OK);
        d = rp_test_max_diff(f.lg_a, f.lg_b, f.V);
        print_message("  %s: %s%s r=1 vs prefill max |logit diff| %g\n", path, rp_reuse_mode_name(cfgs[k].m),
                      cfgs[k].stat ? " (static)" : "", d);
        assert_true(d <= 1e-4f);
        rp_reuse_free(e);
    }
    rp_reuse_free(none);
    rp_test_fixture_close(&f);
}

static void reuse_bars(const char *path) { reuse_bars_ctx(path, 1024); }

static void test_reuse_bars(void **state) {
    (void)state;
    reuse_bars(synth("llama", "tiny", "f32", 5, false));          /* the control: the bars' margins on these scales */
    reuse_bars(synth("qwen2", "tiny", "f32", 5, false));          /* biases on K before RoPE */
    reuse_bars(synth("phi3", "tiny", "f32", 5, false));           /* fused views */
    reuse_bars(synth("phi3", "tiny-longrope", "f32", 5, false));  /* partial rotary, LongRoPE factors, attn_factor */
    reuse_bars_ctx(synth("phi3", "tiny-longrope", "f32", 5, false), 8192);   /* the long factors (re-rotation too) */
}

/* ---- several sequences in one batch (what the scheduler runs) equal each sequence alone ---- */

static void multi_sequence(const char *path) {
    rp_model *m = load(path, -1);
    const int32_t V = m->hp.n_vocab, na = 70, nb = 45;
    rp_token ta[70], tb[45];
    prompt_tokens(ta, na, V);
    for (int32_t i = 0; i < nb; i++) tb[i] = (rp_token)((ta[i] * 7 + 3) % V);
    float *alone = malloc(sizeof(float) * 2 * (size_t)V);
    const int32_t la = na - 1, lb = nb - 1;
    prefill(m, ta, na, &la, 1, alone);
    prefill(m, tb, nb, &lb, 1, alone + V);
    rp_ctx_params cp = rp_ctx_default_params();
    cp.n_ctx_max = 128;
    cp.n_outputs = 2;
    rp_ctx *c = NULL;
    rp_kv *kv[2] = {NULL, NULL};
    assert_int_equal(rp_ctx_create(m, cp, &c), RP_OK);
    assert_int_equal(rp_kv_create(m, 128, RP_TYPE_F32, &kv[0]), RP_OK);
    assert_int_equal(rp_kv_create(m, 128, RP_TYPE_F32, &kv[1]), RP_OK);
    rp_batch b;
    assert_int_equal(rp_batch_init(&b, 256), RP_OK);
    /* sequence 1's rows first, then 0's, in chunks of 10 interleaved */
    for (int32_t i0 = 0; i0 < na || i0 < nb; i0 += 10) {
        for (int32_t i = i0; i < nb && i < i0 + 10; i++) assert_int_equal(rp_batch_add(&b, tb[i], 1, i, i, i == lb), RP_OK);
        for (int32_t i = i0; i < na && i < i0 + 10; i++) assert_int_equal(rp_batch_add(&b, ta[i], 0, i, i, i == la), RP_OK);
    }
    assert_int_equal(rp_forward(c, &b, kv, 2), RP_OK);
    assert_int_equal(rp_ctx_n_outputs(c), 2);
    /* outputs in batch order: sequence 1's last row (row 44) comes before sequence 0's last (row 69) */
    float db = rp_test_max_diff(rp_ctx_logits(c, 0), alone + V, V);
    float da = rp_test_max_diff(rp_ctx_logits(c, 1), alone, V), spread = 0;
    for (int32_t i = 0; i < V; i++) spread = fmaxf(spread, fabsf(alone[i]));
    print_message("  %s: two sequences in one batch vs alone: max |logit diff| %g, %g (|logit| up to %.1f)\n", path, da,
                  db, spread);
    assert_true(da <= 1e-5f * spread && db <= 1e-5f * spread);
    rp_batch_free(&b);
    rp_kv_free(kv[0]);
    rp_kv_free(kv[1]);
    rp_ctx_free(c);
    free(alone);
    rp_model_free(m);
}

static void test_multi_sequence(void **state) {
    (void)state;
    multi_sequence(synth("qwen2", "tiny", "q8_0", 11, false));
    multi_sequence(synth("phi3", "tiny", "q4_0", 11, false));
    multi_sequence(synth("phi3", "tiny-longrope", "q8_0", 11, false));
}

/* ---- clear refusals ---- */

static void test_refusals(void **state) {
    (void)state;
    /* a file whose phi3 ffn_up is not the fused [n_embd, 2 n_ff] and that has no ffn_gate: named, refused */
    const char *src = synth("phi3", "tiny", "f32", 9, true);
    rp_gguf *g = NULL;
    assert_int_equal(rp_gguf_open(src, &g), RP_OK);
    rp_gguf_writer *w = NULL;
    assert_int_equal(rp_gguf_writer_create(&w), RP_OK);
    for (uint64_t i = 0; i < rp_gguf_n_kv(g); i++) assert_int_equal(rp_gguf_writer_copy_kv(w, g, i), RP_OK);
    for (uint64_t i = 0; i < rp_gguf_n_tensors(g); i++) {
        const rp_gguf_tensor *t = rp_gguf_tensor_at(g, i);
        char nm[128];
        snprintf(nm, sizeof nm, "%.*s", (int)t->name.len, t->name.ptr);
        if (strstr(nm, "ffn_gate")) continue;
        assert_int_equal(rp_gguf_writer_add_tensor(w, nm, t->type, t->n_dims, t->ne, t->data, t->nbytes), RP_OK);
    }
    char dst[512];
    snprintf(dst, sizeof dst, "%s/phi3-bad-ffn.gguf", rp_test_tmpdir());
    assert_int_equal(rp_gguf_writer_write_file(w, dst), RP_OK);
    rp_gguf_writer_free(w);
    rp_gguf_close(g);
    rp_model *m = NULL;
    assert_int_equal(rp_model_load(dst, rp_model_default_params(), &m), RP_ERR_FORMAT);
    print_message("  %s\n", rp_last_error());
    assert_non_null(strstr(rp_last_error(), "ffn_up.weight"));
    assert_non_null(strstr(rp_last_error(), "fuses gate and up"));
    remove(dst);

    /* LongRoPE past the original context: a file with long factors runs there; one without them (the long
     * tensor dropped) is capped by default and refused when asked to go beyond */
    m = load(synth("phi3", "tiny-longrope", "q8_0", 9, false), -1);
    rp_engine_params ep = rp_engine_default_params();
    ep.n_ctx = 8192;
    rp_engine *e = NULL;
    assert_int_equal(rp_engine_create(m, &ep, &e), RP_OK);
    assert_int_equal(rp_engine_n_ctx(e), 8192);
    rp_engine_free(e);
    {   /* the same file without rope_factors_long.weight */
        rp_gguf *g2 = NULL;
        assert_int_equal(rp_gguf_open(synth("phi3", "tiny-longrope", "q8_0", 9, false), &g2), RP_OK);
        rp_gguf_writer *w2 = NULL;
        assert_int_equal(rp_gguf_writer_create(&w2), RP_OK);
        for (uint64_t i = 0; i < rp_gguf_n_kv(g2); i++) assert_int_equal(rp_gguf_writer_copy_kv(w2, g2, i), RP_OK);
        for (uint64_t i = 0; i < rp_gguf_n_tensors(g2); i++) {
            const rp_gguf_tensor *t = rp_gguf_tensor_at(g2, i);
            char nm[128];
            snprintf(nm, sizeof nm, "%.*s", (int)t->name.len, t->name.ptr);
            if (!strcmp(nm, "rope_factors_long.weight")) continue;
            assert_int_equal(rp_gguf_writer_add_tensor(w2, nm, t->type, t->n_dims, t->ne, t->data, t->nbytes), RP_OK);
        }
        char dst2[512];
        snprintf(dst2, sizeof dst2, "%s/phi3-short-only.gguf", rp_test_tmpdir());
        assert_int_equal(rp_gguf_writer_write_file(w2, dst2), RP_OK);
        rp_gguf_writer_free(w2);
        rp_gguf_close(g2);
        rp_model_free(m);
        m = NULL;
        assert_int_equal(rp_model_load(dst2, rp_model_default_params(), &m), RP_OK);
        assert_null(m->rope_inv_freq_long);
        assert_int_equal(m->hp.n_ctx_train, 4096);
        remove(dst2);
    }
    assert_int_equal(rp_engine_create(m, &ep, &e), RP_OK);
    assert_int_equal(rp_engine_n_ctx(e), 4096);
    rp_engine_free(e);
    ep.n_ctx_over_train = true;
    assert_int_equal(rp_engine_create(m, &ep, &e), RP_ERR_UNSUPPORTED);
    print_message("  %s\n", rp_last_error());
    assert_non_null(strstr(rp_last_error(), "long RoPE factors"));
    ep.n_ctx = 2048;
    assert_int_equal(rp_engine_create(m, &ep, &e), RP_OK);
    rp_engine_free(e);
    rp_model_free(m);

    /* a reuse engine of short-factor chunks refuses a long-factor cache (its K rotate by other tables) */
    rp_test_fixture f;
    assert_true(rp_test_fixture_open(&f, synth("phi3", "tiny-longrope", "f32", 5, false), RP_TYPE_F16, 8192));
    rp_reuse_params rpp = rp_reuse_default_params();
    rpp.mode = RP_REUSE_PREFIX;
    rpp.pipeline = false;
    rp_reuse *re = NULL;
    assert_int_equal(rp_reuse_create(f.m, RP_TYPE_F16, 1024, rpp, &re), RP_OK);   /* kv_cells 0: 1024, short */
    const rp_token pt[4] = {1, 2, 3, 4};
    rp_reuse_stats rst;
    assert_int_equal(rp_reuse_prefill(re, f.ctx, f.kv, pt, 4, NULL, 0, f.lg_a, &rst), RP_ERR_INVALID_ARG);
    print_message("  %s\n", rp_last_error());
    assert_non_null(strstr(rp_last_error(), "LongRoPE"));
    rp_reuse_free(re);
    rpp.kv_cells = 8192;   /* the same side: runs */
    assert_int_equal(rp_reuse_create(f.m, RP_TYPE_F16, 1024, rpp, &re), RP_OK);
    assert_int_equal(rp_reuse_prefill(re, f.ctx, f.kv, pt, 4, NULL, 0, f.lg_a, &rst), RP_OK);
    rp_reuse_free(re);
    rp_test_fixture_close(&f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bind),
        cmocka_unit_test(test_fused_equals_unfused),
        cmocka_unit_test(test_fused_equals_unfused_peaked),
        cmocka_unit_test(test_llama_cpp_golden),
        cmocka_unit_test(test_reuse_bars),
        cmocka_unit_test(test_multi_sequence),
        cmocka_unit_test(test_refusals),
    };
    return rp_test_main(tests, NULL, NULL);
}
