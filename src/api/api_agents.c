/* api_agents.c — rp_agents: the public face of the multi-agent scheduler (src/sched). */
#include <stdlib.h>
#include <string.h>

#include "reprise.h"
#include "core/error.h"
#include "model/sampler.h"
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
    rp_sched_params sp = rp_sched_default_params();
    sp.max_sessions = p->max_agents;
    sp.max_active = p->max_active;
    sp.n_ctx = p->n_ctx;
    sp.n_batch = p->n_batch;
    sp.kv_type = (rp_type)p->kv_type;
    sp.n_threads = p->n_threads;
    sp.policy = (rp_sched_policy)p->policy;
    static const rp_drafter_kind kinds[] = {
        [RP_DRAFT_NONE] = RP_DRAFTER_NONE, [RP_DRAFT_NGRAM] = RP_DRAFTER_NGRAM,
        [RP_DRAFT_SELF] = RP_DRAFTER_SELF, [RP_DRAFT_MODEL] = RP_DRAFTER_MODEL,
    };
    sp.drafter = p->drafter != RP_DRAFT_AUTO ? kinds[p->drafter]
                 : p->policy == RP_AGENTS_BATCH_AR ? RP_DRAFTER_NONE : p->draft ? RP_DRAFTER_MODEL : RP_DRAFTER_NGRAM;
    sp.kv_resident_limit = rp_sched_kv_limit_bytes(p->kv_limit_mb);
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
        .draft_s = info.t_draft, .target_s = info.t_target, .total_s = info.t_total,
    };
    return st;
}

void rp_agents_last_step(const rp_agents *a, rp_agents_step_info *out) {
    if (!a) memset(out, 0, sizeof *out);
    else *out = a->last;
}

rp_status rp_agents_truncate(rp_agents *a, rp_agent_id id, int32_t n) { return rp_sched_truncate(a->s, id, n); }
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
}
