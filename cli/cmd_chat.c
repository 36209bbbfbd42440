/* cmd_chat.c — `reprise chat`: interactive chat using the model's chat template; each turn feeds only new tokens. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "gen_args.h"
#include "model/forward.h"
#include "model/model.h"
#include "model/session.h"
#include "progress.h"
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

/* Appends to a growing buffer (kept NUL-terminable); frees it and sets NULL when out of memory. */
static void append(char **buf, size_t *len, size_t *cap, const char *p, size_t n) {
    if (!*buf) return;
    if (*len + n + 1 > *cap) {
        size_t nc = *cap * 2 > *len + n + 1 ? *cap * 2 : *len + n + 1;
        char *nb = realloc(*buf, nc);
        if (!nb) { free(*buf); *buf = NULL; return; }
        *buf = nb;
        *cap = nc;
    }
    memcpy(*buf + *len, p, n);
    *len += n;
}

/* Ctrl-C: during a reply it stops the reply; at the prompt it ends the chat
 * (exit 130, as llama-cli does). Ending from the handler leaves no window in
 * which a Ctrl-C between printing the prompt and blocking in read() is lost. */
static volatile sig_atomic_t g_sigint, g_at_prompt;

static void on_sigint(int sig) {
    (void)sig;
    if (g_at_prompt) {
        (void)!write(STDERR_FILENO, "\n", 1);
        _exit(130);
    }
    g_sigint = 1;
}

static void catch_sigint(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;   /* reads and writes carry on; the reply loop polls g_sigint */
    sigaction(SIGINT, &sa, NULL);
}

static void chat_usage(void) {
    printf("usage: reprise chat -m MODEL.gguf [options]\n"
           "  -m, --model PATH        GGUF model\n"
           "  -sys, --system TEXT     system prompt (also --system-prompt)\n"
           "  -n, --n-predict N       longest reply in tokens (default 512; -1 = until end-of-generation or a full context)\n"
           "  -c, --ctx-size N        context size (default 4096; at most the model's training context)\n"
           "  -t, --threads N         compute threads (default 2)\n"
           "%s%s"
           "  -cnv, --conversation    accepted (chat is always a conversation)\n"
           "Type a message and press enter. An empty line is ignored; /exit or EOF (Ctrl-D) ends the chat.\n"
           "Ctrl-C during a reply stops it (what was written stays in the conversation); Ctrl-C at the prompt\n"
           "ends the chat. Each turn re-renders the conversation with the chat template and computes only the\n"
           "tokens that are not already in the KV cache.\n",
           cli_sampling_help, cli_gen_help);
}

int cmd_chat(int argc, char **argv) {
    cli_args a = {argc, 1, argv, "chat"};
    const char *model_path = NULL, *system = NULL;
    long threads = 2, n_ctx = 4096;
    bool ctx_given = false;
    cli_gen g = cli_gen_defaults(512);
    for (; a.i < argc; a.i++) {
        int r;
        if (cli_is(&a, "-h", "--help")) { chat_usage(); return 0; }
        else if ((r = cli_gen_arg(&a, &g)) != 0) { if (r < 0) return 2; }
        else if (cli_is(&a, "-m", "--model")) { if (!cli_str(&a, &model_path)) return 2; }
        else if (cli_is(&a, "--system", "-sys") || cli_is(&a, "--system-prompt", NULL)) { if (!cli_str(&a, &system)) return 2; }
        else if (cli_is(&a, "-c", "--ctx-size")) { if (!cli_int(&a, 64, 1 << 24, &n_ctx)) return 2; ctx_given = true; }
        else if (cli_is(&a, "-t", "--threads")) { if (!cli_int(&a, 1, 256, &threads)) return 2; }
        else if (cli_is(&a, "-cnv", "--conversation") || cli_is(&a, "-i", "--interactive")) { /* always */ }
        else return cli_unknown(&a);
    }
    if (!model_path) { fprintf(stderr, "reprise chat: -m MODEL.gguf is required\n"); return 2; }
    if (g.n_predict == 0) { fprintf(stderr, "reprise chat: -n must be at least 1 (or -1)\n"); return 2; }
    const int kv_type = cli_gen_kv_type(a.cmd, &g);
    if (kv_type < 0) return 2;
    rp_model *m = NULL;
    rp_ctx *ctx = NULL;
    rp_session *s = NULL;
    rp_token *hist = NULL, *toks = NULL;
    rp_chat_msg *msgs = calloc(MAX_MSGS, sizeof *msgs);
    char **owned = calloc(MAX_MSGS, sizeof *owned);
    char *line = NULL;
    size_t line_cap = 0;
    int rc = 1;
    rp_model_params mp = rp_model_default_params();
    mp.n_threads = (int)threads;
    rp_status st = cli_model_load(model_path, mp, &m);
    if (st != RP_OK) { rc = cli_fail("chat", model_path, st); goto done; }
    if (!msgs || !owned) goto done;
    if (!m->tok) { fprintf(stderr, "reprise chat: model has no tokenizer\n"); goto done; }
    if (m->hp.n_ctx_train > 0 && n_ctx > m->hp.n_ctx_train) {
        if (ctx_given)
            fprintf(stderr, "reprise chat: note: -c %ld is more than the model's training context; using %d\n", n_ctx,
                    m->hp.n_ctx_train);
        n_ctx = m->hp.n_ctx_train;
    }
    const long n_predict = g.n_predict < 0 ? n_ctx : g.n_predict;   /* -1: until end-of-generation or a full context */
    rp_ctx_params cp = rp_ctx_default_params();
    cp.n_threads = (int)threads;
    cp.n_outputs = 1;
    cp.n_ctx_max = (int32_t)n_ctx;
    if ((st = rp_ctx_create(m, cp, &ctx)) != RP_OK) { rc = cli_fail("chat", "context", st); goto done; }
    rp_session_params spp = rp_session_default_params();
    spp.n_ctx = (int32_t)n_ctx;
    spp.kv_type = (rp_type)kv_type;
    spp.sampler = g.sp;
    if ((st = rp_session_create(ctx, spp, &s)) != RP_OK) { rc = cli_fail("chat", "session", st); goto done; }
    hist = malloc(sizeof *hist * (size_t)n_ctx);
    if (!hist) goto done;
    int32_t n_hist = 0;
    size_t n_msgs = 0;
    if (system) msgs[n_msgs++] = (rp_chat_msg){.role = "system", .content = system};
    fprintf(stderr, "reprise chat: %s, template %s. /exit or Ctrl-D quits; Ctrl-C stops a reply.\n", m->name,
            rp_chat_format_name(m->chat));
    rp_tokenize_opts to = {.add_bos = rp_tokenizer_add_bos(m->tok), .parse_special = true};
    rc = 0;
    catch_sigint();
    for (;;) {
        g_at_prompt = 1;   /* before the prompt shows: a Ctrl-C as soon as it is seen must find it set */
        fprintf(stderr, "> ");
        errno = 0;
        ssize_t len = getline(&line, &line_cap, stdin);   /* a whole line, however long (a paste is one turn) */
        g_at_prompt = 0;
        g_sigint = 0;
        if (len < 0) {
            if (errno == ENOMEM) { fprintf(stderr, "reprise chat: out of memory reading the line\n"); rc = 1; }
            break;   /* EOF (Ctrl-D) */
        }
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
        if (strspn(line, " \t") == (size_t)len) continue;   /* an empty line: ask again */
        if (!strcmp(line, "/exit")) break;
        if (n_msgs + 2 >= MAX_MSGS) { fprintf(stderr, "reprise chat: conversation too long\n"); break; }
        owned[n_msgs] = strdup(line);
        if (!owned[n_msgs]) { rc = 1; break; }
        msgs[n_msgs] = (rp_chat_msg){.role = "user", .content = owned[n_msgs]};
        n_msgs++;
        char *prompt = NULL;
        rp_chat_opts co = {.add_generation_prompt = true, .enable_thinking = false};
        if (m->chat == RP_CHAT_UNKNOWN || rp_chat_apply(m->chat, msgs, n_msgs, &co, &prompt) != RP_OK)
            prompt = plain_transcript(msgs, n_msgs);
        if (!prompt) { rc = 1; break; }
        size_t plen = strlen(prompt), cap = plen + 8, n = 0;
        free(toks);
        toks = malloc(sizeof *toks * cap);
        if (!toks || rp_tokenizer_encode(m->tok, prompt, plen, to, toks, cap, &n) != RP_OK) { free(prompt); rc = 1; break; }
        free(prompt);
        if ((long)n >= n_ctx) {   /* this message does not fit: say so and leave the conversation as it was */
            fprintf(stderr, "reprise chat: the conversation with this message is %zu tokens, the context %ld (-c to raise); "
                            "message dropped\n", n, n_ctx);
            free(owned[--n_msgs]);
            owned[n_msgs] = NULL;
            continue;
        }
        /* reuse the longest common prefix already in the cache */
        int32_t common = 0;
        while (common < n_hist && (size_t)common < n && hist[common] == toks[common]) common++;
        if ((size_t)common == n) common--;   /* always recompute the last token to get its logits */
        rp_kv_truncate(rp_session_kv(s), common);
        if ((st = rp_session_feed(s, toks + common, (int32_t)n - common)) != RP_OK) { rc = cli_fail("chat", "prompt", st); break; }
        memcpy(hist, toks, sizeof *toks * n);
        n_hist = (int32_t)n;
        rp_detok dt;
        rp_detok_init(&dt, m->tok, false);
        dt.at_start = false;
        size_t rcap = 1024, rlen = 0;
        char *reply = malloc(rcap), piece[4096];
        bool full = false;
        for (long k = 0; k < n_predict && reply && !g_sigint; k++) {
            rp_token t = rp_session_sample(s);
            if (!g.ignore_eos && rp_tokenizer_is_eog(m->tok, t)) break;
            const int w = rp_detok_push(&dt, t, piece, sizeof piece);
            if (w > 0) {
                fwrite(piece, 1, (size_t)w, stdout);
                fflush(stdout);
                append(&reply, &rlen, &rcap, piece, (size_t)w);
            }
            if (n_hist >= n_ctx) { full = true; break; }
            if (rp_session_feed(s, &t, 1) != RP_OK) break;
            hist[n_hist++] = t;
        }
        const int w = rp_detok_flush(&dt, piece, sizeof piece);
        if (w > 0) {
            fwrite(piece, 1, (size_t)w, stdout);
            append(&reply, &rlen, &rcap, piece, (size_t)w);
        }
        putchar('\n');
        fflush(stdout);
        if (g_sigint) fprintf(stderr, "[reply stopped]\n");
        else if (full) fprintf(stderr, "[context full: -c to raise]\n");
        if (!reply) { rc = 1; break; }
        reply[rlen] = 0;
        owned[n_msgs] = reply;
        msgs[n_msgs] = (rp_chat_msg){.role = "assistant", .content = reply};
        n_msgs++;
    }
    signal(SIGINT, SIG_DFL);
done:
    if (owned)
        for (size_t i = 0; i < MAX_MSGS; i++) free(owned[i]);
    free(owned);
    free(msgs);
    free(hist);
    free(toks);
    free(line);
    rp_session_free(s);
    rp_ctx_free(ctx);
    rp_model_free(m);
    return rc;
}
