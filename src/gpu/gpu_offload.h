/* gpu_offload.h — the user-facing GPU offload: the last layers of a model (and its output head when every layer is
 * offloaded) on a GPU, for any forward call (prefill, decode, multi-sequence batches), with each sequence's KV
 * cells of those layers in device memory.
 *
 * The model owns one rp_gpu_offload (made at load from rp_model_params.n_gpu_layers / gpu_device; NULL: CPU
 * only). Layers [0, first) run on the CPU, [first, n_layer) on the GPU: the CPU embeds the tokens and runs its
 * layers, the hidden state goes to the GPU once per call (a memcpy into the mapped buffer on a shared-memory
 * device), and the GPU runs the rest in one command buffer (or a few, for batches of many sequences). With every
 * layer offloaded the output norm and head run there too and only the logits come back; otherwise the hidden
 * state comes back and the CPU computes the logits.
 *
 * Each rp_kv of such a model holds an rp_gpu_kv: F16 or Q8_0 K and V cells of the GPU layers, row-major per layer
 * ([layer][cell][row]: kv_dim halves or its Q8_0 blocks, the chunk format's rows), read and written by kv.c's accessors (the reuse
 * engine's chunk export / import, truncation, fork, context shift). */
#ifndef RP_GPU_GPU_OFFLOAD_H
#define RP_GPU_GPU_OFFLOAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "reprise.h"
#include "kernels/types.h"

struct rp_model;
struct rp_batch;
struct rp_kv;

typedef struct rp_gpu_offload rp_gpu_offload;
typedef struct rp_gpu_kv rp_gpu_kv;

/* n_layers: -1 all layers on the default device when one is present (a CPU-type Vulkan device such as lavapipe
 * is never picked by default: only when asked for, by `device`, $RP_GPU_DEVICE or a layer count N > 0); 0 none;
 * N the last N (capped at n_layer). device: NULL / "" for $RP_GPU_DEVICE, else the best non-CPU device; an index or a name piece.
 * *out stays NULL (RP_OK) when nothing is offloaded: n_layers 0, no device found by default, an architecture or
 * weight types the GPU kernels lack. A device asked for (n_layers > 0 or a device named) that cannot be used is
 * an error. notice (cap bytes) gets the start-up line either way: the device and the layers, or why CPU only. */
rp_status rp_gpu_offload_create(const struct rp_model *m, int32_t n_layers, const char *device, rp_gpu_offload **out,
                                char *notice, size_t cap);
void rp_gpu_offload_free(rp_gpu_offload *o);
/* The first GPU layer (n_layer - layers on the GPU). */
int32_t rp_gpu_offload_first(const rp_gpu_offload *o);
/* Whether the output head runs on the GPU (every layer offloaded and its type has a kernel). */
bool rp_gpu_offload_has_output(const rp_gpu_offload *o);

/* A context's GPU part (one per rp_ctx: its command recorder and activation buffers, for batches of up to n_batch
 * rows and n_outputs output rows), made when the context is. */
typedef struct rp_gpu_fwd rp_gpu_fwd;
rp_status rp_gpu_fwd_create(rp_gpu_offload *o, int32_t n_batch, int32_t n_outputs, rp_gpu_fwd **out);
void rp_gpu_fwd_free(rp_gpu_fwd *f);

/* One forward call's GPU part. x: [b->n x n_embd] the hidden states after the CPU layers; rope_cs: [b->n x n_rot]
 * each row's cos | sin. Every sequence's rp_kv must have a GPU part (kv->gpu). With head and the output on the
 * GPU, the flagged rows' output-normed hidden states go to xo and their logits to logits and *n_out is their
 * count; otherwise x gets the final hidden states back and *n_out is -1 (the CPU computes what follows). */
rp_status rp_gpu_fwd_run(rp_gpu_fwd *f, const struct rp_batch *b, struct rp_kv *const *kvs, float *x,
                         const float *rope_cs, bool head, float *xo, float *logits, int32_t *n_out);
/* ... of GPU layers [gl0, gl1) only (GPU layer indices: model layer - first): x in is the hidden state before
 * layer gl0, out (without the head) after gl1 - 1; the head runs only when gl1 is the last GPU layer's end. Blend's
 * selective recompute runs its check layer and the rest in two such calls. */
rp_status rp_gpu_fwd_run_range(rp_gpu_fwd *f, const struct rp_batch *b, struct rp_kv *const *kvs, float *x,
                               const float *rope_cs, int32_t gl0, int32_t gl1, bool head, float *xo, float *logits,
                               int32_t *n_out);

/* A sequence's GPU KV: n_ctx cells of every GPU layer, F16 or Q8_0 (n_head_kv * head_dim a multiple of 32). Errors are sticky: a failed transfer in a void accessor
 * below is reported by the next forward that uses the cache. */
rp_status rp_gpu_kv_create(rp_gpu_offload *o, int32_t n_ctx, rp_type type, rp_gpu_kv **out);
void rp_gpu_kv_free(rp_gpu_kv *k);
/* layer: the GPU layer index (model layer - first). part: 0 K, 1 V. Rows are the cache type's rows of kv_dim. */
void rp_gpu_kv_read(rp_gpu_kv *k, int part, int32_t layer, int32_t cell0, int32_t n, void *dst);
void rp_gpu_kv_write(rp_gpu_kv *k, int part, int32_t layer, int32_t cell0, int32_t n, const void *src);
/* Cells [src, src + n) to [dst, dst + n) of one layer (the ranges may overlap). */
void rp_gpu_kv_move(rp_gpu_kv *k, int part, int32_t layer, int32_t dst, int32_t src, int32_t n);
/* dst's cells [0, n) of every layer = src's (a device-side copy). */
rp_status rp_gpu_kv_copy(rp_gpu_kv *dst, const rp_gpu_kv *src, int32_t n);

#endif /* RP_GPU_GPU_OFFLOAD_H */
