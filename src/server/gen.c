/* gen.c — generated text bookkeeping for one request: stop sequences, hold-back for streaming, tool-call parsing. */
#include "server/gen.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "server/json_prefix.h"

rp_status rp_srv_gen_init(rp_srv_gen *g, const rp_model *m, const rp_srv_request *r, const rp_srv_text *t) {
    memset(g, 0, sizeof *g);
    if (m) RP_TRY(rp_detokenizer_create(m, false, false, &g->dt));   /* a continuation keeps its leading space */
    for (int i = 0; i < r->n_stop; i++) g->stop[g->n_stop++] = r->stop[i];
    g->tools = t && t->tools_active && t->parse_fmt != RP_CHAT_UNKNOWN;
    g->fmt = t ? t->parse_fmt : RP_CHAT_UNKNOWN;
    g->forced = t ? t->forced : NULL;
    g->forced_close = t ? t->forced_close : NULL;
    g->hold_all = g->forced != NULL;
    g->reasoning = t && t->reasoning && !g->forced;
    g->tools_json = r->tools_json;
    g->think_started = t && t->think_started;
    g->cap = 256;
    g->text = malloc(g->cap);
    if (!g->text) {
        rp_srv_gen_free(g);
        return rp_errorf(RP_ERR_NOMEM, "server: out of memory");
    }
    g->text[0] = '\0';
    return RP_OK;
}

void rp_srv_gen_free(rp_srv_gen *g) {
    rp_detokenizer_free(g->dt);
    free(g->text);
    memset(g, 0, sizeof *g);
}

static rp_status append(rp_srv_gen *g, const char *s, size_t n) {
    if (g->len + n + 1 > g->cap) {
        size_t nc = g->cap * 2;
        while (nc < g->len + n + 1) nc *= 2;
        char *np = realloc(g->text, nc);
        if (!np) return rp_errorf(RP_ERR_NOMEM, "server: out of memory");
        g->text = np;
        g->cap = nc;
    }
    memcpy(g->text + g->len, s, n);
    g->len += n;
    g->text[g->len] = '\0';
    return RP_OK;
}

/* Cuts the text at the earliest stop sequence that ends in the new bytes [from, len). */
static void check_stops(rp_srv_gen *g, size_t from) {
    size_t cut = g->len;
    for (int i = 0; i < g->n_stop; i++) {
        size_t sl = strlen(g->stop[i]);
        size_t start = from >= sl - 1 ? from - (sl - 1) : 0;
        for (size_t p = start; p + sl <= g->len && p < cut; p++)
            if (memcmp(g->text + p, g->stop[i], sl) == 0) {
                cut = p;
                break;
            }
    }
    if (cut < g->len) {
        g->len = cut;
        g->text[cut] = '\0';
        g->stopped = true;
    }
}

rp_status rp_srv_gen_feed(rp_srv_gen *g, const rp_token *toks, int32_t n) {
    for (int32_t i = 0; i < n && !g->stopped; i++) {
        char buf[4096];
        int32_t w = g->dt ? rp_detokenizer_push(g->dt, toks[i], buf, (int32_t)sizeof buf) : 0;
        if (w <= 0) continue;
        size_t from = g->len;
        RP_TRY(append(g, buf, (size_t)w));
        check_stops(g, from);
    }
    return RP_OK;
}

rp_status rp_srv_gen_flush(rp_srv_gen *g) {
    if (g->flushed) return RP_OK;
    g->flushed = true;
    if (g->stopped || !g->dt) return RP_OK;
    char buf[64];
    int32_t w = rp_detokenizer_flush(g->dt, buf, (int32_t)sizeof buf);
    if (w > 0) {
        size_t from = g->len;
        RP_TRY(append(g, buf, (size_t)w));
        check_stops(g, from);
    }
    return RP_OK;
}

/* Length of the longest proper prefix of `pat` that ends the text. */
static size_t partial_suffix(const char *text, size_t len, const char *pat) {
    size_t pl = strlen(pat);
    for (size_t k = pl - 1 < len ? pl - 1 : len; k > 0; k--)
        if (memcmp(text + len - k, pat, k) == 0) return k;
    return 0;
}

void rp_srv_gen_reasoning_stream(rp_srv_gen *g, size_t *from, size_t *to) {
    *from = *to = g->r_emitted;
    if (!g->reasoning) return;
    rp_reasoning_span s;
    rp_chat_reasoning_span(g->text, g->len, g->think_started, g->flushed || g->stopped, &s);
    if (s.has_reasoning && s.reasoning_end > s.reasoning_begin) {
        if (!g->r_open) {
            g->r_open = true;
            g->r_begin = g->r_emitted = s.reasoning_begin;
        }
        *from = g->r_emitted;
        *to = s.reasoning_end > g->r_emitted ? s.reasoning_end : g->r_emitted;
    }
    if (s.content_end > s.content_begin && g->emitted < s.content_begin) g->emitted = g->c_base = s.content_begin;
}

/* Where the content may start: c_base once known; with reasoning undecided or still thinking, the end (nothing). */
static size_t content_base(const rp_srv_gen *g) {
    if (!g->reasoning) return 0;
    rp_reasoning_span s;
    rp_chat_reasoning_span(g->text, g->len, g->think_started, g->flushed || g->stopped, &s);
    return s.content_end > s.content_begin ? s.content_begin : g->len;
}

size_t rp_srv_gen_stream_end(const rp_srv_gen *g) {
    if (g->hold_all) return g->emitted;
    const size_t base = content_base(g);
    if (base >= g->len || g->emitted < base) return g->emitted;   /* no content yet (rp_srv_gen_reasoning_stream moves emitted) */
    size_t end = g->len;
    if (g->tools) {
        if (g->fmt == RP_CHAT_LLAMA3) {
            /* a Llama 3 call is the whole reply as JSON: hold while it could be one */
            size_t i = base;
            while (i < g->len && (g->text[i] == ' ' || g->text[i] == '\n' || g->text[i] == '\t')) i++;
            if (i == g->len || g->text[i] == '{' || g->text[i] == '[') return g->emitted;
        } else {
            const char *open = g->fmt == RP_CHAT_MISTRAL ? "[TOOL_CALLS]" : "<tool_call>";
            const char *at = strstr(g->text + base, open);
            if (at) end = (size_t)(at - g->text);
            else end = g->len - partial_suffix(g->text, g->len, open);
        }
    }
    if (!g->flushed && !g->stopped) {
        size_t hold = 0;
        for (int i = 0; i < g->n_stop; i++) {
            size_t h = partial_suffix(g->text, g->len, g->stop[i]);
            if (h > hold) hold = h;
        }
        if (g->len - hold < end) end = g->len - hold;
    }
    return end > g->emitted ? end : g->emitted;
}

/* The forced call's arguments: the longest valid JSON-object prefix of the text, closed. */
static char *forced_args(const char *text, size_t len, size_t *used) {
    rp_json_prefix jp, ok;
    rp_jsonp_init(&jp);
    ok = jp;
    size_t i = 0, good = 0;
    while (i < len && (text[i] == ' ' || text[i] == '\n')) i++;
    for (; i < len; i++) {
        if (!rp_jsonp_feed(&jp, text + i, 1)) break;
        ok = jp;
        good = i + 1;
        if (rp_jsonp_done(&jp)) break;
    }
    char close[128];
    rp_jsonp_close(&ok, close, sizeof close);
    size_t cl = strlen(close);
    char *s = malloc(good + cl + 1);
    if (!s) return NULL;
    memcpy(s, text, good);
    memcpy(s + good, close, cl + 1);
    *used = good;
    return s;
}

rp_status rp_srv_gen_reply(rp_srv_gen *g, rp_job_finish finish, rp_srv_reply *out) {
    memset(out, 0, sizeof *out);
    out->finish_reason = finish == RP_JOB_LENGTH || finish == RP_JOB_CTX || finish == RP_JOB_CANCELLED ? "length" : "stop";
    if (g->stopped) out->finish_reason = "stop";
    rp_status st = RP_OK;
    if (g->forced) {
        size_t used = 0;
        char *args = forced_args(g->text, g->len, &used);
        size_t fl = strlen(g->forced), al = args ? strlen(args) : 0, cl = g->forced_close ? strlen(g->forced_close) : 0;
        char *full = args ? malloc(fl + al + cl + 1) : NULL;
        if (!full) {
            free(args);
            return rp_errorf(RP_ERR_NOMEM, "server: out of memory");
        }
        memcpy(full, g->forced, fl);
        memcpy(full + fl, args, al);
        memcpy(full + fl + al, g->forced_close ? g->forced_close : "", cl + 1);
        free(args);
        st = rp_chat_parse_tool_calls(g->fmt, full, &out->calls, &out->n_calls, &out->content);
        free(full);
    } else {
        char *body = NULL;   /* the reply without its think block */
        if (g->reasoning) st = rp_chat_split_reasoning(g->text, g->think_started, &out->reasoning, &body);
        else if (!(body = malloc(g->len + 1))) st = rp_errorf(RP_ERR_NOMEM, "server: out of memory");
        else memcpy(body, g->text, g->len + 1);
        if (st == RP_OK && g->tools) {
            st = rp_chat_parse_tool_calls(g->fmt, body, &out->calls, &out->n_calls, &out->content);
            /* a call of an unknown tool, or arguments off its schema: the reply stays text (clear fallback) */
            for (size_t i = 0; st == RP_OK && i < out->n_calls; i++)
                if (rp_tool_call_check(g->tools_json, &out->calls[i], out->why, sizeof out->why) != RP_OK) {
                    rp_tool_calls_free(out->calls, out->n_calls);
                    out->calls = NULL;
                    out->n_calls = 0;
                    free(out->content);
                    out->content = body;
                    body = NULL;
                    break;
                }
            free(body);
        } else if (st == RP_OK) {
            out->content = body;
        }
    }
    if (st != RP_OK) {
        rp_srv_reply_free(out);
        return st;
    }
    /* a reply cut by max_tokens or the context stays "length" (as OpenAI's): a call in it may be incomplete */
    if (out->n_calls > 0 && strcmp(out->finish_reason, "length") != 0) out->finish_reason = "tool_calls";
    return RP_OK;
}

void rp_srv_reply_free(rp_srv_reply *r) {
    free(r->reasoning);
    free(r->content);
    rp_tool_calls_free(r->calls, r->n_calls);
    memset(r, 0, sizeof *r);
}

char *rp_srv_utf8_clean(const char *s, size_t n) {
    char *o = malloc(n * 3 + 1), *p = o;   /* each bad byte becomes 3 bytes at most */
    if (!o) return NULL;
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        unsigned char c = u[i];
        size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        bool ok = len > 0 && i + len <= n && c != 0;
        for (size_t k = 1; ok && k < len; k++) ok = (u[i + k] & 0xC0) == 0x80;
        if (ok && len == 2) ok = c >= 0xC2;
        if (ok && len == 3) {
            unsigned cp = ((c & 15u) << 12) | ((u[i + 1] & 63u) << 6) | (u[i + 2] & 63u);
            ok = cp >= 0x800 && (cp < 0xD800 || cp > 0xDFFF);
        }
        if (ok && len == 4) {
            unsigned cp = ((c & 7u) << 18) | ((u[i + 1] & 63u) << 12) | ((u[i + 2] & 63u) << 6) | (u[i + 3] & 63u);
            ok = cp >= 0x10000 && cp <= 0x10FFFF;
        }
        if (ok) {
            memcpy(p, s + i, len);
            p += len;
            i += len;
        } else {
            memcpy(p, "\xEF\xBF\xBD", 3);
            p += 3;
            i++;
        }
    }
    *p = '\0';
    return o;
}
