/* vk_weights.h — a model's weights on the GPU, shared by the whole-model decode (vk_forward.c) and the layer
 * offload (vk_offload.c): one buffer per matrix in its GGUF bytes, a layer's matrices and norms, their upload
 * and release. */
#ifndef RP_GPU_VK_WEIGHTS_H
#define RP_GPU_VK_WEIGHTS_H

#include <stdint.h>

#include "core/error.h"
#include "gpu/gpu.h"
#include "kernels/matmul.h"

typedef struct {
    rp_gpu_buf *b;
    rp_type type;
    uint32_t rows, cols, row_bytes;
} gweight;

typedef struct {
    rp_gpu_buf *attn_norm, *ffn_norm, *q_norm, *k_norm;
    gweight wq, wk, wv, wo, gate, up, down;
} glayer;

/* w's rows as they are in the file, into a device buffer (the caller checked the type has kernels). */
static inline rp_status rp_vkw_upload(rp_gpu *g, const rp_weight *w, gweight *out) {
    *out = (gweight){NULL, w->type, (uint32_t)w->rows, (uint32_t)w->cols, (uint32_t)w->row_bytes};
    const size_t bytes = (size_t)w->rows * w->row_bytes;
    RP_TRY(rp_gpu_buf_create(g, bytes, RP_GPU_MEM_DEVICE, &out->b));
    return rp_gpu_buf_write(out->b, 0, w->data, bytes);
}

/* n floats into a device buffer (norm gains). */
static inline rp_status rp_vkw_floats(rp_gpu *g, const float *src, size_t n, rp_gpu_buf **out) {
    RP_TRY(rp_gpu_buf_create(g, n * sizeof(float), RP_GPU_MEM_DEVICE, out));
    return rp_gpu_buf_write(*out, 0, src, n * sizeof(float));
}

/* A layer's buffers (NULL ones are skipped). */
static inline void rp_vkw_layer_free(glayer *G) {
    rp_gpu_buf_free(G->attn_norm); rp_gpu_buf_free(G->ffn_norm);
    rp_gpu_buf_free(G->q_norm); rp_gpu_buf_free(G->k_norm);
    rp_gpu_buf *w[7] = {G->wq.b, G->wk.b, G->wv.b, G->wo.b, G->gate.b, G->up.b, G->down.b};
    for (int i = 0; i < 7; i++) rp_gpu_buf_free(w[i]);
}

#endif /* RP_GPU_VK_WEIGHTS_H */
