/* batcher.c — one scheduler step: admission, draft budgets, batched drafts, one target forward, verification and commit. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/error.h"
#include "grammar/grammar_sample.h"
#include "sched/sched_internal.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static rp_sched_id sess_id(const rp_sess *x) { return ((rp_sched_id)x->gen << 16) | x->slot; }

/* ------------------------------------------------------------ turn bookkeeping */

/* Appends a generated token's text to the turn text (kept for stop strings
 * and tool-call detection). When the buffer cannot take another piece the
 * older half is dropped: stop strings only need the tail. Returns the bytes
 * added. */
static int32_t text_append(rp_sched *s, rp_sess *x, rp_token t) {
    if (!s->m->tok) return 0;
    const int32_t cap = s->p.text_cap;
    const int32_t bound = (int32_t)rp_detok_bound(s->m->tok);
    if (cap - x->text_len < bound) {
        int32_t keep = x->text_len / 2;
        memmove(x->text, x->text + x->text_len - keep, (size_t)keep);
        x->text_len = keep;
    }
    int w = rp_detok_push(&x->detok, t, x->text + x->text_len, (size_t)(cap - x->text_len));
    if (w < 0) w = 0;
    x->text_len += w;
    x->text[x->text_len] = '\0';
    return w;
}

/* True if a stop string ends inside the last `added` bytes of the text. */
static bool stop_str_hit(const rp_sess *x, int32_t added) {
    for (int32_t i = 0; i < x->gp.n_stop_strs; i++) {
        const char *ss = x->gp.stop_strs[i];
        int32_t sl = (int32_t)strlen(ss);
        int32_t from = x->text_len - added - sl + 1;
        if (from < 0) from = 0;
        for (int32_t p = from; p + sl <= x->text_len; p++)
            if (memcmp(x->text + p, ss, (size_t)sl) == 0) return true;
    }
    return false;
}

bool rp_sched_tool_call_closed(rp_chat_format f, const char *text, int32_t len, int32_t added) {
    return rp_chat_tool_call_closed(f, text, len, added);
}

const float *rp_sess_constrain(rp_sched *s, rp_sess *x, const float *lg) {
    if (!x->gp.on_logits) return lg;   /* ignore_eos alone is in the samplers' bias (set_gen) */
    const int32_t V = s->n_vocab;
    memcpy(s->resid, lg, sizeof *lg * (size_t)V);
    x->gp.on_logits(x->gp.logits_user, x->toks, x->n_tok, s->resid, V);
    if (x->gp.ignore_eos && s->n_eog > 0) {
        /* banned unless the processor left nothing else (a grammar that can only end still ends the turn) */
        bool other = false;
        for (int32_t i = 0, e = 0; i < V && !other; i++) {
            if (e < s->n_eog && s->eog[e] == i) {
                e++;
                continue;
            }
            other = s->resid[i] > -INFINITY;
        }
        if (other)
            for (int32_t e = 0; e < s->n_eog; e++) s->resid[s->eog[e]] = -INFINITY;
    }
    return s->resid;
}

/* Records a generated token and says whether (and why) the turn ends here. */
static rp_finish_reason emit(rp_sched *s, rp_sess *x, rp_token t, rp_sched_step_info *info) {
    x->toks[x->n_tok++] = t;
    x->turn_gen++;
    x->c.gen_tokens++;
    info->n_emitted++;
    int32_t added = text_append(s, x, t);
    if (x->gp.on_token && !x->gp.on_token(x->gp.user, sess_id(x), t)) return RP_FINISH_CANCELLED;
    if (x->gp.stop_at_eog && s->m->tok && rp_tokenizer_is_eog(s->m->tok, t)) return RP_FINISH_EOG;
    for (int32_t i = 0; i < x->gp.n_stop_ids; i++)
        if (x->gp.stop_ids[i] == t) return RP_FINISH_STOP;
    if (added > 0 && stop_str_hit(x, added)) return RP_FINISH_STOP;
    /* a tool call in the chat format ends the turn as soon as it is complete:
     * whatever the model would write after it waits for the tool's result */
    if (x->gp.suspend_on_tool_call && added > 0 && s->m->chat != RP_CHAT_UNKNOWN &&
        rp_sched_tool_call_closed(s->m->chat, x->text, x->text_len, added))
        return RP_FINISH_TOOL_CALL;
    if (x->gp.max_tokens >= 0 && x->turn_gen >= x->gp.max_tokens) return RP_FINISH_LENGTH;
    if (x->n_tok >= s->p.n_ctx) return RP_FINISH_CTX;
    return RP_FINISH_NONE;
}

/* Ends the turn. It goes WAITING when it ended in a tool call (chat format),
 * when the caller asked (wait_after, mark_waiting) — unless cancelled — and
 * IDLE otherwise. IDLE always frees the slot; WAITING frees it only under
 * the yield policy (otherwise the session holds it and blocks the batch). */
static void end_turn(rp_sched *s, rp_sess *x, rp_finish_reason why, bool force_wait) {
    bool tool = false;
    if (why == RP_FINISH_TOOL_CALL)
        tool = true;   /* emit saw a complete call */
    else if (why != RP_FINISH_CANCELLED && x->gp.suspend_on_tool_call && s->m->chat != RP_CHAT_UNKNOWN &&
             x->text_len > 0)
        tool = rp_chat_has_tool_call(s->m->chat, x->text);
    x->finish = tool || force_wait ? RP_FINISH_TOOL_CALL : why;
    x->n_turns++;
    x->want_wait = false;
    if (why != RP_FINISH_CANCELLED && (tool || force_wait || x->gp.wait_after)) {
        x->state = RP_SESS_WAITING;
        if (s->yield) x->has_slot = false;
    } else {
        x->state = RP_SESS_IDLE;
        x->has_slot = false;
    }
}

/* ------------------------------------------------------------ planning */

static void demote_under_pressure(rp_sched *s) {
    size_t tot = 0;
    for (int32_t i = 0; i < s->p.max_sessions; i++)
        if (s->sess[i].used) tot += rp_sess_kv_resident(s, &s->sess[i]);
    while (tot > s->p.kv_resident_limit) {
        rp_sess *pick = NULL;
        for (int32_t i = 0; i < s->p.max_sessions; i++) {
            rp_sess *x = &s->sess[i];
            if (x->used && !x->busy && !x->demoted && x->state == RP_SESS_WAITING && x->kv &&
                (!pick || x->ready_seq < pick->ready_seq))
                pick = x;
        }
        if (!pick) return;
        size_t b = rp_sess_kv_resident(s, pick);
        if (rp_sess_demote(s, pick, NULL) != RP_OK) return;
        tot -= b;
    }
}

/* Draft length of each decoding session for this step (policy, then clamps),
 * within `limit` rows for the decode side. */
static void plan_drafts(rp_sched *s, int32_t limit) {
    const rp_hal_params *hp = &s->p.hal;
    const int32_t nd = s->n_dec;
    switch (s->p.policy) {
    case RP_POLICY_BATCH_AR:
        for (int32_t i = 0; i < nd; i++) s->alloc[i] = 0;
        break;
    case RP_POLICY_SEQ_SD:
    case RP_POLICY_BATCH_SD:
        for (int32_t i = 0; i < nd; i++) s->alloc[i] = hp->fixed_len;
        break;
    case RP_POLICY_UNIFORM:
        rp_hal_allocate_uniform(hp, nd, s->step_no, s->alloc);
        break;
    default:
        for (int32_t i = 0; i < nd; i++) s->a[i] = s->sess[s->dec[i]].hal;
        rp_hal_allocate(hp, s->a, nd, s->alloc, s->frac);
        break;
    }
    int64_t rows = 0;
    for (int32_t i = 0; i < nd; i++) {
        const rp_sess *x = &s->sess[s->dec[i]];
        int32_t L = s->alloc[i];
        if (L > s->max_len) L = s->max_len;
        /* draft rows occupy cells n_tok .. n_tok + L - 1, all < n_ctx */
        if (L > s->p.n_ctx - x->n_tok) L = s->p.n_ctx - x->n_tok;
        /* a verify emits at most L + 1 tokens; more draft than the turn can
         * use is wasted work */
        if (x->gp.max_tokens >= 0 && L > x->gp.max_tokens - x->turn_gen - 1) L = x->gp.max_tokens - x->turn_gen - 1;
        if (L < 0) L = 0;
        s->alloc[i] = L;
        rows += 1 + L;
    }
    /* the row budget: shave the longest drafts first (limit >= n_dec, see
     * the caller, keeps one row per decoding session) */
    while (rows > limit) {
        int32_t big = 0;
        for (int32_t i = 1; i < nd; i++)
            if (s->alloc[i] >= s->alloc[big]) big = i;
        if (s->alloc[big] == 0) break;
        s->alloc[big]--;
        rows--;
    }
}

/* Least recently served prefill first (then oldest request): round-robin
 * across steps for long prompts sharing the row budget. */
static void sort_prefill(rp_sched *s) {
    for (int32_t i = 1; i < s->n_pre; i++) {
        int32_t v = s->pre[i], j = i;
        const rp_sess *xv = &s->sess[v];
        while (j > 0) {
            const rp_sess *xp = &s->sess[s->pre[j - 1]];
            bool later = xp->last_served > xv->last_served ||
                         (xp->last_served == xv->last_served && xp->ready_seq > xv->ready_seq);
            if (!later) break;
            s->pre[j] = s->pre[j - 1];
            j--;
        }
        s->pre[j] = v;
    }
}

/* ------------------------------------------------------------ commit */

/* The grammar a session's turn follows through rp_grammar_on_logits (speculated, drafts checked), or NULL. A turn
 * with ignore_eos takes the processor path instead (rp_sess_constrain bans the end-of-generation tokens on top of
 * the grammar's mask; such turns get no drafts). */
static rp_grammar_state *sess_grammar(const rp_sess *x) {
    return x->gp.ignore_eos ? NULL : rp_grammar_of_hook(x->gp.on_logits, x->gp.logits_user);
}

static void commit_verify(rp_sched *s, rp_sess *x, rp_sched_step_info *info) {
    const int32_t V = s->n_vocab;
    const int32_t base = x->n_tok - 1;   /* cell of the pending token */
    const int32_t L = x->got;
    const bool greedy = x->gp.sampler.temp <= 0;
    rp_grammar_state *gram = sess_grammar(x);
    int32_t a = 0, E = 0;
    rp_finish_reason fin = RP_FINISH_NONE;
    for (int32_t j = 0; j <= L; j++) {
        const float *lg = rp_ctx_logits(s->ctx, x->out0 + j);
        /* the penalty history is the fed tokens: row j's token */
        rp_sampler_accept(x->smp, j == 0 ? x->toks[base] : x->draft[j - 1]);
        /* a grammar follows the emitted tokens: row j is verified under the state after toks[0..n_tok), the
         * drafts accepted so far included, exactly as an unspeculated step at that position would be */
        if (gram) rp_grammar_follow(gram, x->toks, x->n_tok);
        rp_token t;
        bool ok = false;
        if (j < L) {
            if (greedy) {
                t = gram ? rp_grammar_sample(gram, x->smp, true, lg, s->resid, V) : rp_sampler_sample(x->smp, lg);
                ok = t == x->draft[j];
            } else {
                if (gram) {   /* the target's law is the constrained one */
                    memcpy(s->resid, lg, sizeof *lg * (size_t)V);
                    rp_grammar_mask(gram, s->resid, V);
                    lg = s->resid;
                }
                rp_sampler_dist(x->smp, lg, s->pbuf);
                /* q: the draft's law when it was sampled, else a point mass */
                const float *q = x->q_used ? x->q + (size_t)j * (size_t)V : NULL;
                ok = rp_spec_accept(x->smp, s->pbuf, q, x->draft[j], V, s->resid, &t);
            }
        } else {
            /* bonus token after a full acceptance, or a plain decode step:
             * exactly the draw rp_session_sample would make */
            if (gram) {
                t = rp_grammar_sample(gram, x->smp, greedy, lg, s->resid, V);
            } else {
                lg = rp_sess_constrain(s, x, lg);   /* L == 0 with another processor: no drafts */
                t = rp_sampler_sample(x->smp, lg);
            }
        }
        E++;
        a += ok;
        if (x->gp.on_chosen) x->gp.on_chosen(x->gp.chosen_user, t, rp_ctx_logits(s->ctx, x->out0 + j), V);
        fin = emit(s, x, t, info);
        if (fin != RP_FINISH_NONE || !ok) break;
    }
    /* KV keeps the pending token and every emitted token but the last one
     * (which becomes the new pending token); rejected drafts are dropped */
    rp_kv_truncate(x->kv, base + E);
    if (s->drafter) s->drafter->rollback(s->drafter, x->slot, x->kv->n);
    x->last_draft = x->want;
    x->last_accepted = a;
    x->c.decode_steps++;
    x->c.drafted += (uint64_t)L;
    x->c.accepted += (uint64_t)a;
    info->n_drafted += L;
    info->n_accepted += a;
    if (x->want > 0) x->hal = rp_hal_update(x->hal, a, s->p.hal.gamma);
    x->role = L > 0 ? RP_ROLE_VERIFY : RP_ROLE_DECODE;
    x->role_step = s->step_no;
    if (fin != RP_FINISH_NONE) end_turn(s, x, fin, false);
}

static void commit_prefill(rp_sched *s, rp_sess *x, rp_sched_step_info *info) {
    const int32_t start = x->kv_before, end = start + x->n_rows;
    for (int32_t c = start; c < end; c++) {
        rp_sampler_accept(x->smp, x->toks[c]);
        if (c >= x->caller_from) x->c.prompt_tokens++;
    }
    x->c.prefill_rows += (uint64_t)x->n_rows;
    info->n_prefill_rows += x->n_rows;
    x->role = RP_ROLE_PREFILL;
    x->role_step = s->step_no;
    x->last_served = s->step_no;
    if (end < x->n_tok) return;
    /* prompt done: the last row's logits give the first token */
    if (x->gp.max_tokens == 0) {
        end_turn(s, x, RP_FINISH_LENGTH, false);
        return;
    }
    const float *lg = rp_ctx_logits(s->ctx, x->out0);
    rp_grammar_state *gram = sess_grammar(x);
    rp_token t;
    if (gram) {
        rp_grammar_follow(gram, x->toks, x->n_tok);
        t = rp_grammar_sample(gram, x->smp, x->gp.sampler.temp <= 0, lg, s->resid, s->n_vocab);
    } else {
        t = rp_sampler_sample(x->smp, rp_sess_constrain(s, x, lg));
    }
    if (x->gp.on_chosen) x->gp.on_chosen(x->gp.chosen_user, t, rp_ctx_logits(s->ctx, x->out0), s->n_vocab);
    x->state = RP_SESS_DECODE;
    rp_finish_reason fin = emit(s, x, t, info);
    if (fin != RP_FINISH_NONE) end_turn(s, x, fin, false);
}

/* ------------------------------------------------------------ the step */

static void finish_step(rp_sched *s, rp_sched_step_info *info, double t0) {
    for (int32_t i = 0; i < s->p.max_sessions; i++) {
        rp_sess *x = &s->sess[i];
        x->busy = x->held;   /* a fill or KV read outside the step keeps its session */
        if (!x->used) continue;
        if (x->want_free && !x->held) {
            rp_sess_release(s, x);
            continue;
        }
        if (x->want_wait && (x->state == RP_SESS_PREFILL || x->state == RP_SESS_DECODE)) end_turn(s, x, RP_FINISH_TOOL_CALL, true);
    }
    int32_t adm = 0, wait = 0;
    for (int32_t i = 0; i < s->p.max_sessions; i++) {
        const rp_sess *x = &s->sess[i];
        if (!x->used) continue;
        adm += x->has_slot;
        wait += x->state == RP_SESS_WAITING;
    }
    info->n_admitted = adm;
    info->n_waiting = wait;
    info->t_total = now_s() - t0;
    s->st.steps++;
    s->st.blocked_steps += info->blocked;
    s->st.idle_steps += info->idle;
    s->st.forwards += info->ran;
    s->st.rows += (uint64_t)info->n_rows;
    s->st.prefill_rows += (uint64_t)info->n_prefill_rows;
    s->st.emitted += (uint64_t)info->n_emitted;
    s->st.drafted += (uint64_t)info->n_drafted;
    s->st.accepted += (uint64_t)info->n_accepted;
    s->st.draft_forwards += (uint64_t)info->n_draft_fwd;
    s->st.t_draft += info->t_draft;
    s->st.t_target += info->t_target;
    s->st.t_total += info->t_total;
    s->step_no++;
    s->stepping = false;
}

rp_status rp_sched_step(rp_sched *s, rp_sched_step_info *out) {
    rp_sched_step_info info;
    memset(&info, 0, sizeof info);
    const double t0 = now_s();
    pthread_mutex_lock(&s->mu);
    if (s->stepping) {
        pthread_mutex_unlock(&s->mu);
        return rp_errorf(RP_ERR_INVALID_ARG, "sched: rp_sched_step is already running on another thread");
    }
    s->stepping = true;
    s->event = false;
    info.step = s->step_no;

    /* ---- step boundary: cancellations and deferred waits (nothing is busy) */
    for (int32_t i = 0; i < s->p.max_sessions; i++) {
        rp_sess *x = &s->sess[i];
        if (!x->used) continue;
        if (atomic_load(&x->cancel_gen) == x->gen) {
            atomic_store(&x->cancel_gen, 0);
            if (x->state != RP_SESS_IDLE) end_turn(s, x, RP_FINISH_CANCELLED, false);
        }
        if (x->want_wait && (x->state == RP_SESS_PREFILL || x->state == RP_SESS_DECODE))
            end_turn(s, x, RP_FINISH_TOOL_CALL, true);
    }
    if (s->p.kv_resident_limit > 0) demote_under_pressure(s);

    /* ---- slots: oldest request first */
    int32_t n_adm = 0;
    for (int32_t i = 0; i < s->p.max_sessions; i++) n_adm += s->sess[i].used && s->sess[i].has_slot;
    while (n_adm < s->max_active) {
        rp_sess *pick = NULL;
        for (int32_t i = 0; i < s->p.max_sessions; i++) {
            rp_sess *x = &s->sess[i];
            if (x->used && !x->has_slot && (x->state == RP_SESS_PREFILL || x->state == RP_SESS_DECODE) &&
                (!pick || x->ready_seq < pick->ready_seq))
                pick = x;
        }
        if (!pick) break;
        pick->has_slot = true;
        n_adm++;
    }

    /* ---- synchronous (no-yield) batch: an admitted session waiting on a tool blocks it */
    s->n_dec = s->n_pre = 0;
    for (int32_t i = 0; i < s->p.max_sessions; i++) {
        rp_sess *x = &s->sess[i];
        if (!x->used || !x->has_slot) continue;
        if (x->state == RP_SESS_WAITING && !s->yield) info.blocked = true;
        if (x->state == RP_SESS_DECODE) s->dec[s->n_dec++] = i;
        else if (x->state == RP_SESS_PREFILL) s->pre[s->n_pre++] = i;
    }
    if (info.blocked || s->n_dec + s->n_pre == 0) {
        info.idle = !info.blocked;
        s->n_dec = s->n_pre = 0;
        finish_step(s, &info, t0);
        pthread_mutex_unlock(&s->mu);
        if (out) *out = info;
        return RP_OK;
    }

    /* ---- plan: draft lengths, then prefill chunks in the rows left */
    /* rows kept for pending prompts: decode rows come first, but drafts that
     * fill the batch must not stall prefill for as long as they run */
    int64_t pending = 0;
    for (int32_t i = 0; i < s->n_pre; i++) pending += s->sess[s->pre[i]].n_tok - s->sess[s->pre[i]].kv->n;
    int32_t reserve = (int32_t)ceilf(s->p.prefill_share * (float)s->p.n_batch);
    if (reserve > pending) reserve = (int32_t)pending;
    if (reserve > s->p.n_batch - s->n_dec) reserve = s->p.n_batch - s->n_dec;
    plan_drafts(s, s->p.n_batch - reserve);
    int32_t room = s->p.n_batch;
    for (int32_t i = 0; i < s->n_dec; i++) {
        rp_sess *x = &s->sess[s->dec[i]];
        /* a session with a logits hook is never speculated, unless the hook is a grammar's (drafts checked) */
        x->want = x->gp.on_logits && !sess_grammar(x) ? 0 : s->alloc[i];
        x->got = 0;
        x->q_used = false;
        x->busy = true;
        x->kv_before = x->kv->n;
        x->resident_snap = rp_sess_kv_resident(s, x);
        room -= 1 + x->want;
    }
    sort_prefill(s);
    for (int32_t i = 0; i < s->n_pre; i++) {
        rp_sess *x = &s->sess[s->pre[i]];
        int32_t cnt = x->n_tok - x->kv->n;
        if (cnt > room) cnt = room;
        x->n_rows = cnt > 0 ? cnt : 0;
        if (cnt <= 0) continue;
        room -= cnt;
        x->busy = true;
        x->kv_before = x->kv->n;
        x->resident_snap = rp_sess_kv_resident(s, x);
    }
    pthread_mutex_unlock(&s->mu);

    /* ---- drafts for every decoding session, batched (no lock: busy
     * sessions are not touched by API calls) */
    rp_status st = RP_OK;
    const double td = now_s();
    int32_t n_req = 0;
    for (int32_t i = 0; i < s->n_dec; i++) {
        rp_sess *x = &s->sess[s->dec[i]];
        if (x->want <= 0 || !s->drafter) continue;
        const bool sampled = x->gp.sampler.temp > 0 && x->dsmp && x->q;
        x->q_used = sampled;
        s->reqs[n_req] = (rp_draft_req){.seq = x->slot, .toks = x->toks, .n_tok = x->n_tok,
                                        .smp = sampled ? x->dsmp : NULL, .want = x->want, .out = x->draft,
                                        .q = sampled ? x->q : NULL, .got = 0};
        s->req_sess[n_req++] = s->dec[i];
    }
    if (n_req > 0) st = s->drafter->draft(s->drafter, s->reqs, n_req, &info.n_draft_fwd);
    for (int32_t r = 0; r < n_req; r++) {
        rp_sess *x = &s->sess[s->req_sess[r]];
        x->got = st == RP_OK ? s->reqs[r].got : 0;
        if (x->got > x->want) x->got = x->want;
        rp_grammar_state *gram = sess_grammar(x);
        if (gram && x->got > 0) {   /* cut the draft at its first token the grammar rejects: never accepted */
            rp_grammar_follow(gram, x->toks, x->n_tok);
            x->got = rp_grammar_accepts_prefix(gram, x->draft, x->got);
        }
    }
    info.t_draft = now_s() - td;

    /* ---- one target forward: [pending + draft] per decoding session (all
     * with logits), then the prefill chunks */
    const double tt = now_s();
    if (st == RP_OK) {
        rp_batch *b = &s->b;
        rp_batch_clear(b);
        int32_t n_out = 0;
        for (int32_t i = 0; i < s->n_dec && st == RP_OK; i++) {
            rp_sess *x = &s->sess[s->dec[i]];
            const int32_t base = x->n_tok - 1;
            x->row0 = b->n;
            x->out0 = n_out;
            st = rp_batch_add(b, x->toks[base], x->slot, base, base, true);
            for (int32_t j = 0; j < x->got && st == RP_OK; j++)
                st = rp_batch_add(b, x->draft[j], x->slot, base + 1 + j, base + 1 + j, true);
            x->n_rows = 1 + x->got;
            n_out += x->n_rows;
        }
        for (int32_t i = 0; i < s->n_pre && st == RP_OK; i++) {
            rp_sess *x = &s->sess[s->pre[i]];
            if (x->n_rows <= 0) continue;
            x->row0 = b->n;
            x->out0 = n_out;
            const int32_t start = x->kv_before, end = start + x->n_rows;
            for (int32_t c = start; c < end && st == RP_OK; c++)
                st = rp_batch_add(b, x->toks[c], x->slot, c, c, c == x->n_tok - 1);
            n_out += end == x->n_tok;
        }
        info.n_rows = b->n;
        if (st == RP_OK) st = rp_forward(s->ctx, b, s->kvs, s->p.max_sessions);
        info.ran = st == RP_OK;
    }
    info.t_target = now_s() - tt;

    /* ---- commit */
    pthread_mutex_lock(&s->mu);
    if (st != RP_OK) {
        /* roll every participant back to where the step found it */
        for (int32_t i = 0; i < s->p.max_sessions; i++) {
            rp_sess *x = &s->sess[i];
            if (!x->used || !x->busy || x->held) continue;   /* held: not in this step */
            rp_kv_truncate(x->kv, x->kv_before);
            if (s->drafter) s->drafter->rollback(s->drafter, x->slot, x->kv_before);
        }
        info.ran = false;
        info.n_rows = 0;
        finish_step(s, &info, t0);
        pthread_mutex_unlock(&s->mu);
        if (out) *out = info;
        return st;
    }
    /* a session freed during the forward is not committed (no callbacks
     * into a caller that has let go of it); finish_step releases it */
    info.n_decode = s->n_dec;
    for (int32_t i = 0; i < s->n_dec; i++)
        if (!s->sess[s->dec[i]].want_free) commit_verify(s, &s->sess[s->dec[i]], &info);
    for (int32_t i = 0; i < s->n_pre; i++) {
        rp_sess *x = &s->sess[s->pre[i]];
        if (x->n_rows > 0 && !x->want_free) commit_prefill(s, x, &info);
    }
    finish_step(s, &info, t0);
    pthread_mutex_unlock(&s->mu);
    if (out) *out = info;
    return RP_OK;
}
