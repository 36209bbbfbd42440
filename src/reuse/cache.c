/* cache.c — the RAM pool of KV chunks: indexes, pins, cost-aware eviction, and the flash tier's writer / prefetcher / loader threads. */
#define _GNU_SOURCE
#include "reuse/cache.h"

#include <assert.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "core/error.h"
#include "reuse/siblings.h"

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
 * insert alike; match_partial takes the tokens to continue with directly. */

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

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

/* ---- intrusive bucket lists ------------------------------------------ */

#define RP_HLIST_ADD(head, e, next, pprev) \
    do {                                   \
        (e)->next = *(head);               \
        if (*(head)) (*(head))->pprev = &(e)->next; \
        *(head) = (e);                     \
        (e)->pprev = (head);               \
    } while (0)

#define RP_HLIST_DEL(e, next, pprev)                  \
    do {                                              \
        *(e)->pprev = (e)->next;                      \
        if ((e)->next) (e)->next->pprev = (e)->pprev; \
        (e)->next = NULL;                             \
        (e)->pprev = NULL;                            \
    } while (0)

static void rp_all_append(rp_chunk_cache *c, rp_centry *e) {
    e->all_next = NULL;
    e->all_prev = c->all_tail;
    if (c->all_tail) c->all_tail->all_next = e;
    else c->all_head = e;
    c->all_tail = e;
}

static void rp_all_unlink(rp_chunk_cache *c, rp_centry *e) {
    if (e->all_prev) e->all_prev->all_next = e->all_next;
    else c->all_head = e->all_next;
    if (e->all_next) e->all_next->all_prev = e->all_prev;
    else c->all_tail = e->all_prev;
    e->all_prev = e->all_next = NULL;
}

static void rp_index_add(rp_chunk_cache *c, rp_centry *e) {
    RP_HLIST_ADD(&c->chain_b[rp_bucket(c, e->ch.chain)], e, chain_next, chain_pprev);
    RP_HLIST_ADD(&c->hash_b[rp_bucket(c, e->ch.hash)], e, hash_next, hash_pprev);
    RP_HLIST_ADD(&c->id_b[rp_bucket(c, e->ch.id)], e, id_next, id_pprev);
}

static void rp_index_del(rp_chunk_cache *c, rp_centry *e) {
    RP_HLIST_DEL(e, chain_next, chain_pprev);
    RP_HLIST_DEL(e, hash_next, hash_pprev);
    RP_HLIST_DEL(e, id_next, id_pprev);
    rp_siblings_del(c->sibs, &e->ch);
}

/* Doubles the bucket arrays and rehashes. A failed allocation leaves the old
 * tables in place: lookups stay correct, only bucket chains get longer. */
static void rp_maybe_grow(rp_chunk_cache *c) {
    if (c->st.n_chunks + 1 <= c->nb || c->nb > SIZE_MAX / 2 / sizeof(rp_centry *)) return;
    size_t nb = c->nb * 2;
    rp_centry **cb = calloc(nb, sizeof *cb), **hb = calloc(nb, sizeof *hb), **ib = calloc(nb, sizeof *ib);
    if (!cb || !hb || !ib) {
        free(cb);
        free(hb);
        free(ib);
        return;
    }
    free(c->chain_b);
    free(c->hash_b);
    free(c->id_b);
    c->chain_b = cb;
    c->hash_b = hb;
    c->id_b = ib;
    c->nb = nb;
    for (rp_centry *e = c->all_head; e; e = e->all_next) rp_index_add(c, e);
}

static rp_centry *rp_find_id(const rp_chunk_cache *c, uint64_t id) {
    for (rp_centry *e = c->id_b[rp_bucket(c, id)]; e; e = e->id_next)
        if (e->ch.id == id) return e;
    return NULL;
}

/* Whether a chunk with these tokens (content hash) is in RAM under any parent
 * and position: another copy would serve only as an exact prefix, which the
 * on-demand flash lookup provides anyway. (Hash only: a collision costs a
 * skipped prefetch, never a wrong hit.) */
static bool rp_content_resident(const rp_chunk_cache *c, uint64_t hash) {
    for (rp_centry *e = c->hash_b[rp_bucket(c, hash)]; e; e = e->hash_next)
        if (e->ch.hash == hash && e->indexed) return true;
    return false;
}

/* ---- eviction keys and the heap --------------------------------------- */

/* Flash read time per MiB for the RAM reload cost: the configured default
 * until a few loads were measured, then the measured rate (page cache or
 * flash, whichever this machine actually serves). Keys already in the heap
 * keep the rate they were computed with; the rate moves slowly (EWMA). */
#define RATE_MIN_SAMPLES 4
static double reload_rate(const rp_chunk_cache *c) {
    return c->rate_n >= RATE_MIN_SAMPLES ? c->rate_ms_per_mib : c->pp.reload_ms_per_mib;
}

/* A payload read of `bytes` took `ms` (mu held). The per-chunk latency
 * (reload_ms_fixed) is taken out; reads under 16 KiB are latency, not rate. */
static void note_load_rate(rp_chunk_cache *c, double ms, size_t bytes) {
    if (bytes < (16u << 10) || ms < 0) return;
    double r = (ms - c->pp.reload_ms_fixed) / ((double)bytes / (1024.0 * 1024.0));
    if (r < 1e-4) r = 1e-4;
    c->rate_ms_per_mib = c->rate_n == 0 ? r : 0.9 * c->rate_ms_per_mib + 0.1 * r;
    c->rate_n++;
}

static double rp_cost(const rp_chunk_cache *c, const rp_centry *e) {
    const double eps = 1e-3;
    double rc = e->ch.recompute_ms > eps ? e->ch.recompute_ms : eps;
    if (!c->has_store || e->dirty || !e->on_flash) return rc;
    double reload = c->pp.reload_ms_fixed + (double)e->ch.kv_bytes / (1024.0 * 1024.0) * reload_rate(c);
    if (!e->ch.exact) reload *= c->pp.nonprefix_factor;
    return reload > eps ? reload : eps;
}

static double rp_half_life(const rp_chunk_cache *c) { return c->pp.half_life > 0 ? c->pp.half_life : 256; }

static double rp_key(const rp_chunk_cache *c, const rp_centry *e) {
    if (c->policy != RP_EVICT_COST) return (double)e->seq;
    double h = e->heat > 1e-300 ? e->heat : 1e-300;
    return log2(h) + (double)e->ch.last_used / rp_half_life(c) + log2(rp_cost(c, e));
}

static inline bool heap_less(const rp_centry *a, const rp_centry *b) {
    if (a->key != b->key) return a->key < b->key;
    return a->seq < b->seq;
}

static void heap_set(rp_chunk_cache *c, size_t i, rp_centry *e) {
    c->heap[i] = e;
    e->heap_idx = (int32_t)i;
}

static void heap_up(rp_chunk_cache *c, size_t i) {
    rp_centry *e = c->heap[i];
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!heap_less(e, c->heap[p])) break;
        heap_set(c, i, c->heap[p]);
        i = p;
    }
    heap_set(c, i, e);
}

static void heap_down(rp_chunk_cache *c, size_t i) {
    rp_centry *e = c->heap[i];
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        const rp_centry *best = e;
        if (l < c->heap_n && heap_less(c->heap[l], best)) {
            m = l;
            best = c->heap[l];
        }
        if (r < c->heap_n && heap_less(c->heap[r], best)) m = r;
        if (m == i) break;
        heap_set(c, i, c->heap[m]);
        i = m;
    }
    heap_set(c, i, e);
}

/* Enters the heap (with a fresh release sequence when a caller released it).
 * A failed growth of the heap
 * array leaves the chunk outside (it cannot be evicted until its next
 * release; the budget check counts it as pinned). */
static void heap_add(rp_chunk_cache *c, rp_centry *e, bool fresh) {
    if (e->heap_idx >= 0) return;
    if (c->heap_n == c->heap_cap) {
        size_t cap = c->heap_cap ? 2 * c->heap_cap : 256;
        rp_centry **h = realloc(c->heap, sizeof *h * cap);
        if (!h) return;
        c->heap = h;
        c->heap_cap = cap;
    }
    if (fresh || e->seq == 0) e->seq = ++c->seq;   /* internal holds keep the chunk's recency */
    e->key = rp_key(c, e);
    heap_set(c, c->heap_n++, e);
    heap_up(c, c->heap_n - 1);
}

static void heap_del(rp_chunk_cache *c, rp_centry *e) {
    if (e->heap_idx < 0) return;
    size_t i = (size_t)e->heap_idx;
    e->heap_idx = -1;
    c->heap_n--;
    if (i == c->heap_n) return;
    heap_set(c, i, c->heap[c->heap_n]);
    heap_up(c, i);
    heap_down(c, (size_t)c->heap[i]->heap_idx);
}

/* Key changed while in the heap (state change, not a release). */
static void heap_rekey(rp_chunk_cache *c, rp_centry *e) {
    if (e->heap_idx < 0) return;
    e->key = rp_key(c, e);
    heap_up(c, (size_t)e->heap_idx);
    heap_down(c, (size_t)e->heap_idx);
}

/* Puts a chunk that became idle back where it belongs (fresh: a caller's
 * last unpin, which counts as use for LRU). */
static void rp_settle(rp_chunk_cache *c, rp_centry *e, bool fresh);

/* ---- dirty list -------------------------------------------------------- */

static void dirty_add(rp_chunk_cache *c, rp_centry *e) {
    if (e->dirty) return;
    e->dirty = true;
    e->dirty_next = NULL;
    e->dirty_prev = c->dirty_tail;
    if (c->dirty_tail) c->dirty_tail->dirty_next = e;
    else c->dirty_head = e;
    c->dirty_tail = e;
    c->st.dirty++;
    c->st.dirty_bytes += e->ch.kv_bytes;
}

static void dirty_del(rp_chunk_cache *c, rp_centry *e) {
    if (!e->dirty) return;
    e->dirty = false;
    if (e->dirty_prev) e->dirty_prev->dirty_next = e->dirty_next;
    else c->dirty_head = e->dirty_next;
    if (e->dirty_next) e->dirty_next->dirty_prev = e->dirty_prev;
    else c->dirty_tail = e->dirty_prev;
    e->dirty_prev = e->dirty_next = NULL;
    c->st.dirty--;
    c->st.dirty_bytes -= e->ch.kv_bytes;
}

/* ---- entry lifetime ----------------------------------------------------- */

/* Large chunks get their own mapping: freeing one returns its pages to the
 * system at once, so the process's RSS follows the pool's byte budget instead
 * of the allocator's retained arenas (the background threads allocate and
 * the engine frees, which would spread free memory over several arenas). */
#define RP_MMAP_MIN ((size_t)64 << 10)

static void entry_free(rp_centry *e) {
    if (e->meta) {
        rp_store_chunk_clear(e->meta);
        free(e->meta);
    }
    if (e->mapped) munmap(e, e->bytes);
    else free(e);
}

/* Removes a chunk from every structure and frees it (must be idle). */
static size_t rp_drop(rp_chunk_cache *c, rp_centry *e, bool count_eviction) {
    assert(e->ch.refs == 0 && e->ipins == 0);
    heap_del(c, e);
    if (e->dirty) {
        c->st.dropped_dirty++;
        dirty_del(c, e);
    }
    if (e->prefetched) c->prefetch_bytes -= e->bytes;
    size_t b = e->bytes;
    if (e->indexed) {
        rp_index_del(c, e);
        rp_all_unlink(c, e);
        c->st.n_chunks--;
        c->bytes -= b;
        if (count_eviction) c->st.evictions++;
    } else if (e->transient) {
        c->transient_bytes -= b;
        c->st.transient--;
        c->st.transient_bytes -= b;
    }
    entry_free(e);
    return b;
}

static void entry_make_transient(rp_chunk_cache *c, rp_centry *e) {
    e->transient = true;
    c->transient_bytes += e->bytes;
    c->st.transient++;
    c->st.transient_bytes += e->bytes;
}

/* Takes a chunk out of the indexes and the budget without freeing it: it is
 * held as transient and freed when it becomes idle (rp_settle) — for failed
 * loads (keep_dirty false: nothing to write), and for dirty chunks evicted
 * before the writer had them (keep_dirty true: freed once written). */
static void rp_unindex(rp_chunk_cache *c, rp_centry *e, bool keep_dirty) {
    if (!e->indexed) return;
    heap_del(c, e);
    if (e->dirty && !keep_dirty) dirty_del(c, e);
    rp_index_del(c, e);
    rp_all_unlink(c, e);
    c->st.n_chunks--;
    c->bytes -= e->bytes;
    if (e->ch.refs > 0) c->pinned_bytes -= e->bytes;   /* transient chunks are not in pinned_bytes */
    e->indexed = false;
    entry_make_transient(c, e);
}

static void rp_settle(rp_chunk_cache *c, rp_centry *e, bool fresh) {
    if (e->ch.refs > 0 || e->ipins > 0) return;
    if (e->transient) {
        /* over-budget chunks stay only until the writer has them on flash */
        if (!e->dirty || e->write_failed || !c->has_store || e->failed) rp_drop(c, e, false);
        return;
    }
    heap_add(c, e, fresh);
}

/* ---- pins ----------------------------------------------------------------- */

/* Waits out a write of this chunk's payload (callers modify pinned chunks). */
static void wait_io(rp_chunk_cache *c, rp_centry *e) {
    if (!e->io_busy) return;
    e->ipins++;   /* keeps it allocated across the wait */
    while (e->io_busy) pthread_cond_wait(&c->io_cv, &c->mu);
    e->ipins--;
}

static void rp_pin(rp_chunk_cache *c, rp_centry *e) {
    wait_io(c, e);
    if (e->ch.refs == 0) {
        heap_del(c, e);
        if (!e->transient) c->pinned_bytes += e->bytes;
    }
    e->ch.refs++;
}

static void note_access(rp_chunk_cache *c, rp_centry *e);
static void pf_earn(rp_chunk_cache *c, double amount);

/* A lookup hit: pin, tick the clock, decay and bump the heat, count. */
static void rp_touch_hit(rp_chunk_cache *c, rp_centry *e) {
    rp_pin(c, e);
    const uint64_t now = ++c->clock;
    e->heat = e->heat * exp2(-(double)(now - e->ch.last_used) / rp_half_life(c)) + 1.0;
    e->ch.last_used = now;
    e->ch.hits++;
    if (e->prefetched) {
        e->prefetched = false;
        c->prefetch_bytes -= e->bytes;
        c->st.prefetch_used++;
        pf_earn(c, 4.0);   /* a good guess pays for more */
    }
    note_access(c, e);
}

static void write_now(rp_chunk_cache *c, rp_centry **v, int32_t n);

void rp_chunk_unpin(rp_chunk_cache *c, rp_chunk *ch) {
    if (!c || !ch) return;
    pthread_mutex_lock(&c->mu);
    assert(ch->refs > 0 && "rp_chunk_unpin: chunk is not pinned");
    if (ch->refs <= 0) {   /* release builds: ignore an unbalanced unpin */
        pthread_mutex_unlock(&c->mu);
        return;
    }
    rp_centry *e = rp_ent(ch);
    if (--ch->refs == 0) {
        if (!e->transient) c->pinned_bytes -= e->bytes;
        /* the holder changed what identifies the KV (e.g. the engine upgraded
         * an approximate chunk to exact): its flash copy is stale */
        if (c->has_store && !c->ro && !e->dirty && e->on_flash && (ch->exact != e->w_exact || ch->pos0 != e->w_pos0)) {
            e->write_failed = false;
            dirty_add(c, e);
        }
        if (c->has_store && e->dirty && !e->write_failed && !e->failed && e->ipins == 0 &&
            e->layers_ready == ch->n_layer && c->pp.sync_persist) {
            write_now(c, &e, 1);   /* ablation: on this thread, now (write_now settles it) */
        } else {
            if (c->has_store && e->dirty && !e->write_failed) {
                c->last_insert_ms = now_ms();
                pthread_cond_signal(&c->wr_cv);
            }
            rp_settle(c, e, true);
        }
    }
    pthread_mutex_unlock(&c->mu);
}

/* ---- create / free ---------------------------------------------------- */

rp_pool_params rp_pool_default_params(void) {
    rp_pool_params p = {
        .policy = RP_EVICT_AUTO,
        .half_life = 256,
        .reload_ms_per_mib = 0.5,
        .reload_ms_fixed = 0.05,
        .nonprefix_factor = 0.05,
        .cascade_weight = 1.0,
        .disk_budget = 0,
        .sync_persist = false,
        .no_prefetch = false,
        .async_load = false,
        .prefetch_threshold = 0.25,
        .prefetch_fraction = 0.5,
        .prefetch_credit = 16,
        .write_delay_ms = 20,
        .batch_bytes = (uint64_t)32 << 20,
        .transient_max = (size_t)64 << 20,
    };
    return p;
}

rp_status rp_chunk_cache_create(rp_cache_params p, rp_chunk_cache **out) {
    if (!out) return rp_errorf(RP_ERR_INVALID_ARG, "chunk_cache: out is NULL");
    *out = NULL;
    if (p.n_layer <= 0 || p.row_bytes == 0)
        return rp_errorf(RP_ERR_INVALID_ARG, "chunk_cache: n_layer %d and row_bytes %zu must be > 0", p.n_layer,
                         p.row_bytes);
    if ((unsigned)p.policy > RP_EVICT_COST)
        return rp_errorf(RP_ERR_INVALID_ARG, "chunk_cache: eviction policy %d unknown", (int)p.policy);
    rp_chunk_cache *c = calloc(1, sizeof *c);
    if (!c) return rp_errorf(RP_ERR_NOMEM, "chunk_cache: out of memory");
    c->p = p;
    c->pp = rp_pool_default_params();
    c->policy = p.policy == RP_EVICT_COST ? RP_EVICT_COST : RP_EVICT_LRU;
    c->nb = RP_CACHE_MIN_BUCKETS;
    c->chain_b = calloc(c->nb, sizeof *c->chain_b);
    c->hash_b = calloc(c->nb, sizeof *c->hash_b);
    c->id_b = calloc(c->nb, sizeof *c->id_b);
    if (!c->chain_b || !c->hash_b || !c->id_b || rp_siblings_create(&c->sibs) != RP_OK) {
        free(c->chain_b);
        free(c->hash_b);
        free(c->id_b);
        free(c);
        return rp_errorf(RP_ERR_NOMEM, "chunk_cache: out of memory");
    }
    pthread_mutex_init(&c->mu, NULL);
    pthread_mutex_init(&c->eng_mu, NULL);
    pthread_cond_init(&c->io_cv, NULL);
    pthread_cond_init(&c->wr_cv, NULL);
    pthread_cond_init(&c->pf_cv, NULL);
    pthread_cond_init(&c->ld_cv, NULL);
    pthread_cond_init(&c->flush_cv, NULL);
    c->next_id = 1;   /* 0 means "no parent" */
    *out = c;
    return RP_OK;
}

void rp_chunk_cache_free(rp_chunk_cache *c) {
    if (!c) return;
    if (c->has_store) rp_chunk_cache_detach_store(c);
    for (rp_centry *e = c->all_head; e;) {
        rp_centry *next = e->all_next;
        /* contract: nothing pinned; release builds free anyway (the holder's
         * pointer dangles, which is the caller's bug) */
        assert(e->ch.refs == 0 && "rp_chunk_cache_free: chunk still pinned");
        entry_free(e);
        e = next;
    }
    free(c->chain_b);
    free(c->hash_b);
    free(c->id_b);
    rp_siblings_free(c->sibs);
    free(c->heap);
    free(c->bad);
    free(c->known_bad);
    free(c->touch_ids);
    free(c->co);
    pthread_mutex_destroy(&c->mu);
    pthread_mutex_destroy(&c->eng_mu);
    pthread_cond_destroy(&c->io_cv);
    pthread_cond_destroy(&c->wr_cv);
    pthread_cond_destroy(&c->pf_cv);
    pthread_cond_destroy(&c->ld_cv);
    pthread_cond_destroy(&c->flush_cv);
    free(c);
}

/* ---- allocation and room ------------------------------------------------ */

/* Overflow-checked a * b. */
static inline bool rp_mul_ok(size_t a, size_t b, size_t *r) {
    if (a != 0 && b > SIZE_MAX / a) return false;
    *r = a * b;
    return true;
}

static inline size_t rp_align_up(size_t x) { return (x + RP_CACHE_ALIGN - 1) & ~(size_t)(RP_CACHE_ALIGN - 1); }

/* Size of a chunk of len tokens; 0 on overflow. */
static size_t entry_size(const rp_chunk_cache *c, int32_t len, size_t *kv_bytes_out) {
    size_t kv_bytes, tok_bytes;
    if (len <= 0 || !rp_mul_ok((size_t)c->p.n_layer * 2, (size_t)len, &kv_bytes) ||
        !rp_mul_ok(kv_bytes, c->p.row_bytes, &kv_bytes) || !rp_mul_ok((size_t)len, sizeof(rp_token), &tok_bytes))
        return 0;
    const size_t head = rp_align_up(sizeof(rp_centry));
    if (kv_bytes > SIZE_MAX - head - tok_bytes - RP_CACHE_ALIGN) return 0;
    *kv_bytes_out = kv_bytes;
    return rp_align_up(head + kv_bytes + tok_bytes);
}

/* A zeroed entry with its payload and token areas laid out (not indexed). */
static rp_centry *entry_alloc(const rp_chunk_cache *c, int32_t len, size_t total, size_t kv_bytes) {
    rp_centry *e = NULL;
    bool mapped = false;
    if (total >= RP_MMAP_MIN) {
        void *p = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p != MAP_FAILED) {
            e = p;
            mapped = true;
        }
    }
    if (!e) e = aligned_alloc(RP_CACHE_ALIGN, total);
    if (!e) return NULL;
    memset(e, 0, sizeof *e);
    e->mapped = mapped;
    const size_t head = rp_align_up(sizeof(rp_centry));
    e->ch.n_tokens = len;
    e->ch.kv = (uint8_t *)e + head;
    e->ch.kv_bytes = kv_bytes;
    e->ch.tokens = (rp_token *)(e->ch.kv + kv_bytes);
    e->ch.kv_type = c->p.kv_type;
    e->ch.row_bytes = c->p.row_bytes;
    e->ch.n_layer = c->p.n_layer;
    e->bytes = total;
    e->heap_idx = -1;
    e->layers_ready = c->p.n_layer;
    return e;
}

/* Bytes the pool may hold outside its budget (transient chunks: dirty
 * victims waiting for the writer, over-budget inserts waiting to be written,
 * flash loads that found no room), all kinds together. The bound: a
 * twentieth of the budget (and at most transient_max), so
 *     pool bytes + transient bytes <= budget + min(budget / 20, transient_max),
 * half the slack of the RSS contract (RSS growth within budget +10%,
 * tests/test_pool.c test_budgets_hold); the other half is for the fixed part
 * (SQLite page caches, the WAL index, thread stacks, malloc arenas: 3-5 MiB).
 * A pool with budget 0 has no RAM tier (the no-ram-pool ablation): every
 * chunk passes through as transient — held while its caller uses it or until
 * it is written — up to transient_max. */
static size_t transient_allow(const rp_chunk_cache *c) {
    if (c->p.budget_bytes == 0) return c->pp.transient_max;
    const size_t allow = c->p.budget_bytes / 20;
    return allow < c->pp.transient_max ? allow : c->pp.transient_max;
}

/* A dirty victim (not yet on flash) is handed to the writer instead of being
 * lost: it leaves the indexes and the RAM budget, is held as transient (within
 * transient_allow) and freed once written (rp_settle). Under steady traffic the
 * writer may not have had an idle moment; the transient backlog makes its next
 * batch urgent (see writer_has_work). false: drop it (no store, read-only,
 * failed, or the allowance is used up: the chunk is then recomputed if needed
 * again, never wrong). */
static bool evict_to_writer(rp_chunk_cache *c, rp_centry *v) {
    if (!v->dirty || !c->has_store || c->ro || v->write_failed || v->failed || v->ch.refs > 0 || v->ipins > 0) return false;
    if (c->transient_bytes + v->bytes > transient_allow(c)) return false;
    rp_unindex(c, v, true);
    c->st.evictions++;
    pthread_cond_signal(&c->wr_cv);
    return true;
}

/* Evicts until `total` more bytes fit. Only chunks whose key is below
 * `max_key` go (prefetch must not push out anything more valuable; demand
 * passes +inf). false if the room cannot be made (nothing is evicted then
 * unless it could be). */
/* Can `total` more bytes ever fit in the budget, evicting every unpinned chunk? */
static bool fits_at_all(const rp_chunk_cache *c, size_t total) {
    return total <= c->p.budget_bytes && c->pinned_bytes <= c->p.budget_bytes - total;
}

static bool make_room(rp_chunk_cache *c, size_t total, double max_key) {
    const size_t budget = c->p.budget_bytes;
    if (!fits_at_all(c, total)) return false;
    if (max_key < INFINITY) {
        /* dry run: is there enough below max_key? the heap is not sorted, so
         * count from the root downwards over keys < max_key */
        size_t need = c->bytes > budget - total ? c->bytes - (budget - total) : 0, got = 0;
        for (size_t i = 0; i < c->heap_n && got < need; i++)
            if (c->heap[i]->key < max_key) got += c->heap[i]->bytes;
        if (got < need) return false;
    }
    while (c->bytes > budget - total && c->heap_n > 0) {
        rp_centry *v = c->heap[0];
        if (v->key >= max_key) return false;
        if (!evict_to_writer(c, v)) rp_drop(c, v, true);
    }
    return c->bytes <= budget - total;
}

/* Indexes a new resident chunk. */
static void entry_index(rp_chunk_cache *c, rp_centry *e) {
    rp_maybe_grow(c);
    e->indexed = true;
    c->bytes += e->bytes;
    c->st.n_chunks++;
    rp_index_add(c, e);
    rp_siblings_add(c->sibs, &e->ch);   /* out of memory: only partial matches miss it */
    rp_all_append(c, e);
}

/* ---- locality bookkeeping ------------------------------------------------ */

static void push_id(uint64_t **v, int32_t *n, int32_t *cap, uint64_t id, int32_t limit) {
    if (*n >= limit) return;
    if (*n == *cap) {
        int32_t nc = *cap ? 2 * *cap : 64;
        uint64_t *nv = realloc(*v, sizeof **v * (size_t)nc);
        if (!nv) return;
        *v = nv;
        *cap = nc;
    }
    (*v)[(*n)++] = id;
}

static void co_bump(rp_chunk_cache *c, uint64_t a, uint64_t b) {
    if (!c->co || a == b) return;
    uint64_t h = rp_mix64(a * 0x9e3779b97f4a7c15ull ^ b);
    for (int pass = 0; pass < 2; pass++) {
        for (uint32_t i = 0; i < 32; i++) {   /* bounded probe */
            co_ent *x = &c->co[(h + i) & (CO_CAP - 1)];
            if (x->n && x->a == a && x->b == b) {
                x->n++;
                c->co_dirty = true;
                return;
            }
            if (!x->n) {
                *x = (co_ent){a, b, 1};
                c->co_n++;
                c->co_dirty = true;
                return;
            }
        }
        /* crowded: age everything (halve counts, drop zeros) and retry once */
        co_ent *old = c->co;
        co_ent *nw = calloc(CO_CAP, sizeof *nw);
        if (!nw) return;
        c->co = nw;
        c->co_n = 0;
        for (uint32_t i = 0; i < CO_CAP; i++) {
            if (old[i].n / 2 == 0) continue;
            uint64_t hh = rp_mix64(old[i].a * 0x9e3779b97f4a7c15ull ^ old[i].b);
            for (uint32_t k = 0; k < 32; k++) {
                co_ent *y = &nw[(hh + k) & (CO_CAP - 1)];
                if (!y->n) {
                    *y = (co_ent){old[i].a, old[i].b, old[i].n / 2};
                    c->co_n++;
                    break;
                }
            }
        }
        free(old);
    }
}

/* Prefetch credit (pp.prefetch_credit): earned back by prefetched chunks that
 * are hit and, slowly, by accesses; capped at four times the initial credit. */
static void pf_earn(rp_chunk_cache *c, double amount) {
    if (c->pp.prefetch_credit <= 0) return;
    c->pf_credit += amount;
    if (c->pf_credit > 4 * c->pp.prefetch_credit) c->pf_credit = 4 * c->pp.prefetch_credit;
}

/* An access (hit or insert): co-access with the last few, the recent ring,
 * a locality update for flash, and a prefetch nudge. */
static void note_access(rp_chunk_cache *c, rp_centry *e) {
    if (!c->has_store) return;
    const uint64_t id = e->ch.id;
    for (int32_t k = 1; k <= CO_WINDOW && k <= c->recent_n; k++) {
        uint64_t prev = c->recent[(c->recent_pos - k + RECENT) % RECENT];
        if (prev != id) co_bump(c, prev, id);
    }
    if (c->recent_n == 0 || c->recent[(c->recent_pos - 1 + RECENT) % RECENT] != id) {
        c->recent[c->recent_pos] = id;
        c->recent_pos = (c->recent_pos + 1) % RECENT;
        if (c->recent_n < RECENT) c->recent_n++;
    }
    if (e->on_flash && !e->touched) {
        e->touched = true;
        push_id(&c->touch_ids, &c->n_touch, &c->cap_touch, id, 1 << 16);
    }
    pf_earn(c, 1.0 / 8);
    c->pf_req++;
}

/* ---- lookups ---------------------------------------------------------- */

static inline bool rp_same_tokens(const rp_chunk *ch, const rp_token *t, int32_t n) {
    return ch->n_tokens == n && memcmp(ch->tokens, t, (size_t)n * sizeof(rp_token)) == 0;
}

/* The child of `parent_id` reached by an edge with chain value `chain` whose
 * tokens are t[0..n). Dedupe keeps at most one such chunk in RAM. */
static rp_centry *rp_find_edge(const rp_chunk_cache *c, uint64_t chain, uint64_t parent_id, const rp_token *t,
                               int32_t n) {
    for (rp_centry *e = c->chain_b[rp_bucket(c, chain)]; e; e = e->chain_next)
        if (e->ch.chain == chain && e->ch.parent_id == parent_id && rp_same_tokens(&e->ch, t, n)) return e;
    return NULL;
}

static bool known_bad(const rp_chunk_cache *c, uint64_t id) {
    if (!c->cap_known_bad || !id) return false;
    for (size_t i = rp_mix64(id) & (c->cap_known_bad - 1);; i = (i + 1) & (c->cap_known_bad - 1)) {
        if (c->known_bad[i] == id) return true;
        if (c->known_bad[i] == 0) return false;
    }
}

/* The lookup connection's rp_store_set_skip callback: flash lookups pass over
 * rows known bad, so an older healthy duplicate (or the next best sibling)
 * is found instead. Runs during those lookups, which never hold mu. */
static bool skip_known_bad(void *user, uint64_t id) {
    rp_chunk_cache *c = user;
    pthread_mutex_lock(&c->mu);
    const bool bad = known_bad(c, id);
    pthread_mutex_unlock(&c->mu);
    return bad;
}

static void known_bad_put(uint64_t *set, size_t cap, uint64_t id) {
    size_t i = rp_mix64(id) & (cap - 1);
    while (set[i] && set[i] != id) i = (i + 1) & (cap - 1);
    set[i] = id;
}

/* Remembers a row that failed to load for the pool's lifetime (whether or not
 * its deletion from flash succeeds later). false if the set cannot grow. */
static bool known_bad_add(rp_chunk_cache *c, uint64_t id) {
    if (!id || known_bad(c, id)) return true;
    if ((c->n_known_bad + 1) * 2 > c->cap_known_bad) {
        const size_t cap = c->cap_known_bad ? 2 * c->cap_known_bad : 64;
        uint64_t *set = calloc(cap, sizeof *set);
        if (!set) return false;
        for (size_t i = 0; i < c->cap_known_bad; i++)
            if (c->known_bad[i]) known_bad_put(set, cap, c->known_bad[i]);
        free(c->known_bad);
        c->known_bad = set;
        c->cap_known_bad = cap;
    }
    known_bad_put(c->known_bad, c->cap_known_bad, id);
    c->n_known_bad++;
    return true;
}

/* A load of row `id` failed with `st`: is the row damaged (never to be used
 * again, and removed from flash) rather than the load merely interrupted?
 * Everything but running out of memory and shutdown counts as damage: a
 * missing, short or unreadable payload file, a BLOB read error, a checksum or
 * decompression failure. */
static bool load_error_is_damage(rp_status st) { return st != RP_OK && st != RP_ERR_NOMEM && st != RP_ERR_CANCELLED; }

/* Row `id` is damaged: lookups skip it from now on and the writer deletes it
 * from flash (or, failing that, marks it corrupt there). */
static void queue_bad(rp_chunk_cache *c, uint64_t id) {
    (void)known_bad_add(c, id);   /* out of memory: the delete below still removes it; the engine's retries are bounded */
    if (c->ro) return;            /* nothing is written to this store: known_bad alone keeps it out */
    for (int32_t i = 0; i < c->n_bad; i++)
        if (c->bad[i] == id) return;
    push_id(&c->bad, &c->n_bad, &c->cap_bad, id, 1 << 16);
    pthread_cond_signal(&c->wr_cv);
}

static void rp_settle(rp_chunk_cache *c, rp_centry *e, bool fresh);

/* After a store call on `db` by the thread that owns that connection (mu
 * held): if SQLite called the database corrupt, the pool stops writing to it
 * for good — no insert becomes dirty, queued writes and deletes are dropped
 * (their chunks stay in RAM, or go if they were only waiting for the writer),
 * the writer idles and flush reports it. Lookups go on: every payload is
 * verified by its checksums, and a failed load is a miss. */
static void check_damage(rp_chunk_cache *c, const rp_store *db) {
    if (c->damaged || !rp_store_damaged(db)) return;
    c->damaged = true;
    c->ro = true;
    c->n_bad = 0;
    for (rp_centry *e = c->dirty_head, *next; e; e = next) {
        next = e->dirty_next;
        if (e->io_busy) continue;   /* in the writer's batch: it settles it */
        dirty_del(c, e);
        heap_rekey(c, e);
        rp_settle(c, e, false);
    }
    pthread_cond_signal(&c->wr_cv);
}

/* After a store call on `db` (caller holds mu): moves the rows it found
 * corrupt to the writer's delete queue. */
static void collect_bad(rp_chunk_cache *c, rp_store *db) {
    uint64_t ids[32];
    int32_t n;
    while ((n = rp_store_take_bad(db, ids, 32)) > 0)
        for (int32_t i = 0; i < n; i++) queue_bad(c, ids[i]);
    check_damage(c, db);
}

static void loader_enqueue(rp_chunk_cache *c, rp_centry *e);

/* Brings a row found on flash into the pool. Called with mu held and
 * eng_mu held by the caller when db == db_eng; drops mu for the read.
 * Returns the chunk pinned and touched as a hit, or NULL (load failure = a
 * miss; the row is queued for deletion). `meta` is consumed. */
static rp_centry *load_row(rp_chunk_cache *c, rp_store *db, rp_store_chunk *meta) {
    if (known_bad(c, meta->id)) {   /* found corrupt before; its deletion is pending */
        rp_store_chunk_clear(meta);
        return NULL;
    }
    rp_centry *e = rp_find_id(c, meta->id);
    if (e) {   /* already here (a prefetch or another lookup won the race) */
        rp_store_chunk_clear(meta);
        if (e->failed) return NULL;
        rp_touch_hit(c, e);
        return e;
    }
    size_t kv_bytes = 0, total = entry_size(c, meta->n_tokens, &kv_bytes);
    if (!total || kv_bytes != meta->kv_bytes) {
        queue_bad(c, meta->id);
        rp_store_chunk_clear(meta);
        return NULL;
    }
    /* no room in the budget and none in the transient allowance: a miss (the
     * caller recomputes), not RAM beyond the bound */
    if (!fits_at_all(c, total) && c->transient_bytes + total > transient_allow(c)) {
        rp_store_chunk_clear(meta);
        return NULL;
    }
    pthread_mutex_unlock(&c->mu);
    e = entry_alloc(c, meta->n_tokens, total, kv_bytes);
    rp_status st = e ? RP_OK : rp_errorf(RP_ERR_NOMEM, "chunk_cache: cannot allocate %zu bytes", total);
    const double t0 = now_ms();
    if (st == RP_OK) {
        memcpy(e->ch.tokens, meta->tokens, sizeof(rp_token) * (size_t)meta->n_tokens);
        e->ch.id = meta->id;
        e->ch.hash = meta->hash;
        e->ch.chain = meta->chain;
        e->ch.parent_id = meta->parent_id;
        e->ch.pos0 = meta->pos0;
        e->ch.exact = meta->exact;
        e->ch.recompute_ms = meta->recompute_ms;
        e->ch.hits = meta->hits;
        e->ch.last_used = meta->last_used;
        e->heat = meta->heat;
        e->on_flash = true;
        e->w_exact = meta->exact;
        e->w_pos0 = meta->pos0;
        if (!c->pp.async_load) st = rp_store_load(db, meta, e->ch.kv);
    }
    const double dt = now_ms() - t0;
    pthread_mutex_lock(&c->mu);
    check_damage(c, db);
    if (st != RP_OK) {
        c->st.load_failures++;
        if (load_error_is_damage(st)) queue_bad(c, meta->id);
        rp_store_chunk_clear(meta);
        if (e) entry_free(e);
        return NULL;
    }
    rp_centry *dup = rp_find_id(c, meta->id);
    if (dup) {   /* raced: keep the one already indexed */
        entry_free(e);
        rp_store_chunk_clear(meta);
        if (dup->failed) return NULL;
        rp_touch_hit(c, dup);
        return dup;
    }
    c->st.loads++;
    c->st.load_bytes += kv_bytes;
    if (db == c->db_eng) c->st.load_ms += dt;
    if (!c->pp.async_load) note_load_rate(c, dt, kv_bytes);
    if (make_room(c, total, INFINITY)) entry_index(c, e);
    else if (c->transient_bytes + total <= transient_allow(c)) entry_make_transient(c, e);
    else {   /* the room went meanwhile: a miss, as above */
        entry_free(e);
        rp_store_chunk_clear(meta);
        return NULL;
    }
    rp_touch_hit(c, e);
    if (c->pp.async_load) {
        e->layers_ready = 0;
        e->meta = malloc(sizeof *e->meta);
        if (!e->meta) {   /* cannot queue: fail it, the caller's wait reports it */
            e->failed = true;
            rp_store_chunk_clear(meta);
            rp_unindex(c, e, false);
        } else {
            *e->meta = *meta;   /* takes the tokens / layer table */
            e->ipins++;         /* the loader's */
            loader_enqueue(c, e);
        }
    } else {
        rp_store_chunk_clear(meta);
    }
    return e;
}

/* A flash lookup by the engine's connection. Called with mu held; returns
 * with mu held. kind: 0 edge, 1 hash, 2 best child (n_common in/out). */
static rp_centry *flash_lookup(rp_chunk_cache *c, int kind, uint64_t parent_id, uint64_t key, const rp_token *t,
                               int32_t n, int32_t *n_common) {
    if (!c->has_store) return NULL;
    pthread_mutex_unlock(&c->mu);
    pthread_mutex_lock(&c->eng_mu);
    rp_store_chunk meta;
    bool found = false;
    rp_status st;
    if (kind == 0) st = rp_store_find_edge(c->db_eng, parent_id, key, t, n, &meta, &found);
    else if (kind == 1) st = rp_store_find_hash(c->db_eng, key, t, n, &meta, &found);
    else st = rp_store_best_child(c->db_eng, parent_id, t, n, *n_common + 1, &meta, n_common, &found);
    pthread_mutex_lock(&c->mu);
    collect_bad(c, c->db_eng);
    rp_centry *e = NULL;
    if (st == RP_OK && found) {
        e = load_row(c, c->db_eng, &meta);
        if (e) c->st.flash_hits++;
    }
    pthread_mutex_unlock(&c->mu);
    pthread_mutex_unlock(&c->eng_mu);
    pthread_mutex_lock(&c->mu);
    return e;
}

int32_t rp_chunk_cache_match_prefix(rp_chunk_cache *c, const rp_token *toks, const rp_chunk_span *spans,
                                    int32_t n_spans, rp_chunk **out) {
    if (!c || !toks || !spans || !out || n_spans <= 0) return 0;
    pthread_mutex_lock(&c->mu);
    uint64_t chain = 0, parent_id = 0;
    int32_t i = 0;
    for (; i < n_spans; i++) {
        const rp_chunk_span *s = &spans[i];
        if (s->len <= 0 || s->begin < 0) break;
        chain = rp_chunk_chain(chain, s->hash);
        rp_centry *e = rp_find_edge(c, chain, parent_id, toks + s->begin, s->len);
        if (e) rp_touch_hit(c, e);
        else e = flash_lookup(c, 0, parent_id, chain, toks + s->begin, s->len, NULL);
        if (!e) break;
        out[i] = &e->ch;
        parent_id = e->ch.id;
    }
    c->st.prefix_hits += (uint64_t)i;
    if (i < n_spans) c->st.misses++;
    if (c->has_store && i > 0) pthread_cond_signal(&c->pf_cv);
    pthread_mutex_unlock(&c->mu);
    return i;
}

/* Stats: a partial match counts as a prefix hit; no miss is counted when none
 * is found (partial lookups follow a match_prefix miss that was counted). */
rp_chunk *rp_chunk_cache_match_partial(rp_chunk_cache *c, const rp_chunk *parent, const rp_token *toks, int32_t n,
                                       int32_t *n_common) {
    if (n_common) *n_common = 0;
    if (!c || !toks || n <= 0 || !n_common) return NULL;
    pthread_mutex_lock(&c->mu);
    const uint64_t pid = parent ? parent->id : 0;
    /* the best RAM child by binary search over the parent's sorted children
     * (failed loads are never indexed); ties: the most recently used of the
     * nearest few */
    int32_t best_n = 0;
    rp_centry *best = (rp_centry *)rp_siblings_best(c->sibs, pid, toks, n, 16, &best_n);
    /* flash: only a strictly longer common prefix is worth a load */
    if (c->has_store && !(best && best_n == (best->ch.n_tokens < n ? best->ch.n_tokens : n))) {
        if (best) {   /* held across the unlocked lookup (the load may evict) */
            best->ipins++;
            heap_del(c, best);
        }
        int32_t nc = best_n;
        rp_centry *f = flash_lookup(c, 2, pid, 0, toks, n, &nc);
        if (best) {
            best->ipins--;
            rp_settle(c, best, false);
        }
        if (f && nc > best_n) {   /* the flash chunk wins; it is pinned and touched already */
            c->st.prefix_hits++;
            *n_common = nc;
            pthread_mutex_unlock(&c->mu);
            return &f->ch;
        }
        if (f) {   /* not better after all (raced with an insert): undo its pin */
            if (--f->ch.refs == 0) {
                if (!f->transient) c->pinned_bytes -= f->bytes;
                rp_settle(c, f, false);
            }
        }
        if (best && !best->indexed) {
            best = NULL;
            best_n = 0;
        }
    }
    if (!best) {
        pthread_mutex_unlock(&c->mu);
        return NULL;
    }
    rp_touch_hit(c, best);
    c->st.prefix_hits++;
    *n_common = best_n;
    pthread_mutex_unlock(&c->mu);
    return &best->ch;
}

rp_chunk *rp_chunk_cache_find_child(rp_chunk_cache *c, const rp_chunk *parent, const rp_token *toks,
                                    const rp_chunk_span *span) {
    if (!c || !toks || !span || span->len <= 0 || span->begin < 0) return NULL;
    const uint64_t pid = parent ? parent->id : 0;
    const uint64_t chain = rp_chunk_chain(parent ? parent->chain : 0, span->hash);
    const rp_token *t = toks + span->begin;
    pthread_mutex_lock(&c->mu);
    rp_centry *e = rp_find_edge(c, chain, pid, t, span->len);
    if (e) rp_touch_hit(c, e);
    else e = flash_lookup(c, 0, pid, chain, t, span->len, NULL);
    pthread_mutex_unlock(&c->mu);
    return e ? &e->ch : NULL;
}

rp_chunk *rp_chunk_cache_find(rp_chunk_cache *c, const rp_token *toks, const rp_chunk_span *span) {
    if (!c || !toks || !span || span->len <= 0 || span->begin < 0) return NULL;
    const rp_token *t = toks + span->begin;
    pthread_mutex_lock(&c->mu);
    rp_centry *best = NULL;
    for (rp_centry *e = c->hash_b[rp_bucket(c, span->hash)]; e; e = e->hash_next)
        if (e->ch.hash == span->hash && !e->failed && rp_same_tokens(&e->ch, t, span->len) &&
            (!best || e->ch.last_used > best->ch.last_used))
            best = e;
    if (best) rp_touch_hit(c, best);
    else best = flash_lookup(c, 1, 0, span->hash, t, span->len, NULL);
    if (!best) {
        c->st.misses++;
        pthread_mutex_unlock(&c->mu);
        return NULL;
    }
    c->st.content_hits++;
    pthread_mutex_unlock(&c->mu);
    return &best->ch;
}

rp_chunk *rp_chunk_cache_get(rp_chunk_cache *c, uint64_t id) {
    if (!c || !id) return NULL;
    pthread_mutex_lock(&c->mu);
    rp_centry *e = rp_find_id(c, id);
    if (e && !e->failed) {
        rp_touch_hit(c, e);
    } else if (!e && c->has_store) {
        pthread_mutex_unlock(&c->mu);
        pthread_mutex_lock(&c->eng_mu);
        rp_store_chunk meta;
        bool found = false;
        rp_status st = rp_store_get(c->db_eng, id, &meta, &found);
        if (st == RP_ERR_FORMAT) found = false;
        pthread_mutex_lock(&c->mu);
        if (st == RP_ERR_FORMAT) queue_bad(c, id);
        check_damage(c, c->db_eng);
        if (found && meta.model != 0) e = load_row(c, c->db_eng, &meta);
        else if (found) rp_store_chunk_clear(&meta);
        pthread_mutex_unlock(&c->mu);
        pthread_mutex_unlock(&c->eng_mu);
        pthread_mutex_lock(&c->mu);
    } else {
        e = NULL;
    }
    pthread_mutex_unlock(&c->mu);
    return e ? &e->ch : NULL;
}

/* ---- insert ----------------------------------------------------------- */

/* Contract: `parent` is NULL or a live chunk of this cache (the caller keeps
 * it pinned across the call, so it cannot be evicted by this insert). */
rp_status rp_chunk_cache_insert(rp_chunk_cache *c, const rp_chunk *parent, const rp_token *toks,
                                const rp_chunk_span *span, const rp_kv *kv, int32_t cell0, double recompute_ms,
                                rp_chunk **out) {
    if (out) *out = NULL;
    if (!c || !toks || !span || !kv) return rp_errorf(RP_ERR_INVALID_ARG, "chunk_cache_insert: NULL argument");
    const int32_t len = span->len;
    if (len <= 0 || span->begin < 0)
        return rp_errorf(RP_ERR_INVALID_ARG, "chunk_cache_insert: span [%d, +%d) is empty or negative", span->begin,
                         len);
    if (kv->type != c->p.kv_type || kv->row_bytes != c->p.row_bytes || kv->n_layer != c->p.n_layer)
        return rp_errorf(RP_ERR_INVALID_ARG,
                         "chunk_cache_insert: kv (type %d, row_bytes %zu, n_layer %d) does not match the cache "
                         "(type %d, row_bytes %zu, n_layer %d)",
                         (int)kv->type, kv->row_bytes, kv->n_layer, (int)c->p.kv_type, c->p.row_bytes, c->p.n_layer);
    if (!kv->k || !kv->v || !kv->pos) return rp_errorf(RP_ERR_INVALID_ARG, "chunk_cache_insert: kv has no storage");
    if (cell0 < 0 || kv->n > kv->n_ctx || cell0 > kv->n - len)
        return rp_errorf(RP_ERR_INVALID_ARG, "chunk_cache_insert: cells [%d, %d) not within the %d filled cells",
                         cell0, cell0 + len, kv->n);

    const rp_token *t = toks + span->begin;
    const uint64_t pid = parent ? parent->id : 0;
    const uint64_t chain = rp_chunk_chain(parent ? parent->chain : 0, span->hash);

    size_t kv_bytes = 0;
    const size_t total = entry_size(c, len, &kv_bytes);
    if (!total) return rp_errorf(RP_ERR_NOMEM, "chunk_cache_insert: chunk size overflows");

    pthread_mutex_lock(&c->mu);
    /* dedupe: same parent and tokens -> refresh, no copy */
    rp_centry *dup = rp_find_edge(c, chain, pid, t, len);
    if (dup) {
        const uint64_t now = ++c->clock;
        dup->heat = dup->heat * exp2(-(double)(now - dup->ch.last_used) / rp_half_life(c)) + 1.0;
        dup->ch.last_used = now;
        if (out) {
            rp_pin(c, dup);
            *out = &dup->ch;
        } else if (dup->heap_idx >= 0) {   /* refresh its heap position without pinning */
            heap_del(c, dup);
            heap_add(c, dup, true);
        }
        note_access(c, dup);
        pthread_mutex_unlock(&c->mu);
        return RP_OK;
    }

    /* fits at all? (pinned chunks cannot be evicted) — refuse without evicting;
     * with a store, an over-budget chunk is still persisted (transient) */
    bool resident = make_room(c, total, INFINITY);
    if (!resident && (!c->has_store || c->transient_bytes + total > transient_allow(c))) {
        pthread_mutex_unlock(&c->mu);
        return RP_OK;
    }
    const uint64_t id = c->next_id++;
    pthread_mutex_unlock(&c->mu);

    /* the copy runs without the lock: nobody can see the chunk yet */
    rp_centry *e = entry_alloc(c, len, total, kv_bytes);
    if (!e) return rp_errorf(RP_ERR_NOMEM, "chunk_cache_insert: cannot allocate %zu bytes", total);
    rp_chunk *ch = &e->ch;
    ch->id = id;
    ch->hash = span->hash;
    ch->chain = chain;
    ch->parent_id = pid;
    memcpy(ch->tokens, t, sizeof(rp_token) * (size_t)len);
    ch->pos0 = kv->pos[cell0];
    ch->recompute_ms = recompute_ms;
    /* cells are contiguous within a layer, so each layer's K (and V) block is one memcpy */
    const size_t blk = (size_t)len * kv->row_bytes;
    for (int32_t l = 0; l < kv->n_layer; l++) {
        memcpy(rp_chunk_k(ch, l), rp_kv_k_row(kv, l, cell0), blk);
        memcpy(rp_chunk_v(ch, l), rp_kv_v_row(kv, l, cell0), blk);
    }

    pthread_mutex_lock(&c->mu);
    /* room may have been taken meanwhile (another thread, a prefetch) */
    if (resident && !make_room(c, total, INFINITY)) resident = false;
    if (!resident && (!c->has_store || c->transient_bytes + total > transient_allow(c))) {
        pthread_mutex_unlock(&c->mu);
        entry_free(e);
        return RP_OK;
    }
    if (resident) entry_index(c, e);
    else entry_make_transient(c, e);
    ch->refs = 1;
    if (!e->transient) c->pinned_bytes += total;
    ch->last_used = ++c->clock;
    e->heat = 1.0;
    c->st.inserts++;
    if (c->has_store && !c->ro) {
        dirty_add(c, e);
        c->last_insert_ms = now_ms();
    }
    note_access(c, e);
    pthread_mutex_unlock(&c->mu);
    if (out) *out = ch;
    else rp_chunk_unpin(c, ch);   /* nobody to hand the pin to */
    return RP_OK;
}

/* ---- eviction, stats, iteration --------------------------------------- */

size_t rp_chunk_cache_clear(rp_chunk_cache *c) {
    if (!c) return 0;
    pthread_mutex_lock(&c->mu);
    size_t freed = 0;
    while (c->heap_n > 0) freed += rp_drop(c, c->heap[0], true);
    pthread_mutex_unlock(&c->mu);
    return freed;
}

size_t rp_chunk_cache_evict_to(rp_chunk_cache *c, size_t bytes) {
    if (!c) return 0;
    pthread_mutex_lock(&c->mu);
    size_t freed = 0;
    while (c->bytes > bytes && c->heap_n > 0) freed += rp_drop(c, c->heap[0], true);
    pthread_mutex_unlock(&c->mu);
    return freed;
}

rp_cache_stats rp_chunk_cache_stats(const rp_chunk_cache *cc) {
    rp_cache_stats s = {0};
    if (!cc) return s;
    rp_chunk_cache *c = (rp_chunk_cache *)cc;   /* the lock is not part of the logical state */
    pthread_mutex_lock(&c->mu);
    s = c->st;
    s.bytes = c->bytes;
    s.reload_ms_per_mib = c->has_store ? reload_rate(c) : 0;
    s.reload_measured = c->rate_n >= RATE_MIN_SAMPLES;
    s.store_damaged = c->damaged;
    s.known_bad = c->n_known_bad;
    pthread_mutex_unlock(&c->mu);
    return s;
}

/* Visits chunks in insertion order. Without a store that is id order, so a
 * prefix parent is always visited before its children; with one, chunks
 * loaded from flash join in load order. fn runs without the lock while the
 * chunk is held internally, so it may pin, unpin, look up or insert. */
void rp_chunk_cache_foreach(rp_chunk_cache *c, bool (*fn)(void *user, rp_chunk *ch), void *user) {
    if (!c || !fn) return;
    pthread_mutex_lock(&c->mu);
    rp_centry *e = c->all_head;
    if (e) {
        e->ipins++;
        heap_del(c, e);
    }
    while (e) {
        pthread_mutex_unlock(&c->mu);
        bool go = fn(user, &e->ch);
        pthread_mutex_lock(&c->mu);
        rp_centry *next = go && e->indexed ? e->all_next : NULL;
        if (next) {
            next->ipins++;
            heap_del(c, next);
        }
        e->ipins--;
        rp_settle(c, e, false);
        e = next;
    }
    pthread_mutex_unlock(&c->mu);
}

double rp_chunk_cache_locality(rp_chunk_cache *c, const rp_chunk *ch) {
    if (!c || !ch) return 0;
    pthread_mutex_lock(&c->mu);
    const rp_centry *e = (const rp_centry *)ch;
    double r = e->heat * exp2(-(double)(c->clock - ch->last_used) / rp_half_life(c));
    pthread_mutex_unlock(&c->mu);
    return r;
}

/* ======================================================================== *
 * The flash tier                                                            *
 * ======================================================================== */

static void lower_priority(void) {
    /* per-thread nice on Linux; the background threads yield to compute */
    setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 10);
}

static void timed_wait(pthread_cond_t *cv, pthread_mutex_t *mu, double ms) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    long long ns = (long long)ts.tv_nsec + (long long)(ms * 1e6);
    ts.tv_sec += (time_t)(ns / 1000000000LL);
    ts.tv_nsec = (long)(ns % 1000000000LL);
    pthread_cond_timedwait(cv, mu, &ts);
}

/* ---- the writer ---- */

/* Writes chunks v[0..n) (each io_busy with an internal pin; the caller holds
 * mu, which is dropped during the transaction) and settles them. Used by the
 * writer thread and by sync_persist on the caller's thread. */
static void write_batch(rp_chunk_cache *c, rp_store *db, rp_centry **v, int32_t n) {
    rp_store_put_item *items = calloc((size_t)n, sizeof *items);
    if (!items) {
        for (int32_t i = 0; i < n; i++) {
            v[i]->io_busy = false;
            v[i]->ipins--;
            rp_settle(c, v[i], false);
        }
        pthread_cond_broadcast(&c->io_cv);
        return;
    }
    for (int32_t i = 0; i < n; i++) {
        const rp_centry *e = v[i];
        rp_store_chunk *m = &items[i].meta;
        m->id = e->ch.id;
        m->hash = e->ch.hash;
        m->chain = e->ch.chain;
        m->parent_id = e->ch.parent_id;
        m->n_tokens = e->ch.n_tokens;
        m->pos0 = e->ch.pos0;
        m->exact = e->ch.exact;
        m->recompute_ms = e->ch.recompute_ms;
        m->heat = e->heat;
        m->last_used = e->ch.last_used;
        m->hits = e->ch.hits;
        items[i].tokens = e->ch.tokens;
        items[i].kv = e->ch.kv;
        v[i]->modified = false;
    }
    const uint64_t clock = c->clock;
    c->writing = true;
    pthread_mutex_unlock(&c->mu);
    const double t0 = now_ms();
    rp_status st = rp_store_put(db, items, n, clock);
    const double dt = now_ms() - t0;
    char msg[256];
    snprintf(msg, sizeof msg, "%s", rp_last_error());
    pthread_mutex_lock(&c->mu);
    c->writing = false;
    c->st.write_ms += dt;
    c->st.write_batches++;
    for (int32_t i = 0; i < n; i++) {
        rp_centry *e = v[i];
        e->io_busy = false;
        e->ipins--;
        if (items[i].status == RP_OK && st == RP_OK) {
            c->st.written++;
            c->st.write_bytes += items[i].meta.stored_bytes;
            e->on_flash = true;
            e->w_exact = items[i].meta.exact;
            e->w_pos0 = items[i].meta.pos0;
            if (!e->modified) dirty_del(c, e);
        } else {
            c->st.write_failures++;
            e->write_failed = true;
            c->write_err = items[i].status != RP_OK ? items[i].status : st;
            snprintf(c->write_err_msg, sizeof c->write_err_msg, "%s", msg);
        }
        heap_rekey(c, e);
        rp_settle(c, e, false);
    }
    free(items);
    pthread_cond_broadcast(&c->io_cv);
}

static void write_now(rp_chunk_cache *c, rp_centry **v, int32_t n) {
    for (int32_t i = 0; i < n; i++) {
        heap_del(c, v[i]);
        v[i]->io_busy = true;
        v[i]->ipins++;
    }
    /* the caller's thread uses the lookup connection */
    pthread_mutex_unlock(&c->mu);
    pthread_mutex_lock(&c->eng_mu);
    pthread_mutex_lock(&c->mu);
    write_batch(c, c->db_eng, v, n);
    pthread_mutex_unlock(&c->mu);
    pthread_mutex_unlock(&c->eng_mu);
    pthread_mutex_lock(&c->mu);
}

static bool writable(const rp_centry *e) {
    return e->ch.refs == 0 && !e->io_busy && !e->write_failed && !e->failed && e->layers_ready == e->ch.n_layer;
}

/* Is there anything the writer should do now? (mu held) */
static bool writer_has_work(rp_chunk_cache *c, bool *urgent) {
    if (c->ro) {   /* the store went read-only (damaged): nothing is written any more */
        *urgent = false;
        return false;
    }
    /* urgent (write even while the engine computes or inserts keep coming):
     * a flush waits, shutdown, dirty chunks already pushed out of the pool, or
     * a dirty backlog of a quarter of the RAM budget — lazy persistence must
     * not turn into lost chunks under steady traffic */
    *urgent = c->flush_req != c->flush_done || c->stop || c->transient_bytes > 0 ||
              c->st.dirty_bytes > c->p.budget_bytes / 4;
    for (rp_centry *e = c->dirty_head; e; e = e->dirty_next)
        if (writable(e)) return true;
    return c->n_bad > 0;
}

/* Locality of rows already on flash, so flash eviction and a later process see it. */
static void sync_touches(rp_chunk_cache *c, rp_store *db) {
    if (c->n_touch == 0 || c->ro) return;
    int32_t n = c->n_touch;
    rp_store_touch *t = malloc(sizeof *t * (size_t)n);
    int32_t k = 0;
    if (t) {
        for (int32_t i = 0; i < n; i++) {
            rp_centry *e = rp_find_id(c, c->touch_ids[i]);
            if (!e || !e->touched) continue;
            e->touched = false;
            if (!e->on_flash || e->dirty) continue;
            t[k++] = (rp_store_touch){e->ch.id, e->heat, e->ch.last_used, e->ch.hits};
        }
    }
    c->n_touch = 0;
    const uint64_t clock = c->clock;
    pthread_mutex_unlock(&c->mu);
    if (k > 0) rp_store_touch_rows(db, t, k, clock);
    free(t);
    pthread_mutex_lock(&c->mu);
}

static void sync_coaccess(rp_chunk_cache *c, rp_store *db) {
    if (!c->co_dirty || !c->co || c->ro) return;
    rp_store_coaccess *v = malloc(sizeof *v * CO_CAP);
    if (!v) return;
    int32_t n = 0;
    for (int32_t i = 0; i < CO_CAP; i++)
        if (c->co[i].n >= 2) v[n++] = (rp_store_coaccess){c->co[i].a, c->co[i].b, c->co[i].n};
    c->co_dirty = false;
    pthread_mutex_unlock(&c->mu);
    if (n > 0) rp_store_put_coaccess(db, v, n);
    free(v);
    pthread_mutex_lock(&c->mu);
}

static void delete_bad(rp_chunk_cache *c, rp_store *db) {
    if (c->n_bad == 0) return;
    int32_t n = c->n_bad;
    uint64_t *ids = malloc(sizeof *ids * (size_t)n);
    if (!ids) return;
    memcpy(ids, c->bad, sizeof *ids * (size_t)n);
    c->n_bad = 0;
    for (int32_t i = 0; i < n; i++) {
        rp_centry *e = rp_find_id(c, ids[i]);
        if (e && !e->dirty) {
            e->on_flash = false;
            heap_rekey(c, e);
        }
    }
    pthread_mutex_unlock(&c->mu);
    /* the rows stay in known_bad either way; a store that cannot delete them
     * (e.g. a damaged database) at least gets them flagged, so that other
     * processes skip them too */
    if (rp_store_delete(db, ids, n) != RP_OK)
        for (int32_t i = 0; i < n; i++) rp_store_mark_corrupt(db, ids[i]);
    free(ids);
    pthread_mutex_lock(&c->mu);
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Flash eviction to `target` (mu held; dropped for the I/O). Pinned and
 * dirty-in-flight chunks are protected. */
static rp_status disk_evict(rp_chunk_cache *c, rp_store *db, uint64_t target, uint64_t *freed) {
    sync_touches(c, db);
    int32_t np = 0;
    for (rp_centry *e = c->all_head; e; e = e->all_next)
        if (e->ch.refs > 0 || e->ipins > 0) np++;
    uint64_t *prot = malloc(sizeof *prot * (size_t)(np + 1));
    if (!prot) return rp_errorf(RP_ERR_NOMEM, "chunk_cache: out of memory");
    np = 0;
    for (rp_centry *e = c->all_head; e; e = e->all_next)
        if (e->ch.refs > 0 || e->ipins > 0) prot[np++] = e->ch.id;
    if (np > 1) qsort(prot, (size_t)np, sizeof *prot, cmp_u64);
    rp_store_evict_params ep = {.policy = c->policy == RP_EVICT_LRU ? RP_EVICT_LRU : RP_EVICT_COST,
                                .clock = c->clock,
                                .half_life = rp_half_life(c),
                                .cascade_weight = c->pp.cascade_weight,
                                .protect = prot,
                                .n_protect = np};
    pthread_mutex_unlock(&c->mu);
    uint64_t *del = NULL;
    int32_t nd = 0;
    rp_status st = rp_store_evict(db, target, &ep, &del, &nd, freed);
    uint64_t disk = rp_store_disk_bytes(db);
    pthread_mutex_lock(&c->mu);
    free(prot);
    c->st.disk_bytes = disk;
    c->st.disk_evictions += (uint64_t)nd;
    for (int32_t i = 0; i < nd; i++) {
        rp_centry *e = rp_find_id(c, del[i]);
        if (e && e->on_flash && !e->dirty) {
            e->on_flash = false;   /* the RAM copy is now the only one */
            heap_rekey(c, e);
        }
    }
    free(del);
    return st;
}

static void *writer_main(void *arg) {
    rp_chunk_cache *c = arg;
    lower_priority();
    pthread_mutex_lock(&c->mu);
    int rounds = 0;
    for (;;) {
        bool urgent = false;
        bool work = writer_has_work(c, &urgent);
        if (c->stop && !work) break;
        const double quiet = now_ms() - c->last_insert_ms;
        /* idle means: the engine is not computing, and no insert for write_delay_ms
         * (a request's commit inserts a burst; batch it) — unless a flush waits */
        if (!work || (!urgent && (c->busy > 0 || quiet < c->pp.write_delay_ms))) {
            if (!work && c->flush_req != c->flush_done) {
                c->flush_done = c->flush_req;
                pthread_cond_broadcast(&c->flush_cv);
            }
            double wait = !work ? 1000 : c->busy > 0 ? 50 : c->pp.write_delay_ms - quiet + 1;
            timed_wait(&c->wr_cv, &c->mu, wait);
            continue;
        }
        delete_bad(c, c->db_wr);
        check_damage(c, c->db_wr);
        /* a batch: oldest dirty chunks first, up to batch_bytes — and, with a
         * flash budget, up to a tenth of it, with room made before the write:
         * the store then stays within budget + 10% (the write's own WAL pages
         * included) instead of overshooting by a whole batch until the
         * eviction after it */
        uint64_t max_batch = c->pp.batch_bytes;
        if (c->pp.disk_budget > 0 && c->pp.disk_budget / 10 < max_batch) max_batch = c->pp.disk_budget / 10;
        rp_centry *v[2048];
        int32_t n = 0;
        uint64_t bytes = 0;
        for (rp_centry *e = c->dirty_head; e && n < 2048 && bytes < max_batch; e = e->dirty_next) {
            if (!writable(e)) continue;
            if (n > 0 && bytes + e->ch.kv_bytes > max_batch) break;
            heap_del(c, e);
            e->io_busy = true;
            e->ipins++;
            v[n++] = e;
            bytes += e->ch.kv_bytes;
        }
        if (n > 0 && c->pp.disk_budget > 0) {
            pthread_mutex_unlock(&c->mu);
            const uint64_t disk = rp_store_disk_bytes(c->db_wr);
            pthread_mutex_lock(&c->mu);
            const uint64_t low = c->pp.disk_budget - c->pp.disk_budget / 5;
            if (disk + bytes > c->pp.disk_budget) {
                uint64_t freed = 0;   /* the batch itself is held (ipins): never a victim */
                disk_evict(c, c->db_wr, low > bytes ? low - bytes : 0, &freed);
            }
        }
        if (n > 0) write_batch(c, c->db_wr, v, n);
        check_damage(c, c->db_wr);
        if (++rounds % 8 == 0 || !c->dirty_head) {
            sync_touches(c, c->db_wr);
            sync_coaccess(c, c->db_wr);
        }
        /* the store's size after every round, with a disk budget or without (stats.disk_bytes, the server's
         * reprise_store_bytes): measuring it only under a budget left it at its size at attach */
        {
            pthread_mutex_unlock(&c->mu);
            uint64_t disk = rp_store_disk_bytes(c->db_wr);
            pthread_mutex_lock(&c->mu);
            c->st.disk_bytes = disk;
            if (c->pp.disk_budget > 0 && disk > c->pp.disk_budget) {   /* down to 80%: evictions come in batches, not per write */
                uint64_t freed = 0;
                disk_evict(c, c->db_wr, c->pp.disk_budget - c->pp.disk_budget / 5, &freed);
            }
        }
    }
    sync_touches(c, c->db_wr);
    sync_coaccess(c, c->db_wr);
    c->flush_done = c->flush_req;
    pthread_cond_broadcast(&c->flush_cv);
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

rp_status rp_chunk_cache_flush(rp_chunk_cache *c) {
    if (!c) return RP_OK;
    pthread_mutex_lock(&c->mu);
    if (!c->has_store) {
        pthread_mutex_unlock(&c->mu);
        return RP_OK;
    }
    if (c->th_wr_on) {
        const uint64_t want = ++c->flush_req;
        pthread_cond_signal(&c->wr_cv);
        while (c->flush_done < want && c->th_wr_on) pthread_cond_wait(&c->flush_cv, &c->mu);
    }
    rp_status st = RP_OK;
    if (c->damaged)
        st = rp_errorf(RP_ERR_IO, "chunk_cache: the store's database is damaged (SQLite reported corruption): nothing "
                                  "more is written to it, and the next process to open it sets it aside");
    for (rp_centry *e = c->dirty_head; e && st == RP_OK; e = e->dirty_next)
        if (e->write_failed) {
            st = rp_errorf(c->write_err ? c->write_err : RP_ERR_IO, "chunk_cache: %llu chunk(s) could not be written: %s",
                           (unsigned long long)c->st.write_failures, c->write_err_msg);
            break;
        }
    pthread_mutex_unlock(&c->mu);
    return st;
}

void rp_chunk_cache_busy(rp_chunk_cache *c, bool busy) {
    if (!c) return;
    pthread_mutex_lock(&c->mu);
    if (busy) c->busy++;
    else if (c->busy > 0) c->busy--;
    if (c->busy == 0 && c->has_store) {
        pthread_cond_signal(&c->wr_cv);
        pthread_cond_signal(&c->pf_cv);
    }
    pthread_mutex_unlock(&c->mu);
}

void rp_chunk_cache_mark_modified(rp_chunk_cache *c, rp_chunk *ch) {
    if (!c || !ch) return;
    pthread_mutex_lock(&c->mu);
    rp_centry *e = rp_ent(ch);
    if (c->has_store && !c->ro) {
        e->write_failed = false;
        e->modified = true;   /* a write in flight read the old payload */
        dirty_add(c, e);
    }
    pthread_mutex_unlock(&c->mu);
}

/* ---- the loader (async_load) ---- */

static void loader_enqueue(rp_chunk_cache *c, rp_centry *e) {
    e->load_next = NULL;
    if (c->load_tail) c->load_tail->load_next = e;
    else c->load_head = e;
    c->load_tail = e;
    pthread_cond_signal(&c->ld_cv);
}

/* Layer-major over the queued chunks: layer l of every chunk before layer
 * l + 1 of any, which is the order a layer-wise compute consumes them. */
static void *loader_main(void *arg) {
    rp_chunk_cache *c = arg;
    pthread_mutex_lock(&c->mu);
    for (;;) {
        while (!c->stop && !c->load_head) pthread_cond_wait(&c->ld_cv, &c->mu);
        if (!c->load_head) break;
        rp_centry *q[64];
        int32_t n = 0;
        while (c->load_head && n < 64) {
            q[n++] = c->load_head;
            c->load_head = c->load_head->load_next;
        }
        if (!c->load_head) c->load_tail = NULL;
        const int32_t L = c->p.n_layer;
        for (int32_t l = 0; l < L; l++) {
            for (int32_t i = 0; i < n; i++) {
                rp_centry *e = q[i];
                if (e->failed || e->layers_ready > l) continue;
                pthread_mutex_unlock(&c->mu);
                const double tl = now_ms();
                rp_status st = c->stop ? RP_ERR_CANCELLED : rp_store_load_layers(c->db_ld, e->meta, e->ch.kv, l, l + 1);
                const double dl = now_ms() - tl;
                pthread_mutex_lock(&c->mu);
                check_damage(c, c->db_ld);
                if (st == RP_OK) note_load_rate(c, dl * L, e->ch.kv_bytes);   /* one layer's read, scaled to the chunk */
                if (st != RP_OK) {
                    e->failed = true;
                    c->st.load_failures++;
                    if (load_error_is_damage(st)) queue_bad(c, e->ch.id);
                    rp_unindex(c, e, false);
                } else {
                    e->layers_ready = l + 1;
                }
            }
            pthread_cond_broadcast(&c->io_cv);
        }
        for (int32_t i = 0; i < n; i++) {
            rp_centry *e = q[i];
            if (e->meta) {
                rp_store_chunk_clear(e->meta);
                free(e->meta);
                e->meta = NULL;
            }
            e->ipins--;
            if (!e->failed && e->dirty) pthread_cond_signal(&c->wr_cv);
            rp_settle(c, e, false);
        }
        pthread_cond_broadcast(&c->io_cv);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

rp_status rp_chunk_cache_wait_layer(rp_chunk_cache *c, const rp_chunk *ch, int32_t layer) {
    if (!c || !ch) return rp_errorf(RP_ERR_INVALID_ARG, "chunk_cache: wait on NULL");
    const rp_centry *e = (const rp_centry *)ch;
    pthread_mutex_lock(&c->mu);
    while (!e->failed && e->layers_ready <= layer && layer < ch->n_layer) pthread_cond_wait(&c->io_cv, &c->mu);
    const bool failed = e->failed;
    pthread_mutex_unlock(&c->mu);
    if (failed)
        return rp_errorf(RP_ERR_FORMAT, "chunk_cache: chunk %llu failed to load from flash (treat as a miss)",
                         (unsigned long long)ch->id);
    return RP_OK;
}

/* ---- the prefetcher ---- */

typedef struct pf_cand {
    rp_store_chunk m;
    double r;
} pf_cand;

static int pf_by_r(const void *a, const void *b) {
    double x = ((const pf_cand *)a)->r, y = ((const pf_cand *)b)->r;
    return x > y ? -1 : x < y;
}

/* One round: candidates are the warm-start set (hottest rows on flash) or
 * the prefix continuations (children) and co-access partners of recently
 * used chunks; those with R >= threshold are loaded, best first, as long as
 * they fit without evicting anything more valuable and the engine stays idle. */
static void prefetch_round(rp_chunk_cache *c) {
    const bool warm = c->pf_warm;
    c->pf_warm = false;
    uint64_t recent[RECENT];
    int32_t nr = 0;
    for (int32_t k = 1; k <= c->recent_n; k++) recent[nr++] = c->recent[(c->recent_pos - k + RECENT) % RECENT];
    uint64_t partners[64];
    int32_t npart = 0;
    if (c->co)
        for (int32_t i = 0; i < CO_CAP && npart < 64; i++) {
            if (c->co[i].n < 2) continue;
            for (int32_t k = 0; k < nr && k < CO_WINDOW * 2; k++)
                if (c->co[i].a == recent[k] && !rp_find_id(c, c->co[i].b)) {
                    partners[npart++] = c->co[i].b;
                    break;
                }
        }
    const uint64_t clock = c->clock;
    const double hl = rp_half_life(c);
    pthread_mutex_unlock(&c->mu);

    enum { CAP = 128 };
    pf_cand *cv = calloc(CAP, sizeof *cv);
    rp_store_chunk *tmp = calloc(CAP, sizeof *tmp);
    int32_t nc = 0;
    if (cv && tmp) {
        int32_t nt = 0;
        if (warm) rp_store_hottest(c->db_pf, clock, hl, tmp, CAP, &nt);
        else if (nr > 0) rp_store_children_of(c->db_pf, recent, nr, tmp, CAP, &nt);
        for (int32_t i = 0; i < nt && nc < CAP; i++) cv[nc++].m = tmp[i];
        for (int32_t i = 0; i < npart && nc < CAP; i++) {
            bool found = false;
            if (rp_store_get(c->db_pf, partners[i], &cv[nc].m, &found) == RP_OK && found) {
                rp_store_chunk_clear(&cv[nc].m);   /* metadata is enough for ranking */
                cv[nc].r = 1.0;                   /* co-access counts as a recent use */
                nc++;
            }
        }
        for (int32_t i = 0; i < nc; i++) {
            double age = clock > cv[i].m.last_used ? (double)(clock - cv[i].m.last_used) : 0;
            cv[i].r += cv[i].m.heat * exp2(-age / hl);
        }
        if (nc > 1) qsort(cv, (size_t)nc, sizeof *cv, pf_by_r);
    }
    free(tmp);

    pthread_mutex_lock(&c->mu);
    const size_t cap_bytes = (size_t)((double)c->p.budget_bytes * c->pp.prefetch_fraction);
    double warm_left = 4 * c->pp.prefetch_credit;
    for (int32_t i = 0; i < nc && !c->stop; i++) {
        if (c->busy > 0 || c->writing) break;   /* I/O is not idle: stop; the next round retries */
        if (cv[i].r < c->pp.prefetch_threshold) break;
        /* guesses that have not been paying stop the prefetcher; the warm start
         * (hottest rows after attach) has an allowance of its own: the credit cap */
        if (c->pp.prefetch_credit > 0 && (warm ? warm_left < 1 : c->pf_credit < 1)) break;
        if (rp_find_id(c, cv[i].m.id) || rp_content_resident(c, cv[i].m.hash)) continue;
        if (known_bad(c, cv[i].m.id)) continue;
        size_t kvb = 0, total = entry_size(c, cv[i].m.n_tokens, &kvb);
        if (!total || c->prefetch_bytes + total > cap_bytes) continue;
        /* would it fit, evicting only chunks worth less than it? */
        rp_centry probe;
        memset(&probe, 0, sizeof probe);
        probe.ch.recompute_ms = cv[i].m.recompute_ms;
        probe.ch.kv_bytes = kvb;
        probe.ch.exact = cv[i].m.exact;
        probe.ch.last_used = cv[i].m.last_used;
        probe.heat = cv[i].m.heat;
        probe.on_flash = true;
        const double key = rp_key(c, &probe);
        if (!make_room(c, total, c->policy == RP_EVICT_COST ? key : INFINITY)) continue;
        pthread_mutex_unlock(&c->mu);
        rp_store_chunk full;
        bool found = false;
        rp_status st = rp_store_get(c->db_pf, cv[i].m.id, &full, &found);
        rp_centry *e = NULL;
        double tl = 0;
        if (st == RP_OK && found) {
            e = entry_alloc(c, full.n_tokens, total, kvb);
            tl = now_ms();
            if (e) st = rp_store_load(c->db_pf, &full, e->ch.kv);
            tl = now_ms() - tl;
        }
        pthread_mutex_lock(&c->mu);
        check_damage(c, c->db_pf);
        if (st == RP_OK && found && e) note_load_rate(c, tl, kvb);
        if (load_error_is_damage(st)) queue_bad(c, cv[i].m.id);
        if (st != RP_OK || !found || !e || rp_find_id(c, full.id) || !make_room(c, total, INFINITY)) {
            if (e) entry_free(e);
            if (found) rp_store_chunk_clear(&full);
            if (st != RP_OK) c->st.load_failures++;
            continue;
        }
        memcpy(e->ch.tokens, full.tokens, sizeof(rp_token) * (size_t)full.n_tokens);
        e->ch.id = full.id;
        e->ch.hash = full.hash;
        e->ch.chain = full.chain;
        e->ch.parent_id = full.parent_id;
        e->ch.pos0 = full.pos0;
        e->ch.exact = full.exact;
        e->ch.recompute_ms = full.recompute_ms;
        e->ch.hits = full.hits;
        e->ch.last_used = full.last_used;
        e->heat = full.heat;
        e->on_flash = true;
        e->w_exact = full.exact;
        e->w_pos0 = full.pos0;
        e->prefetched = true;
        rp_store_chunk_clear(&full);
        entry_index(c, e);
        c->prefetch_bytes += e->bytes;
        c->st.prefetched++;
        if (warm) warm_left -= 1;
        else c->pf_credit -= 1;
        c->st.loads++;
        c->st.load_bytes += kvb;
        heap_add(c, e, true);
    }
    for (int32_t i = 0; i < nc; i++) rp_store_chunk_clear(&cv[i].m);
    free(cv);
}

static void *prefetch_main(void *arg) {
    rp_chunk_cache *c = arg;
    lower_priority();
    pthread_mutex_lock(&c->mu);
    for (;;) {
        if (c->stop) break;
        const bool want = c->pf_warm || c->pf_req != c->pf_done;
        if (!want || c->busy > 0 || c->writing) {
            timed_wait(&c->pf_cv, &c->mu, want ? 20 : 1000);
            continue;
        }
        const uint64_t req = c->pf_req;
        prefetch_round(c);
        c->pf_done = req;
        pthread_cond_broadcast(&c->pf_cv);
    }
    c->pf_done = c->pf_req;
    pthread_cond_broadcast(&c->pf_cv);
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

void rp_chunk_cache_prefetch_sync(rp_chunk_cache *c) {
    if (!c) return;
    pthread_mutex_lock(&c->mu);
    if (c->has_store && c->th_pf_on && c->busy == 0) {
        const uint64_t want = ++c->pf_req;
        pthread_cond_signal(&c->pf_cv);
        while (c->pf_done < want && c->th_pf_on && !c->stop) {
            /* rounds defer while a write is in flight; wait for it */
            timed_wait(&c->pf_cv, &c->mu, 50);
            if (c->pf_done < want) pthread_cond_signal(&c->pf_cv);
        }
    }
    pthread_mutex_unlock(&c->mu);
}

/* ---- attach / detach ---- */

static void stop_threads(rp_chunk_cache *c) {
    pthread_mutex_lock(&c->mu);
    c->stop = true;
    pthread_cond_broadcast(&c->wr_cv);
    pthread_cond_broadcast(&c->pf_cv);
    pthread_cond_broadcast(&c->ld_cv);
    pthread_mutex_unlock(&c->mu);
    /* loader first (in-flight loads settle), then the prefetcher, then the
     * writer, which flushes what is still dirty before it exits */
    if (c->th_ld_on) pthread_join(c->th_ld, NULL);
    if (c->th_pf_on) pthread_join(c->th_pf, NULL);
    if (c->th_wr_on) pthread_join(c->th_wr, NULL);
    pthread_mutex_lock(&c->mu);
    c->th_ld_on = c->th_pf_on = c->th_wr_on = false;
    pthread_cond_broadcast(&c->flush_cv);
    pthread_mutex_unlock(&c->mu);
}

static void close_stores(rp_chunk_cache *c) {
    rp_store_close(c->db_ld);
    rp_store_close(c->db_pf);
    rp_store_close(c->db_wr);
    rp_store_close(c->db_eng);   /* the original handle: holds the lock, closes last */
    c->db_ld = c->db_pf = c->db_wr = c->db_eng = NULL;
}

rp_status rp_chunk_cache_attach_store(rp_chunk_cache *c, rp_store *s, uint64_t salt, const char *model_name,
                                      const rp_pool_params *pp) {
    if (!s) return rp_errorf(RP_ERR_INVALID_ARG, "chunk_cache: attach of NULL");
    rp_status st = RP_OK;
    if (!c) st = rp_errorf(RP_ERR_INVALID_ARG, "chunk_cache: attach of NULL");
    else if (c->has_store) st = rp_errorf(RP_ERR_INVALID_ARG, "chunk_cache: a store is already attached");
    else if (c->st.inserts > 0 || c->st.n_chunks > 0)
        st = rp_errorf(RP_ERR_INVALID_ARG, "chunk_cache: attach the store before inserting chunks");
    const bool ro = rp_store_read_only(s);
    if (st == RP_OK)
        st = rp_store_bind_model(s, salt, (int32_t)c->p.kv_type, c->p.n_layer, c->p.row_bytes, model_name, !ro);
    if (st != RP_OK) {   /* the store is ours even on failure */
        char msg[512];
        snprintf(msg, sizeof msg, "%s", rp_last_error());
        rp_store_close(s);
        return rp_errorf(st, "%s", msg);
    }
    c->pp = pp ? *pp : rp_pool_default_params();
    c->ro = ro;
    if (ro) {   /* a reader (e.g. `reprise plan`): no writer, no prefetch */
        c->pp.no_prefetch = true;
        c->pp.sync_persist = false;
        c->pp.disk_budget = 0;
    }
    if (c->pp.half_life <= 0) c->pp.half_life = 256;
    if (c->pp.batch_bytes == 0) c->pp.batch_bytes = (uint64_t)32 << 20;
    c->policy = c->pp.policy == RP_EVICT_LRU ? RP_EVICT_LRU
                : c->pp.policy == RP_EVICT_COST || c->p.policy == RP_EVICT_AUTO ? RP_EVICT_COST
                                                                                 : c->p.policy;
    c->db_eng = s;
    rp_store_set_skip(c->db_eng, skip_known_bad, c);
    if ((st = rp_store_clone(s, &c->db_wr)) != RP_OK || (st = rp_store_clone(s, &c->db_pf)) != RP_OK ||
        (c->pp.async_load && (st = rp_store_clone(s, &c->db_ld)) != RP_OK)) {
        close_stores(c);
        return st;
    }
    /* The four connections' SQLite page caches count against the RAM budget
     * (2 MiB each by default would be 8 MiB beside a 64 MiB pool: RSS 12 %
     * over budget in `bench ablation`). Lookups and the writer get budget/64
     * each, the prefetcher and loader (rows by id) budget/256, within
     * [64 KiB, 2 MiB] / [64, 256] KiB: ~4 % of the budget, taken from the
     * pool. A pool under ~2 MiB cannot pay for even the 64 KiB floors; there
     * the caches stay at the floor, uncharged. */
    if (c->p.budget_bytes > 0) {
        const size_t kb = c->p.budget_bytes >> 10;
        const int32_t big = kb / 64 < 64 ? 64 : kb / 64 > RP_STORE_CACHE_KIB ? RP_STORE_CACHE_KIB : (int32_t)(kb / 64);
        const int32_t small = kb / 256 < 64 ? 64 : kb / 256 > 256 ? 256 : (int32_t)(kb / 256);
        rp_store *const conns[4] = {c->db_eng, c->db_wr, c->db_pf, c->db_ld};
        size_t paid = 0;
        for (int i = 0; i < 4 && st == RP_OK; i++) {
            if (!conns[i]) continue;
            const int32_t kib = i < 2 ? big : small;
            st = rp_store_set_cache_kib(conns[i], kib);
            paid += (size_t)kib << 10;
        }
        if (st != RP_OK) {
            close_stores(c);
            return st;
        }
        c->sqlite_bytes = paid <= c->p.budget_bytes / 8 ? paid : 0;
        c->p.budget_bytes -= c->sqlite_bytes;
    }
    c->next_id = rp_store_next_id(s);
    c->clock = rp_store_clock(s);
    c->co = calloc(CO_CAP, sizeof *c->co);
    if (c->co) {
        rp_store_coaccess *v = malloc(sizeof *v * CO_CAP / 2);
        int32_t n = 0;
        if (v && rp_store_get_coaccess(s, v, CO_CAP / 2, &n) == RP_OK)
            for (int32_t i = 0; i < n; i++)
                for (uint32_t k = 0; k < v[i].n && k < 64; k++) co_bump(c, v[i].a, v[i].b);
        free(v);
        c->co_dirty = false;
    }
    c->st.disk_bytes = rp_store_disk_bytes(s);
    c->has_store = true;
    c->stop = false;
    c->pf_warm = !c->pp.no_prefetch;
    c->pf_credit = c->pp.prefetch_credit;
    if (ro || pthread_create(&c->th_wr, NULL, writer_main, c) == 0) c->th_wr_on = !ro;
    if (!c->pp.no_prefetch && pthread_create(&c->th_pf, NULL, prefetch_main, c) == 0) c->th_pf_on = true;
    if (c->pp.async_load && pthread_create(&c->th_ld, NULL, loader_main, c) == 0) c->th_ld_on = true;
    if ((!ro && !c->th_wr_on) || (!c->pp.no_prefetch && !c->th_pf_on) || (c->pp.async_load && !c->th_ld_on)) {
        stop_threads(c);
        c->has_store = false;
        close_stores(c);
        return rp_errorf(RP_ERR_NOMEM, "chunk_cache: cannot start the store threads");
    }
    return RP_OK;
}

bool rp_chunk_cache_has_store(const rp_chunk_cache *c) { return c && c->has_store; }

rp_status rp_chunk_cache_detach_store(rp_chunk_cache *c) {
    if (!c || !c->has_store) return RP_OK;
    rp_status st = rp_chunk_cache_flush(c);
    char msg[512];
    snprintf(msg, sizeof msg, "%s", rp_last_error());
    stop_threads(c);
    pthread_mutex_lock(&c->mu);
    /* whatever stayed dirty (pinned at shutdown, or failed) is lost with the
     * process; transient chunks that were waiting for the writer go now */
    c->has_store = false;
    while (c->dirty_head) {
        rp_centry *e = c->dirty_head;
        dirty_del(c, e);
        if (e->transient) rp_settle(c, e, false);   /* idle ones go now, held ones at their unpin */
    }
    for (rp_centry *e = c->all_head; e; e = e->all_next) {
        e->on_flash = false;
        heap_rekey(c, e);
    }
    c->p.budget_bytes += c->sqlite_bytes;   /* the connections' caches go with them */
    c->sqlite_bytes = 0;
    pthread_mutex_unlock(&c->mu);
    close_stores(c);
    if (st != RP_OK) rp_errorf(st, "%s", msg);
    return st;
}

rp_status rp_chunk_cache_evict_disk(rp_chunk_cache *c, uint64_t target, uint64_t *freed) {
    if (freed) *freed = 0;
    if (!c) return RP_OK;
    pthread_mutex_lock(&c->mu);
    if (!c->has_store) {
        pthread_mutex_unlock(&c->mu);
        return RP_OK;
    }
    pthread_mutex_unlock(&c->mu);
    pthread_mutex_lock(&c->eng_mu);
    pthread_mutex_lock(&c->mu);
    uint64_t f = 0;
    rp_status st = disk_evict(c, c->db_eng, target, &f);
    pthread_mutex_unlock(&c->mu);
    pthread_mutex_unlock(&c->eng_mu);
    if (freed) *freed = f;
    return st;
}

rp_status rp_chunk_cache_find_subchunks(rp_chunk_cache *c, const rp_token *toks, int32_t n, int32_t min_len,
                                        rp_subchunk_match *out, int32_t cap, int32_t *n_out) {
    return rp_chunk_cache_find_subchunks_vec(c, toks, n, min_len, NULL, 0, 0, out, cap, n_out);
}

rp_status rp_chunk_cache_find_subchunks_vec(rp_chunk_cache *c, const rp_token *toks, int32_t n, int32_t min_len,
                                            const float *qvec, int32_t dim, int32_t k_vec, rp_subchunk_match *out,
                                            int32_t cap, int32_t *n_out) {
    if (n_out) *n_out = 0;
    if (!c || !n_out) return rp_errorf(RP_ERR_INVALID_ARG, "chunk_cache: NULL argument");
    pthread_mutex_lock(&c->mu);
    const bool has = c->has_store;
    pthread_mutex_unlock(&c->mu);
    if (!has) return RP_OK;
    pthread_mutex_lock(&c->eng_mu);
    rp_status st = rp_store_find_subchunks_vec(c->db_eng, toks, n, min_len, 16, qvec, dim, k_vec, out, cap, n_out);
    pthread_mutex_unlock(&c->eng_mu);
    return st;
}

rp_status rp_chunk_cache_put_vector(rp_chunk_cache *c, uint64_t id, const float *v, int32_t dim) {
    if (!c) return rp_errorf(RP_ERR_INVALID_ARG, "chunk_cache: NULL argument");
    pthread_mutex_lock(&c->mu);
    const bool ok = c->has_store && !c->ro;
    pthread_mutex_unlock(&c->mu);
    if (!ok) return rp_errorf(RP_ERR_INVALID_ARG, "chunk_cache: vectors need a writable store");
    pthread_mutex_lock(&c->eng_mu);
    rp_status st = rp_store_put_vector(c->db_eng, id, v, dim);
    pthread_mutex_unlock(&c->eng_mu);
    return st;
}
