/* api_engine.c — rp_engine (context, reuse engine, chunk cache, store, calibration) and rp_seq (prefill, feed, generate). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api/api_internal.h"
#include "core/error.h"
#include "grammar/grammar_sample.h"
#include "model/sampler.h"
#include "reuse/plan.h"
#include "store/store.h"
#include "tokenizer/tokenizer.h"

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

/* ---- engine ---- */

rp_engine_params rp_engine_default_params(void) {
    rp_engine_params p = {
        .n_threads = 2,
        .n_ctx = 0,
        .n_batch = 512,
        .kv_type = RP_KV_F16,
        .reuse = RP_REUSE_BLEND,
        .recompute_ratio = 0.25f,
        .select = RP_SELECT_HYBRID,
        .check_layer = 1,
        .static_mode = false,
        .naive_schedule = false,
        .cache_ram_bytes = (size_t)512 << 20,
        .cache_dir = NULL,
        .cache_disk_bytes = 0,
        .cache_dir_optional = false,
        .load_calibration = true,
        .cache_read_only = false,
        .n_ctx_over_train = false,
        .n_seq_max = 1,
        .cache_policy = RP_CACHE_POLICY_COST,
        .cache_prefetch = true,
        .pipeline = true,
        .async_load = true,
        .cache_terms = true,
        .embed_model = NULL,
        .embed_dim = 256,
    };
    return p;
}

static rp_status check_params(const rp_model *m, const rp_engine_params *p) {
    if (!m || !p) return rp_errorf(RP_ERR_INVALID_ARG, "engine: NULL model or params");
    if (!m->layers) return rp_errorf(RP_ERR_INVALID_ARG, "engine: model '%s' was loaded vocab-only", m->name);
    if (p->n_threads < 1 || p->n_threads > 256) return rp_errorf(RP_ERR_INVALID_ARG, "engine: n_threads %d", p->n_threads);
    if (p->n_ctx < 0 || p->n_batch < 1) return rp_errorf(RP_ERR_INVALID_ARG, "engine: n_ctx %d, n_batch %d", p->n_ctx, p->n_batch);
    if (p->kv_type != RP_KV_F16 && p->kv_type != RP_KV_F32 && p->kv_type != RP_KV_Q8_0)
        return rp_errorf(RP_ERR_INVALID_ARG, "engine: KV type %d (f16, f32 or q8_0)", (int)p->kv_type);
    if ((unsigned)p->reuse > RP_REUSE_BLEND) return rp_errorf(RP_ERR_INVALID_ARG, "engine: reuse mode %d", (int)p->reuse);
    if (!(p->recompute_ratio >= 0 && p->recompute_ratio <= 1))
        return rp_errorf(RP_ERR_INVALID_ARG, "engine: recompute ratio %g not in [0, 1]", (double)p->recompute_ratio);
    if ((unsigned)p->select > RP_SELECT_ATTN) return rp_errorf(RP_ERR_INVALID_ARG, "engine: selection rule %d", (int)p->select);
    if (p->check_layer < 0) return rp_errorf(RP_ERR_INVALID_ARG, "engine: check layer %d is negative", p->check_layer);
    if ((unsigned)p->deviation > RP_DEVIATION_V) return rp_errorf(RP_ERR_INVALID_ARG, "engine: deviation %d", (int)p->deviation);
    if (p->n_seq_max < 0) return rp_errorf(RP_ERR_INVALID_ARG, "engine: n_seq_max %d is negative", p->n_seq_max);
    if ((unsigned)p->cache_policy > RP_CACHE_POLICY_LRU)
        return rp_errorf(RP_ERR_INVALID_ARG, "engine: cache policy %d", (int)p->cache_policy);
    if (p->n_ctx_over_train && m->hp.rope_longrope && !m->rope_inv_freq_long && p->n_ctx > m->hp.n_ctx_train)
        return rp_errorf(RP_ERR_UNSUPPORTED,
                         "engine: n_ctx %d beyond %d needs this LongRoPE model's long RoPE factors, which the file does not "
                         "have (rope_factors_long.weight; the short ones hold up to rope.scaling.original_context_length %d)",
                         p->n_ctx, m->hp.n_ctx_train, m->hp.rope_orig_ctx);
    if (p->embed_dim < 0) return rp_errorf(RP_ERR_INVALID_ARG, "engine: embed_dim %d is negative", p->embed_dim);
    if (p->embed_model && !p->cache_dir)
        return rp_errorf(RP_ERR_INVALID_ARG,
                         "engine: an embedding model ('%s') indexes the chunk store's sub-chunk search: it needs a "
                         "cache_dir (--cache-dir)", p->embed_model);
    const rp_static_shapes *sh = &p->static_shapes;
    if (sh->L_P != 0 || sh->L_S != 0) {
        if (sh->L_P < 1 || sh->L_S < 1 || sh->L_P > 65536 || sh->L_S > 65536)
            return rp_errorf(RP_ERR_INVALID_ARG, "engine: static shapes L_P %d, L_S %d (both in 1..65536, or both 0)",
                             sh->L_P, sh->L_S);
        if (!(sh->lat_P_ms >= 0) || !(sh->lat_S_ms >= 0))
            return rp_errorf(RP_ERR_INVALID_ARG, "engine: static shapes' latencies %g / %g ms", sh->lat_P_ms, sh->lat_S_ms);
    }
    return RP_OK;
}

/* The store's semantic index: terms of the chunks' text (the model's vocabulary detokenizes them) and, with an
 * embedding model, their truncated embeddings; computed by the store's writer thread for chunks it writes, and
 * for a prompt's new runs by the sub-chunk search. Set up before the store is attached (the writer starts then). */
static rp_status open_semantic(rp_engine *e) {
    if (!e->p.cache_terms && !e->embed_path) return RP_OK;
    if (e->embed_path) {
        rp_status st = rp_model_load(e->embed_path, rp_model_default_params(), &e->embed_model);
        if (st != RP_OK) {
            char msg[512];
            snprintf(msg, sizeof msg, "%s", rp_last_error());
            return rp_errorf(st, "engine: embedding model '%s': %s", e->embed_path, msg);
        }
    }
    rp_semantic_params sp = rp_semantic_default_params();
    sp.text_model = e->m;
    sp.embed_model = e->embed_model;
    sp.embed_dim = e->p.embed_dim;
    sp.terms = e->p.cache_terms;
    sp.n_threads = e->p.n_threads;
    RP_TRY(rp_semantic_create(&sp, &e->sem));
    rp_reuse_set_semantic(e->reuse, e->sem);
    if (!e->p.cache_read_only) rp_chunk_cache_set_indexer(rp_reuse_cache(e->reuse), rp_semantic_index, e->sem);
    return RP_OK;
}

static void close_semantic(rp_engine *e) {
    if (e->reuse) {
        rp_reuse_set_semantic(e->reuse, NULL);
        rp_chunk_cache_set_indexer(rp_reuse_cache(e->reuse), NULL, NULL);
    }
    rp_semantic_free(e->sem);
    e->sem = NULL;
    rp_model_free(e->embed_model);
    e->embed_model = NULL;
}

/* The flash tier: the store in cache_dir, bound to the engine's salt, as the chunk cache's pool. */
static rp_status attach_store(rp_engine *e) {
    rp_store_params sp = rp_store_default_params();
    sp.read_only = e->p.cache_read_only;   /* a reader: no lock, no writes (the cache pool reads only) */
    sp.naive = e->p.cache_naive_store;
    rp_store *store = NULL;
    RP_TRY(rp_store_open(e->cache_dir, &sp, &store));
    snprintf(e->notice, sizeof e->notice, "%s", rp_store_notice(store));
    rp_pool_params pp = rp_pool_default_params();
    pp.disk_budget = e->p.cache_disk_bytes;
    pp.policy = e->p.cache_policy == RP_CACHE_POLICY_LRU ? RP_EVICT_LRU : RP_EVICT_COST;
    pp.sync_persist = e->p.cache_sync_persist;
    pp.no_prefetch = !e->p.cache_prefetch;
    /* flash reads overlap compute (the engine waits per layer); no pipeline: both halves before the compute */
    pp.async_load = e->p.pipeline && e->p.async_load;
    /* attach owns the store from here, also when it fails */
    return rp_chunk_cache_attach_store(rp_reuse_cache(e->reuse), store, rp_reuse_salt(e->reuse), e->m->name, &pp);
}

rp_status rp_engine_create(rp_model *m, const rp_engine_params *p, rp_engine **out) {
    *out = NULL;
    RP_TRY(check_params(m, p));
    rp_engine *e = calloc(1, sizeof *e);
    if (!e) return rp_errorf(RP_ERR_NOMEM, "engine: out of memory");
    e->m = m;
    e->p = *p;
    rp_status st = RP_OK;
    if (p->cache_dir) {
        e->cache_dir = strdup(p->cache_dir);
        if (!e->cache_dir) st = rp_errorf(RP_ERR_NOMEM, "engine: out of memory");
        e->p.cache_dir = e->cache_dir;
    }
    if (p->embed_model) {
        e->embed_path = strdup(p->embed_model);
        if (!e->embed_path) st = rp_errorf(RP_ERR_NOMEM, "engine: out of memory");
        e->p.embed_model = e->embed_path;
    }
    rp_reuse_params rp = rp_reuse_default_params();
    rp.mode = p->reuse;
    rp.ratio = p->recompute_ratio;
    rp.blend.check_layer = p->check_layer;
    rp.blend.select = p->select;
    rp.blend.dev = p->deviation == RP_DEVIATION_K ? RP_DEV_K : p->deviation == RP_DEVIATION_V ? RP_DEV_V : RP_DEV_KV;
    rp.static_mode = p->static_mode;
    rp.naive_schedule = p->naive_schedule;
    rp.cache_bytes = p->cache_ram_bytes;
    rp.pipeline = p->pipeline;
    if (p->static_shapes.L_P > 0) {   /* the caller's shapes over any stored ones */
        rp.static_cfg.L_P = p->static_shapes.L_P;
        rp.static_cfg.L_S = p->static_shapes.L_S;
        rp.static_cfg.lat_P_ms = p->static_shapes.lat_P_ms;
        rp.static_cfg.lat_S_ms = p->static_shapes.lat_S_ms;
        e->calibrated = p->static_shapes.calibrated;
    } else if (p->static_mode && p->load_calibration) {
        e->calibrated = rp_calib_lookup(m->fingerprint, p->cache_dir, p->n_threads, &rp.static_cfg);
    }
    const int32_t n_train = m->hp.n_ctx_train > 0 ? m->hp.n_ctx_train : 1 << 24;
    e->n_ctx = p->n_ctx > 0 ? (p->n_ctx < n_train || p->n_ctx_over_train ? p->n_ctx : n_train)
                            : (4096 < n_train ? 4096 : n_train);
    /* static calls' padding rows sit in cells past the context: scratch no real row attends */
    const int32_t pad = p->static_mode ? (rp.static_cfg.L_S > rp.static_cfg.L_P ? rp.static_cfg.L_S : rp.static_cfg.L_P) : 0;
    e->n_cells = e->n_ctx + pad;
    rp_ctx_params cp = rp_ctx_default_params();
    cp.n_threads = p->n_threads;
    cp.n_batch = p->n_batch;
    if (p->static_mode && cp.n_batch < rp.static_cfg.L_S) cp.n_batch = rp.static_cfg.L_S;
    e->n_batch_eff = cp.n_batch;
    if (st == RP_OK && p->n_seq_max > 0) st = rp_api_check_kv_fits(e);
    cp.n_outputs = 1;
    cp.n_ctx_max = e->n_cells;
    if (st == RP_OK) st = rp_ctx_create(m, cp, &e->ctx);
    rp.kv_cells = e->n_cells;   /* the sessions' caches (LongRoPE: past the original length, the long factors) */
    if (st == RP_OK) st = rp_reuse_create(m, (rp_type)p->kv_type, e->n_ctx, rp, &e->reuse);
    /* an embedding model that cannot be used is an error even with an optional store: it was asked for */
    if (st == RP_OK && e->cache_dir) st = open_semantic(e);
    if (st == RP_OK && e->cache_dir && (st = attach_store(e)) != RP_OK && p->cache_dir_optional) {
        snprintf(e->notice, sizeof e->notice, "%s", rp_last_error());   /* RAM only; the notice says why */
        close_semantic(e);   /* no store: nothing to index or search */
        st = RP_OK;
    }
    if (st == RP_OK) {
        e->logits = malloc(sizeof(float) * (size_t)m->hp.n_vocab);
        if (!e->logits) st = rp_errorf(RP_ERR_NOMEM, "engine: out of memory");
    }
    if (st != RP_OK) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", rp_last_error());
        rp_engine_free(e);
        return rp_errorf(st, "%s", msg);
    }
    *out = e;
    return RP_OK;
}

void rp_engine_free(rp_engine *e) {
    if (!e) return;
    if (e->reuse && rp_chunk_cache_has_store(rp_reuse_cache(e->reuse)))
        (void)rp_chunk_cache_detach_store(rp_reuse_cache(e->reuse));   /* flushes; a failure only loses cache */
    close_semantic(e);   /* after the detach: the writer indexed with it until then */
    rp_reuse_free(e->reuse);
    rp_ctx_free(e->ctx);
    free(e->logits);
    free(e->cache_dir);
    free(e->embed_path);
    free(e);
}

const char *rp_engine_notice(const rp_engine *e) { return e ? e->notice : ""; }
int32_t rp_engine_n_ctx(const rp_engine *e) { return e ? e->n_ctx : 0; }
bool rp_engine_calibrated(const rp_engine *e) { return e && e->calibrated; }

void rp_engine_static_shapes(const rp_engine *e, rp_static_shapes *out) {
    memset(out, 0, sizeof *out);
    if (!e) return;
    const rp_static_cfg *c = &rp_reuse_get_params(e->reuse)->static_cfg;
    out->L_P = c->L_P;
    out->L_S = c->L_S;
    out->lat_P_ms = c->lat_P_ms;
    out->lat_S_ms = c->lat_S_ms;
    out->calibrated = e->calibrated;
}

rp_static_shapes rp_static_default_shapes(void) {
    const rp_static_cfg c = rp_static_default_cfg();
    const rp_static_shapes sh = {.L_P = c.L_P, .L_S = c.L_S, .lat_P_ms = c.lat_P_ms, .lat_S_ms = c.lat_S_ms};
    return sh;
}

rp_status rp_engine_flush(rp_engine *e) {
    if (!e) return rp_errorf(RP_ERR_INVALID_ARG, "engine: NULL");
    rp_chunk_cache *c = rp_reuse_cache(e->reuse);
    return rp_chunk_cache_has_store(c) ? rp_chunk_cache_flush(c) : RP_OK;
}

void rp_engine_stats_get(rp_engine *e, rp_engine_stats *out) {
    memset(out, 0, sizeof *out);
    if (!e) return;
    const rp_cache_stats cs = rp_chunk_cache_stats(rp_reuse_cache(e->reuse));
    out->cache_chunks = cs.n_chunks;
    out->cache_bytes = cs.bytes;
    out->inserts = cs.inserts;
    out->evictions = cs.evictions;
    out->prefix_hits = cs.prefix_hits;
    out->content_hits = cs.content_hits;
    out->misses = cs.misses;
    out->flash_hits = cs.flash_hits;
    out->loads = cs.loads;
    out->load_failures = cs.load_failures;
    out->prefetched = cs.prefetched;
    out->prefetch_used = cs.prefetch_used;
    out->written = cs.written;
    out->write_failures = cs.write_failures;
    out->has_store = rp_chunk_cache_has_store(rp_reuse_cache(e->reuse));
    out->store_bytes = cs.disk_bytes;
    out->store_damaged = cs.store_damaged;
    out->store_evictions = cs.disk_evictions;
    out->load_bytes = cs.load_bytes;
    out->load_ms = cs.load_ms;
    out->write_bytes = cs.write_bytes;
    out->write_ms = cs.write_ms;
    out->dropped_dirty = cs.dropped_dirty;
    out->transient_chunks = cs.transient;
    out->transient_bytes = cs.transient_bytes;
    out->dirty_chunks = cs.dirty;
    out->indexed_chunks = cs.indexed;
    out->index_failures = cs.index_failures;
    out->index_ms = cs.index_ms;
}

/* ---- sequences ---- */

rp_status rp_seq_create(rp_engine *e, rp_seq **out) {
    *out = NULL;
    if (!e) return rp_errorf(RP_ERR_INVALID_ARG, "seq: no engine");
    rp_seq *s = calloc(1, sizeof *s);
    if (!s) return rp_errorf(RP_ERR_NOMEM, "seq: out of memory");
    s->e = e;
    rp_session_params sp = rp_session_default_params();
    sp.n_ctx = e->n_cells;
    sp.kv_type = (rp_type)e->p.kv_type;
    sp.swa_cells = rp_api_swa_cells(e);
    rp_status st = rp_session_create(e->ctx, sp, &s->s);
    s->hist = malloc(sizeof *s->hist * (size_t)e->n_cells);
    s->text_cap = 4096;
    s->text = malloc(s->text_cap);
    if (st == RP_OK && (!s->hist || !s->text)) st = rp_errorf(RP_ERR_NOMEM, "seq: out of memory");
    if (st != RP_OK) {
        rp_seq_free(s);
        return st;
    }
    *out = s;
    return RP_OK;
}

void rp_seq_free(rp_seq *s) {
    if (!s) return;
    if (s->e->pending == s) s->e->pending = NULL;
    rp_session_free(s->s);
    rp_sampler_free(s->smp);
    free(s->smp_bias);
    free(s->hist);
    free(s->text);
    free(s);
}

void rp_seq_reset(rp_seq *s) {
    if (!s) return;
    rp_session_reset(s->s);
    s->n_hist = s->n_prompt = s->n_exact = 0;
    s->pending_tok = s->logits_ok = false;
    s->fresh_prefill = false;
    s->smp_restart = true;
    if (s->e->pending == s) s->e->pending = NULL;   /* its cells are gone: nothing left to commit */
}

int32_t rp_seq_n_past(const rp_seq *s) { return s ? s->n_hist : 0; }
int32_t rp_seq_n_exact(const rp_seq *s) { return s ? s->n_exact : 0; }
const rp_token *rp_seq_tokens(const rp_seq *s) { return s ? s->hist : NULL; }
const float *rp_seq_logits(const rp_seq *s) {
    return s && s->n_hist > 0 && s->logits_ok && !s->pending_tok ? rp_session_logits(s->s) : NULL;
}

rp_status rp_seq_truncate(rp_seq *s, int32_t n) {
    if (!s) return rp_errorf(RP_ERR_INVALID_ARG, "seq: NULL");
    if (n < 0 || n > s->n_hist) return rp_errorf(RP_ERR_RANGE, "seq: truncate to %d tokens of %d", n, s->n_hist);
    if (n == s->n_hist) return RP_OK;
    rp_engine *e = s->e;
    if (e->pending == s && n < s->n_prompt) {   /* the commit copies the prompt's cells: before they go */
        e->pending = NULL;
        (void)rp_reuse_commit(e->reuse, rp_session_kv(s->s));   /* a failed commit only loses cache */
    }
    if (s->pending_tok) s->pending_tok = false;   /* the pending token is the last one: cut */
    rp_kv *kv = rp_session_kv(s->s);
    rp_kv_truncate(kv, n);
    if (!rp_kv_can_resume(kv, kv->n)) {
        /* a sliding-window cache no longer holds the window before cell n (cut further back than the last
         * batch): the cells are computed again from the history */
        rp_kv_clear(kv);
        rp_status st = rp_session_feed(s->s, s->hist, n);
        if (st != RP_OK) {
            rp_seq_reset(s);
            return st;
        }
    }
    s->n_hist = n;
    if (s->n_exact > n) s->n_exact = n;
    s->logits_ok = false;   /* hist[n - 1]'s logits are not kept: a generate re-decodes it */
    s->fresh_prefill = false;
    return RP_OK;
}

rp_status rp_seq_fork(rp_seq *dst, const rp_seq *src) {
    if (!dst || !src) return rp_errorf(RP_ERR_INVALID_ARG, "seq: fork of or into NULL");
    if (dst == src) return rp_errorf(RP_ERR_INVALID_ARG, "seq: fork into itself");
    if (dst->e != src->e) return rp_errorf(RP_ERR_INVALID_ARG, "seq: fork into a sequence of another engine");
    rp_engine *e = dst->e;
    if (e->pending == dst) {   /* dst's own prefilled prompt is cached before its cells are overwritten */
        e->pending = NULL;
        (void)rp_reuse_commit(e->reuse, rp_session_kv(dst->s));   /* a failed commit only loses cache */
    }
    const int32_t in_cells = src->pending_tok ? src->n_hist - 1 : src->n_hist;
    rp_status st = rp_session_copy(dst->s, src->s, src->hist, in_cells);
    if (st != RP_OK) {
        rp_seq_reset(dst);
        return st;
    }
    memcpy(dst->hist, src->hist, sizeof *src->hist * (size_t)src->n_hist);
    dst->n_hist = src->n_hist;
    dst->n_prompt = src->n_prompt;
    dst->n_exact = src->n_exact;
    dst->pending_tok = src->pending_tok;
    dst->logits_ok = src->logits_ok;
    dst->fresh_prefill = false;   /* the prompt was prefilled once, on src: the fork's generate reports no prefill */
    dst->smp_restart = true;      /* its sampler starts from the seed of its next generate */
    return RP_OK;
}

/* Decodes what the next sample needs: a pending generated token, or (after a truncate) the last token again. */
static rp_status ensure_logits(rp_seq *s) {
    if (s->pending_tok) {
        RP_TRY(rp_session_feed(s->s, &s->hist[s->n_hist - 1], 1));
        s->pending_tok = false;
        s->logits_ok = true;
    } else if (!s->logits_ok && s->n_hist > 0) {
        rp_kv_truncate(rp_session_kv(s->s), s->n_hist - 1);
        RP_TRY(rp_session_feed(s->s, &s->hist[s->n_hist - 1], 1));
        s->logits_ok = true;
    }
    return RP_OK;
}

rp_gen_opts rp_gen_default_opts(void) {
    rp_gen_opts o = {
        .sampling = rp_sampler_default_params(),
        .max_tokens = 128,
        .reuse = -1,
        .recompute_ratio = -1,
        .select = -1,
        .static_mode = -1,
        .persist = true,
    };
    return o;
}

rp_reuse_opts rp_api_reuse_opts(const rp_gen_opts *o) {
    rp_reuse_opts r = rp_reuse_default_opts();
    if (!o) return r;
    r.mode = o->reuse;
    r.ratio = o->recompute_ratio;
    r.select = o->select;
    r.static_mode = o->static_mode;
    r.ns = o->cache_namespace;
    r.persist = o->persist ? 1 : 0;
    return r;
}

rp_status rp_seq_prefill(rp_seq *s, const rp_prompt *p, const rp_gen_opts *o, rp_gen_stats *st) {
    rp_gen_stats tmp;
    if (!st) st = &tmp;
    memset(st, 0, sizeof *st);
    if (!s || !p) return rp_errorf(RP_ERR_INVALID_ARG, "seq: NULL sequence or prompt");
    const rp_gen_opts def = rp_gen_default_opts();
    if (!o) o = &def;
    rp_engine *e = s->e;
    if (p->n <= 0) return rp_errorf(RP_ERR_INVALID_ARG, "seq: the prompt is empty");
    if (p->n >= e->n_ctx)
        return rp_errorf(RP_ERR_RANGE, "seq: the prompt is %d tokens, the context %d (raise n_ctx)", p->n, e->n_ctx);
    const rp_reuse_opts ro = rp_api_reuse_opts(o);
    rp_reuse_stats rst;
    /* the reuse engine remembers one prompt: another sequence's uncommitted one is cached now, not lost */
    if (e->pending && e->pending != s) (void)rp_seq_commit(e->pending);
    e->pending = NULL;
    s->n_hist = s->n_prompt = s->n_exact = 0;
    s->pending_tok = s->logits_ok = false;
    s->fresh_prefill = false;
    s->smp_restart = true;   /* a new generation: the sampler starts from its seed */
    const double t0 = now_ms();
    rp_reuse_trace_selection(e->reuse, o->recompute_marks);
    rp_status rs = rp_reuse_prefill_opts(e->reuse, &ro, e->ctx, rp_session_kv(s->s), p->toks, p->n, p->bounds,
                                         p->n_bounds, e->logits, &rst);
    rp_reuse_trace_selection(e->reuse, NULL);
    if (rs == RP_OK) rs = rp_session_adopt(s->s, p->toks, p->n, e->logits);
    if (rs != RP_OK) {
        rp_session_reset(s->s);
        return rs;
    }
    const double dt = now_ms() - t0;
    memcpy(s->hist, p->toks, sizeof *p->toks * (size_t)p->n);
    s->n_hist = s->n_prompt = p->n;
    s->n_exact = rst.n_exact_head < p->n ? rst.n_exact_head : p->n;
    s->logits_ok = true;
    const int mode = o->reuse >= 0 ? o->reuse : (int)e->p.reuse;
    if (o->persist && mode != RP_REUSE_NONE) e->pending = s;
    st->prompt_tokens = rst.n_prompt;
    st->reused_prefix = rst.n_prefix;
    st->reused_prefix_exact = rst.n_prefix_exact;
    st->reused_nonprefix = rst.n_nonprefix;
    st->recomputed = rst.n_recomputed;
    st->computed = rst.n_new;
    st->load_failed = rst.n_load_failed;
    st->ttft_ms = rst.ttft_ms;
    st->chunks = rst.n_chunks;
    st->subchunk = rst.n_subchunk;
    st->computed_rows = rst.n_computed_rows;
    st->calls = rst.n_calls;
    st->pad_rows = rst.n_pad;
    st->attempts = rst.n_attempts;
    st->match_ms = rst.match_ms;
    st->load_ms = rst.load_ms;
    st->load_exposed_ms = rst.load_exposed_ms;
    st->compute_ms = rst.compute_ms;
    st->plan_ms = rst.plan_ms;
    st->bytes_loaded = rst.bytes_loaded;
    st->static_shapes = o->static_mode >= 0 ? o->static_mode != 0 : e->p.static_mode;
    st->calibrated = st->static_shapes && e->calibrated;
    st->prefill_ms = dt;
    st->prompt_tok_per_s = dt > 0 ? p->n / (dt * 1e-3) : 0;
    s->prefill = *st;
    s->fresh_prefill = true;
    return RP_OK;
}

rp_status rp_seq_commit(rp_seq *s) {
    if (!s) return rp_errorf(RP_ERR_INVALID_ARG, "seq: NULL");
    if (s->e->pending != s) return RP_OK;
    s->e->pending = NULL;
    return rp_reuse_commit(s->e->reuse, rp_session_kv(s->s));
}

rp_status rp_seq_feed(rp_seq *s, const rp_token *t, int32_t n) {
    if (!s || n < 0 || (n > 0 && !t)) return rp_errorf(RP_ERR_INVALID_ARG, "seq: feed of %d tokens", n);
    if (n == 0) return RP_OK;
    if (s->n_hist + n > s->e->n_ctx)
        return rp_errorf(RP_ERR_FULL, "seq: %d + %d tokens exceed the context of %d", s->n_hist, n, s->e->n_ctx);
    if (s->pending_tok) {   /* the last generated token first, alone (as a generate would have decoded it) */
        RP_TRY(rp_session_feed(s->s, &s->hist[s->n_hist - 1], 1));
        s->pending_tok = false;
    }
    RP_TRY(rp_session_feed(s->s, t, n));
    memcpy(s->hist + s->n_hist, t, sizeof *t * (size_t)n);
    if (s->n_exact == s->n_hist) s->n_exact += n;   /* computed on exact KV: exact */
    s->n_hist += n;
    s->logits_ok = true;
    s->fresh_prefill = false;
    if (s->smp)   /* the generation goes on: the fed tokens join its penalty window */
        for (int32_t i = 0; i < n; i++) rp_sampler_accept(s->smp, t[i]);
    return RP_OK;
}

/* ---- generation ---- */

static rp_status text_append(rp_seq *s, size_t *len, const char *piece, size_t n) {
    if (*len + n + 1 > s->text_cap) {
        size_t cap = s->text_cap * 2 + n;
        char *t = realloc(s->text, cap);
        if (!t) return rp_errorf(RP_ERR_NOMEM, "seq: out of memory for the generated text");
        s->text = t;
        s->text_cap = cap;
    }
    memcpy(s->text + *len, piece, n);
    *len += n;
    s->text[*len] = 0;
    return RP_OK;
}

/* The first stop string in text[from, len), as its start; -1 if none. */
static long find_stop(const rp_gen_opts *o, const char *text, size_t len, size_t from) {
    long best = -1;
    for (int32_t i = 0; i < o->n_stop; i++) {
        const char *st = o->stop[i];
        const size_t sl = st ? strlen(st) : 0;
        if (!sl || sl > len) continue;
        const size_t start = from > sl ? from - sl + 1 : 0;
        for (size_t k = start; k + sl <= len; k++)
            if (!memcmp(text + k, st, sl)) {
                if (best < 0 || (long)k < best) best = (long)k;
                break;
            }
    }
    return best;
}

/* Bytes at the end of text that could still become a stop string: held back from the stream. */
static size_t stop_holdback(const rp_gen_opts *o, const char *text, size_t len) {
    size_t hold = 0;
    for (int32_t i = 0; i < o->n_stop; i++) {
        const char *st = o->stop[i];
        const size_t sl = st ? strlen(st) : 0;
        for (size_t k = sl > 1 ? sl - 1 : 0; k > hold && k > 0; k--)
            if (k <= len && !memcmp(text + len - k, st, k)) {
                hold = k;
                break;
            }
    }
    return hold;
}

static bool same_sampling(const rp_sampler_params *a, const rp_logit_bias *a_bias, const rp_sampler_params *b) {
    if (a->temp != b->temp || a->top_k != b->top_k || a->top_p != b->top_p || a->min_p != b->min_p ||
        a->repeat_penalty != b->repeat_penalty || a->repeat_last_n != b->repeat_last_n ||
        a->presence_penalty != b->presence_penalty || a->frequency_penalty != b->frequency_penalty ||
        a->seed != b->seed || a->n_bias != b->n_bias)
        return false;
    for (int32_t i = 0; i < a->n_bias; i++)
        if (a_bias[i].token != b->bias[i].token || a_bias[i].bias != b->bias[i].bias) return false;
    return true;
}

/* The sequence's sampler for these params: the one it has (the generation goes on), or a new one from the seed
 * whose penalty window is the sequence's last tokens. */
static rp_status seq_sampler(rp_seq *s, const rp_sampler_params *sp, bool reseed) {
    if (s->smp && !s->smp_restart && !reseed && same_sampling(&s->smp_p, s->smp_bias, sp)) return RP_OK;
    if (sp->n_bias < 0 || (sp->n_bias > 0 && !sp->bias))
        return rp_errorf(RP_ERR_INVALID_ARG, "seq: %d logit biases", sp->n_bias);
    rp_sampler *smp = NULL;
    RP_TRY(rp_sampler_create(*sp, s->e->m->hp.n_vocab, &smp));
    rp_logit_bias *bias = NULL;
    if (sp->n_bias > 0 && !(bias = malloc(sizeof *bias * (size_t)sp->n_bias))) {
        rp_sampler_free(smp);
        return rp_errorf(RP_ERR_NOMEM, "seq: out of memory");
    }
    if (bias) memcpy(bias, sp->bias, sizeof *bias * (size_t)sp->n_bias);
    rp_sampler_free(s->smp);
    free(s->smp_bias);
    s->smp = smp;
    s->smp_p = *sp;
    s->smp_p.bias = NULL;   /* compared through smp_bias */
    s->smp_bias = bias;
    s->smp_restart = false;
    const int32_t w = sp->repeat_last_n;
    for (int32_t i = w > 0 && s->n_hist > w ? s->n_hist - w : 0; i < s->n_hist; i++) rp_sampler_accept(smp, s->hist[i]);
    return RP_OK;
}

rp_status rp_api_seq_sampler(rp_seq *s, const rp_sampler_params *sp) { return seq_sampler(s, sp, false); }

rp_status rp_seq_generate(rp_seq *s, const rp_gen_opts *o, char *buf, size_t cap, size_t *len, rp_gen_stats *st) {
    rp_gen_stats tmp;
    if (!st) st = &tmp;
    size_t tlen_dummy;
    if (!len) len = &tlen_dummy;
    *len = 0;
    if (cap) buf[0] = 0;
    if (!s) return rp_errorf(RP_ERR_INVALID_ARG, "seq: NULL");
    const rp_gen_opts def = rp_gen_default_opts();
    if (!o) o = &def;
    if (o->n_stop < 0 || (o->n_stop > 0 && !o->stop)) return rp_errorf(RP_ERR_INVALID_ARG, "seq: %d stop strings", o->n_stop);
    rp_engine *e = s->e;
    const rp_model *m = e->m;
    if (s->n_hist == 0) return rp_errorf(RP_ERR_INVALID_ARG, "seq: nothing to continue (prefill or feed a prompt first)");
    *st = s->fresh_prefill ? s->prefill : (rp_gen_stats){0};
    s->fresh_prefill = false;
    st->commit_status = RP_OK;
    st->last_token = -1;
    RP_TRY(ensure_logits(s));
    RP_TRY(seq_sampler(s, &o->sampling, o->reseed));
    rp_sampler *smp = s->smp;
    rp_detok dt;
    rp_detok_init(&dt, m->tok, false);
    dt.at_start = false;   /* a continuation keeps its leading space */
    char piece[4096];      /* >= rp_detok_bound() for every vocabulary we load */
    size_t tlen = 0, emitted = 0;
    rp_status rs = RP_OK;
    st->stop = RP_STOP_LENGTH;
    const double t0 = now_ms();
    const long max = o->max_tokens < 0 ? (long)1 << 40 : o->max_tokens;
    rp_grammar_state *gram = rp_grammar_of_hook(o->on_logits, o->logits_user);
    for (long k = 0; k < max; k++) {
        const float *lg = rp_session_logits(s->s);
        rp_token t;
        if (gram) {   /* a grammar: greedy takes the model's choice when allowed, else masks (rp_grammar_sample) */
            rp_grammar_follow(gram, s->hist, s->n_hist);
            t = rp_grammar_sample(gram, smp, o->sampling.temp <= 0, lg, e->logits, m->hp.n_vocab);
        } else if (o->on_logits) {   /* a writable copy (the engine's prefill buffer is free while generating) */
            memcpy(e->logits, lg, sizeof *lg * (size_t)m->hp.n_vocab);
            o->on_logits(o->logits_user, s->hist, s->n_hist, e->logits, m->hp.n_vocab);
            t = rp_sampler_sample(smp, e->logits);
        } else {
            t = rp_sampler_sample(smp, lg);
        }
        if (o->on_chosen) o->on_chosen(o->chosen_user, t, rp_session_logits(s->s), m->hp.n_vocab);
        st->last_token = t;
        if (e->pending == s) {   /* cache the prompt's chunks after the first token, off the TTFT path */
            e->pending = NULL;
            st->commit_status = rp_reuse_commit(e->reuse, rp_session_kv(s->s));   /* a failure only loses cache */
        }
        st->generated++;   /* tokens sampled, as `reprise run` counts them: an end-of-generation one included */
        if (!o->ignore_eos && rp_tokenizer_is_eog(m->tok, t)) {
            st->stop = RP_STOP_EOG;
            break;
        }
        rp_sampler_accept(smp, t);
        const int n = rp_detok_push(&dt, t, piece, sizeof piece);
        const size_t before = tlen;
        if (n > 0 && (rs = text_append(s, &tlen, piece, (size_t)n)) != RP_OK) break;
        const long at = o->n_stop > 0 ? find_stop(o, s->text, tlen, before) : -1;
        if (at >= 0) {
            tlen = (size_t)at;
            s->text[tlen] = 0;
            st->stop = RP_STOP_STRING;
        }
        /* stream what can no longer become a stop string */
        const size_t ready = st->stop == RP_STOP_STRING ? tlen : tlen - stop_holdback(o, s->text, tlen);
        if (o->on_token && !o->on_token(o->user, t, s->text + emitted, ready > emitted ? ready - emitted : 0))
            st->stop = RP_STOP_CANCELLED;
        if (ready > emitted) emitted = ready;
        if (st->stop == RP_STOP_STRING) break;
        if (st->stop == RP_STOP_CANCELLED || k + 1 >= max) {
            /* the last token joins the sequence undecoded: its logits would go unused unless the sequence goes
             * on (then the next feed or generate decodes it) */
            if (s->n_hist < e->n_ctx) {
                if (s->n_exact == s->n_hist) s->n_exact++;
                s->hist[s->n_hist++] = t;
                s->pending_tok = true;
            }
            break;
        }
        if (s->n_hist >= e->n_ctx) {
            st->stop = RP_STOP_CONTEXT;
            break;
        }
        if ((rs = rp_session_feed(s->s, &t, 1)) != RP_OK) break;
        if (s->n_exact == s->n_hist) s->n_exact++;
        s->hist[s->n_hist++] = t;
    }
    if (rs == RP_OK && st->stop != RP_STOP_STRING && st->stop != RP_STOP_CANCELLED) {
        const int n = rp_detok_flush(&dt, piece, sizeof piece);
        if (n > 0) rs = text_append(s, &tlen, piece, (size_t)n);
        const long at = rs == RP_OK && o->n_stop > 0 ? find_stop(o, s->text, tlen, emitted) : -1;
        if (at >= 0) {
            tlen = (size_t)at;
            s->text[tlen] = 0;
            st->stop = RP_STOP_STRING;
        }
        if (rs == RP_OK && o->on_token && tlen > emitted) (void)o->on_token(o->user, -1, s->text + emitted, tlen - emitted);
    }
    const double dt_ms = now_ms() - t0;
    st->decode_ms = dt_ms;
    st->gen_tok_per_s = dt_ms > 0 ? st->generated / (dt_ms * 1e-3) : 0;
    *len = tlen;
    if (cap) {
        const size_t wlen = tlen < cap - 1 ? tlen : cap - 1;
        memcpy(buf, s->text, wlen);
        buf[wlen] = 0;
    }
    return rs;
}

size_t rp_gen_stats_json(const rp_gen_stats *s, char *buf, size_t cap) {
    char plan[32] = "null";   /* a placeholder unless the prefill was static and calibrated */
    if (s->static_shapes && s->calibrated) snprintf(plan, sizeof plan, "%.3f", s->plan_ms);
    const int n = snprintf(
        buf, cap,
        "{\"prompt_tokens\": %d, \"chunks\": %d, \"reused_prefix\": %d, \"reused_prefix_exact\": %d, "
        "\"reused_prefix_approx\": %d, \"reused_nonprefix\": %d, "
        "\"subchunk\": %d, \"recomputed\": %d, \"new\": %d, \"computed_rows\": %d, \"calls\": %d, \"pad_rows\": %d, "
        "\"load_failed\": %d, \"attempts\": %d, "
        "\"ttft_ms\": %.3f, \"match_ms\": %.3f, \"load_ms\": %.3f, \"load_exposed_ms\": %.3f, "
        "\"bytes_loaded\": %llu, \"compute_ms\": %.3f, \"plan_ms\": %s%s%s}",
        s->prompt_tokens, s->chunks, s->reused_prefix, s->reused_prefix_exact, s->reused_prefix - s->reused_prefix_exact,
        s->reused_nonprefix, s->subchunk, s->recomputed, s->computed, s->computed_rows, s->calls, s->pad_rows,
        s->load_failed, s->attempts, s->ttft_ms, s->match_ms, s->load_ms, s->load_exposed_ms,
        (unsigned long long)s->bytes_loaded, s->compute_ms, plan, s->static_shapes ? ", \"calibrated\": " : "",
        s->static_shapes ? (s->calibrated ? "true" : "false") : "");
    return n > 0 ? (size_t)n : 0;
}

/* ---- names ---- */

int rp_kv_type_parse(const char *name) {
    if (!name) return -1;
    if (!strcmp(name, "f16")) return RP_KV_F16;
    if (!strcmp(name, "q8_0")) return RP_KV_Q8_0;
    if (!strcmp(name, "f32")) return RP_KV_F32;
    return -1;
}

const char *rp_kv_type_name(rp_kv_type t) {
    return t == RP_KV_F16 ? "f16" : t == RP_KV_Q8_0 ? "q8_0" : t == RP_KV_F32 ? "f32" : "?";
}
