/* cache_flash.c — the flash tier: the writer thread, flush, attach / detach of the store, disk eviction. */
#define _GNU_SOURCE
#include "reuse/cache_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "core/error.h"

void rp_cache_lower_priority(void) {
    /* per-thread nice on Linux; the background threads yield to compute */
    setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 10);
}

void rp_cache_timed_wait(pthread_cond_t *cv, pthread_mutex_t *mu, double ms) {
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
            rp_cache_settle(c, v[i], false);
        }
        pthread_cond_broadcast(&c->io_cv);
        return;
    }
    /* chunks written for the first time get the semantic index (rewrites of the same tokens keep theirs) */
    const rp_chunk_indexer indexer = c->indexer;
    void *const indexer_user = c->indexer_user;
    const rp_token **ix_toks = NULL;
    int32_t *ix_n = NULL, *ix_item = NULL, n_ix = 0;
    rp_store_index *ix = NULL;
    if (indexer) {
        ix_toks = malloc(sizeof *ix_toks * (size_t)n);
        ix_n = malloc(sizeof *ix_n * (size_t)n);
        ix_item = malloc(sizeof *ix_item * (size_t)n);
        ix = calloc((size_t)n, sizeof *ix);
        if (ix_toks && ix_n && ix_item && ix)
            for (int32_t i = 0; i < n; i++)
                if (!v[i]->on_flash) {
                    ix_toks[n_ix] = v[i]->ch.tokens;
                    ix_n[n_ix] = v[i]->ch.n_tokens;
                    ix_item[n_ix++] = i;
                }
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
    double ix_ms = 0;
    int32_t ix_ok = 0;
    if (n_ix > 0) {
        /* the tokens of a chunk under io_busy never change: read without the lock, as rp_store_put reads them */
        const double ti = rp_cache_now_ms();
        if (indexer(indexer_user, ix_toks, ix_n, n_ix, ix) == RP_OK)
            for (int32_t k = 0; k < n_ix; k++) {
                items[ix_item[k]].index = &ix[k];
                ix_ok++;
            }
        ix_ms = rp_cache_now_ms() - ti;
    }
    const double t0 = rp_cache_now_ms();
    rp_status st = rp_store_put(db, items, n, clock);
    const double dt = rp_cache_now_ms() - t0;
    for (int32_t k = 0; k < n_ix; k++) {
        free(ix[k].terms);
        free(ix[k].vec);
    }
    free(ix);
    free(ix_toks);
    free(ix_n);
    free(ix_item);
    char msg[256];
    snprintf(msg, sizeof msg, "%s", rp_last_error());
    pthread_mutex_lock(&c->mu);
    c->writing = false;
    c->st.write_ms += dt;
    c->st.write_batches++;
    if (n_ix > 0) {
        c->st.index_batches++;
        c->st.index_ms += ix_ms;
        c->st.indexed += (uint64_t)ix_ok;
        c->st.index_failures += (uint64_t)(n_ix - ix_ok);
    }
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
            if (!e->modified) rp_cache_dirty_del(c, e);
        } else {
            c->st.write_failures++;
            e->write_failed = true;
            c->write_err = items[i].status != RP_OK ? items[i].status : st;
            snprintf(c->write_err_msg, sizeof c->write_err_msg, "%s", msg);
        }
        rp_cache_heap_rekey(c, e);
        rp_cache_settle(c, e, false);
    }
    free(items);
    pthread_cond_broadcast(&c->io_cv);
}

void rp_cache_write_now(rp_chunk_cache *c, rp_centry **v, int32_t n) {
    for (int32_t i = 0; i < n; i++) {
        rp_cache_heap_del(c, v[i]);
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
            rp_centry *e = rp_cache_find_id(c, c->touch_ids[i]);
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
        rp_centry *e = rp_cache_find_id(c, ids[i]);
        if (e && !e->dirty) {
            e->on_flash = false;
            rp_cache_heap_rekey(c, e);
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
                                .half_life = rp_cache_half_life(c),
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
        rp_centry *e = rp_cache_find_id(c, del[i]);
        if (e && e->on_flash && !e->dirty) {
            e->on_flash = false;   /* the RAM copy is now the only one */
            rp_cache_heap_rekey(c, e);
        }
    }
    free(del);
    return st;
}

static void *writer_main(void *arg) {
    rp_chunk_cache *c = arg;
    rp_cache_lower_priority();
    pthread_mutex_lock(&c->mu);
    int rounds = 0;
    for (;;) {
        bool urgent = false;
        bool work = writer_has_work(c, &urgent);
        if (c->stop && !work) break;
        const double quiet = rp_cache_now_ms() - c->last_insert_ms;
        /* idle means: the engine is not computing, and no insert for write_delay_ms
         * (a request's commit inserts a burst; batch it) — unless a flush waits */
        if (!work || (!urgent && (c->busy > 0 || quiet < c->pp.write_delay_ms))) {
            if (!work && c->flush_req != c->flush_done) {
                c->flush_done = c->flush_req;
                pthread_cond_broadcast(&c->flush_cv);
            }
            double wait = !work ? 1000 : c->busy > 0 ? 50 : c->pp.write_delay_ms - quiet + 1;
            rp_cache_timed_wait(&c->wr_cv, &c->mu, wait);
            continue;
        }
        delete_bad(c, c->db_wr);
        rp_cache_check_damage(c, c->db_wr);
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
            rp_cache_heap_del(c, e);
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
            /* what the batch adds: its payloads, each file rounded up to a 4 KiB block, and the database pages
             * (WAL frames) of its rows: about one per table touched, a few per chunk for its keywords and terms */
            const uint64_t add = bytes + (uint64_t)n * 4096 + (uint64_t)(8 + 2 * n) * 4096;
            if (disk + add > c->pp.disk_budget) {
                uint64_t freed = 0;   /* the batch itself is held (ipins): never a victim */
                disk_evict(c, c->db_wr, low > add ? low - add : 0, &freed);
            }
        }
        if (n > 0) write_batch(c, c->db_wr, v, n);
        rp_cache_check_damage(c, c->db_wr);
        /* under a flash budget the WAL (counted in it) is kept to a tenth of it: every write batch adds a page per
         * table it touches (chunks, payloads, keywords, terms and their counts, vectors), and between evictions
         * (which end with a truncating checkpoint) those frames pile up; a small budget would otherwise be
         * overshot by the WAL alone */
        if (n > 0 && c->pp.disk_budget > 0) {
            pthread_mutex_unlock(&c->mu);
            if (rp_store_wal_bytes(c->db_wr) > c->pp.disk_budget / 10) rp_store_checkpoint(c->db_wr);
            pthread_mutex_lock(&c->mu);
        }
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
        rp_cache_dirty_add(c, e);
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
    rp_store_set_skip(c->db_eng, rp_cache_skip_known_bad, c);
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
                for (uint32_t k = 0; k < v[i].n && k < 64; k++) rp_cache_co_bump(c, v[i].a, v[i].b);
        free(v);
        c->co_dirty = false;
    }
    c->st.disk_bytes = rp_store_disk_bytes(s);
    c->has_store = true;
    c->stop = false;
    c->pf_warm = !c->pp.no_prefetch;
    c->pf_credit = c->pp.prefetch_credit;
    if (ro || pthread_create(&c->th_wr, NULL, writer_main, c) == 0) c->th_wr_on = !ro;
    if (!c->pp.no_prefetch && pthread_create(&c->th_pf, NULL, rp_cache_prefetch_main, c) == 0) c->th_pf_on = true;
    if (c->pp.async_load && pthread_create(&c->th_ld, NULL, rp_cache_loader_main, c) == 0) c->th_ld_on = true;
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
        rp_cache_dirty_del(c, e);
        if (e->transient) rp_cache_settle(c, e, false);   /* idle ones go now, held ones at their unpin */
    }
    for (rp_centry *e = c->all_head; e; e = e->all_next) {
        e->on_flash = false;
        rp_cache_heap_rekey(c, e);
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

rp_status rp_chunk_cache_find_subchunks_q(rp_chunk_cache *c, const rp_token *toks, int32_t n, const rp_subchunk_query *q,
                                          rp_subchunk_match *out, int32_t cap, int32_t *n_out) {
    if (n_out) *n_out = 0;
    if (!c || !n_out || !q) return rp_errorf(RP_ERR_INVALID_ARG, "chunk_cache: NULL argument");
    pthread_mutex_lock(&c->mu);
    const bool has = c->has_store;
    pthread_mutex_unlock(&c->mu);
    if (!has) return RP_OK;
    pthread_mutex_lock(&c->eng_mu);
    rp_status st = rp_store_find_subchunks_q(c->db_eng, toks, n, q, out, cap, n_out);
    pthread_mutex_unlock(&c->eng_mu);
    return st;
}

void rp_chunk_cache_set_indexer(rp_chunk_cache *c, rp_chunk_indexer fn, void *user) {
    if (!c) return;
    pthread_mutex_lock(&c->mu);
    c->indexer = fn;
    c->indexer_user = user;
    pthread_mutex_unlock(&c->mu);
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
