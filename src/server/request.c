/* request.c — validation of OpenAI request bodies into rp_srv_request (chat messages, tools, sampling, extensions). */
#include <float.h>
#include "server/request.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "server/json_limits.h"

rp_srv_limits rp_srv_default_limits(int32_t n_ctx) {
    rp_srv_limits l = {
        .max_body = (size_t)1 << 20,
        .max_depth = 64,
        .max_values = 200000,
        .max_messages = 1024,
        .max_documents = 256,
        .n_ctx = n_ctx,
    };
    return l;
}

bool rp_srv_session_id_valid(const char *s) {
    if (!s) return false;
    size_t i = 0;
    for (; s[i]; i++)
        if (i >= RP_SRV_SESSION_HEX || !((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return false;
    return i == RP_SRV_SESSION_HEX;
}

/* ------------------------------------------------------------------ helpers */

#define BAD(...) rp_api_errorf(err, RP_ERR_INVALID_ARG, 400, NULL, __VA_ARGS__)

static rp_status own(rp_srv_request *r, char *s, rp_api_error *err) {
    if (!s) return rp_api_errorf(err, RP_ERR_NOMEM, 500, NULL, NULL, "out of memory");
    if (r->n_owned == r->cap_owned) {
        size_t nc = r->cap_owned ? r->cap_owned * 2 : 16;
        char **no = realloc(r->owned, nc * sizeof *no);
        if (!no) {
            free(s);
            return rp_api_errorf(err, RP_ERR_NOMEM, 500, NULL, NULL, "out of memory");
        }
        r->owned = no;
        r->cap_owned = nc;
    }
    r->owned[r->n_owned++] = s;
    return RP_OK;
}

/* Optional boolean field; absent or null leaves *out. */
static rp_status get_bool(const json_t *o, const char *key, bool *out, rp_api_error *err) {
    const json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return RP_OK;
    if (!json_is_boolean(v)) return BAD(key, "'%s' must be a boolean", key);
    *out = json_is_true(v);
    return RP_OK;
}

/* Optional number in [lo, hi]; absent or null leaves *out. */
static rp_status get_num(const json_t *o, const char *key, double lo, double hi, double *out, rp_api_error *err) {
    const json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return RP_OK;
    if (!json_is_number(v)) return BAD(key, "'%s' must be a number", key);
    double d = json_number_value(v);
    if (!isfinite(d) || d < lo || d > hi) return BAD(key, "'%s' must be between %g and %g, got %g", key, lo, hi, d);
    *out = d;
    return RP_OK;
}

/* Optional integer in [lo, hi]; *given says whether it was there. */
static rp_status get_int(const json_t *o, const char *key, json_int_t lo, json_int_t hi, json_int_t *out, bool *given,
                         rp_api_error *err) {
    const json_t *v = json_object_get(o, key);
    if (given) *given = false;
    if (!v || json_is_null(v)) return RP_OK;
    if (!json_is_integer(v)) return BAD(key, "'%s' must be an integer", key);
    json_int_t x = json_integer_value(v);
    if (x < lo || x > hi)
        return BAD(key, "'%s' must be between %lld and %lld, got %lld", key, (long long)lo, (long long)hi, (long long)x);
    *out = x;
    if (given) *given = true;
    return RP_OK;
}

/* Message content: a string, null, or an array of {"type": "text", "text": str} parts (joined with "\n"). */
static rp_status get_content(rp_srv_request *r, const json_t *v, const char *param, const char **out,
                             rp_api_error *err) {
    *out = NULL;
    if (!v || json_is_null(v)) return RP_OK;
    if (json_is_string(v)) {
        *out = json_string_value(v);
        return RP_OK;
    }
    if (!json_is_array(v)) return BAD(param, "'%s' must be a string, an array of text parts or null", param);
    size_t total = 1, n = json_array_size(v);
    for (size_t i = 0; i < n; i++) {
        const json_t *p = json_array_get(v, i);
        const json_t *ty = json_object_get(p, "type");
        const json_t *tx = json_object_get(p, "text");
        if (!json_is_object(p) || !json_is_string(ty))
            return BAD(param, "'%s[%zu]' must be an object with a string 'type'", param, i);
        if (strcmp(json_string_value(ty), "text") != 0)
            return rp_api_errorf(err, RP_ERR_UNSUPPORTED, 400, "unsupported_content", param,
                                 "'%s[%zu]': content parts of type '%s' are not supported (text only)", param, i,
                                 json_string_value(ty));
        if (!json_is_string(tx)) return BAD(param, "'%s[%zu].text' must be a string", param, i);
        total += json_string_length(tx) + 1;
    }
    char *s = malloc(total), *p = s;   /* bounded by the body size */
    if (!s) return rp_api_errorf(err, RP_ERR_NOMEM, 500, NULL, NULL, "out of memory");
    for (size_t i = 0; i < n; i++) {
        const json_t *tx = json_object_get(json_array_get(v, i), "text");
        if (i) *p++ = '\n';
        memcpy(p, json_string_value(tx), json_string_length(tx));
        p += json_string_length(tx);
    }
    *p = '\0';
    RP_TRY(own(r, s, err));
    *out = s;
    return RP_OK;
}

static bool tool_name_ok(const char *s) {
    size_t n = strlen(s);
    if (n == 0 || n > 64) return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
              c == '.'))
            return false;
    }
    return true;
}

/* ------------------------------------------------------------------ chat */

static rp_status parse_tool_calls(rp_srv_request *r, const json_t *arr, size_t mi, rp_srv_msg *m, rp_api_error *err) {
    char param[96];
    snprintf(param, sizeof param, "messages[%zu].tool_calls", mi);
    if (!json_is_array(arr)) return BAD(param, "'%s' must be an array", param);
    size_t n = json_array_size(arr);
    if (n == 0) return RP_OK;
    if (n > RP_SRV_MAX_TOOL_CALLS) return BAD(param, "'%s' has %zu calls, at most %d", param, n, RP_SRV_MAX_TOOL_CALLS);
    rp_tool_call *calls = r->calls + r->n_calls;
    for (size_t k = 0; k < n; k++) {
        const json_t *c = json_array_get(arr, k);
        snprintf(param, sizeof param, "messages[%zu].tool_calls[%zu]", mi, k);
        if (!json_is_object(c)) return BAD(param, "'%s' must be an object", param);
        const json_t *id = json_object_get(c, "id"), *ty = json_object_get(c, "type");
        const json_t *fn = json_object_get(c, "function");
        if (id && !json_is_null(id) && !json_is_string(id)) return BAD(param, "'%s.id' must be a string", param);
        if (ty && !json_is_null(ty) && (!json_is_string(ty) || strcmp(json_string_value(ty), "function") != 0))
            return BAD(param, "'%s.type' must be \"function\"", param);
        if (!json_is_object(fn)) return BAD(param, "'%s.function' must be an object", param);
        const json_t *name = json_object_get(fn, "name"), *args = json_object_get(fn, "arguments");
        if (!json_is_string(name) || json_string_length(name) == 0)
            return BAD(param, "'%s.function.name' must be a non-empty string", param);
        const char *argtext = "{}";
        if (json_is_string(args)) {
            argtext = json_string_value(args);
            if (!argtext[0]) argtext = "{}";
            /* the templates embed the arguments as JSON: they must parse */
            json_t *probe = json_loads(argtext, 0, NULL);
            bool ok = json_is_object(probe);
            json_decref(probe);
            if (!ok) return BAD(param, "'%s.function.arguments' must be a JSON object (as a string)", param);
        } else if (json_is_object(args)) {
            char *s = json_dumps(args, JSON_COMPACT);
            RP_TRY(own(r, s, err));
            argtext = s;
        } else if (args && !json_is_null(args)) {
            return BAD(param, "'%s.function.arguments' must be a string", param);
        }
        calls[k].id = json_is_string(id) ? (char *)json_string_value(id) : NULL;
        calls[k].name = (char *)json_string_value(name);
        calls[k].arguments = (char *)argtext;
    }
    m->tool_calls = calls;
    m->n_tool_calls = n;
    r->n_calls += n;
    return RP_OK;
}

static rp_status parse_messages(rp_srv_request *r, const json_t *arr, const rp_srv_limits *lim, rp_api_error *err) {
    if (!arr) return BAD("messages", "'messages' is required");
    if (!json_is_array(arr)) return BAD("messages", "'messages' must be an array");
    size_t n = json_array_size(arr);
    if (n == 0) return BAD("messages", "'messages' must not be empty");
    if (n > lim->max_messages)
        return rp_api_errorf(err, RP_ERR_RANGE, 400, "too_many_messages", "messages",
                             "'messages' has %zu entries, the limit is %zu", n, lim->max_messages);
    size_t total_calls = 0;
    for (size_t i = 0; i < n; i++) {
        const json_t *tc = json_object_get(json_array_get(arr, i), "tool_calls");
        if (json_is_array(tc)) total_calls += json_array_size(tc) <= RP_SRV_MAX_TOOL_CALLS ? json_array_size(tc) : 0;
    }
    r->msgs = calloc(n, sizeof *r->msgs);
    r->calls = total_calls ? calloc(total_calls, sizeof *r->calls) : NULL;
    if (!r->msgs || (total_calls && !r->calls)) return rp_api_errorf(err, RP_ERR_NOMEM, 500, NULL, NULL, "out of memory");
    char param[96];
    for (size_t i = 0; i < n; i++) {
        const json_t *m = json_array_get(arr, i);
        snprintf(param, sizeof param, "messages[%zu]", i);
        if (!json_is_object(m)) return BAD(param, "'%s' must be an object", param);
        const json_t *role = json_object_get(m, "role");
        snprintf(param, sizeof param, "messages[%zu].role", i);
        if (!json_is_string(role)) return BAD(param, "'%s' must be a string", param);
        const char *rs = json_string_value(role);
        rp_srv_msg *cm = &r->msgs[i];
        if (!strcmp(rs, "system") || !strcmp(rs, "developer")) cm->role = "system";
        else if (!strcmp(rs, "user")) cm->role = "user";
        else if (!strcmp(rs, "assistant")) cm->role = "assistant";
        else if (!strcmp(rs, "tool")) cm->role = "tool";
        else
            return BAD(param, "'%s' must be one of system, developer, user, assistant, tool (got \"%.40s\")", param, rs);
        snprintf(param, sizeof param, "messages[%zu].content", i);
        RP_TRY(get_content(r, json_object_get(m, "content"), param, &cm->content, err));
        const json_t *tc = json_object_get(m, "tool_calls");
        if (tc && !json_is_null(tc)) {
            if (strcmp(cm->role, "assistant") != 0)
                return BAD(param, "messages[%zu]: only assistant messages carry tool_calls", i);
            RP_TRY(parse_tool_calls(r, tc, i, cm, err));
        }
        if (!cm->content && strcmp(cm->role, "assistant") != 0)
            return BAD(param, "'%s' is required for role %s", param, cm->role);
        if (!cm->content && cm->n_tool_calls == 0) cm->content = "";
        const json_t *tcid = json_object_get(m, "tool_call_id"), *name = json_object_get(m, "name");
        if (tcid && !json_is_null(tcid)) {
            if (!json_is_string(tcid)) return BAD("tool_call_id", "messages[%zu].tool_call_id must be a string", i);
            cm->tool_call_id = json_string_value(tcid);
        }
        if (name && !json_is_null(name)) {
            if (!json_is_string(name)) return BAD("name", "messages[%zu].name must be a string", i);
            if (!strcmp(cm->role, "tool")) cm->name = json_string_value(name);
        }
    }
    r->n_msgs = n;
    return RP_OK;
}

static rp_status parse_tools(rp_srv_request *r, const json_t *root, rp_api_error *err) {
    const json_t *tools = json_object_get(root, "tools");
    const json_t *choice = json_object_get(root, "tool_choice");
    if (tools && !json_is_null(tools)) {
        if (!json_is_array(tools)) return BAD("tools", "'tools' must be an array");
        size_t n = json_array_size(tools);
        if (n > RP_SRV_MAX_TOOLS) return BAD("tools", "'tools' has %zu entries, at most %d", n, RP_SRV_MAX_TOOLS);
        for (size_t i = 0; i < n; i++) {
            const json_t *t = json_array_get(tools, i);
            const json_t *ty = json_object_get(t, "type"), *fn = json_object_get(t, "function");
            char param[64];
            snprintf(param, sizeof param, "tools[%zu]", i);
            if (!json_is_object(t) || !json_is_string(ty) || strcmp(json_string_value(ty), "function") != 0)
                return BAD(param, "'%s' must be an object with \"type\": \"function\"", param);
            const json_t *name = json_object_get(fn, "name"), *params = json_object_get(fn, "parameters");
            if (!json_is_object(fn) || !json_is_string(name) || !tool_name_ok(json_string_value(name)))
                return BAD(param, "'%s.function.name' must be 1-64 characters of a-z, A-Z, 0-9, _, - or .", param);
            if (params && !json_is_null(params) && !json_is_object(params))
                return BAD(param, "'%s.function.parameters' must be an object", param);
            const json_t *desc = json_object_get(fn, "description");
            if (desc && !json_is_null(desc) && !json_is_string(desc))
                return BAD(param, "'%s.function.description' must be a string", param);
        }
        if (n > 0) {
            r->tools_json = json_dumps(tools, JSON_COMPACT | JSON_PRESERVE_ORDER);
            if (!r->tools_json) return rp_api_errorf(err, RP_ERR_NOMEM, 500, NULL, NULL, "out of memory");
            r->n_tools = n;
        }
    }
    if (!choice || json_is_null(choice)) return RP_OK;
    if (json_is_string(choice)) {
        const char *c = json_string_value(choice);
        if (!strcmp(c, "auto")) r->tool_choice = RP_TOOL_CHOICE_AUTO;
        else if (!strcmp(c, "none")) r->tool_choice = RP_TOOL_CHOICE_NONE;
        else if (!strcmp(c, "required")) r->tool_choice = RP_TOOL_CHOICE_REQUIRED;
        else return BAD("tool_choice", "'tool_choice' must be \"auto\", \"none\", \"required\" or a named function");
    } else if (json_is_object(choice)) {
        const json_t *fn = json_object_get(choice, "function");
        const json_t *name = json_object_get(fn, "name");
        if (!json_is_string(name))
            return BAD("tool_choice", "'tool_choice.function.name' must be a string");
        r->tool_choice = RP_TOOL_CHOICE_NAMED;
        r->tool_name = json_string_value(name);
    } else {
        return BAD("tool_choice", "'tool_choice' must be a string or an object");
    }
    if (r->tool_choice >= RP_TOOL_CHOICE_REQUIRED && r->n_tools == 0)
        return BAD("tool_choice", "'tool_choice' %s needs 'tools'", r->tool_choice == RP_TOOL_CHOICE_NAMED ? "names a function but" : "is required but");
    if (r->tool_choice == RP_TOOL_CHOICE_NAMED) {
        bool found = false;
        for (size_t i = 0; i < json_array_size(tools) && !found; i++)
            found = !strcmp(json_string_value(json_object_get(json_object_get(json_array_get(tools, i), "function"), "name")),
                            r->tool_name);
        if (!found) return BAD("tool_choice", "'tool_choice' names '%.64s', which is not in 'tools'", r->tool_name);
    }
    return RP_OK;
}

/* ------------------------------------------------------------------ completions */

static rp_status parse_prompt(rp_srv_request *r, const json_t *root, const rp_srv_limits *lim, rp_api_error *err) {
    const json_t *p = json_object_get(root, "prompt");
    if (!p || json_is_null(p)) return BAD("prompt", "'prompt' is required");
    if (json_is_array(p) && json_array_size(p) == 1 &&
        (json_is_string(json_array_get(p, 0)) || json_is_array(json_array_get(p, 0))))
        p = json_array_get(p, 0);   /* a batch of one */
    if (json_is_string(p)) {
        r->prompt = json_string_value(p);
        return RP_OK;
    }
    if (!json_is_array(p) || json_array_size(p) == 0)
        return BAD("prompt", "'prompt' must be a string, an array of one string or an array of token ids");
    size_t n = json_array_size(p);
    if ((int64_t)n > lim->n_ctx)
        return rp_api_errorf(err, RP_ERR_RANGE, 400, "context_length_exceeded", "prompt",
                             "the prompt has %zu tokens, the context is %d", n, lim->n_ctx);
    r->prompt_ids = malloc(n * sizeof *r->prompt_ids);
    if (!r->prompt_ids) return rp_api_errorf(err, RP_ERR_NOMEM, 500, NULL, NULL, "out of memory");
    for (size_t i = 0; i < n; i++) {
        const json_t *t = json_array_get(p, i);
        if (!json_is_integer(t) || json_integer_value(t) < 0 || json_integer_value(t) > INT32_MAX)
            return BAD("prompt", "'prompt[%zu]' must be a token id (batches of several prompts are not supported)", i);
        r->prompt_ids[i] = (int32_t)json_integer_value(t);
    }
    r->n_prompt_ids = n;
    return RP_OK;
}

/* ------------------------------------------------------------------ common */

/* A JSON Schema as the request's grammar (400 naming `field` when it cannot be converted). */
static rp_status set_schema_grammar(rp_srv_request *r, const json_t *schema, const char *field, rp_api_error *err) {
    char *text = json_dumps(schema, JSON_COMPACT);
    if (!text) return rp_api_errorf(err, RP_ERR_NOMEM, 500, NULL, NULL, "out of memory");
    char *gbnf = NULL;
    rp_status st = rp_grammar_schema_to_gbnf(text, &gbnf);
    free(text);
    if (st != RP_OK) return rp_api_errorf(err, st, 400, "invalid_value", field, "%s", rp_last_error());
    free(r->grammar);
    r->grammar = gbnf;
    return RP_OK;
}

static rp_status parse_stop(rp_srv_request *r, const json_t *v, rp_api_error *err) {
    if (!v || json_is_null(v)) return RP_OK;
    const json_t *one = json_is_string(v) ? v : NULL;
    size_t n = one ? 1 : json_is_array(v) ? json_array_size(v) : 0;
    if (!one && !json_is_array(v)) return BAD("stop", "'stop' must be a string or an array of strings");
    if (n > RP_SRV_MAX_STOP) return BAD("stop", "'stop' has %zu sequences, at most %d", n, RP_SRV_MAX_STOP);
    for (size_t i = 0; i < n; i++) {
        const json_t *s = one ? one : json_array_get(v, i);
        if (!json_is_string(s)) return BAD("stop", "'stop[%zu]' must be a string", i);
        size_t len = json_string_length(s);
        if (len == 0) continue;   /* an empty stop sequence matches nothing */
        if (len > RP_SRV_MAX_STOP_LEN) return BAD("stop", "'stop[%zu]' is longer than %d bytes", i, RP_SRV_MAX_STOP_LEN);
        r->stop[r->n_stop++] = json_string_value(s);
    }
    return RP_OK;
}

static rp_status parse_bias(rp_srv_request *r, const json_t *v, rp_api_error *err) {
    if (!v || json_is_null(v)) return RP_OK;
    if (!json_is_object(v)) return BAD("logit_bias", "'logit_bias' must be an object of token id -> bias");
    size_t n = json_object_size(v);
    if (n == 0) return RP_OK;
    if (n > RP_SRV_MAX_BIAS) return BAD("logit_bias", "'logit_bias' has %zu entries, at most %d", n, RP_SRV_MAX_BIAS);
    r->bias = calloc(n, sizeof *r->bias);
    if (!r->bias) return rp_api_errorf(err, RP_ERR_NOMEM, 500, NULL, NULL, "out of memory");
    const char *key;
    json_t *val;
    json_object_foreach((json_t *)v, key, val) {
        char *end = NULL;
        long id = strtol(key, &end, 10);
        if (!key[0] || *end || id < 0 || id > INT32_MAX)
            return BAD("logit_bias", "'logit_bias' keys must be token ids, got \"%.32s\"", key);
        if (!json_is_number(val) || json_number_value(val) < -100 || json_number_value(val) > 100)
            return BAD("logit_bias", "'logit_bias[%s]' must be a number in [-100, 100]", key);
        double b = json_number_value(val);
        r->bias[r->n_bias].token = (rp_token)id;
        r->bias[r->n_bias].bias = b <= -100 ? -INFINITY : (float)b;   /* -100 bans, as OpenAI documents */
        r->n_bias++;
    }
    return RP_OK;
}

static rp_status parse_extensions(rp_srv_request *r, const json_t *root, const rp_srv_limits *lim, rp_api_error *err) {
    const json_t *s = json_object_get(root, "reprise_session");
    if (s && !json_is_null(s) && !json_is_false(s)) {
        if (json_is_true(s) || (json_is_string(s) && !strcmp(json_string_value(s), "new"))) {
            r->session = RP_SRV_SESSION_NEW;
        } else if (json_is_string(s) && rp_srv_session_id_valid(json_string_value(s))) {
            r->session = RP_SRV_SESSION_ID;
            memcpy(r->session_id, json_string_value(s), RP_SRV_SESSION_HEX + 1);
        } else {
            return BAD("reprise_session", "'reprise_session' must be true, \"new\" or a session id (32 hex digits)");
        }
    }
    const json_t *c = json_object_get(root, "reprise_cache");
    if (c && !json_is_null(c)) {
        if (!json_is_object(c)) return BAD("reprise_cache", "'reprise_cache' must be an object");
        const json_t *mode = json_object_get(c, "mode");
        if (mode && !json_is_null(mode)) {
            int m = json_is_string(mode) ? rp_reuse_mode_parse(json_string_value(mode)) : -1;
            if (m < 0) return BAD("reprise_cache.mode", "'reprise_cache.mode' must be none, prefix, full or blend");
            r->cache_mode = m;
        }
        double ratio = -1;
        RP_TRY(get_num(c, "recompute_ratio", 0, 1, &ratio, err));
        if (ratio >= 0) r->cache_ratio = (float)ratio;
        RP_TRY(get_bool(c, "persist", &r->cache_persist, err));
    }
    const json_t *d = json_object_get(root, "reprise_documents");
    if (d && !json_is_null(d)) {
        if (!json_is_array(d)) return BAD("reprise_documents", "'reprise_documents' must be an array of strings");
        size_t n = json_array_size(d);
        if (n > lim->max_documents)
            return BAD("reprise_documents", "'reprise_documents' has %zu entries, the limit is %zu", n, lim->max_documents);
        if (n) {
            r->docs = calloc(n, sizeof *r->docs);
            if (!r->docs) return rp_api_errorf(err, RP_ERR_NOMEM, 500, NULL, NULL, "out of memory");
        }
        for (size_t i = 0; i < n; i++) {
            const json_t *x = json_array_get(d, i);
            if (!json_is_string(x)) return BAD("reprise_documents", "'reprise_documents[%zu]' must be a string", i);
            if (json_string_length(x) > 0) r->docs[r->n_docs++] = json_string_value(x);
        }
    }
    return RP_OK;
}

static rp_status parse_common(rp_srv_request *r, const json_t *root, const rp_srv_limits *lim, rp_api_error *err) {
    const json_t *model = json_object_get(root, "model");
    if (model && !json_is_null(model)) {
        if (!json_is_string(model)) return BAD("model", "'model' must be a string");
        r->model = json_string_value(model);
    }
    RP_TRY(get_bool(root, "stream", &r->stream, err));
    const json_t *so = json_object_get(root, "stream_options");
    if (so && !json_is_null(so)) {
        if (!json_is_object(so)) return BAD("stream_options", "'stream_options' must be an object");
        RP_TRY(get_bool(so, "include_usage", &r->include_usage, err));
    }
    json_int_t mt = -1, mct = -1, n = 1, seed = 0, best_of = 1;
    bool given = false, seeded = false;
    RP_TRY(get_int(root, "max_tokens", 0, INT32_MAX, &mt, &given, err));
    RP_TRY(get_int(root, "max_completion_tokens", 0, INT32_MAX, &mct, NULL, err));
    if (mct >= 0) mt = mct;
    if (mt < 0) {   /* llama-server's name for it; -1 (its "no limit"): not given */
        json_int_t np = -1;
        RP_TRY(get_int(root, "n_predict", -1, INT32_MAX, &np, NULL, err));
        mt = np;
    }
    RP_TRY(get_bool(root, "ignore_eos", &r->ignore_eos, err));
    if (mt == 0 && r->ep == RP_EP_CHAT) return BAD("max_tokens", "'max_tokens' must be at least 1");
    /* more than the context leaves is clamped where the prompt's length is known (call.c), as llama-server does */
    r->max_tokens = (int32_t)mt;
    RP_TRY(get_int(root, "n", 1, 128, &n, NULL, err));
    if (n > RP_SRV_MAX_N)
        return rp_api_errorf(err, RP_ERR_UNSUPPORTED, 400, "unsupported_value", "n",
                             "n = %lld choices: at most %d are supported", (long long)n, RP_SRV_MAX_N);
    r->n = (int32_t)n;
    RP_TRY(get_int(root, "best_of", 1, 128, &best_of, NULL, err));
    if (best_of != 1)
        return rp_api_errorf(err, RP_ERR_UNSUPPORTED, 400, "unsupported_value", "best_of", "only best_of = 1 is supported");
    RP_TRY(get_int(root, "seed", INT64_MIN, INT64_MAX, &seed, &seeded, err));
    r->has_seed = seeded;
    r->seed = (uint64_t)seed;
    double t = 1.0, tp = 1.0, pres = 0, freq = 0;
    RP_TRY(get_num(root, "temperature", 0, 2, &t, err));
    RP_TRY(get_num(root, "top_p", 0, 1, &tp, err));
    if (tp <= 0) return BAD("top_p", "'top_p' must be greater than 0");
    RP_TRY(get_num(root, "presence_penalty", -2, 2, &pres, err));
    RP_TRY(get_num(root, "frequency_penalty", -2, 2, &freq, err));
    r->presence_penalty = (float)pres;
    r->frequency_penalty = (float)freq;
    json_int_t tk = 0, rln = 64;
    double mp = 0, rpen = 1;
    RP_TRY(get_int(root, "top_k", 0, INT32_MAX, &tk, NULL, err));
    RP_TRY(get_num(root, "min_p", 0, 1, &mp, err));
    RP_TRY(get_num(root, "repeat_penalty", 0, 100, &rpen, err));
    if (rpen <= 0) return BAD("repeat_penalty", "'repeat_penalty' must be greater than 0 (1: off)");
    RP_TRY(get_int(root, "repeat_last_n", 0, 65536, &rln, NULL, err));
    r->top_k = (int32_t)tk;
    r->min_p = (float)mp;
    r->repeat_penalty = (float)rpen;
    r->repeat_last_n = (int32_t)rln;
    r->temperature = (float)t;
    r->top_p = (float)tp;
    if (r->top_p <= 0) r->top_p = FLT_TRUE_MIN;   /* under float's range: still "the single most likely token" */
    RP_TRY(parse_stop(r, json_object_get(root, "stop"), err));
    RP_TRY(parse_bias(r, json_object_get(root, "logit_bias"), err));
    /* chat: logprobs true and top_logprobs 0..20 (OpenAI); completions: logprobs 0..20 alternatives (legacy) */
    const json_t *lp = json_object_get(root, "logprobs");
    if (r->ep == RP_EP_CHAT) {
        RP_TRY(get_bool(root, "logprobs", &r->logprobs, err));
        json_int_t top = 0;
        bool top_given = false;
        RP_TRY(get_int(root, "top_logprobs", 0, RP_LOGPROBS_MAX_TOP, &top, &top_given, err));
        if (top_given && !r->logprobs) return BAD("top_logprobs", "'top_logprobs' needs 'logprobs': true");
        r->top_logprobs = (int32_t)top;
    } else if (lp && !json_is_null(lp) && !json_is_false(lp)) {
        json_int_t top = 0;
        RP_TRY(get_int(root, "logprobs", 0, RP_LOGPROBS_MAX_TOP, &top, NULL, err));
        r->logprobs = true;
        r->top_logprobs = (int32_t)top;
    }
    const json_t *rf = json_object_get(root, "response_format");
    if (rf && !json_is_null(rf)) {
        const json_t *ty = json_object_get(rf, "type");
        if (!json_is_object(rf) || !json_is_string(ty))
            return BAD("response_format", "'response_format' must be an object with a 'type'");
        if (!strcmp(json_string_value(ty), "json_object")) {
            /* one JSON object, through the grammar (both backends, any --parallel) */
            json_t *obj = json_pack("{s:s}", "type", "object");
            rp_status gs = obj ? set_schema_grammar(r, obj, "response_format", err)
                               : rp_api_errorf(err, RP_ERR_NOMEM, 500, NULL, NULL, "out of memory");
            json_decref(obj);
            if (gs != RP_OK) return gs;
        }
        else if (!strcmp(json_string_value(ty), "json_schema")) {
            const json_t *js = json_object_get(rf, "json_schema");
            const json_t *sc = json_is_object(js) ? json_object_get(js, "schema") : NULL;
            if (!json_is_object(sc))
                return BAD("response_format", "response_format json_schema needs 'json_schema': {'schema': {...}}");
            RP_TRY(set_schema_grammar(r, sc, "response_format", err));
        } else if (strcmp(json_string_value(ty), "text") != 0)
            return rp_api_errorf(err, RP_ERR_UNSUPPORTED, 400, "unsupported_value", "response_format",
                                 "response_format '%.32s' is not supported (text or json_object)", json_string_value(ty));
    }
    const json_t *jsch = json_object_get(root, "json_schema");
    if (jsch && !json_is_null(jsch)) {
        if (!json_is_object(jsch)) return BAD("json_schema", "'json_schema' must be an object");
        RP_TRY(set_schema_grammar(r, jsch, "json_schema", err));
    }
    const json_t *gr = json_object_get(root, "grammar");
    if (gr && !json_is_null(gr)) {
        if (!json_is_string(gr)) return BAD("grammar", "'grammar' must be a GBNF string");
        if (json_string_length(gr) > 0) {
            rp_grammar *g = NULL;
            if (rp_grammar_parse(json_string_value(gr), NULL, &g) != RP_OK)
                return rp_api_errorf(err, RP_ERR_FORMAT, 400, "invalid_value", "grammar", "%s", rp_last_error());
            rp_grammar_free(g);
            free(r->grammar);
            r->grammar = strdup(json_string_value(gr));
            if (!r->grammar) return rp_api_errorf(err, RP_ERR_NOMEM, 500, NULL, NULL, "out of memory");
        }
    }
    return parse_extensions(r, root, lim, err);
}

rp_status rp_srv_parse_request(rp_srv_endpoint ep, const char *body, size_t len, const rp_srv_limits *lim,
                               rp_srv_request *r, rp_api_error *err) {
    memset(r, 0, sizeof *r);
    r->ep = ep;
    r->max_tokens = -1;
    r->n = 1;
    r->temperature = 1.0f;
    r->top_p = 1.0f;
    r->cache_mode = -1;
    r->cache_ratio = -1;
    r->cache_persist = true;
    if (len > lim->max_body)
        return rp_api_errorf(err, RP_ERR_RANGE, 413, "request_too_large", NULL,
                             "the request body is %zu bytes, the limit is %zu", len, lim->max_body);
    if (len == 0) return BAD(NULL, "the request body is empty (expected a JSON object)");
    rp_json_limits jl = {.max_bytes = lim->max_body, .max_depth = lim->max_depth, .max_values = lim->max_values};
    if (rp_json_check_limits(body, len, &jl) != RP_OK)
        return rp_api_errorf(err, RP_ERR_RANGE, 400, "json_too_complex", NULL, "%s", rp_last_error());
    if (rp_json_load_object(body, len, &r->root) != RP_OK)
        return rp_api_errorf(err, RP_ERR_FORMAT, 400, "invalid_json", NULL, "invalid JSON body: %s", rp_last_error());
    rp_status st = rp_srv_check_fields(ep == RP_EP_CHAT ? RP_SRV_API_CHAT : RP_SRV_API_COMPLETIONS, r->root, err);
    if (st == RP_OK) st = parse_common(r, r->root, lim, err);
    if (st == RP_OK && ep == RP_EP_CHAT) {
        st = parse_messages(r, json_object_get(r->root, "messages"), lim, err);
        if (st == RP_OK) st = parse_tools(r, r->root, err);
        if (st == RP_OK) st = rp_srv_parse_reasoning(r, r->root, err);
    } else if (st == RP_OK) {
        st = parse_prompt(r, r->root, lim, err);
        const json_t *sfx = json_object_get(r->root, "suffix");
        const json_t *echo = json_object_get(r->root, "echo");
        if (st == RP_OK && sfx && !json_is_null(sfx) && !(json_is_string(sfx) && json_string_length(sfx) == 0))
            st = rp_api_errorf(err, RP_ERR_UNSUPPORTED, 400, "unsupported_value", "suffix", "'suffix' is not supported");
        if (st == RP_OK && json_is_true(echo))
            st = rp_api_errorf(err, RP_ERR_UNSUPPORTED, 400, "unsupported_value", "echo", "'echo' is not supported");
    }
    if (st != RP_OK) rp_srv_request_free(r);
    return st;
}

void rp_srv_request_free(rp_srv_request *r) {
    if (!r) return;
    json_decref(r->root);
    free(r->msgs);
    free(r->calls);
    free(r->tools_json);
    free(r->template_kwargs);
    free(r->grammar);
    free(r->prompt_ids);
    free(r->bias);
    free(r->docs);
    for (size_t i = 0; i < r->n_owned; i++) free(r->owned[i]);
    free(r->owned);
    rp_srv_endpoint ep = r->ep;
    memset(r, 0, sizeof *r);
    r->ep = ep;
}
