/* api_utility.c — llama-server's utility endpoints: POST /tokenize, POST /detokenize, GET /props (shapes as
 * llama-server's, plus a `reprise` object where we have more to say). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "server/json_limits.h"
#include "server/server_internal.h"

#define BAD(param, ...) rp_api_errorf(err, RP_ERR_INVALID_ARG, 400, NULL, param, __VA_ARGS__)

/* The body as a JSON object under the server's limits. */
static rp_status load_body(rp_server *s, const char *body, size_t len, json_t **out, rp_api_error *err) {
    *out = NULL;
    const rp_json_limits jl = {.max_bytes = s->lim.max_body, .max_depth = s->lim.max_depth, .max_values = s->lim.max_values};
    if (rp_json_check_limits(body, len, &jl) != RP_OK)
        return rp_api_errorf(err, RP_ERR_RANGE, 400, "json_too_complex", NULL, "%s", rp_last_error());
    if (rp_json_load_object(body, len, out) != RP_OK)
        return rp_api_errorf(err, RP_ERR_FORMAT, 400, "invalid_json", NULL, "invalid JSON: %s", rp_last_error());
    return RP_OK;
}

static rp_status opt_bool(const json_t *o, const char *key, bool *v, rp_api_error *err) {
    const json_t *x = json_object_get(o, key);
    if (!x || json_is_null(x)) return RP_OK;
    if (!json_is_boolean(x)) return BAD(key, "'%s' must be a boolean", key);
    *v = json_is_true(x);
    return RP_OK;
}

/* A token's piece: a string when its bytes are valid UTF-8 on their own, else the bytes as numbers (a piece
 * that is part of a multi-byte character), as llama-server does. */
static json_t *piece_json(const rp_model *m, rp_token t) {
    char buf[512];
    int32_t n = rp_token_to_piece(m, t, true, buf, (int32_t)sizeof buf);
    if (n < 0) n = 0;
    if (n > (int32_t)sizeof buf) n = (int32_t)sizeof buf;
    json_t *str = json_stringn(buf, (size_t)n);   /* NULL on invalid UTF-8 */
    if (str) return str;
    json_t *a = json_array();
    for (int32_t i = 0; i < n; i++) json_array_append_new(a, json_integer((unsigned char)buf[i]));
    return a;
}

rp_status rp_srv_tokenize_json(rp_server *s, const char *body, size_t len, char **out, rp_api_error *err) {
    *out = NULL;
    json_t *root = NULL;
    rp_token *toks = NULL;
    rp_status st = load_body(s, body, len, &root, err);
    if (st != RP_OK) return st;
    const json_t *content = json_object_get(root, "content");
    bool add_special = false, parse_special = true, with_pieces = false;
    if (!json_is_string(content)) {
        st = BAD("content", "'content' must be a string");
        goto done;
    }
    if ((st = opt_bool(root, "add_special", &add_special, err)) != RP_OK ||
        (st = opt_bool(root, "parse_special", &parse_special, err)) != RP_OK ||
        (st = opt_bool(root, "with_pieces", &with_pieces, err)) != RP_OK)
        goto done;
    const rp_model *m = rp_backend_model(s->b);
    const char *text = json_string_value(content);
    const size_t tl = json_string_length(content);
    int32_t cap = (int32_t)(tl + 8), n = 0;   /* a token is at least one byte, plus BOS */
    toks = malloc(sizeof *toks * (size_t)cap);
    if (!toks) {
        st = rp_api_errorf(err, RP_ERR_NOMEM, 500, NULL, NULL, "out of memory");
        goto done;
    }
    st = rp_tokenize(m, text, tl, add_special, parse_special, toks, cap, &n);
    if (st == RP_ERR_FULL && n > cap) {
        rp_token *nt = realloc(toks, sizeof *toks * (size_t)n);
        if (!nt) {
            st = rp_api_errorf(err, RP_ERR_NOMEM, 500, NULL, NULL, "out of memory");
            goto done;
        }
        toks = nt;
        cap = n;
        st = rp_tokenize(m, text, tl, add_special, parse_special, toks, cap, &n);
    }
    if (st != RP_OK) {
        st = rp_api_errorf(err, st, 500, NULL, NULL, "tokenizing failed: %s", rp_last_error());
        goto done;
    }
    json_t *o = json_object(), *a = json_array();
    for (int32_t i = 0; i < n; i++) {
        if (!with_pieces) {
            json_array_append_new(a, json_integer(toks[i]));
            continue;
        }
        json_t *t = json_object();
        json_object_set_new(t, "id", json_integer(toks[i]));
        json_object_set_new(t, "piece", piece_json(m, toks[i]));
        json_array_append_new(a, t);
    }
    json_object_set_new(o, "tokens", a);
    *out = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    if (!*out) st = rp_api_errorf(err, RP_ERR_NOMEM, 500, NULL, NULL, "out of memory");
done:
    free(toks);
    json_decref(root);
    return st;
}

rp_status rp_srv_detokenize_json(rp_server *s, const char *body, size_t len, char **out, rp_api_error *err) {
    *out = NULL;
    json_t *root = NULL;
    rp_token *toks = NULL;
    char *text = NULL;
    rp_status st = load_body(s, body, len, &root, err);
    if (st != RP_OK) return st;
    const json_t *a = json_object_get(root, "tokens");
    if (!json_is_array(a)) {
        st = BAD("tokens", "'tokens' must be an array of token ids");
        goto done;
    }
    const rp_model *m = rp_backend_model(s->b);
    const int32_t n_vocab = rp_model_describe(m).n_vocab;
    const size_t n = json_array_size(a);
    toks = malloc(sizeof *toks * (n ? n : 1));
    if (!toks) {
        st = rp_api_errorf(err, RP_ERR_NOMEM, 500, NULL, NULL, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        const json_t *v = json_array_get(a, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= n_vocab) {
            char p[32];
            snprintf(p, sizeof p, "tokens[%zu]", i);
            st = BAD(p, "'%s' must be a token id in [0, %d)", p, n_vocab);
            goto done;
        }
        toks[i] = (rp_token)json_integer_value(v);
    }
    size_t need = 0, cap = n * 16 + 16;
    text = malloc(cap);
    if (!text) {
        st = rp_api_errorf(err, RP_ERR_NOMEM, 500, NULL, NULL, "out of memory");
        goto done;
    }
    st = rp_detokenize(m, toks, (int32_t)n, true, text, cap, &need);
    if (st == RP_ERR_FULL) {
        char *nt = realloc(text, need + 1);
        if (!nt) {
            st = rp_api_errorf(err, RP_ERR_NOMEM, 500, NULL, NULL, "out of memory");
            goto done;
        }
        text = nt;
        cap = need + 1;
        st = rp_detokenize(m, toks, (int32_t)n, true, text, cap, &need);
    }
    if (st != RP_OK) {
        st = rp_api_errorf(err, st, 500, NULL, NULL, "detokenizing failed: %s", rp_last_error());
        goto done;
    }
    char *clean = rp_srv_utf8_clean(text, strlen(text));
    json_t *o = json_object();
    json_object_set_new(o, "content", json_string(clean ? clean : ""));
    free(clean);
    *out = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    if (!*out) st = rp_api_errorf(err, RP_ERR_NOMEM, 500, NULL, NULL, "out of memory");
done:
    free(text);
    free(toks);
    json_decref(root);
    return st;
}

static json_t *token_text(const rp_model *m, rp_token t) {
    if (t < 0) return json_string("");
    json_t *p = piece_json(m, t);
    if (json_is_string(p)) return p;
    json_decref(p);
    return json_string("");
}

/* The model's own chat template text (tokenizer.chat_template), or "" when another one is in use. */
static json_t *template_text(const rp_model *m) {
    if (strcmp(rp_chat_template_name(m), "gguf") != 0) return json_string("");
    const long need = rp_model_meta(m, "tokenizer.chat_template", NULL, 0);
    if (need < 0) return json_string("");
    char *buf = malloc((size_t)need + 1);
    if (!buf) return json_string("");
    rp_model_meta(m, "tokenizer.chat_template", buf, (size_t)need + 1);
    char *clean = rp_srv_utf8_clean(buf, strlen(buf));
    json_t *v = json_string(clean ? clean : "");
    free(clean);
    free(buf);
    return v;
}

char *rp_srv_props_json(rp_server *s) {
    const rp_model *m = rp_backend_model(s->b);
    const rp_backend_config *bc = &s->cfg.backend;
    const int32_t n_ctx = rp_backend_n_ctx(s->b);
    json_t *o = json_object();
    /* the settings a request gets for every field it leaves out (OpenAI's defaults, docs/server.md) */
    json_t *params = json_object();
    json_object_set_new(params, "n_predict", json_integer(s->cfg.default_max_tokens));
    json_object_set_new(params, "temperature", json_real(1.0));
    json_object_set_new(params, "top_k", json_integer(0));
    json_object_set_new(params, "top_p", json_real(1.0));
    json_object_set_new(params, "min_p", json_real(0.0));
    json_object_set_new(params, "repeat_penalty", json_real(1.0));
    json_object_set_new(params, "repeat_last_n", json_integer(64));
    json_object_set_new(params, "presence_penalty", json_real(0.0));
    json_object_set_new(params, "frequency_penalty", json_real(0.0));
    json_object_set_new(params, "seed", json_integer(-1));
    json_object_set_new(params, "stop", json_array());
    json_object_set_new(params, "n_probs", json_integer(0));
    json_object_set_new(params, "stream", json_false());
    json_object_set_new(params, "grammar", json_string(s->cfg.grammar ? s->cfg.grammar : ""));
    const int parallel = rp_backend_parallel(s->b);
    json_object_set_new(params, "speculative", json_boolean(parallel > 1 && bc->speculate));
    json_t *dgs = json_object();
    json_object_set_new(dgs, "id", json_integer(0));
    json_object_set_new(dgs, "n_ctx", json_integer(n_ctx));
    json_object_set_new(dgs, "speculative", json_boolean(parallel > 1 && bc->speculate));
    json_object_set_new(dgs, "is_processing", json_false());
    json_object_set_new(dgs, "params", params);
    json_object_set_new(o, "default_generation_settings", dgs);
    json_object_set_new(o, "total_slots", json_integer(parallel));
    char *mp = rp_srv_utf8_clean(bc->model_path, strlen(bc->model_path));
    json_object_set_new(o, "model_path", json_string(mp ? mp : ""));
    free(mp);
    json_object_set_new(o, "model_alias", json_string(s->model_id));
    json_object_set_new(o, "chat_template", template_text(m));
    json_object_set_new(o, "bos_token", token_text(m, rp_token_bos(m)));
    json_object_set_new(o, "eos_token", token_text(m, rp_token_eos(m)));
    char build[96];
    snprintf(build, sizeof build, "reprise-%s", rp_version());
    json_object_set_new(o, "build_info", json_string(build));
    json_t *mod = json_object();
    json_object_set_new(mod, "vision", json_false());
    json_object_set_new(mod, "audio", json_false());
    json_object_set_new(o, "modalities", mod);
    json_t *x = json_object();
    json_object_set_new(x, "backend", json_string(rp_backend_kind(s->b)));
    json_object_set_new(x, "chat_template_source", json_string(rp_chat_template_name(m)));
    json_object_set_new(x, "chat_format", json_string(rp_chat_format_name(rp_model_chat_format(m))));
    json_object_set_new(x, "n_vocab", json_integer(rp_model_describe(m).n_vocab));
    json_object_set_new(x, "reuse", json_string(rp_reuse_mode_name((rp_reuse_mode)bc->reuse_mode)));
    json_object_set_new(x, "recompute_ratio", json_real(bc->recompute_ratio));
    json_object_set_new(x, "embeddings", json_boolean(s->embd != NULL));   /* --embeddings, and its pooling */
    if (s->embd) json_object_set_new(x, "pooling", json_string(rp_pooling_name(rp_embedder_pooling(s->embd))));
    json_object_set_new(o, "reprise", x);
    char *r = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(6));
    json_decref(o);
    return r;
}
