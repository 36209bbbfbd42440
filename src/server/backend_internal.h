/* backend_internal.h — shared state of the backends (core, sched) and the job channel between a backend and a request. */
#ifndef RP_SERVER_BACKEND_INTERNAL_H
#define RP_SERVER_BACKEND_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>

#include "server/backend.h"

struct rp_job {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int refs;                    /* backend + consumer (mu) */
    rp_backend *b;

    /* parameters (owned copies) */
    rp_grammar *grammar;         /* parsed from p.grammar, NULL: none */
    rp_grammar_state *gstate;    /* its position, fed through rp_job_on_logits (the backends' hook) */
    struct rp_srv_lazy *lazy;    /* p.grammar_lazy: the trigger watch over gstate, or NULL */
    bool ban_eog;                /* core: rp_job_on_logits bans end-of-generation tokens (ignore_eos; the
                                    scheduler does it itself) */
    rp_job_params p;
    rp_token *toks;
    int32_t *bounds;
    rp_logit_bias *bias;

    /* output (mu): gen[0..n_gen) */
    rp_token *gen;
    int32_t n_gen, cap_gen;      /* cap = max_tokens + 1 */
    /* log-probabilities (p.logprobs), beside gen[] (mu), allocated at submit: lp[cap_gen],
     * lp_top / lp_top_lp[cap_gen * p.top_logprobs]; the last chosen token's, computed by rp_job_on_chosen on the
     * backend's thread and stored by the push of that token */
    float *lp, *lp_top_lp;
    rp_token *lp_top;
    bool pend_ok;
    rp_token pend_tok;
    float pend_lp, pend_top_lp[RP_LOGPROBS_MAX_TOP];
    rp_token pend_top[RP_LOGPROBS_MAX_TOP];
    bool started, done;
    rp_job_finish finish;
    char err[256];
    rp_job_stats st;
    double t_submit;

    _Atomic bool cancel;

    /* backend-private */
    rp_job *next;                /* core: queue link */
    int64_t sched_id;            /* sched: the session running it */
    bool ephemeral;              /* sched: the session is freed after the job */
    bool commit_after;           /* sched: the batch computed (part of) the prompt: cache its chunks after the turn */
    bool commit_exact;           /* ... as exact KV (nothing before them was reused approximately) */
    int32_t exact_head;          /* sched: after the job, cells [0, exact_head) of its sequence are exactly what a
                                    plain prefill computes (INT32_MAX: all of them) */
    rp_prompt *prompt;           /* sched: the prompt with its pieces, for the engine (built by the loop) */
    rp_job **forks;              /* core, sched: the other choices of an n > 1 request, generated from forks of this job's
                                    prefilled prompt (the backend's references to them, [n_forks]), or NULL */
    int32_t n_forks;
    bool is_fork;                /* one of those: its prompt is counted (prefilled) by the job that owns it */
    bool fork_wait;              /* sched: one of those, waiting for its lead's prompt to be computed (backend mu) */
};

/* A backend implementation. */
typedef struct rp_backend_ops {
    const char *kind;
    rp_status (*start)(rp_backend *b);
    void (*stop)(rp_backend *b);                       /* cancel everything, join the thread, free impl */
    rp_status (*submit)(rp_backend *b, rp_job *j);     /* takes the backend's reference on success */
    /* n > 1 choices: j holds the other choices' jobs in j->forks (their backend references); NULL: unsupported */
    rp_status (*submit_n)(rp_backend *b, rp_job *j);
    void (*cancel)(rp_backend *b, rp_job *j);
    rp_status (*session_create)(rp_backend *b, rp_bk_session **out);
    void (*session_free)(rp_backend *b, rp_bk_session *s);
    void (*session_suspend)(rp_backend *b, rp_bk_session *s);
    int32_t (*session_resident)(rp_backend *b, rp_bk_session *s);
    void (*stats)(rp_backend *b, rp_backend_stats *out);
    rp_status (*flush)(rp_backend *b);
} rp_backend_ops;

struct rp_backend {
    rp_backend_config cfg;
    rp_model *m, *dm;
    int32_t n_ctx;
    const rp_backend_ops *ops;
    void *impl;
    rp_grammar_vocab *gvocab;     /* the vocabulary trie for grammar jobs (built by the first, under gmu) */
    rp_token *eog;                /* the vocabulary's end-of-generation ids, ascending (ignore_eos) */
    int32_t n_eog;
    pthread_mutex_t gmu;
};

extern const rp_backend_ops rp_backend_core_ops;
extern const rp_backend_ops rp_backend_sched_ops;
extern const rp_backend_ops rp_backend_encoder_ops;   /* an embedding model: holds it, generates nothing */

double rp_srv_now(void);   /* monotonic seconds */

/* Called by backends. */
void rp_job_mark_started(rp_job *j);
/* Appends a generated token and wakes the consumer. Returns false when the
 * job was cancelled or the buffer is full (the backend then ends it). */
bool rp_job_push(rp_job *j, rp_token t);
/* Ends the job (stats copied) and drops the backend's reference. */
void rp_job_complete(rp_job *j, rp_job_finish why, const rp_job_stats *st, const char *err);
void rp_job_unref(rp_job *j);
/* rp_logits_fn (user: the job) of a job with a grammar or ban_eog: the grammar's mask (from the start, or lazily
 * from a tool-call opening), then with ban_eog the end-of-generation tokens banned unless nothing else is left. */
void rp_job_on_logits(void *user, const rp_token *hist, int32_t n_hist, float *logits, int32_t n_vocab);
/* rp_chosen_fn (user: the job): the chosen token's log-probabilities, for the push of that token. */
void rp_job_on_chosen(void *user, rp_token chosen, const float *logits, int32_t n_vocab);

/* Replaces p with the job's prompt, each of its pieces (bounds) a segment: the engine chunks at them. */
rp_status rp_job_prompt(const rp_job *j, rp_prompt *p);

/* The backends' public engine: the backend's threads, context, KV type, reuse defaults and RAM budget,
 * and the flash store when cfg.cache_dir is set (its notice printed). close flushes (a failure printed) and frees;
 * snapshot copies the cache figures as they are now (any thread; a no-op without an engine). */
rp_status rp_backend_engine_open(const rp_backend *b, rp_engine **out);
void rp_backend_engine_close(rp_engine *e);
void rp_backend_engine_snapshot(rp_engine *e, rp_backend_stats *st);
#endif /* RP_SERVER_BACKEND_INTERNAL_H */
