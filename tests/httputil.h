/* httputil.h — a raw HTTP/1.1 client over loopback sockets and an in-process server fixture, for the server tests. */
#ifndef RP_TEST_HTTPUTIL_H
#define RP_TEST_HTTPUTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "server/server.h"

#define RP_TEST_MODEL_REL "models/stories260K.gguf"

double now_s(void);

typedef struct resp {
    int status;          /* -1: no HTTP response (connect failed, or the server closed first) */
    char head[8192];
    char *body;
    size_t len;
} resp;

void resp_free(resp *r);

/* A TCP connection to 127.0.0.1:port (60 s receive timeout); -1 if it failed. */
int dial(uint16_t port);
/* The same from a chosen local address (any of 127.0.0.0/8 is loopback on Linux), for per-address caps. */
int dial_from(uint16_t port, const char *src_ip);
bool send_all(int fd, const char *p, size_t n);
/* method path HTTP/1.1 with Host, Connection: close, Content-Type: application/json, Content-Length. */
void send_request(int fd, const char *method, const char *path, const char *headers, const char *body, size_t blen);
/* Reads until EOF and splits status, headers and (de-chunked) body. */
void read_response(int fd, resp *r);
resp http(uint16_t port, const char *method, const char *path, const char *headers, const char *body);
resp post(uint16_t port, const char *path, const char *body);
/* Reads a counter or gauge from /metrics (the sum over the label sets that start with `sel`). */
double metric(uint16_t port, const char *sel);

/* The response body as JSON (asserts it is). */
struct json_t *parse(const resp *r);
/* An OpenAI error body {"error": {message, type, param, code}} with the expected status (and code unless NULL). */
void expect_error_body(const resp *r, int status, const char *code);
void expect_error(uint16_t port, const char *method, const char *path, const char *headers, const char *body,
                  int status, const char *code);

/* An in-process server on an ephemeral loopback port (the test model, one thread, quiet). */
typedef struct fixture {
    rp_server *srv;
    uint16_t port;
} fixture;

/* false (nothing started) when the model is not in ../shared; `tweak` edits the config first. */
bool start(fixture *f, void (*tweak)(rp_server_config *));
void stop(fixture *f);

#endif /* RP_TEST_HTTPUTIL_H */
