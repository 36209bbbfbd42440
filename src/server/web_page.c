/* web_page.c — GET / : the built-in chat page, one static HTML file (src/server/web/index.html) compiled into the
 * binary by cmake/embed_file.cmake. Served with its type, a strong ETag (revalidated on every load, so a new build's
 * page is seen at once; 304 when unchanged) and headers that keep it from being framed, sniffed or from talking to
 * anything but this server. */
#include <microhttpd.h>
#include <string.h>

#include "server/web_page.h"

/* generated/web_index.c */
extern const unsigned char rp_srv_web_index[];
extern const size_t rp_srv_web_index_len;
extern const char rp_srv_web_index_etag[];

/* The page's own script and style are inline; it connects only to this origin and loads nothing else. */
static const char k_csp[] = "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
                            "connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; "
                            "frame-ancestors 'none'";

bool rp_srv_web_is_page(const char *url) { return url && (!strcmp(url, "/") || !strcmp(url, "/index.html")); }

const unsigned char *rp_srv_web_page(size_t *len) {
    if (len) *len = rp_srv_web_index_len;
    return rp_srv_web_index;
}

/* If-None-Match lists the ETag (or is "*"): a comma-separated list of (possibly weak) tags. */
static bool etag_matches(const char *inm) {
    if (!inm) return false;
    const size_t n = strlen(rp_srv_web_index_etag);
    for (const char *p = inm; *p;) {
        while (*p == ' ' || *p == '\t' || *p == ',') p++;
        if (*p == '*') return true;
        if (!strncmp(p, "W/", 2)) p += 2;
        if (!strncmp(p, rp_srv_web_index_etag, n) && (p[n] == '\0' || p[n] == ',' || p[n] == ' ' || p[n] == '\t'))
            return true;
        while (*p && *p != ',') p++;
    }
    return false;
}

int rp_srv_web_send(struct MHD_Connection *conn, int *status) {
    const bool fresh = etag_matches(MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_IF_NONE_MATCH));
    *status = fresh ? MHD_HTTP_NOT_MODIFIED : MHD_HTTP_OK;
    /* the array is static: libmicrohttpd sends it without a copy */
    struct MHD_Response *resp = MHD_create_response_from_buffer(fresh ? 0 : rp_srv_web_index_len,
                                                                (void *)rp_srv_web_index, MHD_RESPMEM_PERSISTENT);
    if (!resp) return MHD_NO;
    if (!fresh) {
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/html; charset=utf-8");
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_SECURITY_POLICY, k_csp);
        MHD_add_response_header(resp, MHD_HTTP_HEADER_X_CONTENT_TYPE_OPTIONS, "nosniff");
        MHD_add_response_header(resp, MHD_HTTP_HEADER_X_FRAME_OPTIONS, "DENY");
        MHD_add_response_header(resp, "Referrer-Policy", "no-referrer");
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_ETAG, rp_srv_web_index_etag);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    enum MHD_Result ret = MHD_queue_response(conn, (unsigned)*status, resp);
    MHD_destroy_response(resp);
    return ret;
}
