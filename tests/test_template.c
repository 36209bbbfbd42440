/* test_template.c — the chat-template interpreter (src/template/): constructs, Python semantics, error messages
 * with line:column and the construct, limits on hostile templates, and the wiring (built-ins by name,
 * --chat-template files, a failing template refused, the model's own template through the public API). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reprise.h"
#include "template/template.h"
#include "testutil.h"
#include "tokenizer/chat_template.h"

/* Renders src with the JSON context (NULL: none); returns the output (caller frees) or NULL with *err set. */
static char *render_ctx(const char *src, const char *ctx_json, const rp_tmpl_opts *o, rp_status *status, char *err, size_t errcap) {
    rp_tmpl *t = NULL;
    rp_status st = rp_tmpl_compile(src, strlen(src), &t);
    char *out = NULL;
    if (st == RP_OK) {
        json_t *ctx = ctx_json ? json_loads(ctx_json, 0, NULL) : NULL;
        if (ctx_json) assert_non_null(ctx);
        st = rp_tmpl_render(t, ctx, o, &out, NULL);
        json_decref(ctx);
    }
    if (st != RP_OK && err) snprintf(err, errcap, "%s", rp_last_error());
    if (status) *status = st;
    rp_tmpl_free(t);
    return out;
}

static void expect(const char *src, const char *ctx, const char *want) {
    char err[600] = "";
    rp_status st;
    rp_tmpl_opts o = {.now = 1721952000};
    char *out = render_ctx(src, ctx, &o, &st, err, sizeof err);
    if (st != RP_OK) print_message("template %s: %s\n", src, err);
    assert_int_equal(st, RP_OK);
    if (strcmp(out, want) != 0) print_message("template %s\n  want [%s]\n  got  [%s]\n", src, want, out);
    assert_string_equal(out, want);
    free(out);
}

/* The error text must contain each of the pieces (position, construct, reason). */
static void expect_error(const char *src, const char *ctx, rp_status want_st, const char *p1, const char *p2) {
    char err[600] = "";
    rp_status st;
    char *out = render_ctx(src, ctx, NULL, &st, err, sizeof err);
    if (st == RP_OK) print_message("template %s rendered [%s], expected an error\n", src, out);
    free(out);
    assert_int_equal(st, want_st);
    if ((p1 && !strstr(err, p1)) || (p2 && !strstr(err, p2))) print_message("error for %s: %s\n", src, err);
    if (p1) assert_non_null(strstr(err, p1));
    if (p2) assert_non_null(strstr(err, p2));
}

static void test_expressions(void **state) {
    (void)state;
    expect("{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 7 / 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 2 ** 10 }}", NULL,
           "7 9 3.5 3 -4 2 1024");
    expect("{{ 0.1 + 0.2 }} {{ 1e20 }} {{ 3.0 }} {{ 1.5e-7 }} {{ 1 == 1.0 }} {{ true == 1 }}", NULL,
           "0.30000000000000004 1e+20 3.0 1.5e-07 True True");
    expect("{{ 'a' ~ 1 ~ none ~ undefined_name }} {{ 'ab' * 2 }} {{ [1] + [2] }}", NULL, "a1None abab [1, 2]");
    expect("{{ [1, 'a', none, true, {'k': 'v'}] }} {{ (1,) }} {{ \"it's\" }}", NULL, "[1, 'a', None, True, {'k': 'v'}] (1,) it's");
    expect("{{ 'héllo'[1:3] }} {{ 'héllo'|length }} {{ 'abc'[::-1] }} {{ [1, 2, 3][-1] }} {{ m[1:] }}", "{\"m\": [1, 2]}",
           "él 5 cba 3 [2]");
    expect("{{ 1 < 2 < 3 }} {{ 'b' in 'abc' }} {{ 2 not in [1] }} {{ 'k' in {'k': 1} }} {{ 0 or '' or 'z' }} {{ 1 and 2 }}",
           NULL, "True True True True z 2");
    expect("{{ 'y' if x else 'n' }}{{ 'never' if false }}|{{ d.a }}{{ d['a'] }}{{ d.get('b', 9) }}", "{\"x\": 1, \"d\": {\"a\": 5}}",
           "y|559");
}

static void test_statements(void **state) {
    (void)state;
    /* a set inside a loop is the iteration's own; a namespace carries state out */
    expect("{% set x = 1 %}{% for i in [1, 2] %}{% set x = x + 10 %}{{ x }},{% endfor %}{{ x }}", NULL, "11,11,1");
    expect("{% set ns = namespace(n=0) %}{% for i in range(4) %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}", NULL, "6");
    expect("{% for m in ms if m != 2 %}{{ loop.index }}/{{ loop.length }}{{ '.' if not loop.last }}{% else %}none{% endfor %}",
           "{\"ms\": [1, 2, 3]}", "1/2.2/2");
    expect("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for x in [] %}{% else %}empty{% endfor %}",
           "{\"d\": {\"b\": 1, \"a\": 2}}", "b=1;a=2;empty");
    expect("{% for i in range(9) %}{% if i is odd %}{% continue %}{% endif %}{% if i > 5 %}{% break %}{% endif %}{{ i }}{% endfor %}",
           NULL, "024");
    expect("{% macro f(a, b='B') %}[{{ a }}{{ b }}]{% endmacro %}{{ f(1) }}{{ f(2, b=3) }}", NULL, "[1B][23]");
    expect("{% macro w() %}<{{ caller('x') }}>{% endmacro %}{% call(v) w() %}in{{ v }}{% endcall %}", NULL, "<inx>");
    expect("{% set b | trim %}  pad  {% endset %}[{{ b }}]{% filter upper %}up{% endfilter %}{% raw %}{{ raw }}{% endraw %}",
           NULL, "[pad]UP{{ raw }}");
    expect("{% with a = 1 %}{{ a }}{% endwith %}{{ a is defined }}{% generation %}g{% endgeneration %}", NULL, "1Falseg");
    /* trim_blocks and lstrip_blocks as HF sets them; - and + whitespace control */
    expect("a\n  {% if true %}\n  b\n  {% endif %}\nc", NULL, "a\n  b\nc");
    expect("a  {{- ' b ' -}}  c {%+ if true %}d{% endif %} {# x -#}  e", NULL, "a b c d e");
}

static void test_filters_tests_methods(void **state) {
    (void)state;
    expect("{{ x|tojson }}|{{ x|tojson(indent=2) }}", "{\"x\": {\"b\": [1, 2.5, \"é\"], \"a\": null}}",
           "{\"b\": [1, 2.5, \"é\"], \"a\": null}|{\n  \"b\": [\n    1,\n    2.5,\n    \"é\"\n  ],\n  \"a\": null\n}");
    expect("{{ ' x '|trim }}{{ 'hello world'|title }}{{ 'hI'|capitalize }}{{ 'a-b'|replace('-', '+') }}{{ [3, 1, 2]|sort|join(',') }}",
           NULL, "xHello WorldHia+b1,2,3");
    expect("{{ ms|selectattr('r', 'equalto', 'u')|list|length }}{{ ms|map(attribute='r')|join }}{{ ms|first }}{{ u|default('d') }}",
           "{\"ms\": [{\"r\": \"u\"}, {\"r\": \"a\"}]}", "1ua{'r': 'u'}d");
    expect("{{ 'x' is string }}{{ 1 is number }}{{ none is none }}{{ u is defined }}{{ {} is mapping }}{{ 4 is divisibleby 2 }}",
           NULL, "TrueTrueTrueFalseTrueTrue");
    expect("{{ 'a,b'.split(',') }}{{ '\\n x\\n'.strip() }}{{ 'abc'.startswith(('x', 'a')) }}{{ 'AbC'.lower() }}{{ 'a b'.title() }}",
           NULL, "['a', 'b']xTrueabcA B");
    expect("{{ strftime_now('%d %b %Y') }}", NULL, "26 Jul 2024");
}

static void test_errors(void **state) {
    (void)state;
    /* syntax errors name line and column */
    expect_error("line one\n{% if x %}\nno end", NULL, RP_ERR_FORMAT, "line 2 column 4", "'if' block is never closed");
    expect_error("{{ 1 + }}", NULL, RP_ERR_FORMAT, "line 1 column 8", "expected an expression");
    expect_error("{% include 'x' %}", NULL, RP_ERR_FORMAT, "unknown tag 'include'", NULL);
    expect_error("{{ 'open }}", NULL, RP_ERR_FORMAT, "unterminated string", NULL);
    expect_error("{% break %}", NULL, RP_ERR_FORMAT, "outside a for loop", NULL);
    /* render errors: position, construct and Python's reason */
    expect_error("ok\n  {{ raise_exception('Roles must alternate') }}", NULL, RP_ERR_INVALID_ARG, "line 2 column 6",
                 "raise_exception: Roles must alternate");
    expect_error("{{ 'a' + none }}", NULL, RP_ERR_INVALID_ARG, "(operator)", "unsupported operand type(s) for +: 'str' and 'NoneType'");
    expect_error("{{ missing.attr }}", NULL, RP_ERR_INVALID_ARG, "(attribute)", "'missing' is undefined");
    expect_error("{% for x in none %}{% endfor %}", NULL, RP_ERR_INVALID_ARG, "(for)", "'NoneType' object is not iterable");
    expect_error("{{ x|nosuch }}", NULL, RP_ERR_INVALID_ARG, "(filter)", "no filter named 'nosuch'");
    expect_error("{{ x.append(1) }}", "{\"x\": []}", RP_ERR_INVALID_ARG, "unsafe", NULL);
    expect_error("{% set x = 1 %}{% set x.y = 2 %}", NULL, RP_ERR_INVALID_ARG, "non-namespace", NULL);
}

static void test_limits(void **state) {
    (void)state;
    /* iterations, output, recursion and nesting are bounded: errors, never hangs or crashes */
    rp_tmpl_opts o = {.max_iters = 1000, .max_output = 1 << 16};
    rp_status st;
    char err[600];
    free(render_ctx("{% for i in range(100000) %}{% endfor %}", NULL, &o, &st, err, sizeof err));
    assert_int_equal(st, RP_ERR_INVALID_ARG);
    assert_non_null(strstr(err, "iteration limit"));
    o.max_iters = 5000;
    free(render_ctx("{% for i in range(900) %}{{ 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx' }}{% endfor %}",
                    NULL, &o, &st, err, sizeof err));
    assert_int_equal(st, RP_ERR_INVALID_ARG);
    assert_non_null(strstr(err, "output limit"));
    free(render_ctx("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", NULL, NULL, &st, err, sizeof err));
    assert_int_equal(st, RP_ERR_INVALID_ARG);
    assert_non_null(strstr(err, "recursion limit"));
    rp_tmpl_opts small = {.max_memory = 1 << 20};
    free(render_ctx("{% set ns = namespace(s='x') %}{% for i in range(100) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}", NULL, &small,
                    &st, err, sizeof err));
    assert_int_equal(st, RP_ERR_INVALID_ARG);
    assert_true(strstr(err, "memory limit") || strstr(err, "output limit"));
    /* values nested without bound, a namespace inside what it holds, a 50,000-term expression: errors or
     * output, never a stack overflow */
    free(render_ctx("{% set ns = namespace(x=[]) %}{% for i in range(100000) %}{% set ns.x = [ns.x] %}{% endfor %}", NULL, NULL,
                    &st, err, sizeof err));
    assert_int_equal(st, RP_ERR_INVALID_ARG);
    assert_non_null(strstr(err, "nested deeper than"));
    expect("{% set ns = namespace(a=1) %}{% set ns.l = [ns] %}{{ ns }}|{{ [namespace(b=2)] }}", NULL,
           "<Namespace {'a': 1, 'l': [<Namespace {...}>]}>|[<Namespace {'b': 2}>]");   /* as Python's repr */
    char *chain = malloc(50000 * 2 + 16), *w = chain;
    w += sprintf(w, "{{ 1");
    for (int i = 0; i < 50000; i++) w += sprintf(w, "+1");
    sprintf(w, " }}");
    free(render_ctx(chain, NULL, NULL, &st, err, sizeof err));
    assert_int_equal(st, RP_ERR_INVALID_ARG);
    assert_non_null(strstr(err, "expression nested deeper than"));
    free(chain);
    /* deep nesting in the source is a syntax error, not a stack overflow */
    char deep[4200] = "{{ ";
    for (int i = 0; i < 1000; i++) strcat(deep, "(");
    strcat(deep, "1");
    for (int i = 0; i < 1000; i++) strcat(deep, ")");
    strcat(deep, " }}");
    rp_tmpl *t = NULL;
    assert_int_equal(rp_tmpl_compile(deep, strlen(deep), &t), RP_ERR_FORMAT);
    assert_non_null(strstr(rp_last_error(), "nested too deeply"));
}

/* Mutations of a real-looking template: every one compiles or fails cleanly, and renders or fails cleanly. */
static void test_garbage_never_crashes(void **state) {
    (void)state;
    static const char base[] =
        "{%- set ns = namespace(i=0) -%}{% for m in messages if m.role != 'x' %}{{ '<' ~ m.role ~ '>' + m.content|trim }}"
        "{% if loop.last and add_generation_prompt %}{{ m|tojson(indent=2) }}{% endif %}{% set ns.i = ns.i + 1 %}"
        "{% endfor %}{{ messages[1:]|map(attribute='role')|join(',') }}{% macro f(a) %}{{ a[::-1] }}{% endmacro %}{{ f('ab') }}";
    static const char alphabet[] = "{}%#-+()[]|.,:'\"~ =<>*/!\nabcdeinoftrsl0123456789";
    json_t *ctx = json_loads("{\"messages\": [{\"role\": \"user\", \"content\": \" hi \"}, {\"role\": \"assistant\", \"content\": "
                             "\"ok\"}], \"add_generation_prompt\": true}", 0, NULL);
    rp_test_rng rng = {0x9e3779b97f4a7c15ull};
    char buf[sizeof base + 8];
    int compiled = 0, rendered = 0;
    for (int it = 0; it < 3000; it++) {
        memcpy(buf, base, sizeof base);
        int edits = 1 + (int)(rp_test_rng_next(&rng) % 4);
        for (int e = 0; e < edits; e++) {
            size_t pos = rp_test_rng_next(&rng) % (sizeof base - 1);
            buf[pos] = alphabet[rp_test_rng_next(&rng) % (sizeof alphabet - 1)];
        }
        rp_tmpl *t = NULL;
        if (rp_tmpl_compile(buf, sizeof base - 1, &t) != RP_OK) continue;
        compiled++;
        char *out = NULL;
        rp_tmpl_opts o = {.max_iters = 10000, .max_output = 1 << 16, .max_memory = 8 << 20};
        if (rp_tmpl_render(t, ctx, &o, &out, NULL) == RP_OK) rendered++;
        free(out);
        rp_tmpl_free(t);
    }
    print_message("mutations: %d compiled, %d rendered\n", compiled, rendered);
    assert_true(compiled > 0);
    json_decref(ctx);
}

static void test_builtins_and_files(void **state) {
    (void)state;
    rp_chat_tmpl *t = NULL;
    assert_int_equal(rp_chat_tmpl_open("qwen3", &t), RP_OK);
    assert_string_equal(rp_chat_tmpl_name(t), "qwen3");
    assert_int_equal(rp_chat_tmpl_family(t), RP_CHAT_CHATML);
    rp_chat_tmpl_free(t);
    /* an unknown name that is no file either: a clear error listing the built-ins */
    assert_int_equal(rp_chat_tmpl_open("gemma9", &t), RP_ERR_INVALID_ARG);
    assert_non_null(strstr(rp_last_error(), "not a built-in (llama3, chatml, qwen3, llama2)"));
    /* a template file that fails even on one message is refused when opened, naming the file and the line */
    char path[1024];
    snprintf(path, sizeof path, "%s/bad.jinja", rp_test_tmpdir());
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("{% for m in messages %}\n{{ m.content + 1 }}{% endfor %}", f);
    fclose(f);
    assert_int_equal(rp_chat_tmpl_open(path, &t), RP_ERR_FORMAT);
    assert_non_null(strstr(rp_last_error(), "bad.jinja"));
    assert_non_null(strstr(rp_last_error(), "line 2 column"));
    /* a good file renders; a template that needs arguments as text gets them as text */
    f = fopen(path, "w");
    fputs("{% for m in messages %}{{ m.role }}:{{ m.content or '' }}{% for c in m.tool_calls %}"
          "{{ c.function.name + '(' + c.function.arguments + ')' }}{% endfor %}\n{% endfor %}", f);
    fclose(f);
    assert_int_equal(rp_chat_tmpl_open(path, &t), RP_OK);
    rp_tool_call call = {.name = "get", .arguments = "{\"a\": 1}"};
    rp_chat_msg msgs[] = {{.role = "user", .content = "q"}, {.role = "assistant", .tool_calls = &call, .n_tool_calls = 1}};
    char *out = NULL;
    assert_int_equal(rp_chat_tmpl_render(t, msgs, 2, NULL, &out), RP_OK);
    assert_string_equal(out, "user:qassistant:get({\"a\": 1})");   /* trim_blocks ate the newlines */
    free(out);
    rp_chat_tmpl_free(t);
}

/* A template without a system role (Gemma 2's raises on one) gets the system prompt in the first user turn. */
static void test_system_folded(void **state) {
    (void)state;
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/data/templates/gemma2-style.jinja", RP_SOURCE_DIR);
    rp_chat_tmpl *t = NULL;
    assert_int_equal(rp_chat_tmpl_open(path, &t), RP_OK);
    const rp_chat_msg msgs[] = {{.role = "system", .content = "Be brief."}, {.role = "user", .content = "Hi"}};
    const rp_chat_opts o = {.add_generation_prompt = true, .bos_text = "<s>"};
    char *out = NULL;
    assert_int_equal(rp_chat_tmpl_render(t, msgs, 2, &o, &out), RP_OK);
    assert_string_equal(out, "<s><turn>user\nBe brief.\n\nHi<end_turn>\n<turn>model\n");
    free(out);
    /* an error every shape gives is reported as the first one */
    const rp_chat_msg two[] = {{.role = "user", .content = "a"}, {.role = "user", .content = "b"}};
    assert_int_equal(rp_chat_tmpl_render(t, two, 2, &o, &out), RP_ERR_INVALID_ARG);
    assert_non_null(strstr(rp_last_error(), "Roles must alternate"));
    rp_chat_tmpl_free(t);
}

/* Whether a template shows the tools it is given decides the server's tool prompt (a template that ignores
 * them gets the generic tool instructions instead). */
static void test_tool_support(void **state) {
    (void)state;
    static const struct { const char *file; bool tools; rp_chat_format family; } cases[] = {
        {"qwen25-style", true, RP_CHAT_UNKNOWN}, {"mistral-style", true, RP_CHAT_LLAMA2},   /* [INST]: the family rp_chat_detect names */
        {"gemma-style", false, RP_CHAT_UNKNOWN}, {"phi3-style", false, RP_CHAT_UNKNOWN},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/tests/data/templates/%s.jinja", RP_SOURCE_DIR, cases[i].file);
        rp_chat_tmpl *t = NULL;
        assert_int_equal(rp_chat_tmpl_open(path, &t), RP_OK);
        assert_int_equal(rp_chat_tmpl_supports_tools(t), cases[i].tools);
        assert_int_equal(rp_chat_tmpl_family(t), cases[i].family);
        rp_chat_tmpl_free(t);
    }
    rp_chat_tmpl *t = NULL;
    assert_int_equal(rp_chat_tmpl_builtin("llama3", &t), RP_OK);
    assert_true(rp_chat_tmpl_supports_tools(t));
    rp_chat_tmpl_free(t);
    assert_int_equal(rp_chat_tmpl_builtin("llama2", &t), RP_OK);
    assert_false(rp_chat_tmpl_supports_tools(t));
    rp_chat_tmpl_free(t);
}

/* The public API: a vocab model's own template (Qwen3's real one) renders as the jinja2 reference did; a
 * --chat-template file replaces it; a bad one is refused and the old template kept. Before this change an
 * unrecognized template could not be used at all (a silent "User: ... Assistant:" fallback in chat). */
static void test_model_template(void **state) {
    (void)state;
    const char *p = rp_test_shared("models/vocab/qwen3-bpe.vocab.gguf");
    RP_REQUIRE_SHARED(p, "models/vocab/qwen3-bpe.vocab.gguf");
    rp_model_params mp = rp_model_default_params();
    mp.vocab_only = true;
    rp_model *m = NULL;
    assert_int_equal(rp_model_load(p, mp, &m), RP_OK);
    assert_int_equal(rp_chat_template_check(m), RP_OK);
    assert_string_equal(rp_chat_template_name(m), "gguf");
    const rp_chat_message msgs[] = {{.role = "system", .content = "S"}, {.role = "user", .content = "Hi"}};
    char buf[1024];
    size_t len;
    assert_int_equal(rp_chat_render(m, msgs, 2, NULL, true, buf, sizeof buf, &len), RP_OK);
    /* enable_thinking not given: the template's own default (Qwen3 thinks: no empty think block) */
    assert_string_equal(buf, "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    const rp_chat_vars off = {.enable_thinking = 0};
    assert_int_equal(rp_chat_render_vars(m, msgs, 2, NULL, true, &off, buf, sizeof buf, &len), RP_OK);
    assert_string_equal(buf, "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
                             "<think>\n\n</think>\n\n");
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/data/templates/gemma-style.jinja", RP_SOURCE_DIR);
    assert_int_equal(rp_chat_template_set(m, path), RP_OK);
    assert_string_equal(rp_chat_template_name(m), "file");
    const rp_chat_message u[] = {{.role = "user", .content = " Hi "}};
    assert_int_equal(rp_chat_render(m, u, 1, NULL, true, buf, sizeof buf, &len), RP_OK);
    /* bos_token is the vocabulary's text (Qwen3 adds no BOS itself, so it stays) */
    assert_string_equal(buf, "<|endoftext|><turn>user\nHi<end_turn>\n<turn>model\n");
    /* the template's own error reaches the caller */
    assert_int_equal(rp_chat_render(m, msgs, 2, NULL, true, buf, sizeof buf, &len), RP_OK);   /* system folded in */
    const rp_chat_message bad[] = {{.role = "assistant", .content = "x"}};
    assert_int_equal(rp_chat_render(m, bad, 1, NULL, true, buf, sizeof buf, &len), RP_ERR_INVALID_ARG);
    assert_non_null(strstr(rp_last_error(), "Turns must go user, assistant"));
    assert_int_equal(rp_chat_template_set(m, "no-such-template"), RP_ERR_INVALID_ARG);
    assert_string_equal(rp_chat_template_name(m), "file");   /* kept */
    assert_int_equal(rp_chat_template_set(m, "llama3"), RP_OK);
    assert_string_equal(rp_chat_template_name(m), "llama3");
    assert_int_equal(rp_chat_template_set(m, NULL), RP_OK);
    assert_string_equal(rp_chat_template_name(m), "gguf");
    rp_model_free(m);
}

/* Llama 3's vocabulary adds BOS when tokenizing: the template's leading <|begin_of_text|> is dropped. */
static void test_model_template_bos(void **state) {
    (void)state;
    const char *p = rp_test_shared("models/vocab/llama3-bpe.vocab.gguf");
    RP_REQUIRE_SHARED(p, "models/vocab/llama3-bpe.vocab.gguf");
    rp_model_params mp = rp_model_default_params();
    mp.vocab_only = true;
    rp_model *m = NULL;
    assert_int_equal(rp_model_load(p, mp, &m), RP_OK);
    const rp_chat_message msgs[] = {{.role = "user", .content = "Hello!"}};
    char buf[512];
    size_t len;
    assert_int_equal(rp_chat_render(m, msgs, 1, NULL, true, buf, sizeof buf, &len), RP_OK);
    assert_string_equal(buf, "<|start_header_id|>user<|end_header_id|>\n\nHello!<|eot_id|>"
                             "<|start_header_id|>assistant<|end_header_id|>\n\n");
    rp_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_expressions),
        cmocka_unit_test(test_statements),
        cmocka_unit_test(test_filters_tests_methods),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_limits),
        cmocka_unit_test(test_garbage_never_crashes),
        cmocka_unit_test(test_builtins_and_files),
        cmocka_unit_test(test_system_folded),
        cmocka_unit_test(test_tool_support),
        cmocka_unit_test(test_model_template),
        cmocka_unit_test(test_model_template_bos),
    };
    return rp_test_main(tests, NULL, NULL);
}
