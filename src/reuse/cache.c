/* cache.c — the RAM chunk cache: chunk KV storage, prefix-tree / content-hash / child indexes, LRU eviction. */
#include "reuse/cache.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

/* Design.
 *
 * Threading: none. The cache is not thread-safe; the engine serializes every
 * call (including unpin and foreach) on one cache.
 *
 * Storage: each chunk is one aligned allocation holding an rp_centry (the
 * public rp_chunk first, then the intrusive links below), the KV payload
 * [n_layer][2][n_tokens][row_bytes] (64-byte aligned for SIMD loads), and the
 * tokens. Its accounted size is that whole allocation; the bucket arrays are
 * not counted against the budget.
 *
 * Indexes: three chained hash tables with intrusive doubly-linked bucket
 * lists (next / pprev, so unlinking is O(1)), all with the same power-of-two
 * bucket count, doubled on insert when n_chunks would exceed it:
 *   - chain:   rp_chunk.chain -> chunks; the prefix-tree edge lookup.
 *   - content: rp_chunk.hash  -> chunks; non-prefix reuse (find).
 *   - kids:    (parent_id, first token) -> chunks; match_partial. Keying by
 *              the first token too means a partial lookup only visits
 *              children that share at least one token.
 * Plus an intrusive list of all chunks in insertion (= id) order, used for
 * foreach (parents before children), rehashing and free.
 * A hash is never trusted alone: every hit also compares the tokens (and the
 * parent id where the tree matters). Chunk ids are never reused, so a child
 * whose parent was evicted keeps a parent_id that matches nothing; it stays
 * findable by content but is unreachable through match_prefix.
 *
 * Eviction: unpinned chunks sit on an intrusive doubly-linked LRU list (head
 * = least recent). A chunk leaves the list when it is pinned (hit, insert,
 * dedupe refresh) and is appended at the tail when its last pin is released,
 * so recency is "last time anyone held it" — a chunk in use by a long request
 * is not the first victim after it finishes. Eviction pops the head: O(1) per
 * chunk. pinned_bytes tracks the pinned share, so an insert that cannot fit
 * even after evicting every unpinned chunk is refused without evicting.
 * rp_chunk.last_used is the logical clock of the last hit or insert (the
 * clock ticks on each), as the header documents; find() uses it to choose the
 * most recently used among equal-content chunks.
 *
 * Lookups (match_prefix, match_partial, find) and unpin never allocate.
 *
 * Token arguments: `toks` is the whole prompt and spans index into it
 * (toks[span.begin .. span.begin + span.len)), for match_prefix, find and
 * insert alike; match_partial takes the tokens to continue with directly. */

typedef struct rp_centry rp_centry;
struct rp_centry {
    rp_chunk ch;                       /* first: rp_chunk * <-> rp_centry * */
    rp_centry *chain_next, **chain_pprev;
    rp_centry *hash_next, **hash_pprev;
    rp_centry *kid_next, **kid_pprev;
    rp_centry *lru_prev, *lru_next;    /* linked only while unpinned */
    rp_centry *all_prev, *all_next;    /* every chunk, in insertion (= id) order */
    size_t bytes;                      /* accounted size (the whole allocation) */
};

struct rp_chunk_cache {
    rp_cache_params p;
    size_t nb;                         /* bucket count, a power of two */
    rp_centry **chain_b, **hash_b, **kid_b;
    rp_centry *lru_head, *lru_tail;
    rp_centry *all_head, *all_tail;
    uint64_t clock;
    uint64_t next_id;
    size_t bytes, pinned_bytes;
    rp_cache_stats st;
};

#define RP_CACHE_ALIGN 64
#define RP_CACHE_MIN_BUCKETS 64

static inline rp_centry *rp_ent(rp_chunk *ch) { return (rp_centry *)ch; }

static inline uint64_t rp_mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static inline uint64_t rp_kid_key(uint64_t parent_id, rp_token first) {
    return rp_mix64(parent_id * 0x9e3779b97f4a7c15ull) ^ (uint64_t)(uint32_t)first;
}

static inline size_t rp_bucket(const rp_chunk_cache *c, uint64_t key) { return (size_t)(rp_mix64(key) & (c->nb - 1)); }

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
}

static void rp_index_add(rp_chunk_cache *c, rp_centry *e) {
    RP_HLIST_ADD(&c->chain_b[rp_bucket(c, e->ch.chain)], e, chain_next, chain_pprev);
    RP_HLIST_ADD(&c->hash_b[rp_bucket(c, e->ch.hash)], e, hash_next, hash_pprev);
    RP_HLIST_ADD(&c->kid_b[rp_bucket(c, rp_kid_key(e->ch.parent_id, e->ch.tokens[0]))], e, kid_next, kid_pprev);
}

static void rp_index_del(rp_centry *e) {
    RP_HLIST_DEL(e, chain_next, chain_pprev);
    RP_HLIST_DEL(e, hash_next, hash_pprev);
    RP_HLIST_DEL(e, kid_next, kid_pprev);
}

/* Doubles the bucket arrays and rehashes. A failed allocation leaves the old
 * tables in place: lookups stay correct, only bucket chains get longer. */
static void rp_maybe_grow(rp_chunk_cache *c) {
    if (c->st.n_chunks + 1 <= c->nb || c->nb > SIZE_MAX / 2 / sizeof(rp_centry *)) return;
    size_t nb = c->nb * 2;
    rp_centry **cb = calloc(nb, sizeof *cb), **hb = calloc(nb, sizeof *hb), **kb = calloc(nb, sizeof *kb);
    if (!cb || !hb || !kb) {
        free(cb);
        free(hb);
        free(kb);
        return;
    }
    free(c->chain_b);
    free(c->hash_b);
    free(c->kid_b);
    c->chain_b = cb;
    c->hash_b = hb;
    c->kid_b = kb;
    c->nb = nb;
    for (rp_centry *e = c->all_head; e; e = e->all_next) rp_index_add(c, e);
}

/* ---- LRU list and pins ----------------------------------------------- */

static void rp_lru_append(rp_chunk_cache *c, rp_centry *e) {
    e->lru_next = NULL;
    e->lru_prev = c->lru_tail;
    if (c->lru_tail) c->lru_tail->lru_next = e;
    else c->lru_head = e;
    c->lru_tail = e;
}

static void rp_lru_unlink(rp_chunk_cache *c, rp_centry *e) {
    if (e->lru_prev) e->lru_prev->lru_next = e->lru_next;
    else c->lru_head = e->lru_next;
    if (e->lru_next) e->lru_next->lru_prev = e->lru_prev;
    else c->lru_tail = e->lru_prev;
    e->lru_prev = e->lru_next = NULL;
}

static void rp_pin(rp_chunk_cache *c, rp_centry *e) {
    if (e->ch.refs == 0) {
        rp_lru_unlink(c, e);
        c->pinned_bytes += e->bytes;
    }
    e->ch.refs++;
}

/* A lookup hit: pin, tick the clock, count. */
static void rp_touch_hit(rp_chunk_cache *c, rp_centry *e) {
    rp_pin(c, e);
    e->ch.last_used = ++c->clock;
    e->ch.hits++;
}

void rp_chunk_unpin(rp_chunk_cache *c, rp_chunk *ch) {
    if (!c || !ch) return;
    assert(ch->refs > 0 && "rp_chunk_unpin: chunk is not pinned");
    if (ch->refs <= 0) return;   /* release builds: ignore an unbalanced unpin */
    rp_centry *e = rp_ent(ch);
    if (--ch->refs == 0) {
        c->pinned_bytes -= e->bytes;
        rp_lru_append(c, e);
    }
}

static size_t rp_evict_one(rp_chunk_cache *c, rp_centry *e) {
    assert(e->ch.refs == 0);
    rp_lru_unlink(c, e);
    rp_index_del(e);
    rp_all_unlink(c, e);
    size_t b = e->bytes;
    c->bytes -= b;
    c->st.n_chunks--;
    c->st.evictions++;
    free(e);
    return b;
}

/* ---- create / free ---------------------------------------------------- */

rp_status rp_chunk_cache_create(rp_cache_params p, rp_chunk_cache **out) {
    if (!out) return rp_errorf(RP_ERR_INVALID_ARG, "chunk_cache: out is NULL");
    *out = NULL;
    if (p.n_layer <= 0 || p.row_bytes == 0)
        return rp_errorf(RP_ERR_INVALID_ARG, "chunk_cache: n_layer %d and row_bytes %zu must be > 0", p.n_layer,
                         p.row_bytes);
    rp_chunk_cache *c = calloc(1, sizeof *c);
    if (!c) return rp_errorf(RP_ERR_NOMEM, "chunk_cache: out of memory");
    c->p = p;
    c->nb = RP_CACHE_MIN_BUCKETS;
    c->chain_b = calloc(c->nb, sizeof *c->chain_b);
    c->hash_b = calloc(c->nb, sizeof *c->hash_b);
    c->kid_b = calloc(c->nb, sizeof *c->kid_b);
    if (!c->chain_b || !c->hash_b || !c->kid_b) {
        rp_chunk_cache_free(c);
        return rp_errorf(RP_ERR_NOMEM, "chunk_cache: out of memory");
    }
    c->next_id = 1;   /* 0 means "no parent" */
    *out = c;
    return RP_OK;
}

void rp_chunk_cache_free(rp_chunk_cache *c) {
    if (!c) return;
    for (rp_centry *e = c->all_head; e;) {
        rp_centry *next = e->all_next;
        /* contract: nothing pinned; release builds free anyway (the holder's
         * pointer dangles, which is the caller's bug) */
        assert(e->ch.refs == 0 && "rp_chunk_cache_free: chunk still pinned");
        free(e);
        e = next;
    }
    free(c->chain_b);
    free(c->hash_b);
    free(c->kid_b);
    free(c);
}

/* ---- lookups ---------------------------------------------------------- */

static inline bool rp_same_tokens(const rp_chunk *ch, const rp_token *t, int32_t n) {
    return ch->n_tokens == n && memcmp(ch->tokens, t, (size_t)n * sizeof(rp_token)) == 0;
}

/* The child of `parent_id` reached by an edge with chain value `chain` whose
 * tokens are t[0..n). Dedupe keeps at most one such chunk. */
static rp_centry *rp_find_edge(const rp_chunk_cache *c, uint64_t chain, uint64_t parent_id, const rp_token *t,
                               int32_t n) {
    for (rp_centry *e = c->chain_b[rp_bucket(c, chain)]; e; e = e->chain_next)
        if (e->ch.chain == chain && e->ch.parent_id == parent_id && rp_same_tokens(&e->ch, t, n)) return e;
    return NULL;
}

int32_t rp_chunk_cache_match_prefix(rp_chunk_cache *c, const rp_token *toks, const rp_chunk_span *spans,
                                    int32_t n_spans, rp_chunk **out) {
    if (!c || !toks || !spans || !out || n_spans <= 0) return 0;
    uint64_t chain = 0, parent_id = 0;
    int32_t i = 0;
    for (; i < n_spans; i++) {
        const rp_chunk_span *s = &spans[i];
        if (s->len <= 0 || s->begin < 0) break;
        chain = rp_chunk_chain(chain, s->hash);
        rp_centry *e = rp_find_edge(c, chain, parent_id, toks + s->begin, s->len);
        if (!e) break;
        rp_touch_hit(c, e);
        out[i] = &e->ch;
        parent_id = e->ch.id;
    }
    c->st.prefix_hits += (uint64_t)i;
    if (i < n_spans) c->st.misses++;
    return i;
}

/* Stats: a partial match counts as a prefix hit; no miss is counted when none
 * is found (partial lookups follow a match_prefix miss that was counted). */
rp_chunk *rp_chunk_cache_match_partial(rp_chunk_cache *c, const rp_chunk *parent, const rp_token *toks, int32_t n,
                                       int32_t *n_common) {
    if (n_common) *n_common = 0;
    if (!c || !toks || n <= 0 || !n_common) return NULL;
    const uint64_t pid = parent ? parent->id : 0;
    rp_centry *best = NULL;
    int32_t best_n = 0;
    for (rp_centry *e = c->kid_b[rp_bucket(c, rp_kid_key(pid, toks[0]))]; e; e = e->kid_next) {
        if (e->ch.parent_id != pid || e->ch.tokens[0] != toks[0]) continue;
        const int32_t m = e->ch.n_tokens < n ? e->ch.n_tokens : n;
        int32_t k = 1;
        while (k < m && e->ch.tokens[k] == toks[k]) k++;
        if (k > best_n || (k == best_n && e->ch.last_used > best->ch.last_used)) {
            best = e;
            best_n = k;
        }
    }
    if (!best) return NULL;
    rp_touch_hit(c, best);
    c->st.prefix_hits++;
    *n_common = best_n;
    return &best->ch;
}

rp_chunk *rp_chunk_cache_find(rp_chunk_cache *c, const rp_token *toks, const rp_chunk_span *span) {
    if (!c || !toks || !span || span->len <= 0 || span->begin < 0) return NULL;
    const rp_token *t = toks + span->begin;
    rp_centry *best = NULL;
    for (rp_centry *e = c->hash_b[rp_bucket(c, span->hash)]; e; e = e->hash_next)
        if (e->ch.hash == span->hash && rp_same_tokens(&e->ch, t, span->len) &&
            (!best || e->ch.last_used > best->ch.last_used))
            best = e;
    if (!best) {
        c->st.misses++;
        return NULL;
    }
    rp_touch_hit(c, best);
    c->st.content_hits++;
    return &best->ch;
}

/* ---- insert ----------------------------------------------------------- */

/* Overflow-checked a * b. */
static inline bool rp_mul_ok(size_t a, size_t b, size_t *r) {
    if (a != 0 && b > SIZE_MAX / a) return false;
    *r = a * b;
    return true;
}

static inline size_t rp_align_up(size_t x) { return (x + RP_CACHE_ALIGN - 1) & ~(size_t)(RP_CACHE_ALIGN - 1); }

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

    /* dedupe: same parent and tokens -> refresh, no copy */
    rp_centry *dup = rp_find_edge(c, chain, pid, t, len);
    if (dup) {
        dup->ch.last_used = ++c->clock;
        if (out) {
            rp_pin(c, dup);
            *out = &dup->ch;
        } else if (dup->ch.refs == 0) {   /* refresh its LRU position without pinning */
            rp_lru_unlink(c, dup);
            rp_lru_append(c, dup);
        }
        return RP_OK;
    }

    size_t kv_bytes, tok_bytes, total;
    if (!rp_mul_ok((size_t)c->p.n_layer * 2, (size_t)len, &kv_bytes) || !rp_mul_ok(kv_bytes, c->p.row_bytes, &kv_bytes) ||
        !rp_mul_ok((size_t)len, sizeof(rp_token), &tok_bytes))
        return rp_errorf(RP_ERR_NOMEM, "chunk_cache_insert: chunk size overflows");
    const size_t head = rp_align_up(sizeof(rp_centry));
    if (kv_bytes > SIZE_MAX - head - tok_bytes - RP_CACHE_ALIGN)
        return rp_errorf(RP_ERR_NOMEM, "chunk_cache_insert: chunk size overflows");
    total = rp_align_up(head + kv_bytes + tok_bytes);

    /* fits at all? (pinned chunks cannot be evicted) — refuse without evicting */
    if (total > c->p.budget_bytes || c->pinned_bytes > c->p.budget_bytes - total) return RP_OK;
    while (c->bytes > c->p.budget_bytes - total && c->lru_head) rp_evict_one(c, c->lru_head);
    if (c->bytes > c->p.budget_bytes - total)   /* unreachable: pinned_bytes was checked */
        return rp_errorf(RP_ERR_INTERNAL, "chunk_cache_insert: byte accounting is inconsistent");

    rp_maybe_grow(c);
    rp_centry *e = aligned_alloc(RP_CACHE_ALIGN, total);
    if (!e) return rp_errorf(RP_ERR_NOMEM, "chunk_cache_insert: cannot allocate %zu bytes", total);
    memset(e, 0, sizeof *e);
    rp_chunk *ch = &e->ch;
    ch->id = c->next_id++;
    ch->hash = span->hash;
    ch->chain = chain;
    ch->parent_id = pid;
    ch->n_tokens = len;
    ch->kv = (uint8_t *)e + head;
    ch->kv_bytes = kv_bytes;
    ch->tokens = (rp_token *)(ch->kv + kv_bytes);
    memcpy(ch->tokens, t, tok_bytes);
    ch->pos0 = kv->pos[cell0];
    ch->kv_type = kv->type;
    ch->row_bytes = kv->row_bytes;
    ch->n_layer = kv->n_layer;
    ch->recompute_ms = recompute_ms;
    /* cells are contiguous within a layer, so each layer's K (and V) block is one memcpy */
    const size_t blk = (size_t)len * kv->row_bytes;
    for (int32_t l = 0; l < kv->n_layer; l++) {
        memcpy(rp_chunk_k(ch, l), rp_kv_k_row(kv, l, cell0), blk);
        memcpy(rp_chunk_v(ch, l), rp_kv_v_row(kv, l, cell0), blk);
    }
    e->bytes = total;
    ch->refs = 1;
    ch->last_used = ++c->clock;
    c->pinned_bytes += total;
    c->bytes += total;
    c->st.n_chunks++;
    c->st.inserts++;
    rp_index_add(c, e);
    rp_all_append(c, e);
    if (out) *out = ch;
    else rp_chunk_unpin(c, ch);   /* nobody to hand the pin to */
    return RP_OK;
}

/* ---- eviction, stats, iteration --------------------------------------- */

size_t rp_chunk_cache_clear(rp_chunk_cache *c) {
    if (!c) return 0;
    size_t freed = 0;
    while (c->lru_head) freed += rp_evict_one(c, c->lru_head);
    return freed;
}

size_t rp_chunk_cache_evict_to(rp_chunk_cache *c, size_t bytes) {
    if (!c) return 0;
    size_t freed = 0;
    while (c->bytes > bytes && c->lru_head) freed += rp_evict_one(c, c->lru_head);
    return freed;
}

rp_cache_stats rp_chunk_cache_stats(const rp_chunk_cache *c) {
    rp_cache_stats s = {0};
    if (!c) return s;
    s = c->st;
    s.bytes = c->bytes;
    return s;
}

/* Visits chunks in insertion order, which is id order, so a prefix parent is
 * always visited before its children (a parent exists when a child is
 * inserted). fn must not insert, evict or clear; pinning or unpinning chunks
 * from fn is fine. */
void rp_chunk_cache_foreach(rp_chunk_cache *c, bool (*fn)(void *user, rp_chunk *ch), void *user) {
    if (!c || !fn) return;
    for (rp_centry *e = c->all_head; e;) {
        rp_centry *next = e->all_next;
        if (!fn(user, &e->ch)) return;
        e = next;
    }
}
