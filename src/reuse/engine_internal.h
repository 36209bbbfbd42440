/* engine_internal.h — the reuse engine's private state (struct rp_reuse, placements, the loader thread), shared by
 * engine*.c: engine.c (create / free, per-call settings, prefill orchestration, analysis, calibration),
 * engine_place.c (moving cached KV into the session cache, the load pipeline), engine_match.c (lookup: what
 * the cache holds for a prompt), engine_commit.c (committing a prompt's chunks to the cache). */
#ifndef RP_REUSE_ENGINE_INTERNAL_H
#define RP_REUSE_ENGINE_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "reuse/engine.h"

/* one chunk's tokens [t0, t0 + n) to be placed at cells [cell0, ...) */
typedef struct placement {
    rp_chunk *ch;
    int32_t t0, n, cell0;
    bool unpin;               /* content / partial hits are unpinned once placed */
    bool failed;              /* its payload failed to load: the cells hold nothing usable */
} placement;

/* The load pipeline: a thread that places every placement's layer 0, then
 * layer 1, ..., publishing how many layers are complete; compute waits in the
 * context's layer hook until its layer is in place. */
typedef struct loader {
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool running, stop;
    uint64_t job, done;       /* job generations */
    _Atomic int32_t layers_done;
    _Atomic int32_t compute_layer;   /* highest layer compute has begun in this job (-1: none) */
    atomic_int failed;        /* placements whose payload failed to load or verify (this job) */
    rp_kv *kv;
    placement *pl;
    int32_t n_pl;
    double busy_ms;
    float *krow, *cs;         /* loader-owned scratch */
} loader;

/* what happened to each span of the last prompt, for commit */
typedef struct span_info {
    rp_chunk *prefix_chunk;   /* pinned exact prefix match, or NULL */
    bool exact;               /* its KV in the session cache is exact */
} span_info;

struct rp_reuse {
    const rp_model *m;
    rp_type kv_type;
    rp_reuse_params p;        /* the defaults */
    uint64_t salt;            /* model + KV type (+ LongRoPE's long factors); the store is bound to it */
    bool rope_long;           /* the caches of max_tokens cells use LongRoPE's long factors (rp_model_rope_long) */
    rp_reuse_params cur;      /* the current call's: p with its rp_reuse_opts applied (begin_call) */
    uint64_t cur_salt;        /* salt mixed with the call's cache namespace */
    int32_t max_tokens;
    rp_chunk_cache *cache;
    /* request-phase scratch, sized once for max_tokens */
    rp_chunk_span *spans;
    span_info *info;
    int32_t n_spans;
    rp_token *toks;           /* copy of the last prompt (commit needs it) */
    int32_t n_toks;
    bool pending;             /* spans await commit */
    /* the commit walk over the spans (rp_reuse_commit), resumable: a sliding-window cache commits the chunks a
     * prefill completes while their cells are still held (commit_step), the rest at rp_reuse_commit */
    struct {
        bool on;              /* a walk is under way (spans [0, i) done) */
        int32_t i;
        rp_chunk *parent, *held;
        bool linked, path_exact, stopped;
    } cm;
    bool early_commit;        /* the current prefill commits completed chunks as it goes (ring cache, persist) */
    uint8_t *kinds;           /* [max_tokens + pad] row kinds of the current batch */
    uint8_t *tok_kind;        /* [max_tokens] per prompt token: RP_ROW_REUSE or RP_ROW_NEW */
    rp_chunk **matched;       /* [max_tokens] prefix matches */
    rp_batch batch;
    rp_blend_ws ws;
    rp_segment *segs;
    rp_call *calls;
    rp_call *calls2;          /* naive plan (analysis) */
    float *krow;              /* [kv_dim] re-rotation scratch */
    float *cs;                /* [n_rot] */
    double ms_per_token;      /* running estimate of full-prefill cost per token */
    placement *pl;            /* [max_tokens] pending placements */
    int32_t n_pl;
    loader ld;
    bool async_job;           /* the current placements run on the loader thread */
    bool ring_deferred;       /* a ring cache's ring layers are placed by place_ring_range, not placements_begin */
    double wait_ms;           /* exposed wait of the current prefill */
    uint8_t *trace;           /* caller's [max_tokens] selection marks, or NULL */
    const float *qvec;        /* caller's query vector for the sub-chunk search, or NULL */
    int32_t qdim;
    rp_semantic *sem;         /* terms / embeddings of the prompt's new runs for the sub-chunk search, or NULL */
};

/* ---- internal functions shared by engine.c, engine_place.c, engine_match.c and engine_commit.c ---- */

/* engine.c: the clock, per-call settings */
double rp_reuse_now_ms(void);   /* CLOCK_MONOTONIC in milliseconds */
rp_status rp_reuse_check_kv(const rp_reuse *e, const rp_kv *kv);
rp_status rp_reuse_begin_call(rp_reuse *e, const rp_reuse_opts *o);

/* engine_place.c: the loader thread, placements */
rp_status rp_reuse_loader_start(rp_reuse *e);
void rp_reuse_loader_stop(rp_reuse *e);
void rp_reuse_placements_begin(rp_reuse *e, rp_ctx *c, rp_kv *kv);
void rp_reuse_placements_end(rp_reuse *e, rp_ctx *c, rp_reuse_stats *st);
void rp_reuse_place_ring_range(rp_reuse *e, rp_kv *kv, int32_t c0, int32_t c1);
void rp_reuse_add_placement(rp_reuse *e, rp_chunk *ch, int32_t t0, int32_t n, int32_t cell0, bool unpin);

/* engine_match.c: lookup */
void rp_reuse_resolve(rp_reuse *e, const rp_token *toks, int32_t n, rp_kv *kv, rp_reuse_stats *st, int32_t *P_out,
                      int32_t *nm_out, int32_t *first_approx);

/* engine_commit.c: the pending prompt, commits */
void rp_reuse_unpin_pending(rp_reuse *e);
bool rp_reuse_early_commit(const rp_reuse *e, const rp_kv *kv);
rp_status rp_reuse_commit_step(rp_reuse *e, const rp_kv *kv, int32_t limit);

#endif
