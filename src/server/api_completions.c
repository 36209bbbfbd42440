/* api_completions.c — /v1/completions bodies: text_completion objects, streamed or whole. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "server/server_internal.h"

static json_t *completion(rp_srv_call *c, const char *text, const char *finish) {
    json_t *o = json_object();
    json_object_set_new(o, "id", json_string(c->id));
    json_object_set_new(o, "object", json_string("text_completion"));
    json_object_set_new(o, "created", json_integer(c->created));
    json_t *model = json_string(c->srv->model_id);
    json_object_set_new(o, "model", model ? model : json_string("model"));
    json_object_set_new(o, "system_fingerprint", json_string(c->srv->fingerprint));
    json_t *ch = json_object();
    char *clean = rp_srv_utf8_clean(text ? text : "", text ? strlen(text) : 0);
    json_object_set_new(ch, "text", json_string(clean ? clean : ""));
    free(clean);
    json_object_set_new(ch, "index", json_integer(0));
    json_object_set_new(ch, "logprobs", rp_srv_take_logprobs(c));
    json_object_set_new(ch, "finish_reason", finish ? json_string(finish) : json_null());
    json_t *choices = json_array();
    json_array_append_new(choices, ch);
    json_object_set_new(o, "choices", choices);
    if (c->sess_id[0]) json_object_set_new(o, "reprise_session", json_string(c->sess_id));
    return o;
}

char *rp_srv_completion_response(rp_srv_call *c) {
    json_t *o = completion(c, c->reply.content, c->reply.finish_reason);
    json_object_set_new(o, "usage", rp_srv_usage_json(c));
    char *s = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(6));
    json_decref(o);
    return s;
}

char *rp_srv_completion_chunk(rp_srv_call *c, const char *text, const char *finish) {
    json_t *o = completion(c, text, finish);
    char *s = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(6));
    json_decref(o);
    return s;
}
