/* api_chat.c — /v1/chat/completions bodies: chat.completion, chat.completion.chunk (content, tool_calls deltas), usage. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "server/server_internal.h"

/* A JSON string from text that may hold invalid UTF-8 (replaced). */
static json_t *jstr(const char *s) {
    json_t *v = json_string(s ? s : "");
    if (v) return v;
    char *clean = rp_srv_utf8_clean(s, strlen(s));
    v = json_string(clean ? clean : "");
    free(clean);
    return v;
}

json_t *rp_srv_usage_json(rp_srv_call *c) {
    const rp_job_stats *st = &c->stats;
    json_t *u = json_object();
    /* n > 1: the prompt was prefilled once (choice 0's stats); the choices' completion tokens add up */
    int32_t prompt = c->prompt.n, completion = 0;
    for (int32_t i = 0; i < c->n_choices; i++) completion += c->choice[i]->n_counted;
    json_object_set_new(u, "prompt_tokens", json_integer(prompt));
    json_object_set_new(u, "completion_tokens", json_integer(completion));
    json_object_set_new(u, "total_tokens", json_integer(prompt + completion));
    json_t *d = json_object();
    /* cached_tokens: only KV that is exactly what computing the prompt gives (OpenAI's meaning: the answer is the
     * same as without the cache); approximate reuse (re-rotated chunks, blend, KV an approximate fill wrote
     * earlier) is counted apart, in the reprise object */
    const int32_t approx = (st->n_prefix - st->n_prefix_exact) + st->n_nonprefix;
    json_object_set_new(d, "cached_tokens", json_integer(st->n_prefix_exact));
    json_object_set_new(u, "prompt_tokens_details", d);
    json_t *x = json_object();
    json_object_set_new(x, "cached_exact", json_integer(st->n_prefix_exact));
    json_object_set_new(x, "reused_approx", json_integer(approx));
    json_object_set_new(x, "reused_prefix", json_integer(st->n_prefix));
    json_object_set_new(x, "reused_prefix_exact", json_integer(st->n_prefix_exact));
    json_object_set_new(x, "reused_prefix_approx", json_integer(st->n_prefix - st->n_prefix_exact));
    json_object_set_new(x, "reused_nonprefix", json_integer(st->n_nonprefix));
    json_object_set_new(x, "recomputed", json_integer(st->n_recomputed));
    json_object_set_new(x, "computed", json_integer(st->n_computed));
    json_object_set_new(x, "ttft_ms", json_real(st->ttft_ms));
    json_object_set_new(x, "queue_ms", json_real(st->queue_ms));
    json_object_set_new(x, "prefill_ms", json_real(st->prefill_ms));
    json_object_set_new(x, "decode_ms", json_real(st->decode_ms));
    json_object_set_new(x, "draft_tokens", json_integer((json_int_t)st->drafted));
    json_object_set_new(x, "accepted_draft_tokens", json_integer((json_int_t)st->accepted));
    json_object_set_new(x, "backend", json_string(rp_backend_kind(c->srv->b)));
    json_object_set_new(u, "reprise", x);
    return u;
}

static json_t *envelope(rp_srv_call *c, const char *object) {
    json_t *o = json_object();
    json_object_set_new(o, "id", json_string(c->id));
    json_object_set_new(o, "object", json_string(object));
    json_object_set_new(o, "created", json_integer(c->created));
    json_object_set_new(o, "model", jstr(c->srv->model_id));
    json_object_set_new(o, "system_fingerprint", json_string(c->srv->fingerprint));
    return o;
}

static char *dump(json_t *o) {
    if (!o) return NULL;
    char *s = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(6));
    json_decref(o);
    return s;
}

static json_t *calls_json(const rp_srv_reply *r, bool with_index) {
    json_t *a = json_array();
    for (size_t i = 0; i < r->n_calls; i++) {
        json_t *tc = json_object(), *fn = json_object();
        if (with_index) json_object_set_new(tc, "index", json_integer((json_int_t)i));
        json_object_set_new(tc, "id", jstr(r->calls[i].id ? r->calls[i].id : "call_0"));
        json_object_set_new(tc, "type", json_string("function"));
        json_object_set_new(fn, "name", jstr(r->calls[i].name));
        json_object_set_new(fn, "arguments", jstr(r->calls[i].arguments ? r->calls[i].arguments : "{}"));
        json_object_set_new(tc, "function", fn);
        json_array_append_new(a, tc);
    }
    return a;
}

static json_t *choice_json(rp_srv_call *c) {
    const rp_srv_reply *r = &c->reply;
    json_t *msg = json_object();
    json_object_set_new(msg, "role", json_string("assistant"));
    const bool no_content = r->n_calls > 0 && (!r->content || !r->content[0]);
    json_object_set_new(msg, "content", no_content ? json_null() : jstr(r->content));
    if (r->reasoning) json_object_set_new(msg, "reasoning_content", jstr(r->reasoning));
    if (r->n_calls > 0) json_object_set_new(msg, "tool_calls", calls_json(r, false));
    json_object_set_new(msg, "refusal", json_null());
    json_t *ch = json_object();
    json_object_set_new(ch, "index", json_integer(c->index));
    json_object_set_new(ch, "message", msg);
    json_object_set_new(ch, "logprobs", rp_srv_take_logprobs(c));
    json_object_set_new(ch, "finish_reason", json_string(r->finish_reason));
    return ch;
}

char *rp_srv_chat_response(rp_srv_call *c) {
    json_t *o = envelope(c, "chat.completion");
    json_t *choices = json_array();
    for (int32_t i = 0; i < c->n_choices; i++) json_array_append_new(choices, choice_json(c->choice[i]));
    json_object_set_new(o, "choices", choices);
    json_object_set_new(o, "usage", rp_srv_usage_json(c));
    if (c->sess_id[0]) json_object_set_new(o, "reprise_session", json_string(c->sess_id));
    return dump(o);
}

char *rp_srv_chat_chunk(rp_srv_call *c, const char *content, const char *finish, bool role, const rp_srv_reply *calls) {
    json_t *o = envelope(c, "chat.completion.chunk");
    json_t *delta = json_object();
    if (role) {
        json_object_set_new(delta, "role", json_string("assistant"));
        json_object_set_new(delta, "content", json_string(""));
    }
    if (content) json_object_set_new(delta, "content", jstr(content));
    if (calls && calls->n_calls > 0) json_object_set_new(delta, "tool_calls", calls_json(calls, true));
    json_t *ch = json_object();
    json_object_set_new(ch, "index", json_integer(c->index));
    json_object_set_new(ch, "delta", delta);
    json_object_set_new(ch, "logprobs", rp_srv_take_logprobs(c));
    json_object_set_new(ch, "finish_reason", finish ? json_string(finish) : json_null());
    json_t *choices = json_array();
    json_array_append_new(choices, ch);
    json_object_set_new(o, "choices", choices);
    if (c->req.include_usage) json_object_set_new(o, "usage", json_null());
    if (c->sess_id[0]) json_object_set_new(o, "reprise_session", json_string(c->sess_id));
    return dump(o);
}

char *rp_srv_chat_reasoning_chunk(rp_srv_call *c, const char *text) {
    json_t *o = envelope(c, "chat.completion.chunk");
    json_t *delta = json_object();
    json_object_set_new(delta, "reasoning_content", jstr(text));
    json_t *ch = json_object();
    json_object_set_new(ch, "index", json_integer(c->index));
    json_object_set_new(ch, "delta", delta);
    json_object_set_new(ch, "logprobs", rp_srv_take_logprobs(c));
    json_object_set_new(ch, "finish_reason", json_null());
    json_t *choices = json_array();
    json_array_append_new(choices, ch);
    json_object_set_new(o, "choices", choices);
    if (c->req.include_usage) json_object_set_new(o, "usage", json_null());
    if (c->sess_id[0]) json_object_set_new(o, "reprise_session", json_string(c->sess_id));
    return dump(o);
}

char *rp_srv_usage_chunk(rp_srv_call *c) {
    json_t *o = envelope(c, c->ep == RP_EP_CHAT ? "chat.completion.chunk" : "text_completion");
    json_object_set_new(o, "choices", json_array());
    json_object_set_new(o, "usage", rp_srv_usage_json(c));
    if (c->sess_id[0]) json_object_set_new(o, "reprise_session", json_string(c->sess_id));
    return dump(o);
}
