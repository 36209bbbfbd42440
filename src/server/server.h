/* server.h — the OpenAI-compatible HTTP server (libmicrohttpd): start, port, drain, stop. */
#ifndef RP_SERVER_H
#define RP_SERVER_H

#include <stdbool.h>
#include <stdint.h>

#include "reprise.h"
#include "server/backend.h"
#include "server/request.h"

typedef struct rp_server_config {
    rp_backend_config backend;
    const char *host;            /* bind address (default "127.0.0.1"; "0.0.0.0" / "::" expose it) */
    uint16_t port;               /* 0: an ephemeral port (rp_server_port tells which) */
    /* API keys ("Authorization: Bearer KEY" on everything but /health); none of the two: no auth. See
     * server/auth.h for the key file's format and checks. An empty api_key is an error, never "no auth". */
    const char *api_key;         /* one key, named "default" */
    const char *api_key_file;    /* keys, one per line (NAME:KEY or KEY); must not be accessible by group/others */
    int cache_namespace;         /* rp_srv_cache_ns: whose cached KV a request may reuse */
    int key_max_sessions;        /* reprise_session sessions one API key may hold (0: the fair share
                                    max(1, sessions / keys) with more than one key, else no limit of its own) */
    double key_kv_mb;            /* KV (MiB) one API key's sessions may hold (0: no limit) */
    const char *model_id;        /* name in /v1/models and responses (NULL: the model file's base name) */
    const char *grammar;         /* the default GBNF of requests without one (rp_server_params.grammar), or NULL */
    size_t max_body;             /* bytes (default 1 MiB) */
    int max_depth;               /* JSON nesting (default 64) */
    int max_messages;            /* default 1024 */
    int32_t default_max_tokens;  /* chat replies without max_tokens (default 2048, capped by the context) */
    double timeout_s;            /* per request, queueing included (default 600) */
    double session_ttl_s;        /* idle reprise_session lifetime (default 1800) */
    int max_connections;         /* open client connections in all (default 256); idle ones are closed first
                                  * when a new client needs room */
    int max_connections_per_ip;  /* open connections from one address (default 64; 0: no cap) */
    double header_timeout_s;     /* request line + headers must arrive within this (default 10) */
    double body_timeout_s;       /* the body within this of the headers (default 30) */
    double idle_timeout_s;       /* a kept-alive connection without a request is closed after this (default 15) */
    bool quiet;                  /* no access log on stderr */
    /* called once the port is bound and connections are accepted, before the model loads (they are answered
     * 503 "loading" until it has): the port, user. NULL: none */
    void (*on_listening)(void *user, uint16_t port);
    void *on_listening_user;
    const char *cors_origins;    /* allowed browser origins, comma-separated ("*": any); NULL / "": no CORS */
    bool embeddings;             /* /v1/embeddings and /embedding answer (else 501) */
    int pooling;                 /* rp_pooling of their embedder (RP_POOLING_MODEL: the model's) */
} rp_server_config;

/* Cache namespaces. PER_KEY: a request reuses (and its usage reports as
 * cached) only KV computed for requests of the same API key, so no client
 * can confirm another's prompt from cached_tokens or timing. SHARED: one
 * cache for everyone (the most reuse). AUTO (default): PER_KEY when more
 * than one key is configured (several tenants), SHARED otherwise (one
 * client, or no auth: nobody to isolate from). */
typedef enum rp_srv_cache_ns {
    RP_SRV_NS_AUTO = RP_SERVER_NS_AUTO, RP_SRV_NS_SHARED = RP_SERVER_NS_SHARED, RP_SRV_NS_PER_KEY = RP_SERVER_NS_PER_KEY
} rp_srv_cache_ns;

rp_server_config rp_server_default_config(void);

/* The server (rp_server, reprise.h: rp_server_port, rp_server_n_keys, rp_server_cache_per_key, rp_server_drain
 * are public). rp_server_create (public) maps its params onto this config and calls rp_server_start. */

/* Loads the model, starts the backend and the HTTP daemon. */
rp_status rp_server_start(const rp_server_config *cfg, rp_server **out);
rp_backend *rp_server_backend(rp_server *s);
/* Stops the daemon (closing connections) and frees everything (rp_server_free). */
void rp_server_stop(rp_server *s);

#endif /* RP_SERVER_H */
