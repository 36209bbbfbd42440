/* template.h — a Jinja2-subset interpreter for chat templates (what the templates shipped in GGUF files use),
 * rendering byte-identically to Python jinja2 with HF transformers' environment: trim_blocks, lstrip_blocks,
 * tojson = json.dumps(ensure_ascii=False), raise_exception, strftime_now, loop controls.
 *
 * Templates are untrusted input: compile and render never crash; nesting, recursion, loop iterations, memory
 * and output are bounded, and every error names line:column and the construct. A compiled template is
 * immutable: several threads may render it at once. */
#ifndef RP_TEMPLATE_TEMPLATE_H
#define RP_TEMPLATE_TEMPLATE_H

#include <jansson.h>
#include <stdint.h>
#include <time.h>

#include "reprise.h"

typedef struct rp_tmpl rp_tmpl;

typedef struct rp_tmpl_opts {
    time_t now;            /* strftime_now's clock, UTC (0: the current time) */
    size_t max_output;     /* bytes of output (0: 16 MiB) */
    size_t max_memory;     /* bytes of working memory per render (0: 256 MiB) */
    uint64_t max_iters;    /* loop iterations, range() items and such, in all (0: 1,000,000) */
    int max_depth;         /* nested loops / macro calls (0: 64) */
} rp_tmpl_opts;

/* Compiles template text. Syntax errors -> RP_ERR_FORMAT "chat template: line L column C: syntax error: ...". */
rp_status rp_tmpl_compile(const char *src, size_t len, rp_tmpl **out);
void rp_tmpl_free(rp_tmpl *t);

/* Renders with the variables of `context` (a JSON object: messages, tools, add_generation_prompt, bos_token,
 * ...) plus the globals range, namespace, dict, raise_exception and strftime_now. *out is malloc'd and
 * NUL-terminated (*len: its length, may be NULL). A failure (raise_exception, a Python TypeError, undefined
 * value, a limit) -> RP_ERR_INVALID_ARG "chat template: line L column C (construct): ...". opts may be NULL. */
rp_status rp_tmpl_render(const rp_tmpl *t, const json_t *context, const rp_tmpl_opts *opts, char **out, size_t *len);

/* json.dumps(v, ensure_ascii=False, indent=..., separators=...) of a JSON value, as the templates' tojson prints
 * it: keys in their order, UTF-8 kept, floats as Python's repr. indent < 0: one line; item_sep / key_sep NULL:
 * Python's defaults for the indent. *out is malloc'd. */
rp_status rp_tmpl_json_dumps(const json_t *v, int indent, const char *item_sep, const char *key_sep, char **out);

#endif /* RP_TEMPLATE_TEMPLATE_H */
