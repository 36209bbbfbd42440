/* test_bert.c — the bert and nomic-bert encoders: WordPiece ids and pooled embeddings against llama.cpp's
 * (tests/data/bert/ARCH-PRESET-TYPE.json, made by bench/peer/bert_golden.sh on synthetic models this test
 * remakes), packing several inputs into one pass, the pooling types against per-token states, the real shapes'
 * binding, and the refusals (generation, too long inputs, peaked synthesis). */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "model/encoder.h"
#include "model/forward.h"
#include "model/model.h"
#include "model/synth.h"
#include "tokenizer/tokenizer.h"

static const char *synth_v(const char *arch_name, const char *preset, const char *type, uint64_t seed, const char *vocab) {
    static char path[8][512];
    static int slot;
    char *p = path[slot++ % 8];
    snprintf(p, sizeof path[0], "%s/%s-%s-%s-%llu.gguf", rp_test_tmpdir(), arch_name, preset, type, (unsigned long long)seed);
    rp_synth_params sp = rp_synth_default_params();
    sp.arch = !strcmp(arch_name, "bert") ? RP_ARCH_BERT : RP_ARCH_NOMIC_BERT;
    sp.preset = preset;
    sp.type = type;
    sp.seed = seed;
    sp.vocab_path = vocab;
    rp_status st = rp_synth_write(&sp, p);
    if (st != RP_OK) print_message("synth: %s\n", rp_last_error());
    assert_int_equal(st, RP_OK);
    return p;
}

static const char *synth(const char *arch_name, const char *preset, const char *type, uint64_t seed) {
    return synth_v(arch_name, preset, type, seed, NULL);
}

/* RP_BERT_GOLDEN_EXTRA: a golden made by hand (a real shape, or a real vocabulary: RP_BERT_VOCAB, the GGUF whose
 * tokenizer bert_golden.sh's synth copied with --vocab) */
static const char *extra_vocab(void) {
    const char *v = getenv("RP_BERT_VOCAB");
    return v && *v ? v : NULL;
}

static rp_model *load(const char *path) {
    rp_model *m = NULL;
    rp_status st = rp_model_load(path, rp_model_default_params(), &m);
    if (st != RP_OK) print_message("load %s: %s\n", path, rp_last_error());
    assert_int_equal(st, RP_OK);
    return m;
}

static rp_embedder *make(const rp_model *m, rp_pooling pool, bool norm, int32_t n_ctx, int32_t n_seq) {
    rp_embedder_params p = rp_embedder_default_params();
    p.pooling = pool;
    p.normalize = norm;
    p.n_ctx = n_ctx;
    p.n_seq = n_seq;
    rp_embedder *e = NULL;
    rp_status st = rp_embedder_create(m, &p, &e);
    if (st != RP_OK) print_message("embedder: %s\n", rp_last_error());
    assert_int_equal(st, RP_OK);
    return e;
}

static json_t *golden(const char *file) {
    char path[1024];
    if (file[0] == '/') snprintf(path, sizeof path, "%s", file);
    else snprintf(path, sizeof path, "%s/tests/data/bert/%s", RP_SOURCE_DIR, file);
    json_error_t err;
    json_t *j = json_load_file(path, JSON_ALLOW_NUL, &err);   /* a text holds a NUL */
    if (!j) fail_msg("%s: %s", path, err.text);
    return j;
}

static rp_model *golden_model(json_t *j, const char *vocab) {
    return load(synth_v(json_string_value(json_object_get(j, "arch")), json_string_value(json_object_get(j, "preset")),
                        json_string_value(json_object_get(j, "type")), (uint64_t)json_integer_value(json_object_get(j, "seed")),
                        vocab));
}

static int32_t ids_of(json_t *arr, rp_token *out, int32_t cap) {
    const int32_t n = (int32_t)json_array_size(arr);
    assert_true(n <= cap);
    for (int32_t i = 0; i < n; i++) out[i] = (rp_token)json_integer_value(json_array_get(arr, (size_t)i));
    return n;
}

#define MAXT 4096

/* ---- WordPiece: llama.cpp's ids for every text ---- */

static void check_wpm(const char *file, const char *vocab) {
    json_t *j = golden(file);
    rp_model *m = golden_model(j, vocab);
    json_t *cases = json_object_get(json_object_get(j, "llama_cpp"), "wpm");
    assert_true(json_array_size(cases) >= 10);
    rp_token *want = malloc(sizeof(rp_token) * MAXT), *got = malloc(sizeof(rp_token) * MAXT);
    int bad = 0;
    for (size_t c = 0; c < json_array_size(cases); c++) {
        json_t *cs = json_array_get(cases, c);
        const char *text = json_string_value(json_object_get(cs, "text"));
        const size_t len = json_string_length(json_object_get(cs, "text"));   /* texts may hold a NUL */
        const int32_t nw = ids_of(json_object_get(cs, "ids"), want, MAXT);
        size_t n = 0;
        const rp_tokenize_opts o = {.add_bos = false, .parse_special = false};
        assert_int_equal(rp_tokenizer_encode(m->tok, text, len, o, got, MAXT, &n), RP_OK);
        bool same = (int32_t)n == nw && !memcmp(got, want, sizeof(rp_token) * n);
        if (!same) {
            bad++;
            print_message("  %s case %zu: %d ids from llama.cpp, %zu from Reprise\n", file, c, nw, n);
            for (int32_t i = 0; i < nw || i < (int32_t)n; i++)
                print_message("    %3d: llama.cpp %6d  reprise %6d%s\n", i, i < nw ? want[i] : -1, i < (int32_t)n ? got[i] : -1,
                              i < nw && i < (int32_t)n && want[i] == got[i] ? "" : "  <--");
        }
        /* the embedding tokenization: [CLS] ids [SEP] */
        int32_t ne = 0;
        assert_int_equal(rp_embed_tokenize(m, text, len, got, MAXT, &ne), RP_OK);
        assert_int_equal(ne, nw + 2);
        assert_int_equal(got[0], rp_tokenizer_bos(m->tok));
        assert_int_equal(got[ne - 1], rp_tokenizer_find(m->tok, "[SEP]"));
        if (same) assert_memory_equal(got + 1, want, sizeof(rp_token) * (size_t)nw);
    }
    print_message("  %s: %zu texts, %d differ\n", file, json_array_size(cases), bad);
    assert_int_equal(bad, 0);
    free(want);
    free(got);
    rp_model_free(m);
    json_decref(j);
}

static void test_wordpiece_vs_llama_cpp(void **state) {
    (void)state;
    check_wpm("bert-tiny-f32.json", NULL);        /* uncased: lowercasing and accent stripping */
    check_wpm("nomic-bert-tiny-f32.json", NULL);  /* cased: neither */
    const char *extra = getenv("RP_BERT_GOLDEN_EXTRA");
    if (extra && *extra) check_wpm(extra, extra_vocab());
}

/* ---- pooled embeddings: llama.cpp's, cosine >= 0.999 and max |d| small against the norm ---- */

static void check_embed(const char *file, double tol, const char *vocab) {
    json_t *j = golden(file);
    rp_model *m = golden_model(j, vocab);
    json_t *cases = json_object_get(json_object_get(j, "llama_cpp"), "embed");
    const int32_t E = m->hp.n_embd;
    int32_t n_ctx = m->hp.n_ctx_train;
    rp_embedder *e = make(m, RP_POOLING_MODEL, false, n_ctx, 4);
    assert_int_equal(rp_embedder_pooling(e), m->hp.arch == RP_ARCH_BERT && !strcmp(json_string_value(json_object_get(j, "preset")), "all-minilm-l6")
                                                 ? RP_POOLING_MEAN : m->hp.arch == RP_ARCH_BERT ? RP_POOLING_CLS : RP_POOLING_MEAN);
    rp_token *t = malloc(sizeof(rp_token) * MAXT);
    float *v = malloc(sizeof(float) * (size_t)E);
    double worst_cos = 1, worst_rel = 0;
    for (size_t c = 0; c < json_array_size(cases); c++) {
        json_t *cs = json_array_get(cases, c);
        const int32_t n = ids_of(json_object_get(cs, "ids"), t, MAXT);
        json_t *ref = json_object_get(cs, "vec");
        assert_int_equal(json_array_size(ref), E);
        const rp_token *ins[1] = {t};
        size_t nout = 0;
        assert_int_equal(rp_embed(e, ins, &n, 1, v, (size_t)E, &nout), RP_OK);
        double dot = 0, na = 0, nb = 0, md = 0;
        for (int32_t i = 0; i < E; i++) {
            const double r = json_number_value(json_array_get(ref, (size_t)i));
            dot += r * v[i];
            na += r * r;
            nb += (double)v[i] * v[i];
            md = fmax(md, fabs(r - v[i]));
        }
        const double cosv = dot / sqrt(na * nb), rel = md / sqrt(na);
        worst_cos = fmin(worst_cos, cosv);
        worst_rel = fmax(worst_rel, rel);
        if (cosv < 0.999 || rel > tol) print_message("  %s input %zu (%d tokens): cos %.6f, max|d| / |v| %.2e\n", file, c, n, cosv, rel);
    }
    print_message("  %s: %zu inputs, worst cosine %.7f, worst max|d| / |v| %.2e (bar %.0e)\n", file, json_array_size(cases),
                  worst_cos, worst_rel, tol);
    assert_true(worst_cos >= 0.999);
    assert_true(worst_rel <= tol);
    free(t);
    free(v);
    rp_embedder_free(e);
    rp_model_free(m);
    json_decref(j);
}

static void test_embeddings_vs_llama_cpp(void **state) {
    (void)state;
    /* F32 / F16: both engines compute in F32 from the same weights (llama.cpp looks GELU up in an F16 table);
     * Q8_0: both quantize the activations to Q8_0, rounding at different places */
    check_embed("bert-tiny-f32.json", 2e-3, NULL);
    check_embed("bert-tiny-f16.json", 2e-3, NULL);
    check_embed("bert-tiny-q8_0.json", 1e-2, NULL);
    check_embed("nomic-bert-tiny-f32.json", 2e-3, NULL);
    check_embed("nomic-bert-tiny-f16.json", 2e-3, NULL);
    check_embed("nomic-bert-tiny-q8_0.json", 1e-2, NULL);
    const char *extra = getenv("RP_BERT_GOLDEN_EXTRA");
    if (extra && *extra) check_embed(extra, 1e-2, extra_vocab());
}

/* ---- packing: several inputs in one pass give what each gives alone (attention stays within an input) ---- */

static void check_packing(const char *arch) {
    rp_model *m = load(synth(arch, "tiny", "f32", 3));
    const int32_t E = m->hp.n_embd, V = m->hp.n_vocab;
    enum { N = 7 };
    rp_token toks[N][80];
    int32_t len[N];
    const rp_token *ins[N];
    rp_test_rng rng = {0x1234567u};
    for (int i = 0; i < N; i++) {
        len[i] = 1 + (int32_t)(rp_test_rng_next(&rng) % 79);
        toks[i][0] = rp_tokenizer_bos(m->tok);
        for (int32_t k = 1; k < len[i]; k++) toks[i][k] = 104 + (rp_token)(rp_test_rng_next(&rng) % (uint64_t)(V - 104));
        ins[i] = toks[i];
    }
    const rp_pooling pools[] = {RP_POOLING_MEAN, RP_POOLING_CLS, RP_POOLING_LAST};
    for (size_t pi = 0; pi < 3; pi++) {
        rp_embedder *all = make(m, pools[pi], true, 128, 3), *one = make(m, pools[pi], true, 128, 1);
        float *a = malloc(sizeof(float) * (size_t)(N * E)), *b = malloc(sizeof(float) * (size_t)E);
        size_t nout = 0;
        assert_int_equal(rp_embed(all, ins, len, N, a, (size_t)(N * E), &nout), RP_OK);
        assert_int_equal(nout, (size_t)(N * E));
        float md = 0;
        for (int i = 0; i < N; i++) {
            assert_int_equal(rp_embed(one, &ins[i], &len[i], 1, b, (size_t)E, &nout), RP_OK);
            for (int32_t k = 0; k < E; k++) md = fmaxf(md, fabsf(a[(size_t)i * E + k] - b[k]));
        }
        print_message("  %s pooling %s: %d inputs packed vs one by one, max |d| %g\n", arch, rp_pooling_name(pools[pi]), N, md);
        assert_true(md < 1e-5f);
        free(a);
        free(b);
        rp_embedder_free(all);
        rp_embedder_free(one);
    }
    rp_model_free(m);
}

static void test_packing(void **state) {
    (void)state;
    check_packing("bert");
    check_packing("nomic-bert");
}

/* ---- pooling types against the per-token states (pooling none) ---- */

static void check_pooling(const char *arch) {
    rp_model *m = load(synth(arch, "tiny", "q8_0", 5));
    const int32_t E = m->hp.n_embd;
    rp_token t[64];
    int32_t n = 0;
    const char *text = "The capital of France is Paris, a city known for its music.";
    assert_int_equal(rp_embed_tokenize(m, text, strlen(text), t, 64, &n), RP_OK);
    assert_true(n > 8);
    const rp_token *ins[1] = {t};
    float *rows = malloc(sizeof(float) * (size_t)(n * E)), *v = malloc(sizeof(float) * (size_t)E);
    size_t nout = 0;
    rp_embedder *e = make(m, RP_POOLING_NONE, false, 128, 2);
    assert_int_equal(rp_embed(e, ins, &n, 1, rows, (size_t)(n * E), &nout), RP_OK);
    assert_int_equal(nout, (size_t)(n * E));
    rp_embedder_free(e);
    const rp_pooling pools[] = {RP_POOLING_MEAN, RP_POOLING_CLS, RP_POOLING_LAST};
    for (size_t pi = 0; pi < 3; pi++) {
        e = make(m, pools[pi], false, 128, 2);
        assert_int_equal(rp_embed(e, ins, &n, 1, v, (size_t)E, &nout), RP_OK);
        float md = 0;
        for (int32_t k = 0; k < E; k++) {
            double want = 0;
            if (pools[pi] == RP_POOLING_MEAN) {
                for (int32_t r = 0; r < n; r++) want += rows[(size_t)r * E + k];
                want /= n;
            } else {
                want = rows[(size_t)(pools[pi] == RP_POOLING_CLS ? 0 : n - 1) * E + k];
            }
            md = fmaxf(md, fabsf((float)want - v[k]));
        }
        assert_true(md < 1e-5f);
        rp_embedder_free(e);
    }
    /* normalized: unit length, the same direction */
    e = make(m, RP_POOLING_CLS, true, 128, 2);
    assert_int_equal(rp_embed(e, ins, &n, 1, v, (size_t)E, &nout), RP_OK);
    double ss = 0, dot = 0, nr = 0;
    for (int32_t k = 0; k < E; k++) { ss += (double)v[k] * v[k]; dot += (double)v[k] * rows[k]; nr += (double)rows[k] * rows[k]; }
    assert_true(fabs(ss - 1) < 1e-5 && dot / sqrt(nr) > 1 - 1e-5);
    rp_embedder_free(e);
    free(rows);
    free(v);
    rp_model_free(m);
}

static void test_pooling(void **state) {
    (void)state;
    check_pooling("bert");
    check_pooling("nomic-bert");
}

/* ---- refusals ---- */

static void test_refusals(void **state) {
    (void)state;
    rp_model *m = load(synth("bert", "tiny", "f32", 1));
    /* no generation: no compute context for a decoder pass */
    rp_ctx *c = NULL;
    assert_int_equal(rp_ctx_create(m, rp_ctx_default_params(), &c), RP_ERR_UNSUPPORTED);
    assert_non_null(strstr(rp_last_error(), "embedding model"));
    assert_null(c);
    /* bert has 512 learned positions */
    rp_embedder_params p = rp_embedder_default_params();
    p.n_ctx = 513;
    rp_embedder *e = NULL;
    assert_int_equal(rp_embedder_create(m, &p, &e), RP_ERR_RANGE);
    assert_non_null(strstr(rp_last_error(), "learned positions"));
    e = make(m, RP_POOLING_MODEL, true, 0, 4);
    assert_int_equal(rp_embedder_n_ctx(e), 512);
    rp_token t[600];
    for (int i = 0; i < 600; i++) t[i] = 200 + i % 400;
    const rp_token *ins[1] = {t};
    int32_t n = 513;
    float v[128];
    size_t nout = 0;
    assert_int_equal(rp_embed(e, ins, &n, 1, v, 128, &nout), RP_ERR_RANGE);
    n = 512;   /* exactly the context: fine */
    assert_int_equal(rp_embed(e, ins, &n, 1, v, 128, &nout), RP_OK);
    rp_embedder_free(e);
    rp_model_free(m);
    /* peaked synthetic encoders make no sense (no output head) */
    rp_synth_params sp = rp_synth_default_params();
    sp.arch = RP_ARCH_BERT;
    sp.preset = "tiny";
    sp.type = "f32";
    sp.peak = 3;
    char path[512];
    snprintf(path, sizeof path, "%s/peak.gguf", rp_test_tmpdir());
    assert_int_equal(rp_synth_write(&sp, path), RP_ERR_INVALID_ARG);
}

/* ---- the real shapes bind (bge-small, all-MiniLM-L6, nomic-embed-text-v1.5) and embed ---- */

static void test_real_shapes(void **state) {
    (void)state;
    const struct { const char *arch, *preset; int32_t E, L; rp_pooling pool; } k[] = {
        {"bert", "bge-small", 384, 12, RP_POOLING_CLS},
        {"bert", "all-minilm-l6", 384, 6, RP_POOLING_MEAN},
        {"nomic-bert", "nomic-embed-text-v1.5", 768, 12, RP_POOLING_MEAN},
    };
    const bool all = getenv("RP_TEST_REAL_PRESETS") && !strcmp(getenv("RP_TEST_REAL_PRESETS"), "1");
    if (!all) print_message("  bge-small and nomic-embed-text-v1.5 skipped (set RP_TEST_REAL_PRESETS=1 to run them)\n");
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        if (!all && strcmp(k[i].preset, "all-minilm-l6")) continue;
        rp_model *m = load(synth(k[i].arch, k[i].preset, "q8_0", 1));
        assert_int_equal(m->hp.n_embd, k[i].E);
        assert_int_equal(m->hp.n_layer, k[i].L);
        assert_int_equal(m->hp.n_vocab, 30522);
        assert_int_equal(rp_tokenizer_n_vocab(m->tok), 30522);
        rp_embedder *e = make(m, RP_POOLING_MODEL, true, 0, 4);
        assert_int_equal(rp_embedder_pooling(e), k[i].pool);
        rp_token t[64];
        int32_t n = 0;
        const char *text = "search_query: what is retrieval augmented generation?";
        assert_int_equal(rp_embed_tokenize(m, text, strlen(text), t, 64, &n), RP_OK);
        const rp_token *ins[1] = {t};
        float *v = malloc(sizeof(float) * (size_t)k[i].E);
        size_t nout = 0;
        assert_int_equal(rp_embed(e, ins, &n, 1, v, (size_t)k[i].E, &nout), RP_OK);
        double ss = 0;
        for (int32_t d = 0; d < k[i].E; d++) ss += (double)v[d] * v[d];
        assert_true(fabs(ss - 1) < 1e-4);
        print_message("  %s %s: %d tokens embedded (%d dims)\n", k[i].arch, k[i].preset, n, k[i].E);
        free(v);
        rp_embedder_free(e);
        rp_model_free(m);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_wordpiece_vs_llama_cpp),
        cmocka_unit_test(test_embeddings_vs_llama_cpp),
        cmocka_unit_test(test_packing),
        cmocka_unit_test(test_pooling),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_real_shapes),
    };
    return rp_test_main(tests, NULL, NULL);
}
