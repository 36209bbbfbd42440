/* api_completions.c — /v1/completions bodies: text_completion objects, streamed or whole. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "server/server_internal.h"

static json_t *choice_json(rp_srv_call *c, const char *text, const char *finish) {
    json_t *ch = json_object();
    char *clean = rp_srv_utf8_clean(text ? text : "", text ? strlen(text) : 0);
    json_object_set_new(ch, "text", json_string(clean ? clean : ""));
    free(clean);
    json_object_set_new(ch, "index", json_integer(c->index));
    json_object_set_new(ch, "logprobs", rp_srv_take_logprobs(c));
    json_object_set_new(ch, "finish_reason", finish ? json_string(finish) : json_null());
    return ch;
}

/* A text_completion object: with choice c alone (a stream chunk), or with every choice of the request (all). */
static json_t *completion(rp_srv_call *c, const char *text, const char *finish, bool all) {
    json_t *o = json_object();
    json_object_set_new(o, "id", json_string(c->id));
    json_object_set_new(o, "object", json_string("text_completion"));
    json_object_set_new(o, "created", json_integer(c->created));
    json_t *model = json_string(c->srv->model_id);
    json_object_set_new(o, "model", model ? model : json_string("model"));
    json_object_set_new(o, "system_fingerprint", json_string(c->srv->fingerprint));
    json_t *choices = json_array();
    if (all)
        for (int32_t i = 0; i < c->n_choices; i++)
            json_array_append_new(choices, choice_json(c->choice[i], c->choice[i]->reply.content,
                                                       c->choice[i]->reply.finish_reason));
    else
        json_array_append_new(choices, choice_json(c, text, finish));
    json_object_set_new(o, "choices", choices);
    if (c->sess_id[0]) json_object_set_new(o, "reprise_session", json_string(c->sess_id));
    return o;
}

char *rp_srv_completion_response(rp_srv_call *c) {
    json_t *o = completion(c, NULL, NULL, true);
    json_object_set_new(o, "usage", rp_srv_usage_json(c));
    char *s = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(6));
    json_decref(o);
    return s;
}

char *rp_srv_completion_chunk(rp_srv_call *c, const char *text, const char *finish) {
    json_t *o = completion(c, text, finish, false);
    char *s = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(6));
    json_decref(o);
    return s;
}
