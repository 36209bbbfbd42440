/* backend.h — the generation backend behind the HTTP layer: jobs (prompt in, tokens out, cancellable) and KV sessions. */
#ifndef RP_SERVER_BACKEND_H
#define RP_SERVER_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "reprise.h"

/* Two implementations sit behind this interface:
 *   core  (--parallel 1): one generation at a time on a worker thread over
 *         the reuse engine (prefix / non-prefix / blend reuse, documents as
 *         chunk boundaries, per-request cache mode, the flash store), with a
 *         bounded FIFO queue in front;
 *   sched (--parallel N > 1): the multi-session scheduler (continuous
 *         batching of N sequences, speculative decoding, suspend-and-yield of
 *         sessions waiting on a tool) driven by a loop thread.
 *
 * Threading: every function may be called from any thread (HTTP handler
 * threads); the backend's own thread runs the model. A job is shared by the
 * backend and one consumer (the HTTP request) and freed when both released it. */

typedef struct rp_backend_config {
    const char *model_path;
    const char *draft_path;     /* draft model for speculative decoding (sched backend), or NULL */
    const char *chat_template;  /* --chat-template: a built-in's name or a Jinja file, or NULL (the model's own) */
    rp_progress_fn load_progress;   /* NULL, or the model loads' progress (rp_model_params.progress) */
    void *load_progress_user;
    int32_t n_ctx;              /* tokens per sequence (0: min(4096, the model's)) */
    int n_threads;
    int parallel;               /* sequences decoded together; 1 selects the core backend; 0: auto
                                   (rp_srv_auto_parallel, once the model is loaded) */
    int queue_max;              /* jobs waiting beyond the running ones; more is RP_ERR_FULL (429) */
    int max_sessions;           /* reprise_session KV sessions kept at once */
    const char *cache_dir;      /* the chunk cache's flash store directory, or NULL (RAM only) */
    size_t cache_ram_mb;        /* RAM budget of the chunk cache */
    double cache_disk_gb;       /* flash budget of the store (0: unlimited) */
    const char *embed_model;    /* the store's embedding model (rp_engine_params.embed_model), or NULL */
    int32_t embed_dim;          /* its embeddings' components kept (0: all) */
    int reuse_mode;             /* default rp_reuse_mode for requests (blend) */
    float recompute_ratio;      /* default blend ratio */
    rp_kv_type kv_type;
    bool swa_full;              /* sliding-window layers keep every cell (rp_engine_params.swa_full) */
    bool speculate;             /* sched: speculative decoding (n-gram drafter, or the draft model) */
    double kv_limit_mb;         /* sched: KV in use above which sessions waiting on a tool result are
                                   demoted (compressed in memory) until resumed (0: never) */
    int32_t n_gpu_layers;       /* the model's GPU offload (rp_model_params.n_gpu_layers; -1 default) */
    const char *gpu_device;     /* rp_model_params.gpu_device, or NULL */
} rp_backend_config;

rp_backend_config rp_backend_default_config(void);

typedef struct rp_backend rp_backend;

/* Loads the model(s) and starts the backend's thread. Errors name the file. */
rp_status rp_backend_create(const rp_backend_config *cfg, rp_backend **out);
/* Cancels every job, stops the thread, flushes and detaches the store, frees. */
void rp_backend_free(rp_backend *b);
const rp_model *rp_backend_model(const rp_backend *b);
int32_t rp_backend_n_ctx(const rp_backend *b);
uint64_t rp_backend_kv_bytes_per_token(const rp_backend *b);   /* K + V of one token, every layer */
const char *rp_backend_kind(const rp_backend *b);   /* "core" or "sched" */
int rp_backend_parallel(const rp_backend *b);        /* sequences decoded together (auto resolved) */

/* `--parallel auto` (llama-server's -np auto is 4 slots): min(4, one slot per two cores, as many sequences at
 * the full context as half the available memory holds), at least 1. mem_available 0 (unknown): no memory bound. */
int rp_srv_auto_parallel(int cores, uint64_t mem_available, uint64_t kv_bytes_per_seq);
/* Writes dirty cached chunks to the store (no-op without one). */
rp_status rp_backend_flush(rp_backend *b);

/* ---- sessions: a sequence whose KV stays resident between jobs ---- */

typedef struct rp_bk_session rp_bk_session;

/* RP_ERR_FULL when the backend cannot hold another. */
rp_status rp_backend_session_create(rp_backend *b, rp_bk_session **out);
/* Only when no job of the session is running (the session table ensures it). */
void rp_backend_session_free(rp_backend *b, rp_bk_session *s);
/* The session's turn ended in a tool call: it waits for the tool result
 * (sched: leaves the batch and yields its slot; core: nothing to release). */
void rp_backend_session_suspend(rp_backend *b, rp_bk_session *s);
/* Tokens resident in the session's KV (for tests and metrics). */
int32_t rp_backend_session_resident(rp_backend *b, rp_bk_session *s);

/* ---- jobs ---- */

typedef enum rp_job_finish {
    RP_JOB_RUNNING = 0,
    RP_JOB_EOG,          /* end-of-generation token */
    RP_JOB_LENGTH,       /* max_tokens */
    RP_JOB_CTX,          /* context full */
    RP_JOB_CANCELLED,
    RP_JOB_ERROR,
} rp_job_finish;

typedef struct rp_job_stats {
    int32_t n_prompt;
    int32_t n_prefix;        /* prompt tokens whose KV was reused as a prefix (cache prefix or session-resident) */
    int32_t n_prefix_exact;  /* of those, tokens whose KV is exactly a plain prefill's (the rest was written by
                                approximate reuse: blend / full at r < 1, in this or an earlier turn) */
    int32_t n_nonprefix;     /* reused from chunks cached elsewhere (re-rotated) */
    int32_t n_recomputed;    /* of those, recomputed past the check layer (blend) */
    int32_t n_computed;      /* prompt tokens computed from scratch */
    int32_t n_gen;
    double queue_ms, ttft_ms, prefill_ms, decode_ms;   /* ttft from submit */
    uint64_t drafted, accepted;   /* speculative decoding (sched) */
} rp_job_stats;

typedef struct rp_job_params {
    const rp_token *toks;           /* copied */
    int32_t n;
    const int32_t *bounds;          /* chunk boundaries (copied), may be NULL */
    int32_t n_bounds;
    rp_sampler_params sampler;      /* bias copied */
    int32_t max_tokens;             /* >= 0 */
    int reuse_mode;                 /* -1: backend default */
    float recompute_ratio;          /* < 0: default */
    bool persist;                   /* cache this prompt's chunks (default true) */
    const char *grammar;            /* GBNF the output must match (parsed into the job), NULL: none; both backends
                                       constrain with it (JSON mode, schemas and forced tool calls come as one) */
    const char *grammar_root;       /* its start rule (NULL: "root") */
    bool grammar_lazy;              /* the grammar applies only from the reply's first tool-call opening in
                                       grammar_format on (lazy_grammar.h: tool_choice auto with strict tools) */
    rp_chat_format grammar_format;
    bool grammar_think_open;        /* lazy, ChatML: the reply starts inside an opened <think> block */
    bool ignore_eos;                /* llama-server's: end-of-generation tokens are never sampled (unless the
                                       grammar allows nothing else), so the reply runs to max_tokens */
    rp_bk_session *session;         /* NULL: a one-off sequence */
    uint64_t cache_ns;              /* cache namespace (0: shared): the job reuses only KV cached by jobs of
                                       the same namespace (the server's per-API-key namespaces) */
    bool logprobs;                  /* each generated token's log-probability (of the model's raw logits) ... */
    int32_t top_logprobs;           /* ... and those of the top_logprobs (0..RP_LOGPROBS_MAX_TOP) most likely */
} rp_job_params;

typedef struct rp_job rp_job;

/* Queues a job. RP_ERR_FULL: the queue is full (answer 429); RP_ERR_RANGE:
 * the prompt plus max_tokens exceed the context. On success *out holds the
 * consumer's reference. */
rp_status rp_backend_submit(rp_backend *b, const rp_job_params *p, rp_job **out);

/* Queues n (1..RP_BACKEND_MAX_N) jobs of one prompt, the n choices of one request: the prompt is prefilled once
 * and each choice generated from a fork of it (rp_seq_fork: its KV copied), with its own sampler seed
 * (p->sampler.seed + i for out[i]) and its own tokens, finish and log-probabilities: the core backend one after
 * another (rp_seq_fork), the sched backend in the batch (rp_agents_fork once the first choice's prompt is
 * computed). n > 1 with a session is RP_ERR_UNSUPPORTED. Errors as
 * rp_backend_submit; on success out[0..n) hold the consumer's references (release each). */
#define RP_BACKEND_MAX_N 16
rp_status rp_backend_submit_n(rp_backend *b, const rp_job_params *p, int32_t n, rp_job **out);

/* Waits up to timeout_s for tokens beyond `have` or the end; returns the
 * tokens available now and sets *done when the job finished. */
int32_t rp_job_wait(rp_job *j, int32_t have, double timeout_s, bool *done);
/* Copies generated tokens [from, from + cap) that exist; returns the count. */
int32_t rp_job_tokens(rp_job *j, int32_t from, rp_token *buf, int32_t cap);
/* Asks the job to stop (a queued job is dropped at once). Idempotent. */
void rp_job_cancel(rp_job *j);
/* Waits (up to timeout_s) until the backend let go of the job. */
bool rp_job_wait_done(rp_job *j, double timeout_s);
/* Finish reason (RUNNING while not done), stats, and on ERROR the message. */
rp_job_finish rp_job_result(rp_job *j, rp_job_stats *st, char *err, size_t cap);
/* True once the job left the queue (its prefill started). */
bool rp_job_started(rp_job *j);
/* Log-probabilities of generated tokens [from, from + cap) that exist (p.logprobs): lp[i] (NAN when unknown),
 * and k = p.top_logprobs alternatives each in top[i * k ...], top_lp[i * k ...] (id -1: none). Returns the count. */
int32_t rp_job_logprobs(rp_job *j, int32_t from, int32_t cap, float *lp, rp_token *top, float *top_lp);
/* Drops the consumer's reference (cancel first if the result is unwanted). */
void rp_job_release(rp_job *j);

/* ---- metrics ---- */

typedef struct rp_backend_stats {
    int32_t queued, running;
    uint64_t jobs, prompt_tokens, gen_tokens;
    uint64_t reused_prefix, reused_prefix_exact, reused_nonprefix, recomputed, computed;   /* prompt tokens (see rp_job_stats) */
    double prefill_s, decode_s;           /* busy time (core); sched: target forward time split by rows */
    uint64_t drafted, accepted;
    int32_t sessions, sessions_waiting;
    uint64_t kv_bytes;                    /* KV resident in sessions */
    uint64_t kv_demotions, kv_restores;   /* sched: waiting sessions' KV demoted / restored (--kv-limit) */
    bool has_cache, has_store;
    uint64_t cache_chunks, cache_bytes, cache_evictions, cache_inserts;
    uint64_t store_bytes, store_evictions, store_written;
    uint64_t store_write_failures;        /* chunk writes to the store that failed (disk full, I/O) */
} rp_backend_stats;

void rp_backend_stats_get(rp_backend *b, rp_backend_stats *out);

/* The model is an encoder (bert, nomic-bert): an embedding model that serves /v1/embeddings only. */
bool rp_backend_is_encoder(const rp_backend *b);

#endif /* RP_SERVER_BACKEND_H */
