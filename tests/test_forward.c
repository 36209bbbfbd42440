/* test_forward.c — the forward pass on stories260K beyond the goldens (tests/test_model.c): batched multi-sequence
 * rows, KV rollback, flash-decoding's split at depth. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "core/error.h"
#include "kv/kv.h"
#include "model/forward.h"
#include "model/model.h"
#include "model/session.h"

/* Three sequences in one batch — one prefilling, two decoding at other
 * positions — give the same logits as running each alone. */
static void test_batched_multi_sequence(void **state) {
    (void)state;
    const char *mp = rp_test_shared("models/stories260K.gguf");
    RP_REQUIRE_SHARED(mp, "models/stories260K.gguf");
    rp_model *m = NULL;
    assert_int_equal(rp_model_load(mp, rp_model_default_params(), &m), RP_OK);
    rp_ctx_params cp = rp_ctx_default_params();
    cp.n_ctx_max = 128;
    cp.n_outputs = 8;
    rp_ctx *ctx = NULL;
    assert_int_equal(rp_ctx_create(m, cp, &ctx), RP_OK);
    const rp_token A[] = {1, 403, 407, 261, 378, 432}, B[] = {1, 342, 385, 317}, C[] = {1, 261, 399, 384, 262, 272, 11};
    const rp_token *seqs[3] = {A, B, C};
    const int lens[3] = {6, 4, 7};
    /* reference: each alone, token by token, logits after the last token */
    float ref[3][512];
    for (int s = 0; s < 3; s++) {
        rp_kv *kv = NULL;
        assert_int_equal(rp_kv_create(m, 64, RP_TYPE_F32, &kv), RP_OK);
        rp_batch b;
        assert_int_equal(rp_batch_init(&b, 8), RP_OK);
        for (int t = 0; t < lens[s]; t++) {
            rp_batch_clear(&b);
            rp_batch_add(&b, seqs[s][t], 0, t, t, true);
            assert_int_equal(rp_forward(ctx, &b, &kv, 1), RP_OK);
        }
        memcpy(ref[s], rp_ctx_logits(ctx, 0), sizeof ref[s]);
        rp_batch_free(&b);
        rp_kv_free(kv);
    }
    /* batched: B and C are already prefilled except their last token; A is prefilled whole in the same call */
    rp_kv *kvs[3];
    for (int s = 0; s < 3; s++) assert_int_equal(rp_kv_create(m, 64, RP_TYPE_F32, &kvs[s]), RP_OK);
    rp_batch b;
    assert_int_equal(rp_batch_init(&b, 32), RP_OK);
    for (int s = 1; s < 3; s++)
        for (int t = 0; t < lens[s] - 1; t++) rp_batch_add(&b, seqs[s][t], s, t, t, false);
    assert_int_equal(rp_forward(ctx, &b, kvs, 3), RP_OK);
    rp_batch_clear(&b);
    rp_batch_add(&b, C[6], 2, 6, 6, true);
    for (int t = 0; t < 6; t++) rp_batch_add(&b, A[t], 0, t, t, t == 5);
    rp_batch_add(&b, B[3], 1, 3, 3, true);
    assert_int_equal(rp_forward(ctx, &b, kvs, 3), RP_OK);
    assert_int_equal(rp_ctx_n_outputs(ctx), 3);
    const int order[3] = {2, 0, 1};
    for (int o = 0; o < 3; o++) {
        const float *lg = rp_ctx_logits(ctx, o);
        float mx = 0;
        for (int k = 0; k < 512; k++) mx = fmaxf(mx, fabsf(lg[k] - ref[order[o]][k]));
        print_message("  seq %d batched vs alone: max |diff| %.2e\n", order[o], mx);
        assert_true(mx < 1e-4f);
    }
    /* invalid rows are rejected before any cache is touched */
    rp_batch_clear(&b);
    rp_batch_add(&b, 1, 0, 20, 20, true);   /* cell 20 but cells 6..19 are empty */
    assert_int_equal(rp_forward(ctx, &b, kvs, 3), RP_ERR_RANGE);
    assert_non_null(strstr(rp_last_error(), "neither cached nor in the batch"));
    rp_batch_clear(&b);
    rp_batch_add(&b, 9999, 0, 6, 6, true);
    assert_int_equal(rp_forward(ctx, &b, kvs, 3), RP_ERR_RANGE);
    rp_batch_clear(&b);
    rp_batch_add(&b, 1, 5, 6, 6, true);
    assert_int_equal(rp_forward(ctx, &b, kvs, 3), RP_ERR_RANGE);
    assert_int_equal(kvs[0]->n, 6);
    rp_batch_free(&b);
    for (int s = 0; s < 3; s++) rp_kv_free(kvs[s]);
    rp_ctx_free(ctx);
    rp_model_free(m);
}

/* Flash-decoding: decode (one row) and a 3-row verification run at depth
 * 1,500 give the same logits with the attention split into KV ranges as
 * without (RP_ATTN_SPLIT=0), for F32, F16 and Q8_0 caches, and the split did
 * happen (stories260K has 4 KV heads, fewer than 8 items per thread). */
static void test_attn_split_at_depth(void **state) {
    (void)state;
    const char *mp = rp_test_shared("models/stories260K.gguf");
    RP_REQUIRE_SHARED(mp, "models/stories260K.gguf");
    rp_model *m = NULL;
    assert_int_equal(rp_model_load(mp, rp_model_default_params(), &m), RP_OK);
    enum { DEPTH = 1500, NB = 256 };
    rp_ctx_params cp = rp_ctx_default_params();
    cp.n_ctx_max = 2048;
    cp.n_batch = NB;
    cp.n_outputs = 4;
    cp.n_threads = 2;
    rp_ctx *ctx[2] = {NULL, NULL};   /* [0]: split, [1]: RP_ATTN_SPLIT=0 */
    unsetenv("RP_ATTN_SPLIT");
    assert_int_equal(rp_ctx_create(m, cp, &ctx[0]), RP_OK);
    setenv("RP_ATTN_SPLIT", "0", 1);
    assert_int_equal(rp_ctx_create(m, cp, &ctx[1]), RP_OK);
    unsetenv("RP_ATTN_SPLIT");
    static const rp_type kvt[3] = {RP_TYPE_F32, RP_TYPE_F16, RP_TYPE_Q8_0};
    rp_batch b;
    assert_int_equal(rp_batch_init(&b, NB), RP_OK);
    rp_test_rng r = {12345};
    for (int t = 0; t < 3; t++) {
        float lg[2][3][512];
        int32_t split[2] = {0, 0};
        for (int v = 0; v < 2; v++) {
            rp_kv *kv = NULL;
            assert_int_equal(rp_kv_create(m, 2048, kvt[t], &kv), RP_OK);
            r.s = 12345;   /* the same tokens for both variants */
            for (int p0 = 0; p0 < DEPTH; p0 += NB) {
                rp_batch_clear(&b);
                for (int p = p0; p < p0 + NB && p < DEPTH; p++)
                    rp_batch_add(&b, p ? 3 + (rp_token)(rp_test_rng_next(&r) % 500) : 1, 0, p, p, false);
                assert_int_equal(rp_forward(ctx[v], &b, &kv, 1), RP_OK);
            }
            rp_batch_clear(&b);
            rp_batch_add(&b, 300, 0, DEPTH, DEPTH, true);   /* decode */
            assert_int_equal(rp_forward(ctx[v], &b, &kv, 1), RP_OK);
            memcpy(lg[v][0], rp_ctx_logits(ctx[v], 0), sizeof lg[v][0]);
            split[v] = rp_ctx_last_attn_split(ctx[v]);
            rp_batch_clear(&b);   /* a verification run of 2 more rows */
            rp_batch_add(&b, 301, 0, DEPTH + 1, DEPTH + 1, true);
            rp_batch_add(&b, 302, 0, DEPTH + 2, DEPTH + 2, true);
            assert_int_equal(rp_forward(ctx[v], &b, &kv, 1), RP_OK);
            memcpy(lg[v][1], rp_ctx_logits(ctx[v], 0), sizeof lg[v][1]);
            memcpy(lg[v][2], rp_ctx_logits(ctx[v], 1), sizeof lg[v][2]);
            rp_kv_free(kv);
        }
        assert_true(split[0] > 1);
        assert_int_equal(split[1], 1);
        float mx = 0;
        for (int o = 0; o < 3; o++)
            for (int k = 0; k < 512; k++) mx = fmaxf(mx, fabsf(lg[0][o][k] - lg[1][o][k]));
        print_message("  kv %s: %d ranges, split vs one pass max |diff| %.2e\n", rp_type_name(kvt[t]), split[0],
                      (double)mx);
        assert_true(mx < 1e-4f);
    }
    rp_batch_free(&b);
    rp_ctx_free(ctx[0]);
    rp_ctx_free(ctx[1]);
    rp_model_free(m);
}

/* Rolling back the cache (rejected draft tokens) and re-feeding gives the
 * same logits as never having fed them. */
static void test_kv_truncate_rollback(void **state) {
    (void)state;
    const char *mp = rp_test_shared("models/stories260K.gguf");
    RP_REQUIRE_SHARED(mp, "models/stories260K.gguf");
    rp_model *m = NULL;
    assert_int_equal(rp_model_load(mp, rp_model_default_params(), &m), RP_OK);
    rp_ctx_params cp = rp_ctx_default_params();
    cp.n_ctx_max = 64;
    rp_ctx *ctx = NULL;
    assert_int_equal(rp_ctx_create(m, cp, &ctx), RP_OK);
    rp_session_params sp = rp_session_default_params();
    sp.n_ctx = 64;
    sp.kv_type = RP_TYPE_F32;
    rp_session *s = NULL;
    assert_int_equal(rp_session_create(ctx, sp, &s), RP_OK);
    const rp_token p[] = {1, 403, 407, 261, 378}, junk[] = {100, 200, 300}, next = 432;
    assert_int_equal(rp_session_feed(s, p, 5), RP_OK);
    assert_int_equal(rp_session_feed(s, junk, 3), RP_OK);
    rp_kv_truncate(rp_session_kv(s), 5);
    assert_int_equal(rp_session_n_past(s), 5);
    assert_int_equal(rp_session_feed(s, &next, 1), RP_OK);
    float a[512];
    memcpy(a, rp_session_logits(s), sizeof a);
    rp_session_reset(s);
    assert_int_equal(rp_session_feed(s, p, 5), RP_OK);
    assert_int_equal(rp_session_feed(s, &next, 1), RP_OK);
    for (int k = 0; k < 512; k++) assert_float_equal(a[k], rp_session_logits(s)[k], 1e-5);
    /* context overflow is an error, not a crash */
    rp_token many[64] = {0};
    assert_int_equal(rp_session_feed(s, many, 64), RP_ERR_FULL);
    rp_session_free(s);
    rp_ctx_free(ctx);
    rp_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_batched_multi_sequence),
        cmocka_unit_test(test_kv_truncate_rollback),
        cmocka_unit_test(test_attn_split_at_depth),
    };
    return rp_test_main(tests, NULL, NULL);
}
