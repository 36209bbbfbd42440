/* workload.h — reuse benchmark workloads: synthetic documents, repeats, and HotpotQA / LoCoMo / SkillsBench prompts. */
#ifndef RP_CLI_WORKLOAD_H
#define RP_CLI_WORKLOAD_H

#include <stdbool.h>
#include <stdint.h>

#include "model/model.h"
#include "tokenizer/tokenizer.h"

/* A prompt as token ids with caller chunk boundaries (segment starts). */
typedef struct rp_wprompt {
    rp_token *toks;
    int32_t n;
    int32_t *bounds;
    int32_t n_bounds;
} rp_wprompt;

/* One query: warm-up prompts that compute and cache its reusable content
 * (untimed), then the timed prompt. */
typedef struct rp_query {
    rp_wprompt *warm;
    int n_warm;
    rp_wprompt prompt;
    char *answer;          /* gold answer text when the dataset has one (NULL otherwise) */
} rp_query;

typedef struct rp_workload_params {
    int n_queries;
    int n_docs;            /* synthetic: documents per prompt; docqa / chat: retrieved chunks (top-k) */
    int doc_len;           /* synthetic: tokens per document; docqa / chat: characters per chunk */
    int tail_len;          /* synthetic: new tokens after the documents */
    int max_tokens;        /* prompts are capped at this many tokens */
    uint64_t seed;
} rp_workload_params;

rp_workload_params rp_workload_default_params(void);

typedef struct rp_workload rp_workload;

/* Builds a workload by name: synthetic | repeat | docqa | chat | skills. Data
 * files come from `data` or ../shared/data (RP_SHARED_DIR); a missing file is
 * a clear message and false. */
bool rp_workload_build(const char *cmd, const char *name, const char *data, const rp_model *m,
                       const rp_workload_params *p, rp_workload **out);
void rp_workload_free(rp_workload *w);
int rp_workload_n_queries(const rp_workload *w);
const rp_query *rp_workload_query(const rp_workload *w, int i);
int32_t rp_workload_max_tokens(const rp_workload *w);   /* longest prompt (warm-ups included) */

#endif /* RP_CLI_WORKLOAD_H */
