/* retrieve_embed.h — vectors for the doc-QA / chat workloads' retrieval from an embedding model (rp_embedder). */
#ifndef RP_BENCH_RETRIEVE_EMBED_H
#define RP_BENCH_RETRIEVE_EMBED_H

#include <stdbool.h>

#include "reprise.h"

struct json_t;

/* Adds to emb (a JSON object text -> array of numbers, rp_retrieve's format) the vector of every text in
 * texts[0..n) it lacks: tokenized as embeddings expect (rp_embed_tokenize), cut to the embedder's longest input
 * (retrieval sees a passage's first rp_embedder_n_ctx tokens), embedded several per pass, pooled and normalised
 * as the embedder says. False with a message naming the text and the error. */
bool rp_retrieve_embed_fill(rp_embedder *e, const rp_model *m, struct json_t *emb, const char *const *texts, int n);

#endif
