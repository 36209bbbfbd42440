/* chat_template.h — a chat template as the engine uses it: the model's own Jinja template (run by
 * src/template/) or a named built-in renderer (chat.c), and the render context built from messages. */
#ifndef RP_CHAT_TEMPLATE_H
#define RP_CHAT_TEMPLATE_H

#include <jansson.h>
#include <stdbool.h>

#include "tokenizer/chat.h"

typedef struct rp_chat_tmpl rp_chat_tmpl;

/* Built-in names: "llama3", "chatml", "qwen3" (= chatml), "llama2". */
bool rp_chat_builtin_known(const char *name);
extern const char rp_chat_builtin_names[];   /* "llama3, chatml, qwen3, llama2" */

/* A Jinja template from its text; `origin` names it in messages ("the model's tokenizer.chat_template", a
 * path). Compiled and test-rendered on a minimal conversation: a template that cannot render even that is
 * refused here (RP_ERR_FORMAT naming line:column), never used. */
rp_status rp_chat_tmpl_from_source(const char *src, size_t len, const char *origin, rp_chat_tmpl **out);
/* A built-in by name; an unknown name -> RP_ERR_INVALID_ARG listing the built-ins. */
rp_status rp_chat_tmpl_builtin(const char *name, rp_chat_tmpl **out);
/* --chat-template's argument: a built-in's name, else a file holding a Jinja template. */
rp_status rp_chat_tmpl_open(const char *spec, rp_chat_tmpl **out);
void rp_chat_tmpl_free(rp_chat_tmpl *t);

const char *rp_chat_tmpl_name(const rp_chat_tmpl *t);       /* built-in name, or "jinja" */
bool rp_chat_tmpl_is_jinja(const rp_chat_tmpl *t);          /* a Jinja template (bos_token / eos_token apply) */
rp_chat_format rp_chat_tmpl_family(const rp_chat_tmpl *t);   /* tool-call syntax of its replies */
bool rp_chat_tmpl_supports_tools(const rp_chat_tmpl *t);     /* it renders the tool definitions it is given */

/* Renders messages (rp_chat_apply's contract). Jinja templates see the variables HF transformers passes:
 * messages (tool_calls with arguments as JSON values, tool results), tools (only when given), bos_token,
 * eos_token, add_generation_prompt, enable_thinking. A template that rejects that shape (arguments
 * concatenated as text, content expected to be a string, no system role) is retried with arguments as JSON
 * text, null contents as "", and the system prompt joined to the first user message, in that order (as
 * llama.cpp's polyfills do); the first error is reported if every shape fails. */
rp_status rp_chat_tmpl_render(const rp_chat_tmpl *t, const rp_chat_msg *msgs, size_t n, const rp_chat_opts *o,
                              char **out);

/* The context a Jinja template is rendered with (for tests: the parity test feeds the same to Python).
 * shape bit 0: tool-call arguments as JSON text instead of values; bit 1: null contents as ""; bit 2: a
 * leading system message joined to the user message after it ("system\n\nuser"). NULL on out of memory.
 * tools: a JSON array or NULL. */
json_t *rp_chat_context(const rp_chat_msg *msgs, size_t n, const rp_chat_opts *o, const json_t *tools, int shape);
/* Whether a shape changes anything for these messages (the renderer tries only those, shape 0 first). */
bool rp_chat_shape_applies(const rp_chat_msg *msgs, size_t n, int shape);

#endif /* RP_CHAT_TEMPLATE_H */
