/* kv.h — per-sequence KV cache: K (post-RoPE) and V per layer and cell, F32/F16/Q8_0, laid out by KV head group. */
#ifndef RP_KV_H
#define RP_KV_H

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
 * Layout: K (and V) of layer l is [n_group][n_ctx][group_bytes], a group being
 * gs consecutive KV heads (gs = 1 for F32/F16; for Q8_0 the smallest gs
 * dividing n_head_kv with gs * head_dim a multiple of the 32-element block).
 * The attention for one KV head thus streams its cells contiguously. A cell's
 * whole row (kv_dim elements, row_bytes) is the concatenation of its groups'
 * bytes in group order: the row-major format of rp_kv_read_rows/write_rows,
 * of the chunk cache and of the store. Use the accessors below, never raw
 * offsets into the buffers. */
typedef enum { RP_KV_K = 0, RP_KV_V = 1 } rp_kv_part;

typedef struct rp_kv {
    rp_type type;          /* RP_TYPE_F32, RP_TYPE_F16 or RP_TYPE_Q8_0 */
    int32_t n_layer;
    int32_t n_ctx;         /* capacity in cells */
    int32_t n_head_kv, head_dim, kv_dim;
    int32_t group_heads;   /* gs: KV heads per group */
    int32_t n_group;       /* n_head_kv / gs */
    size_t group_bytes;    /* bytes of one cell's slice of one group */
    size_t row_bytes;      /* bytes of one cell's whole K (or V) row in one layer: n_group * group_bytes */
    uint8_t *buf[2];       /* K, V: [n_layer][n_group][n_ctx][group_bytes] each */
    int32_t *pos;          /* [n_ctx]; -1 for an empty cell */
    int32_t n;             /* cells [0, n) are filled */
    const rp_ew_kernel *ew;   /* F16 row conversions at the model's level (NULL: scalar) */
    /* GPU offload: layers [gpu_l0, n_layer) live on the GPU (gpu, F16 rows; buf holds layers [0, gpu_l0) only);
     * the accessors below route them there. gpu_l0 == n_layer and gpu NULL for a CPU-only model. */
    int32_t gpu_l0;
    struct rp_gpu_kv *gpu;
    uint8_t *gpu_enc;         /* [row_bytes] scratch of the single-row accessors */
} rp_kv;

/* Q8_0 needs some gs dividing n_head_kv with gs * head_dim % 32 == 0. With the model's GPU offload the cache's
 * GPU layers are made on the device, and the type must be F16. */
rp_status rp_kv_create(const rp_model *m, int32_t n_ctx, rp_type type, rp_kv **out);
/* The same from the geometry alone (tests, tools without a model); cpu_level
 * picks the F16 conversions (RP_CPU_SCALAR for the scalar ones). */
rp_status rp_kv_create_shape(int32_t n_layer, int32_t n_head_kv, int32_t head_dim, int32_t n_ctx, rp_type type,
                             rp_cpu_level cpu_level, rp_kv **out);
void rp_kv_free(rp_kv *kv);

/* Drops cells [n, ...): rollback of rejected draft tokens, or a new prompt. */
void rp_kv_truncate(rp_kv *kv, int32_t n);
static inline void rp_kv_clear(rp_kv *kv) { rp_kv_truncate(kv, 0); }

size_t rp_kv_bytes(const rp_kv *kv);

/* Group `group`'s slice for `cell` of layer `layer`; cells of one group are
 * group_bytes apart. Head h lives in group h / gs at element offset
 * (h % gs) * head_dim of the slice. */
static inline uint8_t *rp_kv_group(const rp_kv *kv, rp_kv_part part, int32_t layer, int32_t group, int32_t cell) {
    return kv->buf[part] +
           (((size_t)layer * (size_t)kv->n_group + (size_t)group) * (size_t)kv->n_ctx + (size_t)cell) * kv->group_bytes;
}

/* The cache arguments of the attention kernel for KV head `head` of layer
 * `layer` (a CPU layer: < gpu_l0): its group's cells, group_bytes apart, the head at (head % gs) * head_dim. */
static inline void rp_kv_attn_view(const rp_kv *kv, int32_t layer, int32_t head, rp_attn_args *a) {
    const int32_t g = head / kv->group_heads;
    a->k = rp_kv_group(kv, RP_KV_K, layer, g, 0);
    a->v = rp_kv_group(kv, RP_KV_V, layer, g, 0);
    a->kv_row_bytes = kv->group_bytes;
    a->kv_type = kv->type;
    a->kv_head = head % kv->group_heads;
}

/* One cell's whole row (kv_dim floats), converted and scattered over / gathered from the groups. */
void rp_kv_store_row(const rp_kv *kv, rp_kv_part part, int32_t layer, int32_t cell, const float *src);
void rp_kv_load_row(const rp_kv *kv, rp_kv_part part, int32_t layer, int32_t cell, float *dst);

/* Cells [cell0, cell0 + n) of one layer to / from a row-major buffer of n rows of row_bytes. */
void rp_kv_read_rows(const rp_kv *kv, rp_kv_part part, int32_t layer, int32_t cell0, int32_t n, uint8_t *dst);
void rp_kv_write_rows(rp_kv *kv, rp_kv_part part, int32_t layer, int32_t cell0, int32_t n, const uint8_t *src);

/* Copies src's filled cells [0, src->n) (K, V of every layer, and pos[]) into dst, which must have the same
 * shape and type and at least as many cells; dst's other cells are emptied. RP_ERR_INVALID_ARG otherwise. */
rp_status rp_kv_copy(rp_kv *dst, const rp_kv *src);

/* Moves cells [src, src + n) of one layer to [dst, dst + n) (ranges may overlap); pos[] is the caller's. */
void rp_kv_move_cells(rp_kv *kv, rp_kv_part part, int32_t layer, int32_t dst, int32_t src, int32_t n);

/* Conversion of one row-major row (row_bytes, the chunk format) to / from kv_dim floats. */
void rp_kv_encode_row(const rp_kv *kv, uint8_t *dst, const float *src);
void rp_kv_decode_row(const rp_kv *kv, const uint8_t *src, float *dst);

#endif /* RP_KV_H */
