/* conn_gate.h — the server's connections: accept, per-address and total caps, deadlines, eviction, hand-off to libmicrohttpd. */
#ifndef RP_SERVER_CONN_GATE_H
#define RP_SERVER_CONN_GATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "reprise.h"

struct MHD_Daemon;
struct MHD_Connection;

/* Caps and deadlines (all deadlines are absolute: activity does not extend them). */
typedef struct rp_gate_limits {
    int max_connections;         /* open client connections in all */
    int max_per_ip;              /* open connections from one address (0: no cap) */
    double header_timeout_s;     /* request line + headers: from the accept (first request) or the request line */
    double body_timeout_s;       /* the body, from the end of the headers */
    double idle_timeout_s;       /* a kept-alive connection with no request in progress */
    double handling_timeout_s;   /* answering: from the end of the body until the answer is written */
    size_t max_uri;              /* request URI bytes (414 above) */
    size_t max_head;             /* request line + headers bytes (431 above) */
} rp_gate_limits;

/* Where a connection libmicrohttpd serves is in its current request. */
typedef enum rp_conn_phase {
    RP_CONN_IDLE = 0,    /* no request (kept alive between requests) */
    RP_CONN_HEADERS,     /* the request line came, the headers have not all */
    RP_CONN_BODY,        /* the headers came, the body has not all */
    RP_CONN_HANDLING,    /* the request is being answered */
} rp_conn_phase;

enum {   /* why the gate closed connections (counters) */
    RP_DROP_HEADER_TIMEOUT = 0, RP_DROP_BODY_TIMEOUT, RP_DROP_IDLE_TIMEOUT, RP_DROP_WRITE_TIMEOUT,
    RP_DROP_EVICTED,     /* closed to make room for a new connection (idle ones first) */
    RP_DROP_REJECTED,    /* refused at accept with 503: every connection it could close is answering */
    RP_DROP_COUNT
};

typedef struct rp_gate_stats {
    int open;                      /* client sockets open */
    int pending;                   /* accepted, first request head not complete */
    int idle, receiving, busy;     /* served by libmicrohttpd: idle, receiving a request, answering */
    uint64_t dropped[RP_DROP_COUNT];
} rp_gate_stats;

/* Called (from any thread) for each answer the gate writes itself: an HTTP
 * error status with its OpenAI error code. */
typedef void (*rp_gate_reply_fn)(void *user, int status, const char *code);

typedef struct rp_conn_gate rp_conn_gate;

/* Binds and listens on addr; raises RLIMIT_NOFILE's soft limit when the caps
 * need more descriptors (RP_ERR_RANGE naming the limit when the hard limit is
 * too low). Nothing is accepted before rp_gate_start. */
rp_status rp_gate_create(const struct sockaddr *addr, socklen_t alen, const rp_gate_limits *lim, rp_gate_reply_fn reply,
                         void *reply_user, rp_conn_gate **out);
uint16_t rp_gate_port(const rp_conn_gate *g);
/* The daemon that takes connections whose first request head is complete and
 * valid (started with MHD_USE_NO_LISTEN_SOCKET and the callbacks below). */
rp_status rp_gate_start(rp_conn_gate *g, struct MHD_Daemon *d);
/* Closes the listening socket (no connection is accepted after it returns). */
void rp_gate_close_listener(rp_conn_gate *g);
/* Stops the gate's thread and closes the connections it still holds. */
void rp_gate_stop(rp_conn_gate *g);
/* After MHD_stop_daemon (its callbacks use the gate). NULL is fine. */
void rp_gate_free(rp_conn_gate *g);
/* The most sockets the gate keeps open (caps plus room for ones closing). */
int rp_gate_socket_cap(const rp_gate_limits *lim);

/* libmicrohttpd callbacks (MHD_OPTION_NOTIFY_CONNECTION). The calls after them find the gate from the
 * connection, and do nothing for one the gate did not hand over. */
void rp_gate_mhd_started(rp_conn_gate *g, struct MHD_Connection *c, void **socket_context);
void rp_gate_mhd_closed(rp_conn_gate *g, void **socket_context);
/* The connection's current request moved to `phase` (request-line, header, body and completion callbacks). */
void rp_gate_phase(struct MHD_Connection *c, rp_conn_phase phase);
/* The request line came with a URI of uri_len bytes; rp_gate_uri_len returns it afterwards. */
void rp_gate_request_line(struct MHD_Connection *c, size_t uri_len);
size_t rp_gate_uri_len(struct MHD_Connection *c);
/* Answers the request now, on the socket, as JSON (status, code, message),
 * then shuts the socket's write side so nothing libmicrohttpd sends after it
 * arrives. For an error libmicrohttpd is about to answer itself; only while
 * the request is being received. Called in the connection's thread. */
bool rp_gate_answer(struct MHD_Connection *c, int status, const char *code, const char *message);

void rp_gate_stats_get(rp_conn_gate *g, rp_gate_stats *out);

#endif /* RP_SERVER_CONN_GATE_H */
