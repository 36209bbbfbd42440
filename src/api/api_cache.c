/* api_cache.c — rp_cache: stats, list, verify, evict, compact and clear of a cache directory's store. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reprise.h"
#include "core/error.h"
#include "model/model.h"
#include "reuse/engine.h"
#include "store/store.h"

struct rp_cache {
    rp_store *s;
    bool write, empty;   /* empty: a kv.db whose schema was never committed (nothing to read) */
};

rp_status rp_cache_open(const char *dir, bool write, rp_cache **out) {
    *out = NULL;
    if (!dir) return rp_errorf(RP_ERR_INVALID_ARG, "cache: no directory");
    rp_cache *c = calloc(1, sizeof *c);
    if (!c) return rp_errorf(RP_ERR_NOMEM, "cache: out of memory");
    rp_store_params sp = rp_store_default_params();
    sp.read_only = !write;
    c->write = write;
    rp_status st = rp_store_open(dir, &sp, &c->s);
    if (st == RP_ERR_NOT_FOUND && !write && strstr(rp_last_error(), RP_STORE_EMPTY_MSG)) {
        c->empty = true;   /* created and never committed to (its first writer died at once) */
        st = RP_OK;
    }
    if (st != RP_OK) {
        free(c);
        return st;
    }
    *out = c;
    return RP_OK;
}

void rp_cache_close(rp_cache *c) {
    if (!c) return;
    rp_store_close(c->s);
    free(c);
}

rp_status rp_cache_salt(const rp_model *m, rp_kv_type kv_type, uint64_t *salt) {
    *salt = 0;
    if (!m) return rp_errorf(RP_ERR_INVALID_ARG, "cache: NULL model");
    /* the salt the reuse engine itself computes, so it can never drift from what engines write */
    rp_reuse_params rp = rp_reuse_default_params();
    rp.pipeline = false;
    rp.cache_bytes = 1 << 20;
    rp_reuse *e = NULL;
    RP_TRY(rp_reuse_create(m, (rp_type)kv_type, 1, rp, &e));
    *salt = rp_reuse_salt(e);
    rp_reuse_free(e);
    return RP_OK;
}

rp_status rp_cache_bind(rp_cache *c, const rp_model *m, rp_kv_type kv_type) {
    if (!c || !m) return rp_errorf(RP_ERR_INVALID_ARG, "cache: NULL handle or model");
    if (c->empty) return rp_errorf(RP_ERR_NOT_FOUND, "cache: the store is empty");
    uint64_t salt;
    RP_TRY(rp_cache_salt(m, kv_type, &salt));
    return rp_store_bind_salt(c->s, salt);
}

rp_status rp_cache_info_get(rp_cache *c, rp_cache_info *out) {
    memset(out, 0, sizeof *out);
    if (!c) return rp_errorf(RP_ERR_INVALID_ARG, "cache: NULL");
    if (c->empty) return RP_OK;
    rp_store_stats ss;
    RP_TRY(rp_store_stats_get(c->s, &ss));
    out->chunks = ss.n_chunks;
    out->corrupt = ss.n_corrupt;
    out->files = ss.n_files;
    out->blobs = ss.n_blobs;
    out->raw_bytes = ss.raw_bytes;
    out->stored_bytes = ss.stored_bytes;
    out->disk_bytes = ss.disk_bytes;
    out->keywords = ss.n_keywords;
    out->vectors = ss.n_vectors;
    out->terms = ss.n_terms;
    out->term_docs = ss.n_term_docs;
    out->write_failures = ss.write_failures;
    out->models = (int32_t)ss.n_models;
    return RP_OK;
}

rp_status rp_cache_models(rp_cache *c, bool (*fn)(void *user, const rp_cache_model *m), void *user) {
    if (!c || !fn) return rp_errorf(RP_ERR_INVALID_ARG, "cache: NULL handle or callback");
    if (c->empty) return RP_OK;
    rp_store_model *mv = NULL;
    int32_t n = 0;
    RP_TRY(rp_store_models(c->s, &mv, &n));
    for (int32_t i = 0; i < n; i++) {
        const rp_cache_model cm = {.id = mv[i].id, .salt = mv[i].salt, .name = mv[i].name, .kv_type = mv[i].kv_type,
                                   .n_layer = mv[i].n_layer, .row_bytes = mv[i].row_bytes, .chunks = mv[i].n_chunks,
                                   .bytes = mv[i].bytes};
        if (!fn(user, &cm)) break;
    }
    free(mv);
    return RP_OK;
}

bool rp_cache_is_empty(const rp_cache *c) { return c && c->empty; }

uint64_t rp_cache_disk_bytes(rp_cache *c) { return c && !c->empty ? rp_store_disk_bytes(c->s) : 0; }

typedef struct list_ctx {
    bool (*fn)(void *user, const rp_cache_entry *e);
    void *user;
} list_ctx;

static bool list_one(void *user, const rp_store_chunk *ch) {
    const list_ctx *x = user;
    const rp_cache_entry e = {
        .id = ch->id, .parent = ch->parent_id, .model = ch->model, .n_tokens = ch->n_tokens, .pos0 = ch->pos0,
        .exact = ch->exact, .in_file = ch->loc == 1, .compressed = ch->codec != 0, .raw_bytes = ch->kv_bytes,
        .stored_bytes = ch->stored_bytes, .hits = ch->hits, .last_used = ch->last_used, .used_at = ch->used_at,
        .tokens = ch->tokens,
    };
    return x->fn(x->user, &e);
}

rp_status rp_cache_list(rp_cache *c, bool (*fn)(void *user, const rp_cache_entry *e), void *user) {
    if (!c || !fn) return rp_errorf(RP_ERR_INVALID_ARG, "cache: NULL handle or callback");
    if (c->empty) return RP_OK;
    list_ctx x = {fn, user};
    return rp_store_foreach(c->s, list_one, &x);
}

rp_status rp_cache_verify(rp_cache *c, bool fix, void (*bad)(void *user, uint64_t id, const char *why), void *user,
                          bool *db_ok, char *why, size_t why_cap, uint64_t *ok, uint64_t *corrupt) {
    *ok = *corrupt = 0;
    *db_ok = true;
    if (why_cap) why[0] = 0;
    if (!c) return rp_errorf(RP_ERR_INVALID_ARG, "cache: NULL");
    if (fix && !c->write) return rp_errorf(RP_ERR_INVALID_ARG, "cache: fix needs a handle opened for writing");
    if (c->empty) return RP_OK;
    char msg[512];
    RP_TRY(rp_store_quick_check(c->s, msg, sizeof msg, db_ok));
    if (!*db_ok && why_cap) snprintf(why, why_cap, "%s", msg);
    return rp_store_verify(c->s, fix, bad, user, ok, corrupt);
}

static rp_status need_write(const rp_cache *c, const char *what) {
    if (!c) return rp_errorf(RP_ERR_INVALID_ARG, "cache: NULL");
    if (!c->write) return rp_errorf(RP_ERR_INVALID_ARG, "cache: %s needs a handle opened for writing", what);
    return RP_OK;
}

rp_status rp_cache_evict(rp_cache *c, uint64_t target_bytes, bool lru, int32_t *n_evicted, uint64_t *freed_bytes) {
    *n_evicted = 0;
    *freed_bytes = 0;
    RP_TRY(need_write(c, "evict"));
    const rp_store_evict_params ep = {.policy = lru ? RP_EVICT_LRU : RP_EVICT_COST,
                                      .clock = rp_store_clock(c->s),
                                      .half_life = 256,
                                      .cascade_weight = 1.0};
    return rp_store_evict(c->s, target_bytes, &ep, NULL, n_evicted, freed_bytes);
}

rp_status rp_cache_compact(rp_cache *c, uint64_t *removed) {
    *removed = 0;
    RP_TRY(need_write(c, "compact"));
    return rp_store_compact(c->s, removed);
}

rp_status rp_cache_clear(rp_cache *c, uint64_t *n_deleted) {
    *n_deleted = 0;
    RP_TRY(need_write(c, "clear"));
    return rp_store_clear(c->s, n_deleted);
}
