/* api_logprobs.c — log-probabilities of a token and the k most likely ones from raw logits (rp_logprobs), without
 * sorting the vocabulary. */
#include <math.h>

#include "reprise.h"
#include "core/error.h"

rp_status rp_logprobs(const float *logits, int32_t n_vocab, rp_token chosen, int32_t k, float *chosen_lp,
                      rp_token *top, float *top_lp) {
    if (!logits || n_vocab < 1 || k < 0 || k > RP_LOGPROBS_MAX_TOP || k > n_vocab || (k > 0 && (!top || !top_lp)) ||
        (chosen_lp && (chosen < 0 || chosen >= n_vocab)))
        return rp_errorf(RP_ERR_INVALID_ARG, "logprobs: bad arguments (n_vocab %d, k %d, chosen %d)", n_vocab, k, chosen);
    /* the maximum, and the k largest kept sorted in top[] (descending; an equal logit keeps the lower id first) */
    float mx = -INFINITY;
    int32_t have = 0;
    for (int32_t i = 0; i < n_vocab; i++) {
        const float x = logits[i];
        if (x > mx) mx = x;
        if (k == 0 || (have == k && !(x > top_lp[k - 1]))) continue;
        int32_t at = have < k ? have++ : k - 1;
        while (at > 0 && x > top_lp[at - 1]) {
            top[at] = top[at - 1];
            top_lp[at] = top_lp[at - 1];
            at--;
        }
        top[at] = i;
        top_lp[at] = x;
    }
    /* log-sum-exp around the maximum (every logit -INFINITY: a uniform law is meaningless; all are -INFINITY) */
    double lse = -INFINITY;
    if (isfinite(mx)) {
        double sum = 0;
        for (int32_t i = 0; i < n_vocab; i++) sum += exp((double)logits[i] - mx);
        lse = mx + log(sum);
    }
    for (int32_t i = 0; i < have; i++) top_lp[i] = isfinite(lse) ? (float)(top_lp[i] - lse) : -INFINITY;
    if (chosen_lp) *chosen_lp = isfinite(lse) ? (float)(logits[chosen] - lse) : -INFINITY;
    return RP_OK;
}
