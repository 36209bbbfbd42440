/* forward.h — batched forward pass: n tokens from m sequences at arbitrary positions/cells. */
#ifndef RP_FORWARD_H
#define RP_FORWARD_H

#include <stdbool.h>
#include <stdint.h>

#include "reprise.h"
#include "core/threadpool.h"
#include "kv/kv.h"
#include "model/model.h"

/* One forward call's input. Row i is token[i] of sequence seq[i] (an index
 * into the kvs array passed to rp_forward) at RoPE position pos[i], whose K/V
 * are written to cell[i] of that sequence's cache; the row attends to cells
 * [0, cell[i]] of its sequence. Rows with logits[i] get an output row. */
typedef struct rp_batch {
    int32_t n, cap;
    rp_token *token;
    int32_t *seq;
    int32_t *pos;
    int32_t *cell;
    bool *logits;
} rp_batch;

rp_status rp_batch_init(rp_batch *b, int32_t cap);
void rp_batch_free(rp_batch *b);
static inline void rp_batch_clear(rp_batch *b) { b->n = 0; }
/* Appends a row; RP_ERR_FULL when the batch is at capacity. */
rp_status rp_batch_add(rp_batch *b, rp_token tok, int32_t seq, int32_t pos, int32_t cell, bool logits);

typedef struct rp_ctx_params {
    int32_t n_batch;     /* max rows per rp_forward call */
    int32_t n_outputs;   /* max rows with logits per call */
    int32_t n_ctx_max;   /* largest KV cache (cells) this context will attend over */
    int n_threads;
} rp_ctx_params;

rp_ctx_params rp_ctx_default_params(void);

/* A compute context: scratch buffers and a thread pool, all allocated here
 * once. One per thread of control; any number of KV caches (sessions) can be
 * run through it. */
typedef struct rp_ctx rp_ctx;

rp_status rp_ctx_create(const rp_model *m, rp_ctx_params p, rp_ctx **out);
void rp_ctx_free(rp_ctx *c);
const rp_model *rp_ctx_model(const rp_ctx *c);
rp_ctx_params rp_ctx_get_params(const rp_ctx *c);

/* Runs the batch. Validates every row (token id, seq index, cell and position
 * ranges, output count) before touching any cache. After the call, each
 * sequence's kv->n covers the cells written, and logits rows are readable with
 * rp_ctx_logits in batch order of flagged rows. Allocates nothing. */
rp_status rp_forward(rp_ctx *c, const rp_batch *b, rp_kv *const *kvs, int32_t n_kvs);

int32_t rp_ctx_n_outputs(const rp_ctx *c);
rp_pool *rp_ctx_pool(rp_ctx *c);
/* KV ranges per (run, KV head) the last forward's attention used at most
 * (1: no flash-decoding split; see RP_ATTN_SPLIT in forward.c). */
int32_t rp_ctx_last_attn_split(const rp_ctx *c);

/* A hook called at the start of every layer of every forward pass on this
 * context (rp_forward and the stepwise callers), before the layer reads the
 * cache: the reuse engine's load pipeline waits there until that layer's
 * cached KV is in place. NULL removes it. */
typedef void (*rp_layer_hook)(void *user, int32_t layer);
void rp_ctx_set_layer_hook(rp_ctx *c, rp_layer_hook fn, void *user);
void rp_ctx_layer_begin(rp_ctx *c, int32_t layer);   /* calls the hook if set */

/* ---- the pass in steps, for callers that change the row set between layers
 * (CacheBlend-style selective recompute). rp_forward is exactly:
 *   begin; for each layer l: qkv(l), store(l), attn_ffn(l); end.
 * begin validates and embeds the rows; qkv computes the rows' post-norm,
 * post-RoPE q/k/v for layer l (readable with rp_fwd_k / rp_fwd_v, [n x kv_dim]);
 * store writes k/v into the rows' cells; attn_ffn runs attention over each
 * row's cells [0, cell] and the FFN, updating the rows' hidden states;
 * compact keeps rows keep[0..n_keep) (strictly increasing) in that order,
 * moving their hidden states and batch entries to the front; end computes the
 * output rows' logits. The batch passed to each step must be the one begin saw
 * (after any compaction). */
rp_status rp_fwd_begin(rp_ctx *c, const rp_batch *b, rp_kv *const *kvs, int32_t n_kvs);
/* Whether layers [0, n) run on the CPU: the steps below are CPU-only, so a caller stepping through layers a GPU
 * holds (the model's offload, gpu/gpu_offload.h) must refuse (blend, self-speculative drafting). */
bool rp_ctx_layers_on_cpu(const rp_ctx *c, int32_t n);
/* The layers the CPU runs, [0, n) (n_layer without a GPU offload); the rest are the GPU's. */
int32_t rp_ctx_cpu_layers(const rp_ctx *c);
/* Model layers [l0, l1) of the batch on the GPU (l0 >= rp_ctx_cpu_layers): the rows' hidden states go up and
 * (without the head) come back, their K / V are stored in their cells' GPU KV, kv->pos / n follow the rows. With
 * head, l1 = n_layer and the model's output on the GPU, the flagged rows' logits are computed there
 * (rp_ctx_logits; rp_ctx_n_outputs >= 0 then, and rp_fwd_end must not run; -1: it must). The blend driver's GPU
 * part. */
rp_status rp_fwd_gpu_range(rp_ctx *c, const rp_batch *b, rp_kv *const *kvs, int32_t l0, int32_t l1, bool head);
void rp_fwd_qkv(rp_ctx *c, const rp_batch *b, int32_t layer);
const float *rp_fwd_q(const rp_ctx *c);   /* [n x n_head*head_dim], post-RoPE, after qkv */
const float *rp_fwd_k(const rp_ctx *c);
const float *rp_fwd_v(const rp_ctx *c);
void rp_fwd_store(rp_ctx *c, const rp_batch *b, rp_kv *const *kvs, int32_t layer);
void rp_fwd_attn_ffn(rp_ctx *c, const rp_batch *b, rp_kv *const *kvs, int32_t layer);
void rp_fwd_compact(rp_ctx *c, rp_batch *b, const int32_t *keep, int32_t n_keep);
rp_status rp_fwd_end(rp_ctx *c, const rp_batch *b);
/* Logits of the i-th flagged row of the last forward ([n_vocab] floats). */
const float *rp_ctx_logits(const rp_ctx *c, int32_t i);

/* The output-normed final hidden state of the i-th flagged row of the last rp_forward / rp_fwd_end (what its
 * logits were computed from; [n_embd] floats), or NULL. */
const float *rp_ctx_out_hidden(const rp_ctx *c, int32_t i);

/* Embeddings: runs the batch like rp_forward (same validation, KV writes, causal attention over each row's cells
 * [0, cell]) but computes no logits (the rows' logits flags are only counted against n_outputs); afterwards
 * rp_ctx_hidden(c, i) is row i's final hidden state after the output norm ([n_embd] floats, valid until the
 * next forward): what llama.cpp pools into embeddings (its "result_norm"). Allocates nothing. */
rp_status rp_forward_hidden(rp_ctx *c, const rp_batch *b, rp_kv *const *kvs, int32_t n_kvs);
const float *rp_ctx_hidden(const rp_ctx *c, int32_t row);

#endif /* RP_FORWARD_H */
