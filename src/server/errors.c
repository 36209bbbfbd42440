/* errors.c — builds OpenAI-shaped error bodies: {"error": {"message", "type", "param", "code"}}. */
#include "server/errors.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *type_for(int http) {
    if (http == 401) return "authentication_error";
    if (http == 429) return "rate_limit_error";
    if (http >= 500) return "server_error";
    return "invalid_request_error";
}

rp_status rp_api_errorf(rp_api_error *e, rp_status st, int http, const char *code, const char *param,
                        const char *fmt, ...) {
    if (!e) return st;
    e->http = http;
    e->type = type_for(http);
    e->code = code;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    return st;
}

char *rp_api_error_json(const rp_api_error *e) {
    json_t *inner = json_object();
    json_t *root = json_object();
    if (!inner || !root) {
        json_decref(inner);
        json_decref(root);
        return NULL;
    }
    /* messages may quote request bytes: jansson rejects invalid UTF-8, so fall back to a fixed text */
    json_t *msg = json_string(e->message);
    if (!msg) msg = json_string("invalid request (the error detail is not valid UTF-8)");
    json_object_set_new(inner, "message", msg);
    json_object_set_new(inner, "type", json_string(e->type ? e->type : type_for(e->http)));
    json_t *param = e->param[0] ? json_string(e->param) : NULL;
    json_object_set_new(inner, "param", param ? param : json_null());
    json_object_set_new(inner, "code", e->code ? json_string(e->code) : json_null());
    json_object_set_new(root, "error", inner);
    char *s = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    return s;
}
