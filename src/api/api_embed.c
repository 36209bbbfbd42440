/* api_embed.c — sequence embeddings: pooled (none / mean / cls / last) final hidden states after the output norm,
 * L2-normalized, several inputs packed into each forward pass (reprise.h: rp_embedder). Decoders run causally
 * through rp_forward_hidden with a KV cache per slot; encoders (bert, nomic-bert: encoder.h) see each input whole,
 * several inputs packed into one bidirectional pass. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "reprise.h"
#include "core/error.h"
#include "kv/kv.h"
#include "model/encoder.h"
#include "model/forward.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

/* Slot 0 holds an input of any length (n_ctx cells); slots 1..n_seq inputs of at most n_batch tokens. */
struct rp_embedder {
    const rp_model *m;
    rp_embedder_params p;     /* resolved: pooling is never RP_POOLING_MODEL, n_ctx > 0 */
    int32_t short_cells;      /* cells of slots 1..n_seq */
    rp_ctx *ctx;
    rp_batch batch;
    int32_t n_slots;          /* n_seq + 1 */
    rp_kv **kv;               /* [n_slots] */
    int32_t *slot_input;      /* [n_slots] the input a slot holds in the current pass */
    size_t *slot_base;        /* [n_slots] that input's first float in the output */
    /* encoders: no rp_ctx, batch or KV; each pass holds whole inputs */
    rp_bert_ctx *enc;
    rp_token *enc_tok;        /* [cap] the pass's tokens */
    int32_t *enc_start;       /* [n_slots + 1] where each input of the pass starts */
};

int rp_pooling_parse(const char *name) {
    if (!name) return -1;
    if (!strcmp(name, "none")) return RP_POOLING_NONE;
    if (!strcmp(name, "mean")) return RP_POOLING_MEAN;
    if (!strcmp(name, "cls")) return RP_POOLING_CLS;
    if (!strcmp(name, "last")) return RP_POOLING_LAST;
    return -1;
}

const char *rp_pooling_name(rp_pooling p) {
    switch (p) {
    case RP_POOLING_MODEL: return "model";
    case RP_POOLING_NONE: return "none";
    case RP_POOLING_MEAN: return "mean";
    case RP_POOLING_CLS: return "cls";
    case RP_POOLING_LAST: return "last";
    }
    return "?";
}

rp_pooling rp_model_pooling(const rp_model *m) {
    const int32_t t = m && m->hp.has_pooling ? m->hp.pooling_type : -1;
    return t >= RP_POOLING_NONE && t <= RP_POOLING_LAST ? (rp_pooling)t : RP_POOLING_MEAN;
}

rp_embedder_params rp_embedder_default_params(void) {
    rp_embedder_params p = {.pooling = RP_POOLING_MODEL, .normalize = true, .n_ctx = 0, .n_batch = 512, .n_seq = 4,
                            .n_threads = 2, .kv_type = RP_KV_F16};
    return p;
}

void rp_embedder_free(rp_embedder *e) {
    if (!e) return;
    for (int32_t i = 0; e->kv && i < e->n_slots; i++) rp_kv_free(e->kv[i]);
    free(e->kv);
    free(e->slot_input);
    free(e->slot_base);
    rp_bert_ctx_free(e->enc);
    free(e->enc_tok);
    free(e->enc_start);
    if (e->batch.cap) rp_batch_free(&e->batch);
    rp_ctx_free(e->ctx);
    free(e);
}

rp_status rp_embedder_create(const rp_model *m, const rp_embedder_params *pp, rp_embedder **out) {
    if (!out) return rp_errorf(RP_ERR_INVALID_ARG, "embedder: NULL result");
    *out = NULL;
    if (!m) return rp_errorf(RP_ERR_INVALID_ARG, "embedder: NULL model");
    if (!m->layers) return rp_errorf(RP_ERR_INVALID_ARG, "embedder: model '%s' was loaded vocab-only", m->name);
    const rp_embedder_params def = rp_embedder_default_params();
    rp_embedder_params p = pp ? *pp : def;
    if (p.pooling == RP_POOLING_MODEL && m->hp.has_pooling && m->hp.pooling_type == 4)
        return rp_errorf(RP_ERR_UNSUPPORTED,
                         "embedder: '%s' is a reranker (pooling_type 4, rank: a classification head), which is not "
                         "supported; choose a pooling to embed with it anyway", m->name);
    if (p.pooling == RP_POOLING_MODEL) p.pooling = rp_model_pooling(m);
    if (p.pooling < RP_POOLING_NONE || p.pooling > RP_POOLING_LAST)
        return rp_errorf(RP_ERR_INVALID_ARG, "embedder: pooling %d (none, mean, cls or last)", (int)p.pooling);
    if (p.kv_type != RP_KV_F16 && p.kv_type != RP_KV_F32 && p.kv_type != RP_KV_Q8_0)
        return rp_errorf(RP_ERR_INVALID_ARG, "embedder: KV type %d (f16, f32 or q8_0)", (int)p.kv_type);
    if (p.n_ctx == 0) p.n_ctx = m->hp.n_ctx_train < 4096 ? m->hp.n_ctx_train : 4096;
    if (p.n_ctx < 1 || p.n_ctx > (1 << 20))
        return rp_errorf(RP_ERR_RANGE, "embedder: n_ctx %d not in [1, %d]", p.n_ctx, 1 << 20);
    if (p.n_batch < 1 || p.n_batch > 65536)
        return rp_errorf(RP_ERR_RANGE, "embedder: n_batch %d not in [1, 65536]", p.n_batch);
    if (p.n_seq < 1 || p.n_seq > 256) return rp_errorf(RP_ERR_RANGE, "embedder: n_seq %d not in [1, 256]", p.n_seq);
    if (p.n_threads < 1 || p.n_threads > 256)
        return rp_errorf(RP_ERR_RANGE, "embedder: n_threads %d not in [1, 256]", p.n_threads);
    if (m->bert && m->bert->pos_embd.data && p.n_ctx > m->hp.n_ctx_train)
        return rp_errorf(RP_ERR_RANGE, "embedder: n_ctx %d exceeds the %d learned positions of '%s' (%s)", p.n_ctx,
                         m->hp.n_ctx_train, m->name, rp_arch_name(m->hp.arch));
    rp_embedder *e = calloc(1, sizeof *e);
    if (!e) return rp_errorf(RP_ERR_NOMEM, "embedder: out of memory");
    e->m = m;
    e->p = p;
    e->short_cells = p.n_batch < p.n_ctx ? p.n_batch : p.n_ctx;
    e->n_slots = p.n_seq + 1;
    if (m->bert) {   /* an encoder: passes of up to max(n_ctx, n_batch) tokens, whole inputs, n_seq + 1 of them */
        const int32_t cap = p.n_ctx > p.n_batch ? p.n_ctx : p.n_batch;
        rp_status st = rp_bert_ctx_create(m, cap, p.n_threads, &e->enc);
        if (st == RP_OK) {
            e->enc_tok = malloc(sizeof *e->enc_tok * (size_t)cap);
            e->enc_start = malloc(sizeof *e->enc_start * (size_t)(e->n_slots + 1));
            if (!e->enc_tok || !e->enc_start) st = rp_errorf(RP_ERR_NOMEM, "embedder: out of memory");
        }
        if (st != RP_OK) {
            rp_embedder_free(e);
            return st;
        }
        *out = e;
        return RP_OK;
    }
    rp_ctx_params cp = rp_ctx_default_params();
    cp.n_batch = p.n_batch;
    cp.n_outputs = 1;   /* no logits are computed; the context wants room for one */
    cp.n_ctx_max = p.n_ctx;
    cp.n_threads = p.n_threads;
    rp_status st = rp_ctx_create(m, cp, &e->ctx);
    if (st == RP_OK) st = rp_batch_init(&e->batch, p.n_batch);
    if (st == RP_OK) {
        e->kv = calloc((size_t)e->n_slots, sizeof *e->kv);
        e->slot_input = calloc((size_t)e->n_slots, sizeof *e->slot_input);
        e->slot_base = calloc((size_t)e->n_slots, sizeof *e->slot_base);
        if (!e->kv || !e->slot_input || !e->slot_base) st = rp_errorf(RP_ERR_NOMEM, "embedder: out of memory");
    }
    for (int32_t i = 0; st == RP_OK && i < e->n_slots; i++)
        st = rp_kv_create(m, i == 0 ? p.n_ctx : e->short_cells, (rp_type)p.kv_type, &e->kv[i]);
    if (st != RP_OK) {
        rp_embedder_free(e);
        return st;
    }
    *out = e;
    return RP_OK;
}

int32_t rp_embedder_n_embd(const rp_embedder *e) { return e ? e->m->hp.n_embd : 0; }
int32_t rp_embedder_n_ctx(const rp_embedder *e) { return e ? e->p.n_ctx : 0; }
rp_pooling rp_embedder_pooling(const rp_embedder *e) { return e ? e->p.pooling : RP_POOLING_MEAN; }

rp_status rp_embed_tokenize(const rp_model *m, const char *text, size_t len, rp_token *out, int32_t cap,
                            int32_t *n_out) {
    if (!n_out) return rp_errorf(RP_ERR_INVALID_ARG, "embed tokenize: NULL count");
    rp_status st = rp_tokenize(m, text, len, true, true, out, cap, n_out);
    if ((st != RP_OK && st != RP_ERR_FULL) || !rp_tokenizer_add_eos(m->tok)) return st;
    const int32_t n = *n_out;
    if (n == INT32_MAX) return rp_errorf(RP_ERR_RANGE, "embed tokenize: too many tokens");
    *n_out = n + 1;
    if (st == RP_ERR_FULL || n >= cap)
        return rp_errorf(RP_ERR_FULL, "embed tokenize: %d tokens and EOS do not fit in %d", n, cap);
    out[n] = rp_token_eos(m);
    return RP_OK;
}

static void l2_normalize(float *v, int32_t n) {
    double ss = 0;
    for (int32_t i = 0; i < n; i++) ss += (double)v[i] * v[i];
    const float k = ss > 0 ? (float)(1.0 / sqrt(ss)) : 0.0f;
    for (int32_t i = 0; i < n; i++) v[i] *= k;
}

/* An input is complete (len tokens, its output at v): the mean's division and the normalization. */
static void finish_input(const rp_embedder *e, int32_t len, float *v) {
    const int32_t E = e->m->hp.n_embd;
    if (e->p.pooling == RP_POOLING_MEAN) {
        const float k = 1.0f / (float)len;
        for (int32_t i = 0; i < E; i++) v[i] *= k;
    }
    if (!e->p.normalize) return;
    const int32_t rows = e->p.pooling == RP_POOLING_NONE ? len : 1;
    for (int32_t r = 0; r < rows; r++) l2_normalize(v + (size_t)r * (size_t)E, E);
}

/* Adds row r of the last pass to its input's output. */
static void pool_row(const rp_embedder *e, int32_t r, const int32_t *n_tokens, float *out) {
    const size_t E = (size_t)e->m->hp.n_embd;
    const float *h = rp_ctx_hidden(e->ctx, r);
    const int32_t slot = e->batch.seq[r], pos = e->batch.pos[r];
    float *v = out + e->slot_base[slot];
    switch (e->p.pooling) {
    case RP_POOLING_NONE: memcpy(v + (size_t)pos * E, h, E * sizeof *h); break;
    case RP_POOLING_MEAN:
        for (size_t i = 0; i < E; i++) v[i] += h[i];
        break;
    case RP_POOLING_CLS:
        if (pos == 0) memcpy(v, h, E * sizeof *h);
        break;
    case RP_POOLING_LAST:
        if (pos == n_tokens[e->slot_input[slot]] - 1) memcpy(v, h, E * sizeof *h);
        break;
    default: break;
    }
}

/* Encoders: whole inputs packed into passes (at most n_slots inputs, the context's rows), each attending to itself. */
static rp_status embed_encoder(rp_embedder *e, const rp_token *const *inputs, const int32_t *n_tokens, int32_t n_inputs,
                               float *out) {
    const size_t E = (size_t)e->m->hp.n_embd;
    const int32_t cap = rp_bert_ctx_cap(e->enc);
    const rp_pooling pool = e->p.pooling;
    size_t base = 0;
    for (int32_t next = 0; next < n_inputs;) {
        const int32_t first = next;
        int32_t ns = 0, rows = 0;
        e->enc_start[0] = 0;
        while (next < n_inputs && ns < e->n_slots && rows + n_tokens[next] <= cap) {   /* an input fits alone */
            memcpy(e->enc_tok + rows, inputs[next], sizeof *e->enc_tok * (size_t)n_tokens[next]);
            rows += n_tokens[next++];
            e->enc_start[++ns] = rows;
        }
        RP_TRY(rp_bert_encode(e->enc, e->enc_tok, e->enc_start, ns));
        for (int32_t s = 0; s < ns; s++) {
            const int32_t len = n_tokens[first + s], r0 = e->enc_start[s];
            float *v = out + base;
            for (int32_t r = 0; r < len; r++) {
                const float *h = rp_bert_hidden(e->enc, r0 + r);
                if (pool == RP_POOLING_NONE) memcpy(v + (size_t)r * E, h, E * sizeof *h);
                else if (pool == RP_POOLING_MEAN)
                    for (size_t i = 0; i < E; i++) v[i] += h[i];
                else if ((pool == RP_POOLING_CLS && r == 0) || (pool == RP_POOLING_LAST && r == len - 1))
                    memcpy(v, h, E * sizeof *h);
            }
            finish_input(e, len, v);
            base += E * (pool == RP_POOLING_NONE ? (size_t)len : 1);
        }
    }
    return RP_OK;
}

rp_status rp_embed(rp_embedder *e, const rp_token *const *inputs, const int32_t *n_tokens, int32_t n_inputs,
                   float *out, size_t cap, size_t *n_out) {
    if (n_out) *n_out = 0;
    if (!e || !n_out) return rp_errorf(RP_ERR_INVALID_ARG, "embed: NULL embedder or count");
    if (n_inputs < 0 || (n_inputs > 0 && (!inputs || !n_tokens)))
        return rp_errorf(RP_ERR_INVALID_ARG, "embed: %d inputs without their tokens", n_inputs);
    const int32_t E = e->m->hp.n_embd, n_vocab = e->m->hp.n_vocab;
    const bool none = e->p.pooling == RP_POOLING_NONE;
    size_t need = 0;
    for (int32_t i = 0; i < n_inputs; i++) {
        const int32_t len = n_tokens[i];
        if (len < 1) return rp_errorf(RP_ERR_INVALID_ARG, "embed: input %d is empty", i);
        if (!inputs[i]) return rp_errorf(RP_ERR_INVALID_ARG, "embed: input %d: NULL tokens", i);
        if (len > e->p.n_ctx)
            return rp_errorf(RP_ERR_RANGE, "embed: input %d has %d tokens, more than the embedder's context of %d",
                             i, len, e->p.n_ctx);
        for (int32_t t = 0; t < len; t++)
            if (inputs[i][t] < 0 || inputs[i][t] >= n_vocab)
                return rp_errorf(RP_ERR_RANGE, "embed: input %d token %d: id %d not in [0, %d)", i, t, inputs[i][t],
                                 n_vocab);
        need += (size_t)E * (none ? (size_t)len : 1);
    }
    *n_out = need;
    if (need > cap) return rp_errorf(RP_ERR_FULL, "embed: %zu floats needed, room for %zu", need, cap);
    if (need == 0) return RP_OK;
    if (!out) return rp_errorf(RP_ERR_INVALID_ARG, "embed: NULL output");
    if (!none) memset(out, 0, need * sizeof *out);   /* mean accumulates there */
    if (e->enc) return embed_encoder(e, inputs, n_tokens, n_inputs, out);
    rp_batch *b = &e->batch;
    /* the cursor: input `next` from token `off`; `carry` the slot of an input a pass left unfinished */
    int32_t next = 0, off = 0, carry = -1;
    size_t base = 0;   /* output float of input `next` */
    while (next < n_inputs) {
        const int32_t first = next;
        rp_batch_clear(b);
        for (int32_t s = 0; s < e->n_slots; s++) e->slot_input[s] = s == carry ? next : -1;
        while (next < n_inputs && b->n < b->cap) {
            const int32_t len = n_tokens[next];
            int32_t slot = carry;
            if (off == 0) {   /* a free slot: a short one when the input fits, else the long one */
                slot = -1;
                for (int32_t s = 1; len <= e->short_cells && slot < 0 && s < e->n_slots; s++)
                    if (e->slot_input[s] < 0) slot = s;
                if (slot < 0 && e->slot_input[0] < 0) slot = 0;
                if (slot < 0) break;   /* every slot this input can use is taken: run the pass */
                rp_kv_clear(e->kv[slot]);
                e->slot_input[slot] = next;
                e->slot_base[slot] = base;
            }
            const int32_t take = len - off < b->cap - b->n ? len - off : b->cap - b->n;
            for (int32_t k = 0; k < take; k++)
                (void)rp_batch_add(b, inputs[next][off + k], slot, off + k, off + k, false);   /* room checked */
            off += take;
            if (off == len) {
                base += (size_t)E * (none ? (size_t)len : 1);
                next++;
                off = 0;
                carry = -1;
            } else {
                carry = slot;
            }
        }
        RP_TRY(rp_forward_hidden(e->ctx, b, e->kv, e->n_slots));
        for (int32_t r = 0; r < b->n; r++) pool_row(e, r, n_tokens, out);
        /* inputs [first, next) are complete (an unfinished one is `next` itself) */
        for (int32_t s = 0; s < e->n_slots; s++)
            if (e->slot_input[s] >= first && e->slot_input[s] < next)
                finish_input(e, n_tokens[e->slot_input[s]], out + e->slot_base[s]);
    }
    return RP_OK;
}
