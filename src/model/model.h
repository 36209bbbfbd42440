/* model.h — immutable model: hyper-parameters and weights (llama, qwen3) mapped from a GGUF file. */
#ifndef RP_MODEL_H
#define RP_MODEL_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "reprise.h"
#include "gguf/gguf.h"
#include "kernels/matmul.h"
#include "kernels/types.h"
#include "tokenizer/chat.h"
#include "tokenizer/tokenizer.h"

typedef enum rp_arch {
    RP_ARCH_LLAMA = 1,   /* Llama 2, 3, 3.1, 3.2 (and llama2.c / TinyStories conversions) */
    RP_ARCH_QWEN3 = 2,   /* Qwen3 dense: per-head q_norm/k_norm, NEOX RoPE */
    RP_ARCH_QWEN2 = 3,   /* Qwen2 / Qwen2.5: Q/K/V biases, NEOX RoPE (arch_qwen2_phi3.c) */
    RP_ARCH_PHI3 = 4,    /* Phi-3 / 3.5 / Phi-4-mini: fused attn_qkv and gate|up, NEOX RoPE, LongRoPE (arch_qwen2_phi3.c) */
    RP_ARCH_GEMMA2 = 5,  /* Gemma 2: GeGLU, post-norms, soft-capping, local/global layers (arch_gemma.c) */
    RP_ARCH_GEMMA3 = 6,  /* Gemma 3 text: Gemma 2 + q/k norms, local RoPE base, 5 local : 1 global */
    RP_ARCH_BERT = 7,    /* BERT encoders (bge, MiniLM): learned positions, post-LayerNorm, GELU (arch_bert.c) */
    RP_ARCH_NOMIC_BERT = 8,   /* nomic-bert (nomic-embed-text): rotary positions, fused QKV, SwiGLU (arch_bert.c) */
} rp_arch;

/* Encoders (bidirectional attention, no output head): they embed, they do not generate (encoder.h). */
static inline bool rp_arch_is_encoder(rp_arch a) { return a == RP_ARCH_BERT || a == RP_ARCH_NOMIC_BERT; }

const char *rp_arch_name(rp_arch a);

typedef enum rp_rope_kind {
    RP_ROPE_NORM = 0,   /* rotate adjacent pairs (x[2i], x[2i+1]) — ggml mode 0, llama */
    RP_ROPE_NEOX = 2,   /* rotate (x[i], x[i + n_rot/2]) — ggml mode 2, qwen */
} rp_rope_kind;

typedef struct rp_hparams {
    rp_arch arch;
    int32_t n_vocab;
    int32_t n_ctx_train;
    int32_t n_embd;
    int32_t n_ff;
    int32_t n_layer;
    int32_t n_head;
    int32_t n_head_kv;
    int32_t head_dim;     /* key/value length per head (n_embd / n_head unless the file says) */
    int32_t n_rot;        /* rotated dims per head (<= head_dim) */
    float rms_eps;
    float rope_base;
    float rope_freq_scale;   /* linear scaling: 1 / factor */
    rp_rope_kind rope_kind;
    /* llama3-type scaling (Llama 3.1/3.2), applied as per-pair frequency factors */
    bool rope_llama3;
    float rope_factor, rope_low_freq, rope_high_freq;
    int32_t rope_orig_ctx;
    /* phi3 LongRoPE: as llama.cpp, a cache of at most rope.scaling.original_context_length (rope_orig_ctx) cells
     * runs with the short factors (rope_factors_short.weight), a larger one with the long factors
     * (rope_factors_long.weight; without them the context is limited to the original length); cos/sin carry
     * attn_factor. */
    bool rope_longrope;
    float rope_attn_factor;   /* scales cos and sin of q and k (1 unless the file says) */
    /* ---- gemma2 / gemma3 (arch_gemma.c); zero for the other architectures ---- */
    float emb_scale;          /* token embeddings times this (sqrt(n_embd)); 0: 1 */
    float attn_scale;         /* query scaling; 0: 1 / sqrt(head_dim) */
    float attn_softcap;       /* attention logit soft-capping; 0: off */
    float final_softcap;      /* output logit soft-capping; 0: off */
    int32_t n_swa;            /* sliding window of local layers (positions seen, the row's own included); 0: none */
    int32_t swa_pattern;      /* layer l is local when l % swa_pattern < swa_pattern - 1 (llama.cpp's rule) */
    float rope_base_local;    /* RoPE base of local layers (gemma3: 10000, scale 1); 0: as global */
    bool ffn_gelu;            /* GeGLU (gelu-tanh gate) instead of SwiGLU */
    bool post_norms;          /* attn_post_norm / ffn_post_norm on each block's output */
    bool has_pooling;         /* the file has <arch>.pooling_type (false in a zeroed struct: absent) */
    int32_t pooling_type;     /* its value (llama.cpp's: 0 none, 1 mean, 2 cls, 3 last, 4 rank) */
} rp_hparams;


typedef struct rp_layer {
    const float *attn_norm;   /* [n_embd] */
    rp_weight wq;             /* [n_head*head_dim x n_embd]; phi3: views of rows of the fused attn_qkv (and
                                 w_gate / w_up of the fused ffn_up), packed separately at load */
    rp_weight wk;             /* [n_head_kv*head_dim x n_embd] */
    rp_weight wv;             /* [n_head_kv*head_dim x n_embd] */
    rp_weight wo;             /* [n_embd x n_head*head_dim] */
    const float *q_norm;      /* [head_dim] qwen3 only, else NULL */
    const float *k_norm;      /* [head_dim] qwen3 only, else NULL */
    const float *bq, *bk, *bv;   /* [n_head*head_dim], [kv_dim], [kv_dim] qwen2 biases (before RoPE), else NULL */
    const float *ffn_norm;    /* [n_embd] */
    rp_weight w_gate;         /* [n_ff x n_embd] */
    rp_weight w_up;           /* [n_ff x n_embd] */
    rp_weight w_down;         /* [n_embd x n_ff] */
    const float *attn_post_norm;   /* [n_embd] gemma only, else NULL */
    const float *ffn_post_norm;    /* [n_embd] gemma only, else NULL */
    int32_t window;           /* sliding window of this layer (positions); 0: global attention */
    bool rope_local;          /* RoPE from rope_inv_freq_local */
} rp_layer;

typedef struct rp_model {
    rp_gguf *gguf;            /* owns the mapping the weights point into */
    rp_hparams hp;
    char name[128];
    rp_weight tok_embd;       /* [n_vocab x n_embd] */
    const float *out_norm;    /* [n_embd] */
    rp_weight output;         /* [n_vocab x n_embd]; == tok_embd when tied */
    bool tied_output;
    rp_layer *layers;         /* [n_layer] */
    float *rope_inv_freq;     /* [n_rot/2] theta_i = pos * inv_freq[i] (scaling folded in) */
    float *rope_inv_freq_local;   /* [n_rot/2] of layers with rope_local (gemma3); NULL: none */
    float *rope_inv_freq_long;    /* [n_rot/2] phi3 LongRoPE's long factors: caches past rope_orig_ctx cells; NULL: none */
    float *norm_store;        /* F32 copies of non-F32 norm vectors (owned) */
    rp_tokenizer *tok;        /* NULL only when the file has no tokenizer */
    rp_chat_format chat;      /* tool-call syntax of the chat template's replies */
    struct rp_chat_tmpl *tmpl;   /* the chat template (NULL: none, or tmpl_error) */
    struct rp_bert_weights *bert;   /* encoders' own tensors (arch_bert.c); NULL for the decoders */
    char *tmpl_error;         /* why the model's own template cannot be used (NULL: fine or absent) */
    char tmpl_origin[16];     /* "gguf", a built-in's name, "file", "none" */
    uint64_t fingerprint;     /* digest of architecture, shapes and weights — salts cache keys */
    uint64_t weight_bytes;    /* bytes of all weight data (for bandwidth ceilings) */
    int cpu_level;            /* the rp_cpu_level the weights are packed for */
    uint64_t packed_bytes;    /* bytes of packed weight copies held (the mapping's pages are released) */
    struct rp_gpu_offload *gpu;   /* the last layers on a GPU (gpu/gpu_offload.h), or NULL: CPU only */
    int32_t gpu_first;        /* the first GPU layer (n_layer when CPU only) */
    char gpu_notice[384];     /* the start-up line: device and layers, or why CPU only */
} rp_model;

/* rp_model_params, rp_model_default_params, rp_model_load and rp_model_free
 * are the public API's (reprise.h): the model struct above is what its
 * opaque rp_model handle points to. */

/* The chat template (model_chat.c): the file's own, set at load; rendering with the vocabulary's BOS / EOS
 * texts (a leading BOS the tokenizer adds anyway is dropped). */
rp_status rp_model_chat_init(rp_model *m);
void rp_model_chat_free(rp_model *m);
rp_status rp_model_render_chat(const rp_model *m, const rp_chat_msg *msgs, size_t n, const rp_chat_opts *o, char **out);

/* RoPE angles for `pos`: writes cos/sin for each of n_rot/2 pairs (the model's table: short factors). */
void rp_model_rope_cs(const rp_model *m, int32_t pos, float *cos_out, float *sin_out);
/* ... with the table inv_freq ([n_rot/2]: rp_model_inv_freq's), times the attention factor. */
void rp_model_rope_cs_table(const rp_model *m, const float *inv_freq, int32_t pos, float *cos_out, float *sin_out);

/* The RoPE frequencies layer l uses (the local table of gemma3's sliding layers, else the global one). */
static inline const float *rp_model_layer_inv_freq(const rp_model *m, int32_t l) {
    return m->layers && m->layers[l].rope_local && m->rope_inv_freq_local ? m->rope_inv_freq_local : m->rope_inv_freq;
}
/* Whether a cache of n_ctx cells runs with LongRoPE's long factors (llama.cpp's choice by the sequence's context
 * size: past the original context length). Its K rows are then rotated by another table: the cache, the reuse
 * engine and the chunk hashes carry the choice. */
static inline bool rp_model_rope_long(const rp_model *m, int32_t n_ctx) {
    return m->rope_inv_freq_long && n_ctx > m->hp.rope_orig_ctx;
}
/* Layer l's RoPE table in a cache that uses the long factors (rope_long) or not. */
static inline const float *rp_model_inv_freq(const rp_model *m, int32_t l, bool rope_long) {
    return rope_long && m->rope_inv_freq_long ? m->rope_inv_freq_long : rp_model_layer_inv_freq(m, l);
}
/* The query scaling of attention scores. */
static inline float rp_model_attn_scale(const rp_model *m) {
    return m->hp.attn_scale > 0 ? m->hp.attn_scale : 1.0f / sqrtf((float)m->hp.head_dim);
}

/* A 1-D weight vector of n floats (non-F32 storage converted into `store`, room for n floats). */
rp_status rp_model_bind_vector(const rp_gguf *g, const char *name, int64_t n, bool required, float *store,
                               const float **out);

/* ---- gemma2 / gemma3 (arch_gemma.c) ---- */
/* Architecture keys after the common ones (load_hparams): window, pattern, soft-caps, scales. */
rp_status rp_gemma_hparams(const rp_gguf *g, rp_model *m, const char *an);
/* Layer l's extra tensors (post-norms; gemma3 q/k norms) and its window / RoPE table; `store` has room
 * for 2 * n_embd + 2 * head_dim floats; *used gets how many it took. */
rp_status rp_gemma_bind_layer(const rp_gguf *g, rp_model *m, int32_t l, float *store, size_t *used);
/* The local layers' RoPE table (gemma3), after build_rope. */
rp_status rp_gemma_build_rope(rp_model *m);

#endif /* RP_MODEL_H */
