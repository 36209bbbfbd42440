/* sampler.h — token sampling: greedy, temperature, top-k, top-p, min-p, repetition / presence / frequency penalties, logit bias, seed. */
#ifndef RP_SAMPLER_H
#define RP_SAMPLER_H

#include <stdbool.h>
#include <stdint.h>

#include "reprise.h"
#include "tokenizer/tokenizer.h"

/* rp_logit_bias, rp_sampler_params and rp_sampler_default_params are the public API's (reprise.h). */

typedef struct rp_sampler rp_sampler;

rp_status rp_sampler_create(rp_sampler_params p, int32_t n_vocab, rp_sampler **out);
void rp_sampler_free(rp_sampler *s);
void rp_sampler_reset(rp_sampler *s);                 /* clears history, reseeds */
void rp_sampler_accept(rp_sampler *s, rp_token tok);  /* appends to the penalty history */

/* Samples from logits[n_vocab] (not modified). Allocates nothing, and sorts
 * only the candidates near a cut or a draw, never the whole vocabulary
 * (sampler.c defines the distribution exactly). */
rp_token rp_sampler_sample(rp_sampler *s, const float *logits);
/* The same draw computed by sorting every candidate (the reference the tests
 * hold rp_sampler_sample to: the same token and RNG use for the same state). */
rp_token rp_sampler_sample_ref(rp_sampler *s, const float *logits);
/* How many candidates the last sample / dist call sorted (the top_k
 * selection aside): the cost the histogram is there to keep small. */
int32_t rp_sampler_last_sorted(const rp_sampler *s);

/* Writes the distribution sample() draws from (after bias, penalty,
 * temperature and truncation) into probs[n_vocab]; greedy gives a one-hot.
 * Used by speculative decoding's rejection rule. */
void rp_sampler_dist(rp_sampler *s, const float *logits, float *probs);

/* Draws from an explicit distribution (sums to ~1) with the sampler's RNG. */
rp_token rp_sampler_draw(rp_sampler *s, const float *probs, int32_t n);
/* Uniform [0, 1) from the sampler's RNG. */
double rp_sampler_uniform(rp_sampler *s);

#endif /* RP_SAMPLER_H */
