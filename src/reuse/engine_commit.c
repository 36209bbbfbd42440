/* engine_commit.c — committing a prompt's chunks to the cache: the resumable commit walk (early commits of a
 * sliding-window cache), rp_reuse_commit, rp_reuse_commit_computed, the pending prompt's pins. */
#include "reuse/engine_internal.h"

#include <stdatomic.h>
#include <string.h>

#include "core/error.h"

void rp_reuse_unpin_pending(rp_reuse *e) {
    if (e->cm.on && e->cm.held) rp_chunk_unpin(e->cache, e->cm.held);
    memset(&e->cm, 0, sizeof e->cm);
    for (int32_t i = 0; i < e->n_spans; i++)
        if (e->info[i].prefix_chunk) {
            rp_chunk_unpin(e->cache, e->info[i].prefix_chunk);
            e->info[i].prefix_chunk = NULL;
        }
    e->pending = false;
}

/* Whether this prefill commits the chunks it completes as it goes: a cache with sliding-window ring layers
 * pushes a chunk's cells out of them a batch or two after computing it, before rp_reuse_commit could copy it.
 * Only for a prompt the caller will commit (rp_reuse_opts.persist) and when nothing placed failed to load. */
bool rp_reuse_early_commit(const rp_reuse *e, const rp_kv *kv) {
    return e->early_commit && kv->n_ring > 0 && e->cur.mode != RP_REUSE_NONE && atomic_load(&e->ld.failed) == 0;
}

/* Overwrites an existing chunk's payload with this prompt's KV (same tokens,
 * same layout): upgrades an approximate chunk once an exact copy exists. */
static void overwrite_payload(rp_chunk *ch, const rp_kv *kv, int32_t cell0) {
    for (int32_t l = 0; l < kv->n_layer; l++) {
        rp_kv_read_rows(kv, RP_KV_K, l, cell0, ch->n_tokens, rp_chunk_k(ch, l));
        rp_kv_read_rows(kv, RP_KV_V, l, cell0, ch->n_tokens, rp_chunk_v(ch, l));
    }
    ch->pos0 = kv->pos[cell0];
}

/* Commits spans from the walk's position on while they end by `limit` (a cell; INT32_MAX: all), stopping
 * for good where the cache does not hold a span (see rp_reuse_commit). */
rp_status rp_reuse_commit_step(rp_reuse *e, const rp_kv *kv, int32_t limit) {
    if (!e->cm.on) {
        memset(&e->cm, 0, sizeof e->cm);
        e->cm.on = true;
        e->cm.linked = true;       /* the prefix path so far is in the cache: new chunks hang off it */
        e->cm.path_exact = true;   /* ... and every chunk on it is exact */
    }
    rp_status st = RP_OK;
    rp_chunk *parent = e->cm.parent, *held = e->cm.held;
    bool linked = e->cm.linked, path_exact = e->cm.path_exact;
    int32_t i = e->cm.i;
    for (; i < e->n_spans && st == RP_OK && !e->cm.stopped; i++) {
        const rp_chunk_span *sp = &e->spans[i];
        if (sp->begin + sp->len > limit) break;
        if (e->info[i].prefix_chunk) {
            parent = e->info[i].prefix_chunk;
            path_exact = path_exact && parent->exact;
            continue;
        }
        /* the session cache no longer holds these cells; or a sliding-window cache's ring layers no longer
         * hold cells before held_lo: a chunk is cached whole or not at all (nothing after it can hang off the
         * prefix path then) */
        if (sp->begin + sp->len > kv->n || sp->begin < rp_kv_held_lo(kv)) {
            e->cm.stopped = true;
            break;
        }
        const bool exact = linked && path_exact && e->info[i].exact;
        /* an existing child with the same tokens (its edge: an indexed lookup,
         * however many siblings it has) is refreshed, not duplicated */
        rp_chunk *ch = linked ? rp_chunk_cache_find_child(e->cache, parent, e->toks, sp) : NULL;
        /* an exact copy now exists: upgrade the approximate one — once its own
         * payload has fully arrived (an async flash load would overwrite ours) */
        if (ch && exact && !ch->exact && rp_chunk_cache_wait_layer(e->cache, ch, ch->n_layer - 1) != RP_OK) {
            rp_chunk_unpin(e->cache, ch);   /* it failed to load: insert a fresh one */
            ch = NULL;
        }
        if (ch) {
            if (exact && !ch->exact) {
                overwrite_payload(ch, kv, sp->begin);
                ch->exact = true;
            }
        } else {
            st = rp_chunk_cache_insert(e->cache, linked ? parent : NULL, e->toks, sp, kv, sp->begin,
                                       e->ms_per_token * sp->len, &ch);
            if (st != RP_OK) break;
            if (ch) ch->exact = exact;   /* unlinked (root orphan) chunks are never exact */
        }
        /* the previous chunk stayed pinned through this insert (which may evict) */
        if (held) rp_chunk_unpin(e->cache, held);
        held = ch;
        if (!ch) {   /* did not fit: later chunks can no longer hang off the prefix path */
            linked = false;
            parent = NULL;
            continue;
        }
        /* approximate chunks stay linked (full / blend may follow an identical
         * path again), but everything after them is approximate too */
        path_exact = path_exact && ch->exact;
        parent = linked ? ch : NULL;
    }
    e->cm.i = i;
    e->cm.parent = parent;
    e->cm.held = held;
    e->cm.linked = linked;
    e->cm.path_exact = path_exact;
    if (st != RP_OK) e->cm.stopped = true;
    return st;
}

rp_status rp_reuse_commit(rp_reuse *e, const rp_kv *kv) {
    if (!e->pending) return RP_OK;
    rp_status st = rp_reuse_commit_step(e, kv, INT32_MAX);
    rp_reuse_unpin_pending(e);   /* unpins the walk's last chunk too */
    return st;
}

rp_status rp_reuse_commit_computed(rp_reuse *e, const rp_kv *kv, const rp_token *toks, int32_t n, const int32_t *bounds,
                                  int32_t n_bounds, bool exact) {
    return rp_reuse_commit_computed_opts(e, NULL, kv, toks, n, bounds, n_bounds, exact);
}

rp_status rp_reuse_commit_computed_opts(rp_reuse *e, const rp_reuse_opts *opts, const rp_kv *kv, const rp_token *toks,
                                       int32_t n, const int32_t *bounds, int32_t n_bounds, bool exact) {
    RP_TRY(rp_reuse_check_kv(e, kv));
    RP_TRY(rp_reuse_begin_call(e, opts));
    if (e->cur.mode == RP_REUSE_NONE) return RP_OK;   /* none never writes the cache */
    if (n <= 0 || n > e->max_tokens || n > kv->n)
        return rp_errorf(RP_ERR_RANGE, "reuse: commit of %d tokens (max %d, the cache holds %d)", n, e->max_tokens, kv->n);
    if (e->pending || e->cm.on) rp_reuse_unpin_pending(e);
    int32_t ns = 0;
    RP_TRY(rp_chunk_split(toks, n, bounds, n_bounds, e->cur.chunking, e->cur_salt, e->spans, e->max_tokens, &ns));
    e->n_spans = ns;
    memset(e->info, 0, sizeof *e->info * (size_t)ns);
    memcpy(e->toks, toks, sizeof *toks * (size_t)n);
    e->n_toks = n;
    /* the exact prefix path already cached: new chunks hang off it. Approximate
     * chunks on the path are not taken (their KV is not what `kv` holds) */
    int32_t nm = rp_chunk_cache_match_prefix(e->cache, toks, e->spans, ns, e->matched);
    int32_t keep = 0;
    while (keep < nm && e->matched[keep]->exact && e->matched[keep]->pos0 == e->spans[keep].begin) keep++;
    for (int32_t i = keep; i < nm; i++) rp_chunk_unpin(e->cache, e->matched[i]);
    for (int32_t i = 0; i < keep; i++) e->info[i].prefix_chunk = e->matched[i];
    for (int32_t i = keep; i < ns; i++) e->info[i].exact = exact;
    e->pending = true;
    return rp_reuse_commit(e, kv);
}
