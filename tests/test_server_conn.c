/* test_server_conn.c — the server against hostile and odd clients: slowloris, idle floods, per-address caps,
 * absolute deadlines, half-close, resets, and errors from inside libmicrohttpd answered as JSON. The attackers
 * connect from 127.0.0.2 and up (all of 127.0.0.0/8 is loopback on Linux), the well-behaved client from 127.0.0.1. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <jansson.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "srvtest.h"
#include "server/http_head.h"
#include "testutil.h"

#define N_ATTACK 300
#define HEADER_S 3.0   /* the fixture's deadlines: short, so that the test sees them fire */
#define BODY_S 2.0
#define IDLE_S 3.0

#define NEED_MODEL() RP_REQUIRE_SHARED(rp_test_shared(SRVTEST_MODEL), SRVTEST_MODEL)

/* Every address of 127.0.0.0/8 is loopback on Linux; elsewhere the per-address tests cannot run. */
static bool g_aliases;
#define NEED_ALIASES()                                                                      \
    do {                                                                                    \
        NEED_MODEL();                                                                       \
        if (!g_aliases) RP_SKIP("cannot bind 127.0.0.2 (127.0.0.0/8 is not all loopback here)\n"); \
    } while (0)

static void short_deadlines(rp_server_config *c) {
    c->header_timeout_s = HEADER_S;
    c->body_timeout_s = BODY_S;
    c->idle_timeout_s = IDLE_S;
}

static const char *k_chat = "{\"messages\":[{\"role\":\"user\",\"content\":\"Once upon a time\"}],\"max_tokens\":8,\"temperature\":0}";
/* long generations: the end of text is banned, so each is max_tokens long */
static const char *k_long = "{\"messages\":[{\"role\":\"user\",\"content\":\"Once\"}],\"max_tokens\":200,\"temperature\":0,"
                            "\"logit_bias\":{\"1\":-100,\"2\":-100}";

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void src_ip(int i, int n_addr, char *out, size_t cap) { snprintf(out, cap, "127.0.0.%d", 2 + i % n_addr); }

/* ------------------------------------------------------------ raw exchanges */

/* Sends `req`, optionally half-closes, and reads everything until the server closes (20 s at most). */
static char *exchange(uint16_t port, const char *src, const char *req, size_t n, bool shut_wr, size_t *out_len) {
    int fd = dial_from(port, src);
    assert_true(fd >= 0);
    struct timeval tv = {.tv_sec = 20};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    send_all(fd, req, n);
    if (shut_wr) shutdown(fd, SHUT_WR);
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (len + 4096 > cap) buf = realloc(buf, cap *= 2);
        ssize_t r = recv(fd, buf + len, cap - len - 1, 0);
        if (r <= 0) break;
        len += (size_t)r;
    }
    buf[len] = '\0';
    close(fd);
    *out_len = len;
    return buf;
}

/* Splits a byte stream into HTTP responses framed by Content-Length. Returns how many; a tail that is not
 * a whole response counts as one more with status -1. */
static int split_responses(const char *buf, size_t len, resp *out, int cap) {
    int n = 0;
    size_t off = 0;
    while (off < len && n < cap) {
        resp *r = &out[n++];
        memset(r, 0, sizeof *r);
        r->status = -1;
        const char *p = buf + off, *sep = strstr(p, "\r\n\r\n");
        if (!sep || sscanf(p, "HTTP/1.1 %d", &r->status) != 1) {
            r->status = -1;
            r->body = strdup(p);
            return n;
        }
        size_t hl = (size_t)(sep - p);
        memcpy(r->head, p, hl < sizeof r->head - 1 ? hl : sizeof r->head - 1);
        const char *cl = strcasestr(r->head, "content-length:");
        size_t blen = cl ? strtoull(cl + 15, NULL, 10) : 0;
        const char *body = sep + 4;
        if (!cl || (size_t)(body - buf) + blen > len) {
            r->status = -1;
            r->body = strdup(p);
            return n;
        }
        r->body = strndup(body, blen);
        r->len = blen;
        off = (size_t)(body - buf) + blen;
    }
    return n;
}

/* Reads one response framed by Content-Length (the connection stays open). */
static bool read_one(int fd, resp *r) {
    char buf[16384];
    size_t len = 0;
    memset(r, 0, sizeof *r);
    for (;;) {
        ssize_t got = recv(fd, buf + len, sizeof buf - 1 - len, 0);
        if (got <= 0) return false;
        len += (size_t)got;
        buf[len] = '\0';
        if (split_responses(buf, len, r, 1) == 1 && r->status > 0) return true;
        free(r->body);
        memset(r, 0, sizeof *r);
        if (len + 1 >= sizeof buf) return false;
    }
}

/* GET /health from 127.0.0.1: the seconds it took to get the whole answer (asserts it is 200). */
static double timed_health(uint16_t port) {
    double t0 = now_s();
    resp r = http(port, "GET", "/health", NULL, NULL);
    double dt = now_s() - t0;
    if (r.status != 200) print_message("/health: %d %s\n", r.status, r.body);
    assert_int_equal(r.status, 200);
    resp_free(&r);
    return dt;
}

static void chat_works(uint16_t port) {
    resp r = post(port, "/v1/chat/completions", k_chat);
    assert_int_equal(r.status, 200);
    json_t *j = parse(&r);
    assert_true(json_is_string(json_object_get(json_object_get(json_array_get(json_object_get(j, "choices"), 0), "message"), "content")));
    json_decref(j);
    resp_free(&r);
}

/* The server closed fd (EOF or reset), draining whatever it had sent first. */
static bool closed_by_server(int fd) {
    char buf[4096];
    for (;;) {
        ssize_t r = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
        if (r > 0) continue;
        return r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK);
    }
}

/* Waits until the server closed every fd in fds (until `until`); returns how many are still open. */
static int wait_closed(int *fds, int n, double until) {
    int open;
    do {
        open = 0;
        for (int i = 0; i < n; i++)
            if (fds[i] >= 0 && !closed_by_server(fds[i])) open++;
        if (open) usleep(50000);
    } while (open && now_s() < until);
    return open;
}

static void close_all(int *fds, int n) {
    for (int i = 0; i < n; i++)
        if (fds[i] >= 0) close(fds[i]);
}

/* ------------------------------------------------------------ the head checker (no model) */

static void test_head_check(void **state) {
    (void)state;
    static const struct { const char *in; rp_head_state st; int status; } cases[] = {
        {"GET / HTTP/1.1\r\nHost: x\r\n\r\n", RP_HEAD_OK, 0},
        {"GET / HTTP/1.0\n\n", RP_HEAD_OK, 0},
        {"\r\n\r\nPOST /v1/chat/completions HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}", RP_HEAD_OK, 0},
        {"GET  /spaced   HTTP/1.1  \r\n\r\n", RP_HEAD_OK, 0},
        {"GET / HTTP/1.9\r\n\r\n", RP_HEAD_OK, 0},            /* libmicrohttpd serves 1.x as 1.1 */
        {"", RP_HEAD_INCOMPLETE, 0},
        {"\r\n", RP_HEAD_INCOMPLETE, 0},
        {"GET / HTTP/1.1\r\nHost: x\r\n", RP_HEAD_INCOMPLETE, 0},
        {"GET / HTTP/2.0\r\n\r\n", RP_HEAD_BAD, 505},
        {"GET / HTTP/3.7\r\nHost: x\r\n\r\n", RP_HEAD_BAD, 505},
        {"GET / HTTP/0.9\r\n\r\n", RP_HEAD_BAD, 505},
        {"GET / HTTPX/1.1\r\n\r\n", RP_HEAD_BAD, 400},
        {"GET / HTTP/1.1x\r\n\r\n", RP_HEAD_BAD, 400},
        {"GET /\r\n\r\n", RP_HEAD_BAD, 400},
        {"GARBAGE\r\n\r\n", RP_HEAD_BAD, 400},
        {" / HTTP/1.1\r\n\r\n", RP_HEAD_BAD, 400},
        {"G(T / HTTP/1.1\r\n\r\n", RP_HEAD_BAD, 400},
        {"GET /\x01 HTTP/1.1\r\n\r\n", RP_HEAD_BAD, 400},
    };
    rp_head_verdict v;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        rp_http_head_check(cases[i].in, strlen(cases[i].in), 64, 256, &v);
        if (v.state != cases[i].st || v.status != cases[i].status)
            print_message("case %zu (%s): state %d status %d (%s)\n", i, cases[i].in, v.state, v.status, v.message);
        assert_int_equal(v.state, cases[i].st);
        assert_int_equal(v.status, cases[i].status);
        if (v.state == RP_HEAD_BAD) assert_true(v.code && v.message[0]);
        /* however the bytes arrive: every prefix is undecided or decided the same way */
        for (size_t k = 0; k < strlen(cases[i].in); k++) {
            rp_head_verdict pv;
            rp_http_head_check(cases[i].in, k, 64, 256, &pv);
            assert_true(pv.state == RP_HEAD_INCOMPLETE || (pv.state == v.state && pv.status == v.status));
        }
    }
    const char *ok = "\r\nGET / HTTP/1.1\r\nA: b\r\n\r\nBODY";
    rp_http_head_check(ok, strlen(ok), 64, 256, &v);
    assert_int_equal(v.head_len, strlen(ok) - 4);
    rp_http_head_check("\r\n\r\n", 4, 64, 256, &v);
    assert_false(v.started);
    rp_http_head_check("G", 1, 64, 256, &v);
    assert_true(v.started);
    /* the URI limit: on the complete line, and on a line that is already too long to be under it */
    char buf[600];
    snprintf(buf, sizeof buf, "GET /%0100d HTTP/1.1\r\n\r\n", 0);
    rp_http_head_check(buf, strlen(buf), 64, 256, &v);
    assert_int_equal(v.status, 414);
    memset(buf, 'a', sizeof buf);
    memcpy(buf, "GET /", 5);
    rp_http_head_check(buf, 200, 64, 256, &v);
    assert_int_equal(v.status, 414);
    rp_http_head_check(buf, 100, 64, 256, &v);
    assert_int_equal(v.state, RP_HEAD_INCOMPLETE);
    /* the head limit */
    int n = snprintf(buf, sizeof buf, "GET / HTTP/1.1\r\nX: %0300d\r\n\r\n", 0);
    rp_http_head_check(buf, (size_t)n, 64, 256, &v);
    assert_int_equal(v.status, 431);
    rp_http_head_check(buf, 257, 64, 256, &v);
    assert_int_equal(v.status, 431);
}

/* ------------------------------------------------------------ errors from inside libmicrohttpd */

typedef struct bad_case {
    const char *name;
    const char *req;   /* NULL: built by make_req */
    int status;
    const char *code;
    bool fresh_only;   /* libmicrohttpd closes a kept-alive connection on it without an answer */
} bad_case;

static char *make_req(const char *name) {
    size_t big = strstr(name, "70k") ? 70000 : strstr(name, "20k") ? 20000 : 9000;
    char *s = malloc(big + 256);
    if (!strncmp(name, "uri", 3)) {
        int n = sprintf(s, "GET /");
        memset(s + n, 'a', big);
        sprintf(s + n + big, " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    } else {
        int n = sprintf(s, "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX-Big: ");
        memset(s + n, 'b', big);
        sprintf(s + n + big, "\r\n\r\n");
    }
    return s;
}

static const bad_case k_bad[] = {
    {"HTTP/2.0", "GET /health HTTP/2.0\r\nHost: x\r\n\r\n", 505, "http_version_not_supported", false},
    {"HTTP/3.7", "GET /health HTTP/3.7\r\nHost: x\r\n\r\n", 505, "http_version_not_supported", false},
    {"HTTP/0.9", "GET /health HTTP/0.9\r\nHost: x\r\n\r\n", 505, "http_version_not_supported", false},
    {"bad version", "GET /health HTTPX/1.1\r\nHost: x\r\n\r\n", 400, "malformed_request", false},
    {"no version", "GET /health\r\nHost: x\r\n\r\n", 400, "malformed_request", false},
    {"no spaces", "GARBAGE\r\n\r\n", 400, "malformed_request", true},
    {"uri 9k", NULL, 414, "uri_too_long", false},
    {"uri 70k", NULL, 414, "uri_too_long", false},
    {"headers 20k", NULL, 431, "headers_too_large", false},
    {"headers 70k", NULL, 431, "headers_too_large", false},
    {"header without colon", "GET /health HTTP/1.1\r\nHost: x\r\nNoColonHere\r\n\r\n", 400, "malformed_request", false},
    {"Content-Length 10^20", "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100000000000000000000\r\n\r\n",
     413, "request_too_large", false},
    {"Content-Length -1", "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n", 400,
     "invalid_content_length", false},
    {"Content-Length x", "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 12x\r\n\r\n", 400,
     "invalid_content_length", false},
    {"bad chunk", "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nZZ\r\nabc\r\n0\r\n\r\n",
     400, "invalid_chunked_encoding", false},
};

/* Every error answered as one OpenAI-style JSON response and the connection closed: on a connection's
 * first request (the gate checks its head) and on a later one of a kept-alive connection (libmicrohttpd
 * parses it; its error is answered as JSON before its own page). */
static void test_errors_are_json(void **state) {
    (void)state;
    NEED_MODEL();
    fixture f;
    start(&f, short_deadlines);
    for (size_t i = 0; i < sizeof k_bad / sizeof k_bad[0]; i++) {
        const bad_case *c = &k_bad[i];
        char *built = c->req ? NULL : make_req(c->name);
        const char *req = c->req ? c->req : built;
        for (int follow = 0; follow < 2; follow++) {
            if (follow && c->fresh_only) continue;
            size_t n = strlen(req) + 64;
            char *full = malloc(n);
            snprintf(full, n, "%s%s", follow ? "GET /health HTTP/1.1\r\nHost: x\r\n\r\n" : "", req);
            size_t len;
            char *out = exchange(f.port, NULL, full, strlen(full), false, &len);
            resp rs[4];
            int k = split_responses(out, len, rs, 4);
            print_message("%-22s %s: %d response(s), last %d\n", c->name, follow ? "after a request" : "first      ", k,
                          k ? rs[k - 1].status : 0);
            assert_int_equal(k, 1 + follow);   /* one answer, then the connection is closed */
            if (follow) assert_int_equal(rs[0].status, 200);
            expect_error_body(&rs[k - 1], c->status, c->code);
            assert_null(strstr(out, "<html"));
            for (int j = 0; j < k; j++) free(rs[j].body);
            free(out);
            free(full);
        }
        free(built);
    }
    /* a head cut short by the client's half-close: 400, not silence */
    size_t len;
    char *out = exchange(f.port, NULL, "GET /health HTTP/1.1\r\nHost: x\r\n", 32, true, &len);
    resp r;
    assert_int_equal(split_responses(out, len, &r, 1), 1);
    expect_error_body(&r, 400, "malformed_request");
    free(r.body);
    free(out);
    /* the server is fine afterwards */
    assert_true(timed_health(f.port) < 5);
    stop(&f);
}

/* ------------------------------------------------------------ half-close and resets */

static void test_half_close_gets_answer(void **state) {
    (void)state;
    NEED_MODEL();
    fixture f;
    start(&f, short_deadlines);
    for (int stream = 0; stream < 2; stream++) {
        char body[512];
        snprintf(body, sizeof body, "%s%s}", k_long, stream ? ",\"stream\":true" : "");
        char req[1024];
        int n = snprintf(req, sizeof req, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         "Content-Length: %zu\r\n\r\n%s", strlen(body), body);
        size_t len;
        char *out = exchange(f.port, NULL, req, (size_t)n, true, &len);   /* as nc -N and socat do */
        assert_true(len > 0);
        assert_non_null(strstr(out, "HTTP/1.1 200"));
        if (stream) {
            assert_non_null(strstr(out, "\"finish_reason\":\"length\""));
            assert_non_null(strstr(out, "data: [DONE]"));
        } else {
            resp r;
            assert_int_equal(split_responses(out, len, &r, 1), 1);
            json_t *j = parse(&r);
            assert_int_equal(json_integer_value(json_object_get(json_object_get(j, "usage"), "completion_tokens")), 200);
            json_decref(j);
            free(r.body);
        }
        free(out);
    }
    stop(&f);
}

typedef struct bg {
    uint16_t port;
    const char *src;
    const char *body;
    resp r;
} bg;

static void *bg_post(void *arg) {
    bg *b = arg;
    int fd = dial_from(b->port, b->src);
    if (fd < 0) {
        b->r.status = -1;
        return NULL;
    }
    send_request(fd, "POST", "/v1/chat/completions", NULL, b->body, strlen(b->body));
    read_response(fd, &b->r);
    close(fd);
    return NULL;
}

/* Keeps the (serial) backend busy for at least `seconds`: as many long generations (480 tokens: some 20 ms
 * on a fast core, near a second under a sanitizer) as one of them, timed first, says it takes; two per
 * address from 127.0.0.10 up. */
enum { QUEUE_MAX_AHEAD = 56 };   /* within the default queue of 64 */
typedef struct queue_ahead {
    int n;
    bg b[QUEUE_MAX_AHEAD];
    pthread_t th[QUEUE_MAX_AHEAD];
    char ip[QUEUE_MAX_AHEAD][32];
} queue_ahead;

static const char *k_longest = "{\"messages\":[{\"role\":\"user\",\"content\":\"Once\"}],\"max_tokens\":480,"
                               "\"temperature\":0,\"logit_bias\":{\"1\":-100,\"2\":-100}}";

static void queue_start(queue_ahead *q, uint16_t port, double seconds) {
    double t0 = now_s();
    resp one = post(port, "/v1/chat/completions", k_longest);
    double t_one = now_s() - t0;
    resp_free(&one);
    int n = (int)(seconds / (t_one > 1e-3 ? t_one : 1e-3)) + 2;
    q->n = n = n > QUEUE_MAX_AHEAD ? QUEUE_MAX_AHEAD : n;
    for (int i = 0; i < n; i++) {
        snprintf(q->ip[i], sizeof q->ip[i], "127.0.0.%d", 10 + i / 2);
        q->b[i] = (bg){.port = port, .src = q->ip[i], .body = k_longest};
        pthread_create(&q->th[i], NULL, bg_post, &q->b[i]);
    }
    usleep(100000);   /* all submitted: what comes next waits behind them */
}

static void queue_join(queue_ahead *q) {
    for (int i = 0; i < q->n; i++) {
        pthread_join(q->th[i], NULL);
        resp_free(&q->b[i].r);
    }
}

/* An abortive close (RST) of a request waiting for its answer cancels it, streaming or not. */
static void test_reset_cancels(void **state) {
    (void)state;
    NEED_ALIASES();
    fixture f;
    start(&f, short_deadlines);
    char body[512], sbody[512];
    snprintf(body, sizeof body, "%s}", k_long);
    snprintf(sbody, sizeof sbody, "%s,\"stream\":true}", k_long);
    static queue_ahead q;
    for (int stream = 0; stream < 2; stream++) {
        queue_start(&q, f.port, 0.5);   /* the request reset below is still waiting when it is */
        double before = metric(f.port, "reprise_client_disconnects_total");
        int fd = dial(f.port);
        assert_true(fd >= 0);
        const char *b = stream ? sbody : body;
        send_request(fd, "POST", "/v1/chat/completions", NULL, b, strlen(b));
        usleep(30000);
        struct linger lg = {.l_onoff = 1, .l_linger = 0};
        setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
        close(fd);   /* RST */
        double t0 = now_s();
        while (metric(f.port, "reprise_client_disconnects_total") < before + 1 && now_s() - t0 < 20) usleep(20000);
        print_message("%s request reset: disconnect seen after %.0f ms\n", stream ? "streaming" : "waiting",
                      (now_s() - t0) * 1e3);
        assert_true(metric(f.port, "reprise_client_disconnects_total") >= before + 1);
        queue_join(&q);
    }
    stop(&f);
}

/* ------------------------------------------------------------ slow and idle clients */

static int open_attackers(uint16_t port, int *fds, int n, int n_addr, const char *first_bytes) {
    int ok = 0;
    for (int i = 0; i < n; i++) {
        char ip[32];
        src_ip(i, n_addr, ip, sizeof ip);
        fds[i] = dial_from(port, ip);
        if (fds[i] < 0) continue;
        ok++;
        if (first_bytes) send(fds[i], first_bytes, strlen(first_bytes), MSG_NOSIGNAL);
    }
    return ok;
}

/* One more header line from every slow client (a byte every few seconds would keep an activity timeout alive). */
static void trickle(int *fds, int n) {
    for (int i = 0; i < n; i++)
        if (fds[i] >= 0) send(fds[i], "X-Slow: 1\r\n", 11, MSG_NOSIGNAL | MSG_DONTWAIT);
}

/* 300 slowloris connections, each sending a header line every second, from 10 addresses and then from one:
 * /health answers within 1 s and chat works while they are open; each of them is closed when its head is
 * not complete HEADER_S after it connected, although it never stopped sending. */
static void test_slowloris(void **state) {
    (void)state;
    NEED_ALIASES();
    fixture f;
    start(&f, short_deadlines);
    static int fds[N_ATTACK];
    const int n_addrs[2] = {10, 1};
    for (int round = 0; round < 2; round++) {
        const double evicted0 = metric(f.port, "reprise_connections_dropped_total{reason=\"evicted\"}");
        const double t0 = now_s();
        int ok = open_attackers(f.port, fds, N_ATTACK, n_addrs[round], "GET /health HTTP/1.1\r\nHost: x\r\n");
        assert_int_equal(ok, N_ATTACK);
        double worst = 0;
        for (int k = 0; k < 4; k++) {
            usleep(300000);
            trickle(fds, N_ATTACK);
            double dt = timed_health(f.port);
            if (dt > worst) worst = dt;
        }
        chat_works(f.port);
        print_message("%d slow connections from %d address(es): /health in %.1f ms at worst\n", N_ATTACK,
                      n_addrs[round], worst * 1e3);
        assert_true(worst < 1.0);
        /* more connections than the cap (or than one address may hold): the oldest slow ones made room */
        assert_true(metric(f.port, "reprise_connections_dropped_total{reason=\"evicted\"}") - evicted0 >= N_ATTACK - 256);
        /* the deadline is absolute: still trickling, every one is closed soon after HEADER_S */
        while (now_s() - t0 < HEADER_S - 0.5) {
            trickle(fds, N_ATTACK);
            usleep(500000);
        }
        int open = wait_closed(fds, N_ATTACK, t0 + HEADER_S + 3.0);
        if (open) print_message("%d slow connections still open %.1f s after they connected\n", open, now_s() - t0);
        assert_int_equal(open, 0);
        close_all(fds, N_ATTACK);
    }
    assert_true(metric(f.port, "reprise_connections_dropped_total{reason=\"header_timeout\"}") >= 1);
    stop(&f);
}

/* 300 idle connections, silent ones and kept-alive ones after a request: a new client is served at once;
 * kept-alive ones are closed after IDLE_S. */
static void test_idle_connections(void **state) {
    (void)state;
    NEED_ALIASES();
    fixture f;
    start(&f, short_deadlines);
    static int fds[N_ATTACK];
    /* silent: connected, nothing sent */
    int ok = open_attackers(f.port, fds, N_ATTACK, 10, NULL);
    assert_int_equal(ok, N_ATTACK);
    double worst = 0;
    for (int k = 0; k < 3; k++) {
        double dt = timed_health(f.port);
        if (dt > worst) worst = dt;
    }
    chat_works(f.port);
    print_message("%d silent connections: /health in %.1f ms at worst\n", N_ATTACK, worst * 1e3);
    assert_true(worst < 1.0);
    close_all(fds, N_ATTACK);
    /* kept alive after one request each: libmicrohttpd serves them (a thread each) until one is needed */
    const double idle0 = metric(f.port, "reprise_connections_dropped_total{reason=\"idle_timeout\"}");
    int served = 0;
    for (int i = 0; i < N_ATTACK; i++) {
        char ip[32];
        src_ip(i, 10, ip, sizeof ip);
        fds[i] = dial_from(f.port, ip);
        assert_true(fds[i] >= 0);
        const char *req = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
        send_all(fds[i], req, strlen(req));
        resp r;
        if (read_one(fds[i], &r) && r.status == 200) served++;
        free(r.body);
    }
    const double t_idle = now_s();
    assert_int_equal(served, N_ATTACK);
    worst = 0;
    for (int k = 0; k < 3; k++) {
        double dt = timed_health(f.port);
        if (dt > worst) worst = dt;
    }
    chat_works(f.port);
    print_message("%d kept-alive idle connections: /health in %.1f ms at worst\n", N_ATTACK, worst * 1e3);
    assert_true(worst < 1.0);
    int open = wait_closed(fds, N_ATTACK, t_idle + IDLE_S + 3.0);
    assert_int_equal(open, 0);
    assert_true(metric(f.port, "reprise_connections_dropped_total{reason=\"idle_timeout\"}") - idle0 >= 1);
    close_all(fds, N_ATTACK);
    stop(&f);
}

/* A body dribbled a byte at a time is dropped BODY_S after its headers; a later request on a kept-alive
 * connection whose headers trickle is dropped HEADER_S after its request line. */
static void test_body_and_header_deadlines(void **state) {
    (void)state;
    NEED_MODEL();
    fixture f;
    start(&f, short_deadlines);
    int fd = dial(f.port);
    const char *head = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{";
    send_all(fd, head, strlen(head));
    double t0 = now_s();
    while (!closed_by_server(fd) && now_s() - t0 < BODY_S + 5) {
        send(fd, " ", 1, MSG_NOSIGNAL);
        usleep(200000);
    }
    double dt = now_s() - t0;
    print_message("dribbled body: closed after %.1f s\n", dt);
    assert_true(dt > BODY_S - 0.5 && dt < BODY_S + 3);
    close(fd);
    assert_true(metric(f.port, "reprise_connections_dropped_total{reason=\"body_timeout\"}") >= 1);

    fd = dial(f.port);
    const char *first = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
    send_all(fd, first, strlen(first));
    resp r;
    assert_true(read_one(fd, &r));
    assert_int_equal(r.status, 200);
    free(r.body);
    const char *line = "GET /health HTTP/1.1\r\nHost: x\r\n";
    send_all(fd, line, strlen(line));
    t0 = now_s();
    while (!closed_by_server(fd) && now_s() - t0 < HEADER_S + 5) {
        send(fd, "X-Slow: 1\r\n", 11, MSG_NOSIGNAL);
        usleep(300000);
    }
    dt = now_s() - t0;
    print_message("trickled headers of a second request: closed after %.1f s\n", dt);
    assert_true(dt > HEADER_S - 0.5 && dt < HEADER_S + 3);
    close(fd);
    stop(&f);
}

static void short_timeout(rp_server_config *c) {
    short_deadlines(c);
    c->timeout_s = 1;   /* answers must be written within 2 s */
}

static void per_ip_two(rp_server_config *c) {
    short_timeout(c);
    c->max_connections_per_ip = 2;
}

/* With two connections from an address, a third from it closes that address's idle one; when both are
 * answering, it is refused with a JSON 503, and other addresses are served as usual. */
static void test_per_ip_cap(void **state) {
    (void)state;
    NEED_ALIASES();
    fixture f;
    start(&f, per_ip_two);
    int fds[2];
    for (int i = 0; i < 2; i++) {   /* two kept-alive idle connections from 127.0.0.2 */
        fds[i] = dial_from(f.port, "127.0.0.2");
        const char *req = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
        send_all(fds[i], req, strlen(req));
        resp r;
        assert_true(read_one(fds[i], &r));
        free(r.body);
        usleep(20000);
    }
    resp r3;
    int fd3 = dial_from(f.port, "127.0.0.2");
    send_request(fd3, "GET", "/health", NULL, NULL, 0);
    read_response(fd3, &r3);
    close(fd3);
    assert_int_equal(r3.status, 200);
    resp_free(&r3);
    assert_true(wait_closed(fds, 1, now_s() + 3) == 0);   /* the older idle one made room */
    assert_false(closed_by_server(fds[1]));
    close_all(fds, 2);
    /* both answering: two from 127.0.0.2 waiting behind a queue longer than their 1 s timeout */
    static queue_ahead q;
    queue_start(&q, f.port, 1.5);
    bg b[2];
    pthread_t th[2];
    for (int i = 0; i < 2; i++) {
        b[i] = (bg){.port = f.port, .src = "127.0.0.2", .body = k_longest};
        pthread_create(&th[i], NULL, bg_post, &b[i]);
    }
    usleep(100000);
    int fd = dial_from(f.port, "127.0.0.2");
    resp r;
    send_request(fd, "GET", "/health", NULL, NULL, 0);
    read_response(fd, &r);
    close(fd);
    double busy = metric(f.port, "reprise_connections{state=\"answering\"}");
    print_message("third connection from a busy address: %d (%.0f connections answering)\n", r.status, busy);
    expect_error_body(&r, 503, "too_many_connections");
    assert_non_null(strcasestr(r.head, "retry-after:"));
    resp_free(&r);
    assert_true(timed_health(f.port) < 1.0);   /* 127.0.0.1 is not limited by 127.0.0.2 */
    for (int i = 0; i < 2; i++) {
        pthread_join(th[i], NULL);
        resp_free(&b[i].r);
    }
    queue_join(&q);
    assert_true(metric(f.port, "reprise_connections_dropped_total{reason=\"rejected\"}") >= 1);
    stop(&f);
}

typedef struct flood {
    int fd;
    double until;
} flood;

/* Pipelined requests, never reading the answers. */
static void *pipeline_flood(void *arg) {
    flood *fl = arg;
    const char *req = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
    const size_t n = strlen(req);
    size_t off = 0;
    while (now_s() < fl->until) {
        ssize_t w = send(fl->fd, req + off, n - off, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w > 0) {
            off = (off + (size_t)w) % n;
            continue;
        }
        if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK) break;
        struct pollfd p = {.fd = fl->fd, .events = POLLOUT};
        poll(&p, 1, 50);
    }
    return NULL;
}

/* A client that pipelines requests and reads no answer stalls its connection's writes: the connection is
 * closed when an answer is not written within the write deadline (timeout + as long again). */
static void test_write_deadline(void **state) {
    (void)state;
    NEED_MODEL();
    fixture f;
    start(&f, short_timeout);
    const double before = metric(f.port, "reprise_connections_dropped_total{reason=\"write_timeout\"}");
    /* a small receive window, set before the connection exists (the window is announced at connect) */
    int fd = socket(AF_INET, SOCK_STREAM, 0), small = 4096;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(f.port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    flood fl = {.fd = fd, .until = now_s() + 12};
    pthread_t th;
    pthread_create(&th, NULL, pipeline_flood, &fl);
    double t0 = now_s();
    while (metric(f.port, "reprise_connections_dropped_total{reason=\"write_timeout\"}") < before + 1 && now_s() - t0 < 12)
        usleep(100000);
    print_message("stalled writer dropped after %.1f s\n", now_s() - t0);
    assert_true(metric(f.port, "reprise_connections_dropped_total{reason=\"write_timeout\"}") >= before + 1);
    fl.until = 0;
    pthread_join(th, NULL);
    close(fd);
    assert_true(timed_health(f.port) < 1.0);
    stop(&f);
}

static int group_setup(void **state) {
    (void)state;
    signal(SIGPIPE, SIG_IGN);
    /* 300 client sockets here and their 300 server ends in this same process */
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in b = {.sin_family = AF_INET};
    inet_pton(AF_INET, "127.0.0.2", &b.sin_addr);
    g_aliases = fd >= 0 && bind(fd, (struct sockaddr *)&b, sizeof b) == 0;
    if (fd >= 0) close(fd);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_head_check),
        cmocka_unit_test(test_errors_are_json),
        cmocka_unit_test(test_half_close_gets_answer),
        cmocka_unit_test(test_reset_cancels),
        cmocka_unit_test(test_slowloris),
        cmocka_unit_test(test_idle_connections),
        cmocka_unit_test(test_body_and_header_deadlines),
        cmocka_unit_test(test_per_ip_cap),
        cmocka_unit_test(test_write_deadline),
    };
    return rp_test_main(tests, group_setup, NULL);
}
