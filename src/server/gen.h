/* gen.h — a request's view of its generation: detokenized text, stop sequences held back across chunks, tool-call extraction. */
#ifndef RP_SERVER_GEN_H
#define RP_SERVER_GEN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "reprise.h"
#include "server/backend.h"
#include "server/prompt.h"
#include "server/request.h"

/* Single-threaded (the request's thread). Text grows with the tokens fed;
 * a stop sequence cuts it where the sequence starts (the sequence is not
 * returned), and bytes that might start a stop sequence or a tool call are
 * held back from streaming until the next tokens decide. */
typedef struct rp_srv_gen {
    rp_detokenizer *dt;         /* NULL without a model (the fuzz target feeds text directly) */
    char *text;                 /* generated text (NUL-terminated), cut at a stop sequence */
    size_t len, cap;
    size_t emitted;             /* bytes already streamed as content */
    const char *stop[RP_SRV_MAX_STOP];
    int n_stop;
    bool stopped;               /* a stop sequence ended the text */
    bool flushed;
    /* tool calls */
    bool tools;                 /* parse calls out of the reply */
    rp_chat_format fmt;
    const char *forced;         /* named tool_choice: the reply is forced + text (+ closing) */
    const char *forced_close;
    bool hold_all;              /* nothing is streamed as content (forced call, Llama 3 JSON reply) */
    const char *tools_json;     /* the request's tool definitions: calls that do not fit them stay content */
    /* reasoning: text = [think block] content; tool calls and content streaming look at the content only */
    bool reasoning;             /* split <think>...</think> out (rp_chat_reasoning_span) */
    bool think_started;         /* the prompt opened the block */
    size_t r_emitted;           /* reasoning streamed: text[r_begin, r_emitted) */
    size_t r_begin;
    bool r_open;                /* some reasoning was streamed (r_begin fixed) */
    size_t c_base;              /* where the content starts in text (0 without reasoning) */
} rp_srv_gen;

rp_status rp_srv_gen_init(rp_srv_gen *g, const rp_model *m, const rp_srv_request *r, const rp_srv_text *t);
void rp_srv_gen_free(rp_srv_gen *g);

/* Appends the text of n tokens; returns RP_OK (text bounded by the tokens'
 * pieces). Sets stopped when a stop sequence appears. */
rp_status rp_srv_gen_feed(rp_srv_gen *g, const rp_token *toks, int32_t n);
/* End of generation: flushes the detokenizer's held bytes. */
rp_status rp_srv_gen_flush(rp_srv_gen *g);
/* Bytes [emitted, end) may be streamed now as content; call after feed.
 * After flush, everything that is content (no tool calls) is streamable. */
size_t rp_srv_gen_stream_end(const rp_srv_gen *g);

/* Reasoning bytes text[*from, *to) that may be streamed now (empty when none); call after feed, then set
 * g->r_emitted = *to. Also moves g->emitted to where the content starts once the think block has closed. */
void rp_srv_gen_reasoning_stream(rp_srv_gen *g, size_t *from, size_t *to);

/* The final reply: content (malloc'd, may be empty) and tool calls. */
typedef struct rp_srv_reply {
    char *reasoning;            /* the think block's text, or NULL (reasoning_content) */
    char *content;
    rp_tool_call *calls;
    size_t n_calls;
    const char *finish_reason;   /* "stop", "length", "tool_calls" */
    char why[160];               /* a reply whose calls did not fit the tools (kept as content): why, else "" */
} rp_srv_reply;

/* Builds the reply after flush. finish: the job's finish reason. */
rp_status rp_srv_gen_reply(rp_srv_gen *g, rp_job_finish finish, rp_srv_reply *out);
void rp_srv_reply_free(rp_srv_reply *r);

/* Copies s[0..n) replacing invalid UTF-8 with U+FFFD (malloc'd, NUL-terminated). */
char *rp_srv_utf8_clean(const char *s, size_t n);

#endif /* RP_SERVER_GEN_H */
