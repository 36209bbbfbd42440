/* blend.c — selective recompute: full layers up to the check layer, KV deviation ranking, then selected rows only. */
#include "reuse/blend.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"

rp_blend_params rp_blend_default_params(void) {
    rp_blend_params p = {.check_layer = 1, .dev = RP_DEV_KV, .fixed_rows = 0};
    return p;
}

rp_status rp_blend_ws_init(rp_blend_ws *ws, int32_t cap, int32_t kv_dim) {
    memset(ws, 0, sizeof *ws);
    ws->cap = cap;
    ws->kv_dim = kv_dim;
    ws->dev = malloc(sizeof(float) * (size_t)cap);
    ws->order = malloc(sizeof(int32_t) * (size_t)cap);
    ws->keep = malloc(sizeof(int32_t) * (size_t)cap);
    ws->tmp = malloc(sizeof(float) * (size_t)kv_dim);
    if (!ws->dev || !ws->order || !ws->keep || !ws->tmp) {
        rp_blend_ws_free(ws);
        return rp_errorf(RP_ERR_NOMEM, "blend: out of memory");
    }
    return RP_OK;
}

void rp_blend_ws_free(rp_blend_ws *ws) {
    free(ws->dev);
    free(ws->order);
    free(ws->keep);
    free(ws->tmp);
    memset(ws, 0, sizeof *ws);
}

/* squared distance between a fresh row and the cached row in a cell */
static float row_dev(const rp_kv *kv, const uint8_t *cached, const float *fresh, float *tmp) {
    rp_kv_load_row(kv, cached, tmp);
    /* per KV head, squared error relative to the head's cached energy, summed:
     * heads with large activations would otherwise drown the others */
    double s = 0;
    for (int32_t h = 0; h < kv->n_head_kv; h++) {
        double e2 = 0, c2 = 1e-6;
        for (int32_t d = h * kv->head_dim; d < (h + 1) * kv->head_dim; d++) {
            double e = (double)fresh[d] - tmp[d];
            e2 += e * e;
            c2 += (double)tmp[d] * tmp[d];
        }
        s += e2 / c2;
    }
    return (float)s;
}

static const float *g_dev;   /* qsort context: deviations (single-threaded use) */
static int by_dev_desc(const void *a, const void *b) {
    float x = g_dev[*(const int32_t *)a], y = g_dev[*(const int32_t *)b];
    if (x > y) return -1;
    if (x < y) return 1;
    return *(const int32_t *)a - *(const int32_t *)b;
}

rp_status rp_blend_run(rp_ctx *c, rp_kv *kv, rp_batch *b, const uint8_t *kinds, int32_t budget,
                       const rp_blend_params *p, rp_blend_ws *ws, rp_blend_stats *st) {
    const rp_model *m = rp_ctx_model(c);
    const int32_t n_layer = m->hp.n_layer, n = b->n;
    if (n > ws->cap) return rp_errorf(RP_ERR_RANGE, "blend: %d rows exceed the workspace's %d", n, ws->cap);
    if (p->check_layer < 0) return rp_errorf(RP_ERR_INVALID_ARG, "blend: check layer %d negative", p->check_layer);
    memset(st, 0, sizeof *st);
    st->n_rows = n;
    for (int32_t i = 0; i < n; i++) {
        if (b->seq[i] != 0) return rp_errorf(RP_ERR_INVALID_ARG, "blend: row %d is not in sequence 0", i);
        if (kinds[i] == RP_ROW_REUSE) st->n_reuse++;
        else if (kinds[i] == RP_ROW_NEW) st->n_new++;
        else st->n_pad++;
    }
    rp_kv *kvs[1] = {kv};
    RP_TRY(rp_fwd_begin(c, b, kvs, 1));
    const int32_t check = p->check_layer < n_layer ? p->check_layer : n_layer - 1;
    const int32_t KD = kv->kv_dim;

    for (int32_t l = 0; l < n_layer; l++) {
        rp_ctx_layer_begin(c, l);   /* the load pipeline may still be placing this layer */
        rp_fwd_qkv(c, b, l);
        if (l == check) {
            /* rank reuse rows by how far their cached KV is from the fresh one */
            const float *fk = rp_fwd_k(c), *fv = rp_fwd_v(c);
            int32_t n_cand = 0;
            for (int32_t i = 0; i < b->n; i++) {
                if (kinds[i] != RP_ROW_REUSE || b->logits[i]) continue;
                float d = 0;
                if (p->dev & RP_DEV_K) d += row_dev(kv, rp_kv_k_row(kv, l, b->cell[i]), fk + (size_t)i * KD, ws->tmp);
                if (p->dev & RP_DEV_V) d += row_dev(kv, rp_kv_v_row(kv, l, b->cell[i]), fv + (size_t)i * KD, ws->tmp);
                ws->dev[i] = d;
                ws->order[n_cand++] = i;
            }
            g_dev = ws->dev;
            qsort(ws->order, (size_t)n_cand, sizeof(int32_t), by_dev_desc);
            int32_t take = budget < n_cand ? (budget > 0 ? budget : 0) : n_cand;
            /* mark the chosen rows, then list survivors in row order (nk <= i, so in place) */
            for (int32_t i = 0; i < b->n; i++) ws->keep[i] = 0;
            for (int32_t k = 0; k < take; k++) ws->keep[ws->order[k]] = 1;
            for (int32_t i = 0; i < b->n; i++)
                st->n_forced += kinds[i] == RP_ROW_NEW || (kinds[i] != RP_ROW_PAD && b->logits[i]);
            /* static shapes: PAD rows (never ranked above) fill the call up to
             * fixed_rows; their KV goes to cells past the prompt, dropped after */
            int32_t fill = p->fixed_rows > 0 ? p->fixed_rows - st->n_forced - take : 0;
            int32_t nk = 0;
            for (int32_t i = 0; i < b->n; i++) {
                bool forced = kinds[i] == RP_ROW_NEW || (kinds[i] != RP_ROW_PAD && b->logits[i]);
                bool filler = kinds[i] == RP_ROW_PAD && st->n_pad_kept < fill;
                st->n_pad_kept += filler;
                if (forced || filler || ws->keep[i]) ws->keep[nk++] = i;
            }
            st->n_selected = take;
            rp_fwd_store(c, b, kvs, l);   /* fresh KV at the check layer for every row */
            if (nk == 0) {                 /* nothing left to compute (cannot happen with a final row) */
                b->n = 0;
                break;
            }
            /* from here every remaining row is computed: kinds are no longer consulted */
            rp_fwd_compact(c, b, ws->keep, nk);
            rp_fwd_attn_ffn(c, b, kvs, l);
            continue;
        }
        rp_fwd_store(c, b, kvs, l);
        rp_fwd_attn_ffn(c, b, kvs, l);
    }
    /* padding rows wrote KV into their cells (placed past the prompt by the
     * caller, who resets them afterwards) */
    return b->n > 0 ? rp_fwd_end(c, b) : RP_OK;
}
