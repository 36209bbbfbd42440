/* api_agents.c — rp_agents: the public face of the multi-agent scheduler (src/sched). */
#include <stdlib.h>
#include <string.h>

#include "reprise.h"
#include "api/api_internal.h"
#include "core/error.h"
#include "model/sampler.h"
#include "kv/kv.h"
#include "sched/sched.h"

struct rp_agents {
    rp_sched *s;
    rp_agents_step_info last;   /* the stepping thread's */
};

rp_agents_params rp_agents_default_params(void) {
    const rp_sched_params sp = rp_sched_default_params();
    rp_agents_params p = {
        .max_agents = sp.max_sessions,
        .max_active = sp.max_active,
        .n_ctx = sp.n_ctx,
        .n_batch = sp.n_batch,
        .kv_type = (rp_kv_type)sp.kv_type,
        .n_threads = sp.n_threads,
        .policy = (rp_agents_policy)sp.policy,
        .draft = NULL,
        .drafter = RP_DRAFT_AUTO,
        .kv_limit_mb = 0,
        .self_layers = sp.self_layers,
        .prefill_share = sp.prefill_share,
        .draft_budget = sp.hal.budget,
        .draft_min = sp.hal.l_min,
        .hal_tau = sp.hal.tau,
        .hal_gamma = sp.hal.gamma,
        .draft_fixed = sp.hal.fixed_len,
        .draft_max = sp.hal.max_len,
    };
    return p;
}

rp_status rp_agents_create(const rp_model *m, const rp_agents_params *p, rp_agents **out) {
    *out = NULL;
    if (!m || !p) return rp_errorf(RP_ERR_INVALID_ARG, "agents: NULL model or params");
    if ((unsigned)p->policy > RP_AGENTS_UNIFORM) return rp_errorf(RP_ERR_INVALID_ARG, "agents: policy %d", (int)p->policy);
    if ((unsigned)p->drafter > RP_DRAFT_MODEL) return rp_errorf(RP_ERR_INVALID_ARG, "agents: drafter %d", (int)p->drafter);
    if (p->drafter == RP_DRAFT_MODEL && !p->draft) return rp_errorf(RP_ERR_INVALID_ARG, "agents: the model drafter needs a draft model");
    if (!(p->kv_limit_mb >= 0)) return rp_errorf(RP_ERR_INVALID_ARG, "agents: kv_limit_mb %g", p->kv_limit_mb);
    if (p->draft_max < 0 || p->draft_max > RP_AGENTS_MAX_DRAFT || p->draft_fixed < 0 || p->draft_fixed > RP_AGENTS_MAX_DRAFT)
        return rp_errorf(RP_ERR_INVALID_ARG, "agents: draft_fixed %d / draft_max %d outside [0, %d]", p->draft_fixed,
                         p->draft_max, RP_AGENTS_MAX_DRAFT);
    rp_sched_params sp = rp_sched_default_params();
    sp.max_sessions = p->max_agents;
    sp.max_active = p->max_active;
    sp.n_ctx = p->n_ctx;
    sp.n_batch = p->n_batch;
    sp.kv_type = (rp_type)p->kv_type;
    sp.swa_cells = p->swa_full ? 0 : rp_kv_swa_cells(m, p->n_batch);
    sp.n_threads = p->n_threads;
    sp.policy = (rp_sched_policy)p->policy;
    static const rp_drafter_kind kinds[] = {
        [RP_DRAFT_NONE] = RP_DRAFTER_NONE, [RP_DRAFT_NGRAM] = RP_DRAFTER_NGRAM,
        [RP_DRAFT_SELF] = RP_DRAFTER_SELF, [RP_DRAFT_MODEL] = RP_DRAFTER_MODEL,
    };
    sp.drafter = p->drafter != RP_DRAFT_AUTO ? kinds[p->drafter]
                 : p->policy == RP_AGENTS_BATCH_AR ? RP_DRAFTER_NONE : p->draft ? RP_DRAFTER_MODEL : RP_DRAFTER_NGRAM;
    sp.kv_resident_limit = rp_sched_kv_limit_bytes(p->kv_limit_mb);
    sp.self_layers = p->self_layers;
    sp.prefill_share = p->prefill_share;
    sp.hal.budget = p->draft_budget;
    sp.hal.l_min = p->draft_min;
    sp.hal.tau = p->hal_tau;
    sp.hal.gamma = p->hal_gamma;
    sp.hal.fixed_len = p->draft_fixed;
    sp.hal.max_len = p->draft_max;
    _Static_assert(RP_AGENTS_MAX_DRAFT == RP_SCHED_MAX_DRAFT && RP_AGENTS_MAX == RP_SCHED_MAX_SESSIONS, "caps");
    _Static_assert((int)RP_AGENT_ROLE_VERIFY == (int)RP_ROLE_VERIFY && (int)RP_AGENT_ROLE_PREFILL == (int)RP_ROLE_PREFILL,
                   "roles");
    rp_agents *a = calloc(1, sizeof *a);
    if (!a) return rp_errorf(RP_ERR_NOMEM, "agents: out of memory");
    rp_status st = rp_sched_create(m, p->draft, sp, &a->s);
    if (st != RP_OK) {
        free(a);
        return st;
    }
    *out = a;
    return RP_OK;
}

void rp_agents_free(rp_agents *a) {
    if (!a) return;
    rp_sched_free(a->s);
    free(a);
}

rp_status rp_agents_add(rp_agents *a, rp_agent_id *out) { return rp_sched_session_create(a->s, out); }
rp_status rp_agents_remove(rp_agents *a, rp_agent_id id) { return rp_sched_session_free(a->s, id); }

rp_turn_opts rp_turn_default_opts(void) {
    const rp_gen_params gp = rp_gen_default_params();
    rp_turn_opts o = {
        .sampling = gp.sampler,
        .max_tokens = gp.max_tokens,
        .suspend_on_tool_call = gp.suspend_on_tool_call,
    };
    return o;
}

static rp_gen_params gen_params(const rp_turn_opts *o) {
    rp_gen_params gp = rp_gen_default_params();
    if (!o) return gp;
    gp.sampler = o->sampling;
    gp.max_tokens = o->max_tokens;
    gp.stop_strs = o->stop;
    gp.n_stop_strs = o->n_stop;
    gp.suspend_on_tool_call = o->suspend_on_tool_call;
    gp.wait_after = o->wait_after;
    gp.on_token = o->on_token;   /* the same shape: (user, id, token) */
    gp.user = o->user;
    gp.on_logits = o->on_logits;
    gp.logits_user = o->logits_user;
    gp.on_chosen = o->on_chosen;
    gp.chosen_user = o->chosen_user;
    gp.ignore_eos = o->ignore_eos;
    return gp;
}

rp_status rp_agents_submit(rp_agents *a, rp_agent_id id, const rp_token *t, int32_t n, const rp_turn_opts *o) {
    const rp_gen_params gp = gen_params(o);
    return rp_sched_submit(a->s, id, t, n, &gp);
}

rp_status rp_agents_resume(rp_agents *a, rp_agent_id id, const rp_token *t, int32_t n, const rp_turn_opts *o) {
    const rp_gen_params gp = gen_params(o);
    return rp_sched_resume(a->s, id, t, n, &gp);
}

void rp_agents_cancel(rp_agents *a, rp_agent_id id) { rp_sched_cancel(a->s, id); }

rp_status rp_agents_step(rp_agents *a, bool *ran) {
    rp_sched_step_info info;
    memset(&info, 0, sizeof info);
    const rp_status st = rp_sched_step(a->s, &info);
    if (ran) *ran = st == RP_OK && info.ran;
    a->last = (rp_agents_step_info){
        .ran = st == RP_OK && info.ran, .blocked = info.blocked, .idle = info.idle,
        .rows = info.n_rows, .prefill_rows = info.n_prefill_rows, .decoding = info.n_decode,
        .drafted = info.n_drafted, .accepted = info.n_accepted, .generated = info.n_emitted,
        .active = info.n_admitted, .waiting = info.n_waiting,
        .draft_s = info.t_draft, .target_s = info.t_target, .total_s = info.t_total, .step = info.step,
    };
    return st;
}

void rp_agents_last_step(const rp_agents *a, rp_agents_step_info *out) {
    if (!a) memset(out, 0, sizeof *out);
    else *out = a->last;
}

rp_status rp_agents_truncate(rp_agents *a, rp_agent_id id, int32_t n) { return rp_sched_truncate(a->s, id, n); }
rp_status rp_agents_fork(rp_agents *a, rp_agent_id dst, rp_agent_id src, int32_t n) {
    return rp_sched_fork(a->s, dst, src, n);
}
rp_status rp_agents_suspend(rp_agents *a, rp_agent_id id) { return rp_sched_mark_waiting(a->s, id); }
bool rp_agents_wait(rp_agents *a, double timeout_s) { return rp_sched_wait_event(a->s, timeout_s); }
void rp_agents_wake(rp_agents *a) { rp_sched_wake(a->s); }

rp_status rp_agents_run(rp_agents *a) {
    for (;;) {
        rp_sched_step_info info;
        memset(&info, 0, sizeof info);
        RP_TRY(rp_sched_step(a->s, &info));
        if (!info.ran) return RP_OK;   /* idle, or every admitted agent waits on a tool */
    }
}

static rp_stop_reason stop_of(rp_finish_reason r) {
    switch (r) {
    case RP_FINISH_EOG:
    case RP_FINISH_TOOL_CALL: return RP_STOP_EOG;
    case RP_FINISH_STOP: return RP_STOP_STRING;
    case RP_FINISH_LENGTH: return RP_STOP_LENGTH;
    case RP_FINISH_CTX: return RP_STOP_CONTEXT;
    case RP_FINISH_CANCELLED: return RP_STOP_CANCELLED;
    default: return RP_STOP_NONE;
    }
}

rp_status rp_agents_info(rp_agents *a, rp_agent_id id, rp_agent_info *out) {
    memset(out, 0, sizeof *out);
    rp_sched_session_info si;
    RP_TRY(rp_sched_session_info_get(a->s, id, &si));
    out->state = (rp_agent_state)si.state;
    out->n_tokens = si.n_tokens;
    out->generated = si.turn_generated;
    out->drafted = si.drafted;
    out->accepted = si.accepted;
    out->stop = si.state == RP_SESS_IDLE ? stop_of(si.finish) : RP_STOP_NONE;
    out->n_cached = si.n_cached;
    out->has_slot = si.has_slot;
    out->demoted = si.demoted;
    out->demotions = si.demotions;
    out->restores = si.restores;
    out->last_step = si.last_role == RP_ROLE_NONE ? -1 : si.last_step;
    out->turn_stop = si.state == RP_SESS_PREFILL || si.state == RP_SESS_DECODE ? RP_STOP_NONE : stop_of(si.finish);
    out->last_role = (rp_agent_role)si.last_role;
    out->last_draft = si.last_draft;
    out->last_accepted = si.last_accepted;
    out->hal = si.hal;
    out->n_turns = si.n_turns;
    out->prompt_tokens = si.prompt_tokens;
    out->gen_tokens = si.gen_tokens;
    return RP_OK;
}

rp_status rp_agents_tokens(rp_agents *a, rp_agent_id id, int32_t from, rp_token *buf, int32_t cap, int32_t *n) {
    return rp_sched_session_tokens(a->s, id, from, buf, cap, n);
}

void rp_agents_stats_get(rp_agents *a, rp_agents_stats *out) {
    memset(out, 0, sizeof *out);
    if (!a) return;
    rp_sched_stats ss;
    rp_sched_stats_get(a->s, &ss);
    out->steps = (uint64_t)ss.steps;
    out->rows = ss.rows;
    out->generated = ss.emitted;
    out->drafted = ss.drafted;
    out->accepted = ss.accepted;
    out->agents = ss.n_sessions;
    out->active = ss.n_admitted;
    out->waiting = ss.n_waiting;
    out->demoted = ss.n_demoted;
    out->kv_bytes = ss.kv_resident;
    out->demotions = ss.demotions;
    out->restores = ss.restores;
    out->prefill_rows = ss.prefill_rows;
    out->draft_s = ss.t_draft;
    out->target_s = ss.t_target;
    out->total_s = ss.t_total;
    out->forwards = (uint64_t)ss.forwards;
}

/* ---- reuse in the scheduler ---- */

static rp_status check_engine(const rp_agents *a, const rp_engine *e, const rp_prompt *p) {
    if (!a || !e || !p) return rp_errorf(RP_ERR_INVALID_ARG, "agents: NULL scheduler, engine or prompt");
    const rp_sched_params sp = rp_sched_get_params(a->s);
    if ((int)sp.kv_type != (int)e->p.kv_type || e->n_ctx < sp.n_ctx)
        return rp_errorf(RP_ERR_INVALID_ARG, "agents: the engine's KV type %s / context %d do not fit the agents' (%s, %d)",
                         rp_kv_type_name(e->p.kv_type), e->n_ctx, rp_kv_type_name((rp_kv_type)sp.kv_type), sp.n_ctx);
    if (rp_model_rope_long(e->m, e->n_cells) != rp_model_rope_long(e->m, sp.n_ctx))
        return rp_errorf(RP_ERR_INVALID_ARG,
                         "agents: the engine's context %d and the agents' %d are on two sides of this LongRoPE model's "
                         "original context length %d (long vs short RoPE factors): their cached KV cannot be shared",
                         e->n_ctx, sp.n_ctx, e->m->hp.rope_orig_ctx);
    if (p->n < 1) return rp_errorf(RP_ERR_INVALID_ARG, "agents: the prompt is empty");
    return RP_OK;
}

typedef struct fill_arg {
    rp_engine *e;
    const rp_prompt *p;
    bool persist;
    rp_reuse_opts ro;
    rp_reuse_stats rst;
    bool ran;
    rp_agents_fill *out;
} fill_arg;

/* rp_sched_fill_fn (no scheduler lock held). The engine fills the prompt up to its last reusable token (prefix
 * chunks exact, chunks cached elsewhere re-rotated with selective recompute) and caches those chunks; the new
 * tokens after it are left to the batch, which computes them beside the other sequences instead of holding them
 * up, and are cached after the turn (commit_after). A prompt with nothing to reuse is not filled at all. */
static rp_status fill_with_engine(void *user, rp_kv *kv, const rp_token *toks, int32_t n) {
    fill_arg *a = user;
    rp_engine *e = a->e;
    const rp_prompt *p = a->p;
    rp_agents_fill *out = a->out;
    int32_t nb = 0;   /* the prompt's boundaries inside it (documents and message starts) */
    while (nb < p->n_bounds && p->bounds[nb] < n) nb++;
    rp_reuse_analysis an;
    rp_status st = rp_reuse_analyze_opts(e->reuse, &a->ro, toks, n, p->bounds, nb, &an);
    int32_t end = n;   /* analysis failed: fill everything, as the engine would */
    if (st == RP_OK) {
        end = an.n_prefix;
        for (int32_t t = n - 1; t >= an.n_prefix; t--)
            if (an.tok_kind[t] == RP_ROW_REUSE) {
                end = t + 1;
                break;
            }
        /* up to the end of its chunk: the engine then splits [0, end) into the same chunks as the whole prompt,
         * so it finds (and caches) the same ones */
        for (int32_t i = 0; end > 0 && i < an.n_spans; i++)
            if (an.spans[i].begin < end && end < an.spans[i].begin + an.spans[i].len) {
                end = an.spans[i].begin + an.spans[i].len;
                break;
            }
    }
    out->commit_after = a->persist && end < n;
    memset(&a->rst, 0, sizeof a->rst);
    st = RP_OK;
    if (end > 0) {
        int32_t nbe = 0;
        while (nbe < nb && p->bounds[nbe] < end) nbe++;
        st = rp_reuse_prefill_opts(e->reuse, &a->ro, e->ctx, kv, toks, end, p->bounds, nbe, e->logits, &a->rst);
        a->ran = st == RP_OK;
        out->fill_status = st;
        /* cached now, while the KV holds exactly the filled tokens: the engine keeps only its last prompt */
        if (st == RP_OK && a->persist) out->cache_status = rp_reuse_commit(e->reuse, kv);   /* a failure only loses cache */
    }
    /* what the batch computes after the fill is exact only on exact KV: every filled token exact (an
     * approximate prefix chunk counts, not only blend) */
    out->commit_exact = st == RP_OK && (end == 0 || a->rst.n_exact_head >= end);
    out->exact_head = out->commit_exact ? INT32_MAX : a->rst.n_exact_head;
    if (st != RP_OK) {   /* the scheduler discards the fill: the batch computes everything, cached after */
        out->commit_after = a->persist;
        out->commit_exact = true;
        out->exact_head = INT32_MAX;
    }
    return st;
}

rp_status rp_agents_submit_reuse(rp_agents *a, rp_agent_id id, rp_engine *e, const rp_prompt *p,
                                 const rp_gen_opts *reuse, const rp_turn_opts *o, rp_agents_fill *out) {
    rp_agents_fill tmp;
    if (!out) out = &tmp;
    memset(out, 0, sizeof *out);
    out->exact_head = INT32_MAX;
    RP_TRY(check_engine(a, e, p));
    const rp_gen_opts def = rp_gen_default_opts();
    if (!reuse) reuse = &def;
    /* the reuse engine remembers one prompt: a sequence's uncommitted one is cached now, not lost */
    if (e->pending) (void)rp_seq_commit(e->pending);
    const int mode = reuse->reuse >= 0 ? reuse->reuse : (int)e->p.reuse;
    const rp_gen_params gp = gen_params(o);
    if (mode == RP_REUSE_NONE || p->n < 2) return rp_sched_submit(a->s, id, p->toks, p->n, &gp);
    fill_arg fa = {.e = e, .p = p, .persist = reuse->persist, .ro = rp_api_reuse_opts(reuse), .out = out};
    int32_t k = 0;
    RP_TRY(rp_sched_submit_filled(a->s, id, p->toks, p->n, &gp, fill_with_engine, &fa, &k));
    /* k == 0 when the fill failed (its KV was discarded): nothing was reused; at most the k cells kept (the
     * batch ran the last token again) */
    const bool used = fa.ran && k > 0;
    out->filled = k;
    out->reused_prefix = used ? (fa.rst.n_prefix < k ? fa.rst.n_prefix : k) : 0;
    out->reused_prefix_exact = fa.rst.n_prefix_exact < out->reused_prefix ? fa.rst.n_prefix_exact : out->reused_prefix;
    if (!used) out->exact_head = INT32_MAX;   /* the batch computed everything */
    const int32_t room = k - out->reused_prefix;
    out->reused_nonprefix = used ? (fa.rst.n_nonprefix < room ? fa.rst.n_nonprefix : room) : 0;
    out->recomputed = used ? (fa.rst.n_recomputed < out->reused_nonprefix ? fa.rst.n_recomputed : out->reused_nonprefix) : 0;
    return RP_OK;
}

typedef struct commit_arg {
    rp_engine *e;
    const rp_prompt *p;
    rp_reuse_opts ro;
    bool exact;
} commit_arg;

/* rp_sched_kv_fn: caches the chunks of a finished turn's prompt. */
static rp_status commit_kv(void *user, const rp_kv *kv, const rp_token *toks, int32_t n) {
    commit_arg *c = user;
    const rp_prompt *p = c->p;
    /* a turn cancelled before its prompt was computed has nothing to cache */
    if (n < p->n || kv->n < p->n || memcmp(toks, p->toks, sizeof *toks * (size_t)p->n) != 0) return RP_OK;
    return rp_reuse_commit_computed_opts(c->e->reuse, &c->ro, kv, p->toks, p->n, p->bounds, p->n_bounds, c->exact);
}

rp_status rp_agents_commit_prompt(rp_agents *a, rp_agent_id id, rp_engine *e, const rp_prompt *p,
                                  const rp_gen_opts *reuse, bool exact) {
    RP_TRY(check_engine(a, e, p));
    const rp_gen_opts def = rp_gen_default_opts();
    if (!reuse) reuse = &def;
    if (e->pending) (void)rp_seq_commit(e->pending);
    commit_arg c = {.e = e, .p = p, .ro = rp_api_reuse_opts(reuse), .exact = exact};
    return rp_sched_session_read_kv(a->s, id, commit_kv, &c);
}
