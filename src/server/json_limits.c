/* json_limits.c — depth / size / value-count checks on JSON text before parsing, and the bounded object loader. */
#include "server/json_limits.h"

#include <jansson.h>

#include "core/error.h"

rp_status rp_json_check_limits(const char *text, size_t len, const rp_json_limits *lim) {
    if (!text && len) return rp_errorf(RP_ERR_INVALID_ARG, "json: NULL text");
    if (lim->max_bytes && len > lim->max_bytes)
        return rp_errorf(RP_ERR_RANGE, "JSON body is %zu bytes, the limit is %zu", len, lim->max_bytes);
    int depth = 0;
    size_t values = 0;
    bool in_str = false, esc = false, in_scalar = false;
    for (size_t i = 0; i < len; i++) {
        const char c = text[i];
        if (in_str) {
            if (esc) esc = false;
            else if (c == '\\') esc = true;
            else if (c == '"') in_str = false;
            continue;
        }
        switch (c) {
        case '"':
            in_str = true;
            in_scalar = false;
            values++;
            break;
        case '{':
        case '[':
            if (++depth > lim->max_depth)
                return rp_errorf(RP_ERR_RANGE, "JSON nesting deeper than %d at byte %zu", lim->max_depth, i);
            values++;
            in_scalar = false;
            break;
        case '}':
        case ']':
            if (depth > 0) depth--;
            in_scalar = false;
            break;
        case ',':
        case ':':
        case ' ':
        case '\t':
        case '\n':
        case '\r':
            in_scalar = false;
            break;
        default:   /* numbers and literals: count each run once */
            if (!in_scalar) values++;
            in_scalar = true;
            break;
        }
        if (lim->max_values && values > lim->max_values)
            return rp_errorf(RP_ERR_RANGE, "JSON has more than %zu values (at byte %zu)", lim->max_values, i);
    }
    return RP_OK;
}

rp_status rp_json_load_object(const char *text, size_t len, json_t **out) {
    *out = NULL;
    json_error_t err;
    json_t *root = json_loadb(text, len, 0, &err);
    if (!root) return rp_errorf(RP_ERR_FORMAT, "line %d column %d: %s", err.line, err.column, err.text);
    if (!json_is_object(root)) {
        json_decref(root);
        return rp_errorf(RP_ERR_FORMAT, "the body must be a JSON object");
    }
    *out = root;
    return RP_OK;
}
