/* rerotate.h — moving cached post-RoPE K rows to new positions by rotating them by the position delta. */
#ifndef RP_REUSE_REROTATE_H
#define RP_REUSE_REROTATE_H

#include <stdint.h>

#include "model/model.h"

/* cos/sin of delta * inv_freq[i] for each of n_rot/2 pairs (computed in
 * double). RoPE is a rotation per pair by pos * inv_freq[i]; rotations
 * compose, so R(new) k = R(new - old) R(old) k exactly, for plain RoPE and for
 * llama3 scaling (which only changes inv_freq). */
void rp_rerotate_table(const rp_model *m, int32_t delta, float *cos_out, float *sin_out);

/* Rotates every KV head of one K row (kv_dim floats) in place. */
void rp_rerotate_row(const rp_model *m, float *k_row, const float *cs, const float *sn);

#endif /* RP_REUSE_REROTATE_H */
