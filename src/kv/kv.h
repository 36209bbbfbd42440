/* kv.h — per-sequence KV cache: K (post-RoPE) and V rows per layer and cell, F32/F16/Q8_0. */
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
 * cached chunks at any cells and re-rotate them by rewriting K and pos[]. */
typedef struct rp_kv {
    rp_type type;          /* RP_TYPE_F32, RP_TYPE_F16 or RP_TYPE_Q8_0 */
    int32_t n_layer;
    int32_t n_ctx;         /* capacity in cells */
    int32_t n_head_kv, head_dim, kv_dim;
    size_t row_bytes;      /* bytes of one cell's K (or V) row in one layer */
    uint8_t *k;            /* [n_layer][n_ctx][row_bytes] */
    uint8_t *v;            /* [n_layer][n_ctx][row_bytes] */
    int32_t *pos;          /* [n_ctx]; -1 for an empty cell */
    int32_t n;             /* cells [0, n) are filled */
    const rp_ew_kernel *ew;   /* F16 row conversions at the model's level (NULL: scalar) */
} rp_kv;

/* Q8_0 needs kv_dim (n_head_kv * head_dim) to be a multiple of 32. */
rp_status rp_kv_create(const rp_model *m, int32_t n_ctx, rp_type type, rp_kv **out);
void rp_kv_free(rp_kv *kv);

/* Drops cells [n, ...): rollback of rejected draft tokens, or a new prompt. */
void rp_kv_truncate(rp_kv *kv, int32_t n);
static inline void rp_kv_clear(rp_kv *kv) { rp_kv_truncate(kv, 0); }

size_t rp_kv_bytes(const rp_kv *kv);

static inline uint8_t *rp_kv_k_row(const rp_kv *kv, int32_t layer, int32_t cell) {
    return kv->k + ((size_t)layer * (size_t)kv->n_ctx + (size_t)cell) * kv->row_bytes;
}
static inline uint8_t *rp_kv_v_row(const rp_kv *kv, int32_t layer, int32_t cell) {
    return kv->v + ((size_t)layer * (size_t)kv->n_ctx + (size_t)cell) * kv->row_bytes;
}

/* Store / load one cell's full row (kv_dim floats) with conversion. */
void rp_kv_store_row(const rp_kv *kv, uint8_t *dst, const float *src);
void rp_kv_load_row(const rp_kv *kv, const uint8_t *src, float *dst);

#endif /* RP_KV_H */
