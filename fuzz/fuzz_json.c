/* fuzz_json.c — libFuzzer target: the JSON limit scanner, the bounded loader, the JSON-prefix automaton and UTF-8 cleaning. */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "server/gen.h"
#include "server/json_limits.h"
#include "server/json_prefix.h"

#define CHECK(c) do { if (!(c)) __builtin_trap(); } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *s = (const char *)data;
    rp_json_limits lim = {.max_bytes = 1 << 16, .max_depth = 16, .max_values = 4096};
    if (rp_json_check_limits(s, size, &lim) == RP_OK) {
        json_t *root = NULL;
        if (rp_json_load_object(s, size, &root) == RP_OK) {
            CHECK(json_is_object(root));
            json_decref(root);
        }
    }
    /* the automaton: a prefix it accepts, closed by rp_jsonp_close, is one JSON object */
    rp_json_prefix p, last;
    rp_jsonp_init(&p);
    last = p;
    size_t ok = 0;
    bool escapes = false;
    for (; ok < size; ok++) {
        if (!rp_jsonp_feed(&p, s + ok, 1)) break;
        last = p;
        escapes |= s[ok] == '\\' || (unsigned char)s[ok] >= 0x80;
        if (rp_jsonp_done(&p)) {
            ok++;
            break;
        }
    }
    char close[2 * RP_JSONP_MAX_DEPTH + 32];
    size_t cl = rp_jsonp_close(&last, close, sizeof close);
    CHECK(cl < sizeof close && strlen(close) == cl);
    if (!escapes) {   /* \u escapes may leave lone surrogates, raw bytes >= 0x80 partial UTF-8: parsers reject both */
        char *full = malloc(ok + cl + 1);
        if (full) {
            memcpy(full, s, ok);
            memcpy(full + ok, close, cl + 1);
            json_error_t err;
            json_t *v = json_loadb(full, ok + cl, 0, &err);
            CHECK(json_is_object(v));
            json_decref(v);
            free(full);
        }
    }
    /* cleaned text is valid UTF-8: jansson takes it */
    char *clean = rp_srv_utf8_clean(s, size);
    if (clean) {
        json_t *js = json_string(clean);
        CHECK(js != NULL);
        json_decref(js);
        free(clean);
    }
    return 0;
}
