/* api_agents.c — rp_agents: the public face of the multi-agent scheduler (src/sched). */
#include <stdlib.h>
#include <string.h>

#include "reprise.h"
#include "core/error.h"
#include "model/sampler.h"
#include "sched/sched.h"

struct rp_agents {
    rp_sched *s;
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
    };
    return p;
}

rp_status rp_agents_create(const rp_model *m, const rp_agents_params *p, rp_agents **out) {
    *out = NULL;
    if (!m || !p) return rp_errorf(RP_ERR_INVALID_ARG, "agents: NULL model or params");
    if ((unsigned)p->policy > RP_AGENTS_UNIFORM) return rp_errorf(RP_ERR_INVALID_ARG, "agents: policy %d", (int)p->policy);
    rp_sched_params sp = rp_sched_default_params();
    sp.max_sessions = p->max_agents;
    sp.max_active = p->max_active;
    sp.n_ctx = p->n_ctx;
    sp.n_batch = p->n_batch;
    sp.kv_type = (rp_type)p->kv_type;
    sp.n_threads = p->n_threads;
    sp.policy = (rp_sched_policy)p->policy;
    sp.drafter = p->policy == RP_AGENTS_BATCH_AR ? RP_DRAFTER_NONE : p->draft ? RP_DRAFTER_MODEL : RP_DRAFTER_NGRAM;
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
    return st;
}

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
}
