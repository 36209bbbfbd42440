/* semantic.h — the semantic side of the store's sub-chunk search: a chunk's (or a prompt run's) text from the
 * served model's vocabulary, its extracted terms, and its truncated dense embedding from an embedding model. */
#ifndef RP_REUSE_SEMANTIC_H
#define RP_REUSE_SEMANTIC_H

#include <stdbool.h>
#include <stdint.h>

#include "reprise.h"
#include "store/store.h"

/* The paper's semantic index (sparse embedding from extracted keywords, truncated dense embedding vectors):
 * chunks written to the store get the terms of their detokenized text and, with an embedding model, the first
 * `embed_dim` components of its embedding, re-normalised to unit length (the stored vector); a prompt's
 * not-yet-matched runs get the same, so the store proposes the chunks sharing rare terms or nearest in
 * embedding as sub-chunk candidates. The text is detokenized with the served model's vocabulary and
 * re-tokenized with the embedding model's own. */
typedef struct rp_semantic_params {
    const rp_model *text_model;   /* the served model: its vocabulary detokenizes chunk and prompt tokens */
    const rp_model *embed_model;  /* NULL: terms only (no vectors) */
    int32_t embed_dim;            /* components kept (0, or >= the model's n_embd: all of them) */
    int32_t embed_ctx;            /* longest input embedded, in the embedding model's tokens; longer texts are cut
                                     (0: min(512, its context)) */
    bool terms;                   /* extract terms (default true) */
    int n_threads;                /* the embedders' compute threads (default 1) */
} rp_semantic_params;

rp_semantic_params rp_semantic_default_params(void);

typedef struct rp_semantic rp_semantic;

/* Two embedders over embed_model (one for the store's writer, one for queries), so indexing never waits for a
 * query or the other way round. The models must outlive the handle. */
rp_status rp_semantic_create(const rp_semantic_params *p, rp_semantic **out);
void rp_semantic_free(rp_semantic *s);

int32_t rp_semantic_dim(const rp_semantic *s);        /* stored vector dimension (0: no embedding model) */
uint64_t rp_semantic_vec_src(const rp_semantic *s);  /* the vectors' source tag (model, dimension, pooling) */
bool rp_semantic_has_terms(const rp_semantic *s);

/* The chunk indexer (rp_chunk_indexer; user = the rp_semantic): terms and vector of each chunk. Thread-safe
 * (one indexing call at a time; queries run alongside). */
rp_status rp_semantic_index(void *user, const rp_token *const *toks, const int32_t *n, int32_t n_chunks,
                            rp_store_index *out);

/* What a prompt run toks[0..n) asks the store: its terms (*terms, *n_terms) and, with vectors and an
 * embedding model, one query vector per window of `window` tokens (at most RP_SEM_QUERY_WINDOWS: longer runs get
 * longer windows), *n_vec of them, *dim floats each. Pointers are into the handle's query scratch, valid until
 * its next query. One query at a time. */
#define RP_SEM_QUERY_WINDOWS 16
rp_status rp_semantic_query(rp_semantic *s, const rp_token *toks, int32_t n, int32_t window, bool vectors,
                            const rp_term **terms, int32_t *n_terms, const float **vecs, int32_t *n_vec, int32_t *dim);

#endif /* RP_REUSE_SEMANTIC_H */
