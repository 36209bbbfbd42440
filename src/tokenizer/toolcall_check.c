/* toolcall_check.c — a parsed tool call against the request's tool definitions: the tool exists, its arguments
 * are a JSON object, and they fit the parameters schema in the parts a reply can get wrong without a grammar:
 * required keys, "type" (one or a list), "enum", nested objects' properties and arrays' items. Other schema
 * keywords are not checked (the JSON-schema grammar constrains generation; this only judges a parsed reply). */
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "reprise.h"

#include "core/error.h"

enum { MAX_DEPTH = 32 };

static void why_set(char *why, size_t cap, const char *fmt, ...) {
    if (!why || !cap) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, cap, fmt, ap);
    va_end(ap);
}

static bool type_is(const json_t *v, const char *t) {
    if (!strcmp(t, "string")) return json_is_string(v);
    if (!strcmp(t, "number")) return json_is_number(v);
    if (!strcmp(t, "integer"))
        return json_is_integer(v) || (json_is_real(v) && json_real_value(v) == (double)(long long)json_real_value(v));
    if (!strcmp(t, "boolean")) return json_is_boolean(v);
    if (!strcmp(t, "object")) return json_is_object(v);
    if (!strcmp(t, "array")) return json_is_array(v);
    if (!strcmp(t, "null")) return json_is_null(v);
    return true;   /* an unknown type name constrains nothing */
}

static bool check_value(const json_t *v, const json_t *schema, const char *path, int depth, char *why, size_t cap) {
    if (!json_is_object(schema) || depth > MAX_DEPTH) return true;
    const json_t *t = json_object_get(schema, "type");
    if (json_is_string(t) && !type_is(v, json_string_value(t))) {
        why_set(why, cap, "%s is not of type %s", path, json_string_value(t));
        return false;
    }
    if (json_is_array(t) && json_array_size(t) > 0) {
        bool any = false;
        size_t i;
        const json_t *e;
        json_array_foreach(t, i, e) any |= json_is_string(e) && type_is(v, json_string_value(e));
        if (!any) {
            why_set(why, cap, "%s is not of any of the types allowed", path);
            return false;
        }
    }
    const json_t *en = json_object_get(schema, "enum");
    if (json_is_array(en)) {
        bool any = false;
        size_t i;
        const json_t *e;
        json_array_foreach(en, i, e) any |= json_equal((json_t *)e, (json_t *)v);
        if (!any) {
            why_set(why, cap, "%s is not one of the enum values", path);
            return false;
        }
    }
    char sub[256];
    if (json_is_object(v)) {
        const json_t *req = json_object_get(schema, "required");
        size_t i;
        const json_t *e;
        json_array_foreach(req, i, e) {
            if (json_is_string(e) && !json_object_get(v, json_string_value(e))) {
                why_set(why, cap, "%s lacks the required key \"%s\"", path, json_string_value(e));
                return false;
            }
        }
        const json_t *props = json_object_get(schema, "properties");
        const char *k;
        const json_t *pv;
        json_object_foreach((json_t *)v, k, pv) {
            const json_t *ps = json_object_get(props, k);
            snprintf(sub, sizeof sub, "%s.%s", path, k);
            if (ps && !check_value(pv, ps, sub, depth + 1, why, cap)) return false;
        }
    }
    if (json_is_array(v)) {
        const json_t *items = json_object_get(schema, "items");
        size_t i;
        const json_t *e;
        json_array_foreach(v, i, e) {
            snprintf(sub, sizeof sub, "%s[%zu]", path, i);
            if (!check_value(e, items, sub, depth + 1, why, cap)) return false;
        }
    }
    return true;
}

/* The definition named `name` in an OpenAI tools array ({"type":"function","function":{...}} or the bare function). */
static const json_t *find_tool(const json_t *tools, const char *name) {
    size_t i;
    const json_t *t;
    json_array_foreach(tools, i, t) {
        const json_t *fn = json_object_get(t, "function");
        if (!json_is_object(fn)) fn = t;
        const char *n = json_string_value(json_object_get(fn, "name"));
        if (n && !strcmp(n, name)) return fn;
    }
    return NULL;
}

rp_status rp_tool_call_check(const char *tools_json, const rp_tool_call *call, char *why, size_t cap) {
    if (why && cap) why[0] = '\0';
    if (!call || !call->name) return rp_errorf(RP_ERR_INVALID_ARG, "tool call: no call or no name");
    json_t *args = json_loads(call->arguments ? call->arguments : "{}", JSON_DECODE_ANY, NULL);
    if (!json_is_object(args)) {
        json_decref(args);
        why_set(why, cap, "the arguments of %s are not a JSON object", call->name);
        return RP_ERR_INVALID_ARG;
    }
    rp_status st = RP_OK;
    if (tools_json) {
        json_error_t e;
        json_t *tools = json_loads(tools_json, 0, &e);
        if (!json_is_array(tools)) {
            json_decref(tools);
            json_decref(args);
            return rp_errorf(RP_ERR_INVALID_ARG, "tool call: the tool definitions are not a JSON array");
        }
        const json_t *fn = find_tool(tools, call->name);
        if (!fn) {
            why_set(why, cap, "no tool is named \"%s\"", call->name);
            st = RP_ERR_INVALID_ARG;
        } else {
            const json_t *params = json_object_get(fn, "parameters");
            if (params && !check_value(args, params, "arguments", 0, why, cap)) st = RP_ERR_INVALID_ARG;
        }
        json_decref(tools);
    }
    json_decref(args);
    return st;
}
