/* lazy_grammar.h — a grammar that applies from a trigger on (llama.cpp's "lazy grammar"): the reply is unconstrained
 * until its text opens a tool call in the chat format's syntax, then the grammar of the call takes over from the
 * opening, the text already generated from it fed to the grammar first. tool_choice "auto" with strict tools. */
#ifndef RP_SERVER_LAZY_GRAMMAR_H
#define RP_SERVER_LAZY_GRAMMAR_H

#include <stdbool.h>
#include <stddef.h>

#include "reprise.h"

/* Where the first tool-call opening of format f starts in text[0..len), or -1; *end gets one past it. The
 * openings: ChatML / Qwen `<tool_call>`, Mistral `[TOOL_CALLS]`, Llama 3 `{` then up to 8 whitespace bytes and
 * `"name"` (a bare JSON call). *partial (may be NULL) is set when text ends inside what could still become one
 * (its start; the caller keeps those bytes). Other formats have none. */
long rp_srv_tool_opening(rp_chat_format f, const char *text, size_t len, size_t *end, long *partial);

typedef struct rp_srv_lazy rp_srv_lazy;

/* A lazy grammar over state gs (borrowed: its grammar's root matches the call from its opening on), for replies of
 * model m in format f; think_open: the reply starts inside an opened <think> block (ChatML: an opening inside
 * reasoning does not count, as the tool-call parser skips it). Allocates its text window here, nothing later. */
rp_status rp_srv_lazy_new(const rp_model *m, rp_grammar_state *gs, rp_chat_format f, bool think_open,
                          rp_srv_lazy **out);
void rp_srv_lazy_free(rp_srv_lazy *z);
/* An rp_logits_fn (user: the lazy grammar): its first call takes hist as the prompt, later calls read the tokens
 * generated since; once an opening is complete the grammar accepts the text from it and masks the logits from
 * then on. Text that the grammar cannot take from an opening leaves the reply unconstrained (and the next opening
 * is tried). One sequence, one turn. */
void rp_srv_lazy_on_logits(void *user, const rp_token *hist, int32_t n_hist, float *logits, int32_t n_vocab);
/* The grammar took over (for tests). */
bool rp_srv_lazy_active(const rp_srv_lazy *z);

/* The GBNF root rule rp_srv_lazy_wrap adds. */
#define RP_SRV_LAZY_ROOT "lazy-tool-call"
/* gbnf (the call object's grammar, root `root`) with a rule RP_SRV_LAZY_ROOT matching the whole call block of
 * format f from its opening: `<tool_call>` object `</tool_call>`, `[TOOL_CALLS][` object `]`, or (Llama 3) the
 * object itself. *out malloc'd. */
rp_status rp_srv_lazy_wrap(rp_chat_format f, const char *gbnf, char **out);

#endif /* RP_SERVER_LAZY_GRAMMAR_H */
