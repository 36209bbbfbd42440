/* quant_mix.h — file types ("ftypes") as llama.cpp's quantize names them, and the weight type each tensor gets in one. */
#ifndef RP_MODEL_QUANT_MIX_H
#define RP_MODEL_QUANT_MIX_H

#include <stdbool.h>
#include <stdint.h>

#include "kernels/types.h"

/* A file type: one weight type for every matrix ("pure"), or one of
 * llama.cpp's mixes (Q4_K_M, Q3_K_S, ...), which give some tensors more bits
 * by llama_model_quantize's rules (src/llama-quant.cpp). */
typedef struct rp_ftype {
    const char *name;       /* "q4_k_m", "q8_0", ... (matched case-insensitively) */
    uint32_t llama_ftype;   /* general.file_type (llama.cpp's llama_ftype) */
    rp_type base;           /* the type of every tensor the mix does not change */
    bool mix;               /* false: every matrix is `base` */
} rp_ftype;

/* The file type named `name`, or NULL. */
const rp_ftype *rp_ftype_find(const char *name);

/* "f32, f16, ..., q4_k_m, ..." (for messages and --help). */
const char *rp_ftype_list(void);

/* The type llama.cpp's quantize gives a matrix in file type f (with no
 * importance matrix, one expert, not Falcon, not a 70B): role is the tensor
 * name without "blk.N." and ".weight" ("attn_v", "ffn_down", "output",
 * "token_embd", ...), layer its block (0 for non-layer tensors), n_gqa
 * n_head / n_head_kv, tied_embd whether the model has no output.weight (then
 * token_embd gets the output's type), ncols the row length (a type whose block
 * does not divide it falls back as llama.cpp does, finally to F16). */
rp_type rp_ftype_tensor_type(const rp_ftype *f, const char *role, int layer, int n_layer, int n_gqa, bool tied_embd,
                             int64_t ncols);

#endif /* RP_MODEL_QUANT_MIX_H */
