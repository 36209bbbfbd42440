/* engine_match.c — lookup: what the chunk cache holds for a chunked prompt (exact prefix, a partial head, whole
 * chunks by content, sub-chunks from the flash store), recorded as placements and per-token row kinds; and
 * rp_reuse_put_vector, the caller's vectors of cached chunks for the sub-chunk search. */
#include "reuse/engine_internal.h"

#include <stdlib.h>

#include "core/error.h"

/* Whether a chunk found by tokens (a partial or sub-chunk match, which no
 * hash selects) was cached under this call's namespace: its hash is that of
 * its tokens under the namespace's salt. */
static bool in_namespace(const rp_reuse *e, const rp_chunk *ch) {
    return rp_chunk_hash(ch->tokens, ch->n_tokens, e->cur_salt) == ch->hash;
}

/* Sub-chunk reuse: every run of new tokens (at least subchunk_min long, the
 * final token excluded) is searched in the flash store (keyword candidates,
 * then a linear-time longest-common-substring pass); each match is confirmed
 * token by token against the stored chunk and placed re-rotated like a whole
 * chunk, so an edited document still reuses its unchanged stretches. Only
 * chunks on flash are candidates (the store holds the keyword index). */
static void match_subchunks(rp_reuse *e, const rp_token *toks, int32_t n, int32_t P_tok, bool place, rp_reuse_stats *st,
                            int32_t *first_approx) {
    if (!rp_chunk_cache_has_store(e->cache)) return;
    uint8_t *tk = e->tok_kind;
    const int32_t min = e->cur.subchunk_min;
    enum { CAP = 16 };
    rp_subchunk_match mt[CAP];
    for (int32_t a = P_tok; a < n - 1;) {
        if (tk[a] != RP_ROW_NEW) { a++; continue; }
        int32_t b = a;
        while (b < n - 1 && tk[b] == RP_ROW_NEW) b++;
        if (b - a >= min) {
            double tf = rp_reuse_now_ms();
            int32_t nm = 0;
            rp_subchunk_query q = rp_subchunk_default_query(min);
            if (e->qvec) {   /* the caller's vector (its own embedding space: vectors it stored itself) */
                q.qvec = e->qvec;
                q.n_qvec = 1;
                q.dim = e->qdim;
                q.k_vec = RP_REUSE_VEC_K;
            }
            if (e->sem) {
                /* the run's own text: its terms, and (without a caller's vector) its embedding per window */
                const double ts = rp_reuse_now_ms();
                const rp_term *terms = NULL;
                const float *vecs = NULL;
                int32_t nt = 0, nv = 0, dim = 0;
                if (rp_semantic_query(e->sem, toks + a, b - a, e->cur.chunking.avg_len, !e->qvec, &terms, &nt, &vecs, &nv,
                                      &dim) == RP_OK) {
                    q.terms = terms;
                    q.n_terms = nt;
                    if (!e->qvec && nv > 0) {
                        q.qvec = vecs;
                        q.n_qvec = nv;
                        q.dim = dim;
                        q.k_vec = RP_REUSE_VEC_K / nv > 2 ? RP_REUSE_VEC_K / nv : 2;
                        q.vec_src = rp_semantic_vec_src(e->sem);
                    }
                }
                st->semantic_ms += rp_reuse_now_ms() - ts;
            }
            rp_status fs = rp_chunk_cache_find_subchunks_q(e->cache, toks + a, b - a, &q, mt, CAP, &nm);
            if (fs != RP_OK) nm = 0;
            for (int32_t k = 0; k < nm; k++) {
                const rp_subchunk_match *x = &mt[k];
                rp_chunk *ch = rp_chunk_cache_get(e->cache, x->chunk_id);
                if (!ch) continue;
                const int32_t at = a + x->prompt_off;
                bool ok = x->len >= min && x->chunk_off >= 0 && x->chunk_off + x->len <= ch->n_tokens && at + x->len <= b &&
                          in_namespace(e, ch);
                for (int32_t t = 0; ok && t < x->len; t++) ok = ch->tokens[x->chunk_off + t] == toks[at + t] && tk[at + t] == RP_ROW_NEW;
                if (!ok) {   /* never trust an index hit without comparing tokens */
                    rp_chunk_unpin(e->cache, ch);
                    continue;
                }
                if (place) rp_reuse_add_placement(e, ch, x->chunk_off, x->len, at, true);
                else rp_chunk_unpin(e->cache, ch);
                for (int32_t t = at; t < at + x->len; t++) tk[t] = RP_ROW_REUSE;
                if (at < *first_approx) *first_approx = at;
                st->n_nonprefix += x->len;
                st->n_subchunk += x->len;
            }
            st->match_ms += rp_reuse_now_ms() - tf;
        }
        a = b;
    }
}

/* Finds what the cache holds for the chunked prompt in e->spans and, when
 * kv != NULL, places it: exact prefix chunks (pinned in e->info until commit),
 * the common head of one more chunk, then (full/blend) any chunk by content,
 * re-rotated. Fills e->tok_kind for tokens >= *P_tok: RP_ROW_REUSE or
 * RP_ROW_NEW. *first_approx is the first token whose KV is not exact. */
void rp_reuse_resolve(rp_reuse *e, const rp_token *toks, int32_t n, rp_kv *kv, rp_reuse_stats *st, int32_t *P_out,
                      int32_t *nm_out, int32_t *first_approx) {
    const int32_t ns = e->n_spans;
    double tm = rp_reuse_now_ms();
    rp_chunk **matched = e->matched;
    int32_t nm = rp_chunk_cache_match_prefix(e->cache, toks, e->spans, ns, matched);
    /* prefix mode promises exact KV: only exact chunks. full / blend also take
     * approximate chunks along an identical token path: their KV is what this
     * same prefix produced before, so the result repeats that earlier one.
     * At r = 1 full / blend promise exact prefill, so exact chunks only. */
    const bool approx_ok = (e->cur.mode == RP_REUSE_FULL || e->cur.mode == RP_REUSE_BLEND) && e->cur.ratio < 1.0f;
    int32_t keep = 0;
    while (keep < nm && (matched[keep]->exact || approx_ok) && matched[keep]->pos0 == e->spans[keep].begin) keep++;
    for (int32_t i = keep; i < nm; i++) rp_chunk_unpin(e->cache, matched[i]);
    nm = keep;
    int32_t P = nm > 0 ? e->spans[nm - 1].begin + e->spans[nm - 1].len : 0;
    rp_chunk *partial = NULL;
    int32_t n_common = 0;
    /* a partial head only helps when the whole next chunk is not cached elsewhere */
    bool next_cached = false;
    if (nm < ns && e->cur.mode != RP_REUSE_PREFIX) {
        rp_chunk *probe = rp_chunk_cache_find(e->cache, toks, &e->spans[nm]);
        if (probe) {
            next_cached = true;
            rp_chunk_unpin(e->cache, probe);
        }
    }
    if (nm < ns && !next_cached) {
        partial = rp_chunk_cache_match_partial(e->cache, nm > 0 ? matched[nm - 1] : NULL, toks + P, e->spans[nm].len,
                                               &n_common);
        /* root chunks of every namespace share the root: a partial match must be this call's */
        if (partial && ((!partial->exact && !approx_ok) || partial->pos0 != P || !in_namespace(e, partial))) {
            rp_chunk_unpin(e->cache, partial);
            partial = NULL;
            n_common = 0;
        }
    }
    st->match_ms += rp_reuse_now_ms() - tm;
    e->n_pl = 0;
    *first_approx = n;
    for (int32_t i = 0; i < nm; i++) {
        if (kv) rp_reuse_add_placement(e, matched[i], 0, matched[i]->n_tokens, e->spans[i].begin, false);
        e->info[i].prefix_chunk = matched[i];   /* stays pinned until commit */
        e->info[i].exact = matched[i]->exact;
        if (!matched[i]->exact && e->spans[i].begin < *first_approx) *first_approx = e->spans[i].begin;
    }
    int32_t P_tok = P;
    if (partial) {
        if (!partial->exact && P < *first_approx) *first_approx = P;
        P_tok += n_common;
        if (kv) rp_reuse_add_placement(e, partial, 0, n_common, P, true);
        else rp_chunk_unpin(e->cache, partial);
    }
    if (P_tok >= n) {   /* the last token is always computed: its logits start generation */
        P_tok = n - 1;
        if (kv && e->n_pl > 0) {   /* the last placement must stop short of it */
            placement *lp = &e->pl[e->n_pl - 1];
            if (lp->cell0 + lp->n > P_tok) lp->n = P_tok - lp->cell0;
            if (lp->n <= 0) {
                if (lp->unpin) rp_chunk_unpin(e->cache, lp->ch);
                e->n_pl--;
            }
        }
    }
    if (kv) kv->n = P_tok;
    st->n_prefix = P_tok;
    /* of those, the tokens whose KV is exactly a plain prefill's (chunks
     * written by an exact run), apart from ones an earlier approximate run wrote */
    for (int32_t i = 0; i < nm; i++)
        if (matched[i]->exact) {
            const int32_t b = e->spans[i].begin, l = e->spans[i].len;
            st->n_prefix_exact += (b + l < P_tok ? b + l : P_tok) - b;
        }
    if (partial && partial->exact && P < P_tok) st->n_prefix_exact += (P + n_common < P_tok ? P + n_common : P_tok) - P;

    uint8_t *tk = e->tok_kind;
    for (int32_t t = P_tok; t < n; t++) tk[t] = RP_ROW_NEW;
    if (e->cur.mode == RP_REUSE_FULL || e->cur.mode == RP_REUSE_BLEND) {
        for (int32_t i = nm; i < ns; i++) {
            const rp_chunk_span *sp = &e->spans[i];
            if (sp->begin < P_tok) continue;   /* partially covered by the prefix: its rest is computed */
            double tf = rp_reuse_now_ms();
            rp_chunk *ch = rp_chunk_cache_find(e->cache, toks, sp);
            st->match_ms += rp_reuse_now_ms() - tf;
            if (!ch) continue;
            if (kv) rp_reuse_add_placement(e, ch, 0, sp->len, sp->begin, true);
            else rp_chunk_unpin(e->cache, ch);
            for (int32_t t = sp->begin; t < sp->begin + sp->len; t++) tk[t] = RP_ROW_REUSE;
            if (sp->begin < *first_approx) *first_approx = sp->begin;
            st->n_nonprefix += sp->len;
        }
        if (e->cur.subchunk_min > 0) match_subchunks(e, toks, n, P_tok, kv != NULL, st, first_approx);
    }
    *P_out = P_tok;
    *nm_out = nm;
}

rp_status rp_reuse_put_vector(rp_reuse *e, const rp_token *toks, int32_t n, const float *v, int32_t dim) {
    if (!toks || n <= 0 || !v || dim <= 0) return rp_errorf(RP_ERR_INVALID_ARG, "reuse: put_vector needs tokens and a vector");
    if (n > e->max_tokens) return rp_errorf(RP_ERR_RANGE, "reuse: %d tokens exceed the engine's %d", n, e->max_tokens);
    RP_TRY(rp_reuse_begin_call(e, NULL));
    /* own span list: the engine's holds the pending prompt until its commit */
    rp_chunk_span *spans = malloc(sizeof *spans * (size_t)n);
    if (!spans) return rp_errorf(RP_ERR_NOMEM, "reuse: out of memory");
    int32_t ns = 0, found = 0;
    rp_status st = rp_chunk_split(toks, n, NULL, 0, e->cur.chunking, e->cur_salt, spans, n, &ns);
    for (int32_t i = 0; st == RP_OK && i < ns; i++) {
        rp_chunk *ch = rp_chunk_cache_find(e->cache, toks, &spans[i]);
        if (!ch) continue;
        st = rp_chunk_cache_put_vector(e->cache, ch->id, v, dim);
        rp_chunk_unpin(e->cache, ch);
        found++;
    }
    free(spans);
    if (st == RP_OK && found == 0) st = rp_errorf(RP_ERR_NOT_FOUND, "reuse: no cached chunk holds these %d tokens", n);
    return st;
}
