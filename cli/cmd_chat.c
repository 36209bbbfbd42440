/* cmd_chat.c — `reprise chat`: interactive chat using the model's chat template; each turn feeds only new tokens. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "progress.h"
#include "model/forward.h"
#include "model/model.h"
#include "model/session.h"
#include "tokenizer/chat.h"
#include "tokenizer/tokenizer.h"

#define MAX_MSGS 4096

/* Plain transcript for models without a recognized template (e.g. TinyStories). */
static char *plain_transcript(const rp_chat_msg *msgs, size_t n) {
    size_t cap = 64;
    for (size_t i = 0; i < n; i++) cap += strlen(msgs[i].content ? msgs[i].content : "") + 32;
    char *s = malloc(cap), *p = s;
    if (!s) return NULL;
    *p = 0;
    for (size_t i = 0; i < n; i++)
        p += sprintf(p, "%s: %s\n", !strcmp(msgs[i].role, "user") ? "User" : !strcmp(msgs[i].role, "system") ? "System" : "Assistant",
                     msgs[i].content ? msgs[i].content : "");
    strcpy(p, "Assistant:");
    return s;
}

int cmd_chat(int argc, char **argv) {
    cli_args a = {argc, 1, argv, "chat"};
    const char *model_path = NULL, *system = NULL;
    long n_predict = 512, threads = 2, n_ctx = 4096;
    rp_sampler_params sp = rp_sampler_default_params();
    for (; a.i < argc; a.i++) {
        double d;
        if (cli_is(&a, "-h", "--help")) {
            printf("usage: reprise chat -m MODEL.gguf [--system TEXT] [-n N] [-c CTX] [-t THREADS] [--temp T] [--seed S]\n"
                   "Type a message and press enter; an empty line or EOF (Ctrl-D) ends the chat.\n"
                   "Each turn re-renders the conversation with the chat template and computes only the\n"
                   "tokens that are not already in the KV cache.\n");
            return 0;
        } else if (cli_is(&a, "-m", "--model")) { if (!cli_str(&a, &model_path)) return 2; }
        else if (cli_is(&a, "--system", "-sys")) { if (!cli_str(&a, &system)) return 2; }
        else if (cli_is(&a, "-n", "--n-predict")) { if (!cli_int(&a, 1, 1 << 20, &n_predict)) return 2; }
        else if (cli_is(&a, "-c", "--ctx-size")) { if (!cli_int(&a, 64, 1 << 24, &n_ctx)) return 2; }
        else if (cli_is(&a, "-t", "--threads")) { if (!cli_int(&a, 1, 256, &threads)) return 2; }
        else if (cli_is(&a, "--temp", NULL)) { if (!cli_float(&a, 0, 100, &d)) return 2; sp.temp = (float)d; }
        else if (cli_is(&a, "--seed", "-s")) { if (!cli_u64(&a, &sp.seed)) return 2; }
        else return cli_unknown(&a);
    }
    if (!model_path) { fprintf(stderr, "reprise chat: -m MODEL.gguf is required\n"); return 2; }
    rp_model *m = NULL;
    rp_ctx *ctx = NULL;
    rp_session *s = NULL;
    rp_token *hist = NULL, *toks = NULL;
    rp_chat_msg *msgs = calloc(MAX_MSGS, sizeof *msgs);
    char **owned = calloc(MAX_MSGS, sizeof *owned);
    int rc = 1;
    rp_status st = cli_model_load(model_path, rp_model_default_params(), &m);
    if (st != RP_OK) { rc = cli_fail("chat", model_path, st); goto done; }
    if (!m->tok || !msgs || !owned) { fprintf(stderr, "reprise chat: model has no tokenizer\n"); goto done; }
    if (n_ctx > m->hp.n_ctx_train) n_ctx = m->hp.n_ctx_train;
    rp_ctx_params cp = rp_ctx_default_params();
    cp.n_threads = (int)threads;
    cp.n_outputs = 1;
    cp.n_ctx_max = (int32_t)n_ctx;
    if ((st = rp_ctx_create(m, cp, &ctx)) != RP_OK) { rc = cli_fail("chat", "context", st); goto done; }
    rp_session_params spp = rp_session_default_params();
    spp.n_ctx = (int32_t)n_ctx;
    spp.sampler = sp;
    if ((st = rp_session_create(ctx, spp, &s)) != RP_OK) { rc = cli_fail("chat", "session", st); goto done; }
    hist = malloc(sizeof *hist * (size_t)n_ctx);
    if (!hist) goto done;
    int32_t n_hist = 0;
    size_t n_msgs = 0;
    if (system) msgs[n_msgs++] = (rp_chat_msg){.role = "system", .content = system};
    fprintf(stderr, "reprise chat: %s, template %s. Empty line or Ctrl-D quits.\n", m->name, rp_chat_format_name(m->chat));
    char line[8192];
    rp_tokenize_opts to = {.add_bos = rp_tokenizer_add_bos(m->tok), .parse_special = true};
    for (;;) {
        fprintf(stderr, "> ");
        if (!fgets(line, sizeof line, stdin)) break;
        line[strcspn(line, "\n")] = 0;
        if (!line[0]) break;
        if (n_msgs + 2 >= MAX_MSGS) { fprintf(stderr, "reprise chat: conversation too long\n"); break; }
        owned[n_msgs] = strdup(line);
        msgs[n_msgs] = (rp_chat_msg){.role = "user", .content = owned[n_msgs]};
        n_msgs++;
        char *prompt = NULL;
        rp_chat_opts co = {.add_generation_prompt = true, .enable_thinking = false};
        if (m->chat == RP_CHAT_UNKNOWN || rp_chat_apply(m->chat, msgs, n_msgs, &co, &prompt) != RP_OK)
            prompt = plain_transcript(msgs, n_msgs);
        if (!prompt) break;
        size_t plen = strlen(prompt), cap = plen + 8, n = 0;
        free(toks);
        toks = malloc(sizeof *toks * cap);
        if (!toks || rp_tokenizer_encode(m->tok, prompt, plen, to, toks, cap, &n) != RP_OK) { free(prompt); break; }
        free(prompt);
        /* reuse the longest common prefix already in the cache */
        int32_t common = 0;
        while (common < n_hist && (size_t)common < n && hist[common] == toks[common]) common++;
        if ((size_t)common == n) common--;   /* always recompute the last token to get its logits */
        if ((long)n + n_predict > n_ctx) { fprintf(stderr, "reprise chat: context full (-c to raise)\n"); break; }
        rp_kv_truncate(rp_session_kv(s), common);
        if ((st = rp_session_feed(s, toks + common, (int32_t)n - common)) != RP_OK) { cli_fail("chat", "prompt", st); break; }
        memcpy(hist, toks, sizeof *toks * n);
        n_hist = (int32_t)n;
        rp_detok dt;
        rp_detok_init(&dt, m->tok, false);
        dt.at_start = false;
        size_t rcap = 1024, rlen = 0;
        char *reply = malloc(rcap), piece[4096];
        for (long g = 0; g < n_predict && reply; g++) {
            rp_token t = rp_session_sample(s);
            if (rp_tokenizer_is_eog(m->tok, t)) break;
            int w = rp_detok_push(&dt, t, piece, sizeof piece);
            if (w > 0) {
                fwrite(piece, 1, (size_t)w, stdout);
                fflush(stdout);
                if (rlen + (size_t)w + 1 > rcap) { char *nr = realloc(reply, rcap *= 2); if (!nr) break; reply = nr; }
                memcpy(reply + rlen, piece, (size_t)w);
                rlen += (size_t)w;
            }
            if (n_hist >= n_ctx || rp_session_feed(s, &t, 1) != RP_OK) break;
            hist[n_hist++] = t;
        }
        putchar('\n');
        if (!reply) break;
        reply[rlen] = 0;
        owned[n_msgs] = reply;
        msgs[n_msgs] = (rp_chat_msg){.role = "assistant", .content = reply};
        n_msgs++;
    }
    rc = 0;
done:
    if (owned)
        for (size_t i = 0; i < MAX_MSGS; i++) free(owned[i]);
    free(owned);
    free(msgs);
    free(hist);
    free(toks);
    rp_session_free(s);
    rp_ctx_free(ctx);
    rp_model_free(m);
    return rc;
}
