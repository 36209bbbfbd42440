/* test_store_terms.c — the store's semantic index: term extraction, idf over a crafted corpus, document
 * frequencies through put / replace / delete / evict / verify / compact / restart, ranking by terms when no
 * keyword is shared, vectors by source, and the schema-2 -> 3 migration. */
#define _GNU_SOURCE
#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "testutil.h"
#include "kernels/types.h"
#include "reuse/chunk.h"
#include "store/lcs.h"
#include "store/store.h"
#include "store/terms.h"

#define N_LAYER 2
#define ROW 16
#define SALT 0x5eed5a17ull

static const char *subdir(const char *name) {
    static char buf[8][4096];
    static int k;
    char *b = buf[k++ % 8];
    snprintf(b, sizeof buf[0], "%s/%s", rp_test_tmpdir(), name);
    return b;
}

static rp_store *open_rw(const char *dir) {
    rp_store *s = NULL;
    rp_store_params p = rp_store_default_params();
    assert_int_equal(rp_store_open(dir, &p, &s), RP_OK);
    assert_int_equal(rp_store_bind_model(s, SALT, RP_TYPE_F16, N_LAYER, ROW, "fake", true), RP_OK);
    return s;
}

static void sql(const char *dir, const char *stmt) {
    char db[4200];
    snprintf(db, sizeof db, "%s/kv.db", dir);
    sqlite3 *h = NULL;
    assert_int_equal(sqlite3_open(db, &h), SQLITE_OK);
    char *msg = NULL;
    int rc = sqlite3_exec(h, stmt, NULL, NULL, &msg);
    if (rc != SQLITE_OK) print_message("sql: %s: %s\n", stmt, msg ? msg : "?");
    assert_int_equal(rc, SQLITE_OK);
    sqlite3_free(msg);
    sqlite3_close(h);
}

static int64_t sql_int(const char *dir, const char *stmt) {
    char db[4200];
    snprintf(db, sizeof db, "%s/kv.db", dir);
    sqlite3 *h = NULL;
    assert_int_equal(sqlite3_open(db, &h), SQLITE_OK);
    sqlite3_stmt *q = NULL;
    assert_int_equal(sqlite3_prepare_v2(h, stmt, -1, &q, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(q), SQLITE_ROW);
    const int64_t v = sqlite3_column_int64(q, 0);
    sqlite3_finalize(q);
    sqlite3_close(h);
    return v;
}

/* A chunk of n pseudo-random tokens (from seed) with a zero payload. */
typedef struct tchunk {
    uint64_t id;
    int32_t n;
    rp_token t[256];
    uint8_t kv[N_LAYER * 2 * 256 * ROW];
} tchunk;

static void make(tchunk *c, uint64_t id, int32_t n, uint64_t seed) {
    memset(c, 0, sizeof *c);
    c->id = id;
    c->n = n;
    rp_test_rng r = {seed * 0x9e3779b97f4a7c15ull + 1};
    for (int32_t i = 0; i < n; i++) c->t[i] = (rp_token)(rp_test_rng_next(&r) % 5000);
}

/* The index of a text: its extracted terms (malloc'd into ix->terms) and optionally a vector. */
static void index_text(rp_store_index *ix, const char *text) {
    memset(ix, 0, sizeof *ix);
    const int32_t n = rp_terms_extract(text, strlen(text), NULL, 0);
    ix->terms = malloc(sizeof *ix->terms * (size_t)(n + 1));
    ix->n_terms = rp_terms_extract(text, strlen(text), ix->terms, n);
    assert_int_equal(ix->n_terms, n);
}

/* Writes chunks c[0..n) in one batch, each with index ix[i] (NULL entries: none). */
static rp_status put(rp_store *s, tchunk *c, rp_store_index **ix, int32_t n) {
    rp_store_put_item it[16];
    memset(it, 0, sizeof it);
    for (int32_t i = 0; i < n; i++) {
        const uint64_t h = rp_chunk_hash(c[i].t, c[i].n, SALT);
        it[i].meta = (rp_store_chunk){.id = c[i].id, .hash = h, .chain = rp_chunk_chain(0, h), .n_tokens = c[i].n,
                                      .recompute_ms = 1, .heat = 1, .last_used = c[i].id};
        it[i].tokens = c[i].t;
        it[i].kv = c[i].kv;
        it[i].index = ix ? ix[i] : NULL;
    }
    return rp_store_put(s, it, n, 10);
}

static int64_t df_of(rp_store *s, const char *word, int64_t *n_docs) {
    char norm[128];
    const size_t k = rp_term_normalize(word, strlen(word), norm, sizeof norm);
    assert_true(k > 0);
    int64_t df = -1;
    assert_int_equal(rp_store_term_df(s, rp_term_hash(norm, k), &df, n_docs), RP_OK);
    return df;
}

/* -------------------------------------------------------------- extraction */

static void expect_norm(const char *word, const char *want) {
    char out[128];
    const size_t k = rp_term_normalize(word, strlen(word), out, sizeof out);
    if (!want) {
        assert_int_equal(k, 0);
        return;
    }
    if (strcmp(out, want)) print_message("normalize '%s': '%s', expected '%s'\n", word, out, want);
    assert_string_equal(out, want);
    assert_int_equal(k, strlen(want));
}

/* Words are Unicode letters / digits, case-folded; stop words and words under three code points go; plurals
 * and -ed / -ing are stripped from ASCII words; counts are per distinct term. */
static void test_terms_extract(void **state) {
    (void)state;
    expect_norm("Lighthouses", "lighthouse");
    expect_norm("stories", "story");
    expect_norm("running", "run");
    expect_norm("walked", "walk");
    expect_norm("glass", "glass");
    expect_norm("status", "status");
    expect_norm("The", NULL);        /* stop word */
    expect_norm("between", NULL);
    expect_norm("ox", NULL);         /* too short */
    expect_norm("42", NULL);
    expect_norm("1999", "1999");
    expect_norm("CAFÉ", "café");     /* Unicode case folding, no ASCII stemming */
    expect_norm("Привет", "привет");
    expect_norm("東京都", "東京都");  /* three code points */
    expect_norm("naïve", "naïve");
    const char *text = "The running dogs RAN past the Café; café, CAFÉ! Dog-run 1999 ox naïve\xff" "dogs";
    rp_term t[32];
    const int32_t n = rp_terms_extract(text, strlen(text), t, 32);
    /* run (running, run), dog (dogs, Dog, dogs), ran, past, café x3, 1999, naïve */
    assert_int_equal(n, 7);
    for (int32_t i = 1; i < n; i++) assert_true(t[i - 1].h < t[i].h);   /* distinct, sorted */
    const struct { const char *w; uint32_t tf; } want[] = {{"run", 2}, {"dog", 3}, {"ran", 1}, {"past", 1},
                                                           {"café", 3}, {"1999", 1}, {"naïve", 1}};
    for (size_t k = 0; k < sizeof want / sizeof want[0]; k++) {
        const uint64_t h = rp_term_hash(want[k].w, strlen(want[k].w));
        int32_t at = -1;
        for (int32_t i = 0; i < n; i++)
            if (t[i].h == h) at = i;
        if (at < 0) print_message("term '%s' missing\n", want[k].w);
        assert_true(at >= 0);
        assert_int_equal(t[at].tf, want[k].tf);
    }
    assert_int_equal(rp_terms_extract(text, strlen(text), t, 3), 7);   /* the count, whatever the room */
    assert_int_equal(rp_terms_extract("", 0, t, 32), 0);
    assert_int_equal(rp_terms_extract("a an the of", 11, t, 32), 0);
}

/* ----------------------------------------------------------- idf and df */

/* idf on a crafted corpus, and the document frequencies through every change of the rows: a replacement, a
 * rewrite keeping its index, a failed item, a delete, a restart, verify of a tampered count, compact of an
 * orphan, eviction of everything. */
static void test_idf_and_df(void **state) {
    (void)state;
    const char *d = subdir("idf");
    rp_store *s = open_rw(d);
    static tchunk c[6];
    for (int i = 0; i < 6; i++) make(&c[i], (uint64_t)(i + 1), 40, (uint64_t)i);
    rp_store_index ix[5];
    index_text(&ix[0], "apple banana");
    index_text(&ix[1], "apple cherry cherry");
    index_text(&ix[2], "Apples!");
    index_text(&ix[3], "and the of");   /* term-indexed with no terms: counts in N */
    index_text(&ix[4], "banana date");
    rp_store_index *ixp[5] = {&ix[0], &ix[1], &ix[2], &ix[3], NULL};   /* chunk 5: no index */
    assert_int_equal(put(s, c, ixp, 5), RP_OK);
    int64_t N = 0;
    assert_int_equal(df_of(s, "apple", &N), 3);
    assert_int_equal(N, 4);
    assert_int_equal(df_of(s, "banana", &N), 1);
    assert_int_equal(df_of(s, "cherry", &N), 1);
    assert_int_equal(df_of(s, "date", &N), 0);
    /* BM25's idf, computed here independently */
    assert_true(fabs(rp_store_idf(3, 4) - log(1.0 + (4 - 3 + 0.5) / (3 + 0.5))) < 1e-12);
    assert_true(fabs(rp_store_idf(1, 4) - log(1.0 + 3.5 / 1.5)) < 1e-12);
    assert_true(rp_store_idf(1, 4) > rp_store_idf(3, 4));
    assert_true(rp_store_idf(0, 4) == 0 && rp_store_idf(1, 0) == 0);
    rp_store_stats ss;
    assert_int_equal(rp_store_stats_get(s, &ss), RP_OK);
    assert_int_equal(ss.n_term_docs, 4);
    assert_int_equal(ss.n_terms, 3);   /* apple, banana, cherry */
    /* chunk 1 rewritten with another index: apple 2, banana 1 (its own again), date 1; N unchanged */
    rp_store_index *r1[1] = {&ix[4]};
    assert_int_equal(put(s, &c[0], r1, 1), RP_OK);
    assert_int_equal(df_of(s, "apple", &N), 2);
    assert_int_equal(df_of(s, "banana", &N), 1);
    assert_int_equal(df_of(s, "date", &N), 1);
    assert_int_equal(N, 4);
    /* chunk 3 rewritten without an index: it keeps its terms */
    assert_int_equal(put(s, &c[2], NULL, 1), RP_OK);
    assert_int_equal(df_of(s, "apple", &N), 2);
    /* a batch whose second item fails after its row and terms were written: nothing of it stays */
    float big[4] = {1, 0, 0, 0};
    rp_store_index bad = ix[1];
    bad.vec = big;
    bad.dim = 70000;   /* refused: the item rolls back to its savepoint */
    rp_store_index *b2[2] = {&ix[2], &bad};
    tchunk pair[2] = {c[5], c[5]};
    pair[1].id = 60;
    assert_int_equal(put(s, pair, b2, 2), RP_OK);
    assert_int_equal(df_of(s, "apple", &N), 3);    /* chunk 6's "apples" */
    assert_int_equal(df_of(s, "cherry", &N), 1);   /* not 2: item 60 left no trace */
    assert_int_equal(N, 5);
    /* delete chunk 2: cherry gone (its row too), apple 2, N 4 */
    const uint64_t two = 2;
    assert_int_equal(rp_store_delete(s, &two, 1), RP_OK);
    assert_int_equal(df_of(s, "cherry", &N), 0);
    assert_int_equal(df_of(s, "apple", &N), 2);
    assert_int_equal(N, 4);
    assert_int_equal(sql_int(d, "SELECT count(*) FROM term_df WHERE df <= 0"), 0);
    rp_store_close(s);
    /* the counts are in the database: a restart sees them */
    s = open_rw(d);
    assert_int_equal(df_of(s, "apple", &N), 2);
    assert_int_equal(df_of(s, "banana", &N), 1);
    assert_int_equal(N, 4);
    uint64_t ok = 0, nbad = 0;
    assert_int_equal(rp_store_verify(s, false, NULL, NULL, &ok, &nbad), RP_OK);
    assert_int_equal(nbad, 0);
    rp_store_close(s);
    /* a tampered count: verify reports it (id 0), fix rebuilds it */
    sql(d, "UPDATE term_df SET df = 7 WHERE term != 0");
    s = open_rw(d);
    assert_int_equal(rp_store_verify(s, false, NULL, NULL, &ok, &nbad), RP_OK);
    assert_int_equal(nbad, 1);
    assert_int_equal(rp_store_verify(s, true, NULL, NULL, &ok, &nbad), RP_OK);
    assert_int_equal(rp_store_verify(s, false, NULL, NULL, &ok, &nbad), RP_OK);
    assert_int_equal(nbad, 0);
    assert_int_equal(df_of(s, "apple", &N), 2);
    rp_store_close(s);
    /* an orphan term row (no chunk): compact removes it and the counts stay right */
    sql(d, "INSERT INTO terms(term, chunk, tf) VALUES(12345, 999, 1)");
    s = open_rw(d);
    uint64_t removed = 0;
    assert_int_equal(rp_store_compact(s, &removed), RP_OK);
    assert_true(removed >= 1);
    assert_int_equal(sql_int(d, "SELECT count(*) FROM terms WHERE chunk = 999"), 0);
    assert_int_equal(rp_store_verify(s, false, NULL, NULL, &ok, &nbad), RP_OK);
    assert_int_equal(nbad, 0);
    /* eviction of everything takes every count with it */
    rp_store_evict_params ep = {.policy = RP_EVICT_COST, .clock = 100, .half_life = 10, .cascade_weight = 1};
    uint64_t *del = NULL, freed = 0;
    int32_t nd = 0;
    assert_int_equal(rp_store_evict(s, 0, &ep, &del, &nd, &freed), RP_OK);
    free(del);
    assert_int_equal(nd, 5);
    assert_int_equal(df_of(s, "apple", &N), 0);
    assert_int_equal(N, 0);
    assert_int_equal(sql_int(d, "SELECT count(*) FROM term_df"), 0);
    assert_int_equal(sql_int(d, "SELECT count(*) FROM terms"), 0);
    rp_store_close(s);
    for (int i = 0; i < 5; i++) free(ix[i].terms);
}

/* ------------------------------------------------------------- ranking */

/* A query sharing no keyword with a chunk (its tokens: another run, re-tokenized) but its rare words: the chunk
 * is a candidate through terms alone, ranked first; a common word ranks nothing. With a short run in common (12
 * tokens, under the 18 that guarantee a keyword), the LCS pass then finds it, which keywords alone never do. */
static void test_terms_rank(void **state) {
    (void)state;
    const char *d = subdir("rank");
    rp_store *s = open_rw(d);
    static tchunk c[40];
    rp_store_index ix[40];
    char text[256];
    for (int i = 0; i < 40; i++) {
        make(&c[i], (uint64_t)(i + 1), 120, (uint64_t)(100 + i));
        /* every chunk: the common word "story", and two words of its own */
        snprintf(text, sizeof text, "a story about w%dalpha and w%dbeta", i, i);
        if (i == 17) snprintf(text, sizeof text, "a story about the zorblax quokka of quibbleton harbor");
        index_text(&ix[i], text);
    }
    for (int i = 0; i < 40; i += 8) {
        rp_store_index *p[8];
        for (int k = 0; k < 8; k++) p[k] = &ix[i + k];
        assert_int_equal(put(s, c + i, p, 8), RP_OK);
    }
    /* the query: fresh tokens with 12 of chunk 18's (id 18) in the middle, and text naming its rare words */
    rp_token q[200];
    rp_test_rng r = {777};
    for (int i = 0; i < 200; i++) q[i] = (rp_token)(5000 + rp_test_rng_next(&r) % 5000);
    /* the first 12-token run of chunk 18 that shares no keyword with it */
    int32_t off = -1;
    uint64_t kc[256], kq[256];
    const int32_t nkc = rp_keywords(c[17].t, c[17].n, SALT, kc, 256);
    for (int32_t o = 0; o + 12 <= c[17].n && off < 0; o++) {
        memcpy(q + 90, c[17].t + o, sizeof(rp_token) * 12);
        const int32_t nkq = rp_keywords(q, 200, SALT, kq, 256);
        bool shared = false;
        for (int32_t a = 0; a < nkq && !shared; a++)
            for (int32_t b = 0; b < nkc && !shared; b++) shared = kq[a] == kc[b];
        if (!shared) off = o;
    }
    assert_true(off >= 0);
    rp_term qt[16];
    const char *qtext = "Tell me a story of the quokka in Quibbleton";
    const int32_t nqt = rp_terms_extract(qtext, strlen(qtext), qt, 16);
    rp_subchunk_query sq = rp_subchunk_default_query(8);
    rp_subchunk_cand cand[32];
    int32_t nc = 0;
    assert_int_equal(rp_store_subchunk_candidates(s, q, 200, &sq, cand, 32, &nc), RP_OK);
    for (int32_t i = 0; i < nc; i++) assert_true(cand[i].id != 18);   /* keywords alone: not a candidate */
    rp_subchunk_match m[8];
    int32_t nm = 0;
    assert_int_equal(rp_store_find_subchunks_q(s, q, 200, &sq, m, 8, &nm), RP_OK);
    assert_int_equal(nm, 0);
    sq.terms = qt;
    sq.n_terms = nqt;
    assert_int_equal(rp_store_subchunk_candidates(s, q, 200, &sq, cand, 32, &nc), RP_OK);
    assert_true(nc >= 1);
    assert_true(cand[0].id == 18);
    assert_int_equal(cand[0].kw_votes, 0);
    /* quokka and quibbleton (df 1 of 40 each) plus story (df 40: idf ~0.012) */
    const double want = 2 * rp_store_idf(1, 40) + rp_store_idf(40, 40);
    print_message("  term score of the source: %.4f (expected %.4f), %d candidates\n", cand[0].term_score, want, nc);
    assert_true(fabs(cand[0].term_score - want) < 1e-4);
    for (int32_t i = 1; i < nc; i++) assert_true(cand[i].term_score < 0.05f);   /* "story" alone */
    assert_int_equal(rp_store_find_subchunks_q(s, q, 200, &sq, m, 8, &nm), RP_OK);
    assert_int_equal(nm, 1);
    assert_true(m[0].chunk_id == 18);
    assert_int_equal(m[0].prompt_off, 90);
    assert_int_equal(m[0].chunk_off, off);
    assert_true(m[0].len >= 12);
    rp_store_close(s);
    for (int i = 0; i < 40; i++) free(ix[i].terms);
}

/* ------------------------------------------------------------- vectors */

/* Vectors carry their source: a query compares only vectors of its own; they survive a restart and go with their
 * chunk; the old single-query call sees the caller's (source 0) only. */
static void test_vector_sources(void **state) {
    (void)state;
    const char *d = subdir("vsrc");
    rp_store *s = open_rw(d);
    static tchunk c[4];
    for (int i = 0; i < 4; i++) make(&c[i], (uint64_t)(i + 1), 30, (uint64_t)(50 + i));
    float v[4][3] = {{1, 0, 0}, {0, 1, 0}, {0.8f, 0.6f, 0}, {0, 0, 1}};
    rp_store_index ix[3];
    rp_store_index *p[3];
    for (int i = 0; i < 3; i++) {
        ix[i] = (rp_store_index){.vec = v[i], .dim = 3, .vec_src = 77};
        p[i] = &ix[i];
    }
    assert_int_equal(put(s, c, p, 3), RP_OK);
    assert_int_equal(put(s, c + 3, NULL, 1), RP_OK);
    assert_int_equal(rp_store_put_vector(s, 4, v[3], 3), RP_OK);   /* the caller's, source 0 */
    rp_store_close(s);
    s = open_rw(d);
    float got[8];
    int32_t dim = 0;
    uint64_t src = 0;
    bool found = false;
    assert_int_equal(rp_store_get_vector(s, 3, got, 8, &dim, &src, &found), RP_OK);
    assert_true(found && dim == 3 && src == 77);
    assert_memory_equal(got, v[2], sizeof v[2]);
    const float qv[2][3] = {{0.9f, 0.5f, 0}, {0, 0.1f, 1}};
    uint64_t ids[4];
    float sc[4];
    int32_t nk[2];
    assert_int_equal(rp_store_vector_topk_multi(s, &qv[0][0], 2, 3, 77, 2, ids, sc, nk), RP_OK);
    assert_int_equal(nk[0], 2);
    assert_true(ids[0] == 3 && ids[1] == 1);   /* nearest to (0.9, 0.5, 0): chunk 3, then chunk 1 */
    assert_true(sc[0] > sc[1]);
    assert_int_equal(nk[1], 2);
    assert_true(ids[2] == 2);                  /* (0, 0.1, 1): chunk 4 is another source's */
    int32_t n1 = 0;
    assert_int_equal(rp_store_vector_topk(s, qv[1], 3, 4, ids, sc, &n1), RP_OK);
    assert_int_equal(n1, 1);
    assert_true(ids[0] == 4);
    const uint64_t three = 3;
    assert_int_equal(rp_store_delete(s, &three, 1), RP_OK);
    assert_int_equal(rp_store_get_vector(s, 3, got, 8, &dim, &src, &found), RP_OK);
    assert_false(found);
    assert_int_equal(rp_store_vector_topk_multi(s, &qv[0][0], 1, 3, 77, 4, ids, sc, nk), RP_OK);
    assert_int_equal(nk[0], 2);
    assert_true(ids[0] == 1);
    rp_store_close(s);
}

/* ------------------------------------------------------------ migration */

/* A schema-2 store (no term tables, vectors without a source): a reader uses it as it is, a writer upgrades it in
 * place keeping its chunks and vectors (the caller's), and the upgraded store indexes terms. A newer schema is
 * refused by both, saying why. */
static void test_schema2_migrated(void **state) {
    (void)state;
    const char *d = subdir("v2");
    rp_store *s = open_rw(d);
    static tchunk c[3];
    for (int i = 0; i < 3; i++) make(&c[i], (uint64_t)(i + 1), 30, (uint64_t)(70 + i));
    assert_int_equal(put(s, c, NULL, 2), RP_OK);
    const float v[2] = {0.6f, 0.8f};
    assert_int_equal(rp_store_put_vector(s, 2, v, 2), RP_OK);
    rp_store_close(s);
    /* what a schema-2 database looks like */
    sql(d, "DROP TABLE terms; DROP TABLE term_df; ALTER TABLE vectors DROP COLUMN src; "
           "UPDATE meta SET value = 2 WHERE key = 'schema';");
    rp_store_params rp = rp_store_default_params();
    rp.read_only = true;
    assert_int_equal(rp_store_open(d, &rp, &s), RP_OK);
    assert_int_equal(rp_store_bind_model(s, SALT, RP_TYPE_F16, N_LAYER, ROW, NULL, false), RP_OK);
    rp_store_chunk m;
    bool found = false;
    assert_int_equal(rp_store_get(s, 1, &m, &found), RP_OK);
    assert_true(found);
    rp_store_chunk_clear(&m);
    uint64_t ids[2];
    float sc[2];
    int32_t nv = 0;
    assert_int_equal(rp_store_vector_topk(s, v, 2, 2, ids, sc, &nv), RP_OK);
    assert_int_equal(nv, 1);
    assert_true(ids[0] == 2);
    int64_t df = -1, N = -1;
    assert_int_equal(rp_store_term_df(s, 42, &df, &N), RP_OK);
    assert_true(df == 0 && N == 0);
    rp_term t = {rp_term_hash("story", 5), 1};
    rp_subchunk_query q = rp_subchunk_default_query(8);
    q.terms = &t;
    q.n_terms = 1;
    rp_subchunk_match mt[4];
    int32_t nm = -1;
    assert_int_equal(rp_store_find_subchunks_q(s, c[0].t, 30, &q, mt, 4, &nm), RP_OK);   /* no term tables: keywords */
    assert_int_equal(nm, 1);
    assert_true(mt[0].chunk_id == 1 && mt[0].len == 30);
    rp_store_close(s);
    assert_int_equal(sql_int(d, "SELECT value FROM meta WHERE key = 'schema'"), 2);   /* the reader changed nothing */
    /* the writer migrates */
    s = open_rw(d);
    print_message("  notice: %s\n", rp_store_notice(s));
    assert_non_null(strstr(rp_store_notice(s), "upgraded from schema 2 to 3"));
    assert_non_null(strstr(rp_store_notice(s), "2 chunks were kept"));
    assert_int_equal(rp_store_dropped_unkeyed(s), 0);
    assert_int_equal(rp_store_get(s, 2, &m, &found), RP_OK);
    assert_true(found);
    rp_store_chunk_clear(&m);
    assert_int_equal(rp_store_vector_topk(s, v, 2, 2, ids, sc, &nv), RP_OK);
    assert_int_equal(nv, 1);
    rp_store_index ix;
    index_text(&ix, "the quokka story");
    rp_store_index *p[1] = {&ix};
    assert_int_equal(put(s, c + 2, p, 1), RP_OK);
    int64_t n_docs = 0;
    assert_int_equal(df_of(s, "quokka", &n_docs), 1);
    assert_int_equal(n_docs, 1);   /* the migrated chunks are not term-indexed */
    rp_store_close(s);
    free(ix.terms);
    assert_int_equal(sql_int(d, "SELECT value FROM meta WHERE key = 'schema'"), 3);
    s = open_rw(d);   /* once */
    assert_string_equal(rp_store_notice(s), "");
    rp_store_close(s);
    /* a newer build's store: refused, never read */
    sql(d, "UPDATE meta SET value = 9 WHERE key = 'schema'");
    rp_store_params wp = rp_store_default_params();
    assert_int_equal(rp_store_open(d, &wp, &s), RP_ERR_UNSUPPORTED);
    assert_non_null(strstr(rp_last_error(), "schema version 9"));
    assert_non_null(strstr(rp_last_error(), "newer build"));
    assert_int_equal(rp_store_open(d, &rp, &s), RP_ERR_UNSUPPORTED);
    assert_non_null(strstr(rp_last_error(), "schema version 9"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_terms_extract),
        cmocka_unit_test(test_idf_and_df),
        cmocka_unit_test(test_terms_rank),
        cmocka_unit_test(test_vector_sources),
        cmocka_unit_test(test_schema2_migrated),
    };
    return rp_test_main(tests, NULL, NULL);
}
