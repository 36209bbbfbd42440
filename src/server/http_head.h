/* http_head.h — checks the head (request line and headers) of an HTTP/1.x request from its raw bytes. */
#ifndef RP_SERVER_HTTP_HEAD_H
#define RP_SERVER_HTTP_HEAD_H

#include <stdbool.h>
#include <stddef.h>

typedef enum rp_head_state {
    RP_HEAD_INCOMPLETE = 0,   /* more bytes are needed */
    RP_HEAD_OK,               /* a complete head with a valid request line */
    RP_HEAD_BAD,              /* refused: status, code and message say why */
} rp_head_state;

typedef struct rp_head_verdict {
    rp_head_state state;
    bool started;             /* a request byte was seen (blank lines before a request line do not count) */
    size_t head_len;          /* RP_HEAD_OK: bytes up to and including the blank line that ends the head */
    int status;               /* RP_HEAD_BAD: 400, 414, 431 or 505 */
    const char *code;         /* RP_HEAD_BAD: "malformed_request", "uri_too_long", "headers_too_large",
                               * "http_version_not_supported" */
    char message[160];
} rp_head_verdict;

/* Looks at the first `n` bytes a connection sent. The request line must be
 * `METHOD SP URI SP HTTP/1.x` (CRLF or LF; blank lines before it are skipped,
 * as libmicrohttpd does): a method of token characters, a URI of at most
 * max_uri bytes without control characters, a version HTTP/d.d whose major
 * is 1 (others: 505). The whole head must end (an empty line) within max_head
 * bytes. Header lines themselves are not parsed here (libmicrohttpd does).
 * Pure: no allocation, linear in n. */
void rp_http_head_check(const char *buf, size_t n, size_t max_uri, size_t max_head, rp_head_verdict *v);

#endif /* RP_SERVER_HTTP_HEAD_H */
