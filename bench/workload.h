/* workload.h — reuse benchmark workloads: synthetic documents, repeats, and HotpotQA / LoCoMo / SkillsBench prompts. */
#ifndef RP_CLI_WORKLOAD_H
#define RP_CLI_WORKLOAD_H

#include <stdbool.h>
#include <stdint.h>

#include "reprise.h"

/* A prompt as token ids with caller chunk boundaries (segment starts). */
typedef struct rp_wprompt {
    rp_token *toks;
    int32_t n;
    int32_t *bounds;
    int32_t n_bounds;
} rp_wprompt;

/* Fills p (cleared first) with n tokens cut into segments at bounds (segment starts; those not past the last
 * one and inside (0, n) are skipped), the way the reuse engine chunks them. */
rp_status rp_wprompt_fill(rp_prompt *p, const rp_token *toks, int32_t n, const int32_t *bounds, int32_t n_bounds);

/* One query: warm-up prompts that compute and cache its reusable content
 * (untimed), then the timed prompt. */
typedef struct rp_query {
    rp_wprompt *warm;
    int n_warm;
    rp_wprompt prompt;
    char *answer;          /* gold answer text when the dataset has one (NULL otherwise) */
    int *retrieved;        /* docqa / chat: the chunks in the prompt, in retrieval order, as indices into the
                            * example's chunk list (docqa) or the whole history's (chat); NULL otherwise */
    int n_retrieved;
} rp_query;

typedef struct rp_workload_params {
    int n_queries;
    int n_docs;            /* synthetic: documents per prompt; docqa / chat: retrieved chunks (top-k) */
    int doc_len;           /* synthetic: tokens per document (320); docqa / chat: characters per chunk (1024);
                            * 0 = the workload's default */
    int tail_len;          /* synthetic: new tokens after the documents */
    int between_len;       /* synthetic: new tokens before each document in the timed prompt (0: none);
                              new text interleaved with reused text, where merging calls pays */
    int max_tokens;        /* prompts are capped at this many tokens */
    uint64_t seed;
    const char *source;    /* docqa: "hotpotqa" (NULL) or "musique" */
    bool plain;            /* docqa / chat: plain-text prompts even when the model has an instruct template */
    const char *embeddings;   /* docqa / chat: JSON object text -> vector; retrieval by cosine instead of keywords */
    const char *retrieve_model;   /* docqa / chat: an embedding model GGUF (bert, nomic-bert, or a decoder, pooled as
                                   * its file says); retrieval by cosine of its vectors, each text embedded once */
    const char *export_texts; /* docqa / chat: writes the questions and chunks retrieval sees (a JSON array of
                               * strings: the texts an --embeddings file needs vectors for) */
} rp_workload_params;

rp_workload_params rp_workload_default_params(void);

typedef struct rp_workload rp_workload;

/* Builds a workload by name: synthetic | repeat | docqa | chat | skills. Data
 * files come from `data` (a file used as is, or a directory holding the
 * datasets' relative paths, like ../shared/data) or ../shared/data
 * (RP_SHARED_DIR); a missing file is a clear message and false. */
bool rp_workload_build(const char *cmd, const char *name, const char *data, const rp_model *m,
                       const rp_workload_params *p, rp_workload **out);
void rp_workload_free(rp_workload *w);

/* Token ids [lo, hi) for random synthetic text: the middle of the vocabulary
 * (ordinary pieces, not specials or byte tokens). */
void rp_workload_token_range(int32_t n_vocab, int32_t *lo, int32_t *hi);
int rp_workload_n_queries(const rp_workload *w);
const rp_query *rp_workload_query(const rp_workload *w, int i);
int32_t rp_workload_max_tokens(const rp_workload *w);   /* longest prompt (warm-ups included) */

/* Ranks n chunks for a question and writes the best k indices to out, best
 * first (ties: earlier chunk first); returns how many (min(k, n)). Keyword
 * retrieval scores a chunk by the idf over these n chunks of each distinct
 * question word (3+ letters) it contains; with emb (a JSON object text ->
 * vector) by cosine similarity, and a text without a vector is an error
 * (-1, with a message naming its first words). */
struct json_t;
int rp_retrieve(const char *question, const char *const *chunks, int n, int k, const struct json_t *emb, int *out);

#endif /* RP_CLI_WORKLOAD_H */
