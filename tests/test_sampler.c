/* test_sampler.c — sampler semantics (greedy, top-k/p, min-p, penalty, bias, presence/frequency, seed). */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "model/sampler.h"

#define V 1000

static void fill_logits(float *l, unsigned seed) {
    srand(seed);
    for (int i = 0; i < V; i++) l[i] = (float)rand() / RAND_MAX * 10.0f - 5.0f;
}

/* Defaults with every truncation off (top-k 0, top-p 1, min-p 0) at temperature `temp`. */
static rp_sampler_params untruncated(float temp) {
    rp_sampler_params p = rp_sampler_default_params();
    p.temp = temp;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0;
    return p;
}

static int argmax(const float *l) {
    int b = 0;
    for (int i = 1; i < V; i++)
        if (l[i] > l[b]) b = i;
    return b;
}

static void test_greedy_and_ties(void **state) {
    (void)state;
    rp_sampler_params p = rp_sampler_default_params();
    p.temp = 0;
    rp_sampler *s = NULL;
    assert_int_equal(rp_sampler_create(p, V, &s), RP_OK);
    float l[V];
    fill_logits(l, 1);
    assert_int_equal(rp_sampler_sample(s, l), argmax(l));
    for (int i = 0; i < V; i++) l[i] = 1.0f;
    l[17] = l[400] = 3.0f;   /* tie: lowest id wins */
    assert_int_equal(rp_sampler_sample(s, l), 17);
    rp_sampler_free(s);
}

/* Empirical frequencies over 20k draws match softmax(l / T) restricted to the
 * top-k, renormalized (chi-square style bound per token). */
static void test_top_k_distribution(void **state) {
    (void)state;
    rp_sampler_params p = untruncated(0.7f);
    p.top_k = 5;
    p.seed = 99;
    rp_sampler *s = NULL;
    assert_int_equal(rp_sampler_create(p, V, &s), RP_OK);
    float l[V];
    fill_logits(l, 2);
    float probs[V];
    rp_sampler_dist(s, l, probs);
    int nz = 0;
    double tot = 0;
    for (int i = 0; i < V; i++) {
        if (probs[i] > 0) nz++;
        tot += probs[i];
    }
    assert_int_equal(nz, 5);
    assert_float_equal(tot, 1.0, 1e-5);
    /* expected from first principles */
    int idx[V];
    for (int i = 0; i < V; i++) idx[i] = i;
    for (int a = 0; a < 5; a++)
        for (int b = a + 1; b < V; b++)
            if (l[idx[b]] > l[idx[a]]) { int t = idx[a]; idx[a] = idx[b]; idx[b] = t; }
    double e[5], z = 0;
    for (int a = 0; a < 5; a++) z += (e[a] = exp((l[idx[a]] - l[idx[0]]) / 0.7));
    for (int a = 0; a < 5; a++) assert_float_equal(probs[idx[a]], e[a] / z, 1e-5);
    int counts[V] = {0};
    const int N = 20000;
    for (int k = 0; k < N; k++) counts[rp_sampler_sample(s, l)]++;
    for (int a = 0; a < 5; a++) {
        double pexp = e[a] / z, sd = sqrt(N * pexp * (1 - pexp));
        assert_true(fabs(counts[idx[a]] - N * pexp) < 5 * sd + 1);
    }
    rp_sampler_free(s);
}

static void test_top_p_min_p(void **state) {
    (void)state;
    float l[V];
    for (int i = 0; i < V; i++) l[i] = -20.0f;
    l[3] = log(0.5f); l[7] = log(0.3f); l[9] = log(0.15f); l[11] = log(0.05f);
    rp_sampler_params p = untruncated(1.0f);
    p.top_p = 0.75f;   /* 0.5 + 0.3 reaches it: keeps two */
    rp_sampler *s = NULL;
    assert_int_equal(rp_sampler_create(p, V, &s), RP_OK);
    float probs[V];
    rp_sampler_dist(s, l, probs);
    assert_float_equal(probs[3], 0.5 / 0.8, 1e-4);
    assert_float_equal(probs[7], 0.3 / 0.8, 1e-4);
    assert_float_equal(probs[9], 0, 0);
    rp_sampler_free(s);
    p.top_p = 1.0f;
    p.min_p = 0.2f;    /* keeps p >= 0.1: tokens 3, 7, 9 */
    assert_int_equal(rp_sampler_create(p, V, &s), RP_OK);
    rp_sampler_dist(s, l, probs);
    assert_true(probs[9] > 0 && probs[11] == 0);
    assert_float_equal(probs[3] + probs[7] + probs[9], 1.0, 1e-5);
    rp_sampler_free(s);
}

static void test_penalty_and_bias(void **state) {
    (void)state;
    float l[V];
    for (int i = 0; i < V; i++) l[i] = 0;
    l[5] = 2.0f;
    l[6] = 1.5f;
    rp_sampler_params p = rp_sampler_default_params();
    p.temp = 0;
    p.repeat_penalty = 2.0f;   /* 2.0 / 2 = 1.0 < 1.5 */
    p.repeat_last_n = 4;
    rp_sampler *s = NULL;
    assert_int_equal(rp_sampler_create(p, V, &s), RP_OK);
    assert_int_equal(rp_sampler_sample(s, l), 5);
    rp_sampler_accept(s, 5);
    assert_int_equal(rp_sampler_sample(s, l), 6);
    /* the window forgets after repeat_last_n other tokens */
    for (int k = 0; k < 4; k++) rp_sampler_accept(s, 100 + k);
    assert_int_equal(rp_sampler_sample(s, l), 5);
    rp_sampler_free(s);
    rp_logit_bias bias[2] = {{5, -INFINITY}, {900, 10.0f}};
    p.repeat_penalty = 1.0f;
    p.bias = bias;
    p.n_bias = 2;
    assert_int_equal(rp_sampler_create(p, V, &s), RP_OK);
    assert_int_equal(rp_sampler_sample(s, l), 900);
    rp_sampler_free(s);
    rp_logit_bias badb = {V + 3, 1.0f};
    p.bias = &badb;
    p.n_bias = 1;
    assert_int_equal(rp_sampler_create(p, V, &s), RP_ERR_RANGE);
}


/* OpenAI presence / frequency penalties over the repeat window: logit -=
 * count * frequency + presence, for each distinct token in it. */
static void test_presence_frequency(void **state) {
    (void)state;
    float l[V];
    for (int i = 0; i < V; i++) l[i] = -10;
    l[0] = 2.0f;
    l[1] = 1.9f;
    l[2] = 0.5f;
    rp_sampler_params p = untruncated(1.0f);
    p.repeat_last_n = 8;
    p.frequency_penalty = 0.5f;
    p.presence_penalty = 0.1f;
    rp_sampler *s = NULL;
    assert_int_equal(rp_sampler_create(p, V, &s), RP_OK);
    rp_sampler_accept(s, 0);
    rp_sampler_accept(s, 1);
    rp_sampler_accept(s, 0);
    static float pr[V];
    rp_sampler_dist(s, l, pr);
    /* token 0: 2.0 - 2 * 0.5 - 0.1 = 0.9; token 1: 1.9 - 0.5 - 0.1 = 1.3; token 2: 0.5 */
    assert_true(fabs(log(pr[1] / pr[0]) - 0.4) < 1e-4);
    assert_true(fabs(log(pr[0] / pr[2]) - 0.4) < 1e-4);
    rp_sampler_free(s);
    /* greedy: the penalties move the argmax; negative values encourage repeats */
    p.temp = 0;
    assert_int_equal(rp_sampler_create(p, V, &s), RP_OK);
    rp_sampler_accept(s, 0);
    rp_sampler_accept(s, 0);
    assert_int_equal(rp_sampler_sample(s, l), 1);
    rp_sampler_free(s);
    p.frequency_penalty = -0.5f;
    p.presence_penalty = 0;
    assert_int_equal(rp_sampler_create(p, V, &s), RP_OK);
    rp_sampler_accept(s, 2);
    assert_int_equal(rp_sampler_sample(s, l), 0);   /* 0.5 + 0.5 = 1.0 < 2.0 */
    rp_sampler_accept(s, 2);
    rp_sampler_accept(s, 2);
    rp_sampler_accept(s, 2);
    assert_int_equal(rp_sampler_sample(s, l), 2);   /* 0.5 + 4 * 0.5 = 2.5 */
    /* the window forgets */
    for (int k = 0; k < 8; k++) rp_sampler_accept(s, 100 + k);
    assert_int_equal(rp_sampler_sample(s, l), 0);
    rp_sampler_free(s);
    p.presence_penalty = NAN;
    assert_int_equal(rp_sampler_create(p, V, &s), RP_ERR_INVALID_ARG);
}

static void test_seed_reproducible(void **state) {
    (void)state;
    float l[V];
    fill_logits(l, 3);
    rp_sampler_params p = untruncated(1.5f);
    p.seed = 7;
    rp_sampler *a = NULL, *b = NULL;
    assert_int_equal(rp_sampler_create(p, V, &a), RP_OK);
    assert_int_equal(rp_sampler_create(p, V, &b), RP_OK);
    int same = 0, diff_seed_same = 0;
    rp_token seq[64];
    for (int k = 0; k < 64; k++) {
        seq[k] = rp_sampler_sample(a, l);
        same += seq[k] == rp_sampler_sample(b, l);
    }
    assert_int_equal(same, 64);
    rp_sampler_reset(a);
    for (int k = 0; k < 64; k++) assert_int_equal(rp_sampler_sample(a, l), seq[k]);
    rp_sampler_free(b);
    p.seed = 8;
    assert_int_equal(rp_sampler_create(p, V, &b), RP_OK);
    for (int k = 0; k < 64; k++) diff_seed_same += seq[k] == rp_sampler_sample(b, l);
    assert_true(diff_seed_same < 32);
    rp_sampler_free(a);
    rp_sampler_free(b);
}

/* ---- the sampler as it was before it stopped sorting the vocabulary ----
 * Kept verbatim (renamed) as the behavioural reference: qsort of every
 * candidate, a double sum in sorted order, a double cumulative walk. */
typedef struct { rp_token id; float v; } old_cand;
typedef struct {
    rp_sampler_params p;
    int32_t n_vocab;
    old_cand *c;
    rp_token hist[64];
    int32_t hist_n, hist_head;
    uint64_t rng[4];
} old_sampler;

static uint64_t old_splitmix(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}
static inline uint64_t old_rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
static uint64_t old_next(old_sampler *s) {
    uint64_t *r = s->rng;
    uint64_t res = old_rotl(r[1] * 5, 7) * 9, t = r[1] << 17;
    r[2] ^= r[0]; r[3] ^= r[1]; r[1] ^= r[2]; r[0] ^= r[3];
    r[2] ^= t;
    r[3] = old_rotl(r[3], 45);
    return res;
}
static double old_uniform(old_sampler *s) { return (double)(old_next(s) >> 11) * 0x1.0p-53; }
static void old_init(old_sampler *s, rp_sampler_params p, int32_t n_vocab) {
    memset(s, 0, sizeof *s);
    s->p = p;
    s->n_vocab = n_vocab;
    s->c = malloc(sizeof *s->c * (size_t)n_vocab);
    assert_non_null(s->c);
    assert_true(p.repeat_last_n <= 64);
    uint64_t x = p.seed;
    for (int i = 0; i < 4; i++) s->rng[i] = old_splitmix(&x);
}
static void old_accept(old_sampler *s, rp_token tok) {
    int32_t L = s->p.repeat_last_n;
    if (L <= 0) return;
    s->hist[s->hist_head] = tok;
    s->hist_head = (s->hist_head + 1) % L;
    if (s->hist_n < L) s->hist_n++;
}
static int old_cand_desc(const void *a, const void *b) {
    const old_cand *x = a, *y = b;
    if (x->v > y->v) return -1;
    if (x->v < y->v) return 1;
    return x->id < y->id ? -1 : x->id > y->id;
}
static int32_t old_process(old_sampler *s, const float *logits) {
    const int32_t NV = s->n_vocab;
    old_cand *c = s->c;
    for (int32_t i = 0; i < NV; i++) { c[i].id = i; c[i].v = logits[i]; }
    for (int32_t i = 0; i < s->p.n_bias; i++) c[s->p.bias[i].token].v += s->p.bias[i].bias;
    if (s->p.repeat_penalty != 1.0f) {
        for (int32_t i = 0; i < s->hist_n; i++) {
            rp_token t = s->hist[i];
            bool dup = false;
            for (int32_t j = 0; j < i && !dup; j++) dup = s->hist[j] == t;
            if (dup || t < 0 || t >= NV) continue;
            c[t].v = c[t].v > 0 ? c[t].v / s->p.repeat_penalty : c[t].v * s->p.repeat_penalty;
        }
    }
    if (s->p.presence_penalty != 0 || s->p.frequency_penalty != 0) {
        for (int32_t i = 0; i < s->hist_n; i++) {
            const rp_token t = s->hist[i];
            bool dup = false;
            for (int32_t j = 0; j < i && !dup; j++) dup = s->hist[j] == t;
            if (dup || t < 0 || t >= NV) continue;
            int32_t cnt = 1;
            for (int32_t j = i + 1; j < s->hist_n; j++) cnt += s->hist[j] == t;
            c[t].v -= (float)cnt * s->p.frequency_penalty + s->p.presence_penalty;
        }
    }
    if (s->p.temp <= 0) {
        int32_t best = 0;
        for (int32_t i = 1; i < NV; i++)
            if (c[i].v > c[best].v) best = i;
        c[0] = (old_cand){best, 1.0f};
        return 1;
    }
    int32_t n = NV;
    if (s->p.top_k > 0 && s->p.top_k < NV) {
        int32_t k = s->p.top_k, lo = 0, hi = NV - 1;
        while (lo < hi) {
            old_cand pivot = c[(lo + hi) / 2];
            int32_t i = lo, j = hi;
            while (i <= j) {
                while (old_cand_desc(&c[i], &pivot) < 0) i++;
                while (old_cand_desc(&c[j], &pivot) > 0) j--;
                if (i <= j) { old_cand t = c[i]; c[i] = c[j]; c[j] = t; i++; j--; }
            }
            if (k - 1 <= j) hi = j;
            else if (k - 1 >= i) lo = i;
            else break;
        }
        n = k;
    }
    qsort(c, (size_t)n, sizeof *c, old_cand_desc);
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
static rp_token old_sample(old_sampler *s, const float *logits) {
    int32_t n = old_process(s, logits);
    if (n == 1) return s->c[0].id;
    double u = old_uniform(s), cum = 0;
    for (int32_t i = 0; i < n; i++) {
        cum += s->c[i].v;
        if (u < cum) return s->c[i].id;
    }
    return s->c[n - 1].id;
}

/* Logit vectors of several shapes: 0 uniform [-5, 5], 1 gaussian-ish sigma 3
 * (a flat, untruncated tail), 2 an LLM-like peak over a wide tail, 3 small
 * integers (many ties), 4 a few banned tokens among gaussian values, 5 all
 * equal. */
static uint64_t lcg(uint64_t *x) { *x = *x * 6364136223846793005ULL + 1442695040888963407ULL; return *x >> 33; }
static float unif(uint64_t *x) { return (float)lcg(x) / 2147483648.0f; }
static void make_logits(float *l, int32_t n, int kind, uint64_t seed) {
    uint64_t x = seed * 0x9e3779b97f4a7c15ULL + 1;
    for (int32_t i = 0; i < n; i++) {
        float g = unif(&x) + unif(&x) + unif(&x) + unif(&x) - 2.0f;   /* roughly normal, sd 0.58 */
        switch (kind) {
        case 0: l[i] = unif(&x) * 10 - 5; break;
        case 1: l[i] = g * 5.2f; break;
        case 2: l[i] = g * 3 - 4 + (lcg(&x) % 4000 == 0 ? 12 + unif(&x) * 4 : 0); break;
        case 3: l[i] = (float)(int)(lcg(&x) % 7) - 3; break;
        case 4: l[i] = lcg(&x) % 50 == 0 ? -INFINITY : g * 4; break;
        default: l[i] = 0.25f; break;
        }
    }
}

typedef struct { int32_t top_k; float top_p, min_p, temp, rep, pres, freq; } combo;

/* The sampler (no full sort), its sort-everything path and the old code
 * agree on every token and use the RNG alike, over vocabulary sizes from 1 to
 * 128256, six logit shapes, temperatures and top_k / top_p / min_p / penalty
 * combinations, several draws per state with the history growing. */
static void test_matches_sort_everything(void **state) {
    (void)state;
    static const int32_t sizes[] = {1, 2, 3, 17, 255, 256, 257, 1000, 4099, 128256};
    static const combo combos[] = {
        {0, 1.0f, 0, 1.0f, 1, 0, 0},        /* the server's temperature 1: nothing truncated */
        {0, 1.0f, 0, 0.7f, 1, 0, 0},
        {0, 1.0f, 0, 1.5f, 1.3f, 0.2f, 0.1f},
        {0, 0.95f, 0, 1.0f, 1, 0, 0},
        {0, 0.5f, 0.05f, 0.8f, 1, 0, 0},
        {0, 1.0f, 0.05f, 1.0f, 1, 0, 0},
        {0, 1.0f, 0.9f, 2.0f, 1, 0, 0},
        {0, 0.999999f, 0, 1.0f, 1, 0, 0},
        {0, 1.401298464e-45f, 0, 1.0f, 1, 0, 0},   /* the smallest positive top_p */
        {0, 1.0f, 1.0f, 1.0f, 1, 0, 0},
        {40, 0.95f, 0.05f, 0.8f, 1, 0, 0},   /* the CLI defaults */
        {1, 1.0f, 0, 1.0f, 1, 0, 0},
        {2, 1.0f, 0, 1.0f, 1, 0, 0},
        {300, 0.9f, 0, 1.2f, 1.1f, 0, 0.3f},
        {0, 1.0f, 0, 0.05f, 1, 0, 0},
        {0, 1.0f, 0, 60.0f, 1, 0, 0},
        {0, 1.0f, 0, 0, 1.3f, 0, 0},         /* greedy */
    };
    const int32_t NMAX = 128256;
    float *l = malloc(sizeof *l * (size_t)NMAX);
    assert_non_null(l);
    long draws = 0, old_mismatch = 0;
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        const int32_t n = sizes[si];
        const bool big = n > 5000;
        for (int kind = 0; kind < 6; kind++) {
            for (size_t ci = 0; ci < sizeof combos / sizeof combos[0]; ci++) {
                if (big && (ci % 2) != (size_t)(kind % 2) && ci != 0) continue;   /* keep the big vocabulary quick */
                const combo *cb = &combos[ci];
                rp_sampler_params p = untruncated(cb->temp);
                p.top_k = cb->top_k > 0 && cb->top_k >= n ? n : cb->top_k;
                p.top_p = cb->top_p;
                p.min_p = cb->min_p;
                p.repeat_penalty = cb->rep;
                p.presence_penalty = cb->pres;
                p.frequency_penalty = cb->freq;
                p.repeat_last_n = 16;
                p.seed = 1000 * si + 10 * kind + ci;
                rp_logit_bias bias[2] = {{0, -INFINITY}, {n - 1, 2.5f}};
                if (kind == 4 && n > 2) { p.bias = bias; p.n_bias = 2; }
                rp_sampler *fast = NULL, *ref = NULL;
                old_sampler old;
                assert_int_equal(rp_sampler_create(p, n, &fast), RP_OK);
                assert_int_equal(rp_sampler_create(p, n, &ref), RP_OK);
                old_init(&old, p, n);
                const int steps = big ? 3 : 6;
                for (int k = 0; k < steps; k++) {
                    make_logits(l, n, kind, p.seed * 31 + (uint64_t)k);
                    const rp_token a = rp_sampler_sample(fast, l), b = rp_sampler_sample_ref(ref, l);
                    const rp_token o = old_sample(&old, l);
                    if (a != b)
                        fail_msg("vocab %d shape %d combo %zu step %d: sampler %d, sort-everything %d", n, kind, ci, k, a, b);
                    old_mismatch += a != o;
                    draws++;
                    rp_sampler_accept(fast, a);
                    rp_sampler_accept(ref, a);
                    old_accept(&old, a);
                }
                /* the same number of RNG draws */
                const double ua = rp_sampler_uniform(fast), ub = rp_sampler_uniform(ref), uo = old_uniform(&old);
                assert_true(ua == ub && ua == uo);
                rp_sampler_free(fast);
                rp_sampler_free(ref);
                free(old.c);
            }
        }
    }
    /* The old code walked float-rounded probabilities with a double sum; the
     * integer draw is exact, so at a boundary the two can pick neighbours
     * (1 in 24,000 draws of a random search, on flat distributions; none here).
     * Anything systematic (a wrong cut, a wrong order) would differ often. */
    print_message("%ld draws, %ld differ from the old code\n", draws, old_mismatch);
    assert_true(old_mismatch * 1000 <= draws);
    free(l);
}

/* On a 128256-token vocabulary (the Llama 3 shape) the sampler sorts a few
 * hundred candidates per token, not the vocabulary: untruncated (the server's
 * temperature 1), top_p, min_p and the CLI defaults, over logits without a
 * huge block of ties (all-equal logits are one bucket: the whole vocabulary). */
static void test_sorts_little(void **state) {
    (void)state;
    const int32_t n = 128256;
    float *l = malloc(sizeof *l * (size_t)n);
    assert_non_null(l);
    static const combo combos[] = {
        {0, 1.0f, 0, 1.0f, 1, 0, 0}, {0, 0.95f, 0, 1.0f, 1, 0, 0}, {0, 1.0f, 0.05f, 1.0f, 1, 0, 0},
        {0, 0.9f, 0.02f, 0.7f, 1, 0, 0}, {40, 0.95f, 0.05f, 0.8f, 1, 0, 0},
    };
    int32_t worst = 0;
    for (int kind = 0; kind < 5; kind++) {
        if (kind == 3) continue;   /* seven distinct values: a seventh of the vocabulary ties */
        for (size_t ci = 0; ci < sizeof combos / sizeof combos[0]; ci++) {
            rp_sampler_params p = untruncated(combos[ci].temp);
            p.top_k = combos[ci].top_k;
            p.top_p = combos[ci].top_p;
            p.min_p = combos[ci].min_p;
            p.seed = (uint64_t)(kind * 10 + ci);
            rp_sampler *s = NULL;
            assert_int_equal(rp_sampler_create(p, n, &s), RP_OK);
            for (int k = 0; k < 4; k++) {
                make_logits(l, n, kind, 77 + (uint64_t)k);
                rp_sampler_sample(s, l);
                if (rp_sampler_last_sorted(s) > worst) worst = rp_sampler_last_sorted(s);
            }
            rp_sampler_free(s);
        }
    }
    print_message("at most %d of %d candidates sorted per token\n", worst, n);
    assert_true(worst <= n / 100);
    free(l);
}

/* The smallest positive top_p keeps exactly the most likely token (and a
 * top_p of 0 is a parameter error, not a crash). */
static void test_tiny_top_p(void **state) {
    (void)state;
    float l[V];
    rp_sampler_params p = untruncated(1.0f);
    p.top_p = 1.401298464e-45f;   /* FLT_TRUE_MIN */
    for (unsigned seed = 0; seed < 20; seed++) {
        fill_logits(l, 40 + seed);
        p.seed = seed;
        rp_sampler *s = NULL;
        assert_int_equal(rp_sampler_create(p, V, &s), RP_OK);
        for (int k = 0; k < 5; k++) assert_int_equal(rp_sampler_sample(s, l), argmax(l));
        float probs[V];
        rp_sampler_dist(s, l, probs);
        assert_float_equal(probs[argmax(l)], 1.0f, 0);
        rp_sampler_free(s);
    }
    p.top_p = 0;
    rp_sampler *s = NULL;
    assert_int_equal(rp_sampler_create(p, V, &s), RP_ERR_INVALID_ARG);
    assert_null(s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy_and_ties),
        cmocka_unit_test(test_top_k_distribution),
        cmocka_unit_test(test_top_p_min_p),
        cmocka_unit_test(test_penalty_and_bias),
        cmocka_unit_test(test_presence_frequency),
        cmocka_unit_test(test_seed_reproducible),
        cmocka_unit_test(test_matches_sort_everything),
        cmocka_unit_test(test_tiny_top_p),
        cmocka_unit_test(test_sorts_little),
    };
    return rp_test_main(tests, NULL, NULL);
}
