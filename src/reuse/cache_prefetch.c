/* cache_prefetch.c — locality bookkeeping (recent ring, co-access, prefetch credit) and the prefetcher thread. */
#define _GNU_SOURCE
#include "reuse/cache_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

/* ---- locality bookkeeping ------------------------------------------------ */

void rp_cache_push_id(uint64_t **v, int32_t *n, int32_t *cap, uint64_t id, int32_t limit) {
    if (*n >= limit) return;
    if (*n == *cap) {
        int32_t nc = *cap ? 2 * *cap : 64;
        uint64_t *nv = realloc(*v, sizeof **v * (size_t)nc);
        if (!nv) return;
        *v = nv;
        *cap = nc;
    }
    (*v)[(*n)++] = id;
}

void rp_cache_co_bump(rp_chunk_cache *c, uint64_t a, uint64_t b) {
    if (!c->co || a == b) return;
    uint64_t h = rp_mix64(a * 0x9e3779b97f4a7c15ull ^ b);
    for (int pass = 0; pass < 2; pass++) {
        for (uint32_t i = 0; i < 32; i++) {   /* bounded probe */
            co_ent *x = &c->co[(h + i) & (CO_CAP - 1)];
            if (x->n && x->a == a && x->b == b) {
                x->n++;
                c->co_dirty = true;
                return;
            }
            if (!x->n) {
                *x = (co_ent){a, b, 1};
                c->co_n++;
                c->co_dirty = true;
                return;
            }
        }
        /* crowded: age everything (halve counts, drop zeros) and retry once */
        co_ent *old = c->co;
        co_ent *nw = calloc(CO_CAP, sizeof *nw);
        if (!nw) return;
        c->co = nw;
        c->co_n = 0;
        for (uint32_t i = 0; i < CO_CAP; i++) {
            if (old[i].n / 2 == 0) continue;
            uint64_t hh = rp_mix64(old[i].a * 0x9e3779b97f4a7c15ull ^ old[i].b);
            for (uint32_t k = 0; k < 32; k++) {
                co_ent *y = &nw[(hh + k) & (CO_CAP - 1)];
                if (!y->n) {
                    *y = (co_ent){old[i].a, old[i].b, old[i].n / 2};
                    c->co_n++;
                    break;
                }
            }
        }
        free(old);
    }
}

/* Prefetch credit (pp.prefetch_credit): earned back by prefetched chunks that
 * are hit and, slowly, by accesses; capped at four times the initial credit. */
void rp_cache_pf_earn(rp_chunk_cache *c, double amount) {
    if (c->pp.prefetch_credit <= 0) return;
    c->pf_credit += amount;
    if (c->pf_credit > 4 * c->pp.prefetch_credit) c->pf_credit = 4 * c->pp.prefetch_credit;
}

/* An access (hit or insert): co-access with the last few, the recent ring,
 * a locality update for flash, and a prefetch nudge. */
void rp_cache_note_access(rp_chunk_cache *c, rp_centry *e) {
    if (!c->has_store) return;
    const uint64_t id = e->ch.id;
    for (int32_t k = 1; k <= CO_WINDOW && k <= c->recent_n; k++) {
        uint64_t prev = c->recent[(c->recent_pos - k + RECENT) % RECENT];
        if (prev != id) rp_cache_co_bump(c, prev, id);
    }
    if (c->recent_n == 0 || c->recent[(c->recent_pos - 1 + RECENT) % RECENT] != id) {
        c->recent[c->recent_pos] = id;
        c->recent_pos = (c->recent_pos + 1) % RECENT;
        if (c->recent_n < RECENT) c->recent_n++;
    }
    if (e->on_flash && !e->touched) {
        e->touched = true;
        rp_cache_push_id(&c->touch_ids, &c->n_touch, &c->cap_touch, id, 1 << 16);
    }
    rp_cache_pf_earn(c, 1.0 / 8);
    c->pf_req++;
}

/* ---- the prefetcher ---- */

typedef struct pf_cand {
    rp_store_chunk m;
    double r;
} pf_cand;

static int pf_by_r(const void *a, const void *b) {
    double x = ((const pf_cand *)a)->r, y = ((const pf_cand *)b)->r;
    return x > y ? -1 : x < y;
}

/* One round: candidates are the warm-start set (hottest rows on flash) or
 * the prefix continuations (children) and co-access partners of recently
 * used chunks; those with R >= threshold are loaded, best first, as long as
 * they fit without evicting anything more valuable and the engine stays idle. */
static void prefetch_round(rp_chunk_cache *c) {
    const bool warm = c->pf_warm;
    c->pf_warm = false;
    uint64_t recent[RECENT];
    int32_t nr = 0;
    for (int32_t k = 1; k <= c->recent_n; k++) recent[nr++] = c->recent[(c->recent_pos - k + RECENT) % RECENT];
    uint64_t partners[64];
    int32_t npart = 0;
    if (c->co)
        for (int32_t i = 0; i < CO_CAP && npart < 64; i++) {
            if (c->co[i].n < 2) continue;
            for (int32_t k = 0; k < nr && k < CO_WINDOW * 2; k++)
                if (c->co[i].a == recent[k] && !rp_cache_find_id(c, c->co[i].b)) {
                    partners[npart++] = c->co[i].b;
                    break;
                }
        }
    const uint64_t clock = c->clock;
    const double hl = rp_cache_half_life(c);
    pthread_mutex_unlock(&c->mu);

    enum { CAP = 128 };
    pf_cand *cv = calloc(CAP, sizeof *cv);
    rp_store_chunk *tmp = calloc(CAP, sizeof *tmp);
    int32_t nc = 0;
    if (cv && tmp) {
        int32_t nt = 0;
        if (warm) rp_store_hottest(c->db_pf, clock, hl, tmp, CAP, &nt);
        else if (nr > 0) rp_store_children_of(c->db_pf, recent, nr, tmp, CAP, &nt);
        for (int32_t i = 0; i < nt && nc < CAP; i++) cv[nc++].m = tmp[i];
        for (int32_t i = 0; i < npart && nc < CAP; i++) {
            bool found = false;
            if (rp_store_get(c->db_pf, partners[i], &cv[nc].m, &found) == RP_OK && found) {
                rp_store_chunk_clear(&cv[nc].m);   /* metadata is enough for ranking */
                cv[nc].r = 1.0;                   /* co-access counts as a recent use */
                nc++;
            }
        }
        for (int32_t i = 0; i < nc; i++) {
            double age = clock > cv[i].m.last_used ? (double)(clock - cv[i].m.last_used) : 0;
            cv[i].r += cv[i].m.heat * exp2(-age / hl);
        }
        if (nc > 1) qsort(cv, (size_t)nc, sizeof *cv, pf_by_r);
    }
    free(tmp);

    pthread_mutex_lock(&c->mu);
    const size_t cap_bytes = (size_t)((double)c->p.budget_bytes * c->pp.prefetch_fraction);
    double warm_left = 4 * c->pp.prefetch_credit;
    for (int32_t i = 0; i < nc && !c->stop; i++) {
        if (c->busy > 0 || c->writing) break;   /* I/O is not idle: stop; the next round retries */
        if (cv[i].r < c->pp.prefetch_threshold) break;
        /* guesses that have not been paying stop the prefetcher; the warm start
         * (hottest rows after attach) has an allowance of its own: the credit cap */
        if (c->pp.prefetch_credit > 0 && (warm ? warm_left < 1 : c->pf_credit < 1)) break;
        if (rp_cache_find_id(c, cv[i].m.id) || rp_cache_content_resident(c, cv[i].m.hash)) continue;
        if (rp_cache_known_bad(c, cv[i].m.id)) continue;
        size_t kvb = 0, total = rp_cache_entry_size(c, cv[i].m.n_tokens, &kvb);
        if (!total || c->prefetch_bytes + total > cap_bytes) continue;
        /* would it fit, evicting only chunks worth less than it? */
        rp_centry probe;
        memset(&probe, 0, sizeof probe);
        probe.ch.recompute_ms = cv[i].m.recompute_ms;
        probe.ch.kv_bytes = kvb;
        probe.ch.exact = cv[i].m.exact;
        probe.ch.last_used = cv[i].m.last_used;
        probe.heat = cv[i].m.heat;
        probe.on_flash = true;
        const double key = rp_cache_key(c, &probe);
        if (!rp_cache_make_room(c, total, c->policy == RP_EVICT_COST ? key : INFINITY)) continue;
        pthread_mutex_unlock(&c->mu);
        rp_store_chunk full;
        bool found = false;
        rp_status st = rp_store_get(c->db_pf, cv[i].m.id, &full, &found);
        rp_centry *e = NULL;
        double tl = 0;
        if (st == RP_OK && found) {
            e = rp_cache_entry_alloc(c, full.n_tokens, total, kvb);
            tl = rp_cache_now_ms();
            if (e) st = rp_store_load(c->db_pf, &full, e->ch.kv);
            tl = rp_cache_now_ms() - tl;
        }
        pthread_mutex_lock(&c->mu);
        rp_cache_check_damage(c, c->db_pf);
        if (st == RP_OK && found && e) rp_cache_note_load_rate(c, tl, kvb);
        if (rp_cache_load_error_is_damage(st)) rp_cache_queue_bad(c, cv[i].m.id);
        if (st != RP_OK || !found || !e || rp_cache_find_id(c, full.id) || !rp_cache_make_room(c, total, INFINITY)) {
            if (e) rp_cache_entry_free(e);
            if (found) rp_store_chunk_clear(&full);
            if (st != RP_OK) c->st.load_failures++;
            continue;
        }
        memcpy(e->ch.tokens, full.tokens, sizeof(rp_token) * (size_t)full.n_tokens);
        e->ch.id = full.id;
        e->ch.hash = full.hash;
        e->ch.chain = full.chain;
        e->ch.parent_id = full.parent_id;
        e->ch.pos0 = full.pos0;
        e->ch.exact = full.exact;
        e->ch.recompute_ms = full.recompute_ms;
        e->ch.hits = full.hits;
        e->ch.last_used = full.last_used;
        e->heat = full.heat;
        e->on_flash = true;
        e->w_exact = full.exact;
        e->w_pos0 = full.pos0;
        e->prefetched = true;
        rp_store_chunk_clear(&full);
        rp_cache_entry_index(c, e);
        c->prefetch_bytes += e->bytes;
        c->st.prefetched++;
        if (warm) warm_left -= 1;
        else c->pf_credit -= 1;
        c->st.loads++;
        c->st.load_bytes += kvb;
        rp_cache_heap_add(c, e, true);
    }
    for (int32_t i = 0; i < nc; i++) rp_store_chunk_clear(&cv[i].m);
    free(cv);
}

void *rp_cache_prefetch_main(void *arg) {
    rp_chunk_cache *c = arg;
    rp_cache_lower_priority();
    pthread_mutex_lock(&c->mu);
    for (;;) {
        if (c->stop) break;
        const bool want = c->pf_warm || c->pf_req != c->pf_done;
        if (!want || c->busy > 0 || c->writing) {
            rp_cache_timed_wait(&c->pf_cv, &c->mu, want ? 20 : 1000);
            continue;
        }
        const uint64_t req = c->pf_req;
        prefetch_round(c);
        c->pf_done = req;
        pthread_cond_broadcast(&c->pf_cv);
    }
    c->pf_done = c->pf_req;
    pthread_cond_broadcast(&c->pf_cv);
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

void rp_chunk_cache_prefetch_sync(rp_chunk_cache *c) {
    if (!c) return;
    pthread_mutex_lock(&c->mu);
    if (c->has_store && c->th_pf_on && c->busy == 0) {
        const uint64_t want = ++c->pf_req;
        pthread_cond_signal(&c->pf_cv);
        while (c->pf_done < want && c->th_pf_on && !c->stop) {
            /* rounds defer while a write is in flight; wait for it */
            rp_cache_timed_wait(&c->pf_cv, &c->mu, 50);
            if (c->pf_done < want) pthread_cond_signal(&c->pf_cv);
        }
    }
    pthread_mutex_unlock(&c->mu);
}
