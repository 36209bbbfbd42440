/* backend_sched.c — the batching backend: jobs run as scheduler sessions (continuous batching, speculation, suspend/resume). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/error.h"
#include "model/forward.h"
#include "sched/sched.h"
#include "server/backend_internal.h"

struct rp_bk_session {
    rp_sched_id id;
    bool waiting;          /* suspended after a tool call (WAITING in the scheduler) */
    int32_t resident;      /* history length after its last job */
    int32_t exact;         /* its KV is exact up to here (INT32_MAX: all of it), see rp_job.exact_head */
};

/* A finished one-off job's sequence kept for the next one (see sched_be.kept). */
typedef struct kept_seq {
    rp_sched_id id;
    int32_t exact;                 /* its exact head (rp_job.exact_head) */
    uint64_t ns;                   /* the cache namespace of the job that left it: continued only by the same */
} kept_seq;

typedef struct sched_be {
    rp_backend *b;
    rp_sched *s;
    pthread_t th;
    bool th_started;
    pthread_mutex_t mu;
    rp_job **active;               /* [cap_active] jobs submitted to the scheduler (mu) */
    int32_t n_active, cap_active;
    rp_job *pend_head, *pend_tail; /* one-off jobs waiting for a sequence: they hold no KV yet (mu) */
    int32_t n_pending;
    int32_t n_oneoff;              /* one-off jobs holding a scheduler session (<= parallel) */
    rp_token *scratch;             /* [n_ctx] session history for prefix matching (mu) */
    _Atomic bool stop;
    rp_backend_stats st;           /* (mu) */
    rp_sched_stats ss;             /* snapshot taken by the loop between steps (mu): reading the
                                      scheduler's stats during a step would race with its forward */
    int32_t n_sessions, n_waiting;
    /* Finished one-off jobs leave their sequence here, KV and history intact
     * (llama-server's slot prompt cache): the next one-off job continues the
     * one sharing the longest prefix with its prompt and computes only the
     * rest. Oldest first; at most `parallel`; freed when sequences run out. (mu) */
    kept_seq *kept;
    int32_t n_kept, cap_kept;
    /* Cross-request reuse (prefix and non-prefix chunks, blend): a one-off
     * job that continues no kept sequence, or a session's first turn, gets
     * its prompt's KV up to its last reusable chunk from the reuse engine on
     * the loop thread, between steps (rp_sched_submit_filled); the batch
     * computes the rest and the prompt is cached after the turn. The
     * engine's cache (RAM pool, and the flash store with --cache-dir) is
     * shared with nothing else. NULL with --reuse none. */
    rp_reuse *e;                   /* loop thread only (after start) */
    rp_ctx *ectx;                  /* the engine's forward context */
    float *elogits;                /* [n_vocab] the engine's last-token logits (unused: the batch recomputes them) */
    int32_t *ebounds;              /* [n_ctx] the caller's boundaries passed to the engine */
    rp_job **fillq;                /* [cap_active] jobs waiting for their fill (mu) */
    int32_t n_fill;
} sched_be;

static void dispatch_pending(sched_be *x);

/* Per-token callback: runs on the loop thread under the scheduler mutex. */
static bool on_token(void *user, rp_sched_id id, rp_token tok) {
    rp_job *j = user;
    return rp_job_push(j, tok);
}

static rp_job_finish map_finish(rp_finish_reason r) {
    switch (r) {
    case RP_FINISH_EOG:
    case RP_FINISH_STOP:
    case RP_FINISH_TOOL_CALL: return RP_JOB_EOG;
    case RP_FINISH_LENGTH: return RP_JOB_LENGTH;
    case RP_FINISH_CTX: return RP_JOB_CTX;
    case RP_FINISH_CANCELLED: return RP_JOB_CANCELLED;
    default: return RP_JOB_ERROR;
    }
}

static void unkeep(sched_be *x, int32_t i) {
    memmove(x->kept + i, x->kept + i + 1, sizeof *x->kept * (size_t)(x->n_kept - i - 1));
    x->n_kept--;
}

/* A finished one-off job's sequence: kept for prefix reuse by jobs of its
 * cache namespace (the oldest kept one is freed when the list is full), or
 * freed (mu held). */
static void keep_or_free(sched_be *x, rp_sched_id id, bool keep, int32_t exact, uint64_t ns) {
    if (!keep || x->cap_kept == 0) {
        rp_sched_session_free(x->s, id);
        return;
    }
    if (x->n_kept == x->cap_kept) {
        rp_sched_session_free(x->s, x->kept[0].id);
        unkeep(x, 0);
    }
    x->kept[x->n_kept++] = (kept_seq){.id = id, .exact = exact, .ns = ns};
}

/* The kept sequence of namespace `ns` sharing the longest prefix (>= 1
 * token) with toks, or -1; *common gets that length (mu held). Another
 * namespace's sequence is never continued: its KV would be reported as
 * cached, telling a client what another one sent. */
static int32_t best_kept(sched_be *x, const rp_token *toks, int32_t n, uint64_t ns, int32_t *common) {
    int32_t best = -1, best_len = 0;
    for (int32_t i = 0; i < x->n_kept; i++) {
        int32_t have = 0;
        if (x->kept[i].ns != ns) continue;
        if (rp_sched_session_tokens(x->s, x->kept[i].id, 0, x->scratch, x->b->n_ctx, &have) != RP_OK) continue;
        int32_t lim = have < n ? have : n, c = 0;
        while (c < lim && x->scratch[c] == toks[c]) c++;
        if (c > best_len) {
            best_len = c;
            best = i;
        }
    }
    *common = best_len;
    return best;
}

/* The scheduler's params for a job's turn. */
static rp_gen_params job_gen_params(rp_job *j) {
    rp_gen_params gp = rp_gen_default_params();
    gp.sampler = j->p.sampler;
    gp.max_tokens = j->p.max_tokens;
    gp.stop_at_eog = true;
    gp.suspend_on_tool_call = j->p.session != NULL;
    gp.on_token = on_token;
    gp.user = j;
    return gp;
}

/* The job's reuse mode: its reprise_cache.mode, else the server's --reuse. */
static int job_mode(const sched_be *x, const rp_job *j) {
    return j->p.reuse_mode >= 0 ? j->p.reuse_mode : x->b->cfg.reuse_mode;
}

/* Whether a job's fresh sequence is filled by the reuse engine (mu held). */
static bool wants_fill(const sched_be *x, const rp_job *j) {
    return x->e && j->p.n >= 2 && job_mode(x, j) != RP_REUSE_NONE;
}

typedef struct fill_arg {
    sched_be *x;
    rp_job *j;
    rp_reuse_stats rst;
    bool ran;
} fill_arg;

/* rp_sched_fill_fn, on the loop thread with no lock held. The reuse engine
 * fills the prompt up to its last reusable token (prefix chunks exact,
 * chunks cached elsewhere re-rotated with selective recompute, blend by
 * default) and caches those chunks; the new tokens after it are left to the
 * batch, which computes them in chunks beside the other sequences instead of
 * holding them up, and are cached after the turn (commit_after). A prompt
 * with nothing to reuse is not filled at all. */
static rp_status fill_with_engine(void *user, rp_kv *kv, const rp_token *toks, int32_t n) {
    fill_arg *a = user;
    sched_be *x = a->x;
    rp_job *j = a->j;
    const rp_reuse_opts o = rp_backend_reuse_opts(j);
    int32_t nb = 0;   /* the caller's boundaries inside the prompt (document and message starts) */
    for (int32_t i = 0; i < j->p.n_bounds; i++)
        if (j->bounds[i] > 0 && j->bounds[i] < n) x->ebounds[nb++] = j->bounds[i];
    rp_reuse_analysis an;
    rp_status st = rp_reuse_analyze_opts(x->e, &o, toks, n, x->ebounds, nb, &an);
    int32_t end = n;   /* analysis failed: fill everything, as the engine would */
    if (st == RP_OK) {
        end = an.n_prefix;
        for (int32_t t = n - 1; t >= an.n_prefix; t--)
            if (an.tok_kind[t] == RP_ROW_REUSE) {
                end = t + 1;
                break;
            }
        /* up to the end of its chunk: the engine then splits [0, end) into the
         * same chunks as the whole prompt, so it finds (and caches) the same ones */
        for (int32_t i = 0; end > 0 && i < an.n_spans; i++)
            if (an.spans[i].begin < end && end < an.spans[i].begin + an.spans[i].len) {
                end = an.spans[i].begin + an.spans[i].len;
                break;
            }
    }
    j->commit_after = j->p.persist && end < n;
    memset(&a->rst, 0, sizeof a->rst);
    st = RP_OK;
    if (end > 0) {
        int32_t nbe = 0;
        for (int32_t i = 0; i < nb; i++)
            if (x->ebounds[i] < end) nbe++;
        st = rp_reuse_prefill_opts(x->e, &o, x->ectx, kv, toks, end, x->ebounds, nbe, x->elogits, &a->rst);
        a->ran = st == RP_OK;
        /* cached now, while the KV holds exactly the filled tokens: the engine keeps only its last prompt */
        if (st == RP_OK && j->p.persist && rp_reuse_commit(x->e, kv) != RP_OK)
            fprintf(stderr, "reprise serve: caching a prompt failed: %s\n", rp_last_error());
        if (st != RP_OK)
            fprintf(stderr, "reprise serve: reuse prefill failed (the batch computes the prompt): %s\n", rp_last_error());
    }
    /* what the batch computes after the fill is exact only on exact KV: every
     * filled token exact (an approximate prefix chunk counts, not only blend) */
    j->commit_exact = st == RP_OK && (end == 0 || a->rst.n_exact_head >= end);
    j->exact_head = j->commit_exact ? INT32_MAX : a->rst.n_exact_head;
    if (st != RP_OK) {   /* the scheduler discards the fill: the batch computes everything, cached after */
        j->commit_after = j->p.persist;
        j->commit_exact = true;
        j->exact_head = INT32_MAX;
    }
    return st;
}

typedef struct commit_arg {
    sched_be *x;
    rp_job *j;
} commit_arg;

/* rp_sched_kv_fn: caches the chunks of a finished turn's prompt (loop thread). */
static rp_status commit_prompt(void *user, const rp_kv *kv, const rp_token *toks, int32_t n) {
    commit_arg *c = user;
    rp_job *j = c->j;
    /* a turn cancelled before its prompt was computed has nothing to cache */
    if (n < j->p.n || kv->n < j->p.n || memcmp(toks, j->toks, sizeof *toks * (size_t)j->p.n) != 0) return RP_OK;
    const rp_reuse_opts o = rp_backend_reuse_opts(j);
    const rp_status st =
        rp_reuse_commit_computed_opts(c->x->e, &o, kv, j->toks, j->p.n, j->bounds, j->p.n_bounds, j->commit_exact);
    if (st != RP_OK) fprintf(stderr, "reprise serve: caching a prompt failed: %s\n", rp_last_error());
    return st;
}

/* Runs the oldest queued fill and hands its job to the scheduler: one per
 * loop iteration, so the batch's sequences get a step between two fills.
 * Loop thread. */
static bool run_fill(sched_be *x) {
    pthread_mutex_lock(&x->mu);
    if (x->n_fill == 0) {
        pthread_mutex_unlock(&x->mu);
        return false;
    }
    rp_job *j = x->fillq[0];
    memmove(x->fillq, x->fillq + 1, sizeof *x->fillq * (size_t)(x->n_fill - 1));
    x->n_fill--;
    pthread_mutex_unlock(&x->mu);

    const rp_gen_params gp = job_gen_params(j);
    fill_arg a = {.x = x, .j = j};
    if (!j->started) rp_job_mark_started(j);   /* its prefill starts now: the fill is not queueing */
    int32_t k = 0;
    rp_status st = atomic_load(&j->cancel)
                       ? rp_errorf(RP_ERR_CANCELLED, "server: cancelled before its prefill")
                       : rp_sched_submit_filled(x->s, j->sched_id, j->toks, j->p.n, &gp, fill_with_engine, &a, &k);
    pthread_mutex_lock(&x->mu);
    if (st == RP_OK) {
        /* k == 0 when the fill failed (its KV was discarded): nothing was reused */
        /* at most the k cells kept (the batch ran the last token again) */
        j->st.n_prefix = a.ran && k > 0 ? (a.rst.n_prefix < k ? a.rst.n_prefix : k) : 0;
        j->st.n_prefix_exact = a.rst.n_prefix_exact < j->st.n_prefix ? a.rst.n_prefix_exact : j->st.n_prefix;
        if (!a.ran || k == 0) j->exact_head = INT32_MAX;   /* the batch computed everything */
        const int32_t room = k - j->st.n_prefix;
        j->st.n_nonprefix = a.ran && k > 0 ? (a.rst.n_nonprefix < room ? a.rst.n_nonprefix : room) : 0;
        j->st.n_recomputed = a.ran && k > 0 ? (a.rst.n_recomputed < j->st.n_nonprefix ? a.rst.n_recomputed : j->st.n_nonprefix) : 0;
        j->st.n_computed = j->p.n - j->st.n_prefix - j->st.n_nonprefix;
        x->st.reused_nonprefix += (uint64_t)j->st.n_nonprefix;
        x->st.recomputed += (uint64_t)j->st.n_recomputed;
        x->active[x->n_active++] = j;
    } else {
        const bool cancelled = st == RP_ERR_CANCELLED;
        char err[256];
        snprintf(err, sizeof err, "%s", rp_last_error());
        if (j->ephemeral) {
            rp_sched_session_free(x->s, j->sched_id);
            x->n_oneoff--;
            x->n_sessions--;
        }
        if (!j->started) rp_job_mark_started(j);
        rp_job_complete(j, cancelled ? RP_JOB_CANCELLED : RP_JOB_ERROR, NULL, cancelled ? NULL : err);
        dispatch_pending(x);
    }
    pthread_mutex_unlock(&x->mu);
    return true;
}

/* After a step: completes jobs whose turn ended. Called on the loop thread. */
static void reap(sched_be *x, double step_s, int32_t step_rows) {
    pthread_mutex_lock(&x->mu);
    for (int32_t i = 0; i < x->n_active;) {
        rp_job *j = x->active[i];
        rp_sched_session_info info;
        rp_status st = rp_sched_session_info_get(x->s, j->sched_id, &info);
        bool running = st == RP_OK && (info.state == RP_SESS_PREFILL || info.state == RP_SESS_DECODE);
        if (st == RP_OK && running) {
            if (info.last_role != RP_ROLE_NONE && !j->started) rp_job_mark_started(j);
            i++;
            continue;
        }
        x->active[i] = x->active[--x->n_active];
        rp_job_stats js = j->st;
        rp_job_finish why = st == RP_OK ? map_finish(info.finish) : RP_JOB_ERROR;
        if (st == RP_OK) {
            js.drafted = info.drafted;
            js.accepted = info.accepted;
        }
        if (!j->started) rp_job_mark_started(j);
        if (st == RP_OK && j->commit_after && x->e && why != RP_JOB_ERROR) {
            commit_arg ca = {.x = x, .j = j};
            (void)rp_sched_session_read_kv(x->s, j->sched_id, commit_prompt, &ca);   /* failures are logged */
        }
        x->st.jobs++;
        x->st.prompt_tokens += (uint64_t)j->p.n;
        x->st.gen_tokens += (uint64_t)j->n_gen;
        x->st.reused_prefix += (uint64_t)js.n_prefix;
        x->st.reused_prefix_exact += (uint64_t)js.n_prefix_exact;
        x->st.computed += (uint64_t)js.n_computed;
        if (j->ephemeral) {
            x->n_sessions--;
            x->n_oneoff--;
            keep_or_free(x, j->sched_id, st == RP_OK && why != RP_JOB_ERROR && info.state == RP_SESS_IDLE, j->exact_head,
                         j->p.cache_ns);
        } else if (st == RP_OK) {
            struct rp_bk_session *bs = j->p.session;
            bs->resident = info.n_tokens;
            bs->exact = j->exact_head;
            bs->waiting = info.state == RP_SESS_WAITING;
        }
        if (j->n_gen > 0) {
            /* started is noticed after a step: a prompt finished within it shows no queue/prefill split */
            js.prefill_ms = j->st.ttft_ms > j->st.queue_ms ? j->st.ttft_ms - j->st.queue_ms : 0;
            js.decode_ms = (rp_srv_now() - j->t_submit) * 1e3 - j->st.ttft_ms;
        }
        rp_job_complete(j, why, &js, st == RP_OK ? NULL : "the scheduler lost the session");
    }
    (void)step_s;
    (void)step_rows;
    dispatch_pending(x);
    pthread_mutex_unlock(&x->mu);
}

static void *loop(void *arg) {
    sched_be *x = arg;
    while (!atomic_load(&x->stop)) {
        if (x->e) (void)run_fill(x);
        rp_sched_step_info info;
        memset(&info, 0, sizeof info);
        rp_status st = rp_sched_step(x->s, &info);
        if (st != RP_OK) {
            /* the step's sessions were rolled back: end their jobs with the error */
            fprintf(stderr, "reprise serve: scheduler step failed: %s\n", rp_last_error());
            pthread_mutex_lock(&x->mu);
            for (int32_t i = 0; i < x->n_active; i++) rp_sched_cancel(x->s, x->active[i]->sched_id);
            pthread_mutex_unlock(&x->mu);
        }
        if (st == RP_OK && info.ran) {
            pthread_mutex_lock(&x->mu);
            double pre = info.n_rows > 0 ? info.t_target * info.n_prefill_rows / info.n_rows : 0;
            x->st.prefill_s += pre;
            x->st.decode_s += info.t_total - pre;
            x->st.drafted += (uint64_t)info.n_drafted;
            x->st.accepted += (uint64_t)info.n_accepted;
            pthread_mutex_unlock(&x->mu);
        }
        reap(x, info.t_total, info.n_rows);
        rp_sched_stats ss;
        rp_sched_stats_get(x->s, &ss);
        pthread_mutex_lock(&x->mu);
        x->ss = ss;
        pthread_mutex_unlock(&x->mu);
        pthread_mutex_lock(&x->mu);
        const bool fills = x->n_fill > 0;
        pthread_mutex_unlock(&x->mu);
        if (!fills && (st != RP_OK || info.idle || info.blocked)) rp_sched_wait_event(x->s, 0.02);
    }
    return NULL;
}

static rp_status sb_start(rp_backend *b) {
    sched_be *x = calloc(1, sizeof *x);
    if (!x) return rp_errorf(RP_ERR_NOMEM, "server: out of memory");
    x->b = b;
    pthread_mutex_init(&x->mu, NULL);
    b->impl = x;
    rp_sched_params p = rp_sched_default_params();
    /* one-off jobs hold a sequence only while running (at most `parallel`); sessions keep theirs */
    int32_t ms = 2 * b->cfg.parallel + b->cfg.max_sessions + 1;   /* + up to `parallel` kept sequences */
    p.max_sessions = ms > RP_SCHED_MAX_SESSIONS ? RP_SCHED_MAX_SESSIONS : ms;
    p.max_active = b->cfg.parallel;
    p.n_ctx = b->n_ctx;
    p.n_batch = 512 < b->cfg.parallel ? b->cfg.parallel : 512;
    p.kv_type = (rp_type)b->cfg.kv_type;
    p.n_threads = b->cfg.n_threads;
    p.kv_resident_limit = rp_sched_kv_limit_bytes(b->cfg.kv_limit_mb);
    if (!b->cfg.speculate) {
        p.policy = RP_POLICY_BATCH_AR;
        p.drafter = RP_DRAFTER_NONE;
    } else {
        p.policy = RP_POLICY_HAL_YIELD;
        p.drafter = b->dm ? RP_DRAFTER_MODEL : RP_DRAFTER_NGRAM;
    }
    x->cap_active = b->cfg.parallel + b->cfg.queue_max + b->cfg.max_sessions + 1;
    x->active = calloc((size_t)x->cap_active, sizeof *x->active);
    x->scratch = malloc(sizeof *x->scratch * (size_t)b->n_ctx);
    x->cap_kept = b->cfg.parallel;
    x->kept = calloc((size_t)(x->cap_kept > 0 ? x->cap_kept : 1), sizeof *x->kept);
    x->fillq = calloc((size_t)x->cap_active, sizeof *x->fillq);
    rp_status st = !x->active || !x->scratch || !x->kept || !x->fillq ? rp_errorf(RP_ERR_NOMEM, "server: out of memory")
                                                                     : RP_OK;
    if (st == RP_OK) st = rp_sched_create(b->m, b->dm, p, &x->s);
    if (st == RP_OK && b->cfg.reuse_mode != RP_REUSE_NONE) {
        rp_ctx_params cp = rp_ctx_default_params();
        cp.n_threads = b->cfg.n_threads;
        cp.n_outputs = 1;
        cp.n_ctx_max = b->n_ctx;
        st = rp_ctx_create(b->m, cp, &x->ectx);
        if (st == RP_OK) st = rp_backend_reuse_open(b, &x->e);
        x->elogits = malloc(sizeof(float) * (size_t)b->m->hp.n_vocab);
        x->ebounds = malloc(sizeof(int32_t) * (size_t)b->n_ctx);
        if (st == RP_OK && (!x->elogits || !x->ebounds)) st = rp_errorf(RP_ERR_NOMEM, "server: out of memory");
    }
    atomic_init(&x->stop, false);
    if (st == RP_OK) {
        if (pthread_create(&x->th, NULL, loop, x) != 0) st = rp_errorf(RP_ERR_INTERNAL, "server: cannot start the loop");
        else x->th_started = true;
    }
    if (b->cfg.cache_dir && b->cfg.reuse_mode == RP_REUSE_NONE)
        fprintf(stderr, "reprise serve: --cache-dir is not used with --reuse none\n");
    if (st != RP_OK) {
        rp_backend_sched_ops.stop(b);
        return st;
    }
    return RP_OK;
}

static void sb_stop(rp_backend *b) {
    sched_be *x = b->impl;
    if (!x) return;
    if (x->s) {
        pthread_mutex_lock(&x->mu);
        for (int32_t i = 0; i < x->n_active; i++) rp_sched_cancel(x->s, x->active[i]->sched_id);
        for (int32_t i = 0; i < x->n_fill; i++) atomic_store(&x->fillq[i]->cancel, true);
        pthread_mutex_unlock(&x->mu);
        /* let the loop run the cancellations, bounded */
        double until = rp_srv_now() + 5;
        for (;;) {
            pthread_mutex_lock(&x->mu);
            int32_t n = x->n_active + x->n_fill;
            pthread_mutex_unlock(&x->mu);
            if (n == 0 || !x->th_started || rp_srv_now() > until) break;
            struct timespec ts = {0, 2000000};
            nanosleep(&ts, NULL);
        }
    }
    atomic_store(&x->stop, true);
    if (x->th_started) pthread_join(x->th, NULL);
    for (int32_t i = 0; i < x->n_active; i++) rp_job_complete(x->active[i], RP_JOB_CANCELLED, NULL, NULL);
    x->n_active = 0;
    for (int32_t i = 0; i < x->n_fill; i++) {
        rp_job_mark_started(x->fillq[i]);
        rp_job_complete(x->fillq[i], RP_JOB_CANCELLED, NULL, NULL);
    }
    x->n_fill = 0;
    for (rp_job *j = x->pend_head, *nx; j; j = nx) {
        nx = j->next;
        rp_job_complete(j, RP_JOB_CANCELLED, NULL, NULL);
    }
    x->pend_head = x->pend_tail = NULL;
    rp_sched_free(x->s);
    rp_backend_reuse_close(x->e);
    rp_ctx_free(x->ectx);
    free(x->elogits);
    free(x->ebounds);
    free(x->fillq);
    free(x->active);
    free(x->scratch);
    free(x->kept);   /* their sequences went with the scheduler */
    pthread_mutex_destroy(&x->mu);
    free(x);
    b->impl = NULL;
}

/* Hands a job to the scheduler (mu held): a one-off job gets a fresh sequence, a session job
 * continues its session from the longest common prefix of its history and the prompt. */
static rp_status dispatch(sched_be *x, rp_job *j) {
    rp_backend *b = x->b;
    const rp_gen_params gp = job_gen_params(j);
    struct rp_bk_session *bs = j->p.session;
    bool fresh = false;   /* the sequence holds nothing: the reuse engine may fill it */
    rp_sched_id id = 0;
    rp_status st = RP_OK;
    int32_t common = 0, prev_exact = INT32_MAX;   /* the continued sequence's exact head */
    if (bs) {
        id = bs->id;
        prev_exact = bs->exact;
        int32_t have = 0;
        st = rp_sched_session_tokens(x->s, id, 0, x->scratch, b->n_ctx, &have);
        fresh = st == RP_OK && have == 0;
        if (st == RP_OK) {
            int32_t lim = have < j->p.n ? have : j->p.n;
            while (common < lim && x->scratch[common] == j->toks[common]) common++;
            if (job_mode(x, j) == RP_REUSE_PREFIX && common > prev_exact) common = prev_exact;   /* exact KV only */
            if (common >= j->p.n) common = j->p.n - 1;   /* run the last prompt token again for its logits */
            if (common < have) st = rp_sched_truncate(x->s, id, common);
        }
    } else {
        /* reuse none: a fresh sequence, computed whole. With the reuse engine,
         * a kept sequence is continued only when it shares at least half the
         * prompt: the engine reuses chunks anywhere */
        int32_t k = job_mode(x, j) == RP_REUSE_NONE ? -1 : best_kept(x, j->toks, j->p.n, j->p.cache_ns, &common);
        /* prefix mode promises exact KV: a kept sequence counts only up to its exact head */
        if (k >= 0 && job_mode(x, j) == RP_REUSE_PREFIX && common > x->kept[k].exact) common = x->kept[k].exact;
        if (k >= 0 && (common == 0 || (wants_fill(x, j) && 2 * common < j->p.n))) k = -1;
        if (k >= 0) {   /* continue a finished job's sequence from the shared prefix */
            id = x->kept[k].id;
            prev_exact = x->kept[k].exact;
            unkeep(x, k);
            if (common >= j->p.n) common = j->p.n - 1;   /* run the last prompt token again for its logits */
            int32_t have = 0;
            st = rp_sched_session_tokens(x->s, id, 0, x->scratch, b->n_ctx, &have);
            if (st == RP_OK && common < have) st = rp_sched_truncate(x->s, id, common);
            if (st != RP_OK) {
                rp_sched_session_free(x->s, id);
                common = 0;
                k = -1;
            }
        }
        if (k < 0) {
            common = 0;
            st = rp_sched_session_create(x->s, &id);
            while (st != RP_OK && x->n_kept > 0) {   /* sequences run out: drop the oldest kept one */
                rp_sched_session_free(x->s, x->kept[0].id);
                unkeep(x, 0);
                st = rp_sched_session_create(x->s, &id);
            }
            if (st != RP_OK) st = rp_errorf(RP_ERR_FULL, "server: no free sequence");
            fresh = st == RP_OK;
        }
    }
    if (st == RP_OK) {
        rp_sched_session_info info;
        bool waiting = rp_sched_session_info_get(x->s, id, &info) == RP_OK && info.state == RP_SESS_WAITING;
        j->sched_id = id;
        j->ephemeral = bs == NULL;
        j->st.n_prefix = common;
        j->st.n_prefix_exact = prev_exact < common ? prev_exact : common;
        j->st.n_computed = j->p.n - common;
        j->exact_head = prev_exact >= common ? INT32_MAX : prev_exact;   /* tokens computed on exact KV are exact */
        if (fresh && !waiting && wants_fill(x, j)) {   /* the loop fills it, then submits */
            x->fillq[x->n_fill++] = j;
            if (!bs) {
                x->n_oneoff++;
                x->n_sessions++;
            }
            rp_sched_wake(x->s);
            return RP_OK;
        }
        st = waiting ? rp_sched_resume(x->s, id, j->toks + common, j->p.n - common, &gp)
                     : rp_sched_submit(x->s, id, j->toks + common, j->p.n - common, &gp);
        if (st == RP_OK) {
            x->active[x->n_active++] = j;
            if (!bs) {
                x->n_oneoff++;
                x->n_sessions++;
            }
        } else if (!bs) {
            rp_sched_session_free(x->s, id);
        }
    }
    return st;
}

/* Moves pending one-off jobs to the scheduler while sequences are free (mu held). */
static void dispatch_pending(sched_be *x) {
    while (x->pend_head && x->n_oneoff < x->b->cfg.parallel) {
        rp_job *j = x->pend_head;
        x->pend_head = j->next;
        if (!x->pend_head) x->pend_tail = NULL;
        x->n_pending--;
        j->next = NULL;
        rp_status st = dispatch(x, j);
        if (st != RP_OK) {
            char err[256];
            snprintf(err, sizeof err, "%s", rp_last_error());
            rp_job_mark_started(j);
            rp_job_complete(j, RP_JOB_ERROR, NULL, err);
        }
    }
}

static rp_status sb_submit(rp_backend *b, rp_job *j) {
    sched_be *x = b->impl;
    pthread_mutex_lock(&x->mu);
    if (x->n_active + x->n_pending + x->n_fill >= b->cfg.parallel + b->cfg.queue_max) {
        int32_t busy = x->n_active + x->n_pending + x->n_fill;
        pthread_mutex_unlock(&x->mu);
        return rp_errorf(RP_ERR_FULL, "server: the queue is full (%d jobs)", busy);
    }
    rp_status st = RP_OK;
    if (j->p.session) {
        st = dispatch(x, j);   /* its KV already exists; the scheduler queues it for a slot */
    } else {
        if (x->pend_tail) x->pend_tail->next = j;
        else x->pend_head = j;
        x->pend_tail = j;
        x->n_pending++;
        dispatch_pending(x);
    }
    pthread_mutex_unlock(&x->mu);
    return st;
}

static void sb_cancel(rp_backend *b, rp_job *j) {
    sched_be *x = b->impl;
    pthread_mutex_lock(&x->mu);
    rp_job **pp = &x->pend_head, *prev = NULL;
    bool found = false;
    while (*pp) {
        if (*pp == j) {
            *pp = j->next;
            if (x->pend_tail == j) x->pend_tail = prev;
            x->n_pending--;
            found = true;
            break;
        }
        prev = *pp;
        pp = &(*pp)->next;
    }
    pthread_mutex_unlock(&x->mu);
    if (found) {
        j->next = NULL;
        rp_job_complete(j, RP_JOB_CANCELLED, NULL, NULL);
    } else {
        rp_sched_cancel(x->s, j->sched_id);
    }
}

static rp_status sb_session_create(rp_backend *b, rp_bk_session **out) {
    sched_be *x = b->impl;
    *out = calloc(1, sizeof **out);
    if (!*out) return rp_errorf(RP_ERR_NOMEM, "server: out of memory");
    (*out)->exact = INT32_MAX;   /* empty: nothing inexact in it */
    rp_status st = rp_sched_session_create(x->s, &(*out)->id);
    if (st != RP_OK) {
        free(*out);
        *out = NULL;
        return rp_errorf(RP_ERR_FULL, "server: the scheduler holds no more sessions");
    }
    pthread_mutex_lock(&x->mu);
    x->n_sessions++;
    pthread_mutex_unlock(&x->mu);
    return RP_OK;
}

static void sb_session_free(rp_backend *b, rp_bk_session *s) {
    sched_be *x = b->impl;
    rp_sched_session_free(x->s, s->id);
    pthread_mutex_lock(&x->mu);
    x->n_sessions--;
    pthread_mutex_unlock(&x->mu);
    free(s);
}

static void sb_session_suspend(rp_backend *b, rp_bk_session *s) {
    sched_be *x = b->impl;
    if (rp_sched_mark_waiting(x->s, s->id) == RP_OK) s->waiting = true;
}

static int32_t sb_session_resident(rp_backend *b, rp_bk_session *s) { return s->resident; }

static void sb_stats(rp_backend *b, rp_backend_stats *out) {
    sched_be *x = b->impl;
    pthread_mutex_lock(&x->mu);
    const rp_sched_stats ss = x->ss;
    *out = x->st;
    out->running = ss.n_admitted;
    out->queued = x->n_pending + x->n_fill + (x->n_active > ss.n_admitted ? x->n_active - ss.n_admitted : 0);
    pthread_mutex_unlock(&x->mu);
    pthread_mutex_lock(&x->mu);
    const int32_t kept = x->n_kept;
    pthread_mutex_unlock(&x->mu);
    out->sessions = ss.n_sessions > kept ? ss.n_sessions - kept : 0;   /* kept sequences are a cache, not sessions */
    out->sessions_waiting = ss.n_waiting;
    out->kv_bytes = ss.kv_resident;
    out->kv_demotions = ss.demotions;
    out->kv_restores = ss.restores;
    rp_backend_reuse_snapshot(x->e, out);   /* the cache's figures now (its calls are thread-safe) */
}

static rp_status sb_flush(rp_backend *b) {
    sched_be *x = b->impl;
    return rp_backend_reuse_flush(x->e);
}

const rp_backend_ops rp_backend_sched_ops = {
    .kind = "sched",
    .start = sb_start,
    .stop = sb_stop,
    .submit = sb_submit,
    .cancel = sb_cancel,
    .session_create = sb_session_create,
    .session_free = sb_session_free,
    .session_suspend = sb_session_suspend,
    .session_resident = sb_session_resident,
    .stats = sb_stats,
    .flush = sb_flush,
};
