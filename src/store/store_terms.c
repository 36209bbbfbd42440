/* store_terms.c — the extracted-term index: term rows and document frequencies kept with every write, idf, the
 * term side of the sub-chunk candidates, the consistency check and rebuild. */
#include "store/store_internal.h"

#include <math.h>
#include <stdlib.h>

#include "core/error.h"

/* At most this many of a prompt's terms (the rarest: highest idf) read their postings in one search. */
#define TERM_QUERY_MAX 64

bool rp_store_has_terms(const rp_store *s) { return s && s->schema >= SCHEMA_VERSION; }

/* A raw term hash salted with the bound model (splitmix64 of the xor): another model's terms never share a
 * posting list with this one's. Never 0 (the indexed-document marker). */
static uint64_t term_key(const rp_store *s, uint64_t raw) {
    uint64_t z = raw ^ s->salt;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return z ? z : 1;
}

double rp_store_idf(int64_t df, int64_t n_docs) {
    if (df <= 0 || n_docs <= 0) return 0;
    if (df > n_docs) df = n_docs;
    return log(1.0 + ((double)(n_docs - df) + 0.5) / ((double)df + 0.5));
}

static rp_status step_id_model(rp_store *s, int which, uint64_t id, int64_t model, const char *what) {
    sqlite3_stmt *q;
    RP_TRY(rp_store_stmt(s, which, &q));
    sqlite3_bind_int64(q, 1, i64(id));
    sqlite3_bind_int64(q, 2, model);
    const int rc = sqlite3_step(q);
    sqlite3_reset(q);
    return rc == SQLITE_DONE ? RP_OK : rp_store_sql_err(s, what);
}

rp_status rp_store_terms_drop(rp_store *s, uint64_t id, int64_t model) {
    if (!rp_store_has_terms(s)) return RP_OK;
    /* the counts first, while the chunk's term rows still say which terms to count down */
    RP_TRY(step_id_model(s, S_DF_DEC, id, model, "update the term document frequencies"));
    RP_TRY(step_id_model(s, S_DF_GC, id, model, "update the term document frequencies"));
    sqlite3_stmt *q;
    RP_TRY(rp_store_stmt(s, S_DEL_TERMS, &q));
    sqlite3_bind_int64(q, 1, i64(id));
    const int rc = sqlite3_step(q);
    sqlite3_reset(q);
    return rc == SQLITE_DONE ? RP_OK : rp_store_sql_err(s, "delete the chunk's terms");
}

static int cmp_term(const void *a, const void *b) {
    const uint64_t x = ((const rp_term *)a)->h, y = ((const rp_term *)b)->h;
    return x < y ? -1 : x > y;
}

static rp_status add_term(rp_store *s, uint64_t id, int64_t model, uint64_t key, uint32_t tf) {
    sqlite3_stmt *q;
    RP_TRY(rp_store_stmt(s, S_INS_TERM, &q));
    sqlite3_bind_int64(q, 1, i64(key));
    sqlite3_bind_int64(q, 2, i64(id));
    sqlite3_bind_int64(q, 3, tf);
    int rc = sqlite3_step(q);
    sqlite3_reset(q);
    if (rc != SQLITE_DONE) return rp_store_sql_err(s, "write the chunk's terms");
    RP_TRY(rp_store_stmt(s, S_DF_INC, &q));
    sqlite3_bind_int64(q, 1, model);
    sqlite3_bind_int64(q, 2, i64(key));
    rc = sqlite3_step(q);
    sqlite3_reset(q);
    return rc == SQLITE_DONE ? RP_OK : rp_store_sql_err(s, "update the term document frequencies");
}

rp_status rp_store_index_put(rp_store *s, uint64_t id, int64_t model, const rp_store_index *ix) {
    if (!ix) return RP_OK;
    if (ix->vec && ix->dim > 0) {
        if (ix->dim > 65536) return rp_errorf(RP_ERR_INVALID_ARG, "store: vector of dimension %d", ix->dim);
        sqlite3_stmt *q;
        RP_TRY(rp_store_stmt(s, S_INS_VEC, &q));
        sqlite3_bind_int64(q, 1, i64(id));
        sqlite3_bind_int(q, 2, ix->dim);
        sqlite3_bind_blob(q, 3, ix->vec, (int)(sizeof(float) * (size_t)ix->dim), SQLITE_STATIC);
        sqlite3_bind_int64(q, 4, i64(ix->vec_src));
        const int rc = sqlite3_step(q);
        sqlite3_reset(q);
        sqlite3_clear_bindings(q);
        if (rc != SQLITE_DONE) return rp_store_sql_err(s, "write the chunk's vector");
    }
    if (!rp_store_has_terms(s)) return RP_OK;
    RP_TRY(rp_store_terms_drop(s, id, model));   /* a replacement: the old terms count no more */
    /* salted keys, sorted and merged: a (vanishingly rare) collision of two terms' keys counts once */
    rp_term *k = NULL;
    if (ix->n_terms > 0) {
        k = malloc(sizeof *k * (size_t)ix->n_terms);
        if (!k) return rp_errorf(RP_ERR_NOMEM, "store: out of memory");
        for (int32_t i = 0; i < ix->n_terms; i++) k[i] = (rp_term){term_key(s, ix->terms[i].h), ix->terms[i].tf};
        qsort(k, (size_t)ix->n_terms, sizeof *k, cmp_term);
    }
    rp_status st = add_term(s, id, model, 0, 0);   /* the chunk is term-indexed: N counts it */
    for (int32_t i = 0; i < ix->n_terms && st == RP_OK;) {
        int32_t e = i + 1;
        uint32_t tf = k[i].tf;
        while (e < ix->n_terms && k[e].h == k[i].h) tf += k[e++].tf;
        st = add_term(s, id, model, k[i].h, tf);
        i = e;
    }
    free(k);
    return st;
}

static rp_status df_get(rp_store *s, uint64_t key, int64_t *df) {
    *df = 0;
    sqlite3_stmt *q;
    RP_TRY(rp_store_stmt(s, S_DF_GET, &q));
    sqlite3_bind_int64(q, 1, s->model);
    sqlite3_bind_int64(q, 2, i64(key));
    const int rc = sqlite3_step(q);
    if (rc == SQLITE_ROW) *df = sqlite3_column_int64(q, 0);
    sqlite3_reset(q);
    return rc == SQLITE_ROW || rc == SQLITE_DONE ? RP_OK : rp_store_sql_err(s, "read a term's document frequency");
}

rp_status rp_store_term_df(rp_store *s, uint64_t term, int64_t *df, int64_t *n_docs) {
    *df = *n_docs = 0;
    RP_TRY(rp_store_need_model(s));
    if (!rp_store_has_terms(s)) return RP_OK;
    RP_TRY(df_get(s, 0, n_docs));
    return df_get(s, term_key(s, term), df);
}

typedef struct qterm {
    uint64_t key;
    double idf;
} qterm;

static int by_idf(const void *a, const void *b) {
    const double x = ((const qterm *)a)->idf, y = ((const qterm *)b)->idf;
    return x < y ? 1 : x > y ? -1 : 0;
}

rp_status rp_store_term_hits(rp_store *s, const rp_term *terms, int32_t n, rp_term_hit **v, int64_t *nv) {
    *v = NULL;
    *nv = 0;
    if (!rp_store_has_terms(s) || !terms || n <= 0) return RP_OK;
    int64_t N = 0;
    RP_TRY(df_get(s, 0, &N));
    if (N <= 0) return RP_OK;
    qterm *qt = malloc(sizeof *qt * (size_t)n);
    if (!qt) return rp_errorf(RP_ERR_NOMEM, "store: out of memory");
    int32_t nq = 0;
    rp_status st = RP_OK;
    for (int32_t i = 0; i < n && st == RP_OK; i++) {
        const uint64_t key = term_key(s, terms[i].h);
        int64_t df = 0;
        st = df_get(s, key, &df);
        if (st == RP_OK && df > 0) qt[nq++] = (qterm){key, rp_store_idf(df, N)};
    }
    /* the rarest terms carry the ranking; common ones (low idf, long posting lists) are left out first */
    if (nq > 1) qsort(qt, (size_t)nq, sizeof *qt, by_idf);
    if (nq > TERM_QUERY_MAX) nq = TERM_QUERY_MAX;
    sqlite3_stmt *q = NULL;
    if (st == RP_OK && nq > 0) st = rp_store_stmt(s, S_TERM_CHUNKS, &q);
    int64_t cap = 0;
    for (int32_t i = 0; i < nq && st == RP_OK; i++) {
        sqlite3_reset(q);
        sqlite3_bind_int64(q, 1, i64(qt[i].key));
        int rc;
        while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
            if (*nv == cap) {
                cap = *nv + 256;
                rp_term_hit *nvv = realloc(*v, sizeof **v * (size_t)cap);
                if (!nvv) {
                    st = rp_errorf(RP_ERR_NOMEM, "store: out of memory");
                    break;
                }
                *v = nvv;
            }
            (*v)[(*nv)++] = (rp_term_hit){(uint64_t)sqlite3_column_int64(q, 0), (float)qt[i].idf};
        }
        if (st == RP_OK && rc != SQLITE_DONE && rc != SQLITE_ROW) st = rp_store_sql_err(s, "read a term's chunks");
    }
    if (q) sqlite3_reset(q);
    free(qt);
    return st;
}

rp_status rp_store_terms_rebuild(rp_store *s) {
    if (!rp_store_has_terms(s)) return RP_OK;
    return rp_store_exec(s, "DELETE FROM term_df;"
                            "INSERT INTO term_df(model, term, df) SELECT c.model, t.term, count(*) FROM terms t "
                            "JOIN chunks c ON c.id = t.chunk GROUP BY c.model, t.term;");
}

rp_status rp_store_terms_check(rp_store *s, bool fix, uint64_t *n_wrong) {
    *n_wrong = 0;
    if (!rp_store_has_terms(s)) return RP_OK;
    /* counts that disagree with the rows, counts of terms no row has, and terms of rows with no count */
    static const char sql[] =
        "SELECT (SELECT count(*) FROM term_df d WHERE d.df != (SELECT count(*) FROM terms t JOIN chunks c ON "
        "c.id = t.chunk WHERE t.term = d.term AND c.model = d.model)) + (SELECT count(*) FROM (SELECT c.model AS m, "
        "t.term AS tm FROM terms t JOIN chunks c ON c.id = t.chunk GROUP BY c.model, t.term) x WHERE NOT EXISTS "
        "(SELECT 1 FROM term_df d WHERE d.model = x.m AND d.term = x.tm)) + (SELECT count(*) FROM terms WHERE chunk "
        "NOT IN (SELECT id FROM chunks))";
    sqlite3_stmt *q = NULL;
    if (sqlite3_prepare_v2(s->db, sql, -1, &q, NULL) != SQLITE_OK) return rp_store_sql_err(s, "check the term index");
    const int rc = sqlite3_step(q);
    if (rc == SQLITE_ROW) *n_wrong = (uint64_t)sqlite3_column_int64(q, 0);
    sqlite3_finalize(q);
    if (rc != SQLITE_ROW) return rp_store_sql_err(s, "check the term index");
    if (*n_wrong == 0 || !fix) return RP_OK;
    RP_TRY(rp_store_exec(s, "BEGIN IMMEDIATE"));
    rp_status st = rp_store_exec(s, "DELETE FROM terms WHERE chunk NOT IN (SELECT id FROM chunks)");
    if (st == RP_OK) st = rp_store_terms_rebuild(s);
    if (st == RP_OK) st = rp_store_exec(s, "COMMIT");
    if (st != RP_OK && !sqlite3_get_autocommit(s->db)) rp_store_exec_quiet(s, "ROLLBACK");
    return st;
}
