/* api_embeddings.c — POST /v1/embeddings (OpenAI's shape) and llama-server's /embedding, over one rp_embedder the
 * server creates with --embeddings (requests take turns on it). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "server/json_limits.h"
#include "server/server_internal.h"

#define BAD(param, ...) rp_api_errorf(err, RP_ERR_INVALID_ARG, 400, NULL, param, __VA_ARGS__)
#define RP_EMBD_MAX_INPUTS 2048   /* OpenAI's limit on the inputs of one request */
#define RP_EMBD_MAX_FLOATS (16u << 20)   /* floats one response may carry (pooling none: per token) */

rp_status rp_srv_embeddings_init(rp_server *s) {
    pthread_mutex_init(&s->embd_mu, NULL);
    s->embd_mu_init = true;
    if (!s->cfg.embeddings) return RP_OK;
    rp_embedder_params p = rp_embedder_default_params();
    p.pooling = (rp_pooling)s->cfg.pooling;
    p.n_ctx = rp_backend_n_ctx(s->b);
    p.n_threads = s->cfg.backend.n_threads;
    p.kv_type = s->cfg.backend.kv_type;
    rp_status st = rp_embedder_create(rp_backend_model(s->b), &p, &s->embd);
    if (st != RP_OK) return rp_errorf(st, "server: --embeddings: %s", rp_last_error());
    return RP_OK;
}

void rp_srv_embeddings_free(rp_server *s) {
    rp_embedder_free(s->embd);
    s->embd = NULL;
    if (s->embd_mu_init) pthread_mutex_destroy(&s->embd_mu);
    s->embd_mu_init = false;
}

/* The request's inputs, tokenized: n arrays of tokens (malloc'd, freed by free_inputs). */
typedef struct inputs {
    int32_t n;
    rp_token **toks;
    int32_t *lens;
} inputs;

static void free_inputs(inputs *in) {
    for (int32_t i = 0; in->toks && i < in->n; i++) free(in->toks[i]);
    free(in->toks);
    free(in->lens);
    memset(in, 0, sizeof *in);
}

static bool all_integers(const json_t *a) {
    size_t i;
    const json_t *v;
    json_array_foreach(a, i, v) if (!json_is_integer(v)) return false;
    return true;
}

/* One input: a string, or an array of token ids. */
static rp_status one_input(rp_server *s, const json_t *v, const char *param, rp_token **toks, int32_t *len,
                           rp_api_error *err) {
    const rp_model *m = rp_backend_model(s->b);
    const int32_t n_ctx = rp_embedder_n_ctx(s->embd), n_vocab = rp_model_describe(m).n_vocab;
    *toks = NULL;
    *len = 0;
    if (json_is_string(v)) {
        const size_t tl = json_string_length(v);
        if (tl == 0) return BAD(param, "'%s' must not be an empty string", param);
        int32_t cap = tl + 8 < (size_t)INT32_MAX ? (int32_t)(tl + 8) : INT32_MAX, n = 0;   /* a token a byte, BOS, EOS */
        if (!(*toks = malloc(sizeof **toks * (size_t)cap))) return rp_api_errorf(err, RP_ERR_NOMEM, 500, NULL, NULL, "out of memory");
        rp_status st = rp_embed_tokenize(m, json_string_value(v), tl, *toks, cap, &n);
        if (st != RP_OK) return rp_api_errorf(err, st, 500, NULL, NULL, "tokenizing %s failed: %s", param, rp_last_error());
        *len = n;
    } else if (json_is_array(v) && all_integers(v)) {
        const size_t n = json_array_size(v);
        if (n == 0) return BAD(param, "'%s' must not be an empty array", param);
        if (n > (size_t)INT32_MAX) return BAD(param, "'%s' has too many tokens", param);
        if (!(*toks = malloc(sizeof **toks * n))) return rp_api_errorf(err, RP_ERR_NOMEM, 500, NULL, NULL, "out of memory");
        for (size_t i = 0; i < n; i++) {
            const json_int_t t = json_integer_value(json_array_get(v, i));
            if (t < 0 || t >= n_vocab)
                return BAD(param, "'%s[%zu]' = %lld is not a token id in [0, %d)", param, i, (long long)t, n_vocab);
            (*toks)[i] = (rp_token)t;
        }
        *len = (int32_t)n;
    } else {
        return BAD(param, "'%s' must be a string or an array of token ids", param);
    }
    if (*len > n_ctx)
        return rp_api_errorf(err, RP_ERR_RANGE, 400, "context_length_exceeded", param,
                             "'%s' has %d tokens, more than the context of %d tokens (--ctx-size)", param, *len,
                             n_ctx);
    return RP_OK;
}

/* input: a string, an array of strings, an array of token ids, or an array of arrays of token ids. */
static rp_status parse_inputs(rp_server *s, const json_t *v, const char *name, inputs *in, rp_api_error *err) {
    const bool single = json_is_string(v) || (json_is_array(v) && json_array_size(v) > 0 && all_integers(v));
    if (!single && !json_is_array(v))
        return BAD(name, "'%s' must be a string, an array of strings, an array of token ids or an array of arrays of "
                   "token ids", name);
    const size_t n = single ? 1 : json_array_size(v);
    if (n == 0) return BAD(name, "'%s' must not be empty", name);
    if (n > RP_EMBD_MAX_INPUTS) return BAD(name, "'%s' has %zu inputs, more than %d", name, n, RP_EMBD_MAX_INPUTS);
    in->toks = calloc(n, sizeof *in->toks);
    in->lens = calloc(n, sizeof *in->lens);
    if (!in->toks || !in->lens) return rp_api_errorf(err, RP_ERR_NOMEM, 500, NULL, NULL, "out of memory");
    in->n = (int32_t)n;
    for (size_t i = 0; i < n; i++) {
        char param[48];
        if (single) snprintf(param, sizeof param, "%s", name);
        else snprintf(param, sizeof param, "%s[%zu]", name, i);
        RP_TRY(one_input(s, single ? v : json_array_get(v, i), param, &in->toks[i], &in->lens[i], err));
    }
    return RP_OK;
}

static char *base64(const float *v, int32_t n) {
    static const char T[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const size_t nb = (size_t)n * sizeof *v;   /* little-endian float32, as OpenAI's */
    const unsigned char *b = (const unsigned char *)v;
    char *o = malloc((nb + 2) / 3 * 4 + 1), *p = o;
    if (!o) return NULL;
    for (size_t i = 0; i < nb; i += 3) {
        const uint32_t x = (uint32_t)b[i] << 16 | (i + 1 < nb ? (uint32_t)b[i + 1] << 8 : 0) | (i + 2 < nb ? b[i + 2] : 0);
        *p++ = T[x >> 18 & 63];
        *p++ = T[x >> 12 & 63];
        *p++ = i + 1 < nb ? T[x >> 6 & 63] : '=';
        *p++ = i + 2 < nb ? T[x & 63] : '=';
    }
    *p = 0;
    return o;
}

static json_t *vec_json(const float *v, int32_t n) {
    json_t *a = json_array();
    for (int32_t i = 0; i < n; i++) json_array_append_new(a, json_real(v[i]));
    return a;
}

rp_status rp_srv_embeddings_json(rp_server *s, bool oai, const char *body, size_t len, char **out, rp_api_error *err) {
    *out = NULL;
    if (!s->embd)
        return rp_api_errorf(err, RP_ERR_UNSUPPORTED, 501, "not_supported", NULL,
                             "This server does not support embeddings. Start it with `--embeddings`");
    const rp_pooling pool = rp_embedder_pooling(s->embd);
    if (oai && pool == RP_POOLING_NONE)
        return rp_api_errorf(err, RP_ERR_UNSUPPORTED, 400, NULL, NULL,
                             "Pooling type 'none' is not OAI compatible. Please use a different pooling type");
    json_t *root = NULL;
    inputs in = {0};
    float *vec = NULL;
    rp_status st;
    const rp_json_limits jl = {.max_bytes = s->lim.max_body, .max_depth = s->lim.max_depth, .max_values = s->lim.max_values};
    if (rp_json_check_limits(body, len, &jl) != RP_OK)
        return rp_api_errorf(err, RP_ERR_RANGE, 400, "json_too_complex", NULL, "%s", rp_last_error());
    if (rp_json_load_object(body, len, &root) != RP_OK)
        return rp_api_errorf(err, RP_ERR_FORMAT, 400, "invalid_json", NULL, "invalid JSON: %s", rp_last_error());
    if ((st = rp_srv_check_fields(oai ? RP_SRV_API_EMBEDDINGS : RP_SRV_API_EMBEDDING, root, err)) != RP_OK) {
        json_decref(root);
        return st;
    }
    const int32_t E = rp_embedder_n_embd(s->embd);
    bool b64 = false;
    const json_t *model = json_object_get(root, "model"), *fmt = json_object_get(root, "encoding_format");
    const json_t *dims = json_object_get(root, "dimensions"), *input = json_object_get(root, "input");
    const char *iname = "input";
    if (!input && !oai) {   /* llama-server's /embedding takes "content" too */
        input = json_object_get(root, "content");
        iname = "content";
    }
    if (model && !json_is_null(model) && !json_is_string(model)) { st = BAD("model", "'model' must be a string"); goto done; }
    if (fmt && !json_is_null(fmt)) {
        const char *f = json_is_string(fmt) ? json_string_value(fmt) : NULL;
        if (!f || (strcmp(f, "float") && strcmp(f, "base64"))) {
            st = BAD("encoding_format", "'encoding_format' must be \"float\" or \"base64\"");
            goto done;
        }
        b64 = !strcmp(f, "base64");
    }
    if (dims && !json_is_null(dims) && (!json_is_integer(dims) || json_integer_value(dims) != E)) {
        st = BAD("dimensions", "'dimensions' must be %d: this model's embeddings have %d dimensions and cannot be "
                 "shortened", E, E);
        goto done;
    }
    if (!input || json_is_null(input)) { st = BAD(iname, "'%s' is required", iname); goto done; }
    if ((st = parse_inputs(s, input, iname, &in, err)) != RP_OK) goto done;
    size_t need = 0, total = 0;
    for (int32_t i = 0; i < in.n; i++) {
        need += (size_t)E * (pool == RP_POOLING_NONE ? (size_t)in.lens[i] : 1);
        total += (size_t)in.lens[i];
    }
    if (need > RP_EMBD_MAX_FLOATS) {
        st = BAD(iname, "the response would hold %zu floats, more than %u: send fewer or shorter inputs", need,
                 RP_EMBD_MAX_FLOATS);
        goto done;
    }
    if (!(vec = malloc(sizeof *vec * need))) { st = rp_api_errorf(err, RP_ERR_NOMEM, 500, NULL, NULL, "out of memory"); goto done; }
    pthread_mutex_lock(&s->embd_mu);
    size_t got = 0;
    st = rp_embed(s->embd, (const rp_token *const *)in.toks, in.lens, in.n, vec, need, &got);
    pthread_mutex_unlock(&s->embd_mu);
    if (st != RP_OK) { st = rp_api_errorf(err, st, 500, NULL, NULL, "embedding failed: %s", rp_last_error()); goto done; }
    json_t *data = json_array();
    const float *v = vec;
    for (int32_t i = 0; i < in.n; i++) {
        json_t *o = json_object();
        if (oai) {
            json_object_set_new(o, "object", json_string("embedding"));
            json_object_set_new(o, "index", json_integer(i));
            char *b = b64 ? base64(v, E) : NULL;
            json_object_set_new(o, "embedding", b ? json_string(b) : vec_json(v, E));
            free(b);
            v += E;
        } else {   /* llama-server's shape: an array of vectors, one per token without pooling */
            json_object_set_new(o, "index", json_integer(i));
            json_t *rows = json_array();
            const int32_t nr = pool == RP_POOLING_NONE ? in.lens[i] : 1;
            for (int32_t r = 0; r < nr; r++, v += E) json_array_append_new(rows, vec_json(v, E));
            json_object_set_new(o, "embedding", rows);
        }
        json_array_append_new(data, o);
    }
    json_t *res = data;
    if (oai) {
        res = json_object();
        json_object_set_new(res, "object", json_string("list"));
        json_object_set_new(res, "data", data);
        json_object_set_new(res, "model", json_string(s->model_id));
        json_t *u = json_object();
        json_object_set_new(u, "prompt_tokens", json_integer((json_int_t)total));
        json_object_set_new(u, "total_tokens", json_integer((json_int_t)total));
        json_object_set_new(res, "usage", u);
    }
    *out = json_dumps(res, JSON_COMPACT | JSON_REAL_PRECISION(9));
    json_decref(res);
    if (!*out) st = rp_api_errorf(err, RP_ERR_NOMEM, 500, NULL, NULL, "out of memory");
done:
    free(vec);
    free_inputs(&in);
    json_decref(root);
    return st;
}
