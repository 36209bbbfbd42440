/* grammar_cache.c — the shared mask cache (grammar_cache.h): a hash table of entries on an LRU list under one
 * mutex. An entry costs its mask (n_vocab bits) plus its key; a hit copies the mask out under the lock (16 KiB
 * for a 128k vocabulary), so an entry can be evicted by another thread right after. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar_cache.h"

typedef struct gc_entry {
    struct gc_entry *hnext;          /* bucket chain */
    struct gc_entry *prev, *next;    /* LRU list: head most recent */
    uint64_t h;
    int32_t *key;
    int32_t key_len, key_cap;
    uint64_t *bits;
} gc_entry;

struct rp_gcache {
    pthread_mutex_t mu;
    gc_entry **buckets;
    uint32_t n_buckets;              /* a power of two */
    gc_entry *head, *tail;
    int32_t words;
    size_t bytes, cap, entries;
    uint64_t hits, misses, evictions;
    double build_ms;
    _Atomic uint64_t checks, rejected, busy_ns;
};

static size_t entry_bytes(const rp_gcache *c, int32_t key_cap) {
    return sizeof(gc_entry) + (size_t)c->words * sizeof(uint64_t) + (size_t)key_cap * sizeof(int32_t);
}

static void rehash(rp_gcache *c) {
    /* about two buckets per entry the budget can hold (keys assumed ~64 ints), at least 64 */
    size_t want = c->cap / (entry_bytes(c, 64) + 1) * 2;
    uint32_t nb = 64;
    while (nb < want && nb < (1u << 24)) nb <<= 1;
    if (nb == c->n_buckets) return;
    gc_entry **b = calloc(nb, sizeof *b);
    if (!b) return;   /* keep the old table: only the chains get longer */
    for (gc_entry *e = c->head; e; e = e->next) {
        uint32_t i = (uint32_t)e->h & (nb - 1);
        e->hnext = b[i];
        b[i] = e;
    }
    free(c->buckets);
    c->buckets = b;
    c->n_buckets = nb;
}

rp_gcache *rp_gcache_new(int32_t words, size_t cap_bytes) {
    rp_gcache *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    if (pthread_mutex_init(&c->mu, NULL) != 0) { free(c); return NULL; }
    c->words = words;
    c->cap = cap_bytes;
    rehash(c);
    if (!c->buckets) { pthread_mutex_destroy(&c->mu); free(c); return NULL; }
    return c;
}

static void unlink_lru(rp_gcache *c, gc_entry *e) {
    if (e->prev) e->prev->next = e->next; else c->head = e->next;
    if (e->next) e->next->prev = e->prev; else c->tail = e->prev;
    e->prev = e->next = NULL;
}

static void push_front(rp_gcache *c, gc_entry *e) {
    e->prev = NULL;
    e->next = c->head;
    if (c->head) c->head->prev = e;
    c->head = e;
    if (!c->tail) c->tail = e;
}

static void unlink_bucket(rp_gcache *c, gc_entry *e) {
    gc_entry **pp = &c->buckets[(uint32_t)e->h & (c->n_buckets - 1)];
    while (*pp && *pp != e) pp = &(*pp)->hnext;
    if (*pp) *pp = e->hnext;
    e->hnext = NULL;
}

/* Takes the least recently used entry out of the table (counted out of bytes); the caller frees or reuses it. */
static gc_entry *evict_one(rp_gcache *c) {
    gc_entry *e = c->tail;
    if (!e) return NULL;
    unlink_lru(c, e);
    unlink_bucket(c, e);
    c->bytes -= entry_bytes(c, e->key_cap);
    c->entries--;
    c->evictions++;
    return e;
}

static void entry_free(gc_entry *e) {
    if (!e) return;
    free(e->key);
    free(e->bits);
    free(e);
}

void rp_gcache_free(rp_gcache *c) {
    if (!c) return;
    for (gc_entry *e = c->head, *n; e; e = n) { n = e->next; entry_free(e); }
    free(c->buckets);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

void rp_gcache_set_cap(rp_gcache *c, size_t cap_bytes) {
    pthread_mutex_lock(&c->mu);
    c->cap = cap_bytes;
    while (c->bytes > c->cap && c->tail) entry_free(evict_one(c));
    rehash(c);
    pthread_mutex_unlock(&c->mu);
}

static gc_entry *find(rp_gcache *c, uint64_t h, const int32_t *key, int32_t len) {
    for (gc_entry *e = c->buckets[(uint32_t)h & (c->n_buckets - 1)]; e; e = e->hnext)
        if (e->h == h && e->key_len == len && memcmp(e->key, key, (size_t)len * sizeof *key) == 0) return e;
    return NULL;
}

bool rp_gcache_get(rp_gcache *c, uint64_t h, const int32_t *key, int32_t len, uint64_t *bits) {
    pthread_mutex_lock(&c->mu);
    gc_entry *e = find(c, h, key, len);
    if (e) {
        memcpy(bits, e->bits, (size_t)c->words * sizeof *bits);
        if (c->head != e) { unlink_lru(c, e); push_front(c, e); }
        c->hits++;
    } else {
        c->misses++;
    }
    pthread_mutex_unlock(&c->mu);
    return e != NULL;
}

void rp_gcache_put(rp_gcache *c, uint64_t h, const int32_t *key, int32_t len, const uint64_t *bits) {
    pthread_mutex_lock(&c->mu);
    if (find(c, h, key, len) || entry_bytes(c, len) > c->cap) {   /* another thread stored it first, or no room */
        pthread_mutex_unlock(&c->mu);
        return;
    }
    gc_entry *e = NULL;
    while (c->bytes + entry_bytes(c, len) > c->cap && c->tail) {
        gc_entry *v = evict_one(c);
        if (!e && v->key_cap >= len) e = v;   /* reuse the first victim that fits */
        else entry_free(v);
    }
    if (!e) {
        e = calloc(1, sizeof *e);
        if (e) e->bits = malloc((size_t)c->words * sizeof *e->bits);
        if (e) e->key = malloc((size_t)len * sizeof *e->key);
        if (!e || !e->bits || !e->key) { entry_free(e); pthread_mutex_unlock(&c->mu); return; }
        e->key_cap = len;
    }
    e->h = h;
    e->key_len = len;
    memcpy(e->key, key, (size_t)len * sizeof *key);
    memcpy(e->bits, bits, (size_t)c->words * sizeof *bits);
    uint32_t i = (uint32_t)h & (c->n_buckets - 1);
    e->hnext = c->buckets[i];
    c->buckets[i] = e;
    push_front(c, e);
    c->bytes += entry_bytes(c, e->key_cap);
    c->entries++;
    pthread_mutex_unlock(&c->mu);
}

void rp_gcache_stats_get(rp_gcache *c, rp_gcache_stats *out) {
    pthread_mutex_lock(&c->mu);
    *out = (rp_gcache_stats){.hits = c->hits, .misses = c->misses, .evictions = c->evictions, .bytes = c->bytes,
                             .entries = c->entries, .cap_bytes = c->cap, .build_ms = c->build_ms,
                             .checks = atomic_load(&c->checks), .rejected = atomic_load(&c->rejected),
                             .busy_ns = atomic_load(&c->busy_ns)};
    pthread_mutex_unlock(&c->mu);
}

void rp_gcache_note_build(rp_gcache *c, double ms) {
    pthread_mutex_lock(&c->mu);
    c->build_ms += ms;
    pthread_mutex_unlock(&c->mu);
}

void rp_gcache_stats_reset(rp_gcache *c) {
    pthread_mutex_lock(&c->mu);
    c->hits = c->misses = c->evictions = 0;
    c->build_ms = 0;
    atomic_store(&c->checks, 0);
    atomic_store(&c->rejected, 0);
    atomic_store(&c->busy_ns, 0);
    pthread_mutex_unlock(&c->mu);
}

void rp_gcache_note_check(rp_gcache *c, bool rejected) {
    atomic_fetch_add_explicit(&c->checks, 1, memory_order_relaxed);
    if (rejected) atomic_fetch_add_explicit(&c->rejected, 1, memory_order_relaxed);
}

void rp_gcache_note_time(rp_gcache *c, uint64_t ns) { atomic_fetch_add_explicit(&c->busy_ns, ns, memory_order_relaxed); }
