/* lazy_grammar.c — the grammar of a tool call that takes over once the reply opens one (tool_choice "auto" with
 * strict tools): the reply's text is watched in a small window until the format's opening is complete; then the
 * grammar accepts the text from the opening on and masks every later token. */
#include "server/lazy_grammar.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

#define PIECE_MAX 256   /* longer pieces are never allowed by a grammar (grammar_match.c) */
#define WIN_CAP 1024    /* the reply's text kept while no opening is complete */
#define WIN_KEEP 64     /* kept when the window slides: more than any opening */

static bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* The first complete occurrence of lit in t[0..n), or -1; *partial: where a proper prefix of lit ends the text
 * (-1: none). */
static long find_lit(const char *t, size_t n, const char *lit, long *partial) {
    const size_t l = strlen(lit);
    *partial = -1;
    for (size_t i = 0; i + l <= n; i++)
        if (t[i] == lit[0] && memcmp(t + i, lit, l) == 0) return (long)i;
    for (size_t k = l - 1 < n ? l - 1 : n; k > 0; k--)
        if (memcmp(t + n - k, lit, k) == 0) {
            *partial = (long)(n - k);
            break;
        }
    return -1;
}

long rp_srv_tool_opening(rp_chat_format f, const char *text, size_t len, size_t *end, long *partial) {
    long part = -1, at = -1;
    *end = 0;
    if (f == RP_CHAT_CHATML || f == RP_CHAT_MISTRAL) {
        const char *lit = f == RP_CHAT_CHATML ? "<tool_call>" : "[TOOL_CALLS]";
        at = find_lit(text, len, lit, &part);
        if (at >= 0) *end = (size_t)at + strlen(lit);
    } else if (f == RP_CHAT_LLAMA3) {
        static const char key[] = "\"name\"";
        for (size_t p = 0; p < len && at < 0; p++) {
            if (text[p] != '{') continue;
            size_t q = p + 1, ws = 0;
            while (q < len && is_ws(text[q]) && ws <= 8) q++, ws++;
            if (ws > 8) continue;
            const size_t have = len - q < 6 ? len - q : 6;
            if (memcmp(text + q, key, have) != 0) continue;
            if (have < 6) {   /* the text ends inside it */
                part = (long)p;
                break;
            }
            at = (long)p;
            *end = q + 6;
        }
    }
    if (partial) *partial = at >= 0 ? -1 : part;
    return at;
}

struct rp_srv_lazy {
    const rp_model *m;
    rp_grammar_state *gs;
    rp_chat_format f;
    bool started;     /* the first call took the prompt */
    bool active;      /* the grammar took over */
    bool off;         /* it took over and then failed, or (Llama 3) the reply opened with no call: unconstrained for
                         the rest */
    bool think;       /* ChatML: inside a <think> block */
    bool slid;        /* the window dropped the reply's start */
    int32_t n_seen;   /* tokens of hist read */
    char *win;        /* [WIN_CAP + PIECE_MAX] the reply's recent text */
    size_t n_win;
    size_t scan;      /* win[scan..) may still hold (the start of) an opening */
};

rp_status rp_srv_lazy_new(const rp_model *m, rp_grammar_state *gs, rp_chat_format f, bool think_open,
                          rp_srv_lazy **out) {
    *out = NULL;
    rp_srv_lazy *z = calloc(1, sizeof *z);
    if (z) z->win = malloc(WIN_CAP + PIECE_MAX);
    if (!z || !z->win) {
        rp_srv_lazy_free(z);
        return rp_errorf(RP_ERR_NOMEM, "server: out of memory");
    }
    z->m = m;
    z->gs = gs;
    z->f = f;
    z->think = think_open && f == RP_CHAT_CHATML;
    *out = z;
    return RP_OK;
}

void rp_srv_lazy_free(rp_srv_lazy *z) {
    if (!z) return;
    free(z->win);
    free(z);
}

bool rp_srv_lazy_active(const rp_srv_lazy *z) { return z && z->active; }

/* The grammar from the opening at win[at] on: it takes the text from there, or the opening does not count. */
static bool take_over(rp_srv_lazy *z, size_t at) {
    if (rp_grammar_state_reset(z->gs) != RP_OK) return false;
    if (rp_grammar_accept_bytes(z->gs, z->win + at, z->n_win - at) != RP_OK) return false;
    z->active = true;
    return true;
}

/* Llama 3: a JSON call is the whole reply (after whitespace and an optional <|python_tag|>), the trigger llama.cpp
 * anchors at the reply's start too: an object further into prose ({"name": in an explanation) stays text, free.
 * Waits while the start is whitespace or a prefix of the tag / the opening; then takes over or lets go for good. */
static void watch_llama3(rp_srv_lazy *z) {
    static const char tag[] = "<|python_tag|>";
    const size_t tl = sizeof tag - 1;
    if (z->slid) { z->off = true; return; }   /* a reply that long did not open with a call */
    size_t i = 0;
    while (i < z->n_win && is_ws(z->win[i])) i++;
    const size_t rest = z->n_win - i;
    if (rest == 0) return;
    if (memcmp(z->win + i, tag, rest < tl ? rest : tl) == 0) {
        if (rest < tl) return;
        i += tl;
        while (i < z->n_win && is_ws(z->win[i])) i++;
        if (i == z->n_win) return;
    }
    size_t end = 0;
    long part = -1;
    const long at = rp_srv_tool_opening(z->f, z->win + i, z->n_win - i, &end, &part);
    if (at == 0) {
        if (!take_over(z, i)) z->off = true;
    } else if (part != 0 || at > 0) {
        z->off = true;   /* the reply opened with something else */
    }
}

/* Looks for a complete opening from scan on (ChatML: outside <think> blocks). */
static void watch(rp_srv_lazy *z) {
    if (z->f == RP_CHAT_LLAMA3) {
        if (!z->active && !z->off) watch_llama3(z);
        return;
    }
    while (!z->active && z->scan < z->n_win) {
        const char *w = z->win + z->scan;
        const size_t n = z->n_win - z->scan;
        size_t end = 0;
        long part = -1, at;
        if (z->f == RP_CHAT_CHATML) {   /* the earliest of the three tags decides */
            long p1, p2, p3;
            const long t_open = find_lit(w, n, "<think>", &p1), t_close = find_lit(w, n, "</think>", &p2);
            at = rp_srv_tool_opening(z->f, w, n, &end, &p3);
            long first = -1;
            int which = 0;
            if (t_open >= 0) first = t_open, which = 1;
            if (t_close >= 0 && (first < 0 || t_close < first)) first = t_close, which = 2;
            if (at >= 0 && (first < 0 || at < first)) first = at, which = 3;
            if (which == 1 || which == 2) {
                z->think = which == 1;
                z->scan += (size_t)first + (which == 1 ? 7 : 8);
                continue;
            }
            if (which == 3 && z->think) {
                z->scan += end;
                continue;
            }
            part = p1;
            if (p2 >= 0 && (part < 0 || p2 < part)) part = p2;
            if (p3 >= 0 && (part < 0 || p3 < part)) part = p3;
        } else {
            at = rp_srv_tool_opening(z->f, w, n, &end, &part);
        }
        if (at < 0) {
            z->scan += part >= 0 ? (size_t)part : n;
            return;
        }
        if (take_over(z, z->scan + (size_t)at)) return;
        z->scan += (size_t)at + 1;   /* not a call the grammar takes: the text stays free, look further */
    }
}

static void add_text(rp_srv_lazy *z, rp_token t) {
    char piece[PIECE_MAX];
    int32_t n = rp_token_to_piece(z->m, t, false, piece, (int32_t)sizeof piece);
    if (n <= 0 || n > PIECE_MAX) return;
    if (z->n_win + (size_t)n > WIN_CAP) {   /* slide: keep the tail, which holds any opening still partial */
        const size_t from = z->n_win > WIN_KEEP ? z->n_win - WIN_KEEP : 0;
        memmove(z->win, z->win + from, z->n_win - from);
        z->n_win -= from;
        z->slid = z->slid || from > 0;
        z->scan = z->scan > from ? z->scan - from : 0;
    }
    memcpy(z->win + z->n_win, piece, (size_t)n);
    z->n_win += (size_t)n;
}

void rp_srv_lazy_on_logits(void *user, const rp_token *hist, int32_t n_hist, float *logits, int32_t n_vocab) {
    rp_srv_lazy *z = user;
    if (!z->started) {   /* hist is the prompt */
        z->started = true;
        z->n_seen = n_hist;
    }
    for (int32_t i = z->n_seen; i < n_hist && !z->off; i++) {
        if (z->active) {
            if (rp_grammar_accept_token(z->gs, hist[i]) != RP_OK) {   /* cannot happen under the mask: let go */
                z->active = false;
                z->off = true;
            }
            continue;
        }
        add_text(z, hist[i]);
        watch(z);
    }
    if (n_hist > z->n_seen) z->n_seen = n_hist;
    if (z->active && rp_grammar_mask(z->gs, logits, n_vocab) != RP_OK) {
        z->active = false;
        z->off = true;
    }
}

rp_status rp_srv_lazy_wrap(rp_chat_format f, const char *gbnf, char **out) {
    *out = NULL;
    const char *rule = f == RP_CHAT_LLAMA3    ? RP_SRV_LAZY_ROOT " ::= root\n"
                       : f == RP_CHAT_MISTRAL ? RP_SRV_LAZY_ROOT " ::= \"[TOOL_CALLS]\" \" \"? \"[\" root \"]\"\n"
                                              : RP_SRV_LAZY_ROOT " ::= \"<tool_call>\" \"\\n\"? root \"\\n\"? \"</tool_call>\"\n";
    const size_t a = strlen(gbnf), b = strlen(rule);
    char *s = malloc(a + b + 2);
    if (!s) return rp_errorf(RP_ERR_NOMEM, "server: out of memory");
    memcpy(s, gbnf, a);
    s[a] = '\n';
    memcpy(s + a + 1, rule, b + 1);
    *out = s;
    return RP_OK;
}
