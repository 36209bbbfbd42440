/* test_model.c — stories260K golden outputs (F32/Q8_0/Q4_0 weights; F32/F16/Q8_0 KV) at every dispatch level, and its tokenizer. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "core/error.h"
#include "kernels/cpu.h"
#include "kernels/kernels.h"
#include "model/forward.h"
#include "model/model.h"
#include "model/session.h"

typedef struct golden_case {
    int n_prompt, n_gen;
    rp_token prompt[64];
    rp_token gen[256];
    float logits[512];   /* at the last prompt position */
    const char *text;
} golden_case;

static int load_golden(const char *rel, golden_case *cases, int max) {
    const char *path = rp_test_shared(rel);
    if (!path) return -1;
    json_error_t err;
    json_t *root = json_load_file(path, 0, &err);
    assert_non_null(root);
    json_t *arr = json_object_get(root, "cases");
    int n = 0;
    for (size_t i = 0; i < json_array_size(arr) && n < max; i++, n++) {
        json_t *c = json_array_get(arr, i);
        golden_case *g = &cases[n];
        json_t *pi = json_object_get(c, "prompt_ids"), *gi = json_object_get(c, "gen_ids");
        json_t *lg = json_object_get(c, "logits_last_prompt_pos");
        if (!lg) lg = json_object_get(c, "logits_pos0");
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

typedef struct run_result {
    float max_logit_err;
    int n_match;        /* leading generated ids equal to the golden */
    bool all_match;
} run_result;

static run_result run_case(rp_ctx *ctx, rp_type kv_type, const golden_case *g) {
    rp_session_params sp = rp_session_default_params();
    sp.n_ctx = 256;
    sp.kv_type = kv_type;
    sp.sampler.temp = 0;
    rp_session *s = NULL;
    assert_int_equal(rp_session_create(ctx, sp, &s), RP_OK);
    assert_int_equal(rp_session_feed(s, g->prompt, g->n_prompt), RP_OK);
    run_result r = {0, 0, true};
    const float *lg = rp_session_logits(s);
    for (int k = 0; k < 512; k++) {
        float e = fabsf(lg[k] - g->logits[k]);
        if (e > r.max_logit_err) r.max_logit_err = e;
    }
    for (int k = 0; k < g->n_gen; k++) {
        rp_token t = rp_session_sample(s);
        if (t != g->gen[k]) { r.all_match = false; break; }
        r.n_match++;
        if (k + 1 < g->n_gen) assert_int_equal(rp_session_feed(s, &t, 1), RP_OK);
    }
    rp_session_free(s);
    return r;
}

static void golden_file_at(const char *mp, const char *model_rel, const char *golden_rel, rp_type kv_type,
                           float logit_tol, int min_prompt_matches, bool require_bos_case, int level) {
    rp_model *m = NULL;
    rp_model_params mpar = rp_model_default_params();
    mpar.cpu_level = level;
    assert_int_equal(rp_model_load(mp, mpar, &m), RP_OK);
    print_message("  [cpu level %s]\n", rp_cpu_level_name((rp_cpu_level)level));
    golden_case *cases = calloc(8, sizeof *cases);
    int n = load_golden(golden_rel, cases, 8);
    assert_int_equal(n, 5);
    rp_ctx_params cp = rp_ctx_default_params();
    cp.n_ctx_max = 256;
    rp_ctx *ctx = NULL;
    assert_int_equal(rp_ctx_create(m, cp, &ctx), RP_OK);
    int prompt_matches = 0;
    for (int i = 0; i < n; i++) {
        run_result r = run_case(ctx, kv_type, &cases[i]);
        print_message("  %s case %d: max |logit err| %.2e, greedy %d/%d%s\n", model_rel, i, r.max_logit_err, r.n_match,
                      cases[i].n_gen, r.all_match ? " (exact)" : "");
        assert_true(r.max_logit_err <= logit_tol);
        if (i == 0 && require_bos_case) assert_true(r.all_match);
        if (i > 0 && r.all_match) prompt_matches++;
    }
    assert_true(prompt_matches >= min_prompt_matches);
    rp_ctx_free(ctx);
    rp_model_free(m);
    free(cases);
}

/* Whether level `lvl` selects any kernel the level below it does not (aarch64's SVE2 and SME levels have none of
 * their own yet: they run the I8MM kernels, and x86-64 without AMX kernels for a type likewise). */
static bool level_has_own_kernels(int lvl) {
    if (lvl == 0) return true;
    static const rp_type mm[] = {RP_TYPE_F32, RP_TYPE_F16, RP_TYPE_BF16, RP_TYPE_Q8_0, RP_TYPE_Q4_0,
                                 RP_TYPE_Q4_K, RP_TYPE_Q6_K};
    static const rp_type kv[] = {RP_TYPE_F32, RP_TYPE_F16, RP_TYPE_Q8_0};
    const rp_cpu_level a = (rp_cpu_level)lvl, b = (rp_cpu_level)(lvl - 1);
    for (size_t i = 0; i < sizeof mm / sizeof mm[0]; i++)
        if (rp_mm_kernel_select(mm[i], a) != rp_mm_kernel_select(mm[i], b)) return true;
    for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++)
        if (rp_attn_kernel_select(kv[i], a) != rp_attn_kernel_select(kv[i], b)) return true;
    return rp_ew_kernel_select(a) != rp_ew_kernel_select(b);
}

/* Runs the golden comparison at every dispatch level this machine has
 * (scalar reference, AVX2, AVX-512, AMX; NEON, DotProd, I8MM ...): every level must meet the same bar. A level
 * that selects the same kernels as the one below is the same computation and is not run again.
 * RP_TEST_LEVELS=best runs only the machine's best level (scripts/arm_test.sh, for the emulated CPU models
 * below `max`, whose lower levels the `max` run covers). */
static void golden_file(const char *model_rel, const char *golden_rel, rp_type kv_type, float logit_tol,
                        int min_prompt_matches, bool require_bos_case) {
    const char *mp = rp_test_shared(model_rel);
    RP_REQUIRE_SHARED(mp, model_rel);
    char path[4096];
    snprintf(path, sizeof path, "%s", mp);
    const int best = (int)rp_cpu_info_get()->best;
    const char *only = getenv("RP_TEST_LEVELS");
    const bool best_only = only && !strcmp(only, "best");
    for (int lvl = best_only ? best : 0; lvl <= best; lvl++) {
        if (!best_only && !level_has_own_kernels(lvl)) {
            print_message("  [cpu level %s: the kernels of %s, not run again]\n", rp_cpu_level_name((rp_cpu_level)lvl),
                          rp_cpu_level_name((rp_cpu_level)(lvl - 1)));
            continue;
        }
        golden_file_at(path, model_rel, golden_rel, kv_type, logit_tol, min_prompt_matches, require_bos_case, lvl);
    }
}

/* F32 weights, F32 KV: the float64 golden must be matched exactly (greedy)
 * and within 1e-3 absolute on logits (the golden file's hint is ~1e-4). */
static void test_golden_f32(void **state) {
    (void)state;
    golden_file("models/stories260K.gguf", "models/stories260K.golden.json", RP_TYPE_F32, 1e-3f, 4, true);
}

/* F16 KV rounds K/V to 11 significant bits: logits within 2e-2, greedy
 * still equal on every case (all margins here exceed that error). */
static void test_golden_f32_kv_f16(void **state) {
    (void)state;
    golden_file("models/stories260K.gguf", "models/stories260K.golden.json", RP_TYPE_F16, 2e-2f, 3, false);
}

/* Q8_0 / Q4_0: the golden files were computed in float64 from the
 * dequantized weights; like ggml, our kernels quantize activations to int8
 * per 32-value block, which on this 64-wide model moves logits by up to
 * ~0.25 (measured max 0.23). Tolerance 0.3 absolute; greedy text must equal
 * the golden on >= 3 of 4 prompt cases (measured 3/4 for both files, as
 * llama.cpp's 3/4 and 4/4). */
static void test_golden_q8_0(void **state) {
    (void)state;
    golden_file("models/stories260K-q8_0.gguf", "models/stories260K-q8_0.golden.json", RP_TYPE_F32, 0.3f, 3, false);
}

static void test_golden_q4_0(void **state) {
    (void)state;
    golden_file("models/stories260K-q4_0.gguf", "models/stories260K-q4_0.golden.json", RP_TYPE_F32, 0.3f, 3, false);
}

/* Q8_0 KV: stories260K has head_dim 8, so one 32-value block (one scale)
 * spans four KV heads and small heads lose precision to large ones; logits
 * stay within 0.6 and greedy text equals the golden on at least 2 of 4 prompt
 * cases (measured: 3/4 exact, the fourth diverges after 20 tokens). Real
 * models (head_dim 64/128) quantize each head in its own blocks. */
static void test_golden_q8_kv(void **state) {
    (void)state;
    golden_file("models/stories260K.gguf", "models/stories260K.golden.json", RP_TYPE_Q8_0, 0.6f, 2, false);
}

/* The prompt tokenizes to the golden prompt ids. */
static void test_golden_tokenizer(void **state) {
    (void)state;
    const char *mp = rp_test_shared("models/stories260K.gguf");
    RP_REQUIRE_SHARED(mp, "models/stories260K.gguf");
    const char *gp = rp_test_shared("models/stories260K.golden.json");
    RP_REQUIRE_SHARED(gp, "models/stories260K.golden.json");
    rp_model *m = NULL;
    rp_model_params p = rp_model_default_params();
    p.vocab_only = true;
    assert_int_equal(rp_model_load(mp, p, &m), RP_OK);
    json_t *root = json_load_file(gp, 0, NULL);
    assert_non_null(root);
    json_t *arr = json_object_get(root, "cases");
    for (size_t i = 0; i < json_array_size(arr); i++) {
        json_t *c = json_array_get(arr, i);
        const char *prompt = json_string_value(json_object_get(c, "prompt"));
        json_t *pi = json_object_get(c, "prompt_ids");
        rp_token ids[128];
        size_t n = 0;
        rp_tokenize_opts o = {.add_bos = true, .parse_special = false};
        assert_int_equal(rp_tokenizer_encode(m->tok, prompt, strlen(prompt), o, ids, 128, &n), RP_OK);
        assert_int_equal(n, json_array_size(pi));
        for (size_t k = 0; k < n; k++) assert_int_equal(ids[k], json_integer_value(json_array_get(pi, k)));
        /* the golden text decodes from the golden ids */
        json_t *gi = json_object_get(c, "gen_ids");
        const char *text = json_string_value(json_object_get(c, "gen_text"));
        rp_token gen[256];
        size_t ng = json_array_size(gi);
        for (size_t k = 0; k < ng; k++) gen[k] = (rp_token)json_integer_value(json_array_get(gi, k));
        char buf[4096];
        size_t w = 0;
        /* SentencePiece drops the dummy-prefix space only at the start of a text:
         * the BOS-only case's text starts with its first generated piece */
        bool at_start = prompt[0] == '\0';
        assert_int_equal(rp_tokenizer_decode(m->tok, gen, ng, false, at_start, buf, sizeof buf, &w), RP_OK);
        if (strcmp(buf, text) != 0) print_message("decode mismatch:\n got  '%s'\n want '%s'\n", buf, text);
        assert_string_equal(buf, text);
    }
    json_decref(root);
    rp_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_golden_f32),
        cmocka_unit_test(test_golden_f32_kv_f16),
        cmocka_unit_test(test_golden_q8_kv),
        cmocka_unit_test(test_golden_q8_0),
        cmocka_unit_test(test_golden_q4_0),
        cmocka_unit_test(test_golden_tokenizer),
    };
    return rp_test_main(tests, NULL, NULL);
}
