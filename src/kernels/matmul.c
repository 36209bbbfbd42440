/* matmul.c — CPU matmul backend: dequantize a tile of weight rows, dot with every activation row. */
#include "kernels/matmul.h"

#include <string.h>

#include "kernels/quant.h"

size_t rp_matmul_scratch_floats(int64_t max_cols) { return (size_t)RP_MATMUL_TILE * (size_t)max_cols; }

/* Eight independent accumulators let the compiler keep eight lanes in flight
 * without -ffast-math reassociation. */
static inline float dot_f32(const float *a, const float *b, int64_t n) {
    float s[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) s[j] += a[i + j] * b[i + j];
    float t = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
    for (; i < n; i++) t += a[i] * b[i];
    return t;
}

typedef struct {
    const rp_weight *W;
    int64_t row_begin;
    const float *x;
    int64_t n, ldx;
    float *y;
    int64_t ldy;
    float *const *scratch;
} mm_job;

static void mm_body(void *vp, int64_t tb, int64_t te, int tid) {
    const mm_job *j = vp;
    const rp_weight *W = j->W;
    const int64_t K = W->cols;
    float *buf = j->scratch[tid];
    /* tiles of RP_MATMUL_TILE rows: each dequantized row is reused for all n
     * activation rows while it is hot in L1/L2 */
    for (int64_t t = tb; t < te; t++) {
        int64_t r0 = j->row_begin + t * RP_MATMUL_TILE;
        int64_t r1 = r0 + RP_MATMUL_TILE;
        if (r1 > W->rows) r1 = W->rows;
        const float *rows[RP_MATMUL_TILE];
        for (int64_t r = r0; r < r1; r++) {
            const uint8_t *src = (const uint8_t *)W->data + (size_t)r * W->row_bytes;
            if (W->type == RP_TYPE_F32 && ((uintptr_t)src % sizeof(float)) == 0) {
                rows[r - r0] = (const float *)src;
            } else {
                float *d = buf + (size_t)(r - r0) * (size_t)K;
                rp_dequantize_row(W->type, src, d, K);
                rows[r - r0] = d;
            }
        }
        for (int64_t i = 0; i < j->n; i++) {
            const float *xi = j->x + i * j->ldx;
            float *yi = j->y + i * j->ldy;
            for (int64_t r = r0; r < r1; r++) yi[r] = dot_f32(rows[r - r0], xi, K);
        }
    }
}

void rp_matmul(rp_pool *pool, const rp_weight *W, int64_t row_begin, int64_t row_end,
               const float *x, int64_t n, int64_t ldx, float *y, int64_t ldy, float *const *scratch) {
    if (row_end <= row_begin || n <= 0) return;
    mm_job j = {W, row_begin, x, n, ldx, y, ldy, scratch};
    int64_t tiles = (row_end - row_begin + RP_MATMUL_TILE - 1) / RP_MATMUL_TILE;
    /* a few tiles per claim: small enough to balance, big enough to amortize the atomic */
    int64_t chunk = tiles / (8 * (pool ? rp_pool_n_threads(pool) : 1));
    if (chunk < 1) chunk = 1;
    if (chunk > 16) chunk = 16;
    /* tiles are relative to row_begin; clamp the last tile to row_end */
    if (row_end < W->rows) {
        rp_weight sub = *W;
        sub.rows = row_end;
        j.W = &sub;
        rp_pool_parallel_for(pool, tiles, chunk, mm_body, &j);
        return;
    }
    rp_pool_parallel_for(pool, tiles, chunk, mm_body, &j);
}
