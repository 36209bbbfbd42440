/* prompt.c — renders chat / completion requests into prompt pieces and tokenizes them with chunk boundaries. */
#include "server/prompt.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "core/error.h"
#include "server/lazy_grammar.h"

/* A growable string; `oom` sticks. */
typedef struct sbuf {
    char *p;
    size_t n, cap;
    bool oom;
} sbuf;

static void sb_add(sbuf *b, const char *s, size_t n) {
    if (b->oom || n == 0) return;
    if (b->n + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap : 256;
        while (nc < b->n + n + 1) nc *= 2;
        char *np = realloc(b->p, nc);
        if (!np) {
            b->oom = true;
            return;
        }
        b->p = np;
        b->cap = nc;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}
static void sb_str(sbuf *b, const char *s) { if (s) sb_add(b, s, strlen(s)); }

/* Strings made while rendering, freed together. */
typedef struct strpool {
    char *v[8 + 4 * 1024];
    size_t n;
} strpool;

static char *pool_take(strpool *sp, sbuf *b) {
    if (b->oom || sp->n == sizeof sp->v / sizeof sp->v[0]) {
        free(b->p);
        return NULL;
    }
    if (!b->p) {
        b->p = malloc(1);
        if (!b->p) return NULL;
        b->p[0] = '\0';
    }
    sp->v[sp->n++] = b->p;
    return b->p;
}

static void pool_free(strpool *sp) {
    for (size_t i = 0; i < sp->n; i++) free(sp->v[i]);
    sp->n = 0;
}

/* Compact on purpose: the models without a native tool template are small, with short contexts. */
static const char k_generic_tools_head[] = "Tools you may call:";
static const char k_generic_tools_tail[] =
    "\nTo call a tool, reply with <tool_call>{\"name\": NAME, \"arguments\": {...}}</tool_call>";

/* System-prompt text the request adds: generic tool list, the tool_choice "required" instruction, document marker. */
static bool system_extra(const rp_srv_request *r, bool generic_tools, bool tools_active, const char *marker,
                         sbuf *b) {
    if (generic_tools && tools_active) {
        sb_str(b, k_generic_tools_head);
        json_t *tools = json_loads(r->tools_json, 0, NULL);
        for (size_t i = 0; i < json_array_size(tools); i++) {
            json_t *fn = json_object_get(json_array_get(tools, i), "function");
            char *s = json_dumps(fn, JSON_COMPACT | JSON_PRESERVE_ORDER);
            sb_str(b, "\n");
            sb_str(b, s);
            free(s);
        }
        json_decref(tools);
        sb_str(b, k_generic_tools_tail);
    }
    if (tools_active && r->tool_choice == RP_TOOL_CHOICE_REQUIRED) {
        if (b->n) sb_str(b, "\n\n");
        sb_str(b, "You must answer with a call to one of the provided functions.");
    }
    /* named: no instruction; the reply is forced to open the call (the system prompt, and with it the
     * cached prefix, stays the same whatever tool_choice a turn uses) */
    if (marker) {
        if (b->n) sb_str(b, "\n\n");
        sb_str(b, marker);
    }
    return !b->oom;
}

/* Plain transcript for models without a chat template. */
static void plain_transcript(const rp_srv_msg *m, size_t n, sbuf *b) {
    for (size_t i = 0; i < n; i++) {
        const char *role = m[i].role;
        sb_str(b, !strcmp(role, "system") ? "System: " : !strcmp(role, "user") ? "User: " : "Assistant: ");
        sb_str(b, m[i].content ? m[i].content : "");
        sb_str(b, "\n");
    }
    sb_str(b, "Assistant:");
}

/* Rewrites tool messages for templates without tool support: assistant calls
 * become <tool_call> blocks in the content, tool results user turns with
 * <tool_response> blocks; consecutive turns of the same role are merged (the
 * Llama 2 template needs strict alternation). */
static rp_status generic_messages(const rp_srv_msg *in, size_t n, rp_srv_msg *out, size_t *n_out, strpool *sp,
                                  rp_api_error *err) {
    size_t w = 0;
    for (size_t i = 0; i < n; i++) {
        const rp_srv_msg *m = &in[i];
        sbuf b = {0};
        const char *role = !strcmp(m->role, "tool") ? "user" : m->role;
        if (!strcmp(m->role, "tool")) {
            sb_str(&b, "<tool_response>\n");
            sb_str(&b, m->content);
            sb_str(&b, "\n</tool_response>");
        } else {
            sb_str(&b, m->content);
            for (size_t k = 0; k < m->n_tool_calls; k++) {
                if (b.n) sb_str(&b, "\n");
                sb_str(&b, "<tool_call>\n{\"name\": \"");
                sb_str(&b, m->tool_calls[k].name);
                sb_str(&b, "\", \"arguments\": ");
                sb_str(&b, m->tool_calls[k].arguments ? m->tool_calls[k].arguments : "{}");
                sb_str(&b, "}\n</tool_call>");
            }
        }
        if (w > 0 && !strcmp(out[w - 1].role, role) && strcmp(role, "system") != 0) {
            sbuf j = {0};
            sb_str(&j, out[w - 1].content);
            sb_str(&j, "\n\n");
            sb_add(&j, b.p ? b.p : "", b.n);
            free(b.p);
            const char *s = pool_take(sp, &j);
            if (!s) return rp_api_errorf(err, RP_ERR_NOMEM, 500, NULL, NULL, "out of memory rendering the prompt");
            out[w - 1].content = s;
            continue;
        }
        const char *s = pool_take(sp, &b);
        if (!s) return rp_api_errorf(err, RP_ERR_NOMEM, 500, NULL, NULL, "out of memory rendering the prompt");
        out[w++] = (rp_srv_msg){.role = role, .content = s};
    }
    *n_out = w;
    return RP_OK;
}

/* The tool calls of a message as OpenAI's JSON array (malloc'd), or NULL when it has none. */
static char *calls_json(const rp_srv_msg *m) {
    if (m->n_tool_calls == 0) return NULL;
    json_t *arr = json_array();
    for (size_t k = 0; arr && k < m->n_tool_calls; k++) {
        const rp_tool_call *c = &m->tool_calls[k];
        json_t *fn = json_pack("{s:s, s:s}", "name", c->name ? c->name : "", "arguments",
                               c->arguments ? c->arguments : "{}");
        json_t *o = fn ? json_pack("{s:s, s:o}", "type", "function", "function", fn) : NULL;
        if (o && c->id) json_object_set_new(o, "id", json_string(c->id));
        if (!o || json_array_append_new(arr, o) != 0) {
            json_decref(arr);
            return NULL;
        }
    }
    char *s = arr ? json_dumps(arr, JSON_COMPACT) : NULL;
    json_decref(arr);
    return s;
}

/* The chat template of `fmt` over the messages (the public renderer: tool calls travel as JSON). *out malloc'd. */
static rp_status render_template(const rp_model *m, const rp_srv_msg *msgs, size_t n, const char *tools_json,
                                 const rp_chat_vars *vars, char **out) {
    *out = NULL;
    rp_chat_message *cm = calloc(n ? n : 1, sizeof *cm);
    char **calls = calloc(n ? n : 1, sizeof *calls);
    rp_status st = cm && calls ? RP_OK : rp_errorf(RP_ERR_NOMEM, "chat: out of memory");
    for (size_t i = 0; i < n && st == RP_OK; i++) {
        cm[i] = (rp_chat_message){.role = msgs[i].role, .content = msgs[i].content,
                                  .tool_call_id = msgs[i].tool_call_id, .name = msgs[i].name};
        if (msgs[i].n_tool_calls && !(cm[i].tool_calls = calls[i] = calls_json(&msgs[i])))
            st = rp_errorf(RP_ERR_NOMEM, "chat: out of memory");
    }
    size_t len = 0, cap = 4096;
    for (int tries = 0; st == RP_OK && tries < 2; tries++) {
        char *buf = malloc(cap);
        if (!buf) {
            st = rp_errorf(RP_ERR_NOMEM, "chat: out of memory");
            break;
        }
        st = rp_chat_render_vars(m, cm, (int32_t)n, tools_json, true, vars, buf, cap, &len);
        if (st == RP_OK) {
            *out = buf;
            break;
        }
        free(buf);
        if (st != RP_ERR_FULL) break;
        cap = len + 1;   /* the size it needs */
        st = RP_OK;
    }
    for (size_t i = 0; calls && i < n; i++) free(calls[i]);
    free(calls);
    free(cm);
    return st;
}

/* Splits `rendered` at the marker into pieces: head | doc 1 | ... | doc n | tail. */
static rp_status place_documents(const rp_srv_request *r, char *rendered, const char *marker, rp_srv_text *t,
                                 rp_api_error *err) {
    t->n_pieces = 0;
    t->cut[0] = 0;
    const char *at = marker ? strstr(rendered, marker) : NULL;
    if (marker && r->n_docs > 0 && !at) {   /* never drop documents silently */
        free(rendered);
        return rp_api_errorf(err, RP_ERR_INTERNAL, 500, NULL, "reprise_documents",
                             "the chat template lost the documents' place in the prompt");
    }
    if (!at || r->n_docs == 0) {
        t->text = rendered;
        t->len = strlen(rendered);
        t->special[0] = true;
        t->n_pieces = 1;
        t->cut[1] = t->len;
        return RP_OK;
    }
    sbuf b = {0};
    size_t head = (size_t)(at - rendered);
    sb_add(&b, rendered, head);
    t->special[t->n_pieces] = true;
    for (size_t i = 0; i < r->n_docs; i++) {
        if (b.n > 0 && t->n_pieces + 1 < RP_SRV_MAX_PIECES) {
            t->cut[++t->n_pieces] = b.n;
            t->special[t->n_pieces] = false;
        }
        /* every document ends with the same separator, the last one too: a
         * document's piece (its KV chunk) is then the same in any position */
        sb_str(&b, r->docs[i]);
        sb_str(&b, "\n\n");
    }
    if (t->n_pieces + 1 < RP_SRV_MAX_PIECES) {
        t->cut[++t->n_pieces] = b.n;
        t->special[t->n_pieces] = true;
    }
    sb_str(&b, at + strlen(marker));
    free(rendered);
    if (b.oom) {
        free(b.p);
        return rp_api_errorf(err, RP_ERR_NOMEM, 500, NULL, NULL, "out of memory rendering the prompt");
    }
    t->text = b.p;
    t->len = b.n;
    /* drop empty pieces (a prompt ending right after the documents) */
    t->cut[++t->n_pieces] = b.n;
    int w = 0;
    for (int i = 0; i < t->n_pieces; i++)
        if (t->cut[i + 1] > t->cut[i] || (w == 0 && i == t->n_pieces - 1)) {
            t->cut[w] = t->cut[i];
            t->special[w] = t->special[i];
            w++;
        }
    t->cut[w] = b.n;
    t->n_pieces = w;
    return RP_OK;
}

rp_status rp_srv_render_chat(const rp_model *m, const rp_srv_request *r, rp_srv_text *t, rp_api_error *err) {
    const rp_chat_format fmt = rp_model_chat_format(m);
    memset(t, 0, sizeof *t);
    if (r->ep != RP_EP_CHAT || r->n_msgs == 0)
        return rp_api_errorf(err, RP_ERR_INVALID_ARG, 400, NULL, "messages", "'messages' is required");
    const bool tools_active = r->n_tools > 0 && r->tool_choice != RP_TOOL_CHOICE_NONE;
    bool has_tool_msgs = false;
    for (size_t i = 0; i < r->n_msgs; i++)
        has_tool_msgs |= r->msgs[i].n_tool_calls > 0 || !strcmp(r->msgs[i].role, "tool");
    /* a template of a known tool syntax that shows the tools (the plain Llama 3 one does not) */
    const bool native = (fmt == RP_CHAT_LLAMA3 || fmt == RP_CHAT_CHATML || fmt == RP_CHAT_MISTRAL) &&
                        rp_chat_template_shows_tools(m);
    const bool generic = !native && (tools_active || has_tool_msgs);
    t->tools_active = tools_active;
    t->reasoning = !r->reasoning_raw;
    t->parse_fmt = !tools_active ? RP_CHAT_UNKNOWN : native ? fmt : RP_CHAT_CHATML;

    /* the document marker carries 64 random bits so request text cannot fake it.
     * Its delimiters must survive the templates' `trim` (Python's str.strip,
     * which also strips \x1c-\x1f): a stripped marker would drop the documents */
    char marker[48] = "";
    if (r->n_docs > 0) {
        uint64_t nonce = 0;
        if (getrandom(&nonce, sizeof nonce, 0) != (ssize_t)sizeof nonce) nonce = (uint64_t)(uintptr_t)r ^ 0x9e3779b97f4a7c15ULL;
        snprintf(marker, sizeof marker, "\x02" "RPDOCS%016llx\x03", (unsigned long long)nonce);
    }
    strpool *sp = calloc(1, sizeof *sp);
    rp_srv_msg *msgs = calloc(r->n_msgs + 1, sizeof *msgs);
    rp_status st = RP_OK;
    char *rendered = NULL;
    if (!sp || !msgs) {
        st = rp_api_errorf(err, RP_ERR_NOMEM, 500, NULL, NULL, "out of memory rendering the prompt");
        goto done;
    }
    size_t n = r->n_msgs;
    if (generic) {
        if ((st = generic_messages(r->msgs, r->n_msgs, msgs, &n, sp, err)) != RP_OK) goto done;
    } else {
        memcpy(msgs, r->msgs, n * sizeof *msgs);
    }
    sbuf extra = {0};
    if (!system_extra(r, generic, tools_active, marker[0] ? marker : NULL, &extra)) {
        free(extra.p);
        st = rp_api_errorf(err, RP_ERR_NOMEM, 500, NULL, NULL, "out of memory rendering the prompt");
        goto done;
    }
    if (extra.n > 0) {
        if (n > 0 && !strcmp(msgs[0].role, "system")) {
            sbuf s = {0};
            sb_str(&s, msgs[0].content);
            if (s.n) sb_str(&s, "\n\n");
            sb_add(&s, extra.p, extra.n);
            free(extra.p);
            msgs[0].content = pool_take(sp, &s);
        } else {
            memmove(msgs + 1, msgs, n * sizeof *msgs);
            msgs[0] = (rp_srv_msg){.role = "system", .content = pool_take(sp, &extra)};
            n++;
        }
        if (!msgs[0].content) {
            st = rp_api_errorf(err, RP_ERR_NOMEM, 500, NULL, NULL, "out of memory rendering the prompt");
            goto done;
        }
    } else {
        free(extra.p);
    }

    if (!m || rp_chat_template_check(m) == RP_ERR_UNSUPPORTED) {   /* no chat template at all */
        sbuf b = {0};
        plain_transcript(msgs, n, &b);
        if (b.oom || !b.p) {
            free(b.p);
            st = rp_api_errorf(err, RP_ERR_NOMEM, 500, NULL, NULL, "out of memory rendering the prompt");
            goto done;
        }
        rendered = b.p;
    } else {
        const rp_chat_vars vars = {.enable_thinking = r->enable_thinking, .reasoning_effort = r->reasoning_effort,
                                   .vars_json = r->template_kwargs};
        st = render_template(m, msgs, n, native && tools_active ? r->tools_json : NULL, &vars, &rendered);
        if (st == RP_OK) t->think_started = rp_chat_prompt_opens_thinking(rendered, strlen(rendered));
        if (st != RP_OK) {
            st = rp_api_errorf(err, st == RP_ERR_NOMEM ? RP_ERR_NOMEM : RP_ERR_INVALID_ARG, st == RP_ERR_NOMEM ? 500 : 400,
                               st == RP_ERR_UNSUPPORTED ? "unsupported_value" : NULL, "messages", "%s", rp_last_error());
            goto done;
        }
    }
    /* named tool_choice: the reply opens the call and the model writes the arguments, under the tool's schema;
     * required: the reply opens a call block and the model writes {"name": ..., arguments}, under the schemas */
    const bool named = r->tool_choice == RP_TOOL_CHOICE_NAMED, required = r->tool_choice == RP_TOOL_CHOICE_REQUIRED;
    if (tools_active && (named || required)) {
        /* each format's call block: its opening, the key of the arguments, its close (after the call object) */
        const bool llama3 = t->parse_fmt == RP_CHAT_LLAMA3, mistral = t->parse_fmt == RP_CHAT_MISTRAL;
        const char *open = llama3 ? "" : mistral ? "[TOOL_CALLS][" : "<tool_call>\n";
        const char *args_key = llama3 ? "parameters" : "arguments";
        sbuf f = {0};
        sb_str(&f, open);
        if (named) {   /* the call object opened up to its arguments, which close it with "}" */
            sb_str(&f, "{\"name\": \"");
            sb_str(&f, r->tool_name);
            sb_str(&f, "\", \"");
            sb_str(&f, args_key);
            sb_str(&f, "\": ");
            t->forced_close = llama3 ? "}" : mistral ? "}]" : "}\n</tool_call>";
        } else {
            t->forced_close = llama3 ? "" : mistral ? "]" : "\n</tool_call>";
        }
        if (!f.p && !f.oom && !(f.p = strdup(""))) f.oom = true;   /* Llama 3, required: no opening text */
        sbuf all = {0};
        sb_str(&all, rendered);
        /* as the template renders a finished assistant turn, so the next call's prompt matches this one */
        if (fmt == RP_CHAT_LLAMA2 || fmt == RP_CHAT_UNKNOWN) sb_str(&all, " ");
        sb_add(&all, f.p ? f.p : "", f.n);
        free(rendered);
        rendered = all.p;
        t->forced = f.p;   /* what follows it is constrained by t->grammar (below) */
        if (all.oom || f.oom || !rendered || !t->forced) {
            st = rp_api_errorf(err, RP_ERR_NOMEM, 500, NULL, NULL, "out of memory rendering the prompt");
            goto done;
        }
        st = rp_srv_tool_grammar(r->tools_json, named ? r->tool_name : NULL, args_key, false, &t->grammar);
        if (st != RP_OK) {
            st = rp_api_errorf(err, st, st == RP_ERR_NOMEM ? 500 : 400, st == RP_ERR_NOMEM ? NULL : "invalid_value",
                               "tools", "the forced tool call's schema: %s", rp_last_error());
            goto done;
        }
    } else if (tools_active && r->tool_choice == RP_TOOL_CHOICE_AUTO && rp_srv_tools_strict(r->tools_json)) {
        /* auto with strict tools: the reply is free until it opens a call in its format; from the opening on,
         * the call block follows a grammar (one call of any tool, the strict ones' arguments under their schema) */
        char *call = NULL;
        st = rp_srv_tool_grammar(r->tools_json, NULL, t->parse_fmt == RP_CHAT_LLAMA3 ? "parameters" : "arguments",
                                 true, &call);
        if (st == RP_OK) st = rp_srv_lazy_wrap(t->parse_fmt, call, &t->grammar);
        free(call);
        if (st != RP_OK) {
            st = rp_api_errorf(err, st, st == RP_ERR_NOMEM ? 500 : 400, st == RP_ERR_NOMEM ? NULL : "invalid_value",
                               "tools", "the strict tools' schema: %s", rp_last_error());
            goto done;
        }
        t->grammar_lazy = true;
    }
    st = place_documents(r, rendered, marker[0] ? marker : NULL, t, err);
    rendered = NULL;
done:
    free(rendered);
    if (sp) pool_free(sp);
    free(sp);
    free(msgs);
    if (st != RP_OK) rp_srv_text_free(t);
    return st;
}

rp_status rp_srv_render_completion(const rp_srv_request *r, rp_srv_text *t, rp_api_error *err) {
    memset(t, 0, sizeof *t);
    sbuf b = {0};
    for (size_t i = 0; i < r->n_docs && t->n_pieces + 1 < RP_SRV_MAX_PIECES; i++) {
        t->cut[t->n_pieces] = b.n;
        t->special[t->n_pieces++] = false;
        sb_str(&b, r->docs[i]);
        sb_str(&b, "\n\n");
    }
    if (r->prompt && r->prompt[0]) {
        t->cut[t->n_pieces] = b.n;
        t->special[t->n_pieces++] = false;
        sb_str(&b, r->prompt);
    }
    if (b.oom) {
        free(b.p);
        return rp_api_errorf(err, RP_ERR_NOMEM, 500, NULL, NULL, "out of memory rendering the prompt");
    }
    if (!b.p) {
        b.p = calloc(1, 1);
        if (!b.p) return rp_api_errorf(err, RP_ERR_NOMEM, 500, NULL, NULL, "out of memory rendering the prompt");
    }
    if (t->n_pieces == 0) t->special[t->n_pieces++] = false;
    t->text = b.p;
    t->len = b.n;
    t->cut[t->n_pieces] = b.n;
    return RP_OK;
}

void rp_srv_text_free(rp_srv_text *t) {
    if (!t) return;
    free(t->text);
    free(t->forced);
    free(t->grammar);
    memset(t, 0, sizeof *t);
}

rp_status rp_srv_tokenize(const rp_model *m, const rp_srv_text *t, int32_t max_tokens, rp_srv_prompt *p,
                          rp_api_error *err) {
    memset(p, 0, sizeof *p);
    if (max_tokens < 1) max_tokens = 1;
    p->toks = malloc(sizeof *p->toks * ((size_t)max_tokens + 1));
    p->bounds = malloc(sizeof *p->bounds * (size_t)(t->n_pieces + 1));
    if (!p->toks || !p->bounds) {
        rp_srv_prompt_free(p);
        return rp_api_errorf(err, RP_ERR_NOMEM, 500, NULL, NULL, "out of memory tokenizing the prompt");
    }
    size_t need_total = 0;
    bool over = false;
    for (int i = 0; i < t->n_pieces; i++) {
        size_t len = t->cut[i + 1] - t->cut[i];
        if (len == 0 && !(i == 0 && p->n == 0)) continue;
        /* BOS before the first piece when the vocabulary wants one */
        const int32_t room = over ? 0 : max_tokens + 1 - p->n;
        int32_t got = 0;
        rp_status st = rp_tokenize(m, t->text + t->cut[i], len, i == 0, t->special[i], over ? NULL : p->toks + p->n,
                                   room, &got);
        if (st == RP_ERR_FULL) {
            over = true;
            need_total += (size_t)got;
            continue;
        }
        if (st != RP_OK) {
            rp_srv_prompt_free(p);
            return rp_api_errorf(err, st, 400, NULL, NULL, "tokenizing the prompt failed: %s", rp_last_error());
        }
        need_total += (size_t)got;
        if (over) continue;
        if (p->n > 0 && got > 0) p->bounds[p->n_bounds++] = p->n;
        p->n += got;
    }
    if (over || p->n > max_tokens) {
        rp_srv_prompt_free(p);
        return rp_api_errorf(err, RP_ERR_RANGE, 400, "context_length_exceeded", "messages",
                             "the prompt is %zu tokens, more than the %d this request can use (context minus "
                             "max_tokens)", need_total, max_tokens);
    }
    if (p->n == 0) {
        rp_srv_prompt_free(p);
        return rp_api_errorf(err, RP_ERR_INVALID_ARG, 400, NULL, "prompt", "the prompt is empty");
    }
    return RP_OK;
}

void rp_srv_prompt_free(rp_srv_prompt *p) {
    if (!p) return;
    free(p->toks);
    free(p->bounds);
    memset(p, 0, sizeof *p);
}
