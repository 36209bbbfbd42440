#define _GNU_SOURCE
/* test_server_utility.c — llama-server's utility endpoints (/tokenize, /detokenize, /props), /health while the
 * model loads, CORS, logprobs and the honest usage numbers; on both backends (--parallel 1 and 4). */
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "reprise.h"
#include "srvtest.h"
#include "testutil.h"

static void parallel4(rp_server_config *c) { c->backend.parallel = 4; }

static const char *jstr_at(json_t *o, const char *key) { return json_string_value(json_object_get(o, key)); }

/* ------------------------------------------------------------ /tokenize, /detokenize */

static void tokenize_checks(uint16_t port) {
    const char *text = "Once upon a time, there was a little dog.";
    resp r = post(port, "/tokenize", "{\"content\":\"Once upon a time, there was a little dog.\"}");
    assert_int_equal(r.status, 200);
    json_t *j = parse(&r);
    json_t *toks = json_object_get(j, "tokens");
    assert_true(json_is_array(toks));
    const size_t n = json_array_size(toks);
    assert_true(n > 5);
    for (size_t i = 0; i < n; i++) assert_true(json_is_integer(json_array_get(toks, i)));
    /* no BOS unless asked */
    assert_int_not_equal(json_integer_value(json_array_get(toks, 0)), 1);
    /* detokenize: the round trip gives the text back */
    char *body = json_dumps(j, JSON_COMPACT);   /* {"tokens": [...]} is /detokenize's body as it is */
    resp d = post(port, "/detokenize", body);
    free(body);
    assert_int_equal(d.status, 200);
    json_t *dj = parse(&d);
    const char *back = jstr_at(dj, "content");
    assert_non_null(back);
    while (*back == ' ') back++;   /* a SentencePiece vocabulary's leading space */
    assert_string_equal(back, text);
    json_decref(dj);
    resp_free(&d);
    /* add_special: BOS first, then the same tokens */
    resp b = post(port, "/v1/tokenize", "{\"content\":\"Once upon a time, there was a little dog.\",\"add_special\":true}");
    assert_int_equal(b.status, 200);
    json_t *bj = parse(&b);
    json_t *bt = json_object_get(bj, "tokens");
    assert_int_equal(json_array_size(bt), n + 1);
    assert_int_equal(json_integer_value(json_array_get(bt, 0)), 1);   /* stories260K's BOS */
    for (size_t i = 0; i < n; i++)
        assert_int_equal(json_integer_value(json_array_get(bt, i + 1)), json_integer_value(json_array_get(toks, i)));
    json_decref(bj);
    resp_free(&b);
    /* with_pieces: {id, piece} with the same ids; the pieces concatenate to the detokenized text */
    resp p = post(port, "/tokenize", "{\"content\":\"Once upon a time, there was a little dog.\",\"with_pieces\":true}");
    assert_int_equal(p.status, 200);
    json_t *pj = parse(&p);
    json_t *pt = json_object_get(pj, "tokens");
    assert_int_equal(json_array_size(pt), n);
    char joined[512] = "";
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(pt, i);
        assert_int_equal(json_object_size(e), 2);
        assert_int_equal(json_integer_value(json_object_get(e, "id")), json_integer_value(json_array_get(toks, i)));
        const char *piece = jstr_at(e, "piece");
        assert_non_null(piece);
        strncat(joined, piece, sizeof joined - strlen(joined) - 1);
    }
    const char *jb = joined;
    while (*jb == ' ') jb++;
    assert_string_equal(jb, text);
    json_decref(pj);
    resp_free(&p);
    json_decref(j);
    resp_free(&r);
    /* errors: 400 naming the field, 405 for the wrong method */
    resp e = post(port, "/tokenize", "{\"content\":5}");
    expect_error_body(&e, 400, NULL);
    json_t *ej = parse(&e);
    assert_string_equal(jstr_at(json_object_get(ej, "error"), "param"), "content");
    json_decref(ej);
    resp_free(&e);
    e = post(port, "/detokenize", "{\"tokens\":[5,-1]}");
    expect_error_body(&e, 400, NULL);
    ej = parse(&e);
    assert_string_equal(jstr_at(json_object_get(ej, "error"), "param"), "tokens[1]");
    json_decref(ej);
    resp_free(&e);
    expect_error(port, "POST", "/detokenize", NULL, "{\"tokens\":[99999999]}", 400, NULL);
    expect_error(port, "POST", "/tokenize", NULL, "{not json", 400, "invalid_json");
    resp g = http(port, "GET", "/tokenize", NULL, NULL);
    expect_error_body(&g, 405, "method_not_allowed");
    assert_non_null(strstr(g.head, "Allow: POST"));
    resp_free(&g);
    /* an empty content is no tokens; an empty array is "" */
    resp z = post(port, "/tokenize", "{\"content\":\"\"}");
    assert_int_equal(z.status, 200);
    assert_string_equal(z.body, "{\"tokens\":[]}");
    resp_free(&z);
    z = post(port, "/detokenize", "{\"tokens\":[]}");
    assert_int_equal(z.status, 200);
    assert_string_equal(z.body, "{\"content\":\"\"}");
    resp_free(&z);
}

static void props_checks(uint16_t port, rp_server *srv, int parallel) {
    resp r = http(port, "GET", "/props", NULL, NULL);
    assert_int_equal(r.status, 200);
    json_t *j = parse(&r);
    assert_int_equal(jint(j, "total_slots"), parallel);
    assert_int_equal(jint(j, "default_generation_settings.n_ctx"), rp_server_n_ctx(srv));
    assert_int_equal(jint(j, "default_generation_settings.params.n_predict"), 2048);
    assert_int_equal(jint(j, "default_generation_settings.params.top_k"), 0);
    assert_true(json_real_value(json_object_get(json_object_get(json_object_get(j, "default_generation_settings"),
                                                                "params"), "temperature")) == 1.0);
    const char *mp = jstr_at(j, "model_path");
    assert_non_null(mp);
    assert_non_null(strstr(mp, "stories260K.gguf"));
    assert_string_equal(jstr_at(j, "model_alias"), "stories260K");
    assert_non_null(jstr_at(j, "chat_template"));
    const char *bi = jstr_at(j, "build_info");
    assert_non_null(bi);
    assert_int_equal(strncmp(bi, "reprise-", 8), 0);
    assert_string_equal(bi + 8, rp_version());
    assert_string_equal(jstr_at(json_object_get(j, "reprise"), "backend"), parallel > 1 ? "sched" : "core");
    assert_string_equal(jstr_at(j, "bos_token"), "<s>");
    json_decref(j);
    resp_free(&r);
    resp p = http(port, "POST", "/props", NULL, "{}");
    expect_error_body(&p, 405, "method_not_allowed");
    resp_free(&p);
}

static void test_utility_core(void **state) {
    (void)state;
    fixture f;
    if (!start(&f, NULL)) RP_SKIP("no test model\n");
    tokenize_checks(f.port);
    props_checks(f.port, f.srv, 1);
    stop(&f);
}

static void test_utility_sched(void **state) {
    (void)state;
    fixture f;
    if (!start(&f, parallel4)) RP_SKIP("no test model\n");
    tokenize_checks(f.port);
    props_checks(f.port, f.srv, 4);
    stop(&f);
}

/* ------------------------------------------------------------ /health while the model loads */

typedef struct slow_load {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool release, listening, done, in_load;
    uint16_t port;
    rp_server_config cfg;
    rp_server *srv;
    rp_status st;
} slow_load;

static void on_listening(void *user, uint16_t port) {
    slow_load *s = user;
    pthread_mutex_lock(&s->mu);
    s->port = port;
    s->listening = true;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

/* The model load's progress hook, held until the test releases it (a deliberately slow load). */
static bool hold_load(void *user, uint64_t done, uint64_t total) {
    (void)done, (void)total;
    slow_load *s = user;
    pthread_mutex_lock(&s->mu);
    s->in_load = true;
    pthread_cond_broadcast(&s->cv);
    struct timespec until;   /* never forever: a server that does not listen before loading fails the test, not hangs */
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 20;
    while (!s->release && pthread_cond_timedwait(&s->cv, &s->mu, &until) == 0) {}
    pthread_mutex_unlock(&s->mu);
    return true;
}

static void *start_thread(void *arg) {
    slow_load *s = arg;
    rp_status st = rp_server_start(&s->cfg, &s->srv);
    pthread_mutex_lock(&s->mu);
    s->st = st;
    s->done = true;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

static void loading_case(int parallel) {
    const char *mp = rp_test_shared(SRVTEST_MODEL);
    if (!mp) RP_SKIP("no test model\n");
    slow_load s;
    memset(&s, 0, sizeof s);
    pthread_mutex_init(&s.mu, NULL);
    pthread_cond_init(&s.cv, NULL);
    s.cfg = rp_server_default_config();
    s.cfg.backend.model_path = mp;
    s.cfg.backend.n_threads = 1;
    s.cfg.backend.parallel = parallel;
    s.cfg.port = 0;
    s.cfg.quiet = true;
    s.cfg.on_listening = on_listening;
    s.cfg.on_listening_user = &s;
    s.cfg.backend.load_progress = hold_load;
    s.cfg.backend.load_progress_user = &s;
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, start_thread, &s), 0);
    pthread_mutex_lock(&s.mu);
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 10;
    while (!(s.listening && s.in_load) && !s.done && pthread_cond_timedwait(&s.cv, &s.mu, &until) == 0) {}
    pthread_mutex_unlock(&s.mu);
    assert_true(s.listening);
    assert_false(s.done);
    /* the model is held mid-load: connections are answered, with 503 */
    resp h = http(s.port, "GET", "/health", NULL, NULL);
    assert_int_equal(h.status, 503);
    assert_non_null(strstr(h.head, "Retry-After: 1"));
    json_t *hj = parse(&h);
    assert_string_equal(jstr_at(hj, "status"), "loading");
    assert_int_equal(jint(hj, "error.code"), 503);
    assert_string_equal(jstr_at(json_object_get(hj, "error"), "type"), "unavailable_error");
    json_decref(hj);
    resp_free(&h);
    expect_error(s.port, "GET", "/v1/models", NULL, NULL, 503, "model_loading");
    expect_error(s.port, "GET", "/props", NULL, NULL, 503, "model_loading");
    expect_error(s.port, "POST", "/tokenize", NULL, "{\"content\":\"a\"}", 503, "model_loading");
    expect_error(s.port, "POST", "/v1/chat/completions", NULL,
                 "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":2}", 503, "model_loading");
    expect_error(s.port, "GET", "/nope", NULL, NULL, 404, "not_found");
    /* released: the start returns and the same port serves */
    pthread_mutex_lock(&s.mu);
    s.release = true;
    pthread_cond_broadcast(&s.cv);
    pthread_mutex_unlock(&s.mu);
    pthread_join(th, NULL);
    assert_int_equal(s.st, RP_OK);
    assert_int_equal(rp_server_port(s.srv), s.port);
    h = http(s.port, "GET", "/health", NULL, NULL);
    assert_int_equal(h.status, 200);
    hj = parse(&h);
    assert_string_equal(jstr_at(hj, "status"), "ok");
    json_decref(hj);
    resp_free(&h);
    resp c = post(s.port, "/v1/completions", "{\"prompt\":\"Once\",\"max_tokens\":3,\"temperature\":0}");
    assert_int_equal(c.status, 200);
    resp_free(&c);
    rp_server_stop(s.srv);
    pthread_mutex_destroy(&s.mu);
    pthread_cond_destroy(&s.cv);
}

static void test_health_loading(void **state) {
    (void)state;
    loading_case(1);
    loading_case(4);
}


/* ------------------------------------------------------------ CORS */

static void cors_two(rp_server_config *c) {
    c->cors_origins = "http://a.test, http://b.test:3000/";
    c->api_key = "k-cors";
}
static void cors_any(rp_server_config *c) { c->cors_origins = "*"; }

/* `line` is "\r\nName: value\r\n": a whole header line (the head ends without its last line end). */
static bool has_header(const resp *r, const char *line) {
    char h[sizeof r->head + 4];
    snprintf(h, sizeof h, "%s\r\n", r->head);
    return strcasestr(h, line) != NULL;
}

#define AUTH_A "Authorization: Bearer k-cors\r\nOrigin: http://a.test\r\n"

static void test_cors(void **state) {
    (void)state;
    fixture f;
    if (!start(&f, cors_two)) RP_SKIP("no test model\n");
    /* a preflight: 204 with the four headers, no API key needed */
    resp r = http(f.port, "OPTIONS", "/v1/chat/completions", "Origin: http://a.test\r\nAccess-Control-Request-Method: POST\r\n"
                  "Access-Control-Request-Headers: authorization, content-type\r\n", NULL);
    assert_int_equal(r.status, 204);
    assert_true(has_header(&r, "\r\nAccess-Control-Allow-Origin: http://a.test\r\n"));
    assert_true(has_header(&r, "\r\nAccess-Control-Allow-Methods: POST, OPTIONS\r\n"));
    assert_true(has_header(&r, "\r\nAccess-Control-Allow-Headers: Authorization, Content-Type\r\n"));
    assert_true(has_header(&r, "\r\nAccess-Control-Max-Age: 86400\r\n"));
    assert_true(has_header(&r, "\r\nVary: Origin\r\n"));
    assert_int_equal(r.len, 0);
    resp_free(&r);
    /* the second origin, given with a trailing slash; a GET route's methods */
    r = http(f.port, "OPTIONS", "/v1/models", "Origin: http://b.test:3000\r\nAccess-Control-Request-Method: GET\r\n", NULL);
    assert_int_equal(r.status, 204);
    assert_true(has_header(&r, "\r\nAccess-Control-Allow-Origin: http://b.test:3000\r\n"));
    assert_true(has_header(&r, "\r\nAccess-Control-Allow-Methods: GET, HEAD, OPTIONS\r\n"));
    resp_free(&r);
    /* a disallowed origin: answered, but without a single CORS header (the browser then refuses) */
    r = http(f.port, "OPTIONS", "/v1/chat/completions", "Origin: http://evil.test\r\nAccess-Control-Request-Method: POST\r\n", NULL);
    assert_int_equal(r.status, 204);
    assert_null(strcasestr(r.head, "Access-Control-"));
    resp_free(&r);
    /* every answer to an allowed origin carries it: success, error, 401, 404, SSE */
    r = http(f.port, "POST", "/v1/chat/completions", AUTH_A,
             "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":3}");
    assert_int_equal(r.status, 200);
    assert_true(has_header(&r, "\r\nAccess-Control-Allow-Origin: http://a.test\r\n"));
    assert_true(has_header(&r, "\r\nAccess-Control-Expose-Headers: X-Reprise-Session, Retry-After\r\n"));
    resp_free(&r);
    r = http(f.port, "POST", "/v1/chat/completions", AUTH_A, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
             "\"max_tokens\":3,\"stream\":true}");
    assert_int_equal(r.status, 200);
    assert_true(has_header(&r, "\r\nContent-Type: text/event-stream"));
    assert_true(has_header(&r, "\r\nAccess-Control-Allow-Origin: http://a.test\r\n"));
    assert_non_null(strstr(r.body, "data: [DONE]"));
    resp_free(&r);
    r = http(f.port, "POST", "/v1/chat/completions", AUTH_A, "{bad");
    expect_error_body(&r, 400, "invalid_json");
    assert_true(has_header(&r, "\r\nAccess-Control-Allow-Origin: http://a.test\r\n"));
    resp_free(&r);
    r = http(f.port, "GET", "/v1/models", "Origin: http://a.test\r\n", NULL);   /* no key */
    expect_error_body(&r, 401, "invalid_api_key");
    assert_true(has_header(&r, "\r\nAccess-Control-Allow-Origin: http://a.test\r\n"));
    resp_free(&r);
    r = http(f.port, "GET", "/v1/nothing", AUTH_A, NULL);
    expect_error_body(&r, 404, "not_found");
    assert_true(has_header(&r, "\r\nAccess-Control-Allow-Origin: http://a.test\r\n"));
    resp_free(&r);
    r = http(f.port, "POST", "/tokenize", AUTH_A, "{\"content\":\"a\"}");
    assert_int_equal(r.status, 200);
    assert_true(has_header(&r, "\r\nAccess-Control-Allow-Origin: http://a.test\r\n"));
    resp_free(&r);
    /* a disallowed origin, or none: no CORS headers */
    r = http(f.port, "GET", "/v1/models", "Authorization: Bearer k-cors\r\nOrigin: http://a.test.evil\r\n", NULL);
    assert_int_equal(r.status, 200);
    assert_null(strcasestr(r.head, "Access-Control-"));
    resp_free(&r);
    r = http(f.port, "GET", "/health", NULL, NULL);
    assert_int_equal(r.status, 200);
    assert_null(strcasestr(r.head, "Access-Control-"));
    resp_free(&r);
    stop(&f);

    /* "*": any origin, answered with * (and no Vary) */
    if (!start(&f, cors_any)) RP_SKIP("no test model\n");
    r = http(f.port, "OPTIONS", "/v1/completions", "Origin: http://anything.test\r\nAccess-Control-Request-Method: POST\r\n", NULL);
    assert_int_equal(r.status, 204);
    assert_true(has_header(&r, "\r\nAccess-Control-Allow-Origin: *\r\n"));
    assert_null(strcasestr(r.head, "Vary: Origin"));
    resp_free(&r);
    r = http(f.port, "GET", "/props", "Origin: http://anything.test\r\n", NULL);
    assert_int_equal(r.status, 200);
    assert_true(has_header(&r, "\r\nAccess-Control-Allow-Origin: *\r\n"));
    resp_free(&r);
    stop(&f);

    /* off by default: OPTIONS is a 405 as before, no headers whatever the Origin */
    if (!start(&f, NULL)) RP_SKIP("no test model\n");
    r = http(f.port, "OPTIONS", "/v1/chat/completions", "Origin: http://a.test\r\nAccess-Control-Request-Method: POST\r\n", NULL);
    expect_error_body(&r, 405, "method_not_allowed");
    assert_null(strcasestr(r.head, "Access-Control-"));
    resp_free(&r);
    r = http(f.port, "GET", "/v1/models", "Origin: http://a.test\r\n", NULL);
    assert_int_equal(r.status, 200);
    assert_null(strcasestr(r.head, "Access-Control-"));
    resp_free(&r);
    stop(&f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_utility_core),
        cmocka_unit_test(test_utility_sched),
        cmocka_unit_test(test_health_loading),
        cmocka_unit_test(test_cors),
    };
    return rp_test_main(tests, NULL, NULL);
}
