/* matmul.h — the matrix-multiply backend interface: y = x · Wᵀ over a weight's row range. */
#ifndef RP_KERNELS_MATMUL_H
#define RP_KERNELS_MATMUL_H

#include <stddef.h>
#include <stdint.h>

#include "core/threadpool.h"
#include "kernels/types.h"

/* A 2-D weight [rows x cols] (GGUF ne0 = cols, contiguous; ne1 = rows). */
typedef struct rp_weight {
    const void *data;     /* into the mapping (or a repacked copy) */
    rp_type type;
    int64_t rows, cols;
    size_t row_bytes;
} rp_weight;

/* Per-thread scratch a matmul needs: RP_MATMUL_TILE rows of `cols` floats. */
#define RP_MATMUL_TILE 8
size_t rp_matmul_scratch_floats(int64_t max_cols);

/* y[i][r] = dot(x[i][:], W[r][:]) for i < n and r in [row_begin, row_end).
 * x is n x W->cols (row stride ldx floats); y is n x ldy floats. The row range
 * is what a second device backend would be handed (column split of the output);
 * the CPU backend covers [0, rows). `scratch[t]` is thread t's buffer of
 * rp_matmul_scratch_floats(W->cols) floats. Allocates nothing. */
void rp_matmul(rp_pool *pool, const rp_weight *W, int64_t row_begin, int64_t row_end,
               const float *x, int64_t n, int64_t ldx, float *y, int64_t ldy, float *const *scratch);

#endif /* RP_KERNELS_MATMUL_H */
