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
/* Logits of the i-th flagged row of the last forward ([n_vocab] floats). */
const float *rp_ctx_logits(const rp_ctx *c, int32_t i);

#endif /* RP_FORWARD_H */
