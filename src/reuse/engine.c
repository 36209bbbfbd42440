/* engine.c — prompt prefill with KV reuse: parameters, create / free, per-call settings, accessors, the prefill
 * (plain, blend and static calls over what lookup found), analysis and calibration. Placement of cached KV is in
 * engine_place.c, lookup in engine_match.c, commit in engine_commit.c (shared state: engine_internal.h). */
#include "reuse/engine_internal.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>

#include "core/error.h"

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

double rp_reuse_now_ms(void) {
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
    if (st == RP_OK && p.pipeline) st = rp_reuse_loader_start(e);
    if (st != RP_OK) {
        rp_reuse_free(e);
        return st;
    }
    *out = e;
    return RP_OK;
}

void rp_reuse_free(rp_reuse *e) {
    if (!e) return;
    rp_reuse_loader_stop(e);
    if (e->cache) rp_reuse_unpin_pending(e);
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
rp_status rp_reuse_check_kv(const rp_reuse *e, const rp_kv *kv) {
    if (kv && kv->rope_long != e->rope_long)
        return rp_errorf(RP_ERR_INVALID_ARG,
                         "reuse: this LongRoPE model's engine holds chunks of %s-factor contexts (%d tokens) and the "
                         "cache of %d cells uses the %s factors: give both the same side of its original context "
                         "length %d", e->rope_long ? "long" : "short", e->p.kv_cells > 0 ? e->p.kv_cells : e->max_tokens, kv->n_ctx,
                         kv->rope_long ? "long" : "short", e->m->hp.rope_orig_ctx);
    return RP_OK;
}

rp_status rp_reuse_begin_call(rp_reuse *e, const rp_reuse_opts *o) {
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

/* ---- compute steps ---- */

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

/* Plain forward of tokens [a, b) at cells == positions, in n_batch pieces;
 * logits of token n-1 when it is in range. With early_commit, the pieces end
 * at chunk ends (a chunk longer than n_batch aside) and each piece's completed
 * chunks are committed after it, while the ring still holds them. */
static rp_status run_plain(rp_reuse *e, rp_ctx *c, rp_kv *kv, const rp_token *toks, int32_t a, int32_t b, int32_t n,
                           rp_reuse_stats *st) {
    const int32_t nb = rp_ctx_get_params(c).n_batch;
    const bool commit = rp_reuse_early_commit(e, kv);
    for (int32_t off = a, cnt; off < b; off += cnt) {
        cnt = b - off < nb ? b - off : nb;
        if (commit) cnt = span_aligned_end(e, off, cnt) - off;
        rp_batch_clear(&e->batch);
        for (int32_t i = 0; i < cnt; i++) rp_batch_add(&e->batch, toks[off + i], 0, off + i, off + i, off + i == n - 1);
        RP_TRY(rp_forward(c, &e->batch, &kv, 1));
        st->n_calls++;
        st->n_computed_rows += cnt;
        if (commit) (void)rp_reuse_commit_step(e, kv, off + cnt);   /* a failed insert only loses cache */
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
    const double t0 = rp_reuse_now_ms();
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
    if (e->pending || e->cm.on) rp_reuse_unpin_pending(e);   /* an uncommitted previous prompt is forgotten */
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
        double tc = rp_reuse_now_ms();
        if (stat) {
            for (int32_t a = 0; a < n; a += sc->L_P) RP_TRY(run_static_prefill(e, c, kv, toks, a, a + sc->L_P < n ? a + sc->L_P : n, n, st));
        } else {
            RP_TRY(run_plain(e, c, kv, toks, 0, n, n, st));
        }
        st->compute_ms = rp_reuse_now_ms() - tc;
        st->n_new = n;
        st->n_exact_head = n;
        for (int32_t i = 0; i < ns; i++) e->info[i].exact = true;   /* a plain prefill: exact (none commits nothing) */
        goto done;
    }

    int32_t P_tok = 0, nm = 0, first_approx = n;
    rp_reuse_resolve(e, toks, n, kv, st, &P_tok, &nm, &first_approx);
    uint8_t *tk = e->tok_kind;

    if (e->cur.mode == RP_REUSE_PREFIX) {
        for (int32_t i = nm; i < ns; i++) e->info[i].exact = true;   /* (before: early commits read it) */
        rp_reuse_placements_begin(e, c, kv);
        double tc = rp_reuse_now_ms();
        rp_status rs = RP_OK;
        if (stat) {
            for (int32_t a = P_tok; a < n && rs == RP_OK; a += sc->L_P) {
                int32_t b = a + sc->L_P < n ? a + sc->L_P : n;
                rs = run_static_prefill(e, c, kv, toks, a, b, n, st);
            }
        } else {
            rs = run_plain(e, c, kv, toks, P_tok, n, n, st);
        }
        rp_reuse_placements_end(e, c, st);
        st->compute_ms = rp_reuse_now_ms() - tc;
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
    rp_reuse_placements_begin(e, c, kv);
    double tc = rp_reuse_now_ms();
    rp_status rs = RP_OK;
    const int32_t nb = rp_ctx_get_params(c).n_batch;
    const bool commit = rp_reuse_early_commit(e, kv);
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
            rp_reuse_place_ring_range(e, kv, placed, t);
            placed = t;
            if (e->batch.n == 0) {
                if (commit) (void)rp_reuse_commit_step(e, kv, t);
                continue;
            }
            int32_t pads = 0;
            if (stat) add_pads(e, cap - e->batch.n, n, &pads);
            rs = rp_forward(c, &e->batch, &kv, 1);
            if (rs == RP_OK && commit) (void)rp_reuse_commit_step(e, kv, t);   /* a failed insert only loses cache */
            if (pads) rp_kv_truncate(kv, n);
            st->n_calls++;
            st->n_computed_rows += e->batch.n;
            st->n_pad += pads;
        }
        if (tk[n - 1] == RP_ROW_REUSE) st->n_recomputed = 1;
    } else if (e->cur.mode == RP_REUSE_FULL) {
        /* full with r = 1 recomputes everything after the prefix: exact */
        rp_reuse_place_ring_range(e, kv, 0, P_tok);   /* a ring cache: the prefix's tail (the rest is recomputed) */
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
                rp_reuse_place_ring_range(e, kv, a == P_tok ? 0 : a, b);
            }
            rs = run_blend(e, c, kv, toks, tk, a, b, n, 0, -1, st);
            if (rs == RP_OK && commit) (void)rp_reuse_commit_step(e, kv, b);   /* a failed insert only loses cache */
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
    rp_reuse_placements_end(e, c, st);
    e->ring_deferred = false;
    st->compute_ms = rp_reuse_now_ms() - tc;
    for (int32_t t = P_tok; t < n; t++) st->n_new += tk[t] == RP_ROW_NEW;
    /* chunks wholly before the first approximate KV were computed exactly; at
     * r = 1 everything after the exact prefix was recomputed: all exact (info[] was set before the compute) */
    st->n_exact_head = exact_head;
    RP_TRY(rs);
done:
    if (!rp_ctx_logits(c, 0)) return rp_errorf(RP_ERR_INTERNAL, "reuse: no logits for the last token");
    memcpy(logits, rp_ctx_logits(c, 0), sizeof(float) * (size_t)e->m->hp.n_vocab);
    st->ttft_ms = rp_reuse_now_ms() - t0;
    int32_t computed = st->n_computed_rows > 0 ? st->n_computed_rows : 1;
    double mpt = st->compute_ms / computed;
    e->ms_per_token = e->ms_per_token > 0 ? 0.8 * e->ms_per_token + 0.2 * mpt : mpt;
    e->pending = e->cur.mode != RP_REUSE_NONE;
    return RP_OK;
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
    RP_TRY(rp_reuse_check_kv(e, kv));
    RP_TRY(rp_reuse_begin_call(e, opts));
    const double t0 = rp_reuse_now_ms();
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
        rp_reuse_unpin_pending(e);
    }
    if (rs != RP_OK) rp_reuse_unpin_pending(e);   /* prefix pins of a failed attempt */
    else if (atomic_load(&e->ld.failed) != 0) rs = rp_errorf(RP_ERR_INTERNAL, "reuse: a prefill without lookups placed cached KV");
    st->n_load_failed = failed;
    st->n_attempts = attempts;
    if (attempts > 1) st->ttft_ms = rp_reuse_now_ms() - t0;   /* the thrown-away attempts count */
    rp_chunk_cache_busy(e->cache, false);
    return rs;
}

rp_status rp_reuse_analyze(rp_reuse *e, const rp_token *toks, int32_t n, const int32_t *bounds, int32_t n_bounds,
                           rp_reuse_analysis *out) {
    return rp_reuse_analyze_opts(e, NULL, toks, n, bounds, n_bounds, out);
}

rp_status rp_reuse_analyze_opts(rp_reuse *e, const rp_reuse_opts *opts, const rp_token *toks, int32_t n,
                                const int32_t *bounds, int32_t n_bounds, rp_reuse_analysis *out) {
    memset(out, 0, sizeof *out);
    RP_TRY(rp_reuse_begin_call(e, opts));
    if (n <= 0 || n > e->max_tokens) return rp_errorf(RP_ERR_RANGE, "reuse: prompt of %d tokens (max %d)", n, e->max_tokens);
    if (e->pending || e->cm.on) rp_reuse_unpin_pending(e);
    int32_t ns = 0;
    RP_TRY(rp_chunk_split(toks, n, bounds, n_bounds, e->cur.chunking, e->cur_salt, e->spans, e->max_tokens, &ns));
    e->n_spans = ns;
    memset(e->info, 0, sizeof *e->info * (size_t)ns);
    int32_t P_tok = 0, nm = 0, first_approx = n;
    if (e->cur.mode == RP_REUSE_NONE) {
        for (int32_t t = 0; t < n; t++) e->tok_kind[t] = RP_ROW_NEW;
    } else {
        rp_reuse_resolve(e, toks, n, NULL, &out->stats, &P_tok, &nm, &first_approx);
        rp_reuse_unpin_pending(e);   /* nothing will be committed */
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
    RP_TRY(rp_reuse_begin_call(e, NULL));
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
            double t0 = rp_reuse_now_ms();
            RP_TRY(run_plain(e, c, kv, e->toks, 0, sz, sz, &st));
            double dp = rp_reuse_now_ms() - t0;
            if (dp < best_p) best_p = dp;
            /* the cells now hold KV for every token: a recompute call over all of them as reused rows */
            for (int32_t t = 0; t < sz; t++) e->tok_kind[t] = RP_ROW_REUSE;
            t0 = rp_reuse_now_ms();
            RP_TRY(run_blend(e, c, kv, e->toks, e->tok_kind, 0, sz, sz, 0, -1, &st));
            double ds = rp_reuse_now_ms() - t0;
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
