/* test_server_reasoning.c — the server's reasoning and tool-call reply path: request fields (enable_thinking,
 * chat_template_kwargs, reasoning_effort, reasoning_format), the reply built from generated text grown one byte
 * at a time (reasoning and content streamed apart, tool calls after a think block), and end to end on the test
 * model with DeepSeek-R1's template (its generation prompt opens the think block): message.reasoning_content and
 * delta.reasoning_content in OpenAI's shape. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "server/gen.h"
#include "server/request.h"
#include "srvtest.h"

static void test_request_fields(void **state) {
    (void)state;
    rp_srv_limits lim = rp_srv_default_limits(512);
    rp_srv_request r;
    rp_api_error e;
    const char *ok = "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"enable_thinking\":true,"
                     "\"chat_template_kwargs\":{\"enable_thinking\":false,\"x\":1},\"reasoning_effort\":\"low\","
                     "\"reasoning_format\":\"none\"}";
    assert_int_equal(rp_srv_parse_request(RP_EP_CHAT, ok, strlen(ok), &lim, &r, &e), RP_OK);
    assert_int_equal(r.enable_thinking, 0);   /* chat_template_kwargs wins, as in llama-server */
    assert_string_equal(r.reasoning_effort, "low");
    assert_true(r.reasoning_raw);
    assert_non_null(strstr(r.template_kwargs, "\"x\":1"));
    rp_srv_request_free(&r);
    const char *plain = "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}";
    assert_int_equal(rp_srv_parse_request(RP_EP_CHAT, plain, strlen(plain), &lim, &r, &e), RP_OK);
    assert_int_equal(r.enable_thinking, -1);
    assert_false(r.reasoning_raw);
    rp_srv_request_free(&r);
    const char *bad[] = {
            "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"enable_thinking\":\"yes\"}",
            "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"chat_template_kwargs\":[]}",
            "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"reasoning_effort\":\"max\"}",
            "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"reasoning_format\":3}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(rp_srv_parse_request(RP_EP_CHAT, bad[i], strlen(bad[i]), &lim, &r, &e), RP_ERR_INVALID_ARG);
        assert_int_equal(e.http, 400);
    }
}

typedef struct {
    char reasoning[512], content[512];
} streamed;

/* Grows the generated text to text[0..n) byte by byte (the fuzz target's way of feeding text without a model),
 * streaming as call.c does; then the reply. */
static void run_gen(const rp_srv_text *t, const char *text, streamed *out, rp_srv_reply *rep) {
    rp_srv_request r;
    memset(&r, 0, sizeof r);
    r.ep = RP_EP_CHAT;
    rp_srv_gen g;
    assert_int_equal(rp_srv_gen_init(&g, NULL, &r, t), RP_OK);
    memset(out, 0, sizeof *out);
    const size_t n = strlen(text);
    for (size_t len = 1; len <= n; len++) {
        memcpy(g.text, text, len);   /* cap 256 >= every case here */
        g.text[len] = '\0';
        g.len = len;
        size_t a, b;
        rp_srv_gen_reasoning_stream(&g, &a, &b);
        strncat(out->reasoning, g.text + a, b - a);
        g.r_emitted = b;
        size_t end = rp_srv_gen_stream_end(&g);
        assert_true(end >= g.emitted);
        strncat(out->content, g.text + g.emitted, end - g.emitted);
        g.emitted = end;
    }
    assert_int_equal(rp_srv_gen_flush(&g), RP_OK);
    assert_int_equal(rp_srv_gen_reply(&g, RP_JOB_EOG, rep), RP_OK);
    rp_srv_gen_free(&g);
}

static void test_gen_reasoning_then_content(void **state) {
    (void)state;
    rp_srv_text t;
    memset(&t, 0, sizeof t);
    t.reasoning = true;
    streamed s;
    rp_srv_reply rep;
    run_gen(&t, "<think>\nThe user greets me.\n</think>\n\nHello there!", &s, &rep);
    assert_string_equal(rep.reasoning, "The user greets me.");
    assert_string_equal(rep.content, "Hello there!");
    assert_string_equal(s.content, "Hello there!");
    assert_string_equal(s.reasoning, "The user greets me.\n");   /* streamed before the close tag decided */
    assert_string_equal(rep.finish_reason, "stop");
    rp_srv_reply_free(&rep);
    /* the prompt opened the block (DeepSeek-R1) */
    t.think_started = true;
    run_gen(&t, "Short thought.</think>Answer.", &s, &rep);
    assert_string_equal(rep.reasoning, "Short thought.");
    assert_string_equal(rep.content, "Answer.");
    assert_string_equal(s.reasoning, "Short thought.");
    assert_string_equal(s.content, "Answer.");
    rp_srv_reply_free(&rep);
    /* reasoning_format none: the block stays in the content */
    t.reasoning = false;
    t.think_started = false;
    run_gen(&t, "<think>x</think>y", &s, &rep);
    assert_null(rep.reasoning);
    assert_string_equal(rep.content, "<think>x</think>y");
    assert_string_equal(s.content, "<think>x</think>y");
    rp_srv_reply_free(&rep);
}

/* Qwen3: a think block, then tool calls; a <tool_call> inside the thinking is not a call. */
static void test_gen_reasoning_then_tool_calls(void **state) {
    (void)state;
    rp_srv_text t;
    memset(&t, 0, sizeof t);
    t.reasoning = true;
    t.tools_active = true;
    t.parse_fmt = RP_CHAT_CHATML;
    streamed s;
    rp_srv_reply rep;
    run_gen(&t,
            "<think>I should use <tool_call> for the weather.</think>\n\n"
            "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n"
            "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>",
            &s, &rep);
    assert_string_equal(rep.reasoning, "I should use <tool_call> for the weather.");
    assert_string_equal(s.reasoning, "I should use <tool_call> for the weather.");
    assert_int_equal(rep.n_calls, 2);
    assert_string_equal(rep.calls[0].name, "get_weather");
    assert_string_equal(rep.calls[0].arguments, "{\"city\":\"Paris\"}");
    assert_string_equal(rep.calls[1].name, "get_time");
    assert_string_equal(rep.finish_reason, "tool_calls");
    assert_string_equal(s.content, "");   /* nothing of a call was streamed as content */
    rp_srv_reply_free(&rep);
}

/* Calls that do not fit the request's tools stay content, with the reason; ones that fit come back as calls. */
static void test_gen_calls_checked_against_tools(void **state) {
    (void)state;
    rp_srv_text t;
    memset(&t, 0, sizeof t);
    t.reasoning = true;
    t.tools_active = true;
    t.parse_fmt = RP_CHAT_CHATML;
    const char *tools = "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":"
                        "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}},\"required\":[\"city\"]}}}]";
    rp_srv_request r;
    memset(&r, 0, sizeof r);
    r.tools_json = (char *)tools;
    static const char *replies[] = {
            "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"town\": \"Paris\"}}\n</tool_call>",
            "<tool_call>\n{\"name\": \"get_news\", \"arguments\": {}}\n</tool_call>",
            "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
    };
    for (int i = 0; i < 3; i++) {
        rp_srv_gen g;
        assert_int_equal(rp_srv_gen_init(&g, NULL, &r, &t), RP_OK);
        free(g.text);
        g.text = strdup(replies[i]);
        g.len = strlen(replies[i]);
        g.cap = g.len + 1;
        rp_srv_reply rep;
        assert_int_equal(rp_srv_gen_flush(&g), RP_OK);
        assert_int_equal(rp_srv_gen_reply(&g, RP_JOB_EOG, &rep), RP_OK);
        if (i < 2) {
            assert_int_equal(rep.n_calls, 0);
            assert_string_equal(rep.content, replies[i]);
            assert_string_equal(rep.finish_reason, "stop");
            assert_non_null(strstr(rep.why, i == 0 ? "required key \"city\"" : "no tool is named"));
        } else {
            assert_int_equal(rep.n_calls, 1);
            assert_string_equal(rep.why, "");
        }
        rp_srv_reply_free(&rep);
        rp_srv_gen_free(&g);
    }
}

/* Llama 3 JSON calls, grown byte by byte: nothing streamed as content, two calls at the end. */
static void test_gen_llama3_calls_streamed(void **state) {
    (void)state;
    rp_srv_text t;
    memset(&t, 0, sizeof t);
    t.reasoning = true;
    t.tools_active = true;
    t.parse_fmt = RP_CHAT_LLAMA3;
    streamed s;
    rp_srv_reply rep;
    run_gen(&t, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}; "
                "{\"name\": \"get_time\", \"parameters\": {}}", &s, &rep);
    assert_int_equal(rep.n_calls, 2);
    assert_string_equal(rep.calls[0].name, "get_weather");
    assert_string_equal(rep.calls[1].name, "get_time");
    assert_string_equal(s.content, "");
    assert_string_equal(s.reasoning, "");
    rp_srv_reply_free(&rep);
    /* plain text with tools on streams as content */
    run_gen(&t, "It is sunny.", &s, &rep);
    assert_int_equal(rep.n_calls, 0);
    assert_string_equal(s.content, "It is sunny.");
    rp_srv_reply_free(&rep);
}

/* Mistral, grown byte by byte: the words before [TOOL_CALLS] stream as content, the call does not. */
static void test_gen_mistral_calls_streamed(void **state) {
    (void)state;
    rp_srv_text t;
    memset(&t, 0, sizeof t);
    t.reasoning = true;
    t.tools_active = true;
    t.parse_fmt = RP_CHAT_MISTRAL;
    streamed s;
    rp_srv_reply rep;
    run_gen(&t, "Checking. [TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}]", &s, &rep);
    assert_int_equal(rep.n_calls, 1);
    assert_string_equal(rep.calls[0].name, "get_weather");
    assert_string_equal(rep.content, "Checking.");
    assert_string_equal(s.content, "Checking. ");
    assert_string_equal(rep.finish_reason, "tool_calls");
    rp_srv_reply_free(&rep);
}

static const char *g_tmpl;
static void use_r1(rp_server_config *c) { c->backend.chat_template = g_tmpl; }

static int sse(const char *body, char **ev, int cap) {
    int n = 0;
    for (const char *p = body; *p;) {
        assert_true(strncmp(p, "data: ", 6) == 0);
        const char *end = strstr(p, "\n\n");
        assert_non_null(end);
        if (n < cap) ev[n++] = strndup(p + 6, (size_t)(end - p - 6));
        p = end + 2;
    }
    return n;
}

/* End to end: the R1 template's prompt ends in "<think>\n", so the whole (random) reply is thinking. */
static void test_server_reasoning_content(void **state) {
    (void)state;
    const char *rel = "models/templates/deepseek-r1-distill-qwen.jinja";
    g_tmpl = rp_test_shared(rel);
    RP_REQUIRE_SHARED(g_tmpl, rel);
    fixture f;
    if (!start(&f, use_r1)) RP_SKIP("%s missing\n", SRVTEST_MODEL);
    const char *base = "{\"messages\":[{\"role\":\"user\",\"content\":\"Tom had a red ball\"}],\"max_tokens\":12,"
                       "\"temperature\":0";
    char body[512];
    snprintf(body, sizeof body, "%s}", base);
    resp whole = post(f.port, "/v1/chat/completions", body);
    assert_int_equal(whole.status, 200);
    json_t *wj = parse(&whole);
    json_t *msg = json_object_get(json_array_get(json_object_get(wj, "choices"), 0), "message");
    const char *reasoning = json_string_value(json_object_get(msg, "reasoning_content"));
    assert_non_null(reasoning);
    assert_true(strlen(reasoning) > 0);
    assert_string_equal(json_string_value(json_object_get(msg, "content")), "");
    /* streamed: delta.reasoning_content chunks add up to the same thinking, no content deltas */
    snprintf(body, sizeof body, "%s,\"stream\":true}", base);
    resp st = post(f.port, "/v1/chat/completions", body);
    assert_int_equal(st.status, 200);
    char *ev[256];
    int n = sse(st.body, ev, 256);
    char acc[4096] = "";
    int n_reasoning = 0;
    for (int i = 0; i < n; i++) {
        if (!strcmp(ev[i], "[DONE]")) continue;
        json_t *c = json_loads(ev[i], 0, NULL);
        assert_non_null(c);
        json_t *d = json_object_get(json_array_get(json_object_get(c, "choices"), 0), "delta");
        json_t *rc = json_object_get(d, "reasoning_content");
        if (rc) {
            n_reasoning++;
            strncat(acc, json_string_value(rc), sizeof acc - strlen(acc) - 1);
        }
        json_t *ct = json_object_get(d, "content");
        if (ct && !json_object_get(d, "role")) assert_string_equal(json_string_value(ct), "");
        json_decref(c);
        free(ev[i]);
    }
    assert_true(n_reasoning > 0);
    size_t al = strlen(acc);
    while (al > 0 && (acc[al - 1] == ' ' || acc[al - 1] == '\n')) acc[--al] = '\0';
    assert_string_equal(acc, reasoning);
    /* reasoning_format none: the thinking stays in the content */
    snprintf(body, sizeof body, "%s,\"reasoning_format\":\"none\"}", base);
    resp raw = post(f.port, "/v1/chat/completions", body);
    json_t *rj = parse(&raw);
    json_t *rmsg = json_object_get(json_array_get(json_object_get(rj, "choices"), 0), "message");
    assert_null(json_object_get(rmsg, "reasoning_content"));
    assert_true(strlen(json_string_value(json_object_get(rmsg, "content"))) > 0);
    json_decref(rj);
    resp_free(&raw);
    resp_free(&st);
    json_decref(wj);
    resp_free(&whole);
    stop(&f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_request_fields),
            cmocka_unit_test(test_gen_reasoning_then_content),
            cmocka_unit_test(test_gen_reasoning_then_tool_calls),
            cmocka_unit_test(test_gen_calls_checked_against_tools),
            cmocka_unit_test(test_gen_llama3_calls_streamed),
            cmocka_unit_test(test_gen_mistral_calls_streamed),
            cmocka_unit_test(test_server_reasoning_content),
    };
    return rp_test_main(tests, NULL, NULL);
}
