/* cache.c — the RAM pool of KV chunks: indexes, the eviction heap, pins, lookups, insert, eviction, stats. */
#define _GNU_SOURCE
#include "reuse/cache_internal.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "core/error.h"

double rp_cache_now_ms(void) {
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

rp_centry *rp_cache_find_id(const rp_chunk_cache *c, uint64_t id) {
    for (rp_centry *e = c->id_b[rp_bucket(c, id)]; e; e = e->id_next)
        if (e->ch.id == id) return e;
    return NULL;
}

/* Whether a chunk with these tokens (content hash) is in RAM under any parent
 * and position: another copy would serve only as an exact prefix, which the
 * on-demand flash lookup provides anyway. (Hash only: a collision costs a
 * skipped prefetch, never a wrong hit.) */
bool rp_cache_content_resident(const rp_chunk_cache *c, uint64_t hash) {
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
void rp_cache_note_load_rate(rp_chunk_cache *c, double ms, size_t bytes) {
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

double rp_cache_half_life(const rp_chunk_cache *c) { return c->pp.half_life > 0 ? c->pp.half_life : 256; }

double rp_cache_key(const rp_chunk_cache *c, const rp_centry *e) {
    if (c->policy != RP_EVICT_COST) return (double)e->seq;
    double h = e->heat > 1e-300 ? e->heat : 1e-300;
    return log2(h) + (double)e->ch.last_used / rp_cache_half_life(c) + log2(rp_cost(c, e));
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
void rp_cache_heap_add(rp_chunk_cache *c, rp_centry *e, bool fresh) {
    if (e->heap_idx >= 0) return;
    if (c->heap_n == c->heap_cap) {
        size_t cap = c->heap_cap ? 2 * c->heap_cap : 256;
        rp_centry **h = realloc(c->heap, sizeof *h * cap);
        if (!h) return;
        c->heap = h;
        c->heap_cap = cap;
    }
    if (fresh || e->seq == 0) e->seq = ++c->seq;   /* internal holds keep the chunk's recency */
    e->key = rp_cache_key(c, e);
    heap_set(c, c->heap_n++, e);
    heap_up(c, c->heap_n - 1);
}

void rp_cache_heap_del(rp_chunk_cache *c, rp_centry *e) {
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
void rp_cache_heap_rekey(rp_chunk_cache *c, rp_centry *e) {
    if (e->heap_idx < 0) return;
    e->key = rp_cache_key(c, e);
    heap_up(c, (size_t)e->heap_idx);
    heap_down(c, (size_t)e->heap_idx);
}

/* ---- dirty list -------------------------------------------------------- */

void rp_cache_dirty_add(rp_chunk_cache *c, rp_centry *e) {
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

void rp_cache_dirty_del(rp_chunk_cache *c, rp_centry *e) {
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

void rp_cache_entry_free(rp_centry *e) {
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
    rp_cache_heap_del(c, e);
    if (e->dirty) {
        c->st.dropped_dirty++;
        rp_cache_dirty_del(c, e);
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
    rp_cache_entry_free(e);
    return b;
}

void rp_cache_entry_make_transient(rp_chunk_cache *c, rp_centry *e) {
    e->transient = true;
    c->transient_bytes += e->bytes;
    c->st.transient++;
    c->st.transient_bytes += e->bytes;
}

/* Takes a chunk out of the indexes and the budget without freeing it: it is
 * held as transient and freed when it becomes idle (rp_cache_settle) — for failed
 * loads (keep_dirty false: nothing to write), and for dirty chunks evicted
 * before the writer had them (keep_dirty true: freed once written). */
void rp_cache_unindex(rp_chunk_cache *c, rp_centry *e, bool keep_dirty) {
    if (!e->indexed) return;
    rp_cache_heap_del(c, e);
    if (e->dirty && !keep_dirty) rp_cache_dirty_del(c, e);
    rp_index_del(c, e);
    rp_all_unlink(c, e);
    c->st.n_chunks--;
    c->bytes -= e->bytes;
    if (e->ch.refs > 0) c->pinned_bytes -= e->bytes;   /* transient chunks are not in pinned_bytes */
    e->indexed = false;
    rp_cache_entry_make_transient(c, e);
}

/* Puts a chunk that became idle back where it belongs (fresh: a caller's
 * last unpin, which counts as use for LRU). */
void rp_cache_settle(rp_chunk_cache *c, rp_centry *e, bool fresh) {
    if (e->ch.refs > 0 || e->ipins > 0) return;
    if (e->transient) {
        /* over-budget chunks stay only until the writer has them on flash */
        if (!e->dirty || e->write_failed || !c->has_store || e->failed) rp_drop(c, e, false);
        return;
    }
    rp_cache_heap_add(c, e, fresh);
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
        rp_cache_heap_del(c, e);
        if (!e->transient) c->pinned_bytes += e->bytes;
    }
    e->ch.refs++;
}

/* A lookup hit: pin, tick the clock, decay and bump the heat, count. */
void rp_cache_touch_hit(rp_chunk_cache *c, rp_centry *e) {
    rp_pin(c, e);
    const uint64_t now = ++c->clock;
    e->heat = e->heat * exp2(-(double)(now - e->ch.last_used) / rp_cache_half_life(c)) + 1.0;
    e->ch.last_used = now;
    e->ch.hits++;
    if (e->prefetched) {
        e->prefetched = false;
        c->prefetch_bytes -= e->bytes;
        c->st.prefetch_used++;
        rp_cache_pf_earn(c, 4.0);   /* a good guess pays for more */
    }
    rp_cache_note_access(c, e);
}

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
            rp_cache_dirty_add(c, e);
        }
        if (c->has_store && e->dirty && !e->write_failed && !e->failed && e->ipins == 0 &&
            e->layers_ready == ch->n_layer && c->pp.sync_persist) {
            rp_cache_write_now(c, &e, 1);   /* ablation: on this thread, now (rp_cache_write_now settles it) */
        } else {
            if (c->has_store && e->dirty && !e->write_failed) {
                c->last_insert_ms = rp_cache_now_ms();
                pthread_cond_signal(&c->wr_cv);
            }
            rp_cache_settle(c, e, true);
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
        rp_cache_entry_free(e);
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
size_t rp_cache_entry_size(const rp_chunk_cache *c, int32_t len, size_t *kv_bytes_out) {
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
rp_centry *rp_cache_entry_alloc(const rp_chunk_cache *c, int32_t len, size_t total, size_t kv_bytes) {
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
size_t rp_cache_transient_allow(const rp_chunk_cache *c) {
    if (c->p.budget_bytes == 0) return c->pp.transient_max;
    const size_t allow = c->p.budget_bytes / 20;
    return allow < c->pp.transient_max ? allow : c->pp.transient_max;
}

/* A dirty victim (not yet on flash) is handed to the writer instead of being
 * lost: it leaves the indexes and the RAM budget, is held as transient (within
 * rp_cache_transient_allow) and freed once written (rp_cache_settle). Under steady traffic the
 * writer may not have had an idle moment; the transient backlog makes its next
 * batch urgent (see writer_has_work). false: drop it (no store, read-only,
 * failed, or the allowance is used up: the chunk is then recomputed if needed
 * again, never wrong). */
static bool evict_to_writer(rp_chunk_cache *c, rp_centry *v) {
    if (!v->dirty || !c->has_store || c->ro || v->write_failed || v->failed || v->ch.refs > 0 || v->ipins > 0) return false;
    if (c->transient_bytes + v->bytes > rp_cache_transient_allow(c)) return false;
    rp_cache_unindex(c, v, true);
    c->st.evictions++;
    pthread_cond_signal(&c->wr_cv);
    return true;
}

/* Evicts until `total` more bytes fit. Only chunks whose key is below
 * `max_key` go (prefetch must not push out anything more valuable; demand
 * passes +inf). false if the room cannot be made (nothing is evicted then
 * unless it could be). */
/* Can `total` more bytes ever fit in the budget, evicting every unpinned chunk? */
bool rp_cache_fits_at_all(const rp_chunk_cache *c, size_t total) {
    return total <= c->p.budget_bytes && c->pinned_bytes <= c->p.budget_bytes - total;
}

bool rp_cache_make_room(rp_chunk_cache *c, size_t total, double max_key) {
    const size_t budget = c->p.budget_bytes;
    if (!rp_cache_fits_at_all(c, total)) return false;
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
void rp_cache_entry_index(rp_chunk_cache *c, rp_centry *e) {
    rp_maybe_grow(c);
    e->indexed = true;
    c->bytes += e->bytes;
    c->st.n_chunks++;
    rp_index_add(c, e);
    rp_siblings_add(c->sibs, &e->ch);   /* out of memory: only partial matches miss it */
    rp_all_append(c, e);
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
        if (e) rp_cache_touch_hit(c, e);
        else e = rp_cache_flash_lookup(c, 0, parent_id, chain, toks + s->begin, s->len, NULL);
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
            rp_cache_heap_del(c, best);
        }
        int32_t nc = best_n;
        rp_centry *f = rp_cache_flash_lookup(c, 2, pid, 0, toks, n, &nc);
        if (best) {
            best->ipins--;
            rp_cache_settle(c, best, false);
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
                rp_cache_settle(c, f, false);
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
    rp_cache_touch_hit(c, best);
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
    if (e) rp_cache_touch_hit(c, e);
    else e = rp_cache_flash_lookup(c, 0, pid, chain, t, span->len, NULL);
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
    if (best) rp_cache_touch_hit(c, best);
    else best = rp_cache_flash_lookup(c, 1, 0, span->hash, t, span->len, NULL);
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
    rp_centry *e = rp_cache_find_id(c, id);
    if (e && !e->failed) {
        rp_cache_touch_hit(c, e);
    } else if (!e && c->has_store) {
        pthread_mutex_unlock(&c->mu);
        pthread_mutex_lock(&c->eng_mu);
        rp_store_chunk meta;
        bool found = false;
        rp_status st = rp_store_get(c->db_eng, id, &meta, &found);
        if (st == RP_ERR_FORMAT) found = false;
        pthread_mutex_lock(&c->mu);
        if (st == RP_ERR_FORMAT) rp_cache_queue_bad(c, id);
        rp_cache_check_damage(c, c->db_eng);
        if (found && meta.model != 0) e = rp_cache_load_row(c, c->db_eng, &meta);
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
    if (!kv->buf[RP_KV_K] || !kv->buf[RP_KV_V] || !kv->pos)
        return rp_errorf(RP_ERR_INVALID_ARG, "chunk_cache_insert: kv has no storage");
    if (cell0 < 0 || kv->n > kv->n_ctx || cell0 > kv->n - len)
        return rp_errorf(RP_ERR_INVALID_ARG, "chunk_cache_insert: cells [%d, %d) not within the %d filled cells",
                         cell0, cell0 + len, kv->n);

    const rp_token *t = toks + span->begin;
    const uint64_t pid = parent ? parent->id : 0;
    const uint64_t chain = rp_chunk_chain(parent ? parent->chain : 0, span->hash);

    size_t kv_bytes = 0;
    const size_t total = rp_cache_entry_size(c, len, &kv_bytes);
    if (!total) return rp_errorf(RP_ERR_NOMEM, "chunk_cache_insert: chunk size overflows");

    pthread_mutex_lock(&c->mu);
    /* dedupe: same parent and tokens -> refresh, no copy */
    rp_centry *dup = rp_find_edge(c, chain, pid, t, len);
    if (dup) {
        const uint64_t now = ++c->clock;
        dup->heat = dup->heat * exp2(-(double)(now - dup->ch.last_used) / rp_cache_half_life(c)) + 1.0;
        dup->ch.last_used = now;
        if (out) {
            rp_pin(c, dup);
            *out = &dup->ch;
        } else if (dup->heap_idx >= 0) {   /* refresh its heap position without pinning */
            rp_cache_heap_del(c, dup);
            rp_cache_heap_add(c, dup, true);
        }
        rp_cache_note_access(c, dup);
        pthread_mutex_unlock(&c->mu);
        return RP_OK;
    }

    /* fits at all? (pinned chunks cannot be evicted) — refuse without evicting;
     * with a store, an over-budget chunk is still persisted (transient) */
    bool resident = rp_cache_make_room(c, total, INFINITY);
    if (!resident && (!c->has_store || c->transient_bytes + total > rp_cache_transient_allow(c))) {
        pthread_mutex_unlock(&c->mu);
        return RP_OK;
    }
    const uint64_t id = c->next_id++;
    pthread_mutex_unlock(&c->mu);

    /* the copy runs without the lock: nobody can see the chunk yet */
    rp_centry *e = rp_cache_entry_alloc(c, len, total, kv_bytes);
    if (!e) return rp_errorf(RP_ERR_NOMEM, "chunk_cache_insert: cannot allocate %zu bytes", total);
    rp_chunk *ch = &e->ch;
    ch->id = id;
    ch->hash = span->hash;
    ch->chain = chain;
    ch->parent_id = pid;
    memcpy(ch->tokens, t, sizeof(rp_token) * (size_t)len);
    ch->pos0 = kv->pos[cell0];
    ch->recompute_ms = recompute_ms;
    for (int32_t l = 0; l < kv->n_layer; l++) {
        rp_kv_read_rows(kv, RP_KV_K, l, cell0, len, rp_chunk_k(ch, l));
        rp_kv_read_rows(kv, RP_KV_V, l, cell0, len, rp_chunk_v(ch, l));
    }

    pthread_mutex_lock(&c->mu);
    /* room may have been taken meanwhile (another thread, a prefetch) */
    if (resident && !rp_cache_make_room(c, total, INFINITY)) resident = false;
    if (!resident && (!c->has_store || c->transient_bytes + total > rp_cache_transient_allow(c))) {
        pthread_mutex_unlock(&c->mu);
        rp_cache_entry_free(e);
        return RP_OK;
    }
    if (resident) rp_cache_entry_index(c, e);
    else rp_cache_entry_make_transient(c, e);
    ch->refs = 1;
    if (!e->transient) c->pinned_bytes += total;
    ch->last_used = ++c->clock;
    e->heat = 1.0;
    c->st.inserts++;
    if (c->has_store && !c->ro) {
        rp_cache_dirty_add(c, e);
        c->last_insert_ms = rp_cache_now_ms();
    }
    rp_cache_note_access(c, e);
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
        rp_cache_heap_del(c, e);
    }
    while (e) {
        pthread_mutex_unlock(&c->mu);
        bool go = fn(user, &e->ch);
        pthread_mutex_lock(&c->mu);
        rp_centry *next = go && e->indexed ? e->all_next : NULL;
        if (next) {
            next->ipins++;
            rp_cache_heap_del(c, next);
        }
        e->ipins--;
        rp_cache_settle(c, e, false);
        e = next;
    }
    pthread_mutex_unlock(&c->mu);
}

double rp_chunk_cache_locality(rp_chunk_cache *c, const rp_chunk *ch) {
    if (!c || !ch) return 0;
    pthread_mutex_lock(&c->mu);
    const rp_centry *e = (const rp_centry *)ch;
    double r = e->heat * exp2(-(double)(c->clock - ch->last_used) / rp_cache_half_life(c));
    pthread_mutex_unlock(&c->mu);
    return r;
}
