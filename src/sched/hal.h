/* hal.h — draft-budget policy: Historical Accepted Length (EMA) and the softmax split of a global draft budget. */
#ifndef RP_SCHED_HAL_H
#define RP_SCHED_HAL_H

#include <stdint.h>

#include "reprise.h"

/* EdgeAgent §3.2.1: after each verify step A_i(t) = gamma * k_i(t) + (1 - gamma)
 * * A_i(t-1), where k_i(t) is the number of draft tokens accepted; the next
 * step's draft lengths are L_i = L_min + floor((M - N * L_min) * softmax(A /
 * tau)_i), the units lost to the floors going to the largest fractional parts. */
typedef struct rp_hal_params {
    int32_t budget;      /* M: draft tokens per step over all decoding sessions (default 16) */
    int32_t l_min;       /* per-session floor L_min (default 1) */
    float tau;           /* softmax temperature (default 1.0) */
    float gamma;         /* EMA weight of the newest step (default 0.3) */
    float a0;            /* A_i(0) (default 4.0) */
    int32_t fixed_len;   /* Batch-SD / Seq-SD per-session length (default 16) */
    int32_t max_len;     /* cap on one session's draft per step (default 16) */
} rp_hal_params;

rp_hal_params rp_hal_default_params(void);

/* Checks ranges: budget in [0, 4096], l_min >= 0, tau > 0, gamma in [0, 1],
 * a0 >= 0, fixed_len and max_len in [0, RP_SCHED_MAX_DRAFT]. */
rp_status rp_hal_check(const rp_hal_params *p);

/* One EMA update. */
static inline float rp_hal_update(float a_prev, int32_t k, float gamma) {
    return gamma * (float)k + (1.0f - gamma) * a_prev;
}

/* Splits p->budget over n >= 1 sessions with HAL values a[0..n) into
 * out[0..n). The result always sums to M:
 *   - M >= n * L_min: the formula above; the remainder R = (M - n L_min) -
 *     sum floor(...) (< n) goes one unit each to the R largest fractional
 *     parts (ties: lower index first), so L_i >= L_min;
 *   - M < n * L_min (more sessions than the floor allows): floor(M / n) each
 *     and the remainder one unit each to the highest A (ties: lower index).
 * `frac` is caller scratch of n floats (no allocation). n = 0 does nothing. */
void rp_hal_allocate(const rp_hal_params *p, const float *a, int32_t n, int32_t *out, float *frac);

/* The uniform baseline at the same budget: HAL's split with a flat softmax
 * (every A_i equal), i.e. floor(M / n) each and the remainder r = M mod n
 * one unit each to r sessions. Which ones rotates with `turn` (entries turn,
 * turn + 1, ... mod n), so over steps no session is favoured by its index.
 * Sums to M; n = 0 does nothing. */
void rp_hal_allocate_uniform(const rp_hal_params *p, int32_t n, int64_t turn, int32_t *out);

#endif /* RP_SCHED_HAL_H */
