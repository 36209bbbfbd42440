/* session.c — feeding tokens through the forward pass for one sequence and sampling from its logits. */
#include "model/session.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"

struct rp_session {
    rp_ctx *ctx;
    rp_kv *kv;
    rp_sampler *smp;
    rp_batch batch;
    float *last_logits;   /* [n_vocab] */
    bool have_logits;
};

rp_session_params rp_session_default_params(void) {
    rp_session_params p = {.n_ctx = 4096, .kv_type = RP_TYPE_F16, .sampler = rp_sampler_default_params()};
    return p;
}

rp_status rp_session_create(rp_ctx *ctx, rp_session_params p, rp_session **out) {
    *out = NULL;
    const rp_model *m = rp_ctx_model(ctx);
    rp_ctx_params cp = rp_ctx_get_params(ctx);
    if (p.n_ctx > cp.n_ctx_max)
        return rp_errorf(RP_ERR_INVALID_ARG, "session: n_ctx %d exceeds the context's n_ctx_max %d", p.n_ctx, cp.n_ctx_max);
    rp_session *s = calloc(1, sizeof *s);
    if (!s) return rp_errorf(RP_ERR_NOMEM, "session: out of memory");
    s->ctx = ctx;
    rp_status st = rp_kv_create_swa(m, p.n_ctx, p.kv_type, p.swa_cells, &s->kv);
    if (st == RP_OK) st = rp_sampler_create(p.sampler, m->hp.n_vocab, &s->smp);
    if (st == RP_OK) st = rp_batch_init(&s->batch, cp.n_batch);
    if (st == RP_OK && !(s->last_logits = malloc(sizeof(float) * (size_t)m->hp.n_vocab)))
        st = rp_errorf(RP_ERR_NOMEM, "session: out of memory");
    if (st != RP_OK) {
        rp_session_free(s);
        return st;
    }
    *out = s;
    return RP_OK;
}

void rp_session_free(rp_session *s) {
    if (!s) return;
    rp_kv_free(s->kv);
    rp_sampler_free(s->smp);
    if (s->batch.cap) rp_batch_free(&s->batch);
    free(s->last_logits);
    free(s);
}

rp_status rp_session_feed(rp_session *s, const rp_token *toks, int32_t n) {
    if (n <= 0) return RP_OK;
    if ((int64_t)s->kv->n + n > s->kv->n_ctx)
        return rp_errorf(RP_ERR_FULL, "session: %d more tokens exceed the context (%d of %d cells used)", n, s->kv->n,
                         s->kv->n_ctx);
    const int32_t nb = s->batch.cap;
    const int32_t n_vocab = rp_ctx_model(s->ctx)->hp.n_vocab;
    for (int32_t off = 0; off < n; off += nb) {
        int32_t cnt = n - off < nb ? n - off : nb;
        rp_batch_clear(&s->batch);
        int32_t base = s->kv->n;
        for (int32_t i = 0; i < cnt; i++)
            rp_batch_add(&s->batch, toks[off + i], 0, base + i, base + i, off + i == n - 1);
        RP_TRY(rp_forward(s->ctx, &s->batch, &s->kv, 1));
    }
    memcpy(s->last_logits, rp_ctx_logits(s->ctx, 0), sizeof(float) * (size_t)n_vocab);
    s->have_logits = true;
    for (int32_t i = 0; i < n; i++) rp_sampler_accept(s->smp, toks[i]);
    return RP_OK;
}

rp_token rp_session_sample(rp_session *s) {
    if (!s->have_logits) return -1;
    return rp_sampler_sample(s->smp, s->last_logits);
}

const float *rp_session_logits(const rp_session *s) { return s->have_logits ? s->last_logits : NULL; }
int32_t rp_session_n_past(const rp_session *s) { return s->kv->n; }
rp_kv *rp_session_kv(rp_session *s) { return s->kv; }
rp_sampler *rp_session_sampler(rp_session *s) { return s->smp; }

rp_status rp_session_adopt(rp_session *s, const rp_token *toks, int32_t n, const float *logits) {
    if (n <= 0 || n != s->kv->n)
        return rp_errorf(RP_ERR_INVALID_ARG, "session: adopt %d tokens but the cache holds %d", n, s->kv->n);
    memcpy(s->last_logits, logits, sizeof(float) * (size_t)rp_ctx_model(s->ctx)->hp.n_vocab);
    s->have_logits = true;
    rp_sampler_reset(s->smp);
    for (int32_t i = 0; i < n; i++) rp_sampler_accept(s->smp, toks[i]);
    return RP_OK;
}

rp_status rp_session_copy(rp_session *dst, const rp_session *src, const rp_token *toks, int32_t n) {
    if (dst == src) return RP_OK;
    if (rp_ctx_model(dst->ctx) != rp_ctx_model(src->ctx))
        return rp_errorf(RP_ERR_INVALID_ARG, "session: copy between sessions of different models");
    RP_TRY(rp_kv_copy(dst->kv, src->kv));
    if (src->have_logits)
        memcpy(dst->last_logits, src->last_logits, sizeof(float) * (size_t)rp_ctx_model(src->ctx)->hp.n_vocab);
    dst->have_logits = src->have_logits;
    rp_sampler_reset(dst->smp);
    for (int32_t i = 0; i < n; i++) rp_sampler_accept(dst->smp, toks[i]);
    return RP_OK;
}

void rp_session_reset(rp_session *s) {
    rp_kv_clear(s->kv);
    rp_sampler_reset(s->smp);
    s->have_logits = false;
}
