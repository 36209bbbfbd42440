/* gpu_split.h — CPU + GPU column-parallel matmul over one shared output (the agent paper's execution layer, §3.1.1;
 * issue 21). A weight W (rows = output columns) is cut at row `split`: rows [0, split) run on the CPU with its
 * packed kernel, rows [split, rows) on the GPU from the GGUF bytes — one copy of the weights, each device reading
 * its own shard — and both write disjoint column ranges of one output buffer that both address (a mapped,
 * shared-memory buffer: integrated GPUs, lavapipe). The GPU half is submitted first, the CPU half runs while the GPU
 * computes, and one wait on the GPU's timeline value is the only barrier: when rp_split_mm returns, every column is
 * written. Discrete GPUs (no mapped device memory) are refused for now: their CPU half would need one transfer,
 * which is not written yet.
 *
 * rp_split_calibrate picks the CPU fraction f of one shape by timing the whole split call (both devices at once,
 * so contention for the memory bus is in the numbers) at candidate fractions. Without the Vulkan backend
 * rp_split_create answers "not built" (gpu_none.c). */
#ifndef RP_GPU_GPU_SPLIT_H
#define RP_GPU_GPU_SPLIT_H

#include "core/threadpool.h"
#include "gpu/gpu.h"
#include "gpu/gpu_ops.h"
#include "kernels/matmul.h"

typedef struct rp_split rp_split;

/* The executor of one thread pool and one GPU: its own recorder and matmul scratch (the scratch grows on the
 * first call of a larger shape: calibrate, or run each shape once, before timing). */
rp_status rp_split_create(rp_gpu *g, rp_gpu_ops *ops, rp_pool *pool, rp_split **out);
void rp_split_free(rp_split *s);

/* One split matmul: y[j * ldy + r] = dot(W row r, x row j) for r < rows, j < n. w: the prepared CPU weight (its
 * rows, cols, type); gw / gw_off: the same GGUF rows on the GPU (row 0 at byte gw_off, w->row_bytes apart). x and
 * y are GPU buffers the host can map (offsets and strides in floats). split is rounded down to the CPU kernel's row
 * block (rp_split_point); 0 = all on the GPU, rows = all on the CPU. */
typedef struct rp_split_mm_args {
    const rp_weight *w;
    rp_gpu_buf *gw;
    uint32_t gw_off;
    rp_gpu_buf *x, *y;
    uint32_t x_off, ldx, y_off, ldy;
    uint32_t n;
    int64_t split;
} rp_split_mm_args;

/* Times of one call, in seconds (either may be NULL in the call): the CPU half alone, the wait for the GPU after
 * it, the whole call. */
typedef struct rp_split_times {
    double cpu_s, wait_s, total_s;
} rp_split_times;

rp_status rp_split_mm(rp_split *s, const rp_split_mm_args *a, rp_split_times *t);

/* The split row of fraction f of w's rows on the CPU: f * rows rounded down to the CPU kernel's row block (so the
 * CPU half is whole packed panels), f >= 1 gives rows, f <= 0 gives 0. */
int64_t rp_split_point(const rp_weight *w, double f);

/* Test hook for rp_split_mm: called on the CPU side before its half (e.g. a random delay), NULL for none. */
void rp_split_set_cpu_hook(rp_split *s, void (*fn)(void *user), void *user);

/* Calibration of one shape: for each of the n_f candidate fractions f[i], reps calls of the split matmul a
 * (its split overwritten), each timed by `clock` (seconds; NULL: the monotonic clock) around the call; the
 * fraction with the lowest median wins, ties going to the one listed first. *best_f and, when non-NULL,
 * med_s[i] (the median of each candidate) are the results. */
typedef double (*rp_split_clock)(void *user);
/* The monotonic clock in seconds (the default clock; user unused). */
double rp_split_clock_now(void *user);
rp_status rp_split_calibrate(rp_split *s, const rp_split_mm_args *a, const double *f, int32_t n_f, int32_t reps,
                             rp_split_clock clock, void *clock_user, double *best_f, double *med_s);

#endif /* RP_GPU_GPU_SPLIT_H */
