/* logprobs.c — the `logprobs` of a choice: OpenAI chat's {content: [{token, logprob, bytes, top_logprobs}]} and the
 * legacy completions' {tokens, token_logprobs, top_logprobs, text_offset}, for generated tokens [from, to). */
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "server/server_internal.h"

#define LP_BATCH 64

/* -INFINITY (and an unknown value) cannot be JSON: OpenAI reports such tokens as -9999. */
static json_t *lp_num(float x) { return json_real(isfinite(x) ? (double)x : -9999.0); }

typedef struct piece {
    char b[256];
    int32_t n;
} piece;

static void piece_of(const rp_model *m, rp_token t, piece *p) {
    p->n = t >= 0 ? rp_token_to_piece(m, t, false, p->b, (int32_t)sizeof p->b) : 0;
    if (p->n < 0) p->n = 0;
    if (p->n > (int32_t)sizeof p->b) p->n = (int32_t)sizeof p->b;
}

static json_t *piece_str(const piece *p) {
    char *clean = rp_srv_utf8_clean(p->b, (size_t)p->n);
    json_t *v = json_string(clean ? clean : "");
    free(clean);
    return v;
}

static json_t *piece_bytes(const piece *p) {
    json_t *a = json_array();
    for (int32_t i = 0; i < p->n; i++) json_array_append_new(a, json_integer((unsigned char)p->b[i]));
    return a;
}

static json_t *chat_entry(const rp_model *m, rp_token t, float lp, const rp_token *top, const float *top_lp, int32_t k) {
    piece p;
    piece_of(m, t, &p);
    json_t *e = json_object();
    json_object_set_new(e, "token", piece_str(&p));
    json_object_set_new(e, "logprob", lp_num(lp));
    json_object_set_new(e, "bytes", piece_bytes(&p));
    json_t *alts = json_array();
    for (int32_t i = 0; i < k; i++) {
        if (top[i] < 0) continue;
        piece q;
        piece_of(m, top[i], &q);
        json_t *a = json_object();
        json_object_set_new(a, "token", piece_str(&q));
        json_object_set_new(a, "logprob", lp_num(top_lp[i]));
        json_object_set_new(a, "bytes", piece_bytes(&q));
        json_array_append_new(alts, a);
    }
    json_object_set_new(e, "top_logprobs", alts);
    return e;
}

json_t *rp_srv_logprobs_json(rp_srv_call *c, int32_t from, int32_t to) {
    if (!c->req.logprobs || !c->job) return NULL;
    const rp_model *m = rp_backend_model(c->srv->b);
    const int32_t k = c->req.top_logprobs;
    const bool chat = c->ep == RP_EP_CHAT;
    json_t *content = NULL, *tokens = NULL, *token_lp = NULL, *tops = NULL, *offs = NULL;
    if (chat) content = json_array();
    else tokens = json_array(), token_lp = json_array(), tops = json_array(), offs = json_array();
    rp_token ids[LP_BATCH], top[LP_BATCH * RP_LOGPROBS_MAX_TOP];
    float lp[LP_BATCH], top_lp[LP_BATCH * RP_LOGPROBS_MAX_TOP];
    for (int32_t at = from; at < to;) {
        const int32_t want = to - at < LP_BATCH ? to - at : LP_BATCH;
        const int32_t n = rp_job_tokens(c->job, at, ids, want);
        if (n <= 0 || rp_job_logprobs(c->job, at, n, lp, top, top_lp) != n) break;
        for (int32_t i = 0; i < n; i++) {
            if (rp_token_is_eog(m, ids[i])) continue;   /* not part of the text */
            const rp_token *ti = top + (size_t)i * (size_t)k;
            const float *tl = top_lp + (size_t)i * (size_t)k;
            if (chat) {
                json_array_append_new(content, chat_entry(m, ids[i], lp[i], ti, tl, k));
                continue;
            }
            piece p;
            piece_of(m, ids[i], &p);
            json_array_append_new(tokens, piece_str(&p));
            json_array_append_new(token_lp, lp_num(lp[i]));
            json_array_append_new(offs, json_integer((json_int_t)c->lp_offset));
            c->lp_offset += (size_t)p.n;
            json_t *d = json_object();
            for (int32_t a = 0; a < k; a++) {
                if (ti[a] < 0) continue;
                piece q;
                piece_of(m, ti[a], &q);
                char *key = rp_srv_utf8_clean(q.b, (size_t)q.n);
                if (key) json_object_set_new(d, key, lp_num(tl[a]));
                free(key);
            }
            json_array_append_new(tops, d);
        }
        at += n;
    }
    json_t *o = json_object();
    if (chat) {
        json_object_set_new(o, "content", content);
        json_object_set_new(o, "refusal", json_null());
    } else {
        json_object_set_new(o, "tokens", tokens);
        json_object_set_new(o, "token_logprobs", token_lp);
        json_object_set_new(o, "top_logprobs", tops);
        json_object_set_new(o, "text_offset", offs);
    }
    return o;
}

json_t *rp_srv_take_logprobs(rp_srv_call *c) {
    const int32_t to = c->n_counted;
    if (!c->req.logprobs || (c->req.stream && to <= c->lp_sent)) return json_null();
    json_t *o = rp_srv_logprobs_json(c, c->lp_sent, to);
    c->lp_sent = to;
    return o ? o : json_null();
}
