/* backend_sched.c — the batching backend: jobs run as agents of the public scheduler (rp_agents: continuous
 * batching, speculation, suspend/resume), their prompts filled from the public engine's chunk cache. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/error.h"
#include "server/backend_internal.h"

struct rp_bk_session {
    rp_agent_id id;
    bool waiting;          /* suspended after a tool call (WAITING in the scheduler) */
    int32_t resident;      /* history length after its last job */
    int32_t exact;         /* its KV is exact up to here (INT32_MAX: all of it), see rp_job.exact_head */
};

/* A finished one-off job's sequence kept for the next one (see sched_be.kept). */
typedef struct kept_seq {
    rp_agent_id id;
    int32_t exact;                 /* its exact head (rp_job.exact_head) */
    uint64_t ns;                   /* the cache namespace of the job that left it: continued only by the same */
} kept_seq;

typedef struct sched_be {
    rp_backend *b;
    rp_agents *s;
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
    rp_agents_stats ss;            /* snapshot taken by the loop between steps (mu): reading the
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
     * its prompt's KV up to its last reusable chunk from the engine on the
     * loop thread, between steps (rp_agents_submit_reuse); the batch
     * computes the rest and the prompt is cached after the turn
     * (rp_agents_commit_prompt). The engine's cache (RAM pool, and the flash
     * store with --cache-dir) is shared with nothing else. NULL with --reuse none. */
    rp_engine *e;                  /* loop thread only (after start; its stats and flush from any) */
    rp_job **fillq;                /* [cap_active] jobs waiting for their fill (mu) */
    int32_t n_fill;
    /* n > 1 choices: leads whose other choices (lead->forks, fork_wait) wait for the lead's prompt to be
     * computed; each then runs on a fork of the lead's sequence, so the prompt is prefilled once (mu) */
    rp_job **leads;                /* [cap_active] */
    int32_t n_leads;
} sched_be;

static void dispatch_pending(sched_be *x);

/* Per-token callback: runs on the loop thread under the scheduler's lock. */
static bool on_token(void *user, rp_agent_id id, rp_token tok) {
    rp_job *j = user;
    return rp_job_push(j, tok);
}

static rp_job_finish map_finish(rp_stop_reason r) {
    switch (r) {
    case RP_STOP_EOG:      /* an end-of-generation token or a tool call */
    case RP_STOP_STRING: return RP_JOB_EOG;
    case RP_STOP_LENGTH: return RP_JOB_LENGTH;
    case RP_STOP_CONTEXT: return RP_JOB_CTX;
    case RP_STOP_CANCELLED: return RP_JOB_CANCELLED;
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
static void keep_or_free(sched_be *x, rp_agent_id id, bool keep, int32_t exact, uint64_t ns) {
    if (!keep || x->cap_kept == 0) {
        rp_agents_remove(x->s, id);
        return;
    }
    if (x->n_kept == x->cap_kept) {
        rp_agents_remove(x->s, x->kept[0].id);
        unkeep(x, 0);
    }
    x->kept[x->n_kept++] = (kept_seq){.id = id, .exact = exact, .ns = ns};
}

/* A fresh sequence; when they run out, kept ones are dropped, oldest first (mu held). */
static rp_status add_agent(sched_be *x, rp_agent_id *id) {
    rp_status st = rp_agents_add(x->s, id);
    while (st != RP_OK && x->n_kept > 0) {
        rp_agents_remove(x->s, x->kept[0].id);
        unkeep(x, 0);
        st = rp_agents_add(x->s, id);
    }
    return st == RP_OK ? RP_OK : rp_errorf(RP_ERR_FULL, "server: no free sequence");
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
        if (rp_agents_tokens(x->s, x->kept[i].id, 0, x->scratch, x->b->n_ctx, &have) != RP_OK) continue;
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

/* The options of a job's turn (it ends at an end-of-generation token). */
static rp_turn_opts job_turn_opts(rp_job *j) {
    rp_turn_opts o = rp_turn_default_opts();
    o.sampling = j->p.sampler;
    o.max_tokens = j->p.max_tokens;
    o.suspend_on_tool_call = j->p.session != NULL;
    o.on_token = on_token;
    o.user = j;
    if (j->p.logprobs) {   /* each token's log-probabilities (drafts stay on), stored by its push */
        o.on_chosen = rp_job_on_chosen;
        o.chosen_user = j;
    }
    if (j->gstate) {   /* a grammar (lazy too): the scheduler samples this turn unspeculated through the hook */
        o.on_logits = rp_job_on_logits;
        o.logits_user = j;
    }
    o.ignore_eos = j->p.ignore_eos;   /* the scheduler bans end-of-generation tokens itself, drafts verified too */
    return o;
}

/* The job's reuse options for the engine: its reprise_cache mode and ratio over the server's, its namespace. */
static rp_gen_opts job_reuse_opts(const rp_job *j) {
    rp_gen_opts o = rp_gen_default_opts();
    o.reuse = j->p.reuse_mode;
    o.recompute_ratio = j->p.recompute_ratio;
    o.cache_namespace = j->p.cache_ns;
    o.persist = j->p.persist;
    return o;
}

/* The job's prompt with its pieces as segments, built once (loop thread). */
static rp_status job_prompt(rp_job *j) {
    if (j->prompt) return RP_OK;
    RP_TRY(rp_prompt_create(&j->prompt));
    return rp_job_prompt(j, j->prompt);
}

/* The job's reuse mode: its reprise_cache.mode, else the server's --reuse. */
static int job_mode(const sched_be *x, const rp_job *j) {
    return j->p.reuse_mode >= 0 ? j->p.reuse_mode : x->b->cfg.reuse_mode;
}

/* Whether a job's fresh sequence is filled by the reuse engine (mu held). */
static bool wants_fill(const sched_be *x, const rp_job *j) {
    return x->e && j->p.n >= 2 && job_mode(x, j) != RP_REUSE_NONE;
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

    const rp_turn_opts to = job_turn_opts(j);
    const rp_gen_opts ro = job_reuse_opts(j);
    if (!j->started) rp_job_mark_started(j);   /* its prefill starts now: the fill is not queueing */
    rp_agents_fill f;
    memset(&f, 0, sizeof f);
    rp_status st = atomic_load(&j->cancel) ? rp_errorf(RP_ERR_CANCELLED, "server: cancelled before its prefill")
                                           : job_prompt(j);
    if (st == RP_OK) st = rp_agents_submit_reuse(x->s, j->sched_id, x->e, j->prompt, &ro, &to, &f);
    if (st == RP_OK && f.fill_status != RP_OK)
        fprintf(stderr, "reprise serve: reuse prefill failed (the batch computes the prompt): %s\n",
                rp_strerror(f.fill_status));
    if (st == RP_OK && f.cache_status != RP_OK)
        fprintf(stderr, "reprise serve: caching a prompt failed: %s\n", rp_strerror(f.cache_status));
    pthread_mutex_lock(&x->mu);
    if (st == RP_OK) {
        j->commit_after = f.commit_after;
        j->commit_exact = f.commit_exact;
        j->exact_head = f.exact_head;
        j->st.n_prefix = f.reused_prefix;
        j->st.n_prefix_exact = f.reused_prefix_exact;
        j->st.n_nonprefix = f.reused_nonprefix;
        j->st.n_recomputed = f.recomputed;
        j->st.n_computed = j->p.n - j->st.n_prefix - j->st.n_nonprefix;
        x->st.reused_nonprefix += (uint64_t)j->st.n_nonprefix;
        x->st.recomputed += (uint64_t)j->st.n_recomputed;
        x->active[x->n_active++] = j;
    } else {
        const bool cancelled = st == RP_ERR_CANCELLED;
        char err[256];
        snprintf(err, sizeof err, "%s", rp_last_error());
        if (j->ephemeral) {
            rp_agents_remove(x->s, j->sched_id);
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

/* One waiting choice of lead L whose sequence holds the prompt's first P - 1 tokens computed: a fresh sequence
 * forked from L's (those cells copied), the last prompt token submitted for the choice's own first logits. False
 * when it could not (no free sequence, or the fork failed): the caller queues it as an ordinary job (mu held). */
static bool start_fork(sched_be *x, rp_job *L, rp_job *f) {
    const int32_t keep = L->p.n - 1;
    rp_agent_id id = 0;
    if (add_agent(x, &id) != RP_OK) return false;
    const rp_turn_opts to = job_turn_opts(f);
    rp_status st = rp_agents_fork(x->s, id, L->sched_id, keep);
    if (st == RP_OK) st = rp_agents_submit(x->s, id, f->toks + keep, f->p.n - keep, &to);
    if (st != RP_OK) {
        rp_agents_remove(x->s, id);
        return false;
    }
    f->sched_id = id;
    f->ephemeral = true;
    f->st.n_prefix = keep;
    f->st.n_prefix_exact = L->exact_head < keep ? L->exact_head : keep;
    f->st.n_computed = f->p.n - keep;
    f->exact_head = L->exact_head;
    x->active[x->n_active++] = f;
    x->n_oneoff++;
    x->n_sessions++;
    return true;
}

/* Ends the wait of lead i's choices (mu held, loop thread, between steps): once the lead's sequence holds its
 * prompt (all but the last token computed), each choice is started on a fork of it; a choice cancelled meanwhile
 * ends cancelled; when the lead ended without computing its prompt, or a fork cannot start, the choice runs as an
 * ordinary job (its prompt computed again; correct, only not shared). */
static void release_forks(sched_be *x) {
    for (int32_t i = 0; i < x->n_leads;) {
        rp_job *L = x->leads[i];
        pthread_mutex_lock(&L->mu);
        const bool lead_done = L->done;
        pthread_mutex_unlock(&L->mu);
        bool running = false, queued = false, ready = false;
        for (int32_t k = 0; k < x->n_active && !running; k++) running = x->active[k] == L;
        for (rp_job *q = x->pend_head; q && !queued; q = q->next) queued = q == L;
        for (int32_t k = 0; k < x->n_fill && !queued; k++) queued = x->fillq[k] == L;
        if (!lead_done && running && L->p.n >= 2) {
            rp_agent_info info;
            int32_t have = 0;
            if (rp_agents_info(x->s, L->sched_id, &info) == RP_OK && info.n_cached >= L->p.n - 1 &&
                rp_agents_tokens(x->s, L->sched_id, 0, x->scratch, L->p.n - 1, &have) == RP_OK && have == L->p.n - 1)
                ready = memcmp(x->scratch, L->toks, sizeof *L->toks * (size_t)have) == 0;
        }
        if (!ready && !lead_done && (running || queued)) {   /* its prompt is still to come */
            i++;
            continue;
        }
        /* ready, or the lead will not compute its prompt any more: every waiting choice goes now */
        for (int32_t k = 0; k < L->n_forks; k++) {
            rp_job *f = L->forks[k];
            if (!f->fork_wait) continue;
            f->fork_wait = false;
            if (atomic_load(&f->cancel)) {
                rp_job_mark_started(f);
                rp_job_complete(f, RP_JOB_CANCELLED, NULL, NULL);
                continue;
            }
            if (ready && start_fork(x, L, f)) continue;
            f->is_fork = false;   /* it computes its prompt itself: counted as its own */
            if (x->pend_tail) x->pend_tail->next = f;
            else x->pend_head = f;
            x->pend_tail = f;
            x->n_pending++;
        }
        x->leads[i] = x->leads[--x->n_leads];
    }
}

/* After a step: completes jobs whose turn ended. Called on the loop thread. */
static void reap(sched_be *x, double step_s, int32_t step_rows) {
    pthread_mutex_lock(&x->mu);
    release_forks(x);
    for (int32_t i = 0; i < x->n_active;) {
        rp_job *j = x->active[i];
        rp_agent_info info;
        rp_status st = rp_agents_info(x->s, j->sched_id, &info);
        bool running = st == RP_OK && (info.state == RP_AGENT_PREFILL || info.state == RP_AGENT_DECODE);
        if (st == RP_OK && running) {
            if (info.last_step >= 0 && !j->started) rp_job_mark_started(j);
            i++;
            continue;
        }
        x->active[i] = x->active[--x->n_active];
        rp_job_stats js = j->st;
        rp_job_finish why = st == RP_OK ? map_finish(info.turn_stop) : RP_JOB_ERROR;
        if (st == RP_OK) {
            js.drafted = info.drafted;
            js.accepted = info.accepted;
        }
        if (!j->started) rp_job_mark_started(j);
        if (st == RP_OK && j->commit_after && x->e && why != RP_JOB_ERROR && j->prompt) {
            const rp_gen_opts ro = job_reuse_opts(j);
            const rp_status cs = rp_agents_commit_prompt(x->s, j->sched_id, x->e, j->prompt, &ro, j->commit_exact);
            /* RP_ERR_INVALID_ARG: the agent's KV is not readable now (busy, demoted): nothing is cached */
            if (cs != RP_OK && cs != RP_ERR_INVALID_ARG)
                fprintf(stderr, "reprise serve: caching a prompt failed: %s\n", rp_last_error());
        }
        x->st.jobs++;
        x->st.gen_tokens += (uint64_t)j->n_gen;
        if (!j->is_fork) {   /* a choice's fork: its prompt is the lead's, counted once there */
            x->st.prompt_tokens += (uint64_t)j->p.n;
            x->st.reused_prefix += (uint64_t)js.n_prefix;
            x->st.reused_prefix_exact += (uint64_t)js.n_prefix_exact;
            x->st.computed += (uint64_t)js.n_computed;
        }
        if (j->ephemeral) {
            x->n_sessions--;
            x->n_oneoff--;
            keep_or_free(x, j->sched_id, st == RP_OK && why != RP_JOB_ERROR && info.state == RP_AGENT_IDLE, j->exact_head,
                         j->p.cache_ns);
        } else if (st == RP_OK) {
            struct rp_bk_session *bs = j->p.session;
            bs->resident = info.n_tokens;
            bs->exact = j->exact_head;
            bs->waiting = info.state == RP_AGENT_WAITING;
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
        rp_status st = rp_agents_step(x->s, NULL);
        rp_agents_step_info info;
        rp_agents_last_step(x->s, &info);
        if (st != RP_OK) {
            /* the step's sessions were rolled back: end their jobs with the error */
            fprintf(stderr, "reprise serve: scheduler step failed: %s\n", rp_last_error());
            pthread_mutex_lock(&x->mu);
            for (int32_t i = 0; i < x->n_active; i++) rp_agents_cancel(x->s, x->active[i]->sched_id);
            pthread_mutex_unlock(&x->mu);
        }
        if (st == RP_OK && info.ran) {
            pthread_mutex_lock(&x->mu);
            double pre = info.rows > 0 ? info.target_s * info.prefill_rows / info.rows : 0;
            x->st.prefill_s += pre;
            x->st.decode_s += info.total_s - pre;
            x->st.drafted += (uint64_t)info.drafted;
            x->st.accepted += (uint64_t)info.accepted;
            pthread_mutex_unlock(&x->mu);
        }
        reap(x, info.total_s, info.rows);
        rp_agents_stats ss;
        rp_agents_stats_get(x->s, &ss);
        pthread_mutex_lock(&x->mu);
        x->ss = ss;
        pthread_mutex_unlock(&x->mu);
        pthread_mutex_lock(&x->mu);
        const bool fills = x->n_fill > 0;
        pthread_mutex_unlock(&x->mu);
        if (!fills && (st != RP_OK || info.idle || info.blocked)) (void)rp_agents_wait(x->s, 0.02);
    }
    return NULL;
}

static rp_status sb_start(rp_backend *b) {
    sched_be *x = calloc(1, sizeof *x);
    if (!x) return rp_errorf(RP_ERR_NOMEM, "server: out of memory");
    x->b = b;
    pthread_mutex_init(&x->mu, NULL);
    b->impl = x;
    rp_agents_params p = rp_agents_default_params();
    /* one-off jobs hold a sequence only while running (at most `parallel`); sessions keep theirs */
    /* + up to `parallel` kept sequences, + the other choices of an n > 1 request (their KV pages are touched
     * only as they fill) */
    int32_t ms = 2 * b->cfg.parallel + b->cfg.max_sessions + 1 + (RP_BACKEND_MAX_N - 1);
    p.max_agents = ms > RP_AGENTS_MAX ? RP_AGENTS_MAX : ms;
    p.max_active = b->cfg.parallel;
    p.n_ctx = b->n_ctx;
    p.n_batch = 512 < b->cfg.parallel ? b->cfg.parallel : 512;
    p.kv_type = b->cfg.kv_type;
    p.swa_full = b->cfg.swa_full;
    p.n_threads = b->cfg.n_threads;
    p.kv_limit_mb = b->cfg.kv_limit_mb;
    p.draft = b->dm;
    /* speculation: HAL budgets with suspend-and-yield, drafts from the draft model or n-grams */
    p.policy = b->cfg.speculate ? RP_AGENTS_HAL_YIELD : RP_AGENTS_BATCH_AR;
    p.drafter = b->cfg.speculate ? (b->dm ? RP_DRAFT_MODEL : RP_DRAFT_NGRAM) : RP_DRAFT_NONE;
    x->cap_active = b->cfg.parallel + b->cfg.queue_max + b->cfg.max_sessions + 1;
    x->active = calloc((size_t)x->cap_active, sizeof *x->active);
    x->scratch = malloc(sizeof *x->scratch * (size_t)b->n_ctx);
    x->cap_kept = b->cfg.parallel;
    x->kept = calloc((size_t)(x->cap_kept > 0 ? x->cap_kept : 1), sizeof *x->kept);
    x->fillq = calloc((size_t)x->cap_active, sizeof *x->fillq);
    x->leads = calloc((size_t)x->cap_active, sizeof *x->leads);
    rp_status st = !x->active || !x->scratch || !x->kept || !x->fillq || !x->leads ? rp_errorf(RP_ERR_NOMEM, "server: out of memory")
                                                                     : RP_OK;
    if (st == RP_OK) st = rp_agents_create(b->m, &p, &x->s);
    if (st == RP_OK && b->cfg.reuse_mode != RP_REUSE_NONE) st = rp_backend_engine_open(b, &x->e);
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
        for (int32_t i = 0; i < x->n_active; i++) rp_agents_cancel(x->s, x->active[i]->sched_id);
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
    for (int32_t i = 0; i < x->n_leads; i++)   /* choices still waiting for their lead's prompt */
        for (int32_t k = 0; k < x->leads[i]->n_forks; k++) {
            rp_job *f = x->leads[i]->forks[k];
            if (!f->fork_wait) continue;
            f->fork_wait = false;
            rp_job_mark_started(f);
            rp_job_complete(f, RP_JOB_CANCELLED, NULL, NULL);
        }
    x->n_leads = 0;
    rp_agents_free(x->s);
    rp_backend_engine_close(x->e);
    free(x->fillq);
    free(x->leads);
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
    const rp_turn_opts to = job_turn_opts(j);
    struct rp_bk_session *bs = j->p.session;
    bool fresh = false;   /* the sequence holds nothing: the reuse engine may fill it */
    rp_agent_id id = 0;
    rp_status st = RP_OK;
    int32_t common = 0, prev_exact = INT32_MAX;   /* the continued sequence's exact head */
    if (bs) {
        id = bs->id;
        prev_exact = bs->exact;
        int32_t have = 0;
        st = rp_agents_tokens(x->s, id, 0, x->scratch, b->n_ctx, &have);
        fresh = st == RP_OK && have == 0;
        if (st == RP_OK) {
            int32_t lim = have < j->p.n ? have : j->p.n;
            while (common < lim && x->scratch[common] == j->toks[common]) common++;
            if (job_mode(x, j) == RP_REUSE_PREFIX && common > prev_exact) common = prev_exact;   /* exact KV only */
            if (common >= j->p.n) common = j->p.n - 1;   /* run the last prompt token again for its logits */
            if (common < have) st = rp_agents_truncate(x->s, id, common);
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
            st = rp_agents_tokens(x->s, id, 0, x->scratch, b->n_ctx, &have);
            if (st == RP_OK && common < have) st = rp_agents_truncate(x->s, id, common);
            if (st != RP_OK) {
                rp_agents_remove(x->s, id);
                common = 0;
                k = -1;
            }
        }
        if (k < 0) {
            common = 0;
            st = add_agent(x, &id);
            fresh = st == RP_OK;
        }
    }
    if (st == RP_OK) {
        rp_agent_info info;
        bool waiting = rp_agents_info(x->s, id, &info) == RP_OK && info.state == RP_AGENT_WAITING;
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
            rp_agents_wake(x->s);
            return RP_OK;
        }
        st = waiting ? rp_agents_resume(x->s, id, j->toks + common, j->p.n - common, &to)
                     : rp_agents_submit(x->s, id, j->toks + common, j->p.n - common, &to);
        if (st == RP_OK) {
            x->active[x->n_active++] = j;
            if (!bs) {
                x->n_oneoff++;
                x->n_sessions++;
            }
        } else if (!bs) {
            rp_agents_remove(x->s, id);
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

/* n > 1: the lead is queued as a one-off job; its other choices wait (release_forks). */
static rp_status sb_submit_n(rp_backend *b, rp_job *j) {
    sched_be *x = b->impl;
    pthread_mutex_lock(&x->mu);
    if (x->n_leads == x->cap_active) {
        pthread_mutex_unlock(&x->mu);
        return rp_errorf(RP_ERR_FULL, "server: the queue is full (%d requests with several choices)", x->n_leads);
    }
    for (int32_t k = 0; k < j->n_forks; k++) j->forks[k]->fork_wait = true;
    x->leads[x->n_leads++] = j;
    pthread_mutex_unlock(&x->mu);
    rp_status st = sb_submit(b, j);
    if (st != RP_OK) {
        pthread_mutex_lock(&x->mu);
        for (int32_t i = 0; i < x->n_leads; i++)
            if (x->leads[i] == j) x->leads[i] = x->leads[--x->n_leads];
        for (int32_t k = 0; k < j->n_forks; k++) j->forks[k]->fork_wait = false;
        pthread_mutex_unlock(&x->mu);
    }
    rp_agents_wake(x->s);
    return st;
}

static void sb_cancel(rp_backend *b, rp_job *j) {
    sched_be *x = b->impl;
    pthread_mutex_lock(&x->mu);
    if (j->fork_wait) {   /* its cancel flag is set: release_forks ends it */
        pthread_mutex_unlock(&x->mu);
        rp_agents_wake(x->s);
        return;
    }
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
        rp_agents_cancel(x->s, j->sched_id);
    }
}

static rp_status sb_session_create(rp_backend *b, rp_bk_session **out) {
    sched_be *x = b->impl;
    *out = calloc(1, sizeof **out);
    if (!*out) return rp_errorf(RP_ERR_NOMEM, "server: out of memory");
    (*out)->exact = INT32_MAX;   /* empty: nothing inexact in it */
    rp_status st = rp_agents_add(x->s, &(*out)->id);
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
    rp_agents_remove(x->s, s->id);
    pthread_mutex_lock(&x->mu);
    x->n_sessions--;
    pthread_mutex_unlock(&x->mu);
    free(s);
}

static void sb_session_suspend(rp_backend *b, rp_bk_session *s) {
    sched_be *x = b->impl;
    if (rp_agents_suspend(x->s, s->id) == RP_OK) s->waiting = true;
}

static int32_t sb_session_resident(rp_backend *b, rp_bk_session *s) { return s->resident; }

static void sb_stats(rp_backend *b, rp_backend_stats *out) {
    sched_be *x = b->impl;
    pthread_mutex_lock(&x->mu);
    const rp_agents_stats ss = x->ss;
    *out = x->st;
    out->running = ss.active;
    out->queued = x->n_pending + x->n_fill + (x->n_active > ss.active ? x->n_active - ss.active : 0);
    pthread_mutex_unlock(&x->mu);
    pthread_mutex_lock(&x->mu);
    const int32_t kept = x->n_kept;
    pthread_mutex_unlock(&x->mu);
    out->sessions = ss.agents > kept ? ss.agents - kept : 0;   /* kept sequences are a cache, not sessions */
    out->sessions_waiting = ss.waiting;
    out->kv_bytes = ss.kv_bytes;
    out->kv_demotions = ss.demotions;
    out->kv_restores = ss.restores;
    rp_backend_engine_snapshot(x->e, out);   /* the cache's figures now (thread-safe) */
}

static rp_status sb_flush(rp_backend *b) {
    sched_be *x = b->impl;
    return x->e ? rp_engine_flush(x->e) : RP_OK;
}

const rp_backend_ops rp_backend_sched_ops = {
    .kind = "sched",
    .start = sb_start,
    .stop = sb_stop,
    .submit = sb_submit,
    .submit_n = sb_submit_n,
    .cancel = sb_cancel,
    .session_create = sb_session_create,
    .session_free = sb_session_free,
    .session_suspend = sb_session_suspend,
    .session_resident = sb_session_resident,
    .stats = sb_stats,
    .flush = sb_flush,
};
