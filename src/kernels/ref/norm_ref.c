/* norm_ref.c — scalar references of RMSNorm and RoPE (the forward pass calls them; the GPU tests compare to them). */
#include <math.h>

#include "kernels/kernels.h"

void rp_rmsnorm_ref(float *out, const float *x, const float *w, int64_t n, float eps) {
    double ss = 0;
    for (int64_t i = 0; i < n; i++) ss += (double)x[i] * x[i];
    float scale = (float)(1.0 / sqrt(ss / (double)n + eps));
    for (int64_t i = 0; i < n; i++) out[i] = x[i] * scale * w[i];
}

void rp_rope_ref(float *h, const float *cs, const float *sn, int32_t n_rot, bool neox) {
    int32_t half = n_rot / 2;
    if (neox) {
        for (int32_t i = 0; i < half; i++) {
            float a = h[i], b = h[i + half];
            h[i] = a * cs[i] - b * sn[i];
            h[i + half] = a * sn[i] + b * cs[i];
        }
    } else {
        for (int32_t i = 0; i < half; i++) {
            float a = h[2 * i], b = h[2 * i + 1];
            h[2 * i] = a * cs[i] - b * sn[i];
            h[2 * i + 1] = a * sn[i] + b * cs[i];
        }
    }
}
