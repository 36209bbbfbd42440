/* chat_template.c — chat templates as objects: a model's Jinja template or a named built-in, the render
 * context HF transformers would pass, and the retry over the message shapes templates expect. */
#include "tokenizer/chat_template.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "template/template.h"

struct rp_chat_tmpl {
    rp_tmpl *jinja;          /* NULL: a built-in */
    rp_chat_format builtin;  /* the built-in's renderer */
    rp_chat_format family;   /* tool-call syntax */
    bool tools;              /* renders tool definitions (a template may ignore `tools`) */
    char name[16];
};

static const struct { const char *name; rp_chat_format f; } k_builtins[] = {
    {"llama3", RP_CHAT_LLAMA3}, {"chatml", RP_CHAT_CHATML}, {"qwen3", RP_CHAT_CHATML}, {"llama2", RP_CHAT_LLAMA2},
};
const char rp_chat_builtin_names[] = "llama3, chatml, qwen3, llama2";

bool rp_chat_builtin_known(const char *name) {
    for (size_t i = 0; name && i < sizeof k_builtins / sizeof k_builtins[0]; i++)
        if (!strcmp(name, k_builtins[i].name)) return true;
    return false;
}

rp_status rp_chat_tmpl_builtin(const char *name, rp_chat_tmpl **out) {
    *out = NULL;
    for (size_t i = 0; name && i < sizeof k_builtins / sizeof k_builtins[0]; i++)
        if (!strcmp(name, k_builtins[i].name)) {
            rp_chat_tmpl *t = calloc(1, sizeof *t);
            if (!t) return rp_errorf(RP_ERR_NOMEM, "chat template: out of memory");
            t->builtin = t->family = k_builtins[i].f;
            t->tools = t->builtin != RP_CHAT_LLAMA2;
            snprintf(t->name, sizeof t->name, "%s", name);
            *out = t;
            return RP_OK;
        }
    return rp_errorf(RP_ERR_INVALID_ARG, "chat template: unknown built-in '%s' (built-ins: %s)", name ? name : "(null)",
                     rp_chat_builtin_names);
}

void rp_chat_tmpl_free(rp_chat_tmpl *t) {
    if (!t) return;
    rp_tmpl_free(t->jinja);
    free(t);
}

const char *rp_chat_tmpl_name(const rp_chat_tmpl *t) { return t->name; }
bool rp_chat_tmpl_is_jinja(const rp_chat_tmpl *t) { return t->jinja != NULL; }
rp_chat_format rp_chat_tmpl_family(const rp_chat_tmpl *t) { return t->family; }
bool rp_chat_tmpl_supports_tools(const rp_chat_tmpl *t) { return t->tools; }

/* ---- the context ---- */

static json_t *tool_calls_json(const rp_chat_msg *m, bool args_text) {
    json_t *arr = json_array();
    for (size_t k = 0; arr && k < m->n_tool_calls; k++) {
        const rp_tool_call *c = &m->tool_calls[k];
        const char *args = c->arguments ? c->arguments : "{}";
        json_t *a = args_text ? NULL : json_loads(args, JSON_DECODE_ANY, NULL);
        if (!a) a = json_string(args);
        json_t *fn = json_pack("{s:s, s:o}", "name", c->name ? c->name : "", "arguments", a);
        json_t *call = json_object();
        if (c->id) json_object_set_new(call, "id", json_string(c->id));
        json_object_set_new(call, "type", json_string("function"));
        json_object_set_new(call, "function", fn);
        json_array_append_new(arr, call);
    }
    return arr;
}

json_t *rp_chat_context(const rp_chat_msg *msgs, size_t n, const rp_chat_opts *o, const json_t *tools, int shape) {
    json_t *ctx = json_object(), *ms = json_array();
    if (!ctx || !ms) {
        json_decref(ctx);
        json_decref(ms);
        return NULL;
    }
    /* shape bit 2: the system prompt joins the first user message (templates without a system role) */
    const bool fold = (shape & 4) && n >= 2 && !strcmp(msgs[0].role, "system") && !strcmp(msgs[1].role, "user");
    for (size_t i = fold ? 1 : 0; i < n; i++) {
        const rp_chat_msg *m = &msgs[i];
        json_t *j = json_object();
        json_object_set_new(j, "role", json_string(m->role));
        if (fold && i == 1) {
            json_t *c = json_sprintf("%s\n\n%s", msgs[0].content ? msgs[0].content : "", m->content ? m->content : "");
            json_object_set_new(j, "content", c ? c : json_null());
        } else
        json_object_set_new(j, "content", m->content ? json_string(m->content) : (shape & 2) ? json_string("") : json_null());
        if (m->n_tool_calls) json_object_set_new(j, "tool_calls", tool_calls_json(m, shape & 1));
        if (m->tool_call_id) json_object_set_new(j, "tool_call_id", json_string(m->tool_call_id));
        if (m->name) json_object_set_new(j, "name", json_string(m->name));
        json_array_append_new(ms, j);
    }
    json_object_set_new(ctx, "messages", ms);
    if (tools && json_array_size(tools) > 0) json_object_set(ctx, "tools", (json_t *)tools);
    json_object_set_new(ctx, "add_generation_prompt", json_boolean(o->add_generation_prompt));
    /* not given: undefined, as the Python reference renders a template called without it (HF, vLLM) */
    if (o->enable_thinking >= 0) json_object_set_new(ctx, "enable_thinking", json_boolean(o->enable_thinking > 0));
    json_object_set_new(ctx, "bos_token", json_string(o->bos_text ? o->bos_text : ""));
    json_object_set_new(ctx, "eos_token", json_string(o->eos_text ? o->eos_text : ""));
    if (o->reasoning_effort) json_object_set_new(ctx, "reasoning_effort", json_string(o->reasoning_effort));
    if (o->vars_json) {   /* checked to be an object by the caller; a bad one adds nothing */
        json_t *v = json_loads(o->vars_json, 0, NULL);
        if (json_is_object(v)) json_object_update(ctx, v);
        json_decref(v);
    }
    return ctx;
}

bool rp_chat_shape_applies(const rp_chat_msg *msgs, size_t n, int shape) {
    bool any_calls = false, any_null = false;
    for (size_t i = 0; i < n; i++) {
        any_calls |= msgs[i].n_tool_calls > 0;
        any_null |= msgs[i].content == NULL;
    }
    const bool sys_user = n >= 2 && !strcmp(msgs[0].role, "system") && !strcmp(msgs[1].role, "user");
    return !((shape & 1) && !any_calls) && !((shape & 2) && !any_null) && !((shape & 4) && !sys_user);
}

/* ---- rendering ---- */

static rp_status render_jinja(const rp_chat_tmpl *t, const rp_chat_msg *msgs, size_t n, const rp_chat_opts *o,
                              const json_t *tools, char **out) {
    rp_status first = RP_OK;
    char first_msg[600] = "";
    for (int shape = 0; shape < 8; shape++) {
        if (!rp_chat_shape_applies(msgs, n, shape)) continue;
        json_t *ctx = rp_chat_context(msgs, n, o, tools, shape);
        if (!ctx) return rp_errorf(RP_ERR_NOMEM, "chat: out of memory");
        size_t len;
        const rp_tmpl_opts to = {.now = (time_t)o->now};
        rp_status st = rp_tmpl_render(t->jinja, ctx, &to, out, &len);
        json_decref(ctx);
        if (st == RP_OK) return RP_OK;
        if (st == RP_ERR_NOMEM) return st;
        if (first == RP_OK) {
            first = st;
            snprintf(first_msg, sizeof first_msg, "%s", rp_last_error());
        }
    }
    return rp_errorf(first, "%s", first_msg);
}

rp_status rp_chat_tmpl_render(const rp_chat_tmpl *t, const rp_chat_msg *msgs, size_t n, const rp_chat_opts *o,
                              char **out) {
    if (!out) return rp_errorf(RP_ERR_INVALID_ARG, "chat: out is NULL");
    *out = NULL;
    if (!t) return rp_errorf(RP_ERR_UNSUPPORTED, "chat: no chat template");
    if (!t->jinja) return rp_chat_apply(t->builtin, msgs, n, o, out);
    static const rp_chat_opts k_defaults = {0};
    if (!o) o = &k_defaults;
    if (n > 0 && !msgs) return rp_errorf(RP_ERR_INVALID_ARG, "chat: msgs is NULL");
    RP_TRY(rp_chat_check_messages(msgs, n));
    json_t *tools = NULL;
    if (o->tools_json) {
        json_error_t err;
        tools = json_loads(o->tools_json, JSON_ALLOW_NUL, &err);
        if (!tools)
            return rp_errorf(RP_ERR_INVALID_ARG, "chat: tools_json: %s at line %d column %d", err.text, err.line, err.column);
        if (!json_is_array(tools)) {
            json_decref(tools);
            return rp_errorf(RP_ERR_INVALID_ARG, "chat: tools_json is not a JSON array");
        }
    }
    rp_status st = render_jinja(t, msgs, n, o, tools, out);
    json_decref(tools);
    return st;
}

rp_status rp_chat_tmpl_from_source(const char *src, size_t len, const char *origin, rp_chat_tmpl **out) {
    *out = NULL;
    rp_chat_tmpl *t = calloc(1, sizeof *t);
    if (!t) return rp_errorf(RP_ERR_NOMEM, "chat template: out of memory");
    snprintf(t->name, sizeof t->name, "jinja");
    char why[512];
    rp_status st = rp_tmpl_compile(src, len, &t->jinja);
    if (st != RP_OK) {
        free(t);
        snprintf(why, sizeof why, "%s", rp_last_error());   /* rp_errorf overwrites the text it would read */
        return rp_errorf(st, "%s: %s", origin, why);
    }
    char *s = strndup(src, len);
    t->family = s ? rp_chat_detect(s) : RP_CHAT_UNKNOWN;
    free(s);
    /* the smallest conversation any chat template takes: with a system prompt, else without */
    const rp_chat_msg probe[] = {{.role = "system", .content = "You are a helpful assistant."},
                                 {.role = "user", .content = "Hello"}};
    const rp_chat_opts po = {.add_generation_prompt = true, .bos_text = "<s>", .eos_text = "</s>"};
    char *text = NULL;
    st = rp_chat_tmpl_render(t, probe, 2, &po, &text);
    if (st != RP_OK) {
        free(text);
        text = NULL;
        st = rp_chat_tmpl_render(t, probe + 1, 1, &po, &text);
    }
    free(text);
    text = NULL;
    if (st == RP_OK) {   /* does it show the tools it is given? */
        rp_chat_opts to = po;
        to.tools_json = "[{\"type\": \"function\", \"function\": {\"name\": \"rp_probe_tool\", \"description\": \"d\", "
                        "\"parameters\": {\"type\": \"object\", \"properties\": {}}}}]";
        t->tools = rp_chat_tmpl_render(t, probe + 1, 1, &to, &text) == RP_OK && strstr(text, "rp_probe_tool");
        free(text);
        rp_error_clear();
    }
    if (st != RP_OK && st != RP_ERR_NOMEM) {
        snprintf(why, sizeof why, "%s", rp_last_error());
        st = rp_errorf(RP_ERR_FORMAT, "%s fails on a one-message conversation: %s", origin, why);
    }
    if (st != RP_OK) {
        rp_chat_tmpl_free(t);
        return st;
    }
    *out = t;
    return RP_OK;
}

rp_status rp_chat_tmpl_open(const char *spec, rp_chat_tmpl **out) {
    *out = NULL;
    if (!spec || !*spec) return rp_errorf(RP_ERR_INVALID_ARG, "chat template: empty name");
    if (rp_chat_builtin_known(spec)) return rp_chat_tmpl_builtin(spec, out);
    FILE *f = fopen(spec, "rb");
    if (!f)
        return rp_errorf(RP_ERR_INVALID_ARG, "chat template '%s': not a built-in (%s) and not a readable file (%s)", spec,
                         rp_chat_builtin_names, strerror(errno));
    char *buf = NULL;
    size_t n = 0, cap = 0;
    rp_status st = RP_OK;
    for (;;) {
        if (n == cap) {
            if (cap >= ((size_t)8 << 20)) { st = rp_errorf(RP_ERR_INVALID_ARG, "chat template '%s': larger than 8 MiB", spec); break; }
            cap = cap ? cap * 2 : 4096;
            char *nb = realloc(buf, cap);
            if (!nb) { st = rp_errorf(RP_ERR_NOMEM, "chat template: out of memory"); break; }
            buf = nb;
        }
        size_t k = fread(buf + n, 1, cap - n, f);
        n += k;
        if (k == 0) {
            if (ferror(f)) st = rp_errorf(RP_ERR_IO, "chat template '%s': read error", spec);
            break;
        }
    }
    fclose(f);
    if (st == RP_OK) {
        char origin[300];
        snprintf(origin, sizeof origin, "chat template file '%s'", spec);
        st = rp_chat_tmpl_from_source(buf ? buf : "", n, origin, out);
    }
    free(buf);
    return st;
}
