/* api_models.c — /v1/models, /v1/models/{id} and /health bodies. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "server/server_internal.h"

static json_t *model_obj(rp_server *s) {
    json_t *m = json_object();
    json_object_set_new(m, "id", json_string(s->model_id));
    json_object_set_new(m, "object", json_string("model"));
    json_object_set_new(m, "created", json_integer(s->created));
    json_object_set_new(m, "owned_by", json_string("reprise"));
    json_t *meta = json_object();
    const rp_model *md = rp_backend_model(s->b);
    const rp_model_desc d = rp_model_describe(md);
    json_object_set_new(meta, "arch", json_string(d.arch));
    json_object_set_new(meta, "n_ctx", json_integer(rp_backend_n_ctx(s->b)));
    json_object_set_new(meta, "n_vocab", json_integer(d.n_vocab));
    json_object_set_new(meta, "chat_format", json_string(rp_chat_format_name(rp_model_chat_format(md))));
    json_object_set_new(meta, "backend", json_string(rp_backend_kind(s->b)));
    json_object_set_new(m, "reprise", meta);
    return m;
}

char *rp_srv_models_json(rp_server *s) {
    json_t *o = json_object(), *data = json_array();
    json_object_set_new(o, "object", json_string("list"));
    json_array_append_new(data, model_obj(s));
    json_object_set_new(o, "data", data);
    char *r = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return r;
}

char *rp_srv_model_json(rp_server *s, const char *id) {
    if (!id || strcmp(id, s->model_id) != 0) return NULL;
    json_t *m = model_obj(s);
    char *r = json_dumps(m, JSON_COMPACT);
    json_decref(m);
    return r;
}

char *rp_srv_health_json(rp_server *s) {
    rp_backend_stats bs;
    rp_backend_stats_get(s->b, &bs);
    json_t *o = json_object();
    json_object_set_new(o, "status", json_string(atomic_load(&s->draining) ? "draining" : "ok"));
    json_object_set_new(o, "model", json_string(s->model_id));
    json_object_set_new(o, "backend", json_string(rp_backend_kind(s->b)));
    json_object_set_new(o, "running", json_integer(bs.running));
    json_object_set_new(o, "queued", json_integer(bs.queued));
    char *r = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return r;
}
