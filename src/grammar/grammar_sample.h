/* grammar_sample.h — sampling under a grammar, for the engine's generate loop and the scheduler's commit. */
#ifndef RP_GRAMMAR_SAMPLE_H
#define RP_GRAMMAR_SAMPLE_H

#include <stdbool.h>

#include "model/sampler.h"
#include "reprise.h"

/* The grammar state behind a logits hook when the hook is rp_grammar_on_logits, else NULL. */
rp_grammar_state *rp_grammar_of_hook(rp_logits_fn fn, void *user);

/* Samples from logits[n_vocab] under g (already following the history: rp_grammar_follow). Greedy: the
 * sampler's choice on the raw logits is taken when the grammar allows it (the argmax of the masked logits is
 * then that same token: masking only lowers the others), else the logits are masked into buf and sampled
 * again. Otherwise: masked into buf, then sampled (one draw, the RNG used exactly as with the hook). */
rp_token rp_grammar_sample(rp_grammar_state *g, rp_sampler *smp, bool greedy, const float *logits, float *buf,
                           int32_t n_vocab);

#endif
