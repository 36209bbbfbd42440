/* cache.h — the RAM chunk cache: KV of prompt chunks indexed by a prefix tree (chained hashes) and by content hash. */
#ifndef RP_REUSE_CACHE_H
#define RP_REUSE_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "reprise.h"
#include "kv/kv.h"
#include "reuse/chunk.h"

/* One cached chunk: its tokens and the K/V it had when computed, for every
 * layer. K is post-RoPE at positions pos0 .. pos0 + n_tokens - 1 (the reuse
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
    size_t budget_bytes;       /* RAM budget for chunk payloads + tokens; LRU eviction keeps under it */
    int32_t n_layer;
    size_t row_bytes;
    rp_type kv_type;
} rp_cache_params;

typedef struct rp_cache_stats {
    uint64_t n_chunks, bytes, inserts, evictions, prefix_hits, content_hits, misses;
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

/* Content lookup (non-prefix reuse): any chunk with these tokens, whatever its
 * prefix (the most recently used if several). Pinned, or NULL. */
rp_chunk *rp_chunk_cache_find(rp_chunk_cache *c, const rp_token *toks, const rp_chunk_span *span);

/* Inserts a chunk whose K/V sit in `kv` cells [cell0, cell0 + span->len)
 * (copied, all layers) and whose parent in the prefix tree is `parent` (NULL:
 * a root chunk, i.e. the prompt starts with it). If an identical chunk (same
 * parent and tokens) exists, it is refreshed instead. Evicts unpinned LRU
 * chunks to stay within budget; a chunk larger than the budget is not cached
 * (returns RP_OK with *out NULL). On success *out (if out != NULL) is the
 * chunk, pinned. */
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

#endif /* RP_REUSE_CACHE_H */
