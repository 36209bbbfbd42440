/* hal.c — HAL draft-budget allocation: temperature softmax over accepted-length EMAs with floors and largest-remainder rounding. */
#include "sched/hal.h"

#include <math.h>

#include "core/error.h"
#include "sched/sched.h"

rp_hal_params rp_hal_default_params(void) {
    rp_hal_params p = {.budget = 16, .l_min = 1, .tau = 1.0f, .gamma = 0.3f, .a0 = 4.0f, .fixed_len = 16, .max_len = 16};
    return p;
}

rp_status rp_hal_check(const rp_hal_params *p) {
    if (p->budget < 0 || p->budget > 4096 || p->l_min < 0 || !(p->tau > 0) || !(p->gamma >= 0 && p->gamma <= 1) ||
        !(p->a0 >= 0) || p->fixed_len < 0 || p->fixed_len > RP_SCHED_MAX_DRAFT || p->max_len < 0 ||
        p->max_len > RP_SCHED_MAX_DRAFT)
        return rp_errorf(RP_ERR_INVALID_ARG,
                         "hal: parameters out of range (M %d, L_min %d, tau %g, gamma %g, A0 %g, fixed L %d, cap %d)",
                         p->budget, p->l_min, p->tau, p->gamma, p->a0, p->fixed_len, p->max_len);
    return RP_OK;
}

/* Gives one unit to each of the `r` entries with the largest key that have
 * not had one yet (ties: lower index). key[i] is set to -INFINITY once used,
 * so O(n * r) with r < n and no extra scratch. */
static void give_largest(float *key, int32_t n, int32_t r, int32_t *out) {
    for (int32_t u = 0; u < r; u++) {
        int32_t best = -1;
        for (int32_t i = 0; i < n; i++)
            if (key[i] != -INFINITY && (best < 0 || key[i] > key[best])) best = i;
        if (best < 0) return;
        out[best]++;
        key[best] = -INFINITY;
    }
}

void rp_hal_allocate(const rp_hal_params *p, const float *a, int32_t n, int32_t *out, float *frac) {
    if (n <= 0) return;
    const int32_t M = p->budget;
    if ((int64_t)n * p->l_min > M) {
        int32_t each = M / n, r = M - each * n;
        for (int32_t i = 0; i < n; i++) {
            out[i] = each;
            frac[i] = a[i];
        }
        give_largest(frac, n, r, out);
        return;
    }
    const int32_t R = M - n * p->l_min;
    /* softmax(a / tau), shifted by the max so exp never overflows */
    float mx = a[0];
    for (int32_t i = 1; i < n; i++)
        if (a[i] > mx) mx = a[i];
    double sum = 0;
    for (int32_t i = 0; i < n; i++) {
        frac[i] = expf((a[i] - mx) / p->tau);
        sum += frac[i];
    }
    int32_t given = 0;
    for (int32_t i = 0; i < n; i++) {
        double share = (double)R * frac[i] / sum;
        int32_t fl = (int32_t)floor(share);
        if (fl > R) fl = R;
        out[i] = p->l_min + fl;
        given += fl;
        frac[i] = (float)(share - fl);
    }
    /* floor never over-gives, and rounding of `share` cannot make the sum of
     * floors exceed R by more than what the clamp above already caught */
    if (given < R) give_largest(frac, n, R - given, out);
}

void rp_hal_allocate_uniform(const rp_hal_params *p, int32_t n, int64_t turn, int32_t *out) {
    if (n <= 0) return;
    const int32_t each = p->budget / n, r = p->budget - each * n;
    const int32_t first = (int32_t)(turn % n);
    for (int32_t i = 0; i < n; i++) out[i] = each;
    for (int32_t u = 0; u < r; u++) out[(first + u) % n]++;
}
