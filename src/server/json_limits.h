/* json_limits.h — structural limits on JSON text (nesting depth, value count) checked before jansson parses it. */
#ifndef RP_SERVER_JSON_LIMITS_H
#define RP_SERVER_JSON_LIMITS_H

#include <stddef.h>

#include "reprise.h"

typedef struct rp_json_limits {
    size_t max_bytes;     /* text length */
    int max_depth;        /* nesting of arrays / objects (1 = a flat object) */
    size_t max_values;    /* scalars + containers + object keys: bounds jansson's allocation (~64 B per value) */
} rp_json_limits;

/* Scans `len` bytes of JSON text in one linear pass without allocating:
 * brackets outside strings (escapes honoured) give the depth, separators and
 * openers the value count. It does not validate JSON (jansson does, after
 * this pass said the text is small enough). Returns RP_OK, or RP_ERR_RANGE
 * with rp_last_error() naming the limit and the byte offset. */
rp_status rp_json_check_limits(const char *text, size_t len, const rp_json_limits *lim);

/* Loads an object from text that passed rp_json_check_limits: rejects NUL
 * in strings (every string is a C string afterwards) and a non-object root.
 * *out is a new reference. RP_ERR_FORMAT with "line L column C: why". */
struct json_t;
rp_status rp_json_load_object(const char *text, size_t len, struct json_t **out);

#endif /* RP_SERVER_JSON_LIMITS_H */
