/* test_server_choices.c — n > 1 choices through the server (core backend, then the scheduler): n choices from one prefill, each
 * what an n = 1 request with seed + i gives, reproducible, usage counting the prompt once, streamed deltas tagged
 * with their index, logprobs and grammars per choice, the refusals (n > 16, sessions), and the scheduler backend's
 * choices on forks of the first one's sequence. */
#include <jansson.h>
#include <stdio.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

#include "reprise.h"
#include "srvtest.h"
#include "testutil.h"

#define MSGS "\"messages\":[{\"role\":\"user\",\"content\":\"Once upon a time there was a dog\"}]"
/* every prompt computed from scratch: the n = 1 references see the same prefill as the n = 3 request */
#define NOCACHE "\"reprise_cache\":{\"mode\":\"none\",\"persist\":false}"

static json_t *post_json(uint16_t port, const char *path, const char *body) {
    resp r = post(port, path, body);
    if (r.status != 200) fail_msg("%s %s: %d %s", path, body, r.status, r.body ? r.body : "");
    json_t *j = parse(&r);
    resp_free(&r);
    return j;
}

static json_t *choice(json_t *j, size_t i) { return json_array_get(json_object_get(j, "choices"), i); }

static const char *chat_content(json_t *ch) {
    return json_string_value(json_object_get(json_object_get(ch, "message"), "content"));
}

static const char *finish(json_t *ch) { return json_string_value(json_object_get(ch, "finish_reason")); }

static void test_chat_choices(void **state) {
    (void)state;
    fixture f;
    if (!start(&f, NULL)) RP_SKIP("no test model (" SRVTEST_MODEL ")\n");
    const char *body = "{" MSGS ",\"n\":3,\"seed\":11,\"temperature\":1,\"max_tokens\":12," NOCACHE "}";
    const double prompt0 = metric(f.port, "reprise_prompt_tokens_total");
    const double computed0 = metric(f.port, "reprise_reused_tokens_total{kind=\"computed\"}");
    json_t *j = post_json(f.port, "/v1/chat/completions", body);
    const json_int_t np = jint(j, "usage.prompt_tokens");
    assert_true(np > 0);
    /* the prompt was prefilled once: counted once in usage and in the backend's counters */
    assert_int_equal(jint(j, "usage.reprise.computed"), np);
    assert_int_equal((json_int_t)(metric(f.port, "reprise_prompt_tokens_total") - prompt0), np);
    assert_int_equal((json_int_t)(metric(f.port, "reprise_reused_tokens_total{kind=\"computed\"}") - computed0), np);
    assert_int_equal(json_array_size(json_object_get(j, "choices")), 3);
    json_int_t sum = 0;
    int distinct = 0;
    for (size_t i = 0; i < 3; i++) {
        json_t *ch = choice(j, i);
        assert_int_equal(jint(ch, "index"), (json_int_t)i);
        assert_non_null(chat_content(ch));
        assert_non_null(finish(ch));
        /* choice i is what n = 1 with seed 11 + i gives */
        char one[512];
        snprintf(one, sizeof one, "{" MSGS ",\"seed\":%d,\"temperature\":1,\"max_tokens\":12," NOCACHE "}", 11 + (int)i);
        json_t *r = post_json(f.port, "/v1/chat/completions", one);
        print_message("choice %zu: '%s' (%s)\n", i, chat_content(ch), finish(ch));
        assert_string_equal(chat_content(choice(r, 0)), chat_content(ch));
        assert_string_equal(finish(choice(r, 0)), finish(ch));
        assert_int_equal(jint(r, "usage.prompt_tokens"), np);
        sum += jint(r, "usage.completion_tokens");
        json_decref(r);
        if (i > 0 && strcmp(chat_content(ch), chat_content(choice(j, 0))) != 0) distinct++;
    }
    assert_true(distinct > 0);   /* the seeds differ: so do (some of) the choices */
    assert_int_equal(jint(j, "usage.completion_tokens"), sum);   /* the choices' tokens add up */
    assert_int_equal(jint(j, "usage.total_tokens"), np + sum);
    /* the same request again: the same choices */
    json_t *again = post_json(f.port, "/v1/chat/completions", body);
    for (size_t i = 0; i < 3; i++) assert_string_equal(chat_content(choice(again, i)), chat_content(choice(j, i)));
    json_decref(again);

    /* streamed: every delta tagged with its choice's index, each choice's deltas adding up to its reply, one
     * finish_reason per choice, one usage chunk (the prompt once) */
    char sbody[1024];
    snprintf(sbody, sizeof sbody,
             "{" MSGS ",\"n\":3,\"seed\":11,\"temperature\":1,\"max_tokens\":12," NOCACHE
             ",\"stream\":true,\"stream_options\":{\"include_usage\":true}}");
    resp s = post(f.port, "/v1/chat/completions", sbody);
    assert_int_equal(s.status, 200);
    char text[3][2048] = {"", "", ""};
    int finishes[3] = {0, 0, 0}, roles[3] = {0, 0, 0}, usages = 0;
    bool done = false;
    for (const char *p = s.body; *p;) {
        assert_true(strncmp(p, "data: ", 6) == 0);
        const char *end = strstr(p, "\n\n");
        assert_non_null(end);
        char *ev = strndup(p + 6, (size_t)(end - p - 6));
        p = end + 2;
        if (!strcmp(ev, "[DONE]")) {
            done = true;
            assert_true(*p == 0);
            free(ev);
            break;
        }
        json_t *c = json_loads(ev, 0, NULL);
        assert_non_null(c);
        json_t *chs = json_object_get(c, "choices");
        if (json_array_size(chs) == 0) {
            usages++;
            assert_int_equal(jint(json_object_get(c, "usage"), "prompt_tokens"), np);
            assert_int_equal(jint(json_object_get(c, "usage"), "completion_tokens"), sum);
        }
        for (size_t k = 0; k < json_array_size(chs); k++) {
            json_t *ch = json_array_get(chs, k);
            const json_int_t idx = jint(ch, "index");
            assert_true(idx >= 0 && idx < 3);
            json_t *d = json_object_get(ch, "delta");
            if (json_object_get(d, "role")) roles[idx]++;
            json_t *ct = json_object_get(d, "content");
            if (json_is_string(ct)) strncat(text[idx], json_string_value(ct), sizeof text[idx] - strlen(text[idx]) - 1);
            if (json_is_string(json_object_get(ch, "finish_reason"))) {
                finishes[idx]++;
                assert_string_equal(json_string_value(json_object_get(ch, "finish_reason")), finish(choice(j, (size_t)idx)));
            }
        }
        json_decref(c);
        free(ev);
    }
    assert_true(done);
    assert_int_equal(usages, 1);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(roles[i], 1);
        assert_int_equal(finishes[i], 1);
        assert_string_equal(text[i], chat_content(choice(j, (size_t)i)));
    }
    resp_free(&s);
    json_decref(j);

    /* refusals: more than 16 choices; choices with a session (one conversation) */
    expect_error(f.port, "POST", "/v1/chat/completions", NULL, "{" MSGS ",\"n\":17}", 400, "unsupported_value");
    resp e = post(f.port, "/v1/chat/completions", "{" MSGS ",\"n\":2,\"reprise_session\":true}");
    expect_error_body(&e, 400, "unsupported_value");
    assert_non_null(strstr(e.body, "reprise_session"));
    resp_free(&e);
    stop(&f);
}

static void test_completion_choices(void **state) {
    (void)state;
    fixture f;
    if (!start(&f, NULL)) RP_SKIP("no test model (" SRVTEST_MODEL ")\n");
    /* logprobs per choice: each choice's tokens and their log-probabilities */
    json_t *j = post_json(f.port, "/v1/completions",
                          "{\"prompt\":\"Lily had\",\"n\":2,\"seed\":3,\"temperature\":1,\"max_tokens\":6,\"logprobs\":2}");
    assert_int_equal(json_array_size(json_object_get(j, "choices")), 2);
    json_int_t sum = 0;
    for (size_t i = 0; i < 2; i++) {
        json_t *ch = choice(j, i);
        assert_int_equal(jint(ch, "index"), (json_int_t)i);
        json_t *lp = json_object_get(ch, "logprobs");
        assert_true(json_is_object(lp));
        const size_t nt = json_array_size(json_object_get(lp, "tokens"));
        assert_true(nt >= 1);
        assert_int_equal(json_array_size(json_object_get(lp, "token_logprobs")), nt);
        assert_int_equal(json_array_size(json_object_get(lp, "top_logprobs")), nt);
        sum += (json_int_t)nt;
        /* the same text as n = 1 with seed 3 + i */
        char one[256];
        snprintf(one, sizeof one, "{\"prompt\":\"Lily had\",\"seed\":%d,\"temperature\":1,\"max_tokens\":6}", 3 + (int)i);
        json_t *r = post_json(f.port, "/v1/completions", one);
        assert_string_equal(json_string_value(json_object_get(choice(r, 0), "text")),
                            json_string_value(json_object_get(ch, "text")));
        json_decref(r);
    }
    assert_int_equal(jint(j, "usage.completion_tokens"), sum);
    json_decref(j);
    /* a grammar constrains every choice */
    j = post_json(f.port, "/v1/completions",
                  "{\"prompt\":\"Lily\",\"n\":4,\"seed\":5,\"temperature\":1,\"max_tokens\":20,"
                  "\"grammar\":\"root ::= (\\\"yes\\\" | \\\"no\\\") \\\".\\\"\"}");
    assert_int_equal(json_array_size(json_object_get(j, "choices")), 4);
    for (size_t i = 0; i < 4; i++) {
        const char *t = json_string_value(json_object_get(choice(j, i), "text"));
        print_message("grammar choice %zu: '%s'\n", i, t);
        assert_true(!strcmp(t, "yes.") || !strcmp(t, "no."));
    }
    json_decref(j);
    /* streamed completions carry their index */
    resp s = post(f.port, "/v1/completions",
                  "{\"prompt\":\"Lily had\",\"n\":2,\"seed\":3,\"temperature\":1,\"max_tokens\":6,\"stream\":true}");
    assert_int_equal(s.status, 200);
    int seen[2] = {0, 0};
    for (const char *p = s.body; (p = strstr(p, "\"index\":")); p++) {
        const int idx = atoi(p + 8);
        assert_true(idx == 0 || idx == 1);
        seen[idx]++;
    }
    assert_true(seen[0] >= 2 && seen[1] >= 2);   /* each choice: text deltas, then its finish */
    resp_free(&s);
    stop(&f);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* A stream of 4 long choices whose client goes away after the first bytes: the disconnect is counted, every
 * choice is cancelled (nothing runs afterwards), and the server takes an n = 3 request again. */
static void check_disconnect(const fixture *f) {
    const double before = metric(f->port, "reprise_client_disconnects_total");
    int fd = dial(f->port);
    assert_true(fd >= 0);
    const char *body = "{\"messages\":[{\"role\":\"user\",\"content\":\"Once\"}],\"n\":4,\"max_tokens\":480,\"stream\":true,"
                       "\"logit_bias\":{\"1\":-100,\"2\":-100}}";
    send_request(fd, "POST", "/v1/chat/completions", NULL, body, strlen(body));
    char buf[512];
    assert_true(recv(fd, buf, sizeof buf, 0) > 0);
    close(fd);
    const double t0 = now_s();
    while (metric(f->port, "reprise_client_disconnects_total") < before + 1 && now_s() - t0 < 20) usleep(20000);
    assert_true(metric(f->port, "reprise_client_disconnects_total") >= before + 1);
    while ((metric(f->port, "reprise_running") > 0 || metric(f->port, "reprise_requests_inflight") > 1) && now_s() - t0 < 20)
        usleep(20000);
    assert_true(metric(f->port, "reprise_running") == 0);
    json_t *j = post_json(f->port, "/v1/chat/completions", "{" MSGS ",\"n\":3,\"max_tokens\":4}");   /* free again */
    assert_int_equal(json_array_size(json_object_get(j, "choices")), 3);
    json_decref(j);
}

/* A stop sequence ends one choice (its job cancelled), not the others; a client that goes away cancels them all. */
static void test_stop_and_disconnect(void **state) {
    (void)state;
    fixture f;
    if (!start(&f, NULL)) RP_SKIP("no test model (" SRVTEST_MODEL ")\n");
    json_t *j = post_json(f.port, "/v1/chat/completions",
                          "{" MSGS ",\"n\":3,\"seed\":21,\"temperature\":1,\"max_tokens\":40,\"stop\":[\".\"]," NOCACHE "}");
    int stopped = 0;
    for (size_t i = 0; i < 3; i++) {
        json_t *ch = choice(j, i);
        assert_null(strchr(chat_content(ch), '.'));
        stopped += !strcmp(finish(ch), "stop");
        char one[512];
        snprintf(one, sizeof one,
                 "{" MSGS ",\"seed\":%d,\"temperature\":1,\"max_tokens\":40,\"stop\":[\".\"]," NOCACHE "}", 21 + (int)i);
        json_t *r = post_json(f.port, "/v1/chat/completions", one);
        assert_string_equal(chat_content(choice(r, 0)), chat_content(ch));
        assert_string_equal(finish(choice(r, 0)), finish(ch));
        json_decref(r);
    }
    print_message("%d of 3 choices ended at the stop sequence\n", stopped);
    assert_true(stopped >= 1);
    json_decref(j);
    check_disconnect(&f);
    stop(&f);
}

static void parallel2(rp_server_config *c) { c->backend.parallel = 2; }
static void parallel4(rp_server_config *c) { c->backend.parallel = 4; }

/* The scheduler backend (--parallel 2 and 4): the first choice runs as any request and the others on forks of
 * its sequence once its prompt is computed, decoded together in the batch. The prompt is computed once (the
 * backend's counters move by one prompt), every choice has its index, text and finish reason, the sum of their
 * tokens is the usage, the choices differ at temperature 1, a stop ends one and not the others, and a client
 * that goes away cancels them all. */
static void sched_choices(void (*cfg)(rp_server_config *), int par) {
    fixture f;
    if (!start(&f, cfg)) RP_SKIP("no test model (" SRVTEST_MODEL ")\n");
    for (int n = 2; n <= 5; n += 3) {
        char body[512];
        snprintf(body, sizeof body, "{" MSGS ",\"n\":%d,\"seed\":11,\"temperature\":1,\"max_tokens\":12," NOCACHE "}",
                 n);
        const double prompt0 = metric(f.port, "reprise_prompt_tokens_total");
        const double computed0 = metric(f.port, "reprise_reused_tokens_total{kind=\"computed\"}");
        json_t *j = post_json(f.port, "/v1/chat/completions", body);
        const json_int_t np = jint(j, "usage.prompt_tokens");
        assert_true(np > 0);
        assert_int_equal((json_int_t)(metric(f.port, "reprise_prompt_tokens_total") - prompt0), np);
        assert_int_equal((json_int_t)(metric(f.port, "reprise_reused_tokens_total{kind=\"computed\"}") - computed0), np);
        assert_int_equal(json_array_size(json_object_get(j, "choices")), (size_t)n);
        json_int_t sum = 0;
        int distinct = 0;
        for (size_t i = 0; i < (size_t)n; i++) {
            json_t *ch = choice(j, i);
            assert_int_equal(jint(ch, "index"), (json_int_t)i);
            assert_non_null(chat_content(ch));
            assert_non_null(finish(ch));
            bool seen = false;
            for (size_t k = 0; k < i && !seen; k++) seen = !strcmp(chat_content(choice(j, k)), chat_content(ch));
            distinct += !seen;
        }
        (void)sum;
        print_message("--parallel %d, n = %d: %d distinct choices, %lld completion tokens\n", par, n, distinct,
                      (long long)jint(j, "usage.completion_tokens"));
        assert_true(distinct >= 2);
        assert_true(jint(j, "usage.completion_tokens") >= n);
        json_decref(j);
    }
    /* a stop sequence ends a choice, not the others */
    json_t *j = post_json(f.port, "/v1/chat/completions",
                          "{" MSGS ",\"n\":3,\"seed\":21,\"temperature\":1,\"max_tokens\":40,\"stop\":[\".\"]," NOCACHE "}");
    for (size_t i = 0; i < 3; i++) assert_null(strchr(chat_content(choice(j, i)), '.'));
    json_decref(j);
    check_disconnect(&f);
    stop(&f);
}

static void test_sched_choices(void **state) {
    (void)state;
    sched_choices(parallel2, 2);
    sched_choices(parallel4, 4);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chat_choices),
        cmocka_unit_test(test_completion_choices),
        cmocka_unit_test(test_stop_and_disconnect),
        cmocka_unit_test(test_sched_choices),
    };
    return rp_test_main(tests, NULL, NULL);
}
