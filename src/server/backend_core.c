/* backend_core.c — the serial backend: one job at a time on a worker thread over the public engine (rp_engine /
 * rp_seq: reuse, chunk cache, store), bounded FIFO. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "server/backend_internal.h"

struct rp_bk_session {
    rp_seq *seq;          /* created on the worker at the session's first job; its tokens are the KV's */
    bool waiting;         /* the last turn ended in a tool call */
    rp_bk_session *next;  /* freed sessions waiting for the worker (core.dead) */
};

typedef struct core {
    rp_backend *b;
    rp_engine *e;
    rp_seq *scratch;              /* the sequence of one-off jobs */
    rp_seq *fork;                 /* n > 1: each choice generates on a fork of scratch's prompt (made on first use) */
    rp_prompt *prompt;            /* the running job's prompt (worker) */

    pthread_t th;
    bool th_started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    rp_job *head, *tail;          /* queue (mu) */
    int32_t n_queued;
    rp_job *running;              /* (mu) */
    rp_job *running_forks[RP_BACKEND_MAX_N];   /* its other choices not finished yet (NULL once finished) (mu) */
    int32_t n_running_forks;
    rp_bk_session *dead;          /* freed sessions: the worker frees their sequences, as the engine's thread (mu) */
    bool stop;

    rp_backend_stats st;          /* counters (mu) */
    int32_t n_sessions;
} core;

/* A job's generation: how the job's token callback ended it. */
typedef struct run_state {
    rp_job *j;
    bool gone;   /* the job was cancelled (or its buffer is full) */
} run_state;

/* rp_token_fn: hands each token to the consumer. */
static bool on_token(void *user, rp_token t, const char *text, size_t len) {
    run_state *r = user;
    (void)text;
    (void)len;
    if (t < 0) return true;   /* the end's flush of held text: the consumer detokenizes itself */
    r->gone = !rp_job_push(r->j, t);
    return !r->gone;
}

/* ------------------------------------------------------------ running a job */

static int32_t common_prefix(const rp_token *a, int32_t na, const rp_token *b, int32_t nb) {
    int32_t n = na < nb ? na : nb, i = 0;
    while (i < n && a[i] == b[i]) i++;
    return i;
}

/* Ends a job. A fork (another choice of an n > 1 request) counts no prompt: its job's leader prefilled it. The
 * leader ends last (the running job, whose forks a stop cancels, until then). */
static void finish(core *c, rp_job *j, rp_job_finish why, rp_job_stats *st, const char *err) {
    pthread_mutex_lock(&c->mu);
    c->st.jobs++;
    c->st.gen_tokens += (uint64_t)j->n_gen;
    if (j->is_fork) {   /* off the list a stop cancels: it may be freed once completed */
        for (int32_t i = 0; i < c->n_running_forks; i++)
            if (c->running_forks[i] == j) c->running_forks[i] = NULL;
    } else {
        c->n_running_forks = 0;
        c->st.prompt_tokens += (uint64_t)j->p.n;
        c->st.reused_prefix += (uint64_t)st->n_prefix;
        c->st.reused_prefix_exact += (uint64_t)st->n_prefix_exact;
        c->st.reused_nonprefix += (uint64_t)st->n_nonprefix;
        c->st.recomputed += (uint64_t)st->n_recomputed;
        c->st.computed += (uint64_t)st->n_computed;
        c->st.prefill_s += st->prefill_ms * 1e-3;
        c->running = NULL;
    }
    c->st.decode_s += st->decode_ms * 1e-3;
    pthread_mutex_unlock(&c->mu);
    rp_job_complete(j, why, st, err);
}

/* A job that never ran (dropped from the queue, cancelled before its prefill), with the other choices it holds. */
static void complete_cancelled(rp_job *j) {
    for (int32_t i = 0; i < j->n_forks; i++) rp_job_complete(j->forks[i], RP_JOB_CANCELLED, NULL, NULL);
    rp_job_complete(j, RP_JOB_CANCELLED, NULL, NULL);
}

static rp_job_finish finish_of(const run_state *r, rp_stop_reason stop) {
    switch (stop) {
    case RP_STOP_EOG: return RP_JOB_EOG;
    case RP_STOP_CONTEXT: return RP_JOB_CTX;
    case RP_STOP_CANCELLED: return r->gone ? RP_JOB_CANCELLED : RP_JOB_LENGTH;
    default: return RP_JOB_LENGTH;
    }
}

/* Generates job j's reply on s (prefilled or continued with its prompt); *why: how it ended. */
static rp_status generate(core *c, rp_job *j, rp_seq *s, struct rp_bk_session *cs, rp_job_finish *why) {
    rp_backend *b = c->b;
    rp_grammar_state *gst = j->gstate;   /* the job's grammar position, when it has one */
    run_state r = {.j = j, .gone = false};
    rp_gen_opts o = rp_gen_default_opts();
    o.sampling = j->p.sampler;
    o.max_tokens = j->p.max_tokens;
    o.reseed = true;   /* every request samples from its own seed, on a continued session too */
    o.on_token = on_token;
    o.user = &r;
    if (j->p.logprobs) {   /* each token's log-probabilities, stored by its push */
        o.on_chosen = rp_job_on_chosen;
        o.chosen_user = j;
    }
    j->ban_eog = j->p.ignore_eos;   /* end-of-generation tokens never sampled (not o.ignore_eos: that samples them) */
    if (gst || j->ban_eog) {
        o.on_logits = rp_job_on_logits;   /* the grammar state follows the history the hook is given */
        o.logits_user = j;
    }
    *why = RP_JOB_LENGTH;
    if (atomic_load(&j->cancel)) {
        *why = RP_JOB_CANCELLED;
    } else if (j->p.max_tokens > 0) {
        rp_gen_stats gs;
        RP_TRY(rp_seq_generate(s, &o, NULL, 0, NULL, &gs));
        if (gs.commit_status != RP_OK) fprintf(stderr, "reprise serve: caching a prompt failed: %s\n", rp_last_error());
        *why = finish_of(&r, gs.stop);
        if (gs.stop == RP_STOP_EOG) {
            /* the end-of-generation token goes to the consumer, and a session keeps its whole reply resident
             * for the next turn (the chat template renders it after the reply) */
            rp_job_push(j, gs.last_token);
            if (cs && rp_seq_n_past(s) < b->n_ctx) RP_TRY(rp_seq_feed(s, &gs.last_token, 1));
        }
    }
    return RP_OK;
}

static void run_job(core *c, rp_job *j) {
    rp_backend *b = c->b;
    rp_job_stats st;
    memset(&st, 0, sizeof st);
    st.n_prompt = j->p.n;
    /* the other choices of an n > 1 request (the pointers copied: j's array goes with j) */
    rp_job *forks[RP_BACKEND_MAX_N];
    const int32_t n_forks = j->n_forks < RP_BACKEND_MAX_N ? j->n_forks : RP_BACKEND_MAX_N - 1;
    int32_t forks_done = 0;
    for (int32_t i = 0; i < n_forks; i++) forks[i] = j->forks[i];
    pthread_mutex_lock(&c->mu);
    for (int32_t i = 0; i < n_forks; i++) c->running_forks[i] = forks[i];
    c->n_running_forks = n_forks;
    pthread_mutex_unlock(&c->mu);
    rp_job_mark_started(j);
    for (int32_t i = 0; i < n_forks; i++) rp_job_mark_started(forks[i]);
    if (atomic_load(&j->cancel)) {   /* before the prefill: the request is gone, every choice with it */
        for (int32_t i = 0; i < n_forks; i++) finish(c, forks[i], RP_JOB_CANCELLED, &(rp_job_stats){0}, NULL);
        finish(c, j, RP_JOB_CANCELLED, &st, NULL);
        return;
    }
    struct rp_bk_session *cs = j->p.session;
    rp_status rs = RP_OK;
    char err[256] = "";
    if (cs && !cs->seq && (rs = rp_seq_create(c->e, &cs->seq)) != RP_OK) goto fail;
    if (n_forks > 0 && !c->fork && (rs = rp_seq_create(c->e, &c->fork)) != RP_OK) goto fail;
    rp_seq *s = cs ? cs->seq : c->scratch;
    const int32_t n_hist = cs ? rp_seq_n_past(s) : 0, n_exact = cs ? rp_seq_n_exact(s) : 0;
    int32_t common = cs ? common_prefix(rp_seq_tokens(s), n_hist, j->toks, j->p.n) : 0;
    const int mode = j->p.reuse_mode >= 0 ? j->p.reuse_mode : b->cfg.reuse_mode;
    if (cs && mode == RP_REUSE_PREFIX && common > n_exact) common = n_exact;   /* prefix mode: exact KV only */
    if (common >= j->p.n) common = j->p.n - 1;   /* the last prompt token is run again for its logits */
    rp_gen_opts o = rp_gen_default_opts();
    o.reuse = j->p.reuse_mode;        /* -1: the engine's (the server's --reuse) */
    o.recompute_ratio = j->p.recompute_ratio;
    o.cache_namespace = j->p.cache_ns;   /* the request's API key's namespace (0: shared) */
    o.persist = j->p.persist;
    const double t0 = rp_srv_now();
    if (common == 0) {   /* through the reuse engine */
        rp_gen_stats ps;
        memset(&ps, 0, sizeof ps);
        rs = rp_job_prompt(j, c->prompt);
        if (rs == RP_OK) rs = rp_seq_prefill(s, c->prompt, &o, &ps);
        st.n_prefix = ps.reused_prefix;
        st.n_prefix_exact = ps.reused_prefix_exact;
        st.n_nonprefix = ps.reused_nonprefix;
        st.n_recomputed = ps.recomputed;
        st.n_computed = j->p.n - ps.reused_prefix - ps.reused_nonprefix;
    } else {   /* a session continued from the common prefix of its tokens and the prompt */
        rs = rp_seq_truncate(s, common);
        if (rs == RP_OK) rs = rp_seq_feed(s, j->toks + common, j->p.n - common);
        st.n_prefix = common;
        st.n_prefix_exact = n_exact < common ? n_exact : common;
        st.n_computed = j->p.n - common;
    }
    if (cs) cs->waiting = false;
    if (rs != RP_OK) goto fail;
    double t1 = rp_srv_now();
    st.prefill_ms = (t1 - t0) * 1e3;
    rp_job_finish why = RP_JOB_LENGTH;
    if (n_forks == 0) {
        if ((rs = generate(c, j, s, cs, &why)) != RP_OK) goto fail;
    } else {
        /* n choices, one after another, each on a fork of the prefilled prompt (its KV copied): the prompt is
         * computed once, and s keeps it for its commit */
        if ((rs = rp_seq_fork(c->fork, s)) != RP_OK || (rs = generate(c, j, c->fork, NULL, &why)) != RP_OK) goto fail;
        for (; forks_done < n_forks; forks_done++) {
            rp_job *f = forks[forks_done];
            rp_job_stats fs;
            memset(&fs, 0, sizeof fs);
            const double tf = rp_srv_now();
            rp_job_finish fwhy = RP_JOB_LENGTH;
            if ((rs = rp_seq_fork(c->fork, s)) != RP_OK || (rs = generate(c, f, c->fork, NULL, &fwhy)) != RP_OK)
                goto fail;
            fs.decode_ms = (rp_srv_now() - tf) * 1e3;
            finish(c, f, fwhy, &fs, NULL);
        }
    }
    st.decode_ms = (rp_srv_now() - t1) * 1e3;
    if (rp_seq_commit(s) != RP_OK)   /* nothing generated: the prompt's chunks are cached now */
        fprintf(stderr, "reprise serve: caching a prompt failed: %s\n", rp_last_error());
    finish(c, j, why, &st, NULL);
    return;
fail:
    snprintf(err, sizeof err, "%s: %s", rp_strerror(rs), rp_last_error());
    if (cs && cs->seq) rp_seq_reset(cs->seq);   /* the KV is in an unknown state: start over next time */
    for (; forks_done < n_forks; forks_done++) finish(c, forks[forks_done], RP_JOB_ERROR, &(rp_job_stats){0}, err);
    finish(c, j, RP_JOB_ERROR, &st, err);
}

/* Frees the sequences of freed sessions (the engine's thread: the worker, or the stop after it). */
static void bury(core *c) {
    pthread_mutex_lock(&c->mu);
    rp_bk_session *d = c->dead;
    c->dead = NULL;
    pthread_mutex_unlock(&c->mu);
    for (rp_bk_session *nx; d; d = nx) {
        nx = d->next;
        rp_seq_free(d->seq);
        free(d);
    }
}

static void *worker(void *arg) {
    core *c = arg;
    for (;;) {
        pthread_mutex_lock(&c->mu);
        while (!c->head && !c->stop && !c->dead) pthread_cond_wait(&c->cv, &c->mu);
        if (c->stop) {
            pthread_mutex_unlock(&c->mu);
            break;
        }
        if (!c->head) {
            pthread_mutex_unlock(&c->mu);
            bury(c);
            continue;
        }
        rp_job *j = c->head;
        c->head = j->next;
        if (!c->head) c->tail = NULL;
        c->n_queued--;
        j->next = NULL;
        c->running = j;
        pthread_mutex_unlock(&c->mu);
        bury(c);
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
    rp_status st = rp_backend_engine_open(b, &c->e);
    if (st == RP_OK) st = rp_seq_create(c->e, &c->scratch);
    if (st == RP_OK) st = rp_prompt_create(&c->prompt);
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
    if (c->running) {
        atomic_store(&c->running->cancel, true);
        for (int32_t i = 0; i < c->n_running_forks; i++)
            if (c->running_forks[i]) atomic_store(&c->running_forks[i]->cancel, true);
    }
    rp_job *q = c->head;
    c->head = c->tail = NULL;
    c->n_queued = 0;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    if (c->th_started) pthread_join(c->th, NULL);
    for (rp_job *j = q, *nx; j; j = nx) {
        nx = j->next;
        complete_cancelled(j);
    }
    bury(c);
    rp_seq_free(c->fork);
    rp_seq_free(c->scratch);
    rp_prompt_free(c->prompt);
    rp_backend_engine_close(c->e);   /* after every sequence of it: the sessions' went with the session table */
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
        complete_cancelled(j);
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

/* No job of the session runs (the session table ensures it); its sequence is freed by the worker, the engine's
 * thread (an engine's calls are serialized), before the next job. */
static void core_session_free(rp_backend *b, rp_bk_session *s) {
    core *c = b->impl;
    pthread_mutex_lock(&c->mu);
    c->n_sessions--;
    s->next = c->dead;
    c->dead = s;
    pthread_cond_signal(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

static void core_session_suspend(rp_backend *b, rp_bk_session *s) { s->waiting = true; }
static int32_t core_session_resident(rp_backend *b, rp_bk_session *s) { return s->seq ? rp_seq_n_past(s->seq) : 0; }

static void core_stats(rp_backend *b, rp_backend_stats *out) {
    core *c = b->impl;
    pthread_mutex_lock(&c->mu);
    *out = c->st;
    out->queued = c->n_queued;
    out->running = c->running ? 1 : 0;
    out->sessions = c->n_sessions;
    pthread_mutex_unlock(&c->mu);
    rp_backend_engine_snapshot(c->e, out);   /* the cache's figures now (thread-safe), not as of the last job */
}

static rp_status core_flush(rp_backend *b) {
    core *c = b->impl;
    return c->e ? rp_engine_flush(c->e) : RP_OK;
}

const rp_backend_ops rp_backend_core_ops = {
    .kind = "core",
    .start = core_start,
    .stop = core_stop,
    .submit = core_submit,
    .submit_n = core_submit,   /* the job holds its forks: run_job generates them after its prefill */
    .cancel = core_cancel,
    .session_create = core_session_create,
    .session_free = core_session_free,
    .session_suspend = core_session_suspend,
    .session_resident = core_session_resident,
    .stats = core_stats,
    .flush = core_flush,
};
