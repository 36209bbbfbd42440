/* test_server.c — the OpenAI-compatible server in-process on an ephemeral loopback port, driven with raw HTTP. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <jansson.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "model/model.h"
#include "server/json_limits.h"
#include "server/json_prefix.h"
#include "server/prompt.h"
#include "server/request.h"
#include "server/server.h"
#include "srvtest.h"
#include "tokenizer/chat_template.h"
#include "testutil.h"

#define MODEL_REL SRVTEST_MODEL

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ------------------------------------------------------------ fixtures */

static fixture g_main;   /* core backend, no key */

#define NEED_MAIN()                                                 \
    do {                                                            \
        if (!g_main.srv) RP_SKIP("../shared/%s not found\n", MODEL_REL); \
    } while (0)

static int group_setup(void **state) {
    signal(SIGPIPE, SIG_IGN);
    if (rp_test_shared(MODEL_REL)) start(&g_main, NULL);
    return 0;
}

static int group_teardown(void **state) {
    if (g_main.srv) stop(&g_main);
    return 0;
}

static const char *k_user_msg = "{\"role\":\"user\",\"content\":\"Once upon a time there was a dog\"}";

/* ------------------------------------------------------------ pure parsing (no model) */

static void test_request_parsing(void **state) {
    rp_srv_limits lim = rp_srv_default_limits(512);
    rp_srv_request r;
    rp_api_error e;
    const char *ok = "{\"model\":\"m\",\"messages\":[{\"role\":\"developer\",\"content\":\"be brief\"},"
                     "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},{\"type\":\"text\",\"text\":\"b\"}]},"
                     "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\","
                     "\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"x\\\":1}\"}}]},"
                     "{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"42\"}],"
                     "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{}}}],"
                     "\"tool_choice\":\"required\",\"stop\":[\"x\",\"\"],\"seed\":7,\"max_completion_tokens\":9,"
                     "\"presence_penalty\":0.5,\"frequency_penalty\":-1.25,"
                     "\"reprise_cache\":{\"mode\":\"prefix\",\"recompute_ratio\":0.5,\"persist\":false},"
                     "\"reprise_documents\":[\"doc one\",\"doc two\"],\"reprise_session\":\"new\"}";
    assert_int_equal(rp_srv_parse_request(RP_EP_CHAT, ok, strlen(ok), &lim, &r, &e), RP_OK);
    assert_int_equal(r.n_msgs, 4);
    assert_string_equal(r.msgs[0].role, "system");
    assert_string_equal(r.msgs[1].content, "a\nb");
    assert_int_equal(r.msgs[2].n_tool_calls, 1);
    assert_string_equal(r.msgs[2].tool_calls[0].name, "f");
    assert_string_equal(r.msgs[3].tool_call_id, "c1");
    assert_int_equal(r.tool_choice, RP_TOOL_CHOICE_REQUIRED);
    assert_int_equal(r.n_stop, 1);
    assert_int_equal(r.max_tokens, 9);
    assert_int_equal(r.cache_mode, 1);
    assert_false(r.cache_persist);
    assert_int_equal(r.n_docs, 2);
    assert_int_equal(r.session, RP_SRV_SESSION_NEW);
    assert_true(r.presence_penalty == 0.5f && r.frequency_penalty == -1.25f);
    rp_srv_request_free(&r);

    static const struct { const char *body; const char *param; } bad[] = {
        {"[]", NULL},
        {"{\"messages\":{}}", "messages"},
        {"{\"messages\":[{\"role\":\"wizard\",\"content\":\"x\"}]}", "messages[0].role"},
        {"{\"messages\":[{\"role\":\"user\"}]}", "messages[0].content"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"temperature\":\"hot\"}", "temperature"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"temperature\":3}", "temperature"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"n\":17}", "n"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"n\":0}", "n"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"frequency_penalty\":2.5}", "frequency_penalty"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"presence_penalty\":\"high\"}", "presence_penalty"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\"]}", "stop"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\"}]}]}", "messages[0].content"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tool_choice\":\"required\"}", "tool_choice"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"reprise_session\":\"XYZ\"}", "reprise_session"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"reprise_cache\":{\"mode\":\"fast\"}}", "reprise_cache.mode"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logprobs\":1}", "logprobs"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"top_logprobs\":3}", "top_logprobs"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logprobs\":true,\"top_logprobs\":21}", "top_logprobs"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"a\\u0000b\"}]}", NULL},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        memset(&e, 0, sizeof e);
        rp_status st = rp_srv_parse_request(RP_EP_CHAT, bad[i].body, strlen(bad[i].body), &lim, &r, &e);
        if (st == RP_OK) print_message("accepted: %s\n", bad[i].body);
        assert_int_not_equal(st, RP_OK);
        assert_int_equal(e.http, 400);
        if (bad[i].param) assert_string_equal(e.param, bad[i].param);
    }
    /* limits: depth and value count are refused before jansson allocates */
    char deep[400];
    int n = 0;
    for (int i = 0; i < 100; i++) deep[n++] = '[';
    for (int i = 0; i < 100; i++) deep[n++] = ']';
    rp_json_limits jl = {.max_bytes = 1 << 20, .max_depth = 64, .max_values = 1000};
    assert_int_equal(rp_json_check_limits(deep, (size_t)n, &jl), RP_ERR_RANGE);
    const char *many = "[1,2,3,4,5,6,7,8,9,10]";
    jl.max_values = 5;
    assert_int_equal(rp_json_check_limits(many, strlen(many), &jl), RP_ERR_RANGE);
}


/* Documents are placed in the system turn by every chat format, including the
 * templates that trim message content (Llama 3, ChatML, Llama 2): each is its
 * own piece (a KV chunk), and the text around them is intact. */
static void test_render_documents(void **state) {
    (void)state;
    rp_srv_limits lim = rp_srv_default_limits(512);
    const char *body = "{\"messages\":[{\"role\":\"system\",\"content\":\"Answer from the documents.\"},"
                       "{\"role\":\"user\",\"content\":\"Who has a dog?\"}],"
                       "\"reprise_documents\":[\"Tom lives near the river.\",\"Anna has a big brown dog.\"]}";
    const rp_chat_format fmts[] = {RP_CHAT_LLAMA3, RP_CHAT_CHATML, RP_CHAT_LLAMA2, RP_CHAT_UNKNOWN};
    for (size_t f = 0; f < sizeof fmts / sizeof fmts[0]; f++) {
        rp_srv_request r;
        rp_api_error e;
        assert_int_equal(rp_srv_parse_request(RP_EP_CHAT, body, strlen(body), &lim, &r, &e), RP_OK);
        rp_srv_text t;
        rp_model fm = {.chat = fmts[f]};   /* a model with just the built-in template of that format */
        if (fmts[f] != RP_CHAT_UNKNOWN) assert_int_equal(rp_chat_tmpl_builtin(rp_chat_format_name(fmts[f]), &fm.tmpl), RP_OK);
        assert_int_equal(rp_srv_render_chat(&fm, &r, &t, &e), RP_OK);
        rp_chat_tmpl_free(fm.tmpl);
        const char *d1 = strstr(t.text, "Tom lives near the river."), *d2 = strstr(t.text, "Anna has a big brown dog.");
        if (!d1 || !d2) print_message("format %s lost the documents: %s\n", rp_chat_format_name(fmts[f]), t.text);
        assert_non_null(d1);
        assert_non_null(d2);
        assert_true(d1 < d2);
        assert_non_null(strstr(t.text, "Answer from the documents."));
        assert_non_null(strstr(t.text, "Who has a dog?"));
        assert_null(strstr(t.text, "RPDOCS"));   /* the marker is gone */
        /* each document starts a piece of its own */
        int starts = 0;
        for (int i = 0; i < t.n_pieces; i++) {
            starts += t.text + t.cut[i] == d1;
            starts += t.text + t.cut[i] == d2;
        }
        assert_int_equal(starts, 2);
        /* ... and the pieces are the same text in either order (document + separator) */
        for (int i = 0; i + 1 < t.n_pieces; i++)
            if (t.text + t.cut[i] == d1) assert_int_equal(t.cut[i + 1] - t.cut[i], strlen("Tom lives near the river.\n\n"));
        rp_srv_text_free(&t);
        rp_srv_request_free(&r);
    }
}

static void test_json_prefix(void **state) {
    static const struct { const char *s; bool ok, done; const char *close; } cases[] = {
        {"{", true, false, "}"},
        {"{\"a\"", true, false, ": null}"},
        {"{\"a\": [1, tr", true, false, "ue]}"},
        {"{\"a\": \"x\\u00", true, false, "01\"}"},
        {"{\"a\": -", true, false, "0}"},
        {"{\"a\": {\"b\": 1.5e", true, false, "0}}"},
        {"{\"a\": 1}", true, true, ""},
        {"{\"a\": 1} ", false, false, NULL},
        {"[1]", false, false, NULL},
        {"{\"a\": 01}", false, false, NULL},
        {"{\"a\" 1}", false, false, NULL},
        {"{\"a\": 1,}", false, false, NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        rp_json_prefix p;
        rp_jsonp_init(&p);
        bool ok = rp_jsonp_feed(&p, cases[i].s, strlen(cases[i].s));
        if (ok != cases[i].ok) print_message("case %zu: %s\n", i, cases[i].s);
        assert_int_equal(ok, cases[i].ok);
        if (!ok) continue;
        assert_int_equal(rp_jsonp_done(&p), cases[i].done);
        char buf[128];
        rp_jsonp_close(&p, buf, sizeof buf);
        assert_string_equal(buf, cases[i].close);
        /* the closed text is one valid JSON object */
        char full[256];
        snprintf(full, sizeof full, "%s%s", cases[i].s, buf);
        json_t *j = json_loads(full, 0, NULL);
        assert_true(json_is_object(j));
        json_decref(j);
    }
}

/* ------------------------------------------------------------ endpoints */

static void test_health_models(void **state) {
    NEED_MAIN();
    resp r = http(g_main.port, "GET", "/health", NULL, NULL);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body, "\"ok\""));
    resp_free(&r);
    r = http(g_main.port, "GET", "/v1/models", NULL, NULL);
    assert_int_equal(r.status, 200);
    json_t *j = parse(&r);
    assert_string_equal(json_string_value(json_object_get(j, "object")), "list");
    json_t *m0 = json_array_get(json_object_get(j, "data"), 0);
    assert_string_equal(json_string_value(json_object_get(m0, "id")), "stories260K");
    assert_string_equal(json_string_value(json_object_get(m0, "object")), "model");
    json_decref(j);
    resp_free(&r);
    r = http(g_main.port, "GET", "/v1/models/stories260K", NULL, NULL);
    assert_int_equal(r.status, 200);
    resp_free(&r);
    expect_error(g_main.port, "GET", "/v1/models/gpt-4", NULL, NULL, 404, "model_not_found");
}

static json_t *chat(uint16_t port, const char *extra, int want_status) {
    char body[8192];
    snprintf(body, sizeof body, "{\"model\":\"any\",\"messages\":[%s],\"max_tokens\":12,\"temperature\":0%s%s}",
             k_user_msg, extra ? "," : "", extra ? extra : "");
    resp r = post(port, "/v1/chat/completions", body);
    if (r.status != want_status) print_message("status %d: %.400s\n", r.status, r.body);
    assert_int_equal(r.status, want_status);
    json_t *j = parse(&r);
    resp_free(&r);
    return j;
}

static void test_chat_basic(void **state) {
    NEED_MAIN();
    json_t *a = chat(g_main.port, NULL, 200);
    assert_string_equal(json_string_value(json_object_get(a, "object")), "chat.completion");
    assert_non_null(strstr(json_string_value(json_object_get(a, "id")), "chatcmpl-"));
    json_t *ch = json_array_get(json_object_get(a, "choices"), 0);
    json_t *msg = json_object_get(ch, "message");
    assert_string_equal(json_string_value(json_object_get(msg, "role")), "assistant");
    assert_true(json_is_string(json_object_get(msg, "content")));
    const char *fr = json_string_value(json_object_get(ch, "finish_reason"));
    assert_true(!strcmp(fr, "length") || !strcmp(fr, "stop"));
    json_t *u = json_object_get(a, "usage");
    assert_true(jint(u, "prompt_tokens") > 0);
    assert_int_equal(jint(u, "total_tokens"), jint(u, "prompt_tokens") + jint(u, "completion_tokens"));
    assert_true(jint(u, "completion_tokens") <= 12);
    (void)jint(u, "prompt_tokens_details.cached_tokens");
    (void)jint(u, "reprise.reused_prefix");
    (void)jint(u, "reprise.reused_nonprefix");
    (void)jint(u, "reprise.recomputed");
    /* the same request again: greedy gives the same text, and the prompt's KV is reused */
    json_t *b = chat(g_main.port, NULL, 200);
    const char *ca = json_string_value(json_object_get(json_object_get(ch, "message"), "content"));
    const char *cb = json_string_value(json_object_get(json_object_get(json_array_get(json_object_get(b, "choices"), 0), "message"), "content"));
    assert_string_equal(ca, cb);
    json_t *ub = json_object_get(b, "usage");
    assert_true(jint(ub, "prompt_tokens_details.cached_tokens") >= jint(ub, "prompt_tokens") - 1);
    /* reprise_cache mode none: computed from scratch */
    json_t *c = chat(g_main.port, "\"reprise_cache\":{\"mode\":\"none\"}", 200);
    assert_int_equal(jint(json_object_get(c, "usage"), "prompt_tokens_details.cached_tokens"), 0);
    json_decref(a);
    json_decref(b);
    json_decref(c);
}

/* Splits an SSE body into its data payloads; checks the framing. */
static int sse_events(const char *body, char **ev, int cap) {
    int n = 0;
    const char *p = body;
    while (*p) {
        assert_true(strncmp(p, "data: ", 6) == 0);
        const char *end = strstr(p, "\n\n");
        assert_non_null(end);
        if (n < cap) ev[n++] = strndup(p + 6, (size_t)(end - p - 6));
        p = end + 2;
    }
    return n;
}

static void test_stream_framing(void **state) {
    NEED_MAIN();
    const char *base = "{\"messages\":[{\"role\":\"user\",\"content\":\"Tom had a red ball\"}],\"max_tokens\":16,\"temperature\":0";
    char body[1024];
    snprintf(body, sizeof body, "%s}", base);
    resp whole = post(g_main.port, "/v1/chat/completions", body);
    assert_int_equal(whole.status, 200);
    json_t *wj = parse(&whole);
    const char *want = json_string_value(json_object_get(json_object_get(json_array_get(json_object_get(wj, "choices"), 0), "message"), "content"));
    snprintf(body, sizeof body, "%s,\"stream\":true,\"stream_options\":{\"include_usage\":true}}", base);
    resp r = post(g_main.port, "/v1/chat/completions", body);
    assert_int_equal(r.status, 200);
    assert_non_null(strcasestr(r.head, "content-type: text/event-stream"));
    char *ev[256];
    int n = sse_events(r.body, ev, 256);
    assert_true(n >= 4);
    assert_string_equal(ev[n - 1], "[DONE]");
    char text[4096] = "";
    bool saw_role = false, saw_finish = false, saw_usage = false;
    for (int i = 0; i < n - 1; i++) {
        json_t *c = json_loads(ev[i], 0, NULL);
        assert_non_null(c);
        assert_string_equal(json_string_value(json_object_get(c, "object")), "chat.completion.chunk");
        json_t *choices = json_object_get(c, "choices");
        if (json_array_size(choices) == 0) {
            saw_usage = true;
            assert_true(jint(json_object_get(c, "usage"), "completion_tokens") > 0);
        } else {
            json_t *d = json_object_get(json_array_get(choices, 0), "delta");
            if (json_object_get(d, "role")) saw_role = i == 0;
            json_t *ct = json_object_get(d, "content");
            if (json_is_string(ct)) strncat(text, json_string_value(ct), sizeof text - strlen(text) - 1);
            if (json_is_string(json_object_get(json_array_get(choices, 0), "finish_reason"))) saw_finish = true;
        }
        json_decref(c);
    }
    for (int i = 0; i < n; i++) free(ev[i]);
    assert_true(saw_role && saw_finish && saw_usage);
    assert_string_equal(text, want);   /* streamed deltas add up to the non-streamed reply */
    json_decref(wj);
    resp_free(&whole);
    resp_free(&r);
}

/* llama-server's sampling extensions are honoured, not ignored: top_k 1 and min_p 1 leave only the most likely
 * token, so a hot, seeded sample equals the greedy text; bad values are a 400 naming the field. */
static const char *completion_text(const char *body, char *out, size_t cap) {
    resp r = post(g_main.port, "/v1/completions", body);
    assert_int_equal(r.status, 200);
    json_t *j = parse(&r);
    const char *t = json_string_value(json_object_get(json_array_get(json_object_get(j, "choices"), 0), "text"));
    assert_non_null(t);
    snprintf(out, cap, "%s", t);
    json_decref(j);
    resp_free(&r);
    return out;
}

static void test_sampling_extensions(void **state) {
    NEED_MAIN();
    char greedy[512], got[512], body[256];
    completion_text("{\"prompt\":\"Once upon a time\",\"max_tokens\":16,\"temperature\":0}", greedy, sizeof greedy);
    int differs = 0;
    for (int seed = 1; seed <= 3; seed++) {
        snprintf(body, sizeof body,
                 "{\"prompt\":\"Once upon a time\",\"max_tokens\":16,\"temperature\":1.8,\"seed\":%d,\"top_k\":1}", seed);
        assert_string_equal(completion_text(body, got, sizeof got), greedy);
        snprintf(body, sizeof body,
                 "{\"prompt\":\"Once upon a time\",\"max_tokens\":16,\"temperature\":1.8,\"seed\":%d,\"min_p\":1}", seed);
        assert_string_equal(completion_text(body, got, sizeof got), greedy);
        snprintf(body, sizeof body, "{\"prompt\":\"Once upon a time\",\"max_tokens\":16,\"temperature\":1.8,\"seed\":%d}",
                 seed);
        differs += strcmp(completion_text(body, got, sizeof got), greedy) != 0;
    }
    assert_true(differs > 0);   /* without them the same hot samples leave the greedy path */
    /* a strong repeat penalty changes the greedy text of this (repetitive) model */
    completion_text("{\"prompt\":\"Once upon a time\",\"max_tokens\":16,\"temperature\":0,\"repeat_penalty\":50,"
                    "\"repeat_last_n\":64}", got, sizeof got);
    assert_string_not_equal(got, greedy);
    static const char *const bad[][2] = {
        {"{\"prompt\":\"x\",\"top_k\":-1}", "top_k"},
        {"{\"prompt\":\"x\",\"min_p\":2}", "min_p"},
        {"{\"prompt\":\"x\",\"repeat_penalty\":0}", "repeat_penalty"},
        {"{\"prompt\":\"x\",\"repeat_last_n\":\"many\"}", "repeat_last_n"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        resp r = post(g_main.port, "/v1/completions", bad[i][0]);
        assert_int_equal(r.status, 400);
        assert_non_null(strstr(r.body, bad[i][1]));
        resp_free(&r);
    }
}

/* max_tokens beyond what the context leaves (a common client default of 8192 here) is clamped: the reply fills the
 * context and ends with finish_reason "length"; a prompt that does not fit is still a 400 with the numbers. */
static void test_max_tokens_clamped(void **state) {
    NEED_MAIN();
    /* end-of-text banned, so only the context can end it */
    resp r = post(g_main.port, "/v1/completions",
                  "{\"prompt\":\"Once upon a time\",\"max_tokens\":8192,\"temperature\":0,\"logit_bias\":{\"2\":-100}}");
    assert_int_equal(r.status, 200);
    json_t *j = parse(&r);
    json_t *ch = json_array_get(json_object_get(j, "choices"), 0), *u = json_object_get(j, "usage");
    assert_string_equal(json_string_value(json_object_get(ch, "finish_reason")), "length");
    const json_int_t pt = json_integer_value(json_object_get(u, "prompt_tokens"));
    const json_int_t ct = json_integer_value(json_object_get(u, "completion_tokens"));
    print_message("  max_tokens 8192: %lld prompt + %lld completion tokens\n", (long long)pt, (long long)ct);
    assert_true(pt > 0 && pt + ct == 512);   /* the fixture's context: 512 cells */
    json_decref(j);
    resp_free(&r);
    /* the same total on chat */
    r = post(g_main.port, "/v1/chat/completions",
             "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":100000,\"temperature\":0,"
             "\"logit_bias\":{\"2\":-100}}");
    assert_int_equal(r.status, 200);
    j = parse(&r);
    ch = json_array_get(json_object_get(j, "choices"), 0);
    u = json_object_get(j, "usage");
    assert_string_equal(json_string_value(json_object_get(ch, "finish_reason")), "length");
    const json_int_t total = json_integer_value(json_object_get(u, "total_tokens"));
    assert_int_equal(total, 512);
    json_decref(j);
    resp_free(&r);
}

static void test_completions_and_stop(void **state) {
    NEED_MAIN();
    resp r = post(g_main.port, "/v1/completions", "{\"prompt\":\"Once upon a time\",\"max_tokens\":12,\"temperature\":0}");
    assert_int_equal(r.status, 200);
    json_t *j = parse(&r);
    assert_string_equal(json_string_value(json_object_get(j, "object")), "text_completion");
    const char *text = json_string_value(json_object_get(json_array_get(json_object_get(j, "choices"), 0), "text"));
    assert_true(strlen(text) > 4);
    /* a stop sequence taken from the middle of the greedy text cuts it there */
    char stop[8] = {0};
    size_t at = strlen(text) / 2;
    memcpy(stop, text + at, 3);
    char body[512];
    snprintf(body, sizeof body, "{\"prompt\":\"Once upon a time\",\"max_tokens\":12,\"temperature\":0,\"stop\":[\"%s\"]}", stop);
    resp s = post(g_main.port, "/v1/completions", body);
    assert_int_equal(s.status, 200);
    json_t *sj = parse(&s);
    json_t *c0 = json_array_get(json_object_get(sj, "choices"), 0);
    const char *cut = json_string_value(json_object_get(c0, "text"));
    assert_string_equal(json_string_value(json_object_get(c0, "finish_reason")), "stop");
    const char *first = strstr(text, stop);
    assert_int_equal(strlen(cut), (size_t)(first - text));
    assert_memory_equal(cut, text, strlen(cut));
    /* the same stop while streaming: held back across chunk boundaries, never sent */
    snprintf(body, sizeof body,
             "{\"prompt\":\"Once upon a time\",\"max_tokens\":12,\"temperature\":0,\"stream\":true,\"stop\":\"%s\"}", stop);
    resp st = post(g_main.port, "/v1/completions", body);
    assert_int_equal(st.status, 200);
    char *ev[64];
    int n = sse_events(st.body, ev, 64);
    char got[1024] = "";
    for (int i = 0; i < n - 1; i++) {
        json_t *c = json_loads(ev[i], 0, NULL);
        strncat(got, json_string_value(json_object_get(json_array_get(json_object_get(c, "choices"), 0), "text")),
                sizeof got - strlen(got) - 1);
        json_decref(c);
    }
    for (int i = 0; i < n; i++) free(ev[i]);
    assert_string_equal(got, cut);
    /* token ids as the prompt */
    resp t = post(g_main.port, "/v1/completions", "{\"prompt\":[1, 403, 407],\"max_tokens\":3}");
    assert_int_equal(t.status, 200);
    resp_free(&t);
    expect_error(g_main.port, "POST", "/v1/completions", NULL, "{\"prompt\":[1, 99999]}", 400, NULL);
    json_decref(j);
    json_decref(sj);
    resp_free(&r);
    resp_free(&s);
    resp_free(&st);
}

static void test_errors_and_limits(void **state) {
    NEED_MAIN();
    uint16_t p = g_main.port;
    expect_error(p, "POST", "/v1/chat/completions", NULL, "{not json", 400, "invalid_json");
    expect_error(p, "POST", "/v1/chat/completions", NULL, "", 400, NULL);
    expect_error(p, "POST", "/v1/chat/completions", NULL, "{\"messages\":[]}", 400, NULL);
    expect_error(p, "POST", "/v1/chat/completions", NULL, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"n\":17}", 400, "unsupported_value");
    expect_error(p, "GET", "/v1/chat/completions", NULL, NULL, 405, "method_not_allowed");
    expect_error(p, "POST", "/v1/nothing", NULL, "{}", 404, "not_found");
    expect_error(p, "DELETE", "/v1/sessions/00000000000000000000000000000000", NULL, NULL, 404, "session_not_found");
    /* body over 1 MiB: refused from Content-Length, the body is not read */
    size_t big = (1u << 20) + 10;
    char *b = malloc(big + 1);
    memset(b, ' ', big);
    b[big] = '\0';
    b[0] = '{';
    b[big - 1] = '}';
    expect_error(p, "POST", "/v1/chat/completions", NULL, b, 413, "request_too_large");
    free(b);
    /* nesting, message count, max_tokens and prompt length */
    char deep[1024];
    int n = sprintf(deep, "{\"messages\":[%s],\"x\":", k_user_msg);
    for (int i = 0; i < 80; i++) deep[n++] = '[';
    for (int i = 0; i < 80; i++) deep[n++] = ']';
    strcpy(deep + n, "}");
    expect_error(p, "POST", "/v1/chat/completions", NULL, deep, 400, "json_too_complex");
    size_t cap = 1100 * 40 + 64;
    char *many = malloc(cap);
    int w = sprintf(many, "{\"messages\":[");
    for (int i = 0; i < 1025; i++) w += sprintf(many + w, "%s{\"role\":\"user\",\"content\":\"x\"}", i ? "," : "");
    strcpy(many + w, "]}");
    expect_error(p, "POST", "/v1/chat/completions", NULL, many, 400, "too_many_messages");
    free(many);
    /* (max_tokens beyond the context is clamped: test_max_tokens_clamped) */
    char *longp = malloc(8000);
    w = sprintf(longp, "{\"messages\":[{\"role\":\"user\",\"content\":\"");
    for (int i = 0; i < 700; i++) w += sprintf(longp + w, "dog ");
    strcpy(longp + w, "\"}]}");
    expect_error(p, "POST", "/v1/chat/completions", NULL, longp, 400, "context_length_exceeded");
    free(longp);
}

static void with_key(rp_server_config *c) { c->api_key = "sekret-key"; }

static void test_auth(void **state) {
    NEED_MAIN();
    fixture f;
    start(&f, with_key);
    expect_error(f.port, "GET", "/v1/models", NULL, NULL, 401, "invalid_api_key");
    expect_error(f.port, "GET", "/v1/models", "Authorization: Bearer wrong\r\n", NULL, 401, "invalid_api_key");
    expect_error(f.port, "GET", "/v1/models", "Authorization: Bearer sekret-ke\r\n", NULL, 401, "invalid_api_key");
    expect_error(f.port, "POST", "/v1/chat/completions", NULL, "{}", 401, "invalid_api_key");
    resp r = http(f.port, "GET", "/v1/models", "Authorization: Bearer sekret-key\r\n", NULL);
    assert_int_equal(r.status, 200);
    resp_free(&r);
    r = http(f.port, "GET", "/health", NULL, NULL);   /* health needs no key */
    assert_int_equal(r.status, 200);
    resp_free(&r);
    stop(&f);
}

static void test_sessions(void **state) {
    NEED_MAIN();
    uint16_t p = g_main.port;
    const char *sys = "{\"role\":\"system\",\"content\":\"You are a storyteller who tells short tales.\"}";
    char body[4096];
    snprintf(body, sizeof body,
             "{\"messages\":[%s,%s],\"max_tokens\":8,\"temperature\":0,\"reprise_session\":true}", sys, k_user_msg);
    resp r = post(p, "/v1/chat/completions", body);
    assert_int_equal(r.status, 200);
    json_t *j = parse(&r);
    const char *sid = json_string_value(json_object_get(j, "reprise_session"));
    assert_non_null(sid);
    assert_true(rp_srv_session_id_valid(sid));
    assert_non_null(strcasestr(r.head, "x-reprise-session"));
    char id[33];
    strcpy(id, sid);
    json_int_t p1 = jint(json_object_get(j, "usage"), "prompt_tokens");
    const char *reply = json_string_value(json_object_get(json_object_get(json_array_get(json_object_get(j, "choices"), 0), "message"), "content"));
    json_t *rs = json_string(reply);
    char *rj = json_dumps(rs, JSON_ENCODE_ANY);
    /* the next turn: full history plus a new message; the old prompt stays resident */
    snprintf(body, sizeof body,
             "{\"messages\":[%s,%s,{\"role\":\"assistant\",\"content\":%s},{\"role\":\"user\",\"content\":\"What next?\"}],"
             "\"max_tokens\":8,\"temperature\":0,\"reprise_session\":\"%s\"}", sys, k_user_msg, rj, id);
    resp r2 = post(p, "/v1/chat/completions", body);
    assert_int_equal(r2.status, 200);
    json_t *j2 = parse(&r2);
    json_t *u2 = json_object_get(j2, "usage");
    assert_true(jint(u2, "reprise.reused_prefix") >= p1 - 1);
    assert_int_equal(jint(u2, "prompt_tokens_details.cached_tokens"), jint(u2, "reprise.reused_prefix"));
    assert_int_equal(jint(u2, "reprise.computed"), jint(u2, "prompt_tokens") - jint(u2, "reprise.reused_prefix"));
    assert_string_equal(json_string_value(json_object_get(j2, "reprise_session")), id);
    /* unknown id 404, malformed id 400, delete then 404 */
    snprintf(body, sizeof body, "{\"messages\":[%s],\"reprise_session\":\"0123456789abcdef0123456789abcdef\"}", k_user_msg);
    expect_error(p, "POST", "/v1/chat/completions", NULL, body, 404, "session_not_found");
    snprintf(body, sizeof body, "{\"messages\":[%s],\"reprise_session\":\"nope\"}", k_user_msg);
    expect_error(p, "POST", "/v1/chat/completions", NULL, body, 400, NULL);
    char path[128];
    snprintf(path, sizeof path, "/v1/sessions/%s", id);
    resp d = http(p, "DELETE", path, NULL, NULL);
    assert_int_equal(d.status, 200);
    resp_free(&d);
    expect_error(p, "DELETE", path, NULL, NULL, 404, "session_not_found");
    free(rj);
    json_decref(rs);
    json_decref(j);
    json_decref(j2);
    resp_free(&r);
    resp_free(&r2);
}

static const char *k_tools =
    "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":\"weather\","
    "\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}}}}}]";

static void test_tools(void **state) {
    NEED_MAIN();
    char body[4096];
    /* named tool_choice: the reply is a call of that tool with JSON-object arguments */
    for (int stream = 0; stream < 2; stream++) {
        snprintf(body, sizeof body,
                 "{\"messages\":[{\"role\":\"user\",\"content\":\"Weather in Paris?\"}],%s,"
                 "\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"get_weather\"}},"
                 "\"max_tokens\":200,\"temperature\":0.7,\"seed\":3,\"stream\":%s}", k_tools, stream ? "true" : "false");
        resp r = post(g_main.port, "/v1/chat/completions", body);
        assert_int_equal(r.status, 200);
        json_t *call = NULL, *all = NULL;
        const char *finish = NULL;
        if (!stream) {
            all = parse(&r);
            json_t *c0 = json_array_get(json_object_get(all, "choices"), 0);
            finish = json_string_value(json_object_get(c0, "finish_reason"));
            call = json_array_get(json_object_get(json_object_get(c0, "message"), "tool_calls"), 0);
            assert_true(json_is_null(json_object_get(json_object_get(c0, "message"), "content")));
        } else {
            char *ev[64];
            int n = sse_events(r.body, ev, 64);
            for (int i = 0; i < n - 1; i++) {
                json_t *c = json_loads(ev[i], 0, NULL);
                json_t *c0 = json_array_get(json_object_get(c, "choices"), 0);
                json_t *tc = json_array_get(json_object_get(json_object_get(c0, "delta"), "tool_calls"), 0);
                if (tc) {
                    all = c;
                    call = tc;
                    assert_int_equal(jint(tc, "index"), 0);
                    continue;
                }
                if (json_is_string(json_object_get(c0, "finish_reason")))
                    finish = strcmp(json_string_value(json_object_get(c0, "finish_reason")), "tool_calls") == 0 ? "tool_calls" : "other";
                json_decref(c);
            }
            for (int i = 0; i < n; i++) free(ev[i]);
        }
        assert_non_null(call);
        assert_string_equal(finish, "tool_calls");
        assert_string_equal(json_string_value(json_object_get(call, "type")), "function");
        assert_non_null(strstr(json_string_value(json_object_get(call, "id")), "call_"));
        json_t *fn = json_object_get(call, "function");
        assert_string_equal(json_string_value(json_object_get(fn, "name")), "get_weather");
        json_t *args = json_loads(json_string_value(json_object_get(fn, "arguments")), 0, NULL);
        assert_true(json_is_object(args));
        json_decref(args);
        json_decref(all);
        resp_free(&r);
    }
    /* "required" and named calls are generated under the tools' schemas (a grammar): every call names one of the
     * tools and its arguments hold exactly the required keys with enum values from the schema */
    /* (short: stories260K's context is 512 tokens of a character-level vocabulary) */
    static const char *k_two =
        "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"wx\",\"strict\":true,\"parameters\":"
        "{\"type\":\"object\",\"properties\":{\"c\":{\"type\":\"string\",\"maxLength\":4},\"u\":{\"enum\":[\"c\",\"f\"]}},"
        "\"required\":[\"c\",\"u\"],\"additionalProperties\":false}}},"
        "{\"type\":\"function\",\"function\":{\"name\":\"tm\",\"parameters\":{\"type\":\"object\",\"properties\":"
        "{\"z\":{\"enum\":[\"utc\",\"cet\"]}},\"required\":[\"z\"],\"additionalProperties\":false}}}]";
    /* the whitespace tokens of its vocabulary (tab, newline, CR, the two spaces) banned: the grammar's optional
     * whitespace would otherwise eat the few tokens the context leaves */
    static const char *k_no_ws = "\"logit_bias\":{\"12\":-100,\"13\":-100,\"16\":-100,\"35\":-100,\"410\":-100}";
    int seen_tools[2] = {0, 0};
    for (int k = 0; k < 8; k++) {
        const bool named = k >= 6;
        snprintf(body, sizeof body,
                 "{\"messages\":[{\"role\":\"user\",\"content\":\"Weather or time?\"}],%s,\"tool_choice\":%s,"
                 "\"max_tokens\":300,\"temperature\":1,\"seed\":%d,%s}",
                 k_two, named ? "{\"type\":\"function\",\"function\":{\"name\":\"tm\"}}" : "\"required\"", 40 + k, k_no_ws);
        resp r = post(g_main.port, "/v1/chat/completions", body);
        assert_int_equal(r.status, 200);
        json_t *all = parse(&r);
        json_t *c0 = json_array_get(json_object_get(all, "choices"), 0);
        assert_string_equal(json_string_value(json_object_get(c0, "finish_reason")), "tool_calls");
        json_t *fn = json_object_get(json_array_get(json_object_get(json_object_get(c0, "message"), "tool_calls"), 0),
                                     "function");
        const char *name = json_string_value(json_object_get(fn, "name"));
        assert_non_null(name);
        json_t *args = json_loads(json_string_value(json_object_get(fn, "arguments")), 0, NULL);
        assert_true(json_is_object(args));
        if (!strcmp(name, "wx")) {
            assert_false(named);
            seen_tools[0]++;
            const char *unit = json_string_value(json_object_get(args, "u"));
            assert_true(json_object_size(args) == 2 && json_is_string(json_object_get(args, "c")) && unit);
            assert_true(!strcmp(unit, "c") || !strcmp(unit, "f"));
        } else {
            assert_string_equal(name, "tm");
            seen_tools[1]++;
            const char *zone = json_string_value(json_object_get(args, "z"));
            assert_true(json_object_size(args) == 1 && zone && (!strcmp(zone, "utc") || !strcmp(zone, "cet")));
        }
        json_decref(args);
        json_decref(all);
        resp_free(&r);
    }
    print_message("  forced calls: wx %d, tm %d (of 6 required + 2 named tm)\n", seen_tools[0],
                  seen_tools[1]);
    /* the round trip: the call and its result go back in; the model answers */
    snprintf(body, sizeof body,
             "{\"messages\":[{\"role\":\"user\",\"content\":\"Weather in Paris?\"},"
             "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"call_1\",\"type\":\"function\","
             "\"function\":{\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\":\\\"Paris\\\"}\"}}]},"
             "{\"role\":\"tool\",\"tool_call_id\":\"call_1\",\"content\":\"sunny\"}],%s,\"max_tokens\":8}", k_tools);
    resp r = post(g_main.port, "/v1/chat/completions", body);
    assert_int_equal(r.status, 200);
    resp_free(&r);
    /* tool_choice none leaves the tools out of the prompt */
    snprintf(body, sizeof body, "{\"messages\":[%s],%s,\"tool_choice\":\"none\",\"max_tokens\":4}", k_user_msg, k_tools);
    json_t *none = NULL;
    r = post(g_main.port, "/v1/chat/completions", body);
    assert_int_equal(r.status, 200);
    none = parse(&r);
    json_t *plain = chat(g_main.port, "\"max_tokens\":4", 200);
    assert_int_equal(jint(json_object_get(none, "usage"), "prompt_tokens"), jint(json_object_get(plain, "usage"), "prompt_tokens"));
    json_decref(none);
    json_decref(plain);
    resp_free(&r);
}

/* presence / frequency penalties are applied: a strong frequency penalty
 * changes a greedy reply that repeats tokens, and zero penalties change nothing */
static void test_penalties_applied(void **state) {
    NEED_MAIN();
    json_t *a = chat(g_main.port, "\"max_tokens\":32", 200);
    json_t *b = chat(g_main.port, "\"max_tokens\":32,\"frequency_penalty\":2,\"presence_penalty\":2", 200);
    json_t *c = chat(g_main.port, "\"max_tokens\":32,\"frequency_penalty\":0,\"presence_penalty\":0", 200);
    const char *ta = json_string_value(json_object_get(json_object_get(json_array_get(json_object_get(a, "choices"), 0), "message"), "content"));
    const char *tb = json_string_value(json_object_get(json_object_get(json_array_get(json_object_get(b, "choices"), 0), "message"), "content"));
    const char *tc = json_string_value(json_object_get(json_object_get(json_array_get(json_object_get(c, "choices"), 0), "message"), "content"));
    print_message("no penalty: %s\npenalized:  %s\n", ta, tb);
    assert_string_not_equal(ta, tb);
    assert_string_equal(ta, tc);
    json_decref(a);
    json_decref(b);
    json_decref(c);
}

/* A top_p under float's range (it used to round to 0 and fail the sampler
 * with a 500) is the smallest nucleus: the single most likely token, so a
 * temperature-1 reply equals the greedy one. */
static void test_tiny_top_p(void **state) {
    NEED_MAIN();
    json_t *g = chat(g_main.port, NULL, 200);
    const char *tg = json_string_value(json_object_get(json_object_get(json_array_get(json_object_get(g, "choices"), 0), "message"), "content"));
    static const char *const tps[] = {"1e-46", "1.4e-45", "5e-324", "1e-300"};
    for (size_t i = 0; i < sizeof tps / sizeof tps[0]; i++) {
        char body[1024];
        snprintf(body, sizeof body, "{\"model\":\"any\",\"messages\":[%s],\"max_tokens\":12,\"temperature\":1,\"top_p\":%s,\"seed\":%zu}",
                 k_user_msg, tps[i], i + 3);
        resp r = post(g_main.port, "/v1/chat/completions", body);
        if (r.status != 200) print_message("top_p %s: status %d: %.300s\n", tps[i], r.status, r.body);
        assert_int_equal(r.status, 200);
        json_t *j = parse(&r);
        resp_free(&r);
        assert_string_equal(json_string_value(json_object_get(json_object_get(json_array_get(json_object_get(j, "choices"), 0), "message"), "content")), tg);
        json_decref(j);
    }
    json_decref(g);
    expect_error(g_main.port, "POST", "/v1/chat/completions", NULL,
                 "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"top_p\":0}", 400, NULL);
}

static void test_documents(void **state) {
    NEED_MAIN();
    const char *docs = "\"reprise_documents\":[\"Tom lives in a small house near the river.\",\"Anna has a big brown dog.\"]";
    json_t *a = chat(g_main.port, docs, 200);
    /* same documents, other order: the chunks are reused from the cache (non-prefix) */
    json_t *b = chat(g_main.port,
                     "\"reprise_documents\":[\"Anna has a big brown dog.\",\"Tom lives in a small house near the river.\"]", 200);
    json_t *ub = json_object_get(b, "usage");
    assert_int_equal(jint(ub, "prompt_tokens"), jint(json_object_get(a, "usage"), "prompt_tokens"));
    assert_true(jint(ub, "reprise.reused_nonprefix") + jint(ub, "reprise.reused_prefix") > 0);
    json_decref(a);
    json_decref(b);
}

static void test_metrics(void **state) {
    NEED_MAIN();
    json_t *j = chat(g_main.port, NULL, 200);
    json_decref(j);
    resp r = http(g_main.port, "GET", "/metrics", NULL, NULL);
    assert_int_equal(r.status, 200);
    assert_non_null(strcasestr(r.head, "content-type: text/plain; version=0.0.4"));
    const char *need[] = {
        "reprise_requests_total{endpoint=\"chat_completions\",status=\"200\"}", "reprise_ttft_seconds_bucket{le=\"+Inf\"}",
        "reprise_ttft_seconds_count", "reprise_prefill_tokens_per_second", "reprise_decode_tokens_per_second",
        "reprise_reused_tokens_total{kind=\"prefix\"}", "reprise_reused_tokens_total{kind=\"blended\"}",
        "reprise_reused_tokens_total{kind=\"recomputed\"}", "reprise_cache_bytes", "reprise_cache_evictions_total",
        "reprise_store_bytes", "reprise_draft_accepted_tokens_total", "reprise_sessions{state=\"active\"}",
        "reprise_sessions{state=\"suspended\"}", "reprise_queue_depth",
    };
    for (size_t i = 0; i < sizeof need / sizeof need[0]; i++) {
        if (!strstr(r.body, need[i])) print_message("missing %s\n", need[i]);
        assert_non_null(strstr(r.body, need[i]));
    }
    resp_free(&r);
    assert_true(metric(g_main.port, "reprise_ttft_seconds_count") >= 1);
    assert_true(metric(g_main.port, "reprise_requests_total{endpoint=\"chat_completions\",status=\"400\"}") >= 1);
}

/* A stream whose client goes away after the first bytes: its generation is cancelled. */
static void test_disconnect_cancels(void **state) {
    NEED_MAIN();
    double before = metric(g_main.port, "reprise_client_disconnects_total");
    int fd = dial(g_main.port);
    assert_true(fd >= 0);
    const char *body = "{\"messages\":[{\"role\":\"user\",\"content\":\"Once\"}],\"max_tokens\":480,\"stream\":true,"
                       "\"logit_bias\":{\"1\":-100,\"2\":-100}}";
    send_request(fd, "POST", "/v1/chat/completions", NULL, body, strlen(body));
    char buf[512];
    assert_true(recv(fd, buf, sizeof buf, 0) > 0);
    close(fd);
    double t0 = now_s();
    while (metric(g_main.port, "reprise_client_disconnects_total") < before + 1 && now_s() - t0 < 20) usleep(20000);
    assert_true(metric(g_main.port, "reprise_client_disconnects_total") >= before + 1);
    while ((metric(g_main.port, "reprise_running") > 0 || metric(g_main.port, "reprise_requests_inflight") > 1) &&
           now_s() - t0 < 20)
        usleep(20000);
    assert_true(metric(g_main.port, "reprise_running") == 0);
    json_t *j = chat(g_main.port, NULL, 200);   /* the slot is free again */
    json_decref(j);
}

static void no_queue(rp_server_config *c) { c->backend.queue_max = 0; }
static void tiny_timeout(rp_server_config *c) { c->timeout_s = 0.01; }

typedef struct bg {
    uint16_t port;
    const char *body;
    resp r;
} bg;

static void *bg_post(void *arg) {
    bg *b = arg;
    b->r = post(b->port, "/v1/chat/completions", b->body);
    return NULL;
}

static const char *k_longgen = "{\"messages\":[{\"role\":\"user\",\"content\":\"Once\"}],\"max_tokens\":480,"
                               "\"logit_bias\":{\"1\":-100,\"2\":-100}}";

static void test_queue_full_and_timeout(void **state) {
    NEED_MAIN();
    fixture f;
    /* no queue: of 8 long requests at once, the ones finding the model busy get 429 */
    start(&f, no_queue);
    bg b[8];
    pthread_t th[8];
    for (int i = 0; i < 8; i++) {
        b[i] = (bg){.port = f.port, .body = k_longgen};
        pthread_create(&th[i], NULL, bg_post, &b[i]);
    }
    int ok = 0, busy = 0;
    for (int i = 0; i < 8; i++) {
        pthread_join(th[i], NULL);
        if (b[i].r.status == 200) ok++;
        if (b[i].r.status == 429) {
            busy++;
            json_t *j = parse(&b[i].r);
            assert_string_equal(json_string_value(json_object_get(json_object_get(j, "error"), "code")), "queue_full");
            json_decref(j);
        }
        resp_free(&b[i].r);
    }
    assert_true(ok >= 1 && busy >= 1 && ok + busy == 8);
    assert_true(metric(f.port, "reprise_requests_rejected_total") >= busy);
    stop(&f);
    /* a 10 ms budget: the generation is cut (finish_reason length) or, if nothing came yet, 503 timeout */
    start(&f, tiny_timeout);
    resp r = post(f.port, "/v1/chat/completions", k_longgen);
    json_t *j = parse(&r);
    if (r.status == 200) {
        json_t *c0 = json_array_get(json_object_get(j, "choices"), 0);
        assert_string_equal(json_string_value(json_object_get(c0, "finish_reason")), "length");
        assert_true(jint(json_object_get(j, "usage"), "completion_tokens") < 480);
    } else {
        assert_int_equal(r.status, 503);
        assert_string_equal(json_string_value(json_object_get(json_object_get(j, "error"), "code")), "timeout");
    }
    assert_true(metric(f.port, "reprise_request_timeouts_total") >= 1);
    json_decref(j);
    resp_free(&r);
    stop(&f);
}

static void sched_backend(rp_server_config *c) { c->backend.parallel = 4; }
static void sched_backend_kv_limit(rp_server_config *c) {   /* every waiting session's KV is demoted */
    c->backend.parallel = 4;
    c->backend.kv_limit_mb = 1e-6;
}

static void test_sched_backend(void **state) {
    NEED_MAIN();
    fixture f;
    start(&f, sched_backend);
    json_t *j = chat(f.port, NULL, 200);
    json_t *u = json_object_get(j, "usage");
    assert_string_equal(json_string_value(json_object_get(json_object_get(u, "reprise"), "backend")), "sched");
    json_decref(j);
    /* several at once */
    bg b[6];
    pthread_t th[6];
    const char *body = "{\"messages\":[{\"role\":\"user\",\"content\":\"A cat\"}],\"max_tokens\":16,\"temperature\":0}";
    for (int i = 0; i < 6; i++) {
        b[i] = (bg){.port = f.port, .body = body};
        pthread_create(&th[i], NULL, bg_post, &b[i]);
    }
    char *first = NULL;
    for (int i = 0; i < 6; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(b[i].r.status, 200);
        json_t *x = parse(&b[i].r);
        const char *c = json_string_value(json_object_get(json_object_get(json_array_get(json_object_get(x, "choices"), 0), "message"), "content"));
        if (!first) first = strdup(c);
        else assert_string_equal(first, c);   /* greedy: batching does not change the text */
        json_decref(x);
        resp_free(&b[i].r);
    }
    /* a finished one-off job's sequence is kept: the same prompt again reuses all but its last token
     * (llama-server's slot prompt cache), and greedy output does not change */
    resp o = post(f.port, "/v1/chat/completions", body);
    assert_int_equal(o.status, 200);
    json_t *oj = parse(&o);
    json_t *ou = json_object_get(oj, "usage");
    json_int_t op = jint(ou, "prompt_tokens"), oc = jint(ou, "prompt_tokens_details.cached_tokens");
    print_message("one-off after one-offs: %lld of %lld prompt tokens reused\n", (long long)oc, (long long)op);
    assert_int_equal(oc, op - 1);
    assert_int_equal(jint(ou, "reprise.computed"), 1);
    assert_string_equal(first, json_string_value(json_object_get(
                                   json_object_get(json_array_get(json_object_get(oj, "choices"), 0), "message"), "content")));
    json_decref(oj);
    resp_free(&o);
    free(first);
    /* a session keeps its KV in the scheduler */
    char body2[2048];
    snprintf(body2, sizeof body2, "{\"messages\":[%s],\"max_tokens\":6,\"temperature\":0,\"reprise_session\":true}", k_user_msg);
    resp r = post(f.port, "/v1/chat/completions", body2);
    assert_int_equal(r.status, 200);
    json_t *s1 = parse(&r);
    char id[33];
    strcpy(id, json_string_value(json_object_get(s1, "reprise_session")));
    json_int_t p1 = jint(json_object_get(s1, "usage"), "prompt_tokens");
    snprintf(body2, sizeof body2,
             "{\"messages\":[%s,{\"role\":\"assistant\",\"content\":\"Yes.\"},{\"role\":\"user\",\"content\":\"More\"}],"
             "\"max_tokens\":6,\"temperature\":0,\"reprise_session\":\"%s\",\"stream\":true}", k_user_msg, id);
    resp r2 = post(f.port, "/v1/chat/completions", body2);
    assert_int_equal(r2.status, 200);
    assert_non_null(strstr(r2.body, "data: [DONE]"));
    snprintf(body2, sizeof body2,
             "{\"messages\":[%s,{\"role\":\"assistant\",\"content\":\"Yes.\"},{\"role\":\"user\",\"content\":\"More\"}],"
             "\"max_tokens\":6,\"temperature\":0,\"reprise_session\":\"%s\"}", k_user_msg, id);
    resp r3 = post(f.port, "/v1/chat/completions", body2);
    assert_int_equal(r3.status, 200);
    json_t *s3 = parse(&r3);
    assert_true(jint(json_object_get(s3, "usage"), "prompt_tokens_details.cached_tokens") >= p1 - 1);
    json_decref(s1);
    json_decref(s3);
    resp_free(&r);
    resp_free(&r2);
    resp_free(&r3);
    /* fresh sequences are filled by the reuse engine: documents cached by one request are reused
     * by the next in another order (non-prefix chunks, blend), and the batch computes the rest */
    const char *d1 = "\"reprise_documents\":[\"Tom lives in a small house near the river.\",\"Anna has a big brown dog.\"]";
    const char *d2 = "\"reprise_documents\":[\"Anna has a big brown dog.\",\"Tom lives in a small house near the river.\"]";
    json_t *da = chat(f.port, d1, 200);
    json_t *db = chat(f.port, d2, 200);
    json_t *ua = json_object_get(da, "usage"), *ub = json_object_get(db, "usage");
    print_message("sched fill: reordered documents reused %lld non-prefix + %lld prefix of %lld tokens, %lld computed\n",
                  (long long)jint(ub, "reprise.reused_nonprefix"), (long long)jint(ub, "reprise.reused_prefix"),
                  (long long)jint(ub, "prompt_tokens"), (long long)jint(ub, "reprise.computed"));
    assert_int_equal(jint(ub, "prompt_tokens"), jint(ua, "prompt_tokens"));
    assert_true(jint(ub, "reprise.reused_nonprefix") > 0);
    assert_int_equal(jint(ub, "reprise.computed"),
                     jint(ub, "prompt_tokens") - jint(ub, "reprise.reused_prefix") - jint(ub, "reprise.reused_nonprefix"));
    /* the fill is prefill time, not queueing: queue + prefill = TTFT, both >= 0 */
    json_t *rb = json_object_get(ub, "reprise");
    const double q = json_number_value(json_object_get(rb, "queue_ms")), pf = json_number_value(json_object_get(rb, "prefill_ms")),
                 tt = json_number_value(json_object_get(rb, "ttft_ms"));
    assert_true(q >= 0 && pf > 0 && fabs(q + pf - tt) < 1e-3 * tt + 0.01);
    json_decref(da);
    json_decref(db);
    /* reuse "none" for one request: nothing filled from the cache */
    char d3[1024];
    snprintf(d3, sizeof d3, "%s,\"reprise_cache\":{\"mode\":\"none\"}", d1);
    json_t *dc = chat(f.port, d3, 200);
    json_t *uc = json_object_get(dc, "usage");
    assert_int_equal(jint(uc, "reprise.reused_nonprefix"), 0);
    assert_int_equal(jint(uc, "reprise.reused_prefix"), 0);   /* not even a kept sequence's prefix */
    assert_int_equal(jint(uc, "reprise.computed"), jint(uc, "prompt_tokens"));
    json_decref(dc);
    stop(&f);
}

/* A session whose turn ends in a tool call is suspended until the tool result
 * comes; the follow-up reuses its KV. With `demote` (a server under a tiny
 * --kv-limit) the suspended session's KV is demoted while it waits and
 * restored by the follow-up, which still reuses it. */
static void session_tool_round(uint16_t port, bool demote) {
    char body[4096];
    snprintf(body, sizeof body,
             "{\"messages\":[{\"role\":\"user\",\"content\":\"Weather in Oslo?\"}],%s,"
             "\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"get_weather\"}},"
             "\"max_tokens\":20,\"temperature\":0,\"reprise_session\":true}", k_tools);
    resp r = post(port, "/v1/chat/completions", body);
    assert_int_equal(r.status, 200);
    json_t *j = parse(&r);
    json_t *msg = json_object_get(json_array_get(json_object_get(j, "choices"), 0), "message");
    json_t *call = json_array_get(json_object_get(msg, "tool_calls"), 0);
    assert_non_null(call);
    char id[33];
    strcpy(id, json_string_value(json_object_get(j, "reprise_session")));
    json_int_t p1 = jint(json_object_get(j, "usage"), "prompt_tokens");
    assert_true(metric(port, "reprise_sessions{state=\"suspended\"}") == 1);
    if (demote) {   /* the scheduler loop demotes it at its next step */
        for (int i = 0; i < 500 && metric(port, "reprise_kv_demotions_total") < 1; i++) usleep(10000);
        assert_true(metric(port, "reprise_kv_demotions_total") == 1);
        assert_true(metric(port, "reprise_kv_restores_total") == 0);
    }
    char *msgtxt = json_dumps(msg, JSON_COMPACT);
    snprintf(body, sizeof body,
             "{\"messages\":[{\"role\":\"user\",\"content\":\"Weather in Oslo?\"},%s,"
             "{\"role\":\"tool\",\"tool_call_id\":\"%s\",\"content\":\"rain\"}],%s,"
             "\"max_tokens\":6,\"temperature\":0,\"reprise_session\":\"%s\"}",
             msgtxt, json_string_value(json_object_get(call, "id")), k_tools, id);
    resp r2 = post(port, "/v1/chat/completions", body);
    assert_int_equal(r2.status, 200);
    json_t *j2 = parse(&r2);
    json_int_t c2 = jint(json_object_get(j2, "usage"), "prompt_tokens_details.cached_tokens");
    if (c2 < p1 - 1) print_message("resumed session reused %lld of the first prompt's %lld tokens\n", (long long)c2, (long long)p1);
    assert_true(c2 >= p1 - 1);
    if (strcmp(json_string_value(json_object_get(json_array_get(json_object_get(j2, "choices"), 0), "finish_reason")), "tool_calls") != 0)
        assert_true(metric(port, "reprise_sessions{state=\"suspended\"}") == 0);
    if (demote) assert_true(metric(port, "reprise_kv_restores_total") >= 1);
    free(msgtxt);
    json_decref(j);
    json_decref(j2);
    resp_free(&r);
    resp_free(&r2);
}

static void test_session_tool_suspend(void **state) {
    NEED_MAIN();
    session_tool_round(g_main.port, false);
    fixture f;
    start(&f, sched_backend);
    session_tool_round(f.port, false);
    stop(&f);
    start(&f, sched_backend_kv_limit);
    session_tool_round(f.port, true);
    stop(&f);
}

typedef struct drain_arg {
    rp_server *srv;
} drain_arg;

static void *drain_later(void *arg) {
    usleep(150000);
    rp_server_drain(((drain_arg *)arg)->srv, 0.2);
    return NULL;
}

static void test_drain(void **state) {
    NEED_MAIN();
    fixture f;
    start(&f, NULL);
    drain_arg da = {f.srv};
    pthread_t th;
    pthread_create(&th, NULL, drain_later, &da);
    /* in flight when the drain starts: ends with what it generated, properly framed */
    const char *body = "{\"messages\":[{\"role\":\"user\",\"content\":\"Once\"}],\"max_tokens\":480,\"stream\":true,"
                       "\"logit_bias\":{\"1\":-100,\"2\":-100}}";
    resp r = post(f.port, "/v1/chat/completions", body);
    pthread_join(th, NULL);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body, "\"finish_reason\":\"length\""));
    assert_non_null(strstr(r.body, "data: [DONE]\n\n"));
    resp_free(&r);
    /* no new connections after the drain */
    resp n = http(f.port, "GET", "/health", NULL, NULL);
    assert_true(n.status == -1 || n.status == 503);
    resp_free(&n);
    stop(&f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_request_parsing),
        cmocka_unit_test(test_render_documents),
        cmocka_unit_test(test_json_prefix),
        cmocka_unit_test(test_health_models),
        cmocka_unit_test(test_chat_basic),
        cmocka_unit_test(test_stream_framing),
        cmocka_unit_test(test_completions_and_stop),
        cmocka_unit_test(test_errors_and_limits),
        cmocka_unit_test(test_auth),
        cmocka_unit_test(test_sessions),
        cmocka_unit_test(test_tools),
        cmocka_unit_test(test_penalties_applied),
        cmocka_unit_test(test_tiny_top_p),
        cmocka_unit_test(test_documents),
        cmocka_unit_test(test_metrics),
        cmocka_unit_test(test_disconnect_cancels),
        cmocka_unit_test(test_queue_full_and_timeout),
        cmocka_unit_test(test_sched_backend),
        cmocka_unit_test(test_session_tool_suspend),
        cmocka_unit_test(test_drain),
        cmocka_unit_test(test_sampling_extensions),
        cmocka_unit_test(test_max_tokens_clamped),
    };
    return rp_test_main(tests, group_setup, group_teardown);
}
