/* backend.c — backend creation (model loading, core vs sched) and the job channel shared by both backends. */
#include "server/backend_internal.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/error.h"
#include "server/lazy_grammar.h"

double rp_srv_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

rp_backend_config rp_backend_default_config(void) {
    rp_backend_config c = {
        .n_ctx = 0,
        .n_threads = 2,
        .parallel = 1,
        .queue_max = 64,
        .max_sessions = 16,
        .cache_ram_mb = 512,
        .cache_disk_gb = 0,
        .embed_dim = 256,
        .reuse_mode = RP_REUSE_BLEND,
        .recompute_ratio = 0.25f,
        .kv_type = RP_KV_F16,
        .speculate = true,
        .n_gpu_layers = -1,
    };
    return c;
}

rp_status rp_backend_create(const rp_backend_config *cfg, rp_backend **out) {
    *out = NULL;
    if (!cfg || !cfg->model_path) return rp_errorf(RP_ERR_INVALID_ARG, "backend: no model path");
    if (cfg->parallel < 0 || cfg->parallel > 64 || cfg->queue_max < 0 || cfg->queue_max > 4096 ||
        cfg->max_sessions < 0 || cfg->max_sessions > 128 || cfg->n_threads < 1)
        return rp_errorf(RP_ERR_INVALID_ARG, "backend: parallel %d (1-64, 0 auto), queue %d (0-4096), sessions %d (0-128)",
                         cfg->parallel, cfg->queue_max, cfg->max_sessions);
    rp_backend *b = calloc(1, sizeof *b);
    if (!b) return rp_errorf(RP_ERR_NOMEM, "backend: out of memory");
    b->cfg = *cfg;
    pthread_mutex_init(&b->gmu, NULL);
    rp_model_params mp = rp_model_default_params();
    mp.n_threads = cfg->n_threads;
    mp.progress = cfg->load_progress;
    mp.progress_user = cfg->load_progress_user;
    mp.n_gpu_layers = cfg->n_gpu_layers;
    mp.gpu_device = cfg->gpu_device;
    rp_status st = rp_model_load(cfg->model_path, mp, &b->m);
    if (st != RP_OK) goto fail;
    mp.n_gpu_layers = 0;   /* a draft model stays on the CPU */
    mp.gpu_device = NULL;
    {   /* the start-up line, unless the default found no GPU (a machine without one hears nothing) */
        const char *gn = rp_model_gpu_notice(b->m), *env = getenv("RP_GPU_DEVICE");
        const bool asked = cfg->n_gpu_layers >= 0 || (cfg->gpu_device && *cfg->gpu_device) || (env && *env);
        if (gn[0] && (rp_model_gpu_layers(b->m) > 0 || asked || strncmp(gn, "gpu: CPU only (", 15) != 0))
            fprintf(stderr, "reprise serve: %s\n", gn);
    }
    const rp_model_desc md = rp_model_describe(b->m);
    if (!md.has_tokenizer) {
        st = rp_errorf(RP_ERR_UNSUPPORTED, "'%s' has no tokenizer", cfg->model_path);
        goto fail;
    }
    /* the chat template renders, or the server does not start (a model without one keeps a plain transcript) */
    st = cfg->chat_template ? rp_chat_template_set(b->m, cfg->chat_template) : rp_chat_template_check(b->m);
    if (st == RP_ERR_UNSUPPORTED && !cfg->chat_template) st = RP_OK;
    if (st != RP_OK) goto fail;
    if (cfg->draft_path && (st = rp_model_load(cfg->draft_path, mp, &b->dm)) != RP_OK) goto fail;
    for (int32_t t = 0; t < md.n_vocab; t++)   /* what ignore_eos bans */
        if (rp_token_is_eog(b->m, t)) {
            rp_token *ne = realloc(b->eog, sizeof *ne * (size_t)(b->n_eog + 1));
            if (!ne) {
                st = rp_errorf(RP_ERR_NOMEM, "backend: out of memory");
                goto fail;
            }
            (b->eog = ne)[b->n_eog++] = t;
        }
    int32_t n_ctx = cfg->n_ctx > 0 ? cfg->n_ctx : 4096;
    if (md.n_ctx_train > 0 && n_ctx > md.n_ctx_train) {
        if (cfg->n_ctx > 0)
            fprintf(stderr, "reprise serve: -c %d exceeds the model's training context %d; using %d\n", cfg->n_ctx,
                    md.n_ctx_train, md.n_ctx_train);
        n_ctx = md.n_ctx_train;
    }
    b->n_ctx = n_ctx;
    if (rp_backend_is_encoder(b)) {   /* embeddings only: no sessions, no KV, no generation thread */
        b->cfg.parallel = 1;
        b->ops = &rp_backend_encoder_ops;
        *out = b;
        return RP_OK;
    }
    /* the KV memory of one sequence (up to n_ctx cells): sizes --parallel auto, and is said before it is allocated */
    uint64_t kv = 0;
    const int32_t est_batch = cfg->parallel > 512 ? cfg->parallel : 512;   /* both backends' n_batch */
    const bool kv_known = rp_kv_estimate_ex(b->m, n_ctx, cfg->kv_type, est_batch, cfg->swa_full, &kv) == RP_OK;
    if (!kv_known) kv = 0;
    if (b->cfg.parallel == 0) {
        const long cores = sysconf(_SC_NPROCESSORS_ONLN);
        b->cfg.parallel = rp_srv_auto_parallel(cores > 0 ? (int)cores : 1, rp_system_mem_available(), kv);
    }
    b->ops = b->cfg.parallel > 1 ? &rp_backend_sched_ops : &rp_backend_core_ops;
    char swa[160] = "";
    uint64_t full = 0;
    const rp_model_desc dd = rp_model_describe(b->m);
    if (kv_known && dd.n_swa_layers > 0 && rp_kv_estimate_ex(b->m, n_ctx, cfg->kv_type, est_batch, true, &full) == RP_OK)
        snprintf(swa, sizeof swa, cfg->swa_full ? " (--swa-full: %d sliding-window layers keep every cell)"
                                                : " (%d sliding-window layers hold window %d + %d cells; %.1f MiB with --swa-full)",
                 dd.n_swa_layers, dd.n_swa, est_batch, (double)full / 1048576.0);
    if (kv_known)   /* the engine refuses what cannot fit, naming both */
        fprintf(stderr, "reprise serve: context %d tokens: KV cache up to %.1f MiB per sequence%s, %d sequence%s "
                        "decoded together (%.1f MiB available)\n", n_ctx, (double)kv / 1048576.0, swa, b->cfg.parallel,
                b->cfg.parallel == 1 ? "" : "s", (double)rp_system_mem_available() / 1048576.0);
    if ((st = b->ops->start(b)) != RP_OK) goto fail;
    *out = b;
    return RP_OK;
fail:
    rp_model_free(b->dm);
    rp_model_free(b->m);
    free(b->eog);
    free(b);
    return st;
}

void rp_backend_free(rp_backend *b) {
    if (!b) return;
    b->ops->stop(b);
    rp_model_free(b->dm);
    rp_model_free(b->m);
    rp_grammar_vocab_free(b->gvocab);
    pthread_mutex_destroy(&b->gmu);
    free(b->eog);
    free(b);
}

const rp_model *rp_backend_model(const rp_backend *b) { return b->m; }
bool rp_backend_is_encoder(const rp_backend *b) {
    if (!b || !b->m) return false;
    const char *arch = rp_model_describe(b->m).arch;   /* the encoders (bert, nomic-bert): embedding models */
    return arch && (!strcmp(arch, "bert") || !strcmp(arch, "nomic-bert"));
}
int32_t rp_backend_n_ctx(const rp_backend *b) { return b->n_ctx; }
uint64_t rp_backend_kv_bytes_per_token(const rp_backend *b) {
    return rp_kv_bytes_per_token(b->m, b->cfg.kv_type);
}
const char *rp_backend_kind(const rp_backend *b) { return b->ops->kind; }
int rp_backend_parallel(const rp_backend *b) { return b->cfg.parallel; }

int rp_srv_auto_parallel(int cores, uint64_t mem_available, uint64_t kv_bytes_per_seq) {
    int n = 4;
    if (cores / 2 < n) n = cores / 2;
    if (mem_available > 0 && kv_bytes_per_seq > 0 && mem_available / 2 / kv_bytes_per_seq < (uint64_t)n)
        n = (int)(mem_available / 2 / kv_bytes_per_seq);
    return n < 1 ? 1 : n;
}
rp_status rp_backend_flush(rp_backend *b) { return b->ops->flush ? b->ops->flush(b) : RP_OK; }

rp_status rp_backend_session_create(rp_backend *b, rp_bk_session **out) { return b->ops->session_create(b, out); }
void rp_backend_session_free(rp_backend *b, rp_bk_session *s) { if (s) b->ops->session_free(b, s); }
void rp_backend_session_suspend(rp_backend *b, rp_bk_session *s) { if (s) b->ops->session_suspend(b, s); }
int32_t rp_backend_session_resident(rp_backend *b, rp_bk_session *s) { return s ? b->ops->session_resident(b, s) : 0; }
void rp_backend_stats_get(rp_backend *b, rp_backend_stats *out) {
    memset(out, 0, sizeof *out);
    b->ops->stats(b, out);
}

/* ------------------------------------------------------------------ jobs */

static void job_free(rp_job *j) {
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->cv);
    free(j->toks);
    free(j->bounds);
    free(j->bias);
    free(j->gen);
    free(j->lp);
    free(j->lp_top);
    free(j->lp_top_lp);
    rp_srv_lazy_free(j->lazy);
    rp_grammar_state_free(j->gstate);
    rp_grammar_free(j->grammar);
    rp_prompt_free(j->prompt);
    free(j->forks);
    free(j);
}

void rp_job_unref(rp_job *j) {
    if (!j) return;
    pthread_mutex_lock(&j->mu);
    int left = --j->refs;
    pthread_mutex_unlock(&j->mu);
    if (left == 0) job_free(j);
}

/* A job from its parameters (checked, copied; its grammar parsed), not queued yet. */
static rp_status job_make(rp_backend *b, const rp_job_params *p, rp_job **out) {
    *out = NULL;
    if (!p || p->n < 1 || !p->toks || p->max_tokens < 0 || p->n_bounds < 0 || (p->n_bounds && !p->bounds))
        return rp_errorf(RP_ERR_INVALID_ARG, "backend: bad job (%d tokens)", p ? p->n : -1);
    if ((int64_t)p->n + p->max_tokens > b->n_ctx)
        return rp_errorf(RP_ERR_RANGE, "backend: %d prompt + %d new tokens exceed the context of %d", p->n,
                         p->max_tokens, b->n_ctx);
    const int32_t n_vocab = rp_model_describe(b->m).n_vocab;
    for (int32_t i = 0; i < p->n; i++)
        if (p->toks[i] < 0 || p->toks[i] >= n_vocab)
            return rp_errorf(RP_ERR_RANGE, "backend: token %d at %d is not in the vocabulary (%d)", p->toks[i], i, n_vocab);
    for (int32_t i = 0; i < p->sampler.n_bias; i++)
        if (p->sampler.bias[i].token < 0 || p->sampler.bias[i].token >= n_vocab)
            return rp_errorf(RP_ERR_RANGE, "backend: logit_bias token %d is not in the vocabulary (%d)",
                             p->sampler.bias[i].token, n_vocab);
    rp_job *j = calloc(1, sizeof *j);
    if (!j) return rp_errorf(RP_ERR_NOMEM, "backend: out of memory");
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    j->refs = 2;
    j->b = b;
    j->p = *p;
    j->cap_gen = p->max_tokens + 1;
    j->toks = malloc(sizeof *j->toks * (size_t)p->n);
    j->bounds = p->n_bounds ? malloc(sizeof *j->bounds * (size_t)p->n_bounds) : NULL;
    j->bias = p->sampler.n_bias ? malloc(sizeof *j->bias * (size_t)p->sampler.n_bias) : NULL;
    j->gen = malloc(sizeof *j->gen * (size_t)j->cap_gen);
    if (j->p.top_logprobs > RP_LOGPROBS_MAX_TOP) j->p.top_logprobs = RP_LOGPROBS_MAX_TOP;
    if (j->p.top_logprobs < 0 || !j->p.logprobs) j->p.top_logprobs = 0;
    if (j->p.logprobs) {
        const size_t k = (size_t)j->p.top_logprobs * (size_t)j->cap_gen;
        j->lp = malloc(sizeof *j->lp * (size_t)j->cap_gen);
        j->lp_top = malloc(sizeof *j->lp_top * (k ? k : 1));
        j->lp_top_lp = malloc(sizeof *j->lp_top_lp * (k ? k : 1));
    }
    if (!j->toks || (p->n_bounds && !j->bounds) || (p->sampler.n_bias && !j->bias) || !j->gen ||
        (j->p.logprobs && (!j->lp || !j->lp_top || !j->lp_top_lp))) {
        job_free(j);
        return rp_errorf(RP_ERR_NOMEM, "backend: out of memory");
    }
    memcpy(j->toks, p->toks, sizeof *j->toks * (size_t)p->n);
    if (p->n_bounds) memcpy(j->bounds, p->bounds, sizeof *j->bounds * (size_t)p->n_bounds);
    if (p->sampler.n_bias) memcpy(j->bias, p->sampler.bias, sizeof *j->bias * (size_t)p->sampler.n_bias);
    if (p->grammar) {
        rp_status gst = rp_grammar_parse(p->grammar, p->grammar_root, &j->grammar);
        pthread_mutex_lock(&b->gmu);
        if (gst == RP_OK && !b->gvocab) gst = rp_grammar_vocab_new(b->m, &b->gvocab);
        pthread_mutex_unlock(&b->gmu);
        if (gst == RP_OK) gst = rp_grammar_state_new(j->grammar, b->gvocab, &j->gstate);
        if (gst == RP_OK && p->grammar_lazy)
            gst = rp_srv_lazy_new(b->m, j->gstate, p->grammar_format, p->grammar_think_open, &j->lazy);
        if (gst != RP_OK) {
            job_free(j);
            return gst;
        }
    }
    j->p.grammar = NULL;
    j->p.grammar_root = NULL;
    j->p.toks = j->toks;
    j->p.bounds = j->bounds;
    j->p.sampler.bias = j->bias;
    j->st.n_prompt = p->n;
    j->t_submit = rp_srv_now();
    atomic_init(&j->cancel, false);
    *out = j;
    return RP_OK;
}

rp_status rp_backend_submit(rp_backend *b, const rp_job_params *p, rp_job **out) {
    rp_job *j = NULL;
    RP_TRY(job_make(b, p, &j));
    rp_status st = b->ops->submit(b, j);
    if (st != RP_OK) {
        job_free(j);
        return st;
    }
    *out = j;
    return RP_OK;
}

rp_status rp_backend_submit_n(rp_backend *b, const rp_job_params *p, int32_t n, rp_job **out) {
    if (n == 1 || rp_backend_is_encoder(b)) return rp_backend_submit(b, p, out);   /* an encoder's says why not */
    for (int32_t i = 0; i < n && i < RP_BACKEND_MAX_N; i++) out[i] = NULL;
    if (n < 1 || n > RP_BACKEND_MAX_N)
        return rp_errorf(RP_ERR_INVALID_ARG, "backend: n = %d choices (1 to %d)", n, RP_BACKEND_MAX_N);
    if (!b->ops->submit_n)
        return rp_errorf(RP_ERR_UNSUPPORTED,
                         "n = %d: the %s backend (--parallel %d) generates one choice per request; n > 1 needs the "
                         "core backend (--parallel 1), which prefills the prompt once and forks it per choice",
                         n, b->ops->kind, b->cfg.parallel);
    if (p && p->session)
        return rp_errorf(RP_ERR_UNSUPPORTED, "n = %d with a session (reprise_session): a session holds one "
                                             "conversation, so one choice", n);
    rp_job *jobs[RP_BACKEND_MAX_N] = {0};
    rp_status st = RP_OK;
    for (int32_t i = 0; st == RP_OK && i < n; i++) {
        rp_job_params pi = *p;
        pi.sampler.seed = p->sampler.seed + (uint64_t)i;   /* each choice its own random stream */
        st = job_make(b, &pi, &jobs[i]);
    }
    rp_job *lead = jobs[0];
    if (st == RP_OK && !(lead->forks = malloc(sizeof *lead->forks * (size_t)(n - 1))))
        st = rp_errorf(RP_ERR_NOMEM, "backend: out of memory");
    if (st == RP_OK) {
        for (int32_t i = 1; i < n; i++) {
            lead->forks[i - 1] = jobs[i];
            jobs[i]->is_fork = true;
        }
        lead->n_forks = n - 1;
        st = b->ops->submit_n(b, lead);
    }
    if (st != RP_OK) {
        for (int32_t i = 0; i < n; i++)
            if (jobs[i]) job_free(jobs[i]);
        return st;
    }
    for (int32_t i = 0; i < n; i++) out[i] = jobs[i];
    return RP_OK;
}

rp_status rp_job_prompt(const rp_job *j, rp_prompt *p) {
    rp_prompt_clear(p);
    rp_status st = RP_OK;
    for (int32_t i = 0, from = 0; st == RP_OK && i <= j->p.n_bounds; i++) {
        const int32_t to = i < j->p.n_bounds ? j->bounds[i] : j->p.n;
        if (to > from && to <= j->p.n) {
            st = rp_prompt_add_tokens(p, j->toks + from, to - from, true);
            from = to;
        }
    }
    return st;
}

static void deadline_in(struct timespec *ts, double s) {
    clock_gettime(CLOCK_MONOTONIC, ts);
    if (s < 0) s = 0;
    double whole = floor(s);
    ts->tv_sec += (time_t)whole;
    ts->tv_nsec += (long)((s - whole) * 1e9);
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

static void cond_wait_until(rp_job *j, const struct timespec *ts) {
    /* the condvar uses CLOCK_REALTIME by default; convert the monotonic deadline */
    struct timespec now_m, now_r, abs;
    clock_gettime(CLOCK_MONOTONIC, &now_m);
    clock_gettime(CLOCK_REALTIME, &now_r);
    double left = (double)(ts->tv_sec - now_m.tv_sec) + (double)(ts->tv_nsec - now_m.tv_nsec) * 1e-9;
    if (left <= 0) return;
    double whole = floor(left);
    abs.tv_sec = now_r.tv_sec + (time_t)whole;
    abs.tv_nsec = now_r.tv_nsec + (long)((left - whole) * 1e9);
    if (abs.tv_nsec >= 1000000000L) {
        abs.tv_sec++;
        abs.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(&j->cv, &j->mu, &abs);
}

int32_t rp_job_wait(rp_job *j, int32_t have, double timeout_s, bool *done) {
    struct timespec ts;
    deadline_in(&ts, timeout_s);
    pthread_mutex_lock(&j->mu);
    while (j->n_gen <= have && !j->done) {
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (now.tv_sec > ts.tv_sec || (now.tv_sec == ts.tv_sec && now.tv_nsec >= ts.tv_nsec)) break;
        cond_wait_until(j, &ts);
    }
    int32_t n = j->n_gen;
    if (done) *done = j->done;
    pthread_mutex_unlock(&j->mu);
    return n;
}

int32_t rp_job_tokens(rp_job *j, int32_t from, rp_token *buf, int32_t cap) {
    pthread_mutex_lock(&j->mu);
    int32_t n = 0;
    if (from >= 0 && from < j->n_gen) {
        n = j->n_gen - from < cap ? j->n_gen - from : cap;
        memcpy(buf, j->gen + from, sizeof *buf * (size_t)n);
    }
    pthread_mutex_unlock(&j->mu);
    return n;
}

void rp_job_on_logits(void *user, const rp_token *hist, int32_t n_hist, float *logits, int32_t n_vocab) {
    rp_job *j = user;
    if (j->lazy) rp_srv_lazy_on_logits(j->lazy, hist, n_hist, logits, n_vocab);
    else if (j->gstate) rp_grammar_on_logits(j->gstate, hist, n_hist, logits, n_vocab);
    if (!j->ban_eog) return;
    const rp_backend *b = j->b;
    bool other = false;   /* banned unless the grammar left nothing else: its end still ends the reply */
    for (int32_t i = 0, e = 0; i < n_vocab && !other; i++) {
        if (e < b->n_eog && b->eog[e] == i) {
            e++;
            continue;
        }
        other = logits[i] > -INFINITY;
    }
    if (other)
        for (int32_t e = 0; e < b->n_eog; e++)
            if (b->eog[e] < n_vocab) logits[b->eog[e]] = -INFINITY;
}

void rp_job_on_chosen(void *user, rp_token chosen, const float *logits, int32_t n_vocab) {
    rp_job *j = user;
    if (!j->lp) return;
    const int32_t k = j->p.top_logprobs < n_vocab ? j->p.top_logprobs : n_vocab;
    for (int32_t i = k; i < j->p.top_logprobs; i++) j->pend_top[i] = -1, j->pend_top_lp[i] = NAN;
    j->pend_ok = rp_logprobs(logits, n_vocab, chosen, k, &j->pend_lp, j->pend_top, j->pend_top_lp) == RP_OK;
    j->pend_tok = chosen;
}

int32_t rp_job_logprobs(rp_job *j, int32_t from, int32_t cap, float *lp, rp_token *top, float *top_lp) {
    pthread_mutex_lock(&j->mu);
    int32_t n = 0;
    const size_t k = (size_t)j->p.top_logprobs;
    if (j->lp && from >= 0 && from < j->n_gen) {
        n = j->n_gen - from < cap ? j->n_gen - from : cap;
        memcpy(lp, j->lp + from, sizeof *lp * (size_t)n);
        if (k) {
            memcpy(top, j->lp_top + (size_t)from * k, sizeof *top * (size_t)n * k);
            memcpy(top_lp, j->lp_top_lp + (size_t)from * k, sizeof *top_lp * (size_t)n * k);
        }
    }
    pthread_mutex_unlock(&j->mu);
    return n;
}

void rp_job_cancel(rp_job *j) {
    if (!j) return;
    bool was = atomic_exchange(&j->cancel, true);
    pthread_mutex_lock(&j->mu);
    bool done = j->done;
    pthread_mutex_unlock(&j->mu);
    if (!was && !done) j->b->ops->cancel(j->b, j);
}

bool rp_job_wait_done(rp_job *j, double timeout_s) {
    struct timespec ts;
    deadline_in(&ts, timeout_s);
    pthread_mutex_lock(&j->mu);
    while (!j->done) {
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (now.tv_sec > ts.tv_sec || (now.tv_sec == ts.tv_sec && now.tv_nsec >= ts.tv_nsec)) break;
        cond_wait_until(j, &ts);
    }
    bool d = j->done;
    pthread_mutex_unlock(&j->mu);
    return d;
}

rp_job_finish rp_job_result(rp_job *j, rp_job_stats *st, char *err, size_t cap) {
    pthread_mutex_lock(&j->mu);
    rp_job_finish f = j->done ? j->finish : RP_JOB_RUNNING;
    if (st) *st = j->st;
    if (st) st->n_gen = j->n_gen;
    if (err && cap) snprintf(err, cap, "%s", j->err);
    pthread_mutex_unlock(&j->mu);
    return f;
}

bool rp_job_started(rp_job *j) {
    pthread_mutex_lock(&j->mu);
    bool s = j->started;
    pthread_mutex_unlock(&j->mu);
    return s;
}

void rp_job_release(rp_job *j) { rp_job_unref(j); }

void rp_job_mark_started(rp_job *j) {
    pthread_mutex_lock(&j->mu);
    j->started = true;
    j->st.queue_ms = (rp_srv_now() - j->t_submit) * 1e3;
    pthread_mutex_unlock(&j->mu);
}

bool rp_job_push(rp_job *j, rp_token t) {
    pthread_mutex_lock(&j->mu);
    bool ok = j->n_gen < j->cap_gen;
    if (ok) {
        if (j->n_gen == 0) j->st.ttft_ms = (rp_srv_now() - j->t_submit) * 1e3;
        if (j->lp) {
            const int32_t k = j->p.top_logprobs;
            const bool have = j->pend_ok && j->pend_tok == t;
            j->lp[j->n_gen] = have ? j->pend_lp : NAN;
            for (int32_t i = 0; i < k; i++) {
                j->lp_top[(size_t)j->n_gen * (size_t)k + (size_t)i] = have ? j->pend_top[i] : -1;
                j->lp_top_lp[(size_t)j->n_gen * (size_t)k + (size_t)i] = have ? j->pend_top_lp[i] : NAN;
            }
            j->pend_ok = false;
        }
        j->gen[j->n_gen++] = t;
        pthread_cond_broadcast(&j->cv);
    }
    pthread_mutex_unlock(&j->mu);
    return ok && !atomic_load(&j->cancel);
}

void rp_job_complete(rp_job *j, rp_job_finish why, const rp_job_stats *st, const char *err) {
    pthread_mutex_lock(&j->mu);
    if (!j->done) {
        if (st) {
            double ttft = j->st.ttft_ms, queue = j->st.queue_ms;
            j->st = *st;
            j->st.ttft_ms = ttft;
            if (!st->queue_ms) j->st.queue_ms = queue;
        }
        j->st.n_prompt = j->p.n;
        j->st.n_gen = j->n_gen;
        j->finish = why;
        if (err) snprintf(j->err, sizeof j->err, "%s", err);
        j->done = true;
        pthread_cond_broadcast(&j->cv);
    }
    pthread_mutex_unlock(&j->mu);
    rp_job_unref(j);
}
