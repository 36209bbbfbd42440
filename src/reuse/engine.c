/* engine.c — prompt prefill with KV reuse: chunking, prefix match, content hits, re-rotation, blend/static calls. */
#include "reuse/engine.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>

#include "core/error.h"
#include "reuse/rerotate.h"

const char *rp_reuse_mode_name(rp_reuse_mode m) {
    switch (m) {
    case RP_REUSE_NONE: return "none";
    case RP_REUSE_PREFIX: return "prefix";
    case RP_REUSE_FULL: return "full";
    case RP_REUSE_BLEND: return "blend";
    }
    return "?";
}

int rp_reuse_mode_parse(const char *s) {
    if (!s) return -1;
    if (!strcmp(s, "none")) return RP_REUSE_NONE;
    if (!strcmp(s, "prefix")) return RP_REUSE_PREFIX;
    if (!strcmp(s, "full")) return RP_REUSE_FULL;
    if (!strcmp(s, "blend")) return RP_REUSE_BLEND;
    return -1;
}

rp_reuse_params rp_reuse_default_params(void) {
    rp_reuse_params p = {
        .mode = RP_REUSE_BLEND,
        .ratio = 0.25f,
        .blend = rp_blend_default_params(),
        .chunking = rp_chunk_default_params(),
        .static_mode = false,
        .naive_schedule = false,
        .static_cfg = rp_static_default_cfg(),
        .cache_bytes = (size_t)512 << 20,
        .pipeline = true,
        .subchunk_min = 32,
    };
    return p;
}

/* one chunk's tokens [t0, t0 + n) to be placed at cells [cell0, ...) */
typedef struct placement {
    rp_chunk *ch;
    int32_t t0, n, cell0;
    bool unpin;               /* content / partial hits are unpinned once placed */
    bool failed;              /* its payload failed to load: the cells hold nothing usable */
} placement;

/* The load pipeline: a thread that places every placement's layer 0, then
 * layer 1, ..., publishing how many layers are complete; compute waits in the
 * context's layer hook until its layer is in place. */
typedef struct loader {
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool running, stop;
    uint64_t job, done;       /* job generations */
    _Atomic int32_t layers_done;
    _Atomic int32_t compute_layer;   /* highest layer compute has begun in this job (-1: none) */
    atomic_int failed;        /* placements whose payload failed to load or verify (this job) */
    rp_kv *kv;
    placement *pl;
    int32_t n_pl;
    double busy_ms;
    float *krow, *cs;         /* loader-owned scratch */
} loader;

/* what happened to each span of the last prompt, for commit */
typedef struct span_info {
    rp_chunk *prefix_chunk;   /* pinned exact prefix match, or NULL */
    bool exact;               /* its KV in the session cache is exact */
} span_info;

struct rp_reuse {
    const rp_model *m;
    rp_type kv_type;
    rp_reuse_params p;        /* the defaults */
    uint64_t salt;            /* model + KV type (+ LongRoPE's long factors); the store is bound to it */
    bool rope_long;           /* the caches of max_tokens cells use LongRoPE's long factors (rp_model_rope_long) */
    rp_reuse_params cur;      /* the current call's: p with its rp_reuse_opts applied (begin_call) */
    uint64_t cur_salt;        /* salt mixed with the call's cache namespace */
    int32_t max_tokens;
    rp_chunk_cache *cache;
    /* request-phase scratch, sized once for max_tokens */
    rp_chunk_span *spans;
    span_info *info;
    int32_t n_spans;
    rp_token *toks;           /* copy of the last prompt (commit needs it) */
    int32_t n_toks;
    bool pending;             /* spans await commit */
    /* the commit walk over the spans (rp_reuse_commit), resumable: a sliding-window cache commits the chunks a
     * prefill completes while their cells are still held (commit_step), the rest at rp_reuse_commit */
    struct {
        bool on;              /* a walk is under way (spans [0, i) done) */
        int32_t i;
        rp_chunk *parent, *held;
        bool linked, path_exact, stopped;
    } cm;
    bool early_commit;        /* the current prefill commits completed chunks as it goes (ring cache, persist) */
    uint8_t *kinds;           /* [max_tokens + pad] row kinds of the current batch */
    uint8_t *tok_kind;        /* [max_tokens] per prompt token: RP_ROW_REUSE or RP_ROW_NEW */
    rp_chunk **matched;       /* [max_tokens] prefix matches */
    rp_batch batch;
    rp_blend_ws ws;
    rp_segment *segs;
    rp_call *calls;
    rp_call *calls2;          /* naive plan (analysis) */
    float *krow;              /* [kv_dim] re-rotation scratch */
    float *cs;                /* [n_rot] */
    double ms_per_token;      /* running estimate of full-prefill cost per token */
    placement *pl;            /* [max_tokens] pending placements */
    int32_t n_pl;
    loader ld;
    bool async_job;           /* the current placements run on the loader thread */
    bool ring_deferred;       /* a ring cache's ring layers are placed by place_ring_range, not placements_begin */
    double wait_ms;           /* exposed wait of the current prefill */
    uint8_t *trace;           /* caller's [max_tokens] selection marks, or NULL */
    const float *qvec;        /* caller's query vector for the sub-chunk search, or NULL */
    int32_t qdim;
    rp_semantic *sem;         /* terms / embeddings of the prompt's new runs for the sub-chunk search, or NULL */
};

static rp_status loader_start(rp_reuse *e);
static void loader_stop(rp_reuse *e);

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

rp_status rp_reuse_create(const rp_model *m, rp_type kv_type, int32_t max_tokens, rp_reuse_params p,
                          rp_reuse **out) {
    *out = NULL;
    if (max_tokens <= 0) return rp_errorf(RP_ERR_INVALID_ARG, "reuse: max_tokens %d", max_tokens);
    if (!(p.ratio >= 0 && p.ratio <= 1)) return rp_errorf(RP_ERR_INVALID_ARG, "reuse: ratio %g not in [0, 1]", p.ratio);
    rp_reuse *e = calloc(1, sizeof *e);
    if (!e) return rp_errorf(RP_ERR_NOMEM, "reuse: out of memory");
    e->m = m;
    e->kv_type = kv_type;
    e->p = p;
    e->p.static_cfg.r = p.ratio;   /* one recompute ratio for both execution modes */
    if (e->p.static_cfg.L_P <= 0 || e->p.static_cfg.L_S <= 0) {
        free(e);
        return rp_errorf(RP_ERR_INVALID_ARG, "reuse: static call sizes must be positive");
    }
    e->max_tokens = max_tokens;
    /* the salt: model fingerprint (architecture, shapes, RoPE settings, weight
     * digest) and the KV type, so no hash ever matches across them */
    uint64_t salt_in[3] = {m->fingerprint, (uint64_t)kv_type, 0x6c6f6e67726f7065ull /* "longrope" */};
    /* a LongRoPE model's long-context caches rotate K by other frequencies: other hashes (others keep theirs) */
    e->rope_long = rp_model_rope_long(m, p.kv_cells > 0 ? p.kv_cells : max_tokens);
    e->salt = XXH3_64bits(salt_in, e->rope_long ? sizeof salt_in : 2 * sizeof salt_in[0]);
    const int32_t kv_dim = m->hp.n_head_kv * m->hp.head_dim;
    rp_cache_params cp = {.budget_bytes = p.cache_bytes, .n_layer = m->hp.n_layer,
                          .row_bytes = rp_type_row_size(kv_type, kv_dim), .kv_type = kv_type};
    rp_status st = rp_chunk_cache_create(cp, &e->cache);
    int32_t pad = p.static_cfg.L_S > p.static_cfg.L_P ? p.static_cfg.L_S : p.static_cfg.L_P;
    size_t cap = (size_t)max_tokens + (size_t)pad;
    if (st == RP_OK) {
        e->spans = malloc(sizeof *e->spans * (size_t)max_tokens);
        e->info = calloc((size_t)max_tokens, sizeof *e->info);
        e->toks = malloc(sizeof *e->toks * (size_t)max_tokens);
        e->kinds = malloc(cap);
        e->tok_kind = malloc((size_t)max_tokens);
        e->matched = malloc(sizeof *e->matched * (size_t)max_tokens);
        e->segs = malloc(sizeof *e->segs * (size_t)max_tokens);
        e->calls = malloc(sizeof *e->calls * (size_t)max_tokens);
        e->calls2 = malloc(sizeof *e->calls2 * (size_t)max_tokens);
        e->krow = malloc(sizeof(float) * (size_t)kv_dim);
        e->cs = malloc(sizeof(float) * (size_t)m->hp.n_rot);
        e->pl = malloc(sizeof *e->pl * (size_t)max_tokens);
        e->ld.krow = malloc(sizeof(float) * (size_t)kv_dim);
        e->ld.cs = malloc(sizeof(float) * (size_t)m->hp.n_rot);
        if (!e->spans || !e->info || !e->toks || !e->kinds || !e->tok_kind || !e->matched || !e->segs || !e->calls || !e->calls2 ||
            !e->krow || !e->cs || !e->pl || !e->ld.krow || !e->ld.cs)
            st = rp_errorf(RP_ERR_NOMEM, "reuse: out of memory");
    }
    if (st == RP_OK) st = rp_batch_init(&e->batch, (int32_t)cap);
    if (st == RP_OK) st = rp_blend_ws_init(&e->ws, (int32_t)cap, (int32_t)cap, m->hp.n_head, kv_dim);
    if (st == RP_OK && p.pipeline) st = loader_start(e);
    if (st != RP_OK) {
        rp_reuse_free(e);
        return st;
    }
    *out = e;
    return RP_OK;
}

static void unpin_pending(rp_reuse *e) {
    if (e->cm.on && e->cm.held) rp_chunk_unpin(e->cache, e->cm.held);
    memset(&e->cm, 0, sizeof e->cm);
    for (int32_t i = 0; i < e->n_spans; i++)
        if (e->info[i].prefix_chunk) {
            rp_chunk_unpin(e->cache, e->info[i].prefix_chunk);
            e->info[i].prefix_chunk = NULL;
        }
    e->pending = false;
}

void rp_reuse_free(rp_reuse *e) {
    if (!e) return;
    loader_stop(e);
    if (e->cache) unpin_pending(e);
    rp_chunk_cache_free(e->cache);
    free(e->spans);
    free(e->info);
    free(e->toks);
    free(e->kinds);
    free(e->tok_kind);
    free(e->matched);
    free(e->segs);
    free(e->calls);
    free(e->calls2);
    free(e->krow);
    free(e->cs);
    free(e->pl);
    free(e->ld.krow);
    free(e->ld.cs);
    if (e->batch.cap) rp_batch_free(&e->batch);
    rp_blend_ws_free(&e->ws);
    free(e);
}

rp_reuse_opts rp_reuse_default_opts(void) {
    rp_reuse_opts o = {.mode = -1, .ratio = -1, .select = -1, .static_mode = -1, .ns = 0, .persist = -1};
    return o;
}

/* Every public call that reads the reuse settings starts here: the engine's
 * defaults with the call's options over them, and the namespace's salt. */
/* A cache whose K rotate with other RoPE factors than the engine's chunks (LongRoPE: the context size decides). */
static rp_status check_kv(const rp_reuse *e, const rp_kv *kv) {
    if (kv && kv->rope_long != e->rope_long)
        return rp_errorf(RP_ERR_INVALID_ARG,
                         "reuse: this LongRoPE model's engine holds chunks of %s-factor contexts (%d tokens) and the "
                         "cache of %d cells uses the %s factors: give both the same side of its original context "
                         "length %d", e->rope_long ? "long" : "short", e->p.kv_cells > 0 ? e->p.kv_cells : e->max_tokens, kv->n_ctx,
                         kv->rope_long ? "long" : "short", e->m->hp.rope_orig_ctx);
    return RP_OK;
}

static rp_status begin_call(rp_reuse *e, const rp_reuse_opts *o) {
    e->cur = e->p;
    e->cur_salt = e->salt;
    e->early_commit = false;
    if (!o) return RP_OK;
    e->early_commit = o->persist > 0;
    if (o->mode > RP_REUSE_BLEND) return rp_errorf(RP_ERR_INVALID_ARG, "reuse: mode %d unknown", o->mode);
    if (o->ratio > 1) return rp_errorf(RP_ERR_INVALID_ARG, "reuse: ratio %g not in [0, 1]", o->ratio);
    if (o->select > RP_SELECT_ATTN) return rp_errorf(RP_ERR_INVALID_ARG, "reuse: selection rule %d unknown", o->select);
    if (o->mode >= 0) e->cur.mode = (rp_reuse_mode)o->mode;
    if (o->ratio >= 0) e->cur.ratio = e->cur.static_cfg.r = o->ratio;
    if (o->select >= 0) e->cur.blend.select = (rp_select_kind)o->select;
    if (o->static_mode >= 0) e->cur.static_mode = o->static_mode > 0;
    if (o->ns) {   /* another namespace: other chunk hashes, so no lookup ever crosses into another's chunks */
        const uint64_t in[2] = {e->salt, o->ns};
        e->cur_salt = XXH3_64bits(in, sizeof in);
    }
    return RP_OK;
}

rp_chunk_cache *rp_reuse_cache(rp_reuse *e) { return e->cache; }
rp_reuse_params *rp_reuse_get_params(rp_reuse *e) { return &e->p; }
uint64_t rp_reuse_salt(const rp_reuse *e) { return e->salt; }
const rp_model *rp_reuse_model(const rp_reuse *e) { return e->m; }
rp_type rp_reuse_kv_type(const rp_reuse *e) { return e->kv_type; }
void rp_reuse_trace_selection(rp_reuse *e, uint8_t *mark) { e->trace = mark; }
int32_t rp_reuse_compute_layer(const rp_reuse *e) { return atomic_load(&e->ld.compute_layer); }

void rp_reuse_set_semantic(rp_reuse *e, rp_semantic *sem) { e->sem = sem; }

void rp_reuse_set_query_vector(rp_reuse *e, const float *v, int32_t dim) {
    e->qvec = v && dim > 0 ? v : NULL;
    e->qdim = e->qvec ? dim : 0;
}

rp_status rp_reuse_put_vector(rp_reuse *e, const rp_token *toks, int32_t n, const float *v, int32_t dim) {
    if (!toks || n <= 0 || !v || dim <= 0) return rp_errorf(RP_ERR_INVALID_ARG, "reuse: put_vector needs tokens and a vector");
    if (n > e->max_tokens) return rp_errorf(RP_ERR_RANGE, "reuse: %d tokens exceed the engine's %d", n, e->max_tokens);
    RP_TRY(begin_call(e, NULL));
    /* own span list: the engine's holds the pending prompt until its commit */
    rp_chunk_span *spans = malloc(sizeof *spans * (size_t)n);
    if (!spans) return rp_errorf(RP_ERR_NOMEM, "reuse: out of memory");
    int32_t ns = 0, found = 0;
    rp_status st = rp_chunk_split(toks, n, NULL, 0, e->cur.chunking, e->cur_salt, spans, n, &ns);
    for (int32_t i = 0; st == RP_OK && i < ns; i++) {
        rp_chunk *ch = rp_chunk_cache_find(e->cache, toks, &spans[i]);
        if (!ch) continue;
        st = rp_chunk_cache_put_vector(e->cache, ch->id, v, dim);
        rp_chunk_unpin(e->cache, ch);
        found++;
    }
    free(spans);
    if (st == RP_OK && found == 0) st = rp_errorf(RP_ERR_NOT_FOUND, "reuse: no cached chunk holds these %d tokens", n);
    return st;
}

/* ---- moving cached KV into the session cache ---- */

/* Copies layer l of placement p: K re-rotated from the chunk's positions to
 * positions == cells (cs/sn: the rotation table for the delta), V as is. */
static void place_layer(const rp_model *m, rp_kv *kv, const placement *p, int32_t l, const float *cs, float *krow) {
    const rp_chunk *ch = p->ch;
    const size_t rb = ch->row_bytes;
    const int32_t delta = p->cell0 - (ch->pos0 + p->t0), half = m->hp.n_rot / 2;
    const uint8_t *sk = rp_chunk_k(ch, l) + (size_t)p->t0 * rb, *sv = rp_chunk_v(ch, l) + (size_t)p->t0 * rb;
    if (delta == 0) {
        rp_kv_write_rows(kv, RP_KV_K, l, p->cell0, p->n, sk);
    } else {
        float own[2 * 512];   /* a layer with its own RoPE base (gemma3 local layers): its own table */
        if (kv->ring[l] && p->cell0 + p->n > kv->base[l] + kv->swa_cells)   /* as rp_kv_write_rows would */
            rp_kv_slide(kv, l, p->cell0 + p->n - kv->swa_cells);
        if (rp_rerotate_layer_own(m, l) && half <= 512) {
            rp_rerotate_table_layer(m, l, delta, own, own + half);
            cs = own;
        }
        for (int32_t t = 0; t < p->n; t++) {
            rp_kv_decode_row(kv, sk + (size_t)t * rb, krow);
            rp_rerotate_row(m, krow, cs, cs + half);
            rp_kv_store_row(kv, RP_KV_K, l, p->cell0 + t, krow);
        }
    }
    rp_kv_write_rows(kv, RP_KV_V, l, p->cell0, p->n, sv);
}

/* ring_floor: a sliding-window cache's ring layers skip placements wholly before it (cells the later
 * placements push out of the ring anyway). */
static bool place_all_layers(rp_chunk_cache *cache, const rp_model *m, rp_kv *kv, const placement *p, float *cs,
                             float *krow, int32_t ring_floor) {
    const int32_t delta = p->cell0 - (p->ch->pos0 + p->t0);
    if (delta != 0) rp_rerotate_table_long(m, kv->rope_long, delta, cs, cs + m->hp.n_rot / 2);
    for (int32_t l = 0; l < kv->n_layer; l++) {
        if (rp_chunk_cache_wait_layer(cache, p->ch, l) != RP_OK) return false;
        if (kv->ring[l] && p->cell0 + p->n <= ring_floor) continue;
        place_layer(m, kv, p, l, cs, krow);
    }
    return true;
}

static void *loader_main(void *vp) {
    rp_reuse *e = vp;
    loader *ld = &e->ld;
    pthread_mutex_lock(&ld->mu);
    for (;;) {
        while (!ld->stop && ld->job == ld->done) pthread_cond_wait(&ld->cv, &ld->mu);
        if (ld->stop) break;
        rp_kv *kv = ld->kv;
        placement *pl = ld->pl;
        const int32_t n_pl = ld->n_pl;
        pthread_mutex_unlock(&ld->mu);
        double t0 = now_ms();
        const int32_t half = e->m->hp.n_rot / 2;
        /* layer-major: every chunk's layer l before any layer l + 1, so compute
         * at layer l starts as soon as possible */
        for (int32_t l = 0; l < kv->n_layer; l++) {
            for (int32_t i = 0; i < n_pl; i++) {
                if (pl[i].failed) continue;
                /* a chunk read from flash with async loading arrives layer by layer */
                if (rp_chunk_cache_wait_layer(e->cache, pl[i].ch, l) != RP_OK) {
                    pl[i].failed = true;
                    atomic_fetch_add(&ld->failed, 1);
                    continue;
                }
                const int32_t delta = pl[i].cell0 - (pl[i].ch->pos0 + pl[i].t0);
                if (delta != 0) rp_rerotate_table_long(e->m, kv->rope_long, delta, ld->cs, ld->cs + half);
                place_layer(e->m, kv, &pl[i], l, ld->cs, ld->krow);
            }
            pthread_mutex_lock(&ld->mu);
            atomic_store(&ld->layers_done, l + 1);
            pthread_cond_broadcast(&ld->cv);
            pthread_mutex_unlock(&ld->mu);
            if (e->p.on_layer_placed) e->p.on_layer_placed(e->p.on_layer_placed_user, l);
        }
        double dt = now_ms() - t0;
        pthread_mutex_lock(&ld->mu);
        ld->busy_ms = dt;
        ld->done = ld->job;
        pthread_cond_broadcast(&ld->cv);
    }
    pthread_mutex_unlock(&ld->mu);
    return NULL;
}

static rp_status loader_start(rp_reuse *e) {
    loader *ld = &e->ld;
    pthread_mutex_init(&ld->mu, NULL);
    pthread_cond_init(&ld->cv, NULL);
    if (pthread_create(&ld->th, NULL, loader_main, e) != 0) return rp_errorf(RP_ERR_NOMEM, "reuse: cannot start the loader thread");
    ld->running = true;
    return RP_OK;
}

static void loader_stop(rp_reuse *e) {
    loader *ld = &e->ld;
    if (!ld->running) return;
    pthread_mutex_lock(&ld->mu);
    ld->stop = true;
    pthread_cond_broadcast(&ld->cv);
    pthread_mutex_unlock(&ld->mu);
    pthread_join(ld->th, NULL);
    pthread_mutex_destroy(&ld->mu);
    pthread_cond_destroy(&ld->cv);
    ld->running = false;
}

/* The context's layer hook while a load job runs: wait for layer l. */
static void loader_wait_layer(void *user, int32_t l) {
    rp_reuse *e = user;
    loader *ld = &e->ld;
    if (atomic_load(&ld->compute_layer) < l) atomic_store(&ld->compute_layer, l);
    if (atomic_load(&ld->layers_done) > l) return;
    double t0 = now_ms();
    pthread_mutex_lock(&ld->mu);
    while (atomic_load(&ld->layers_done) <= l && ld->done != ld->job) pthread_cond_wait(&ld->cv, &ld->mu);
    pthread_mutex_unlock(&ld->mu);
    e->wait_ms += now_ms() - t0;
}

/* Places the recorded placements: on the loader thread (layer by layer,
 * overlapping the compute that follows) or right here (always for a cache
 * with sliding-window ring layers: placing slides them, which the compute's
 * checks must see done). */
static void placements_begin(rp_reuse *e, rp_ctx *c, rp_kv *kv) {
    e->wait_ms = 0;
    e->async_job = false;
    if (e->n_pl == 0) return;
    int32_t top = 0;
    for (int32_t i = 0; i < e->n_pl; i++) {
        for (int32_t t = 0; t < e->pl[i].n; t++) kv->pos[e->pl[i].cell0 + t] = e->pl[i].cell0 + t;
        if (e->pl[i].cell0 + e->pl[i].n > top) top = e->pl[i].cell0 + e->pl[i].n;
    }
    if (!e->ld.running || kv->n_ring > 0) {
        /* ring layers: placed here only up to the cells the ring keeps of them; or, for full / blend
         * (ring_deferred), window by window with the compute (place_ring_range) */
        const int32_t floor = kv->n_ring == 0 ? 0 : e->ring_deferred ? INT32_MAX : top - kv->swa_cells;
        double t0 = now_ms();
        for (int32_t i = 0; i < e->n_pl; i++)
            if (!place_all_layers(e->cache, e->m, kv, &e->pl[i], e->cs, e->krow, floor)) {
                e->pl[i].failed = true;
                atomic_fetch_add(&e->ld.failed, 1);
            }
        e->ld.busy_ms = now_ms() - t0;
        e->wait_ms = e->ld.busy_ms;   /* fully exposed */
        return;
    }
    loader *ld = &e->ld;
    e->async_job = true;
    pthread_mutex_lock(&ld->mu);
    ld->kv = kv;
    ld->pl = e->pl;
    ld->n_pl = e->n_pl;
    atomic_store(&ld->layers_done, 0);
    atomic_store(&ld->compute_layer, -1);
    ld->job++;
    pthread_cond_broadcast(&ld->cv);
    pthread_mutex_unlock(&ld->mu);
    rp_ctx_set_layer_hook(c, loader_wait_layer, e);
}

/* Waits for the loader, removes the hook, unpins what was only borrowed. */
static void placements_end(rp_reuse *e, rp_ctx *c, rp_reuse_stats *st) {
    if (e->n_pl == 0) return;
    if (e->async_job) {
        loader *ld = &e->ld;
        double t0 = now_ms();
        pthread_mutex_lock(&ld->mu);
        while (ld->done != ld->job) pthread_cond_wait(&ld->cv, &ld->mu);
        pthread_mutex_unlock(&ld->mu);
        e->wait_ms += now_ms() - t0;
        rp_ctx_set_layer_hook(c, NULL, NULL);
    }
    for (int32_t i = 0; i < e->n_pl; i++) {
        st->bytes_loaded += 2 * (uint64_t)e->pl[i].n * e->pl[i].ch->row_bytes * (uint64_t)e->pl[i].ch->n_layer;
        if (e->pl[i].unpin) rp_chunk_unpin(e->cache, e->pl[i].ch);
    }
    st->load_ms += e->ld.busy_ms;
    st->load_exposed_ms = e->wait_ms;
    e->n_pl = 0;
}

/* A ring cache under full / blend: the ring layers of every placement's cells in [c0, c1), placed just
 * before the compute that attends them (the rows of cells [c0, c1) attend [c0 - window + 1, c1), which the
 * ring then holds: c1 - c0 <= n_batch). placements_begin has waited for the payloads. */
static void place_ring_range(rp_reuse *e, rp_kv *kv, int32_t c0, int32_t c1) {
    if (!e->ring_deferred || c1 <= c0) return;
    const int32_t half = e->m->hp.n_rot / 2;
    for (int32_t i = 0; i < e->n_pl; i++) {
        const placement *q = &e->pl[i];
        const int32_t s = q->cell0 > c0 ? q->cell0 : c0, t = q->cell0 + q->n < c1 ? q->cell0 + q->n : c1;
        if (q->failed || t <= s || t <= c1 - kv->swa_cells) continue;   /* nothing the ring keeps */
        const placement sub = {q->ch, q->t0 + (s - q->cell0), t - s, s, false, false};
        const int32_t delta = sub.cell0 - (sub.ch->pos0 + sub.t0);
        if (delta != 0) rp_rerotate_table_long(e->m, kv->rope_long, delta, e->cs, e->cs + half);
        for (int32_t l = 0; l < kv->n_layer; l++)
            if (kv->ring[l]) place_layer(e->m, kv, &sub, l, e->cs, e->krow);
    }
}

/* The end of the last chunk ending within (off, off + cnt], or off + cnt when none does: pieces of a ring
 * cache's prefill end at chunk ends, so each chunk can be committed while the ring holds all of it. */
static int32_t span_aligned_end(const rp_reuse *e, int32_t off, int32_t cnt) {
    int32_t best = 0;
    for (int32_t i = 0; i < e->n_spans; i++) {
        const int32_t end = e->spans[i].begin + e->spans[i].len;
        if (end > off && end <= off + cnt && end > best) best = end;
    }
    return best > 0 ? best : off + cnt;
}

static void add_placement(rp_reuse *e, rp_chunk *ch, int32_t t0, int32_t n, int32_t cell0, bool unpin) {
    e->pl[e->n_pl++] = (placement){ch, t0, n, cell0, unpin, false};
}

/* ---- compute steps ---- */

static rp_status commit_step(rp_reuse *e, const rp_kv *kv, int32_t limit);

/* Whether this prefill commits the chunks it completes as it goes: a cache with sliding-window ring layers
 * pushes a chunk's cells out of them a batch or two after computing it, before rp_reuse_commit could copy it.
 * Only for a prompt the caller will commit (rp_reuse_opts.persist) and when nothing placed failed to load. */
static bool early_commit(const rp_reuse *e, const rp_kv *kv) {
    return e->early_commit && kv->n_ring > 0 && e->cur.mode != RP_REUSE_NONE && atomic_load(&e->ld.failed) == 0;
}

/* Plain forward of tokens [a, b) at cells == positions, in n_batch pieces;
 * logits of token n-1 when it is in range. With early_commit, the pieces end
 * at chunk ends (a chunk longer than n_batch aside) and each piece's completed
 * chunks are committed after it, while the ring still holds them. */
static rp_status run_plain(rp_reuse *e, rp_ctx *c, rp_kv *kv, const rp_token *toks, int32_t a, int32_t b, int32_t n,
                           rp_reuse_stats *st) {
    const int32_t nb = rp_ctx_get_params(c).n_batch;
    const bool commit = early_commit(e, kv);
    for (int32_t off = a, cnt; off < b; off += cnt) {
        cnt = b - off < nb ? b - off : nb;
        if (commit) cnt = span_aligned_end(e, off, cnt) - off;
        rp_batch_clear(&e->batch);
        for (int32_t i = 0; i < cnt; i++) rp_batch_add(&e->batch, toks[off + i], 0, off + i, off + i, off + i == n - 1);
        RP_TRY(rp_forward(c, &e->batch, &kv, 1));
        st->n_calls++;
        st->n_computed_rows += cnt;
        if (commit) (void)commit_step(e, kv, off + cnt);   /* a failed insert only loses cache */
    }
    return RP_OK;
}

/* Adds `n_pad` padding rows at cells n_prompt.. (past the prompt). */
static void add_pads(rp_reuse *e, int32_t n_pad, int32_t n_prompt, int32_t *k_out) {
    for (int32_t j = 0; j < n_pad; j++) {
        e->kinds[e->batch.n] = RP_ROW_PAD;
        rp_batch_add(&e->batch, 0, 0, n_prompt + j, n_prompt + j, false);
    }
    *k_out += n_pad;
}

/* One selective-recompute call over tokens [a, b) (row kinds from e->kinds
 * indexed by token), padded to `pad_to` rows when > 0. */
static rp_status run_blend(rp_reuse *e, rp_ctx *c, rp_kv *kv, const rp_token *toks, const uint8_t *tok_kind, int32_t a,
                           int32_t b, int32_t n, int32_t pad_to, int32_t budget_override, rp_reuse_stats *st) {
    rp_batch_clear(&e->batch);
    int32_t n_reuse = 0, n_forced = 0;
    for (int32_t t = a; t < b; t++) {
        e->kinds[e->batch.n] = tok_kind[t];
        rp_batch_add(&e->batch, toks[t], 0, t, t, t == n - 1);
        if (tok_kind[t] == RP_ROW_REUSE && t != n - 1) n_reuse++;
        else n_forced++;
    }
    int32_t pads = 0;
    if (pad_to > b - a) add_pads(e, pad_to - (b - a), n, &pads);
    int32_t budget = budget_override >= 0 ? budget_override - n_forced : (int32_t)ceilf(e->cur.ratio * (float)n_reuse);
    if (budget < 0) budget = 0;
    /* a static call carries exactly its k rows past the check layer (padding
     * rows fill in when fewer are selected), so its cost is the calibrated one */
    rp_blend_params bp = e->cur.blend;
    bp.fixed_rows = budget_override >= 0 ? budget_override : 0;
    rp_blend_stats bs;
    rp_status rs = rp_blend_run(c, kv, &e->batch, e->kinds, budget, &bp, &e->ws, &bs);
    if (pads) rp_kv_truncate(kv, n);   /* drop the padding rows' cells */
    RP_TRY(rs);
    if (e->trace)   /* survivors of the check layer, compacted in row order */
        for (int32_t i = 0; i < e->batch.n; i++) {
            const int32_t t = e->batch.cell[i];
            if (t < n - 1 && tok_kind[t] == RP_ROW_REUSE) e->trace[t] = 1;
        }
    st->n_recomputed += bs.n_selected;
    st->n_calls++;
    st->n_computed_rows += bs.n_rows;
    st->n_pad += bs.n_pad;
    return RP_OK;
}

/* A static prefill call: tokens [a, b) padded to L_P rows, all computed. */
static rp_status run_static_prefill(rp_reuse *e, rp_ctx *c, rp_kv *kv, const rp_token *toks, int32_t a, int32_t b,
                                    int32_t n, rp_reuse_stats *st) {
    rp_batch_clear(&e->batch);
    for (int32_t t = a; t < b; t++) rp_batch_add(&e->batch, toks[t], 0, t, t, t == n - 1);
    int32_t pads = 0;
    add_pads(e, e->cur.static_cfg.L_P - (b - a), n, &pads);
    rp_status rs = rp_forward(c, &e->batch, &kv, 1);
    if (pads) rp_kv_truncate(kv, n);
    RP_TRY(rs);
    st->n_calls++;
    st->n_computed_rows += e->batch.n;
    st->n_pad += pads;
    return RP_OK;
}

/* Whether a chunk found by tokens (a partial or sub-chunk match, which no
 * hash selects) was cached under this call's namespace: its hash is that of
 * its tokens under the namespace's salt. */
static bool in_namespace(const rp_reuse *e, const rp_chunk *ch) {
    return rp_chunk_hash(ch->tokens, ch->n_tokens, e->cur_salt) == ch->hash;
}

/* Sub-chunk reuse: every run of new tokens (at least subchunk_min long, the
 * final token excluded) is searched in the flash store (keyword candidates,
 * then a linear-time longest-common-substring pass); each match is confirmed
 * token by token against the stored chunk and placed re-rotated like a whole
 * chunk, so an edited document still reuses its unchanged stretches. Only
 * chunks on flash are candidates (the store holds the keyword index). */
static void match_subchunks(rp_reuse *e, const rp_token *toks, int32_t n, int32_t P_tok, bool place, rp_reuse_stats *st,
                            int32_t *first_approx) {
    if (!rp_chunk_cache_has_store(e->cache)) return;
    uint8_t *tk = e->tok_kind;
    const int32_t min = e->cur.subchunk_min;
    enum { CAP = 16 };
    rp_subchunk_match mt[CAP];
    for (int32_t a = P_tok; a < n - 1;) {
        if (tk[a] != RP_ROW_NEW) { a++; continue; }
        int32_t b = a;
        while (b < n - 1 && tk[b] == RP_ROW_NEW) b++;
        if (b - a >= min) {
            double tf = now_ms();
            int32_t nm = 0;
            rp_subchunk_query q = rp_subchunk_default_query(min);
            if (e->qvec) {   /* the caller's vector (its own embedding space: vectors it stored itself) */
                q.qvec = e->qvec;
                q.n_qvec = 1;
                q.dim = e->qdim;
                q.k_vec = RP_REUSE_VEC_K;
            }
            if (e->sem) {
                /* the run's own text: its terms, and (without a caller's vector) its embedding per window */
                const double ts = now_ms();
                const rp_term *terms = NULL;
                const float *vecs = NULL;
                int32_t nt = 0, nv = 0, dim = 0;
                if (rp_semantic_query(e->sem, toks + a, b - a, e->cur.chunking.avg_len, !e->qvec, &terms, &nt, &vecs, &nv,
                                      &dim) == RP_OK) {
                    q.terms = terms;
                    q.n_terms = nt;
                    if (!e->qvec && nv > 0) {
                        q.qvec = vecs;
                        q.n_qvec = nv;
                        q.dim = dim;
                        q.k_vec = RP_REUSE_VEC_K / nv > 2 ? RP_REUSE_VEC_K / nv : 2;
                        q.vec_src = rp_semantic_vec_src(e->sem);
                    }
                }
                st->semantic_ms += now_ms() - ts;
            }
            rp_status fs = rp_chunk_cache_find_subchunks_q(e->cache, toks + a, b - a, &q, mt, CAP, &nm);
            if (fs != RP_OK) nm = 0;
            for (int32_t k = 0; k < nm; k++) {
                const rp_subchunk_match *x = &mt[k];
                rp_chunk *ch = rp_chunk_cache_get(e->cache, x->chunk_id);
                if (!ch) continue;
                const int32_t at = a + x->prompt_off;
                bool ok = x->len >= min && x->chunk_off >= 0 && x->chunk_off + x->len <= ch->n_tokens && at + x->len <= b &&
                          in_namespace(e, ch);
                for (int32_t t = 0; ok && t < x->len; t++) ok = ch->tokens[x->chunk_off + t] == toks[at + t] && tk[at + t] == RP_ROW_NEW;
                if (!ok) {   /* never trust an index hit without comparing tokens */
                    rp_chunk_unpin(e->cache, ch);
                    continue;
                }
                if (place) add_placement(e, ch, x->chunk_off, x->len, at, true);
                else rp_chunk_unpin(e->cache, ch);
                for (int32_t t = at; t < at + x->len; t++) tk[t] = RP_ROW_REUSE;
                if (at < *first_approx) *first_approx = at;
                st->n_nonprefix += x->len;
                st->n_subchunk += x->len;
            }
            st->match_ms += now_ms() - tf;
        }
        a = b;
    }
}

/* Finds what the cache holds for the chunked prompt in e->spans and, when
 * kv != NULL, places it: exact prefix chunks (pinned in e->info until commit),
 * the common head of one more chunk, then (full/blend) any chunk by content,
 * re-rotated. Fills e->tok_kind for tokens >= *P_tok: RP_ROW_REUSE or
 * RP_ROW_NEW. *first_approx is the first token whose KV is not exact. */
static void resolve(rp_reuse *e, const rp_token *toks, int32_t n, rp_kv *kv, rp_reuse_stats *st, int32_t *P_out,
                    int32_t *nm_out, int32_t *first_approx) {
    const int32_t ns = e->n_spans;
    double tm = now_ms();
    rp_chunk **matched = e->matched;
    int32_t nm = rp_chunk_cache_match_prefix(e->cache, toks, e->spans, ns, matched);
    /* prefix mode promises exact KV: only exact chunks. full / blend also take
     * approximate chunks along an identical token path: their KV is what this
     * same prefix produced before, so the result repeats that earlier one.
     * At r = 1 full / blend promise exact prefill, so exact chunks only. */
    const bool approx_ok = (e->cur.mode == RP_REUSE_FULL || e->cur.mode == RP_REUSE_BLEND) && e->cur.ratio < 1.0f;
    int32_t keep = 0;
    while (keep < nm && (matched[keep]->exact || approx_ok) && matched[keep]->pos0 == e->spans[keep].begin) keep++;
    for (int32_t i = keep; i < nm; i++) rp_chunk_unpin(e->cache, matched[i]);
    nm = keep;
    int32_t P = nm > 0 ? e->spans[nm - 1].begin + e->spans[nm - 1].len : 0;
    rp_chunk *partial = NULL;
    int32_t n_common = 0;
    /* a partial head only helps when the whole next chunk is not cached elsewhere */
    bool next_cached = false;
    if (nm < ns && e->cur.mode != RP_REUSE_PREFIX) {
        rp_chunk *probe = rp_chunk_cache_find(e->cache, toks, &e->spans[nm]);
        if (probe) {
            next_cached = true;
            rp_chunk_unpin(e->cache, probe);
        }
    }
    if (nm < ns && !next_cached) {
        partial = rp_chunk_cache_match_partial(e->cache, nm > 0 ? matched[nm - 1] : NULL, toks + P, e->spans[nm].len,
                                               &n_common);
        /* root chunks of every namespace share the root: a partial match must be this call's */
        if (partial && ((!partial->exact && !approx_ok) || partial->pos0 != P || !in_namespace(e, partial))) {
            rp_chunk_unpin(e->cache, partial);
            partial = NULL;
            n_common = 0;
        }
    }
    st->match_ms += now_ms() - tm;
    e->n_pl = 0;
    *first_approx = n;
    for (int32_t i = 0; i < nm; i++) {
        if (kv) add_placement(e, matched[i], 0, matched[i]->n_tokens, e->spans[i].begin, false);
        e->info[i].prefix_chunk = matched[i];   /* stays pinned until commit */
        e->info[i].exact = matched[i]->exact;
        if (!matched[i]->exact && e->spans[i].begin < *first_approx) *first_approx = e->spans[i].begin;
    }
    int32_t P_tok = P;
    if (partial) {
        if (!partial->exact && P < *first_approx) *first_approx = P;
        P_tok += n_common;
        if (kv) add_placement(e, partial, 0, n_common, P, true);
        else rp_chunk_unpin(e->cache, partial);
    }
    if (P_tok >= n) {   /* the last token is always computed: its logits start generation */
        P_tok = n - 1;
        if (kv && e->n_pl > 0) {   /* the last placement must stop short of it */
            placement *lp = &e->pl[e->n_pl - 1];
            if (lp->cell0 + lp->n > P_tok) lp->n = P_tok - lp->cell0;
            if (lp->n <= 0) {
                if (lp->unpin) rp_chunk_unpin(e->cache, lp->ch);
                e->n_pl--;
            }
        }
    }
    if (kv) kv->n = P_tok;
    st->n_prefix = P_tok;
    /* of those, the tokens whose KV is exactly a plain prefill's (chunks
     * written by an exact run), apart from ones an earlier approximate run wrote */
    for (int32_t i = 0; i < nm; i++)
        if (matched[i]->exact) {
            const int32_t b = e->spans[i].begin, l = e->spans[i].len;
            st->n_prefix_exact += (b + l < P_tok ? b + l : P_tok) - b;
        }
    if (partial && partial->exact && P < P_tok) st->n_prefix_exact += (P + n_common < P_tok ? P + n_common : P_tok) - P;

    uint8_t *tk = e->tok_kind;
    for (int32_t t = P_tok; t < n; t++) tk[t] = RP_ROW_NEW;
    if (e->cur.mode == RP_REUSE_FULL || e->cur.mode == RP_REUSE_BLEND) {
        for (int32_t i = nm; i < ns; i++) {
            const rp_chunk_span *sp = &e->spans[i];
            if (sp->begin < P_tok) continue;   /* partially covered by the prefix: its rest is computed */
            double tf = now_ms();
            rp_chunk *ch = rp_chunk_cache_find(e->cache, toks, sp);
            st->match_ms += now_ms() - tf;
            if (!ch) continue;
            if (kv) add_placement(e, ch, 0, sp->len, sp->begin, true);
            else rp_chunk_unpin(e->cache, ch);
            for (int32_t t = sp->begin; t < sp->begin + sp->len; t++) tk[t] = RP_ROW_REUSE;
            if (sp->begin < *first_approx) *first_approx = sp->begin;
            st->n_nonprefix += sp->len;
        }
        if (e->cur.subchunk_min > 0) match_subchunks(e, toks, n, P_tok, kv != NULL, st, first_approx);
    }
    *P_out = P_tok;
    *nm_out = nm;
}

/* Runs of equal kind after the prefix, as planner segments (into e->segs). */
static int32_t build_segments(rp_reuse *e, int32_t n, int32_t P_tok) {
    const uint8_t *tk = e->tok_kind;
    int32_t nseg = 0;
    if (P_tok > 0) e->segs[nseg++] = (rp_segment){RP_SEG_PREFIX, 0, P_tok};
    for (int32_t t = P_tok; t < n;) {
        int32_t u = t;
        while (u < n && tk[u] == tk[t]) u++;
        e->segs[nseg++] = (rp_segment){tk[t] == RP_ROW_REUSE ? RP_SEG_REUSE : RP_SEG_NEW, t, u - t};
        t = u;
    }
    return nseg;
}

/* ---- prefill ---- */

/* One prefill attempt. `lookup` false: nothing is taken from the cache (the
 * last attempt after failed loads); the prompt is computed as a plain prefill
 * (static calls in static mode) and its chunks can be committed as exact. */
static rp_status prefill_once(rp_reuse *e, rp_ctx *c, rp_kv *kv, const rp_token *toks, int32_t n,
                              const int32_t *bounds, int32_t n_bounds, bool lookup, float *logits, rp_reuse_stats *st) {
    memset(st, 0, sizeof *st);
    atomic_store(&e->ld.failed, 0);
    const double t0 = now_ms();
    if (n <= 0) return rp_errorf(RP_ERR_INVALID_ARG, "reuse: empty prompt");
    if (n > e->max_tokens) return rp_errorf(RP_ERR_RANGE, "reuse: prompt of %d tokens exceeds max_tokens %d", n, e->max_tokens);
    e->ring_deferred = false;
    if (kv->n_ring > 0) {
        /* A cache whose sliding-window layers hold only the last window + n_batch cells (rp_kv_create_swa):
         * every forward must find its rows' windows held. Static calls (padding rows past the prompt) are off;
         * prefix reuse places in order (the ring keeps the tail); full / blend place the ring layers window by
         * window just before the compute of that window (place_ring_range), in pieces of at most n_batch
         * cells; everything is placed synchronously (placing slides the ring, which the compute must see). */
        e->cur.static_mode = false;
    }
    const rp_static_cfg *sc = &e->cur.static_cfg;
    const bool stat = e->cur.static_mode && e->cur.mode != RP_REUSE_NONE;
    int32_t need = n + (stat ? (sc->L_S > sc->L_P ? sc->L_S : sc->L_P) : 0);
    if (need > kv->n_ctx)
        return rp_errorf(RP_ERR_FULL, "reuse: prompt needs %d cells (incl. static padding), cache has %d", need, kv->n_ctx);
    if (e->pending || e->cm.on) unpin_pending(e);   /* an uncommitted previous prompt is forgotten */
    st->n_prompt = n;
    if (e->trace) memset(e->trace, 0, (size_t)n);
    memcpy(e->toks, toks, sizeof *toks * (size_t)n);
    e->n_toks = n;
    rp_kv_clear(kv);

    /* chunk the prompt */
    int32_t ns = 0;
    RP_TRY(rp_chunk_split(toks, n, bounds, n_bounds, e->cur.chunking, e->cur_salt, e->spans, e->max_tokens, &ns));
    e->n_spans = ns;
    st->n_chunks = ns;
    memset(e->info, 0, sizeof *e->info * (size_t)ns);

    if (e->cur.mode == RP_REUSE_NONE || !lookup) {
        for (int32_t i = 0; i < ns; i++) e->info[i].exact = true;   /* (before: early commits read it) */
        double tc = now_ms();
        if (stat) {
            for (int32_t a = 0; a < n; a += sc->L_P) RP_TRY(run_static_prefill(e, c, kv, toks, a, a + sc->L_P < n ? a + sc->L_P : n, n, st));
        } else {
            RP_TRY(run_plain(e, c, kv, toks, 0, n, n, st));
        }
        st->compute_ms = now_ms() - tc;
        st->n_new = n;
        st->n_exact_head = n;
        for (int32_t i = 0; i < ns; i++) e->info[i].exact = true;   /* a plain prefill: exact (none commits nothing) */
        goto done;
    }

    int32_t P_tok = 0, nm = 0, first_approx = n;
    resolve(e, toks, n, kv, st, &P_tok, &nm, &first_approx);
    uint8_t *tk = e->tok_kind;

    if (e->cur.mode == RP_REUSE_PREFIX) {
        for (int32_t i = nm; i < ns; i++) e->info[i].exact = true;   /* (before: early commits read it) */
        placements_begin(e, c, kv);
        double tc = now_ms();
        rp_status rs = RP_OK;
        if (stat) {
            for (int32_t a = P_tok; a < n && rs == RP_OK; a += sc->L_P) {
                int32_t b = a + sc->L_P < n ? a + sc->L_P : n;
                rs = run_static_prefill(e, c, kv, toks, a, b, n, st);
            }
        } else {
            rs = run_plain(e, c, kv, toks, P_tok, n, n, st);
        }
        placements_end(e, c, st);
        st->compute_ms = now_ms() - tc;
        st->n_new = n - P_tok;
        st->n_exact_head = n;   /* exact chunks only, the rest computed on them */
        for (int32_t i = nm; i < ns; i++) e->info[i].exact = true;
        RP_TRY(rs);
        goto done;
    }

    kv->n = n;   /* reused cells are (being) placed; new cells are written before anything reads them */
    for (int32_t t = P_tok; t < n; t++)
        if (tk[t] == RP_ROW_NEW) kv->pos[t] = t;
    const bool ring = kv->n_ring > 0;
    e->ring_deferred = ring;
    /* chunks wholly before the first approximate KV are computed exactly (also read by early commits) */
    const int32_t exact_head = e->cur.ratio < 1.0f ? first_approx : n;
    for (int32_t i = nm; i < ns; i++) e->info[i].exact = e->spans[i].begin + e->spans[i].len <= exact_head;
    placements_begin(e, c, kv);
    double tc = now_ms();
    rp_status rs = RP_OK;
    const int32_t nb = rp_ctx_get_params(c).n_batch;
    const bool commit = early_commit(e, kv);
    if (e->cur.mode == RP_REUSE_FULL && e->cur.ratio < 1.0f) {
        /* Prompt Cache: reused tokens are taken as-is; compute new tokens and
         * the last one (static: in calls of exactly L_P rows, padded past the prompt). A ring cache: calls
         * spanning at most n_batch cells, its ring layers placed up to each call's last cell first. */
        const int32_t cap = stat ? sc->L_P : nb;
        int32_t t = P_tok, placed = 0;
        while (t < n && rs == RP_OK) {
            rp_batch_clear(&e->batch);
            const int32_t t_end = ring ? span_aligned_end(e, t, n - t < nb ? n - t : nb) : n;
            for (; t < t_end && e->batch.n < cap; t++)
                if (tk[t] == RP_ROW_NEW || t == n - 1) rp_batch_add(&e->batch, toks[t], 0, t, t, t == n - 1);
            place_ring_range(e, kv, placed, t);
            placed = t;
            if (e->batch.n == 0) {
                if (commit) (void)commit_step(e, kv, t);
                continue;
            }
            int32_t pads = 0;
            if (stat) add_pads(e, cap - e->batch.n, n, &pads);
            rs = rp_forward(c, &e->batch, &kv, 1);
            if (rs == RP_OK && commit) (void)commit_step(e, kv, t);   /* a failed insert only loses cache */
            if (pads) rp_kv_truncate(kv, n);
            st->n_calls++;
            st->n_computed_rows += e->batch.n;
            st->n_pad += pads;
        }
        if (tk[n - 1] == RP_ROW_REUSE) st->n_recomputed = 1;
    } else if (e->cur.mode == RP_REUSE_FULL) {
        /* full with r = 1 recomputes everything after the prefix: exact */
        place_ring_range(e, kv, 0, P_tok);   /* a ring cache: the prefix's tail (the rest is recomputed) */
        if (stat) {
            for (int32_t a = P_tok; a < n && rs == RP_OK; a += sc->L_P)
                rs = run_static_prefill(e, c, kv, toks, a, a + sc->L_P < n ? a + sc->L_P : n, n, st);
        } else {
            rs = run_plain(e, c, kv, toks, P_tok, n, n, st);
        }
        st->n_recomputed = st->n_nonprefix;
    } else if (!stat) {
        /* dynamic blend: windows of up to n_batch rows, each a selective-recompute
         * call. The top r is ranked per window (ceil(r * reused rows in the
         * window)), not over the whole prompt: a global ranking would need every
         * window's hidden state kept from the check layer on (n x n_embd floats,
         * beyond the context's n_batch-sized scratch) or layers 0..check run
         * twice (+2/n_layer of a full prefill). A prompt within n_batch
         * (`reprise run -b`) is ranked globally. */
        for (int32_t a = P_tok, b; a < n && rs == RP_OK; a = b) {
            b = a + nb < n ? a + nb : n;
            if (ring) {   /* a ring cache: windows end at chunk ends; their cells placed just before */
                b = span_aligned_end(e, a, b - a);
                place_ring_range(e, kv, a == P_tok ? 0 : a, b);
            }
            rs = run_blend(e, c, kv, toks, tk, a, b, n, 0, -1, st);
            if (rs == RP_OK && commit) (void)commit_step(e, kv, b);   /* a failed insert only loses cache */
        }
    } else {
        /* static shapes: plan calls over segments with the DP (or naively) */
        int32_t nseg = build_segments(e, n, P_tok);
        int32_t ncalls = 0;
        rs = e->cur.naive_schedule ? rp_plan_naive(e->segs, nseg, sc, e->calls, e->max_tokens, &ncalls, &st->plan_ms)
                                 : rp_plan_dp(e->segs, nseg, sc, e->calls, e->max_tokens, &ncalls, &st->plan_ms);
        const int32_t k_static = rp_static_k(sc);
        for (int32_t i = 0; i < ncalls && rs == RP_OK; i++) {
            const rp_call *cl = &e->calls[i];
            if (cl->kind == RP_CALL_PREFILL) {
                rs = run_static_prefill(e, c, kv, toks, cl->begin, cl->end, n, st);
                /* reused tokens a prefill call computes whole are recomputed past the check layer too */
                for (int32_t t = cl->begin; t < cl->end; t++) st->n_recomputed += tk[t] == RP_ROW_REUSE && t != n - 1;
            } else {
                rs = run_blend(e, c, kv, toks, tk, cl->begin, cl->end, n, sc->L_S, k_static, st);
            }
        }
    }
    placements_end(e, c, st);
    e->ring_deferred = false;
    st->compute_ms = now_ms() - tc;
    for (int32_t t = P_tok; t < n; t++) st->n_new += tk[t] == RP_ROW_NEW;
    /* chunks wholly before the first approximate KV were computed exactly; at
     * r = 1 everything after the exact prefix was recomputed: all exact (info[] was set before the compute) */
    st->n_exact_head = exact_head;
    RP_TRY(rs);
done:
    if (!rp_ctx_logits(c, 0)) return rp_errorf(RP_ERR_INTERNAL, "reuse: no logits for the last token");
    memcpy(logits, rp_ctx_logits(c, 0), sizeof(float) * (size_t)e->m->hp.n_vocab);
    st->ttft_ms = now_ms() - t0;
    int32_t computed = st->n_computed_rows > 0 ? st->n_computed_rows : 1;
    double mpt = st->compute_ms / computed;
    e->ms_per_token = e->ms_per_token > 0 ? 0.8 * e->ms_per_token + 0.2 * mpt : mpt;
    e->pending = e->cur.mode != RP_REUSE_NONE;
    return RP_OK;
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

/* A cached payload that fails to load or verify (a damaged store: a deleted,
 * truncated or unreadable payload, a checksum mismatch) is never used. The
 * attempt that placed it is thrown away, KV and logits, and nothing of it is
 * committed; the pool has marked the chunk bad (skipped by every later lookup,
 * deleted from flash), so the next attempt misses it — in prefix mode with
 * everything after it on the prefix path — and recomputes those tokens. Each
 * failed attempt excludes at least the chunk that failed; after
 * RP_REUSE_ATTEMPTS of them the prompt is prefilled with no lookups at all.
 * Either way the result is what an intact cache (or none) gives. */
#define RP_REUSE_ATTEMPTS 4

rp_status rp_reuse_prefill(rp_reuse *e, rp_ctx *c, rp_kv *kv, const rp_token *toks, int32_t n,
                           const int32_t *bounds, int32_t n_bounds, float *logits, rp_reuse_stats *st) {
    return rp_reuse_prefill_opts(e, NULL, c, kv, toks, n, bounds, n_bounds, logits, st);
}

rp_status rp_reuse_prefill_opts(rp_reuse *e, const rp_reuse_opts *opts, rp_ctx *c, rp_kv *kv, const rp_token *toks,
                                int32_t n, const int32_t *bounds, int32_t n_bounds, float *logits, rp_reuse_stats *st) {
    memset(st, 0, sizeof *st);
    RP_TRY(check_kv(e, kv));
    RP_TRY(begin_call(e, opts));
    const double t0 = now_ms();
    /* the store's writer and prefetcher start no new I/O while we compute */
    rp_chunk_cache_busy(e->cache, true);
    rp_status rs = RP_OK;
    int32_t failed = 0, attempts = 0;
    for (;;) {
        const bool lookup = attempts < RP_REUSE_ATTEMPTS;
        rs = prefill_once(e, c, kv, toks, n, bounds, n_bounds, lookup, logits, st);
        attempts++;
        const int32_t f = atomic_load(&e->ld.failed);
        failed += f;
        if (rs != RP_OK || f == 0 || !lookup) break;
        unpin_pending(e);
    }
    if (rs != RP_OK) unpin_pending(e);   /* prefix pins of a failed attempt */
    else if (atomic_load(&e->ld.failed) != 0) rs = rp_errorf(RP_ERR_INTERNAL, "reuse: a prefill without lookups placed cached KV");
    st->n_load_failed = failed;
    st->n_attempts = attempts;
    if (attempts > 1) st->ttft_ms = now_ms() - t0;   /* the thrown-away attempts count */
    rp_chunk_cache_busy(e->cache, false);
    return rs;
}

/* Commits spans from the walk's position on while they end by `limit` (a cell; INT32_MAX: all), stopping
 * for good where the cache does not hold a span (see rp_reuse_commit). */
static rp_status commit_step(rp_reuse *e, const rp_kv *kv, int32_t limit) {
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
    rp_status st = commit_step(e, kv, INT32_MAX);
    unpin_pending(e);   /* unpins the walk's last chunk too */
    return st;
}

rp_status rp_reuse_commit_computed(rp_reuse *e, const rp_kv *kv, const rp_token *toks, int32_t n, const int32_t *bounds,
                                  int32_t n_bounds, bool exact) {
    return rp_reuse_commit_computed_opts(e, NULL, kv, toks, n, bounds, n_bounds, exact);
}

rp_status rp_reuse_commit_computed_opts(rp_reuse *e, const rp_reuse_opts *opts, const rp_kv *kv, const rp_token *toks,
                                       int32_t n, const int32_t *bounds, int32_t n_bounds, bool exact) {
    RP_TRY(check_kv(e, kv));
    RP_TRY(begin_call(e, opts));
    if (e->cur.mode == RP_REUSE_NONE) return RP_OK;   /* none never writes the cache */
    if (n <= 0 || n > e->max_tokens || n > kv->n)
        return rp_errorf(RP_ERR_RANGE, "reuse: commit of %d tokens (max %d, the cache holds %d)", n, e->max_tokens, kv->n);
    if (e->pending || e->cm.on) unpin_pending(e);
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

rp_status rp_reuse_analyze(rp_reuse *e, const rp_token *toks, int32_t n, const int32_t *bounds, int32_t n_bounds,
                           rp_reuse_analysis *out) {
    return rp_reuse_analyze_opts(e, NULL, toks, n, bounds, n_bounds, out);
}

rp_status rp_reuse_analyze_opts(rp_reuse *e, const rp_reuse_opts *opts, const rp_token *toks, int32_t n,
                                const int32_t *bounds, int32_t n_bounds, rp_reuse_analysis *out) {
    memset(out, 0, sizeof *out);
    RP_TRY(begin_call(e, opts));
    if (n <= 0 || n > e->max_tokens) return rp_errorf(RP_ERR_RANGE, "reuse: prompt of %d tokens (max %d)", n, e->max_tokens);
    if (e->pending || e->cm.on) unpin_pending(e);
    int32_t ns = 0;
    RP_TRY(rp_chunk_split(toks, n, bounds, n_bounds, e->cur.chunking, e->cur_salt, e->spans, e->max_tokens, &ns));
    e->n_spans = ns;
    memset(e->info, 0, sizeof *e->info * (size_t)ns);
    int32_t P_tok = 0, nm = 0, first_approx = n;
    if (e->cur.mode == RP_REUSE_NONE) {
        for (int32_t t = 0; t < n; t++) e->tok_kind[t] = RP_ROW_NEW;
    } else {
        resolve(e, toks, n, NULL, &out->stats, &P_tok, &nm, &first_approx);
        unpin_pending(e);   /* nothing will be committed */
    }
    out->n_tokens = n;
    out->n_prefix = P_tok;
    out->tok_kind = e->tok_kind;
    out->spans = e->spans;
    out->n_spans = ns;
    out->n_segs = build_segments(e, n, P_tok);
    out->segs = e->segs;
    RP_TRY(rp_plan_dp(e->segs, out->n_segs, &e->cur.static_cfg, e->calls, e->max_tokens, &out->n_dp_calls, &out->dp_ms));
    RP_TRY(rp_plan_naive(e->segs, out->n_segs, &e->cur.static_cfg, e->calls2, e->max_tokens, &out->n_naive_calls,
                         &out->naive_ms));
    out->dp_calls = e->calls;
    out->naive_calls = e->calls2;
    out->n_recompute_dynamic = (int32_t)ceilf(e->cur.ratio * (float)out->stats.n_nonprefix);
    out->stats.n_prompt = n;
    out->stats.n_chunks = ns;
    for (int32_t t = P_tok; t < n; t++) out->stats.n_new += e->tok_kind[t] == RP_ROW_NEW;
    return RP_OK;
}

rp_status rp_reuse_calibrate(rp_reuse *e, rp_ctx *c, rp_kv *kv, const int32_t *sizes, int32_t n_sizes, int reps,
                             rp_calib *cal) {
    if (n_sizes <= 0 || n_sizes > 64) return rp_errorf(RP_ERR_INVALID_ARG, "calibrate: 1..64 sizes");
    RP_TRY(begin_call(e, NULL));
    const int32_t nb = rp_ctx_get_params(c).n_batch;
    memset(cal, 0, sizeof *cal);
    for (int32_t i = 0; i < n_sizes; i++) {
        const int32_t sz = sizes[i];
        if (sz <= 0 || sz % 32 || sz > nb || sz + 1 > kv->n_ctx || sz > e->max_tokens)
            return rp_errorf(RP_ERR_INVALID_ARG, "calibrate: size %d must be a multiple of 32 within n_batch %d and the cache", sz, nb);
        /* tokens: a fixed pseudo-random run (values do not change the cost) */
        for (int32_t t = 0; t < sz; t++) e->toks[t] = (rp_token)((t * 2654435761u) % (uint32_t)e->m->hp.n_vocab);
        double best_p = 1e30, best_s = 1e30;
        rp_reuse_stats st;
        for (int r = 0; r < reps; r++) {
            memset(&st, 0, sizeof st);
            rp_kv_clear(kv);
            double t0 = now_ms();
            RP_TRY(run_plain(e, c, kv, e->toks, 0, sz, sz, &st));
            double dp = now_ms() - t0;
            if (dp < best_p) best_p = dp;
            /* the cells now hold KV for every token: a recompute call over all of them as reused rows */
            for (int32_t t = 0; t < sz; t++) e->tok_kind[t] = RP_ROW_REUSE;
            t0 = now_ms();
            RP_TRY(run_blend(e, c, kv, e->toks, e->tok_kind, 0, sz, sz, 0, -1, &st));
            double ds = now_ms() - t0;
            if (ds < best_s) best_s = ds;
        }
        cal->sizes[i] = sz;
        cal->prefill_ms[i] = best_p;
        cal->recompute_ms[i] = best_s;
    }
    rp_kv_clear(kv);
    cal->n_points = n_sizes;
    cal->model_fingerprint = e->m->fingerprint;
    cal->cfg = e->p.static_cfg;
    RP_TRY(rp_calib_choose_shapes(cal->sizes, cal->prefill_ms, cal->recompute_ms, n_sizes, 0.15, &cal->cfg));
    e->p.static_cfg = e->cur.static_cfg = cal->cfg;
    return RP_OK;
}
