/* encoder.h — the BERT-family encoders (bert, nomic-bert): their tensors (arch_bert.c) and the bidirectional
 * forward pass (encoder.c) the embedder runs. They have no output head and no causal mask: they embed, they do
 * not generate (rp_ctx_create refuses them). */
#ifndef RP_MODEL_ENCODER_H
#define RP_MODEL_ENCODER_H

#include <stdint.h>

#include "reprise.h"
#include "gguf/gguf.h"
#include "model/model.h"

/* Per layer, beyond what rp_layer holds (wq / wk / wv — views of attn_qkv when fused —, wo, w_up, w_down,
 * w_gate for nomic-bert, and the q / k / v biases bq / bk / bv, NULL when the file has none). */
typedef struct rp_bert_layer {
    const float *bo;                              /* [n_embd] attn_output.bias, or NULL */
    const float *attn_out_norm, *attn_out_norm_b; /* LayerNorm of attention output + input */
    const float *b_up, *b_down;                   /* [n_ff], [n_embd] FFN biases (bert), or NULL */
    const float *out_norm, *out_norm_b;           /* LayerNorm of FFN output + its input */
} rp_bert_layer;

typedef struct rp_bert_weights rp_bert_weights;
struct rp_bert_weights {
    rp_weight pos_embd;        /* bert: [n_embd x n_ctx_train] learned positions; nomic-bert: none (data NULL) */
    const float *type_embd0;   /* row 0 of token_types.weight (every token is "sentence A"), or NULL */
    const float *embd_norm, *embd_norm_b;   /* token_embd_norm: LayerNorm of the summed input embeddings */
    rp_bert_layer *layers;     /* [n_layer] */
    float *store;              /* F32 copies of non-F32 vectors (owned) */
    int32_t n_token_types;     /* tokenizer.ggml.token_type_count */
};

/* Hyper-parameters after the common ones (`an` the key prefix): attention.layer_norm_epsilon (into
 * hp->rms_eps, the norm epsilon of every architecture), attention.causal (must be false). */
rp_status rp_bert_hparams(const rp_gguf *g, rp_model *m, const char *an);
/* Binds every tensor (token embedding included) in place of model.c's bind_weights. */
rp_status rp_bert_bind(const rp_gguf *g, rp_model *m);
void rp_bert_free(rp_model *m);

/* ---- the forward pass (encoder.c): scratch for up to `cap` rows, allocated once ---- */
typedef struct rp_bert_ctx rp_bert_ctx;

rp_status rp_bert_ctx_create(const rp_model *m, int32_t cap, int n_threads, rp_bert_ctx **out);
void rp_bert_ctx_free(rp_bert_ctx *c);
int32_t rp_bert_ctx_cap(const rp_bert_ctx *c);

/* Encodes n_seq sequences packed in tok: sequence s is tok[start[s] .. start[s + 1]) (start[0] = 0, each at least
 * one token, start[n_seq] <= cap), at positions 0, 1, ...; every token attends to all tokens of its own sequence
 * and no other. Afterwards rp_bert_hidden(c, r) is row r's final hidden state ([n_embd] floats, llama.cpp's
 * "result_embd"), valid until the next call. Allocates nothing. */
rp_status rp_bert_encode(rp_bert_ctx *c, const rp_token *tok, const int32_t *start, int32_t n_seq);
const float *rp_bert_hidden(const rp_bert_ctx *c, int32_t row);

#endif /* RP_MODEL_ENCODER_H */
