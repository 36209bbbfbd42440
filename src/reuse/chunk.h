/* chunk.h — splitting prompts into reusable chunks (caller boundaries + content-defined cuts) and salted chunk hashes. */
#ifndef RP_REUSE_CHUNK_H
#define RP_REUSE_CHUNK_H

#include <stdbool.h>
#include <stdint.h>

#include "reprise.h"
#include "tokenizer/tokenizer.h"

/* Content-defined chunking over token ids: a gear rolling hash cuts where its
 * low bits are zero, so the same token run yields the same chunks wherever it
 * sits in a prompt. Lengths are in tokens. */
typedef struct rp_chunk_params {
    int32_t min_len;   /* no content-defined cut before this many tokens (default 64) */
    int32_t avg_len;   /* expected chunk length (default 256; sets the cut mask) */
    int32_t max_len;   /* forced cut at this length (default 1024) */
} rp_chunk_params;

rp_chunk_params rp_chunk_default_params(void);

typedef struct rp_chunk_span {
    int32_t begin;     /* token offset in the prompt */
    int32_t len;       /* > 0 */
    uint64_t hash;     /* rp_chunk_hash of the span's tokens */
    bool at_boundary;  /* the span starts at a caller-given boundary (or offset 0) */
} rp_chunk_span;

/* 64-bit xxHash (XXH3) of token ids, salted with the model fingerprint so
 * hashes never match across models / KV types / RoPE settings. */
uint64_t rp_chunk_hash(const rp_token *toks, int32_t n, uint64_t salt);

/* Chained hash of a prefix path: parent chain (0 for the root) and a chunk's hash. */
uint64_t rp_chunk_chain(uint64_t parent_chain, uint64_t chunk_hash);

/* Splits n tokens. `bounds` lists offsets (strictly increasing, in (0, n))
 * where caller segments start (chat messages, documents, separators); a cut is
 * always made there, and content-defined cuts are made inside each segment.
 * Writes up to cap spans; RP_ERR_FULL with *n_out = needed when cap is too
 * small; RP_ERR_INVALID_ARG for bad params or bounds. Deterministic. */
rp_status rp_chunk_split(const rp_token *toks, int32_t n, const int32_t *bounds, int32_t n_bounds,
                         rp_chunk_params p, uint64_t salt, rp_chunk_span *out, int32_t cap, int32_t *n_out);

/* Boundaries where `sep` (a token sequence, e.g. the tokens of "\n\n") ends:
 * offsets just after each occurrence, for use as rp_chunk_split bounds.
 * Returns the count written (<= cap). */
int32_t rp_chunk_find_separators(const rp_token *toks, int32_t n, const rp_token *sep, int32_t n_sep,
                                 int32_t *bounds, int32_t cap);

#endif /* RP_REUSE_CHUNK_H */
