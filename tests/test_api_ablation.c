/* test_api_ablation.c — the public API's ablation switches (rp_engine_params: cache_policy, cache_prefetch,
 * pipeline, async_load, cache_sync_persist, cache_naive_store, static_shapes), the pool figures in rp_engine_stats,
 * rp_static_default_shapes and rp_cache_add_filler, on stories260K (`reprise bench ablation` is built on them). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "reprise.h"

#define OPEN_MODEL(m) RP_OPEN_STORIES(m)

static void fresh_dir(char *dir, size_t cap, const char *name) {
    snprintf(dir, cap, "%.200s/%s", rp_test_tmpdir(), name);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

static rp_prompt *two_docs(const rp_model *m) {
    rp_prompt *p = NULL;
    assert_int_equal(rp_prompt_create(&p), RP_OK);
    const char *a = "Once upon a time there was a boy who liked trains, and every morning he went to see them.";
    const char *b = "The little dog ran in the park with a red ball, and the sun was warm on the grass all day.";
    assert_int_equal(rp_prompt_add_text(p, m, a, strlen(a)), RP_OK);
    assert_int_equal(rp_prompt_add_text(p, m, b, strlen(b)), RP_OK);
    return p;
}

static uint64_t store_chunks(const char *dir) {
    rp_cache *c = NULL;
    assert_int_equal(rp_cache_open(dir, false, &c), RP_OK);
    rp_cache_info ci;
    assert_int_equal(rp_cache_info_get(c, &ci), RP_OK);
    rp_cache_close(c);
    return ci.chunks;
}

/* Defaults have every component on; bad switches are refused naming what was wrong. */
static void test_defaults_and_checks(void **state) {
    (void)state;
    const rp_engine_params d = rp_engine_default_params();
    assert_int_equal(d.cache_policy, RP_CACHE_POLICY_COST);
    assert_true(d.cache_prefetch && d.pipeline && d.async_load);
    assert_false(d.cache_sync_persist || d.cache_naive_store);
    assert_int_equal(d.static_shapes.L_P, 0);
    assert_int_equal(d.static_shapes.L_S, 0);
    const rp_static_shapes sh = rp_static_default_shapes();
    assert_int_equal(sh.L_P, 128);
    assert_int_equal(sh.L_S, 512);
    assert_false(sh.calibrated);
    OPEN_MODEL(m);
    rp_engine *e = NULL;
    rp_engine_params p = d;
    p.n_threads = 1;
    p.cache_policy = (rp_cache_policy)7;
    assert_int_equal(rp_engine_create(m, &p, &e), RP_ERR_INVALID_ARG);
    assert_non_null(strstr(rp_last_error(), "cache policy"));
    p = d;
    p.n_threads = 1;
    p.static_shapes.L_P = 64;   /* L_S missing */
    assert_int_equal(rp_engine_create(m, &p, &e), RP_ERR_INVALID_ARG);
    assert_non_null(strstr(rp_last_error(), "static shapes"));
    assert_null(e);
    rp_model_free(m);
}

/* static_shapes take precedence over the defaults (and any stored calibration) and are what a prefill runs. */
static void test_static_shapes(void **state) {
    (void)state;
    OPEN_MODEL(m);
    rp_engine_params p = rp_engine_default_params();
    p.n_threads = 1;
    p.static_mode = true;
    p.static_shapes = (rp_static_shapes){.L_P = 64, .L_S = 96, .lat_P_ms = 1.5, .lat_S_ms = 2.5, .calibrated = true};
    rp_engine *e = NULL;
    assert_int_equal(rp_engine_create(m, &p, &e), RP_OK);
    rp_static_shapes got;
    rp_engine_static_shapes(e, &got);
    assert_int_equal(got.L_P, 64);
    assert_int_equal(got.L_S, 96);
    assert_true(got.lat_P_ms == 1.5 && got.lat_S_ms == 2.5 && got.calibrated);
    rp_seq *s = NULL;
    assert_int_equal(rp_seq_create(e, &s), RP_OK);
    rp_prompt *pr = two_docs(m);
    rp_gen_stats st;
    assert_int_equal(rp_seq_prefill(s, pr, NULL, &st), RP_OK);
    assert_true(st.static_shapes && st.calibrated);
    /* the plain prefill's rows, padded to whole 64-row calls */
    assert_int_equal(st.computed_rows % 64, 0);
    assert_true(st.computed_rows >= rp_prompt_n_tokens(pr));
    rp_prompt_free(pr);
    rp_seq_free(s);
    rp_engine_free(e);
    rp_model_free(m);
}

/* Filler rows land in the store (indexed or naive) and no engine of the model hits them; an engine opens the naive
 * store with cache_naive_store and caches there. */
static void test_filler(void **state) {
    (void)state;
    char dir[256], ndir[256];
    fresh_dir(dir, sizeof dir, "api-ablation-filler");
    fresh_dir(ndir, sizeof ndir, "api-ablation-filler-naive");
    assert_int_equal(rp_cache_add_filler(dir, false, -1, 1), RP_ERR_INVALID_ARG);
    assert_int_equal(rp_cache_add_filler(dir, false, 12000, 1), RP_OK);   /* more than one write batch */
    assert_int_equal(store_chunks(dir), 12000);
    assert_int_equal(rp_cache_add_filler(ndir, true, 100, 2), RP_OK);
    OPEN_MODEL(m);
    rp_engine_params p = rp_engine_default_params();
    p.n_threads = 1;
    p.cache_dir = ndir;
    p.cache_naive_store = true;
    rp_engine *e = NULL;
    assert_int_equal(rp_engine_create(m, &p, &e), RP_OK);
    rp_seq *s = NULL;
    assert_int_equal(rp_seq_create(e, &s), RP_OK);
    rp_prompt *pr = two_docs(m);
    rp_gen_stats st;
    assert_int_equal(rp_seq_prefill(s, pr, NULL, &st), RP_OK);
    assert_int_equal(st.reused_prefix + st.reused_nonprefix, 0);   /* the filler is another model's */
    assert_int_equal(rp_seq_commit(s), RP_OK);
    assert_int_equal(rp_engine_flush(e), RP_OK);
    rp_engine_stats es;
    rp_engine_stats_get(e, &es);
    assert_true(es.written > 0 && es.write_bytes > 0);
    rp_seq_free(s);
    rp_engine_free(e);
    assert_int_equal(store_chunks(ndir), 100 + es.written);
    rp_prompt_free(pr);
    rp_model_free(m);
}

/* sync persistence writes at commit, on the caller's thread; with no RAM tier every hit is a flash load, read on
 * the caller's thread without async_load; no prefetch thread prefetches nothing; LRU runs. */
static void test_switches_and_stats(void **state) {
    (void)state;
    char dir[256];
    fresh_dir(dir, sizeof dir, "api-ablation-switches");
    OPEN_MODEL(m);
    rp_engine_params p = rp_engine_default_params();
    p.n_threads = 1;
    p.cache_dir = dir;
    p.cache_sync_persist = true;
    p.cache_prefetch = false;
    p.cache_policy = RP_CACHE_POLICY_LRU;
    rp_engine *e = NULL;
    assert_int_equal(rp_engine_create(m, &p, &e), RP_OK);
    rp_seq *s = NULL;
    assert_int_equal(rp_seq_create(e, &s), RP_OK);
    rp_prompt *pr = two_docs(m);
    rp_gen_stats st;
    assert_int_equal(rp_seq_prefill(s, pr, NULL, &st), RP_OK);
    assert_int_equal(rp_seq_commit(s), RP_OK);
    rp_engine_stats es;
    rp_engine_stats_get(e, &es);   /* no flush: written at commit */
    assert_true(es.written >= 2 && es.write_bytes > 0 && es.dirty_chunks == 0);
    assert_true(es.cache_chunks >= 2 && es.cache_bytes > 0);
    assert_int_equal(es.prefetched, 0);
    rp_seq_free(s);
    rp_engine_free(e);

    p = rp_engine_default_params();
    p.n_threads = 1;
    p.cache_dir = dir;
    p.cache_ram_bytes = 0;
    p.async_load = false;
    p.cache_prefetch = false;
    assert_int_equal(rp_engine_create(m, &p, &e), RP_OK);
    assert_int_equal(rp_seq_create(e, &s), RP_OK);
    assert_int_equal(rp_seq_prefill(s, pr, NULL, &st), RP_OK);
    assert_int_equal(st.reused_prefix, rp_prompt_n_tokens(pr) - 1);
    rp_engine_stats_get(e, &es);
    assert_true(es.flash_hits >= 1 && es.load_bytes > 0 && es.load_ms > 0);
    assert_int_equal(es.prefetched, 0);
    assert_int_equal(es.cache_bytes, 0);   /* no RAM tier: what is held is transient */
    rp_seq_free(s);
    rp_engine_free(e);
    rp_prompt_free(pr);
    rp_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults_and_checks),
        cmocka_unit_test(test_static_shapes),
        cmocka_unit_test(test_filler),
        cmocka_unit_test(test_switches_and_stats),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
