/* prompt.h — request -> prompt text (chat template, tools, documents as segments) -> tokens with chunk boundaries. */
#ifndef RP_SERVER_PROMPT_H
#define RP_SERVER_PROMPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "reprise.h"
#include "server/errors.h"
#include "server/request.h"

#define RP_SRV_MAX_PIECES (RP_SRV_MAX_DOCS_PIECES + 2)
#define RP_SRV_MAX_DOCS_PIECES 256

/* The rendered prompt as text: pieces [cut[i], cut[i+1]) are tokenized
 * separately and each piece after the first starts a chunk boundary
 * (documents are pieces of their own, so the same document gives the same
 * tokens wherever it appears). */
typedef struct rp_srv_text {
    char *text;                        /* malloc'd, NUL-terminated */
    size_t len;
    size_t cut[RP_SRV_MAX_PIECES + 1]; /* cut[0] = 0, cut[n_pieces] = len */
    bool special[RP_SRV_MAX_PIECES];   /* piece i may contain special-token texts (template output) */
    int n_pieces;
    rp_chat_format parse_fmt;          /* tool-call syntax of the reply (UNKNOWN: replies carry no calls) */
    bool tools_active;                 /* tools were put in the prompt: parse calls out of the reply */
    char *forced;                      /* text the reply is forced to start with (already at the end of `text`), or NULL */
    const char *forced_close;          /* with `forced`: appended after the arguments object ends */
    char *grammar;                     /* with `forced`: the GBNF of what the model writes after it (the named tool's
                                          arguments, or for "required" one call of any tool); with grammar_lazy:
                                          the call block's from its opening on; or NULL */
    bool grammar_lazy;                 /* tool_choice auto with strict tools: `grammar` applies once the reply
                                          opens a call (lazy_grammar.h; root RP_SRV_LAZY_ROOT) */
    bool reasoning;                    /* split <think>...</think> out of the reply (reasoning_format not none) */
    bool think_started;                /* the rendered prompt ends inside an opened think block */
} rp_srv_text;

/* Renders a chat request for a model with chat format `fmt` (no tokenizer
 * needed; the fuzz target calls this for every format). Tools go into the
 * template when it supports them (Llama 3, ChatML) and otherwise into a
 * generic system prompt with <tool_call> blocks (parsed as ChatML);
 * tool_choice none leaves them out, named forces the reply to open a call
 * of that tool and its arguments follow the tool's parameters schema (a
 * grammar), required adds an instruction to the system prompt and forces
 * one call of any tool, name and arguments under the tools' schemas; auto
 * with a strict tool leaves the reply free until it opens a call, which then
 * follows the schemas (a lazy grammar). reprise_documents
 * join the system message, each its own piece. Errors are 400s naming the
 * message. m NULL (or a model without a template): a plain transcript. */
rp_status rp_srv_render_chat(const rp_model *m, const rp_srv_request *r, rp_srv_text *out, rp_api_error *err);

/* /v1/completions: documents (each a piece) then the prompt text. */
rp_status rp_srv_render_completion(const rp_srv_request *r, rp_srv_text *out, rp_api_error *err);

void rp_srv_text_free(rp_srv_text *t);

/* The GBNF of a tool call's JSON object (tools_json: the request's tools array): with name, that function's
 * arguments (its parameters schema; any object without one); with name NULL ("required", and "auto"'s lazy
 * grammar), {"name": one of the tools, args_key: its arguments} (args_key "parameters" for Llama 3, else
 * "arguments"). strict_only: only tools with "strict": true are held to their schema, the others' arguments are
 * any object. *gbnf is malloc'd. */
rp_status rp_srv_tool_grammar(const char *tools_json, const char *name, const char *args_key, bool strict_only,
                              char **gbnf);
/* Some tool of the request's tools array has "strict": true. */
bool rp_srv_tools_strict(const char *tools_json);

/* Tokens of a rendered prompt. bounds[] are the piece starts (> 0). */
typedef struct rp_srv_prompt {
    rp_token *toks;
    int32_t n;
    int32_t *bounds;
    int32_t n_bounds;
} rp_srv_prompt;

/* Tokenizes the pieces (BOS first when the vocabulary wants one). More than
 * `max_tokens` tokens is a 400 context_length_exceeded; allocation is at most
 * max_tokens + 1 ids. */
rp_status rp_srv_tokenize(const rp_model *m, const rp_srv_text *t, int32_t max_tokens, rp_srv_prompt *out,
                          rp_api_error *err);
void rp_srv_prompt_free(rp_srv_prompt *p);

#endif /* RP_SERVER_PROMPT_H */
