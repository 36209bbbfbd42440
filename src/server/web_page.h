/* web_page.h — the built-in web page (src/server/web/index.html, embedded at build time) served at GET /. */
#ifndef RP_SERVER_WEB_PAGE_H
#define RP_SERVER_WEB_PAGE_H

#include <stdbool.h>
#include <stddef.h>

struct MHD_Connection;

/* The request path is the page: "/" or "/index.html". */
bool rp_srv_web_is_page(const char *url);

/* Queues the page on the connection: 200 with the page, or 304 when the request's If-None-Match names its
 * ETag. Sets *status to the status queued. Returns libmicrohttpd's MHD_YES / MHD_NO (as an int, so that this
 * header needs no microhttpd.h). The page is public (no API key): it holds no data, and asks the user for a key
 * that it then sends with its API requests. */
int rp_srv_web_send(struct MHD_Connection *conn, int *status);

/* The embedded bytes (for tests): the page and its length. */
const unsigned char *rp_srv_web_page(size_t *len);

#endif /* RP_SERVER_WEB_PAGE_H */
