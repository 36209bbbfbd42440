/* tok_internal.h — private tokenizer state shared by tokenizer.c, spm.c, bpe.c, wpm.c and pretok.c. */
#ifndef RP_TOK_INTERNAL_H
#define RP_TOK_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tokenizer/tokenizer.h"

/* ---- hashing ---- */

/* 64-bit hash of a byte string (fast multiply-mix, 8 bytes per step). Not
 * cryptographic: the vocab is trusted model data, not attacker-chosen keys. */
uint64_t rp_tok_hash(const void *p, size_t n);

/* ---- string -> token id map ----
 * Open addressing over the tokenizer's own string arena: a slot stores the
 * token id and a 32-bit hash tag; the key bytes live in the vocab arena, so
 * the map owns no strings. Load factor is kept <= 1/2. */
typedef struct rp_tok_slot {
    uint32_t tag;   /* upper hash bits, to skip most memcmp on collisions */
    int32_t id;     /* -1 = empty */
} rp_tok_slot;

typedef struct rp_tok_strmap {
    rp_tok_slot *slots;
    uint64_t mask;  /* capacity - 1 (capacity is a power of two) */
} rp_tok_strmap;

/* ---- (left id, right id) -> merge map for byte-level BPE ---- */
typedef struct rp_tok_pair_slot {
    uint64_t key;     /* (uint64)left << 32 | right; UINT64_MAX = empty */
    int32_t rank;     /* merge priority: lower merges first */
    int32_t merged;   /* id of the concatenated token */
} rp_tok_pair_slot;

typedef struct rp_tok_pairmap {
    rp_tok_pair_slot *slots;
    uint64_t mask;
    uint64_t count;
} rp_tok_pairmap;

/* Opaque compiled pre-tokenizer (pretok.c). */
typedef struct rp_pretok rp_pretok;

/* A special (control / user-defined / unknown) token used when splitting the
 * input before normal tokenization. */
typedef struct rp_tok_special {
    int32_t id;
    uint32_t len;
    bool always;   /* USER_DEFINED: matched even without parse_special (as HF / llama.cpp do) */
} rp_tok_special;

struct rp_tokenizer {
    rp_tok_kind kind;
    rp_tok_pre pre;
    int32_t n_vocab;

    /* Vocabulary: NUL-terminated copies of every token string in one arena. */
    char *arena;
    uint64_t *str_off;     /* [n_vocab] offset of token i in arena */
    uint32_t *str_len;     /* [n_vocab] length in bytes (without NUL) */
    float *scores;         /* [n_vocab] SPM merge scores (0 when absent) */
    uint8_t *types;        /* [n_vocab] RP_TOKTYPE_* (NORMAL when absent) */
    uint8_t *flags;        /* [n_vocab] RP_TOKF_* */
    rp_tok_strmap map;

    /* Detokenized form of every token (render_special = true), precomputed. */
    char *piece_arena;
    uint64_t *piece_off;   /* [n_vocab] */
    uint32_t *piece_len;   /* [n_vocab] */
    uint32_t max_piece;    /* longest piece, bytes */

    /* Special ids; -1 when absent. */
    int32_t bos, eos, eot, eom, unk, pad;
    bool add_bos, add_eos, add_space_prefix;
    bool ignore_merges;    /* llama-bpe: a pre-token that is itself a token is emitted as is */

    /* Special-token matching, bucketed by first byte, each bucket longest first. */
    rp_tok_special *specials;      /* all, grouped by first byte */
    uint32_t special_start[257];   /* bucket b = specials[start[b] .. start[b+1]) */

    /* SPM: token of each <0xXX> byte (-1 if missing). BPE: token of each
     * GPT-2 byte-level character. */
    int32_t byte_tok[256];

    /* BPE */
    rp_tok_pairmap merges;
    rp_pretok *pretok;
    bool nfc;                      /* qwen2: NFC-normalize input first */

    /* WordPiece (wpm.c) */
    int32_t sep;                   /* [SEP] (tokenizer.ggml.seperator_token_id, default 102); -1: none */
    bool wpm_lowercase;            /* tokenizer.ggml.normalizer.lowercase (default true) */
    bool wpm_strip_accents;        /* tokenizer.ggml.normalizer.strip_accents (default: lowercase) */
    uint32_t max_token_len;        /* longest token string, bytes: the greedy match's window */
};

/* flags */
enum {
    RP_TOKF_EOG = 1,      /* ends generation */
    RP_TOKF_HIDDEN = 2,   /* control / unknown: rendered only with render_special */
};

/* Growable id sink. Ids beyond `cap` are counted but not stored, so a caller's
 * fixed buffer can report the size it would need (RP_ERR_FULL contract). */
typedef struct rp_tok_out {
    rp_token *ids;
    size_t cap;
    size_t n;
} rp_tok_out;

static inline void rp_tok_out_push(rp_tok_out *o, rp_token id) {
    if (o->n < o->cap) o->ids[o->n] = id;
    o->n++;
}

/* Vocab lookup of an exact byte string; -1 if absent. */
int32_t rp_tok_lookup(const rp_tokenizer *t, const char *s, size_t n);

/* Builds t->map from t->arena/str_off/str_len (first occurrence of a duplicate wins). */
rp_status rp_tok_strmap_build(rp_tokenizer *t);

/* Length of the UTF-8 sequence introduced by lead byte c (1 for continuation /
 * invalid bytes, so scanning always advances). */
static inline size_t rp_utf8_len(unsigned char c) {
    static const uint8_t k[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return k[c >> 4];
}

/* Classifies the UTF-8 sequence at s[0..n), n >= 1 (tokenizer.c):
 *   1: a complete valid sequence of *len bytes;
 *   0: a valid but incomplete prefix (all n bytes; *len = n), more may follow;
 *  -1: invalid; *len (>= 1) is the maximal ill-formed subpart to replace by
 *      one U+FFFD (Unicode "substitution of maximal subparts").
 * Overlongs, surrogates and code points above U+10FFFF are invalid. */
int rp_utf8_check(const unsigned char *s, size_t n, size_t *len);

/* ---- spm.c ---- */
/* Tokenizes one raw-text fragment SentencePiece-style: with dummy_prefix a
 * space is prepended; spaces become U+2581. Bigram merges by score;
 * characters with no token fall back to <0xXX> byte tokens. Empty text gives
 * no tokens (even with dummy_prefix, as llama.cpp / SentencePiece). */
rp_status rp_spm_encode(const rp_tokenizer *t, const char *text, size_t len, bool dummy_prefix,
                        rp_tok_out *out);

/* ---- bpe.c ---- */
/* GPT-2 bytes_to_unicode: the code point standing for byte b. */
uint32_t rp_bpe_byte_to_cp(uint8_t b);
/* Inverse; -1 if cp is not one of the 256 byte characters. */
int rp_bpe_cp_to_byte(uint32_t cp);
/* Loads tokenizer.ggml.merges into t->merges (needs t->map and t->byte_tok). */
rp_status rp_bpe_load_merges(rp_tokenizer *t, const rp_gguf *g);
/* Encodes one raw-text fragment (no special tokens inside): normalization,
 * regex pre-tokenization, byte-level mapping and rank-ordered merging. */
rp_status rp_bpe_encode(const rp_tokenizer *t, const char *text, size_t len, rp_tok_out *out);

/* ---- wpm.c ---- */
/* Encodes one raw-text fragment (no special tokens inside) WordPiece-style: BERT basic pre-tokenization, then
 * greedy longest-match-first pieces of each "▁"-prefixed word, [UNK] for a word with no split. */
rp_status rp_wpm_encode(const rp_tokenizer *t, const char *text, size_t len, rp_tok_out *out);

/* ---- pretok.c ---- */
/* Compiles the pre-tokenizer regex for `pre`. */
rp_status rp_pretok_create(rp_tok_pre pre, rp_pretok **out);
void rp_pretok_free(rp_pretok *p);
/* Calls fn for each pre-token of text[0..len), in order, covering every byte
 * exactly once (bytes no alternative matches, i.e. invalid UTF-8, come out as
 * their own pieces). fn returning non-OK stops the split with that status. */
typedef rp_status (*rp_pretok_fn)(void *user, const char *piece, size_t len);
rp_status rp_pretok_split(const rp_pretok *p, const char *text, size_t len,
                          rp_pretok_fn fn, void *user);
/* NFC normalization. Valid UTF-8 runs are composed; invalid bytes are kept
 * as they are. *out is malloc'd (caller frees), *out_len its length. */
rp_status rp_nfc(const char *text, size_t len, char **out, size_t *out_len);

#endif /* RP_TOK_INTERNAL_H */
