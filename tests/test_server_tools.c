/* test_server_tools.c — strict tools under tool_choice "auto" (the lazy grammar: free text until the reply opens a
 * call, the call under the tools' schemas from its opening on) and llama-server's ignore_eos, through the server on
 * both backends (--parallel 1: core, --parallel 2: the scheduler), plus the trigger watch on its own. The
 * tool-call models are synthetic, with real vocabularies and templates: Qwen3 (ChatML `<tool_call>`, one token of
 * its vocabulary) and Llama 3 with the built-in llama3 template (a bare `{"name": ...}` JSON call). */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/synth.h"
#include "reprise.h"
#include "server/lazy_grammar.h"
#include "server/prompt.h"
#include "srvtest.h"
#include "testutil.h"

/* two tools with enum-valued arguments (short: a few tokens each); the %s are wx's and tm's "strict" */
#define TOOLS                                                                                                         \
    "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"wx\",\"strict\":%s,\"parameters\":"                    \
    "{\"type\":\"object\",\"properties\":{\"c\":{\"type\":\"string\",\"maxLength\":4},\"u\":{\"enum\":[\"c\",\"f\"]}},"  \
    "\"required\":[\"c\",\"u\"],\"additionalProperties\":false}}},"                                                   \
    "{\"type\":\"function\",\"function\":{\"name\":\"tm\",\"strict\":%s,\"parameters\":{\"type\":\"object\","          \
    "\"properties\":{\"z\":{\"enum\":[\"utc\",\"cet\"]}},\"required\":[\"z\"],\"additionalProperties\":false}}}]"

static const char *g_model;   /* the next server's model and --parallel (start()'s tweak takes no argument) */
static const char *g_template;
static int g_parallel;
static bool g_speculate;
static const char *g_draft;

static void tweak(rp_server_config *c) {
    if (g_model) c->backend.model_path = g_model;
    c->backend.chat_template = g_template;
    c->backend.parallel = g_parallel;
    c->backend.speculate = g_speculate;
    c->backend.draft_path = g_draft;
}

static bool serve(fixture *f, const char *model, const char *tmpl, int parallel, bool speculate) {
    g_speculate = speculate;
    g_model = model;
    g_template = tmpl;
    g_parallel = parallel;
    return start(f, tweak);
}

/* The one token a text is in model m's vocabulary (asserts it is one). */
static rp_token one_token(const rp_model *m, const char *text) {
    rp_token t[8];
    int32_t n = 0;
    assert_int_equal(rp_tokenize(m, text, strlen(text), false, true, t, 8, &n), RP_OK);
    if (n != 1) fail_msg("'%s' is %d tokens, not one", text, n);
    return t[0];
}

/* A synthetic model with a real vocabulary (written once per test run). */
static const char *synth(const char *name, rp_arch arch, const char *preset, const char *vocab_rel) {
    const char *v = rp_test_shared(vocab_rel);
    if (!v) return NULL;
    static char paths[2][512];
    char *p = paths[arch == RP_ARCH_QWEN3 ? 0 : 1];
    snprintf(p, 512, "%s/%s", rp_test_tmpdir(), name);
    rp_synth_params sp = rp_synth_default_params();
    sp.arch = arch;
    if (preset) sp.preset = preset;
    sp.type = "q8_0";
    sp.vocab_path = v;
    sp.peak = 3;
    assert_int_equal(rp_synth_write(&sp, p), RP_OK);
    return p;
}

/* The reply's first choice. */
static json_t *choice0(json_t *j) { return json_array_get(json_object_get(j, "choices"), 0); }

static size_t utf8_chars(const char *s) {
    size_t n = 0;
    for (; *s; s++) n += ((unsigned char)*s & 0xC0) != 0x80;
    return n;
}

/* A call of one of the two tools whose arguments are exactly what its schema allows. */
static void check_call(json_t *c0) {
    const char *fin = json_string_value(json_object_get(c0, "finish_reason"));
    json_t *msg = json_object_get(c0, "message");
    if (!fin || strcmp(fin, "tool_calls") != 0) fail_msg("finish %s, content %s", fin, json_string_value(json_object_get(msg, "content")));
    json_t *fn = json_object_get(json_array_get(json_object_get(msg, "tool_calls"), 0), "function");
    const char *name = json_string_value(json_object_get(fn, "name"));
    const char *argtext = json_string_value(json_object_get(fn, "arguments"));
    assert_non_null(name);
    assert_non_null(argtext);
    print_message("    call %s(%s)\n", name, argtext);
    json_t *args = json_loads(argtext, 0, NULL);
    assert_true(json_is_object(args));
    if (!strcmp(name, "wx")) {
        const char *c = json_string_value(json_object_get(args, "c")), *u = json_string_value(json_object_get(args, "u"));
        assert_int_equal(json_object_size(args), 2);
        assert_true(c && utf8_chars(c) <= 4 && u);   /* maxLength counts characters */
        assert_true(!strcmp(u, "c") || !strcmp(u, "f"));
    } else {
        assert_string_equal(name, "tm");
        {
            const char *z = json_string_value(json_object_get(args, "z"));
            assert_int_equal(json_object_size(args), 1);
            assert_true(z && (!strcmp(z, "utc") || !strcmp(z, "cet")));
        }
    }
    json_decref(args);
}

/* The TOOLS array as JSON text (malloc'd). */
static char *tools_array(const char *wx_strict, const char *tm_strict) {
    char obj[2048];
    snprintf(obj, sizeof obj, "{" TOOLS "}", wx_strict, tm_strict);
    json_t *o = json_loads(obj, 0, NULL);
    assert_non_null(o);
    char *s = json_dumps(json_object_get(o, "tools"), JSON_COMPACT);
    json_decref(o);
    return s;
}

/* ------------------------------------------------------------ the trigger watch alone */

static void test_tool_opening(void **state) {
    (void)state;
    size_t end = 0;
    long part = 0;
    assert_int_equal(rp_srv_tool_opening(RP_CHAT_CHATML, "Sure. <tool_call>\n{", 19, &end, &part), 6);
    assert_int_equal(end, 17);
    assert_int_equal(rp_srv_tool_opening(RP_CHAT_CHATML, "Sure. <tool_c", 13, &end, &part), -1);
    assert_int_equal(part, 6);   /* kept: it may still become one */
    assert_int_equal(rp_srv_tool_opening(RP_CHAT_CHATML, "a < b", 5, &end, &part), -1);
    assert_int_equal(part, -1);
    assert_int_equal(rp_srv_tool_opening(RP_CHAT_MISTRAL, "[TOOL_CALLS][{", 14, &end, &part), 0);
    assert_int_equal(end, 12);
    const char *l3 = "x {\n  \"name\": \"wx\"";
    assert_int_equal(rp_srv_tool_opening(RP_CHAT_LLAMA3, l3, strlen(l3), &end, &part), 2);
    assert_int_equal(end, 12);
    assert_int_equal(rp_srv_tool_opening(RP_CHAT_LLAMA3, "{\"na", 4, &end, &part), -1);
    assert_int_equal(part, 0);
    assert_int_equal(rp_srv_tool_opening(RP_CHAT_LLAMA3, "{\"x\": 1}", 8, &end, &part), -1);   /* not a call */
    assert_int_equal(part, -1);
    assert_int_equal(rp_srv_tool_opening(RP_CHAT_LLAMA2, "<tool_call>", 11, &end, &part), -1);
}

static int32_t n_allowed(const float *lg, int32_t V) {
    int32_t n = 0;
    for (int32_t k = 0; k < V; k++) n += lg[k] > -INFINITY;
    return n;
}

/* The watch over stories260K's vocabulary: free text leaves the logits alone, an opening inside <think> does not
 * count, one after it does, and from then on only what continues the call (a tool's name) is allowed. */
static void test_lazy_watch(void **state) {
    (void)state;
    const char *mp = rp_test_shared(SRVTEST_MODEL);
    RP_REQUIRE_SHARED(mp, SRVTEST_MODEL);
    rp_model *m = NULL;
    assert_int_equal(rp_model_load(mp, rp_model_default_params(), &m), RP_OK);
    const int32_t V = rp_model_describe(m).n_vocab;
    char *arrcopy = tools_array("true", "true");
    char *call = NULL, *gbnf = NULL;
    assert_int_equal(rp_srv_tool_grammar(arrcopy, NULL, "arguments", true, &call), RP_OK);
    assert_int_equal(rp_srv_lazy_wrap(RP_CHAT_CHATML, call, &gbnf), RP_OK);
    rp_grammar *g = NULL;
    rp_grammar_vocab *gv = NULL;
    rp_grammar_state *gs = NULL;
    assert_int_equal(rp_grammar_parse(gbnf, RP_SRV_LAZY_ROOT, &g), RP_OK);
    assert_int_equal(rp_grammar_vocab_new(m, &gv), RP_OK);
    assert_int_equal(rp_grammar_state_new(g, gv, &gs), RP_OK);
    rp_srv_lazy *z = NULL;
    assert_int_equal(rp_srv_lazy_new(m, gs, RP_CHAT_CHATML, false, &z), RP_OK);
    float *lg = malloc(sizeof *lg * (size_t)V);
    /* the text tokenized at once (SPM's dummy prefix only at its start), fed a token at a time as a generation's
     * history grows; checked where its pieces reach the end of each part */
    static const char *k_parts[3] = {"Hello there. <think>maybe <tool_call> no</think> Fine",
                                     " <tool_call>\n{\"name\": \"",
                                     "wx\", \"arguments\": {\"c\": \"ab\", \"u\": \""};
    char text[512];
    snprintf(text, sizeof text, "%s%s%s", k_parts[0], k_parts[1], k_parts[2]);
    const size_t end0 = strlen(k_parts[0]), end1 = end0 + strlen(k_parts[1]);
    rp_token hist[1024];
    int32_t nh = 0, n = 0;
    hist[nh++] = rp_token_bos(m);
    for (int32_t k = 0; k < V; k++) lg[k] = 0;
    rp_srv_lazy_on_logits(z, hist, nh, lg, V);   /* the prompt */
    rp_token toks[512];
    assert_int_equal(rp_tokenize(m, text, strlen(text), false, false, toks, 512, &n), RP_OK);
    char piece[64];
    size_t have = 0;
    bool checked_free = false, checked_open = false;
    const size_t lead = text[0] == ' ' ? 0 : 1;   /* the dummy prefix's space, when the vocabulary adds one */
    for (int32_t i = 0; i < n; i++) {
        hist[nh++] = toks[i];
        for (int32_t k = 0; k < V; k++) lg[k] = 0;
        rp_srv_lazy_on_logits(z, hist, nh, lg, V);
        const int32_t w = rp_token_to_piece(m, toks[i], false, piece, (int32_t)sizeof piece);
        have += w > 0 ? (size_t)w : 0;
        const size_t at = have > lead ? have - lead : 0;   /* bytes of `text` the pieces cover (about) */
        if (at <= end0) {   /* free text, an opening inside <think> included */
            assert_false(rp_srv_lazy_active(z));
            assert_int_equal(n_allowed(lg, V), V);
            checked_free = true;
        } else if (at >= end1 && !checked_open) {   /* after the opening and the name's quote: a tool's name */
            assert_true(rp_srv_lazy_active(z));
            const int32_t allowed = n_allowed(lg, V);
            print_message("  after the opening: %d of %d tokens allowed\n", allowed, V);
            assert_true(allowed > 0 && allowed < V / 4);
            checked_open = true;
        }
    }
    assert_true(checked_free && checked_open && rp_srv_lazy_active(z));
    /* at the end, an enum value: every allowed token starts "c" or "f" */
    for (int32_t k = 0; k < V; k++)
        if (lg[k] > -INFINITY) {
            const int32_t w = rp_token_to_piece(m, k, false, piece, (int32_t)sizeof piece);
            assert_true(w > 0 && (piece[0] == 'c' || piece[0] == 'f'));
        }
    /* strict_only: a strict tool's arguments follow its schema, another tool's are any object */
    char *mixed = tools_array("true", "false"), *mg = NULL;
    assert_int_equal(rp_srv_tool_grammar(mixed, NULL, "arguments", true, &mg), RP_OK);
    rp_grammar *g2 = NULL;
    assert_int_equal(rp_grammar_parse(mg, NULL, &g2), RP_OK);
    static const struct { const char *call; bool ok; } k_calls[] = {
        {"{\"name\": \"tm\", \"arguments\": {\"anything\": [1, \"x\"]}}", true},
        {"{\"name\": \"wx\", \"arguments\": {\"anything\": 1}}", false},
        {"{\"name\": \"wx\", \"arguments\": {\"c\": \"ab\", \"u\": \"f\"}}", true},
        {"{\"name\": \"zz\", \"arguments\": {}}", false},
    };
    for (size_t i = 0; i < sizeof k_calls / sizeof k_calls[0]; i++) {
        rp_grammar_state *s2 = NULL;
        assert_int_equal(rp_grammar_state_new(g2, NULL, &s2), RP_OK);
        const bool ok = rp_grammar_accept_bytes(s2, k_calls[i].call, strlen(k_calls[i].call)) == RP_OK &&
                        rp_grammar_can_end(s2);
        if (ok != k_calls[i].ok) fail_msg("%s: %s", k_calls[i].call, ok ? "accepted" : "refused");
        rp_grammar_state_free(s2);
    }
    rp_grammar_free(g2);
    free(mg);
    free(mixed);
    /* each format's call block, from its opening, is what its wrapped grammar takes whole */
    static const struct { rp_chat_format f; const char *key, *block; } k_blocks[] = {
        {RP_CHAT_CHATML, "arguments", "<tool_call>\n{\"name\": \"tm\", \"arguments\": {\"z\": \"utc\"}}\n</tool_call>"},
        {RP_CHAT_MISTRAL, "arguments", "[TOOL_CALLS][{\"name\": \"tm\", \"arguments\": {\"z\": \"cet\"}}]"},
        {RP_CHAT_LLAMA3, "parameters", "{\"name\": \"wx\", \"parameters\": {\"c\": \"\", \"u\": \"c\"}}"},
    };
    for (size_t i = 0; i < sizeof k_blocks / sizeof k_blocks[0]; i++) {
        char *cg = NULL, *wg = NULL;
        assert_int_equal(rp_srv_tool_grammar(arrcopy, NULL, k_blocks[i].key, true, &cg), RP_OK);
        assert_int_equal(rp_srv_lazy_wrap(k_blocks[i].f, cg, &wg), RP_OK);
        rp_grammar *g3 = NULL;
        rp_grammar_state *s3 = NULL;
        assert_int_equal(rp_grammar_parse(wg, RP_SRV_LAZY_ROOT, &g3), RP_OK);
        assert_int_equal(rp_grammar_state_new(g3, NULL, &s3), RP_OK);
        const char *b = k_blocks[i].block;
        size_t e = 0;
        assert_int_equal(rp_srv_tool_opening(k_blocks[i].f, b, strlen(b), &e, NULL), 0);   /* it opens there */
        if (rp_grammar_accept_bytes(s3, b, strlen(b)) != RP_OK || !rp_grammar_can_end(s3)) fail_msg("refused: %s", b);
        rp_grammar_state_free(s3);
        rp_grammar_free(g3);
        free(wg);
        free(cg);
    }
    free(lg);
    rp_srv_lazy_free(z);
    rp_grammar_state_free(gs);
    rp_grammar_vocab_free(gv);
    rp_grammar_free(g);
    free(gbnf);
    free(call);
    free(arrcopy);
    rp_model_free(m);
}

/* ------------------------------------------------------------ through the server */

/* Forced openings make the arguments follow the schemas; a free turn is the same text as without strict tools. */
static void check_lazy(uint16_t port, const char *force, bool chatml) {
    char body[4096];
    /* an opening forced by logit_bias (the grammar masks the biased tokens once it takes over) */
    for (int k = 0; k < 3; k++) {
        snprintf(body, sizeof body,
                 "{\"messages\":[{\"role\":\"user\",\"content\":\"Weather or time?\"}]," TOOLS
                 ",\"tool_choice\":\"auto\",\"max_tokens\":300,\"temperature\":%s,\"seed\":%d,%s%s}",
                 "true", "true", k ? "1" : "0", 11 + k, force, chatml ? ",\"enable_thinking\":false" : "");
        resp r = post(port, "/v1/chat/completions", body);
        if (r.status != 200) fail_msg("%d: %s", r.status, r.body);
        json_t *j = parse(&r);
        check_call(choice0(j));
        json_decref(j);
        resp_free(&r);
    }
    /* the same opening without strict tools (no grammar): the random model's "call" is no call of these tools */
    snprintf(body, sizeof body,
             "{\"messages\":[{\"role\":\"user\",\"content\":\"Weather or time?\"}]," TOOLS
             ",\"max_tokens\":60,\"temperature\":0,%s%s}",
             "false", "false", force, chatml ? ",\"enable_thinking\":false" : "");
    resp r0 = post(port, "/v1/chat/completions", body);
    assert_int_equal(r0.status, 200);
    json_t *j0 = parse(&r0);
    print_message("    unconstrained: finish %s\n", json_string_value(json_object_get(choice0(j0), "finish_reason")));
    assert_string_not_equal(json_string_value(json_object_get(choice0(j0), "finish_reason")), "tool_calls");
    json_decref(j0);
    resp_free(&r0);
    /* a free turn stays free: greedy with strict tools (the lazy grammar, never triggered), every token is the
     * model's most likely one (its raw log-probability the top one), as no constraint touched its logits */
    snprintf(body, sizeof body,
             "{\"messages\":[{\"role\":\"user\",\"content\":\"Tell me a story.\"}]," TOOLS ",\"max_tokens\":24,"
             "\"temperature\":0,\"logprobs\":true,\"top_logprobs\":1%s}",
             "true", "false", chatml ? ",\"enable_thinking\":false" : "");
    resp r = post(port, "/v1/chat/completions", body);
    if (r.status != 200) fail_msg("%d: %s", r.status, r.body);
    json_t *j = parse(&r);
    json_t *msg = json_object_get(choice0(j), "message");
    assert_null(json_object_get(msg, "tool_calls"));
    const char *content = json_string_value(json_object_get(msg, "content"));
    assert_non_null(content);
    print_message("    free turn: '%s'\n", content);
    json_t *lp = json_object_get(json_object_get(choice0(j), "logprobs"), "content");
    assert_true(json_array_size(lp) >= 8);
    for (size_t i = 0; i < json_array_size(lp); i++) {
        json_t *e = json_array_get(lp, i);
        const double chosen = json_real_value(json_object_get(e, "logprob"));
        const double top = json_real_value(json_object_get(json_array_get(json_object_get(e, "top_logprobs"), 0), "logprob"));
        if (fabs(chosen - top) > 1e-4) fail_msg("token %zu: logprob %g, the top one %g", i, chosen, top);
    }
    json_decref(j);
    resp_free(&r);
}

/* Llama 3's bare JSON call: the lazy grammar takes over only when the reply opens with it (after whitespace or
 * <|python_tag|>); an object later in prose stays free text. Whether it is active after feeding `text`. */
static bool llama3_watch_active(rp_model *m, rp_grammar_vocab *gv, const char *text) {
    const int32_t V = rp_model_describe(m).n_vocab;
    char *arr = tools_array("true", "true"), *call = NULL, *gbnf = NULL;
    assert_int_equal(rp_srv_tool_grammar(arr, NULL, "parameters", true, &call), RP_OK);
    assert_int_equal(rp_srv_lazy_wrap(RP_CHAT_LLAMA3, call, &gbnf), RP_OK);
    rp_grammar *g = NULL;
    rp_grammar_state *gs = NULL;
    assert_int_equal(rp_grammar_parse(gbnf, RP_SRV_LAZY_ROOT, &g), RP_OK);
    assert_int_equal(rp_grammar_state_new(g, gv, &gs), RP_OK);
    rp_srv_lazy *z = NULL;
    assert_int_equal(rp_srv_lazy_new(m, gs, RP_CHAT_LLAMA3, false, &z), RP_OK);
    float *lg = malloc(sizeof *lg * (size_t)V);
    rp_token hist[512], toks[256];
    int32_t nh = 0, n = 0;
    hist[nh++] = rp_token_bos(m);
    for (int32_t k = 0; k < V; k++) lg[k] = 0;
    rp_srv_lazy_on_logits(z, hist, nh, lg, V);   /* the prompt */
    assert_int_equal(rp_tokenize(m, text, strlen(text), false, false, toks, 256, &n), RP_OK);
    for (int32_t i = 0; i < n; i++) {
        hist[nh++] = toks[i];
        for (int32_t k = 0; k < V; k++) lg[k] = 0;
        rp_srv_lazy_on_logits(z, hist, nh, lg, V);
        if (!rp_srv_lazy_active(z)) assert_int_equal(n_allowed(lg, V), V);   /* free text: logits untouched */
    }
    const bool active = rp_srv_lazy_active(z);
    free(lg);
    rp_srv_lazy_free(z);
    rp_grammar_state_free(gs);
    rp_grammar_free(g);
    free(gbnf);
    free(call);
    free(arr);
    return active;
}

static void test_lazy_watch_llama3(void **state) {
    (void)state;
    const char *mp = rp_test_shared(SRVTEST_MODEL);
    RP_REQUIRE_SHARED(mp, SRVTEST_MODEL);
    rp_model *m = NULL;
    assert_int_equal(rp_model_load(mp, rp_model_default_params(), &m), RP_OK);
    rp_grammar_vocab *gv = NULL;
    assert_int_equal(rp_grammar_vocab_new(m, &gv), RP_OK);
    assert_true(llama3_watch_active(m, gv, "{\"name\": \"wx\", \"parameters\": {\"c\": \"a"));
    assert_true(llama3_watch_active(m, gv, " \n {\"name\": \"w"));
    assert_true(llama3_watch_active(m, gv, "<|python_tag|>{\"name\": \"w"));
    assert_false(llama3_watch_active(m, gv, "The format is {\"name\": \"wx\", \"parameters\": {\"c\": \"a"));
    assert_false(llama3_watch_active(m, gv, "{\"x\": 1} and then {\"name\": \"w"));
    rp_grammar_vocab_free(gv);
    rp_model_free(m);
}

/* Qwen3's template and vocabulary: `<tool_call>` is one token, forced first with logit_bias. */
static void test_lazy_chatml(void **state) {
    (void)state;
    const char *mp = synth("tools-qwen3.gguf", RP_ARCH_QWEN3, NULL, "models/vocab/qwen3-bpe.vocab.gguf");
    RP_REQUIRE_SHARED(mp, "models/vocab/qwen3-bpe.vocab.gguf");
    rp_model *m = NULL;
    assert_int_equal(rp_model_load(mp, rp_model_default_params(), &m), RP_OK);
    assert_int_equal(rp_model_chat_format(m), RP_CHAT_CHATML);
    char force[64];
    snprintf(force, sizeof force, "\"logit_bias\":{\"%d\":100}", one_token(m, "<tool_call>"));
    rp_model_free(m);
    for (int parallel = 1; parallel <= 2; parallel++) {
        fixture f;
        assert_true(serve(&f, mp, NULL, parallel, false));   /* greedy texts compared: no drafts */
        print_message("  qwen3, --parallel %d\n", parallel);
        check_lazy(f.port, force, true);
        stop(&f);
    }
    remove(mp);
}

/* Llama 3 with the built-in template (it shows the tools): the call is a bare JSON object. Its opening `{"name"`
 * is three tokens, forced in order by biases 100 > 90 > 80 with repeat_penalty 100 over the last 2 tokens (each
 * one, once written, falls below the next). */
static void test_lazy_llama3(void **state) {
    (void)state;
    const char *mp = synth("tools-llama3.gguf", RP_ARCH_LLAMA, "tiny-llama3", "models/vocab/llama3-bpe.vocab.gguf");
    RP_REQUIRE_SHARED(mp, "models/vocab/llama3-bpe.vocab.gguf");
    rp_model *m = NULL;
    assert_int_equal(rp_model_load(mp, rp_model_default_params(), &m), RP_OK);
    char force[160];
    snprintf(force, sizeof force,
             "\"logit_bias\":{\"%d\":100,\"%d\":90,\"%d\":80},\"repeat_penalty\":100,\"repeat_last_n\":2",
             one_token(m, "{\""), one_token(m, "name"), one_token(m, "\":"));
    rp_model_free(m);
    for (int parallel = 1; parallel <= 2; parallel++) {
        fixture f;
        assert_true(serve(&f, mp, "llama3", parallel, false));
        print_message("  llama3, --parallel %d\n", parallel);
        check_lazy(f.port, force, false);
        stop(&f);
    }
    remove(mp);
}

/* ignore_eos: an end-of-generation token forced by logit_bias ends the reply at once, unless ignore_eos, which runs
 * it to max_tokens; a grammar's end still ends it (the grammar allows nothing else). Both backends; the scheduler
 * with speculation on (its drafts are verified against the ban). */
static void test_ignore_eos(void **state) {
    (void)state;
    const char *mp = rp_test_shared(SRVTEST_MODEL);
    RP_REQUIRE_SHARED(mp, SRVTEST_MODEL);
    rp_model *m = NULL;
    assert_int_equal(rp_model_load(mp, rp_model_default_params(), &m), RP_OK);
    const rp_token eos = rp_token_eos(m);
    rp_model_free(m);
    const char *draft = rp_test_shared("models/stories260K-q8_0.gguf");
    for (int parallel = 1; parallel <= 3; parallel++) {   /* 3: --parallel 2 with a draft model */
        fixture f;
        g_draft = parallel == 3 ? draft : NULL;
        if (parallel == 3 && !draft) break;
        assert_true(serve(&f, NULL, NULL, parallel == 3 ? 2 : parallel, true));
        for (int ignore = 0; ignore < 2; ignore++)
            for (int chat = 0; chat < 2; chat++) {
                char body[512];
                snprintf(body, sizeof body,
                         "{%s,\"max_tokens\":12,\"temperature\":%s,\"seed\":3,\"logit_bias\":{\"%d\":100}%s}",
                         chat ? "\"messages\":[{\"role\":\"user\",\"content\":\"Once upon a time\"}]"
                              : "\"prompt\":\"Once upon a time\"",
                         chat ? "0" : "0.8", eos, ignore ? ",\"ignore_eos\":true" : "");
                resp r = post(f.port, chat ? "/v1/chat/completions" : "/v1/completions", body);
                assert_int_equal(r.status, 200);
                json_t *j = parse(&r);
                const char *fin = json_string_value(json_object_get(choice0(j), "finish_reason"));
                const json_int_t n = jint(json_object_get(j, "usage"), "completion_tokens");
                print_message("  --parallel %d, %s, ignore_eos %d: %s after %lld tokens\n", parallel,
                              chat ? "chat" : "completions", ignore, fin, (long long)n);
                if (ignore) {
                    assert_string_equal(fin, "length");
                    assert_int_equal(n, 12);
                } else {
                    assert_string_equal(fin, "stop");
                    assert_true(n <= 1);
                }
                json_decref(j);
                resp_free(&r);
            }
        /* with a grammar: it runs to the grammar's end, then stops */
        resp r = post(f.port, "/v1/completions",
                      "{\"prompt\":\"Lily\",\"max_tokens\":20,\"temperature\":0,\"ignore_eos\":true,"
                      "\"grammar\":\"root ::= (\\\"yes\\\" | \\\"no\\\") \\\".\\\"\"}");
        assert_int_equal(r.status, 200);
        json_t *j = parse(&r);
        const char *t = json_string_value(json_object_get(choice0(j), "text"));
        assert_true(!strcmp(t, "yes.") || !strcmp(t, "no."));
        assert_string_equal(json_string_value(json_object_get(choice0(j), "finish_reason")), "stop");
        json_decref(j);
        resp_free(&r);
        stop(&f);
    }
    g_draft = NULL;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tool_opening),
        cmocka_unit_test(test_lazy_watch),
        cmocka_unit_test(test_lazy_watch_llama3),
        cmocka_unit_test(test_ignore_eos),
        cmocka_unit_test(test_lazy_chatml),
        cmocka_unit_test(test_lazy_llama3),
    };
    return rp_test_main(tests, NULL, NULL);
}
