/* sampler.c — logits processing pipeline and seeded random draws (xoshiro256**). */
#include "model/sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

typedef struct { rp_token id; float v; } cand;

struct rp_sampler {
    rp_sampler_params p;
    int32_t n_vocab;
    rp_logit_bias *bias;
    cand *c;             /* [n_vocab] working candidates */
    rp_token *hist;      /* ring of the last repeat_last_n tokens */
    int32_t hist_n, hist_head;
    uint64_t rng[4];
};

rp_sampler_params rp_sampler_default_params(void) {
    rp_sampler_params p = {
        .temp = 0.8f, .top_k = 40, .top_p = 0.95f, .min_p = 0.05f,
        .repeat_penalty = 1.0f, .repeat_last_n = 64, .seed = 0x1234,
    };
    return p;
}

static uint64_t splitmix(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t next_u64(rp_sampler *s) {
    uint64_t *r = s->rng;
    uint64_t res = rotl(r[1] * 5, 7) * 9, t = r[1] << 17;
    r[2] ^= r[0]; r[3] ^= r[1]; r[1] ^= r[2]; r[0] ^= r[3];
    r[2] ^= t;
    r[3] = rotl(r[3], 45);
    return res;
}

double rp_sampler_uniform(rp_sampler *s) { return (double)(next_u64(s) >> 11) * 0x1.0p-53; }

void rp_sampler_reset(rp_sampler *s) {
    uint64_t x = s->p.seed;
    for (int i = 0; i < 4; i++) s->rng[i] = splitmix(&x);
    s->hist_n = s->hist_head = 0;
}

rp_status rp_sampler_create(rp_sampler_params p, int32_t n_vocab, rp_sampler **out) {
    *out = NULL;
    if (n_vocab <= 0) return rp_errorf(RP_ERR_INVALID_ARG, "sampler: n_vocab %d", n_vocab);
    if (!(p.top_p > 0) || p.min_p < 0 || p.min_p > 1 || !(p.repeat_penalty > 0) || p.repeat_last_n < 0 ||
        p.n_bias < 0 || isnan(p.temp) || !isfinite(p.presence_penalty) || !isfinite(p.frequency_penalty))
        return rp_errorf(RP_ERR_INVALID_ARG, "sampler: parameters out of range (top_p %g, min_p %g, repeat_penalty %g)",
                         p.top_p, p.min_p, p.repeat_penalty);
    rp_sampler *s = calloc(1, sizeof *s);
    if (!s) return rp_errorf(RP_ERR_NOMEM, "sampler: out of memory");
    s->p = p;
    s->n_vocab = n_vocab;
    s->c = malloc(sizeof *s->c * (size_t)n_vocab);
    s->hist = malloc(sizeof *s->hist * (size_t)(p.repeat_last_n > 0 ? p.repeat_last_n : 1));
    if (p.n_bias > 0) {
        s->bias = malloc(sizeof *s->bias * (size_t)p.n_bias);
        if (s->bias) memcpy(s->bias, p.bias, sizeof *s->bias * (size_t)p.n_bias);
    }
    s->p.bias = s->bias;
    if (!s->c || !s->hist || (p.n_bias > 0 && !s->bias)) {
        rp_sampler_free(s);
        return rp_errorf(RP_ERR_NOMEM, "sampler: out of memory");
    }
    for (int32_t i = 0; i < p.n_bias; i++)
        if (p.bias[i].token < 0 || p.bias[i].token >= n_vocab) {
            rp_status st = rp_errorf(RP_ERR_RANGE, "sampler: logit_bias token %d not in [0, %d)", p.bias[i].token, n_vocab);
            rp_sampler_free(s);
            return st;
        }
    rp_sampler_reset(s);
    *out = s;
    return RP_OK;
}

void rp_sampler_free(rp_sampler *s) {
    if (!s) return;
    free(s->c);
    free(s->hist);
    free(s->bias);
    free(s);
}

void rp_sampler_accept(rp_sampler *s, rp_token tok) {
    int32_t L = s->p.repeat_last_n;
    if (L <= 0) return;
    s->hist[s->hist_head] = tok;
    s->hist_head = (s->hist_head + 1) % L;
    if (s->hist_n < L) s->hist_n++;
}

static int cand_desc(const void *a, const void *b) {
    const cand *x = a, *y = b;
    if (x->v > y->v) return -1;
    if (x->v < y->v) return 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* Fills s->c with processed logits; returns the number of candidates kept,
 * sorted by descending value, values already softmaxed (probabilities) unless
 * greedy (then one candidate). */
static int32_t process(rp_sampler *s, const float *logits) {
    const int32_t V = s->n_vocab;
    cand *c = s->c;
    for (int32_t i = 0; i < V; i++) { c[i].id = i; c[i].v = logits[i]; }
    for (int32_t i = 0; i < s->p.n_bias; i++) c[s->bias[i].token].v += s->bias[i].bias;
    if (s->p.repeat_penalty != 1.0f) {
        /* each distinct token in the window is penalized once (llama.cpp) */
        for (int32_t i = 0; i < s->hist_n; i++) {
            rp_token t = s->hist[i];
            bool dup = false;
            for (int32_t j = 0; j < i && !dup; j++) dup = s->hist[j] == t;
            if (dup || t < 0 || t >= V) continue;
            c[t].v = c[t].v > 0 ? c[t].v / s->p.repeat_penalty : c[t].v * s->p.repeat_penalty;
        }
    }
    if (s->p.presence_penalty != 0 || s->p.frequency_penalty != 0) {
        /* OpenAI's rule over the same window: logit -= count * frequency + (count > 0) * presence,
         * each distinct token once (the window holds at most repeat_last_n tokens) */
        for (int32_t i = 0; i < s->hist_n; i++) {
            const rp_token t = s->hist[i];
            bool dup = false;
            for (int32_t j = 0; j < i && !dup; j++) dup = s->hist[j] == t;
            if (dup || t < 0 || t >= V) continue;
            int32_t cnt = 1;
            for (int32_t j = i + 1; j < s->hist_n; j++) cnt += s->hist[j] == t;
            c[t].v -= (float)cnt * s->p.frequency_penalty + s->p.presence_penalty;
        }
    }
    if (s->p.temp <= 0) {
        int32_t best = 0;
        for (int32_t i = 1; i < V; i++)
            if (c[i].v > c[best].v) best = i;
        c[0] = (cand){best, 1.0f};
        return 1;
    }
    int32_t n = V;
    if (s->p.top_k > 0 && s->p.top_k < V) {
        /* partial selection: keep the k best at the front (quickselect on value) */
        int32_t k = s->p.top_k, lo = 0, hi = V - 1;
        while (lo < hi) {
            cand pivot = c[(lo + hi) / 2];
            int32_t i = lo, j = hi;
            while (i <= j) {
                while (cand_desc(&c[i], &pivot) < 0) i++;
                while (cand_desc(&c[j], &pivot) > 0) j--;
                if (i <= j) { cand t = c[i]; c[i] = c[j]; c[j] = t; i++; j--; }
            }
            if (k - 1 <= j) hi = j;
            else if (k - 1 >= i) lo = i;
            else break;
        }
        n = k;
    }
    qsort(c, (size_t)n, sizeof *c, cand_desc);
    /* softmax with temperature */
    float mx = c[0].v;
    double sum = 0;
    for (int32_t i = 0; i < n; i++) {
        c[i].v = expf((c[i].v - mx) / s->p.temp);
        sum += c[i].v;
    }
    for (int32_t i = 0; i < n; i++) c[i].v = (float)(c[i].v / sum);
    if (s->p.min_p > 0) {
        float thr = s->p.min_p * c[0].v;
        int32_t m = 1;
        while (m < n && c[m].v >= thr) m++;
        n = m;
    }
    if (s->p.top_p < 1.0f) {
        double cum = 0;
        int32_t m = 0;
        while (m < n) {
            cum += c[m].v;
            m++;
            if (cum >= s->p.top_p) break;
        }
        n = m;
    }
    sum = 0;
    for (int32_t i = 0; i < n; i++) sum += c[i].v;
    for (int32_t i = 0; i < n; i++) c[i].v = (float)(c[i].v / sum);
    return n;
}

rp_token rp_sampler_sample(rp_sampler *s, const float *logits) {
    int32_t n = process(s, logits);
    if (n == 1) return s->c[0].id;
    double u = rp_sampler_uniform(s), cum = 0;
    for (int32_t i = 0; i < n; i++) {
        cum += s->c[i].v;
        if (u < cum) return s->c[i].id;
    }
    return s->c[n - 1].id;
}

void rp_sampler_dist(rp_sampler *s, const float *logits, float *probs) {
    int32_t n = process(s, logits);
    memset(probs, 0, sizeof(float) * (size_t)s->n_vocab);
    for (int32_t i = 0; i < n; i++) probs[s->c[i].id] = s->c[i].v;
}

rp_token rp_sampler_draw(rp_sampler *s, const float *probs, int32_t n) {
    double u = rp_sampler_uniform(s), cum = 0, tot = 0;
    for (int32_t i = 0; i < n; i++) tot += probs[i];
    u *= tot;
    int32_t last = 0;
    for (int32_t i = 0; i < n; i++) {
        if (probs[i] <= 0) continue;
        last = i;
        cum += probs[i];
        if (u < cum) return i;
    }
    return last;
}
