/* store_search.c — sub-chunk search (keywords, dense vectors, LCS cover), vectors, co-access. */
#include "store/store_internal.h"

#include <math.h>
#include <stdlib.h>

#include "core/error.h"
#include "store/lcs.h"

/* ---- sub-chunks ---- */

typedef struct cand {
    uint64_t id;
    int32_t votes;
} cand;

static int cand_by_votes(const void *a, const void *b) {
    const cand *x = a, *y = b;
    if (x->votes != y->votes) return y->votes - x->votes;
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

rp_status rp_store_find_subchunks(rp_store *s, const rp_token *toks, int32_t n, int32_t min_len,
                                  int32_t max_candidates, rp_subchunk_match *out, int32_t cap, int32_t *n_out) {
    return rp_store_find_subchunks_vec(s, toks, n, min_len, max_candidates, NULL, 0, 0, out, cap, n_out);
}

rp_status rp_store_find_subchunks_vec(rp_store *s, const rp_token *toks, int32_t n, int32_t min_len,
                                      int32_t max_candidates, const float *qvec, int32_t dim, int32_t k_vec,
                                      rp_subchunk_match *out, int32_t cap, int32_t *n_out) {
    *n_out = 0;
    RP_TRY(rp_store_need_model(s));
    if (!toks || n < RP_KW_GRAM || cap <= 0 || !out) return RP_OK;
    if (min_len < RP_KW_GRAM) min_len = RP_KW_GRAM;
    if (max_candidates <= 0) max_candidates = 16;
    uint64_t *kw = malloc(sizeof *kw * (size_t)n);
    if (!kw) return rp_errorf(RP_ERR_NOMEM, "store: out of memory");
    int32_t nk = rp_keywords(toks, n, s->salt, kw, n);
    /* votes per chunk over the prompt's keywords (one indexed probe per keyword) */
    cand *cv = NULL;
    int64_t nc = 0, capc = 0;
    sqlite3_stmt *q = NULL;
    rp_status st = RP_OK;
    /* the (kw, chunk) primary key answers this alone; the model / corrupt
     * check runs below on the few top-ranked candidates only (keywords are
     * salted per model, so another model's rows almost never share one) */
    st = rp_store_stmt(s, S_KW_CHUNKS, &q);
    for (int32_t i = 0; i < nk && st == RP_OK; i++) {
        bool dup = false;   /* a repeated keyword votes once */
        for (int32_t j = i - 1; j >= 0 && j >= i - 32; j--)
            if (kw[j] == kw[i]) dup = true;
        if (dup) continue;
        sqlite3_reset(q);
        sqlite3_bind_int64(q, 1, i64(kw[i]));
        while (sqlite3_step(q) == SQLITE_ROW) {
            if (nc == capc) {
                capc = capc ? 2 * capc : 256;
                cand *nv = realloc(cv, sizeof *cv * (size_t)capc);
                if (!nv) {
                    st = rp_errorf(RP_ERR_NOMEM, "store: out of memory");
                    break;
                }
                cv = nv;
            }
            cv[nc++] = (cand){(uint64_t)sqlite3_column_int64(q, 0), 1};
        }
    }
    if (q) sqlite3_reset(q);   /* cached statement: reset, never finalized here */
    free(kw);
    if (st != RP_OK) {
        free(cv);
        return st;
    }
    /* merge equal ids, rank by votes */
    if (nc > 1) qsort(cv, (size_t)nc, sizeof *cv, cand_by_id);
    int64_t m = 0;
    for (int64_t i = 0; i < nc; i++) {
        if (m > 0 && cv[m - 1].id == cv[i].id) cv[m - 1].votes++;
        else cv[m++] = cv[i];
    }
    if (m > 1) qsort(cv, (size_t)m, sizeof *cv, cand_by_votes);
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
    /* the caller's dense vector: its top k_vec chunks join the keyword
     * candidates (a paraphrase or a chunk whose shared runs are too short for
     * a common keyword still gets the LCS pass); the LCS decides what is reused */
    if (qvec && dim > 0 && k_vec > 0) {
        uint64_t *vid = malloc(sizeof *vid * (size_t)k_vec);
        float *vsc = malloc(sizeof *vsc * (size_t)k_vec);
        cand *nv = realloc(cv, sizeof *cv * (size_t)(m + k_vec));
        int32_t nvk = 0;
        if (!vid || !vsc || !nv) st = rp_errorf(RP_ERR_NOMEM, "store: out of memory");
        if (nv) cv = nv;
        if (st == RP_OK) st = rp_store_vector_topk(s, qvec, dim, k_vec, vid, vsc, &nvk);
        for (int32_t i = 0; st == RP_OK && i < nvk; i++) {
            bool dup = false;
            for (int64_t j = 0; j < m && !dup; j++) dup = cv[j].id == vid[i];
            if (!dup) cv[m++] = (cand){vid[i], 0};
        }
        free(vid);
        free(vsc);
        if (st != RP_OK) {
            free(cv);
            return st;
        }
    }

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

rp_status rp_store_vector_topk(rp_store *s, const float *qv, int32_t dim, int32_t k, uint64_t *ids, float *scores,
                               int32_t *n_out) {
    *n_out = 0;
    RP_TRY(rp_store_need_model(s));
    if (!qv || dim <= 0 || k <= 0 || !ids || !scores) return RP_OK;
    double qn = 0;
    for (int32_t i = 0; i < dim; i++) qn += (double)qv[i] * qv[i];
    qn = sqrt(qn);
    if (qn == 0) return RP_OK;
    sqlite3_stmt *q = NULL;
    if (sqlite3_prepare_v2(s->db,
                           "SELECT v.chunk, v.v FROM vectors v JOIN chunks c ON c.id = v.chunk "
                           "WHERE c.model = ?1 AND v.dim = ?2 AND c.corrupt = 0",
                           -1, &q, NULL) != SQLITE_OK)
        return rp_store_sql_err(s, "vector scan");
    sqlite3_bind_int64(q, 1, s->model);
    sqlite3_bind_int(q, 2, dim);
    int32_t n = 0;
    while (sqlite3_step(q) == SQLITE_ROW) {
        const float *v = sqlite3_column_blob(q, 1);
        if (!v || sqlite3_column_bytes(q, 1) != (int)(sizeof(float) * (size_t)dim)) continue;
        double dot = 0, vn = 0;
        for (int32_t i = 0; i < dim; i++) {
            dot += (double)qv[i] * v[i];
            vn += (double)v[i] * v[i];
        }
        if (vn == 0) continue;
        float sc = (float)(dot / (qn * sqrt(vn)));
        /* insertion into the sorted top-k */
        int32_t pos = n < k ? n : k;
        if (pos == k && sc <= scores[k - 1]) continue;
        if (pos == k) pos = k - 1;
        while (pos > 0 && scores[pos - 1] < sc) {
            scores[pos] = scores[pos - 1];
            ids[pos] = ids[pos - 1];
            pos--;
        }
        scores[pos] = sc;
        ids[pos] = (uint64_t)sqlite3_column_int64(q, 0);
        if (n < k) n++;
    }
    sqlite3_finalize(q);
    *n_out = n;
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
