/* fuzz_template.c — libFuzzer target: arbitrary bytes as a chat template, compiled and rendered on a fixed
 * conversation with small limits; every input compiles or fails cleanly, renders or fails cleanly. */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "template/template.h"

#define CHECK(c) do { if (!(c)) __builtin_trap(); } while (0)

static json_t *g_ctx;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!g_ctx)
        g_ctx = json_loads("{\"messages\": [{\"role\": \"system\", \"content\": \"S\"}, {\"role\": \"user\", \"content\": \" hi \"},"
                           " {\"role\": \"assistant\", \"content\": null, \"tool_calls\": [{\"id\": \"call12345\", \"type\": "
                           "\"function\", \"function\": {\"name\": \"f\", \"arguments\": {\"a\": [1, 2.5, \"x\"]}}}]},"
                           " {\"role\": \"tool\", \"content\": \"r\"}], \"tools\": [{\"type\": \"function\", \"function\": "
                           "{\"name\": \"f\"}}], \"add_generation_prompt\": true, \"bos_token\": \"<s>\", \"eos_token\": "
                           "\"</s>\"}", 0, NULL);
    rp_tmpl *t = NULL;
    if (rp_tmpl_compile((const char *)data, size, &t) != RP_OK) return 0;
    rp_tmpl_opts o = {.now = 1721952000, .max_output = 1 << 16, .max_memory = 16 << 20, .max_iters = 20000, .max_depth = 32};
    char *out = NULL;
    size_t len = 0;
    if (rp_tmpl_render(t, g_ctx, &o, &out, &len) == RP_OK) {
        CHECK(out && strlen(out) <= len && len <= o.max_output);
    } else {
        CHECK(!out);
    }
    free(out);
    rp_tmpl_free(t);
    return 0;
}
