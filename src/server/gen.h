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

/* The final reply: content (malloc'd, may be empty) and tool calls. */
typedef struct rp_srv_reply {
    char *content;
    rp_tool_call *calls;
    size_t n_calls;
    const char *finish_reason;   /* "stop", "length", "tool_calls" */
} rp_srv_reply;

/* Builds the reply after flush. finish: the job's finish reason. */
rp_status rp_srv_gen_reply(rp_srv_gen *g, rp_job_finish finish, rp_srv_reply *out);
void rp_srv_reply_free(rp_srv_reply *r);

/* Copies s[0..n) replacing invalid UTF-8 with U+FFFD (malloc'd, NUL-terminated). */
char *rp_srv_utf8_clean(const char *s, size_t n);

#endif /* RP_SERVER_GEN_H */
