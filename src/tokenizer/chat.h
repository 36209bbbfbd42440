/* chat.h — chat templates (Llama 3, Qwen3/ChatML) with tools, and tool-call parsing. */
#ifndef RP_CHAT_H
#define RP_CHAT_H

#include <stdbool.h>
#include <stddef.h>

#include "reprise.h"

/* rp_chat_format, rp_chat_format_name, rp_tool_call, rp_chat_parse_tool_calls and rp_tool_calls_free are public
 * (reprise.h). */

/* Recognizes the format from a `tokenizer.chat_template` string (no general
 * Jinja: it looks for each family's marker tokens). NULL or an unrecognized
 * template gives RP_CHAT_UNKNOWN. */
rp_chat_format rp_chat_detect(const char *template_str);

/* A message in OpenAI's shape. role: "system" | "user" | "assistant" | "tool".
 * For role "tool", tool_call_id / name say which call this answers. */
typedef struct rp_chat_msg {
    const char *role;
    const char *content;              /* may be NULL (assistant with only tool calls) */
    const rp_tool_call *tool_calls;   /* assistant only; may be NULL */
    size_t n_tool_calls;
    const char *tool_call_id;         /* tool only; may be NULL */
    const char *name;                 /* tool only; may be NULL */
} rp_chat_msg;

typedef struct rp_chat_opts {
    const char *tools_json;       /* JSON array of OpenAI tool definitions, or NULL */
    bool add_generation_prompt;   /* end with the assistant header so the model answers */
    int enable_thinking;          /* -1: not given (left undefined for a template, so its own default applies:
                                     Qwen3 thinks), 0 off (Qwen3: an empty <think></think> block, as its template
                                     renders it), 1 on */
    const char *bos_text;         /* text of BOS to prefix (Llama 3 "<|begin_of_text|>"), or NULL; Jinja: bos_token */
    const char *eos_text;         /* Jinja templates' eos_token (built-ins do not use it), or NULL */
    int64_t now;                  /* Jinja strftime_now's clock, Unix seconds UTC (0: the current time) */
    const char *reasoning_effort; /* Jinja: reasoning_effort (unset when NULL) */
    const char *vars_json;        /* JSON object of more Jinja variables (chat_template_kwargs), or NULL */
} rp_chat_opts;

/* Roles known, tool calls only on assistant messages and named: RP_ERR_INVALID_ARG naming the message. */
rp_status rp_chat_check_messages(const rp_chat_msg *msgs, size_t n);

/* Renders messages into prompt text (with special-token texts, to be tokenized
 * with parse_special). *out is malloc'd; caller frees. Bad input (unknown role,
 * tools_json not a JSON array) -> RP_ERR_INVALID_ARG naming the message index. */
rp_status rp_chat_apply(rp_chat_format f, const rp_chat_msg *msgs, size_t n_msgs,
                        const rp_chat_opts *opts, char **out);

/* Re-serializes JSON text exactly as Jinja's `tojson` in HF chat templates
 * (Python json.dumps, ensure_ascii=False) would: keys in input order, UTF-8
 * kept, floats in Python repr. indent < 0 gives one line with ", " / ": "
 * separators (or "," / ":" when compact); indent >= 0 puts each item on its
 * own line indented by that many spaces per level. *out is malloc'd.
 * Malformed JSON -> RP_ERR_FORMAT. */
rp_status rp_chat_tojson(const char *json_text, int indent, bool compact, char **out);

/* True if `text` (generated so far) contains the start of a tool call in this
 * format (the scheduler uses this to suspend a session waiting on a tool). */
bool rp_chat_has_tool_call(rp_chat_format f, const char *text);

/* True if the last `added` bytes of text[0..len) complete a tool call in
 * format f: ChatML's </tool_call> (after an opening tag rp_chat_has_tool_call
 * counts) or Llama 3's bare {"name": ...} object whose closing brace just
 * arrived. The scheduler ends a turn at that token. */
bool rp_chat_tool_call_closed(rp_chat_format f, const char *text, int32_t len, int32_t added);

#endif /* RP_CHAT_H */
