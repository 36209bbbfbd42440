/* engine_place.c — moving cached KV into the session cache: re-rotated placement of a chunk's rows, the
 * layer-wise load pipeline (the loader thread and the compute's layer hook), ring-layer placement. */
#include "reuse/engine_internal.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "core/error.h"
#include "reuse/rerotate.h"

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
        double t0 = rp_reuse_now_ms();
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
        double dt = rp_reuse_now_ms() - t0;
        pthread_mutex_lock(&ld->mu);
        ld->busy_ms = dt;
        ld->done = ld->job;
        pthread_cond_broadcast(&ld->cv);
    }
    pthread_mutex_unlock(&ld->mu);
    return NULL;
}

rp_status rp_reuse_loader_start(rp_reuse *e) {
    loader *ld = &e->ld;
    pthread_mutex_init(&ld->mu, NULL);
    pthread_cond_init(&ld->cv, NULL);
    if (pthread_create(&ld->th, NULL, loader_main, e) != 0) return rp_errorf(RP_ERR_NOMEM, "reuse: cannot start the loader thread");
    ld->running = true;
    return RP_OK;
}

void rp_reuse_loader_stop(rp_reuse *e) {
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
    double t0 = rp_reuse_now_ms();
    pthread_mutex_lock(&ld->mu);
    while (atomic_load(&ld->layers_done) <= l && ld->done != ld->job) pthread_cond_wait(&ld->cv, &ld->mu);
    pthread_mutex_unlock(&ld->mu);
    e->wait_ms += rp_reuse_now_ms() - t0;
}

/* Places the recorded placements: on the loader thread (layer by layer,
 * overlapping the compute that follows) or right here (always for a cache
 * with sliding-window ring layers: placing slides them, which the compute's
 * checks must see done). */
void rp_reuse_placements_begin(rp_reuse *e, rp_ctx *c, rp_kv *kv) {
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
        double t0 = rp_reuse_now_ms();
        for (int32_t i = 0; i < e->n_pl; i++)
            if (!place_all_layers(e->cache, e->m, kv, &e->pl[i], e->cs, e->krow, floor)) {
                e->pl[i].failed = true;
                atomic_fetch_add(&e->ld.failed, 1);
            }
        e->ld.busy_ms = rp_reuse_now_ms() - t0;
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
void rp_reuse_placements_end(rp_reuse *e, rp_ctx *c, rp_reuse_stats *st) {
    if (e->n_pl == 0) return;
    if (e->async_job) {
        loader *ld = &e->ld;
        double t0 = rp_reuse_now_ms();
        pthread_mutex_lock(&ld->mu);
        while (ld->done != ld->job) pthread_cond_wait(&ld->cv, &ld->mu);
        pthread_mutex_unlock(&ld->mu);
        e->wait_ms += rp_reuse_now_ms() - t0;
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
void rp_reuse_place_ring_range(rp_reuse *e, rp_kv *kv, int32_t c0, int32_t c1) {
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

void rp_reuse_add_placement(rp_reuse *e, rp_chunk *ch, int32_t t0, int32_t n, int32_t cell0, bool unpin) {
    e->pl[e->n_pl++] = (placement){ch, t0, n, cell0, unpin, false};
}
