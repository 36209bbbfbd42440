/* test_embed.c — embeddings (rp_embedder): pooling against the per-token hidden states of a plain forward pass,
 * the last-pooled state against llama.cpp's logits, causal prefixes, normalization, batching, errors. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "gguf/gguf.h"
#include "kernels/quant.h"
#include "kv/kv.h"
#include "model/forward.h"
#include "model/model.h"

#define STORIES "models/stories260K.gguf"
#define MAXT 96

static const char *TEXT = "Once upon a time, there was a little girl named Lily. She loved to play outside in the park.";

static int32_t tok(const rp_model *m, const char *text, rp_token *out) {
    int32_t n = 0;
    assert_int_equal(rp_embed_tokenize(m, text, strlen(text), out, MAXT, &n), RP_OK);
    return n;
}

/* The reference: one rp_forward over the whole input with every row flagged for logits; ref[i] = the output-normed
 * hidden state of row i (what the logits are computed from), F32 KV. */
static void ref_hidden(const rp_model *m, const rp_token *t, int32_t n, float *ref) {
    const int32_t E = m->hp.n_embd;
    rp_ctx_params cp = rp_ctx_default_params();
    cp.n_batch = n;
    cp.n_outputs = n;
    cp.n_ctx_max = 256;
    rp_ctx *ctx = NULL;
    rp_kv *kv = NULL;
    rp_batch b;
    assert_int_equal(rp_ctx_create(m, cp, &ctx), RP_OK);
    assert_int_equal(rp_kv_create(m, 256, RP_TYPE_F32, &kv), RP_OK);
    assert_int_equal(rp_batch_init(&b, n), RP_OK);
    for (int32_t i = 0; i < n; i++) assert_int_equal(rp_batch_add(&b, t[i], 0, i, i, true), RP_OK);
    assert_int_equal(rp_forward(ctx, &b, &kv, 1), RP_OK);
    assert_int_equal(rp_ctx_n_outputs(ctx), n);
    for (int32_t i = 0; i < n; i++) memcpy(ref + (size_t)i * E, rp_ctx_out_hidden(ctx, i), sizeof(float) * (size_t)E);
    rp_batch_free(&b);
    rp_kv_free(kv);
    rp_ctx_free(ctx);
}

static rp_embedder *make(const rp_model *m, rp_pooling pool, bool norm, int32_t n_batch, int32_t n_seq) {
    rp_embedder_params p = rp_embedder_default_params();
    p.pooling = pool;
    p.normalize = norm;
    p.n_ctx = 128;
    p.n_batch = n_batch;
    p.n_seq = n_seq;
    p.kv_type = RP_KV_F32;
    rp_embedder *e = NULL;
    assert_int_equal(rp_embedder_create(m, &p, &e), RP_OK);
    assert_int_equal(rp_embedder_pooling(e), pool);
    return e;
}

static float max_diff(const float *a, const float *b, size_t n) {
    float mx = 0;
    for (size_t i = 0; i < n; i++) mx = fmaxf(mx, fabsf(a[i] - b[i]));
    return mx;
}

static void test_names_and_model_pooling(void **state) {
    (void)state;
    RP_OPEN_STORIES(m);
    assert_int_equal(rp_pooling_parse("mean"), RP_POOLING_MEAN);
    assert_int_equal(rp_pooling_parse("cls"), RP_POOLING_CLS);
    assert_int_equal(rp_pooling_parse("last"), RP_POOLING_LAST);
    assert_int_equal(rp_pooling_parse("none"), RP_POOLING_NONE);
    assert_int_equal(rp_pooling_parse("max"), -1);
    assert_int_equal(rp_pooling_parse(NULL), -1);
    assert_string_equal(rp_pooling_name(RP_POOLING_LAST), "last");
    /* stories260K has no llama.pooling_type: mean (llama.cpp would take none) */
    assert_false(m->hp.has_pooling);
    assert_int_equal(rp_model_pooling(m), RP_POOLING_MEAN);
    rp_embedder *e = NULL;
    assert_int_equal(rp_embedder_create(m, NULL, &e), RP_OK);
    assert_int_equal(rp_embedder_pooling(e), RP_POOLING_MEAN);
    assert_int_equal(rp_embedder_n_embd(e), m->hp.n_embd);
    rp_embedder_free(e);
    rp_model_free(m);
}

/* stories260K with llama.pooling_type = `pool` added (every other key and tensor copied) at `out`. */
static void with_pooling_key(const char *src, uint32_t pool, const char *out) {
    rp_gguf *g = NULL;
    rp_gguf_writer *w = NULL;
    assert_int_equal(rp_gguf_open(src, &g), RP_OK);
    assert_int_equal(rp_gguf_writer_create(&w), RP_OK);
    for (uint64_t i = 0; i < rp_gguf_n_kv(g); i++) assert_int_equal(rp_gguf_writer_copy_kv(w, g, i), RP_OK);
    assert_int_equal(rp_gguf_writer_set_u32(w, "llama.pooling_type", pool), RP_OK);
    for (uint64_t i = 0; i < rp_gguf_n_tensors(g); i++) {
        const rp_gguf_tensor *t = rp_gguf_tensor_at(g, i);
        char name[256];
        snprintf(name, sizeof name, "%.*s", (int)t->name.len, t->name.ptr);
        assert_int_equal(rp_gguf_writer_add_tensor(w, name, t->type, t->n_dims, t->ne, t->data, t->nbytes), RP_OK);
    }
    assert_int_equal(rp_gguf_writer_write_file(w, out), RP_OK);
    rp_gguf_writer_free(w);
    rp_gguf_close(g);
}

/* A file's <arch>.pooling_type is the default pooling; a value that is no pooling type fails the load. */
static void test_model_pooling_key(void **state) {
    (void)state;
    RP_OPEN_STORIES(m);
    char path[1024];
    snprintf(path, sizeof path, "%s/pool_last.gguf", rp_test_tmpdir());
    with_pooling_key(m_path, RP_POOLING_LAST, path);
    rp_model *ml = NULL;
    assert_int_equal(rp_model_load(path, rp_model_default_params(), &ml), RP_OK);
    assert_int_equal(rp_model_pooling(ml), RP_POOLING_LAST);
    rp_embedder *e = NULL, *ref = make(m, RP_POOLING_LAST, true, 512, 4);
    assert_int_equal(rp_embedder_create(ml, NULL, &e), RP_OK);
    assert_int_equal(rp_embedder_pooling(e), RP_POOLING_LAST);
    rp_token t[MAXT];
    const int32_t n = tok(m, TEXT, t);
    const rp_token *ins[1] = {t};
    float a[64], b[64];
    size_t na = 0, nb = 0;
    assert_true(m->hp.n_embd <= 64);
    assert_int_equal(rp_embed(e, ins, &n, 1, a, 64, &na), RP_OK);
    assert_int_equal(rp_embed(ref, ins, &n, 1, b, 64, &nb), RP_OK);
    assert_int_equal(na, nb);
    assert_true(max_diff(a, b, na) < 1e-3f);   /* F16 KV against F32 */
    rp_embedder_free(e);
    rp_embedder_free(ref);
    rp_model_free(ml);
    /* a reranker's rank: refused unless a pooling is chosen */
    snprintf(path, sizeof path, "%s/pool_rank.gguf", rp_test_tmpdir());
    with_pooling_key(m_path, 4, path);
    assert_int_equal(rp_model_load(path, rp_model_default_params(), &ml), RP_OK);
    assert_int_equal(rp_embedder_create(ml, NULL, &e), RP_ERR_UNSUPPORTED);
    assert_non_null(strstr(rp_last_error(), "reranker"));
    assert_null(e);
    rp_embedder_params p = rp_embedder_default_params();
    p.pooling = RP_POOLING_CLS;
    assert_int_equal(rp_embedder_create(ml, &p, &e), RP_OK);
    rp_embedder_free(e);
    rp_model_free(ml);
    snprintf(path, sizeof path, "%s/pool_bad.gguf", rp_test_tmpdir());
    with_pooling_key(m_path, 7, path);
    ml = NULL;
    assert_int_equal(rp_model_load(path, rp_model_default_params(), &ml), RP_ERR_FORMAT);
    assert_non_null(strstr(rp_last_error(), "llama.pooling_type"));
    assert_null(ml);
    rp_model_free(m);
}

/* Every pooling against the reference's rows, with a pass smaller than the input (the input spans passes) and
 * a shorter input packed before it. */
static void test_pooling_matches_reference(void **state) {
    (void)state;
    RP_OPEN_STORIES(m);
    const int32_t E = m->hp.n_embd;
    rp_token t[MAXT], t2[MAXT];
    const int32_t n = tok(m, TEXT, t), n2 = tok(m, "The cat sat.", t2);
    assert_true(n > 16 && n2 > 2);
    float *ref = malloc(sizeof(float) * (size_t)n * (size_t)E), *want = malloc(sizeof(float) * (size_t)E);
    float *got = malloc(sizeof(float) * (size_t)(n + n2) * (size_t)E);
    ref_hidden(m, t, n, ref);
    const rp_token *ins[2] = {t2, t};
    const int32_t lens[2] = {n2, n};
    const rp_pooling pools[] = {RP_POOLING_MEAN, RP_POOLING_CLS, RP_POOLING_LAST, RP_POOLING_NONE};
    for (size_t pi = 0; pi < sizeof pools / sizeof pools[0]; pi++) {
        rp_embedder *e = make(m, pools[pi], false, 7, 2);
        size_t nout = 0;
        assert_int_equal(rp_embed(e, ins, lens, 2, got, (size_t)(n + n2) * (size_t)E, &nout), RP_OK);
        const float *mine = got + (size_t)(pools[pi] == RP_POOLING_NONE ? n2 : 1) * (size_t)E;   /* input 1 */
        assert_int_equal(nout, (size_t)(pools[pi] == RP_POOLING_NONE ? n + n2 : 2) * (size_t)E);
        if (pools[pi] == RP_POOLING_NONE) {
            float mx = max_diff(mine, ref, (size_t)n * (size_t)E);
            print_message("pooling none: max |diff| %.3g over %d tokens\n", (double)mx, n);
            assert_true(mx < 1e-4f);
        } else {
            if (pools[pi] == RP_POOLING_MEAN) {
                for (int32_t k = 0; k < E; k++) {
                    double s = 0;
                    for (int32_t i = 0; i < n; i++) s += ref[(size_t)i * E + k];
                    want[k] = (float)(s / n);
                }
            } else {
                memcpy(want, ref + (size_t)(pools[pi] == RP_POOLING_CLS ? 0 : n - 1) * E, sizeof(float) * (size_t)E);
            }
            float mx = max_diff(mine, want, (size_t)E);
            print_message("pooling %s: max |diff| %.3g\n", rp_pooling_name(pools[pi]), (double)mx);
            assert_true(mx < 1e-4f);
        }
        rp_embedder_free(e);
    }
    free(ref);
    free(want);
    free(got);
    rp_model_free(m);
}

/* Causal: the last-pooled embedding of the prefix of k tokens is the k-th token's hidden state of the whole input;
 * all the prefixes in one call. */
static void test_last_of_prefixes(void **state) {
    (void)state;
    RP_OPEN_STORIES(m);
    const int32_t E = m->hp.n_embd;
    rp_token t[MAXT];
    const int32_t n = tok(m, TEXT, t);
    float *ref = malloc(sizeof(float) * (size_t)n * (size_t)E), *got = malloc(sizeof(float) * (size_t)n * (size_t)E);
    ref_hidden(m, t, n, ref);
    const rp_token *ins[MAXT];
    int32_t lens[MAXT];
    for (int32_t k = 0; k < n; k++) {
        ins[k] = t;
        lens[k] = k + 1;
    }
    rp_embedder *e = make(m, RP_POOLING_LAST, false, 64, 4);
    size_t nout = 0;
    assert_int_equal(rp_embed(e, ins, lens, n, got, (size_t)n * (size_t)E, &nout), RP_OK);
    float mx = max_diff(got, ref, (size_t)n * (size_t)E);
    print_message("last of %d prefixes vs the hidden states: max |diff| %.3g\n", n, (double)mx);
    assert_true(mx < 1e-4f);
    rp_embedder_free(e);
    free(ref);
    free(got);
    rp_model_free(m);
}

/* The last-pooled state times the output matrix is llama.cpp's logits at each golden prompt's last position (the
 * golden file's cases, embedded in one call): the hidden state is the one after the output norm. */
static void test_last_state_gives_llamacpp_logits(void **state) {
    (void)state;
    const char *gp = rp_test_shared("models/stories260K.golden.json");
    RP_REQUIRE_SHARED(gp, "models/stories260K.golden.json");
    RP_OPEN_STORIES(m);
    json_error_t jerr;
    json_t *root = json_load_file(gp, 0, &jerr);
    assert_non_null(root);
    json_t *cases = json_object_get(root, "cases");
    const int32_t nc = (int32_t)json_array_size(cases), E = m->hp.n_embd, V = m->hp.n_vocab;
    assert_true(nc > 1 && nc <= 8);
    rp_token t[8][MAXT];
    const rp_token *ins[8];
    int32_t lens[8];
    for (int32_t c = 0; c < nc; c++) {
        json_t *pi = json_object_get(json_array_get(cases, (size_t)c), "prompt_ids");
        lens[c] = (int32_t)json_array_size(pi);
        assert_true(lens[c] > 0 && lens[c] <= MAXT);
        for (int32_t i = 0; i < lens[c]; i++) t[c][i] = (rp_token)json_integer_value(json_array_get(pi, (size_t)i));
        ins[c] = t[c];
    }
    rp_embedder *e = make(m, RP_POOLING_LAST, false, 16, 2);
    float *v = malloc(sizeof(float) * (size_t)nc * (size_t)E), *row = malloc(sizeof(float) * (size_t)E);
    size_t nout = 0;
    assert_int_equal(rp_embed(e, ins, lens, nc, v, (size_t)nc * (size_t)E, &nout), RP_OK);
    float mx = 0;
    for (int32_t c = 0; c < nc; c++) {
        json_t *cj = json_array_get(cases, (size_t)c), *lg = json_object_get(cj, "logits_last_prompt_pos");
        if (!lg) lg = json_object_get(cj, "logits_pos0");
        assert_int_equal((int32_t)json_array_size(lg), V);
        for (int32_t k = 0; k < V; k++) {
            rp_dequantize_row(m->output.type, (const uint8_t *)m->output.data + (size_t)k * m->output.row_bytes, row, E);
            double z = 0;
            for (int32_t i = 0; i < E; i++) z += (double)v[(size_t)c * E + i] * row[i];
            mx = fmaxf(mx, fabsf((float)z - (float)json_number_value(json_array_get(lg, (size_t)k))));
        }
    }
    print_message("last-pooled state x output vs llama.cpp logits: max |diff| %.3g (%d prompts, %d logits each)\n",
                  (double)mx, nc, V);
    assert_true(mx < 1e-3f);
    free(v);
    free(row);
    rp_embedder_free(e);
    json_decref(root);
    rp_model_free(m);
}

static const char *TEXTS[] = {
    "Hello.", "The little dog ran to the park and saw a big red ball.", "Tom was sad.",
    "Once upon a time there was a girl who liked to sing songs with her friends every day in the sun.",
    "A", "Lily and Ben went to the beach. They built a castle of sand and found a shell.",
};
#define NT (int32_t)(sizeof TEXTS / sizeof TEXTS[0])

/* Several inputs in one call equal each one alone, for a pass smaller than some inputs (the long slot), several
 * passes and a pass larger than all of them; default normalization gives unit norm. */
static void test_batch_equals_one_by_one(void **state) {
    (void)state;
    RP_OPEN_STORIES(m);
    const int32_t E = m->hp.n_embd;
    rp_token t[NT][MAXT];
    int32_t lens[NT];
    const rp_token *ins[NT];
    int32_t total = 0;
    for (int32_t i = 0; i < NT; i++) {
        lens[i] = tok(m, TEXTS[i], t[i]);
        ins[i] = t[i];
        total += lens[i];
    }
    float *all = malloc(sizeof(float) * (size_t)total * (size_t)E), *one = malloc(sizeof(float) * (size_t)MAXT * (size_t)E);
    float *raw = malloc(sizeof(float) * (size_t)NT * (size_t)E);
    const rp_pooling pools[] = {RP_POOLING_MEAN, RP_POOLING_LAST, RP_POOLING_NONE};
    const int32_t batches[] = {9, 20, 512};
    for (size_t pi = 0; pi < 3; pi++)
        for (size_t bi = 0; bi < 3; bi++) {
            rp_embedder *e = make(m, pools[pi], true, batches[bi], 2);
            size_t nout = 0;
            assert_int_equal(rp_embed(e, ins, lens, NT, all, (size_t)total * (size_t)E, &nout), RP_OK);
            const float *p = all;
            float mx = 0, worst_norm = 0;
            for (int32_t i = 0; i < NT; i++) {
                size_t n1 = 0;
                assert_int_equal(rp_embed(e, &ins[i], &lens[i], 1, one, (size_t)MAXT * (size_t)E, &n1), RP_OK);
                mx = fmaxf(mx, max_diff(p, one, n1));
                for (size_t r = 0; r < n1 / (size_t)E; r++) {
                    double ss = 0;
                    for (int32_t k = 0; k < E; k++) ss += (double)one[r * E + k] * one[r * E + k];
                    worst_norm = fmaxf(worst_norm, fabsf((float)sqrt(ss) - 1.0f));
                }
                p += n1;
            }
            assert_int_equal((size_t)(p - all), nout);
            print_message("%s, n_batch %d: batch vs one by one max |diff| %.3g, max |norm - 1| %.3g\n",
                          rp_pooling_name(pools[pi]), batches[bi], (double)mx, (double)worst_norm);
            assert_true(mx < 1e-5f);
            assert_true(worst_norm < 1e-5f);
            rp_embedder_free(e);
        }
    /* normalized = raw / |raw| */
    rp_embedder *en = make(m, RP_POOLING_MEAN, true, 16, 3), *er = make(m, RP_POOLING_MEAN, false, 16, 3);
    size_t nout = 0;
    assert_int_equal(rp_embed(en, ins, lens, NT, all, (size_t)total * (size_t)E, &nout), RP_OK);
    assert_int_equal(rp_embed(er, ins, lens, NT, raw, (size_t)NT * (size_t)E, &nout), RP_OK);
    for (int32_t i = 0; i < NT; i++) {
        double ss = 0;
        for (int32_t k = 0; k < E; k++) ss += (double)raw[i * E + k] * raw[i * E + k];
        assert_true(ss > 1e-6);
        for (int32_t k = 0; k < E; k++) assert_float_equal(all[i * E + k], raw[i * E + k] / sqrt(ss), 1e-6);
    }
    rp_embedder_free(en);
    rp_embedder_free(er);
    free(all);
    free(one);
    free(raw);
    rp_model_free(m);
}

static void test_errors(void **state) {
    (void)state;
    RP_OPEN_STORIES(m);
    const int32_t E = m->hp.n_embd;
    rp_embedder *e = make(m, RP_POOLING_MEAN, true, 16, 2);
    rp_token t[200];
    for (int i = 0; i < 200; i++) t[i] = 1 + i % 100;
    float out[4 * 64];
    assert_true(E <= 64);
    const rp_token *ins[2] = {t, t};
    int32_t lens[2] = {5, 0};
    size_t nout = 99;
    assert_int_equal(rp_embed(e, ins, lens, 2, out, sizeof out / sizeof *out, &nout), RP_ERR_INVALID_ARG);
    assert_non_null(strstr(rp_last_error(), "input 1 is empty"));
    assert_int_equal(nout, 0);
    lens[1] = 129;   /* n_ctx 128 */
    assert_int_equal(rp_embed(e, ins, lens, 2, out, sizeof out / sizeof *out, &nout), RP_ERR_RANGE);
    assert_non_null(strstr(rp_last_error(), "input 1 has 129 tokens"));
    lens[1] = 128;   /* the longest accepted */
    assert_int_equal(rp_embed(e, ins, lens, 2, out, sizeof out / sizeof *out, &nout), RP_OK);
    assert_int_equal(nout, 2 * (size_t)E);
    assert_int_equal(rp_embed(e, ins, lens, 2, out, (size_t)E, &nout), RP_ERR_FULL);   /* room for one */
    assert_int_equal(nout, 2 * (size_t)E);
    t[3] = m->hp.n_vocab;
    assert_int_equal(rp_embed(e, ins, lens, 2, out, sizeof out / sizeof *out, &nout), RP_ERR_RANGE);
    assert_non_null(strstr(rp_last_error(), "input 0 token 3"));
    assert_int_equal(rp_embed(e, ins, lens, 0, out, 0, &nout), RP_OK);   /* nothing to do */
    assert_int_equal(nout, 0);
    rp_embedder_free(e);
    rp_embedder_params p = rp_embedder_default_params();
    p.pooling = (rp_pooling)4;
    assert_int_equal(rp_embedder_create(m, &p, &e), RP_ERR_INVALID_ARG);
    assert_null(e);
    rp_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names_and_model_pooling),
        cmocka_unit_test(test_model_pooling_key),
        cmocka_unit_test(test_pooling_matches_reference),
        cmocka_unit_test(test_last_of_prefixes),
        cmocka_unit_test(test_last_state_gives_llamacpp_logits),
        cmocka_unit_test(test_batch_equals_one_by_one),
        cmocka_unit_test(test_errors),
    };
    return rp_test_main(tests, NULL, NULL);
}
