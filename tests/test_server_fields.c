/* test_server_fields.c — the request fields each endpoint takes (request_fields.c, docs/server.md "Request
 * fields"): OpenAI's honoured or accepted-with-no-effect ones pass, a feature this server lacks passes only at its
 * off value, anything else is a 400 naming the field; the same over HTTP on every endpoint. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/request.h"
#include "srvtest.h"
#include "testutil.h"

#define MSG "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]"

/* Parses `extra` (more members) for endpoint ep; on failure *e says why. */
static rp_status parse_with(rp_srv_endpoint ep, const char *extra, rp_srv_request *r, rp_api_error *e) {
    char body[2048];
    snprintf(body, sizeof body, "{%s%s%s}", ep == RP_EP_CHAT ? MSG : "\"prompt\":\"x\"", extra[0] ? "," : "", extra);
    const rp_srv_limits lim = rp_srv_default_limits(512);
    memset(e, 0, sizeof *e);
    return rp_srv_parse_request(ep, body, strlen(body), &lim, r, e);
}

static void accepted(rp_srv_endpoint ep, const char *extra) {
    rp_srv_request r;
    rp_api_error e;
    rp_status st = parse_with(ep, extra, &r, &e);
    if (st != RP_OK) fail_msg("refused (%s): %s", e.message, extra);
    rp_srv_request_free(&r);
}

static void refused(rp_srv_endpoint ep, const char *extra, const char *param, const char *code) {
    rp_srv_request r;
    rp_api_error e;
    if (parse_with(ep, extra, &r, &e) == RP_OK) {
        rp_srv_request_free(&r);
        fail_msg("accepted: %s", extra);
    }
    assert_int_equal(e.http, 400);
    assert_string_equal(e.type, "invalid_request_error");
    assert_string_equal(e.param, param);
    if (code) assert_string_equal(e.code, code);
    assert_non_null(strstr(e.message, param));   /* the message names it too */
}

static void test_known_fields(void **state) {
    (void)state;
    /* OpenAI's fields that cannot change the reply, and what the openai client and front ends send */
    accepted(RP_EP_CHAT, "\"user\":\"u1\",\"store\":false,\"metadata\":{\"k\":\"v\"},\"service_tier\":\"auto\","
                         "\"parallel_tool_calls\":true,\"stream_options\":{\"include_usage\":true},\"stream\":true,"
                         "\"prompt_cache_key\":\"k\",\"safety_identifier\":\"s\","
                         "\"prediction\":{\"type\":\"content\",\"content\":\"x\"}");
    accepted(RP_EP_CHAT, "\"store\":true,\"modalities\":[\"text\"],\"audio\":null,\"verbosity\":\"medium\","
                         "\"web_search_options\":null,\"functions\":null");
    accepted(RP_EP_COMPLETIONS, "\"user\":\"u1\",\"best_of\":1,\"echo\":false,\"suffix\":\"\",\"stream_options\":null");
    /* llama-server's: honoured, or at the off value of a sampler this server lacks */
    accepted(RP_EP_CHAT, "\"top_k\":40,\"min_p\":0.05,\"repeat_penalty\":1.1,\"repeat_last_n\":32,\"cache_prompt\":true,"
                         "\"id_slot\":-1,\"typical_p\":1.0,\"mirostat\":0,\"mirostat_tau\":5,\"mirostat_eta\":0.1,"
                         "\"tfs_z\":1,\"dry_multiplier\":0,\"dry_base\":1.75,\"xtc_probability\":0,\"dynatemp_range\":0");
    accepted(RP_EP_COMPLETIONS, "\"grammar\":\"root ::= \\\"a\\\"\",\"ignore_eos\":true");
    /* n_predict is max_tokens' llama-server name; max_tokens wins; ignore_eos parsed */
    rp_srv_request r;
    rp_api_error e;
    assert_int_equal(parse_with(RP_EP_COMPLETIONS, "\"n_predict\":7,\"ignore_eos\":true", &r, &e), RP_OK);
    assert_int_equal(r.max_tokens, 7);
    assert_true(r.ignore_eos);
    rp_srv_request_free(&r);
    assert_int_equal(parse_with(RP_EP_COMPLETIONS, "\"n_predict\":7,\"max_tokens\":3", &r, &e), RP_OK);
    assert_int_equal(r.max_tokens, 3);
    assert_false(r.ignore_eos);
    rp_srv_request_free(&r);
    assert_int_equal(parse_with(RP_EP_CHAT, "\"n_predict\":-1", &r, &e), RP_OK);
    assert_int_equal(r.max_tokens, -1);   /* llama-server's "no limit": as not given */
    rp_srv_request_free(&r);
}

static void test_unknown_fields(void **state) {
    (void)state;
    refused(RP_EP_CHAT, "\"temprature\":0.5", "temprature", "unknown_parameter");
    refused(RP_EP_CHAT, "\"max_token\":5", "max_token", "unknown_parameter");
    refused(RP_EP_COMPLETIONS, "\"foo\":null", "foo", "unknown_parameter");
    /* another endpoint's field */
    refused(RP_EP_COMPLETIONS, MSG, "messages", "unknown_parameter");
    refused(RP_EP_COMPLETIONS, "\"tools\":[]", "tools", "unknown_parameter");
    refused(RP_EP_CHAT, "\"prompt\":\"x\"", "prompt", "unknown_parameter");
    refused(RP_EP_CHAT, "\"best_of\":1", "best_of", "unknown_parameter");
    /* OpenAI / llama-server features this server does not have: only their off value */
    refused(RP_EP_CHAT, "\"audio\":{\"voice\":\"alloy\",\"format\":\"mp3\"}", "audio", "unsupported_parameter");
    refused(RP_EP_CHAT, "\"modalities\":[\"text\",\"audio\"]", "modalities", "unsupported_parameter");
    refused(RP_EP_CHAT, "\"web_search_options\":{}", "web_search_options", "unsupported_parameter");
    refused(RP_EP_CHAT, "\"verbosity\":\"low\"", "verbosity", "unsupported_parameter");
    refused(RP_EP_CHAT, "\"functions\":[{\"name\":\"f\"}]", "functions", "unsupported_parameter");
    refused(RP_EP_COMPLETIONS, "\"typical_p\":0.9", "typical_p", "unsupported_parameter");
    refused(RP_EP_CHAT, "\"mirostat\":2", "mirostat", "unsupported_parameter");
    refused(RP_EP_CHAT, "\"dry_multiplier\":0.8", "dry_multiplier", "unsupported_parameter");
    /* an accepted-and-ignored field still has OpenAI's type */
    refused(RP_EP_CHAT, "\"user\":5", "user", NULL);
    refused(RP_EP_CHAT, "\"metadata\":\"x\"", "metadata", NULL);
    refused(RP_EP_CHAT, "\"ignore_eos\":1", "ignore_eos", NULL);
}

static void embeddings_on(rp_server_config *c) { c->embeddings = true; }

/* Over HTTP: the error body in OpenAI's shape on the three endpoints. */
static void test_http(void **state) {
    (void)state;
    fixture f;
    if (!start(&f, embeddings_on)) RP_SKIP("../shared/%s not found\n", SRVTEST_MODEL);
    static const struct { const char *path, *body, *param; } k_bad[] = {
        {"/v1/chat/completions", "{" MSG ",\"max_tokens\":2,\"frobnicate\":1}", "frobnicate"},
        {"/v1/completions", "{\"prompt\":\"x\",\"max_tokens\":2,\"n_probs\":3}", "n_probs"},
        {"/v1/embeddings", "{\"input\":\"x\",\"encoding\":\"float\"}", "encoding"},
        {"/embedding", "{\"content\":\"x\",\"embd_normalize\":-1}", "embd_normalize"},
        {"/v1/embeddings", "{\"input\":\"x\",\"content\":\"y\"}", "content"},
    };
    for (size_t i = 0; i < sizeof k_bad / sizeof k_bad[0]; i++) {
        resp r = post(f.port, k_bad[i].path, k_bad[i].body);
        expect_error_body(&r, 400, NULL);
        json_t *j = parse(&r);
        json_t *err = json_object_get(j, "error");
        assert_string_equal(json_string_value(json_object_get(err, "param")), k_bad[i].param);
        assert_string_equal(json_string_value(json_object_get(err, "type")), "invalid_request_error");
        json_decref(j);
        resp_free(&r);
    }
    static const struct { const char *path, *body; } k_ok[] = {
        {"/v1/chat/completions", "{" MSG ",\"max_tokens\":2,\"user\":\"u\",\"store\":false,\"service_tier\":\"default\"}"},
        {"/v1/completions", "{\"prompt\":\"x\",\"max_tokens\":2,\"user\":\"u\",\"cache_prompt\":true}"},
        {"/v1/embeddings", "{\"input\":\"x\",\"user\":\"u\",\"encoding_format\":\"float\"}"},
        {"/embedding", "{\"content\":\"x\",\"embd_normalize\":2}"},
    };
    for (size_t i = 0; i < sizeof k_ok / sizeof k_ok[0]; i++) {
        resp r = post(f.port, k_ok[i].path, k_ok[i].body);
        if (r.status != 200) fail_msg("%s %s: %d %s", k_ok[i].path, k_ok[i].body, r.status, r.body);
        resp_free(&r);
    }
    stop(&f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_known_fields),
        cmocka_unit_test(test_unknown_fields),
        cmocka_unit_test(test_http),
    };
    return rp_test_main(tests, NULL, NULL);
}
