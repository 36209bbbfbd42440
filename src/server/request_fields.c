/* request_fields.c — which top-level request fields each endpoint takes: the ones OpenAI's API defines (honoured,
 * or accepted with no effect where ignoring them cannot change the reply), llama-server's extensions this server
 * honours, and reprise's own. Anything else is a 400 naming the field, so a typo or a feature this server lacks is
 * never silently dropped. docs/server.md ("Request fields") is this table in prose; keep the two together. */
#include <jansson.h>
#include <math.h>
#include <string.h>

#include "server/request.h"

enum {
    EP_CHAT = 1, EP_CMPL = 2, EP_EMB = 4, EP_EMBL = 8,   /* /v1/chat/completions, /v1/completions, /v1/embeddings,
                                                            llama-server's /embedding */
    EP_GEN = EP_CHAT | EP_CMPL,
    EP_ALL = EP_GEN | EP_EMB | EP_EMBL,
};

typedef enum field_kind {
    F_OWN,       /* parsed (and honoured) by the endpoint's own code, which checks its value */
    F_IGNORED,   /* accepted with no effect: ignoring it cannot change the reply (the reason is in the table) */
    F_DEFAULT,   /* a feature this server does not have: accepted only as null or its off / default value `dflt` */
} field_kind;

typedef struct field {
    const char *name;
    unsigned eps;       /* endpoints that take it */
    field_kind kind;
    char type;          /* F_IGNORED: the JSON type it must have (s string, o object, b boolean, i integer, * any) */
    const char *dflt;   /* F_DEFAULT: the value that means "off" (JSON text) */
} field;

static const field k_fields[] = {
    /* OpenAI, honoured */
    {"model", EP_ALL, F_OWN, 0, NULL},
    {"messages", EP_CHAT, F_OWN, 0, NULL},
    {"prompt", EP_CMPL, F_OWN, 0, NULL},
    {"input", EP_EMB | EP_EMBL, F_OWN, 0, NULL},
    {"stream", EP_GEN, F_OWN, 0, NULL},
    {"stream_options", EP_GEN, F_OWN, 0, NULL},
    {"max_tokens", EP_GEN, F_OWN, 0, NULL},
    {"max_completion_tokens", EP_CHAT, F_OWN, 0, NULL},
    {"n", EP_GEN, F_OWN, 0, NULL},
    {"seed", EP_GEN, F_OWN, 0, NULL},
    {"temperature", EP_GEN, F_OWN, 0, NULL},
    {"top_p", EP_GEN, F_OWN, 0, NULL},
    {"presence_penalty", EP_GEN, F_OWN, 0, NULL},
    {"frequency_penalty", EP_GEN, F_OWN, 0, NULL},
    {"stop", EP_GEN, F_OWN, 0, NULL},
    {"logit_bias", EP_GEN, F_OWN, 0, NULL},
    {"logprobs", EP_GEN, F_OWN, 0, NULL},
    {"top_logprobs", EP_CHAT, F_OWN, 0, NULL},
    {"response_format", EP_GEN, F_OWN, 0, NULL},   /* completions: llama-server's extension */
    {"tools", EP_CHAT, F_OWN, 0, NULL},
    {"tool_choice", EP_CHAT, F_OWN, 0, NULL},
    {"reasoning_effort", EP_CHAT, F_OWN, 0, NULL},
    {"best_of", EP_CMPL, F_OWN, 0, NULL},           /* 1 only */
    {"echo", EP_CMPL, F_OWN, 0, NULL},              /* false only */
    {"suffix", EP_CMPL, F_OWN, 0, NULL},            /* empty only */
    {"encoding_format", EP_EMB | EP_EMBL, F_OWN, 0, NULL},
    {"dimensions", EP_EMB | EP_EMBL, F_OWN, 0, NULL},
    /* OpenAI, accepted with no effect on the reply */
    {"user", EP_ALL, F_IGNORED, 's', NULL},                /* an end-user id for OpenAI's abuse monitoring */
    {"safety_identifier", EP_GEN, F_IGNORED, 's', NULL},   /* the same, its newer name */
    {"metadata", EP_GEN, F_IGNORED, 'o', NULL},            /* tags of stored completions: nothing is stored */
    {"store", EP_CHAT, F_IGNORED, 'b', NULL},              /* store for distillation / evals: nothing is stored */
    {"service_tier", EP_GEN, F_IGNORED, 's', NULL},        /* OpenAI's latency tiers: one tier here */
    {"prompt_cache_key", EP_GEN, F_IGNORED, 's', NULL},    /* a routing hint for OpenAI's cache: reuse is automatic */
    {"parallel_tool_calls", EP_CHAT, F_IGNORED, 'b', NULL},   /* the model may write several calls in auto; forced
                                                                 and strict calls are one call either way */
    {"prediction", EP_CHAT, F_IGNORED, 'o', NULL},         /* predicted output: a latency hint, same reply without */
    /* OpenAI, not supported: only their off value */
    {"audio", EP_CHAT, F_DEFAULT, 0, "null"},
    {"modalities", EP_CHAT, F_DEFAULT, 0, "[\"text\"]"},
    {"web_search_options", EP_CHAT, F_DEFAULT, 0, "null"},
    {"verbosity", EP_CHAT, F_DEFAULT, 0, "\"medium\""},
    {"functions", EP_CHAT, F_DEFAULT, 0, "null"},          /* the deprecated form of tools */
    {"function_call", EP_CHAT, F_DEFAULT, 0, "null"},
    /* llama-server's extensions, honoured */
    {"grammar", EP_GEN, F_OWN, 0, NULL},
    {"json_schema", EP_GEN, F_OWN, 0, NULL},
    {"top_k", EP_GEN, F_OWN, 0, NULL},
    {"min_p", EP_GEN, F_OWN, 0, NULL},
    {"repeat_penalty", EP_GEN, F_OWN, 0, NULL},
    {"repeat_last_n", EP_GEN, F_OWN, 0, NULL},
    {"ignore_eos", EP_GEN, F_OWN, 0, NULL},
    {"n_predict", EP_GEN, F_OWN, 0, NULL},                 /* max_tokens' llama-server name (max_tokens wins) */
    {"enable_thinking", EP_CHAT, F_OWN, 0, NULL},
    {"chat_template_kwargs", EP_CHAT, F_OWN, 0, NULL},
    {"reasoning_format", EP_CHAT, F_OWN, 0, NULL},
    {"content", EP_EMBL, F_OWN, 0, NULL},
    /* llama-server's, accepted with no effect */
    {"cache_prompt", EP_GEN, F_IGNORED, 'b', NULL},        /* prompt reuse is always on (reprise_cache controls it) */
    {"id_slot", EP_GEN, F_IGNORED, 'i', NULL},             /* the scheduler places requests itself */
    /* parameters of llama-server samplers that are off (a request that turns one on is refused below) */
    {"mirostat_tau", EP_GEN, F_IGNORED, '*', NULL},
    {"mirostat_eta", EP_GEN, F_IGNORED, '*', NULL},
    {"dynatemp_exponent", EP_GEN, F_IGNORED, '*', NULL},
    {"xtc_threshold", EP_GEN, F_IGNORED, '*', NULL},
    {"dry_base", EP_GEN, F_IGNORED, '*', NULL},
    {"dry_allowed_length", EP_GEN, F_IGNORED, '*', NULL},
    {"dry_penalty_last_n", EP_GEN, F_IGNORED, '*', NULL},
    /* llama-server's samplers this server does not have: only their off value */
    {"typical_p", EP_GEN, F_DEFAULT, 0, "1"},
    {"tfs_z", EP_GEN, F_DEFAULT, 0, "1"},
    {"mirostat", EP_GEN, F_DEFAULT, 0, "0"},
    {"dynatemp_range", EP_GEN, F_DEFAULT, 0, "0"},
    {"xtc_probability", EP_GEN, F_DEFAULT, 0, "0"},
    {"dry_multiplier", EP_GEN, F_DEFAULT, 0, "0"},
    {"embd_normalize", EP_EMBL, F_DEFAULT, 0, "2"},        /* Euclidean (L2), what the vectors are */
    /* reprise's */
    {"reprise_session", EP_GEN, F_OWN, 0, NULL},
    {"reprise_cache", EP_GEN, F_OWN, 0, NULL},
    {"reprise_documents", EP_GEN, F_OWN, 0, NULL},
};

static const field *find(const char *name) {
    for (size_t i = 0; i < sizeof k_fields / sizeof k_fields[0]; i++)
        if (!strcmp(k_fields[i].name, name)) return &k_fields[i];
    return NULL;
}

static bool type_ok(char t, const json_t *v) {
    switch (t) {
    case 's': return json_is_string(v);
    case 'o': return json_is_object(v);
    case 'b': return json_is_boolean(v);
    case 'i': return json_is_integer(v);
    default: return true;
    }
}

static const char *type_name(char t) {
    return t == 's' ? "a string" : t == 'o' ? "an object" : t == 'b' ? "a boolean" : "an integer";
}

/* v is the off value d (numbers by value: 1 and 1.0 are the same). */
static bool is_default(const json_t *v, const char *d) {
    json_t *want = json_loads(d, JSON_DECODE_ANY, NULL);
    bool same = json_is_number(want) && json_is_number(v) ? json_number_value(want) == json_number_value(v)
                                                           : json_equal(want, v);
    if (json_is_null(want) && json_is_null(v)) same = true;
    json_decref(want);
    return same;
}

static const char *ep_name(unsigned ep) {
    return ep == EP_CHAT ? "/v1/chat/completions" : ep == EP_CMPL ? "/v1/completions"
                                                    : ep == EP_EMB ? "/v1/embeddings" : "/embedding";
}

rp_status rp_srv_check_fields(rp_srv_api api, const struct json_t *root, rp_api_error *err) {
    const unsigned ep = api == RP_SRV_API_CHAT ? EP_CHAT : api == RP_SRV_API_COMPLETIONS ? EP_CMPL
                        : api == RP_SRV_API_EMBEDDINGS ? EP_EMB : EP_EMBL;
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)root, key, v) {
        const field *f = find(key);
        if (!f || !(f->eps & ep)) {
            if (f) {   /* a field of another endpoint */
                return rp_api_errorf(err, RP_ERR_INVALID_ARG, 400, "unknown_parameter", key,
                                     "Unrecognized request argument supplied: '%.64s' (%s does not take it)", key,
                                     ep_name(ep));
            }
            return rp_api_errorf(err, RP_ERR_INVALID_ARG, 400, "unknown_parameter", key,
                                 "Unrecognized request argument supplied: '%.64s' (not an OpenAI or llama-server "
                                 "field this server takes; docs/server.md lists them)", key);
        }
        if (f->kind == F_IGNORED && !json_is_null(v) && !type_ok(f->type, v))
            return rp_api_errorf(err, RP_ERR_INVALID_ARG, 400, NULL, key, "'%s' must be %s", key, type_name(f->type));
        if (f->kind == F_DEFAULT && !json_is_null(v) && !is_default(v, f->dflt))
            return rp_api_errorf(err, RP_ERR_UNSUPPORTED, 400, "unsupported_parameter", key,
                                 "'%s' is not supported by this server (only %s, its default, is accepted)", key,
                                 f->dflt);
    }
    return RP_OK;
}
