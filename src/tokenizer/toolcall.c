/* toolcall.c — extracting tool calls from generated text (Qwen3 <tool_call> blocks, Llama 3 JSON calls). */
#include "tokenizer/chat.h"

#include <errno.h>
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "core/error.h"

/* ------------------------------------------------------------------------- */

typedef struct call_list {
    rp_tool_call *v;
    size_t n, cap;
} call_list;

void rp_tool_calls_free(rp_tool_call *calls, size_t n) {
    if (!calls) return;
    for (size_t i = 0; i < n; i++) {
        free(calls[i].id);
        free(calls[i].name);
        free(calls[i].arguments);
    }
    free(calls);
}

/* "call_" + 24 alphanumerics from the kernel CSPRNG; bytes >= 248 are
 * rejected so each of the 62 symbols is equally likely. */
static rp_status make_call_id(char **out) {
    static const char k_alnum[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    enum { PREFIX = 5, RAND = 24 };
    char *id = malloc(PREFIX + RAND + 1);
    if (!id) return rp_errorf(RP_ERR_NOMEM, "toolcall: out of memory for call id");
    memcpy(id, "call_", PREFIX);
    size_t have = 0;
    while (have < RAND) {
        unsigned char buf[32];
        ssize_t got = getrandom(buf, sizeof buf, 0);
        if (got < 0) {
            if (errno == EINTR) continue;
            int e = errno;
            free(id);
            return rp_errorf(RP_ERR_IO, "toolcall: getrandom failed: %s", strerror(e));
        }
        for (ssize_t i = 0; i < got && have < RAND; i++)
            if (buf[i] < 248) id[PREFIX + have++] = k_alnum[buf[i] % 62];
    }
    id[PREFIX + RAND] = '\0';
    *out = id;
    return RP_OK;
}

/* Compact JSON text of v, in the same number/escape style as the renderer
 * (jansson's own dump prints 0.1 as 0.10000000000000001). */
static rp_status compact_json(const json_t *v, char **out) {
    char *raw = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!raw) return rp_errorf(RP_ERR_NOMEM, "toolcall: out of memory dumping arguments");
    rp_status st = rp_chat_tojson(raw, -1, true, out);
    free(raw);
    return st;
}

/* Reads {"name": str, "arguments"|"parameters": object | JSON-object string |
 * null | absent} from a parsed value. Fills *call (name + compact
 * arguments; id left NULL) and sets *ok; *ok false means "not a call". */
static rp_status call_from_value(const json_t *v, rp_tool_call *call, bool *ok) {
    *ok = false;
    rp_status st = RP_OK;
    json_t *parsed_args = NULL;
    /* json_object_get is NULL-safe on non-objects; jansson without
     * JSON_ALLOW_NUL rejects \u0000, so the name is a proper C string. */
    const json_t *name = json_object_get(v, "name");
    const json_t *args = json_object_get(v, "arguments");
    if (!args) args = json_object_get(v, "parameters");
    if (!json_is_object(v) || !json_is_string(name) || json_string_length(name) == 0) goto done;
    if (json_is_string(args)) {
        /* Some models emit OpenAI-style arguments: a string holding JSON. */
        parsed_args = json_loads(json_string_value(args), 0, NULL);
        args = parsed_args;
        if (!json_is_object(args)) goto done;
    } else if (args && !json_is_object(args) && !json_is_null(args)) {
        goto done;
    }
    call->name = strdup(json_string_value(name));
    if (!call->name) {
        st = rp_errorf(RP_ERR_NOMEM, "toolcall: out of memory");
        goto done;
    }
    if (!args || json_is_null(args)) {
        call->arguments = strdup("{}");
        if (!call->arguments) st = rp_errorf(RP_ERR_NOMEM, "toolcall: out of memory");
    } else {
        st = compact_json(args, &call->arguments);
    }
    if (st != RP_OK) {
        free(call->name);
        call->name = NULL;
        goto done;
    }
    *ok = true;
done:
    json_decref(parsed_args);
    return st;
}

/* Outcome of trying to read one call out of a JSON text span. */
typedef enum call_parse {
    CALL_OK,         /* *call filled */
    CALL_NOT_CALL,   /* valid JSON but not a call (no name / bad arguments) */
    CALL_MALFORMED,  /* not valid JSON */
} call_parse;

static rp_status parse_call_json(const char *s, size_t n, rp_tool_call *call, call_parse *res) {
    *res = CALL_MALFORMED;
    json_t *v = json_loadb(s, n, 0, NULL);
    if (!v) return RP_OK;
    bool ok;
    rp_status st = call_from_value(v, call, &ok);
    json_decref(v);
    *res = ok ? CALL_OK : CALL_NOT_CALL;
    return st;
}

/* Appends *call (taking ownership) after giving it an id. */
static rp_status list_push(call_list *l, rp_tool_call *call) {
    rp_status st = make_call_id(&call->id);
    if (st == RP_OK && l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 4;
        rp_tool_call *v = realloc(l->v, cap * sizeof *v);
        if (!v) {
            st = rp_errorf(RP_ERR_NOMEM, "toolcall: out of memory");
        } else {
            l->v = v;
            l->cap = cap;
        }
    }
    if (st != RP_OK) {
        free(call->id);
        free(call->name);
        free(call->arguments);
        *call = (rp_tool_call){0};
        return st;
    }
    l->v[l->n++] = *call;
    *call = (rp_tool_call){0};
    return RP_OK;
}

/* ------------------------------------------------------------------------- */
/* Content assembly: the text minus the accepted calls. The whitespace after a
 * removed call is dropped, and when calls end the text, so is the whitespace
 * before them, so "Sure.\n<tool_call>...</tool_call>" leaves "Sure." — what
 * the templates put back in front of "\n<tool_call>" when re-rendering. */

typedef struct cutter {
    const char *text;
    size_t len;
    size_t kept;    /* text[kept..] not yet copied */
    char *out;
    size_t n;
    bool cut_any;
} cutter;

static bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* Copies text[kept, from) to out, then skips text[from, to) and the
 * whitespace (and, if sep, ';') that follows. Returns the new read offset. */
static size_t cut(cutter *c, size_t from, size_t to, bool sep) {
    memcpy(c->out + c->n, c->text + c->kept, from - c->kept);
    c->n += from - c->kept;
    while (to < c->len && (is_ws(c->text[to]) || (sep && c->text[to] == ';'))) to++;
    c->kept = to;
    c->cut_any = true;
    return to;
}

static void cut_finish(cutter *c) {
    bool ends_with_call = c->cut_any && c->kept == c->len;
    memcpy(c->out + c->n, c->text + c->kept, c->len - c->kept);
    c->n += c->len - c->kept;
    if (ends_with_call)
        while (c->n > 0 && is_ws(c->out[c->n - 1])) c->n--;
    c->out[c->n] = '\0';
}

/* Start of the text a Qwen3 call may appear in: after the last "</think>";
 * nowhere while a "<think>" is still open (calls inside reasoning stay in
 * the content). */
static size_t chatml_search_start(const char *text, size_t len) {
    const char *close = NULL;
    for (const char *p = text; (p = strstr(p, "</think>")) != NULL; p += 8) close = p;
    if (close) return (size_t)(close - text) + 8;
    if (strstr(text, "<think>")) return len;
    return 0;
}

static rp_status parse_chatml(cutter *c, call_list *l) {
    static const char open_tag[] = "<tool_call>", close_tag[] = "</tool_call>";
    const size_t open_len = sizeof open_tag - 1, close_len = sizeof close_tag - 1;
    size_t i = chatml_search_start(c->text, c->len);
    while (i < c->len) {
        const char *p = strstr(c->text + i, open_tag);
        if (!p) break;
        size_t at = (size_t)(p - c->text), body = at + open_len;
        const char *q = strstr(c->text + body, close_tag);
        /* An unclosed block at the end still counts if its JSON is whole
         * (generation stopped right after the object). */
        size_t body_end = q ? (size_t)(q - c->text) : c->len;
        size_t end = q ? body_end + close_len : c->len;
        rp_tool_call call = {0};
        call_parse res;
        RP_TRY(parse_call_json(c->text + body, body_end - body, &call, &res));
        if (res != CALL_OK) {
            i = body;
            continue;
        }
        RP_TRY(list_push(l, &call));
        i = cut(c, at, end, false);
    }
    return RP_OK;
}

/* End (one past the matching '}') of the JSON object starting at text[at],
 * honouring strings and escapes; 0 when it never closes. */
static size_t object_end(const char *text, size_t len, size_t at) {
    size_t depth = 0;
    bool in_str = false;
    for (size_t i = at; i < len; i++) {
        char ch = text[i];
        if (in_str) {
            if (ch == '\\') i++;
            else if (ch == '"') in_str = false;
        } else if (ch == '"') {
            in_str = true;
        } else if (ch == '{') {
            depth++;
        } else if (ch == '}') {
            if (--depth == 0) return i + 1;
        }
    }
    return 0;
}

/* Llama 3.x: {"name": ..., "parameters": {...}} objects anywhere in the text,
 * each optionally preceded by <|python_tag|>, several separated by
 * whitespace or ';'. A valid JSON object that is not a call is skipped whole
 * so a call-shaped object nested inside it is not taken. */
/* A reply that is only a JSON array of calls ([{"name": ...}, ...], after an
 * optional <|python_tag|>) is taken whole. Sets *taken when it was. */
static rp_status parse_llama3_array(cutter *c, call_list *l, const char *tag, bool *taken) {
    *taken = false;
    size_t i = 0;
    while (i < c->len && is_ws(c->text[i])) i++;
    if (strncmp(c->text + i, tag, strlen(tag)) == 0) i += strlen(tag);
    while (i < c->len && is_ws(c->text[i])) i++;
    if (i >= c->len || c->text[i] != '[') return RP_OK;
    json_t *arr = json_loadb(c->text + i, c->len - i, 0, NULL);
    if (!json_is_array(arr) || json_array_size(arr) == 0) {
        json_decref(arr);
        return RP_OK;
    }
    rp_tool_call *tmp = calloc(json_array_size(arr), sizeof *tmp);
    if (!tmp) {
        json_decref(arr);
        return rp_errorf(RP_ERR_NOMEM, "toolcall: out of memory");
    }
    size_t n = 0;
    bool all = true;
    rp_status st = RP_OK;
    for (; n < json_array_size(arr) && all && st == RP_OK; n++)
        st = call_from_value(json_array_get(arr, n), &tmp[n], &all);
    json_decref(arr);
    if (st == RP_OK && all) {
        for (size_t k = 0; k < n && st == RP_OK; k++) st = list_push(l, &tmp[k]);
        if (st == RP_OK) {
            cut(c, 0, c->len, false);
            *taken = true;
        }
    }
    for (size_t k = 0; k < n; k++) { /* entries not pushed (pushed ones are zeroed) */
        free(tmp[k].name);
        free(tmp[k].arguments);
        free(tmp[k].id);
    }
    free(tmp);
    return st;
}

static rp_status parse_llama3(cutter *c, call_list *l) {
    static const char tag[] = "<|python_tag|>";
    const size_t tag_len = sizeof tag - 1;
    bool taken;
    RP_TRY(parse_llama3_array(c, l, tag, &taken));
    if (taken) return RP_OK;
    size_t i = 0;
    while (i < c->len) {
        const char *p = memchr(c->text + i, '{', c->len - i);
        if (!p) break;
        size_t at = (size_t)(p - c->text);
        size_t end = object_end(c->text, c->len, at);
        if (end == 0) {
            i = at + 1;
            continue;
        }
        rp_tool_call call = {0};
        call_parse res;
        RP_TRY(parse_call_json(c->text + at, end - at, &call, &res));
        if (res == CALL_MALFORMED) {
            i = at + 1;
            continue;
        }
        if (res == CALL_NOT_CALL) {
            i = end;
            continue;
        }
        RP_TRY(list_push(l, &call));
        /* Take a <|python_tag|> (and whitespace) right before the call too. */
        size_t from = at;
        while (from > c->kept && is_ws(c->text[from - 1])) from--;
        if (from >= c->kept + tag_len && memcmp(c->text + from - tag_len, tag, tag_len) == 0)
            at = from - tag_len;
        i = cut(c, at, end, true);
    }
    return RP_OK;
}

/* Mistral: [TOOL_CALLS] then a JSON array of {"name", "arguments"} (v3/v7 templates), or (v11 and later)
 * [TOOL_CALLS]name[ARGS]{...}, once per call. A block whose JSON is malformed, or an array with an entry that is
 * not a call, stays in the content. */
static rp_status parse_mistral(cutter *c, call_list *l) {
    static const char tag[] = "[TOOL_CALLS]", args_tag[] = "[ARGS]";
    const size_t tl = sizeof tag - 1, al = sizeof args_tag - 1;
    size_t i = 0;
    while (i < c->len) {
        const char *p = strstr(c->text + i, tag);
        if (!p) break;
        const size_t at = (size_t)(p - c->text);
        size_t b = at + tl;
        while (b < c->len && is_ws(c->text[b])) b++;
        if (b < c->len && c->text[b] == '[') {
            json_error_t e;
            json_t *arr = json_loadb(c->text + b, c->len - b, JSON_DISABLE_EOF_CHECK, &e);
            const size_t n = json_is_array(arr) ? json_array_size(arr) : 0;
            rp_tool_call *tmp = n ? calloc(n, sizeof *tmp) : NULL;
            if (n && !tmp) {
                json_decref(arr);
                return rp_errorf(RP_ERR_NOMEM, "toolcall: out of memory");
            }
            bool all = n > 0;
            rp_status st = RP_OK;
            size_t k = 0;
            for (; k < n && all && st == RP_OK; k++) st = call_from_value(json_array_get(arr, k), &tmp[k], &all);
            json_decref(arr);
            if (st == RP_OK && all)
                for (size_t j = 0; j < n && st == RP_OK; j++) st = list_push(l, &tmp[j]);
            for (size_t j = 0; j < k; j++) {   /* entries not pushed (pushed ones are zeroed) */
                free(tmp[j].name);
                free(tmp[j].arguments);
                free(tmp[j].id);
            }
            free(tmp);
            if (st != RP_OK) return st;
            i = st == RP_OK && all ? cut(c, at, b + e.position, false) : b;
            continue;
        }
        /* name[ARGS]{...} */
        const char *a = strstr(c->text + b, args_tag);
        size_t ne = a ? (size_t)(a - c->text) : 0;
        bool ok = a && ne > b;
        for (size_t q = b; ok && q < ne; q++) ok = !is_ws(c->text[q]) && c->text[q] != '[' && c->text[q] != '{';
        size_t ob = ok ? ne + al : 0;
        while (ok && ob < c->len && is_ws(c->text[ob])) ob++;
        size_t end = ok && ob < c->len && c->text[ob] == '{' ? object_end(c->text, c->len, ob) : 0;
        json_t *args = end ? json_loadb(c->text + ob, end - ob, 0, NULL) : NULL;
        if (!json_is_object(args)) {
            json_decref(args);
            i = b;
            continue;
        }
        rp_tool_call call = {0};
        call.name = strndup(c->text + b, ne - b);
        rp_status st = call.name ? compact_json(args, &call.arguments) : rp_errorf(RP_ERR_NOMEM, "toolcall: out of memory");
        json_decref(args);
        if (st == RP_OK) st = list_push(l, &call);
        if (st != RP_OK) {
            free(call.name);
            free(call.arguments);
            return st;
        }
        i = cut(c, at, end, false);
    }
    return RP_OK;
}

rp_status rp_chat_parse_tool_calls(rp_chat_format f, const char *text, rp_tool_call **calls,
                                   size_t *n_calls, char **content) {
    if (!calls || !n_calls || !content)
        return rp_errorf(RP_ERR_INVALID_ARG, "toolcall: NULL output pointer");
    *calls = NULL;
    *n_calls = 0;
    *content = NULL;
    if (!text) return rp_errorf(RP_ERR_INVALID_ARG, "toolcall: text is NULL");
    size_t len = strlen(text);
    cutter c = {.text = text, .len = len};
    c.out = malloc(len + 1); /* content never grows */
    if (!c.out) return rp_errorf(RP_ERR_NOMEM, "toolcall: out of memory");
    call_list l = {0};
    rp_status st = RP_OK;
    if (f == RP_CHAT_CHATML) st = parse_chatml(&c, &l);
    else if (f == RP_CHAT_LLAMA3) st = parse_llama3(&c, &l);
    else if (f == RP_CHAT_MISTRAL) st = parse_mistral(&c, &l);
    if (st != RP_OK) {
        rp_tool_calls_free(l.v, l.n);
        free(c.out);
        return st;
    }
    cut_finish(&c);
    *calls = l.v;
    *n_calls = l.n;
    *content = c.out;
    return RP_OK;
}

bool rp_chat_has_tool_call(rp_chat_format f, const char *text) {
    if (!text) return false;
    if (f == RP_CHAT_CHATML) {
        size_t len = strlen(text);
        size_t from = chatml_search_start(text, len);
        return from < len && strstr(text + from, "<tool_call>") != NULL;
    }
    if (f == RP_CHAT_MISTRAL) return strstr(text, "[TOOL_CALLS]") != NULL;
    if (f == RP_CHAT_LLAMA3) {
        if (strstr(text, "<|python_tag|>")) return true;
        for (const char *p = strchr(text, '{'); p; p = strchr(p + 1, '{')) {
            const char *q = p + 1;
            while (is_ws(*q)) q++;
            if (strncmp(q, "\"name\"", 6) == 0) return true;
        }
    }
    return false;
}

bool rp_chat_tool_call_closed(rp_chat_format f, const char *text, int32_t len, int32_t added) {
    if (!text || added <= 0 || len <= 0) return false;
    if (added > len) added = len;
    const char *tail = text + len - added;
    if (f == RP_CHAT_CHATML) {
        static const char close[] = "</tool_call>";
        const int32_t cl = (int32_t)sizeof close - 1;
        if (!memchr(tail, '>', (size_t)added)) return false;
        /* a close tag ending in the new bytes, after an open tag the format
         * counts (rp_chat_has_tool_call skips reasoning blocks) */
        int32_t from = len - added - cl + 1;
        if (from < 0) from = 0;
        for (int32_t p = from; p + cl <= len; p++)
            if (memcmp(text + p, close, (size_t)cl) == 0) return rp_chat_has_tool_call(f, text);
        return false;
    }
    if (f == RP_CHAT_MISTRAL) {   /* a block whose closing bracket just arrived parses as calls */
        if (!memchr(tail, ']', (size_t)added) && !memchr(tail, '}', (size_t)added)) return false;
        char *t = strndup(text, (size_t)len), *content = NULL;
        rp_tool_call *calls = NULL;
        size_t n = 0;
        const bool any = t && rp_chat_parse_tool_calls(f, t, &calls, &n, &content) == RP_OK && n > 0;
        rp_tool_calls_free(calls, n);
        free(content);
        free(t);
        return any;
    }
    if (f == RP_CHAT_LLAMA3) {
        /* a bare JSON call {"name": ...} whose closing brace just arrived (the
         * <|python_tag|> form ends with <|eom_id|>, an end-of-generation token) */
        if (!memchr(tail, '}', (size_t)added)) return false;
        for (const char *p = memchr(text, '{', (size_t)len); p; p = memchr(p + 1, '{', (size_t)(text + len - p - 1))) {
            const char *q = p + 1;
            while (q < text + len && is_ws(*q)) q++;
            if (text + len - q < 6 || memcmp(q, "\"name\"", 6) != 0) continue;
            const size_t end = object_end(text, (size_t)len, (size_t)(p - text));
            if (end == 0) return false;   /* still open: nothing later is complete either */
            if ((int32_t)end > len - added) return true;
            p = text + end - 1;
            if (p + 1 >= text + len) break;
        }
    }
    return false;
}
