/* grammar_sample.c — the greedy fast path under a grammar (grammar_sample.h): one token's bytes checked
 * against the state instead of a mask over the vocabulary, whenever the model's choice is allowed. */
#include <string.h>

#include "grammar/grammar_sample.h"

rp_grammar_state *rp_grammar_of_hook(rp_logits_fn fn, void *user) {
    return fn == rp_grammar_on_logits ? (rp_grammar_state *)user : NULL;
}

rp_token rp_grammar_sample(rp_grammar_state *g, rp_sampler *smp, bool greedy, const float *logits, float *buf,
                           int32_t n_vocab) {
    if (greedy) {
        const rp_token t = rp_sampler_sample(smp, logits);   /* greedy: no RNG, nothing changes in smp */
        if (rp_grammar_allows(g, t)) return t;
    }
    memcpy(buf, logits, sizeof *buf * (size_t)n_vocab);
    rp_grammar_mask(g, buf, n_vocab);
    return rp_sampler_sample(smp, buf);
}
