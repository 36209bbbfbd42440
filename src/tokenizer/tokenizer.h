/* tokenizer.h — SentencePiece-style and byte-level BPE tokenizers built from GGUF metadata. */
#ifndef RP_TOKENIZER_H
#define RP_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "reprise.h"
#include "gguf/gguf.h"

/* rp_token is the public API's (reprise.h) */

typedef enum rp_tok_kind {
    RP_TOK_SPM = 1,   /* tokenizer.ggml.model == "llama": scores, byte fallback, dummy prefix */
    RP_TOK_BPE = 2,   /* tokenizer.ggml.model == "gpt2": byte-level BPE with merges */
    RP_TOK_WPM = 3,   /* tokenizer.ggml.model == "bert": WordPiece, [CLS] text [SEP] (wpm.c) */
} rp_tok_kind;

typedef enum rp_tok_pre {
    RP_PRE_DEFAULT = 0,   /* SPM; for BPE llama.cpp's default (no or "default" tokenizer.ggml.pre) */
    RP_PRE_LLAMA3,        /* "llama-bpe" (Llama 3.x) and others */
    RP_PRE_QWEN2,         /* "qwen2" (Qwen 2/3), "deepseek-r1-qwen", ... */
    RP_PRE_GPT2,          /* "gpt-2", "olmo", ... */
    RP_PRE_SMOLLM,        /* "smollm", "starcoder", "refact", ...: single digits, then GPT-2 */
    RP_PRE_GPT4O,         /* "gpt-4o" (Phi-4-mini), "llama4", ... */
    RP_PRE_TEKKEN,        /* "tekken" (Mistral Nemo, Small 3) */
    RP_PRE_DEEPSEEK_LLM,  /* "deepseek-llm" */
    RP_PRE_DEEPSEEK_CODER,/* "deepseek-coder" */
    RP_PRE_DEEPSEEK3,     /* "deepseek-v3", "hunyuan-dense", "joyai-llm" */
    RP_PRE_FALCON,        /* "falcon" */
    RP_PRE_QWEN35,        /* "qwen35" */
    RP_PRE_PORO,          /* "poro-chat", "bloom", "gpt3-finnish" */
    RP_PRE_VIKING,        /* "viking" */
    RP_PRE_SEED_CODER,    /* "seed-coder" */
    RP_PRE_BAILINGMOE,    /* "bailingmoe", "bailingmoe2", "llada-moe" */
    RP_PRE_EXAONE_MOE,    /* "exaone-moe" */
    RP_PRE_MINICPM5,      /* "minicpm5" */
    RP_PRE_JAIS2,         /* "jais-2" */
    RP_PRE_LAGUNA,        /* "laguna" */
    RP_PRE_COUNT
} rp_tok_pre;

/* GGUF token_type values. */
enum {
    RP_TOKTYPE_NORMAL = 1, RP_TOKTYPE_UNKNOWN = 2, RP_TOKTYPE_CONTROL = 3,
    RP_TOKTYPE_USER_DEFINED = 4, RP_TOKTYPE_UNUSED = 5, RP_TOKTYPE_BYTE = 6,
};

typedef struct rp_tokenizer rp_tokenizer;

/* Builds a tokenizer from `tokenizer.ggml.*` keys of an open GGUF (the reader
 * may be closed afterwards: everything needed is copied). Works on vocab-only
 * files. An unknown model/pre-tokenizer name is RP_ERR_UNSUPPORTED. */
rp_status rp_tokenizer_load(const rp_gguf *g, rp_tokenizer **out);
void rp_tokenizer_free(rp_tokenizer *t);

rp_tok_kind rp_tokenizer_kind(const rp_tokenizer *t);
rp_tok_pre rp_tokenizer_pre(const rp_tokenizer *t);
int32_t rp_tokenizer_n_vocab(const rp_tokenizer *t);

/* Special ids; -1 when the vocabulary has none. */
rp_token rp_tokenizer_bos(const rp_tokenizer *t);
rp_token rp_tokenizer_eos(const rp_tokenizer *t);
rp_token rp_tokenizer_eot(const rp_tokenizer *t);  /* <|eot_id|>, <|im_end|>, ... */
bool rp_tokenizer_add_eos(const rp_tokenizer *t);  /* tokenizer.ggml.add_eos_token and an EOS exists (embeddings) */
bool rp_tokenizer_add_bos(const rp_tokenizer *t);  /* tokenizer.ggml.add_bos_token (or model default) */
/* End-of-generation: EOS, EOT, or any other token the vocab marks as ending a turn. */
bool rp_tokenizer_is_eog(const rp_tokenizer *t, rp_token id);
/* Control / special token (not rendered by default in detokenization). */
bool rp_tokenizer_is_control(const rp_tokenizer *t, rp_token id);

/* Raw vocabulary string of a token (as stored, e.g. "▁the" or "Ġthe"); NULL if out of range. */
const char *rp_tokenizer_token_str(const rp_tokenizer *t, rp_token id);
/* Exact lookup of a vocabulary string; -1 if absent. */
rp_token rp_tokenizer_find(const rp_tokenizer *t, const char *piece);

typedef struct rp_tokenize_opts {
    bool add_bos;        /* prepend BOS if the vocab has one (and add_bos semantics say so); WordPiece: the special
                            tokens, [CLS] before and [SEP] after the text (llama.cpp's add_special) */
    bool parse_special;  /* recognize control / user-defined token texts like "<|im_start|>" in the input */
} rp_tokenize_opts;

/* Encodes `len` bytes of UTF-8 text. Writes up to `cap` ids; *n_out receives the
 * number produced. If cap is too small, returns RP_ERR_FULL with *n_out set to
 * the required count (ids untouched beyond cap). Invalid UTF-8 is encoded
 * byte-wise, never rejected. */
rp_status rp_tokenizer_encode(const rp_tokenizer *t, const char *text, size_t len,
                              rp_tokenize_opts opts, rp_token *ids, size_t cap, size_t *n_out);

/* Bytes a token contributes to the output text: byte tokens give their raw
 * byte, SPM '▁' becomes ' ', BPE byte-level chars map back to bytes. Control
 * tokens give "" unless `render_special`. Returns the byte count written (may
 * be truncated to cap); -1 for an invalid id. */
int rp_tokenizer_token_to_piece(const rp_tokenizer *t, rp_token id, bool render_special,
                                char *buf, size_t cap);

/* Whole-sequence decode into a NUL-terminated buffer. For SPM, the leading
 * space of the first piece after BOS is stripped (as SentencePiece does) when
 * `strip_leading_space`. Returns RP_ERR_FULL with *n_out = required bytes
 * (excluding NUL) when cap is too small. */
rp_status rp_tokenizer_decode(const rp_tokenizer *t, const rp_token *ids, size_t n,
                              bool render_special, bool strip_leading_space,
                              char *buf, size_t cap, size_t *n_out);

/* Streaming detokenizer: feeds ids one at a time and emits only complete UTF-8
 * sequences, holding back a partial character until its remaining bytes come. */
typedef struct rp_detok {
    const rp_tokenizer *tok;
    char pending[8];
    int n_pending;
    bool render_special;
    bool at_start;      /* strip the SPM dummy-prefix space of the first piece */
} rp_detok;

void rp_detok_init(rp_detok *d, const rp_tokenizer *t, bool render_special);
/* Appends the printable bytes produced by `id` to out; returns bytes written.
 * A cap of rp_detok_bound(tok) always suffices (Llama 3 / Qwen3 have 128-byte
 * whitespace tokens); a smaller cap that cannot hold the output gives
 * -(bytes needed) and leaves the detokenizer unchanged. */
int rp_detok_push(rp_detok *d, rp_token id, char *out, size_t cap);
/* Emits held-back bytes at end of stream (invalid partial sequences as U+FFFD). */
int rp_detok_flush(rp_detok *d, char *out, size_t cap);

/* ---- additions (append-only) ---- */

/* Longest piece any single token renders to (render_special = true), bytes.
 * Llama 3 / Qwen3 have 128-byte whitespace tokens, so fixed 64-byte buffers
 * are not enough for them. */
size_t rp_tokenizer_max_piece_len(const rp_tokenizer *t);
/* A cap for rp_detok_push / rp_detok_flush that always suffices for this
 * tokenizer. rp_detok_push with a smaller cap that cannot hold the output
 * returns -(bytes needed) and leaves the detokenizer unchanged (retry). */
size_t rp_detok_bound(const rp_tokenizer *t);

#endif /* RP_TOKENIZER_H */
