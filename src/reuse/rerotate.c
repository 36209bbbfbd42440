/* rerotate.c — RoPE re-rotation of cached K by a position delta (NORM and NEOX pairings). */
#include "reuse/rerotate.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "kernels/kernels.h"

void rp_rerotate_table(const rp_model *m, int32_t delta, float *c, float *s) {
    rp_rerotate_table_long(m, false, delta, c, s);
}

void rp_rerotate_table_long(const rp_model *m, bool rope_long, int32_t delta, float *c, float *s) {
    const float *f = rope_long && m->rope_inv_freq_long ? m->rope_inv_freq_long : m->rope_inv_freq;
    int half = m->hp.n_rot / 2;
    for (int i = 0; i < half; i++) {
        double th = (double)delta * (double)f[i];
        c[i] = (float)cos(th);
        s[i] = (float)sin(th);
    }
}

void rp_rerotate_table_layer(const rp_model *m, int32_t layer, int32_t delta, float *c, float *s) {
    const float *f = rp_model_layer_inv_freq(m, layer);
    int half = m->hp.n_rot / 2;
    for (int i = 0; i < half; i++) {
        double th = (double)delta * (double)f[i];
        c[i] = (float)cos(th);
        s[i] = (float)sin(th);
    }
}

void rp_rerotate_row(const rp_model *m, float *k, const float *cs, const float *sn) {
    const int32_t HK = m->hp.n_head_kv, HD = m->hp.head_dim;
    const bool neox = m->hp.rope_kind == RP_ROPE_NEOX;
    for (int32_t h = 0; h < HK; h++) rp_rope_ref(k + (size_t)h * HD, cs, sn, m->hp.n_rot, neox);
}

rp_status rp_rerotate_shift(const rp_model *m, rp_kv *kv, int32_t keep, int32_t n_drop) {
    if (keep < 0 || n_drop < 1 || (int64_t)keep + n_drop > kv->n)
        return rp_errorf(RP_ERR_RANGE, "kv shift: dropping [%d, %d) of %d cells", keep, keep + n_drop, kv->n);
    const int32_t half = m->hp.n_rot / 2, moved = kv->n - keep - n_drop;
    const size_t hs = (size_t)(half > 0 ? half : 1);
    float *cs = malloc(sizeof(float) * (4 * hs + (size_t)kv->kv_dim));
    if (!cs) return rp_errorf(RP_ERR_NOMEM, "kv shift: out of memory");
    float *lcs = cs + 2 * hs, *krow = cs + 4 * hs;   /* lcs: a layer's own table (gemma3 local layers) */
    rp_rerotate_table_long(m, kv->rope_long, -n_drop, cs, cs + half);
    for (int32_t l = 0; l < kv->n_layer; l++) {
        if (moved > 0) {
            const bool own = rp_rerotate_layer_own(m, l);
            if (own) rp_rerotate_table_layer(m, l, -n_drop, lcs, lcs + half);
            const float *t_cs = own ? lcs : cs;
            if (kv->ring[l]) {   /* a ring layer: both parts move (the held cells follow), then K rotates in place */
                rp_kv_move_cells(kv, RP_KV_K, l, keep, keep + n_drop, moved);
                rp_kv_move_cells(kv, RP_KV_V, l, keep, keep + n_drop, moved);
                for (int32_t t = 0; t < moved; t++) {
                    if (!rp_kv_holds(kv, l, keep + t)) continue;
                    rp_kv_load_row(kv, RP_KV_K, l, keep + t, krow);
                    rp_rerotate_row(m, krow, t_cs, t_cs + half);
                    rp_kv_store_row(kv, RP_KV_K, l, keep + t, krow);
                }
                continue;
            }
            rp_kv_move_cells(kv, RP_KV_V, l, keep, keep + n_drop, moved);
            for (int32_t t = 0; t < moved; t++) {
                rp_kv_load_row(kv, RP_KV_K, l, keep + n_drop + t, krow);
                rp_rerotate_row(m, krow, t_cs, t_cs + half);
                rp_kv_store_row(kv, RP_KV_K, l, keep + t, krow);
            }
        }
    }
    for (int32_t t = 0; t < moved; t++) kv->pos[keep + t] = kv->pos[keep + n_drop + t] - n_drop;
    const int32_t n = kv->n - n_drop;
    for (int32_t i = n; i < kv->n; i++) kv->pos[i] = -1;
    kv->n = n;
    free(cs);
    return RP_OK;
}
