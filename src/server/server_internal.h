/* server_internal.h — state shared by the HTTP layer (http.c) and the API handlers (call.c, api_*.c). */
#ifndef RP_SERVER_INTERNAL_H
#define RP_SERVER_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>

#include "server/auth.h"
#include "server/backend.h"
#include "server/errors.h"
#include "server/gen.h"
#include "server/metrics.h"
#include "server/prompt.h"
#include "server/request.h"
#include "server/server.h"
#include "server/session_table.h"

typedef struct rp_srv_call rp_srv_call;

struct rp_server {
    rp_server_config cfg;
    char *host;
    rp_srv_keys keys;              /* API keys (none: no auth) */
    bool ns_per_key;               /* each key reuses only its own cached KV (cache_namespace) */
    char model_id[256];
    char fingerprint[40];          /* "fp_" + model fingerprint */
    int64_t created;               /* unix time the model was loaded */
    rp_srv_limits lim;
    rp_backend *b;
    rp_session_table *sessions;
    rp_metrics metrics;
    struct MHD_Daemon *d;
    struct rp_conn_gate *gate;     /* accepts, caps, deadlines (conn_gate.c) */
    uint16_t port;
    _Atomic bool draining;
    char **cors;                   /* allowed browser origins (--cors), exact, without a trailing slash */
    int n_cors;
    bool cors_any;                 /* "*": any origin */
    _Atomic bool ready;            /* the model is loaded: until then everything but /health answers 503 loading */
    bool drained, stopped;
    pthread_mutex_t mu;            /* calls list */
    pthread_cond_t cv;
    rp_srv_call *calls;            /* generations in flight (mu) */
    int n_calls;
    rp_embedder *embd;             /* --embeddings: the embeddings endpoints' (embd_mu: one request at a time) */
    pthread_mutex_t embd_mu;
    bool embd_mu_init;
};

/* Says whether the client is still connected (polls its socket). */
typedef bool (*rp_srv_alive_fn)(void *user);

/* One generation request in flight. */
struct rp_srv_call {
    rp_server *srv;
    rp_srv_call *prev, *next;      /* server list (srv->mu) */
    rp_srv_endpoint ep;
    int key;                       /* the request's API key (index), -1 without keys */
    rp_srv_request req;
    rp_srv_text text;
    rp_srv_prompt prompt;
    rp_job *job;
    rp_stab_entry *sess;
    char sess_id[33];
    rp_srv_gen gen;
    int32_t n_consumed;            /* tokens taken from the job */
    int32_t n_counted;             /* completion tokens (up to a stop sequence) */
    double t0, deadline;
    char id[48];
    int64_t created;
    rp_srv_alive_fn alive;
    void *alive_user;
    /* outcome */
    bool done, timed_out, gone, ttft_recorded;
    rp_job_finish finish;
    rp_job_stats stats;
    char job_err[256];
    rp_srv_reply reply;
    bool have_reply;
    /* logprobs: generated tokens [0, lp_sent) already reported; legacy text_offset so far */
    int32_t lp_sent;
    size_t lp_offset;
    /* streaming */
    char *out;
    size_t out_len, out_cap, out_off;
    int phase;
    /* choices (n > 1): the call is choice 0 and holds the others, children that borrow its request, text and
     * prompt and own their job, generation, reply and logprobs state; a child has choice[] empty */
    int32_t index;                 /* the choice's index */
    int32_t n_choices;             /* choice 0: the request's n (1 without choices) */
    rp_srv_call *choice[RP_SRV_MAX_N];   /* choice 0: [0] itself, then its children */
    bool child;
    bool ended;                    /* streaming: the choice's end (rest of the text, finish_reason) was sent */
    bool failed;                   /* streaming: an error event was sent */
};

/* call.c */
/* `key`: the API key the request presented (index into s->keys), -1 without keys: it owns the sessions the
 * call creates, may use only those, and selects the cache namespace of its job. */
rp_status rp_srv_call_create(rp_server *s, rp_srv_endpoint ep, int key, const char *body, size_t len,
                             rp_srv_alive_fn alive, void *alive_user, rp_srv_call **out, rp_api_error *err);
/* Non-streaming: waits for the end and renders the response body (malloc'd). */
rp_status rp_srv_call_run(rp_srv_call *c, char **json, int *http, rp_api_error *err);
/* Streaming: fills buf with SSE bytes; returns the count, -1 at the end of
 * the stream, -2 when the client went away. Blocks until it has bytes. */
long rp_srv_call_read(rp_srv_call *c, char *buf, size_t max);
void rp_srv_call_free(rp_srv_call *c);
void rp_srv_cancel_all(rp_server *s);

/* api_chat.c / api_completions.c: response bodies (malloc'd JSON text) */
char *rp_srv_chat_response(rp_srv_call *c);
char *rp_srv_chat_chunk(rp_srv_call *c, const char *content, const char *finish, bool role, const rp_srv_reply *calls);
/* A delta carrying reasoning_content (the think block streamed apart from the content). */
char *rp_srv_chat_reasoning_chunk(rp_srv_call *c, const char *text);
char *rp_srv_completion_response(rp_srv_call *c);
char *rp_srv_completion_chunk(rp_srv_call *c, const char *text, const char *finish);
struct json_t *rp_srv_usage_json(rp_srv_call *c);
/* logprobs.c: a choice's `logprobs` for generated tokens [from, to) in the endpoint's shape (NULL without logprobs),
 * and the one for the tokens not reported yet (up to n_counted; JSON null without logprobs, and for a stream chunk
 * with no new token) */
struct json_t *rp_srv_logprobs_json(rp_srv_call *c, int32_t from, int32_t to);
struct json_t *rp_srv_take_logprobs(rp_srv_call *c);
char *rp_srv_usage_chunk(rp_srv_call *c);

/* api_models.c */
char *rp_srv_models_json(rp_server *s);
char *rp_srv_model_json(rp_server *s, const char *id);   /* NULL if not ours */
char *rp_srv_health_json(rp_server *s);

/* api_utility.c: llama-server's /tokenize, /detokenize (JSON bodies in, malloc'd JSON out) and /props */
rp_status rp_srv_tokenize_json(rp_server *s, const char *body, size_t len, char **out, rp_api_error *err);
rp_status rp_srv_detokenize_json(rp_server *s, const char *body, size_t len, char **out, rp_api_error *err);
char *rp_srv_props_json(rp_server *s);

/* api_embeddings.c: POST /v1/embeddings (oai) and llama-server's /embedding; init creates the embedder when the
 * config asks for embeddings (after the backend), free releases it */
rp_status rp_srv_embeddings_init(rp_server *s);
void rp_srv_embeddings_free(rp_server *s);
rp_status rp_srv_embeddings_json(rp_server *s, bool oai, const char *body, size_t len, char **out, rp_api_error *err);

#endif /* RP_SERVER_INTERNAL_H */
