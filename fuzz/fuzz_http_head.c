/* fuzz_http_head.c — libFuzzer target: the first-request head checker of the connection gate, on any bytes and limits. */
#include <stdint.h>
#include <string.h>

#include "server/http_head.h"

#define CHECK(c) do { if (!(c)) __builtin_trap(); } while (0)

/* Bytes 0-1 pick the limits (URI 16..271, head URI..URI+4095); the rest is what a client sent. Every prefix
 * is checked as the gate sees a head arrive: a verdict of OK or BAD never changes as bytes are added. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    const size_t max_uri = 16 + data[0], max_head = max_uri + ((size_t)data[1] << 4);
    const char *s = (const char *)data + 2;
    const size_t n = size - 2;
    rp_head_verdict v, first = {0};
    for (size_t k = 0; k <= n; k++) {
        rp_http_head_check(s, k, max_uri, max_head, &v);
        if (v.state == RP_HEAD_OK) {
            CHECK(v.head_len >= 2 && v.head_len <= k && v.head_len <= max_head);
            CHECK(s[v.head_len - 1] == '\n');
        }
        if (v.state == RP_HEAD_BAD) {
            CHECK(v.status == 400 || v.status == 414 || v.status == 431 || v.status == 505);
            CHECK(v.code && v.message[0]);
        }
        if (first.state != RP_HEAD_INCOMPLETE) {   /* decided: stays decided, the same way */
            CHECK(v.state == first.state && v.status == first.status);
            if (v.state == RP_HEAD_OK) CHECK(v.head_len == first.head_len);
        } else if (v.state != RP_HEAD_INCOMPLETE) {
            first = v;
        }
    }
    return 0;
}
