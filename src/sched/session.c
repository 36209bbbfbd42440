/* session.c — scheduler and session lifecycle: create/free, submit, wait/resume, cancel, truncate, queries. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/error.h"
#include "sched/sched_internal.h"

static const char *k_policy_names[RP_POLICY_COUNT] = {"batch-ar", "seq-sd", "batch-sd", "hal", "hal-yield",
                                                         "uniform"};

const char *rp_sched_policy_name(rp_sched_policy p) {
    return (unsigned)p < RP_POLICY_COUNT ? k_policy_names[p] : "?";
}

int rp_sched_policy_parse(const char *str) {
    for (int i = 0; i < RP_POLICY_COUNT; i++)
        if (!strcmp(str, k_policy_names[i])) return i;
    return -1;
}

const char *rp_drafter_kind_name(rp_drafter_kind k) {
    switch (k) {
    case RP_DRAFTER_NONE: return "none";
    case RP_DRAFTER_NGRAM: return "ngram";
    case RP_DRAFTER_SELF: return "self";
    case RP_DRAFTER_MODEL: return "model";
    }
    return "?";
}

const char *rp_sched_state_name(rp_sched_state st) {
    switch (st) {
    case RP_SESS_IDLE: return "idle";
    case RP_SESS_PREFILL: return "prefill";
    case RP_SESS_DECODE: return "decode";
    case RP_SESS_WAITING: return "waiting";
    }
    return "?";
}

const char *rp_finish_reason_name(rp_finish_reason r) {
    static const char *n[] = {"none", "eog", "stop", "length", "ctx", "tool_call", "cancelled"};
    return (unsigned)r <= RP_FINISH_CANCELLED ? n[r] : "?";
}

size_t rp_sched_kv_limit_bytes(double mib) {
    if (!(mib > 0)) return 0;
    const double b = mib * 1048576.0;
    return b < 1.0 ? 1 : (size_t)b;
}

rp_sched_params rp_sched_default_params(void) {
    rp_sched_params p = {
        .max_sessions = 8, .max_active = 0, .n_ctx = 2048, .n_batch = 512, .kv_type = RP_TYPE_F16, .n_threads = 2,
        .policy = RP_POLICY_HAL_YIELD, .drafter = RP_DRAFTER_NGRAM, .self_layers = 2, .ngram_min = 1, .ngram_max = 3,
        .hal = rp_hal_default_params(), .kv_resident_limit = 0, .demote_dir = NULL, .text_cap = 16384,
        .prefill_share = 0.25f,
    };
    return p;
}

rp_gen_params rp_gen_default_params(void) {
    rp_gen_params g = {
        .sampler = rp_sampler_default_params(), .max_tokens = 128, .stop_at_eog = true,
        .suspend_on_tool_call = true,
    };
    g.sampler.temp = 0;
    return g;
}

/* ------------------------------------------------------------ create / free */

void rp_sess_release(rp_sched *s, rp_sess *x) {
    if (s->drafter && x->used) s->drafter->close(s->drafter, x->slot);
    rp_kv_free(x->kv);
    x->kv = NULL;
    s->kvs[x->slot] = NULL;
    rp_sampler_free(x->smp);
    rp_sampler_free(x->dsmp);
    x->smp = x->dsmp = NULL;
    free(x->toks);
    free(x->text);
    free(x->draft);
    free(x->q);
    free(x->bias);
    x->toks = NULL;
    x->text = NULL;
    x->draft = NULL;
    x->q = NULL;
    x->bias = NULL;
    rp_sess_drop_blob(x);
    x->used = false;
    x->busy = false;
    x->want_free = false;
    x->has_slot = false;
}

void rp_sched_free(rp_sched *s) {
    if (!s) return;
    if (s->sess)
        for (int32_t i = 0; i < s->p.max_sessions; i++)
            if (s->sess[i].used) rp_sess_release(s, &s->sess[i]);
    rp_drafter_free(s->drafter);
    rp_ctx_free(s->ctx);
    if (s->b.cap) rp_batch_free(&s->b);
    free(s->sess);
    free(s->kvs);
    free(s->dec);
    free(s->pre);
    free(s->a);
    free(s->frac);
    free(s->alloc);
    free(s->reqs);
    free(s->req_sess);
    free(s->pbuf);
    free(s->resid);
    free(s->eog);
    free(s->demote_dir);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
}

rp_status rp_sched_create(const rp_model *target, const rp_model *draft, rp_sched_params p, rp_sched **out) {
    *out = NULL;
    if (!target || !target->layers) return rp_errorf(RP_ERR_INVALID_ARG, "sched: target model has no weights");
    if (p.max_sessions < 1 || p.max_sessions > RP_SCHED_MAX_SESSIONS)
        return rp_errorf(RP_ERR_INVALID_ARG, "sched: max_sessions %d not in [1, %d]", p.max_sessions,
                         RP_SCHED_MAX_SESSIONS);
    if ((unsigned)p.policy >= RP_POLICY_COUNT) return rp_errorf(RP_ERR_INVALID_ARG, "sched: unknown policy %d", p.policy);
    if (p.drafter < RP_DRAFTER_NONE || p.drafter > RP_DRAFTER_MODEL)
        return rp_errorf(RP_ERR_INVALID_ARG, "sched: unknown drafter %d", p.drafter);
    if (p.drafter == RP_DRAFTER_NONE && p.policy != RP_POLICY_BATCH_AR)
        return rp_errorf(RP_ERR_INVALID_ARG, "sched: policy %s needs a drafter", rp_sched_policy_name(p.policy));
    RP_TRY(rp_hal_check(&p.hal));
    if (p.hal.fixed_len > p.hal.max_len)
        return rp_errorf(RP_ERR_INVALID_ARG, "sched: fixed draft length %d exceeds the cap %d", p.hal.fixed_len,
                         p.hal.max_len);
    int32_t max_active = p.max_active <= 0 || p.max_active > p.max_sessions ? p.max_sessions : p.max_active;
    if (p.policy == RP_POLICY_SEQ_SD) max_active = 1;
    if (!(p.prefill_share >= 0 && p.prefill_share <= 1))
        return rp_errorf(RP_ERR_INVALID_ARG, "sched: prefill_share %g not in [0, 1]", p.prefill_share);
    if (p.n_ctx < 2 || p.n_batch < max_active || p.text_cap < 256 || p.n_threads < 1)
        return rp_errorf(RP_ERR_INVALID_ARG, "sched: bad params (n_ctx %d, n_batch %d for %d active, text_cap %d)",
                         p.n_ctx, p.n_batch, max_active, p.text_cap);
    if (p.drafter == RP_DRAFTER_MODEL) {
        if (!draft || !draft->layers) return rp_errorf(RP_ERR_INVALID_ARG, "sched: drafter 'model' needs a draft model");
        if (draft->hp.n_vocab != target->hp.n_vocab)
            return rp_errorf(RP_ERR_INVALID_ARG, "sched: draft vocabulary %d differs from the target's %d",
                             draft->hp.n_vocab, target->hp.n_vocab);
    }
    if (p.drafter == RP_DRAFTER_SELF && (p.self_layers < 1 || p.self_layers > target->hp.n_layer))
        return rp_errorf(RP_ERR_INVALID_ARG, "sched: self-draft layers %d not in [1, %d]", p.self_layers,
                         target->hp.n_layer);

    rp_sched *s = calloc(1, sizeof *s);
    if (!s) return rp_errorf(RP_ERR_NOMEM, "sched: out of memory");
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    s->p = p;
    s->p.max_active = max_active;
    if (target->tok) {
        /* the turn text must hold several of the longest pieces */
        size_t bound = rp_detok_bound(target->tok);
        if ((size_t)s->p.text_cap < 4 * bound) s->p.text_cap = (int32_t)(4 * bound);
    }
    s->m = target;
    s->dm = p.drafter == RP_DRAFTER_MODEL ? draft : NULL;
    s->n_vocab = target->hp.n_vocab;
    s->yield = p.policy == RP_POLICY_HAL_YIELD;
    s->max_active = max_active;
    s->max_len = p.policy == RP_POLICY_BATCH_AR ? 0 : p.hal.max_len;
    rp_status st = RP_OK;
    if (p.demote_dir && !(s->demote_dir = strdup(p.demote_dir))) st = rp_errorf(RP_ERR_NOMEM, "sched: out of memory");
    s->p.demote_dir = s->demote_dir;

    /* one target forward holds every admitted session's rows; each session
     * has at most 1 + max_len output rows (a verify) or 1 (a prefill end) */
    rp_ctx_params cp = rp_ctx_default_params();
    cp.n_batch = p.n_batch;
    cp.n_outputs = max_active * (1 + s->max_len);
    if (cp.n_outputs > cp.n_batch) cp.n_outputs = cp.n_batch;
    cp.n_ctx_max = p.n_ctx;
    cp.n_threads = p.n_threads;
    if (st == RP_OK) st = rp_ctx_create(target, cp, &s->ctx);
    if (st == RP_OK) st = rp_batch_init(&s->b, p.n_batch);
    const size_t S = (size_t)p.max_sessions;
    if (st == RP_OK) {
        s->sess = calloc(S, sizeof *s->sess);
        s->kvs = calloc(S, sizeof *s->kvs);
        s->dec = malloc(S * sizeof *s->dec);
        s->pre = malloc(S * sizeof *s->pre);
        s->a = malloc(S * sizeof *s->a);
        s->frac = malloc(S * sizeof *s->frac);
        s->alloc = malloc(S * sizeof *s->alloc);
        s->reqs = calloc(S, sizeof *s->reqs);
        s->req_sess = malloc(S * sizeof *s->req_sess);
        s->pbuf = malloc(sizeof(float) * (size_t)s->n_vocab);
        s->resid = malloc(sizeof(float) * (size_t)s->n_vocab);
        if (!s->sess || !s->kvs || !s->dec || !s->pre || !s->a || !s->frac || !s->alloc || !s->reqs || !s->req_sess ||
            !s->pbuf || !s->resid)
            st = rp_errorf(RP_ERR_NOMEM, "sched: out of memory");
    }
    for (int32_t t = 0; st == RP_OK && target->tok && t < s->n_vocab; t++)   /* ignore_eos bans these */
        if (rp_tokenizer_is_eog(target->tok, t)) {
            rp_token *ne = realloc(s->eog, sizeof *ne * (size_t)(s->n_eog + 1));
            if (!ne) st = rp_errorf(RP_ERR_NOMEM, "sched: out of memory");
            else (s->eog = ne)[s->n_eog++] = t;
        }
    if (st == RP_OK) {
        for (int32_t i = 0; i < p.max_sessions; i++) {
            s->sess[i].slot = i;
            atomic_init(&s->sess[i].cancel_gen, 0);
        }
        switch (p.policy == RP_POLICY_BATCH_AR ? RP_DRAFTER_NONE : p.drafter) {
        case RP_DRAFTER_NONE: break;
        case RP_DRAFTER_NGRAM: st = rp_drafter_ngram_create(p.ngram_min, p.ngram_max, &s->drafter); break;
        case RP_DRAFTER_SELF: st = rp_drafter_self_create(s->ctx, s->kvs, p.max_sessions, p.self_layers, &s->drafter); break;
        case RP_DRAFTER_MODEL: {
            rp_drafter_model_params mp = {.max_seq = p.max_sessions, .n_ctx = p.n_ctx, .n_batch = p.n_batch,
                                          .max_draft = s->max_len > 0 ? s->max_len : 1, .kv_type = p.kv_type,
                                          .n_threads = p.n_threads};
            st = rp_drafter_model_create(draft, mp, &s->drafter);
            break;
        }
        }
    }
    if (st != RP_OK) {
        rp_sched_free(s);
        return st;
    }
    *out = s;
    return RP_OK;
}

rp_sched_params rp_sched_get_params(const rp_sched *s) { return s->p; }

/* ------------------------------------------------------------ lookup */

rp_sess *rp_sched_find(rp_sched *s, rp_sched_id id) {
    int64_t slot = id & 0xFFFF;
    uint32_t gen = (uint32_t)(id >> 16);
    if (id <= 0 || slot >= s->p.max_sessions || !s->sess[slot].used || s->sess[slot].gen != gen) {
        rp_errorf(RP_ERR_NOT_FOUND, "sched: no session %lld", (long long)id);
        return NULL;
    }
    return &s->sess[slot];
}

static rp_sched_id sess_id(const rp_sess *x) { return ((rp_sched_id)x->gen << 16) | x->slot; }

size_t rp_sess_kv_resident(const rp_sched *s, const rp_sess *x) {
    size_t b = 0;
    if (x->kv) b += 2 * (size_t)x->kv->n_layer * (size_t)x->kv->n * x->kv->row_bytes;
    if (s->drafter && x->used) {
        rp_kv *dk = s->drafter->kv(s->drafter, x->slot);
        if (dk) b += 2 * (size_t)dk->n_layer * (size_t)dk->n * dk->row_bytes;
    }
    return b;
}

static void signal_event(rp_sched *s) {
    s->event = true;
    pthread_cond_broadcast(&s->cv);
}

/* ------------------------------------------------------------ sessions */

rp_status rp_sched_session_create(rp_sched *s, rp_sched_id *out) {
    *out = 0;
    pthread_mutex_lock(&s->mu);
    rp_sess *x = NULL;
    for (int32_t i = 0; i < s->p.max_sessions && !x; i++)
        if (!s->sess[i].used && !s->sess[i].want_free) x = &s->sess[i];
    if (!x) {
        pthread_mutex_unlock(&s->mu);
        return rp_errorf(RP_ERR_FULL, "sched: all %d sessions in use", s->p.max_sessions);
    }
    uint32_t gen = x->gen + 1;
    if (gen >= (1u << 30)) gen = 1;
    int32_t slot = x->slot;
    memset(x, 0, sizeof *x);
    x->slot = slot;
    x->gen = gen;
    atomic_store(&x->cancel_gen, 0);
    x->cap_tok = s->p.n_ctx + 2;   /* a verify can emit one token past the last cell */
    x->toks = malloc(sizeof *x->toks * (size_t)x->cap_tok);
    x->text = malloc((size_t)s->p.text_cap + 1);
    x->draft = malloc(sizeof *x->draft * (size_t)(s->max_len > 0 ? s->max_len : 1));
    rp_status st = (x->toks && x->text && x->draft) ? RP_OK : rp_errorf(RP_ERR_NOMEM, "sched: out of memory");
    if (st == RP_OK) st = rp_kv_create_swa(s->m, s->p.n_ctx, s->p.kv_type, s->p.swa_cells, &x->kv);
    x->used = true;   /* from here sess_release undoes everything */
    if (st == RP_OK && s->drafter) st = s->drafter->open(s->drafter, slot);
    if (st != RP_OK) {
        rp_sess_release(s, x);
        pthread_mutex_unlock(&s->mu);
        return st;
    }
    s->kvs[slot] = x->kv;
    x->text[0] = '\0';
    x->hal = s->p.hal.a0;
    x->state = RP_SESS_IDLE;
    x->role_step = -1;
    x->last_served = -1;
    *out = sess_id(x);
    pthread_mutex_unlock(&s->mu);
    return RP_OK;
}

rp_status rp_sched_session_free(rp_sched *s, rp_sched_id id) {
    pthread_mutex_lock(&s->mu);
    rp_sess *x = rp_sched_find(s, id);
    if (!x) {
        pthread_mutex_unlock(&s->mu);
        return RP_ERR_NOT_FOUND;
    }
    if (x->busy) x->want_free = true;
    else rp_sess_release(s, x);
    signal_event(s);
    pthread_mutex_unlock(&s->mu);
    return RP_OK;
}

/* Copies gen params into the session (stop lists, bias) and rebuilds the
 * samplers: the target sampler's penalty history is the tokens already in
 * the KV; pending tokens join it when they are fed. */
static rp_status set_gen(rp_sched *s, rp_sess *x, const rp_gen_params *gp) {
    if (gp->n_stop_ids < 0 || gp->n_stop_ids > RP_SCHED_MAX_STOP_IDS || gp->n_stop_strs < 0 ||
        gp->n_stop_strs > RP_SCHED_MAX_STOP_STRS || gp->sampler.n_bias < 0)
        return rp_errorf(RP_ERR_INVALID_ARG, "sched: too many stop ids (%d, max %d) or stop strings (%d, max %d)",
                         gp->n_stop_ids, RP_SCHED_MAX_STOP_IDS, gp->n_stop_strs, RP_SCHED_MAX_STOP_STRS);
    if ((gp->n_stop_ids > 0 && !gp->stop_ids) || (gp->n_stop_strs > 0 && !gp->stop_strs) ||
        (gp->sampler.n_bias > 0 && !gp->sampler.bias))
        return rp_errorf(RP_ERR_INVALID_ARG, "sched: stop ids / stop strings / bias count without an array");
    for (int32_t i = 0; i < gp->n_stop_strs; i++)
        if (!gp->stop_strs[i] || !gp->stop_strs[i][0] || strlen(gp->stop_strs[i]) > RP_SCHED_MAX_STOP_LEN)
            return rp_errorf(RP_ERR_INVALID_ARG, "sched: stop string %d empty or longer than %d bytes", i,
                             RP_SCHED_MAX_STOP_LEN);
    /* ignore_eos without a processor: the end-of-generation ids join the bias at -inf, so every draw (drafts and
     * their verification included) excludes them; with one, rp_sess_constrain bans them after it */
    const int32_t n_ban = gp->ignore_eos && !gp->on_logits ? s->n_eog : 0;
    const int32_t n_bias = gp->sampler.n_bias + n_ban;
    rp_logit_bias *bias = NULL;
    if (n_bias > 0) {
        bias = malloc(sizeof *bias * (size_t)n_bias);
        if (!bias) return rp_errorf(RP_ERR_NOMEM, "sched: out of memory");
        if (gp->sampler.n_bias > 0) memcpy(bias, gp->sampler.bias, sizeof *bias * (size_t)gp->sampler.n_bias);
        for (int32_t i = 0; i < n_ban; i++) bias[gp->sampler.n_bias + i] = (rp_logit_bias){s->eog[i], -INFINITY};
    }
    rp_sampler_params sp = gp->sampler;
    sp.bias = bias;
    sp.n_bias = n_bias;
    rp_sampler *smp = NULL, *dsmp = NULL;
    rp_status cst = rp_sampler_create(sp, s->n_vocab, &smp);
    if (cst != RP_OK) {
        free(bias);
        return cst;
    }
    const bool sampled_drafts = gp->sampler.temp > 0 && s->drafter &&
                                (s->p.drafter == RP_DRAFTER_SELF || s->p.drafter == RP_DRAFTER_MODEL);
    if (sampled_drafts) {
        /* q only has to be the law the draft was drawn from; no penalty
         * keeps it independent of the (rejected-token) history */
        rp_sampler_params dp = sp;
        dp.repeat_penalty = 1.0f;
        dp.presence_penalty = dp.frequency_penalty = 0.0f;
        dp.seed = gp->sampler.seed ^ 0x5bd1e9955bd1e995ULL;
        rp_status st = rp_sampler_create(dp, s->n_vocab, &dsmp);
        if (st == RP_OK && !x->q && s->max_len > 0) {
            x->q = malloc(sizeof(float) * (size_t)s->max_len * (size_t)s->n_vocab);
            if (!x->q) st = rp_errorf(RP_ERR_NOMEM, "sched: out of memory for draft distributions");
        }
        if (st != RP_OK) {
            rp_sampler_free(smp);
            rp_sampler_free(dsmp);
            free(bias);
            return st;
        }
    }
    rp_sampler_free(x->smp);
    rp_sampler_free(x->dsmp);
    free(x->bias);
    x->smp = smp;
    x->dsmp = dsmp;
    x->bias = bias;
    x->gp = *gp;
    x->gp.sampler.bias = bias;   /* the caller's n_bias first (the bans after them are the samplers' only) */
    if (gp->n_stop_ids > 0) memcpy(x->stop_ids, gp->stop_ids, sizeof *gp->stop_ids * (size_t)gp->n_stop_ids);
    x->gp.stop_ids = x->stop_ids;
    for (int32_t i = 0; i < gp->n_stop_strs; i++) {
        strcpy(x->stop_strs[i], gp->stop_strs[i]);
        x->stop_ptrs[i] = x->stop_strs[i];
    }
    x->gp.stop_strs = x->stop_ptrs;
    x->have_gp = true;
    int32_t fed = x->kv->n, L = gp->sampler.repeat_last_n;
    for (int32_t i = fed - L > 0 ? fed - L : 0; i < fed; i++) rp_sampler_accept(x->smp, x->toks[i]);
    return RP_OK;
}

/* Starts a turn: appends the tokens, becomes PREFILL and queues for a slot. */
static rp_status start_turn(rp_sched *s, rp_sess *x, const rp_token *toks, int32_t n, const rp_gen_params *gp,
                            bool resume) {
    if (x->busy) return rp_errorf(RP_ERR_INVALID_ARG, "sched: session is in the step in flight");
    if (x->state != RP_SESS_IDLE && x->state != RP_SESS_WAITING)
        return rp_errorf(RP_ERR_INVALID_ARG, "sched: session is %s; submit needs idle or waiting",
                         rp_sched_state_name(x->state));
    if (n < 0 || (n > 0 && !toks)) return rp_errorf(RP_ERR_INVALID_ARG, "sched: %d tokens", n);
    if (!gp && !x->have_gp) return rp_errorf(RP_ERR_INVALID_ARG, "sched: the first turn needs gen params");
    for (int32_t i = 0; i < n; i++)
        if (toks[i] < 0 || toks[i] >= s->n_vocab)
            return rp_errorf(RP_ERR_RANGE, "sched: token %d at %d not in [0, %d)", toks[i], i, s->n_vocab);
    if ((int64_t)x->n_tok + n > s->p.n_ctx)
        return rp_errorf(RP_ERR_FULL, "sched: %d more tokens exceed the context (%d of %d used)", n, x->n_tok,
                         s->p.n_ctx);
    if (x->demoted) RP_TRY(rp_sess_restore(s, x));
    const int32_t max_tokens = gp ? gp->max_tokens : x->gp.max_tokens;
    if (max_tokens != 0 && n == 0 && x->kv->n == x->n_tok) {
        /* nothing pending to take logits from: feed the last token again */
        if (x->n_tok == 0) return rp_errorf(RP_ERR_INVALID_ARG, "sched: empty session and no tokens");
        rp_kv_truncate(x->kv, x->n_tok - 1);
        if (s->drafter) s->drafter->rollback(s->drafter, x->slot, x->kv->n);
    }
    if (gp) RP_TRY(set_gen(s, x, gp));
    if (n > 0) memcpy(x->toks + x->n_tok, toks, sizeof *toks * (size_t)n);
    x->caller_from = x->n_tok;
    x->n_tok += n;
    x->state = RP_SESS_PREFILL;
    x->finish = RP_FINISH_NONE;
    x->turn_gen = 0;
    x->text_len = 0;
    x->text[0] = '\0';
    rp_detok_init(&x->detok, s->m->tok, true);
    x->detok.at_start = false;
    x->want_wait = false;
    atomic_store(&x->cancel_gen, 0);
    x->ready_seq = ++s->ready_counter;
    if (x->kv->n == x->n_tok) {
        /* max_tokens 0 with nothing to feed: the turn is already over */
        x->state = x->gp.wait_after ? RP_SESS_WAITING : RP_SESS_IDLE;
        x->finish = RP_FINISH_LENGTH;
        x->n_turns++;
    }
    if (resume) {
        x->c.resumes++;
        x->c.resume_tokens += (uint64_t)n;
    }
    signal_event(s);
    return RP_OK;
}

rp_status rp_sched_submit(rp_sched *s, rp_sched_id id, const rp_token *toks, int32_t n, const rp_gen_params *gp) {
    pthread_mutex_lock(&s->mu);
    rp_sess *x = rp_sched_find(s, id);
    rp_status st = x ? start_turn(s, x, toks, n, gp, false) : RP_ERR_NOT_FOUND;
    pthread_mutex_unlock(&s->mu);
    return st;
}

/* Holds a session outside the step (mu held): busy, so no submit, truncate,
 * demote or step touches it, and a free is deferred; `held` keeps a step in
 * flight from clearing that. kv_before is what stats report for its KV. */
static rp_kv *sess_hold(rp_sched *s, rp_sess *x, int32_t kv_before) {
    x->busy = x->held = true;
    x->kv_before = kv_before;
    x->resident_snap = rp_sess_kv_resident(s, x);
    return x->kv;
}

/* Ends a hold (mu held); a free requested meanwhile happens now. Returns
 * false when the session is gone. */
static bool sess_unhold(rp_sched *s, rp_sess *x) {
    x->busy = x->held = false;
    if (!x->want_free) return true;
    rp_sess_release(s, x);
    signal_event(s);
    return false;
}

rp_status rp_sched_submit_filled(rp_sched *s, rp_sched_id id, const rp_token *toks, int32_t n, const rp_gen_params *gp,
                                 rp_sched_fill_fn fill, void *user, int32_t *n_filled) {
    if (n_filled) *n_filled = 0;
    pthread_mutex_lock(&s->mu);
    rp_sess *x = rp_sched_find(s, id);
    rp_status st = RP_OK;
    if (!x) st = RP_ERR_NOT_FOUND;
    else if (x->busy || x->state != RP_SESS_IDLE || x->n_tok != 0 || x->demoted || !x->kv || x->kv->n != 0)
        st = rp_errorf(RP_ERR_INVALID_ARG, "sched: a filled submit needs a fresh idle session");
    else if (n < 1 || !toks || !gp || !fill)
        st = rp_errorf(RP_ERR_INVALID_ARG, "sched: a filled submit needs tokens, gen params and a fill");
    else if (n > s->p.n_ctx)
        st = rp_errorf(RP_ERR_FULL, "sched: %d tokens exceed the context (%d)", n, s->p.n_ctx);
    for (int32_t i = 0; st == RP_OK && i < n; i++)
        if (toks[i] < 0 || toks[i] >= s->n_vocab)
            st = rp_errorf(RP_ERR_RANGE, "sched: token %d at %d not in [0, %d)", toks[i], i, s->n_vocab);
    if (st != RP_OK) {
        pthread_mutex_unlock(&s->mu);
        return st;
    }
    rp_kv *kv = sess_hold(s, x, 0);   /* IDLE: no step would take it anyway */
    pthread_mutex_unlock(&s->mu);

    const rp_status fs = fill(user, kv, toks, n);
    int32_t k = kv->n;
    if (fs != RP_OK || k < 0 || k > n) {
        rp_kv_clear(kv);   /* unknown state: prefill everything in the batch */
        k = 0;
    }
    if (k == n) {   /* the batch runs the last token again: its logits give the first generated token */
        rp_kv_truncate(kv, n - 1);
        k = n - 1;
    }

    pthread_mutex_lock(&s->mu);
    if (!sess_unhold(s, x)) {
        pthread_mutex_unlock(&s->mu);
        return rp_errorf(RP_ERR_CANCELLED, "sched: the session was freed during its fill");
    }
    const bool cancelled = atomic_load(&x->cancel_gen) == x->gen;
    /* the history is written before start_turn so that set_gen's penalty
     * history (the tokens in the KV) reads the filled prompt */
    memcpy(x->toks, toks, sizeof *toks * (size_t)n);
    st = start_turn(s, x, toks, n, gp, false);
    if (st == RP_OK) {
        x->c.prompt_tokens += (uint64_t)k;
        x->c.filled_tokens += (uint64_t)k;
        if (cancelled) atomic_store(&x->cancel_gen, x->gen);   /* start_turn cleared it */
        if (n_filled) *n_filled = k;
    } else {
        rp_kv_clear(kv);
    }
    pthread_mutex_unlock(&s->mu);
    return st;
}

rp_status rp_sched_session_read_kv(rp_sched *s, rp_sched_id id, rp_sched_kv_fn fn, void *user) {
    pthread_mutex_lock(&s->mu);
    rp_sess *x = rp_sched_find(s, id);
    rp_status st = RP_OK;
    if (!x) st = RP_ERR_NOT_FOUND;
    else if (x->busy || (x->state != RP_SESS_IDLE && x->state != RP_SESS_WAITING) || x->demoted || !x->kv || !fn)
        st = rp_errorf(RP_ERR_INVALID_ARG, "sched: the session's KV can be read only when it is idle or waiting");
    if (st != RP_OK) {
        pthread_mutex_unlock(&s->mu);
        return st;
    }
    const rp_kv *kv = sess_hold(s, x, x->kv->n);
    const rp_token *toks = x->toks;
    const int32_t n = x->n_tok;
    pthread_mutex_unlock(&s->mu);
    st = fn(user, kv, toks, n);
    pthread_mutex_lock(&s->mu);
    (void)sess_unhold(s, x);
    pthread_mutex_unlock(&s->mu);
    return st;
}

rp_status rp_sched_resume(rp_sched *s, rp_sched_id id, const rp_token *toks, int32_t n, const rp_gen_params *gp) {
    pthread_mutex_lock(&s->mu);
    rp_sess *x = rp_sched_find(s, id);
    rp_status st = RP_ERR_NOT_FOUND;
    if (x) {
        st = x->state == RP_SESS_WAITING
                 ? start_turn(s, x, toks, n, gp, true)
                 : rp_errorf(RP_ERR_INVALID_ARG, "sched: resume needs a waiting session (it is %s)",
                             rp_sched_state_name(x->state));
    }
    pthread_mutex_unlock(&s->mu);
    return st;
}

rp_status rp_sched_mark_waiting(rp_sched *s, rp_sched_id id) {
    pthread_mutex_lock(&s->mu);
    rp_sess *x = rp_sched_find(s, id);
    rp_status st = RP_ERR_NOT_FOUND;
    if (x) {
        st = RP_OK;
        if (x->state == RP_SESS_IDLE) {
            x->state = RP_SESS_WAITING;   /* e.g. a server's session waiting for the client's tool result */
            x->has_slot = false;
        } else if (x->state == RP_SESS_PREFILL || x->state == RP_SESS_DECODE) {
            x->want_wait = true;          /* applied at the next step boundary */
        }
        signal_event(s);
    }
    pthread_mutex_unlock(&s->mu);
    return st;
}

void rp_sched_cancel(rp_sched *s, rp_sched_id id) {
    int64_t slot = id & 0xFFFF;
    if (id <= 0 || slot >= s->p.max_sessions) return;
    /* the slot array never moves; a stale id's generation never matches */
    atomic_store(&s->sess[slot].cancel_gen, (uint32_t)(id >> 16));
    pthread_cond_broadcast(&s->cv);
}

rp_status rp_sched_truncate(rp_sched *s, rp_sched_id id, int32_t n) {
    pthread_mutex_lock(&s->mu);
    rp_sess *x = rp_sched_find(s, id);
    rp_status st = RP_ERR_NOT_FOUND;
    if (x) {
        if (x->busy || (x->state != RP_SESS_IDLE && x->state != RP_SESS_WAITING))
            st = rp_errorf(RP_ERR_INVALID_ARG, "sched: truncate needs an idle or waiting session");
        else if (n < 0 || n > x->n_tok)
            st = rp_errorf(RP_ERR_RANGE, "sched: truncate to %d of %d tokens", n, x->n_tok);
        else if (x->demoted && (st = rp_sess_restore(s, x)) != RP_OK) {
        } else {
            x->n_tok = n;
            if (x->kv->n > n) rp_kv_truncate(x->kv, n);
            if (!rp_kv_can_resume(x->kv, x->kv->n)) rp_kv_clear(x->kv);   /* a ring cut past its window: recompute */
            if (s->drafter) s->drafter->rollback(s->drafter, x->slot, x->kv->n);
            st = RP_OK;
        }
    }
    pthread_mutex_unlock(&s->mu);
    return st;
}

rp_status rp_sched_fork(rp_sched *s, rp_sched_id dst, rp_sched_id src, int32_t n) {
    pthread_mutex_lock(&s->mu);
    rp_sess *x = rp_sched_find(s, src), *y = x ? rp_sched_find(s, dst) : NULL;
    rp_status st = RP_ERR_NOT_FOUND;
    if (x && y) {
        if (x == y)
            st = rp_errorf(RP_ERR_INVALID_ARG, "sched: fork of a session into itself");
        else if (x->busy)
            st = rp_errorf(RP_ERR_INVALID_ARG, "sched: fork of a session in the step in flight");
        else if (y->busy || y->state != RP_SESS_IDLE)
            st = rp_errorf(RP_ERR_INVALID_ARG, "sched: a fork needs an idle session to copy into");
        else if (n < 0 || n > x->n_tok)
            st = rp_errorf(RP_ERR_RANGE, "sched: fork of %d tokens, the source has %d", n, x->n_tok);
        else if (x->demoted && (st = rp_sess_restore(s, x)) != RP_OK) {
        } else if (x->kv->n < n) {
            st = rp_errorf(RP_ERR_RANGE, "sched: fork of %d tokens, the source has %d computed", n, x->kv->n);
        } else if (y->demoted && (st = rp_sess_restore(s, y)) != RP_OK) {
        } else {
            /* the first n cells: copy what the source holds, then drop the rest in the copy */
            st = rp_kv_copy(y->kv, x->kv);
            if (st == RP_OK && y->kv->n > n) rp_kv_truncate(y->kv, n);
            if (st == RP_OK && !rp_kv_can_resume(y->kv, y->kv->n)) rp_kv_clear(y->kv);   /* recomputed by the batch */
            rp_kv *dk = s->drafter ? s->drafter->kv(s->drafter, x->slot) : NULL;
            rp_kv *dk2 = s->drafter ? s->drafter->kv(s->drafter, y->slot) : NULL;
            if (st == RP_OK && dk && dk2) st = rp_kv_copy(dk2, dk);
            if (st == RP_OK && s->drafter) s->drafter->rollback(s->drafter, y->slot, n);
            if (st == RP_OK) {
                memcpy(y->toks, x->toks, sizeof *y->toks * (size_t)n);
                y->n_tok = n;
                y->caller_from = 0;
            } else {   /* nothing half-copied is ever used */
                rp_kv_clear(y->kv);
                if (dk2) rp_kv_clear(dk2);
                y->n_tok = 0;
            }
        }
    }
    pthread_mutex_unlock(&s->mu);
    return st;
}

rp_status rp_sched_demote(rp_sched *s, rp_sched_id id, const char *path) {
    pthread_mutex_lock(&s->mu);
    rp_sess *x = rp_sched_find(s, id);
    rp_status st = RP_ERR_NOT_FOUND;
    if (x) {
        if (x->busy || (x->state != RP_SESS_IDLE && x->state != RP_SESS_WAITING))
            st = rp_errorf(RP_ERR_INVALID_ARG, "sched: demote needs an idle or waiting session not in a step");
        else st = x->demoted ? RP_OK : rp_sess_demote(s, x, path);
    }
    pthread_mutex_unlock(&s->mu);
    return st;
}

rp_status rp_sched_restore(rp_sched *s, rp_sched_id id) {
    pthread_mutex_lock(&s->mu);
    rp_sess *x = rp_sched_find(s, id);
    rp_status st = x ? (x->demoted ? rp_sess_restore(s, x) : RP_OK) : RP_ERR_NOT_FOUND;
    pthread_mutex_unlock(&s->mu);
    return st;
}

rp_status rp_sched_session_info_get(rp_sched *s, rp_sched_id id, rp_sched_session_info *out) {
    pthread_mutex_lock(&s->mu);
    rp_sess *x = rp_sched_find(s, id);
    if (!x) {
        pthread_mutex_unlock(&s->mu);
        return RP_ERR_NOT_FOUND;
    }
    *out = x->c;
    out->state = x->state;
    out->has_slot = x->has_slot;
    out->busy = x->busy;
    out->demoted = x->demoted;
    out->last_role = x->role;
    out->last_step = x->role_step;
    out->finish = x->finish;
    out->n_tokens = x->n_tok;
    out->n_cached = !x->kv ? -1 : x->busy ? x->kv_before : x->kv->n;   /* the step owns a busy KV */
    out->n_turns = x->n_turns;
    out->turn_generated = x->turn_gen;
    out->hal = x->hal;
    out->last_draft = x->last_draft;
    out->last_accepted = x->last_accepted;
    pthread_mutex_unlock(&s->mu);
    return RP_OK;
}

rp_status rp_sched_session_tokens(rp_sched *s, rp_sched_id id, int32_t from, rp_token *buf, int32_t cap,
                                  int32_t *n_out) {
    *n_out = 0;
    pthread_mutex_lock(&s->mu);
    rp_sess *x = rp_sched_find(s, id);
    rp_status st = RP_ERR_NOT_FOUND;
    if (x) {
        if (from < 0 || from > x->n_tok || cap < 0) {
            st = rp_errorf(RP_ERR_RANGE, "sched: tokens from %d of %d", from, x->n_tok);
        } else {
            int32_t n = x->n_tok - from < cap ? x->n_tok - from : cap;
            memcpy(buf, x->toks + from, sizeof *buf * (size_t)n);
            *n_out = n;
            st = RP_OK;
        }
    }
    pthread_mutex_unlock(&s->mu);
    return st;
}

void rp_sched_wake(rp_sched *s) {
    pthread_mutex_lock(&s->mu);
    signal_event(s);
    pthread_mutex_unlock(&s->mu);
}

bool rp_sched_wait_event(rp_sched *s, double timeout_s) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    double whole = floor(timeout_s > 0 ? timeout_s : 0);
    ts.tv_sec += (time_t)whole;
    ts.tv_nsec += (long)((timeout_s - whole) * 1e9);
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&s->mu);
    while (!s->event)
        if (pthread_cond_timedwait(&s->cv, &s->mu, &ts) != 0) break;
    bool ev = s->event;
    pthread_mutex_unlock(&s->mu);
    return ev;
}

void rp_sched_stats_get(rp_sched *s, rp_sched_stats *out) {
    pthread_mutex_lock(&s->mu);
    *out = s->st;
    out->kv_resident = 0;
    out->n_sessions = out->n_admitted = out->n_waiting = out->n_demoted = 0;
    for (int32_t i = 0; i < s->p.max_sessions; i++) {
        const rp_sess *x = &s->sess[i];
        if (!x->used) continue;
        out->n_sessions++;
        out->n_admitted += x->has_slot;
        out->n_waiting += x->state == RP_SESS_WAITING;
        out->n_demoted += x->demoted;
        /* a busy session's KV is being written by the step thread without the lock */
        out->kv_resident += x->busy ? x->resident_snap : rp_sess_kv_resident(s, x);
    }
    pthread_mutex_unlock(&s->mu);
}
