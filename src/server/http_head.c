/* http_head.c — the request line and head length of an HTTP/1.x request, checked from its raw bytes. */
#include "server/http_head.h"

#include <stdio.h>
#include <string.h>

/* RFC 9110 tchar */
static bool is_tchar(unsigned char c) {
    if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return true;
    return c && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

static void bad(rp_head_verdict *v, int status, const char *code, const char *msg) {
    v->state = RP_HEAD_BAD;
    v->status = status;
    v->code = code;
    snprintf(v->message, sizeof v->message, "%s", msg);
}

static void uri_too_long(rp_head_verdict *v, size_t max_uri) {
    char msg[96];
    snprintf(msg, sizeof msg, "the request URI is longer than %zu bytes", max_uri);
    bad(v, 414, "uri_too_long", msg);
}

/* The request line [s, s + n) without its line ending. */
static void check_request_line(const char *s, size_t n, size_t max_uri, rp_head_verdict *v) {
    for (size_t i = 0; i < n; i++) {
        const unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c == 0x7f) {
            bad(v, 400, "malformed_request", "the request line contains a control character");
            return;
        }
    }
    const char *sp = memchr(s, ' ', n);
    if (!sp || sp == s) {
        bad(v, 400, "malformed_request", "the request line is not 'METHOD URI HTTP/1.1'");
        return;
    }
    for (const char *p = s; p < sp; p++)
        if (!is_tchar((unsigned char)*p)) {
            bad(v, 400, "malformed_request", "the request method is not a token");
            return;
        }
    const char *uri = sp, *end = s + n;
    while (uri < end && *uri == ' ') uri++;
    while (end > uri && end[-1] == ' ') end--;
    const char *ver = end;
    while (ver > uri && ver[-1] != ' ') ver--;
    if (ver == uri) {   /* no space between the URI and a version */
        bad(v, 400, "malformed_request", "the request line has no HTTP version ('METHOD URI HTTP/1.1')");
        return;
    }
    const size_t vlen = (size_t)(end - ver);
    const char *uri_end = ver - 1;
    while (uri_end > uri && uri_end[-1] == ' ') uri_end--;
    if (vlen != 8 || memcmp(ver, "HTTP/", 5) != 0 || ver[5] < '0' || ver[5] > '9' || ver[6] != '.' || ver[7] < '0' ||
        ver[7] > '9') {
        bad(v, 400, "malformed_request", "the request line does not end in an HTTP version ('HTTP/1.1')");
        return;
    }
    if (ver[5] != '1') {
        char msg[96];
        snprintf(msg, sizeof msg, "%.8s is not supported: send HTTP/1.1 (or HTTP/1.0)", ver);
        bad(v, 505, "http_version_not_supported", msg);
        return;
    }
    if ((size_t)(uri_end - uri) > max_uri) uri_too_long(v, max_uri);
}

static void head_too_large(rp_head_verdict *v, size_t max_head) {
    char msg[96];
    snprintf(msg, sizeof msg, "the request headers are larger than %zu bytes", max_head);
    bad(v, 431, "headers_too_large", msg);
}

void rp_http_head_check(const char *buf, size_t n, size_t max_uri, size_t max_head, rp_head_verdict *v) {
    memset(v, 0, sizeof *v);
    if (n > max_head + 1) n = max_head + 1;   /* a head must end within max_head: nothing after that matters */
    size_t p = 0;
    while (p < n && (buf[p] == '\r' || buf[p] == '\n')) {   /* blank lines before the request line */
        if (buf[p] == '\r' && (p + 1 >= n || buf[p + 1] != '\n')) break;
        p += buf[p] == '\r' ? 2 : 1;
    }
    v->started = p < n && !(buf[p] == '\r' && p + 1 == n);
    const size_t line_cap = max_uri + 64;   /* method, spaces, version and line end around a URI of max_uri */
    const char *nl = memchr(buf + p, '\n', n - p);
    if (!nl) {
        if (n - p > line_cap) uri_too_long(v, max_uri);
        else if (n > max_head) head_too_large(v, max_head);
        return;
    }
    size_t line_len = (size_t)(nl - (buf + p));
    if (line_len > line_cap) {   /* as before its end came: the verdict does not depend on how the bytes arrive */
        uri_too_long(v, max_uri);
        return;
    }
    if (line_len > 0 && buf[p + line_len - 1] == '\r') line_len--;
    check_request_line(buf + p, line_len, max_uri, v);
    if (v->state == RP_HEAD_BAD) return;
    /* the head ends at the first empty line after the request line */
    for (size_t i = (size_t)(nl - buf); i < n; i++) {
        if (buf[i] != '\n') continue;
        size_t k = i + 1;
        if (k < n && buf[k] == '\r') k++;
        if (k < n && buf[k] == '\n') {
            if (k + 1 > max_head) break;
            v->state = RP_HEAD_OK;
            v->head_len = k + 1;
            return;
        }
        if (i + 1 > max_head) break;
    }
    if (n > max_head) head_too_large(v, max_head);
}
