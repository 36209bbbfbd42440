/* cmd_chat.c — `reprise chat`: interactive chat using the model's chat template; each turn feeds only new tokens
 * (over the public API). */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "gen_args.h"
#include "progress.h"
#include "reprise.h"

#define MAX_MSGS 4096

/* Plain transcript for models without any chat template (chat says so at start-up). */
static char *plain_transcript(const rp_chat_message *msgs, size_t n) {
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

/* The conversation as prompt text: the chat template, else (the model has none) a plain transcript; add_gen ends it
 * with the assistant's header (the prompt of a reply). A template that fails on the conversation is an error, not a
 * fallback. */
/* --think on|off: the template's enable_thinking (-1: not given, as rp_chat_render) */
static rp_chat_vars g_vars = {.enable_thinking = -1};

static char *render_as(const rp_model *m, const rp_chat_message *msgs, size_t n, bool add_gen) {
    size_t need = 0;
    rp_status st = rp_chat_render_vars(m, msgs, (int32_t)n, NULL, add_gen, &g_vars, NULL, 0, &need);
    if (st == RP_ERR_UNSUPPORTED) {
        char *t = plain_transcript(msgs, n);
        if (t && !add_gen) t[strlen(t) - strlen("Assistant:")] = 0;
        return t;
    }
    if (st != RP_OK && st != RP_ERR_FULL) {
        fprintf(stderr, "reprise chat: %s\n", rp_last_error());
        return NULL;
    }
    char *text = malloc(need + 1);
    if (text && rp_chat_render_vars(m, msgs, (int32_t)n, NULL, add_gen, &g_vars, text, need + 1, &need) != RP_OK) {
        free(text);
        return NULL;
    }
    return text;
}

static char *render(const rp_model *m, const rp_chat_message *msgs, size_t n) { return render_as(m, msgs, n, true); }

/* Tokens of the first n messages rendered without the generation prompt (*out malloc'd), or -1. */
static int32_t tokens_of(const rp_model *m, const rp_chat_message *msgs, size_t n, rp_token **out) {
    *out = NULL;
    char *text = render_as(m, msgs, n, false);
    if (!text) return -1;
    const size_t len = strlen(text);
    const int32_t cap = len + 8 < INT32_MAX ? (int32_t)(len + 8) : INT32_MAX;
    int32_t k = 0;
    *out = malloc(sizeof **out * (size_t)cap);
    if (!*out || rp_tokenize(m, text, len, true, true, *out, cap, &k) != RP_OK) k = -1;
    free(text);
    return k;
}

/* The conversation no longer leaves room for a reply: drops its oldest turns (after the system message) and, when
 * the sequence holds them as the template renders them, shifts the kept KV down over them (re-rotated, not
 * recomputed). Returns the messages dropped (0: none could be). */
static size_t drop_oldest_turns(const rp_model *m, rp_seq *s, rp_chat_message *msgs, char **owned, size_t *n_msgs,
                                size_t first, int32_t *shifted) {
    *shifted = 0;
    /* a turn: a user message and what answers it, up to the next user message; the newest user message stays */
    size_t end = first;
    if (end < *n_msgs && !strcmp(msgs[end].role, "user")) end++;
    while (end < *n_msgs && strcmp(msgs[end].role, "user")) end++;
    if (end <= first || end >= *n_msgs) return 0;
    rp_token *head = NULL, *upto = NULL;
    const int32_t nh = first > 0 ? tokens_of(m, msgs, first, &head) : 0;
    const int32_t nu = tokens_of(m, msgs, end, &upto);
    const int32_t n_past = rp_seq_n_past(s);
    const rp_token *hist = rp_seq_tokens(s);
    int32_t keep = nh;
    if (first == 0) keep = (nu > 0 && n_past > 0 && hist[0] == upto[0] && upto[0] == rp_token_bos(m)) ? 1 : 0;
    bool stable = nh >= 0 && nu > keep && nu < n_past && !memcmp(hist, upto, sizeof *hist * (size_t)nu) &&
                  (first == 0 || !memcmp(hist, head, sizeof *hist * (size_t)nh));
    if (stable && rp_seq_shift(s, keep, nu - keep) == RP_OK) *shifted = nu - keep;
    free(head);
    free(upto);
    const size_t dropped = end - first;
    for (size_t i = first; i < end; i++) free(owned[i]);
    memmove(msgs + first, msgs + end, sizeof *msgs * (*n_msgs - end));
    memmove(owned + first, owned + end, sizeof *owned * (*n_msgs - end));
    for (size_t i = *n_msgs - dropped; i < *n_msgs; i++) owned[i] = NULL;
    *n_msgs -= dropped;
    return dropped;
}

/* The reply as it streams: printed, and kept for the conversation. */
typedef struct reply {
    char *text;
    size_t len, cap;
    bool oom;
} reply;

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
           "%s%s%s"
           "  --think on|off          the template's enable_thinking (default: the template's own; Qwen3 thinks; off adds an empty think block)\n"
           "  -cnv, --conversation    accepted (chat is always a conversation)\n"
           "Type a message and press enter. An empty line is ignored; /exit or EOF (Ctrl-D) ends the chat.\n"
           "Ctrl-C during a reply stops it (what was written stays in the conversation); Ctrl-C at the prompt\n"
           "ends the chat. Each turn re-renders the conversation with the chat template and computes only the\n"
           "tokens that are not already in the KV cache.\n",
           cli_sampling_help, cli_gen_help, cli_gpu_help);
}

/* Prints a reply's text as it comes and keeps it; a Ctrl-C stops the reply. */
static bool on_piece(void *user, rp_token tok, const char *text, size_t len) {
    (void)tok;
    reply *r = user;
    if (len) {
        fwrite(text, 1, len, stdout);
        fflush(stdout);
        if (!r->oom && r->len + len + 1 > r->cap) {
            const size_t nc = r->cap * 2 > r->len + len + 1 ? r->cap * 2 : r->len + len + 1;
            char *nb = realloc(r->text, nc);
            if (nb) {
                r->text = nb;
                r->cap = nc;
            } else {
                r->oom = true;
            }
        }
        if (!r->oom) {
            memcpy(r->text + r->len, text, len);
            r->len += len;
            r->text[r->len] = 0;
        }
    }
    return !g_sigint;
}

int cmd_chat(int argc, char **argv) {
    cli_args a = {argc, 1, argv, "chat"};
    const char *model_path = NULL, *system = NULL;
    long threads = 2, n_ctx = 4096;
    bool ctx_given = false;
    cli_gen g = cli_gen_defaults(512);
    cli_gpu gpu = cli_gpu_defaults();
    for (; a.i < argc; a.i++) {
        int r;
        if (cli_is(&a, "-h", "--help")) { chat_usage(); return 0; }
        else if ((r = cli_gen_arg(&a, &g)) != 0) { if (r < 0) return 2; }
        else if ((r = cli_gpu_arg(&a, &gpu)) != 0) { if (r < 0) return 2; }
        else if (cli_is(&a, "-m", "--model")) { if (!cli_str(&a, &model_path)) return 2; }
        else if (cli_is(&a, "--system", "-sys") || cli_is(&a, "--system-prompt", NULL)) { if (!cli_str(&a, &system)) return 2; }
        else if (cli_is(&a, "-c", "--ctx-size")) { if (!cli_int(&a, 64, 1 << 24, &n_ctx)) return 2; ctx_given = true; }
        else if (cli_is(&a, "-t", "--threads")) { if (!cli_int(&a, 1, 256, &threads)) return 2; }
        else if (cli_is(&a, "--think", NULL)) {
            const char *v;
            if (!cli_str(&a, &v)) return 2;
            if (strcmp(v, "on") && strcmp(v, "off")) { fprintf(stderr, "reprise chat: --think takes on or off\n"); return 2; }
            g_vars.enable_thinking = !strcmp(v, "on");
        }
        else if (cli_is(&a, "-cnv", "--conversation") || cli_is(&a, "-i", "--interactive")) { /* always */ }
        else return cli_unknown(&a);
    }
    if (!model_path) { fprintf(stderr, "reprise chat: -m MODEL.gguf is required\n"); return 2; }
    if (g.n_predict == 0) { fprintf(stderr, "reprise chat: -n must be at least 1 (or -1)\n"); return 2; }
    const int kv_type = cli_gen_kv_type(a.cmd, &g);
    if (kv_type < 0) return 2;
    rp_model *m = NULL;
    rp_engine *e = NULL;
    rp_seq *s = NULL;
    rp_token *toks = NULL;
    rp_chat_message *msgs = calloc(MAX_MSGS, sizeof *msgs);
    char **owned = calloc(MAX_MSGS, sizeof *owned);
    char *line = NULL;
    size_t line_cap = 0;
    int rc = 1;
    rp_model_params mp = rp_model_default_params();
    mp.n_threads = (int)threads;
    cli_gpu_params(&gpu, kv_type, &mp);
    rp_status st = cli_model_load(model_path, mp, &m);
    if (st != RP_OK) { rc = cli_fail("chat", model_path, st); goto done; }
    cli_gpu_note("chat", m, &gpu);
    if (!msgs || !owned) goto done;
    const rp_model_desc md = rp_model_describe(m);
    if (!md.has_tokenizer) { fprintf(stderr, "reprise chat: model has no tokenizer\n"); goto done; }
    if (cli_gen_chat_template("chat", m, &g)) goto done;
    if (md.n_ctx_train > 0 && n_ctx > md.n_ctx_train) {
        if (ctx_given)
            fprintf(stderr, "reprise chat: note: -c %ld is more than the model's training context; using %d\n", n_ctx,
                    md.n_ctx_train);
        n_ctx = md.n_ctx_train;
    }
    cli_kv_note("chat", m, n_ctx, kv_type, rp_engine_default_params().n_batch, g.swa_full);   /* before the KV is allocated */
    /* a sequence continued turn by turn: no prompt goes through the chunk cache */
    rp_engine_params ep = rp_engine_default_params();
    ep.n_threads = (int)threads;
    ep.n_ctx = (int32_t)n_ctx;
    ep.kv_type = (rp_kv_type)kv_type;
    ep.swa_full = g.swa_full;
    ep.reuse = RP_REUSE_NONE;
    if ((st = rp_engine_create(m, &ep, &e)) != RP_OK) { rc = cli_fail("chat", "engine", st); goto done; }
    if ((st = rp_seq_create(e, &s)) != RP_OK) { rc = cli_fail("chat", "session", st); goto done; }
    rp_gen_opts o = rp_gen_default_opts();
    o.sampling = g.sp;   /* the same every turn: the sampler's random stream goes on across the conversation */
    o.max_tokens = g.n_predict < 0 ? -1 : (int32_t)g.n_predict;   /* -1: until end-of-generation or a full context */
    o.ignore_eos = g.ignore_eos;
    o.reuse = RP_REUSE_NONE;
    o.persist = false;
    o.on_token = on_piece;
    size_t n_msgs = 0;
    if (system) msgs[n_msgs++] = (rp_chat_message){.role = "system", .content = system};
    if (rp_chat_template_check(m) == RP_ERR_UNSUPPORTED)
        fprintf(stderr, "reprise chat: note: the model has no chat template; turns are a plain \"User: ...\" transcript "
                        "(give one with --chat-template NAME|FILE)\n");
    fprintf(stderr, "reprise chat: %s, template %s (%s), context %d tokens (KV cache up to %.1f MiB, %s). /exit or "
                    "Ctrl-D quits; Ctrl-C stops a reply.\n", md.name, rp_chat_template_name(m),
            rp_model_describe(m).chat_format, rp_engine_n_ctx(e), (double)rp_engine_kv_bytes(e) / (1024.0 * 1024.0),
            rp_kv_type_name((rp_kv_type)kv_type));
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
        msgs[n_msgs] = (rp_chat_message){.role = "user", .content = owned[n_msgs]};
        n_msgs++;
        /* room for the reply: -n tokens (at most half the context), 256 when -n is -1 */
        const int32_t nctx = rp_engine_n_ctx(e);
        int32_t reserve = g.n_predict > 0 ? (int32_t)g.n_predict : 256;
        if (reserve > nctx / 2) reserve = nctx / 2;
        int32_t n = 0;
        bool failed = false;
        for (;;) {
            char *prompt = render(m, msgs, n_msgs);
            if (!prompt) { failed = true; break; }
            const size_t plen = strlen(prompt);
            int32_t cap = plen + 8 < INT32_MAX ? (int32_t)(plen + 8) : INT32_MAX;
            free(toks);
            toks = malloc(sizeof *toks * (size_t)cap);
            if (!toks || rp_tokenize(m, prompt, plen, true, true, toks, cap, &n) != RP_OK) { free(prompt); failed = true; break; }
            free(prompt);
            if (n + reserve <= nctx) break;
            /* the context is full: the oldest turns go, the rest of the conversation stays */
            int32_t shifted = 0;
            const size_t dropped = drop_oldest_turns(m, s, msgs, owned, &n_msgs, system ? 1 : 0, &shifted);
            if (dropped == 0) break;
            if (shifted > 0)
                fprintf(stderr, "[context full: dropped the %zu oldest message%s (%d tokens); the rest of the "
                                "conversation's KV moved down, not recomputed]\n", dropped, dropped == 1 ? "" : "s", shifted);
            else
                fprintf(stderr, "[context full: dropped the %zu oldest message%s]\n", dropped, dropped == 1 ? "" : "s");
        }
        if (failed) { rc = 1; break; }
        if ((long)n >= nctx) {   /* this message alone does not fit: say so and leave the conversation as it was */
            fprintf(stderr, "reprise chat: the conversation with this message is %d tokens, the context %d (-c to raise); "
                            "message dropped\n", n, nctx);
            free(owned[--n_msgs]);
            owned[n_msgs] = NULL;
            continue;
        }
        /* keep the longest common prefix already in the sequence, feed the rest */
        const rp_token *hist = rp_seq_tokens(s);
        const int32_t n_hist = rp_seq_n_past(s);
        int32_t common = 0;
        while (common < n_hist && common < n && hist[common] == toks[common]) common++;
        if (common == n) common--;   /* always recompute the last token to get its logits */
        if ((st = rp_seq_truncate(s, common)) != RP_OK || (st = rp_seq_feed(s, toks + common, n - common)) != RP_OK) {
            rc = cli_fail("chat", "prompt", st);
            break;
        }
        reply r = {.cap = 1024};
        r.text = malloc(r.cap);
        if (r.text) r.text[0] = 0;
        o.user = &r;
        rp_gen_stats gs = {0};
        st = g_sigint || !r.text ? RP_OK : rp_seq_generate(s, &o, NULL, 0, NULL, &gs);
        putchar('\n');
        fflush(stdout);
        if (st != RP_OK) {
            free(r.text);
            rc = cli_fail("chat", "reply", st);
            break;
        }
        if (g_sigint) fprintf(stderr, "[reply stopped]\n");
        else if (gs.stop == RP_STOP_CONTEXT) fprintf(stderr, "[context full: -c to raise]\n");
        if (!r.text || r.oom) { free(r.text); rc = 1; break; }
        owned[n_msgs] = r.text;
        msgs[n_msgs] = (rp_chat_message){.role = "assistant", .content = r.text};
        n_msgs++;
    }
    signal(SIGINT, SIG_DFL);
done:
    if (owned)
        for (size_t i = 0; i < MAX_MSGS; i++) free(owned[i]);
    free(owned);
    free(msgs);
    free(toks);
    free(line);
    rp_seq_free(s);
    rp_engine_free(e);
    rp_model_free(m);
    return rc;
}
