/* test_server_grammar.c — constrained decoding through the server: response_format json_schema (chat and
 * completions), the llama.cpp `grammar` and `json_schema` fields, their 400s, and the sched backend at --parallel 4. */
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reprise.h"
#include "srvtest.h"
#include "testutil.h"

#define SCHEMA "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":10}," \
               "\"n\":{\"type\":\"integer\"},\"kind\":{\"enum\":[\"cat\",\"dog\"]}}," \
               "\"required\":[\"name\",\"n\",\"kind\"],\"additionalProperties\":false}"

static void check_object(const char *text) {
    json_error_t e;
    json_t *j = json_loads(text, JSON_DECODE_ANY, &e);
    if (!j) fail_msg("not JSON: '%s' (%s)", text, e.text);
    assert_true(json_is_object(j));
    assert_int_equal(json_object_size(j), 3);
    assert_true(json_is_string(json_object_get(j, "name")));
    assert_true(json_is_integer(json_object_get(j, "n")));
    const char *k = json_string_value(json_object_get(j, "kind"));
    assert_non_null(k);
    assert_true(!strcmp(k, "cat") || !strcmp(k, "dog"));
    json_decref(j);
}

static const char *choice_text(json_t *j, bool chat) {
    json_t *c0 = json_array_get(json_object_get(j, "choices"), 0);
    if (chat) return json_string_value(json_object_get(json_object_get(c0, "message"), "content"));
    return json_string_value(json_object_get(c0, "text"));
}

static void test_core_backend(void **state) {
    (void)state;
    fixture f;
    if (!start(&f, NULL)) RP_SKIP("no test model\n");
    /* completions, response_format json_schema */
    resp r = post(f.port, "/v1/completions",
                  "{\"prompt\":\"Once upon a time\",\"max_tokens\":200,\"temperature\":0,"
                  "\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"x\",\"strict\":true,\"schema\":" SCHEMA "}}}");
    assert_int_equal(r.status, 200);
    json_t *j = parse(&r);
    print_message("completion: %s\n", choice_text(j, false));
    check_object(choice_text(j, false));
    json_decref(j);
    resp_free(&r);
    /* chat, the llama.cpp json_schema field, sampled (not greedy) */
    r = post(f.port, "/v1/chat/completions",
             "{\"messages\":[{\"role\":\"user\",\"content\":\"A cat\"}],\"max_tokens\":200,\"temperature\":1,\"seed\":7,"
             "\"json_schema\":" SCHEMA "}");
    assert_int_equal(r.status, 200);
    j = parse(&r);
    print_message("chat: %s\n", choice_text(j, true));
    check_object(choice_text(j, true));
    json_decref(j);
    resp_free(&r);
    /* json_object mode: one JSON object */
    r = post(f.port, "/v1/chat/completions",
             "{\"messages\":[{\"role\":\"user\",\"content\":\"A dog\"}],\"max_tokens\":150,\"temperature\":0,"
             "\"response_format\":{\"type\":\"json_object\"}}");
    assert_int_equal(r.status, 200);
    j = parse(&r);
    {   /* a whole object when it stopped; when max_tokens cut it, a prefix the object grammar accepts */
        const char *txt = choice_text(j, true);
        const char *fin = json_string_value(json_object_get(json_array_get(json_object_get(j, "choices"), 0), "finish_reason"));
        if (fin && !strcmp(fin, "stop")) {
            json_error_t e;
            json_t *o = json_loads(txt, 0, &e);
            if (!o || !json_is_object(o)) fail_msg("json_object reply is no object: %s", txt);
            json_decref(o);
        } else {
            rp_grammar *g = NULL;
            rp_grammar_state *gs = NULL;
            assert_int_equal(rp_grammar_from_json_schema("{\"type\":\"object\"}", &g), RP_OK);
            assert_int_equal(rp_grammar_state_new(g, NULL, &gs), RP_OK);
            assert_true(txt[0] == '{');
            assert_int_equal(rp_grammar_accept_bytes(gs, txt, strlen(txt)), RP_OK);
            rp_grammar_state_free(gs);
            rp_grammar_free(g);
        }
    }
    json_decref(j);
    resp_free(&r);
    /* a GBNF grammar */
    r = post(f.port, "/v1/completions",
             "{\"prompt\":\"Lily\",\"max_tokens\":20,\"temperature\":0,\"grammar\":\"root ::= (\\\"yes\\\" | \\\"no\\\") \\\".\\\"\"}");
    assert_int_equal(r.status, 200);
    j = parse(&r);
    const char *t = choice_text(j, false);
    assert_true(!strcmp(t, "yes.") || !strcmp(t, "no."));
    json_decref(j);
    resp_free(&r);
    /* errors: a bad grammar, an unconvertible schema */
    r = post(f.port, "/v1/completions", "{\"prompt\":\"x\",\"grammar\":\"root ::= foo\"}");
    assert_int_equal(r.status, 400);
    assert_non_null(strstr(r.body, "undefined rule"));
    resp_free(&r);
    r = post(f.port, "/v1/completions", "{\"prompt\":\"x\",\"json_schema\":{\"$ref\":\"#/$defs/none\"}}");
    assert_int_equal(r.status, 400);
    resp_free(&r);
    r = post(f.port, "/v1/completions", "{\"prompt\":\"x\",\"response_format\":{\"type\":\"json_schema\"}}");
    assert_int_equal(r.status, 400);
    resp_free(&r);
    stop(&f);
}

static void parallel4(rp_server_config *c) { c->backend.parallel = 4; }

typedef struct bgreq {
    uint16_t port;
    int status;
    char text[2048];
} bgreq;

static void *bg_post(void *arg) {
    bgreq *b = arg;
    resp r = post(b->port, "/v1/completions",
                  "{\"prompt\":\"Once upon a time\",\"max_tokens\":200,\"temperature\":0,\"json_schema\":" SCHEMA "}");
    b->status = r.status;
    json_error_t e;
    json_t *j = r.body ? json_loads(r.body, 0, &e) : NULL;
    const char *t = j ? choice_text(j, false) : NULL;
    snprintf(b->text, sizeof b->text, "%s", t ? t : "");
    json_decref(j);
    resp_free(&r);
    return NULL;
}

/* The scheduler backend (--parallel 4): four constrained requests at once, each output matching the schema. */
static void test_sched_backend(void **state) {
    (void)state;
    fixture f;
    if (!start(&f, parallel4)) RP_SKIP("no test model\n");
    bgreq b[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        b[i] = (bgreq){.port = f.port};
        assert_int_equal(pthread_create(&th[i], NULL, bg_post, &b[i]), 0);
    }
    for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(b[i].status, 200);
        print_message("sched %d: %s\n", i, b[i].text);
        check_object(b[i].text);
    }
    stop(&f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_core_backend),
        cmocka_unit_test(test_sched_backend),
    };
    return rp_test_main(tests, NULL, NULL);
}
