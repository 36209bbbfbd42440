/* test_grammar.c — GBNF parser errors, the matcher on strings, JSON Schema -> GBNF per keyword, the token mask
 * over stories260K's vocabulary, and greedy generation under a schema checked with jansson. */
#include <string.h>
#include <stdlib.h>
#include <stdio.h>
#include <time.h>

#include <jansson.h>

#include "reprise.h"
#include "testutil.h"

/* 1 when the whole of str is a sentence of the grammar, 0 when rejected or incomplete, -1 on a parse error. */
static int gmatch(const char *gbnf, const char *str) {
    rp_grammar *g = NULL;
    if (rp_grammar_parse(gbnf, NULL, &g) != RP_OK) return -1;
    rp_grammar_state *s = NULL;
    assert_int_equal(rp_grammar_state_new(g, NULL, &s), RP_OK);
    int ok = rp_grammar_accept_bytes(s, str, strlen(str)) == RP_OK && rp_grammar_can_end(s);
    rp_grammar_state_free(s);
    rp_grammar_free(g);
    return ok;
}

static int smatch(const char *schema, const char *str) {
    rp_grammar *g = NULL;
    rp_status st = rp_grammar_from_json_schema(schema, &g);
    if (st != RP_OK) { print_message("schema error: %s\n", rp_last_error()); return -1; }
    rp_grammar_state *s = NULL;
    assert_int_equal(rp_grammar_state_new(g, NULL, &s), RP_OK);
    int ok = rp_grammar_accept_bytes(s, str, strlen(str)) == RP_OK && rp_grammar_can_end(s);
    rp_grammar_state_free(s);
    rp_grammar_free(g);
    return ok;
}

static void expect_error(const char *gbnf, const char *where) {
    rp_grammar *g = NULL;
    assert_int_equal(rp_grammar_parse(gbnf, NULL, &g), RP_ERR_FORMAT);
    assert_null(g);
    const char *msg = rp_last_error();
    if (!strstr(msg, where)) fail_msg("error '%s' lacks '%s'", msg, where);
}

static void test_parse_errors(void **state) {
    (void)state;
    expect_error("root ::= foo\n", "1:10: undefined rule 'foo'");
    expect_error("root ::= \"a\"\nother \"b\"\n", "2:7: expected '::='");
    expect_error("root ::= \"abc\n", "1:10: unterminated literal");
    expect_error("root ::= [ab", "unterminated character class");
    expect_error("root ::= [z-a]\n", "range end below its start");
    expect_error("root ::= \"a\"{3,1}\n", "n < m");
    expect_error("root ::= * \"a\"\n", "1:10: '*' without a preceding item");
    expect_error("root ::= (\"a\" \n", "expected ')'");
    expect_error("root ::= \"\\q\"\n", "unknown escape");
    expect_error("root ::= \"a\"\nroot ::= \"b\"\n", "2:1: rule 'root' defined twice");
    expect_error("x ::= \"a\"\n", "no rule named 'root'");
    rp_grammar *g = NULL;
    assert_int_equal(rp_grammar_parse("start ::= \"a\"\n", "start", &g), RP_OK);
    rp_grammar_free(g);
}

static void test_matcher(void **state) {
    (void)state;
    const char *g1 = "root ::= \"ab\" | \"cd\" x\nx ::= [0-9]+ # digits\n";
    assert_int_equal(gmatch(g1, "ab"), 1);
    assert_int_equal(gmatch(g1, "cd123"), 1);
    assert_int_equal(gmatch(g1, "cd"), 0);     /* incomplete: + needs one */
    assert_int_equal(gmatch(g1, "abc"), 0);
    assert_int_equal(gmatch(g1, "cdx"), 0);
    const char *g2 = "root ::= [^a-c\\n]* \".\"\n";
    assert_int_equal(gmatch(g2, "xyz."), 1);
    assert_int_equal(gmatch(g2, "xaz."), 0);
    assert_int_equal(gmatch(g2, "."), 1);
    const char *g3 = "root ::= (\"ab\"){2,3} \"c\"?\n";
    assert_int_equal(gmatch(g3, "ab"), 0);
    assert_int_equal(gmatch(g3, "abab"), 1);
    assert_int_equal(gmatch(g3, "ababab"), 1);
    assert_int_equal(gmatch(g3, "abababab"), 0);
    assert_int_equal(gmatch(g3, "ababc"), 1);
    const char *g4 = "root ::= [a]{2} [b]{1,} [c]{0,2}\n";
    assert_int_equal(gmatch(g4, "aab"), 1);
    assert_int_equal(gmatch(g4, "aabbbcc"), 1);
    assert_int_equal(gmatch(g4, "aabccc"), 0);
    assert_int_equal(gmatch(g4, "ab"), 0);
    /* escapes, UTF-8 code points, '.' */
    const char *g5 = "root ::= \"\\x41\\u00e9\\t\" [\\u4e00-\\u9fff] .\n";
    assert_int_equal(gmatch(g5, "A\xc3\xa9\t\xe4\xb8\xad!"), 1);
    assert_int_equal(gmatch(g5, "A\xc3\xa9\tZ!"), 0);
    /* recursion (nested parentheses), multi-line alternatives inside a group */
    const char *g6 = "root ::= p\np ::= ( \"(\" p \")\"\n | \"\" ) p?\n";
    assert_int_equal(gmatch(g6, "(()())"), 1);
    assert_int_equal(gmatch(g6, "(()"), 0);
    /* overlong UTF-8 of '{' is no '{' */
    assert_int_equal(gmatch("root ::= [{]\n", "\xf0\x80\x81\xbb"), 0);
    assert_int_equal(gmatch("root ::= [{]\n", "{"), 1);
    /* a left-recursive rule does not hang */
    assert_int_equal(gmatch("root ::= root \"a\" | \"b\"\n", "c"), 0);
}

static void test_schema(void **state) {
    (void)state;
    /* json_object mode: any JSON value */
    assert_int_equal(smatch(NULL, "{\"a\": [1, 2.5e3, true, null, \"x\\n\"]}"), 1);
    assert_int_equal(smatch("{}", "{\"a\": }"), 0);
    /* types and type lists */
    assert_int_equal(smatch("{\"type\":\"integer\"}", "-42"), 1);
    assert_int_equal(smatch("{\"type\":\"integer\"}", "4.2"), 0);
    assert_int_equal(smatch("{\"type\":\"number\"}", "4.25e-3"), 1);
    assert_int_equal(smatch("{\"type\":\"boolean\"}", "false"), 1);
    assert_int_equal(smatch("{\"type\":\"null\"}", "null"), 1);
    assert_int_equal(smatch("{\"type\":[\"string\",\"null\"]}", "null"), 1);
    assert_int_equal(smatch("{\"type\":[\"string\",\"null\"]}", "\"s\""), 1);
    assert_int_equal(smatch("{\"type\":[\"string\",\"null\"]}", "1"), 0);
    /* objects: required, optional (order kept, may be left out), additionalProperties */
    const char *o = "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"age\":{\"type\":\"integer\"},"
                    "\"tag\":{\"type\":\"string\"}},\"required\":[\"name\"],\"additionalProperties\":false}";
    assert_int_equal(smatch(o, "{\"name\": \"a\"}"), 1);
    assert_int_equal(smatch(o, "{\"name\": \"a\", \"age\": 3}"), 1);
    assert_int_equal(smatch(o, "{\"name\": \"a\", \"tag\": \"t\"}"), 1);
    assert_int_equal(smatch(o, "{\"name\": \"a\", \"age\": 3, \"tag\": \"t\"}"), 1);
    assert_int_equal(smatch(o, "{\"age\": 3}"), 0);
    assert_int_equal(smatch(o, "{\"name\": \"a\", \"x\": 1}"), 0);
    assert_int_equal(smatch(o, "{\"name\": 1}"), 0);
    const char *o2 = "{\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"integer\"}}}";
    assert_int_equal(smatch(o2, "{}"), 1);
    assert_int_equal(smatch(o2, "{\"b\": 1}"), 1);
    assert_int_equal(smatch(o2, "{\"a\": 1, \"b\": 2}"), 1);
    assert_int_equal(smatch(o2, "{\"b\": 1, \"a\": 2}"), 0);
    const char *o3 = "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"required\":[\"a\"],"
                     "\"additionalProperties\":{\"type\":\"boolean\"}}";
    assert_int_equal(smatch(o3, "{\"a\": 1, \"z\": true}"), 1);
    assert_int_equal(smatch(o3, "{\"a\": 1, \"z\": 3}"), 0);
    /* enum, const */
    assert_int_equal(smatch("{\"enum\":[\"red\",\"green\",3]}", "\"green\""), 1);
    assert_int_equal(smatch("{\"enum\":[\"red\",\"green\",3]}", "3"), 1);
    assert_int_equal(smatch("{\"enum\":[\"red\",\"green\",3]}", "\"blue\""), 0);
    assert_int_equal(smatch("{\"const\":{\"k\":1}}", "{\"k\":1}"), 1);
    /* arrays */
    const char *a = "{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":1,\"maxItems\":3}";
    assert_int_equal(smatch(a, "[]"), 0);
    assert_int_equal(smatch(a, "[1]"), 1);
    assert_int_equal(smatch(a, "[1, 2, 3]"), 1);
    assert_int_equal(smatch(a, "[1, 2, 3, 4]"), 0);
    assert_int_equal(smatch("{\"type\":\"array\"}", "[]"), 1);
    assert_int_equal(smatch("{\"type\":\"array\",\"items\":{\"type\":\"string\"}}", "[\"a\", \"b\"]"), 1);
    /* anyOf / oneOf, $ref to $defs and definitions (recursive) */
    assert_int_equal(smatch("{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"boolean\"}]}", "true"), 1);
    assert_int_equal(smatch("{\"oneOf\":[{\"type\":\"integer\"},{\"type\":\"boolean\"}]}", "\"x\""), 0);
    const char *r = "{\"$ref\":\"#/$defs/node\",\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{"
                    "\"v\":{\"type\":\"integer\"},\"next\":{\"anyOf\":[{\"$ref\":\"#/$defs/node\"},{\"type\":\"null\"}]}},"
                    "\"required\":[\"v\",\"next\"]}}}";
    assert_int_equal(smatch(r, "{\"v\": 1, \"next\": {\"v\": 2, \"next\": null}}"), 1);
    assert_int_equal(smatch(r, "{\"v\": 1}"), 0);
    assert_int_equal(smatch("{\"definitions\":{\"d\":{\"type\":\"boolean\"}},\"$ref\":\"#/definitions/d\"}", "true"), 1);
    /* strings: lengths, pattern, formats */
    const char *sl = "{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}";
    assert_int_equal(smatch(sl, "\"a\""), 0);
    assert_int_equal(smatch(sl, "\"ab\""), 1);
    assert_int_equal(smatch(sl, "\"abcd\""), 0);
    const char *pt = "{\"type\":\"string\",\"pattern\":\"^[A-Z]{2}-\\\\d+(x|yz)?$\"}";
    assert_int_equal(smatch(pt, "\"AB-12\""), 1);
    assert_int_equal(smatch(pt, "\"AB-12yz\""), 1);
    assert_int_equal(smatch(pt, "\"Ab-12\""), 0);
    assert_int_equal(smatch("{\"type\":\"string\",\"format\":\"date\"}", "\"2024-02-29\""), 1);
    assert_int_equal(smatch("{\"type\":\"string\",\"format\":\"date\"}", "\"2024-13-01\""), 0);
    assert_int_equal(smatch("{\"type\":\"string\",\"format\":\"time\"}", "\"23:59:01Z\""), 1);
    assert_int_equal(smatch("{\"type\":\"string\",\"format\":\"date-time\"}", "\"2024-01-02T03:04:05.678+01:00\""), 1);
    assert_int_equal(smatch("{\"type\":\"string\",\"format\":\"uuid\"}", "\"123e4567-e89b-12d3-a456-426614174000\""), 1);
    assert_int_equal(smatch("{\"type\":\"string\",\"format\":\"uuid\"}", "\"123e4567\""), 0);
    /* errors name the keyword */
    rp_grammar *g = NULL;
    assert_int_equal(rp_grammar_from_json_schema("{\"$ref\":\"#/$defs/missing\"}", &g), RP_ERR_UNSUPPORTED);
    assert_non_null(strstr(rp_last_error(), "unresolved $ref"));
    assert_int_equal(rp_grammar_from_json_schema("{\"type\":\"color\"}", &g), RP_ERR_UNSUPPORTED);
    assert_int_equal(rp_grammar_from_json_schema("{\"type\":", &g), RP_ERR_FORMAT);
}

static void dbg_hook(void *user, const rp_token *hist, int32_t n_hist, float *logits, int32_t n_vocab) {
    if (getenv("GDBG") && n_hist > 0) printf("hist last %d\n", hist[n_hist - 1]);
    rp_grammar_on_logits(user, hist, n_hist, logits, n_vocab);
}

static const char *SCHEMA =
    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":12},"
    "\"age\":{\"type\":\"integer\"},\"mood\":{\"enum\":[\"happy\",\"sad\"]},\"ok\":{\"type\":\"boolean\"},"
    "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\",\"maxLength\":8},\"maxItems\":2}},"
    "\"required\":[\"name\",\"age\",\"mood\",\"ok\",\"tags\"],\"additionalProperties\":false}";

/* Greedy generation from stories260K under SCHEMA: the output parses and has the schema's keys and types. */
static void test_generate_schema(void **state) {
    (void)state;
    RP_OPEN_STORIES(m);
    if (getenv("GDBG")) for (int t = 0; t < 300; t++) { char b[64]; int n = rp_token_to_piece(m, t, false, b, 64);
        if (t < 5 || (t > 120 && t <= 130) || (t >= 259 && t < 265)) { printf("%d: %d [", t, n);
            for (int i = 0; i < n && i < 64; i++) printf("%02x ", (unsigned char)b[i]);
            printf("]\n"); } }
    rp_grammar_vocab *v = NULL;
    assert_int_equal(rp_grammar_vocab_new(m, &v), RP_OK);
    rp_grammar *g = NULL;
    assert_int_equal(rp_grammar_from_json_schema(SCHEMA, &g), RP_OK);
    rp_grammar_state *gs = NULL;
    assert_int_equal(rp_grammar_state_new(g, v, &gs), RP_OK);
    rp_engine_params ep = rp_engine_default_params();
    ep.n_threads = 1;
    rp_engine *e = NULL;
    assert_int_equal(rp_engine_create(m, &ep, &e), RP_OK);
    rp_seq *s = NULL;
    assert_int_equal(rp_seq_create(e, &s), RP_OK);
    const char *prompts[] = {"Once upon a time", "Lily said", "{"};
    double t_con = 0, t_free = 0;
    int n_con = 0, n_free = 0;
    for (int k = 0; k < 3; k++) {
        rp_prompt *p = NULL;
        assert_int_equal(rp_prompt_create(&p), RP_OK);
        assert_int_equal(rp_prompt_add_text(p, m, prompts[k], strlen(prompts[k])), RP_OK);
        rp_gen_opts o = rp_gen_default_opts();
        o.sampling.temp = 0;
        o.max_tokens = 400;
        o.on_logits = dbg_hook;
        o.logits_user = gs;
        assert_int_equal(rp_grammar_state_reset(gs), RP_OK);
        rp_gen_stats st;
        char out[8192];
        size_t len = 0;
        assert_int_equal(rp_seq_prefill(s, p, &o, &st), RP_OK);
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        assert_int_equal(rp_seq_generate(s, &o, out, sizeof out, &len, &st), RP_OK);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        t_con += (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
        n_con += st.generated;
        print_message("constrained (%s): %s [stop %d]\n", prompts[k], out, (int)st.stop);
        assert_int_equal(st.stop, RP_STOP_EOG);
        json_error_t err;
        json_t *j = json_loads(out, JSON_DECODE_ANY, &err);
        if (!j) fail_msg("output does not parse: %s (%s)", out, err.text);
        assert_true(json_is_object(j));
        assert_int_equal(json_object_size(j), 5);
        assert_true(json_is_string(json_object_get(j, "name")));
        assert_true(strlen(json_string_value(json_object_get(j, "name"))) <= 12);
        assert_true(json_is_integer(json_object_get(j, "age")));
        const char *mood = json_string_value(json_object_get(j, "mood"));
        assert_non_null(mood);
        assert_true(!strcmp(mood, "happy") || !strcmp(mood, "sad"));
        assert_true(json_is_boolean(json_object_get(j, "ok")));
        json_t *tags = json_object_get(j, "tags");
        assert_true(json_is_array(tags));
        assert_true(json_array_size(tags) <= 2);
        json_decref(j);
        /* the same prompt unconstrained, for a rough speed comparison */
        o.on_logits = NULL;
        o.max_tokens = st.generated;
        assert_int_equal(rp_seq_prefill(s, p, &o, &st), RP_OK);
        clock_gettime(CLOCK_MONOTONIC, &t0);
        assert_int_equal(rp_seq_generate(s, &o, out, sizeof out, &len, &st), RP_OK);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        t_free += (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
        n_free += st.generated;
        rp_prompt_free(p);
    }
    print_message("tok/s constrained %.0f, unconstrained %.0f (rough, machine loaded)\n", n_con / t_con, n_free / t_free);
    /* the mask by itself: a state mid-object, many calls */
    rp_model_desc d = rp_model_describe(m);
    float *lg = malloc((size_t)d.n_vocab * sizeof *lg);
    assert_non_null(lg);
    assert_int_equal(rp_grammar_state_reset(gs), RP_OK);
    assert_int_equal(rp_grammar_accept_bytes(gs, "{\"name\": \"Li", 12), RP_OK);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int n_allowed = 0;
    for (int it = 0; it < 200; it++) {
        for (int32_t t = 0; t < d.n_vocab; t++) lg[t] = 0;
        assert_int_equal(rp_grammar_mask(gs, lg, d.n_vocab), RP_OK);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    for (int32_t t = 0; t < d.n_vocab; t++) n_allowed += lg[t] == 0;
    double us = ((double)(t1.tv_sec - t0.tv_sec) * 1e6 + 1e-3 * (double)(t1.tv_nsec - t0.tv_nsec)) / 200;
    print_message("mask in a string: %d of %d tokens allowed, %.1f us per mask (rough, machine loaded)\n", n_allowed,
                  (int)d.n_vocab, us);
    assert_true(n_allowed > 0 && n_allowed < d.n_vocab);
    rp_token eos = rp_token_eos(m);
    if (eos >= 0) assert_true(lg[eos] < 0);   /* cannot end inside an object */
    free(lg);
    rp_seq_free(s);
    rp_engine_free(e);
    rp_grammar_state_free(gs);
    rp_grammar_free(g);
    rp_grammar_vocab_free(v);
    rp_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_errors),
        cmocka_unit_test(test_matcher),
        cmocka_unit_test(test_schema),
        cmocka_unit_test(test_generate_schema),
    };
    return rp_test_main(tests, NULL, NULL);
}
