/* blend.h — CacheBlend-style selective recompute over a batch of reused and new tokens. */
#ifndef RP_REUSE_BLEND_H
#define RP_REUSE_BLEND_H

#include <stdint.h>

#include "reprise.h"
#include "kv/kv.h"
#include "model/forward.h"

/* Deviation of a row = sum over KV heads of |fresh - cached|^2 / |cached|^2
 * (relative per head: on stories260K this cut full reuse's KL 4.1x at r = 0.25
 * where the absolute squared distance managed 2.0-2.9x, because heads with
 * large activations no longer drown the others). */
typedef enum rp_dev_kind {
    RP_DEV_K = 1,    /* deviation of recomputed vs cached K */
    RP_DEV_V = 2,    /* ... of V */
    RP_DEV_KV = 3,   /* sum of both */
} rp_dev_kind;

typedef enum rp_row_kind {
    RP_ROW_REUSE = 0,   /* cell holds cached (re-rotated) KV for every layer */
    RP_ROW_NEW = 1,     /* no cached KV: always recomputed */
    RP_ROW_PAD = 2,     /* static-shape padding: computed up to the check layer, never selected;
                           the caller places pad rows in cells past the prompt and clears them after */
} rp_row_kind;

/* How the reuse rows to recompute are chosen at the check layer.
 * DEV is CacheBlend's rule: the largest KV deviation. ATTN weighs each row's
 * deviation by the attention the prompt's last rows (new tokens and the final
 * token, up to RP_BLEND_QUERY_ROWS) pay it at the check layer: a stale row
 * changes a later token's attention output in proportion to the weight it
 * gets, so a large deviation nobody attends to costs nothing. HYBRID fills
 * the budget alternately from both rankings (default). Measured on
 * stories260K (`bench fidelity`, 10 seeds, r = 0.25, geometric mean of the
 * cut in full reuse's KL): DEV 2.4x (1.6-4.1x), ATTN 10.4x (4.9-15x),
 * HYBRID 4.8x (3.1-8.1x); on the 2-3k-token doc-QA / chat workloads (past
 * that model's 512-token training context) DEV 3.0x / 4.9x, ATTN 1.5x /
 * 1.9x, HYBRID 2.2x / 5.2x — hence the hybrid. */
/* rp_select_kind and its names (rp_select_kind_name / _parse) are the public API's (reprise.h) */

#define RP_BLEND_QUERY_ROWS 16   /* last new/final rows whose attention weighs the deviation */

typedef struct rp_blend_params {
    int32_t check_layer;   /* layers [0, check_layer] are recomputed for every row (default 1) */
    rp_dev_kind dev;       /* deviation measure at the check layer (default KV) */
    rp_select_kind select; /* ranking rule (default HYBRID) */
    int32_t fixed_rows;    /* > 0 (static shapes): rows carried past the check layer, topped up with PAD
                              rows when fewer are selected, so every call has one shape (default 0 = off) */
} rp_blend_params;

rp_blend_params rp_blend_default_params(void);

typedef struct rp_blend_stats {
    int32_t n_rows, n_reuse, n_new, n_pad;
    int32_t n_selected;    /* reuse rows recomputed past the check layer */
    int32_t n_forced;      /* new rows + the final row */
    int32_t n_pad_kept;    /* PAD rows carried past the check layer to reach fixed_rows */
} rp_blend_stats;

/* Scratch for rp_blend_run, sized once for up to `cap` rows (request-phase
 * allocation; nothing is allocated inside the run). */
typedef struct rp_blend_rank { float v; int32_t i; } rp_blend_rank;

typedef struct rp_blend_ws {
    int32_t cap;
    int32_t n_cells;   /* cells of the sequence the runs may use (rows before the batch + the batch) */
    int32_t n_head;
    int32_t kv_dim;
    float *dev;        /* [cap] deviation per row */
    float *imp;        /* [cap] attention paid to each row by the query rows */
    rp_blend_rank *rank, *rank2;   /* [cap] each: rows sorted by a score */
    int32_t *keep;     /* [cap] */
    float *score;      /* [n_head * n_cells] attention scores of one query row */
    float *tmp;        /* [kv_dim] dequantized cached row */
    uint8_t *gpu_rows; /* a GPU check layer's cached K / V rows ([2 * cap * row_bytes]) and one fresh row, raw and
                          decoded (made on first use) */
} rp_blend_ws;

/* cap: rows per run; n_cells: cells of the KV a run may touch (bounds the
 * rows before the batch that the query rows attend to). */
rp_status rp_blend_ws_init(rp_blend_ws *ws, int32_t cap, int32_t n_cells, int32_t n_head, int32_t kv_dim);
void rp_blend_ws_free(rp_blend_ws *ws);

/* Runs the rows of batch `b` (one sequence `kv`, cells in increasing order,
 * all cells before the first row already filled) through the model:
 * layers 0..check_layer for every row; at check_layer the rows' fresh K/V are
 * compared with the cached K/V in their cells, and the `budget` reuse rows with
 * the largest deviation are selected; every NEW row and the row with logits
 * (the final token) are always selected; PAD rows never. From there only the
 * selected rows are computed, attending over the blended cache (fresh KV for
 * selected rows, cached KV for the rest). With p->fixed_rows > 0 the survivors
 * are topped up with PAD rows (in row order, never ranked) to exactly
 * fixed_rows when the batch has them, so a static call's shape past the check
 * layer does not depend on how many reuse rows there were. The batch is
 * compacted in place (survivors in row order).
 * `kinds` gives each row's rp_row_kind. On return the logits of the flagged
 * row are in the context (rp_ctx_logits(c, 0)). */
rp_status rp_blend_run(rp_ctx *c, rp_kv *kv, rp_batch *b, const uint8_t *kinds, int32_t budget,
                       const rp_blend_params *p, rp_blend_ws *ws, rp_blend_stats *st);

#endif /* RP_REUSE_BLEND_H */
