/* api_plan.c — rp_engine_plan: a prompt's dry run against an engine's cache (reuse per chunk and token, the static calls). */
#include <stdlib.h>
#include <string.h>

#include "api/api_internal.h"
#include "core/error.h"
#include "reuse/plan.h"

struct rp_plan {
    rp_plan_desc d;
    uint8_t *kinds;
    rp_plan_chunk *chunks;
    rp_plan_segment *segs;
    rp_plan_call *calls;   /* the DP plan's, then the naive plan's */
};

const char *rp_chunk_label_name(rp_chunk_label l) {
    switch (l) {
    case RP_CHUNK_PREFIX_EXACT: return "prefix (exact)";
    case RP_CHUNK_PREFIX_APPROX: return "prefix (approx.)";
    case RP_CHUNK_PREFIX_PART_EXACT: return "prefix (part exact)";
    case RP_CHUNK_PARTIAL_EXACT: return "partial prefix (exact)";
    case RP_CHUNK_PARTIAL_APPROX: return "partial prefix (approx.)";
    case RP_CHUNK_REUSED: return "reused (re-rotated)";
    case RP_CHUNK_NEW: return "new";
    }
    return "?";
}

/* Exact chunks only ever hang off exact ones, so the prefix's exact part is its head [0, n_exact). */
static rp_chunk_label label_of(const rp_chunk_span *sp, const rp_reuse_analysis *an) {
    const int32_t end = sp->begin + sp->len, px = an->stats.n_prefix_exact;
    if (end <= an->n_prefix)
        return end <= px ? RP_CHUNK_PREFIX_EXACT : sp->begin >= px ? RP_CHUNK_PREFIX_APPROX : RP_CHUNK_PREFIX_PART_EXACT;
    if (sp->begin < an->n_prefix) return px > sp->begin ? RP_CHUNK_PARTIAL_EXACT : RP_CHUNK_PARTIAL_APPROX;
    return an->tok_kind[sp->begin] == RP_ROW_REUSE ? RP_CHUNK_REUSED : RP_CHUNK_NEW;
}

static rp_plan_kind seg_kind(rp_seg_kind k) {
    return k == RP_SEG_PREFIX ? RP_PLAN_PREFIX : k == RP_SEG_REUSE ? RP_PLAN_REUSE : RP_PLAN_NEW;
}

static void copy_calls(rp_plan_call *dst, const rp_call *src, int32_t n, const rp_static_cfg *cfg) {
    for (int32_t i = 0; i < n; i++) {
        const bool re = src[i].kind == RP_CALL_RECOMPUTE;
        dst[i] = (rp_plan_call){.recompute = re, .begin = src[i].begin, .end = src[i].end, .n_new = src[i].n_new,
                                .n_reuse = src[i].n_reuse,
                                .padding = (re ? cfg->L_S : cfg->L_P) - (src[i].end - src[i].begin)};
    }
}

void rp_plan_free(rp_plan *pl) {
    if (!pl) return;
    free(pl->kinds);
    free(pl->chunks);
    free(pl->segs);
    free(pl->calls);
    free(pl);
}

rp_plan_desc rp_plan_describe(const rp_plan *pl) {
    rp_plan_desc d;
    if (pl) return pl->d;
    memset(&d, 0, sizeof d);
    return d;
}

rp_status rp_engine_plan(rp_engine *e, const rp_prompt *p, const rp_gen_opts *o, rp_plan **out) {
    *out = NULL;
    if (!e || !p) return rp_errorf(RP_ERR_INVALID_ARG, "plan: NULL engine or prompt");
    if (p->n <= 0) return rp_errorf(RP_ERR_INVALID_ARG, "plan: the prompt is empty");
    if (p->n >= e->n_ctx)
        return rp_errorf(RP_ERR_RANGE, "plan: the prompt is %d tokens, the context %d (raise n_ctx)", p->n, e->n_ctx);
    /* the reuse engine remembers one prompt, which an analysis forgets: a pending one is cached now, not lost */
    if (e->pending) (void)rp_seq_commit(e->pending);
    const rp_reuse_opts ro = rp_api_reuse_opts(o);
    rp_reuse_analysis an;
    RP_TRY(rp_reuse_analyze_opts(e->reuse, &ro, p->toks, p->n, p->bounds, p->n_bounds, &an));
    rp_plan *pl = calloc(1, sizeof *pl);
    if (!pl) return rp_errorf(RP_ERR_NOMEM, "plan: out of memory");
    const int32_t n = an.n_tokens, nc = an.n_dp_calls + an.n_naive_calls;
    pl->kinds = malloc((size_t)n);
    pl->chunks = malloc(sizeof *pl->chunks * (size_t)(an.n_spans > 0 ? an.n_spans : 1));
    pl->segs = malloc(sizeof *pl->segs * (size_t)(an.n_segs > 0 ? an.n_segs : 1));
    pl->calls = malloc(sizeof *pl->calls * (size_t)(nc > 0 ? nc : 1));
    if (!pl->kinds || !pl->chunks || !pl->segs || !pl->calls) {
        rp_plan_free(pl);
        return rp_errorf(RP_ERR_NOMEM, "plan: out of memory");
    }
    for (int32_t t = 0; t < n; t++)
        pl->kinds[t] = t < an.n_prefix ? RP_PLAN_PREFIX : an.tok_kind[t] == RP_ROW_REUSE ? RP_PLAN_REUSE : RP_PLAN_NEW;
    for (int32_t i = 0; i < an.n_spans; i++)
        pl->chunks[i] = (rp_plan_chunk){.begin = an.spans[i].begin, .len = an.spans[i].len, .hash = an.spans[i].hash,
                                        .label = label_of(&an.spans[i], &an)};
    for (int32_t i = 0; i < an.n_segs; i++)
        pl->segs[i] = (rp_plan_segment){.kind = seg_kind(an.segs[i].kind), .begin = an.segs[i].begin, .len = an.segs[i].len};
    const rp_static_cfg *cfg = &rp_reuse_get_params(e->reuse)->static_cfg;
    copy_calls(pl->calls, an.dp_calls, an.n_dp_calls, cfg);
    copy_calls(pl->calls + an.n_dp_calls, an.naive_calls, an.n_naive_calls, cfg);
    rp_plan_desc *d = &pl->d;
    d->n_tokens = n;
    d->reused_prefix = an.stats.n_prefix;
    d->reused_prefix_exact = an.stats.n_prefix_exact;
    d->reused_nonprefix = an.stats.n_nonprefix;
    d->computed = an.stats.n_new;
    d->recompute_dynamic = an.n_recompute_dynamic;
    d->token_kind = pl->kinds;
    d->chunks = pl->chunks;
    d->n_chunks = an.n_spans;
    d->segments = pl->segs;
    d->n_segments = an.n_segs;
    rp_engine_static_shapes(e, &d->shapes);
    d->dp_calls = pl->calls;
    d->n_dp_calls = an.n_dp_calls;
    d->dp_cost = an.dp_ms;
    d->naive_calls = pl->calls + an.n_dp_calls;
    d->n_naive_calls = an.n_naive_calls;
    d->naive_cost = an.naive_ms;
    *out = pl;
    return RP_OK;
}
