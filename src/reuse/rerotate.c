/* rerotate.c — RoPE re-rotation of cached K by a position delta (NORM and NEOX pairings). */
#include "reuse/rerotate.h"

#include <math.h>

void rp_rerotate_table(const rp_model *m, int32_t delta, float *c, float *s) {
    int half = m->hp.n_rot / 2;
    for (int i = 0; i < half; i++) {
        double th = (double)delta * (double)m->rope_inv_freq[i];
        c[i] = (float)cos(th);
        s[i] = (float)sin(th);
    }
}

void rp_rerotate_row(const rp_model *m, float *k, const float *cs, const float *sn) {
    const int32_t HK = m->hp.n_head_kv, HD = m->hp.head_dim, R = m->hp.n_rot, half = R / 2;
    for (int32_t h = 0; h < HK; h++) {
        float *x = k + (size_t)h * HD;
        if (m->hp.rope_kind == RP_ROPE_NEOX) {
            for (int32_t i = 0; i < half; i++) {
                float a = x[i], b = x[i + half];
                x[i] = a * cs[i] - b * sn[i];
                x[i + half] = a * sn[i] + b * cs[i];
            }
        } else {
            for (int32_t i = 0; i < half; i++) {
                float a = x[2 * i], b = x[2 * i + 1];
                x[2 * i] = a * cs[i] - b * sn[i];
                x[2 * i + 1] = a * sn[i] + b * cs[i];
            }
        }
    }
}
