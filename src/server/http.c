/* http.c — the libmicrohttpd daemon: routing, bearer auth, body limits, SSE responses, disconnect detection, drain;
 * errors libmicrohttpd answers itself are answered as JSON first (on_mhd_log). Connections: conn_gate.c. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <jansson.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "core/error.h"
#include "server/backend_internal.h"
#include "server/conn_gate.h"
#include "server/server_internal.h"
#include "server/web_page.h"

#define RP_HTTP_MAX_URI 8192      /* request URI bytes (414 above) */
#define RP_HTTP_MAX_HEAD 16384    /* request line + headers (431 above) */

rp_server_config rp_server_default_config(void) {
    rp_server_config c = {
        .backend = rp_backend_default_config(),
        .host = "127.0.0.1",
        .port = 8080,
        .max_body = (size_t)1 << 20,
        .max_depth = 64,
        .max_messages = 1024,
        .default_max_tokens = 2048,
        .timeout_s = 600,
        .session_ttl_s = 1800,
        .max_connections = 256,
        .max_connections_per_ip = 64,
        .header_timeout_s = 10,
        .body_timeout_s = 30,
        .idle_timeout_s = 15,
        .pooling = RP_POOLING_MODEL,
    };
    return c;
}

/* Per HTTP request (MHD's con_cls). */
typedef struct http_req {
    rp_server *srv;
    int ep;                   /* RP_M_* */
    int route;                /* R_* */
    char *body;
    size_t len, cap;
    bool too_large;
    size_t discarded;         /* body bytes dropped past the limit */
    bool early;               /* a response was queued on the first call */
    int status;               /* for the metrics */
    double t0;
    char path_arg[128];       /* {id} of /v1/models/{id}, /v1/sessions/{id} */
    bool counted;
    int key;                  /* the API key it presented (index), -1 when the server has none */
    char origin[256];         /* its Origin when CORS allows it ("" otherwise): every answer carries the headers */
} http_req;

enum { R_NONE, R_CHAT, R_COMPLETIONS, R_MODELS, R_MODEL, R_HEALTH, R_METRICS, R_SESSION, R_TOKENIZE, R_DETOKENIZE, R_PROPS, R_WEB, R_EMBEDDINGS, R_EMBEDDING };

/* ------------------------------------------------------------ CORS */

/* --cors ORIGIN[,ORIGIN...] (repeatable on the command line, joined with commas): exact origins, or "*". */
static rp_status cors_parse(rp_server *s, const char *spec) {
    if (!spec || !spec[0]) return RP_OK;
    for (const char *p = spec; *p;) {
        while (*p == ',' || *p == ' ') p++;
        const char *e = p;
        while (*e && *e != ',') e++;
        size_t n = (size_t)(e - p);
        while (n > 0 && (p[n - 1] == ' ' || p[n - 1] == '/')) n--;   /* "http://x:3000/" is the origin http://x:3000 */
        if (n == 1 && *p == '*') s->cors_any = true;
        else if (n > 0) {
            if (n >= 255) return rp_errorf(RP_ERR_INVALID_ARG, "server: --cors origin '%.40s...' is too long", p);
            char **nv = realloc(s->cors, sizeof *nv * (size_t)(s->n_cors + 1));
            if (!nv) return rp_errorf(RP_ERR_NOMEM, "server: out of memory");
            s->cors = nv;
            if (!(s->cors[s->n_cors] = strndup(p, n))) return rp_errorf(RP_ERR_NOMEM, "server: out of memory");
            s->n_cors++;
        }
        p = e;
    }
    return RP_OK;
}

/* The request's Origin into r->origin when CORS allows it. */
static void cors_match(rp_server *s, struct MHD_Connection *conn, http_req *r) {
    r->origin[0] = '\0';
    if (!s->cors_any && s->n_cors == 0) return;
    const char *o = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Origin");
    if (!o || !o[0] || strlen(o) >= sizeof r->origin) return;
    bool ok = s->cors_any;
    for (int i = 0; i < s->n_cors && !ok; i++) ok = !strcmp(o, s->cors[i]);
    if (ok) snprintf(r->origin, sizeof r->origin, "%s", o);
}

static void cors_headers(rp_server *s, const http_req *r, struct MHD_Response *resp) {
    if (!r->origin[0]) return;
    MHD_add_response_header(resp, "Access-Control-Allow-Origin", s->cors_any ? "*" : r->origin);
    if (!s->cors_any) MHD_add_response_header(resp, "Vary", "Origin");
    MHD_add_response_header(resp, "Access-Control-Expose-Headers", "X-Reprise-Session, Retry-After");
}

/* ------------------------------------------------------------ responses */

static enum MHD_Result send_text(struct MHD_Connection *conn, http_req *r, int status, const char *ctype, char *body) {
    if (!body) {
        body = strdup("{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\",\"param\":null,\"code\":null}}");
        status = 500;
        if (!body) return MHD_NO;
    }
    struct MHD_Response *resp = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    cors_headers(r->srv, r, resp);
    if (status == 405) MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, r->route == R_CHAT || r->route == R_COMPLETIONS || r->route == R_TOKENIZE || r->route == R_DETOKENIZE || r->route == R_EMBEDDINGS || r->route == R_EMBEDDING ? "POST" : r->route == R_SESSION ? "DELETE" : "GET");
    if (status == 401) MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    if (status == 429 || status == 503) MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, "1");
    rp_gate_phase(conn, RP_CONN_HANDLING);   /* an answer before the body is answering too */
    enum MHD_Result ret = MHD_queue_response(conn, (unsigned)status, resp);
    MHD_destroy_response(resp);
    r->status = status;
    return ret;
}

static enum MHD_Result send_json(struct MHD_Connection *conn, http_req *r, int status, char *body) {
    return send_text(conn, r, status, "application/json", body);
}

static enum MHD_Result send_error(struct MHD_Connection *conn, http_req *r, const rp_api_error *e) {
    return send_json(conn, r, e->http, rp_api_error_json(e));
}

static enum MHD_Result fail(struct MHD_Connection *conn, http_req *r, int status, const char *code, const char *fmt,
                            const char *arg) {
    rp_api_error e;
    rp_api_errorf(&e, RP_ERR_INVALID_ARG, status, code, NULL, fmt, arg ? arg : "");
    return send_error(conn, r, &e);
}

/* ------------------------------------------------------------ helpers */

/* A CORS preflight (OPTIONS with --cors): 204; the Access-Control-* headers only for an allowed Origin. */
static enum MHD_Result send_preflight(rp_server *s, struct MHD_Connection *conn, http_req *r) {
    struct MHD_Response *resp = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    if (!resp) return MHD_NO;
    const char *methods = r->route == R_CHAT || r->route == R_COMPLETIONS || r->route == R_TOKENIZE || r->route == R_DETOKENIZE ||
                                  r->route == R_EMBEDDINGS || r->route == R_EMBEDDING
                              ? "POST, OPTIONS" : r->route == R_SESSION ? "DELETE, OPTIONS" : "GET, HEAD, OPTIONS";
    MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, methods);
    if (r->origin[0]) {
        cors_headers(s, r, resp);
        MHD_add_response_header(resp, "Access-Control-Allow-Methods", methods);
        MHD_add_response_header(resp, "Access-Control-Allow-Headers", "Authorization, Content-Type");
        MHD_add_response_header(resp, "Access-Control-Max-Age", "86400");
    }
    rp_gate_phase(conn, RP_CONN_HANDLING);
    enum MHD_Result ret = MHD_queue_response(conn, 204, resp);
    MHD_destroy_response(resp);
    r->status = 204;
    return ret;
}

#define RP_STR_(x) #x
#define RP_STR(x) RP_STR_(x)

/* The limits the gate applies to a connection's first request head, applied to later ones. */
static bool head_over_limit(struct MHD_Connection *conn) {
    const union MHD_ConnectionInfo *hs = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_REQUEST_HEADER_SIZE);
    return hs && hs->header_size > RP_HTTP_MAX_HEAD;
}

/* The API key a request presents: its index (the request's identity, carried into its job and sessions),
 * -1 when the server has no keys, -2 when it has and the request presents none of them. */
static int request_key(rp_server *s, struct MHD_Connection *conn) {
    if (s->keys.n == 0) return -1;
    const int k = rp_srv_keys_match(&s->keys, MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                                                          MHD_HTTP_HEADER_AUTHORIZATION));
    return k >= 0 ? k : -2;
}

/* The client is still there: its connection was not reset, and the gate did not shut it down. A FIN is
 * not a disconnect: a client that half-closed (shutdown(SHUT_WR), as nc -N and socat do) waits for its
 * answer, and one that closed its socket normally looks the same until a write to it is refused (a
 * stream's next write; for a non-streaming request, the answer at its end). */
static bool conn_alive(void *user) {
    struct MHD_Connection *conn = user;
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci) return true;
    struct pollfd p = {.fd = ci->connect_fd, .events = 0};
    if (poll(&p, 1, 0) <= 0) return true;
    return !(p.revents & (POLLHUP | POLLERR | POLLNVAL));
}

static int route(const char *url, const char *method, int *ep, char *arg, size_t cap, bool *method_ok) {
    const char *u = url;
    if (!strncmp(u, "/v1/", 4)) u += 3;
    *method_ok = true;
    bool get = !strcmp(method, "GET") || !strcmp(method, "HEAD"), post = !strcmp(method, "POST");
    if (!strcmp(u, "/chat/completions")) { *ep = RP_M_CHAT; *method_ok = post; return R_CHAT; }
    if (!strcmp(u, "/completions")) { *ep = RP_M_COMPLETIONS; *method_ok = post; return R_COMPLETIONS; }
    if (!strcmp(u, "/models")) { *ep = RP_M_MODELS; *method_ok = get; return R_MODELS; }
    if (!strncmp(u, "/models/", 8)) {
        *ep = RP_M_MODELS;
        *method_ok = get;
        snprintf(arg, cap, "%s", u + 8);
        return R_MODEL;
    }
    if (!strcmp(url, "/health") || !strcmp(u, "/health")) { *ep = RP_M_HEALTH; *method_ok = get; return R_HEALTH; }
    if (!strcmp(url, "/metrics")) { *ep = RP_M_METRICS; *method_ok = get; return R_METRICS; }
    if (rp_srv_web_is_page(url)) { *ep = RP_M_OTHER; *method_ok = get; return R_WEB; }   /* web_page.c */
    /* llama-server's utility endpoints (with or without /v1) */
    if (!strcmp(u, "/tokenize")) { *ep = RP_M_OTHER; *method_ok = post; return R_TOKENIZE; }
    if (!strcmp(u, "/detokenize")) { *ep = RP_M_OTHER; *method_ok = post; return R_DETOKENIZE; }
    if (!strcmp(u, "/props")) { *ep = RP_M_OTHER; *method_ok = get; return R_PROPS; }
    /* OpenAI's /v1/embeddings; /embedding and /embeddings are llama-server's own shape (as there) */
    if (!strcmp(url, "/v1/embeddings")) { *ep = RP_M_OTHER; *method_ok = post; return R_EMBEDDINGS; }
    if (!strcmp(u, "/embeddings") || !strcmp(u, "/embedding")) { *ep = RP_M_OTHER; *method_ok = post; return R_EMBEDDING; }
    if (!strncmp(u, "/sessions/", 10)) {
        *ep = RP_M_SESSIONS;
        *method_ok = !strcmp(method, "DELETE");
        snprintf(arg, cap, "%s", u + 10);
        return R_SESSION;
    }
    *ep = RP_M_OTHER;
    return R_NONE;
}

/* ------------------------------------------------------------ SSE */

static ssize_t sse_reader(void *cls, uint64_t pos, char *buf, size_t max) {
    rp_srv_call *c = cls;
    long n = rp_srv_call_read(c, buf, max);
    if (n == -1) return MHD_CONTENT_READER_END_OF_STREAM;
    if (n < 0) return MHD_CONTENT_READER_END_WITH_ERROR;
    return (ssize_t)n;
}

static void sse_free(void *cls) { rp_srv_call_free(cls); }

/* ------------------------------------------------------------ handlers */

static enum MHD_Result handle_generate(rp_server *s, struct MHD_Connection *conn, http_req *r) {
    rp_api_error err;
    rp_srv_call *c = NULL;
    rp_srv_endpoint ep = r->route == R_CHAT ? RP_EP_CHAT : RP_EP_COMPLETIONS;
    if (rp_srv_call_create(s, ep, r->key, r->body ? r->body : "", r->len, conn_alive, conn, &c, &err) != RP_OK)
        return send_error(conn, r, &err);
    if (c->req.stream) {
        struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, sse_reader, c, sse_free);
        if (!resp) {
            rp_srv_call_free(c);
            return MHD_NO;
        }
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
        MHD_add_response_header(resp, "X-Accel-Buffering", "no");
        cors_headers(s, r, resp);
        if (c->sess_id[0]) MHD_add_response_header(resp, "X-Reprise-Session", c->sess_id);
        enum MHD_Result ret = MHD_queue_response(conn, MHD_HTTP_OK, resp);
        MHD_destroy_response(resp);   /* the call is freed by sse_free when MHD is done with it */
        r->status = 200;
        return ret;
    }
    char *json = NULL;
    int http = 200;
    rp_status st = rp_srv_call_run(c, &json, &http, &err);
    char sid[33];
    memcpy(sid, c->sess_id, sizeof sid);
    rp_srv_call_free(c);
    if (st != RP_OK) {
        if (err.http == 499) { /* nobody to answer */
            r->status = 499;
            return MHD_NO;
        }
        return send_error(conn, r, &err);
    }
    struct MHD_Response *resp = MHD_create_response_from_buffer(strlen(json), json, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        free(json);
        return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
    cors_headers(s, r, resp);
    if (sid[0]) MHD_add_response_header(resp, "X-Reprise-Session", sid);
    enum MHD_Result ret = MHD_queue_response(conn, (unsigned)http, resp);
    MHD_destroy_response(resp);
    r->status = http;
    return ret;
}

static enum MHD_Result dispatch(rp_server *s, struct MHD_Connection *conn, http_req *r) {
    if (!atomic_load(&s->ready) && r->route != R_WEB) {   /* accepting before the model is loaded (llama-server's
                                                           * shape); the static page needs no model */
        if (r->route == R_HEALTH)
            return send_json(conn, r, 503, strdup("{\"status\":\"loading\",\"error\":{\"code\":503,\"message\":"
                                                  "\"Loading model\",\"type\":\"unavailable_error\"}}"));
        return fail(conn, r, 503, "model_loading", "Loading model%s", "");
    }
    switch (r->route) {
    case R_CHAT:
    case R_COMPLETIONS:
        if (atomic_load(&s->draining)) {
            atomic_fetch_add(&s->metrics.rejected, 1);
            return fail(conn, r, 503, "server_shutting_down", "the server is shutting down%s", "");
        }
        return handle_generate(s, conn, r);
    case R_MODELS: return send_json(conn, r, 200, rp_srv_models_json(s));
    case R_MODEL: {
        char *m = rp_srv_model_json(s, r->path_arg);
        if (!m) return fail(conn, r, 404, "model_not_found", "The model '%s' does not exist", r->path_arg);
        return send_json(conn, r, 200, m);
    }
    case R_HEALTH: return send_json(conn, r, atomic_load(&s->draining) ? 503 : 200, rp_srv_health_json(s));
    case R_METRICS: {
        rp_backend_stats bs;
        rp_backend_stats_get(s->b, &bs);
        rp_metrics_extra x = {.model = s->model_id, .backend = rp_backend_kind(s->b), .draining = atomic_load(&s->draining)};
        rp_stab_counts(s->sessions, &x.sessions, &x.sessions_active, &x.sessions_suspended);
        rp_gate_stats_get(s->gate, &x.conns);
        x.session_evictions = rp_stab_evictions(s->sessions);
        return send_text(conn, r, 200, "text/plain; version=0.0.4; charset=utf-8", rp_metrics_render(&s->metrics, &bs, &x));
    }
    case R_SESSION: {
        rp_status st = rp_stab_delete(s->sessions, r->key, r->path_arg);   /* another key's: not found */
        if (st == RP_ERR_NOT_FOUND) return fail(conn, r, 404, "session_not_found", "no session '%.40s'", r->path_arg);
        if (st != RP_OK) return fail(conn, r, 409, "session_busy", "the session is busy%s", "");
        json_t *o = json_pack("{s:s,s:s,s:b}", "id", r->path_arg, "object", "reprise.session.deleted", "deleted", 1);
        char *body = json_dumps(o, JSON_COMPACT);
        json_decref(o);
        return send_json(conn, r, 200, body);
    }
    case R_WEB: return (enum MHD_Result)rp_srv_web_send(conn, &r->status);
    case R_TOKENIZE:
    case R_DETOKENIZE: {
        rp_api_error err;
        char *out = NULL;
        const char *body = r->body ? r->body : "";
        rp_status st = r->route == R_TOKENIZE ? rp_srv_tokenize_json(s, body, r->len, &out, &err)
                                              : rp_srv_detokenize_json(s, body, r->len, &out, &err);
        if (st != RP_OK) return send_error(conn, r, &err);
        return send_json(conn, r, 200, out);
    }
    case R_PROPS: return send_json(conn, r, 200, rp_srv_props_json(s));
    case R_EMBEDDINGS:
    case R_EMBEDDING: {
        if (atomic_load(&s->draining)) {
            atomic_fetch_add(&s->metrics.rejected, 1);
            return fail(conn, r, 503, "server_shutting_down", "the server is shutting down%s", "");
        }
        rp_api_error err;
        char *out = NULL;
        if (rp_srv_embeddings_json(s, r->route == R_EMBEDDINGS, r->body ? r->body : "", r->len, &out, &err) != RP_OK)
            return send_error(conn, r, &err);
        return send_json(conn, r, 200, out);
    }
    default: return fail(conn, r, 404, "not_found", "unknown endpoint%s", "");
    }
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_size, void **con_cls) {
    rp_server *s = cls;
    http_req *r = *con_cls;
    if (!r) {
        r = calloc(1, sizeof *r);
        if (!r) return MHD_NO;
        *con_cls = r;
        r->srv = s;
        r->t0 = rp_srv_now();
        atomic_fetch_add(&s->metrics.inflight, 1);
        rp_gate_phase(conn, RP_CONN_BODY);
        bool method_ok;
        r->route = route(url, method, &r->ep, r->path_arg, sizeof r->path_arg, &method_ok);
        cors_match(s, conn, r);
        if (!strcmp(method, "OPTIONS") && (s->cors_any || s->n_cors > 0) && r->route != R_NONE) {
            r->early = true;   /* a preflight: no API key (browsers send none), no body */
            return send_preflight(s, conn, r);
        }
        /* errors known before the body: answered at once, the body is not read */
        if (head_over_limit(conn)) {
            r->early = true;
            return fail(conn, r, 431, "headers_too_large", "the request line and headers are larger than %s bytes",
                        RP_STR(RP_HTTP_MAX_HEAD));
        }
        if (rp_gate_uri_len(conn) > RP_HTTP_MAX_URI) {
            r->early = true;
            return fail(conn, r, 414, "uri_too_long", "the request URI is longer than %s bytes", RP_STR(RP_HTTP_MAX_URI));
        }
        /* the web page is public: it holds nothing, and asks for the key its API requests send */
        r->key = r->route != R_HEALTH && r->route != R_NONE && r->route != R_WEB ? request_key(s, conn) : -1;
        if (r->key == -2) {
            r->early = true;
            return fail(conn, r, 401, "invalid_api_key", "Incorrect API key provided (use Authorization: Bearer KEY)%s", "");
        }
        if (r->route == R_NONE) {
            r->early = true;
            return fail(conn, r, 404, "not_found", "unknown endpoint: %.100s", url);
        }
        if (!method_ok) {
            r->early = true;
            return fail(conn, r, 405, "method_not_allowed", "method %.16s is not allowed here", method);
        }
        const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl && strtoull(cl, NULL, 10) > s->lim.max_body) {
            r->early = true;
            char lim[32];
            snprintf(lim, sizeof lim, "%zu", s->lim.max_body);
            return fail(conn, r, 413, "request_too_large", "the request body is larger than %s bytes", lim);
        }
        return MHD_YES;
    }
    if (r->early) {
        *upload_size = 0;   /* discard anything that still arrives */
        return MHD_YES;
    }
    if (*upload_size > 0) {
        size_t n = *upload_size;
        *upload_size = 0;
        if (r->too_large || r->len + n > s->lim.max_body) {
            /* a chunked body over the limit: discarded and answered 413 at its end (MHD cannot reply in
             * the middle of an upload); one that goes on past 8x the limit gets the connection closed */
            r->too_large = true;
            r->discarded += n;
            return r->discarded > 8 * s->lim.max_body ? MHD_NO : MHD_YES;
        }
        if (r->len + n + 1 > r->cap) {
            size_t nc = r->cap ? r->cap : 4096;
            while (nc < r->len + n + 1) nc *= 2;
            if (nc > s->lim.max_body + 1) nc = s->lim.max_body + 1;
            char *nb = realloc(r->body, nc);
            if (!nb) return MHD_NO;
            r->body = nb;
            r->cap = nc;
        }
        memcpy(r->body + r->len, upload_data, n);
        r->len += n;
        r->body[r->len] = '\0';
        return MHD_YES;
    }
    rp_gate_phase(conn, RP_CONN_HANDLING);   /* the whole request is in */
    if (r->too_large) {
        char lim[32];
        snprintf(lim, sizeof lim, "%zu", s->lim.max_body);
        return fail(conn, r, 413, "request_too_large", "the request body is larger than %s bytes", lim);
    }
    return dispatch(s, conn, r);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls, enum MHD_RequestTerminationCode toe) {
    rp_server *s = cls;
    http_req *r = *con_cls;
    rp_gate_phase(conn, RP_CONN_IDLE);   /* kept alive for the next request, or about to close */
    if (!r) return;
    atomic_fetch_sub(&s->metrics.inflight, 1);
    if (r->status >= 100 && r->status < 600) rp_metrics_request(&s->metrics, r->ep, r->status);
    if (!s->cfg.quiet && r->status)
        fprintf(stderr, "reprise serve: %d %s %.1f ms%s\n", r->status,
                r->route == R_CHAT ? "chat" : r->route == R_COMPLETIONS ? "completions" : r->route == R_METRICS ? "metrics" : "request",
                (rp_srv_now() - r->t0) * 1e3, toe == MHD_REQUEST_TERMINATED_COMPLETED_OK ? "" : " (aborted)");
    free(r->body);
    free(r);
    *con_cls = NULL;
}

/* ------------------------------------------------------------ connections and libmicrohttpd's own errors */

/* The connection this libmicrohttpd thread serves (one thread per connection, for its whole life): bound at
 * its first request line, before libmicrohttpd parses any header of it. */
static __thread struct MHD_Connection *t_conn;

static void *on_request_line(void *cls, const char *uri, struct MHD_Connection *conn) {
    (void)cls;
    t_conn = conn;
    rp_gate_request_line(conn, uri ? strlen(uri) : 0);
    return NULL;
}

static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe) {
    rp_server *s = cls;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) rp_gate_mhd_started(s->gate, conn, socket_context);
    else rp_gate_mhd_closed(s->gate, socket_context);
}

/* Every error response libmicrohttpd builds itself (a malformed header line, headers larger than its
 * memory, a bad Content-Length or chunked body, a bad request line on a kept-alive connection) goes
 * through one log call naming its status, before anything of it is sent: the gate answers it as JSON
 * there and shuts the socket's write side, so libmicrohttpd's HTML page (or, for a bad Content-Length,
 * its two status lines) never reaches the client. Everything else libmicrohttpd logs is dropped. */
static void on_mhd_log(void *cls, const char *fmt, va_list ap) {
    static const char k_error[] = "Error processing request (HTTP response code is %u";
    (void)cls;
    if (!t_conn || strncmp(fmt, k_error, sizeof k_error - 1) != 0) return;
    const unsigned status = va_arg(ap, unsigned);
    const char *page = va_arg(ap, const char *);
    page = page ? page : "";
    const char *code = "malformed_request", *msg = "the request is malformed (its request line or a header line)";
    switch (status) {
    case 400:
        if (strstr(page, "chunked")) code = "invalid_chunked_encoding", msg = "the chunked request body is malformed";
        else if (strstr(page, "Content-Length")) code = "invalid_content_length", msg = "the Content-Length header is not a number";
        else if (strstr(page, "Host")) msg = "an HTTP/1.1 request needs a Host header";
        break;
    case 413:
        code = "request_too_large";
        msg = strstr(page, "chunk") ? "a chunk of the request body is too large" : "the Content-Length header is too large";
        break;
    case 414: code = "uri_too_long", msg = "the request URI is too long"; break;
    case 431: code = "headers_too_large", msg = "the request headers are too large"; break;
    case 505: code = "http_version_not_supported", msg = "the HTTP version is not supported: send HTTP/1.1 (or HTTP/1.0)"; break;
    default: break;
    }
    rp_gate_answer(t_conn, (int)status, code, msg);
}

/* An answer the gate wrote itself (a bad head, a refused connection, libmicrohttpd's errors). */
static void on_gate_reply(void *user, int status, const char *code) {
    rp_server *s = user;
    rp_metrics_request(&s->metrics, RP_M_OTHER, status);
    if (status == 503) atomic_fetch_add(&s->metrics.rejected, 1);
    if (!s->cfg.quiet) fprintf(stderr, "reprise serve: %d %s (answered before routing)\n", status, code ? code : "error");
}

/* ------------------------------------------------------------ lifecycle */

static void model_id_from_path(const char *path, char *out, size_t cap) {
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    size_t n = strlen(base);
    if (n > 5 && !strcmp(base + n - 5, ".gguf")) n -= 5;
    if (n >= cap) n = cap - 1;
    char *clean = rp_srv_utf8_clean(base, n);
    snprintf(out, cap, "%s", clean ? clean : "model");
    free(clean);
}

rp_status rp_server_start(const rp_server_config *cfg, rp_server **out) {
    *out = NULL;
    rp_server *s = calloc(1, sizeof *s);
    if (!s) return rp_errorf(RP_ERR_NOMEM, "server: out of memory");
    s->cfg = *cfg;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    rp_metrics_init(&s->metrics);
    s->host = strdup(cfg->host ? cfg->host : "127.0.0.1");
    rp_status st = RP_OK;
    if (!s->host) {
        st = rp_errorf(RP_ERR_NOMEM, "server: out of memory");
        goto fail;
    }
    if ((st = rp_srv_keys_load(cfg->api_key, cfg->api_key_file, &s->keys)) != RP_OK) goto fail;
    if ((st = cors_parse(s, cfg->cors_origins)) != RP_OK) goto fail;
    if (cfg->cache_namespace == RP_SRV_NS_PER_KEY && s->keys.n == 0) {
        st = rp_errorf(RP_ERR_INVALID_ARG, "server: a per-key cache namespace needs API keys (--api-key-file, or "
                                           "--api-key / REPRISE_API_KEY)");
        goto fail;
    }
    s->ns_per_key = cfg->cache_namespace == RP_SRV_NS_PER_KEY || (cfg->cache_namespace == RP_SRV_NS_AUTO && s->keys.n > 1);
    if (cfg->timeout_s <= 0 || cfg->max_body < 64 || cfg->max_depth < 2 || cfg->max_messages < 1 ||
        cfg->max_connections < 1 || cfg->max_connections_per_ip < 0 || !(cfg->header_timeout_s > 0) ||
        !(cfg->body_timeout_s > 0) || !(cfg->idle_timeout_s > 0) || cfg->default_max_tokens < 1 || cfg->key_max_sessions < 0 || cfg->key_kv_mb < 0) {
        st = rp_errorf(RP_ERR_INVALID_ARG,
                       "server: bad limits (timeout %.1f, body %zu, depth %d, messages %d, key sessions %d, key KV %.1f MB)",
                       cfg->timeout_s, cfg->max_body, cfg->max_depth, cfg->max_messages, cfg->key_max_sessions,
                       cfg->key_kv_mb);
        goto fail;
    }
    /* the address first: a bad --host fails before the model loads */
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE}, *ai = NULL;
    char port[16];
    snprintf(port, sizeof port, "%u", (unsigned)cfg->port);
    int gai = getaddrinfo(s->host, port, &hints, &ai);
    if (gai != 0 || !ai) {
        st = rp_errorf(RP_ERR_INVALID_ARG, "server: cannot resolve --host '%s': %s", s->host, gai_strerror(gai));
        goto fail;
    }
    /* bound before the model loads: a port in use fails at once too */
    const rp_gate_limits gl = {
        .max_connections = cfg->max_connections,
        .max_per_ip = cfg->max_connections_per_ip,
        .header_timeout_s = cfg->header_timeout_s,
        .body_timeout_s = cfg->body_timeout_s,
        .idle_timeout_s = cfg->idle_timeout_s,
        /* the generation stops at timeout_s; the client then has as long again (at most 30 s) to read the answer */
        .handling_timeout_s = cfg->timeout_s + (cfg->timeout_s < 30 ? cfg->timeout_s : 30),
        .max_uri = RP_HTTP_MAX_URI,
        .max_head = RP_HTTP_MAX_HEAD,
    };
    st = rp_gate_create(ai->ai_addr, ai->ai_addrlen, &gl, on_gate_reply, s, &s->gate);
    freeaddrinfo(ai);
    if (st == RP_ERR_IO) {
        char why[256];
        snprintf(why, sizeof why, "%s", rp_last_error());
        rp_errorf(st, "server: cannot listen on %s:%u: %s", s->host, (unsigned)cfg->port, why);
    }
    if (st != RP_OK) goto fail;

    s->lim = rp_srv_default_limits(0);   /* n_ctx once the model is loaded */
    s->lim.max_body = cfg->max_body;
    s->lim.max_depth = cfg->max_depth;
    s->lim.max_messages = (size_t)cfg->max_messages;

    /* A thread per connection (generation handlers block until the backend answers), but only for
     * connections the gate handed over: those whose first request head is complete. The gate owns the
     * listening socket, the caps and every deadline; libmicrohttpd's own (activity-based) timeout and
     * connection limit are backstops above them. */
    const unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL |
                           MHD_USE_ITC | MHD_USE_NO_LISTEN_SOCKET | MHD_USE_ERROR_LOG;
    s->d = MHD_start_daemon(flags, 0, NULL, NULL, on_request, s,
                            MHD_OPTION_CONNECTION_LIMIT, (unsigned)rp_gate_socket_cap(&gl) + 8,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)(gl.handling_timeout_s + 30),
                            MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)4 * RP_HTTP_MAX_HEAD,
                            MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
                            MHD_OPTION_NOTIFY_CONNECTION, on_connection, s,
                            MHD_OPTION_URI_LOG_CALLBACK, on_request_line, s,
                            MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, s,
                            MHD_OPTION_END);
    if (!s->d) {
        st = rp_errorf(RP_ERR_IO, "server: cannot start the HTTP daemon");
        goto fail;
    }
    if ((st = rp_gate_start(s->gate, s->d)) != RP_OK) goto fail;
    s->port = rp_gate_port(s->gate);
    if (cfg->on_listening) cfg->on_listening(cfg->on_listening_user, s->port);

    /* connections are answered from here on (503 "loading" until the model is in) */
    if ((st = rp_backend_create(&cfg->backend, &s->b)) != RP_OK) goto fail;
    const rp_model *m = rp_backend_model(s->b);
    if (rp_backend_is_encoder(s->b) && !cfg->embeddings) {
        st = rp_errorf(RP_ERR_UNSUPPORTED, "server: '%s' is an embedding model (%s), which does not generate text: "
                       "start the server with --embeddings to answer /v1/embeddings", rp_model_describe(m).name,
                       rp_model_describe(m).arch);
        goto fail;
    }
    if (cfg->model_id && cfg->model_id[0]) {
        char *clean = rp_srv_utf8_clean(cfg->model_id, strnlen(cfg->model_id, sizeof s->model_id - 1));
        snprintf(s->model_id, sizeof s->model_id, "%s", clean ? clean : "model");
        free(clean);
    } else {
        model_id_from_path(cfg->backend.model_path, s->model_id, sizeof s->model_id);
    }
    snprintf(s->fingerprint, sizeof s->fingerprint, "fp_%016llx", (unsigned long long)rp_model_describe(m).fingerprint);
    s->created = (int64_t)time(NULL);
    s->lim.n_ctx = rp_backend_n_ctx(s->b);
    rp_stab_params sp = rp_stab_default_params();
    sp.max_sessions = cfg->backend.max_sessions;
    sp.ttl_s = cfg->session_ttl_s;
    /* per key: the fair share of the table unless told (one key alone has the table to itself) */
    sp.owner_max_sessions = cfg->key_max_sessions > 0 ? cfg->key_max_sessions
                            : s->keys.n > 1         ? (sp.max_sessions / s->keys.n > 1 ? sp.max_sessions / s->keys.n : 1)
                                                    : 0;
    sp.owner_max_kv_bytes = (uint64_t)(cfg->key_kv_mb * 1048576.0);
    sp.kv_bytes_per_token = rp_backend_kv_bytes_per_token(s->b);
    if ((st = rp_stab_create(s->b, &sp, &s->sessions)) != RP_OK) goto fail;
    if ((st = rp_srv_embeddings_init(s)) != RP_OK) goto fail;

    atomic_store(&s->ready, true);
    *out = s;
    return RP_OK;
fail:
    rp_server_stop(s);
    return st;
}

uint16_t rp_server_port(const rp_server *s) { return s ? s->port : 0; }
int rp_server_n_keys(const rp_server *s) { return s ? s->keys.n : 0; }
bool rp_server_cache_per_key(const rp_server *s) { return s && s->ns_per_key; }
rp_backend *rp_server_backend(rp_server *s) { return s->b; }

void rp_server_drain(rp_server *s, double deadline_s) {
    if (!s || s->drained) return;
    s->drained = true;
    atomic_store(&s->draining, true);
    rp_gate_close_listener(s->gate);   /* no new connections; open ones continue */
    double until = rp_srv_now() + deadline_s;
    pthread_mutex_lock(&s->mu);
    while (s->n_calls > 0 && rp_srv_now() < until) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 50 * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&s->cv, &s->mu, &ts);
    }
    pthread_mutex_unlock(&s->mu);
    rp_srv_cancel_all(s);   /* what is left ends now, with what it generated */
    until = rp_srv_now() + 5;
    pthread_mutex_lock(&s->mu);
    while (s->n_calls > 0 && rp_srv_now() < until) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 50 * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&s->cv, &s->mu, &ts);
    }
    pthread_mutex_unlock(&s->mu);
    if (s->b && rp_backend_flush(s->b) != RP_OK)
        fprintf(stderr, "reprise serve: flushing the cache store failed: %s\n", rp_last_error());
}

void rp_server_stop(rp_server *s) {
    if (!s) return;
    rp_gate_stop(s->gate);   /* nothing more is accepted or handed over */
    if (s->d) {
        rp_srv_cancel_all(s);
        MHD_stop_daemon(s->d);   /* closes connections; request callbacks finish first */
        s->d = NULL;
    }
    rp_gate_free(s->gate);   /* after the daemon: its close callbacks use the gate */
    rp_stab_free(s->sessions);
    rp_srv_embeddings_free(s);   /* before the backend: it reads the backend's model */
    rp_backend_free(s->b);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s->host);
    for (int i = 0; i < s->n_cors; i++) free(s->cors[i]);
    free(s->cors);
    rp_srv_keys_free(&s->keys);
    free(s);
}
