/* spec.h — speculative decoding pieces: the rejection-sampling rule, prompt-lookup drafts, and the drafter interface. */
#ifndef RP_SCHED_SPEC_H
#define RP_SCHED_SPEC_H

#include <stdbool.h>
#include <stdint.h>

#include "reprise.h"
#include "kv/kv.h"
#include "model/forward.h"
#include "model/sampler.h"

/* ---- verification ----
 * Speculative sampling (Leviathan et al. / Chen et al.): a draft token x drawn
 * from q is accepted with probability min(1, p(x) / q(x)); on rejection the
 * token is drawn from norm(max(0, p - q)). The result is distributed exactly
 * as p whatever q is, provided x really was drawn from q. q == NULL means q is
 * a point mass at x (greedy drafts, prompt lookup): accept with probability
 * p(x), else draw from p with x removed.
 *
 * Draws use the sampler's RNG (rp_sampler_uniform / rp_sampler_draw). `resid`
 * is scratch of n floats. Returns true when x was accepted (*out = x); false
 * with *out the replacement. If the residual has no mass (p <= q everywhere
 * up to rounding), the replacement is drawn from p. Allocates nothing. */
bool rp_spec_accept(rp_sampler *s, const float *p, const float *q, rp_token x, int32_t n, float *resid,
                    rp_token *out);

/* ---- prompt lookup (n-gram) drafts ----
 * Finds the most recent earlier occurrence of the history's last g tokens (g
 * from g_max down to g_min; the first g that matches wins) and proposes the
 * tokens that followed it, up to `want`. Returns the count written to out
 * (0 when nothing matches). O(n_tok * g_max) per call; no allocation. */
int32_t rp_ngram_draft(const rp_token *toks, int32_t n_tok, int32_t g_min, int32_t g_max, int32_t want,
                       rp_token *out);

/* ---- drafters ----
 * A drafter proposes up to `want` tokens following a session's history. All
 * sessions drafting in a step are passed together so model-based drafters run
 * one forward per draft position for all of them. */
typedef struct rp_draft_req {
    int32_t seq;               /* the session's slot: its index in the drafter's KV arrays */
    const rp_token *toks;      /* history; toks[n_tok - 1] is the pending token (not yet in the target KV) */
    int32_t n_tok;
    rp_sampler *smp;           /* draft sampler (temperature > 0), NULL: greedy drafts (q is a point mass) */
    int32_t want;              /* tokens wanted, <= the drafter's max */
    rp_token *out;             /* [want] */
    float *q;                  /* [want x n_vocab]: q of each drafted token, written when smp != NULL */
    int32_t got;               /* written by draft(): tokens proposed (<= want) */
} rp_draft_req;

typedef struct rp_drafter rp_drafter;

/* The interface; implementations embed it as their first member. */
struct rp_drafter {
    const char *name;
    /* a session was created in slot `seq` / freed (per-session allocation happens here) */
    rp_status (*open)(rp_drafter *d, int32_t seq);
    void (*close)(rp_drafter *d, int32_t seq);
    /* only the first n tokens of slot seq's history are still valid (the
     * scheduler passes the target KV length): drop whatever the drafter cached
     * past them */
    void (*rollback)(rp_drafter *d, int32_t seq, int32_t n);
    /* fills reqs[i].out / .got (and .q); *n_fwd gets the forwards run */
    rp_status (*draft)(rp_drafter *d, rp_draft_req *reqs, int32_t n_req, int32_t *n_fwd);
    /* the per-session draft KV (demoted with the session), or NULL */
    rp_kv *(*kv)(rp_drafter *d, int32_t seq);
    void (*destroy)(rp_drafter *d);
};

/* Prompt lookup over the session history; no state. */
rp_status rp_drafter_ngram_create(int32_t g_min, int32_t g_max, rp_drafter **out);

/* Early exit of the target: the first n_layers layers, then the output norm
 * and head. Runs on the target's context and writes the K/V of layers <
 * n_layers into the session's own cells past its history — the verify pass
 * rewrites those cells for every layer, and rollback truncates them.
 * `kvs` is the scheduler's array of target caches by slot (max_seq entries). */
rp_status rp_drafter_self_create(rp_ctx *target_ctx, rp_kv **kvs, int32_t max_seq, int32_t n_layers,
                                 rp_drafter **out);

/* A separate draft model (same vocabulary) with its own context and one KV
 * per session, kept in step with the session history lazily: each draft
 * first feeds the history tokens the draft KV lacks (batched over sessions,
 * n_batch rows per forward), then one row per session per draft position. */
typedef struct rp_drafter_model_params {
    int32_t max_seq;     /* sessions (slots) */
    int32_t n_ctx;       /* cells per session */
    int32_t n_batch;     /* rows per draft forward */
    int32_t max_draft;   /* tokens per session per step */
    rp_type kv_type;
    int n_threads;
} rp_drafter_model_params;

rp_status rp_drafter_model_create(const rp_model *draft, rp_drafter_model_params p, rp_drafter **out);

static inline void rp_drafter_free(rp_drafter *d) {
    if (d) d->destroy(d);
}

#endif /* RP_SCHED_SPEC_H */
