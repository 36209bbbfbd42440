/* engine.h — the reuse engine: prefill a prompt reusing cached KV (prefix tree, content hash, selective recompute). */
#ifndef RP_REUSE_ENGINE_H
#define RP_REUSE_ENGINE_H

#include <stdbool.h>
#include <stdint.h>

#include "reprise.h"
#include "kv/kv.h"
#include "model/forward.h"
#include "model/model.h"
#include "reuse/blend.h"
#include "reuse/cache.h"
#include "reuse/chunk.h"
#include "reuse/plan.h"
#include "reuse/semantic.h"

/* rp_reuse_mode and its names (rp_reuse_mode_name / _parse) are the public API's (reprise.h) */

typedef struct rp_reuse_params {
    rp_reuse_mode mode;
    float ratio;               /* r: share of reused tokens recomputed (blend; full uses it only at 1) */
    rp_blend_params blend;
    rp_chunk_params chunking;
    bool static_mode;          /* only two call shapes (L_P prefill, L_S recompute), padded */
    bool naive_schedule;       /* static mode: one call type per segment instead of the DP */
    rp_static_cfg static_cfg;
    size_t cache_bytes;        /* RAM budget of the chunk cache */
    bool pipeline;             /* place cached KV layer by layer on a loader thread while compute runs
                                  (default); false: place everything before computing */
    /* tests of the load pipeline: called on the loader thread once it has placed layer `layer` of every
     * chunk of the prefill and before it starts the next layer (NULL: none). */
    void (*on_layer_placed)(void *user, int32_t layer);
    void *on_layer_placed_user;
    int32_t subchunk_min;      /* full / blend with a store attached: runs of new tokens are searched
                                  for sub-chunks of stored chunks (keywords + LCS) of at least this many
                                  tokens, reused re-rotated like whole chunks; 0 = off (default 32) */
    int32_t kv_cells;          /* cells of the caches it fills (0: max_tokens): on a LongRoPE model, past the
                                  original context length their K rotate with the long factors, the chunks'
                                  hashes follow, and a cache on the other side is refused */
} rp_reuse_params;

rp_reuse_params rp_reuse_default_params(void);

typedef struct rp_reuse_stats {
    int32_t n_prompt;
    int32_t n_chunks;
    int32_t n_prefix;        /* tokens [0, n_prefix) whose KV came from the prefix tree (same tokens, same
                                positions): exact or approximate, see n_prefix_exact */
    int32_t n_prefix_exact;  /* of those, tokens from chunks an exact prefill wrote (bit-identical to computing
                                them); the rest were written by an approximate (full / blend, r < 1) run */
    int32_t n_nonprefix;     /* tokens whose KV came from a chunk cached elsewhere (re-rotated) */
    int32_t n_subchunk;      /* of those, tokens matched inside stored chunks (sub-chunk LCS) */
    int32_t n_recomputed;    /* of the non-prefix reused tokens, recomputed past the check layer */
    int32_t n_new;           /* tokens computed from scratch */
    int32_t n_computed_rows; /* rows through the model's first layer (incl. padding) */
    int32_t n_calls;         /* forward / recompute calls */
    int32_t n_pad;           /* padding rows (static mode) */
    double plan_ms;          /* predicted latency of the static plan (static mode) */
    double ttft_ms;          /* from the call to the last token's logits */
    double match_ms, load_ms, compute_ms;
    double semantic_ms;      /* of match_ms: the sub-chunk search's terms and query embeddings (rp_reuse_set_semantic) */
    double load_exposed_ms;  /* compute time spent waiting for the loader (pipeline) */
    uint64_t bytes_loaded;   /* KV bytes placed from the cache */
    int32_t n_load_failed;   /* cached chunks whose payload failed to load or verify: never used; the prompt
                                was prefilled again without them (they are deleted from the store) */
    int32_t n_attempts;      /* prefill attempts (1 unless a load failed) */
    int32_t n_exact_head;    /* the KV of tokens [0, n_exact_head) is exactly what a plain prefill computes; after
                                it, approximate (an approximate chunk, or reuse at r < 1, came first) */
} rp_reuse_stats;

typedef struct rp_reuse rp_reuse;

/* One engine per model and KV type; holds the chunk cache (RAM tier). */
rp_status rp_reuse_create(const rp_model *m, rp_type kv_type, int32_t max_tokens, rp_reuse_params p,
                          rp_reuse **out);
void rp_reuse_free(rp_reuse *e);
rp_chunk_cache *rp_reuse_cache(rp_reuse *e);
rp_reuse_params *rp_reuse_get_params(rp_reuse *e);
uint64_t rp_reuse_salt(const rp_reuse *e);
const rp_model *rp_reuse_model(const rp_reuse *e);
rp_type rp_reuse_kv_type(const rp_reuse *e);
/* While `mark` is set ([max_tokens] bytes, caller-owned; NULL to stop), each
 * prefill sets mark[t] = 1 for every reused token t that selective recompute
 * chose past the check layer (the final token excluded: it is always
 * computed), and 0 for the others. For `reprise plan --show-tokens`. */
void rp_reuse_trace_selection(rp_reuse *e, uint8_t *mark);
/* The highest layer the current prefill's compute has begun while the load
 * pipeline runs (-1 before layer 0): with on_layer_placed, tests see compute
 * move ahead of the loader. */
int32_t rp_reuse_compute_layer(const rp_reuse *e);

/* Dense vectors supplied by the caller (a RAG pipeline's embeddings), used
 * by the sub-chunk search of full / blend with a store attached:
 * rp_reuse_put_vector stores `v` for every cached chunk of toks[0..n) chunked
 * as one segment (a document committed before; chunks must have reached
 * flash, rp_chunk_cache_flush, to be searched), RP_ERR_NOT_FOUND when none is
 * cached; rp_reuse_set_query_vector makes the next prefills add the
 * RP_REUSE_VEC_K chunks nearest to `v` by cosine to the keyword candidates.
 * `v` stays the caller's and must outlive those prefills; NULL clears it. */
#define RP_REUSE_VEC_K 8
rp_status rp_reuse_put_vector(rp_reuse *e, const rp_token *toks, int32_t n, const float *v, int32_t dim);
void rp_reuse_set_query_vector(rp_reuse *e, const float *v, int32_t dim);
/* The semantic side of the sub-chunk search (reuse/semantic.h; NULL: none): each run of new tokens the search
 * looks up also brings its extracted terms and, without a caller's query vector, its embedding (one vector per
 * chunking.avg_len tokens), so the store proposes chunks sharing rare terms or nearest in embedding. The LCS
 * pass over the tokens still decides what is reused. `sem` stays the caller's and must outlive the engine's use. */
void rp_reuse_set_semantic(rp_reuse *e, rp_semantic *sem);

/* Per-call options: each field overrides the engine's default for one call
 * (rp_reuse_default_opts: none does). `ns` is the cache namespace: chunks
 * cached by calls with one namespace are never found by calls with another
 * (0 is the shared default), e.g. one per API key, so that cached_tokens and
 * timing tell a client nothing about another's prompts. A prefill's commit
 * uses the prefill's namespace. */
typedef struct rp_reuse_opts {
    int mode;          /* rp_reuse_mode, -1: the engine's */
    float ratio;       /* recompute ratio in [0, 1], < 0: the engine's */
    int select;        /* rp_select_kind, -1: the engine's */
    int static_mode;   /* 1 on, 0 off, -1: the engine's */
    uint64_t ns;       /* cache namespace, 0: shared */
    int persist;       /* 1: the caller commits this prefill's prompt (rp_reuse_commit), so a cache with
                          sliding-window ring layers may commit its chunks while prefilling, before they leave
                          the ring; 0 / -1 (default): not known, only rp_reuse_commit commits */
} rp_reuse_opts;

rp_reuse_opts rp_reuse_default_opts(void);

/* Prefills toks[0..n) into `kv` (cleared first; its n_ctx must hold n, plus
 * L_S or L_P padding cells in static mode), reusing cached KV per the mode,
 * and writes the last token's logits to `logits` [n_vocab]. `bounds` are
 * caller chunk boundaries (document / message starts; may be NULL). The
 * prompt's chunks are remembered for rp_reuse_commit. */
rp_status rp_reuse_prefill(rp_reuse *e, rp_ctx *c, rp_kv *kv, const rp_token *toks, int32_t n,
                           const int32_t *bounds, int32_t n_bounds, float *logits, rp_reuse_stats *st);
/* The same with per-call options (NULL: the engine's defaults). */
rp_status rp_reuse_prefill_opts(rp_reuse *e, const rp_reuse_opts *opts, rp_ctx *c, rp_kv *kv, const rp_token *toks,
                                int32_t n, const int32_t *bounds, int32_t n_bounds, float *logits, rp_reuse_stats *st);

/* Inserts the last prefilled prompt's chunks into the cache (copying their KV
 * out of `kv`, which must still hold the prompt's cells). Kept apart from
 * prefill so it runs after the first token, off the TTFT path. */
rp_status rp_reuse_commit(rp_reuse *e, const rp_kv *kv);

/* Caches the chunks of a prompt whose KV was computed elsewhere (the
 * scheduler's batch): cells [0, n) of `kv` must hold toks[0..n) at their own
 * positions. Chunks already on the cached exact prefix path are refreshed, the
 * others inserted, marked exact only when `exact` (the KV is what a plain
 * prefill gives, i.e. nothing before it was reused approximately). A no-op in
 * mode none. Replaces a pending prefill's commit. */
rp_status rp_reuse_commit_computed(rp_reuse *e, const rp_kv *kv, const rp_token *toks, int32_t n, const int32_t *bounds,
                                  int32_t n_bounds, bool exact);
rp_status rp_reuse_commit_computed_opts(rp_reuse *e, const rp_reuse_opts *opts, const rp_kv *kv, const rp_token *toks,
                                       int32_t n, const int32_t *bounds, int32_t n_bounds, bool exact);
/* Dry run: what rp_reuse_prefill would reuse and compute for this prompt,
 * without computing or touching any KV cache. Pointers are into the engine's
 * scratch and stay valid until its next call. */
typedef struct rp_reuse_analysis {
    int32_t n_tokens;
    int32_t n_prefix;                 /* tokens [0, n_prefix) reused exactly */
    const uint8_t *tok_kind;          /* [n_tokens], valid from n_prefix: RP_ROW_REUSE or RP_ROW_NEW */
    const rp_chunk_span *spans;
    int32_t n_spans;
    const rp_segment *segs;           /* prefix / reuse / new runs */
    int32_t n_segs;
    rp_call *dp_calls;                /* static plan by the DP */
    int32_t n_dp_calls;
    double dp_ms;
    rp_call *naive_calls;             /* one call type per segment */
    int32_t n_naive_calls;
    double naive_ms;
    int32_t n_recompute_dynamic;      /* reused tokens dynamic blend would recompute: ceil(r * reused) */
    rp_reuse_stats stats;             /* matching counts (no timing of compute) */
} rp_reuse_analysis;

rp_status rp_reuse_analyze(rp_reuse *e, const rp_token *toks, int32_t n, const int32_t *bounds, int32_t n_bounds,
                           rp_reuse_analysis *out);
rp_status rp_reuse_analyze_opts(rp_reuse *e, const rp_reuse_opts *opts, const rp_token *toks, int32_t n,
                                const int32_t *bounds, int32_t n_bounds, rp_reuse_analysis *out);

/* Calibration: measures per-call latency of plain prefill and of selective
 * recompute calls of `sizes` tokens (multiples of 32) on this context, picks
 * L_P and L_S with rp_calib_choose_shapes (sizes within 15% of the best
 * per-token latency; least predicted latency over the layout family), fills
 * *cal and sets the engine's static configuration from it. */
rp_status rp_reuse_calibrate(rp_reuse *e, rp_ctx *c, rp_kv *kv, const int32_t *sizes, int32_t n_sizes, int reps,
                             rp_calib *cal);

#endif /* RP_REUSE_ENGINE_H */
