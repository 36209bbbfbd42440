/* grammar_cache.h — allowed-token masks shared by every sequence of a model: keyed by the compiled grammar's
 * fingerprint and a canonical form of a matcher state, sized by memory (least recently used out), thread-safe.
 * One lives in each rp_grammar_vocab (grammar_match.c); a state's mask is built by a trie walk only the first
 * time any sequence of any request with the same grammar reaches that state. */
#ifndef RP_GRAMMAR_CACHE_H
#define RP_GRAMMAR_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct rp_gcache rp_gcache;

/* words: uint64_t words of one mask (n_vocab / 64 rounded up); cap_bytes: the budget (0: nothing is kept). */
rp_gcache *rp_gcache_new(int32_t words, size_t cap_bytes);
void rp_gcache_free(rp_gcache *c);
/* Changes the budget (evicting down to it). */
void rp_gcache_set_cap(rp_gcache *c, size_t cap_bytes);
/* Copies the mask stored under (h, key[0..len)) into bits and returns true; false when absent. */
bool rp_gcache_get(rp_gcache *c, uint64_t h, const int32_t *key, int32_t len, uint64_t *bits);
/* Stores a copy of bits under (h, key[0..len)) (no-op when the budget cannot hold one entry). An evicted
 * entry's buffers are reused: once the cache is full, a store allocates only for a longer key. */
void rp_gcache_put(rp_gcache *c, uint64_t h, const int32_t *key, int32_t len, const uint64_t *bits);

typedef struct rp_gcache_stats {
    uint64_t hits, misses, evictions;
    size_t bytes, entries, cap_bytes;
    double build_ms;   /* time spent building masks by trie walks (added by rp_gcache_note_build) */
    uint64_t checks, rejected;
    uint64_t busy_ns;   /* time inside the grammar's per-token calls (rp_gcache_note_time) */
} rp_gcache_stats;
void rp_gcache_stats_get(rp_gcache *c, rp_gcache_stats *out);
void rp_gcache_note_build(rp_gcache *c, double ms);
void rp_gcache_stats_reset(rp_gcache *c);
/* Counts one single-token check (rp_grammar_allows and the like); rejected: the grammar refused the token. */
void rp_gcache_note_check(rp_gcache *c, bool rejected);
/* Adds ns nanoseconds to the time spent in per-token grammar calls (lock-free). */
void rp_gcache_note_time(rp_gcache *c, uint64_t ns);

#endif
