/* chat.c — chat-template rendering (Llama 3.x, Qwen3/ChatML, Llama 2) and Jinja-`tojson`-style JSON output. */
#include "tokenizer/chat.h"

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "template/template.h"
#include "template/tvalue.h"

/* ------------------------------------------------------------------------- */
/* Growable string. Appends never fail loudly: an allocation failure sets
 * `oom` and later appends are no-ops, so render code stays linear and the
 * single check at the end turns it into RP_ERR_NOMEM. */
typedef struct sb {
    char *p;
    size_t n, cap;
    bool oom;
} sb;

static void sb_putn(sb *b, const char *s, size_t n) {
    if (b->oom || n == 0) return;
    if (n > SIZE_MAX - b->n - 1) { b->oom = true; return; }
    size_t need = b->n + n + 1;
    if (need > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < need) cap = cap > SIZE_MAX / 2 ? need : cap * 2;
        char *q = realloc(b->p, cap);
        if (!q) { b->oom = true; return; }
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}

static void sb_puts(sb *b, const char *s) {
    if (s) sb_putn(b, s, strlen(s));
}

static void sb_putc(sb *b, char c) { sb_putn(b, &c, 1); }

/* Hands the buffer to *out (always NUL-terminated, "" when nothing was
 * appended) or frees it and reports NOMEM. */
static rp_status sb_finish(sb *b, char **out) {
    if (!b->oom && !b->p) {
        b->p = calloc(1, 1);
        b->oom = !b->p;
    }
    if (b->oom) {
        free(b->p);
        *b = (sb){0};
        return rp_errorf(RP_ERR_NOMEM, "chat: out of memory building prompt");
    }
    *out = b->p;
    *b = (sb){0};
    return RP_OK;
}

/* ------------------------------------------------------------------------- */
/* JSON output identical to Python's json.dumps(obj, ensure_ascii=False, ...),
 * which is what HF's Jinja `tojson` filter calls: keys in input order, UTF-8
 * kept as is, control characters as \u00xx, floats as Python's repr. */

/* JSON as Jinja's `tojson` prints it in HF chat templates (Python's json.dumps, ensure_ascii=False): the
 * template interpreter's writer. indent < 0 is one line with item_sep / key_sep. */
typedef struct json_style {
    int indent;
    const char *item_sep, *key_sep;
} json_style;

static const json_style k_py_style = {-1, ", ", ": "};
static const json_style k_compact_style = {-1, ",", ":"};

static void json_put(sb *b, const json_t *v, const json_style *st) {
    char *text = NULL;
    if (rp_tmpl_json_dumps(v, st->indent, st->indent >= 0 ? NULL : st->item_sep, st->key_sep, &text) != RP_OK) {
        b->oom = true;
        return;
    }
    sb_puts(b, text);
    free(text);
}

rp_status rp_chat_tojson(const char *json_text, int indent, bool compact, char **out) {
    if (!out) return rp_errorf(RP_ERR_INVALID_ARG, "rp_chat_tojson: out is NULL");
    *out = NULL;
    if (!json_text) return rp_errorf(RP_ERR_INVALID_ARG, "rp_chat_tojson: json_text is NULL");
    json_error_t err;
    json_t *v = json_loads(json_text, JSON_DECODE_ANY | JSON_ALLOW_NUL, &err);
    if (!v)
        return rp_errorf(RP_ERR_FORMAT, "json: %s at line %d column %d", err.text, err.line,
                         err.column);
    json_style st = compact ? k_compact_style : k_py_style;
    st.indent = indent < 0 ? -1 : indent;
    sb b = {0};
    json_put(&b, v, &st);
    json_decref(v);
    return sb_finish(&b, out);
}

/* ------------------------------------------------------------------------- */
/* String helpers matching the Python str methods the templates call. */

typedef struct span {
    const char *p;
    size_t n;
} span;

static span span_of(const char *s) { return (span){s ? s : "", s ? strlen(s) : 0}; }

/* str.strip() with no arguments. */
static span py_strip(span s) {
    const unsigned char *p = (const unsigned char *)s.p;
    size_t i = 0, end = 0;
    while (i < s.n) {
        size_t k = tu_space_len((const char *)p + i, s.n - i);
        if (k) { i += k; continue; }
        break;
    }
    size_t start = i;
    end = start;
    while (i < s.n) {
        size_t k = tu_space_len((const char *)p + i, s.n - i);
        if (k) { i += k; continue; }
        i++;
        end = i;
    }
    return (span){s.p + start, end - start};
}

static span lstrip_nl(span s) {
    while (s.n && s.p[0] == '\n') s.p++, s.n--;
    return s;
}

static span rstrip_nl(span s) {
    while (s.n && s.p[s.n - 1] == '\n') s.n--;
    return s;
}

/* First / last occurrence of needle in s; NULL if absent. */
static const char *span_find(span s, const char *needle) {
    size_t k = strlen(needle);
    for (size_t i = 0; i + k <= s.n; i++)
        if (memcmp(s.p + i, needle, k) == 0) return s.p + i;
    return NULL;
}

static const char *span_rfind(span s, const char *needle) {
    size_t k = strlen(needle);
    if (k > s.n) return NULL;
    for (size_t i = s.n - k + 1; i-- > 0;)
        if (memcmp(s.p + i, needle, k) == 0) return s.p + i;
    return NULL;
}

static bool span_starts(span s, const char *pre) {
    size_t k = strlen(pre);
    return s.n >= k && memcmp(s.p, pre, k) == 0;
}

static bool span_ends(span s, const char *suf) {
    size_t k = strlen(suf);
    return s.n >= k && memcmp(s.p + s.n - k, suf, k) == 0;
}

static void sb_span(sb *b, span s) { sb_putn(b, s.p, s.n); }

static bool role_is(const rp_chat_msg *m, const char *r) { return strcmp(m->role, r) == 0; }

/* Tool-call arguments the way vLLM / llama.cpp feed them to templates: the
 * OpenAI string is parsed to an object and printed by `tojson`, so a call the
 * model made renders back byte-identical to what it generated. Text that is
 * not JSON goes in verbatim; missing arguments are "{}". */
static void put_arguments(sb *b, const char *args) {
    if (!args) { sb_puts(b, "{}"); return; }
    json_t *v = json_loads(args, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
    if (!v) { sb_puts(b, args); return; }
    json_put(b, v, &k_py_style);
    json_decref(v);
}

/* ------------------------------------------------------------------------- */
/* Llama 3.x. Without tools: the plain Llama 3 template (what Meta's 3.0 and
 * the vocab files here ship; 3.1+ accept it). With tools: Meta's 3.1/3.2
 * template with tools_in_user_message (its default) and its fixed
 * date_string. Tool calls and results always use the 3.1 syntax. */

static const char k_l3_tool_preamble[] =
    "Given the following functions, please respond with a JSON for a function call "
    "with its proper arguments that best answers the given prompt.\n\n"
    "Respond in the format {\"name\": function name, \"parameters\": dictionary of "
    "argument name and its value}.Do not use variables.\n\n";

static void l3_header(sb *b, const char *role) {
    sb_puts(b, "<|start_header_id|>");
    sb_puts(b, role);
    sb_puts(b, "<|end_header_id|>\n\n");
}

static rp_status render_llama3(sb *b, const rp_chat_msg *m, size_t n, const json_t *tools,
                               const rp_chat_opts *o) {
    sb_puts(b, o->bos_text);
    size_t i = 0;
    if (tools) {
        span sys = {"", 0};
        if (n > 0 && role_is(&m[0], "system")) sys = py_strip(span_of(m[0].content)), i = 1;
        l3_header(b, "system");
        sb_puts(b, "Environment: ipython\n"
                   "Cutting Knowledge Date: December 2023\n"
                   "Today Date: 26 Jul 2024\n\n");
        sb_span(b, sys);
        sb_puts(b, "<|eot_id|>");
        /* The template moves the tools into the first message after the
         * system prompt; it must exist and be the user's question. */
        if (i >= n)
            return rp_errorf(RP_ERR_INVALID_ARG,
                             "chat: Llama 3 with tools needs a user message to carry them");
        if (!role_is(&m[i], "user"))
            return rp_errorf(RP_ERR_INVALID_ARG,
                             "chat: message %zu: Llama 3 with tools needs a user message here "
                             "(got role \"%s\")", i, m[i].role);
        l3_header(b, "user");
        sb_puts(b, k_l3_tool_preamble);
        const json_style st = {4, ", ", ": "};
        for (size_t t = 0; t < json_array_size(tools); t++) {
            json_put(b, json_array_get(tools, t), &st);
            sb_puts(b, "\n\n");
        }
        sb_span(b, py_strip(span_of(m[i].content)));
        sb_puts(b, "<|eot_id|>");
        i++;
    }
    for (; i < n; i++) {
        if (role_is(&m[i], "tool")) {
            /* Meta's format: the raw result text under the ipython header. */
            l3_header(b, "ipython");
            sb_puts(b, m[i].content);
            sb_puts(b, "<|eot_id|>");
        } else if (m[i].n_tool_calls > 0) {
            if (m[i].n_tool_calls != 1)
                return rp_errorf(RP_ERR_INVALID_ARG,
                                 "chat: message %zu: Llama 3 takes one tool call per assistant "
                                 "message (got %zu)", i, m[i].n_tool_calls);
            l3_header(b, "assistant");
            sb_puts(b, "{\"name\": \"");
            sb_puts(b, m[i].tool_calls[0].name);
            sb_puts(b, "\", \"parameters\": ");
            put_arguments(b, m[i].tool_calls[0].arguments);
            sb_puts(b, "}<|eot_id|>");
        } else {
            l3_header(b, m[i].role);
            sb_span(b, py_strip(span_of(m[i].content)));
            sb_puts(b, "<|eot_id|>");
        }
    }
    if (o->add_generation_prompt) l3_header(b, "assistant");
    return RP_OK;
}

/* ------------------------------------------------------------------------- */
/* ChatML as Qwen3's official template renders it (tools in the system turn,
 * <tool_call> blocks, tool results grouped into one user turn, <think>
 * handling of assistant turns after the last real user query). */

static const char k_qwen_tools_head[] =
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>";
static const char k_qwen_tools_tail[] =
    "\n</tools>\n\nFor each function call, return a json object with function name and "
    "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": "
    "<function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n";

static void render_chatml(sb *b, const rp_chat_msg *m, size_t n, const json_t *tools,
                          const rp_chat_opts *o) {
    sb_puts(b, o->bos_text);
    bool first_sys = n > 0 && role_is(&m[0], "system");
    if (tools && json_array_size(tools) > 0) {
        sb_puts(b, "<|im_start|>system\n");
        if (first_sys) {
            sb_puts(b, m[0].content);
            sb_puts(b, "\n\n");
        }
        sb_puts(b, k_qwen_tools_head);
        for (size_t t = 0; t < json_array_size(tools); t++) {
            sb_putc(b, '\n');
            json_put(b, json_array_get(tools, t), &k_py_style);
        }
        sb_puts(b, k_qwen_tools_tail);
    } else if (first_sys) {
        sb_puts(b, "<|im_start|>system\n");
        sb_puts(b, m[0].content);
        sb_puts(b, "<|im_end|>\n");
    }

    /* Index of the last user message that is a real query (not a wrapped
     * tool response); assistant turns after it keep their reasoning. */
    size_t last_query = n ? n - 1 : 0;
    for (size_t k = n; k-- > 0;) {
        if (!role_is(&m[k], "user")) continue;
        span c = span_of(m[k].content);
        if (span_starts(c, "<tool_response>") && span_ends(c, "</tool_response>")) continue;
        last_query = k;
        break;
    }

    for (size_t i = 0; i < n; i++) {
        const rp_chat_msg *msg = &m[i];
        if (role_is(msg, "user") || (role_is(msg, "system") && i > 0)) {
            sb_puts(b, "<|im_start|>");
            sb_puts(b, msg->role);
            sb_putc(b, '\n');
            sb_puts(b, msg->content);
            sb_puts(b, "<|im_end|>\n");
        } else if (role_is(msg, "assistant")) {
            span content = span_of(msg->content), reasoning = {"", 0};
            const char *close = span_find(content, "</think>");
            if (close) {
                /* content.split('</think>')[-1].lstrip('\n') and
                 * content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') */
                const char *last_close = span_rfind(content, "</think>");
                span after = {last_close + 8, (size_t)(content.p + content.n - last_close - 8)};
                span before = rstrip_nl((span){content.p, (size_t)(close - content.p)});
                const char *open = span_rfind(before, "<think>");
                if (open) before = (span){open + 7, (size_t)(before.p + before.n - open - 7)};
                reasoning = lstrip_nl(before);
                content = lstrip_nl(after);
            }
            if (i > last_query && (i == n - 1 || reasoning.n > 0)) {
                sb_puts(b, "<|im_start|>assistant\n<think>\n");
                sb_span(b, lstrip_nl(rstrip_nl(reasoning)));
                sb_puts(b, "\n</think>\n\n");
                sb_span(b, lstrip_nl(content));
            } else {
                sb_puts(b, "<|im_start|>assistant\n");
                sb_span(b, content);
            }
            for (size_t k = 0; k < msg->n_tool_calls; k++) {
                if (k > 0 || content.n > 0) sb_putc(b, '\n');
                sb_puts(b, "<tool_call>\n{\"name\": \"");
                sb_puts(b, msg->tool_calls[k].name);
                sb_puts(b, "\", \"arguments\": ");
                put_arguments(b, msg->tool_calls[k].arguments);
                sb_puts(b, "}\n</tool_call>");
            }
            sb_puts(b, "<|im_end|>\n");
        } else if (role_is(msg, "tool")) {
            if (i == 0 || !role_is(&m[i - 1], "tool")) sb_puts(b, "<|im_start|>user");
            sb_puts(b, "\n<tool_response>\n");
            sb_puts(b, msg->content);
            sb_puts(b, "\n</tool_response>");
            if (i == n - 1 || !role_is(&m[i + 1], "tool")) sb_puts(b, "<|im_end|>\n");
        }
        /* A system message at index 0 was rendered above. */
    }
    if (o->add_generation_prompt) {
        sb_puts(b, "<|im_start|>assistant\n");
        if (o->enable_thinking == 0) sb_puts(b, "<think>\n\n</think>\n\n");
    }
}

/* ------------------------------------------------------------------------- */
/* Llama 2 chat (meta-llama/Llama-2-*-chat-hf template): BOS before every
 * [INST], the system prompt folded into the first user turn, "</s>" after each
 * reply; roles must alternate user/assistant. The last [/INST] already is the
 * generation prompt, so add_generation_prompt changes nothing. No tools. */

static rp_status render_llama2(sb *b, const rp_chat_msg *m, size_t n, const json_t *tools,
                               const rp_chat_opts *o) {
    if (tools && json_array_size(tools) > 0)
        return rp_errorf(RP_ERR_UNSUPPORTED, "chat: the Llama 2 format has no tool support");
    size_t start = 0;
    const char *sys = NULL;
    if (n > 0 && role_is(&m[0], "system")) {
        sys = m[0].content ? m[0].content : "";
        start = 1;
    }
    for (size_t i = start; i < n; i++) {
        bool want_user = (i - start) % 2 == 0;
        if (role_is(&m[i], "tool") || m[i].n_tool_calls > 0)
            return rp_errorf(RP_ERR_UNSUPPORTED,
                             "chat: message %zu: the Llama 2 format has no tool messages", i);
        if (!role_is(&m[i], want_user ? "user" : "assistant"))
            return rp_errorf(RP_ERR_INVALID_ARG,
                             "chat: message %zu: Llama 2 roles must alternate "
                             "user/assistant (expected %s, got \"%s\")",
                             i, want_user ? "user" : "assistant", m[i].role);
        /* The template strips the system block + content as one string. */
        sb text = {0};
        if (i == start && sys) {
            sb_puts(&text, "<<SYS>>\n");
            sb_puts(&text, sys);
            sb_puts(&text, "\n<</SYS>>\n\n");
        }
        sb_puts(&text, m[i].content);
        if (text.oom) b->oom = true;
        span c = py_strip((span){text.p ? text.p : "", text.n});
        if (want_user) {
            sb_puts(b, o->bos_text);
            sb_puts(b, "[INST] ");
            sb_span(b, c);
            sb_puts(b, " [/INST]");
        } else {
            sb_putc(b, ' ');
            sb_span(b, c);
            sb_puts(b, " </s>");
        }
        free(text.p);
    }
    return RP_OK;
}

/* ------------------------------------------------------------------------- */

const char *rp_chat_format_name(rp_chat_format f) {
    switch (f) {
    case RP_CHAT_LLAMA3: return "llama3";
    case RP_CHAT_CHATML: return "chatml";
    case RP_CHAT_LLAMA2: return "llama2";
    case RP_CHAT_MISTRAL: return "mistral";
    case RP_CHAT_UNKNOWN: break;
    }
    return "unknown";
}

rp_chat_format rp_chat_detect(const char *template_str) {
    if (!template_str) return RP_CHAT_UNKNOWN;
    if (strstr(template_str, "<|start_header_id|>")) return RP_CHAT_LLAMA3;
    if (strstr(template_str, "<|im_start|>")) return RP_CHAT_CHATML;
    if (strstr(template_str, "[TOOL_CALLS]")) return RP_CHAT_MISTRAL;   /* [INST] too, with its own tool syntax */
    if (strstr(template_str, "[INST]")) return RP_CHAT_LLAMA2;
    return RP_CHAT_UNKNOWN;
}

rp_status rp_chat_check_messages(const rp_chat_msg *m, size_t n) {
    static const char *const roles[] = {"system", "user", "assistant", "tool"};
    for (size_t i = 0; i < n; i++) {
        if (!m[i].role) return rp_errorf(RP_ERR_INVALID_ARG, "chat: message %zu has no role", i);
        bool known = false;
        for (size_t r = 0; r < sizeof roles / sizeof roles[0]; r++)
            known = known || strcmp(m[i].role, roles[r]) == 0;
        if (!known)
            return rp_errorf(RP_ERR_INVALID_ARG, "chat: message %zu: unknown role \"%s\"", i,
                             m[i].role);
        if (m[i].n_tool_calls == 0) continue;
        if (!m[i].tool_calls)
            return rp_errorf(RP_ERR_INVALID_ARG,
                             "chat: message %zu: n_tool_calls is %zu but tool_calls is NULL", i,
                             m[i].n_tool_calls);
        if (strcmp(m[i].role, "assistant") != 0)
            return rp_errorf(RP_ERR_INVALID_ARG,
                             "chat: message %zu: only assistant messages carry tool calls "
                             "(role \"%s\")", i, m[i].role);
        for (size_t k = 0; k < m[i].n_tool_calls; k++)
            if (!m[i].tool_calls[k].name)
                return rp_errorf(RP_ERR_INVALID_ARG,
                                 "chat: message %zu: tool call %zu has no name", i, k);
    }
    return RP_OK;
}

rp_status rp_chat_apply(rp_chat_format f, const rp_chat_msg *msgs, size_t n_msgs,
                        const rp_chat_opts *opts, char **out) {
    if (!out) return rp_errorf(RP_ERR_INVALID_ARG, "chat: out is NULL");
    *out = NULL;
    if (n_msgs > 0 && !msgs) return rp_errorf(RP_ERR_INVALID_ARG, "chat: msgs is NULL");
    if (f == RP_CHAT_UNKNOWN)
        return rp_errorf(RP_ERR_UNSUPPORTED, "chat: unknown chat format (template not recognized)");
    if (f == RP_CHAT_MISTRAL)
        return rp_errorf(RP_ERR_UNSUPPORTED, "chat: no built-in Mistral template (its own Jinja template renders it)");
    if (f != RP_CHAT_LLAMA3 && f != RP_CHAT_CHATML && f != RP_CHAT_LLAMA2)
        return rp_errorf(RP_ERR_INVALID_ARG, "chat: format %d out of range", (int)f);
    static const rp_chat_opts k_defaults = {0};
    const rp_chat_opts *o = opts ? opts : &k_defaults;
    RP_TRY(rp_chat_check_messages(msgs, n_msgs));

    json_t *tools = NULL;
    if (o->tools_json) {
        json_error_t err;
        tools = json_loads(o->tools_json, JSON_ALLOW_NUL, &err);
        if (!tools)
            return rp_errorf(RP_ERR_INVALID_ARG, "chat: tools_json: %s at line %d column %d",
                             err.text, err.line, err.column);
        if (!json_is_array(tools)) {
            json_decref(tools);
            return rp_errorf(RP_ERR_INVALID_ARG, "chat: tools_json is not a JSON array");
        }
    }

    sb b = {0};
    rp_status st = RP_OK;
    switch (f) {
    case RP_CHAT_LLAMA3: st = render_llama3(&b, msgs, n_msgs, tools, o); break;
    case RP_CHAT_CHATML: render_chatml(&b, msgs, n_msgs, tools, o); break;
    case RP_CHAT_LLAMA2: st = render_llama2(&b, msgs, n_msgs, tools, o); break;
    case RP_CHAT_MISTRAL:   /* refused above: no built-in */
    case RP_CHAT_UNKNOWN: break;
    }
    json_decref(tools);
    if (st != RP_OK) {
        free(b.p);
        return st;
    }
    return sb_finish(&b, out);
}
