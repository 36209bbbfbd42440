/* testfix.h — the reuse tests' shared fixture (test_reuse, test_arch, test_gemma): a model with a context and a
 * KV cache, reuse engines over it, the pseudo-text documents their prompts are built of, and the re-rotation
 * check (cached K re-rotated to new cells against K recomputed there). Uses the engine's internal headers. */
#ifndef RP_TESTFIX_H
#define RP_TESTFIX_H

#include <stdbool.h>
#include <stdint.h>

#include "testutil.h"
#include "kv/kv.h"
#include "model/forward.h"
#include "model/model.h"
#include "reuse/engine.h"

/* Largest |a[i] - b[i]| over n values. */
static inline float rp_test_max_diff(const float *a, const float *b, int32_t n) {
    float d = 0;
    for (int32_t i = 0; i < n; i++) d = fmaxf(d, fabsf(a[i] - b[i]));
    return d;
}

/* Index of the largest of x[0..n) (the first on ties). */
static inline int32_t rp_test_argmax(const float *x, int32_t n) {
    int32_t b = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

/* A model (rp_model_load with the default parameters), a context of n_ctx cells (n_batch 512, one output
 * row), a KV cache of n_ctx cells of kv_type, and two logit rows of n_vocab floats. */
typedef struct rp_test_fixture {
    rp_model *m;
    rp_ctx *ctx;
    rp_kv *kv;
    float *lg_a, *lg_b;
    int32_t V;
} rp_test_fixture;

/* false when the model does not load (the context and KV cache are asserted). */
bool rp_test_fixture_open(rp_test_fixture *f, const char *path, rp_type kv_type, int32_t n_ctx);
void rp_test_fixture_close(rp_test_fixture *f);

/* A reuse engine over f's model and KV type, for prompts of up to 1024 tokens; static mode with L_P 32, L_S 64. */
rp_reuse *rp_test_engine(const rp_test_fixture *f, rp_reuse_mode mode, float ratio, bool stat);

/* nd documents of 40 ids in [259, 509) from an LCG started at seed (distinct runs of normal vocabulary pieces). */
void rp_test_make_docs(rp_token docs[][40], int nd, uint64_t seed);

/* prompt = BOS + the documents in `order` (nd of them) + tail[0..nt); bounds at each document start and at the
 * tail (when nt > 0). Returns the prompt's length. */
int32_t rp_test_build(rp_token docs[][40], const int *order, int nd, const rp_token *tail, int nt, rp_token *out,
                      int32_t *bounds, int32_t *nb);

/* Caches each of the 6 documents after BOS with e (one prompt each, committed), as a document store would
 * before the prompts that reuse them; logits is a scratch row of n_vocab floats. */
void rp_test_cache_docs(rp_test_fixture *f, rp_reuse *e, rp_token docs[][40], float *logits);

/* The re-rotation check's measurement: loads layer `layer`'s K at cells [cell0, cell0 + n_cells) (as the last
 * prefill left them: reused and re-rotated), prefills p[0..n) again with `exact` (an engine that reuses nothing,
 * into f->lg_b), and returns the worst relative L2 error of those rows against the recomputed ones. */
double rp_test_k_rel_error(rp_test_fixture *f, rp_reuse *exact, const rp_token *p, int32_t n, const int32_t *bnd,
                           int32_t nb, int32_t layer, int32_t cell0, int32_t n_cells);

#endif
