/* rerotate.h — moving cached post-RoPE K rows to new positions by rotating them by the position delta. */
#ifndef RP_REUSE_REROTATE_H
#define RP_REUSE_REROTATE_H

#include <stdbool.h>
#include <stdint.h>

#include "kv/kv.h"
#include "model/model.h"

/* cos/sin of delta * inv_freq[i] for each of n_rot/2 pairs (computed in
 * double). RoPE is a rotation per pair by pos * inv_freq[i]; rotations
 * compose, so R(new) k = R(new - old) R(old) k exactly, for plain RoPE and for
 * llama3 scaling (which only changes inv_freq). */
void rp_rerotate_table(const rp_model *m, int32_t delta, float *cos_out, float *sin_out);
/* ... for a cache whose K use LongRoPE's long factors (rp_kv.rope_long) or not. */
void rp_rerotate_table_long(const rp_model *m, bool rope_long, int32_t delta, float *cos_out, float *sin_out);

/* The same for layer l: gemma3's local layers rotate with their own RoPE base
 * (rp_model_layer_inv_freq); every other layer gets rp_rerotate_table's values. */
void rp_rerotate_table_layer(const rp_model *m, int32_t layer, int32_t delta, float *cos_out, float *sin_out);
/* Whether layer l's table differs from rp_rerotate_table's (the caller must then use the layer's). */
static inline bool rp_rerotate_layer_own(const rp_model *m, int32_t layer) {
    return rp_model_layer_inv_freq(m, layer) != m->rope_inv_freq;
}

/* Rotates every KV head of one K row (kv_dim floats) in place. */
void rp_rerotate_row(const rp_model *m, float *k_row, const float *cs, const float *sn);

/* Context shift: drops cells [keep, keep + n_drop) of the cache and moves
 * the cells after them down by n_drop, their K re-rotated to the new
 * positions (pos - n_drop). The moved KV attended to the dropped tokens when
 * it was computed, so it is approximate from `keep` on (what llama.cpp's
 * context shift does). RP_ERR_RANGE unless 0 <= keep, n_drop >= 1 and
 * keep + n_drop <= kv->n; RP_ERR_NOMEM for the row scratch. */
rp_status rp_rerotate_shift(const rp_model *m, rp_kv *kv, int32_t keep, int32_t n_drop);

#endif /* RP_REUSE_REROTATE_H */
