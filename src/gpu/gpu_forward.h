/* gpu_forward.h — a whole model's decode on the GPU: the weights in device buffers (used in place on a
 * shared-memory device once uploaded; a copy per tensor), an F16 KV cache on the device, and one command buffer
 * per token holding every layer (embedding lookup, norms, q/k/v, RoPE, KV writes, attention, output projection,
 * SwiGLU FFN, the output norm and logits), submitted once and waited on through the timeline; recorded once
 * and replayed for every later token.
 * The same computation as src/model/forward.c for one sequence, token by token; tests/gpu/test_gpu_forward.c
 * checks its logits against the CPU's. */
#ifndef RP_GPU_GPU_FORWARD_H
#define RP_GPU_GPU_FORWARD_H

#include "gpu/gpu.h"
#include "model/model.h"

typedef struct rp_gpu_model rp_gpu_model;

/* Uploads m's weights and makes a KV cache of n_ctx cells. RP_ERR_UNSUPPORTED naming the tensor when a weight
 * type has no GPU kernel or a shape does not fit the kernels (head_dim <= 256). */
rp_status rp_gpu_model_create(rp_gpu *g, const rp_model *m, int32_t n_ctx, rp_gpu_model **out);
void rp_gpu_model_free(rp_gpu_model *gm);
/* Decodes token `tok` at position pos (cells [0, pos] attended; pos == previous + 1, or 0 to start over) and
 * writes the n_vocab logits. RP_ERR_RANGE past n_ctx. */
rp_status rp_gpu_decode(rp_gpu_model *gm, rp_token tok, int32_t pos, float *logits);
/* Dispatches the last decode recorded (for reports and tests). */
int32_t rp_gpu_model_last_dispatches(const rp_gpu_model *gm);
/* On (the default): the token's command buffer is recorded at the first decode and resubmitted unchanged after
 * (rp_gpu_rec_replay; the per-token inputs are in buffers). Off: recorded anew for every token. */
void rp_gpu_model_set_replay(rp_gpu_model *gm, bool on);

#endif /* RP_GPU_GPU_FORWARD_H */
