/* api_ctx.c — long contexts: KV memory estimates and the check before allocating, and the context shift. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reprise.h"
#include "api/api_internal.h"
#include "core/error.h"
#include "kernels/types.h"
#include "kv/kv.h"
#include "model/model.h"
#include "model/session.h"
#include "reuse/engine.h"
#include "reuse/rerotate.h"

/* One sequence's KV at n_cells: sliding-window layers at min(n_cells, window + n_batch) unless swa_full. */
static uint64_t kv_bytes_swa(const rp_model *m, int64_t n_cells, rp_kv_type t, int32_t n_batch, bool swa_full) {
    const rp_hparams *hp = &m->hp;
    const size_t row = rp_type_row_size((rp_type)t, hp->n_head_kv * hp->head_dim);
    const int32_t swa = swa_full ? 0 : rp_kv_swa_cells(m, n_batch);
    uint64_t cells = 0;
    for (int32_t l = 0; l < hp->n_layer; l++)
        cells += (uint64_t)(swa > 0 && m->layers[l].window > 0 && swa < n_cells ? swa : n_cells);
    return 2 * cells * (uint64_t)row;
}


rp_status rp_kv_estimate_ex(const rp_model *m, int32_t n_ctx, rp_kv_type kv_type, int32_t n_batch, bool swa_full,
                            uint64_t *bytes) {
    if (!m || !bytes) return rp_errorf(RP_ERR_INVALID_ARG, "kv estimate: NULL model or result");
    *bytes = 0;
    if (!m->layers) return rp_errorf(RP_ERR_INVALID_ARG, "kv estimate: model '%s' was loaded vocab-only", m->name);
    if (n_ctx < 1) return rp_errorf(RP_ERR_RANGE, "kv estimate: n_ctx %d", n_ctx);
    if (n_batch < 1) return rp_errorf(RP_ERR_RANGE, "kv estimate: n_batch %d", n_batch);
    if (kv_type != RP_KV_F16 && kv_type != RP_KV_F32 && kv_type != RP_KV_Q8_0)
        return rp_errorf(RP_ERR_INVALID_ARG, "kv estimate: KV type %d (f16, f32 or q8_0)", (int)kv_type);
    *bytes = kv_bytes_swa(m, n_ctx, kv_type, n_batch, swa_full);
    return RP_OK;
}

rp_status rp_kv_estimate(const rp_model *m, int32_t n_ctx, rp_kv_type kv_type, uint64_t *bytes) {
    return rp_kv_estimate_ex(m, n_ctx, kv_type, 512, false, bytes);
}

/* The sliding-window cells of the engine's sequences (0: every layer full). */
int32_t rp_api_swa_cells(const rp_engine *e) {
    /* static calls put padding rows past the prompt: those caches keep every cell */
    return e->p.swa_full || e->p.static_mode ? 0 : rp_kv_swa_cells(e->m, e->n_batch_eff);
}

static uint64_t engine_kv_bytes(const rp_engine *e) {
    return kv_bytes_swa(e->m, e->n_cells, e->p.kv_type, e->n_batch_eff, rp_api_swa_cells(e) == 0);
}

uint64_t rp_engine_kv_bytes(const rp_engine *e) { return e ? engine_kv_bytes(e) : 0; }

uint64_t rp_system_mem_available(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return 0;
    char line[256];
    unsigned long long kb = 0;
    bool found = false;
    while (!found && fgets(line, sizeof line, f)) found = sscanf(line, "MemAvailable: %llu kB", &kb) == 1;
    fclose(f);
    return found ? (uint64_t)kb * 1024u : 0;
}

/* "1.50 GiB", "12.0 MiB" */
static const char *human(uint64_t b, char *buf, size_t cap) {
    if (b >= (1ull << 30)) snprintf(buf, cap, "%.2f GiB", (double)b / (double)(1ull << 30));
    else snprintf(buf, cap, "%.1f MiB", (double)b / (double)(1ull << 20));
    return buf;
}

rp_status rp_api_check_kv_fits(const rp_engine *e) {
    const uint64_t one = engine_kv_bytes(e);
    /* the reuse engine keeps one more cache of n_ctx cells for its prefills */
    const uint64_t need = one * (uint64_t)e->p.n_seq_max + kv_bytes_swa(e->m, e->n_ctx, e->p.kv_type, e->n_batch_eff,
                                                                         rp_api_swa_cells(e) == 0);
    const uint64_t avail = rp_system_mem_available();
    if (avail == 0 || need <= avail) return RP_OK;
    char a[32], b[32], c[32];
    return rp_errorf(RP_ERR_NOMEM,
                     "engine: a context of %d tokens needs %s of %s KV cache per sequence (%s for %d "
                     "sequence%s and the prefill cache) but %s of memory is available: lower the context "
                     "(-c), use a smaller KV type (--kv-type q8_0) or fewer sequences",
                     e->n_ctx, human(one, a, sizeof a), rp_kv_type_name(e->p.kv_type), human(need, b, sizeof b),
                     e->p.n_seq_max, e->p.n_seq_max == 1 ? "" : "s", human(avail, c, sizeof c));
}

rp_status rp_seq_shift(rp_seq *s, int32_t keep, int32_t n_drop) {
    if (!s) return rp_errorf(RP_ERR_INVALID_ARG, "seq: NULL");
    if (keep < 0 || n_drop < 1 || (int64_t)keep + n_drop > s->n_hist)
        return rp_errorf(RP_ERR_RANGE, "seq: shift dropping [%d, %d) of %d tokens", keep, keep + n_drop, s->n_hist);
    rp_engine *e = s->e;
    if (e->pending == s) {   /* the commit copies the prompt's cells: cache them as they were first */
        e->pending = NULL;
        (void)rp_reuse_commit(e->reuse, rp_session_kv(s->s));   /* a failed commit only loses cache */
    }
    /* a generated token not decoded yet (the last one) has no cell: it moves down with the tail and is
     * decoded at its new cell by the next generate */
    rp_kv *kv = rp_session_kv(s->s);
    const int32_t in_cells = s->pending_tok ? s->n_hist - 1 : s->n_hist;
    if (kv->n != in_cells)
        return rp_errorf(RP_ERR_INVALID_ARG, "seq: %d tokens but %d cells (internal)", s->n_hist, kv->n);
    if (keep + n_drop > in_cells)
        return rp_errorf(RP_ERR_RANGE, "seq: shift dropping [%d, %d) reaches the generated token not decoded yet",
                         keep, keep + n_drop);
    RP_TRY(rp_rerotate_shift(e->m, kv, keep, n_drop));
    memmove(s->hist + keep, s->hist + keep + n_drop, sizeof *s->hist * (size_t)(s->n_hist - keep - n_drop));
    s->n_hist -= n_drop;
    if (kv->n > 0 && !rp_kv_can_resume(kv, kv->n - 1)) {
        /* a sliding-window cache whose window after the shift reaches kept cells it no longer holds (a drop
         * close to the end): the shifted history is computed again */
        const int32_t n = kv->n;
        rp_kv_clear(kv);
        rp_status st = rp_session_feed(s->s, s->hist, n);
        if (st != RP_OK) {
            rp_seq_reset(s);
            return st;
        }
    }
    if (!s->pending_tok) s->logits_ok = false;   /* the last token is decoded again at its cell (next generate) */
    s->fresh_prefill = false;
    return RP_OK;
}
