/* backend_reuse.c — the reuse engine and its flash store as both backends set them up, and their cache figures. */
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "server/backend_internal.h"
#include "store/store.h"

rp_status rp_backend_reuse_open(const rp_backend *b, rp_reuse **out) {
    *out = NULL;
    rp_reuse_params rp = rp_reuse_default_params();
    rp.mode = (rp_reuse_mode)b->cfg.reuse_mode;
    rp.ratio = b->cfg.recompute_ratio;
    rp.cache_bytes = b->cfg.cache_ram_mb << 20;
    rp_reuse *e = NULL;
    rp_status st = rp_reuse_create(b->m, (rp_type)b->cfg.kv_type, b->n_ctx, rp, &e);
    if (st == RP_OK && b->cfg.cache_dir) {
        /* the flash tier: bound to this model's salt, so a store never serves another model */
        rp_store *store = NULL;
        rp_store_params stp = rp_store_default_params();
        st = rp_store_open(b->cfg.cache_dir, &stp, &store);
        if (st == RP_OK && rp_store_notice(store)[0]) fprintf(stderr, "reprise serve: %s\n", rp_store_notice(store));
        if (st == RP_OK) {
            rp_pool_params pp = rp_pool_default_params();
            pp.disk_budget = (uint64_t)(b->cfg.cache_disk_gb * (double)(1ull << 30));
            pp.async_load = true;   /* flash reads overlap compute: the engine waits per layer */
            /* attach owns the store from here, also when it fails */
            st = rp_chunk_cache_attach_store(rp_reuse_cache(e), store, rp_reuse_salt(e), b->m->name, &pp);
        }
    }
    if (st != RP_OK) {
        rp_reuse_free(e);
        return st;
    }
    *out = e;
    return RP_OK;
}

void rp_backend_reuse_close(rp_reuse *e) {
    if (!e) return;
    if (rp_chunk_cache_has_store(rp_reuse_cache(e)) && rp_chunk_cache_detach_store(rp_reuse_cache(e)) != RP_OK)
        fprintf(stderr, "reprise serve: flushing the store failed: %s\n", rp_last_error());
    rp_reuse_free(e);
}

void rp_backend_reuse_snapshot(rp_reuse *e, rp_backend_stats *st) {
    rp_chunk_cache *cc = e ? rp_reuse_cache(e) : NULL;
    if (!cc) return;
    const rp_cache_stats cs = rp_chunk_cache_stats(cc);
    st->has_cache = true;
    st->has_store = rp_chunk_cache_has_store(cc);
    st->cache_chunks = cs.n_chunks;
    st->cache_bytes = cs.bytes;
    st->cache_evictions = cs.evictions;
    st->cache_inserts = cs.inserts;
    st->store_bytes = cs.disk_bytes;
    st->store_evictions = cs.disk_evictions;
    st->store_written = cs.written;
    st->store_write_failures = cs.write_failures;
}

rp_status rp_backend_reuse_flush(rp_reuse *e) {
    rp_chunk_cache *cc = e ? rp_reuse_cache(e) : NULL;
    return cc && rp_chunk_cache_has_store(cc) ? rp_chunk_cache_flush(cc) : RP_OK;
}

rp_reuse_opts rp_backend_reuse_opts(const rp_job *j) {
    rp_reuse_opts o = rp_reuse_default_opts();
    o.mode = j->p.reuse_mode;   /* -1: the engine's (the server's --reuse) */
    o.ratio = j->p.recompute_ratio;
    o.ns = j->p.cache_ns;       /* the request's API key's namespace (0: shared) */
    return o;
}

/* ---- the public engine (the core backend) ---- */

rp_status rp_backend_engine_open(const rp_backend *b, rp_engine **out) {
    rp_engine_params p = rp_engine_default_params();
    p.n_threads = b->cfg.n_threads;
    p.n_ctx = b->n_ctx;
    p.kv_type = (rp_kv_type)b->cfg.kv_type;
    p.reuse = (rp_reuse_mode)b->cfg.reuse_mode;
    p.recompute_ratio = b->cfg.recompute_ratio;
    p.cache_ram_bytes = b->cfg.cache_ram_mb << 20;
    p.cache_dir = b->cfg.cache_dir;   /* the flash tier, bound to this model's salt: it never serves another model */
    p.cache_disk_bytes = (uint64_t)(b->cfg.cache_disk_gb * (double)(1ull << 30));
    rp_status st = rp_engine_create(b->m, &p, out);
    if (st == RP_OK && rp_engine_notice(*out)[0]) fprintf(stderr, "reprise serve: %s\n", rp_engine_notice(*out));
    return st;
}

void rp_backend_engine_close(rp_engine *e) {
    if (e && rp_engine_flush(e) != RP_OK) fprintf(stderr, "reprise serve: flushing the store failed: %s\n", rp_last_error());
    rp_engine_free(e);
}

void rp_backend_engine_snapshot(rp_engine *e, rp_backend_stats *st) {
    if (!e) return;
    rp_engine_stats es;
    rp_engine_stats_get(e, &es);
    st->has_cache = true;
    st->has_store = es.has_store;
    st->cache_chunks = es.cache_chunks;
    st->cache_bytes = es.cache_bytes;
    st->cache_evictions = es.evictions;
    st->cache_inserts = es.inserts;
    st->store_bytes = es.store_bytes;
    st->store_evictions = es.store_evictions;
    st->store_written = es.written;
    st->store_write_failures = es.write_failures;
}
