/* fuzz_request.c — libFuzzer target: arbitrary bytes through the request path the HTTP handler uses (parse, render, reply). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "server/gen.h"
#include "server/prompt.h"
#include "server/request.h"

#define CHECK(c) do { if (!(c)) __builtin_trap(); } while (0)

/* The models whose chat templates render the requests: none (a plain transcript), and the vocabulary-only
 * GGUFs of ../shared (Llama 3 and Qwen3 with their own Jinja templates, an SPM vocabulary with the llama2
 * built-in) when they are there; a missing one falls back to none. */
static const rp_model *g_models[4];

static void load_models(void) {
    static int done;
    if (done) return;
    done = 1;
    const char *dir = getenv("RP_SHARED_DIR") ? getenv("RP_SHARED_DIR") : "../shared";
    static const char *const files[3] = {"models/vocab/llama3-bpe.vocab.gguf", "models/vocab/qwen3-bpe.vocab.gguf",
                                         "models/vocab/ggml-vocab-llama-spm.gguf"};
    for (int i = 0; i < 3; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        rp_model_params mp = rp_model_default_params();
        mp.vocab_only = true;
        rp_model *m = NULL;
        if (rp_model_load(path, mp, &m) == RP_OK) g_models[i + 1] = m;
    }
}

/* Byte 0 picks the endpoint (bit 0), the model and so the chat template (bits 1-2) and whether
 * the body is also used as "generated text" for the reply path (bit 3); the
 * rest is the request body, exactly as the handler receives it. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const uint8_t sel = data[0];
    const char *body = (const char *)data + 1;
    const size_t len = size - 1;
    rp_srv_limits lim = rp_srv_default_limits(4096);
    lim.max_body = 65536;
    rp_srv_request r;
    rp_api_error e;
    memset(&e, 0, sizeof e);
    const rp_srv_endpoint ep = (sel & 1) ? RP_EP_COMPLETIONS : RP_EP_CHAT;
    rp_status st = rp_srv_parse_request(ep, body, len, &lim, &r, &e);
    if (st != RP_OK) {
        /* every refusal is a 4xx (or 500 out of memory) with a message */
        CHECK((e.http >= 400 && e.http < 500) || e.http == 500);
        CHECK(e.message[0] != '\0');
        char *j = rp_api_error_json(&e);
        CHECK(j != NULL);
        free(j);
        return 0;
    }
    load_models();
    rp_srv_text t;
    memset(&e, 0, sizeof e);
    st = ep == RP_EP_CHAT ? rp_srv_render_chat(g_models[(sel >> 1) & 3], &r, &t, &e) : rp_srv_render_completion(&r, &t, &e);
    if (st == RP_OK) {
        CHECK(t.n_pieces >= 1 && t.cut[0] == 0 && t.cut[t.n_pieces] == t.len);
        for (int i = 0; i < t.n_pieces; i++) CHECK(t.cut[i] <= t.cut[i + 1]);
        CHECK(strlen(t.text) == t.len);
        if (sel & 8) {
            /* the reply path on arbitrary "generated" text: stop sequences, tool calls, forced arguments */
            rp_srv_gen g;
            if (rp_srv_gen_init(&g, NULL, &r, ep == RP_EP_CHAT ? &t : NULL) == RP_OK) {
                size_t n = len < 4096 ? len : 4096;
                char *txt = rp_srv_utf8_clean(body, n);
                if (txt) {
                    free(g.text);
                    g.text = txt;
                    g.len = strlen(txt);
                    g.cap = g.len + 1;
                    (void)rp_srv_gen_stream_end(&g);
                    rp_srv_gen_flush(&g);
                    rp_srv_reply rep;
                    if (rp_srv_gen_reply(&g, RP_JOB_LENGTH, &rep) == RP_OK) {
                        CHECK(rep.finish_reason != NULL);
                        for (size_t k = 0; k < rep.n_calls; k++) CHECK(rep.calls[k].name && rep.calls[k].arguments);
                        rp_srv_reply_free(&rep);
                    }
                }
                rp_srv_gen_free(&g);
            }
        }
        rp_srv_text_free(&t);
    } else {
        CHECK(e.http >= 400);
    }
    rp_srv_request_free(&r);
    return 0;
}
