/* srvtest.h — the server tests' harness: a raw HTTP/1.1 client (no keep-alive), OpenAI error checks, /metrics
 * reads, and an in-process server on an ephemeral loopback port with the test model. */
#ifndef RP_SRVTEST_H
#define RP_SRVTEST_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "server/server.h"
#include "testutil.h"

#define SRVTEST_MODEL "models/stories260K.gguf"

typedef struct resp {
    int status;
    char head[8192];
    char *body;
    size_t len;
} resp;

void resp_free(resp *r);
int dial(uint16_t port);                                  /* a loopback connection (60 s receive timeout), or -1 */
/* The same from a chosen local address (all of 127.0.0.0/8 is loopback on Linux), for per-address caps. */
int dial_from(uint16_t port, const char *src_ip);
bool send_all(int fd, const char *p, size_t n);
/* A request with Connection: close and Content-Length; `headers` are extra lines, each ending in \r\n. */
void send_request(int fd, const char *method, const char *path, const char *headers, const char *body, size_t blen);
/* Reads until EOF and splits status, headers and (de-chunked) body. */
void read_response(int fd, resp *r);
resp http(uint16_t port, const char *method, const char *path, const char *headers, const char *body);
resp post(uint16_t port, const char *path, const char *body);
json_t *parse(const resp *r);   /* the body as JSON (asserts it is) */
/* The integer at a dotted path ("usage.prompt_tokens_details.cached_tokens"; asserts there is one). */
json_int_t jint(json_t *o, const char *path);
/* An OpenAI error body with the four keys, Content-Type application/json and the expected status (and
 * code, when not NULL): of a response already read, or of the request sent. */
void expect_error_body(const resp *r, int status, const char *code);
void expect_error(uint16_t port, const char *method, const char *path, const char *headers, const char *body,
                  int status, const char *code);
/* A counter or gauge from /metrics (sum over label sets matching `sel`). */
double metric(uint16_t port, const char *sel);
double metric_as(uint16_t port, const char *headers, const char *sel);   /* with extra headers (an API key) */

typedef struct fixture {
    rp_server *srv;
    uint16_t port;
} fixture;

/* Starts a server on the test model (1 thread, quiet, port 0) after tweak(&cfg); false when the model is
 * missing (the caller skips). Asserts the start succeeded. */
bool start(fixture *f, void (*tweak)(rp_server_config *));
void stop(fixture *f);

#endif /* RP_SRVTEST_H */
