/* session.h — one conversation's mutable state (KV cache, sampler, last logits) over a shared model. */
#ifndef RP_SESSION_H
#define RP_SESSION_H

#include "reprise.h"
#include "kv/kv.h"
#include "model/forward.h"
#include "model/sampler.h"

typedef struct rp_session_params {
    int32_t n_ctx;                 /* KV capacity in cells */
    rp_type kv_type;               /* RP_TYPE_F16 (default) or RP_TYPE_Q8_0 / RP_TYPE_F32 */
    int32_t swa_cells;             /* cells of sliding-window layers (rp_kv_create_swa; 0, default: all n_ctx) */
    rp_sampler_params sampler;
} rp_session_params;

rp_session_params rp_session_default_params(void);

typedef struct rp_session rp_session;

/* The context supplies compute scratch and threads; the session owns its KV
 * and sampler. Several sessions may share one context (used one at a time). */
rp_status rp_session_create(rp_ctx *ctx, rp_session_params p, rp_session **out);
void rp_session_free(rp_session *s);

/* Appends tokens at the end of the sequence, in n_batch-sized forward calls;
 * keeps the logits of the last one. RP_ERR_FULL if the context would overflow. */
rp_status rp_session_feed(rp_session *s, const rp_token *toks, int32_t n);
/* Samples from the last logits (does not append). */
rp_token rp_session_sample(rp_session *s);
const float *rp_session_logits(const rp_session *s);   /* [n_vocab] of the last fed token */
int32_t rp_session_n_past(const rp_session *s);
rp_kv *rp_session_kv(rp_session *s);
rp_sampler *rp_session_sampler(rp_session *s);
/* Declares that the session's KV cache was filled externally (by the reuse
 * engine) with toks[0..n) and that `logits` are the last token's: sets the
 * last logits and the sampler's penalty history. */
rp_status rp_session_adopt(rp_session *s, const rp_token *toks, int32_t n, const float *logits);
/* Makes dst (a session of the same context's model, KV type and at least as many cells) hold what src holds:
 * src's KV cells and last logits; dst's sampler restarts with toks[0..n) as its penalty history. */
rp_status rp_session_copy(rp_session *dst, const rp_session *src, const rp_token *toks, int32_t n);
/* Forgets everything (new conversation). */
void rp_session_reset(rp_session *s);

#endif /* RP_SESSION_H */
