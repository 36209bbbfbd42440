/* test_api_bench.c — the public API's benchmark support (reprise.h, "benchmark support") on stories260K: the
 * CPU and model figures, rp_seq_sample (greedy is the argmax; a reset restarts the random stream, a truncate does
 * not), blend's deviation measure and n_ctx_over_train. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "reprise.h"

#define OPEN_MODEL(m) RP_OPEN_STORIES(m)

static void test_cpu_and_model_figures(void **state) {
    (void)state;
    rp_cpu_desc c;
    rp_cpu_describe(&c);
    assert_non_null(c.brand);
    assert_non_null(c.best);
    assert_string_equal(c.active, rp_cpu_active());
    OPEN_MODEL(m);
    rp_model_perf p;
    rp_model_perf_get(m, &p);
    assert_string_equal(p.main_type, "f32");   /* stories260K.gguf: f32 weights */
    assert_string_equal(p.cpu_level, rp_cpu_active());
    /* at least every layer matrix of f32 weights, and at most all the weights plus their packed copies */
    const rp_model_desc d = rp_model_describe(m);
    const double layer = 4.0 * d.n_layer * (2.0 * d.n_embd * d.n_head * d.head_dim +
                                            2.0 * d.n_embd * d.n_head_kv * d.head_dim + 3.0 * d.n_embd * d.n_ff);
    assert_true(p.decode_bytes_per_token >= layer);
    assert_true(p.decode_bytes_per_token <= 2.0 * (double)d.weight_bytes + 4.0 * d.n_vocab * d.n_embd);
    rp_model_free(m);
}

static int32_t argmax(const float *x, int32_t n) {
    int32_t b = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

/* n tokens drawn by rp_seq_sample from BOS, fed one by one */
static void draw(rp_seq *s, rp_model *m, const rp_sampler_params *sp, rp_token *out, int n) {
    rp_token t = rp_token_bos(m);
    assert_int_equal(rp_seq_feed(s, &t, 1), RP_OK);
    for (int i = 0; i < n; i++) {
        assert_int_equal(rp_seq_sample(s, sp, &out[i]), RP_OK);
        assert_int_equal(rp_seq_feed(s, &out[i], 1), RP_OK);
    }
}

static void test_seq_sample(void **state) {
    (void)state;
    OPEN_MODEL(m);
    rp_engine_params ep = rp_engine_default_params();
    ep.reuse = RP_REUSE_NONE;
    rp_engine *e = NULL;
    rp_seq *s = NULL;
    assert_int_equal(rp_engine_create(m, &ep, &e), RP_OK);
    assert_int_equal(rp_seq_create(e, &s), RP_OK);
    rp_sampler_params sp = rp_sampler_default_params();
    rp_token t = 7;
    assert_int_equal(rp_seq_sample(s, &sp, &t), RP_ERR_INVALID_ARG);   /* no logits yet */
    assert_int_equal(t, -1);
    assert_int_equal(rp_seq_n_past(s), 0);
    /* greedy: the argmax of the logits, and the token is not added */
    sp.temp = 0;
    const rp_token bos = rp_token_bos(m);
    assert_int_equal(rp_seq_feed(s, &bos, 1), RP_OK);
    assert_int_equal(rp_seq_sample(s, &sp, &t), RP_OK);
    assert_int_equal(t, argmax(rp_seq_logits(s), rp_model_describe(m).n_vocab));
    assert_int_equal(rp_seq_n_past(s), 1);
    /* sampling: a reset starts from the seed again; a truncate keeps the stream going */
    sp = rp_sampler_default_params();
    sp.temp = 1.0f;
    sp.top_k = 0;
    sp.seed = 42;
    rp_token a[16], b[16], c[16];
    rp_seq_reset(s);
    draw(s, m, &sp, a, 16);
    rp_seq_reset(s);
    draw(s, m, &sp, b, 16);
    assert_memory_equal(a, b, sizeof a);
    assert_int_equal(rp_seq_truncate(s, 0), RP_OK);
    draw(s, m, &sp, c, 16);
    assert_memory_not_equal(a, c, sizeof a);   /* 16 draws over 512 tokens at temp 1: the same by chance never */
    rp_seq_free(s);
    rp_engine_free(e);
    rp_model_free(m);
}

static void test_engine_params(void **state) {
    (void)state;
    OPEN_MODEL(m);
    rp_engine_params ep = rp_engine_default_params();
    assert_int_equal(ep.deviation, RP_DEVIATION_KV);
    assert_false(ep.n_ctx_over_train);
    rp_engine *e = NULL;
    ep.deviation = 7;
    assert_int_equal(rp_engine_create(m, &ep, &e), RP_ERR_INVALID_ARG);
    assert_non_null(strstr(rp_last_error(), "deviation"));
    assert_null(e);
    ep.deviation = RP_DEVIATION_V;
    ep.n_ctx = 1024;   /* stories260K was trained on 512 */
    assert_int_equal(rp_engine_create(m, &ep, &e), RP_OK);
    assert_int_equal(rp_engine_n_ctx(e), 512);
    rp_engine_free(e);
    ep.n_ctx_over_train = true;
    assert_int_equal(rp_engine_create(m, &ep, &e), RP_OK);
    assert_int_equal(rp_engine_n_ctx(e), 1024);
    rp_engine_free(e);
    rp_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cpu_and_model_figures),
        cmocka_unit_test(test_seq_sample),
        cmocka_unit_test(test_engine_params),
    };
    return rp_test_main(tests, NULL, NULL);
}
