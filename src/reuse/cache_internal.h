/* cache_internal.h — the chunk cache's private state (entries, the pool, its flash tier), shared by cache*.c. */
#ifndef RP_CACHE_INTERNAL_H
#define RP_CACHE_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "reuse/cache.h"
#include "reuse/siblings.h"
#include "store/store.h"

/* Design.
 *
 * Storage: each chunk is one aligned allocation holding an rp_centry (the
 * public rp_chunk first, then the links below), the KV payload
 * [n_layer][2][n_tokens][row_bytes] (64-byte aligned for SIMD loads), and the
 * tokens. Its accounted size is that whole allocation; the bucket arrays are
 * not counted against the budget.
 *
 * Indexes: four chained hash tables with intrusive doubly-linked bucket
 * lists (next / pprev, so unlinking is O(1)), all with the same power-of-two
 * bucket count, doubled when n_chunks would exceed it:
 *   - chain:   rp_chunk.chain -> chunks; the prefix-tree edge lookup.
 *   - content: rp_chunk.hash  -> chunks; non-prefix reuse (find).
 *   - kids:    (parent_id, first token) -> chunks; match_partial.
 *   - id:      rp_chunk.id -> chunk; the pool keyed by database row id.
 * Plus an intrusive list of all chunks in insertion order (foreach, rehash,
 * free). A hash is never trusted alone: every hit also compares the tokens
 * (and the parent id where the tree matters). Ids are never reused (with a
 * store they are its row ids, allocated upward from rp_store_next_id), so a
 * child whose parent was evicted keeps a parent_id that matches nothing.
 *
 * Eviction: unpinned, idle chunks sit in a binary min-heap on an eviction
 * key; pinning (or background I/O on the chunk) takes it out, the last unpin
 * puts it back. Keys:
 *   LRU:  the release sequence (a counter bumped whenever a chunk re-enters
 *         the heap), so recency is "last time anyone held it" — a chunk in
 *         use by a long request is not the first victim after it finishes.
 *   COST: log2(R(c) * C(c)), with the locality R(c) = heat * 2^-(age /
 *         half_life) (heat: accesses decayed on the pool's access clock;
 *         recency and frequency in one number) and C(c) the cost of losing
 *         the RAM copy: the reload time of a clean chunk on flash when it is
 *         prefix material (exact), a small share of it when not (non-prefix
 *         loads overlap compute), and the recompute cost of a chunk that is
 *         not on flash (dirty, or no store). log2 R = log2 heat + last_used /
 *         half_life - now / half_life, and the last term is the same for
 *         every chunk, so the key is fixed between accesses and a heap works.
 * Ties break by release sequence. pinned_bytes tracks the pinned share, so an
 * insert that cannot fit even after evicting every unpinned chunk is refused
 * without evicting (or, with a store, kept outside the budget as a transient
 * chunk until it is written).
 *
 * Threads and locks. One mutex `mu` guards every structure here. Lock order:
 * eng_mu (the connection lookups use) -> mu; the background threads own their
 * connections and take only mu. mu is never held across SQLite or payload
 * I/O: an I/O step marks its chunk (io_busy / loading, plus an internal pin
 * `ipins` that keeps it allocated and out of the heap), drops mu, does the
 * I/O, and retakes mu. A caller pinning a chunk the writer is reading waits
 * on io_cv for that one chunk (callers modify chunks only while pinned, so
 * the writer always reads a stable payload); nothing else ever waits on I/O.
 * Pinned chunks (refs > 0) and internally pinned ones are never freed.
 *
 * Threads (only with a store): the writer (dirty chunks -> flash in batched
 * transactions, locality updates, flash budget, removal of corrupt rows),
 * the prefetcher (flash -> RAM while idle), the loader (async_load demand
 * loads, layer-major). Each runs at nice +10 and does nothing while the
 * engine is busy (rp_chunk_cache_busy) except the loader, whose work the
 * engine is waiting for.
 *
 * Token arguments: `toks` is the whole prompt and spans index into it
 * (toks[span.begin .. span.begin + span.len)), for match_prefix, find and
 * insert alike; match_partial takes the tokens to continue with directly.
 *
 * Files: cache.c the pool (indexes, heap, pins, lookups, insert, eviction,
 * stats); cache_loader.c flash -> RAM on demand (load_row, flash_lookup), the
 * loader thread, known-bad rows and damage; cache_prefetch.c the locality
 * bookkeeping and the prefetcher thread; cache_flash.c the writer thread,
 * flush, attach / detach and disk eviction. */

typedef struct rp_centry rp_centry;
struct rp_centry {
    rp_chunk ch;                       /* first: rp_chunk * <-> rp_centry * */
    rp_centry *chain_next, **chain_pprev;
    rp_centry *hash_next, **hash_pprev;
    rp_centry *id_next, **id_pprev;
    rp_centry *all_prev, *all_next;    /* every indexed chunk, in insertion order */
    rp_centry *dirty_prev, *dirty_next;/* linked while dirty */
    rp_centry *load_next;              /* loader queue */
    size_t bytes;                      /* accounted size (the whole allocation) */
    int32_t heap_idx;                  /* -1 when not in the heap */
    int32_t ipins;                     /* internal pins: writer, loader, foreach, waiting pinners */
    double heat;                       /* accesses, decayed to last_used */
    double key;                        /* eviction key while in the heap */
    uint64_t seq;                      /* release sequence (LRU key, tie-break) */
    bool indexed;                      /* in the indexes (false: transient, or dropped while held) */
    bool transient;                    /* outside the budget: freed when unpinned (and written) */
    bool dirty;                        /* not yet on flash */
    bool on_flash;                     /* a row for this id exists */
    bool io_busy;                      /* the writer is reading its payload */
    bool modified;                     /* edited while being written: write again */
    bool write_failed;                 /* its last write failed: not retried until modified */
    bool prefetched;                   /* loaded by the prefetcher and not hit since */
    bool touched;                      /* locality changed since it was last synced to flash */
    bool failed;                       /* async load failed */
    bool mapped;                       /* allocated with mmap (large chunks) */
    bool w_exact;                      /* exact / pos0 as last written (re-dirty on change) */
    int32_t w_pos0;
    int32_t layers_ready;              /* async load progress; n_layer when complete */
    rp_store_chunk *meta;              /* row metadata while loading (async) */
};

#define CO_CAP 4096                    /* co-access table entries (power of two) */
#define RECENT 16                      /* recently accessed ids remembered for prefetch and co-access */
#define CO_WINDOW 4                    /* an access counts as co-access with the previous 4 */

typedef struct co_ent {
    uint64_t a, b;
    uint32_t n;
} co_ent;

struct rp_chunk_cache {
    rp_cache_params p;
    pthread_mutex_t mu;
    pthread_cond_t io_cv;              /* io_busy / loading progress */
    pthread_cond_t wr_cv, pf_cv, ld_cv, flush_cv;
    size_t nb;                         /* bucket count, a power of two */
    rp_centry **chain_b, **hash_b, **id_b;
    rp_siblings *sibs;                 /* children of each parent in token order (partial matches) */
    rp_centry **heap;
    size_t heap_n, heap_cap;
    rp_centry *all_head, *all_tail;
    rp_centry *dirty_head, *dirty_tail;
    uint64_t clock;                    /* access clock (locality) */
    uint64_t seq;                      /* release sequence */
    uint64_t next_id;
    size_t bytes, pinned_bytes, transient_bytes;
    rp_cache_stats st;
    rp_evict_policy policy;            /* effective */

    /* flash tier */
    rp_store *db_eng, *db_wr, *db_pf, *db_ld;
    size_t sqlite_bytes;      /* SQLite page caches paid out of p.budget_bytes at attach */
    pthread_mutex_t eng_mu;            /* serializes the lookup connection */
    rp_pool_params pp;
    bool has_store;
    bool ro;                           /* the store is read-only: lookups only, nothing is written */
    bool damaged;                      /* SQLite reported corruption on one of the connections: ro from then on */
    pthread_t th_wr, th_pf, th_ld;
    bool th_wr_on, th_pf_on, th_ld_on;
    bool stop;
    int busy;
    bool writing;                      /* a write transaction is in flight */
    uint64_t flush_req, flush_done;
    double last_insert_ms;
    uint64_t *bad;                     /* corrupt row ids to delete (writer) */
    int32_t n_bad, cap_bad;
    uint64_t *known_bad;               /* set of row ids that failed to load or verify (open addressing, 0 =
                                          empty): never loaded again by this pool, deleted or not */
    size_t n_known_bad, cap_known_bad;
    uint64_t *touch_ids;               /* ids whose locality changed */
    int32_t n_touch, cap_touch;
    uint64_t recent[RECENT];           /* ring of recently accessed ids */
    int32_t recent_n, recent_pos;
    co_ent *co;                        /* co-access table [CO_CAP] */
    int32_t co_n;
    bool co_dirty;
    bool pf_warm;                      /* warm start pending */
    uint64_t pf_req, pf_done;          /* prefetch rounds requested / done */
    double pf_credit;                  /* prefetches allowed ahead of demand (pp.prefetch_credit) */
    size_t prefetch_bytes;             /* prefetched and not yet hit */
    rp_centry *load_head, *load_tail;  /* async loads */
    rp_chunk_indexer indexer;          /* the semantic index of chunks written (rp_chunk_cache_set_indexer) */
    void *indexer_user;
    rp_status write_err;
    char write_err_msg[256];
    double rate_ms_per_mib;            /* measured flash read time per MiB (EWMA) */
    int32_t rate_n;                    /* loads measured */
};

#define RP_CACHE_ALIGN 64
#define RP_CACHE_MIN_BUCKETS 64

static inline rp_centry *rp_ent(rp_chunk *ch) { return (rp_centry *)ch; }

static inline uint64_t rp_mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static inline size_t rp_bucket(const rp_chunk_cache *c, uint64_t key) { return (size_t)(rp_mix64(key) & (c->nb - 1)); }

/* ---- internal functions shared by cache.c, cache_loader.c, cache_prefetch.c and cache_flash.c ----
 * Called with mu held unless noted. */

/* cache.c: indexes, eviction keys, the heap */
double rp_cache_now_ms(void);   /* CLOCK_MONOTONIC in milliseconds; no lock */
rp_centry *rp_cache_find_id(const rp_chunk_cache *c, uint64_t id);
bool rp_cache_content_resident(const rp_chunk_cache *c, uint64_t hash);
void rp_cache_note_load_rate(rp_chunk_cache *c, double ms, size_t bytes);
double rp_cache_half_life(const rp_chunk_cache *c);
double rp_cache_key(const rp_chunk_cache *c, const rp_centry *e);
void rp_cache_heap_add(rp_chunk_cache *c, rp_centry *e, bool fresh);
void rp_cache_heap_del(rp_chunk_cache *c, rp_centry *e);
void rp_cache_heap_rekey(rp_chunk_cache *c, rp_centry *e);

/* cache.c: the dirty list, entry lifetime, hits */
void rp_cache_dirty_add(rp_chunk_cache *c, rp_centry *e);
void rp_cache_dirty_del(rp_chunk_cache *c, rp_centry *e);
void rp_cache_entry_free(rp_centry *e);   /* no lock */
void rp_cache_entry_make_transient(rp_chunk_cache *c, rp_centry *e);
void rp_cache_unindex(rp_chunk_cache *c, rp_centry *e, bool keep_dirty);
void rp_cache_settle(rp_chunk_cache *c, rp_centry *e, bool fresh);
void rp_cache_touch_hit(rp_chunk_cache *c, rp_centry *e);

/* cache.c: allocation and room */
size_t rp_cache_entry_size(const rp_chunk_cache *c, int32_t len, size_t *kv_bytes_out);
rp_centry *rp_cache_entry_alloc(const rp_chunk_cache *c, int32_t len, size_t total, size_t kv_bytes);   /* no lock */
size_t rp_cache_transient_allow(const rp_chunk_cache *c);
bool rp_cache_fits_at_all(const rp_chunk_cache *c, size_t total);
bool rp_cache_make_room(rp_chunk_cache *c, size_t total, double max_key);
void rp_cache_entry_index(rp_chunk_cache *c, rp_centry *e);

/* cache_loader.c: the known-bad set, damage, flash -> RAM */
bool rp_cache_known_bad(const rp_chunk_cache *c, uint64_t id);
bool rp_cache_skip_known_bad(void *user, uint64_t id);   /* rp_store_set_skip callback; takes mu */
bool rp_cache_load_error_is_damage(rp_status st);
void rp_cache_queue_bad(rp_chunk_cache *c, uint64_t id);
void rp_cache_check_damage(rp_chunk_cache *c, const rp_store *db);
rp_centry *rp_cache_load_row(rp_chunk_cache *c, rp_store *db, rp_store_chunk *meta);
rp_centry *rp_cache_flash_lookup(rp_chunk_cache *c, int kind, uint64_t parent_id, uint64_t key, const rp_token *t,
                                 int32_t n, int32_t *n_common);   /* takes eng_mu */
void *rp_cache_loader_main(void *arg);   /* the loader thread */

/* cache_prefetch.c: locality bookkeeping, the prefetcher */
void rp_cache_push_id(uint64_t **v, int32_t *n, int32_t *cap, uint64_t id, int32_t limit);
void rp_cache_co_bump(rp_chunk_cache *c, uint64_t a, uint64_t b);
void rp_cache_pf_earn(rp_chunk_cache *c, double amount);
void rp_cache_note_access(rp_chunk_cache *c, rp_centry *e);
void *rp_cache_prefetch_main(void *arg);   /* the prefetcher thread */

/* cache_flash.c: the writer's helpers, the background threads' waits */
void rp_cache_write_now(rp_chunk_cache *c, rp_centry **v, int32_t n);   /* takes eng_mu */
void rp_cache_lower_priority(void);   /* nice +10 for the calling thread */
void rp_cache_timed_wait(pthread_cond_t *cv, pthread_mutex_t *mu, double ms);

#endif
