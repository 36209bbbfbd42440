/* spec.c — speculative decoding: the rejection rule, prompt-lookup drafting, and the n-gram / self (early-exit) / draft-model drafters. */
#include "sched/spec.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"

/* ------------------------------------------------------------ verification */

bool rp_spec_accept(rp_sampler *s, const float *p, const float *q, rp_token x, int32_t n, float *resid,
                    rp_token *out) {
    const double px = p[x], qx = q ? (double)q[x] : 1.0;
    const double u = rp_sampler_uniform(s);
    /* u < p/q without dividing; p >= q always accepts since u < 1 */
    if (qx > 0 && u * qx < px) {
        *out = x;
        return true;
    }
    double tot = 0;
    for (int32_t i = 0; i < n; i++) {
        double qi = q ? (double)q[i] : (i == x ? 1.0 : 0.0);
        double r = (double)p[i] - qi;
        resid[i] = r > 0 ? (float)r : 0.0f;
        tot += resid[i];
    }
    /* no residual mass means p == q up to rounding; then rejection had
     * probability ~0 and p itself is the right law */
    *out = tot > 0 ? rp_sampler_draw(s, resid, n) : rp_sampler_draw(s, p, n);
    return false;
}

/* ------------------------------------------------------------ prompt lookup */

int32_t rp_ngram_draft(const rp_token *toks, int32_t n_tok, int32_t g_min, int32_t g_max, int32_t want,
                       rp_token *out) {
    if (want <= 0 || n_tok < 2) return 0;
    if (g_min < 1) g_min = 1;
    if (g_max > n_tok - 1) g_max = n_tok - 1;
    for (int32_t g = g_max; g >= g_min; g--) {
        const rp_token *suf = toks + n_tok - g;
        /* most recent earlier occurrence first: it reflects the current local pattern */
        for (int32_t st = n_tok - g - 1; st >= 0; st--) {
            if (toks[st] != suf[0] || memcmp(toks + st, suf, sizeof *suf * (size_t)g) != 0) continue;
            /* the continuation may run into the suffix itself and past the end
             * of the history: then it continues with what it has proposed, so
             * a periodic pattern extends to the full `want` */
            int32_t k = 0;
            for (; k < want; k++) {
                int32_t idx = st + g + k;
                out[k] = idx < n_tok ? toks[idx] : out[idx - n_tok];
            }
            return k;
        }
    }
    return 0;
}

static rp_token argmax(const float *l, int32_t n) {
    int32_t b = 0;
    for (int32_t i = 1; i < n; i++)
        if (l[i] > l[b]) b = i;
    return b;
}

/* The draft token at position j of a request from logits: greedy, or drawn
 * from the draft sampler's distribution, which is kept as q. */
static rp_token pick(rp_draft_req *r, int32_t j, const float *logits, int32_t n_vocab) {
    if (!r->smp) return argmax(logits, n_vocab);
    float *q = r->q + (size_t)j * (size_t)n_vocab;
    rp_sampler_dist(r->smp, logits, q);
    return rp_sampler_draw(r->smp, q, n_vocab);
}

/* ------------------------------------------------------------ n-gram drafter */

typedef struct {
    rp_drafter base;
    int32_t g_min, g_max;
} ngram_drafter;

static rp_status ngram_open(rp_drafter *d, int32_t seq) { (void)d; (void)seq; return RP_OK; }
static void ngram_close(rp_drafter *d, int32_t seq) { (void)d; (void)seq; }
static void ngram_rollback(rp_drafter *d, int32_t seq, int32_t n) { (void)d; (void)seq; (void)n; }
static rp_kv *no_kv(rp_drafter *d, int32_t seq) { (void)d; (void)seq; return NULL; }

static rp_status ngram_draft(rp_drafter *d, rp_draft_req *reqs, int32_t n_req, int32_t *n_fwd) {
    ngram_drafter *g = (ngram_drafter *)d;
    for (int32_t i = 0; i < n_req; i++)
        reqs[i].got = rp_ngram_draft(reqs[i].toks, reqs[i].n_tok, g->g_min, g->g_max, reqs[i].want, reqs[i].out);
    *n_fwd = 0;
    return RP_OK;
}

static void ngram_destroy(rp_drafter *d) { free(d); }

rp_status rp_drafter_ngram_create(int32_t g_min, int32_t g_max, rp_drafter **out) {
    *out = NULL;
    if (g_min < 1 || g_max < g_min || g_max > 64)
        return rp_errorf(RP_ERR_INVALID_ARG, "ngram drafter: need 1 <= g_min <= g_max <= 64 (got %d, %d)", g_min, g_max);
    ngram_drafter *g = calloc(1, sizeof *g);
    if (!g) return rp_errorf(RP_ERR_NOMEM, "ngram drafter: out of memory");
    g->base = (rp_drafter){"ngram", ngram_open, ngram_close, ngram_rollback, ngram_draft, no_kv, ngram_destroy};
    g->g_min = g_min;
    g->g_max = g_max;
    *out = &g->base;
    return RP_OK;
}

/* ------------------------------------------------------------ self drafter */

typedef struct {
    rp_drafter base;
    rp_ctx *ctx;
    rp_kv **kvs;
    int32_t max_seq, n_layers;
    rp_batch b;
    int32_t *row_req;   /* [max_seq] request of each batch row */
} self_drafter;

static rp_status self_draft(rp_drafter *d, rp_draft_req *reqs, int32_t n_req, int32_t *n_fwd) {
    self_drafter *sd = (self_drafter *)d;
    const int32_t V = rp_ctx_model(sd->ctx)->hp.n_vocab;
    int32_t maxw = 0;
    for (int32_t i = 0; i < n_req; i++) {
        reqs[i].got = 0;
        if (reqs[i].want > maxw) maxw = reqs[i].want;
    }
    *n_fwd = 0;
    /* draft position j: every request still wanting feeds its previous token
     * (the pending one for j = 0) at the next cell through the first layers */
    for (int32_t j = 0; j < maxw; j++) {
        rp_batch_clear(&sd->b);
        for (int32_t i = 0; i < n_req; i++) {
            rp_draft_req *r = &reqs[i];
            if (r->want <= j || r->got < j) continue;
            rp_token t = j == 0 ? r->toks[r->n_tok - 1] : r->out[j - 1];
            int32_t cell = r->n_tok - 1 + j;
            sd->row_req[sd->b.n] = i;
            RP_TRY(rp_batch_add(&sd->b, t, r->seq, cell, cell, true));
        }
        if (sd->b.n == 0) break;
        RP_TRY(rp_fwd_begin(sd->ctx, &sd->b, sd->kvs, sd->max_seq));
        for (int32_t l = 0; l < sd->n_layers; l++) {
            rp_ctx_layer_begin(sd->ctx, l);
            rp_fwd_qkv(sd->ctx, &sd->b, l);
            rp_fwd_store(sd->ctx, &sd->b, sd->kvs, l);
            rp_fwd_attn_ffn(sd->ctx, &sd->b, sd->kvs, l);
        }
        RP_TRY(rp_fwd_end(sd->ctx, &sd->b));
        (*n_fwd)++;
        for (int32_t row = 0; row < sd->b.n; row++) {
            rp_draft_req *r = &reqs[sd->row_req[row]];
            r->out[j] = pick(r, j, rp_ctx_logits(sd->ctx, row), V);
            r->got = j + 1;
        }
    }
    return RP_OK;
}

/* The target KV cells the draft wrote past the history belong to the target
 * session: the scheduler truncates them, nothing is cached here. */
static void self_destroy(rp_drafter *d) {
    self_drafter *sd = (self_drafter *)d;
    rp_batch_free(&sd->b);
    free(sd->row_req);
    free(sd);
}

rp_status rp_drafter_self_create(rp_ctx *target_ctx, rp_kv **kvs, int32_t max_seq, int32_t n_layers,
                                 rp_drafter **out) {
    *out = NULL;
    const rp_model *m = rp_ctx_model(target_ctx);
    if (n_layers < 1 || n_layers > m->hp.n_layer)
        return rp_errorf(RP_ERR_INVALID_ARG, "self drafter: layers %d not in [1, %d]", n_layers, m->hp.n_layer);
    if (!rp_ctx_layers_on_cpu(target_ctx, n_layers))
        return rp_errorf(RP_ERR_UNSUPPORTED, "self drafter: drafting through the first %d layers runs on the CPU, and "
                                             "the model has %d of them on the GPU: fewer draft layers, a lower -ngl, "
                                             "--no-gpu, or another drafter", n_layers,
                         n_layers - (m->hp.n_layer - rp_model_gpu_layers(m)));
    /* one row per drafting session per forward: the caller's context must
     * have n_outputs >= the sessions that draft at once */
    if (max_seq < 1) return rp_errorf(RP_ERR_INVALID_ARG, "self drafter: %d sessions", max_seq);
    self_drafter *sd = calloc(1, sizeof *sd);
    if (!sd) return rp_errorf(RP_ERR_NOMEM, "self drafter: out of memory");
    sd->base = (rp_drafter){"self", ngram_open, ngram_close, ngram_rollback, self_draft, no_kv, self_destroy};
    sd->ctx = target_ctx;
    sd->kvs = kvs;
    sd->max_seq = max_seq;
    sd->n_layers = n_layers;
    sd->row_req = malloc(sizeof *sd->row_req * (size_t)max_seq);
    rp_status st = sd->row_req ? rp_batch_init(&sd->b, max_seq) : rp_errorf(RP_ERR_NOMEM, "self drafter: out of memory");
    if (st != RP_OK) {
        if (sd->b.cap) rp_batch_free(&sd->b);
        free(sd->row_req);
        free(sd);
        return st;
    }
    *out = &sd->base;
    return RP_OK;
}

/* ------------------------------------------------------------ draft-model drafter */

typedef struct {
    rp_drafter base;
    const rp_model *m;
    rp_drafter_model_params p;
    rp_ctx *ctx;
    rp_kv **kvs;        /* [max_seq], NULL for unused slots */
    rp_batch b;
    int32_t *row_req;   /* [n_batch] request of each row with logits */
    int32_t *cur;       /* [max_seq] catch-up cursor per request */
} model_drafter;

static rp_status model_open(rp_drafter *d, int32_t seq) {
    model_drafter *md = (model_drafter *)d;
    if (seq < 0 || seq >= md->p.max_seq) return rp_errorf(RP_ERR_RANGE, "draft model: slot %d out of range", seq);
    if (md->kvs[seq]) {
        rp_kv_clear(md->kvs[seq]);
        return RP_OK;
    }
    return rp_kv_create(md->m, md->p.n_ctx, md->p.kv_type, &md->kvs[seq]);
}

static void model_close(rp_drafter *d, int32_t seq) {
    model_drafter *md = (model_drafter *)d;
    if (seq < 0 || seq >= md->p.max_seq) return;
    rp_kv_free(md->kvs[seq]);
    md->kvs[seq] = NULL;
}

static void model_rollback(rp_drafter *d, int32_t seq, int32_t n) {
    model_drafter *md = (model_drafter *)d;
    if (seq >= 0 && seq < md->p.max_seq && md->kvs[seq] && md->kvs[seq]->n > n) rp_kv_truncate(md->kvs[seq], n);
}

static rp_kv *model_kv(rp_drafter *d, int32_t seq) {
    model_drafter *md = (model_drafter *)d;
    return seq >= 0 && seq < md->p.max_seq ? md->kvs[seq] : NULL;
}

static rp_status model_draft(rp_drafter *d, rp_draft_req *reqs, int32_t n_req, int32_t *n_fwd) {
    model_drafter *md = (model_drafter *)d;
    const int32_t V = md->m->hp.n_vocab;
    int32_t maxw = 0;
    *n_fwd = 0;
    for (int32_t i = 0; i < n_req; i++) {
        rp_draft_req *r = &reqs[i];
        r->got = 0;
        rp_kv *kv = md->kvs[r->seq];
        if (!kv) return rp_errorf(RP_ERR_INTERNAL, "draft model: slot %d has no cache", r->seq);
        /* the draft KV must end before the pending token, whose logits give
         * the first draft */
        if (kv->n > r->n_tok - 1) rp_kv_truncate(kv, r->n_tok - 1);
        md->cur[i] = kv->n;
        if (r->want > maxw) maxw = r->want;
    }
    if (maxw == 0) return RP_OK;
    /* catch-up: the history tokens the draft KV lacks, n_batch rows per
     * forward across sessions; each session's last row gives draft 0 */
    for (;;) {
        rp_batch_clear(&md->b);
        int32_t n_out = 0;
        for (int32_t i = 0; i < n_req && md->b.n < md->p.n_batch; i++) {
            rp_draft_req *r = &reqs[i];
            if (r->want <= 0) continue;
            while (md->cur[i] < r->n_tok && md->b.n < md->p.n_batch) {
                int32_t c = md->cur[i]++;
                bool last = c == r->n_tok - 1;
                if (last) md->row_req[n_out++] = i;
                RP_TRY(rp_batch_add(&md->b, r->toks[c], r->seq, c, c, last));
            }
        }
        if (md->b.n == 0) break;
        RP_TRY(rp_forward(md->ctx, &md->b, md->kvs, md->p.max_seq));
        (*n_fwd)++;
        for (int32_t o = 0; o < n_out; o++) {
            rp_draft_req *r = &reqs[md->row_req[o]];
            r->out[0] = pick(r, 0, rp_ctx_logits(md->ctx, o), V);
            r->got = 1;
        }
    }
    /* autoregressive draft positions 1..maxw-1, one row per session */
    for (int32_t j = 1; j < maxw; j++) {
        rp_batch_clear(&md->b);
        for (int32_t i = 0; i < n_req; i++) {
            rp_draft_req *r = &reqs[i];
            if (r->want <= j || r->got < j) continue;
            int32_t cell = r->n_tok - 1 + j;
            md->row_req[md->b.n] = i;
            RP_TRY(rp_batch_add(&md->b, r->out[j - 1], r->seq, cell, cell, true));
        }
        if (md->b.n == 0) break;
        RP_TRY(rp_forward(md->ctx, &md->b, md->kvs, md->p.max_seq));
        (*n_fwd)++;
        for (int32_t row = 0; row < md->b.n; row++) {
            rp_draft_req *r = &reqs[md->row_req[row]];
            r->out[j] = pick(r, j, rp_ctx_logits(md->ctx, row), V);
            r->got = j + 1;
        }
    }
    return RP_OK;
}

static void model_destroy(rp_drafter *d) {
    model_drafter *md = (model_drafter *)d;
    if (md->kvs)
        for (int32_t i = 0; i < md->p.max_seq; i++) rp_kv_free(md->kvs[i]);
    free(md->kvs);
    free(md->row_req);
    free(md->cur);
    if (md->b.cap) rp_batch_free(&md->b);
    rp_ctx_free(md->ctx);
    free(md);
}

rp_status rp_drafter_model_create(const rp_model *draft, rp_drafter_model_params p, rp_drafter **out) {
    *out = NULL;
    if (!draft || !draft->layers) return rp_errorf(RP_ERR_INVALID_ARG, "draft model: no weights");
    if (p.max_seq < 1 || p.n_ctx < 1 || p.n_batch < p.max_seq || p.max_draft < 1)
        return rp_errorf(RP_ERR_INVALID_ARG, "draft model: bad params (sessions %d, n_ctx %d, n_batch %d, max draft %d)",
                         p.max_seq, p.n_ctx, p.n_batch, p.max_draft);
    model_drafter *md = calloc(1, sizeof *md);
    if (!md) return rp_errorf(RP_ERR_NOMEM, "draft model: out of memory");
    md->base = (rp_drafter){"model", model_open, model_close, model_rollback, model_draft, model_kv, model_destroy};
    md->m = draft;
    md->p = p;
    rp_ctx_params cp = rp_ctx_default_params();
    cp.n_batch = p.n_batch;
    cp.n_outputs = p.max_seq;
    cp.n_ctx_max = p.n_ctx;
    cp.n_threads = p.n_threads;
    rp_status st = rp_ctx_create(draft, cp, &md->ctx);
    if (st == RP_OK) st = rp_batch_init(&md->b, p.n_batch);
    if (st == RP_OK) {
        md->kvs = calloc((size_t)p.max_seq, sizeof *md->kvs);
        md->row_req = malloc(sizeof *md->row_req * (size_t)p.n_batch);
        md->cur = malloc(sizeof *md->cur * (size_t)p.max_seq);
        if (!md->kvs || !md->row_req || !md->cur) st = rp_errorf(RP_ERR_NOMEM, "draft model: out of memory");
    }
    if (st != RP_OK) {
        model_destroy(&md->base);
        return st;
    }
    *out = &md->base;
    return RP_OK;
}
