#define _GNU_SOURCE
/* test_server_embed.c — POST /v1/embeddings (OpenAI's shape: every input form, base64, dimensions, usage, errors)
 * and llama-server's /embedding, against the library's rp_embedder on the same model; 501 without --embeddings;
 * an encoder (bert) model: embeddings only, generation refused, no start without --embeddings. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reprise.h"
#include "server/backend.h"
#include "srvtest.h"
#include "testutil.h"

#define N_CTX 64

static void with_embeddings(rp_server_config *c) {
    c->embeddings = true;
    c->backend.n_ctx = N_CTX;
}
static void with_none(rp_server_config *c) {
    with_embeddings(c);
    c->pooling = RP_POOLING_NONE;
}

/* The library's embedding of tokens on the server's model (the server's settings: mean, L2, F16 KV). */
static void lib_embed(fixture *f, const rp_token *t, int32_t n, float *out) {
    rp_embedder_params p = rp_embedder_default_params();
    p.n_ctx = N_CTX;
    rp_embedder *e = NULL;
    assert_int_equal(rp_embedder_create(rp_backend_model(rp_server_backend(f->srv)), &p, &e), RP_OK);
    size_t nout = 0;
    const rp_token *ins[1] = {t};
    assert_int_equal(rp_embed(e, ins, &n, 1, out, 64, &nout), RP_OK);
    assert_int_equal(nout, 64);
    rp_embedder_free(e);
}

static int32_t text_tokens(fixture *f, const char *text, rp_token *t) {
    int32_t n = 0;
    assert_int_equal(rp_embed_tokenize(rp_backend_model(rp_server_backend(f->srv)), text, strlen(text), t, 128, &n), RP_OK);
    return n;
}

/* data[i].embedding as floats (a JSON array of numbers, or base64 of little-endian float32). */
static void vec_of(json_t *item, float *v, bool b64) {
    json_t *em = json_object_get(item, "embedding");
    if (!b64) {
        assert_true(json_is_array(em));
        assert_int_equal(json_array_size(em), 64);
        for (size_t i = 0; i < 64; i++) v[i] = (float)json_number_value(json_array_get(em, i));
        return;
    }
    assert_true(json_is_string(em));
    const char *s = json_string_value(em);
    assert_int_equal(strlen(s), (64 * 4 + 2) / 3 * 4);
    static const char T[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    unsigned char bytes[64 * 4 + 3];
    size_t nb = 0;
    for (size_t i = 0; s[i]; i += 4) {
        uint32_t x = 0;
        int pad = 0;
        for (int k = 0; k < 4; k++) {
            const char *p = strchr(T, s[i + k]);
            if (s[i + k] == '=') pad++;
            else assert_non_null(p);
            x = x << 6 | (s[i + k] == '=' ? 0 : (uint32_t)(p - T));
        }
        bytes[nb++] = (unsigned char)(x >> 16);
        if (pad < 2) bytes[nb++] = (unsigned char)(x >> 8);
        if (pad < 1) bytes[nb++] = (unsigned char)x;
    }
    assert_int_equal(nb, 64 * 4);
    memcpy(v, bytes, 64 * 4);
}

static float max_diff(const float *a, const float *b, int n) {
    float mx = 0;
    for (int i = 0; i < n; i++) mx = fmaxf(mx, fabsf(a[i] - b[i]));
    return mx;
}

static json_t *ok(uint16_t port, const char *path, const char *body) {
    resp r = post(port, path, body);
    if (r.status != 200) print_message("%s %s: %d %.300s\n", path, body, r.status, r.body);
    assert_int_equal(r.status, 200);
    json_t *j = parse(&r);
    resp_free(&r);
    return j;
}

static void bad(uint16_t port, const char *body, int status, const char *code, const char *param) {
    resp r = post(port, "/v1/embeddings", body);
    expect_error_body(&r, status, code);
    json_t *j = parse(&r);
    json_t *p = json_object_get(json_object_get(j, "error"), "param");
    if (param) {
        if (!json_is_string(p) || strcmp(json_string_value(p), param))
            print_message("%s: param %s, want %s\n", body, json_is_string(p) ? json_string_value(p) : "null", param);
        assert_true(json_is_string(p) && !strcmp(json_string_value(p), param));
    }
    json_decref(j);
    resp_free(&r);
}

static void test_disabled(void **state) {
    (void)state;
    fixture f;
    if (!start(&f, NULL)) RP_SKIP("%s not found\n", SRVTEST_MODEL);
    resp r = post(f.port, "/v1/embeddings", "{\"input\":\"hello\"}");
    expect_error_body(&r, 501, "not_supported");
    assert_non_null(strstr(r.body, "--embeddings"));
    resp_free(&r);
    stop(&f);
}

static void test_shapes(void **state) {
    (void)state;
    fixture f;
    if (!start(&f, with_embeddings)) RP_SKIP("%s not found\n", SRVTEST_MODEL);
    const char *a = "Once upon a time there was a cat.", *b = "The dog ran.";
    rp_token ta[128], tb[128];
    const int32_t na = text_tokens(&f, a, ta), nb = text_tokens(&f, b, tb);
    float wa[64], wb[64], got[64], got2[64];
    lib_embed(&f, ta, na, wa);
    lib_embed(&f, tb, nb, wb);

    /* a string */
    resp pr = http(f.port, "GET", "/props", NULL, NULL);
    json_t *props = parse(&pr);
    assert_true(json_is_true(json_object_get(json_object_get(props, "reprise"), "embeddings")));
    assert_string_equal(json_string_value(json_object_get(json_object_get(props, "reprise"), "pooling")), "mean");
    json_decref(props);
    resp_free(&pr);
    json_t *j = ok(f.port, "/v1/embeddings", "{\"input\":\"Once upon a time there was a cat.\",\"model\":\"whatever\"}");
    assert_string_equal(json_string_value(json_object_get(j, "object")), "list");
    assert_non_null(json_string_value(json_object_get(j, "model")));
    json_t *data = json_object_get(j, "data");
    assert_int_equal(json_array_size(data), 1);
    json_t *d0 = json_array_get(data, 0);
    assert_string_equal(json_string_value(json_object_get(d0, "object")), "embedding");
    assert_int_equal(json_integer_value(json_object_get(d0, "index")), 0);
    vec_of(d0, got, false);
    print_message("server vs library: max |diff| %.3g\n", (double)max_diff(got, wa, 64));
    assert_true(max_diff(got, wa, 64) < 1e-6f);
    double ss = 0;
    for (int i = 0; i < 64; i++) ss += (double)got[i] * got[i];
    assert_true(fabs(sqrt(ss) - 1) < 1e-5);
    assert_int_equal(jint(j, "usage.prompt_tokens"), na);
    assert_int_equal(jint(j, "usage.total_tokens"), na);
    json_decref(j);

    /* an array of strings, in order; dimensions equal to the model's */
    j = ok(f.port, "/v1/embeddings",
           "{\"input\":[\"The dog ran.\",\"Once upon a time there was a cat.\",\"The dog ran.\"],\"dimensions\":64}");
    data = json_object_get(j, "data");
    assert_int_equal(json_array_size(data), 3);
    for (size_t i = 0; i < 3; i++) {
        assert_int_equal(json_integer_value(json_object_get(json_array_get(data, i), "index")), (json_int_t)i);
        vec_of(json_array_get(data, i), got, false);
        assert_true(max_diff(got, i == 1 ? wa : wb, 64) < 1e-6f);
    }
    assert_int_equal(jint(j, "usage.prompt_tokens"), 2 * nb + na);
    json_decref(j);

    /* token ids, and an array of arrays of them */
    char body[2048];
    int o = snprintf(body, sizeof body, "{\"input\":[");
    for (int32_t i = 0; i < na; i++) o += snprintf(body + o, sizeof body - (size_t)o, i ? ",%d" : "%d", ta[i]);
    snprintf(body + o, sizeof body - (size_t)o, "]}");
    j = ok(f.port, "/v1/embeddings", body);
    assert_int_equal(json_array_size(json_object_get(j, "data")), 1);
    vec_of(json_array_get(json_object_get(j, "data"), 0), got, false);
    assert_true(max_diff(got, wa, 64) < 1e-6f);
    assert_int_equal(jint(j, "usage.prompt_tokens"), na);
    json_decref(j);
    o = snprintf(body, sizeof body, "{\"input\":[[");
    for (int32_t i = 0; i < nb; i++) o += snprintf(body + o, sizeof body - (size_t)o, i ? ",%d" : "%d", tb[i]);
    o += snprintf(body + o, sizeof body - (size_t)o, "],[");
    for (int32_t i = 0; i < na; i++) o += snprintf(body + o, sizeof body - (size_t)o, i ? ",%d" : "%d", ta[i]);
    snprintf(body + o, sizeof body - (size_t)o, "]],\"encoding_format\":\"base64\"}");
    j = ok(f.port, "/v1/embeddings", body);
    data = json_object_get(j, "data");
    assert_int_equal(json_array_size(data), 2);
    vec_of(json_array_get(data, 0), got, true);
    vec_of(json_array_get(data, 1), got2, true);
    assert_true(max_diff(got, wb, 64) < 1e-6f);
    assert_true(max_diff(got2, wa, 64) < 1e-6f);
    json_decref(j);

    /* llama-server's /embedding: "content", an array of vectors per input */
    j = ok(f.port, "/embedding", "{\"content\":\"The dog ran.\"}");
    assert_true(json_is_array(j));
    assert_int_equal(json_array_size(j), 1);
    json_t *em = json_object_get(json_array_get(j, 0), "embedding");
    assert_int_equal(json_array_size(em), 1);
    json_t *one = json_object();
    json_object_set(one, "embedding", json_array_get(em, 0));
    vec_of(one, got, false);
    json_decref(one);
    assert_true(max_diff(got, wb, 64) < 1e-6f);
    json_decref(j);
    stop(&f);
}

static void test_errors(void **state) {
    (void)state;
    fixture f;
    if (!start(&f, with_embeddings)) RP_SKIP("%s not found\n", SRVTEST_MODEL);
    const uint16_t p = f.port;
    bad(p, "{}", 400, NULL, "input");
    bad(p, "{\"input\":\"\"}", 400, NULL, "input");
    bad(p, "{\"input\":[]}", 400, NULL, "input");
    bad(p, "{\"input\":[\"ok\",\"\"]}", 400, NULL, "input[1]");
    bad(p, "{\"input\":[[1,2],[]]}", 400, NULL, "input[1]");
    bad(p, "{\"input\":5}", 400, NULL, "input");
    bad(p, "{\"input\":[\"a\",5]}", 400, NULL, "input[1]");
    bad(p, "{\"input\":[1,100000]}", 400, NULL, "input");
    bad(p, "{\"input\":\"hi\",\"encoding_format\":\"int8\"}", 400, NULL, "encoding_format");
    bad(p, "{\"input\":\"hi\",\"encoding_format\":1}", 400, NULL, "encoding_format");
    bad(p, "{\"input\":\"hi\",\"dimensions\":32}", 400, NULL, "dimensions");
    bad(p, "{\"input\":\"hi\",\"model\":3}", 400, NULL, "model");
    bad(p, "{\"input\":", 400, "invalid_json", NULL);
    /* longer than the context (64 tokens): named, as the completions' overflow */
    char body[4096];
    int o = snprintf(body, sizeof body, "{\"input\":[\"short\",\"");
    for (int i = 0; i < 80; i++) o += snprintf(body + o, sizeof body - (size_t)o, "the cat sat on the mat. ");
    snprintf(body + o, sizeof body - (size_t)o, "\"]}");
    bad(p, body, 400, "context_length_exceeded", "input[1]");
    o = snprintf(body, sizeof body, "{\"input\":[");
    for (int i = 0; i < N_CTX + 1; i++) o += snprintf(body + o, sizeof body - (size_t)o, i ? ",%d" : "%d", 10 + i);
    snprintf(body + o, sizeof body - (size_t)o, "]}");
    bad(p, body, 400, "context_length_exceeded", "input");
    /* exactly the context is fine */
    o = snprintf(body, sizeof body, "{\"input\":[");
    for (int i = 0; i < N_CTX; i++) o += snprintf(body + o, sizeof body - (size_t)o, i ? ",%d" : "%d", 10 + i);
    snprintf(body + o, sizeof body - (size_t)o, "]}");
    json_t *j = ok(p, "/v1/embeddings", body);
    assert_int_equal(jint(j, "usage.prompt_tokens"), N_CTX);
    json_decref(j);
    expect_error(p, "GET", "/v1/embeddings", NULL, NULL, 405, NULL);
    stop(&f);
}

/* pooling none: refused by the OpenAI endpoint (llama-server's message), one vector per token on /embedding */
static void test_pooling_none(void **state) {
    (void)state;
    fixture f;
    if (!start(&f, with_none)) RP_SKIP("%s not found\n", SRVTEST_MODEL);
    resp r = post(f.port, "/v1/embeddings", "{\"input\":\"hello\"}");
    expect_error_body(&r, 400, NULL);
    assert_non_null(strstr(r.body, "Pooling type 'none' is not OAI compatible"));
    resp_free(&r);
    rp_token t[128];
    const int32_t n = text_tokens(&f, "The dog ran.", t);
    json_t *j = ok(f.port, "/embedding", "{\"input\":[\"The dog ran.\",\"Hi\"]}");
    assert_int_equal(json_array_size(j), 2);
    json_t *em = json_object_get(json_array_get(j, 0), "embedding");
    assert_int_equal(json_array_size(em), (size_t)n);
    for (size_t i = 0; i < (size_t)n; i++) assert_int_equal(json_array_size(json_array_get(em, i)), 64);
    json_decref(j);
    stop(&f);
}

/* ---- an encoder (bert): /v1/embeddings works, generation is refused, and the server wants --embeddings ---- */

static char g_bert[512];
static void with_bert(rp_server_config *c) {
    with_embeddings(c);
    c->backend.model_path = g_bert;
}
static void with_bert_only(rp_server_config *c) {
    c->backend.model_path = g_bert;
    c->backend.n_ctx = N_CTX;
}

static void test_encoder(void **state) {
    (void)state;
    snprintf(g_bert, sizeof g_bert, "%s/bert-tiny.gguf", rp_test_tmpdir());
    rp_model_synth_params sp = rp_model_synth_default_params();
    sp.arch = "bert";
    sp.preset = "tiny";
    sp.type = "q8_0";
    assert_int_equal(rp_model_synth(&sp, g_bert), RP_OK);
    fixture f;
    if (!start(&f, with_bert)) RP_SKIP("%s not found\n", SRVTEST_MODEL);
    /* the library's vectors on the same file (the server's settings: the model's pooling, cls; L2) */
    rp_model *m = NULL;
    assert_int_equal(rp_model_load(g_bert, rp_model_default_params(), &m), RP_OK);
    rp_embedder *e = NULL;
    rp_embedder_params p = rp_embedder_default_params();
    p.n_ctx = N_CTX;
    assert_int_equal(rp_embedder_create(m, &p, &e), RP_OK);
    assert_int_equal(rp_embedder_n_embd(e), 128);
    const char *texts[2] = {"Hello World", "The capital of France is Paris."};
    float want[2][128];
    for (int i = 0; i < 2; i++) {
        rp_token t[64];
        int32_t n = 0;
        assert_int_equal(rp_embed_tokenize(m, texts[i], strlen(texts[i]), t, 64, &n), RP_OK);
        const rp_token *ins[1] = {t};
        size_t nout = 0;
        assert_int_equal(rp_embed(e, ins, &n, 1, want[i], 128, &nout), RP_OK);
    }
    json_t *j = ok(f.port, "/v1/embeddings", "{\"input\":[\"Hello World\",\"The capital of France is Paris.\"]}");
    json_t *data = json_object_get(j, "data");
    assert_int_equal(json_array_size(data), 2);
    for (size_t i = 0; i < 2; i++) {
        json_t *em = json_object_get(json_array_get(data, i), "embedding");
        assert_int_equal(json_array_size(em), 128);
        float md = 0;
        for (size_t k = 0; k < 128; k++) md = fmaxf(md, fabsf((float)json_number_value(json_array_get(em, k)) - want[i][k]));
        assert_true(md < 1e-6f);
    }
    json_decref(j);
    resp pr = http(f.port, "GET", "/props", NULL, NULL);
    json_t *props = parse(&pr);
    assert_string_equal(json_string_value(json_object_get(json_object_get(props, "reprise"), "pooling")), "cls");
    json_decref(props);
    resp_free(&pr);
    /* no generation */
    resp r = post(f.port, "/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}");
    expect_error_body(&r, 501, "not_supported");
    assert_non_null(strstr(r.body, "embedding model"));
    resp_free(&r);
    r = post(f.port, "/v1/completions", "{\"prompt\":\"hi\",\"max_tokens\":4}");
    expect_error_body(&r, 501, "not_supported");
    resp_free(&r);
    stop(&f);
    rp_embedder_free(e);
    rp_model_free(m);
    /* without --embeddings the server has nothing to answer: it does not start, and says why */
    rp_server_config cfg = rp_server_default_config();
    with_bert_only(&cfg);
    cfg.backend.n_threads = 1;
    cfg.port = 0;
    cfg.quiet = true;
    rp_server *srv = NULL;
    assert_int_equal(rp_server_start(&cfg, &srv), RP_ERR_UNSUPPORTED);
    assert_non_null(strstr(rp_last_error(), "--embeddings"));
    assert_null(srv);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_disabled),
        cmocka_unit_test(test_shapes),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_pooling_none),
        cmocka_unit_test(test_encoder),
    };
    return rp_test_main(tests, NULL, NULL);
}
