/* errors.h — API errors in OpenAI's shape {"error": {"message", "type", "param", "code"}} with their HTTP status. */
#ifndef RP_SERVER_ERRORS_H
#define RP_SERVER_ERRORS_H

#include <stdarg.h>
#include <stddef.h>

#include "reprise.h"

/* One API error. `type` and `code` point to static strings (code may be
 * NULL: serialized as null); `param` names the offending request field
 * ("messages[3].role") or is empty (null). */
typedef struct rp_api_error {
    int http;             /* 400, 401, 404, 405, 409, 413, 429, 500, 503 */
    const char *type;     /* "invalid_request_error", "authentication_error", "rate_limit_error", "server_error" */
    const char *code;     /* e.g. "invalid_api_key", "context_length_exceeded", "queue_full"; NULL for none */
    char param[96];
    char message[512];
} rp_api_error;

/* Fills *e (message printf-style, truncated to fit) and returns `st`, so a
 * validation site reads `return rp_api_errorf(e, RP_ERR_INVALID_ARG, 400, NULL, "n", "n must be 1");`.
 * `type` is derived from the status when NULL: 401 authentication_error,
 * 429 rate_limit_error, 5xx server_error, everything else invalid_request_error. */
rp_status rp_api_errorf(rp_api_error *e, rp_status st, int http, const char *code, const char *param,
                        const char *fmt, ...) __attribute__((format(printf, 6, 7)));

/* The error as a NUL-terminated JSON object (malloc'd; NULL only when out of memory). */
char *rp_api_error_json(const rp_api_error *e);

#endif /* RP_SERVER_ERRORS_H */
