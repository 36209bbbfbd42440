/* split.c — the device-independent parts of the CPU + GPU split matmul (gpu_split.h): where a fraction cuts a
 * weight, and the calibration that times the split call at candidate fractions. */
#include <stdlib.h>
#include <time.h>

#include "core/error.h"
#include "gpu/gpu_split.h"

int64_t rp_split_point(const rp_weight *w, double f) {
    if (!(f > 0.0)) return 0;
    if (f >= 1.0) return w->rows;
    const int64_t rb = w->k && w->k->row_block > 0 ? w->k->row_block : 1;
    const int64_t r = (int64_t)(f * (double)w->rows);
    return r / rb * rb;
}

double rp_split_clock_now(void *user) {
    (void)user;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

rp_status rp_split_calibrate(rp_split *s, const rp_split_mm_args *a, const double *f, int32_t n_f, int32_t reps,
                             rp_split_clock clock, void *clock_user, double *best_f, double *med_s) {
    if (!f || n_f <= 0 || reps <= 0 || !best_f)
        return rp_errorf(RP_ERR_INVALID_ARG, "split calibrate: needs candidate fractions, reps >= 1 and best_f");
    if (!clock) clock = rp_split_clock_now;
    double *ts = malloc(sizeof(double) * (size_t)reps);
    if (!ts) return rp_errorf(RP_ERR_NOMEM, "split calibrate: out of memory");
    double best = 0.0, best_med = 0.0;
    rp_status st = RP_OK;
    for (int32_t i = 0; i < n_f && st == RP_OK; i++) {
        rp_split_mm_args c = *a;
        c.split = rp_split_point(a->w, f[i]);
        for (int32_t r = 0; r < reps && st == RP_OK; r++) {
            const double t0 = clock(clock_user);
            st = rp_split_mm(s, &c, NULL);
            ts[r] = clock(clock_user) - t0;
        }
        if (st != RP_OK) break;
        qsort(ts, (size_t)reps, sizeof ts[0], cmp_double);
        const double med = reps % 2 ? ts[reps / 2] : 0.5 * (ts[reps / 2 - 1] + ts[reps / 2]);
        if (med_s) med_s[i] = med;
        if (i == 0 || med < best_med) {
            best_med = med;
            best = f[i];
        }
    }
    free(ts);
    if (st == RP_OK) *best_f = best;
    return st;
}
