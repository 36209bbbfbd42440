/* backend_reuse.c — the public engine (reuse, chunk cache, flash store) as both backends set it up, and its cache figures. */
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "server/backend_internal.h"

rp_status rp_backend_engine_open(const rp_backend *b, rp_engine **out) {
    rp_engine_params p = rp_engine_default_params();
    p.n_threads = b->cfg.n_threads;
    p.n_ctx = b->n_ctx;
    p.kv_type = (rp_kv_type)b->cfg.kv_type;
    p.swa_full = b->cfg.swa_full;
    p.reuse = (rp_reuse_mode)b->cfg.reuse_mode;
    p.recompute_ratio = b->cfg.recompute_ratio;
    p.cache_ram_bytes = b->cfg.cache_ram_mb << 20;
    p.cache_dir = b->cfg.cache_dir;   /* the flash tier, bound to this model's salt: it never serves another model */
    p.cache_disk_bytes = (uint64_t)(b->cfg.cache_disk_gb * (double)(1ull << 30));
    p.embed_model = b->cfg.embed_model;   /* the store's semantic index (needs cache_dir) */
    p.embed_dim = b->cfg.embed_dim;
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
