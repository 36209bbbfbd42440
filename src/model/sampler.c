/* sampler.c — logits processing pipeline and seeded random draws (xoshiro256**).
 *
 * The distribution (temperature > 0). Candidates: the whole vocabulary, or the
 * top_k under the order "logit descending, id ascending" (the same order ranks
 * everything below). e_i = expf((v_i - max) / temp); S = sum of e_i, summed
 * exactly in 2^-62 fixed point (so the order of summation cannot change it);
 * p_i = e_i / S rounded to float. min_p keeps the leading run of tokens with
 * p_i >= min_p * p_max, top_p the shortest leading run whose double sum of p_i
 * reaches top_p. The draw gives each survivor the integer weight
 * floor(e_i * 2^52) and takes the first token in rank order whose cumulative
 * weight exceeds floor(u * total), u the next 53-bit uniform: exact integer
 * sums, so which token is drawn depends on the set of survivors only, never on
 * the order they were visited in, and a zero-weight token (banned, or more
 * than 36 nats below the best) is never drawn.
 *
 * Finding the survivors and the drawn token without sorting the vocabulary
 * (rp_sampler_sample): one pass computes S and a histogram of the candidates
 * over up to NB buckets of (max - v), monotone in v, so that bucket order is
 * rank order, with each bucket's count and exact weight sum. Then
 * - min_p: the run ends in the first bucket whose smallest p is under the
 *   threshold; only that bucket is sorted;
 * - top_p: exact per-bucket sums of p find the bucket where the running sum
 *   reaches top_p; only it is sorted (the reference's double running sum is
 *   exact while every p is >= 2^-29; past such a p the sorted-run path below
 *   takes over, growing a sorted leading run bucket by bucket);
 * - the draw: the bucket where the cumulative weight crosses the target is
 *   found from the bucket sums; only it is sorted.
 * rp_sampler_sample_ref sorts every candidate instead and must give the same
 * token for the same state (tests/test_sampler.c checks it). */
#include "model/sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

__extension__ typedef unsigned __int128 u128;

typedef struct { rp_token id; float v; } cand;

enum {
    NB = 4096,        /* most histogram buckets over (max - v): about 16 candidates a bucket, 64 to 4096 */
    SMALL_N = 256,    /* at most this many candidates: sort them all */
};

struct rp_sampler {
    rp_sampler_params p;
    int32_t n_vocab;
    rp_logit_bias *bias;
    cand *c;             /* [n_vocab] working candidates */
    cand *pre;           /* [n_vocab] candidates being sorted (a bucket, or a leading run of the rank order) */
    float *ev;           /* [n_vocab] e of each candidate in c */
    uint16_t *bk;        /* [n_vocab] bucket of each candidate in c */
    int32_t *cnt;        /* [NB] candidates per bucket */
    u128 *wsum;          /* [NB] draw weight sum per bucket */
    u128 *psum;          /* [NB] sum of p * 2^52 per bucket (min_p / top_p) */
    float *pmin;         /* [NB] smallest p per bucket */
    int32_t n_sorted;    /* candidates the last sample / dist sorted */
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
        p.n_bias < 0 || !isfinite(p.temp) || !isfinite(p.presence_penalty) || !isfinite(p.frequency_penalty))
        return rp_errorf(RP_ERR_INVALID_ARG, "sampler: parameters out of range (temp %g, top_p %g, min_p %g, repeat_penalty %g)",
                         p.temp, p.top_p, p.min_p, p.repeat_penalty);
    rp_sampler *s = calloc(1, sizeof *s);
    if (!s) return rp_errorf(RP_ERR_NOMEM, "sampler: out of memory");
    s->p = p;
    s->n_vocab = n_vocab;
    s->c = malloc(sizeof *s->c * (size_t)n_vocab);
    s->pre = malloc(sizeof *s->pre * (size_t)n_vocab);
    s->ev = malloc(sizeof *s->ev * (size_t)n_vocab);
    s->bk = malloc(sizeof *s->bk * (size_t)n_vocab);
    s->cnt = malloc(sizeof *s->cnt * NB);
    s->wsum = malloc(sizeof *s->wsum * NB);
    s->psum = malloc(sizeof *s->psum * NB);
    s->pmin = malloc(sizeof *s->pmin * NB);
    s->hist = malloc(sizeof *s->hist * (size_t)(p.repeat_last_n > 0 ? p.repeat_last_n : 1));
    if (p.n_bias > 0) {
        s->bias = malloc(sizeof *s->bias * (size_t)p.n_bias);
        if (s->bias) memcpy(s->bias, p.bias, sizeof *s->bias * (size_t)p.n_bias);
    }
    s->p.bias = s->bias;
    if (!s->c || !s->pre || !s->ev || !s->bk || !s->cnt || !s->wsum || !s->psum || !s->pmin || !s->hist || (p.n_bias > 0 && !s->bias)) {
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
    free(s->pre);
    free(s->ev);
    free(s->bk);
    free(s->cnt);
    free(s->wsum);
    free(s->psum);
    free(s->pmin);
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

/* ---- the rank order and an allocation-free sort on it ---- */

/* x before y: larger value first, then lower id (a total order on candidates) */
static inline bool before(cand x, cand y) { return x.v > y.v || (x.v == y.v && x.id < y.id); }

static void sift_down(cand *c, int32_t i, int32_t n) {
    for (;;) {
        int32_t k = 2 * i + 1;
        if (k >= n) return;
        if (k + 1 < n && before(c[k], c[k + 1])) k++;   /* a max-heap of "last in rank order" */
        if (!before(c[i], c[k])) return;
        cand t = c[i]; c[i] = c[k]; c[k] = t;
        i = k;
    }
}

/* Introsort: quicksort (median of three), heapsort past 2 log2 n levels, insertion sort on short runs. */
static void sort_cands(cand *c, int32_t n, int depth) {
    while (n > 16) {
        if (depth-- == 0) {
            for (int32_t i = n / 2 - 1; i >= 0; i--) sift_down(c, i, n);
            for (int32_t i = n - 1; i > 0; i--) {
                cand t = c[0]; c[0] = c[i]; c[i] = t;
                sift_down(c, 0, i);
            }
            return;
        }
        int32_t mid = n / 2;
        if (before(c[mid], c[0])) { cand t = c[0]; c[0] = c[mid]; c[mid] = t; }
        if (before(c[n - 1], c[0])) { cand t = c[0]; c[0] = c[n - 1]; c[n - 1] = t; }
        if (before(c[n - 1], c[mid])) { cand t = c[mid]; c[mid] = c[n - 1]; c[n - 1] = t; }
        const cand pv = c[mid];
        int32_t i = 0, j = n - 1;
        for (;;) {   /* Hoare partition: [0, j] before-or-equal pv, [j + 1, n) after-or-equal */
            while (before(c[i], pv)) i++;
            while (before(pv, c[j])) j--;
            if (i >= j) break;
            cand t = c[i]; c[i] = c[j]; c[j] = t;
            i++; j--;
        }
        /* recurse into the smaller side, loop on the larger */
        if (j + 1 < n - j - 1) { sort_cands(c, j + 1, depth); c += j + 1; n -= j + 1; }
        else { sort_cands(c + j + 1, n - j - 1, depth); n = j + 1; }
    }
    for (int32_t i = 1; i < n; i++) {
        cand x = c[i];
        int32_t j = i;
        while (j > 0 && before(x, c[j - 1])) { c[j] = c[j - 1]; j--; }
        c[j] = x;
    }
}

static void sort_all(cand *c, int32_t n) {
    int depth = 2;
    for (int32_t k = n; k > 1; k >>= 1) depth += 2;
    sort_cands(c, n, depth);
}

/* ---- one sampling step ---- */

/* Fills s->c with the processed logits (bias, penalties; NaN becomes -inf)
 * and, for top_k, moves the top_k candidates to the front. Returns the
 * candidate count; for greedy, 1 with the argmax (ties to the lowest id) in c[0]. */
static int32_t prepare(rp_sampler *s, const float *logits) {
    const int32_t V = s->n_vocab;
    cand *c = s->c;
    for (int32_t i = 0; i < V; i++) { c[i].id = i; c[i].v = isnan(logits[i]) ? -INFINITY : logits[i]; }
    for (int32_t i = 0; i < s->p.n_bias; i++) {
        cand *x = &c[s->bias[i].token];
        x->v += s->bias[i].bias;
        if (isnan(x->v)) x->v = -INFINITY;   /* +inf logit, -inf bias: banned */
    }
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
        c[0] = (cand){best, c[best].v};
        return 1;
    }
    if (s->p.top_k > 0 && s->p.top_k < V) {
        /* partial selection: keep the k best at the front (quickselect on the rank order) */
        int32_t k = s->p.top_k, lo = 0, hi = V - 1;
        while (lo < hi) {
            cand pivot = c[(lo + hi) / 2];
            int32_t i = lo, j = hi;
            while (i <= j) {
                while (before(c[i], pivot)) i++;
                while (before(pivot, c[j])) j--;
                if (i <= j) { cand t = c[i]; c[i] = c[j]; c[j] = t; i++; j--; }
            }
            if (k - 1 <= j) hi = j;
            else if (k - 1 >= i) lo = i;
            else break;
        }
        return k;
    }
    return V;
}

typedef struct {
    int32_t n;        /* candidates in s->c */
    int nb;           /* buckets this step */
    int32_t best;     /* index in s->c of the first in rank order */
    float mx;         /* its value, the largest */
    double sum;       /* S: sum of e over the candidates */
    u128 total;       /* sum of the weights over the candidates */
    /* the survivors: every candidate of buckets < bf, then s->pre[0, r) (sorted; all rank after those) */
    int bf;
    int32_t r;
    /* the sorted-run machinery of the slow path: s->pre[0, a) holds every candidate of buckets <= lim */
    int32_t a;
    int lim;
} step;

static inline float e_of(const rp_sampler *s, const step *st, float v) { return expf((v - st->mx) / s->p.temp); }
/* e in 2^-62 fixed point (e <= 1); the draw's weight is this >> 10, floor(e * 2^52) */
static inline uint64_t fix62(float e) { return (uint64_t)(int64_t)(e * 0x1p62f); }
static inline uint64_t weight(const rp_sampler *s, const step *st, float v) { return fix62(e_of(s, st, v)) >> 10; }
static inline float p_of(const rp_sampler *s, const step *st, float e) { return (float)(e / st->sum); }

/* s->pre[0, cnt[b]) = the candidates of bucket b in rank order. */
static int32_t gather(rp_sampler *s, const step *st, int b) {
    int32_t k = 0;
    for (int32_t i = 0; i < st->n; i++)
        if (s->bk[i] == b) s->pre[k++] = s->c[i];
    sort_all(s->pre, k);
    s->n_sorted += k;
    return k;
}

/* Appends the candidates of buckets (st->lim, lim] to the sorted run. Every
 * candidate of a lower bucket ranks before every one of a higher bucket, so
 * sorting just the new ones keeps s->pre[0, a) a leading run of the order. */
static void extend(rp_sampler *s, step *st, int lim) {
    const int32_t a0 = st->a;
    for (int32_t i = 0; i < st->n; i++)
        if (s->bk[i] > st->lim && s->bk[i] <= lim) s->pre[st->a++] = s->c[i];
    sort_all(s->pre + a0, st->a - a0);
    s->n_sorted += st->a - a0;
    st->lim = lim;
}

/* Makes s->pre[i] available (the i-th candidate in rank order); false if i >= n. */
static bool ensure(rp_sampler *s, step *st, int32_t i) {
    while (i >= st->a && st->lim < st->nb - 1) extend(s, st, st->lim >= st->nb / 2 ? st->nb - 1 : 2 * st->lim + 1);
    return i < st->a;
}

/* min_p then top_p over a sorted run (the reference semantics, step by step):
 * returns the survivor count m, the survivors being s->pre[0, m). */
static int32_t truncate_run(rp_sampler *s, step *st) {
    int32_t m = st->n;
    if (s->p.min_p > 0) {
        const float thr = s->p.min_p * p_of(s, st, e_of(s, st, s->pre[0].v));
        m = 1;
        while (m < st->n && ensure(s, st, m) && p_of(s, st, e_of(s, st, s->pre[m].v)) >= thr) m++;
    }
    if (s->p.top_p < 1.0f) {
        double cum = 0;
        int32_t j = 0;
        while (j < m) {
            ensure(s, st, j);
            cum += p_of(s, st, e_of(s, st, s->pre[j].v));
            j++;
            if (cum >= s->p.top_p) break;
        }
        m = j;
    }
    return m;
}

/* floor(k * t / 2^53) for k < 2^53: a uniform point below t */
static u128 scale_u53(uint64_t k, u128 t) {
    const uint64_t th = (uint64_t)(t >> 64), tl = (uint64_t)t;
    return (((u128)k * th) << 11) + (((u128)k * tl) >> 53);
}

/* Sets up the step: prepare; the first in rank order; the buckets, S and the
 * per-bucket counts and weight sums. Returns false when there is nothing to
 * draw (greedy, one candidate, no finite logit): then st->best is the token. */
static bool begin(rp_sampler *s, const float *logits, step *st) {
    memset(st, 0, sizeof *st);
    st->lim = -1;
    s->n_sorted = 0;
    st->n = prepare(s, logits);
    const cand *c = s->c;
    float mx = -INFINITY, mn = INFINITY;
    for (int32_t i = 0; i < st->n; i++) {
        if (before(c[i], c[st->best])) st->best = i;
        if (c[i].v < mn && c[i].v > -INFINITY) mn = c[i].v;
    }
    st->mx = mx = c[st->best].v;
    if (s->p.temp <= 0 || !isfinite(mx) || st->n == 1) return false;
    /* buckets of (mx - v) * scale: monotone in v, so bucket order is rank order */
    st->nb = st->n / 16 < 64 ? 64 : st->n / 16 > NB ? NB : st->n / 16;
    double range = (double)mx - (double)mn, cap = 110.0 * (double)s->p.temp;   /* e underflows past ~104 */
    if (!(range <= cap)) range = cap;
    float scale = range > 0 ? (float)((st->nb - 1) / range) : 0.0f;
    if (!isfinite(scale)) scale = 0;
    memset(s->cnt, 0, sizeof *s->cnt * (size_t)st->nb);
    memset(s->wsum, 0, sizeof *s->wsum * (size_t)st->nb);
    u128 acc = 0;
    for (int32_t i = 0; i < st->n; i++) {
        const float e = e_of(s, st, c[i].v), x = (mx - c[i].v) * scale;
        const int b = x < (float)(st->nb - 1) ? (int)x : st->nb - 1;   /* -inf (and 0 * inf) land in the last */
        const uint64_t q = fix62(e);
        s->ev[i] = e;
        s->bk[i] = (uint16_t)b;
        s->cnt[b]++;
        acc += q;
        s->wsum[b] += q >> 10;
    }
    for (int b = 0; b < st->nb; b++) st->total += s->wsum[b];
    st->sum = (double)acc * 0x1p-62;
    st->bf = st->nb;
    return true;
}

/* Every p = e / S of at least 2^-29 is a multiple of 2^-52, and the p sum to
 * less than 2: the reference's double running sum over such p is exact, so it
 * equals an integer sum in any order. */
#define P_EXACT 0x1p-29f

/* min_p and top_p without sorting the vocabulary: the run they cut ends in
 * one bucket, found from per-bucket minima and exact sums of p; only that
 * bucket is sorted. Returns false where top_p's running sum would not be
 * exact (then the caller takes the sorted-run path). */
static bool truncate_buckets(rp_sampler *s, step *st) {
    u128 *psum = s->psum;
    float *pmin = s->pmin;
    for (int b = 0; b < st->nb; b++) { psum[b] = 0; pmin[b] = INFINITY; }
    for (int32_t i = 0; i < st->n; i++) {
        const float p = p_of(s, st, s->ev[i]);
        const int b = s->bk[i];
        psum[b] += (uint64_t)(int64_t)(p * 0x1p52f);
        if (p < pmin[b]) pmin[b] = p;
    }
    int sorted = -1;   /* the bucket held sorted in s->pre */
    int32_t nsorted = 0;
    if (s->p.min_p > 0) {
        /* the run ends at the first candidate with p < thr: in the first bucket holding one */
        const float thr = s->p.min_p * p_of(s, st, 1.0f);
        int b = 0;
        while (b < st->nb && !(s->cnt[b] && pmin[b] < thr)) b++;
        if (b < st->nb) {
            nsorted = gather(s, st, sorted = b);
            int32_t r = 0;
            while (p_of(s, st, e_of(s, st, s->pre[r].v)) >= thr) r++;   /* stops: pmin[b] < thr */
            if (b == 0 && r == 0) r = 1;   /* the first candidate always stays */
            st->bf = b;
            st->r = r;
        }
    }
    if (s->p.top_p < 1.0f) {
        u128 base = 0;   /* exact sum of p * 2^52 over the buckets before b */
        for (int b = 0; b <= st->bf && b < st->nb; b++) {
            const bool last = b == st->bf;   /* the bucket min_p cut: only its first r count */
            if (!last && s->cnt[b] == 0) continue;
            if (!last && (double)(base + psum[b]) * 0x1p-52 < s->p.top_p) {
                if (pmin[b] < P_EXACT) return false;
                base += psum[b];
                continue;
            }
            /* the cut lies in bucket b (or b is min_p's bucket): walk it in rank order */
            const int32_t k = b == sorted ? nsorted : gather(s, st, b);
            const int32_t lim = last ? st->r : k;
            double cum = (double)base * 0x1p-52;
            for (int32_t j = 0; j < lim; j++) {
                const float p = p_of(s, st, e_of(s, st, s->pre[j].v));
                if (p < P_EXACT) return false;
                cum += p;
                if (cum >= s->p.top_p) { st->bf = b; st->r = j + 1; return true; }
            }
            if (!last) return false;   /* unreachable: the bucket's exact sum reaches top_p */
            break;
        }
    }
    return true;
}

/* The survivors into st->bf / st->r. */
static void survivors(rp_sampler *s, step *st, bool sort_everything) {
    if (!sort_everything && st->n > SMALL_N) {
        if (s->p.min_p <= 0 && s->p.top_p >= 1.0f) return;   /* all of them */
        if (truncate_buckets(s, st)) return;
    }
    /* the reference: a sorted run, grown bucket by bucket as the scans need it (all at once when sorting everything) */
    st->a = 0;
    st->lim = -1;
    extend(s, st, sort_everything || st->n <= SMALL_N ? st->nb - 1 : 0);
    st->bf = 0;
    st->r = truncate_run(s, st);
}

static int32_t n_survivors(const rp_sampler *s, const step *st) {
    int32_t m = st->r;
    for (int b = 0; b < st->bf && b < st->nb; b++) m += s->cnt[b];
    return m;
}

static rp_token draw(rp_sampler *s, step *st) {
    if (n_survivors(s, st) == 1) return s->c[st->best].id;
    const uint64_t k = next_u64(s) >> 11;   /* the 53 bits rp_sampler_uniform uses */
    u128 base = 0, tot;
    for (int b = 0; b < st->bf && b < st->nb; b++) base += s->wsum[b];
    tot = base;
    for (int32_t i = 0; i < st->r; i++) tot += weight(s, st, s->pre[i].v);
    const u128 target = scale_u53(k, tot);
    u128 cum = 0;
    int32_t k_run = st->r;
    if (target < base) {   /* in a whole bucket: find it, sort only it */
        int b = 0;
        while (cum + s->wsum[b] <= target) cum += s->wsum[b++];
        k_run = gather(s, st, b);
    } else {
        cum = base;
    }
    for (int32_t i = 0; i < k_run; i++)
        if ((cum += weight(s, st, s->pre[i].v)) > target) return s->pre[i].id;
    return s->c[st->best].id;   /* unreachable: the weights reach tot > target */
}

static rp_token sample(rp_sampler *s, const float *logits, bool sort_everything) {
    step st;
    if (!begin(s, logits, &st)) return s->c[st.best].id;
    survivors(s, &st, sort_everything);
    return draw(s, &st);
}

rp_token rp_sampler_sample(rp_sampler *s, const float *logits) { return sample(s, logits, false); }
rp_token rp_sampler_sample_ref(rp_sampler *s, const float *logits) { return sample(s, logits, true); }
int32_t rp_sampler_last_sorted(const rp_sampler *s) { return s->n_sorted; }

void rp_sampler_dist(rp_sampler *s, const float *logits, float *probs) {
    memset(probs, 0, sizeof(float) * (size_t)s->n_vocab);
    step st;
    if (!begin(s, logits, &st)) { probs[s->c[st.best].id] = 1.0f; return; }
    survivors(s, &st, false);
    u128 tot = 0;
    for (int b = 0; b < st.bf && b < st.nb; b++) tot += s->wsum[b];
    for (int32_t i = 0; i < st.r; i++) tot += weight(s, &st, s->pre[i].v);
    const double inv = 1.0 / (double)tot;
    for (int32_t i = 0; i < st.n; i++)
        if (s->bk[i] < st.bf) probs[s->c[i].id] = (float)((double)(fix62(s->ev[i]) >> 10) * inv);
    for (int32_t i = 0; i < st.r; i++) probs[s->pre[i].id] = (float)((double)weight(s, &st, s->pre[i].v) * inv);
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
