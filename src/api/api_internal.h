/* api_internal.h — what the public API's handles hold (shared by the files of src/api; never installed). */
#ifndef RP_API_INTERNAL_H
#define RP_API_INTERNAL_H

#include "reprise.h"
#include "model/forward.h"
#include "model/model.h"
#include "model/sampler.h"
#include "model/session.h"
#include "reuse/engine.h"

struct rp_prompt {
    rp_token *toks;
    int32_t *bounds;       /* token offsets where segments start (> 0, increasing) */
    int32_t n, n_bounds, n_segments, cap;   /* cap: tokens and boundaries each */
};

struct rp_engine {
    rp_model *m;
    rp_engine_params p;
    char *cache_dir;            /* p.cache_dir's copy */
    char *embed_path;           /* p.embed_model's copy */
    rp_model *embed_model;      /* loaded from embed_path, or NULL */
    rp_semantic *sem;           /* the store's semantic index (terms, embeddings), or NULL */
    rp_ctx *ctx;
    rp_reuse *reuse;
    int32_t n_ctx;              /* tokens a sequence holds */
    int32_t n_cells;            /* its KV cells: n_ctx + the static calls' padding rows */
    int32_t n_batch_eff;        /* the context's n_batch (sliding-window layers hold their window + this) */
    bool calibrated;
    char notice[640];
    float *logits;              /* [n_vocab] a prefill's last-token logits */
    struct rp_seq *pending;     /* the sequence whose prefilled prompt awaits its commit (the reuse engine
                                   remembers one prompt), or NULL */
};

struct rp_seq {
    rp_engine *e;
    rp_session *s;
    rp_token *hist;             /* [n_cells] the sequence's tokens: its KV cache's, then a pending one */
    int32_t n_hist;
    int32_t n_prompt;           /* tokens of the last prefilled prompt (its commit needs their cells) */
    int32_t n_exact;            /* hist[0..n_exact) hold exactly what a plain prefill computes (rp_seq_n_exact) */
    bool pending_tok;           /* hist[n_hist - 1] was generated and is not decoded yet */
    bool logits_ok;             /* the session's logits are hist[n_hist - 1]'s (false after a truncate) */
    rp_gen_stats prefill;       /* the last prefill's figures, handed to the generate after it */
    bool fresh_prefill;
    rp_sampler *smp;            /* the sequence's sampler (NULL until the first generate) */
    rp_sampler_params smp_p;    /* what it was made with (the bias array copied to smp_bias) */
    rp_logit_bias *smp_bias;
    bool smp_restart;           /* a prefill or reset since: the next generate starts from the seed */
    char *text;                 /* generated text (stop strings are searched in it) */
    size_t text_cap;
};

/* RP_ERR_NOMEM naming the bytes when n_seq_max sequences' KV at n_cells would not fit in available memory
 * (api_ctx.c). */
rp_status rp_api_check_kv_fits(const rp_engine *e);
/* The cells the engine's sequences give sliding-window layers (rp_kv_create_swa; 0: all, swa_full). */
int32_t rp_api_swa_cells(const rp_engine *e);

/* The reuse engine's options for a call. */
rp_reuse_opts rp_api_reuse_opts(const rp_gen_opts *o);
/* The sequence's sampler for these params (rp_seq_generate's: kept while the generation goes on, else made
 * anew from the seed), in s->smp. */
rp_status rp_api_seq_sampler(rp_seq *s, const rp_sampler_params *sp);

#endif /* RP_API_INTERNAL_H */
