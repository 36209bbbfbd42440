/* srvtest.c — the server tests' harness: raw HTTP client, error and metrics checks, in-process server fixture. */
#define _GNU_SOURCE
#include "srvtest.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

void resp_free(resp *r) {
    free(r->body);
    memset(r, 0, sizeof *r);
}

int dial_from(uint16_t port, const char *src_ip) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    struct timeval tv = {.tv_sec = 60};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (src_ip) {
        struct sockaddr_in b = {.sin_family = AF_INET};
        inet_pton(AF_INET, src_ip, &b.sin_addr);
        if (bind(fd, (struct sockaddr *)&b, sizeof b) != 0) {
            close(fd);
            return -1;
        }
    }
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

int dial(uint16_t port) { return dial_from(port, NULL); }

bool send_all(int fd, const char *p, size_t n) {
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w <= 0) return false;
        p += w;
        n -= (size_t)w;
    }
    return true;
}

void send_request(int fd, const char *method, const char *path, const char *headers, const char *body, size_t blen) {
    char head[4096];
    int n = snprintf(head, sizeof head,
                     "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Type: application/json\r\n"
                     "Content-Length: %zu\r\n%s\r\n",
                     method, path, body ? blen : 0, headers ? headers : "");
    send_all(fd, head, (size_t)n);
    if (body && blen) send_all(fd, body, blen);
}

/* Reads until EOF and splits status, headers and (de-chunked) body. */
void read_response(int fd, resp *r) {
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (len + 4096 > cap) buf = realloc(buf, cap *= 2);
        ssize_t got = recv(fd, buf + len, cap - len - 1, 0);
        if (got <= 0) break;
        len += (size_t)got;
    }
    buf[len] = '\0';
    memset(r, 0, sizeof *r);
    char *sep = strstr(buf, "\r\n\r\n");
    if (!sep || sscanf(buf, "HTTP/1.%*d %d", &r->status) != 1) {
        r->status = -1;
        free(buf);
        r->body = calloc(1, 1);
        return;
    }
    size_t hl = (size_t)(sep - buf);
    memcpy(r->head, buf, hl < sizeof r->head - 1 ? hl : sizeof r->head - 1);
    char *p = sep + 4;
    size_t left = len - (size_t)(p - buf);
    r->body = malloc(left + 1);
    if (strcasestr(r->head, "transfer-encoding: chunked")) {
        while (left > 0) {
            char *end;
            unsigned long sz = strtoul(p, &end, 16);
            char *nl = strstr(p, "\r\n");
            if (!nl || sz == 0) break;
            p = nl + 2;
            if (sz > left) sz = left;
            memcpy(r->body + r->len, p, sz);
            r->len += sz;
            p += sz + 2;
            left = len - (size_t)(p - buf) < len ? len - (size_t)(p - buf) : 0;
        }
    } else {
        memcpy(r->body, p, left);
        r->len = left;
    }
    r->body[r->len] = '\0';
    free(buf);
}

resp http(uint16_t port, const char *method, const char *path, const char *headers, const char *body) {
    resp r;
    memset(&r, 0, sizeof r);
    int fd = dial(port);
    if (fd < 0) {
        r.status = -1;
        r.body = calloc(1, 1);
        return r;
    }
    send_request(fd, method, path, headers, body, body ? strlen(body) : 0);
    read_response(fd, &r);
    close(fd);
    return r;
}

resp post(uint16_t port, const char *path, const char *body) { return http(port, "POST", path, NULL, body); }

json_t *parse(const resp *r) {
    json_t *j = json_loads(r->body, 0, NULL);
    if (!j) print_message("not JSON (status %d): %.300s\n", r->status, r->body);
    assert_non_null(j);
    return j;
}

json_int_t jint(json_t *o, const char *path) {
    char buf[256];
    snprintf(buf, sizeof buf, "%s", path);
    json_t *v = o;
    for (char *tok = strtok(buf, "."); tok && v; tok = strtok(NULL, ".")) v = json_object_get(v, tok);
    if (!json_is_integer(v)) print_message("no integer at %s\n", path);
    assert_true(json_is_integer(v));
    return json_integer_value(v);
}

/* An OpenAI error body with the four keys and the expected status. */
void expect_error_body(const resp *r, int status, const char *code) {
    if (r->status != status) print_message("expected %d, got %d: %.300s\n", status, r->status, r->body);
    assert_int_equal(r->status, status);
    assert_non_null(strcasestr(r->head, "content-type: application/json"));
    json_t *j = parse(r);
    json_t *e = json_object_get(j, "error");
    assert_true(json_is_object(e));
    assert_true(json_is_string(json_object_get(e, "message")));
    assert_true(json_is_string(json_object_get(e, "type")));
    assert_non_null(json_object_get(e, "param"));
    assert_non_null(json_object_get(e, "code"));
    if (code) assert_string_equal(json_string_value(json_object_get(e, "code")), code);
    json_decref(j);
}

void expect_error(uint16_t port, const char *method, const char *path, const char *headers, const char *body,
                  int status, const char *code) {
    resp r = http(port, method, path, headers, body);
    expect_error_body(&r, status, code);
    resp_free(&r);
}

bool start(fixture *f, void (*tweak)(rp_server_config *)) {
    const char *mp = rp_test_shared(SRVTEST_MODEL);
    if (!mp) return false;
    rp_server_config cfg = rp_server_default_config();
    cfg.backend.model_path = mp;
    cfg.backend.n_threads = 1;
    cfg.port = 0;
    cfg.quiet = true;
    if (tweak) tweak(&cfg);
    rp_status st = rp_server_start(&cfg, &f->srv);
    if (st != RP_OK) print_message("server start: %s\n", rp_last_error());
    assert_int_equal(st, RP_OK);
    f->port = rp_server_port(f->srv);
    assert_true(f->port > 0);
    return true;
}

void stop(fixture *f) {
    rp_server_stop(f->srv);
    memset(f, 0, sizeof *f);
}

/* Reads a counter or gauge from /metrics (sum over label sets matching `sel`). */
double metric(uint16_t port, const char *sel) { return metric_as(port, NULL, sel); }

double metric_as(uint16_t port, const char *headers, const char *sel) {
    resp r = http(port, "GET", "/metrics", headers, NULL);
    assert_int_equal(r.status, 200);
    double sum = 0;
    for (char *line = strtok(r.body, "\n"); line; line = strtok(NULL, "\n")) {
        if (line[0] == '#' || strncmp(line, sel, strlen(sel)) != 0) continue;
        char *sp = strrchr(line, ' ');
        if (sp) sum += atof(sp + 1);
    }
    resp_free(&r);
    return sum;
}
