/* backend_core.c — the serial backend: one job at a time on a worker thread, prefill through the reuse engine, bounded FIFO. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "model/forward.h"
#include "model/session.h"
#include "reuse/engine.h"
#include "server/backend_internal.h"
#include "server/json_prefix.h"
#include "store/store.h"

struct rp_bk_session {
    rp_session *s;        /* created on the worker at the session's first job */
    rp_token *hist;       /* tokens in the KV: hist[0..n_hist) == cells [0, n_hist) */
    int32_t n_hist;
    int32_t n_exact;      /* cells [0, n_exact) hold exactly what a plain prefill computes (the rest came after
                             approximate reuse) */
    bool waiting;         /* the last turn ended in a tool call */
};

typedef struct core {
    rp_backend *b;
    rp_ctx *ctx;
    rp_reuse *e;
    rp_session *scratch;          /* the sequence of one-off jobs */
    float *logits;                /* [n_vocab] first-token logits from the reuse engine */
    float *masked;                /* [n_vocab] constrained logits */
    char *pieces;                 /* vocabulary pieces for the JSON constraint (built on first use) */
    int32_t *piece_off;           /* [n_vocab + 1] */

    pthread_t th;
    bool th_started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    rp_job *head, *tail;          /* queue (mu) */
    int32_t n_queued;
    rp_job *running;              /* (mu) */
    bool stop;

    rp_backend_stats st;          /* counters (mu) */
    int32_t n_sessions;
} core;

/* ------------------------------------------------------------ the JSON constraint */

static rp_status build_pieces(core *c) {
    if (c->pieces) return RP_OK;
    const rp_tokenizer *tok = c->b->m->tok;
    const int32_t nv = c->b->m->hp.n_vocab;
    const int32_t nt = rp_tokenizer_n_vocab(tok) < nv ? rp_tokenizer_n_vocab(tok) : nv;
    int32_t *off = malloc(sizeof *off * ((size_t)nv + 1));
    size_t cap = (size_t)nv * 8 + 64, len = 0;
    char *buf = malloc(cap);
    if (!off || !buf) goto oom;
    for (int32_t id = 0; id < nv; id++) {
        off[id] = (int32_t)len;
        char tmp[512];
        int w = id < nt && !rp_tokenizer_is_eog(tok, id) ? rp_tokenizer_token_to_piece(tok, id, false, tmp, sizeof tmp) : 0;
        if (w < 0 || w > (int)sizeof tmp) w = 0;
        if (len + (size_t)w > cap) {
            cap = (len + (size_t)w) * 2;
            char *nb = realloc(buf, cap);
            if (!nb) goto oom;
            buf = nb;
        }
        memcpy(buf + len, tmp, (size_t)w);
        len += (size_t)w;
    }
    off[nv] = (int32_t)len;
    c->pieces = buf;
    c->piece_off = off;
    return RP_OK;
oom:
    free(off);
    free(buf);
    return rp_errorf(RP_ERR_NOMEM, "server: out of memory for the vocabulary pieces");
}

/* Copies logits with every token that cannot continue the JSON prefix banned. */
static const float *constrain(core *c, const rp_json_prefix *jp, const float *logits) {
    const int32_t nv = c->b->m->hp.n_vocab;
    int32_t allowed = 0;
    for (int32_t id = 0; id < nv; id++) {
        const int32_t a = c->piece_off[id], z = c->piece_off[id + 1];
        rp_json_prefix t = *jp;
        bool ok = z > a && rp_jsonp_feed(&t, c->pieces + a, (size_t)(z - a));
        c->masked[id] = ok ? logits[id] : -INFINITY;
        allowed += ok;
    }
    return allowed > 0 ? c->masked : logits;
}

/* ------------------------------------------------------------ running a job */

static int32_t common_prefix(const rp_token *a, int32_t na, const rp_token *b, int32_t nb) {
    int32_t n = na < nb ? na : nb, i = 0;
    while (i < n && a[i] == b[i]) i++;
    return i;
}

static void finish(core *c, rp_job *j, rp_job_finish why, rp_job_stats *st, const char *err) {
    pthread_mutex_lock(&c->mu);
    c->st.jobs++;
    c->st.prompt_tokens += (uint64_t)j->p.n;
    c->st.gen_tokens += (uint64_t)j->n_gen;
    c->st.reused_prefix += (uint64_t)st->n_prefix;
    c->st.reused_prefix_exact += (uint64_t)st->n_prefix_exact;
    c->st.reused_nonprefix += (uint64_t)st->n_nonprefix;
    c->st.recomputed += (uint64_t)st->n_recomputed;
    c->st.computed += (uint64_t)st->n_computed;
    c->st.prefill_s += st->prefill_ms * 1e-3;
    c->st.decode_s += st->decode_ms * 1e-3;
    c->running = NULL;
    pthread_mutex_unlock(&c->mu);
    rp_job_complete(j, why, st, err);
}

/* Caches the prompt's chunks (in its prefill's namespace). */
static void commit_prompt(core *c, rp_session *s) {
    if (rp_reuse_commit(c->e, rp_session_kv(s)) != RP_OK)
        fprintf(stderr, "reprise serve: caching a prompt failed: %s\n", rp_last_error());
}

static void run_job(core *c, rp_job *j) {
    rp_backend *b = c->b;
    const rp_model *m = b->m;
    rp_job_stats st;
    memset(&st, 0, sizeof st);
    st.n_prompt = j->p.n;
    rp_job_mark_started(j);
    if (atomic_load(&j->cancel)) {
        finish(c, j, RP_JOB_CANCELLED, &st, NULL);
        return;
    }
    struct rp_bk_session *cs = j->p.session;
    rp_status rs = RP_OK;
    char err[256] = "";
    rp_sampler *smp = NULL;
    rp_session *s = c->scratch;
    if (cs && !cs->s) {
        rp_session_params sp = rp_session_default_params();
        sp.n_ctx = b->n_ctx;
        sp.kv_type = b->cfg.kv_type;
        cs->hist = malloc(sizeof *cs->hist * (size_t)b->n_ctx);
        if (!cs->hist) rs = rp_errorf(RP_ERR_NOMEM, "server: out of memory for a session");
        else rs = rp_session_create(c->ctx, sp, &cs->s);
        if (rs != RP_OK) goto fail;
        cs->n_hist = 0;
    }
    if (cs) s = cs->s;
    int32_t common = cs ? common_prefix(cs->hist, cs->n_hist, j->toks, j->p.n) : 0;
    const int mode = j->p.reuse_mode >= 0 ? j->p.reuse_mode : b->cfg.reuse_mode;
    if (cs && mode == RP_REUSE_PREFIX && common > cs->n_exact) common = cs->n_exact;   /* prefix mode: exact KV only */
    if (common >= j->p.n) common = j->p.n - 1;   /* the last prompt token is run again for its logits */
    const bool via_engine = common == 0;
    const double t0 = rp_srv_now();
    if (via_engine) {
        const rp_reuse_opts o = rp_backend_reuse_opts(j);
        rp_reuse_stats rst;
        memset(&rst, 0, sizeof rst);
        rs = rp_reuse_prefill_opts(c->e, &o, c->ctx, rp_session_kv(s), j->toks, j->p.n, j->bounds, j->p.n_bounds,
                                   c->logits, &rst);
        if (rs == RP_OK) rs = rp_session_adopt(s, j->toks, j->p.n, c->logits);
        st.n_prefix = rst.n_prefix;
        st.n_prefix_exact = rst.n_prefix_exact;
        st.n_nonprefix = rst.n_nonprefix;
        st.n_recomputed = rst.n_recomputed;
        st.n_computed = j->p.n - rst.n_prefix - rst.n_nonprefix;
        if (cs) cs->n_exact = rst.n_exact_head;
    } else {
        rp_kv_truncate(rp_session_kv(s), common);
        rs = rp_session_feed(s, j->toks + common, j->p.n - common);
        st.n_prefix = common;
        st.n_prefix_exact = cs->n_exact < common ? cs->n_exact : common;
        st.n_computed = j->p.n - common;
        if (cs->n_exact >= common) cs->n_exact = j->p.n;   /* computed on exact KV: exact */
    }
    if (cs) {
        if (rs == RP_OK) {
            memcpy(cs->hist, j->toks, sizeof *cs->hist * (size_t)j->p.n);
            cs->n_hist = j->p.n;
        } else {
            cs->n_hist = cs->n_exact = 0;   /* the KV is in an unknown state: start over next time */
        }
        cs->waiting = false;
    }
    if (rs != RP_OK) goto fail;
    const double t1 = rp_srv_now();
    st.prefill_ms = (t1 - t0) * 1e3;

    rp_sampler_params spp = j->p.sampler;
    if ((rs = rp_sampler_create(spp, m->hp.n_vocab, &smp)) != RP_OK) goto fail;
    for (int32_t i = j->p.n - spp.repeat_last_n > 0 ? j->p.n - spp.repeat_last_n : 0; i < j->p.n; i++)
        rp_sampler_accept(smp, j->toks[i]);
    rp_json_prefix jp;
    rp_jsonp_init(&jp);
    const bool cj = j->p.constrain_json;
    if (cj && (rs = build_pieces(c)) != RP_OK) goto fail;
    rp_job_finish why = RP_JOB_LENGTH;
    bool committed = !via_engine || !j->p.persist;
    for (int32_t n_gen = 0;;) {
        if (n_gen >= j->p.max_tokens) { why = RP_JOB_LENGTH; break; }
        if (atomic_load(&j->cancel)) { why = RP_JOB_CANCELLED; break; }
        const float *lg = rp_session_logits(s);
        if (cj) lg = constrain(c, &jp, lg);
        rp_token t = rp_sampler_sample(smp, lg);
        rp_sampler_accept(smp, t);
        n_gen++;
        if (!committed) {   /* cache the prompt's chunks after the first token, off the TTFT path */
            commit_prompt(c, s);
            committed = true;
        }
        bool more = rp_job_push(j, t);
        const bool eog = rp_tokenizer_is_eog(m->tok, t);
        bool bad = false;
        if (cj && !eog) {
            const int32_t a = c->piece_off[t], z = c->piece_off[t + 1];
            bad = !rp_jsonp_feed(&jp, c->pieces + a, (size_t)(z - a));   /* only when nothing was allowed */
        }
        const bool json_done = cj && !bad && rp_jsonp_done(&jp);
        const bool cont = !eog && !json_done && !bad && more && n_gen < j->p.max_tokens;
        /* the sampled token joins the KV to continue; a session keeps its whole reply resident for the next turn */
        if ((cont || cs) && rp_session_n_past(s) < b->n_ctx) {
            if ((rs = rp_session_feed(s, &t, 1)) != RP_OK) goto fail;
            if (cs) {
                if (cs->n_exact == cs->n_hist) cs->n_exact++;
                cs->hist[cs->n_hist++] = t;
            }
        } else if (cont) {
            why = RP_JOB_CTX;
            break;
        }
        if (!cont) {
            why = eog ? RP_JOB_EOG : json_done ? RP_JOB_JSON_DONE : !more ? RP_JOB_CANCELLED : RP_JOB_LENGTH;
            break;
        }
    }
    st.decode_ms = (rp_srv_now() - t1) * 1e3;
    if (!committed) commit_prompt(c, s);
    rp_sampler_free(smp);
    finish(c, j, why, &st, why == RP_JOB_ERROR ? err : NULL);
    return;
fail:
    snprintf(err, sizeof err, "%s: %s", rp_strerror(rs), rp_last_error());
    if (cs) cs->n_hist = cs->n_exact = 0;
    rp_sampler_free(smp);
    finish(c, j, RP_JOB_ERROR, &st, err);
}

static void *worker(void *arg) {
    core *c = arg;
    for (;;) {
        pthread_mutex_lock(&c->mu);
        while (!c->head && !c->stop) pthread_cond_wait(&c->cv, &c->mu);
        if (c->stop) {
            pthread_mutex_unlock(&c->mu);
            break;
        }
        rp_job *j = c->head;
        c->head = j->next;
        if (!c->head) c->tail = NULL;
        c->n_queued--;
        j->next = NULL;
        c->running = j;
        pthread_mutex_unlock(&c->mu);
        run_job(c, j);
    }
    return NULL;
}

/* ------------------------------------------------------------ ops */

static rp_status core_start(rp_backend *b) {
    core *c = calloc(1, sizeof *c);
    if (!c) return rp_errorf(RP_ERR_NOMEM, "server: out of memory");
    c->b = b;
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    b->impl = c;
    const rp_model *m = b->m;
    rp_ctx_params cp = rp_ctx_default_params();
    cp.n_threads = b->cfg.n_threads;
    cp.n_outputs = 1;
    cp.n_ctx_max = b->n_ctx;
    rp_status st = rp_ctx_create(m, cp, &c->ctx);
    rp_session_params sp = rp_session_default_params();
    sp.n_ctx = b->n_ctx;
    sp.kv_type = b->cfg.kv_type;
    if (st == RP_OK) st = rp_session_create(c->ctx, sp, &c->scratch);
    if (st == RP_OK) st = rp_backend_reuse_open(b, &c->e);
    c->logits = malloc(sizeof(float) * (size_t)m->hp.n_vocab);
    c->masked = malloc(sizeof(float) * (size_t)m->hp.n_vocab);
    if (st == RP_OK && (!c->logits || !c->masked)) st = rp_errorf(RP_ERR_NOMEM, "server: out of memory");
    if (st == RP_OK) {
        if (pthread_create(&c->th, NULL, worker, c) != 0) st = rp_errorf(RP_ERR_INTERNAL, "server: cannot start the worker");
        else c->th_started = true;
    }
    if (st != RP_OK) {
        rp_backend_core_ops.stop(b);
        return st;
    }
    return RP_OK;
}

static void core_stop(rp_backend *b) {
    core *c = b->impl;
    if (!c) return;
    pthread_mutex_lock(&c->mu);
    c->stop = true;
    if (c->running) atomic_store(&c->running->cancel, true);
    rp_job *q = c->head;
    c->head = c->tail = NULL;
    c->n_queued = 0;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    if (c->th_started) pthread_join(c->th, NULL);
    for (rp_job *j = q, *nx; j; j = nx) {
        nx = j->next;
        rp_job_complete(j, RP_JOB_CANCELLED, NULL, NULL);
    }
    rp_backend_reuse_close(c->e);
    rp_session_free(c->scratch);
    rp_ctx_free(c->ctx);
    free(c->logits);
    free(c->masked);
    free(c->pieces);
    free(c->piece_off);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
    free(c);
    b->impl = NULL;
}

static rp_status core_submit(rp_backend *b, rp_job *j) {
    core *c = b->impl;
    pthread_mutex_lock(&c->mu);
    if (c->stop || c->n_queued >= b->cfg.queue_max + (c->running ? 0 : 1)) {
        const int32_t waiting = c->n_queued;
        pthread_mutex_unlock(&c->mu);
        return rp_errorf(RP_ERR_FULL, "server: the queue is full (%d waiting)", waiting);
    }
    if (c->tail) c->tail->next = j;
    else c->head = j;
    c->tail = j;
    c->n_queued++;
    pthread_cond_signal(&c->cv);
    pthread_mutex_unlock(&c->mu);
    return RP_OK;
}

static void core_cancel(rp_backend *b, rp_job *j) {
    core *c = b->impl;
    pthread_mutex_lock(&c->mu);
    rp_job **pp = &c->head, *prev = NULL;
    bool found = false;
    while (*pp) {
        if (*pp == j) {
            *pp = j->next;
            if (c->tail == j) c->tail = prev;
            c->n_queued--;
            found = true;
            break;
        }
        prev = *pp;
        pp = &(*pp)->next;
    }
    pthread_mutex_unlock(&c->mu);
    if (found) {
        j->next = NULL;
        rp_job_complete(j, RP_JOB_CANCELLED, NULL, NULL);
    }
}

static rp_status core_session_create(rp_backend *b, rp_bk_session **out) {
    core *c = b->impl;
    *out = calloc(1, sizeof **out);
    if (!*out) return rp_errorf(RP_ERR_NOMEM, "server: out of memory");
    pthread_mutex_lock(&c->mu);
    c->n_sessions++;
    pthread_mutex_unlock(&c->mu);
    return RP_OK;
}

static void core_session_free(rp_backend *b, rp_bk_session *s) {
    core *c = b->impl;
    rp_session_free(s->s);
    free(s->hist);
    free(s);
    pthread_mutex_lock(&c->mu);
    c->n_sessions--;
    pthread_mutex_unlock(&c->mu);
}

static void core_session_suspend(rp_backend *b, rp_bk_session *s) { s->waiting = true; }
static int32_t core_session_resident(rp_backend *b, rp_bk_session *s) { return s->n_hist; }

static void core_stats(rp_backend *b, rp_backend_stats *out) {
    core *c = b->impl;
    pthread_mutex_lock(&c->mu);
    *out = c->st;
    out->queued = c->n_queued;
    out->running = c->running ? 1 : 0;
    out->sessions = c->n_sessions;
    pthread_mutex_unlock(&c->mu);
    rp_backend_reuse_snapshot(c->e, out);   /* the cache's figures now (thread-safe), not as of the last job */
}

static rp_status core_flush(rp_backend *b) {
    core *c = b->impl;
    return rp_backend_reuse_flush(c->e);
}

const rp_backend_ops rp_backend_core_ops = {
    .kind = "core",
    .start = core_start,
    .stop = core_stop,
    .submit = core_submit,
    .cancel = core_cancel,
    .session_create = core_session_create,
    .session_free = core_session_free,
    .session_suspend = core_session_suspend,
    .session_resident = core_session_resident,
    .stats = core_stats,
    .flush = core_flush,
};
