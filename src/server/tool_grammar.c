/* tool_grammar.c — the grammar of a tool call: the JSON object the model writes after a forced opening (tool_choice
 * named or "required"), or after one it wrote itself (tool_choice "auto" with strict tools, lazy_grammar.c), built
 * as a JSON Schema from the request's tools and converted by rp_grammar_schema_to_gbnf, so both backends and every
 * --parallel generate the call under its schema. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "reprise.h"
#include "server/prompt.h"

/* The function's parameters schema, or any object when it gives none, or when only strict tools are held to
 * theirs and this one is not (a new reference, or NULL). */
static json_t *params_of(const json_t *fn, bool strict_only) {
    json_t *p = json_object_get(fn, "parameters");
    if (strict_only && !json_is_true(json_object_get(fn, "strict"))) p = NULL;
    return json_is_object(p) ? json_deep_copy(p) : json_pack("{s:s}", "type", "object");
}

bool rp_srv_tools_strict(const char *tools_json) {
    json_t *tools = tools_json ? json_loads(tools_json, 0, NULL) : NULL;
    bool any = false;
    for (size_t i = 0; i < json_array_size(tools) && !any; i++)
        any = json_is_true(json_object_get(json_object_get(json_array_get(tools, i), "function"), "strict"));
    json_decref(tools);
    return any;
}

rp_status rp_srv_tool_grammar(const char *tools_json, const char *name, const char *args_key, bool strict_only,
                              char **gbnf) {
    *gbnf = NULL;
    json_error_t je;
    json_t *tools = tools_json ? json_loads(tools_json, 0, &je) : NULL;
    if (!json_is_array(tools)) {
        json_decref(tools);
        return rp_errorf(RP_ERR_INVALID_ARG, "server: the request's tools could not be read back");
    }
    json_t *schema = NULL;
    if (name) {   /* named: its arguments only (the opening names it) */
        for (size_t i = 0; i < json_array_size(tools) && !schema; i++) {
            const json_t *fn = json_object_get(json_array_get(tools, i), "function");
            const char *n = json_string_value(json_object_get(fn, "name"));
            if (n && !strcmp(n, name)) schema = params_of(fn, strict_only);
        }
    } else {      /* required: one call of any of them, its name first */
        json_t *alts = json_array();
        for (size_t i = 0; alts && i < json_array_size(tools); i++) {
            const json_t *fn = json_object_get(json_array_get(tools, i), "function");
            json_t *props = json_object();
            json_object_set_new(props, "name", json_pack("{s:s}", "const", json_string_value(json_object_get(fn, "name"))));
            json_object_set_new(props, args_key, params_of(fn, strict_only));
            json_array_append_new(alts, json_pack("{s:s, s:o, s:[s,s], s:b}", "type", "object", "properties", props,
                                                  "required", "name", args_key, "additionalProperties", 0));
        }
        if (alts && json_array_size(alts) == 1) {
            schema = json_incref(json_array_get(alts, 0));
            json_decref(alts);
        } else if (alts) {
            schema = json_pack("{s:o}", "anyOf", alts);
        }
    }
    json_decref(tools);
    if (!schema) return rp_errorf(name ? RP_ERR_INVALID_ARG : RP_ERR_NOMEM, "server: no schema for the tool call");
    char *text = json_dumps(schema, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(schema);
    if (!text) return rp_errorf(RP_ERR_NOMEM, "server: out of memory");
    rp_status st = rp_grammar_schema_to_gbnf(text, gbnf);
    free(text);
    return st;
}
