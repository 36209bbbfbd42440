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
#include "server/backend.h"
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

/* ------------------------------------------------------------ logprobs */

static double num(json_t *v) {
    assert_true(json_is_number(v));
    return json_number_value(v);
}

/* One chat logprobs entry: its shape, bytes = the token's UTF-8, k alternatives sorted, the chosen one among
 * them with the same value when greedy (the chosen token is the most likely). */
static void check_chat_entry(json_t *e, int k, bool greedy) {
    assert_int_equal(json_object_size(e), 4);
    const char *tok = jstr_at(e, "token");
    assert_non_null(tok);
    const double lp = num(json_object_get(e, "logprob"));
    assert_true(lp <= 0 && lp > -100);
    json_t *bytes = json_object_get(e, "bytes");
    assert_int_equal(json_array_size(bytes), strlen(tok));
    for (size_t i = 0; i < json_array_size(bytes); i++)
        assert_int_equal(json_integer_value(json_array_get(bytes, i)), (unsigned char)tok[i]);
    json_t *top = json_object_get(e, "top_logprobs");
    assert_int_equal(json_array_size(top), (size_t)k);
    double sum = 0, prev = 0;
    bool found = false;
    for (int i = 0; i < k; i++) {
        json_t *a = json_array_get(top, (size_t)i);
        assert_int_equal(json_object_size(a), 3);
        const double x = num(json_object_get(a, "logprob"));
        assert_true(x <= 0);
        if (i > 0) assert_true(x <= prev);
        prev = x;
        sum += exp(x);
        if (!strcmp(jstr_at(a, "token"), tok) && fabs(x - lp) < 1e-6) found = true;
        assert_true(json_is_array(json_object_get(a, "bytes")));
    }
    assert_true(sum <= 1.0 + 1e-4);
    if (k > 0 && greedy) {
        assert_true(found);
        assert_true(fabs(num(json_object_get(json_array_get(top, 0), "logprob")) - lp) < 1e-6);
    }
    if (k > 0 && lp > prev + 1e-6) assert_true(found);   /* more likely than the k-th: it is listed */
}

static json_t *chat_logprobs(uint16_t port, const char *extra, json_t **content_out) {
    char body[1024];
    snprintf(body, sizeof body, "{\"messages\":[{\"role\":\"user\",\"content\":\"Once upon a time\"}],\"max_tokens\":12%s}", extra);
    resp r = post(port, "/v1/chat/completions", body);
    if (r.status != 200) print_message("%s\n", r.body);
    assert_int_equal(r.status, 200);
    json_t *j = parse(&r);
    resp_free(&r);
    json_t *c0 = json_array_get(json_object_get(j, "choices"), 0);
    *content_out = json_object_get(json_object_get(c0, "message"), "content");
    return j;
}

/* The streamed chunks' logprobs.content, concatenated; and the streamed content. */
static json_t *stream_logprobs(uint16_t port, const char *path, const char *body, char *text, size_t cap) {
    resp r = post(port, path, body);
    assert_int_equal(r.status, 200);
    json_t *all = json_array();
    text[0] = '\0';
    for (char *line = strtok(r.body, "\n"); line; line = strtok(NULL, "\n")) {
        if (strncmp(line, "data: {", 7) != 0) continue;
        json_error_t e;
        json_t *j = json_loads(line + 6, 0, &e);
        assert_non_null(j);
        json_t *c0 = json_array_get(json_object_get(j, "choices"), 0);
        json_t *lp = json_object_get(c0, "logprobs");
        if (c0) assert_non_null(lp);   /* present in every chunk, null when it brings no token */
        const char *piece = json_object_get(c0, "delta") ? jstr_at(json_object_get(c0, "delta"), "content")
                                                          : jstr_at(c0, "text");
        if (piece) strncat(text, piece, cap - strlen(text) - 1);
        if (json_is_object(lp)) {
            json_t *content = json_object_get(lp, "content");
            if (content) json_array_extend(all, content);
            else json_array_append(all, lp);   /* legacy: one object per chunk */
        }
        json_decref(j);
    }
    resp_free(&r);
    return all;
}

static void logprobs_checks(uint16_t port) {
    /* greedy chat with 5 alternatives */
    json_t *content;
    json_t *j = chat_logprobs(port, ",\"temperature\":0,\"logprobs\":true,\"top_logprobs\":5", &content);
    json_t *c0 = json_array_get(json_object_get(j, "choices"), 0);
    json_t *lp = json_object_get(c0, "logprobs");
    assert_int_equal(json_object_size(lp), 2);
    assert_true(json_is_null(json_object_get(lp, "refusal")));
    json_t *entries = json_object_get(lp, "content");
    const size_t n = json_array_size(entries);
    assert_true(n > 0 && n <= 12);
    char joined[2048] = "";
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(entries, i);
        check_chat_entry(e, 5, true);
        strncat(joined, jstr_at(e, "token"), sizeof joined - strlen(joined) - 1);
    }
    /* the tokens spell the reply (the reply drops the first token's leading space) */
    const char *jb = joined, *cb = json_string_value(content);
    while (*jb == ' ') jb++;
    while (*cb == ' ') cb++;
    assert_string_equal(jb, cb);
    /* completion_tokens counts them (plus an end-of-generation token, which has no text) */
    const json_int_t ct = jint(j, "usage.completion_tokens");
    assert_true((size_t)ct == n || (size_t)ct == n + 1);
    /* streamed: the same entries, spread over the chunks */
    char stext[2048];
    json_t *streamed = stream_logprobs(port, "/v1/chat/completions",
                                       "{\"messages\":[{\"role\":\"user\",\"content\":\"Once upon a time\"}],\"max_tokens\":12,"
                                       "\"temperature\":0,\"logprobs\":true,\"top_logprobs\":5,\"stream\":true}",
                                       stext, sizeof stext);
    assert_string_equal(stext, json_string_value(content));
    assert_int_equal(json_array_size(streamed), n);
    for (size_t i = 0; i < n; i++) {
        json_t *a = json_array_get(entries, i), *b = json_array_get(streamed, i);
        assert_string_equal(jstr_at(a, "token"), jstr_at(b, "token"));
        assert_true(fabs(num(json_object_get(a, "logprob")) - num(json_object_get(b, "logprob"))) < 1e-4);
        check_chat_entry(b, 5, true);
    }
    json_decref(streamed);
    json_decref(j);
    /* sampled, 20 alternatives: consistent (a chosen token more likely than the 20th is among them) */
    j = chat_logprobs(port, ",\"temperature\":1.5,\"seed\":3,\"logprobs\":true,\"top_logprobs\":20", &content);
    entries = json_object_get(json_object_get(json_array_get(json_object_get(j, "choices"), 0), "logprobs"), "content");
    assert_true(json_array_size(entries) > 0);
    for (size_t i = 0; i < json_array_size(entries); i++) check_chat_entry(json_array_get(entries, i), 20, false);
    json_decref(j);
    /* logprobs without alternatives; and none asked: null */
    j = chat_logprobs(port, ",\"temperature\":0,\"logprobs\":true", &content);
    entries = json_object_get(json_object_get(json_array_get(json_object_get(j, "choices"), 0), "logprobs"), "content");
    for (size_t i = 0; i < json_array_size(entries); i++) check_chat_entry(json_array_get(entries, i), 0, true);
    json_decref(j);
    j = chat_logprobs(port, ",\"temperature\":0", &content);
    assert_true(json_is_null(json_object_get(json_array_get(json_object_get(j, "choices"), 0), "logprobs")));
    json_decref(j);

    /* legacy completions: tokens, token_logprobs, top_logprobs (dicts), text_offset */
    resp r = post(port, "/v1/completions", "{\"prompt\":\"Once upon a time\",\"max_tokens\":10,\"temperature\":0,\"logprobs\":3}");
    assert_int_equal(r.status, 200);
    j = parse(&r);
    resp_free(&r);
    c0 = json_array_get(json_object_get(j, "choices"), 0);
    lp = json_object_get(c0, "logprobs");
    assert_int_equal(json_object_size(lp), 4);
    json_t *toks = json_object_get(lp, "tokens"), *tlp = json_object_get(lp, "token_logprobs"),
           *tops = json_object_get(lp, "top_logprobs"), *offs = json_object_get(lp, "text_offset");
    const size_t m = json_array_size(toks);
    assert_true(m > 0);
    assert_int_equal(json_array_size(tlp), m);
    assert_int_equal(json_array_size(tops), m);
    assert_int_equal(json_array_size(offs), m);
    size_t off = 0;
    joined[0] = '\0';
    for (size_t i = 0; i < m; i++) {
        const char *t = json_string_value(json_array_get(toks, i));
        assert_int_equal(json_integer_value(json_array_get(offs, i)), (json_int_t)off);
        off += strlen(t);
        strncat(joined, t, sizeof joined - strlen(joined) - 1);
        json_t *d = json_array_get(tops, i);
        assert_true(json_object_size(d) >= 1 && json_object_size(d) <= 3);
        double best = -1e9;
        const char *k;
        json_t *v;
        json_object_foreach(d, k, v) if (num(v) > best) best = num(v);
        assert_true(fabs(best - num(json_array_get(tlp, i))) < 1e-6);   /* greedy: the chosen is the best */
        assert_true(fabs(num(json_object_get(d, t)) - num(json_array_get(tlp, i))) < 1e-6);
    }
    assert_string_equal(joined, jstr_at(c0, "text"));
    /* streamed: the chunks' offsets go on from one chunk to the next */
    char ctext[2048];
    json_t *chunks = stream_logprobs(port, "/v1/completions",
                                     "{\"prompt\":\"Once upon a time\",\"max_tokens\":10,\"temperature\":0,\"logprobs\":3,"
                                     "\"stream\":true}", ctext, sizeof ctext);
    assert_string_equal(ctext, jstr_at(c0, "text"));
    size_t seen = 0;
    for (size_t i = 0; i < json_array_size(chunks); i++) {
        json_t *ch = json_array_get(chunks, i);
        json_t *ct2 = json_object_get(ch, "tokens"), *co = json_object_get(ch, "text_offset");
        for (size_t t = 0; t < json_array_size(ct2); t++, seen++) {
            assert_string_equal(json_string_value(json_array_get(ct2, t)), json_string_value(json_array_get(toks, seen)));
            assert_int_equal(json_integer_value(json_array_get(co, t)), json_integer_value(json_array_get(offs, seen)));
        }
    }
    assert_int_equal(seen, m);
    json_decref(chunks);
    json_decref(j);
    /* bad values: 400 naming the field */
    expect_error(port, "POST", "/v1/completions", NULL, "{\"prompt\":\"a\",\"logprobs\":21}", 400, NULL);
    expect_error(port, "POST", "/v1/chat/completions", NULL,
                 "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"top_logprobs\":2}", 400, NULL);
}

/* The server's log-probability of the first generated token is the log-softmax of the model's raw logits
 * after the prompt, as computed here through the public API (independently of the server's code). */
static void first_token_reference(uint16_t port) {
    const char *mp = rp_test_shared(SRVTEST_MODEL);
    rp_model *m = NULL;
    assert_int_equal(rp_model_load(mp, rp_model_default_params(), &m), RP_OK);
    rp_engine_params ep = rp_engine_default_params();
    ep.n_threads = 1;
    rp_engine *e = NULL;
    assert_int_equal(rp_engine_create(m, &ep, &e), RP_OK);
    rp_seq *sq = NULL;
    assert_int_equal(rp_seq_create(e, &sq), RP_OK);
    const rp_token prompt[] = {1, 403, 407, 261, 378};
    assert_int_equal(rp_seq_feed(sq, prompt, 5), RP_OK);
    const float *lg = rp_seq_logits(sq);
    assert_non_null(lg);
    const int32_t V = rp_model_describe(m).n_vocab;
    double mx = -1e30, sum = 0;
    int32_t best = 0;
    for (int32_t i = 0; i < V; i++)
        if (lg[i] > mx) mx = lg[i], best = i;
    for (int32_t i = 0; i < V; i++) sum += exp((double)lg[i] - mx);
    const double want = (double)lg[best] - mx - log(sum);
    /* rp_logprobs agrees, and sorts its top 3 */
    float got = 0, tl[3];
    rp_token tt[3];
    assert_int_equal(rp_logprobs(lg, V, best, 3, &got, tt, tl), RP_OK);
    assert_int_equal(tt[0], best);
    assert_true(fabs(got - want) < 1e-5 && fabs(tl[0] - want) < 1e-5 && tl[1] <= tl[0] && tl[2] <= tl[1]);
    assert_int_equal(rp_logprobs(lg, V, V, 3, &got, tt, tl), RP_ERR_INVALID_ARG);
    assert_int_equal(rp_logprobs(lg, V, 0, RP_LOGPROBS_MAX_TOP + 1, NULL, tt, tl), RP_ERR_INVALID_ARG);
    resp r = post(port, "/v1/completions", "{\"prompt\":[1,403,407,261,378],\"max_tokens\":1,\"temperature\":0,\"logprobs\":1}");
    assert_int_equal(r.status, 200);
    json_t *j = parse(&r);
    json_t *lp = json_object_get(json_array_get(json_object_get(j, "choices"), 0), "logprobs");
    const double server = num(json_array_get(json_object_get(lp, "token_logprobs"), 0));
    print_message("first token %d: logprob %.6f (server %.6f)\n", best, want, server);
    assert_true(fabs(server - want) < 1e-4);
    json_decref(j);
    resp_free(&r);
    /* the same at temperature 2: logprobs are of the raw logits, before temperature */
    r = post(port, "/v1/completions", "{\"prompt\":[1,403,407,261,378],\"max_tokens\":1,\"temperature\":2,\"seed\":1,"
                                      "\"logprobs\":5}");
    assert_int_equal(r.status, 200);
    j = parse(&r);
    lp = json_object_get(json_array_get(json_object_get(j, "choices"), 0), "logprobs");
    json_t *d = json_array_get(json_object_get(lp, "top_logprobs"), 0);
    double top = -1e9;
    const char *k;
    json_t *v;
    json_object_foreach(d, k, v) if (num(v) > top) top = num(v);
    assert_true(fabs(top - want) < 1e-4);
    json_decref(j);
    resp_free(&r);
    rp_seq_free(sq);
    rp_engine_free(e);
    rp_model_free(m);
}

static void test_logprobs_core(void **state) {
    (void)state;
    fixture f;
    if (!start(&f, NULL)) RP_SKIP("no test model\n");
    logprobs_checks(f.port);
    first_token_reference(f.port);
    stop(&f);
}

/* The scheduler (speculative decoding on: n-gram drafts, accepted drafts carry their logprobs too). */
static void test_logprobs_sched(void **state) {
    (void)state;
    fixture f;
    if (!start(&f, parallel4)) RP_SKIP("no test model\n");
    logprobs_checks(f.port);
    first_token_reference(f.port);
    /* a long greedy reply: drafts were verified and accepted, and every token (accepted drafts included) has the
     * largest log-probability of its position */
    resp r = post(f.port, "/v1/completions", "{\"prompt\":\"Once upon a time\",\"max_tokens\":120,\"temperature\":0,\"logprobs\":1}");
    assert_int_equal(r.status, 200);
    json_t *j = parse(&r);
    json_t *lp = json_object_get(json_array_get(json_object_get(j, "choices"), 0), "logprobs");
    const json_int_t drafted = jint(j, "usage.reprise.draft_tokens"), accepted = jint(j, "usage.reprise.accepted_draft_tokens");
    print_message("drafted %lld, accepted %lld\n", (long long)drafted, (long long)accepted);
    assert_true(drafted > 0 && accepted > 0);
    json_t *tlp = json_object_get(lp, "token_logprobs"), *tops = json_object_get(lp, "top_logprobs");
    const size_t ct = (size_t)jint(j, "usage.completion_tokens");   /* an end-of-generation token has no entry */
    assert_true(json_array_size(tlp) == ct || json_array_size(tlp) + 1 == ct);
    for (size_t i = 0; i < json_array_size(tlp); i++) {
        json_t *d = json_array_get(tops, i);
        assert_int_equal(json_object_size(d), 1);
        const char *k;
        json_t *v;
        json_object_foreach(d, k, v) assert_true(fabs(num(v) - num(json_array_get(tlp, i))) < 1e-6);
    }
    json_decref(j);
    resp_free(&r);
    stop(&f);
}

/* ------------------------------------------------------------ honest usage numbers */

#define DOC_A "Tom lives near the river with his mother and his little sister. Every morning he walks to school along the water and looks at the boats."
#define DOC_B "Anna has a big brown dog called Max. Max likes to run in the park, to chase birds and to sleep in the sun after lunch."

static json_t *docs_turn(uint16_t port, const char *docs, const char *cache) {
    char body[2048];
    snprintf(body, sizeof body, "{\"messages\":[{\"role\":\"system\",\"content\":\"Answer.\"},{\"role\":\"user\",\"content\":"
             "\"Who has a dog?\"}],\"reprise_documents\":[%s],\"reprise_cache\":%s,\"max_tokens\":4,\"temperature\":0}",
             docs, cache);
    resp r = post(port, "/v1/chat/completions", body);
    assert_int_equal(r.status, 200);
    json_t *j = parse(&r);
    resp_free(&r);
    json_t *u = json_object_get(j, "usage");
    const json_int_t prompt = jint(u, "prompt_tokens"), cached = jint(u, "prompt_tokens_details.cached_tokens");
    const json_int_t exact = jint(u, "reprise.reused_prefix_exact"), approx = jint(u, "reprise.reused_approx");
    print_message("%s: prompt %lld, cached (exact) %lld, approx %lld (prefix approx %lld, re-rotated %lld, recomputed "
                  "%lld), computed %lld\n", cache, (long long)prompt, (long long)cached, (long long)approx,
                  (long long)jint(u, "reprise.reused_prefix_approx"), (long long)jint(u, "reprise.reused_nonprefix"),
                  (long long)jint(u, "reprise.recomputed"), (long long)jint(u, "reprise.computed"));
    /* cached_tokens is the exact part only; the approximate part is counted apart; the three make the prompt */
    assert_int_equal(cached, exact);
    assert_int_equal(jint(u, "reprise.cached_exact"), exact);
    assert_int_equal(approx, jint(u, "reprise.reused_prefix_approx") + jint(u, "reprise.reused_nonprefix"));
    assert_int_equal(cached + approx + jint(u, "reprise.computed"), prompt);
    assert_true(jint(u, "reprise.recomputed") <= jint(u, "reprise.reused_nonprefix"));
    return j;
}

static void usage_checks(uint16_t port) {
    const char *blend = "{\"mode\":\"blend\",\"recompute_ratio\":0.25}";
    json_decref(docs_turn(port, "\"" DOC_A "\",\"" DOC_B "\"", blend));
    /* the documents swapped: both are reused from elsewhere (re-rotated, blended): approximate, not cached */
    json_t *j = docs_turn(port, "\"" DOC_B "\",\"" DOC_A "\"", blend);
    json_t *u = json_object_get(j, "usage");
    assert_true(jint(u, "reprise.reused_approx") > 0);
    assert_true(jint(u, "prompt_tokens_details.cached_tokens") < jint(u, "prompt_tokens") / 2);
    json_decref(j);
    /* once more: now along the prefix path, but that KV is what blend wrote: approximate still, not cached */
    j = docs_turn(port, "\"" DOC_B "\",\"" DOC_A "\"", blend);
    u = json_object_get(j, "usage");
    assert_true(jint(u, "reprise.reused_prefix_approx") > 0);
    assert_true(jint(u, "prompt_tokens_details.cached_tokens") < jint(u, "reprise.reused_prefix"));
    json_decref(j);
    /* prefix mode asks for exact reuse only: nothing approximate, whatever the cache holds */
    const char *prefix = "{\"mode\":\"prefix\"}";
    j = docs_turn(port, "\"" DOC_B "\",\"" DOC_A "\"", prefix);
    u = json_object_get(j, "usage");
    assert_int_equal(jint(u, "reprise.reused_approx"), 0);
    assert_int_equal(jint(u, "reprise.recomputed"), 0);
    json_decref(j);
    /* the very same prompt again: exact prefix reuse, all cached */
    j = docs_turn(port, "\"" DOC_A "\",\"" DOC_B "\",\"Max is brown.\"", prefix);
    json_decref(j);
    j = docs_turn(port, "\"" DOC_A "\",\"" DOC_B "\",\"Max is brown.\"", prefix);
    u = json_object_get(j, "usage");
    assert_int_equal(jint(u, "reprise.reused_approx"), 0);
    assert_true(jint(u, "prompt_tokens_details.cached_tokens") >= jint(u, "prompt_tokens") - 1);
    json_decref(j);
}

static void test_usage_core(void **state) {
    (void)state;
    fixture f;
    if (!start(&f, NULL)) RP_SKIP("no test model\n");
    usage_checks(f.port);
    stop(&f);
}

static void test_usage_sched(void **state) {
    (void)state;
    fixture f;
    if (!start(&f, parallel4)) RP_SKIP("no test model\n");
    usage_checks(f.port);
    stop(&f);
}

/* ------------------------------------------------------------ --parallel auto */

static void parallel_auto(rp_server_config *c) { c->backend.parallel = 0; }

static void test_parallel_auto(void **state) {
    (void)state;
    const uint64_t G = 1ull << 30;
    /* llama-server's 4 slots, bounded by cores (one per two) and by memory (half of it at the full context) */
    assert_int_equal(rp_srv_auto_parallel(16, 64 * G, G), 4);
    assert_int_equal(rp_srv_auto_parallel(6, 64 * G, G), 3);
    assert_int_equal(rp_srv_auto_parallel(2, 64 * G, G), 1);
    assert_int_equal(rp_srv_auto_parallel(1, 64 * G, G), 1);
    assert_int_equal(rp_srv_auto_parallel(16, 6 * G, G), 3);
    assert_int_equal(rp_srv_auto_parallel(16, G, 4 * G), 1);
    assert_int_equal(rp_srv_auto_parallel(16, 0, G), 4);   /* memory unknown: cores only */
    /* the server resolves it once the model is loaded; /props and the backend agree */
    fixture f;
    if (!start(&f, parallel_auto)) RP_SKIP("no test model\n");
    const int n = rp_server_parallel(f.srv);
    const long cores = sysconf(_SC_NPROCESSORS_ONLN);
    print_message("auto: %d (cores %ld)\n", n, cores);
    assert_true(n >= 1 && n <= 4 && n <= (cores / 2 > 1 ? cores / 2 : 1));
    assert_string_equal(rp_server_backend_kind(f.srv), n > 1 ? "sched" : "core");
    resp r = http(f.port, "GET", "/props", NULL, NULL);
    json_t *j = parse(&r);
    assert_int_equal(jint(j, "total_slots"), n);
    json_decref(j);
    resp_free(&r);
    logprobs_checks(f.port);
    stop(&f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_utility_core),
        cmocka_unit_test(test_utility_sched),
        cmocka_unit_test(test_health_loading),
        cmocka_unit_test(test_cors),
        cmocka_unit_test(test_logprobs_core),
        cmocka_unit_test(test_logprobs_sched),
        cmocka_unit_test(test_usage_core),
        cmocka_unit_test(test_usage_sched),
        cmocka_unit_test(test_parallel_auto),
    };
    return rp_test_main(tests, NULL, NULL);
}
