/* cache_loader.c — flash -> RAM: demand loads of rows found on flash, the async loader, known-bad rows, damage. */
#define _GNU_SOURCE
#include "reuse/cache_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

/* ---- known-bad rows and damage ---- */

bool rp_cache_known_bad(const rp_chunk_cache *c, uint64_t id) {
    if (!c->cap_known_bad || !id) return false;
    for (size_t i = rp_mix64(id) & (c->cap_known_bad - 1);; i = (i + 1) & (c->cap_known_bad - 1)) {
        if (c->known_bad[i] == id) return true;
        if (c->known_bad[i] == 0) return false;
    }
}

/* The lookup connection's rp_store_set_skip callback: flash lookups pass over
 * rows known bad, so an older healthy duplicate (or the next best sibling)
 * is found instead. Runs during those lookups, which never hold mu. */
bool rp_cache_skip_known_bad(void *user, uint64_t id) {
    rp_chunk_cache *c = user;
    pthread_mutex_lock(&c->mu);
    const bool bad = rp_cache_known_bad(c, id);
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
    if (!id || rp_cache_known_bad(c, id)) return true;
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
bool rp_cache_load_error_is_damage(rp_status st) { return st != RP_OK && st != RP_ERR_NOMEM && st != RP_ERR_CANCELLED; }

/* Row `id` is damaged: lookups skip it from now on and the writer deletes it
 * from flash (or, failing that, marks it corrupt there). */
void rp_cache_queue_bad(rp_chunk_cache *c, uint64_t id) {
    (void)known_bad_add(c, id);   /* out of memory: the delete below still removes it; the engine's retries are bounded */
    if (c->ro) return;            /* nothing is written to this store: known_bad alone keeps it out */
    for (int32_t i = 0; i < c->n_bad; i++)
        if (c->bad[i] == id) return;
    rp_cache_push_id(&c->bad, &c->n_bad, &c->cap_bad, id, 1 << 16);
    pthread_cond_signal(&c->wr_cv);
}

/* After a store call on `db` by the thread that owns that connection (mu
 * held): if SQLite called the database corrupt, the pool stops writing to it
 * for good — no insert becomes dirty, queued writes and deletes are dropped
 * (their chunks stay in RAM, or go if they were only waiting for the writer),
 * the writer idles and flush reports it. Lookups go on: every payload is
 * verified by its checksums, and a failed load is a miss. */
void rp_cache_check_damage(rp_chunk_cache *c, const rp_store *db) {
    if (c->damaged || !rp_store_damaged(db)) return;
    c->damaged = true;
    c->ro = true;
    c->n_bad = 0;
    for (rp_centry *e = c->dirty_head, *next; e; e = next) {
        next = e->dirty_next;
        if (e->io_busy) continue;   /* in the writer's batch: it settles it */
        rp_cache_dirty_del(c, e);
        rp_cache_heap_rekey(c, e);
        rp_cache_settle(c, e, false);
    }
    pthread_cond_signal(&c->wr_cv);
}

/* After a store call on `db` (caller holds mu): moves the rows it found
 * corrupt to the writer's delete queue. */
static void collect_bad(rp_chunk_cache *c, rp_store *db) {
    uint64_t ids[32];
    int32_t n;
    while ((n = rp_store_take_bad(db, ids, 32)) > 0)
        for (int32_t i = 0; i < n; i++) rp_cache_queue_bad(c, ids[i]);
    rp_cache_check_damage(c, db);
}

static void loader_enqueue(rp_chunk_cache *c, rp_centry *e);

/* Brings a row found on flash into the pool. Called with mu held and
 * eng_mu held by the caller when db == db_eng; drops mu for the read.
 * Returns the chunk pinned and touched as a hit, or NULL (load failure = a
 * miss; the row is queued for deletion). `meta` is consumed. */
rp_centry *rp_cache_load_row(rp_chunk_cache *c, rp_store *db, rp_store_chunk *meta) {
    if (rp_cache_known_bad(c, meta->id)) {   /* found corrupt before; its deletion is pending */
        rp_store_chunk_clear(meta);
        return NULL;
    }
    rp_centry *e = rp_cache_find_id(c, meta->id);
    if (e) {   /* already here (a prefetch or another lookup won the race) */
        rp_store_chunk_clear(meta);
        if (e->failed) return NULL;
        rp_cache_touch_hit(c, e);
        return e;
    }
    size_t kv_bytes = 0, total = rp_cache_entry_size(c, meta->n_tokens, &kv_bytes);
    if (!total || kv_bytes != meta->kv_bytes) {
        rp_cache_queue_bad(c, meta->id);
        rp_store_chunk_clear(meta);
        return NULL;
    }
    /* no room in the budget and none in the transient allowance: a miss (the
     * caller recomputes), not RAM beyond the bound */
    if (!rp_cache_fits_at_all(c, total) && c->transient_bytes + total > rp_cache_transient_allow(c)) {
        rp_store_chunk_clear(meta);
        return NULL;
    }
    pthread_mutex_unlock(&c->mu);
    e = rp_cache_entry_alloc(c, meta->n_tokens, total, kv_bytes);
    rp_status st = e ? RP_OK : rp_errorf(RP_ERR_NOMEM, "chunk_cache: cannot allocate %zu bytes", total);
    const double t0 = rp_cache_now_ms();
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
    const double dt = rp_cache_now_ms() - t0;
    pthread_mutex_lock(&c->mu);
    rp_cache_check_damage(c, db);
    if (st != RP_OK) {
        c->st.load_failures++;
        if (rp_cache_load_error_is_damage(st)) rp_cache_queue_bad(c, meta->id);
        rp_store_chunk_clear(meta);
        if (e) rp_cache_entry_free(e);
        return NULL;
    }
    rp_centry *dup = rp_cache_find_id(c, meta->id);
    if (dup) {   /* raced: keep the one already indexed */
        rp_cache_entry_free(e);
        rp_store_chunk_clear(meta);
        if (dup->failed) return NULL;
        rp_cache_touch_hit(c, dup);
        return dup;
    }
    c->st.loads++;
    c->st.load_bytes += kv_bytes;
    if (db == c->db_eng) c->st.load_ms += dt;
    if (!c->pp.async_load) rp_cache_note_load_rate(c, dt, kv_bytes);
    if (rp_cache_make_room(c, total, INFINITY)) rp_cache_entry_index(c, e);
    else if (c->transient_bytes + total <= rp_cache_transient_allow(c)) rp_cache_entry_make_transient(c, e);
    else {   /* the room went meanwhile: a miss, as above */
        rp_cache_entry_free(e);
        rp_store_chunk_clear(meta);
        return NULL;
    }
    rp_cache_touch_hit(c, e);
    if (c->pp.async_load) {
        e->layers_ready = 0;
        e->meta = malloc(sizeof *e->meta);
        if (!e->meta) {   /* cannot queue: fail it, the caller's wait reports it */
            e->failed = true;
            rp_store_chunk_clear(meta);
            rp_cache_unindex(c, e, false);
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
rp_centry *rp_cache_flash_lookup(rp_chunk_cache *c, int kind, uint64_t parent_id, uint64_t key, const rp_token *t,
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
        e = rp_cache_load_row(c, c->db_eng, &meta);
        if (e) c->st.flash_hits++;
    }
    pthread_mutex_unlock(&c->mu);
    pthread_mutex_unlock(&c->eng_mu);
    pthread_mutex_lock(&c->mu);
    return e;
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
void *rp_cache_loader_main(void *arg) {
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
                const double tl = rp_cache_now_ms();
                rp_status st = c->stop ? RP_ERR_CANCELLED : rp_store_load_layers(c->db_ld, e->meta, e->ch.kv, l, l + 1);
                const double dl = rp_cache_now_ms() - tl;
                pthread_mutex_lock(&c->mu);
                rp_cache_check_damage(c, c->db_ld);
                if (st == RP_OK) rp_cache_note_load_rate(c, dl * L, e->ch.kv_bytes);   /* one layer's read, scaled to the chunk */
                if (st != RP_OK) {
                    e->failed = true;
                    c->st.load_failures++;
                    if (rp_cache_load_error_is_damage(st)) rp_cache_queue_bad(c, e->ch.id);
                    rp_cache_unindex(c, e, false);
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
            rp_cache_settle(c, e, false);
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
