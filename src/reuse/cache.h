/* cache.h — the RAM pool of KV chunks (prefix tree, content hash, row-id table) over the optional flash store. */
#ifndef RP_REUSE_CACHE_H
#define RP_REUSE_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "reprise.h"
#include "kv/kv.h"
#include "reuse/chunk.h"
#include "store/store.h"

/* One cached chunk: its tokens and the K/V it had when computed, for every
 * layer (with a store attached, `id` is its database row id). Holders may read
 * every field of a pinned chunk from any thread; only the pool writes refs,
 * last_used and hits. K is post-RoPE at positions pos0 .. pos0 + n_tokens - 1 (the reuse
 * layer re-rotates it to new positions). The KV is exact as a continuation of
 * its prefix path (parent chain) and approximate anywhere else. */
typedef struct rp_chunk {
    uint64_t id;               /* unique within the cache, never reused */
    uint64_t hash;             /* content hash (rp_chunk_hash, salted) */
    uint64_t chain;            /* rp_chunk_chain(parent chain, hash) */
    uint64_t parent_id;        /* id of the prefix parent; 0 for a root chunk */
    int32_t n_tokens;
    rp_token *tokens;
    int32_t pos0;              /* RoPE position of the first token when computed */
    rp_type kv_type;
    size_t row_bytes;          /* bytes of one token's K (or V) row in one layer */
    int32_t n_layer;
    uint8_t *kv;               /* [n_layer][2][n_tokens][row_bytes]: K then V per layer */
    size_t kv_bytes;
    double recompute_ms;       /* measured cost to recompute (for cost-aware eviction later) */
    bool exact;                /* KV was computed exactly after its prefix path (full prefill, intact
                                  chain): only exact chunks serve prefix reuse; set by the reuse
                                  engine after insert (insert leaves it false) */
    /* bookkeeping (owned by the cache) */
    int32_t refs;              /* pins; a pinned chunk is never evicted */
    uint64_t last_used;        /* logical clock of the last hit or insert */
    uint64_t hits;
} rp_chunk;

static inline uint8_t *rp_chunk_k(const rp_chunk *c, int32_t layer) {
    return c->kv + (size_t)layer * 2 * (size_t)c->n_tokens * c->row_bytes;
}
static inline uint8_t *rp_chunk_v(const rp_chunk *c, int32_t layer) {
    return rp_chunk_k(c, layer) + (size_t)c->n_tokens * c->row_bytes;
}

typedef struct rp_cache_params {
    size_t budget_bytes;       /* RAM budget for chunk payloads + tokens; eviction keeps under it */
    int32_t n_layer;
    size_t row_bytes;
    rp_type kv_type;
    rp_evict_policy policy;    /* AUTO (0): LRU with no store attached, cost-aware once one is */
} rp_cache_params;

typedef struct rp_cache_stats {
    uint64_t n_chunks, bytes, inserts, evictions, prefix_hits, content_hits, misses;
    /* the flash tier (zero without a store) */
    uint64_t flash_hits;       /* lookups answered from flash (payload loaded into the pool) */
    uint64_t loads, load_bytes;/* chunks / payload bytes read from flash (demand + prefetch) */
    double load_ms;            /* time in demand loads on the caller's thread */
    uint64_t load_failures;    /* payloads that failed to load or verify (missing / short file, read error,
                                  checksum): misses, never used; the rows are deleted from flash */
    uint64_t prefetched, prefetch_used;   /* chunks prefetched / of those, later hit */
    uint64_t dirty, dirty_bytes;          /* chunks (bytes) not yet on flash */
    uint64_t written, write_bytes, write_batches;
    double write_ms;           /* time in write transactions (background, or the caller's in sync mode) */
    uint64_t write_failures, dropped_dirty;   /* failed writes; dirty chunks evicted before being written */
    uint64_t transient, transient_bytes;      /* chunks held outside the budget (over-budget loads / inserts) */
    uint64_t disk_bytes, disk_evictions;      /* store size (last measured) / rows evicted from flash */
    double reload_ms_per_mib;  /* flash read time per MiB the RAM eviction cost uses: measured (EWMA over demand,
                                  async and prefetch loads) once reload_measured, rp_pool_params's default before */
    bool reload_measured;
    bool store_damaged;        /* SQLite called the store's database corrupt: it is read-only from then on */
    uint64_t indexed;          /* chunks given a semantic index by the indexer (rp_chunk_cache_set_indexer) */
    uint64_t index_failures;   /* chunks the indexer failed (written without terms / vector) */
    uint64_t index_batches;    /* indexer calls */
    double index_ms;           /* time in the indexer (the writer's thread): detokenizing, terms, embedding */
    uint64_t known_bad;        /* rows that failed to load or verify: never used again by this pool */
} rp_cache_stats;

typedef struct rp_chunk_cache rp_chunk_cache;

rp_status rp_chunk_cache_create(rp_cache_params p, rp_chunk_cache **out);
void rp_chunk_cache_free(rp_chunk_cache *c);   /* all chunks must be unpinned */

/* Longest prefix match: walks spans[0..n) and, for each, finds the child of
 * the previously matched chunk (root for i = 0) whose tokens equal the span's
 * tokens (hash lookup by chain, then token comparison and parent id check).
 * Stops at the first miss. Matched chunks are pinned and written to out[];
 * returns the number matched. Also counts hits and refreshes LRU state. */
int32_t rp_chunk_cache_match_prefix(rp_chunk_cache *c, const rp_token *toks, const rp_chunk_span *spans,
                                    int32_t n_spans, rp_chunk **out);

/* Partial continuation: among the children of `parent` (NULL = root chunks),
 * the one sharing the longest common token prefix with toks[0..n); returns it
 * pinned with *n_common set (0 and NULL if none shares a token). Lets a prompt
 * that diverges mid-chunk reuse the matching head of the cached chunk. */
rp_chunk *rp_chunk_cache_match_partial(rp_chunk_cache *c, const rp_chunk *parent, const rp_token *toks, int32_t n,
                                       int32_t *n_common);

/* The child of `parent` (NULL: a root chunk) whose tokens are exactly the
 * span's (its edge in the prefix tree), from RAM or flash; pinned, or NULL.
 * With async loading a flash hit may still be arriving: wait for its layers
 * before reading or overwriting its payload. */
rp_chunk *rp_chunk_cache_find_child(rp_chunk_cache *c, const rp_chunk *parent, const rp_token *toks,
                                    const rp_chunk_span *span);

/* Content lookup (non-prefix reuse): any chunk with these tokens, whatever its
 * prefix (the most recently used if several). Pinned, or NULL. */
rp_chunk *rp_chunk_cache_find(rp_chunk_cache *c, const rp_token *toks, const rp_chunk_span *span);

/* Inserts a chunk whose K/V sit in `kv` cells [cell0, cell0 + span->len)
 * (copied, all layers) and whose parent in the prefix tree is `parent` (NULL:
 * a root chunk, i.e. the prompt starts with it). If an identical chunk (same
 * parent and tokens) exists, it is refreshed instead. Evicts unpinned chunks
 * (policy order) to stay within budget; a chunk that does not fit (larger than
 * the budget, or the rest is pinned) is not cached (returns RP_OK with *out
 * NULL) — with a store attached it is still returned, held outside the budget
 * until written to flash (up to min(budget / 20, transient_max) bytes of
 * such chunks and over-budget flash loads together; see rp_cache_transient_allow
 * in cache.c). On success *out (if out != NULL) is the chunk, pinned. Lookups and inserts may
 * read flash on the calling thread; nothing here waits for the writer except
 * pinning a chunk whose payload it is copying at that moment. */
rp_status rp_chunk_cache_insert(rp_chunk_cache *c, const rp_chunk *parent, const rp_token *toks,
                                const rp_chunk_span *span, const rp_kv *kv, int32_t cell0, double recompute_ms,
                                rp_chunk **out);

void rp_chunk_unpin(rp_chunk_cache *c, rp_chunk *ch);

/* Drops every unpinned chunk (returns bytes freed) / evicts down to `bytes`. */
size_t rp_chunk_cache_clear(rp_chunk_cache *c);
size_t rp_chunk_cache_evict_to(rp_chunk_cache *c, size_t bytes);

rp_cache_stats rp_chunk_cache_stats(const rp_chunk_cache *c);

/* Iteration (for persistence): calls fn for every chunk; stop early by returning false. */
void rp_chunk_cache_foreach(rp_chunk_cache *c, bool (*fn)(void *user, rp_chunk *ch), void *user);

/* ---- the flash tier ------------------------------------------------------
 *
 * With a store attached the cache is the RAM pool of a two-tier store:
 * lookups search RAM, then flash (a flash hit loads the payload into the
 * pool, verifying its checksums; a failure is a miss and the row is removed);
 * inserts enter the pool dirty and a background writer persists them in
 * batched transactions when the engine is not busy; a prefetcher moves hot
 * chunks (locality: recency, frequency, co-access, prefix continuations of
 * recently used chunks) from flash to RAM while I/O is idle; eviction in both
 * tiers is by locality x cost (see cache_internal.h). All of this is
 * thread-safe; the public functions may be called from any thread.
 *
 * Contract for callers that modify a chunk (payload, pos0, exact): only while
 * holding a pin on it. The pool detects an exact/pos0 change when the last pin
 * is released and rewrites the chunk; other payload edits must be reported
 * with rp_chunk_cache_mark_modified. */

typedef struct rp_pool_params {
    rp_evict_policy policy;     /* AUTO = COST */
    double half_life;           /* locality half-life, in accesses (pool clock ticks); default 256 */
    double reload_ms_per_mib;   /* RAM eviction cost of a clean prefix chunk: flash read time per MiB (default 0.5),
                                   until 4 loads (of >= 16 KiB) are timed: then the measured rate */
    double reload_ms_fixed;     /* + per-chunk latency (default 0.05) */
    double nonprefix_factor;    /* cost share of a non-prefix (inexact) chunk's reload: its load overlaps compute
                                   (default 0.05) */
    double cascade_weight;      /* flash eviction: weight of descendants' recompute cost (default 1) */
    uint64_t disk_budget;       /* bytes of flash (db + wal + files); 0 = unlimited; kept within by the writer */
    bool sync_persist;          /* ablation: write a chunk on the caller's thread when its last pin is released */
    bool no_prefetch;           /* ablation: no prefetch thread (and no warm start) */
    bool async_load;            /* flash hits return at once and load on the loader thread layer by layer;
                                   callers must rp_chunk_cache_wait_layer before reading a layer */
    double prefetch_threshold;  /* prefetch chunks whose locality R >= this (default 0.25) */
    double prefetch_fraction;   /* prefetch fills at most this share of the RAM budget (default 0.5) */
    double prefetch_credit;     /* chunks the prefetcher may load ahead of demand (default 16): each costs one
                                   credit, each that is then hit earns 4 back, every 8 accesses earn one; so a
                                   prefetcher whose guesses miss slows to a trickle instead of evicting useful
                                   chunks. The warm start after attach may load 4x the credit. <= 0: no
                                   limit */
    uint32_t write_delay_ms;    /* the writer waits for this much quiet after an insert (default 20) */
    uint64_t batch_bytes;       /* payload bytes per write transaction (default 32 MiB) */
    size_t transient_max;       /* bytes of chunks held outside the RAM budget (default 64 MiB); never more
                                   than budget / 20 (budget 0: no RAM tier, up to this) */
} rp_pool_params;

rp_pool_params rp_pool_default_params(void);

/* Attaches a store (the cache takes ownership, also on failure, and closes
 * it on detach / free). A read-only store gives a reader pool: lookups hit
 * flash, nothing is written or prefetched. Binds it to the model `salt` with this cache's
 * geometry — a store written for another model is never read for this one —
 * opens connections for the background threads, starts them and (unless
 * no_prefetch) prefetches the hottest stored chunks. Must be called before
 * the first insert (ids are the store's row ids). */
rp_status rp_chunk_cache_attach_store(rp_chunk_cache *c, rp_store *s, uint64_t salt, const char *model_name,
                                      const rp_pool_params *p);
/* Flushes, stops the threads, persists locality and co-access state, closes the store. */
rp_status rp_chunk_cache_detach_store(rp_chunk_cache *c);
bool rp_chunk_cache_has_store(const rp_chunk_cache *c);

/* Waits until every unpinned dirty chunk is written (or failed). RP_ERR_IO if some write failed. */
rp_status rp_chunk_cache_flush(rp_chunk_cache *c);

/* The engine's compute phases (prefill; nested calls count): the writer and
 * prefetcher start no new I/O while busy (a running batch finishes). */
void rp_chunk_cache_busy(rp_chunk_cache *c, bool busy);

/* async_load: waits until layer `layer` of a pinned chunk is in RAM and
 * verified. RP_ERR_FORMAT if its load failed (the chunk must not be used; it
 * is dropped when unpinned). Returns at once for chunks already loaded. */
rp_status rp_chunk_cache_wait_layer(rp_chunk_cache *c, const rp_chunk *ch, int32_t layer);

/* Reports a payload edit of a pinned chunk: it is rewritten to flash. */
void rp_chunk_cache_mark_modified(rp_chunk_cache *c, rp_chunk *ch);

/* Flash eviction down to `target` bytes (cost-aware; pinned chunks kept). */
rp_status rp_chunk_cache_evict_disk(rp_chunk_cache *c, uint64_t target, uint64_t *freed);

/* Runs one prefetch round now and waits for it (tests, benchmarks). */
void rp_chunk_cache_prefetch_sync(rp_chunk_cache *c);

/* Sub-chunk candidates from flash (keywords + suffix-automaton LCS), see rp_store_find_subchunks. */
rp_status rp_chunk_cache_find_subchunks(rp_chunk_cache *c, const rp_token *toks, int32_t n, int32_t min_len,
                                        rp_subchunk_match *out, int32_t cap, int32_t *n_out);

/* The same with the caller's dense query vector: the k_vec chunks nearest to
 * it by cosine join the keyword candidates (see rp_store_find_subchunks_vec). */
rp_status rp_chunk_cache_find_subchunks_vec(rp_chunk_cache *c, const rp_token *toks, int32_t n, int32_t min_len,
                                            const float *qvec, int32_t dim, int32_t k_vec, rp_subchunk_match *out,
                                            int32_t cap, int32_t *n_out);
/* Stores the caller's dense vector for chunk `id` (e.g. its RAG embedding).
 * The vector is kept by chunk id and dropped with the chunk's row; it only
 * matches once the chunk is on flash (rp_chunk_cache_flush). */
rp_status rp_chunk_cache_put_vector(rp_chunk_cache *c, uint64_t id, const float *v, int32_t dim);

/* The general sub-chunk search (terms, several query vectors, see rp_store_find_subchunks_q). */
rp_status rp_chunk_cache_find_subchunks_q(rp_chunk_cache *c, const rp_token *toks, int32_t n, const rp_subchunk_query *q,
                                          rp_subchunk_match *out, int32_t cap, int32_t *n_out);

/* The semantic index of chunks written to flash: `fn` is called by the
 * writer (the background thread; the caller's with sync_persist), without
 * any lock held, once per write batch with the chunks written for the first
 * time (toks[i][0..n[i])), and fills out[i] (malloc'd terms and vector, freed
 * by the writer after the write; a chunk it leaves empty is still
 * term-indexed with no terms; one it fails gets no index). Chunks rewritten
 * under their id (exact / pos0 changes) keep what they had. Set it before
 * attaching the store; NULL: no semantic index (chunks get keywords only). */
typedef rp_status (*rp_chunk_indexer)(void *user, const rp_token *const *toks, const int32_t *n, int32_t n_chunks,
                                      rp_store_index *out);
void rp_chunk_cache_set_indexer(rp_chunk_cache *c, rp_chunk_indexer fn, void *user);

/* A pinned chunk by id (RAM, else flash); NULL if absent. For sub-chunk matches. */
rp_chunk *rp_chunk_cache_get(rp_chunk_cache *c, uint64_t id);

/* Locality R(c) of a chunk now (tests, ls). */
double rp_chunk_cache_locality(rp_chunk_cache *c, const rp_chunk *ch);

#endif /* RP_REUSE_CACHE_H */
