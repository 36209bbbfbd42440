/* kv.h — per-sequence KV cache: K (post-RoPE) and V per layer and cell, F32/F16/Q8_0, laid out by KV head group. */
#ifndef RP_KV_H
#define RP_KV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "reprise.h"
#include "kernels/kernels.h"
#include "kernels/types.h"
#include "model/model.h"

/* Cells are the sequence's token slots in order; cell c holds the K/V of the
 * token at logical index c, computed at RoPE position pos[c]. A token at cell c
 * attends to cells [0, c] (causal by cell order), so the reuse layer can place
 * cached chunks at any cells and re-rotate them by rewriting K and pos[].
 *
 * Layout: K (and V) of layer l is [n_group][cap(l)][group_bytes], a group being
 * gs consecutive KV heads (gs = 1 for F32/F16; for Q8_0 the smallest gs
 * dividing n_head_kv with gs * head_dim a multiple of the 32-element block).
 * The attention for one KV head thus streams its cells contiguously. A cell's
 * whole row (kv_dim elements, row_bytes) is the concatenation of its groups'
 * bytes in group order: the row-major format of rp_kv_read_rows/write_rows,
 * of the chunk cache and of the store. Use the accessors below, never raw
 * offsets into the buffers.
 *
 * Sliding-window layers (gemma's local layers, layer window w > 0) of a cache
 * made with swa_cells < n_ctx ("ring" layers) hold only swa_cells cells: the
 * logical cells [base[l], base[l] + swa_cells), cell c at slot c - base[l].
 * A row at cell c of such a layer needs cells [c - w + 1, c] only (positions
 * strictly increase over cells), so swa_cells = w + the largest batch (or
 * draft) keeps everything a forward or a rollback within that needs. The
 * forward slides the held range forward (rp_kv_slide: one memmove of the kept
 * cells, every swa_cells - w + 1 cells) before it stores rows past it; a
 * cached chunk placed (rp_kv_write_rows) slides it too, keeping the last
 * swa_cells cells written. Cells before base[l] are gone on that layer: loads
 * and reads of them give zeros, stores to them are dropped, and a forward
 * whose rows would attend them fails with a clear error. Other layers (and
 * every layer of a full cache: swa_cells == n_ctx) hold all n_ctx cells. */
typedef enum { RP_KV_K = 0, RP_KV_V = 1 } rp_kv_part;

typedef struct rp_kv {
    rp_type type;          /* RP_TYPE_F32, RP_TYPE_F16 or RP_TYPE_Q8_0 */
    int32_t n_layer;
    int32_t n_ctx;         /* capacity in cells (logical: cells [0, n_ctx) of every layer) */
    int32_t n_head_kv, head_dim, kv_dim;
    int32_t group_heads;   /* gs: KV heads per group */
    int32_t n_group;       /* n_head_kv / gs */
    size_t group_bytes;    /* bytes of one cell's slice of one group */
    size_t row_bytes;      /* bytes of one cell's whole K (or V) row in one layer: n_group * group_bytes */
    uint8_t *buf[2];       /* K, V: layer l at layer_off[l], [n_group][cap(l)][group_bytes] */
    int32_t *pos;          /* [n_ctx]; -1 for an empty cell */
    int32_t n;             /* cells [0, n) are filled */
    const rp_ew_kernel *ew;   /* F16 row conversions at the model's level (NULL: scalar) */
    bool rope_long;        /* K rotated with the model's LongRoPE long factors (rp_model_rope_long of n_ctx) */
    /* sliding-window layers */
    int32_t swa_cells;     /* cells a ring layer holds; n_ctx: no ring layer (full cache) */
    int32_t n_ring;        /* ring layers */
    int32_t *window;       /* [n_layer] the layer's window (0: global), as the model's */
    bool *ring;            /* [n_layer] the layer holds swa_cells cells */
    int32_t *base;         /* [n_layer] first cell a ring layer holds (0 for the others) */
    size_t *layer_off;     /* [n_layer] byte offset of layer l in buf[part] (layers [0, gpu_l0) only) */
    /* GPU offload: layers [gpu_l0, n_layer) live on the GPU (gpu, F16 rows; buf holds layers [0, gpu_l0) only);
     * the accessors below route them there. gpu_l0 == n_layer and gpu NULL for a CPU-only model. A model with
     * GPU layers has no sliding-window layer, so ring layers and GPU layers never meet in one cache. */
    int32_t gpu_l0;
    struct rp_gpu_kv *gpu;
    uint8_t *gpu_enc;         /* [row_bytes] scratch of the single-row accessors */
} rp_kv;

/* Q8_0 needs some gs dividing n_head_kv with gs * head_dim % 32 == 0. A full cache (every layer n_ctx cells).
 * With the model's GPU offload the cache's GPU layers are made on the device, and the type must be F16. */
rp_status rp_kv_create(const rp_model *m, int32_t n_ctx, rp_type type, rp_kv **out);
/* With the model's sliding-window layers holding swa_cells cells (see above; min(swa_cells, n_ctx)); 0, or a
 * model without such layers: full, as rp_kv_create. */
rp_status rp_kv_create_swa(const rp_model *m, int32_t n_ctx, rp_type type, int32_t swa_cells, rp_kv **out);
/* The cells a ring layer of model m needs for forward calls of up to n_batch rows (and rollbacks of up to that
 * many cells): its window + n_batch; 0 when m has no sliding-window layer. */
int32_t rp_kv_swa_cells(const rp_model *m, int32_t n_batch);
/* Bytes a cache of n_ctx cells of the given shape takes (swa_cells as rp_kv_create_swa; NULL windows: none). */
uint64_t rp_kv_shape_bytes(int32_t n_layer, const int32_t *windows, size_t row_bytes, int32_t n_ctx, int32_t swa_cells);
/* The same from the geometry alone (tests, tools without a model); cpu_level
 * picks the F16 conversions (RP_CPU_SCALAR for the scalar ones). */
rp_status rp_kv_create_shape(int32_t n_layer, int32_t n_head_kv, int32_t head_dim, int32_t n_ctx, rp_type type,
                             rp_cpu_level cpu_level, rp_kv **out);
/* ... with per-layer windows ([n_layer], NULL: none) and swa_cells as rp_kv_create_swa. */
rp_status rp_kv_create_shape_swa(int32_t n_layer, int32_t n_head_kv, int32_t head_dim, int32_t n_ctx, rp_type type,
                                 rp_cpu_level cpu_level, const int32_t *windows, int32_t swa_cells, rp_kv **out);
void rp_kv_free(rp_kv *kv);

/* Drops cells [n, ...): rollback of rejected draft tokens, or a new prompt. */
void rp_kv_truncate(rp_kv *kv, int32_t n);
static inline void rp_kv_clear(rp_kv *kv) { rp_kv_truncate(kv, 0); }

size_t rp_kv_bytes(const rp_kv *kv);

/* Cells layer `layer` holds: n_ctx, or swa_cells for a ring layer. */
static inline int32_t rp_kv_layer_cap(const rp_kv *kv, int32_t layer) {
    return kv->ring[layer] ? kv->swa_cells : kv->n_ctx;
}
/* Whether layer `layer` holds logical cell `cell` (always, but for a ring layer's cells before base / past it). */
static inline bool rp_kv_holds(const rp_kv *kv, int32_t layer, int32_t cell) {
    if (!kv->ring[layer]) return cell >= 0 && cell < kv->n_ctx;
    return cell >= kv->base[layer] && cell < kv->base[layer] + kv->swa_cells;
}
/* The lowest cell every layer holds (0 for a full cache). */
int32_t rp_kv_held_lo(const rp_kv *kv);
/* Whether every layer holds what rows from cell `n` on attend of cells [0, n): true for a full cache; for a
 * ring, the window before n (a rollback further back than the slack, or a truncation past the window, is
 * false: recompute from cell 0). */
bool rp_kv_can_resume(const rp_kv *kv, int32_t n);
/* Moves ring layer `layer`'s held range to start at new_base (>= base: the cells before it are dropped; a
 * no-op for other layers or new_base <= base). */
void rp_kv_slide(rp_kv *kv, int32_t layer, int32_t new_base);

/* Group `group`'s slice for `cell` of layer `layer`; cells of one group are
 * group_bytes apart. Head h lives in group h / gs at element offset
 * (h % gs) * head_dim of the slice. The layer must hold the cell (rp_kv_holds). */
static inline uint8_t *rp_kv_group(const rp_kv *kv, rp_kv_part part, int32_t layer, int32_t group, int32_t cell) {
    const size_t cap = (size_t)rp_kv_layer_cap(kv, layer);
    return kv->buf[part] + kv->layer_off[layer] +
           ((size_t)group * cap + (size_t)(cell - kv->base[layer])) * kv->group_bytes;
}

/* The cache arguments of the attention kernel for KV head `head` of layer
 * `layer` (a CPU layer: < gpu_l0): its group's cells, group_bytes apart, the head at (head % gs) * head_dim.
 * The pointers are at the layer's first held cell (base[layer]; 0 but on ring layers):
 * cell c is at index c - base[layer]. */
static inline void rp_kv_attn_view(const rp_kv *kv, int32_t layer, int32_t head, rp_attn_args *a) {
    const int32_t g = head / kv->group_heads;
    a->k = rp_kv_group(kv, RP_KV_K, layer, g, kv->base[layer]);
    a->v = rp_kv_group(kv, RP_KV_V, layer, g, kv->base[layer]);
    a->kv_row_bytes = kv->group_bytes;
    a->kv_type = kv->type;
    a->kv_head = head % kv->group_heads;
}

/* One cell's whole row (kv_dim floats), converted and scattered over / gathered from the groups. */
void rp_kv_store_row(const rp_kv *kv, rp_kv_part part, int32_t layer, int32_t cell, const float *src);
void rp_kv_load_row(const rp_kv *kv, rp_kv_part part, int32_t layer, int32_t cell, float *dst);

/* Cells [cell0, cell0 + n) of one layer to / from a row-major buffer of n rows of row_bytes. On a ring layer,
 * reading a cell it does not hold gives a zero row; writing slides the held range to end at the last cell
 * written when that is past it, and drops cells before the (new) base. */
void rp_kv_read_rows(const rp_kv *kv, rp_kv_part part, int32_t layer, int32_t cell0, int32_t n, uint8_t *dst);
void rp_kv_write_rows(rp_kv *kv, rp_kv_part part, int32_t layer, int32_t cell0, int32_t n, const uint8_t *src);

/* Copies src's filled cells [0, src->n) (K, V of every layer, and pos[]) into dst, which must have the same
 * shape and type, the same ring layers and swa_cells, and at least as many cells; dst's other cells are
 * emptied. RP_ERR_INVALID_ARG otherwise. */
rp_status rp_kv_copy(rp_kv *dst, const rp_kv *src);

/* Moves cells [src, src + n) of one layer to [dst, dst + n) (ranges may overlap); pos[] is the caller's. On a
 * ring layer only a move down (dst < src) of the whole tail (src + n >= the cells held) is supported (the
 * context shift): the held cells follow, those the move overwrites are dropped. */
void rp_kv_move_cells(rp_kv *kv, rp_kv_part part, int32_t layer, int32_t dst, int32_t src, int32_t n);

/* Conversion of one row-major row (row_bytes, the chunk format) to / from kv_dim floats. */
void rp_kv_encode_row(const rp_kv *kv, uint8_t *dst, const float *src);
void rp_kv_decode_row(const rp_kv *kv, const uint8_t *src, float *dst);

#endif /* RP_KV_H */
