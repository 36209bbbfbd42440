/* semantic.c — chunk and prompt text -> extracted terms and truncated, re-normalised embeddings for the store. */
#include "reuse/semantic.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "core/error.h"
#include "model/model.h"
#include "store/terms.h"

/* One side's embedder and scratch (the writer's, or the queries'). */
typedef struct side {
    rp_embedder *emb;
    char *text;               /* detokenized text */
    size_t text_cap;
    rp_token *etoks;          /* embedding-model tokens of every input of a call */
    size_t etoks_cap;
    float *full;              /* [inputs][n_embd] */
    size_t full_cap;
    rp_term *terms;           /* query side: the run's terms */
    int32_t terms_cap;
    float *vecs;              /* query side: [windows][dim] */
} side;

struct rp_semantic {
    rp_semantic_params p;
    int32_t n_embd, dim;
    uint64_t vec_src;
    side ix, q;
    pthread_mutex_t ix_mu;    /* one indexing call at a time (the writer thread; sync_persist callers) */
};

rp_semantic_params rp_semantic_default_params(void) {
    rp_semantic_params p = {.text_model = NULL, .embed_model = NULL, .embed_dim = 256, .embed_ctx = 0, .terms = true,
                            .n_threads = 1};
    return p;
}

static void side_free(side *d) {
    rp_embedder_free(d->emb);
    free(d->text);
    free(d->etoks);
    free(d->full);
    free(d->terms);
    free(d->vecs);
}

void rp_semantic_free(rp_semantic *s) {
    if (!s) return;
    side_free(&s->ix);
    side_free(&s->q);
    pthread_mutex_destroy(&s->ix_mu);
    free(s);
}

static rp_status side_init(rp_semantic *s, side *d, int32_t n_seq) {
    if (!s->p.embed_model) return RP_OK;
    rp_embedder_params ep = rp_embedder_default_params();
    ep.n_ctx = s->p.embed_ctx;
    ep.n_seq = n_seq;
    ep.n_batch = s->p.embed_ctx < 512 ? 512 : s->p.embed_ctx;
    ep.n_threads = s->p.n_threads;
    ep.normalize = false;   /* normalised after the truncation */
    /* a pooling the model does not name: mean (a decoder's hidden states averaged); none would give token rows */
    if (rp_model_pooling(s->p.embed_model) == RP_POOLING_NONE) ep.pooling = RP_POOLING_MEAN;
    return rp_embedder_create(s->p.embed_model, &ep, &d->emb);
}

rp_status rp_semantic_create(const rp_semantic_params *pp, rp_semantic **out) {
    *out = NULL;
    if (!pp || !pp->text_model) return rp_errorf(RP_ERR_INVALID_ARG, "semantic: no text model");
    if (pp->embed_dim < 0) return rp_errorf(RP_ERR_INVALID_ARG, "semantic: embedding dimension %d is negative", pp->embed_dim);
    if (pp->embed_ctx < 0) return rp_errorf(RP_ERR_INVALID_ARG, "semantic: embedding context %d is negative", pp->embed_ctx);
    rp_semantic *s = calloc(1, sizeof *s);
    if (!s) return rp_errorf(RP_ERR_NOMEM, "semantic: out of memory");
    s->p = *pp;
    if (s->p.n_threads < 1) s->p.n_threads = 1;
    pthread_mutex_init(&s->ix_mu, NULL);
    rp_status st = RP_OK;
    if (s->p.embed_model) {
        const rp_model *em = s->p.embed_model;
        const int32_t train = em->hp.n_ctx_train > 0 ? em->hp.n_ctx_train : 512;
        if (s->p.embed_ctx == 0) s->p.embed_ctx = train < 512 ? train : 512;
        s->n_embd = em->hp.n_embd;
        s->dim = s->p.embed_dim > 0 && s->p.embed_dim < s->n_embd ? s->p.embed_dim : s->n_embd;
        st = side_init(s, &s->ix, 4);
        if (st == RP_OK) st = side_init(s, &s->q, RP_SEM_QUERY_WINDOWS);
        /* what the vectors are: the model (weights digest), the truncation and the pooling; a store's vectors
         * of another source are never compared with these */
        if (st == RP_OK) {
            const uint64_t in[3] = {em->fingerprint, (uint64_t)s->dim, (uint64_t)rp_embedder_pooling(s->ix.emb)};
            s->vec_src = XXH3_64bits(in, sizeof in);
            if (s->vec_src == 0) s->vec_src = 1;
        }
    }
    if (st != RP_OK) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", rp_last_error());
        rp_semantic_free(s);
        return rp_errorf(st, "semantic: the embedding model: %s", msg);
    }
    *out = s;
    return RP_OK;
}

int32_t rp_semantic_dim(const rp_semantic *s) { return s ? s->dim : 0; }
uint64_t rp_semantic_vec_src(const rp_semantic *s) { return s ? s->vec_src : 0; }
bool rp_semantic_has_terms(const rp_semantic *s) { return s && s->p.terms; }

/* Grows *buf to hold `need` elements of `size` bytes (kept between calls: allocation by phase, amortised). */
static bool reserve(void **buf, size_t *cap, size_t need, size_t size) {
    if (need <= *cap) return true;
    size_t nc = *cap ? *cap : 256;
    while (nc < need) nc *= 2;
    void *nb = realloc(*buf, nc * size);
    if (!nb) return false;
    *buf = nb;
    *cap = nc;
    return true;
}

/* The text of toks[0..n) in d->text at offset `at` (NUL-terminated); *len its bytes. Control tokens are left
 * out (BOS, turn markers: no words). */
static rp_status detok(const rp_semantic *s, side *d, size_t at, const rp_token *toks, int32_t n, size_t *len) {
    *len = 0;
    size_t guess = at + (size_t)n * 8 + 16;
    if (!reserve((void **)&d->text, &d->text_cap, guess, 1)) return rp_errorf(RP_ERR_NOMEM, "semantic: out of memory");
    size_t got = 0;
    rp_status st = rp_detokenize(s->p.text_model, toks, n, false, d->text + at, d->text_cap - at, &got);
    if (st == RP_ERR_FULL) {
        if (!reserve((void **)&d->text, &d->text_cap, at + got + 1, 1)) return rp_errorf(RP_ERR_NOMEM, "semantic: out of memory");
        st = rp_detokenize(s->p.text_model, toks, n, false, d->text + at, d->text_cap - at, &got);
    }
    if (st != RP_OK) return st;
    *len = strlen(d->text + at);
    return RP_OK;
}

static void normalize(float *v, int32_t n) {
    double ss = 0;
    for (int32_t i = 0; i < n; i++) ss += (double)v[i] * v[i];
    const float k = ss > 0 ? (float)(1.0 / sqrt(ss)) : 0.0f;
    for (int32_t i = 0; i < n; i++) v[i] *= k;
}

/* Embeds n_in texts (d->text + off[i], len[i] bytes; an empty one gets no vector: ok[i] false) and writes each
 * one's first s->dim components, re-normalised, to vecs[i * dim]. */
static rp_status embed_texts(rp_semantic *s, side *d, const size_t *off, const size_t *len, int32_t n_in, float *vecs,
                             bool *ok) {
    const int32_t ctx = s->p.embed_ctx;
    const rp_token **inputs = malloc(sizeof *inputs * (size_t)n_in);
    int32_t *nt = malloc(sizeof *nt * (size_t)n_in), *idx = malloc(sizeof *idx * (size_t)n_in);
    size_t *toff = malloc(sizeof *toff * (size_t)n_in);
    rp_status st = inputs && nt && idx && toff ? RP_OK : rp_errorf(RP_ERR_NOMEM, "semantic: out of memory");
    int32_t m = 0;
    size_t used = 0;
    for (int32_t i = 0; i < n_in && st == RP_OK; i++) {
        ok[i] = false;
        if (len[i] == 0) continue;
        /* at most one token per byte, plus BOS and EOS */
        const size_t cap = len[i] + 2;
        if (!reserve((void **)&d->etoks, &d->etoks_cap, used + cap, sizeof *d->etoks)) {
            st = rp_errorf(RP_ERR_NOMEM, "semantic: out of memory");
            break;
        }
        int32_t k = 0;
        rp_status ts = rp_embed_tokenize(s->p.embed_model, d->text + off[i], len[i], d->etoks + used, (int32_t)cap, &k);
        if (ts != RP_OK || k <= 0) continue;   /* this text gets no vector */
        if (k > ctx) k = ctx;                   /* the embedding model's window: the head of a long text */
        toff[m] = used;
        nt[m] = k;
        idx[m++] = i;
        used += (size_t)k;
    }
    if (st == RP_OK && m > 0) {
        for (int32_t j = 0; j < m; j++) inputs[j] = d->etoks + toff[j];
        const size_t need = (size_t)m * (size_t)s->n_embd;
        if (!reserve((void **)&d->full, &d->full_cap, need, sizeof *d->full)) st = rp_errorf(RP_ERR_NOMEM, "semantic: out of memory");
        size_t got = 0;
        if (st == RP_OK) st = rp_embed(d->emb, inputs, nt, m, d->full, d->full_cap, &got);
        for (int32_t j = 0; st == RP_OK && j < m; j++) {
            float *v = vecs + (size_t)idx[j] * (size_t)s->dim;
            memcpy(v, d->full + (size_t)j * (size_t)s->n_embd, sizeof *v * (size_t)s->dim);
            normalize(v, s->dim);
            ok[idx[j]] = true;
        }
    }
    free(inputs);
    free(nt);
    free(idx);
    free(toff);
    return st;
}

rp_status rp_semantic_index(void *user, const rp_token *const *toks, const int32_t *n, int32_t n_chunks,
                            rp_store_index *out) {
    rp_semantic *s = user;
    if (!s || n_chunks <= 0) return RP_OK;
    pthread_mutex_lock(&s->ix_mu);
    side *d = &s->ix;
    size_t *off = malloc(sizeof *off * (size_t)n_chunks), *len = malloc(sizeof *len * (size_t)n_chunks);
    bool *ok = malloc(sizeof *ok * (size_t)n_chunks);
    float *vecs = s->dim > 0 ? malloc(sizeof *vecs * (size_t)n_chunks * (size_t)s->dim) : NULL;
    rp_status st = off && len && ok && (vecs || s->dim == 0) ? RP_OK : rp_errorf(RP_ERR_NOMEM, "semantic: out of memory");
    size_t at = 0;
    for (int32_t i = 0; i < n_chunks && st == RP_OK; i++) {
        memset(&out[i], 0, sizeof out[i]);
        off[i] = at;
        st = detok(s, d, at, toks[i], n[i], &len[i]);
        at += len[i] + 1;
    }
    for (int32_t i = 0; i < n_chunks && st == RP_OK && s->p.terms; i++) {
        if (len[i] == 0) continue;
        const int32_t cap = (int32_t)(len[i] / (RP_TERM_MIN_CHARS + 1) + 1);
        out[i].terms = malloc(sizeof *out[i].terms * (size_t)cap);
        if (!out[i].terms) {
            st = rp_errorf(RP_ERR_NOMEM, "semantic: out of memory");
            break;
        }
        const int32_t nt = rp_terms_extract(d->text + off[i], len[i], out[i].terms, cap);
        out[i].n_terms = nt < cap ? nt : cap;
    }
    if (st == RP_OK && s->dim > 0) {
        /* a failed embedding leaves the chunks their terms */
        if (embed_texts(s, d, off, len, n_chunks, vecs, ok) == RP_OK)
            for (int32_t i = 0; i < n_chunks; i++) {
                if (!ok[i]) continue;
                out[i].vec = malloc(sizeof *out[i].vec * (size_t)s->dim);
                if (!out[i].vec) continue;
                memcpy(out[i].vec, vecs + (size_t)i * (size_t)s->dim, sizeof *out[i].vec * (size_t)s->dim);
                out[i].dim = s->dim;
                out[i].vec_src = s->vec_src;
            }
    }
    if (st != RP_OK)
        for (int32_t i = 0; i < n_chunks; i++) {
            free(out[i].terms);
            free(out[i].vec);
            memset(&out[i], 0, sizeof out[i]);
        }
    free(off);
    free(len);
    free(ok);
    free(vecs);
    pthread_mutex_unlock(&s->ix_mu);
    return st;
}

rp_status rp_semantic_query(rp_semantic *s, const rp_token *toks, int32_t n, int32_t window, bool vectors,
                            const rp_term **terms, int32_t *n_terms, const float **vecs, int32_t *n_vec, int32_t *dim) {
    *terms = NULL;
    *vecs = NULL;
    *n_terms = *n_vec = *dim = 0;
    if (!s || !toks || n <= 0) return RP_OK;
    side *d = &s->q;
    size_t len = 0;
    if (s->p.terms) {
        RP_TRY(detok(s, d, 0, toks, n, &len));
        const int32_t cap = (int32_t)(len / (RP_TERM_MIN_CHARS + 1) + 1);
        if (cap > d->terms_cap) {
            rp_term *nt = realloc(d->terms, sizeof *nt * (size_t)cap);
            if (!nt) return rp_errorf(RP_ERR_NOMEM, "semantic: out of memory");
            d->terms = nt;
            d->terms_cap = cap;
        }
        const int32_t k = rp_terms_extract(d->text, len, d->terms, cap);
        *terms = d->terms;
        *n_terms = k < cap ? k : cap;
    }
    if (!vectors || s->dim == 0) return RP_OK;
    if (window < 16) window = 16;
    if ((n + window - 1) / window > RP_SEM_QUERY_WINDOWS) window = (n + RP_SEM_QUERY_WINDOWS - 1) / RP_SEM_QUERY_WINDOWS;
    const int32_t nw = (n + window - 1) / window;
    if (!d->vecs) {
        d->vecs = malloc(sizeof *d->vecs * (size_t)RP_SEM_QUERY_WINDOWS * (size_t)s->dim);
        if (!d->vecs) return rp_errorf(RP_ERR_NOMEM, "semantic: out of memory");
    }
    size_t off[RP_SEM_QUERY_WINDOWS] = {0}, wl[RP_SEM_QUERY_WINDOWS] = {0};
    bool ok[RP_SEM_QUERY_WINDOWS] = {false};
    size_t at = s->p.terms ? len + 1 : 0;   /* after the whole run's text (detok may move d->text: offsets only) */
    for (int32_t w = 0; w < nw; w++) {
        const int32_t a = w * window, b = a + window < n ? a + window : n;
        off[w] = at;
        RP_TRY(detok(s, d, at, toks + a, b - a, &wl[w]));
        at += wl[w] + 1;
    }
    RP_TRY(embed_texts(s, d, off, wl, nw, d->vecs, ok));
    /* the windows that got a vector, packed */
    int32_t k = 0;
    for (int32_t w = 0; w < nw; w++) {
        if (!ok[w]) continue;
        if (k != w) memmove(d->vecs + (size_t)k * s->dim, d->vecs + (size_t)w * s->dim, sizeof *d->vecs * (size_t)s->dim);
        k++;
    }
    *vecs = d->vecs;
    *n_vec = k;
    *dim = s->dim;
    return RP_OK;
}
