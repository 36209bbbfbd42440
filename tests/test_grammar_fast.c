/* test_grammar_fast.c — the grammar's fast paths against the reference on the real Llama 3 and Qwen3
 * vocabularies (synthetic models carrying them): masks from the shared cache equal a fresh trie walk (cache
 * off) on random walks through several grammars (a nested JSON schema, any JSON, GBNF with repetition,
 * alternation and recursion, the server's forced tool-call grammars); rp_grammar_allows agrees with the mask
 * token by token; rp_grammar_accepts_prefix cuts at the first rejected token; greedy output is the same token
 * for token with the cache, the greedy fast path and both off (rp_seq_generate), and with speculative drafts
 * (n-gram and self drafters) and without on the scheduler; sampled speculative output stays in the grammar. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "core/error.h"
#include "model/model.h"
#include "model/synth.h"
#include "reprise.h"
#include "sched/sched.h"
#include "server/prompt.h"

#include "grammar_schema.h"   /* bench/: the schema bench grammar times */

static const char *GBNF_REP =
    "root ::= item (\",\" ws item){0,5} ws \".\"\n"
    "item ::= \"alpha\" | \"beta\" [0-9]{1,3} | \"\\\"\" [^\"\\\\]* \"\\\"\" | \"(\" root \")\" | [a-z]+ \"!\"\n"
    "ws ::= [ \\t\\n]*\n";

static const char *TOOLS =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\","
    "\"properties\":{\"city\":{\"type\":\"string\"},\"unit\":{\"enum\":[\"c\",\"f\"]}},\"required\":[\"city\"]}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"search\",\"parameters\":{\"type\":\"object\","
    "\"properties\":{\"query\":{\"type\":\"string\"},\"limit\":{\"type\":\"integer\"},"
    "\"filters\":{\"type\":\"array\",\"items\":{\"type\":\"string\"}}},\"required\":[\"query\",\"limit\"]}}}]";

static uint64_t rng_next(uint64_t *x) {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

/* A synthetic tiny model with the vocabulary (and template) of the GGUF at rel under the shared dir, or NULL
 * (the test skips). */
static rp_model *open_vocab_model(const char *rel, rp_arch arch) {
    const char *vp = rp_test_shared(rel);
    if (!vp) return NULL;
    char path[512];
    snprintf(path, sizeof path, "%s/gfast-%s.gguf", rp_test_tmpdir(), rp_arch_name(arch));
    rp_synth_params sp = rp_synth_default_params();
    sp.arch = arch;
    sp.type = "q8_0";
    sp.vocab_path = vp;
    sp.peak = 3;
    assert_int_equal(rp_synth_write(&sp, path), RP_OK);
    rp_model *m = NULL;
    assert_int_equal(rp_model_load(path, rp_model_default_params(), &m), RP_OK);
    remove(path);
    return m;
}

/* Which tokens mask leaves allowed (a finite logit). */
static void mask_of(rp_grammar_state *s, float *lg, int32_t n, uint8_t *allowed) {
    for (int32_t t = 0; t < n; t++) lg[t] = 0;
    assert_int_equal(rp_grammar_mask(s, lg, n), RP_OK);
    for (int32_t t = 0; t < n; t++) allowed[t] = lg[t] == 0;
}

#define MAX_STEPS 28

/* Random walks through g: at every state the cached mask (vf) equals the reference walk's (vr, no cache) and
 * rp_grammar_allows agrees with it; the walk's tokens are accepted as a prefix, and a rejected token cuts it. */
static void check_walks(rp_model *m, rp_grammar_vocab *vr, rp_grammar_vocab *vf, const rp_grammar *g, uint64_t seed,
                        int walks) {
    const int32_t n = rp_model_describe(m).n_vocab;
    float *lg = malloc(sizeof *lg * (size_t)n);
    uint8_t *ref = malloc((size_t)n), *fast = malloc((size_t)n);
    int32_t *allowed_ids = malloc(sizeof *allowed_ids * (size_t)n);
    assert_true(lg && ref && fast && allowed_ids);
    rp_grammar_state *sr = NULL, *sf = NULL, *sp = NULL;
    assert_int_equal(rp_grammar_state_new(g, vr, &sr), RP_OK);
    assert_int_equal(rp_grammar_state_new(g, vf, &sf), RP_OK);
    assert_int_equal(rp_grammar_state_new(g, vf, &sp), RP_OK);
    uint64_t x = seed;
    int states = 0;
    for (int w = 0; w < walks; w++) {
        assert_int_equal(rp_grammar_state_reset(sr), RP_OK);
        assert_int_equal(rp_grammar_state_reset(sf), RP_OK);
        rp_token path[MAX_STEPS], bad[MAX_STEPS];
        int np = 0;
        for (int step = 0; step < MAX_STEPS; step++) {
            mask_of(sr, lg, n, ref);
            mask_of(sf, lg, n, fast);
            states++;
            int32_t na = 0, first_diff = -1;
            for (int32_t t = 0; t < n; t++) {
                if (ref[t] != fast[t] && first_diff < 0) first_diff = t;
                if (ref[t] && !rp_token_is_eog(m, t)) allowed_ids[na++] = t;
            }
            if (first_diff >= 0) fail_msg("walk %d step %d: cached mask differs at token %d", w, step, first_diff);
            /* allows: every allowed token (up to 3000 of them) and 1500 random ones */
            for (int32_t i = 0; i < na && i < 3000; i++) {
                const rp_token t = allowed_ids[na <= 3000 ? i : (int32_t)(rng_next(&x) % (uint64_t)na)];
                if (!rp_grammar_allows(sf, t)) fail_msg("walk %d step %d: allows(%d) false, mask true", w, step, t);
            }
            bad[step] = -1;
            for (int i = 0; i < 1500; i++) {
                const rp_token t = (rp_token)(rng_next(&x) % (uint64_t)n);
                if (rp_grammar_allows(sf, t) != (ref[t] != 0))
                    fail_msg("walk %d step %d: allows(%d) disagrees with the mask (%d)", w, step, t, ref[t]);
                if (!ref[t] && bad[step] < 0 && !rp_token_is_eog(m, t)) bad[step] = t;
            }
            if (na == 0 || (rp_grammar_can_end(sr) && rng_next(&x) % 8 == 0)) break;
            const rp_token t = allowed_ids[rng_next(&x) % (uint64_t)na];
            assert_int_equal(rp_grammar_accept_token(sr, t), RP_OK);
            assert_int_equal(rp_grammar_accept_token(sf, t), RP_OK);
            path[np++] = t;
        }
        /* the walk's tokens as a draft: all accepted; one refused token in the middle cuts it there */
        assert_int_equal(rp_grammar_state_reset(sp), RP_OK);
        assert_int_equal(rp_grammar_accepts_prefix(sp, path, np), np);
        if (np > 1) {
            const int k = (int)(rng_next(&x) % (uint64_t)np);
            if (bad[k] >= 0) {
                rp_token save = path[k];
                path[k] = bad[k];
                assert_int_equal(rp_grammar_accepts_prefix(sp, path, np), k);
                path[k] = save;
            }
        }
        assert_int_equal(rp_grammar_accepts_prefix(sp, path, np), np);   /* and sp did not move */
    }
    print_message("  %d states compared\n", states);
    rp_grammar_state_free(sp);
    rp_grammar_state_free(sf);
    rp_grammar_state_free(sr);
    free(allowed_ids);
    free(fast);
    free(ref);
    free(lg);
}

static void check_vocab_masks(const char *rel, rp_arch arch, const char *args_key) {
    rp_model *m = open_vocab_model(rel, arch);
    RP_REQUIRE_SHARED(m ? "" : NULL, rel);
    rp_grammar_vocab *vr = NULL, *vf = NULL;
    assert_int_equal(rp_grammar_vocab_new(m, &vr), RP_OK);
    assert_int_equal(rp_grammar_vocab_new(m, &vf), RP_OK);
    rp_grammar_vocab_set_cache_bytes(vr, 0);   /* the reference: every mask a trie walk */
    rp_grammar_vocab_set_cache_bytes(vf, 64u << 20);
    char *tool_req = NULL, *tool_named = NULL;
    assert_int_equal(rp_srv_tool_grammar(TOOLS, NULL, args_key, false, &tool_req), RP_OK);
    assert_int_equal(rp_srv_tool_grammar(TOOLS, "search", args_key, false, &tool_named), RP_OK);
    struct { const char *what; const char *schema, *gbnf; } gs[] = {
        {"nested schema", RP_NESTED_SCHEMA, NULL}, {"any JSON", "{}", NULL}, {"GBNF", NULL, GBNF_REP},
        {"tool call (required)", NULL, tool_req}, {"tool call (named)", NULL, tool_named},
    };
    for (size_t i = 0; i < sizeof gs / sizeof gs[0]; i++) {
        rp_grammar *g = NULL;
        if (gs[i].schema) assert_int_equal(rp_grammar_from_json_schema(gs[i].schema, &g), RP_OK);
        else assert_int_equal(rp_grammar_parse(gs[i].gbnf, NULL, &g), RP_OK);
        print_message("%s: %s\n", rel, gs[i].what);
        check_walks(m, vr, vf, g, 0x9E3779B97F4A7C15ull ^ (uint64_t)(i * 7919 + 1), 3);
        rp_grammar_free(g);
    }
    rp_grammar_stats sr, sf;
    rp_grammar_vocab_stats(vr, &sr);
    rp_grammar_vocab_stats(vf, &sf);
    print_message("reference: %llu built, %llu hits; cached: %llu built, %llu hits, %llu masks held\n",
                  (unsigned long long)sr.masks_built, (unsigned long long)sr.cache_hits,
                  (unsigned long long)sf.masks_built, (unsigned long long)sf.cache_hits,
                  (unsigned long long)sf.cache_entries);
    assert_int_equal(sr.cache_hits, 0);                              /* the reference really walked every time */
    assert_int_equal(sr.masks_built, sf.masks_built + sf.cache_hits); /* as many masks asked of each */
    assert_true(sf.cache_hits > 0);                                  /* revisited states came from the cache */
    assert_true(sf.checks > 0 && sf.checks_rejected > 0);
    free(tool_req);
    free(tool_named);
    rp_grammar_vocab_free(vr);
    rp_grammar_vocab_free(vf);
    rp_model_free(m);
}

static void test_masks_llama3(void **state) {
    (void)state;
    check_vocab_masks("models/vocab/llama3-bpe.vocab.gguf", RP_ARCH_LLAMA, "parameters");
}

static void test_masks_qwen3(void **state) {
    (void)state;
    check_vocab_masks("models/vocab/qwen3-bpe.vocab.gguf", RP_ARCH_QWEN3, "arguments");
}

/* A hook the engine does not recognise as the grammar's: every token masked. */
static void plain_hook(void *user, const rp_token *hist, int32_t n_hist, float *logits, int32_t n_vocab) {
    rp_grammar_on_logits(user, hist, n_hist, logits, n_vocab);
}

/* Greedy rp_seq_generate under the nested schema: the same tokens with the fast path and cache, with the
 * cache only, and with neither; the grammar accepts them. */
static void test_greedy_same(void **state) {
    (void)state;
    rp_model *m = open_vocab_model("models/vocab/llama3-bpe.vocab.gguf", RP_ARCH_LLAMA);
    RP_REQUIRE_SHARED(m ? "" : NULL, "models/vocab/llama3-bpe.vocab.gguf");
    rp_grammar *g = NULL;
    assert_int_equal(rp_grammar_from_json_schema(RP_NESTED_SCHEMA, &g), RP_OK);
    rp_engine_params ep = rp_engine_default_params();
    ep.n_threads = 1;
    ep.reuse = RP_REUSE_NONE;
    rp_engine *e = NULL;
    assert_int_equal(rp_engine_create(m, &ep, &e), RP_OK);
    rp_seq *s = NULL;
    assert_int_equal(rp_seq_create(e, &s), RP_OK);
    rp_prompt *p = NULL;
    assert_int_equal(rp_prompt_create(&p), RP_OK);
    const char *text = "Extract the order as JSON:";
    assert_int_equal(rp_prompt_add_text(p, m, text, strlen(text)), RP_OK);
    const int32_t np = rp_prompt_n_tokens(p);
    enum { N = 80 };
    rp_token out[3][N + 64];
    int32_t nout[3];
    uint64_t checks_fast = 0;
    for (int mode = 0; mode < 3; mode++) {   /* 0: fast path + cache, 1: cache only, 2: neither (reference) */
        rp_grammar_vocab *v = NULL;
        assert_int_equal(rp_grammar_vocab_new(m, &v), RP_OK);
        if (mode == 2) rp_grammar_vocab_set_cache_bytes(v, 0);
        rp_grammar_state *gs = NULL;
        assert_int_equal(rp_grammar_state_new(g, v, &gs), RP_OK);
        rp_gen_opts o = rp_gen_default_opts();
        o.sampling.temp = 0;
        o.max_tokens = N;
        o.on_logits = mode == 0 ? rp_grammar_on_logits : plain_hook;
        o.logits_user = gs;
        rp_gen_stats st;
        assert_int_equal(rp_seq_prefill(s, p, &o, &st), RP_OK);
        assert_int_equal(rp_seq_generate(s, &o, NULL, 0, NULL, &st), RP_OK);
        const int32_t na = rp_seq_n_past(s);
        nout[mode] = na - np;
        assert_true(nout[mode] > 0 && nout[mode] <= N + 1);
        memcpy(out[mode], rp_seq_tokens(s) + np, sizeof(rp_token) * (size_t)nout[mode]);
        rp_grammar_stats gst;
        rp_grammar_vocab_stats(v, &gst);
        print_message("mode %d: %d tokens, %llu masks built, %llu hits, %llu checks (%llu refused)\n", mode,
                      (int)nout[mode], (unsigned long long)gst.masks_built, (unsigned long long)gst.cache_hits,
                      (unsigned long long)gst.checks, (unsigned long long)gst.checks_rejected);
        if (mode == 0) checks_fast = gst.checks;
        if (mode == 2) assert_int_equal(gst.cache_hits, 0);
        /* every token in the grammar (an end-of-generation one only where it can end) */
        assert_int_equal(rp_grammar_state_reset(gs), RP_OK);
        for (int32_t i = 0; i < nout[mode]; i++) assert_int_equal(rp_grammar_accept_token(gs, out[mode][i]), RP_OK);
        rp_grammar_state_free(gs);
        rp_grammar_vocab_free(v);
    }
    assert_true(checks_fast > 0);   /* the fast path ran */
    for (int mode = 1; mode < 3; mode++) {
        assert_int_equal(nout[mode], nout[0]);
        assert_memory_equal(out[mode], out[0], sizeof(rp_token) * (size_t)nout[0]);
    }
    rp_prompt_free(p);
    rp_seq_free(s);
    rp_engine_free(e);
    rp_grammar_free(g);
    rp_model_free(m);
}

/* The scheduler under a grammar: greedy output with speculative drafts (n-gram, self) equals Batch-AR's token
 * for token, drafts are verified (some accepted); sampled speculative output stays in the grammar. */
typedef struct run_out {
    rp_token toks[2][160];
    int32_t n[2];
    uint64_t drafted, accepted;
} run_out;

static void sched_run(rp_model *m, rp_grammar_vocab *v, rp_grammar *const *gr, rp_sched_policy pol,
                      rp_drafter_kind dr, float temp, const rp_token *prompt, int32_t np, int32_t max_tokens,
                      run_out *r) {
    rp_sched_params p = rp_sched_default_params();
    p.max_sessions = 2;
    p.n_ctx = 256;
    p.n_batch = 64;
    p.kv_type = RP_TYPE_F32;
    p.n_threads = 1;
    p.policy = pol;
    p.drafter = pol == RP_POLICY_BATCH_AR ? RP_DRAFTER_NONE : dr;
    p.self_layers = 1;
    p.hal.fixed_len = 4;
    rp_sched *s = NULL;
    assert_int_equal(rp_sched_create(m, NULL, p, &s), RP_OK);
    rp_grammar_state *gs[2];
    rp_sched_id id[2];
    for (int i = 0; i < 2; i++) {
        assert_int_equal(rp_grammar_state_new(gr[i], v, &gs[i]), RP_OK);
        assert_int_equal(rp_sched_session_create(s, &id[i]), RP_OK);
        rp_gen_params g = rp_gen_default_params();
        g.sampler.temp = temp;
        g.sampler.seed = 1234 + (uint64_t)i;
        g.max_tokens = max_tokens;
        g.suspend_on_tool_call = false;
        g.on_logits = rp_grammar_on_logits;
        g.logits_user = gs[i];
        assert_int_equal(rp_sched_submit(s, id[i], prompt, np, &g), RP_OK);
    }
    for (int guard = 0; guard < 2000; guard++) {
        rp_sched_step_info info;
        assert_int_equal(rp_sched_step(s, &info), RP_OK);
        if (info.idle) break;
    }
    r->drafted = r->accepted = 0;
    for (int i = 0; i < 2; i++) {
        rp_sched_session_info si;
        assert_int_equal(rp_sched_session_info_get(s, id[i], &si), RP_OK);
        assert_int_equal(si.state, RP_SESS_IDLE);
        r->drafted += si.drafted;
        r->accepted += si.accepted;
        assert_int_equal(rp_sched_session_tokens(s, id[i], np, r->toks[i], 160, &r->n[i]), RP_OK);
        /* in the grammar, token by token */
        rp_grammar_state *chk = NULL;
        assert_int_equal(rp_grammar_state_new(gr[i], v, &chk), RP_OK);
        for (int32_t k = 0; k < r->n[i]; k++)
            if (rp_grammar_accept_token(chk, r->toks[i][k]) != RP_OK)
                fail_msg("session %d token %d (%d) is outside the grammar: %s", i, k, r->toks[i][k], rp_last_error());
        rp_grammar_state_free(chk);
        rp_grammar_state_free(gs[i]);
    }
    rp_sched_free(s);
}

static void test_sched_speculative(void **state) {
    (void)state;
    rp_model *m = open_vocab_model("models/vocab/llama3-bpe.vocab.gguf", RP_ARCH_LLAMA);
    RP_REQUIRE_SHARED(m ? "" : NULL, "models/vocab/llama3-bpe.vocab.gguf");
    rp_grammar_vocab *v = NULL;
    assert_int_equal(rp_grammar_vocab_new(m, &v), RP_OK);
    rp_grammar *gr[2] = {NULL, NULL};
    /* a repetitive grammar (n-gram drafts find their continuations) and the nested schema */
    assert_int_equal(rp_grammar_parse("root ::= (\"The cat sat on the mat. \" | \"A dog ran. \"){12}\n", NULL, &gr[0]),
                     RP_OK);
    assert_int_equal(rp_grammar_from_json_schema(RP_NESTED_SCHEMA, &gr[1]), RP_OK);
    rp_token prompt[64];
    int32_t np = 0;
    const char *text = "Write it out:";
    assert_int_equal(rp_tokenize(m, text, strlen(text), true, false, prompt, 64, &np), RP_OK);
    run_out *ref = calloc(1, sizeof *ref), *spec = calloc(1, sizeof *spec);
    assert_true(ref && spec);
    sched_run(m, v, gr, RP_POLICY_BATCH_AR, RP_DRAFTER_NONE, 0, prompt, np, 96, ref);
    assert_int_equal(ref->drafted, 0);
    const rp_drafter_kind drs[2] = {RP_DRAFTER_NGRAM, RP_DRAFTER_SELF};
    for (int d = 0; d < 2; d++) {
        sched_run(m, v, gr, RP_POLICY_SEQ_SD, drs[d], 0, prompt, np, 96, spec);
        print_message("drafter %d: %llu drafted, %llu accepted\n", (int)drs[d], (unsigned long long)spec->drafted,
                      (unsigned long long)spec->accepted);
        assert_true(spec->drafted > 0);
        if (drs[d] == RP_DRAFTER_NGRAM) assert_true(spec->accepted > 0);
        for (int i = 0; i < 2; i++) {
            assert_int_equal(spec->n[i], ref->n[i]);
            assert_memory_equal(spec->toks[i], ref->toks[i], sizeof(rp_token) * (size_t)ref->n[i]);
        }
    }
    /* sampled, speculated: still in the grammar (checked in sched_run) */
    sched_run(m, v, gr, RP_POLICY_SEQ_SD, RP_DRAFTER_NGRAM, 0.8f, prompt, np, 96, spec);
    assert_true(spec->drafted > 0);
    free(ref);
    free(spec);
    rp_grammar_free(gr[0]);
    rp_grammar_free(gr[1]);
    rp_grammar_vocab_free(v);
    rp_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_masks_llama3),
        cmocka_unit_test(test_masks_qwen3),
        cmocka_unit_test(test_greedy_same),
        cmocka_unit_test(test_sched_speculative),
    };
    return rp_test_main(tests, NULL, NULL);
}
