/* request.h — parsed and validated bodies of /v1/chat/completions and /v1/completions (the path fuzz_request drives). */
#ifndef RP_SERVER_REQUEST_H
#define RP_SERVER_REQUEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "reprise.h"
#include "server/errors.h"

#define RP_SRV_MAX_STOP 4          /* stop sequences per request (OpenAI's limit) */
#define RP_SRV_MAX_STOP_LEN 256    /* bytes per stop sequence */
#define RP_SRV_MAX_TOOLS 128
#define RP_SRV_MAX_TOOL_CALLS 64   /* per assistant message */
#define RP_SRV_MAX_BIAS 1024       /* logit_bias entries */
#define RP_SRV_MAX_N 16             /* choices a request may ask for (n): the backend's RP_BACKEND_MAX_N */
#define RP_SRV_SESSION_HEX 32      /* 128-bit session ids as lowercase hex */

typedef enum rp_srv_endpoint {
    RP_EP_CHAT = 0,          /* POST /v1/chat/completions */
    RP_EP_COMPLETIONS = 1,   /* POST /v1/completions */
} rp_srv_endpoint;

typedef enum rp_tool_choice {
    RP_TOOL_CHOICE_AUTO = 0,
    RP_TOOL_CHOICE_NONE = 1,       /* tools are left out of the prompt */
    RP_TOOL_CHOICE_REQUIRED = 2,   /* the prompt instructs the model to call a tool */
    RP_TOOL_CHOICE_NAMED = 3,      /* the reply is forced to start a call of tool_name */
} rp_tool_choice;

typedef enum rp_srv_session_kind {
    RP_SRV_SESSION_NONE = 0,
    RP_SRV_SESSION_NEW = 1,   /* "reprise_session": true | "new" */
    RP_SRV_SESSION_ID = 2,    /* "reprise_session": "<32 hex>" */
} rp_srv_session_kind;

/* A message as parsed: OpenAI's shape with its tool calls as structs (rp_chat_message carries them as JSON). For
 * role "tool", tool_call_id / name say which call it answers. */
typedef struct rp_srv_msg {
    const char *role;
    const char *content;              /* may be NULL (assistant with only tool calls) */
    const rp_tool_call *tool_calls;   /* assistant only; may be NULL */
    size_t n_tool_calls;
    const char *tool_call_id;         /* tool only; may be NULL */
    const char *name;                 /* tool only; may be NULL */
} rp_srv_msg;

/* Request-size limits (the server's configuration; all > 0). */
typedef struct rp_srv_limits {
    size_t max_body;          /* bytes (default 1 MiB) */
    int max_depth;            /* JSON nesting (default 64) */
    size_t max_values;        /* JSON values (default 200000) */
    size_t max_messages;      /* default 1024 */
    size_t max_documents;     /* reprise_documents entries (default 256) */
    int32_t n_ctx;            /* context in tokens: max_tokens above it is refused before tokenizing */
} rp_srv_limits;

rp_srv_limits rp_srv_default_limits(int32_t n_ctx);

/* A parsed request. Every string points into `root` or into `owned` and
 * lives until rp_srv_request_free. */
typedef struct rp_srv_request {
    rp_srv_endpoint ep;
    struct json_t *root;
    const char *model;              /* may be NULL (any model name is answered by the loaded one) */

    /* chat */
    rp_srv_msg *msgs;
    size_t n_msgs;
    rp_tool_call *calls;            /* storage for every message's tool_calls */
    size_t n_calls;
    char *grammar;                  /* GBNF from `grammar`, `json_schema` or response_format json_schema (owned) */
    char *tools_json;               /* JSON array text of the tool definitions, NULL when none */
    size_t n_tools;
    rp_tool_choice tool_choice;
    const char *tool_name;          /* NAMED */
    /* reasoning (reasoning_req.c) */
    int enable_thinking;            /* -1: not given (rendered false, as rp_chat_render does), 0, 1 */
    const char *reasoning_effort;   /* "low" | "medium" | "high", or NULL */
    char *template_kwargs;          /* chat_template_kwargs as JSON object text, or NULL */
    bool reasoning_raw;             /* reasoning_format "none": <think> stays in the content */

    /* completions */
    const char *prompt;             /* text, or NULL when prompt_ids is used */
    int32_t *prompt_ids;            /* token ids given directly */
    size_t n_prompt_ids;

    /* sampling and output */
    bool stream, include_usage;
    int32_t n;                      /* choices (1..RP_SRV_MAX_N; default 1) */
    int32_t max_tokens;             /* -1: not given */
    float temperature, top_p;       /* OpenAI defaults 1, 1 */
    float presence_penalty, frequency_penalty;   /* OpenAI defaults 0, 0; over the last 64 tokens (prompt included) */
    /* llama-server's extensions (absent: off, OpenAI's semantics): top_k 0, min_p 0, repeat_penalty 1 over the last
     * repeat_last_n tokens (64) */
    int32_t top_k, repeat_last_n;
    float min_p, repeat_penalty;
    bool has_seed;
    uint64_t seed;
    const char *stop[RP_SRV_MAX_STOP];
    int n_stop;
    bool ignore_eos;                /* llama-server's: end-of-generation tokens are not sampled (max_tokens ends it) */
    bool logprobs;                  /* chat: logprobs true; completions: logprobs an integer */
    int32_t top_logprobs;           /* alternatives per token (0..RP_LOGPROBS_MAX_TOP) */
    rp_logit_bias *bias;            /* logit_bias (ids checked against the vocabulary later) */
    int32_t n_bias;

    /* extensions */
    rp_srv_session_kind session;
    char session_id[RP_SRV_SESSION_HEX + 1];
    int cache_mode;                 /* rp_reuse_mode, or -1 for the server's default */
    float cache_ratio;              /* -1: default */
    bool cache_persist;             /* false: this request's chunks are not cached (default true) */
    const char **docs;
    size_t n_docs;

    char **owned;                   /* strings built while parsing (joined content parts, arguments) */
    size_t n_owned, cap_owned;
} rp_srv_request;

/* Parses and validates a body for endpoint `ep`: limits first (size, depth,
 * value count, without parsing), then JSON, then the fields the endpoint takes
 * (rp_srv_check_fields: any other is a 400), then every field's type and
 * range. On failure *err says what (HTTP 400 or
 * 413, param naming the field) and *out is left empty. Never aborts on any
 * input; allocations are bounded by the body size. */
rp_status rp_srv_parse_request(rp_srv_endpoint ep, const char *body, size_t len, const rp_srv_limits *lim,
                               rp_srv_request *out, rp_api_error *err);
/* enable_thinking (top level or in chat_template_kwargs), reasoning_effort, reasoning_format: 400 on bad types. */
rp_status rp_srv_parse_reasoning(rp_srv_request *r, const struct json_t *root, rp_api_error *err);

void rp_srv_request_free(rp_srv_request *r);

/* The endpoints whose top-level fields rp_srv_check_fields knows. */
typedef enum rp_srv_api {
    RP_SRV_API_CHAT = 0,          /* /v1/chat/completions */
    RP_SRV_API_COMPLETIONS = 1,   /* /v1/completions */
    RP_SRV_API_EMBEDDINGS = 2,    /* /v1/embeddings */
    RP_SRV_API_EMBEDDING = 3,     /* llama-server's /embedding */
} rp_srv_api;

/* request_fields.c: every top-level field of `root` must be one the endpoint takes: OpenAI's (honoured, or
 * accepted with no effect where ignoring it cannot change the reply: user, metadata, store, service_tier, ...),
 * llama-server's extensions this server honours, or reprise's. Anything else is a 400 invalid_request_error
 * (code unknown_parameter, param the field); an OpenAI or llama-server feature this server lacks (audio,
 * web_search_options, typical_p, mirostat, ...) is accepted only as null or its off value, else a 400
 * unsupported_parameter. Checks names (and the ignored fields' types) only: the endpoint validates the values. */
rp_status rp_srv_check_fields(rp_srv_api api, const struct json_t *root, rp_api_error *err);

/* Session ids: true if s is exactly 32 lowercase hex digits. */
bool rp_srv_session_id_valid(const char *s);

#endif /* RP_SERVER_REQUEST_H */
