/* test_toolcall_formats.c — tool calls out of hand-written replies in every format the parser knows (Qwen/Hermes
 * <tool_call>, Llama 3 JSON and <|python_tag|>, Mistral [TOOL_CALLS] array and name[ARGS]{...}, no format),
 * malformed JSON left as content, several calls, every prefix of a reply (a streamed reply cut at each byte: a
 * prefix never yields a call the whole reply lacks), and the format found from a template's text. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reprise.h"
#include "testutil.h"
#include "tokenizer/chat.h"   /* rp_chat_has_tool_call, rp_chat_tool_call_closed (the agent loop's hooks) */

typedef struct {
    rp_chat_format f;
    const char *text;
    int n;                  /* calls expected */
    const char *name0, *args0, *name1;
    const char *content;    /* content left */
} fcase;

static const fcase k_cases[] = {
        {RP_CHAT_CHATML, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>", 1,
         "get_weather", "{\"city\":\"Paris\"}", NULL, ""},
        /* Hermes 2 Pro writes the same block, often after some words */
        {RP_CHAT_CHATML, "Let me check.\n<tool_call>\n{\"arguments\": {\"q\": 1}, \"name\": \"search\"}\n</tool_call>\n"
                         "<tool_call>\n{\"name\": \"clock\", \"arguments\": {}}\n</tool_call>", 2,
         "search", "{\"q\":1}", "clock", "Let me check."},
        {RP_CHAT_CHATML, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": }\n</tool_call>", 0, NULL, NULL, NULL,
         "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": }\n</tool_call>"},
        {RP_CHAT_LLAMA3, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}", 1, "get_weather",
         "{\"city\":\"Paris\"}", NULL, ""},
        {RP_CHAT_LLAMA3, "<|python_tag|>{\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", \"parameters\": {\"x\": [1]}}",
         2, "a", "{}", "b", ""},
        {RP_CHAT_LLAMA3, "{\"name\": \"a\", \"parameters\": {\"x\": 1}", 0, NULL, NULL, NULL,
         "{\"name\": \"a\", \"parameters\": {\"x\": 1}"},
        {RP_CHAT_MISTRAL, "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}, "
                          "{\"name\": \"clock\", \"arguments\": {}}]", 2, "get_weather", "{\"city\":\"Paris\"}", "clock", ""},
        {RP_CHAT_MISTRAL, "Sure.[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}[TOOL_CALLS]clock[ARGS]{}", 2,
         "get_weather", "{\"city\":\"Paris\"}", "clock", "Sure."},
        {RP_CHAT_MISTRAL, "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {\"a\": 1}]", 0, NULL, NULL, NULL,
         "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {\"a\": 1}]"},
        {RP_CHAT_MISTRAL, "[TOOL_CALLS][{\"arguments\": {}}]", 0, NULL, NULL, NULL, "[TOOL_CALLS][{\"arguments\": {}}]"},
        {RP_CHAT_MISTRAL, "No tools needed.", 0, NULL, NULL, NULL, "No tools needed."},
        /* no format: nothing is a call */
        {RP_CHAT_UNKNOWN, "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>", 0, NULL, NULL, NULL,
         "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>"},
};

static void test_formats(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof k_cases / sizeof k_cases[0]; i++) {
        const fcase *c = &k_cases[i];
        rp_tool_call *calls = NULL;
        size_t n = 0;
        char *content = NULL;
        assert_int_equal(rp_chat_parse_tool_calls(c->f, c->text, &calls, &n, &content), RP_OK);
        if ((int)n != c->n) print_message("case %zu: %zu calls\n", i, n);
        assert_int_equal((int)n, c->n);
        if (n > 0) {
            assert_string_equal(calls[0].name, c->name0);
            assert_string_equal(calls[0].arguments, c->args0);
            assert_non_null(strstr(calls[0].id, "call_"));
            assert_int_equal(rp_tool_call_check(NULL, &calls[0], NULL, 0), RP_OK);   /* arguments: a JSON object */
        }
        if (n > 1) assert_string_equal(calls[1].name, c->name1);
        assert_string_equal(content, c->content);
        rp_tool_calls_free(calls, n);
        free(content);
    }
}

/* Every prefix (the reply streamed and cut at each byte): parsing never fails, never finds more calls than the
 * whole reply, and a prefix's calls are the whole reply's first ones. */
static void test_every_prefix(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof k_cases / sizeof k_cases[0]; i++) {
        const fcase *c = &k_cases[i];
        const size_t len = strlen(c->text);
        for (size_t cut = 0; cut <= len; cut++) {
            char *pre = strndup(c->text, cut);
            rp_tool_call *calls = NULL;
            size_t n = 0;
            char *content = NULL;
            assert_int_equal(rp_chat_parse_tool_calls(c->f, pre, &calls, &n, &content), RP_OK);
            assert_true((int)n <= c->n);
            if (n > 0) assert_string_equal(calls[0].name, c->name0);
            if (n == 0) assert_string_equal(content, pre);   /* nothing taken: all of it is content */
            if (cut == len && c->n > 0) {
                assert_true(rp_chat_has_tool_call(c->f, pre));
            }
            rp_tool_calls_free(calls, n);
            free(content);
            free(pre);
        }
    }
}

/* The Mistral agent-loop hooks: a call is open once [TOOL_CALLS] is there, closed when its bracket arrives. */
static void test_mistral_closed(void **state) {
    (void)state;
    const char *t = "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {\"a\": 1}}]";
    const int32_t len = (int32_t)strlen(t);
    assert_true(rp_chat_has_tool_call(RP_CHAT_MISTRAL, t));
    assert_false(rp_chat_has_tool_call(RP_CHAT_MISTRAL, "plain"));
    for (int32_t l = 1; l < len; l++)
        if (rp_chat_tool_call_closed(RP_CHAT_MISTRAL, t, l, 1)) fail_msg("closed at %d of %d", l, len);
    assert_true(rp_chat_tool_call_closed(RP_CHAT_MISTRAL, t, len, 1));
}

/* The format comes from the template's text: [TOOL_CALLS] is Mistral (its [INST] is not Llama 2's). */
static void test_detect_from_template(void **state) {
    (void)state;
    RP_OPEN_STORIES(m);
    static const struct { const char *src; rp_chat_format f; const char *name; } k[] = {
            {"{% for m in messages %}[INST]{{ m.content }}[/INST]{% endfor %}"
             "{% if tools %}[AVAILABLE_TOOLS]{{ tools | tojson }}[/AVAILABLE_TOOLS]{% endif %}"
             "{% if m is defined and m.tool_calls %}[TOOL_CALLS]{% endif %}", RP_CHAT_MISTRAL, "mistral"},
            {"{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}", RP_CHAT_CHATML,
             "chatml"},
            {"{% for m in messages %}[INST] {{ m.content }} [/INST]{% endfor %}", RP_CHAT_LLAMA2, "llama2"},
    };
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        char path[512];
        snprintf(path, sizeof path, "%s/t%zu.jinja", rp_test_tmpdir(), i);
        FILE *f = fopen(path, "w");
        assert_non_null(f);
        fputs(k[i].src, f);
        fclose(f);
        assert_int_equal(rp_chat_template_set(m, path), RP_OK);
        assert_int_equal(rp_model_chat_format(m), k[i].f);
        assert_string_equal(rp_chat_format_name(rp_model_chat_format(m)), k[i].name);
    }
    const rp_chat_message msgs[] = {{.role = "user", .content = "x"}};
    char buf[64];
    size_t len;
    assert_int_not_equal(rp_chat_render_format(RP_CHAT_MISTRAL, msgs, 1, NULL, true, buf, sizeof buf, &len), RP_OK);
    rp_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_formats),
            cmocka_unit_test(test_every_prefix),
            cmocka_unit_test(test_mistral_closed),
            cmocka_unit_test(test_detect_from_template),
    };
    return rp_test_main(tests, NULL, NULL);
}
