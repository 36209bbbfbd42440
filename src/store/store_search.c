/* store_search.c — sub-chunk search (keywords, extracted terms, dense vectors, LCS cover), vectors, co-access. */
#include "store/store_internal.h"

#include <math.h>
#include <stdlib.h>

#include "core/error.h"
#include "store/lcs.h"

/* ---- sub-chunks ---- */

typedef struct cand {
    uint64_t id;
    int32_t votes;            /* shared keywords */
    float term;               /* idf-weighted term overlap */
    float vec;                /* best cosine to a query vector, -2 when not among the nearest */
    double score;             /* votes + term: the ranking */
} cand;

static int cand_by_score(const void *a, const void *b) {
    const cand *x = a, *y = b;
    if (x->score != y->score) return x->score < y->score ? 1 : -1;
    return x->id < y->id ? -1 : x->id > y->id;
}

static int cand_by_id(const void *a, const void *b) {
    uint64_t x = ((const cand *)a)->id, y = ((const cand *)b)->id;
    return x < y ? -1 : x > y;
}

static int match_by_len(const void *a, const void *b) {
    const rp_subchunk_match *x = a, *y = b;
    if (x->len != y->len) return y->len - x->len;
    if (x->prompt_off != y->prompt_off) return x->prompt_off - y->prompt_off;
    return x->chunk_id < y->chunk_id ? -1 : x->chunk_id > y->chunk_id;
}

static int match_by_off(const void *a, const void *b) {
    return ((const rp_subchunk_match *)a)->prompt_off - ((const rp_subchunk_match *)b)->prompt_off;
}

rp_subchunk_query rp_subchunk_default_query(int32_t min_len) {
    rp_subchunk_query q = {.min_len = min_len, .max_candidates = 16};
    return q;
}

rp_status rp_store_find_subchunks(rp_store *s, const rp_token *toks, int32_t n, int32_t min_len,
                                  int32_t max_candidates, rp_subchunk_match *out, int32_t cap, int32_t *n_out) {
    return rp_store_find_subchunks_vec(s, toks, n, min_len, max_candidates, NULL, 0, 0, out, cap, n_out);
}

rp_status rp_store_find_subchunks_vec(rp_store *s, const rp_token *toks, int32_t n, int32_t min_len,
                                      int32_t max_candidates, const float *qvec, int32_t dim, int32_t k_vec,
                                      rp_subchunk_match *out, int32_t cap, int32_t *n_out) {
    rp_subchunk_query q = rp_subchunk_default_query(min_len);
    q.max_candidates = max_candidates;
    q.qvec = qvec;
    q.n_qvec = qvec ? 1 : 0;
    q.dim = dim;
    q.k_vec = k_vec;
    return rp_store_find_subchunks_q(s, toks, n, &q, out, cap, n_out);
}

static rp_status push_cand(cand **cv, int64_t *nc, int64_t *capc, cand c) {
    if (*nc == *capc) {
        const int64_t nw = *capc ? 2 * *capc : 256;
        cand *nv = realloc(*cv, sizeof **cv * (size_t)nw);
        if (!nv) return rp_errorf(RP_ERR_NOMEM, "store: out of memory");
        *cv = nv;
        *capc = nw;
    }
    (*cv)[(*nc)++] = c;
    return RP_OK;
}

/* The candidates of a search, best first: keyword and term candidates ranked by votes + term score, the best
 * max_candidates of the bound model (not corrupt) kept, then the query vectors' nearest. *cv malloc'd. */
static rp_status gather(rp_store *s, const rp_token *toks, int32_t n, const rp_subchunk_query *qq, cand **cv_out,
                        int64_t *m_out) {
    *cv_out = NULL;
    *m_out = 0;
    const int32_t max_candidates = qq->max_candidates > 0 ? qq->max_candidates : 16;
    cand *cv = NULL;
    int64_t nc = 0, capc = 0;
    rp_status st = RP_OK;
    if (toks && n >= RP_KW_GRAM) {
        uint64_t *kw = malloc(sizeof *kw * (size_t)n);
        if (!kw) return rp_errorf(RP_ERR_NOMEM, "store: out of memory");
        const int32_t nk = rp_keywords(toks, n, s->salt, kw, n);
        /* votes per chunk over the prompt's keywords (one indexed probe per keyword): the (kw, chunk) primary
         * key answers this alone; the model / corrupt check runs below on the few top-ranked candidates only
         * (keywords are salted per model, so another model's rows almost never share one) */
        sqlite3_stmt *q = NULL;
        st = rp_store_stmt(s, S_KW_CHUNKS, &q);
        for (int32_t i = 0; i < nk && st == RP_OK; i++) {
            bool dup = false;   /* a repeated keyword votes once */
            for (int32_t j = i - 1; j >= 0 && j >= i - 32; j--)
                if (kw[j] == kw[i]) dup = true;
            if (dup) continue;
            sqlite3_reset(q);
            sqlite3_bind_int64(q, 1, i64(kw[i]));
            while (st == RP_OK && sqlite3_step(q) == SQLITE_ROW)
                st = push_cand(&cv, &nc, &capc, (cand){(uint64_t)sqlite3_column_int64(q, 0), 1, 0, -2, 0});
        }
        if (q) sqlite3_reset(q);   /* cached statement: reset, never finalized here */
        free(kw);
    }
    if (st == RP_OK && qq->terms && qq->n_terms > 0) {
        rp_term_hit *th = NULL;
        int64_t nth = 0;
        st = rp_store_term_hits(s, qq->terms, qq->n_terms, &th, &nth);
        for (int64_t i = 0; i < nth && st == RP_OK; i++) st = push_cand(&cv, &nc, &capc, (cand){th[i].id, 0, th[i].score, -2, 0});
        free(th);
    }
    if (st != RP_OK) {
        free(cv);
        return st;
    }
    /* merge equal ids, rank by keywords + terms */
    if (nc > 1) qsort(cv, (size_t)nc, sizeof *cv, cand_by_id);
    int64_t m = 0;
    for (int64_t i = 0; i < nc; i++) {
        if (m > 0 && cv[m - 1].id == cv[i].id) {
            cv[m - 1].votes += cv[i].votes;
            cv[m - 1].term += cv[i].term;
        } else {
            cv[m++] = cv[i];
        }
    }
    for (int64_t i = 0; i < m; i++) cv[i].score = (double)cv[i].votes + (double)cv[i].term;
    if (m > 1) qsort(cv, (size_t)m, sizeof *cv, cand_by_score);
    {   /* the best max_candidates that are this model's and not marked corrupt */
        sqlite3_stmt *ok = NULL;
        if (m > 0 && (st = rp_store_stmt(s, S_CAND_OK, &ok)) != RP_OK) {
            free(cv);
            return st;
        }
        int64_t kept = 0;
        for (int64_t i = 0; i < m && kept < max_candidates; i++) {
            sqlite3_reset(ok);
            sqlite3_bind_int64(ok, 1, i64(cv[i].id));
            sqlite3_bind_int64(ok, 2, s->model);
            if (sqlite3_step(ok) == SQLITE_ROW) cv[kept++] = cv[i];
        }
        if (ok) sqlite3_reset(ok);
        m = kept;
    }
    /* the query vectors: each one's k_vec nearest chunks join the candidates (a paraphrase, or a chunk whose
     * shared runs are too short for a common keyword, still gets the LCS pass); the LCS decides what is reused */
    if (qq->qvec && qq->n_qvec > 0 && qq->dim > 0 && qq->k_vec > 0) {
        const size_t kk = (size_t)qq->k_vec * (size_t)qq->n_qvec;
        uint64_t *vid = malloc(sizeof *vid * kk);
        float *vsc = malloc(sizeof *vsc * kk);
        int32_t *nvk = calloc((size_t)qq->n_qvec, sizeof *nvk);
        cand *nv = realloc(cv, sizeof *cv * (size_t)(m + (int64_t)kk + 1));
        if (nv) cv = nv;
        if (!vid || !vsc || !nvk || !nv) st = rp_errorf(RP_ERR_NOMEM, "store: out of memory");
        if (st == RP_OK)
            st = rp_store_vector_topk_multi(s, qq->qvec, qq->n_qvec, qq->dim, qq->vec_src, qq->k_vec, vid, vsc, nvk);
        for (int32_t j = 0; st == RP_OK && j < qq->n_qvec; j++)
            for (int32_t i = 0; i < nvk[j]; i++) {
                const uint64_t id = vid[(size_t)j * (size_t)qq->k_vec + (size_t)i];
                const float sc = vsc[(size_t)j * (size_t)qq->k_vec + (size_t)i];
                int64_t at = -1;
                for (int64_t k = 0; k < m && at < 0; k++)
                    if (cv[k].id == id) at = k;
                if (at < 0) cv[m++] = (cand){id, 0, 0, sc, 0};
                else if (sc > cv[at].vec) cv[at].vec = sc;
            }
        free(vid);
        free(vsc);
        free(nvk);
        if (st != RP_OK) {
            free(cv);
            return st;
        }
    }
    *cv_out = cv;
    *m_out = m;
    return RP_OK;
}

rp_status rp_store_subchunk_candidates(rp_store *s, const rp_token *toks, int32_t n, const rp_subchunk_query *q,
                                       rp_subchunk_cand *out, int32_t cap, int32_t *n_out) {
    *n_out = 0;
    RP_TRY(rp_store_need_model(s));
    if (!q) return rp_errorf(RP_ERR_INVALID_ARG, "store: NULL query");
    cand *cv = NULL;
    int64_t m = 0;
    RP_TRY(gather(s, toks, n, q, &cv, &m));
    for (int64_t i = 0; i < m && *n_out < cap; i++)
        out[(*n_out)++] = (rp_subchunk_cand){cv[i].id, cv[i].votes, cv[i].term, cv[i].vec};
    free(cv);
    return RP_OK;
}

rp_status rp_store_find_subchunks_q(rp_store *s, const rp_token *toks, int32_t n, const rp_subchunk_query *qq,
                                    rp_subchunk_match *out, int32_t cap, int32_t *n_out) {
    *n_out = 0;
    RP_TRY(rp_store_need_model(s));
    if (!qq) return rp_errorf(RP_ERR_INVALID_ARG, "store: NULL query");
    if (!toks || n < RP_KW_GRAM || cap <= 0 || !out) return RP_OK;
    int32_t min_len = qq->min_len;
    if (min_len < RP_KW_GRAM) min_len = RP_KW_GRAM;
    cand *cv = NULL;
    int64_t m = 0;
    rp_status st = RP_OK;
    RP_TRY(gather(s, toks, n, qq, &cv, &m));

    rp_sam *sam = NULL;
    st = rp_sam_build(toks, n, &sam);
    rp_subchunk_match *all = NULL;
    int32_t na = 0, capa = 0;
    rp_lcs_run runs[256];
    for (int64_t i = 0; i < m && st == RP_OK; i++) {
        rp_store_chunk c;
        bool found = false;
        if (rp_store_get(s, cv[i].id, &c, &found) != RP_OK || !found) continue;
        int32_t nr = rp_sam_match(sam, c.tokens, c.n_tokens, min_len, runs, 256);
        if (nr > 256) nr = 256;
        for (int32_t r = 0; r < nr; r++) {
            if (na == capa) {
                capa = capa ? 2 * capa : 64;
                rp_subchunk_match *nv = realloc(all, sizeof *all * (size_t)capa);
                if (!nv) {
                    st = rp_errorf(RP_ERR_NOMEM, "store: out of memory");
                    break;
                }
                all = nv;
            }
            all[na++] = (rp_subchunk_match){c.id, runs[r].text_off, runs[r].s_off, runs[r].len};
        }
        rp_store_chunk_clear(&c);
    }
    rp_sam_free(sam);
    free(cv);
    if (st != RP_OK) {
        free(all);
        return st;
    }
    /* greedy cover of the prompt: longest first, trimmed to the uncovered part */
    if (na > 1) qsort(all, (size_t)na, sizeof *all, match_by_len);
    uint8_t *covered = calloc((size_t)n, 1);
    if (!covered) {
        free(all);
        return rp_errorf(RP_ERR_NOMEM, "store: out of memory");
    }
    int32_t no = 0;
    for (int32_t i = 0; i < na && no < cap; i++) {
        rp_subchunk_match x = all[i];
        /* first uncovered run inside x's prompt range */
        int32_t a = x.prompt_off, e = x.prompt_off + x.len;
        while (a < e && covered[a]) a++;
        int32_t b = a;
        while (b < e && !covered[b]) b++;
        if (b - a < min_len) continue;
        x.chunk_off += a - x.prompt_off;
        x.prompt_off = a;
        x.len = b - a;
        memset(covered + a, 1, (size_t)x.len);
        out[no++] = x;
    }
    free(covered);
    free(all);
    if (no > 1) qsort(out, (size_t)no, sizeof *out, match_by_off);
    *n_out = no;
    return RP_OK;
}

/* ---- dense vectors ---- */

rp_status rp_store_put_vector(rp_store *s, uint64_t chunk_id, const float *v, int32_t dim) {
    RP_TRY(rp_store_need_model(s));
    if (!v || dim <= 0 || dim > 65536) return rp_errorf(RP_ERR_INVALID_ARG, "store: vector of dimension %d", dim);
    sqlite3_stmt *q = NULL;
    if (sqlite3_prepare_v2(s->db, "INSERT OR REPLACE INTO vectors(chunk, dim, v) VALUES(?1, ?2, ?3)", -1, &q, NULL) !=
        SQLITE_OK)
        return rp_store_sql_err(s, "write vector");
    sqlite3_bind_int64(q, 1, i64(chunk_id));
    sqlite3_bind_int(q, 2, dim);
    sqlite3_bind_blob(q, 3, v, (int)(sizeof(float) * (size_t)dim), SQLITE_STATIC);
    int rc = sqlite3_step(q);
    sqlite3_finalize(q);
    return rc == SQLITE_DONE ? RP_OK : rp_store_sql_err(s, "write vector");
}

rp_status rp_store_get_vector(rp_store *s, uint64_t chunk_id, float *v, int32_t cap, int32_t *dim, uint64_t *src,
                              bool *found) {
    *found = false;
    *dim = 0;
    *src = 0;
    sqlite3_stmt *q = NULL;
    const char *sql = rp_store_has_terms(s) ? "SELECT dim, v, src FROM vectors WHERE chunk = ?1"
                                            : "SELECT dim, v, 0 FROM vectors WHERE chunk = ?1";
    if (sqlite3_prepare_v2(s->db, sql, -1, &q, NULL) != SQLITE_OK) return rp_store_sql_err(s, "read vector");
    sqlite3_bind_int64(q, 1, i64(chunk_id));
    const int rc = sqlite3_step(q);
    if (rc == SQLITE_ROW) {
        *dim = sqlite3_column_int(q, 0);
        *src = (uint64_t)sqlite3_column_int64(q, 2);
        const float *b = sqlite3_column_blob(q, 1);
        const int nb = sqlite3_column_bytes(q, 1);
        if (b && nb == (int)sizeof(float) * *dim) {
            memcpy(v, b, sizeof(float) * (size_t)(*dim < cap ? *dim : cap));
            *found = true;
        }
    }
    sqlite3_finalize(q);
    return rc == SQLITE_ROW || rc == SQLITE_DONE ? RP_OK : rp_store_sql_err(s, "read vector");
}

rp_status rp_store_vector_topk(rp_store *s, const float *qv, int32_t dim, int32_t k, uint64_t *ids, float *scores,
                               int32_t *n_out) {
    *n_out = 0;
    return rp_store_vector_topk_multi(s, qv, 1, dim, 0, k, ids, scores, n_out);
}

rp_status rp_store_vector_topk_multi(rp_store *s, const float *qv, int32_t nq, int32_t dim, uint64_t src, int32_t k,
                                     uint64_t *ids, float *scores, int32_t *n_out) {
    RP_TRY(rp_store_need_model(s));
    if (!qv || nq <= 0 || dim <= 0 || k <= 0 || !ids || !scores || !n_out) return RP_OK;
    for (int32_t j = 0; j < nq; j++) n_out[j] = 0;
    if (src != 0 && !rp_store_has_terms(s)) return RP_OK;   /* a schema-2 store holds the caller's vectors only */
    double *qn = malloc(sizeof *qn * (size_t)nq);
    if (!qn) return rp_errorf(RP_ERR_NOMEM, "store: out of memory");
    bool any = false;
    for (int32_t j = 0; j < nq; j++) {
        double ss = 0;
        for (int32_t i = 0; i < dim; i++) ss += (double)qv[(size_t)j * dim + i] * qv[(size_t)j * dim + i];
        qn[j] = sqrt(ss);
        any = any || qn[j] > 0;
    }
    if (!any) {
        free(qn);
        return RP_OK;
    }
    sqlite3_stmt *q = NULL;
    const char *sql = rp_store_has_terms(s)
                          ? "SELECT v.chunk, v.v FROM vectors v JOIN chunks c ON c.id = v.chunk "
                            "WHERE c.model = ?1 AND v.dim = ?2 AND v.src = ?3 AND c.corrupt = 0"
                          : "SELECT v.chunk, v.v FROM vectors v JOIN chunks c ON c.id = v.chunk "
                            "WHERE c.model = ?1 AND v.dim = ?2 AND c.corrupt = 0";
    if (sqlite3_prepare_v2(s->db, sql, -1, &q, NULL) != SQLITE_OK) {
        free(qn);
        return rp_store_sql_err(s, "vector scan");
    }
    sqlite3_bind_int64(q, 1, s->model);
    sqlite3_bind_int(q, 2, dim);
    if (rp_store_has_terms(s)) sqlite3_bind_int64(q, 3, i64(src));
    while (sqlite3_step(q) == SQLITE_ROW) {
        const float *v = sqlite3_column_blob(q, 1);
        if (!v || sqlite3_column_bytes(q, 1) != (int)(sizeof(float) * (size_t)dim)) continue;
        double vn = 0;
        for (int32_t i = 0; i < dim; i++) vn += (double)v[i] * v[i];
        if (vn == 0) continue;
        vn = sqrt(vn);
        const uint64_t id = (uint64_t)sqlite3_column_int64(q, 0);
        for (int32_t j = 0; j < nq; j++) {
            if (qn[j] == 0) continue;
            const float *x = qv + (size_t)j * dim;
            double dot = 0;
            for (int32_t i = 0; i < dim; i++) dot += (double)x[i] * v[i];
            const float sc = (float)(dot / (qn[j] * vn));
            /* insertion into query j's sorted top-k */
            uint64_t *jid = ids + (size_t)j * k;
            float *jsc = scores + (size_t)j * k;
            int32_t n = n_out[j];
            int32_t pos = n < k ? n : k;
            if (pos == k && sc <= jsc[k - 1]) continue;
            if (pos == k) pos = k - 1;
            while (pos > 0 && jsc[pos - 1] < sc) {
                jsc[pos] = jsc[pos - 1];
                jid[pos] = jid[pos - 1];
                pos--;
            }
            jsc[pos] = sc;
            jid[pos] = id;
            if (n < k) n_out[j] = n + 1;
        }
    }
    sqlite3_finalize(q);
    free(qn);
    return RP_OK;
}

/* ---- co-access ---- */

rp_status rp_store_put_coaccess(rp_store *s, const rp_store_coaccess *v, int32_t n) {
    RP_TRY(rp_store_need_model(s));
    if (n <= 0) return RP_OK;
    RP_TRY(rp_store_exec(s, "BEGIN IMMEDIATE"));
    sqlite3_stmt *q = NULL;
    rp_status st = RP_OK;
    if (sqlite3_prepare_v2(s->db, "INSERT OR REPLACE INTO coaccess(model, a, b, n) VALUES(?1, ?2, ?3, ?4)", -1, &q,
                           NULL) != SQLITE_OK)
        st = rp_store_sql_err(s, "write co-access");
    for (int32_t i = 0; i < n && st == RP_OK; i++) {
        sqlite3_reset(q);
        sqlite3_bind_int64(q, 1, s->model);
        sqlite3_bind_int64(q, 2, i64(v[i].a));
        sqlite3_bind_int64(q, 3, i64(v[i].b));
        sqlite3_bind_int64(q, 4, v[i].n);
        if (sqlite3_step(q) != SQLITE_DONE) st = rp_store_sql_err(s, "write co-access");
    }
    sqlite3_finalize(q);
    if (st == RP_OK) st = rp_store_exec(s, "COMMIT");
    if (st != RP_OK) rp_store_exec(s, "ROLLBACK");
    return st;
}

rp_status rp_store_get_coaccess(rp_store *s, rp_store_coaccess *out, int32_t cap, int32_t *n_out) {
    *n_out = 0;
    RP_TRY(rp_store_need_model(s));
    sqlite3_stmt *q = NULL;
    if (sqlite3_prepare_v2(s->db, "SELECT a, b, n FROM coaccess WHERE model = ?1 ORDER BY n DESC LIMIT ?2", -1, &q,
                           NULL) != SQLITE_OK)
        return rp_store_sql_err(s, "read co-access");
    sqlite3_bind_int64(q, 1, s->model);
    sqlite3_bind_int(q, 2, cap);
    while (*n_out < cap && sqlite3_step(q) == SQLITE_ROW) {
        out[*n_out] = (rp_store_coaccess){(uint64_t)sqlite3_column_int64(q, 0), (uint64_t)sqlite3_column_int64(q, 1),
                                          (uint32_t)sqlite3_column_int64(q, 2)};
        (*n_out)++;
    }
    sqlite3_finalize(q);
    return RP_OK;
}
