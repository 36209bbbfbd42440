/* json_prefix.h — incremental validator of a JSON object prefix (constrained decoding of tool arguments / json_object). */
#ifndef RP_SERVER_JSON_PREFIX_H
#define RP_SERVER_JSON_PREFIX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define RP_JSONP_MAX_DEPTH 32   /* deeper nesting is refused (the constraint never needs it) */
#define RP_JSONP_MAX_WS 24      /* whitespace bytes in a row (stops endless-whitespace loops; the schema grammars
                                   allow a newline and 20 spaces / tabs, as llama.cpp's) */
#define RP_JSONP_MAX_INT 18     /* integer-part digits (64-bit integers, no double overflow) */
#define RP_JSONP_MAX_EXP 2      /* exponent digits (|e| < 100) */

/* State after some bytes of a JSON text whose root must be an object. A
 * plain value type: copy it to try bytes without committing them. */
typedef struct rp_json_prefix {
    uint8_t stack[RP_JSONP_MAX_DEPTH];   /* '{' or '[' per open container */
    int8_t depth;
    uint8_t state;      /* internal: what the next byte may be */
    uint8_t sub;        /* number / literal / escape sub-state */
    uint8_t lit;        /* literal being matched: 't', 'f', 'n' */
    uint8_t ws;         /* whitespace run */
    uint8_t nd;         /* digits in the number part being read (parsers reject huge numbers) */
    bool key;           /* the string being read is an object key */
} rp_json_prefix;

void rp_jsonp_init(rp_json_prefix *p);
/* Feeds n bytes. Returns false (state unspecified: feed a copy) when they
 * cannot continue a valid JSON object, including any byte after the root
 * object closed. Bytes >= 0x80 are allowed inside strings only. */
bool rp_jsonp_feed(rp_json_prefix *p, const char *s, size_t n);
/* True once the root object is complete. */
bool rp_jsonp_done(const rp_json_prefix *p);
/* Writes the shortest text (NUL-terminated) that completes the object:
 * closes strings, finishes numbers and literals, fills a missing value with
 * null, then closes every container. Returns its length; at most
 * 2 * RP_JSONP_MAX_DEPTH + 16 bytes, so cap >= 96 always suffices. */
size_t rp_jsonp_close(const rp_json_prefix *p, char *buf, size_t cap);

#endif /* RP_SERVER_JSON_PREFIX_H */
