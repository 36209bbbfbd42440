/* arch.h — per-architecture loading hooks (internal to src/model): binding helpers model.c lends them, and the
 * qwen2 / phi3 parts (arch_qwen2_phi3.c). */
#ifndef RP_MODEL_ARCH_H
#define RP_MODEL_ARCH_H

#include "model/model.h"

/* model.c's tensor binders: a 2-D [cols x rows] matrix of a computable type; a 1-D vector of n floats
 * (non-F32 storage converted into `store`). RP_ERR_NOT_FOUND when absent and not required. */
rp_status rp_model_bind_matrix(const rp_gguf *g, const char *name, int64_t cols, int64_t rows, bool required,
                               rp_weight *w);
rp_status rp_model_bind_vector(const rp_gguf *g, const char *name, int64_t n, bool required, float *store,
                               const float **out);

/* ---- qwen2 / phi3 (arch_qwen2_phi3.c) ---- */
static inline bool rp_arch_is_qwen2_phi3(rp_arch a) { return a == RP_ARCH_QWEN2 || a == RP_ARCH_PHI3; }
/* floats of converted-vector storage a layer's binder may need (biases) */
int64_t rp_arch_qp_store_per_layer(const rp_hparams *hp);
/* Architecture-specific hyper-parameters, after the common ones (`an` is the key prefix): LongRoPE. */
rp_status rp_arch_qp_hparams(const rp_gguf *g, rp_model *m, const char *an);
/* Binds layer l's q/k/v (qwen2: and biases; phi3: views of the fused attn_qkv, or separate q/k/v) and
 * gate/up (phi3: views of the fused ffn_up [gate | up]); *ns advances past what it converted. */
rp_status rp_arch_qp_bind_layer(const rp_gguf *g, rp_model *m, int l, rp_layer *L, float **ns);
/* phi3 LongRoPE: the per-pair frequency factors to use (NULL when the file has none). */
rp_status rp_arch_qp_rope_factors(const rp_gguf *g, const rp_model *m, const float **ff, const float **ff_long);

#endif /* RP_MODEL_ARCH_H */
